"""``kvplan plot``: KV cache per request against context length, with each model's KV budget per GPU.

The numbers are exact (:func:`kvplan.calc.estimate` at each sample point, bytes as ints, per GPU at the
given TP); only the drawing converts them to GiB (2^30 B). Sample points run from 512 tokens to
``max_seq`` (513 .. 2^30 tokens, :func:`check_max_seq`) on a log-2 axis, eight per doubling, so
sliding-window knees show.

A KV budget belongs to a (model, GPU, TP, engine, weights dtype, KV dtype): it is what
:func:`kvplan.fit.plan_fit` leaves for the KV cache after that model's weights, activation and overhead.
So with GPUs the figure has one panel per model (shared axes), each with:

- the model's line up to its max context, dotted beyond it;
- with ``topologies``, in the first model's panel: its MHA and MQA variants (``ModelSpec.with_kv_heads``,
  as :func:`kvplan.calc.compare_topologies`), dashed;
- one horizontal line per GPU at that model's KV budget on it (:class:`BudgetLine`, equal to
  ``kvplan fit``'s ``kv_budget_bytes`` with the same flags); a GPU the model does not fit at all (budget
  <= 0: the weights alone, or with activation and overhead, fill it) gets no line but a red "does not
  fit" line in the panel, and a note on stderr;
- against those lines, what the engine counts for one request (:attr:`BudgetLine.request_bytes`:
  ``kvplan fit``'s ``kv_bytes_per_request`` with ``--max-model-len`` at each sample point, from the same
  engine rules, :mod:`kvplan.engines`): whole blocks, and windowed layers holding what the engine reserves
  (vLLM: window − 1 + in-flight tokens per sliding layer), so a line crosses its budget where ``kvplan fit``
  starts refusing. The exact cache (:func:`kvplan.calc.estimate`, the ``kvplan estimate`` bytes) stays as a
  thin line labelled so; a sample point ``kvplan fit`` refuses although the engine's bytes lie under the
  budget (a second pool short: SGLang's hybrid-SWA pools; llama.cpp's slot cap) is marked with a cross.

Without GPUs, one panel holds every model. matplotlib is imported inside :func:`render` (Agg backend, no
display); without it :class:`kvplan.errors.MissingExtra` says ``pip install 'kvplan[plot]'``. The file is
written atomically (a temporary file in the same folder, then ``os.link``, or ``os.replace`` with ``force``)
and an existing file (or a dangling symlink) is never overwritten without ``force``.
"""

from __future__ import annotations

import math
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
WEIGHTS_UNKNOWN = "weights unknown (no param_count)"  # a model's panel without budgets says so


@dataclass(frozen=True)
class Curve:
    """Bytes per request of one model (or topology variant) at each sample point.

    Attributes:
        label: legend text.
        bytes: KV bytes of one request at each point of :attr:`PlotData.points` (ints, exact; per GPU at
            :attr:`tensor_parallel_size`).
        max_context: tokens beyond which the line is dotted (the model's max_model_len), or None.
        variant: True for an MHA/MQA variant (dashed).
        model: the model's name (a variant's: the model it varies).
        tensor_parallel_size: the TP the bytes are per GPU at (the model's panel's, :meth:`PlotData.tp_of`).
    """

    label: str
    bytes: tuple[int, ...]
    max_context: int | None
    variant: bool = False
    model: str = ""
    tensor_parallel_size: int = 1


@dataclass(frozen=True)
class BudgetLine:
    """One model's KV budget on one GPU, as :func:`kvplan.fit.plan_fit` computes it (bytes, per GPU).

    Attributes:
        model: the model's name; gpu, gpu_name: catalog id (or a custom size's name) and name.
        budget_bytes: KV budget per GPU; <= 0 when the model does not fit the GPU at all.
        engine, tensor_parallel_size, weights_dtype: the settings the budget was computed with.
        usable_bytes, weights_bytes: the fit's usable memory and weights per GPU (for the does-not-fit note).
        request_bytes: what the engine counts for one request at each point of :attr:`PlotData.points`
            (``kvplan fit --max-model-len`` that point: ``FitResult.kv_bytes_per_request``, bytes per GPU);
            empty when the model does not fit the GPU.
        request_fits: whether ``kvplan fit`` at that point fits (at least one request), point by point.
    """

    model: str
    gpu: str
    gpu_name: str
    budget_bytes: int
    engine: str
    tensor_parallel_size: int
    weights_dtype: str
    usable_bytes: int
    weights_bytes: int
    request_bytes: tuple[int, ...] = ()
    request_fits: tuple[bool, ...] = ()

    @property
    def fits(self) -> bool:
        """True when the model leaves KV memory on this GPU (a line is drawn)."""
        return self.budget_bytes > 0

    def refused_under_budget(self) -> tuple[int, ...]:
        """Indices of the sample points ``kvplan fit`` refuses although :attr:`request_bytes` lie within the
        budget (another pool short, or an engine rule that is not bytes): crossed in the figure."""
        return tuple(
            j for j, (b, ok) in enumerate(zip(self.request_bytes, self.request_fits, strict=True))
            if not ok and b <= self.budget_bytes
        )  # fmt: skip


