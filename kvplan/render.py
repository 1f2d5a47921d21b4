"""Rendering: rich tables for people, JSON for programs. No arithmetic beyond unit conversion.

Data goes to stdout; warnings and chatter go to stderr.
"""

from __future__ import annotations

import math
import re
import sys
from dataclasses import asdict, is_dataclass
from enum import Enum
from typing import Any, TextIO

from kvplan.units import GB, GIB, fmt_bytes, fmt_gb, fmt_gib, fmt_mib, fmt_ratio_floor, fmt_tokens, plural, printable


class OutputFormat(str, Enum):
    """Output formats every listing command accepts."""

    table = "table"
    json = "json"
    csv = "csv"


PIPE_WIDTH = 100_000  # pipes and files: no terminal to fit, so nothing is wrapped or cut


def console(file: TextIO | None = None, width: int | None = None):
    """A rich Console on ``file`` (stdout by default); plain text when not a terminal.

    On a terminal, tables fit its width. Piped or redirected, nothing is wrapped or cut: every table keeps
    its natural width and every line stays one line (:data:`PIPE_WIDTH`). A table's title is printed as its
    own line before the table, never wrapped to the table's width (rich would break it mid-phrase); on a
    terminal a title longer than the screen is left to the terminal to wrap.

    Piped or redirected (and no ``FORCE_COLOR`` / ``TTY_*`` variable making rich treat it as a terminal), the
    console is a :class:`PlainConsole`: it writes the text rich would write for kvplan's lines and plain
    tables itself (rich's console module and its layout cost a planning command ~11 ms of its ~50 ms) and
    hands anything else to a rich Console on the same file.
    """
    out = file or sys.stdout
    if width is None and not out.isatty():
        if PlainConsole.usable(out):
            return PlainConsole(out)
        width = PIPE_WIDTH
    return _rich_console(out, width)


def _rich_console(out: TextIO, width: int | None):
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

    class _Console(Console):
        def print(self, *objects: Any, **kwargs: Any) -> None:
            if len(objects) == 1 and isinstance(objects[0], Table) and objects[0].title:
                table = objects[0]
                title, table.title = table.title, None
                try:
                    shown = Text(title, style="table.title") if isinstance(title, str) else title
                    super().print(shown, soft_wrap=True)
                    super().print(table, **kwargs)
                finally:
                    table.title = title
                return
            super().print(*objects, **kwargs)

        def on_broken_pipe(self) -> None:
            # rich exits 1 when the reader closes the pipe (`kvplan models | head -1`); that is not a failure:
            # point stdout at /dev/null (nothing more is written) and let the CLI end with exit 0.
            import os

            self.quiet = True
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
            raise BrokenPipeError

    return _Console(file=out, width=width, highlight=False, soft_wrap=False, emoji=False, markup=False)


class PlainConsole:
    """What the rich Console of :func:`console` prints on a file that is not a terminal, written directly for
    what kvplan prints most: one line of printable text (a ``str`` or a rich ``Text``: its plain text; no
    style shows off a terminal), and a rich ``Table`` of the default heavy-head box with left / right columns
    and printable cells, laid out at its natural width as rich lays it out then (each column as wide as its
    widest cell, one space of padding each side, the box lines from ``rich.box.HEAVY_HEAD``). Anything else
    (other objects, options, boxes, control characters, tabs) goes to a rich Console on the same file, made
    on first use. tests/test_render.py checks the two print the same text."""

    width = PIPE_WIDTH

    def __init__(self, file: TextIO):
        self.file = file
        self._rich = None

    @staticmethod
    def usable(file: TextIO) -> bool:
        """True when rich would print plain text on ``file``: UTF-8 (else rich swaps in ASCII boxes), and no
        variable that makes rich colour a pipe or take it for a terminal."""
        import os

        if any(os.environ.get(v) for v in ("FORCE_COLOR", "TTY_COMPATIBLE", "TTY_INTERACTIVE")):
            return False
        return str(getattr(file, "encoding", None) or "").lower().replace("-", "") in ("utf8", "utf8sig")

    def print(self, *objects: Any, **kwargs: Any) -> None:
        text = None
        if len(objects) == 1 and set(kwargs) <= {"soft_wrap", "highlight", "markup"}:
            text = _plain_text(objects[0])
        if text is None:
            if self._rich is None:
                self._rich = _rich_console(self.file, PIPE_WIDTH)
            self._rich.print(*objects, **kwargs)
            return
        self.file.write(text)


def _plain_line(obj: Any) -> str | None:
    """The plain text of a ``str`` or rich ``Text`` that rich prints unchanged (printable, no tabs), else None."""
    from rich.text import Text

    text = obj if isinstance(obj, str) else obj.plain if isinstance(obj, Text) else None
    if text is None or not all(part.isprintable() for part in text.split("\n")):
        return None
    return text


def _plain_text(obj: Any) -> str | None:
    """What rich prints for ``obj`` off a terminal, with its final newline; None for what :class:`PlainConsole`
    leaves to rich."""
    line = _plain_line(obj)
    if line is not None:
        return line + "\n"
    from rich import box
    from rich.table import Table

    if not isinstance(obj, Table):
        return None
    t = obj
    simple = (
        t.box is box.HEAVY_HEAD and t.show_header and not t.show_footer and t.show_edge and not t.show_lines
        and t.padding == (0, 1, 0, 1) and t.pad_edge and not t.collapse_padding and not t.expand
        and t.width is None and t.min_width is None and not t.caption and not t.leading
    )  # fmt: skip
    if not simple or any(
        c.justify not in ("left", "right") or c.width or c.min_width or c.max_width or c.ratio for c in t.columns
    ):
        return None
    title = "" if not t.title else _plain_line(t.title)
    columns = []
    for c in t.columns:
        cells = [_plain_line(x) for x in (c.header, *c._cells)]
        if title is None or any(x is None or "\n" in x for x in cells):
            return None
        columns.append(cells)
    from rich.cells import cell_len

    widths = [max(cell_len(x) for x in cells) for cells in columns]
    b = box.HEAVY_HEAD

    def line(k: int, left: str, vertical: str, right: str) -> str:
        parts = []
        for cells, w, c in zip(columns, widths, t.columns, strict=True):
            pad = " " * (w - cell_len(cells[k]))
            parts.append(f" {pad}{cells[k]} " if c.justify == "right" else f" {cells[k]}{pad} ")
        return left + vertical.join(parts) + right

    padded = [w + 2 for w in widths]
    lines = [title] if title else []
    lines += [b.get_top(padded), line(0, b.head_left, b.head_vertical, b.head_right), b.get_row(padded, "head")]
    for i, row in enumerate(t.rows):
        lines.append(line(i + 1, b.mid_left, b.mid_vertical, b.mid_right))
        if row.end_section and i < len(t.rows) - 1:
            lines.append(b.get_row(padded, "row"))
    lines.append(b.get_bottom(padded))
    return "\n".join(lines) + "\n"


