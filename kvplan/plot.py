"""``kvplan plot``: KV cache per request against context length, with GPU KV budgets as horizontal lines.

The numbers are exact (:func:`kvplan.calc.estimate` at each sample point, bytes as ints); only the drawing
converts them to GiB (2^30 B). Sample points run from 512 tokens to ``max_seq`` (513 .. 2^30 tokens,
:func:`check_max_seq`) on a log-2 axis, eight per doubling, so sliding-window knees show.

- one solid line per model up to its max context, dotted beyond it;
- with ``topologies``: the first model's MHA and MQA variants (``ModelSpec.with_kv_heads``, as
  :func:`kvplan.calc.compare_topologies`), dashed;
- one horizontal line per GPU: the KV budget of :func:`kvplan.fit.plan_fit` for the first model with the
  vLLM convention at TP = 1 (weights, activation and overhead taken off); a GPU whose budget is 0 is left
  out with a note.

matplotlib is imported inside :func:`render` (Agg backend, no display); without it
:class:`kvplan.errors.MissingExtra` says ``pip install 'kvplan[plot]'``. The file is written atomically
(a temporary file in the same folder, then ``os.replace``) and an existing file is never overwritten
without ``force``.
"""

from __future__ import annotations

import os
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

from kvplan.calc import estimate, resolve_kv_dtype
from kvplan.errors import MissingExtra, UsageError
from kvplan.gpus import GPU
from kvplan.specs import ModelSpec
from kvplan.units import GIB

FORMATS = {".png": "png", ".svg": "svg"}
START_TOKENS = 512
POINTS_PER_DOUBLING = 8
# Longest --max-seq drawn: 2^30 tokens (1,073,741,824), 21 doublings past the 512-token start. Beyond it
# the figure says nothing new and matplotlib's axis code fails on huge ints.
MAX_SEQ_LIMIT = 1 << 30


@dataclass(frozen=True)
class Curve:
    """Bytes per request of one model (or topology variant) at each sample point.

    Attributes:
        label: legend text.
        bytes: KV bytes of one request at each point of :attr:`PlotData.points` (ints, exact).
        max_context: tokens beyond which the line is dotted (the model's max_model_len), or None.
        variant: True for an MHA/MQA variant (dashed).
    """

    label: str
    bytes: tuple[int, ...]
    max_context: int | None
    variant: bool = False


@dataclass(frozen=True)
class BudgetLine:
    """One GPU's KV budget (vLLM convention, TP = 1, for the first model), in bytes."""

    gpu: str
    gpu_name: str
    budget_bytes: int
    model: str


@dataclass(frozen=True)
class PlotData:
    """Everything the figure shows, before drawing: exact ints.

    Attributes:
        points: context lengths sampled, tokens, increasing.
        curves: one per model, then the topology variants.
        budgets: GPU KV budget lines.
        kv_dtype: the KV dtype asked for (``auto``: each model's own).
        notes: what was left out and why (one line each).
    """

    points: tuple[int, ...]
    curves: tuple[Curve, ...]
    budgets: tuple[BudgetLine, ...]
    kv_dtype: str
    notes: tuple[str, ...]


def sample_points(max_seq: int, start: int = START_TOKENS, per_doubling: int = POINTS_PER_DOUBLING) -> list[int]:
    """Context lengths from ``min(start, max_seq)`` to ``max_seq``, ``per_doubling`` per doubling (rounded),
    every power of two included, both ends included."""
    lo = min(start, max_seq)
    pts = {lo, max_seq}
    k = 0
    while True:
        s = round(lo * 2 ** (k / per_doubling))
        if s >= max_seq:
            break
        pts.add(s)
        k += 1
    return sorted(pts)


def check_max_seq(max_seq: int) -> None:
    """Refuse a ``max_seq`` the axis cannot show: it must exceed :data:`START_TOKENS` (the axis starts
    there; an axis of one point has no width) and be at most :data:`MAX_SEQ_LIMIT`.

    Raises:
        UsageError: naming --max-seq and the range allowed.
    """
    if isinstance(max_seq, bool) or not isinstance(max_seq, int) or not START_TOKENS < max_seq <= MAX_SEQ_LIMIT:
        shown = f"{max_seq:,}" if isinstance(max_seq, int) and not isinstance(max_seq, bool) else repr(max_seq)
        raise UsageError(
            f"--max-seq: {shown} tokens is out of range; the axis starts at {START_TOKENS} tokens, so give "
            f"{START_TOKENS + 1:,} to {MAX_SEQ_LIMIT:,} (1024m)"
        )