@dataclass(frozen=True)
class PlotData:
    """Everything the figure shows, before drawing: exact ints.

    Attributes:
        points: context lengths sampled, tokens, increasing.
        curves: one per model, then the topology variants (of the first model).
        budgets: one per (model, GPU), models in order, then GPUs in order; those that do not fit included.
        kv_dtype: the KV dtype asked for (``auto``: each model's own).
        notes: what was left out or does not fit, and why (one line each).
        tensor_parallel_size: TP of the budgets as asked; the curves are bytes per GPU at this TP. None: not
            asked, each model's panel at the smallest TP that leaves it KV memory on every GPU
            (:attr:`model_tp`).
        engine: the engine convention of the budgets.
        weights_dtype: the weights dtype asked for (None: each model's own).
        no_budget: (model, GPU id, reason) for each (model, GPU) whose budget could not be computed at all
            (weights unknown: no param_count); marked in the model's panel.
        model_tp: (model, TP) of each model: its curve's and budgets' TP (the asked one, or the one chosen).
    """

    points: tuple[int, ...]
    curves: tuple[Curve, ...]
    budgets: tuple[BudgetLine, ...]
    kv_dtype: str
    notes: tuple[str, ...]
    tensor_parallel_size: int | None = 1
    engine: str = "vllm"
    weights_dtype: str | None = None
    no_budget: tuple[tuple[str, str, str], ...] = ()
    model_tp: tuple[tuple[str, int], ...] = ()

    def tp_of(self, model: str) -> int:
        """The TP of a model's curve and budgets (the asked TP, or the one chosen for it; 1 when unknown)."""
        return dict(self.model_tp).get(model, self.tensor_parallel_size or 1)

    def budgets_of(self, model: str) -> tuple[BudgetLine, ...]:
        """The budget lines of one model (by name)."""
        return tuple(b for b in self.budgets if b.model == model)

    def no_budget_of(self, model: str) -> tuple[tuple[str, str], ...]:
        """(GPU id, reason) of each GPU without a budget for one model (by name)."""
        return tuple((g, why) for m, g, why in self.no_budget if m == model)


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
    *,
    tensor_parallel_size: int | None = 1,
    engine: str = "vllm",
    weights_dtype: str | None = None,
) -> PlotData:
    """Compute the curves and every model's budget on every GPU (exact bytes); no drawing.

    Args:
        specs: the models, in order (the first one's topology variants with ``topologies``).
        gpus: GPUs whose KV budget is drawn, for each model.
        max_seq: last context length of the axis (tokens).
        kv_dtype: KV dtype name (``auto``: each model's own).
        topologies: also the first model as MHA and MQA.
        tensor_parallel_size: TP of the budgets; the curves are bytes per GPU at this TP. None (``kvplan plot``
            without ``--tp``): per model, the smallest TP its heads allow (:func:`kvplan.calc.valid_tp_sizes`)
            at which it leaves KV memory on every GPU given (else on any of them; else TP 1): a 70B model is
            drawn at the TP it needs, not as "does not fit" at TP 1. Without GPUs, TP 1.
        engine: engine convention (:func:`kvplan.fit.get_engine`: vllm, sglang, trtllm, llamacpp).
        weights_dtype: weights dtype for the budgets (None: each model's own).

    Raises:
        UsageError: no model, ``max_seq`` not in :data:`START_TOKENS` + 1 .. :data:`MAX_SEQ_LIMIT`, an
            unknown KV dtype, weights dtype or engine, or a TP a model's heads do not allow.
    """
    from dataclasses import replace

    from kvplan.api import fit_options
    from kvplan.calc import check_tp, valid_tp_sizes
    from kvplan.fit import get_engine, plan_fit

    if not specs:
        raise UsageError("MODEL: give at least one model")
    check_max_seq(max_seq)
    eng = get_engine(engine)
    auto = tensor_parallel_size is None
    if not auto:
        for spec in specs:
            check_tp(spec, tensor_parallel_size)
    points = sample_points(max_seq)
    notes: list[str] = []
    curves = []

    def has_budget(spec: ModelSpec, g: GPU, t: int) -> bool:
        try:
            opts = fit_options(engine=eng, tp=t, kv_dtype=kv_dtype, weights_dtype=weights_dtype)
            return plan_fit(spec, g, opts).kv_budget_bytes > 0
        except UsageError:  # weights unknown, or the engine refuses this TP
            return False

    def panel_tp(spec: ModelSpec) -> int:
        """The TP of a model's panel: as asked; else the smallest with KV memory on every GPU (or on any)."""
        if not auto:
            return tensor_parallel_size
        if not gpus:
            return 1
        some = None
        for t in valid_tp_sizes(spec):
            fits = [has_budget(spec, g, t) for g in gpus]
            if all(fits):
                return t
            if some is None and any(fits):
                some = t
        return some or 1

    model_tp = {spec.name: panel_tp(spec) for spec in specs}

    def per_gpu(spec: ModelSpec, tp: int) -> tuple[int, ...]:
        return tuple(estimate(spec, s, kv_dtype=kv_dtype, tensor_parallel_size=tp).bytes_per_request for s in points)

    for spec in specs:
        dtype = resolve_kv_dtype(spec, kv_dtype).name
        label = f"{spec.name} ({spec.topology}, KV {dtype})"
        tp = model_tp[spec.name]
        curves.append(Curve(label, per_gpu(spec, tp), spec.max_model_len, model=spec.name, tensor_parallel_size=tp))
    first = specs[0]
    if topologies:
        own = curves[0].bytes
        tp = model_tp[first.name]
        for label, h in (("MHA", first.num_q_heads), ("MQA", 1)):
            if h == first.num_kv_heads and set(first.kv_head_counts) <= {h}:  # every attention layer already h
                continue
            variant = first.with_kv_heads(h)
            b = per_gpu(variant, tp)
            if b == own:
                notes.append(
                    f"--topologies: {first.name} as {label} caches the same bytes ({first.topology} layers "
                    "do not depend on KV heads); not drawn"
                )
                continue
            label = f"{first.name} as {label} ({h} KV heads)"
            curves.append(Curve(label, b, first.max_model_len, variant=True, model=first.name, tensor_parallel_size=tp))
    budgets = []
    no_budget = []
    for spec in specs:
        tp = model_tp[spec.name]
        where = f"{eng.value}, TP={tp}" + (f", {weights_dtype} weights" if weights_dtype else "")
        for g in gpus:
            gid = g.name if g.is_custom else g.id
            opts = fit_options(engine=eng, tp=tp, kv_dtype=kv_dtype, weights_dtype=weights_dtype)
            try:
                r = plan_fit(spec, g, opts)
            except UsageError as e:
                if spec.param_count is None and (spec.weights_bytes is None or weights_dtype is not None):
                    why = WEIGHTS_UNKNOWN
                    notes.append(
                        f"--gpu {gid}: no KV budget for {spec.name}: {why} (add param_count to a spec YAML, or "
                        "plan it with 'kvplan fit --weights-gib'); marked in its panel"
                    )
                else:
                    why = str(e)
                    notes.append(f"--gpu {gid}: no KV budget for {spec.name} ({e}); marked in its panel")
                no_budget.append((spec.name, gid, why))
                continue
            request_bytes, request_fits = (), ()
            if r.kv_budget_bytes > 0:  # what fit counts for one request of each length, by the same rules
                at = [plan_fit(spec, g, replace(opts, max_model_len=s)) for s in points]
                request_bytes = tuple(f.kv_bytes_per_request for f in at)
                request_fits = tuple(f.fits for f in at)
            line = BudgetLine(
                spec.name, gid, g.name, r.kv_budget_bytes, r.engine, tp, r.weights_dtype, r.usable_bytes,
                r.weights_bytes, request_bytes, request_fits,
            )  # fmt: skip
            budgets.append(line)
            if not line.fits:
                notes.append(
                    f"--gpu {gid}: {spec.name} does not fit: its weights, activation and overhead leave no KV "
                    f"memory ({where}); marked in its panel"
                )
    return PlotData(
        tuple(points), tuple(curves), tuple(budgets), kv_dtype, tuple(notes), tensor_parallel_size, eng.value,
        weights_dtype, tuple(no_budget), tuple(model_tp.items()),
    )  # fmt: skip