def to_jsonable(obj: Any) -> Any:
    """Dataclasses, enums, tuples to plain JSON types."""
    if is_dataclass(obj) and not isinstance(obj, type):
        return {k: to_jsonable(v) for k, v in asdict(obj).items()}
    if isinstance(obj, Enum):
        return obj.value
    if isinstance(obj, dict):
        return {str(k): to_jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [to_jsonable(v) for v in obj]
    return obj


def print_json(obj: Any, file: TextIO | None = None) -> None:
    """One strict JSON document on stdout: non-finite floats (inf, nan) become ``null``."""
    import json

    out = file or sys.stdout
    out.write(json.dumps(_finite(to_jsonable(obj)), indent=2, allow_nan=False) + "\n")


def _finite(obj: Any) -> Any:
    """``obj`` with every non-finite float replaced by None (JSON has no Infinity / NaN)."""
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {k: _finite(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_finite(v) for v in obj]
    return obj


_CSV_FORMULA_START = ("=", "+", "-", "@", "\t", "\r")


# A cell left as it is although it starts with "-": a negative decimal number (a spreadsheet reads it as the
# number it is; "+1" is quoted: a spreadsheet would show 1), or a command-line flag list (``--tp 2 --pp 2``:
# "-" then a letter or "-", and only letters, digits, "-", "_", ".", ",", "=", "/", ":" and spaces; without
# "(" "|" "!" "@" or quotes no function call, DDE link or sheet reference can be formed, so nothing can run).
_CSV_NUMBER = re.compile(r"-[0-9]+(?:\.[0-9]+)?")
_CSV_FLAGS = re.compile(r"-[-A-Za-z][A-Za-z0-9_.,=/: -]*")


def csv_cell(value: Any) -> Any:
    """A CSV cell: a string a spreadsheet would run as a formula (it starts with ``=``, ``+``, ``-``, ``@``, a
    tab or a carriage return: OWASP's "CSV injection") gets a leading ``'``, which spreadsheets show as text;
    numbers and other strings are written as they are, and so are a string that is a negative decimal number
    (``-0.5``) and a flag list of command-line tokens (``--tensor-parallel-size 2``: no character of a function
    call, DDE link or sheet reference in it, see :data:`_CSV_FLAGS`), which CSV readers get verbatim (a
    spreadsheet may show such a flag list as a formula error, never run it)."""
    if isinstance(value, str) and value.startswith(_CSV_FORMULA_START):
        if _CSV_NUMBER.fullmatch(value) or _CSV_FLAGS.fullmatch(value):
            return value
        return "'" + value
    return value


def print_csv(rows: list[dict[str, Any]], file: TextIO | None = None) -> None:
    """Rows as CSV with a header line (keys of the first row); string cells through :func:`csv_cell`."""
    import csv

    out = file or sys.stdout
    if not rows:
        return
    w = csv.DictWriter(out, fieldnames=list(rows[0]), lineterminator="\n")
    w.writeheader()
    for r in rows:
        w.writerow({k: csv_cell(to_jsonable(v)) for k, v in r.items()})


def note(message: str) -> None:
    """One note line on stderr (what kvplan read or left out; control characters escaped)."""
    sys.stderr.write(f"kvplan: note: {printable(message)}\n")


def warn(message: str) -> None:
    """One warning line on stderr (control characters escaped: a path or name with a newline stays one line)."""
    sys.stderr.write(f"kvplan: warning: {printable(message)}\n")


def size_cells(n: int) -> tuple[str, str, str]:
    """(bytes, GiB, GB) table cells for a byte count, units in the column headers."""
    return f"{n:,}", fmt_gib(n).removesuffix(" GiB"), fmt_gb(n).removesuffix(" GB")


# --- estimate ---------------------------------------------------------------------------------


def estimate_json(est) -> dict[str, Any]:
    """The JSON object of one :class:`kvplan.calc.Estimate`."""
    return {
        "model": est.model,
        "seq_len": est.seq_len,
        "batch_size": est.batch_size,
        "kv_dtype": est.kv_dtype,
        "block_size": est.block_size,
        "tensor_parallel_size": est.tensor_parallel_size,
        "bytes_per_request": est.bytes_per_request,
        "total_bytes": est.total_bytes,
        "total_gib": est.total_bytes / GIB,
        "total_gb": est.total_bytes / GB,
        "kv_replication": None if est.kv_replication is None else to_jsonable(est.kv_replication),
        "groups": [_group_json(g) for g in est.groups],
    }


def _group_json(g) -> dict:
    """One layer group as JSON; ``compressed_bytes`` only for DeepSeek-V4's compressed layers."""
    out = {
        "kind": g.kind,
        "layers": g.layers,
        "window": g.window,
        "tokens_cached": g.tokens_cached,
        "bytes_per_token": g.bytes_per_token,
        "state_bytes": g.state_bytes,
    }
    if g.compressed_bytes:
        out["compressed_bytes"] = g.compressed_bytes
    out["bytes"] = g.bytes
    return out


def _per_token_cell(g) -> str:
    """Bytes per token; ``+ state`` when the layers also keep a fixed state (Falcon-H1's parallel Mamba-2),
    ``+ compressed`` when they also keep entries per m tokens (DeepSeek-V4)."""
    if g.compressed_bytes:
        return f"{g.bytes_per_token:,} + compressed" + (" + state" if g.state_bytes else "")
    if g.bytes_per_token and g.state_bytes:
        return f"{g.bytes_per_token:,} + state"
    return f"{g.bytes_per_token:,}" if g.bytes_per_token else ("state" if g.state_bytes else "0")


def estimate_table(est, con) -> None:
    """Print one estimate: a breakdown per layer kind, then per-request and batch totals."""
    from rich.table import Table

    from kvplan.calc import TOKEN_KINDS

    paging = f", blocks of {est.block_size}" if est.block_size else ""
    tp = f", per GPU at TP={est.tensor_parallel_size}" if est.tensor_parallel_size > 1 else ""
    title = f"{est.model}: {fmt_tokens(est.seq_len)} × {est.batch_size} request(s), KV {est.kv_dtype}{paging}{tp}"
    t = Table(title=title, title_justify="left")
    for col, just in (
        ("layer kind", "left"),
        ("layers", "right"),
        ("window", "right"),
        ("tokens cached", "right"),
        ("bytes/token", "right"),
        ("bytes", "right"),
        ("GiB", "right"),
        ("GB", "right"),
    ):
        t.add_column(col, justify=just, no_wrap=True)
    for g in est.groups:
        b, gi, gd = size_cells(g.bytes)
        t.add_row(
            g.kind,
            str(g.layers),
            f"{g.window:,}" if g.window else "-",
            f"{g.tokens_cached:,}" if g.kind in TOKEN_KINDS else "-",  # state, shared, none: no token cache
            _per_token_cell(g),
            b,
            gi,
            gd,
        )
    t.add_section()
    b, gi, gd = size_cells(est.bytes_per_request)
    t.add_row("per request", "", "", "", "", b, gi, gd, style="bold")
    if est.batch_size > 1:
        b, gi, gd = size_cells(est.total_bytes)
        t.add_row(f"batch of {est.batch_size}", "", "", "", "", b, gi, gd, style="bold")
    con.print(t)
    n = est.total_bytes
    con.print(f"KV cache: {fmt_bytes(n)} ({fmt_gib(n)}, {fmt_gb(n)})")
    if est.kv_replication is not None:
        con.print(est.kv_replication.note)


def estimate_summary_table(ests, con) -> None:
    """Print estimates one line each (model, length, dtype, TP): bytes per request, and per batch when the
    batch is above 1; layer kinds in short form; replication noted below the table."""
    from rich.table import Table

    batch = max(e.batch_size for e in ests)
    tp = max(e.tensor_parallel_size for e in ests)
    paging = {e.block_size for e in ests} - {None}
    title = "KV cache per request" + (f", per GPU at TP={tp}" if tp > 1 else "")
    title += f", blocks of {fmt_tokens(paging.pop())}" if len(paging) == 1 else ""
    t = Table(title=title, title_justify="left")
    cols = ["model", "seq", "KV dtype", "layers", "bytes/request", "GiB", "GB"]
    if batch > 1:
        cols += [f"batch of {batch:,}, bytes", "GiB "]
    for col in cols:
        t.add_column(col, justify="left" if col in ("model", "KV dtype", "layers") else "right", no_wrap=True)
    for e in ests:
        b, gi, gd = size_cells(e.bytes_per_request)
        kinds = " + ".join(f"{g.layers} {g.kind}" for g in e.groups)
        cells = [e.model, f"{e.seq_len:,}", e.kv_dtype, kinds, b, gi, gd]
        if batch > 1:
            cells += [f"{e.total_bytes:,}", fmt_gib(e.total_bytes).removesuffix(" GiB")]
        t.add_row(*cells)
    con.print(t)
    for note in dict.fromkeys(f"{e.model}: {e.kv_replication.note}" for e in ests if e.kv_replication):
        con.print(note)


# --- models ------------------------------------------------------------------------------------


def fmt_params(n: int) -> str:
    """A parameter count in short form: ``8.03B``, ``853M``, ``1.03T``."""
    for scale, unit in ((10**12, "T"), (10**9, "B"), (10**6, "M")):
        if n >= scale:
            return f"{n / scale:.3g}{unit}"
    return f"{n:,}"


def models_table(rows: list[dict[str, Any]], con) -> None:
    """Print the bundled models listing; the params column is total parameters (MoE: ``(A…)`` active), or
    ``-`` where the spec has none (``kvplan fit`` then needs --weights-gib)."""
    from rich.table import Table

    t = Table(
        title="Bundled models (bytes/token: KV at bf16, S = 4096, averaged over the 4096 tokens; "
        "params '-': fit needs --weights-gib)"
    )
    cols = [
        ("model", "name", "left"),
        ("layers", "num_layers", "right"),
        ("H_q", "num_q_heads", "right"),
        ("H_kv", "num_kv_heads", "right"),
        ("head_dim", "head_dim", "right"),
        ("attention", "attention", "left"),
        ("max context", "max_model_len", "right"),
        ("params", "param_count", "right"),
        ("B/token @4k", "bytes_per_token_4096", "right"),
    ]
    for title, _, just in cols:
        t.add_column(title, justify=just, no_wrap=True)
    for r in rows:
        cells = []
        for _, key, _ in cols:
            v = r[key]
            if key == "param_count":  # '-': weights unknown, 'kvplan fit' needs --weights-gib
                active = r.get("active_param_count")
                cells.append("-" if v is None else fmt_params(v) + (f" (A{fmt_params(active)})" if active else ""))
            elif isinstance(v, float):
                cells.append(f"{v:,.1f}")
            elif isinstance(v, int):
                cells.append(f"{v:,}")
            else:
                cells.append(str(v))
        t.add_row(*cells)
    con.print(t)


# --- compare -------------------------------------------------------------------------------------


def compare_json(model: str, seq_len: int, kv_dtype: str, rows) -> dict[str, Any]:
    """JSON object of a topology comparison."""
    return {
        "model": model,
        "seq_len": seq_len,
        "kv_dtype": kv_dtype,
        "rows": [
            {
                "topology": r.label,
                "num_kv_heads": r.num_kv_heads,
                "queries_per_kv_head": r.queries_per_kv_head,
                "bytes": r.bytes,
                "gib": r.bytes / GIB,
                "gb": r.bytes / GB,
                "ratio_to_mha": r.ratio_to_mha,
            }
            for r in rows
        ],
    }


def compare_table(model: str, seq_len: int, kv_dtype: str, rows, con) -> None:
    """Print the MHA / model / MQA comparison."""
    from rich.table import Table

    t = Table(title=f"{model}: KV heads vs cache size at {fmt_tokens(seq_len)}, KV {kv_dtype}", title_justify="left")
    for col in ("topology", "KV heads", "queries per KV head", "bytes", "GiB", "GB", "vs MHA"):
        t.add_column(col, justify="left" if col == "topology" else "right", no_wrap=True)
    for r in rows:
        b, gi, gd = size_cells(r.bytes)
        t.add_row(r.label, str(r.num_kv_heads), str(r.queries_per_kv_head), b, gi, gd, f"{r.ratio_to_mha:.4g}×")
    con.print(t)


# --- gpus ----------------------------------------------------------------------------------------


def gpu_json(gpu) -> dict[str, Any]:
    """The JSON object of one :class:`kvplan.gpus.GPU`: catalog fields, bytes as ints, GiB for reading."""
    return {
        "id": gpu.id,
        "name": gpu.name,
        "vendor": gpu.vendor,
        "marketed_gb": gpu.marketed_gb,
        "smi_total_mib": gpu.smi_total_mib,
        "smi_total_bytes": gpu.smi_total_bytes,
        "cuda_total_bytes": gpu.cuda_total_bytes,
        "cuda_total_gib": gpu.cuda_total_bytes / GIB,
        "cuda_total_observed": gpu.cuda_total_is_observed,
        "cuda_total_source": gpu.cuda_total_source or None,
        "reserve_mib": gpu.reserve_mib,
        "bandwidth_tbs": gpu.bandwidth_tbs,
        "bf16_dense_tflops": gpu.bf16_dense_tflops,
        "fp8": gpu.fp8,
        "price_usd_per_hour": gpu.price_usd_per_hour,
        "source": gpu.source,
        "status": gpu.status,
        "aliases": list(gpu.aliases),
        "notes": gpu.notes or None,
    }


def _num_cell(x: float | None, fmt: str = "{:,g}") -> str:
    return "-" if x is None else fmt.format(x)


def gpus_table(gpus, con) -> None:
    """Print the GPU catalog: memory totals, bandwidth, compute, price, aliases.

    The $/h column is left out while no GPU has a price (a caption says to pass ``--price``).
    """
    from rich import box
    from rich.table import Table

    priced = any(g.price_usd_per_hour is not None for g in gpus)
    t = Table(
        title="GPU catalog. CUDA GiB: obs = seen in a log, est = nvidia-smi total − reserve; "
        "* = nvidia-smi total unconfirmed",
        title_justify="left",
        caption=None if priced else "No prices bundled: give --price (USD per GPU-hour) for costs.",
        caption_justify="left",
        box=box.SIMPLE_HEAD,
        show_edge=False,
        padding=(0, 1),
        collapse_padding=True,
        pad_edge=False,
    )
    cols = [
        ("id", "left", True),
        ("name", "left", False),
        ("GB", "right", True),
        ("smi MiB", "right", True),
        ("CUDA GiB", "right", True),
        ("TB/s", "right", True),
        ("BF16 TF/s", "right", True),
        ("FP8", "left", True),
        ("$/h", "right", True),
        ("aliases", "left", False),
    ]
    if not priced:
        cols = [c for c in cols if c[0] != "$/h"]
    for col, just, no_wrap in cols:
        t.add_column(col, justify=just, no_wrap=no_wrap)
    for g in gpus:
        smi = "-" if g.smi_total_mib is None else f"{g.smi_total_mib:,}"
        if g.status == "unconfirmed":
            smi += "*"
        cuda = f"{g.cuda_total_bytes / GIB:,.2f} {'obs' if g.cuda_total_is_observed else 'est'}"
        cells = [
            g.id,
            g.name,
            _num_cell(g.marketed_gb),
            smi,
            cuda,
            _num_cell(g.bandwidth_tbs),
            _num_cell(g.bf16_dense_tflops),
            "yes" if g.fp8 else "no",
        ]
        if priced:
            cells.append(_num_cell(g.price_usd_per_hour, "{:,.2f}"))
        cells.append(", ".join(g.aliases))
        t.add_row(*cells)
    con.print(t)


# --- fit -------------------------------------------------------------------------------------------


def fit_json(
    r, speed=None, reason: str | None = None, suggestions: list[str] | None = None, gpu_notes: tuple[str, ...] = ()
) -> dict[str, Any]:
    """JSON object of a :class:`kvplan.fit.FitResult` (all fields, plus fits and GiB figures).

    ``max_model_len_fit`` is null when no length is too long (every layer's cache is bounded). With ``speed``
    (a :class:`kvplan.perf.Speed`), its headline keys: the limit's (``tpot_ms_limit``,
    ``decode_tokens_per_s_limit``, ``ttft_ms_limit``: MBU = MFU = 1, no measurement beats them) and the
    estimate's (``tpot_ms_estimate``, ``decode_tokens_per_s_estimate``, ``ttft_ms_estimate``, its ``mbu`` and
    ``mfu``, ``estimate_median_abs_error``), the step's ``decode_step_bytes`` and ``decode_step_flops``, and
    ``throughput``: both figures in full. ``reason`` and ``suggestions``: why a plan does not fit and what
    would (the flags, each with a note in parentheses, as ``kvplan fit`` prints them on stderr); null and []
    for a plan that fits.
    ``gpu_notes``: what ``--gpu`` resolved to when it could mean another card or total
    (:func:`kvplan.gpus.gpu_notes`).
    """
    d = to_jsonable(r)
    d["gpu_notes"] = list(gpu_notes)
    if r.max_model_len_unbounded:
        d["max_model_len_fit"] = None
    d["fits"] = r.fits
    d["reason"] = reason
    d["suggestions"] = list(suggestions or [])
    d["kv_budget_gib"] = r.kv_budget_bytes / GIB
    d["budget_exact"] = getattr(r, "budget_exact", True)
    d["budget_note"] = budget_note(r) or None
    lim = None if speed is None else speed.limit
    est = None if speed is None else speed.estimate
    for key, (src, attr) in FIT_SPEED_KEYS.items():
        p = lim if src == "limit" else est
        d[key] = None if p is None else getattr(p.efficiency, attr[4:]) if attr.startswith("eff.") else getattr(p, attr)
    d["throughput"] = None if speed is None else {"limit": to_jsonable(lim), "estimate": to_jsonable(est)}
    return d


FIT_SPEED_KEYS = {
    "decode_step_bytes": ("limit", "decode_step_bytes"),
    "decode_step_flops": ("limit", "decode_step_flops"),
    "tpot_ms_limit": ("limit", "tpot_ms"),
    "decode_tokens_per_s_limit": ("limit", "decode_tokens_per_s"),
    "ttft_ms_limit": ("limit", "ttft_ms"),
    "tpot_ms_estimate": ("estimate", "tpot_ms"),
    "decode_tokens_per_s_estimate": ("estimate", "decode_tokens_per_s"),
    "ttft_ms_estimate": ("estimate", "ttft_ms"),
    "mbu": ("estimate", "mbu"),
    "mfu": ("estimate", "mfu"),
    "estimate_median_abs_error": ("estimate", "eff.median_abs_error"),
    "estimate_median_abs_error_loo": ("estimate", "eff.loo_median_abs_error"),
}


def fit_speed_lines(speed) -> list[str]:
    """The speed section of ``kvplan fit`` (a :class:`kvplan.perf.Speed`), one line each: the physical limit
    (no system is faster) and the estimate (what to size with, its error on published measurements)."""
    p, e = speed.limit, speed.estimate
    gpus = p.decode_tokens_per_s / p.decode_tokens_per_s_per_gpu if p.decode_tokens_per_s_per_gpu else 1
    peak = "no FLOP/s peak" if p.peak_tflops is None else f"{p.peak_tflops:,g} TFLOP/s {p.compute_dtype}"
    from kvplan.perf import estimate_error_text

    err = estimate_error_text(e.efficiency)
    err_text = f", {err}" if err else ""
    lines = [
        f"Speed ({p.bandwidth_tbs:g} TB/s, {peak}), {plural(p.concurrency, 'request')} at "
        f"{fmt_tokens(p.context_tokens)} cached:",
        f"  decode step per GPU: {p.decode_step_bytes:,} B read, {p.decode_step_flops:,} FLOPs",
        f"    (weights {p.weights_read_bytes:,} B, KV {p.kv_read_bytes:,} B, "
        f"state read + write {p.state_rw_bytes:,} B)",
    ]
    if p.experts_touched is not None:
        lines.append(f"  MoE: {p.experts_touched:,.1f} distinct experts per layer expected under uniform routing")
    ar = f" + link {p.allreduce_ms:,.3f} ms" if p.allreduce_bytes else ""
    per_gpu = f" ({p.decode_tokens_per_s_per_gpu:,.0f} per GPU)" if gpus > 1.5 else ""
    lines += [
        "  limit (MBU = MFU = 1, no fixed costs: no system is faster):",
        f"    TPOT >= {p.tpot_ms:,.3f} ms ({p.bound_by}-bound: memory {p.memory_ms:,.3f} ms, compute "
        f"{p.compute_ms:,.3f} ms{ar})",
        f"    decode <= {p.decode_tokens_per_s:,.0f} tokens/s per replica{per_gpu}",
        f"    TTFT >= {p.ttft_ms:,.1f} ms for a {p.prompt_tokens:,}-token prompt ({p.ttft_bound_by}-bound)",
        f"  estimate ({e.efficiency.basis}: MBU {e.mbu:.2f}, MFU {e.mfu:.2f}, {e.fixed_ms:,.3f} ms fixed per step"
        f"{err_text}):",
        f"    TPOT ~{e.tpot_ms:,.3f} ms, decode ~{e.decode_tokens_per_s:,.0f} tokens/s, TTFT ~{e.ttft_ms:,.1f} ms",
    ]
    lines.extend(f"  note: {n}" for n in p.notes)
    return lines


def _asked(r) -> str:
    """`` (for --engine-version X)`` when a version was given that is not the rule set's own name."""
    asked = getattr(r, "engine_version_asked", "")
    return f" (for --engine-version {asked})" if asked and asked != r.engine_version else ""


def concurrency_figure(ratio: float) -> str:
    """kvplan's "Maximum concurrency" figure (``fit``'s line and ``sweep``'s column): its own ratio
    (:attr:`kvplan.fit.FitResult.max_requests_ratio`) cut, never rounded, to two decimals (``39.99``, not the
    ``40.00`` of vLLM's log with the null block counted)."""
    return fmt_ratio_floor(ratio)


def concurrency_line(r) -> str:
    """kvplan's "Maximum concurrency" line: its own ratio (:func:`concurrency_figure`) beside the whole requests
    that fit, and for vLLM how its log's figure (rounded, null block counted) differs."""
    ratio = concurrency_figure(r.max_requests_ratio)
    n = r.max_requests_by_memory
    whole = f"{plural(n, 'whole request')} {'fits' if n == 1 else 'fit'}"
    if r.engine != "vllm":
        return f"Maximum concurrency (vLLM-style ratio): {ratio}x (cut to 2 decimals; {whole})"
    log = f"{r.max_concurrency:.2f}"
    if log == ratio.replace(",", ""):
        detail = ""
    elif fmt_ratio_floor(r.max_concurrency) == ratio:
        detail = f"vLLM's log rounds it to {log}x; "
    elif r.null_block and not r.shared_prefix_tokens:
        rounded = "" if fmt_ratio_floor(r.max_concurrency) == log else "rounded, and "
        detail = f"vLLM's log shows {log}x, {rounded}counting the null block; "
    else:
        detail = f"vLLM's log shows {log}x; "
    return f"Maximum concurrency: {ratio}x ({detail}{whole})"


def _windowed_note(r) -> bool:
    """True when a request holds less than max_model_len tokens in every layer (windows, chunks, states)."""
    return r.kv_bytes_per_request < r.max_model_len * r.kv_bytes_per_token


def _range_gib(pair) -> str:
    lo, hi = pair
    return f"{fmt_gib(lo)} – {fmt_gib(hi)}"


def llamacpp_lines(r) -> list[str]:
    """What ``kvplan fit --engine llamacpp`` says about llama.cpp's own settings: the command line it plans (its
    flags' values without thousands separators, so it can be pasted), the slots, where ``-c`` came from, the caches
    llama.cpp would print, and the largest ``-c`` that fits."""
    s = r.engine_settings
    fa = s["flash_attn"] + ("" if s["flash_attn"] != "auto" else f" ({'on' if s['flash_attn_on'] else 'off'})")
    out = [
        f"llama.cpp {s['llama_cpp']} rules{_asked(r)}, {s['tool']} defaults: -c {s['n_ctx']} -np {s['n_parallel']}"
        f"{' (auto)' if s['parallel_auto'] else ''} {'-kvu' if s['kv_unified'] else '-no-kvu'} "
        f"-ctk {s['cache_type_k']} -ctv {s['cache_type_v']} -fa {fa} -b {s['n_batch']} -ub {s['n_ubatch']}"
        + (" --swa-full" if s["swa_full"] else "")
    ]
    source = {"-c": "as given", "-fit": "lowered by llama.cpp's -fit (on by default) to leave 1 GiB free"}.get(
        s["ctx_from"], f"from {s['ctx_from']}"
    )
    out.append(f"  n_ctx {s['n_ctx']:,} ({source}; the model's context: {s['n_ctx_train']:,})")
    n = s["n_parallel"]
    if s["kv_unified"]:
        out.append(
            f"  {plural(n, 'slot')} sharing one cache of {s['n_ctx']:,} cells (unified): a request of up to "
            f"{s['slot_ctx']:,} tokens per slot, all slots' tokens together at most {s['n_ctx']:,}"
        )
    else:
        out.append(
            f"  {plural(n, 'slot')} of {s['n_ctx_seq']:,} cells each (one stream per slot, not unified): a request "
            f"of up to {s['slot_ctx']:,} tokens per slot"
        )
    for line in s.get("notes", []):
        out.append(f"  note: {line}")
    out.append("Engine log (llama.cpp's lines for these caches):")
    out.extend(f"  {line}" for line in r.engine_log.splitlines())
    fits = r.kv_budget_bytes >= s["kv_total_bytes"]
    kv = (r.kv_budget_low_bytes, r.kv_budget_high_bytes)
    sure = ""
    if not r.budget_exact:
        lo, hi = kv
        if lo <= s["kv_total_bytes"] <= hi:
            sure = f" (within the compute buffer's modelled range: KV budget {_range_gib(kv)})"
    out.append(
        f"KV caches, all slots: {s['kv_total_bytes']:,} B ({fmt_gib(s['kv_total_bytes'])}): "
        + ("fits" if fits else "does NOT fit")
        + f" the KV budget of {fmt_gib(r.kv_budget_bytes)}{sure}"
    )
    if s.get("max_ctx_size_fit") is not None:
        big = s["max_ctx_size_fit"] > s["n_ctx_train"] * s["n_stream"]
        cap = f" (beyond the model's context: a slot still takes at most {s['n_ctx_train']:,})" if big else ""
        out.append(f"Largest -c that fits with -np {n}: {s['max_ctx_size_fit']:,}{cap}")
    return out


def fit_lines(r) -> list[str]:
    """The lines ``kvplan fit`` prints after its memory table: the engine's rules and pool, its log, what
    fits, and notes saying what the engine's figures count (per engine)."""
    out = []
    tokens_note = None
    if r.engine == "llamacpp" and r.engine_settings:
        out.extend(llamacpp_lines(r))
    elif r.engine == "vllm":
        settings = [f"max_num_batched_tokens {r.max_num_batched_tokens:,}", f"max_num_seqs {r.max_num_seqs:,}"]
        if r.kv_cache_groups:
            settings += [
                "async scheduling" if r.async_scheduling else "no async scheduling",
                f"{fmt_tokens(r.max_in_flight_tokens)} in flight",
                "prefix caching" if r.prefix_caching else "no prefix caching",
            ]
            if r.num_speculative_tokens:
                settings.append(
                    f"{plural(r.num_speculative_tokens, 'speculative token')}, "
                    f"{plural(r.drafter_layers, 'drafter layer')} in the pool"
                )
        out.append(f"vLLM {r.engine_version} rules{_asked(r)}: " + ", ".join(settings))
        if r.kv_cache_groups and len(r.kv_cache_groups) > 1:
            layout: dict[tuple, int] = {}
            for g in r.kv_cache_groups:
                key = (g["kind"], g["layers"], g["block_size"], g["page_bytes"])
                layout[key] = layout.get(key, 0) + 1
            parts = [
                f"{n} × {kind} ({plural(layers, 'layer')}, {block}-token blocks)"
                for (kind, layers, block, _), n in layout.items()
            ]
            pad = f"; {plural(r.padding_layers, 'padding layer')}" if r.padding_layers else ""
            out.append(f"KV cache groups: {len(r.kv_cache_groups)}: " + ", ".join(parts) + pad)
        out.append(
            f"KV pool: {plural(r.num_blocks, 'block')} of {fmt_tokens(r.block_size)}, {r.kv_bytes_per_block:,} B each"
        )
        if r.blocks_per_request:
            null = " (+ 1 null block held back)" if r.null_block else ""
            out.append(
                f"One request of {fmt_tokens(r.max_model_len)} takes {plural(r.blocks_per_request, 'block')}{null}"
            )
        if r.kv_cache_groups and r.kv_tokens_rule != "groups":  # one line: it is printed by every vLLM fit
            # (the log's "Maximum concurrency" figure is on the line "Maximum concurrency: ..." below)
            out.append(
                f'Engine log: "GPU KV cache size: {r.kv_capacity_tokens:,} tokens" = int(concurrency × '
                "max_model_len), not the tokens that fit"
            )
        else:
            out.append(f"Engine log: {r.engine_log}")
            if r.kv_cache_groups and len(r.kv_cache_groups) > 1:
                out.append(
                    f'  "GPU KV cache size" is num_blocks // {plural(len(r.kv_cache_groups), "group")} × block_size '
                    f"(vLLM {r.engine_version} kv_cache_utils.py): one group's tokens, a token counted in every layer"
                )
            elif r.kv_cache_groups:
                out.append('  "GPU KV cache size" is num_blocks × block_size (one KV cache group)')
            else:
                what = 'the log\'s "GPU KV cache size", ' if r.engine_version != "0.6" else ""
                tokens_note = (
                    f"  {what}num_blocks × block_size = {fmt_tokens(r.kv_capacity_tokens)}, counts a token in every "
                    "layer"
                )
                if _windowed_note(r):
                    tokens_note += (
                        "; sliding-window, chunked and state layers hold less per request, so a request can be longer"
                    )
                out.append(tokens_note)
    else:
        if r.engine == "trtllm" and r.engine_version:
            out.append(
                f"TensorRT-LLM {r.engine_version} rules{_asked(r)}: max_batch_size {r.max_num_seqs:,}, every attention "
                "layer sized for max_seq_len (no max_attention_window), max_seq_len cut to what the pool holds"
            )
        elif getattr(r, "engine_version_asked", ""):
            out.append(f"Engine rules: {r.engine_rules}{_asked(r)}")
        es = getattr(r, "engine_settings", None) or {}
        sglang_pools = r.engine == "sglang" and "swa_tokens" in es
        if r.engine == "sglang":
            out.extend(sglang_lines(r, es))
        where = " in the full-layer pool" if sglang_pools else ""
        out.append(
            f"KV capacity: {fmt_tokens(r.kv_capacity_tokens)}{where} "
            f"({plural(r.num_blocks, 'block')} of {fmt_tokens(r.block_size)})"
        )
        if r.engine_log:
            for line in r.engine_log.split("; "):
                out.append(f"Engine log: {line}")
        if sglang_pools:
            out.append(
                "  SGLang keeps sliding-window layers in a pool of their own (swa_layer_tokens): a request holds "
                f"all its tokens in the full-layer pool, at most window {es.get('swa_window', 0):,} + 128 + 2 pages "
                "in the SWA pool"
            )
        elif r.engine == "sglang" and _windowed_note(r) and "mamba_slots" not in es:
            out.append(
                "  SGLang sizes sliding-window and chunked layers of this model for every token (one pool); KV "
                "capacity counts a token in every layer"
            )
        elif r.engine == "llamacpp" and _windowed_note(r):
            out.append(
                "  KV capacity counts a token in every layer; llama.cpp's sliding-window cache holds "
                "min(n_ctx, pad(n_swa + n_ubatch, 256)) cells per request, so a request can be longer"
            )
        elif _windowed_note(r):
            out.append(
                "  KV capacity counts a token in every layer; sliding-window, chunked and state layers hold less "
                "per request, so a request can be longer"
            )
    if getattr(r, "kv_replication", None) is not None:
        out.append(r.kv_replication.note)
    out.append(f"Max concurrent requests of {fmt_tokens(r.max_model_len)}: {r.max_concurrent_requests:,}")
    decode = getattr(r, "max_concurrent_requests_decode", None)
    if decode is not None and decode > r.max_concurrent_requests:
        out.append(
            f"  in decode about {decode:,} (modelled): vLLM frees the sliding-window blocks a request no longer reads "
            "(remove_skipped_blocks); the count above is its admission reservation"
        )
    if r.limited_by_max_num_seqs:
        cap = {"trtllm": "max_batch_size", "sglang": "max_running_requests"}.get(r.engine, "max_num_seqs")
        flag = "--max-running-requests" if r.engine == "sglang" else "--max-num-seqs"
        out.append(
            f"  bounded by {cap} {r.max_num_seqs:,}, not memory: the KV pool holds "
            f"{r.max_requests_by_memory:,} ({flag} to change)"
        )
    elif r.engine == "sglang" and r.fits and "mamba_slots" in (getattr(r, "engine_settings", None) or {}):
        es = r.engine_settings
        if r.max_requests_by_memory == es["mamba_slots"] // es["mamba_slots_per_request"]:
            out.append(
                f"  bounded by the Mamba state cache: {es['mamba_slots']:,} slots, {es['mamba_slots_per_request']} per "
                "running request (--mamba-full-memory-ratio, --max-mamba-cache-size, --mamba-ssm-dtype bfloat16 "
                "raise it)"
            )
    out.append(concurrency_line(r))
    if r.max_model_len_unbounded:
        out.append(
            "Longest single request that fits: unbounded (every layer's cache is bounded by a window or a state)"
        )
    elif r.model_max_context and r.max_model_len_fit > r.model_max_context:  # KV room beyond what the model takes
        out.append(
            f"Longest single request that fits: {r.max_model_len_fit:,} tokens of KV (the model's max context is "
            f"{r.model_max_context:,})"
        )
    else:
        out.append(f"Longest single request that fits: {fmt_tokens(r.max_model_len_fit)}")
    return out


def sglang_lines(r, es: dict) -> list[str]:
    """SGLang's resolved settings and pools, for ``kvplan fit`` (:attr:`kvplan.fit.FitResult.engine_settings`)."""
    if not es:
        return []
    out = []
    chunked = f"chunked_prefill_size {es['chunked_prefill_size']:,}"
    if es.get("chunked_prefill_source"):
        chunked += f" ({es['chunked_prefill_source']})"
    head = [f"page_size {es['page_size']}", chunked]
    if "max_running_requests" in es and not r.engine_refusal:
        head.append(f"max_running_requests {es['max_running_requests']:,} ({es['max_running_requests_bound']})")
    out.append(f"SGLang {r.engine_version} rules: " + ", ".join(head))
    if es.get("mem_fraction_static_source") and es["mem_fraction_static_source"] != "--mem-fraction-static":
        out.append(f"  mem_fraction_static {r.gpu_memory_utilization:g} = {es['mem_fraction_static_source']}")
    if "mamba_slots" in es and not r.engine_refusal:
        out.append(
            f"State pool: {es['mamba_slots']:,} Mamba slots (+1 padding) of {es['mamba_state_bytes_per_request']:,} B "
            f"(SSM {es['mamba_ssm_dtype']}), {fmt_gib(es['mamba_pool_bytes'])}, {es['mamba_slots_per_request']} per "
            f"running request; mamba_full_memory_ratio {es['mamba_full_memory_ratio']:g}; the rest to attention tokens"
        )
    if "swa_tokens" in es and not r.engine_refusal:
        how = "sized for --max-running-requests" if es.get("swa_pool") == "request cap" else (
            f"swa_full_tokens_ratio {es.get('swa_full_tokens_ratio', 0.8):g}")  # fmt: skip
        out.append(
            f"SWA pool: {es['swa_tokens']:,} tokens ({how}; window {es['swa_window']:,}), full pool "
            f"{es['full_tokens']:,} tokens"
        )
    if es.get("max_req_len") is not None and es["max_req_len"] < es["context_len"] - 1:
        out.append(
            f"  max_req_len {es['max_req_len']:,}: the KV pool holds {es['full_tokens']:,} tokens, fewer than "
            f"context_len {es['context_len']:,}; SGLang admits no longer request (managers/tp_worker.py:558)"
        )
    if r.request_table_bytes:
        out.append(
            f"Request table (req_to_token, int32, outside the KV budget): {r.request_table_bytes:,} B "
            f"({fmt_gib(r.request_table_bytes)}) = ({es['max_running_requests']:,} + 1) × ({es['context_len']:,} + 4) "
            "× 4"
        )
    if es.get("note"):
        out.append(f"  note: {es['note']}")
    if r.engine_refusal:
        out.append(r.engine_refusal)
    return out


def fmt_gib_range(low: int, high: int) -> str:
    """``53.4–55.4 GiB`` (two decimals; one figure when both ends round alike)."""
    a, b = f"{low / GIB:.2f}", f"{high / GIB:.2f}"
    return f"{a} GiB" if a == b else f"{a}–{b} GiB"


def budget_note(r) -> str:
    """For a modelled budget: what the range means, the requests at its ends, and the way to an exact answer."""
    if r.kv_budget_given or getattr(r, "budget_exact", True):
        return ""
    lo, hi = r.max_requests_low, r.max_requests_high
    reqs = f"{lo:,}" if lo == hi else f"{lo:,}–{hi:,}"
    return (
        f"The KV budget is modelled ({fmt_gib_range(r.kv_budget_low_bytes, r.kv_budget_high_bytes)}: each modelled "
        f"term at the extremes measured on public {r.engine} logs, docs/budget-validation.md): {reqs} "
        f"{'request' if reqs == '1' else 'requests'} of "
        f"{fmt_tokens(r.max_model_len)} over that range. Exact: give the engine's printed budget with "
        "--kv-cache-memory, or its start-up log with --from-log."
    )


def engine_rules_line(r, exact_bytes: int | None, windowed: bool = False) -> str | None:
    """``KV per request`` against the exact cache of ``kvplan estimate`` (``exact_bytes``, the same length,
    dtype and TP): how many bytes the engine's block and page rules add, or None when they add none.
    ``windowed``: the model has sliding-window, chunked or state layers (engines reserve more for them)."""
    if exact_bytes is None or r.kv_bytes_per_request <= exact_bytes:
        return None
    extra = r.kv_bytes_per_request - exact_bytes
    windowed_text = (
        ", and for windowed and state layers more than they hold (tokens in flight, whole pages)" if windowed else ""
    )
    return (
        f"KV per request {r.kv_bytes_per_request:,} B is {extra:,} B ({100 * extra / exact_bytes:.1f} %) above the "
        f"exact cache of 'kvplan estimate' ({exact_bytes:,} B): the engine reserves whole blocks of "
        f"{fmt_tokens(r.block_size)}{windowed_text}"
    )


def fit_table(r, con, speed=None, exact_bytes: int | None = None, windowed: bool = False) -> None:
    """Print a fit plan: memory per GPU, then what fits, then (with ``speed``) the speed bound. With
    ``exact_bytes`` (``kvplan estimate``'s bytes of one request), a line saying what the engine's block rules
    add to it (:func:`engine_rules_line`; ``windowed`` as there)."""
    from rich.table import Table

    stage = (
        f", PP={r.pipeline_parallel_size} (worst stage: {plural(r.stage_num_layers, 'layer')})"
        if r.pipeline_parallel_size > 1
        else ""
    )
    par = r.parallel
    layout = ""
    if par.attn_dp > 1 or par.ep > 1 or par.attn_tp != r.tensor_parallel_size:
        layout = f" ({par.name}: {par.gpus} GPUs per replica)"
    title = (
        f"{r.model} on {r.gpu_name} ({r.gpu}), TP={r.tensor_parallel_size}{stage}{layout}, {r.engine} convention, "
        f"max_model_len {r.max_model_len:,}, KV {r.kv_dtype}"
    )
    t = Table(title=title, title_justify="left")
    t.add_column("per GPU", no_wrap=True)
    t.add_column("bytes", justify="right", no_wrap=True)
    t.add_column("GiB", justify="right", no_wrap=True)
    t.add_column("GB", justify="right", no_wrap=True)
    t.add_column("note")

    def row(label: str, n: int, note: str = "") -> None:
        b, gi, gd = size_cells(n)
        t.add_row(label, b, gi, gd, note)

    terms = {x["name"]: x for x in getattr(r, "budget_terms", ())}

    def term_row(label: str, name: str, n: int, note: str = "") -> None:
        """A budget term: exact as given, or modelled: "≈" and its range."""
        term = terms.get(name)
        if term is None or term["low"] == term["bytes"] == term["high"] or r.kv_budget_given:
            row(label, n, note)
            return
        b, gi, gd = size_cells(n)
        span = f"modelled, {fmt_gib_range(term['low'], term['high'])}"
        t.add_row(label, f"≈ {b}", f"≈ {gi}", f"≈ {gd}", f"{note}; {span}" if note else span)

    basis = getattr(r, "gpu_total_basis", "")
    row("GPU memory (CUDA total)", r.gpu_total_bytes, "observed in a log" if basis.startswith("observed") else basis)
    if r.engine == "vllm":
        row("usable", r.usable_bytes, f"× gpu_memory_utilization {r.gpu_memory_utilization}")
    elif r.engine == "sglang":
        row(
            "usable (weights + KV)",
            r.usable_bytes,
            f"(total − overhead) × mem_fraction_static {r.gpu_memory_utilization:g}",
        )
    elif r.engine == "trtllm":
        row(
            "free after weights, activation",
            r.usable_bytes,
            f"KV gets free_gpu_memory_fraction {r.gpu_memory_utilization}",
        )
    elif r.engine == "llamacpp" and r.engine_settings:
        s = r.engine_settings
        row("model buffer", r.weights_bytes, f"{r.weights_dtype}, / (TP × PP)")
        comp = next((x for x in r.budget_terms if x["name"] == "activation"), None)
        ranged = comp is not None and comp["low"] != comp["high"]
        note = (
            f"modelled, {_range_gib((comp['low'], comp['high']))} (measured error)"
            if ranged
            else "given (--activation-gib)"
        )
        row("compute buffer", r.activation_bytes, f"{note}; -ub {s['n_ubatch']}, -fa {s['flash_attn']}")
        row("overhead", r.overhead_bytes, "CUDA context")
        t.add_section()
        kvn = (r.kv_budget_low_bytes, r.kv_budget_high_bytes)
        row("KV budget", r.kv_budget_bytes, "given (--kv-cache-memory)" if r.kv_budget_given else
            f"total − the above; {_range_gib(kvn)} with the compute buffer's range" if not r.budget_exact
            else "total − the above")  # fmt: skip
        row("KV caches (all slots)", s["kv_total_bytes"], f"-c {s['n_ctx']}, {plural(s['n_parallel'], 'slot')}")
        row("KV per cell", r.kv_bytes_per_token, "all attention layers, as full ones")
        row("KV per request", r.kv_bytes_per_request,
            f"{fmt_tokens(r.max_model_len)} in {'the shared cache' if s['kv_unified'] else 'its slot'}")  # fmt: skip
        con.print(t)
        for line in fit_lines(r):
            con.print(line)
        if speed is not None:
            for line in fit_speed_lines(speed):
                con.print(line)
        return
    else:
        row("usable", r.usable_bytes, f"× {r.gpu_memory_utilization}")
    split = "/ (TP × PP)"
    if par.ep > 1 or par.attn_dp > 1:
        split = f"experts / EP {par.ep}, the rest / (TP {par.attn_tp} × PP)"
    term_row("weights", "weights", r.weights_bytes, f"{r.weights_dtype}, {split}")
    term_row("activation peak", "activation", r.activation_bytes,
             f"at {plural(r.max_num_batched_tokens, 'batched token')}")  # fmt: skip
    term_row("non-torch overhead", "non_torch", r.overhead_bytes)
    if "multimodal" in terms:
        row("multimodal reserve", terms["multimodal"]["bytes"], terms["multimodal"]["source"])
    if getattr(r, "cudagraph_bytes", 0):
        term_row("CUDA graphs", "cudagraph", r.cudagraph_bytes, "estimate, subtracted")
    t.add_section()
    if r.kv_budget_given:
        row("KV budget", r.kv_budget_bytes, "given (--kv-cache-memory)")
    elif getattr(r, "budget_exact", True):
        row("KV budget", r.kv_budget_bytes)
    else:
        b, gi, gd = size_cells(r.kv_budget_bytes)
        t.add_row("KV budget", f"≈ {b}", f"≈ {gi}", f"≈ {gd}",
                  f"modelled, {fmt_gib_range(r.kv_budget_low_bytes, r.kv_budget_high_bytes)}")  # fmt: skip
    row("KV per token", r.kv_bytes_per_token, "all token-caching layers")
    row("KV per block", r.kv_bytes_per_block, fmt_tokens(r.block_size))
    row("KV per request", r.kv_bytes_per_request, f"{fmt_tokens(r.max_model_len)}, engine block rules")
    if getattr(r, "request_table_bytes", 0):
        row("request table", r.request_table_bytes, "SGLang req_to_token, int32, outside the KV budget")
    if r.shared_prefix_tokens:
        row("shared prefix (once)", r.shared_prefix_bytes, fmt_tokens(r.shared_prefix_tokens))
    con.print(t)
    extra = engine_rules_line(r, exact_bytes, windowed)
    for line in fit_lines(r):
        con.print(line)
        if extra and line.startswith(("One request of", "KV capacity:")):
            con.print(extra)
            extra = None
    if extra:
        con.print(extra)
    if par.attn_dp > 1:
        con.print(
            f"Attention data parallelism: {par.attn_dp} groups of {par.attn_tp} GPU(s) per stage, each holding its own "
            f"requests' KV: {par.attn_dp} × the requests above per replica."
        )
    note = budget_note(r)
    if note:
        con.print(note)
    if speed is not None:
        for line in fit_speed_lines(speed):
            con.print(line)


# --- fleet -----------------------------------------------------------------------------------------


def fleet_row_dict(r, flat: bool = False) -> dict[str, Any]:
    """A fleet row as a dict (JSON); with ``flat`` (CSV) without its per-class figures (``class_speed``, a list)."""
    d = to_jsonable(r)
    d["gpus_per_replica"] = r.gpus_per_replica
    if flat:
        d.pop("class_speed", None)
    return d


def fleet_json(model: str, workload, rows, gpu_notes: tuple[str, ...] = ()) -> dict[str, Any]:
    """JSON of a fleet plan: the workload, every layout, and what each ``--gpu`` resolved to when it could
    mean another card or total (``gpu_notes``, :func:`kvplan.gpus.gpu_notes`)."""
    return {
        "model": model,
        "workload": to_jsonable(workload),
        "concurrency_is": "total across the fleet",
        "gpu_notes": list(gpu_notes),
        "layouts": [fleet_row_dict(r) for r in rows],
    }


def _fleet_exact(r) -> bool:
    low, high = r.kv_budget_low_bytes_per_gpu, r.kv_budget_high_bytes_per_gpu
    return low == r.kv_budget_bytes_per_gpu == high or (low == 0 and high == 0)


def _replica_range(r) -> str:
    """``12–14`` (at the budget's high and low end), ``-`` for an exact budget, ``14+`` where a request does not
    fit at the low end."""
    if _fleet_exact(r):
        return "-"
    lo, hi = r.replicas_low, r.replicas_high
    if lo is None:
        return "-"
    if hi is None:
        return f"{lo:,}–(none fits)"
    return f"{lo:,}" if lo == hi else f"{lo:,}–{hi:,}"


def fleet_table(
    model: str, workload, rows, con, show_all: bool = False, sort: str = "gpus", speed: bool = False
) -> None:
    """Print the ranked layouts (the best per GPU marked ★ and bold, with why it wins); say plainly what cannot
    fit.

    Without ``show_all`` only the best layout of each GPU is listed. With ``speed`` (a latency target was
    given), or when a limit other than memory sets some layout's replicas, the limit column; with ``speed``
    also the TPOT and TTFT figures (the physical limit and the estimate the replicas are sized with),
    tokens/s per GPU and $ per million output tokens.
    """
    from rich.table import Table

    def target(c) -> str:
        parts = [f"TPOT <= {c.tpot_ms:g} ms" if c.tpot_ms is not None else "",
                 f"TTFT <= {c.ttft_ms:g} ms" if c.ttft_ms is not None else ""]  # fmt: skip
        return f" [{', '.join(p for p in parts if p)}]" if any(parts) else ""

    classes = ", ".join(
        f"{c.name}: {c.concurrency:,} × {fmt_tokens(c.tokens)}"
        + (f" (shared prefix {fmt_tokens(c.shared_prefix)})" if c.shared_prefix else "")
        + target(c)
        for c in workload.classes
    )
    con.print(f"{model}, workload {workload.name}: {classes}")
    con.print("Concurrency is total across the fleet; a replica is one engine deployment serving whole requests.")
    fits = [r for r in rows if r.fits and (show_all or r.best_for_gpu)]
    t = Table()
    limits = not speed and any(r.limit != "memory" for r in fits)  # with speed: in the second table
    cols = [
        ("#", "right"),
        ("GPU", "left"),
        ("layout", "left"),
        ("replicas × GPUs", "right"),
        ("GPUs", "right"),
        ("KV GiB/GPU", "right"),
        ("replicas over\nthe budget range", "right"),
        ("requests/replica\nmax / mean", "right"),
        ("KV used", "right"),
        ("$/hour", "right"),
    ]
    if limits:
        cols.append(("limit", "left"))
    for col, just in cols:
        t.add_column(col, justify=just, no_wrap=True)

    def num(x: float | None, fmt: str) -> str:
        return "-" if x is None else fmt.format(x)

    st = Table(title="Speed at requests/replica (kvplan.perf): limit (no system is faster) / estimate (sized with); "
                     "each the largest over the row's replicas", title_justify="left")  # fmt: skip
    for col in ("#", "GPU", "layout", "limit", "max requests/group", "TPOT ms", "TTFT ms", "tok/s/GPU", "$/M tokens"):
        st.add_column(col, justify="left" if col in ("GPU", "limit", "layout") else "right", no_wrap=True)
    for i, r in enumerate(fits, 1):
        cost = "-" if r.cost_usd_per_hour is None else f"{r.cost_usd_per_hour:,.2f}"
        cells = [
            f"{i}{' ★' if r.best_for_gpu else ''}",
            r.gpu,
            r.layout or f"TP {r.tensor_parallel_size}",
            f"{r.replicas:,} × {r.gpus_per_replica}",
            f"{r.gpus:,}",
            ("" if _fleet_exact(r) else "≈ ") + f"{r.kv_budget_bytes_per_gpu / GIB:,.2f}",
            _replica_range(r),
            f"{r.requests_per_replica:,} / {_num_cell(r.requests_per_replica_mean, '{:,.1f}')}",
            f"{r.kv_utilization:.0%}",
            cost,
        ]
        if limits:
            cells.append(r.limit)
        t.add_row(*cells, style="bold" if (r.best_for_gpu and show_all) else None)

        def pair(a, b, fmt):
            return "-" if a is None else f"{fmt.format(a)} / {fmt.format(b)}"

        st.add_row(
            cells[0],
            r.gpu,
            cells[2],
            r.limit,
            num(r.max_requests_per_replica, "{:,}"),
            pair(r.tpot_ms_limit, r.tpot_ms_estimate, "{:,.1f}"),
            pair(r.ttft_ms_limit, r.ttft_ms_estimate, "{:,.0f}"),
            num(r.output_tokens_per_s_per_gpu, "{:,.0f}"),
            num(r.usd_per_million_output_tokens, "{:,.3f}"),
        )
    if fits:
        con.print(t)
        if speed:
            con.print(st)
            if len(workload.classes) > 1:  # each class against its own targets: the best rows
                for i, r in enumerate(fits, 1):
                    if r.best_for_gpu and r.class_speed:
                        own = "; ".join(_class_speed(c) for c in r.class_speed)
                        con.print(f"  {i} {r.gpu}, {r.layout}, per class: {own}")
        if not show_all:
            low = "" if all(_fleet_exact(r) for r in fits) else ", also at the budget range's low end"
            order = f"lowest cost, then fewest GPUs{low}" if sort == "cost" else f"fewest GPUs{low}, then cost"
            con.print(f"★ the best layout of each GPU ({order}); --all lists every layout.")
        for i, r in enumerate(fits, 1):
            if r.best_for_gpu:
                flags = f" [{r.parallel_flags}]" if r.parallel_flags else ""
                con.print(f"  {i} {r.gpu}, {r.layout}{flags}: {r.why}")
                for note in r.load_notes:
                    con.print(f"    note: {note}")
        if not all(_fleet_exact(r) for r in fits):
            con.print(
                "≈: the KV budget is modelled; the replicas are given at both ends of its range (its modelled terms "
                "at the extremes measured on public engine logs, docs/budget-validation.md). Exact: --kv-cache-memory "
                "with the engine's printed budget."
            )
    by_gpu: dict[str, list] = {}
    for r in rows:
        by_gpu.setdefault(r.gpu, []).append(r)
    never = [g for g, rs in by_gpu.items() if not any(r.fits for r in rs)]
    weights_only = [g for g in never if all("no KV memory" in r.reason for r in by_gpu[g])]
    why = {g: _never_reason(by_gpu[g]) for g in never if g not in weights_only}
    if len(why) > 1 and len(set(why.values())) == 1:  # one problem, every GPU: said once
        con.print(f"No GPU tried can serve this workload at any layout ({', '.join(why)}): {next(iter(why.values()))}")
    else:
        for g, reason in why.items():
            tried = ", ".join(dict.fromkeys(r.layout or f"TP {r.tensor_parallel_size}" for r in by_gpu[g]))
            con.print(f"{g}: cannot serve this workload at any layout tried ({tried}): {reason}")
    if weights_only:
        con.print(f"Weights and activations leave no KV memory at any layout tried: {', '.join(weights_only)}")
    if not any(r.price_usd_per_hour is not None for r in rows):
        con.print("No prices: give --price GPU=USD_PER_HOUR for costs.")
    if speed:
        from kvplan.perf import estimate_error_text

        con.print(
            "TPOT and TTFT: the physical limit (MBU = MFU = 1: no system is faster) / the estimate (calibrated, "
            f"{estimate_error_text()}; docs/throughput-validation.md); tok/s/GPU from the estimate; limit: what "
            "sets the replicas (memory, SLO, max_num_seqs)."
        )
        if len(workload.classes) > 1:
            con.print(
                "Each speed figure of a row is the largest over its replicas, which can hold different classes: max "
                "requests/group is the class with the highest cap, each TPOT figure its slowest replica, TTFT the "
                "longest prompt; 'per class' gives each class's own, and --json each row's class_speed."
            )


def _class_speed(c) -> str:
    """One class's own figures on a row: ``chat: 14 requests/group (cap 14), TPOT 6.3 / 19.9 ms (target 20), TTFT
    148 / 393 ms``: limit / estimate, its slowest group's TPOT and its own prompt's TTFT."""
    cap = "" if c.max_requests_per_group is None else f" (cap {c.max_requests_per_group:,})"
    text = f"{c.name}: {c.requests_per_group:,} requests/group{cap}"
    if c.tpot_ms_estimate is not None:
        target = "" if c.tpot_ms_target is None else f" (target {c.tpot_ms_target:g})"
        text += f", TPOT {c.tpot_ms_limit:,.1f} / {c.tpot_ms_estimate:,.1f} ms{target}"
    if c.ttft_ms_estimate is not None:
        target = "" if c.ttft_ms_target is None else f" (target {c.ttft_ms_target:g})"
        text += f", TTFT {c.ttft_ms_limit:,.0f} / {c.ttft_ms_estimate:,.0f} ms{target}"
    return text


def _never_reason(rows) -> str:
    """Why none of one GPU's layouts can serve a workload: the last planned layout's reason (its KV budget
    known: the one closest to fitting), then each reason a layout was refused or could not be planned for
    once, with the layouts it applies to (the reason alone when it is the only one)."""
    real = [r for r in rows if "no KV memory" not in r.reason] or rows
    planned = [r for r in real if r.kv_budget_bytes_per_gpu > 0]
    refused: dict[str, list[str]] = {}
    for r in real:
        if r.kv_budget_bytes_per_gpu <= 0:
            refused.setdefault(r.reason, []).append(r.layout or f"TP {r.tensor_parallel_size}")
    if not planned and len(refused) == 1:
        return next(iter(refused))
    parts = [planned[-1].reason] if planned else []
    parts += [f"{', '.join(dict.fromkeys(names))}: {reason}" for reason, names in refused.items()]
    return "; ".join(parts)


def disaggregated_json(model: str, workload, plan) -> dict[str, Any]:
    """JSON of :class:`kvplan.fleet.DisaggregatedPlan`: both pools (every row, best first), the KV transfer per
    class, the totals, and the aggregated plan's best row."""
    return {
        "model": model,
        "workload": to_jsonable(workload),
        "concurrency_is": "total across the fleet",
        "gpus": plan.gpus,
        "cost_usd_per_hour": plan.cost_usd_per_hour,
        "kv_link_gbs": plan.link_gbs,
        "kv_transfer": [to_jsonable(t) for t in plan.transfers],
        "prefill": [to_jsonable(r) for r in plan.prefill],
        "decode": [fleet_row_dict(r) for r in plan.decode],
        "aggregated": None if plan.aggregated is None else fleet_row_dict(plan.aggregated),
    }


def disaggregated_table(model: str, workload, plan, con) -> None:
    """Print a disaggregated plan: the best prefill and decode pools, the KV each request hands over, and the
    aggregated plan of the same workload beside them."""
    con.print(f"{model}, workload {workload.name}: prefill and decode on separate pools")
    pre = next((r for r in plan.prefill if r.fits), None)
    dec = next((r for r in plan.decode if r.fits), None)

    def cost(x):
        return "" if x is None else f", ${x:,.2f}/hour"

    if pre is not None:
        con.print(
            f"prefill: {pre.replicas:,} × {pre.replica_gpus} {pre.gpu} ({pre.layout}) = {pre.gpus:,} GPUs"
            f"{cost(pre.cost_usd_per_hour)}: {pre.prompt_tokens_per_s_needed:,.0f} prompt tokens/s needed, "
            f"{pre.prompt_tokens_per_s_per_replica:,.0f} per replica (estimate), utilization {pre.utilization:.0%}; "
            f"TTFT ~{pre.ttft_ms_estimate:,.0f} ms for the longest prompt incl. KV transfer "
            f"{pre.kv_transfer_ms:,.1f} ms"
        )
    else:
        reason = plan.prefill[0].reason if plan.prefill else "no decode pool to feed"
        con.print(f"prefill: no layout tried can serve the prompts: {reason}")
    if dec is not None:
        unit = "group" if dec.data_parallel_size > 1 else "replica"

        def own(c) -> str:  # one class's figures: its groups' batch and their slowest step
            tpot = "" if c.tpot_ms_estimate is None else f", TPOT ~{c.tpot_ms_estimate:,.1f} ms (estimate)"
            return f"class {c.name}: in {unit}s of up to {c.requests_in_group:,} requests{tpot}"

        con.print(
            f"decode:  {dec.replicas:,} × {dec.gpus_per_replica} {dec.gpu} ({dec.layout}) = {dec.gpus:,} GPUs"
            f"{cost(dec.cost_usd_per_hour)}: limit {dec.limit}, " + "; ".join(own(c) for c in dec.class_speed)
        )
    else:
        con.print(f"decode: no layout tried can serve the workload: {plan.decode[0].reason if plan.decode else '-'}")
    for x in plan.transfers:
        con.print(
            f"  KV transfer, class {x.klass}: {x.bytes_per_request:,} B per request ({fmt_gib(x.bytes_per_request)}; "
            f"{x.prompt_tokens:,}-token prompt), {x.bytes_per_gpu:,} B on the fullest GPU = {x.transfer_ms:,.2f} ms at "
            f"{plan.link_gbs:g} GB/s; {x.requests_per_s:,.1f} requests/s = {x.gbs_total:,.2f} GB/s in all"
        )
    if plan.gpus:
        con.print(f"total: {plan.gpus:,} GPUs{cost(plan.cost_usd_per_hour)}")
    agg = plan.aggregated
    if agg is not None:
        con.print(
            f"aggregated (same workload and targets): {agg.replicas:,} × {agg.gpus_per_replica} {agg.gpu} "
            f"({agg.layout}) "
            f"= {agg.gpus:,} GPUs{cost(agg.cost_usd_per_hour)}, limit {agg.limit}"
        )
    else:
        con.print("aggregated (same workload and targets): no layout tried can serve it")
    from kvplan.perf import estimate_error_text

    con.print(
        f"Sizing uses the speed estimate (kvplan.perf; {estimate_error_text()}); prompt rates from Little's law on "
        "the decode plan; no queueing headroom: a pool at utilization 1 is full."
    )


# --- sweep -----------------------------------------------------------------------------------------

SWEEP_TABLE_ROWS = 200  # rows a sweep table prints unless --all


def sweep_csv(rows: Any, file: TextIO | None = None) -> None:
    """Sweep rows (an iterable of dicts) as CSV, streamed; header = the keys of the first row; string cells
    through :func:`csv_cell` (a model named ``=HYPERLINK(...)`` is written ``'=HYPERLINK(...)``)."""
    import csv

    out = file or sys.stdout
    w = csv.writer(out, lineterminator="\n")
    for i, r in enumerate(rows):
        if i == 0:
            w.writerow(list(r))
        w.writerow([csv_cell(v) for v in r.values()])


def sweep_json(rows: Any, file: TextIO | None = None) -> None:
    """Sweep rows (an iterable of dicts) as one JSON list, one object per line, streamed (bytes as integers)."""
    import json

    out = file or sys.stdout
    out.write("[")
    sep = "\n  "
    for r in rows:
        out.write(sep + json.dumps(r))
        sep = ",\n  "
    out.write("\n]\n")


def print_simple_head_table(con, title: str, columns, cells) -> bool:
    """Print a table as rich prints ``Table(box=box.SIMPLE_HEAD, padding=0, pad_edge=False)`` with no-wrap
    columns, title on its own line, when it fits the console's width (always, piped), and return True;
    else print nothing and return False (the caller lets rich shrink the columns to the terminal).

    rich lays out, measures and renders every cell as a segment list (8,000 sweep rows: ~8 s); here each row
    is one joined string. The lines: a blank edge, the header (multi-line headers bottom-aligned, bold on a
    terminal), a rule of ``─``, the rows, a blank edge; cells justified per column, widths in terminal
    cells (``rich.cells.cell_len``: wide characters count 2), one space between and around columns.

    Args:
        columns: (header, ``left`` or ``right``) per column; a header may hold ``\\n``.
        cells: rows of str, one per column.
    """
    from rich.cells import cell_len
    from rich.text import Text

    heads = [h.split("\n") for h, _ in columns]
    widths = [max(cell_len(line) for line in h) for h in heads]
    for row in cells:
        for i, cell in enumerate(row):
            n = cell_len(cell)
            if n > widths[i]:
                widths[i] = n
    total = sum(widths) + len(widths) + 1
    if total > con.width:
        return False
    right = [just == "right" for _, just in columns]

    def line(row) -> str:
        parts = []
        for cell, w, r in zip(row, widths, right, strict=True):
            pad = " " * (w - cell_len(cell))
            parts.append(pad + cell if r else cell + pad)
        return " " + " ".join(parts) + " "

    depth = max(len(h) for h in heads)
    padded = [[""] * (depth - len(h)) + h for h in heads]  # bottom-aligned, as rich aligns header cells
    header = [line([p[k] for p in padded]) for k in range(depth)]
    con.print(Text(title, style="table.title"), soft_wrap=True)
    blank = " " * total
    con.print(blank, soft_wrap=True)
    for h in header:
        con.print(Text(h, style="table.header"), soft_wrap=True)
    body = [" " + "─" * (total - 2) + " ", *(line(row) for row in cells), blank]
    con.print(Text("\n".join(body)), soft_wrap=True)
    return True


def sweep_table(
    rows: list[dict[str, Any]], total_rows: int, engine: str, block_size: int, con, block_sizes: Any = None
) -> None:
    """Print sweep rows (already limited by the caller; keys of ``kvplan.sweep.TABLE_COLUMNS``); the title
    says how many rows the sweep has. GiB = 2^30 B, three decimals; CSV and JSON carry the exact bytes.
    ``block_sizes`` (every row's block size) makes the title list the sizes when they differ (hybrid models
    align their blocks to their state pages); else it says ``blocks of block_size``.

    The concurrency column is ``kvplan fit``'s "Maximum concurrency" (:func:`concurrency_figure`: kvplan's own
    ratio, cut, never rounded up, to two decimals; vLLM's null block left out, so 6.99 sits beside 6 whole
    requests where vLLM's log says 7.00). Under vLLM the token column is the start-up log's "GPU KV cache size"
    = int(vLLM's concurrency × seq), which grows with --seq; a caption says so. Under the other engines the
    tokens are the pool's (blocks × block size)."""
    from rich.table import Table

    shown = f", first {len(rows):,} shown" if len(rows) < total_rows else ""
    sizes = sorted({int(b) for b in block_sizes}) if block_sizes is not None and len(block_sizes) else [block_size]
    blocks = (
        f"blocks of {fmt_tokens(sizes[0])}"
        if len(sizes) == 1
        else f"engine block sizes {', '.join(f'{b:,}' for b in sizes)} tokens (per model)"
    )
    title = f"sweep: {plural(total_rows, 'configuration')}, {engine} convention, {blocks}{shown}"
    vllm = engine == "vllm"
    columns = (
        ("model", "left"),
        ("seq", "right"),
        ("gpu", "left"),
        ("KV\ndtype", "left"),
        ("TP", "right"),
        ("KV budget\nGiB/GPU", "right"),
        ("KV/request\nGiB/GPU", "right"),
        ("whole\nrequests", "right"),
        ("limit", "left"),
        ("concurrency\n(cut)", "right"),
        ("vLLM log KV\ncache tokens" if vllm else "pool\ntokens", "right"),
        ("fits", "left"),
    )
    cells = [
        (
            r["model"],
            f"{r['seq']:,}",
            r["gpu_short"],
            r["kv_dtype"],
            str(r["tp"]),
            f"{r['kv_budget_bytes'] / GIB:,.3f}",
            f"{r['kv_bytes_per_request'] / GIB:,.3f}",
            f"{r['max_concurrent_requests']:,}",
            r.get("limit", "memory"),
            f"{concurrency_figure(r['max_concurrency'])}x",
            f"{r['kv_capacity_tokens']:,}",
            "yes" if r["fits"] else "no",
        )
        for r in rows
    ]
    if not print_simple_head_table(con, title, columns, cells):
        from rich import box

        t = Table(title=title, title_justify="left", box=box.SIMPLE_HEAD, padding=0, pad_edge=False)
        for col, just in columns:
            t.add_column(col, justify=just, no_wrap=True)
        for row in cells:
            t.add_row(*row)
        con.print(t)
    if vllm:
        con.print(
            "concurrency: kvplan fit's \"Maximum concurrency\" (the null block left out; vLLM's log rounds its own, "
            'the null block counted); vLLM log KV cache tokens: "GPU KV cache size" = int(vLLM\'s concurrency × seq) '
            "(kv_cache_utils.py get_kv_cache_capacity), not the tokens of context that fit; whole requests: what "
            "fits; limit: what sets them (memory, or the engine's max_num_seqs)"
        )


# --- verify ----------------------------------------------------------------------------------------


def verify_progress():
    """A rich progress display on stderr and its ``callback(stage, done, total)`` for kvplan.verify."""
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    bar = Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=Console(stderr=True),
        transient=True,
        auto_refresh=False,  # redraw only in the callback: no thread allocating while memory is measured
    )
    tasks: dict = {}

    def callback(stage: str, done: int, total: int) -> None:
        if not bar.console.is_terminal:  # nothing to animate in a pipe or a file
            return
        if not bar.live.is_started:  # started on first use: flag errors leave the terminal untouched
            bar.start()
        if stage not in tasks:
            tasks[stage] = bar.add_task(stage, total=total)
        bar.update(tasks[stage], completed=done, total=total)
        bar.refresh()

    return bar, callback


def verify_table(r, con) -> None:
    """Print a verify result: formula vs measured bytes, then the attention and decode checks."""
    from rich.table import Table

    from kvplan.units import fmt_tokens

    title = (
        f"{r.model}: KV cache of {fmt_tokens(r.seq_len)} × {r.batch_size} request(s), {r.kv_dtype}, "
        f"{r.layers} layer(s), on {r.device_name}"
    )
    t = Table(title=title, title_justify="left")
    for col, just in (("", "left"), ("bytes", "right"), ("GiB", "right"), ("GB", "right"), ("note", "left")):
        t.add_column(col, justify=just, no_wrap=col != "note")

    def row(label: str, n: int, note: str = "") -> None:
        b, gi, gd = size_cells(n)
        t.add_row(label, b, gi, gd, note)

    row("formula (kvplan.calc)", r.formula_bytes, f"{r.num_tensors} tensors")
    row("measured", r.measured_bytes, r.measure)
    if r.reserved_bytes is not None:
        row("reserved (caching allocator)", r.reserved_bytes, "torch.cuda.memory_reserved delta")
    if r.driver_bytes is not None:
        row("used, as the driver sees it", r.driver_bytes, "torch.cuda.mem_get_info delta")
    t.add_section()
    t.add_row("difference", f"{r.diff_bytes:+,}", "", "", f"{r.diff_pct:+.4f} % of the formula")
    per = r.tolerance_bytes // r.num_tensors if r.num_tensors else 0
    t.add_row("tolerance", f"{r.tolerance_bytes:,}", "", "", f"allocator rounding: {per:,} B × {r.num_tensors} tensors")
    if r.fit_requests is not None:
        t.add_section()
        row("fit: KV budget", r.fit_kv_budget_bytes, f"{r.fit_engine} plan on {r.fit_gpu}: {r.fit_requests} request(s)")
        row("fit: requests, every layer", r.fit_formula_bytes, "must be within the budget")
    con.print(t)
    if r.attention_ok is None:
        con.print("attention vs SDPA: not run (no attention layer among those allocated)")
    else:
        verdict = "ok" if r.attention_ok else "MISMATCH"
        con.print(
            f"attention vs fp32 SDPA: max |err| {r.attention_max_abs_err:.3e} over {len(r.attention_checks)} "
            f"layer check(s): {verdict}"
        )
    for note in r.attention_checks:
        con.print(f"  {note}")
    if getattr(r, "readback_ok", None) is not None:
        con.print(
            f"read-back (state updates, indexer keys, shared storage, packed values within their bound): "
            f"{'ok' if r.readback_ok else 'MISMATCH'}"
        )
    for index, allocated, formula in getattr(r, "mismatched_layers", ()):
        con.print(f"layer {index}: allocated {allocated:,} B but the formula gives {formula:,} B: MISMATCH")
    con.print(
        f"decode: {r.decode_alloc_bytes:,} B of new cache memory (storage addresses and bytes unchanged)"
        if r.decode_alloc_bytes == 0
        else f"decode: allocated {r.decode_alloc_bytes:,} B of cache memory: MISMATCH"
    )
    con.print(f"attention transient peak: {r.transient_peak_bytes:,} B ({fmt_mib(r.transient_peak_bytes)})")
    con.print(f"verify: {'OK' if r.ok else 'MISMATCH'} ({r.seconds:.1f} s)")


# --- fit --from-log -----------------------------------------------------------------------------------------

_MARKS = {"reproduced": "✓ reproduced", "differs": "✗ differs", "budget": "= the budget", "input": "setting",
          "read": "read", "not modelled": "not modelled"}  # fmt: skip
_ENGINE_NAMES = {"vllm": "vLLM", "sglang": "SGLang", "trtllm": "TensorRT-LLM", "llamacpp": "llama.cpp"}


def _cell(x) -> str:
    if x is None:
        return "-"
    if isinstance(x, bool):
        return str(x)
    if isinstance(x, int):
        return f"{x:,}"
    if isinstance(x, float):
        return f"{x:g}"
    if isinstance(x, (list, tuple)):
        return ", ".join(_cell(v) for v in x)
    return str(x)


def _setting_value(key: str, value) -> str:
    if key == "kv_dtype" and value is None:
        return "auto"
    return _cell(value)


def from_log_header(rep) -> list[str]:
    """What kvplan read from the log: engine and version, model, GPU, settings (each with where it came from),
    and the KV budget."""
    r = rep.reading
    name = _ENGINE_NAMES.get(r.engine, r.engine)
    gen = f" {r.generation.upper()} engine," if r.generation else ""
    version = f" {r.version}" if r.version else ""
    how = f" ({r.version_source})" if r.version_source else " (version not in the log)"
    lines = [f"{rep.source}: {name}{version} start-up log,{gen} {r.matched:,} of {r.lines:,} lines read{how}"]
    lines.append(f"  model:    {rep.spec.name} ({rep.model_source})")
    gpu = rep.gpu.name if rep.gpu.vendor != "custom" else "a GPU of"
    lines.append(f"  GPU:      {gpu} {fmt_gib(rep.gpu.cuda_total_bytes)} ({rep.gpu_source})")
    shown = []
    for key, (value, where) in rep.settings.items():
        if key in ("swap_space",):
            continue
        if key == "engine_version" and where.startswith("log ("):
            where = "the log's version"
        shown.append(f"{key} {_setting_value(key, value)} ({where})")
    lines.append("  settings: " + "; ".join(shown))
    res = rep.result
    asked = res.engine_version_asked
    for_asked = f" (for {asked})" if asked and asked != res.engine_version else ""
    lines.append(f"  rules:    {res.engine_rules}{for_asked}")
    gib = fmt_gib(max(rep.budget_bytes, 0))
    lines.append(f"  KV budget per GPU: {rep.budget_bytes:,} B = {gib}, from {rep.budget_source}")
    for note in rep.notes:
        lines.append(f"  note: {note}")
    return lines


def from_log_table(rep, con) -> None:
    """Print a reproduced log: what was read, every printed figure beside kvplan's, kvplan's plan on the
    log's budget, and the what-if plan when what-if flags were given."""
    from rich.table import Table
    from rich.text import Text

    for line in from_log_header(rep):
        con.print(line, highlight=False, markup=False)
    t = Table(title="The engine's figures and kvplan's", title_justify="left")
    for col, just in (("figure", "left"), ("engine printed", "right"), ("kvplan", "right"), ("", "left"),
                      ("how", "left")):  # fmt: skip
        t.add_column(col, justify=just, no_wrap=col != "how")
    order = {"differs": 0, "reproduced": 1, "budget": 2, "input": 3, "not modelled": 4, "read": 5}
    for f in sorted(rep.figures, key=lambda f: order.get(f.status, 9)):
        t.add_row(*(Text(x) for x in (f.label, _cell(f.printed), _cell(f.kvplan), _MARKS.get(f.status, f.status),
                                      f.how)))  # fmt: skip
    con.print(t)
    computed = [f for f in rep.figures if f.status in ("reproduced", "differs")]
    n_ok = sum(f.status == "reproduced" for f in computed)
    read = sum(f.status == "read" for f in rep.figures)
    summary = f"Reproduced {n_ok} of the {plural(len(computed), 'figure')} kvplan computes"
    extra = []
    if any(f.status == "budget" for f in rep.figures):
        extra.append("the budget was taken from one more")
    if read:
        extra.append(f"{plural(read, 'figure')} the engine measured, shown as read")
    con.print(summary + (f" ({'; '.join(extra)})" if extra else "") + ".", highlight=False, markup=False)
    planned = (
        "this budget" if rep.plan_budget_bytes is None else f"the smallest worker's budget, {rep.planned_budget:,} B"
    )
    con.print(f"kvplan's plan on {planned} ({fmt_gib(max(rep.planned_budget, 0))} per GPU):", highlight=False)
    for line in fit_lines(rep.result):
        con.print(f"  {line}", highlight=False, markup=False)
    if rep.what_if is not None:
        changes = ", ".join(f"{_flag(k)} {_setting_value(k, new)} (the log: {_setting_value(k, old)})"
                            for k, old, new in rep.what_if_changes)  # fmt: skip
        con.print(f"What if {changes}: KV budget {fmt_gib(rep.what_if_budget)} per GPU", highlight=False,
                  markup=False)  # fmt: skip
        for note in rep.what_if_notes:
            con.print(f"  note: {note}", highlight=False, markup=False)
        for line in fit_lines(rep.what_if):
            con.print(f"  {line}", highlight=False, markup=False)


def _flag(key: str) -> str:
    from kvplan.fromlog import FLAG_NAMES

    return FLAG_NAMES.get(key, key)


def from_log_json(rep) -> dict[str, Any]:
    """JSON of a reproduced log: the reading, the settings (value and source), the budget, every figure beside
    kvplan's, kvplan's plan on the budget (:func:`fit_json`) and the what-if plan (or null)."""
    r = rep.reading
    d: dict[str, Any] = {
        "source": rep.source,
        "engine": r.engine,
        "generation": r.generation,
        "version": r.version,
        "version_source": r.version_source,
        "model": rep.spec.name,
        "model_source": rep.model_source,
        "gpu": rep.gpu.name,
        "gpu_total_bytes": rep.gpu.cuda_total_bytes,
        "gpu_source": rep.gpu_source,
        "settings": {k: {"value": v, "from": w} for k, (v, w) in rep.settings.items()},
        "budget_bytes": rep.budget_bytes,
        "plan_budget_bytes": rep.planned_budget,
        "budget_range": list(rep.budget_range),
        "budget_source": rep.budget_source,
        "figures": [to_jsonable(f) for f in rep.figures],
        "reproduced": sum(f.status == "reproduced" for f in rep.figures),
        "differs": sum(f.status == "differs" for f in rep.figures),
        "notes": list(rep.notes),
        "plan": fit_json(rep.result),
        "what_if": None,
        "reading": {
            "printed": r.printed,
            "per_worker": r.per_worker,
            "settings": r.settings,
            "model_id": r.model_id,
            "missing": r.missing,
            "lines": r.lines,
            "matched": r.matched,
        },  # fmt: skip
    }
    if rep.what_if is not None:
        d["what_if"] = {
            "changes": [
                {"setting": k, "flag": _flag(k), "log": old, "new": new} for k, old, new in rep.what_if_changes
            ],
            "budget_bytes": rep.what_if_budget,
            "notes": list(rep.what_if_notes),
            "plan": fit_json(rep.what_if),
        }
    return d