def plot_data(
    specs: Sequence[ModelSpec],
    gpus: Sequence[GPU] = (),
    max_seq: int = 131072,
    kv_dtype: str = "auto",
    topologies: bool = False,
) -> PlotData:
    """Compute the curves and budget lines (exact bytes); no drawing.

    Raises:
        UsageError: no model, ``max_seq`` not in :data:`START_TOKENS` + 1 .. :data:`MAX_SEQ_LIMIT`, or an
            unknown KV dtype.
    """
    from kvplan.fit import Engine, FitOptions, plan_fit

    if not specs:
        raise UsageError("MODEL: give at least one model")
    check_max_seq(max_seq)
    points = sample_points(max_seq)
    notes: list[str] = []
    curves = []
    for spec in specs:
        dtype = resolve_kv_dtype(spec, kv_dtype).name
        b = tuple(estimate(spec, s, kv_dtype=kv_dtype).bytes_per_request for s in points)
        curves.append(Curve(f"{spec.name} ({spec.topology}, KV {dtype})", b, spec.max_model_len))
    first = specs[0]
    if topologies:
        own = curves[0].bytes
        for label, h in (("MHA", first.num_q_heads), ("MQA", 1)):
            if h == first.num_kv_heads and set(first.kv_head_counts) <= {h}:  # every attention layer already h
                continue
            variant = first.with_kv_heads(h)
            b = tuple(estimate(variant, s, kv_dtype=kv_dtype).bytes_per_request for s in points)
            if b == own:
                notes.append(
                    f"--topologies: {first.name} as {label} caches the same bytes ({first.topology} layers "
                    "do not depend on KV heads); not drawn"
                )
                continue
            curves.append(Curve(f"{first.name} as {label} ({h} KV heads)", b, first.max_model_len, variant=True))
    budgets = []
    for g in gpus:
        gid = g.name if g.is_custom else g.id
        try:
            r = plan_fit(first, g, FitOptions(engine=Engine.vllm, kv_dtype=kv_dtype))
        except UsageError as e:
            notes.append(f"--gpu {gid}: no KV budget line ({e})")
            continue
        if r.kv_budget_bytes <= 0:
            notes.append(
                f"--gpu {gid}: no KV budget line: {first.name}'s weights, activation and overhead leave no KV "
                "memory (vLLM, TP=1)"
            )
            continue
        budgets.append(BudgetLine(gid, g.name, r.kv_budget_bytes, first.name))
    return PlotData(tuple(points), tuple(curves), tuple(budgets), kv_dtype, tuple(notes))


def check_out(out: str | os.PathLike, force: bool) -> Path:
    """Validate the output path: a .png or .svg in an existing folder, not an existing file unless ``force``.

    Raises:
        UsageError: another extension, a missing folder, or an existing file without ``force``.
    """
    p = Path(out)
    if p.suffix.lower() not in FORMATS:
        raise UsageError(f"--out: {str(p)!r} must end in .png or .svg")
    parent = p.parent if str(p.parent) else Path(".")
    if not parent.is_dir():
        raise UsageError(f"--out: folder {str(parent)!r} does not exist")
    if p.is_dir():
        raise UsageError(f"--out: {str(p)!r} is a folder")
    if p.exists() and not force:
        raise UsageError(f"--out: {str(p)!r} exists; add --force to overwrite it")
    return p


def _matplotlib():
    """Import matplotlib with the Agg backend (no display).

    Raises:
        MissingExtra: matplotlib is not installed.
    """
    try:
        import matplotlib
    except ImportError:
        from kvplan.install import extra_hint

        raise MissingExtra(f"kvplan plot needs matplotlib: {extra_hint('plot')}") from None
    matplotlib.use("Agg")
    from matplotlib.figure import Figure

    return Figure


def _tokens_label(n: int) -> str:
    """512, 1k, 128k, 1M (k = 1024, M = 1024²)."""
    if n >= 1 << 20 and n % (1 << 20) == 0:
        return f"{n >> 20}M"
    if n >= 1024 and n % 1024 == 0:
        return f"{n >> 10}k"
    return f"{n:,}"