def check_out(out: str | os.PathLike, force: bool) -> Path:
    """Validate the output path: a .png or .svg in an existing folder, not an existing file unless ``force``.

    Raises:
        UsageError: another extension, a missing folder, or an existing file without ``force``.
    """
    p = Path(out)
    if p.suffix.lower() not in FORMATS:
        raise UsageError(f"--out: {str(p)!r} must end in .png or .svg")
    parent = p.parent if str(p.parent) else Path(".")
    try:
        if not parent.is_dir():
            raise UsageError(f"--out: folder {str(parent)!r} does not exist")
        if p.is_dir():
            raise UsageError(f"--out: {str(p)!r} is a folder")
        if os.path.lexists(p) and not force:  # a dangling symlink counts: writing would follow it
            raise UsageError(f"--out: {str(p)!r} exists; add --force to overwrite it")
        if not os.access(parent, os.W_OK):
            raise UsageError(f"--out: folder {str(parent)!r} is not writable")
        limit = os.pathconf(parent, "PC_NAME_MAX") if hasattr(os, "pathconf") else 255
    except OSError as e:  # a name too long for the OS, a /proc or /sys path ...
        raise UsageError(f"--out: {str(p)[:200]!r} cannot be used: {e.strerror or e}") from None
    if len(os.fsencode(p.name)) > limit:
        raise UsageError(f"--out: the file name is {len(os.fsencode(p.name)):,} bytes; at most {limit} allowed here")
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


GPU_STYLES = ["-.", (0, (4, 1.5)), (0, (6, 2, 1, 2, 1, 2)), (0, (2, 1))]
GPU_SHADES = ("0.1", "0.45")
NO_FIT_COLOR = "#c00000"


def _panels(data: PlotData) -> list[tuple[str | None, list[Curve]]]:
    """(model or None, curves) per panel: one per model when there are budgets (or GPUs without one), else
    one for all."""
    if not data.budgets and not data.no_budget:
        return [(None, list(data.curves))]
    return [(c.model, [x for x in data.curves if x.model == c.model]) for c in data.curves if not c.variant]


def _draw_line(ax, xs, byts, max_context, style, color, lw, label, **kw) -> bool:
    """One line: ``style`` within ``max_context`` (tokens; None: everywhere), dotted beyond. True when part of it
    is dotted."""
    ys = [b / GIB for b in byts]
    within = [j for j, s in enumerate(xs) if max_context is None or s <= max_context]
    beyond = [j for j, s in enumerate(xs) if max_context is not None and s >= max_context]
    if within:
        ax.plot(
            [xs[j] for j in within],
            [ys[j] for j in within],
            ls=style,
            color=color,
            lw=lw,
            label=label,
            marker="o" if len(within) == 1 else kw.pop("marker", None),
            **kw,
        )
    if len(beyond) > 1 or (beyond and not within):
        ax.plot(
            [xs[j] for j in beyond],
            [ys[j] for j in beyond],
            ":",
            color=color,
            lw=min(lw, 1.6),
            alpha=0.8,
            label=None if within else label,
        )
        return True
    return False


EXACT_STYLE = (0, (3, 1.5))  # the exact cache, where the engine's count is drawn beside it
REQUEST_MARKERS = (None, "^", "s", "D")  # one per distinct engine count in a panel (GPUs whose defaults differ)


def _draw_curves(ax, xs, curves: list[Curve], colors: dict[str, str], thin: bool = False) -> bool:
    """Each curve solid within its model's max context, dotted beyond; variants dashed. With ``thin`` (the
    engine's count per request is drawn in the panel), a model's own curve is a thin dashed line labelled as the
    exact cache. True when a line is dotted."""
    dotted_any = False
    for c in curves:
        color = colors[c.model]  # variants in their model's colour
        if c.variant:
            style, lw, label = "--", 1.6, c.label
        elif thin:
            style, lw, label = EXACT_STYLE, 1.1, f"{c.label}: exact cache (kvplan estimate)"
        else:
            style, lw, label = "-", 2.2, c.label
        dotted_any |= _draw_line(ax, xs, c.bytes, c.max_context, style, color, lw, label)
    return dotted_any


def _draw_requests(ax, xs, budgets: tuple[BudgetLine, ...], color: str, max_context: int | None) -> bool:
    """What the engine counts for one request, one solid line per distinct count (GPUs with the same engine
    defaults share one), named with its GPUs; a red cross at each point ``kvplan fit`` refuses although the
    count lies under that GPU's budget. True when a line is dotted (beyond the model's max context)."""
    groups: dict[tuple[int, ...], list[BudgetLine]] = {}
    for b in budgets:
        if b.fits and b.request_bytes:
            groups.setdefault(b.request_bytes, []).append(b)
    dotted = False
    for k, (byts, lines) in enumerate(groups.items()):
        label = f"per request as {lines[0].engine} counts it (kvplan fit)"
        if len(groups) > 1:  # GPUs whose engine defaults differ: say which line is whose (else each GPU is named once,
            label += ": " + ", ".join(b.gpu for b in lines)  # on its budget line)
        marker = REQUEST_MARKERS[k % len(REQUEST_MARKERS)]
        extra = {"marker": marker, "markevery": 8, "ms": 4} if marker else {}
        dotted |= _draw_line(ax, xs, byts, max_context, "-", color, 2.2, label, **extra)
    crossed = False
    for b in budgets:
        refused = b.refused_under_budget()
        if refused:
            ax.plot(
                [xs[j] for j in refused],
                [b.request_bytes[j] / GIB for j in refused],
                "x",
                color=NO_FIT_COLOR,
                ms=5,
                label=None if crossed else "× kvplan fit refuses (another engine limit than these bytes)",
            )
            crossed = True
    return dotted