def render(data: PlotData, out: Path) -> Path:
    """Draw ``data`` and write it to ``out`` atomically (the format from the extension). Returns ``out``.

    Raises:
        MissingExtra: no matplotlib.
    """
    Figure = _matplotlib()
    from matplotlib.lines import Line2D

    fig = Figure(figsize=(11, 6.5), layout="constrained")
    ax = fig.add_subplot()
    xs = data.points
    dotted_any = False
    for i, c in enumerate(data.curves):
        ys = [b / GIB for b in c.bytes]
        color = "C0" if c.variant else f"C{i % 10}"  # variants are the first model's, in its colour
        style = "--" if c.variant else "-"
        within = [j for j, s in enumerate(xs) if c.max_context is None or s <= c.max_context]
        beyond = [j for j, s in enumerate(xs) if c.max_context is not None and s >= c.max_context]
        if within:
            ax.plot(
                [xs[j] for j in within],
                [ys[j] for j in within],
                style,
                color=color,
                lw=2.2 if not c.variant else 1.6,
                label=c.label,
                marker="o" if len(within) == 1 else None,
            )
        if len(beyond) > 1 or (beyond and not within):
            dotted_any = True
            ax.plot(
                [xs[j] for j in beyond],
                [ys[j] for j in beyond],
                ":",
                color=color,
                lw=1.6,
                alpha=0.8,
                label=None if within else c.label,
            )
    gpu_styles = ["-.", (0, (4, 1.5)), (0, (6, 2, 1, 2, 1, 2)), (0, (2, 1))]
    for k, b in enumerate(data.budgets):
        y = b.budget_bytes / GIB
        shade = ("0.1", "0.45")[k % 2]
        ax.axhline(
            y,
            color=shade,
            lw=1.4,
            ls=gpu_styles[k % len(gpu_styles)],
            label=f"{b.gpu_name}: KV budget {y:,.1f} GiB ({b.model}, vLLM, TP=1)",
        )
        ax.annotate(
            f"{b.gpu}: {y:,.1f} GiB",
            xy=(0.005, y),
            xycoords=("axes fraction", "data"),
            ha="left",
            xytext=(0, 3),
            textcoords="offset points",
            fontsize=8.5,
            color=shade,
        )
    ax.set_xscale("log", base=2)
    ax.set_yscale("log", base=2)
    ticks = [1 << k for k in range(40) if xs[0] <= (1 << k) <= xs[-1]] or [xs[0]]
    ax.set_xticks(ticks, [_tokens_label(t) for t in ticks])
    ax.minorticks_off()
    ax.set_xlim(xs[0], xs[-1])
    ymin, ymax = ax.get_ylim()
    yticks = [2.0**k for k in range(-12, 16) if ymin <= 2.0**k <= ymax]
    ax.set_yticks(yticks, [f"{t:g}" for t in yticks])
    ax.grid(True, which="major", color="0.9", lw=0.8)
    ax.set_xlabel("context length per request (tokens, log₂ scale; 1k = 1,024)")
    ax.set_ylabel("KV cache per request (GiB = 2³⁰ B, log₂ scale)")
    dtype = "each model's dtype" if data.kv_dtype.lower() == "auto" else data.kv_dtype
    ax.set_title(f"KV cache per request vs context length (KV dtype: {dtype}; exact bytes from kvplan)")
    handles, labels = ax.get_legend_handles_labels()
    if dotted_any:
        handles.append(Line2D([], [], ls=":", color="0.4"))
        labels.append("dotted: beyond the model's max context")
    ax.legend(handles, labels, loc="lower right", fontsize=8.5, framealpha=0.92)
    return _write_atomic(fig, out)


def _write_atomic(fig, out: Path) -> Path:
    """Save ``fig`` to a temporary file next to ``out``, then ``os.replace`` it into place."""
    fd, tmp = tempfile.mkstemp(prefix=f".{out.name}.", suffix=".tmp", dir=out.parent if str(out.parent) else ".")
    os.close(fd)
    try:
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)  # mkstemp makes 0600; give the file the usual permissions
        fig.savefig(tmp, format=FORMATS[out.suffix.lower()], dpi=150)
        os.replace(tmp, out)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    return out


def plot_kv_vs_context(
    specs: Sequence[ModelSpec],
    gpus: Sequence[GPU] = (),
    max_seq: int = 131072,
    kv_dtype: str = "auto",
    topologies: bool = False,
    out: str | os.PathLike = "kvplan-plot.png",
    force: bool = False,
) -> tuple[Path, PlotData]:
    """Compute and draw the plot; return (the file written, the data drawn).

    Raises:
        UsageError: bad ``out`` (checked first, before any work), bad arguments.
        MissingExtra: no matplotlib.
    """
    path = check_out(out, force)
    data = plot_data(specs, gpus, max_seq, kv_dtype, topologies)
    return render(data, path), data