def gib_tick(gib: float) -> str:
    """A y tick of the KV axis: GiB from 1 up (``16``), MiB below (``512 MiB``, ``8 MiB``), never a long
    decimal (``0.0078125``)."""
    return f"{gib:g}" if gib >= 1 else f"{gib * 1024:g} MiB"


def _draw_budgets(
    ax, budgets: tuple[BudgetLine, ...], gpu_order: list[str], no_budget: tuple[tuple[str, str], ...] = ()
) -> None:
    """One horizontal line per GPU the model fits, labelled with the GPU and its budget; a red "does not fit"
    line of text per GPU it does not, and a red "no KV budget" line per GPU whose budget is unknown (weights
    unknown). Each GPU is named once: the legend holds the curves only."""
    no_fit = []
    for gid, why in no_budget:
        no_fit.append(f"{gid}: no KV budget: {why}")
    for b in budgets:
        k = gpu_order.index(b.gpu)
        if not b.fits:
            no_fit.append(
                f"{b.gpu}: does not fit: weights {b.weights_bytes / GIB:,.1f} GiB/GPU, "
                f"usable {b.usable_bytes / GIB:,.1f} GiB"
            )
            continue
        y = b.budget_bytes / GIB
        shade = GPU_SHADES[k % 2]
        # each GPU is named once in a panel: on its line (or in the red box), not in the legend as well
        ax.axhline(y, color=shade, lw=1.4, ls=GPU_STYLES[k % len(GPU_STYLES)])
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
    if no_fit:
        ax.text(
            0.015,
            0.97,
            "\n".join(no_fit),
            transform=ax.transAxes,
            ha="left",
            va="top",
            fontsize=9,
            fontweight="bold",
            color=NO_FIT_COLOR,
            bbox={"boxstyle": "round,pad=0.3", "facecolor": "white", "edgecolor": NO_FIT_COLOR, "alpha": 0.92},
        )


def render(data: PlotData, out: Path, force: bool = True) -> Path:
    """Draw ``data`` (:func:`figure`) and write it to ``out`` atomically (the format from the extension).
    Returns ``out``.

    Raises:
        MissingExtra: no matplotlib.
    """
    return _write_atomic(figure(data), out, force)


def figure(data: PlotData):
    """The matplotlib Figure of ``data``: one panel per model when it has budgets (shared axes), else one.

    Raises:
        MissingExtra: no matplotlib.
    """
    Figure = _matplotlib()
    from matplotlib.lines import Line2D

    panels = _panels(data)
    n = len(panels)
    ncols = 1 if n == 1 else 2 if n <= 4 else 3
    nrows = -(-n // ncols)
    size = (11, 6.5) if n == 1 else (7.2 * ncols, 4.9 * nrows + 0.6)
    fig = Figure(figsize=size, layout="constrained")
    axes = fig.subplots(nrows, ncols, sharex=True, sharey=True, squeeze=False).ravel()
    for ax in axes[n:]:
        ax.set_visible(False)
    xs = data.points
    colors = {c.model: f"C{i % 10}" for i, c in enumerate(c for c in data.curves if not c.variant)}
    gpu_order = list(dict.fromkeys(b.gpu for b in data.budgets))
    for ax, (model, curves) in zip(axes, panels, strict=False):  # axes: a whole grid, maybe more
        counted = model is not None and any(b.request_bytes for b in data.budgets_of(model))
        dotted_any = _draw_curves(ax, xs, curves, colors, thin=counted)
        if counted:
            own = curves[0]
            dotted_any |= _draw_requests(ax, xs, data.budgets_of(model), colors[model], own.max_context)
        if model is not None:
            _draw_budgets(ax, data.budgets_of(model), gpu_order, data.no_budget_of(model))
            b0 = data.budgets_of(model)
            weights = b0[0].weights_dtype if b0 else (data.weights_dtype or "model dtype")
            if not b0 and data.no_budget_of(model):
                unknown = all(why == WEIGHTS_UNKNOWN for _, why in data.no_budget_of(model))
                title = f"{model}: no KV budget" + (f": {WEIGHTS_UNKNOWN}" if unknown else "")
                ax.set_title(title, loc="left", fontsize=10.5)
            else:
                tp = data.tp_of(model)
                title = f"{model}: KV budget per GPU with {weights} weights"
                if data.tensor_parallel_size is None and tp > 1:  # chosen, not asked: say so
                    each = "each GPU" if all(b.fits for b in b0) else "one of the GPUs"
                    title = (
                        f"{model} at TP={tp}: KV budget per GPU with {weights} weights\n"
                        f"TP={tp}: the smallest TP with KV memory on {each} (no --tp given)"
                    )
                ax.set_title(title, loc="left", fontsize=10.5)
        handles, labels = ax.get_legend_handles_labels()
        if dotted_any:
            handles.append(Line2D([], [], ls=":", color="0.4"))
            labels.append("dotted: beyond the model's max context")
        ax.legend(handles, labels, loc="best", fontsize=8.5, framealpha=0.92)
    ax0 = axes[0]
    ax0.set_xscale("log", base=2)
    ax0.set_yscale("log", base=2)
    ticks = [1 << k for k in range(40) if xs[0] <= (1 << k) <= xs[-1]] or [xs[0]]
    ax0.set_xticks(ticks, [_tokens_label(t) for t in ticks])
    ax0.set_xlim(xs[0], xs[-1])
    ymin, ymax = ax0.get_ylim()
    no_fit_lines = max(
        (sum(not b.fits for b in data.budgets_of(m)) + len(data.no_budget_of(m)) for m, _ in panels if m is not None),
        default=0,
    )
    if no_fit_lines:  # headroom above every line for the red "does not fit" box at the top of a panel
        f = min(0.5, 0.05 + 0.045 * no_fit_lines)  # fraction of the panel's height the box takes
        lo, hi = math.log2(ymin), math.log2(ymax)
        ymax = 2 ** ((hi - f * lo) / (1 - f))
        ax0.set_ylim(ymin, ymax)
    yticks = [2.0**k for k in range(-12, 16) if ymin <= 2.0**k <= ymax]
    ax0.set_yticks(yticks, [gib_tick(t) for t in yticks])
    for ax in axes[:n]:
        ax.minorticks_off()
        ax.grid(True, which="major", color="0.9", lw=0.8)
        ax.tick_params(labelbottom=True, labelleft=True)
    tps = sorted({data.tp_of(c.model) for c in data.curves})
    tp = tps[0] if len(tps) == 1 else None  # one TP for every panel, else each panel's own
    per = f", per GPU at TP={tp}" if tp is not None and tp > 1 else " per GPU" if tp is None else ""
    xlabel = "context length per request (tokens, log₂ scale; 1k = 1,024)"
    ylabel = f"KV cache per request{per} (GiB = 2³⁰ B, log₂ scale)"  # ticks below 1 GiB say MiB
    if n == 1:
        ax0.set_xlabel(xlabel)
        ax0.set_ylabel(ylabel)
    else:
        fig.supxlabel(xlabel)
        fig.supylabel(ylabel)
    dtype = "each model's dtype" if data.kv_dtype.lower() == "auto" else data.kv_dtype
    title = f"KV cache per request vs context length (KV dtype: {dtype}; bytes from kvplan)"
    if data.budgets:
        title += (
            f"\nhorizontal lines: each model's KV budget on each GPU ({data.engine}, "
            f"{'TP=' + str(tp) if tp is not None else 'TP as in each panel'}), "
            "after its own weights, activation and overhead"
        )
    if any(b.request_bytes for b in data.budgets):
        title += (
            f"\nsolid: one request as {data.engine} counts it against the budget (as kvplan fit: whole blocks, "
            "windows as reserved); thin dashed: the exact cache (kvplan estimate)"
        )
    if n == 1:
        ax0.set_title(title if model is None else f"{title}\n{ax0.get_title(loc='left')}", loc="center")
        ax0.set_title("", loc="left")
    else:
        fig.suptitle(title)
    return fig


def _write_atomic(fig, out: Path, force: bool = False) -> Path:
    """Save ``fig`` to a temporary file next to ``out``, then move it into place: ``os.replace`` with
    ``force``, else ``os.link`` (which fails when ``out`` exists, even as a dangling symlink, so a file that
    appeared since :func:`check_out` is never replaced).

    Raises:
        UsageError: ``out`` appeared meanwhile (without ``force``), or the folder / file cannot be written.
    """
    folder = out.parent if str(out.parent) else Path(".")
    try:
        fd, tmp = tempfile.mkstemp(prefix=".kvplan-", suffix=".tmp", dir=folder)
    except OSError as e:
        raise UsageError(f"--out: cannot write in {str(folder)!r}: {e.strerror or e}") from None
    os.close(fd)
    try:
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)  # mkstemp makes 0600; give the file the usual permissions
        fig.savefig(tmp, format=FORMATS[out.suffix.lower()], dpi=150)
        if force:
            os.replace(tmp, out)
        else:
            try:
                os.link(tmp, out)
            except FileExistsError:
                raise UsageError(f"--out: {str(out)!r} exists; add --force to overwrite it") from None
            except OSError:  # no hard links here (some file systems): refuse rather than risk a clobber
                if os.path.lexists(out):
                    raise
                os.rename(tmp, out)
    except OSError as e:
        raise UsageError(f"--out: cannot write {str(out)!r}: {e.strerror or e}") from None
    finally:
        if os.path.lexists(tmp):
            os.unlink(tmp)
    return out


def plot_kv_vs_context(
    specs: Sequence[ModelSpec],
    gpus: Sequence[GPU] = (),
    max_seq: int = 131072,
    kv_dtype: str = "auto",
    topologies: bool = False,
    out: str | os.PathLike = "kvplan-plot.png",
    force: bool = False,
    *,
    tensor_parallel_size: int | None = 1,
    engine: str = "vllm",
    weights_dtype: str | None = None,
) -> tuple[Path, PlotData]:
    """Compute and draw the plot; return (the file written, the data drawn). Arguments as :func:`plot_data`.

    Raises:
        UsageError: bad ``out`` (checked first, before any work), bad arguments.
        MissingExtra: no matplotlib.
    """
    path = check_out(out, force)
    data = plot_data(
        specs, gpus, max_seq, kv_dtype, topologies,
        tensor_parallel_size=tensor_parallel_size, engine=engine, weights_dtype=weights_dtype,
    )  # fmt: skip
    return render(data, path, force), data


# --- --throughput: tokens/s bound against concurrency --------------------------------------------


@dataclass(frozen=True)
class ThroughputCurve:
    """The decode tokens/s bound of one GPU's replica at each concurrency of :attr:`ThroughputData.points`.

    Attributes:
        gpu, gpu_name: catalog id and name.
        tokens_per_s: the estimate (kvplan.perf's calibrated efficiencies, MBU/MFU as given), per replica.
        limit_tokens_per_s: the physical limit (MBU = MFU = 1), per replica.
        memory_wall: the most requests of ``context`` tokens that fit (as ``kvplan fit`` counts), or 0.
        max_num_seqs: the engine's cap on running requests, or None.
    """

    gpu: str
    gpu_name: str
    tokens_per_s: tuple[float, ...]
    limit_tokens_per_s: tuple[float, ...]
    memory_wall: int
    max_num_seqs: int | None


@dataclass(frozen=True)
class ThroughputData:
    """What ``kvplan plot --throughput`` draws: one model, one context, one curve per GPU."""

    model: str
    context: int
    tensor_parallel_size: int
    points: tuple[int, ...]
    curves: tuple[ThroughputCurve, ...]
    mbu: float
    mfu: float
    notes: tuple[str, ...]


def throughput_data(
    spec: ModelSpec,
    gpus: Sequence[GPU],
    context: int = 4096,
    kv_dtype: str = "auto",
    tensor_parallel_size: int = 1,
    engine: str = "vllm",
    weights_dtype: str | None = None,
    mbu: float | None = None,
    mfu: float | None = None,
) -> ThroughputData:
    """Tokens/s bounds (:func:`kvplan.perf.bound`) at concurrency 1, 2, 4, ... up to twice the largest
    memory wall (at least 64), for a replica of each GPU decoding requests of ``context`` tokens.

    Raises:
        UsageError: no GPU, a GPU without bandwidth, MBU/MFU outside (0, 1], as :func:`kvplan.fit.plan_fit`.
    """
    from kvplan import perf
    from kvplan.api import fit_options
    from kvplan.fit import plan_fit

    if not gpus:
        raise UsageError("--throughput: give at least one --gpu")
    opts = fit_options(
        engine=engine, tp=tensor_parallel_size, max_model_len=context, kv_dtype=kv_dtype, weights_dtype=weights_dtype
    )
    fits, notes = [], []
    for g in gpus:
        f = plan_fit(spec, g, opts)
        perf.hardware(g, f.weights_dtype)  # a GPU without bandwidth is an error here
        fits.append(f)
        if not f.fits:
            notes.append(f"--gpu {g.id}: not one request of {context:,} tokens fits (TP={tensor_parallel_size})")
    top = max([64, *(2 * f.max_requests_by_memory for f in fits)])
    walls = {f.max_requests_by_memory for f in fits if f.max_requests_by_memory}
    points = sorted({1 << k for k in range(top.bit_length() + 1) if 1 << k <= top} | walls)
    curves = []
    for g, f in zip(gpus, fits, strict=True):
        ys = tuple(perf.estimate(spec, g, f, n, context, 1, mbu, mfu).decode_tokens_per_s for n in points)
        lim = tuple(perf.bound(spec, g, f, n, context, 1).decode_tokens_per_s for n in points)
        seqs = getattr(f, "max_num_seqs", None)
        curves.append(ThroughputCurve(g.id, g.name, ys, lim, f.max_requests_by_memory, seqs))
    used = perf.estimate_efficiency(fits[0].engine, gpus[0], mbu, mfu)
    return ThroughputData(
        spec.name, context, tensor_parallel_size, tuple(points), tuple(curves), used.mbu, used.mfu, tuple(notes)
    )


def render_throughput(data: ThroughputData, out: Path, force: bool = True) -> Path:
    """Draw ``data``: solid lines at the given MBU/MFU, dashed at the physical limit, dotted past the memory
    wall (a vertical line per GPU); log-2 axes. Written atomically to ``out``.

    Raises:
        MissingExtra: no matplotlib.
    """
    Figure = _matplotlib()
    fig = Figure(figsize=(11, 6.5), layout="constrained")
    ax = fig.add_subplot()
    xs = data.points
    for i, c in enumerate(data.curves):
        color = f"C{i % 10}"
        wall = c.memory_wall
        inside = [j for j, n in enumerate(xs) if n <= max(wall, 1)]
        beyond = [j for j, n in enumerate(xs) if n >= max(wall, 1)]
        ax.plot(
            [xs[j] for j in inside],
            [c.tokens_per_s[j] for j in inside],
            "-",
            color=color,
            lw=2.2,
            zorder=2,
            label=f"{c.gpu_name}: estimate (MBU {data.mbu:.2g}, MFU {data.mfu:.2g} + fixed costs)",
        )
        ax.plot([xs[j] for j in beyond], [c.tokens_per_s[j] for j in beyond], ":", color=color, lw=1.4, zorder=2)
        # above every solid line: one GPU's limit can lie exactly on another's bound (H100 at 3.35 TB/s under
        # H200's 4.8 × 0.7 = 3.36 TB/s) and would be hidden beneath it
        ax.plot(
            xs,
            c.limit_tokens_per_s,
            ls=(0, (5, 3)),
            color=color,
            lw=1.6,
            zorder=4,
            label=f"{c.gpu_name}: physical limit",
        )
        if wall:
            ax.axvline(wall, color=color, lw=1.0, ls="-.", alpha=0.9)
            ax.annotate(  # on a white box above the curves, so the text never runs through a line
                f"{c.gpu}: {wall:,} requests fit",
                xy=(wall, 0.98),
                xycoords=("data", "axes fraction"),
                rotation=90,
                ha="right",
                va="top",
                fontsize=8.5,
                color=color,
                zorder=5,
                bbox={"boxstyle": "round,pad=0.15", "facecolor": "white", "edgecolor": "none", "alpha": 0.85},
            )
        if c.max_num_seqs and c.max_num_seqs < wall:
            ax.axvline(c.max_num_seqs, color=color, lw=0.8, ls=(0, (1, 2)))
    ax.set_xscale("log", base=2)
    ax.set_yscale("log", base=2)
    ticks = [n for n in xs if n & (n - 1) == 0]  # powers of two; the walls are marked by their lines
    ax.set_xticks(ticks, [f"{n:,}" for n in ticks])
    ax.minorticks_off()
    lo, hi = ax.get_ylim()
    yt = [2.0**k for k in range(-4, 40) if lo <= 2.0**k <= hi]
    ax.set_yticks(yt, [f"{t:,.0f}" if t >= 1 else f"{t:g}" for t in yt])
    ax.grid(True, which="major", color="0.9", lw=0.8)
    ax.set_xlabel("concurrent requests per replica (log₂ scale)")
    ax.set_ylabel("decode tokens/s per replica: the estimate and its physical limit (log₂ scale)")
    tp = f", TP={data.tensor_parallel_size}" if data.tensor_parallel_size > 1 else ""
    ax.set_title(
        f"{data.model}: decode throughput, estimate and limit, vs concurrency at {data.context:,} tokens cached{tp} "
        "(dotted past the memory wall)"
    )
    ax.legend(loc="lower right", fontsize=8.5, framealpha=0.92)
    return _write_atomic(fig, out, force)


def plot_throughput(
    spec: ModelSpec,
    gpus: Sequence[GPU],
    context: int = 4096,
    out: str | os.PathLike = "kvplan-plot.png",
    force: bool = False,
    **kwargs,
) -> tuple[Path, ThroughputData]:
    """Compute and draw ``kvplan plot --throughput``; keyword arguments as :func:`throughput_data`.

    Raises:
        UsageError: bad ``out`` (checked first), bad arguments. MissingExtra: no matplotlib.
    """
    path = check_out(out, force)
    data = throughput_data(spec, gpus, context, **kwargs)
    return render_throughput(data, path, force), data
