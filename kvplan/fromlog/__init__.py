"""``kvplan fit --from-log FILE``: an engine's own start-up log as the input of a plan.

From the log (:func:`kvplan.logs.read_log`) to a plan, in four steps:

1. the model (the ``MODEL`` argument, else the log's model id: a bundled model's ``hf_repo`` or name, or a
   config in the local Hugging Face cache), the GPU (a GPU of exactly the total the log prints, else its
   name, else none), the settings the log states (:func:`options`) and the engine version's rule set;
2. the KV budget per GPU, by the most exact figure the log prints: the exact bytes when printed (vLLM's
   ``Current kv cache memory in use is N bytes``, ``--kv-cache-memory=N``); else the smallest budget that
   gives the printed count (tokens, blocks, cells) under the version's rules (:func:`budget_range`: the
   budgets giving that count form a range, and the engine's rounded GiB figure must fall in it); else the GiB
   figure itself (rounded to 0.01 GiB: a range of budgets);
3. every figure the engine printed, recomputed from that budget and compared (:class:`LogFigure`): tokens,
   blocks, concurrency, the longest request, K and V sizes; what the engine measured (weights, activation,
   graphs, free memory) is shown as read;
4. what-ifs on the same budget (:func:`what_if`): another max_model_len, KV dtype, max_num_seqs, TP (the
   weights re-split: the budget changes by the difference in weights per GPU; the rest of the engine's
   fixed memory is kept as the log's).

Settings the log does not state are taken from the flags given when the figures need them or agree with them
(then they are part of the reproduction); a flag under which the figures no longer reproduce, when they do
without it, is a what-if on the log's reading, its layout kept (:func:`_what_ifs_on_the_reading`); else kvplan's
default. The plan is counted on the budget the engine plans on (vLLM: the worker with the fewest blocks). TP
and the KV dtype, when neither the log nor the flags state them, are
the ones under which the printed figures reproduce (tried: the TPs the model's heads allow up to 8, the
model's dtype and FP8), and the output says so. The engine-specific parts (which settings, which figures,
how each is computed) are in this package's modules, one per engine, calling the rules of
:mod:`kvplan.engines`.

Nothing here prints; the CLI renders (:func:`kvplan.render.from_log_table`, :func:`kvplan.render.from_log_json`).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from importlib import import_module
from pathlib import Path
from typing import Any

from kvplan.errors import UsageError
from kvplan.units import GIB

MAX_LOG_BYTES = 64 << 20
SEARCH_BYTES = 1 << 50  # the largest budget the inversion searches (1 PiB per GPU)

# statuses of a figure
REPRODUCED = "reproduced"  # kvplan computes the engine's figure from the budget and they agree
DIFFERS = "differs"  # kvplan computes it and gets another value
BUDGET = "budget"  # the figure the budget was taken from (agrees by construction)
INPUT = "input"  # a setting or the model's own figure, printed back
READ = "read"  # measured by the engine (weights, activation, graphs, free memory): kvplan does not compute it
NOT_MODELLED = "not modelled"  # an engine figure kvplan has no rule for (named in the reason)


@dataclass
class LogFigure:
    """One figure the engine printed, beside kvplan's.

    Attributes:
        key: the figure's name (the corpus's ``printed`` key: ``kv_tokens``, ``max_concurrency`` ...).
        label: how the engine calls it.
        printed: the engine's value as printed.
        kvplan: kvplan's value (None when kvplan does not compute it).
        status: :data:`REPRODUCED`, :data:`DIFFERS`, :data:`BUDGET`, :data:`INPUT`, :data:`READ` or
            :data:`NOT_MODELLED`.
        how: how kvplan got its value, or why it has none.
    """

    key: str
    label: str
    printed: Any
    kvplan: Any = None
    status: str = READ
    how: str = ""


@dataclass
class Reproduction:
    """A start-up log read, its plan reproduced, and the what-ifs planned on the same budget.

    Attributes:
        reading: the :class:`kvplan.logs.LogReading`.
        source: the file (for messages).
        spec: the model; ``model_source`` says where it came from.
        gpu: the GPU; ``gpu_source`` says where it came from.
        opts: the plan's :class:`kvplan.options.FitOptions` (the log's settings, the budget given).
        settings: ``{name: (value, where from)}`` of the settings the plan used: ``log``, ``flag``,
            ``figures`` (inferred: the printed figures reproduce only with it), ``default``.
        budget_bytes: the KV budget per GPU, B; ``budget_range`` the budgets the printed figures allow
            (lo, hi), ``budget_source`` which figure gave it.
        result: the :class:`kvplan.fit.FitResult` at the log's settings and budget.
        figures: every printed figure, beside kvplan's (:class:`LogFigure`).
        what_if: the plan with the what-if flags on the same budget (None without such flags), its
            ``what_if_changes`` (flag, old, new) and ``what_if_budget`` (bytes) and ``what_if_notes``.
        notes: what the reproduction assumed or noticed.
        plan_budget_bytes: the budget ``result`` is counted on when the engine plans on another than
            ``budget_bytes`` (vLLM: the worker with the fewest blocks), else None (:attr:`planned_budget`).
    """

    reading: Any
    source: str
    spec: Any
    model_source: str
    gpu: Any
    gpu_source: str
    opts: Any
    settings: dict
    budget_bytes: int
    budget_range: tuple
    budget_source: str
    result: Any
    figures: list
    what_if: Any = None
    what_if_changes: list = field(default_factory=list)
    what_if_budget: int | None = None
    what_if_notes: list = field(default_factory=list)
    notes: list = field(default_factory=list)
    plan_budget_bytes: int | None = None

    @property
    def planned_budget(self) -> int:
        """The KV budget per GPU the plan (``result``) and the what-ifs are counted on, B: ``budget_bytes``, or
        the engine's own choice among its workers' budgets (vLLM: the fewest blocks)."""
        return self.budget_bytes if self.plan_budget_bytes is None else self.plan_budget_bytes

    @property
    def reproduced(self) -> list:
        return [f for f in self.figures if f.status == REPRODUCED]

    @property
    def differing(self) -> list:
        return [f for f in self.figures if f.status == DIFFERS]


# --- reading the file ---------------------------------------------------------------------------------


def read_log_file(path: str | Path) -> str:
    """The text of a log file: a regular file of at most :data:`MAX_LOG_BYTES` (64 MiB), bytes that are not
    UTF-8 replaced. A FIFO, a device (``/dev/zero``) or a socket is refused before it is opened, as model and
    workload inputs are (:func:`kvplan.textio.read_text`): a FIFO would block, a device never end.

    Raises:
        UsageError: no such file, a directory, not a regular file, too large, unreadable.
    """
    p = Path(path)
    where = f"--from-log {path}"
    try:
        if p.is_dir():
            raise UsageError(f"{where}: is a directory, not a log file")
        if not p.exists():
            raise UsageError(f"{where}: no such file")
        if not p.is_file():
            raise UsageError(f"{where}: not a regular file")
        too_big = f"{where}: larger than {MAX_LOG_BYTES >> 20} MiB; give the start-up part of the log"
        if p.stat().st_size > MAX_LOG_BYTES:
            raise UsageError(too_big)
        with p.open("rb") as f:
            data = f.read(MAX_LOG_BYTES + 1)
        if len(data) > MAX_LOG_BYTES:  # grew since stat: never more than the cap
            raise UsageError(too_big)
    except OSError as e:
        raise UsageError(f"{where}: cannot read ({e.strerror or type(e).__name__})") from None
    return data.decode("utf-8", errors="replace")


# --- model and GPU -----------------------------------------------------------------------------------------


def model_from_id(model_id: str):
    """(spec, how) of the model a log names: a Hugging Face repo id resolved as MODEL is
    (:func:`kvplan.loader.load_model`: a bundled model's ``hf_repo``, the local Hugging Face cache, a known tune of
    a bundled base with the warning that says so in ``spec.warnings``, the Hub), else (a local path, or an id none
    of those has) the bundled model named as its last path component; None when neither has it."""
    from kvplan.errors import SpecError
    from kvplan.loader import bundled_names, load_bundled, load_model
    from kvplan.readers.hub import bundled_name, is_repo_id, tune_base

    text = model_id.strip().rstrip("/")
    if is_repo_id(text):
        try:
            spec = load_model(text)
        except SpecError:
            spec = None
        if spec is not None:
            name = bundled_name(text)
            if name is not None:
                return spec, f"the log's model {text} (bundled as {name}, its hf_repo)"
            if tune_base(text) is not None and spec.warnings:
                return spec, f"the log's model {text}, read as MODEL is: bundled {tune_base(text)[0]}'s geometry"
            return spec, f"the log's model {text}, read as MODEL is: its config.json"
    base = text.replace("\\", "/").rsplit("/", 1)[-1].lower()
    if base in bundled_names():
        return load_bundled(base), f"the log's model {text} (the bundled model of that name)"
    return None


def _gpu(reading, given: str | None):
    """(GPU, how): ``--gpu`` when given; else the log's total memory (a GPU of exactly that size, the
    catalog's entry when the log names one), else its name, else None."""
    from kvplan.gpus import custom_gpu, get_gpu

    if given is not None:
        return get_gpu(given), "--gpu"
    named = None
    if reading.gpu_name:
        try:
            named = get_gpu(reading.gpu_name)
        except UsageError:
            named = None
    if reading.gpu_total_bytes:
        total = reading.gpu_total_bytes
        if named is not None:
            return replace(
                named, cuda_total_observed_bytes=total
            ), f"{named.name}, {reading.gpu_total_source} (the log)"
        return custom_gpu(total, f"{total / GIB:.2f}GiB"), f"{reading.gpu_total_source} (the log)"
    if named is not None:
        return named, f"{reading.gpu_name} (the log)"
    return None, ""


# --- the budget --------------------------------------------------------------------------------------------


def budget_range(measure, value: int, lo: int = 0, hi: int = SEARCH_BYTES) -> tuple[int, int] | None:
    """(smallest, largest) budget B, bytes, with ``measure(B) == value``, for a ``measure`` that does not
    decrease with B (blocks, tokens); None when no budget gives exactly ``value``."""
    a, b = lo, hi
    while a < b:  # smallest B with measure(B) >= value
        mid = (a + b) // 2
        if measure(mid) >= value:
            b = mid
        else:
            a = mid + 1
    if measure(a) != value:
        return None
    first = a
    a, b = first, hi
    while a < b:  # largest B with measure(B) <= value
        mid = (a + b + 1) // 2
        if measure(mid) <= value:
            a = mid
        else:
            b = mid - 1
    return first, a


def gib_range(value: float, places: int = 2) -> tuple[int, int]:
    """The budgets, bytes, whose GiB figure rounds to ``value`` at ``places`` decimals (inclusive bounds)."""
    half = 0.5 * 10 ** (-places)
    return int(-(-((value - half) * GIB) // 1)), int((value + half) * GIB)


def overlaps(a: tuple[int, int], b: tuple[int, int]) -> bool:
    return a[0] <= b[1] and b[0] <= a[1]


def rounds_to(x: float, printed: float, places: int = 2) -> bool:
    """True when ``x`` is ``printed`` at ``places`` decimals (either rounding of a tie)."""
    return abs(x - printed) <= 0.5 * 10 ** (-places) + 1e-9


def range_rounds_to(lo: float, hi: float, printed: float, places: int = 2) -> bool:
    """True when some value in [lo, hi] is ``printed`` at ``places`` decimals."""
    half = 0.5 * 10 ** (-places) + 1e-9
    return lo <= printed + half and printed - half <= hi


# --- the reproduction --------------------------------------------------------------------------------------

WHAT_IF_KEYS = ("tp", "max_model_len", "kv_dtype", "max_num_seqs", "gpu_memory_utilization", "max_num_batched_tokens",
                "block_size", "pp")  # fmt: skip
FLAG_NAMES = {"tp": "--tp", "pp": "--pp", "max_model_len": "--max-model-len", "kv_dtype": "--kv-dtype",
              "max_num_seqs": "--max-num-seqs", "gpu_memory_utilization": "--gpu-memory-utilization",
              "max_num_batched_tokens": "--max-num-batched-tokens", "block_size": "--block-size",
              "engine_version": "--engine-version", "weights_dtype": "--weights-dtype"}  # fmt: skip


def engine_module(engine: str):
    """This package's module for ``engine`` (its settings, anchors and figures)."""
    return import_module(f"kvplan.fromlog.{engine}")


def reproduce(
    text: str, model=None, given: dict | None = None, source: str = "the log", gpu: str | None = None,
    engine: str | None = None,
):  # fmt: skip
    """Read a start-up log, reproduce the engine's figures, and plan the what-ifs on its budget.

    Args:
        text: the log.
        model: a ModelSpec or a MODEL string overriding the log's model id (None: the log's).
        given: settings given as flags (``tp``, ``max_model_len``, ``kv_dtype``, ``max_num_seqs``,
            ``gpu_memory_utilization``, ``max_num_batched_tokens``, ``block_size``, ``pp``, ``engine_version``,
            ``weights_dtype``): a setting the log states becomes a what-if, one it does not state completes
            the reading.
        source: the file's name, for messages.
        gpu: ``--gpu`` (a catalog name or a size), else the log's.
        engine: ``--engine``, when given: it must be the log's engine (a log is planned with its own engine's
            rules).

    Returns:
        A :class:`Reproduction`.

    Raises:
        UsageError: not a log kvplan reads, no KV figure in it, no model (one line naming what is missing), a
            number no engine prints (naming its line), an ``engine`` that is not the log's.
    """
    from kvplan import api
    from kvplan.logs import LogNumberError, NotALog, read_log
    from kvplan.options import get_engine

    given = {k: v for k, v in (given or {}).items() if v is not None}
    try:
        reading = read_log(text)
    except NotALog as e:
        raise UsageError(f"--from-log {source}: not a start-up log kvplan reads: {e}") from None
    except LogNumberError as e:
        raise UsageError(f"--from-log {source}: {e}") from None
    em = engine_module(reading.engine)
    name = em.ENGINE_NAME
    if engine is not None and get_engine(engine).value != reading.engine:
        raise UsageError(
            f"--engine {engine}: {source} is a {name} log, planned with {name}'s rules; drop --engine (or give "
            f"--engine {reading.engine}), or give a {engine} log"
        )
    if not any(k in reading.printed for k in em.KV_FIGURES):
        raise UsageError(
            f"--from-log {source}: a {name} log without a KV-cache figure: none of {', '.join(em.KV_LINES)} is in it"
        )
    # the model
    if model is not None:
        spec = model if not isinstance(model, str) else api.load_model(model)
        model_source = "MODEL"
    elif reading.model_id:
        found = model_from_id(reading.model_id)
        if found is None:
            raise UsageError(
                f"--from-log {source}: the log names the model {reading.model_id!r}, which kvplan cannot load "
                "(not a bundled model's hf_repo or name, nor a repo id it resolves as MODEL); give it as MODEL: "
                "kvplan fit MODEL --from-log FILE"
            )
        spec, model_source = found
    else:
        raise UsageError(
            f"--from-log {source}: the {name} log does not name the model (no {em.MODEL_LINES} line); give it as "
            "MODEL: kvplan fit MODEL --from-log FILE"
        )
    g, gpu_source = _gpu(reading, gpu)
    notes = list(reading.notes)
    if g is None:
        from kvplan.gpus import custom_gpu

        g = custom_gpu(80 * GIB, "80GiB")
        gpu_source = "not in the log: an 80 GiB GPU assumed (give --gpu; it only sets the engine's batch defaults)"
    # settings: the log's; a flag for a setting the log states (or its figures determine) is a what-if, one for
    # a setting it leaves open completes the reading; then what the figures tell of TP and the KV dtype
    stated = em.options(reading)  # {fit_options key: (value, where)}
    settings: dict[str, tuple] = dict(stated)
    changes = []
    fill = {}
    for key, value in given.items():
        if key in stated and key in WHAT_IF_KEYS:
            if stated[key][0] != value:
                changes.append((key, stated[key][0], value))
        else:
            fill[key] = value
    # max_num_seqs changes no figure of the log: given, it is a what-if against the engine's default
    late = {k: fill.pop(k) for k in ("max_num_seqs",) if k in fill}
    open_keys = [k for k in fill if k in WHAT_IF_KEYS]
    if open_keys:  # flags for settings the log does not state: what-ifs on its reading when that stands alone
        _what_ifs_on_the_reading(em, reading, spec, g, settings, fill, open_keys, changes)
    for key, value in fill.items():
        settings[key] = (value, "flag")
    base = {k: v for k, (v, _) in settings.items()}
    unknown = [k for k in ("tp", "kv_dtype") if k not in settings]
    ctx = _best_context(em, reading, spec, g, base, unknown)
    for key, value, how in ctx["inferred"]:
        settings[key] = (value, how)
    for key, value in late.items():
        default = getattr(ctx["result"], key)
        if default != value:
            changes.append((key, default, value))
    result, figures, lo_hi, budget, budget_source = (
        ctx["result"],
        ctx["figures"],
        ctx["range"],
        ctx["budget"],
        ctx["how"],
    )
    notes.extend(ctx["notes"])
    rep = Reproduction(
        reading=reading, source=source, spec=spec, model_source=model_source, gpu=g, gpu_source=gpu_source,
        opts=ctx["opts"], settings=settings, budget_bytes=budget, budget_range=lo_hi, budget_source=budget_source,
        result=result, figures=figures, notes=notes,
        plan_budget_bytes=None if ctx["plan_budget"] == budget else ctx["plan_budget"],
    )  # fmt: skip
    if changes:
        what_if(rep, em, changes)
    return rep


_RESULT_FIELDS = {"tp": "tensor_parallel_size", "pp": "pipeline_parallel_size"}


def _what_ifs_on_the_reading(em, reading, spec, gpu, settings: dict, fill: dict, open_keys: list, changes: list):
    """Sort the flags ``open_keys`` (settings the log does not state, in ``fill``) into what-ifs and completions.

    The log is first read without them. When its figures reproduce so (every figure kvplan computes agrees), that
    reading stands, its layout (the TP, the KV dtype and the rule set the figures gave) included, and a flag is a
    what-if on it (moved from ``fill`` into ``changes`` as (key, the reading's value, the flag's)) unless it
    agrees with the log: a TP or KV dtype among those the figures reproduce with when the figures (or the
    weights the log prints) do not pick one (the flag says which it was), or another setting under which every
    figure still reproduces at the log's layout (a memory fraction the figures do not show). When the figures
    do not reproduce without the flags, the flags complete the reading (a block size or KV dtype the log does
    not print). A what-if never re-infers the layout from its own plan (``--block-size 1`` is not read as TP 1,
    ``--pp 2`` not as TP 2).
    """
    base = {k: v for k, (v, _) in settings.items()}
    base.update({k: v for k, v in fill.items() if k not in open_keys})
    try:
        probe = _best_context(em, reading, spec, gpu, base, [k for k in ("tp", "kv_dtype") if k not in base])
    except UsageError:
        return
    if not (_clean(probe) and probe["checks"] > 0):
        return
    inferred = {key: (value, how) for key, value, how in probe["inferred"]}
    layouts = probe.get("clean", [])
    layout = {k: v for k, (v, _) in inferred.items() if not (k == "kv_dtype" and v == "auto")}
    moved = False
    for key in open_keys:
        value = fill[key]
        open_choice = key in inferred and not _determined(inferred[key][1])
        if open_choice and key == "tp" and any(t == value for t, _ in layouts):
            continue  # one of the TPs the figures reproduce with (and do not choose among): it completes the reading
        if open_choice and key == "kv_dtype" and any(_same_kv(spec, k, value) for _, k in layouts):
            continue
        if key not in ("tp", "kv_dtype") and _agrees(em, reading, spec, gpu, dict(base, **layout, **{key: value})):
            continue  # every figure reproduces with it at the log's layout: it completes the reading
        if key in inferred:
            old = inferred[key][0]
            old = None if key == "kv_dtype" and old == "auto" else old
        else:
            old = getattr(probe["result"], _RESULT_FIELDS.get(key, key))
        fill.pop(key)
        moved = True
        if not (key == "kv_dtype" and _same_kv(spec, old, value)) and old != value:
            changes.append((key, old, value))
    if moved:  # the reading's layout is kept for the what-ifs: not re-inferred from the flags' plan
        for key in ("tp", "kv_dtype"):
            if key in inferred and key not in fill and key not in settings and not (key == "kv_dtype" and "tp" in fill):
                value, how = inferred[key]
                settings[key] = (None if key == "kv_dtype" and value == "auto" else value, how)


def _agrees(em, reading, spec, gpu, trial: dict) -> bool:
    """True when every figure kvplan computes (at least one) reproduces under the settings ``trial``."""
    try:
        ctx = _context(em, reading, spec, gpu, trial)
    except UsageError:
        return False
    return _clean(ctx) and ctx["checks"] > 0


def _same_kv(spec, a, b) -> bool:
    """True when two KV dtype names (None / ``auto``: the model's) are the same cache."""
    from kvplan.calc import resolve_kv_dtype

    try:
        return resolve_kv_dtype(spec, _norm_kv(a)).name == resolve_kv_dtype(spec, _norm_kv(b)).name
    except UsageError:
        return _norm_kv(a) == _norm_kv(b)


def _determined(how: str) -> bool:
    """True when an inferred setting is determined by the figures (only it reproduces them, or the weights
    the log prints pick it)."""
    return how.startswith("the figures: only") or "taken: kvplan's weights" in how


def _norm_kv(value):
    return None if value in (None, "auto") else value


def _fit_options(em, base: dict, budget: int):
    from kvplan import api

    kw = {k: v for k, v in base.items() if k in api.fit_options.__code__.co_varnames}
    kw["engine"] = em.ENGINE
    kw["kv_cache_memory_bytes"] = max(1, budget)  # 1 byte: nothing fits (kvplan takes no budget of 0)
    if kw.get("kv_dtype") is None:
        kw.pop("kv_dtype", None)
    return api.fit_options(**kw)


def _plan(em, spec, gpu, base: dict, budget: int):
    """(FitResult, CachePlan, FitOptions) at the log's settings and ``budget`` bytes."""
    from kvplan.fit import fit_plan

    opts = _fit_options(em, base, budget)
    result, cache = fit_plan(spec, gpu, opts)
    return result, cache, opts


def _candidates(spec, base: dict, unknown: list, min_tp: int = 1):
    """The (tp, kv_dtype) pairs to try when the log states neither: the model's dtype first, then FP8; TP the
    heads allow up to 8 (at least ``min_tp``, what the worker prefixes show), smallest first."""
    from kvplan.calc import valid_tp_sizes

    if "tp" in base:
        tps = [base["tp"]]
    else:
        tps = [t for t in valid_tp_sizes(spec) if min_tp <= t <= 8] or [max(1, min_tp)]
    kvs = [base.get("kv_dtype")] if "kv_dtype" not in unknown else [None, "fp8"]
    return [(t, k) for k in kvs for t in tps]


def _versions(em, base: dict) -> list:
    """The engine versions to try: the log's (or the flag's), else each rule set the engine module offers
    (``version_candidates``; the newest first), so that the figures say which rules the log follows."""
    if "engine_version" in base or not hasattr(em, "version_candidates"):
        return [base.get("engine_version")]
    return em.version_candidates() or [None]


def _clean(ctx) -> bool:
    return not any(f.status == DIFFERS for f in ctx["figures"])


def _best_context(em, reading, spec, gpu, base: dict, unknown: list) -> dict:
    """The reproduction under the log's settings; for a TP or KV dtype it does not state, the first candidate
    (:func:`_candidates`) under which no printed figure differs, and the note names every candidate that
    reproduces the figures (several give the same bytes per GPU: TP 2 with FP8 = TP 4 with 16 bits when the
    KV heads split)."""
    versions = _versions(em, base)
    cands = _candidates(spec, base, unknown, getattr(reading, "min_tp", 1) or 1)
    tried = []
    for version in versions:
        for tp, kv in cands:
            trial = dict(base, tp=tp)
            if kv is not None:
                trial["kv_dtype"] = kv
            else:
                trial.pop("kv_dtype", None)
            if version is not None:
                trial["engine_version"] = version
            try:
                ctx = _context(em, reading, spec, gpu, trial)
                ctx["version"] = version
                tried.append(((tp, kv), ctx, ""))
            except UsageError as e:
                if len(cands) * len(versions) == 1:
                    raise
                tried.append(((tp, kv), None, str(e)))
        if any(t[1] is not None and _clean(t[1]) and t[1]["checks"] for t in tried):
            break  # the newest rules under which the figures reproduce
    good = [t for t in tried if t[1] is not None]
    if not good:
        raise UsageError(tried[-1][2])
    clean = [t for t in good if _clean(t[1])]
    checked = [t for t in clean if t[1]["checks"] > 0]
    by_weights = ""
    printed_w = em.weights_bytes(reading) if hasattr(em, "weights_bytes") else None
    if clean and printed_w and "tp" in unknown and len({t[0][0] for t in clean}) > 1:
        # several TPs reproduce the figures (the same bytes per GPU): the one whose weights per GPU (kvplan's
        # model) are nearest the log's
        import math

        from kvplan.weights import weights_per_gpu

        def distance(t):
            try:
                w = weights_per_gpu(spec, base.get("weights_dtype"), t[0][0], base.get("pp", 1))[0]
            except UsageError:
                return math.inf
            return abs(math.log(max(w, 1) / printed_w))

        clean.sort(key=distance)
        by_weights = (
            f"; TP {clean[0][0][0]} taken: kvplan's weights per GPU there are nearest the "
            f"{printed_w / GIB:.2f} GiB the log prints"
        )
    if clean:
        (tp, kv), ctx, _ = clean[0]
    else:
        (tp, kv), ctx, _ = max(good, key=lambda t: sum(f.status == REPRODUCED for f in t[1]["figures"]))
    inferred = []
    if len(cands) > 1:
        shown = kv or "auto"
        names = [f"TP {t}" + (f" with KV {k}" if k else "") for (t, k), _, _ in clean]
        if not clean:
            how = "none of the TPs and KV dtypes tried reproduces every figure; the closest"
        elif not checked or len(clean) == len(good):
            how = "not in the log, and the figures do not tell"
        elif len(clean) == 1:
            how = "the figures: only it reproduces them"
        else:
            how = (
                "the figures reproduce with "
                + ", ".join(names)
                + " (the same bytes per GPU)"
                + (by_weights or "; the first taken")
            )
        if "tp" in unknown:
            inferred.append(("tp", tp, how))
        if "kv_dtype" in unknown:
            inferred.append(("kv_dtype", shown, how))
    if len(versions) > 1:
        later = [v for v in versions[: versions.index(ctx["version"])]]
        why = f"the figures reproduce under {ctx['version']}'s rules" + (
            f", not {', '.join(later)}'s" if later else "") if _clean(ctx) and ctx["checks"] else (
            "not in the log; the newest rules")  # fmt: skip
        inferred.append(("engine_version", ctx["version"], why))
    ctx["inferred"] = inferred
    ctx["clean"] = [t[0] for t in clean]
    return ctx


def _context(em, reading, spec, gpu, base: dict) -> dict:
    """The budget and the figures under one set of settings."""
    result, cache, opts = _plan(em, spec, gpu, base, GIB)
    seq = result.max_model_len
    lo_hi, budget, how, notes, anchor_key = None, None, "", [], None
    for anchor in em.anchors(reading):
        kind, key = anchor[0], anchor[1]
        if kind == "value":  # a budget the log states otherwise (a setting, a rule over printed figures)
            label = anchor[3] if len(anchor) > 3 else key
            budget, lo_hi, how = anchor[2], (anchor[2], anchor[2]), f"{label} = {anchor[2]:,} B"
            anchor_key = key
            break
        if key not in reading.printed:
            continue
        value = reading.printed[key]
        if isinstance(value, list):  # printed once per worker: the first worker's
            value = value[0]
        anchor_key = key
        if kind == "bytes":
            budget, lo_hi, how = int(value), (int(value), int(value)), f"{em.LABELS.get(key, key)} = {int(value):,} B"
            break
        if kind == "gib":
            lo_hi = gib_range(value)
            budget = (lo_hi[0] + lo_hi[1]) // 2
            how = f"{em.LABELS.get(key, key)} {value} GiB (rounded: {lo_hi[0]:,} to {lo_hi[1]:,} B; the middle taken)"
            break
        if kind == "measure":
            measure_key = anchor[2]
            if value <= 0:
                continue

            def measure(b, _k=measure_key):
                return int(cache.measures(b, seq)[_k])

            found = budget_range(measure, int(value))
            if found is None:
                notes.append(
                    f"no budget gives the printed {em.LABELS.get(key, key)} {value:,} under these settings "
                    f"(kvplan's per-block bytes: {cache.kv_bytes_per_block:,})"
                )
                continue
            lo_hi, budget = found, found[0]
            how = (
                f"the printed {em.LABELS.get(key, key)} {value:,}: budgets {found[0]:,} to {found[1]:,} B give it; "
                "the smallest taken"
            )
            break
    if budget is None:
        raise UsageError(
            f"{em.ENGINE_NAME} log: no figure kvplan can take the KV budget from under these settings "
            f"({'; '.join(notes) or 'none printed'})"
        )
    result, cache, opts = _plan(em, spec, gpu, base, budget)
    here = Context(reading, spec, result, cache, opts, budget, lo_hi, anchor_key, _plan_at(em, spec, gpu, base))
    figures = em.figures(here)
    checks = sum(f.status in (REPRODUCED, DIFFERS) for f in figures)
    # the budget the engine plans on, when it is not the one the figure gave (vLLM: the worker with the fewest
    # blocks); the plan and the what-ifs are counted on it, the figures on their own workers' budgets
    plan_budget, why = em.plan_budget(here) if hasattr(em, "plan_budget") else (budget, "")
    if plan_budget != budget:
        result, cache, opts = _plan(em, spec, gpu, base, plan_budget)
        notes.append(why)
    return dict(result=result, cache=cache, opts=opts, budget=budget, range=lo_hi, how=how, figures=figures,
                notes=notes, checks=checks, plan_budget=plan_budget)  # fmt: skip


@dataclass
class Context:
    """What an engine module's ``figures`` gets: the reading, the model, the plan at the budget (result and
    cache plan), its options, the budget (and the range the printed figures allow), the figure the budget was
    taken from (``anchor``), and ``plan_at(budget, **settings) -> (FitResult, CachePlan)``."""

    reading: Any
    spec: Any
    result: Any
    cache: Any
    opts: Any
    budget: int
    budget_range: tuple
    anchor: str | None
    plan_at: Any

    def printed(self, key: str, default=None):
        return self.reading.printed.get(key, default)


def count_figure(ctx: Context, key: str, label: str, kvplan_value, how: str, at_range=None) -> LogFigure:
    """A count (tokens, blocks) beside kvplan's: :data:`BUDGET` when it is the figure the budget came from,
    else :data:`REPRODUCED` when equal (or, with ``at_range`` = (value at the smallest budget, value at the
    largest), when the printed count lies between), else :data:`DIFFERS`."""
    printed = ctx.printed(key)
    if key == ctx.anchor:
        return LogFigure(key, label, printed, kvplan_value, BUDGET, how + " (the budget was taken from it)")
    if at_range is not None and at_range[0] != at_range[1]:
        ok = at_range[0] <= printed <= at_range[1]
        shown = f"{at_range[0]:,} to {at_range[1]:,}"
        return LogFigure(key, label, printed, shown, REPRODUCED if ok else DIFFERS, how + " (over the budget range)")
    return LogFigure(key, label, printed, kvplan_value, REPRODUCED if printed == kvplan_value else DIFFERS, how)


def ratio_figure(ctx: Context, key: str, label: str, lo: float, hi: float, how: str, places: int = 2) -> LogFigure:
    """A rounded figure (a ratio, GiB, MiB) beside kvplan's value, or its range over the budget range."""
    printed = ctx.printed(key)
    ok = range_rounds_to(min(lo, hi), max(lo, hi), printed, places)
    shown = round(lo, places) if abs(lo - hi) < 10 ** (-places - 3) else (
        f"{min(lo, hi):.{places}f} to {max(lo, hi):.{places}f}")  # fmt: skip
    return LogFigure(key, label, printed, shown, REPRODUCED if ok else DIFFERS, how)


def budget_figure(ctx: Context, key: str, label: str, how: str = "") -> LogFigure:
    """A GiB figure of the KV budget itself: :data:`BUDGET` when the budget came from it, else whether the
    budget range and the printed rounding overlap."""
    printed = ctx.printed(key)
    lo, hi = ctx.budget_range
    shown = round(ctx.budget / GIB, 2) if lo == hi else f"{lo / GIB:.3f} to {hi / GIB:.3f}"
    if key == ctx.anchor:
        return LogFigure(key, label, printed, shown, BUDGET, how or "the budget was taken from it")
    ok = overlaps((lo, hi), gib_range(printed)) or (printed < 0 and ctx.budget == 0)
    return LogFigure(key, label, printed, shown, REPRODUCED if ok else DIFFERS, how or "the KV budget kvplan found")


def _plan_at(em, spec, gpu, base):
    """``plan_at(budget) -> (FitResult, CachePlan)`` at the same settings (for figures that need other budgets)."""

    kept: dict[int, tuple] = {}  # the plans at the log's settings, by budget (asked once per worker line)

    def plan_at(budget: int, **changes):
        if not changes and budget in kept:
            return kept[budget]
        result, cache, _ = _plan(em, spec, gpu, dict(base, **changes), budget)
        if not changes:
            kept[budget] = (result, cache)
        return result, cache

    return plan_at


# --- what-ifs --------------------------------------------------------------------------------------------


def what_if(rep: Reproduction, em, changes: list) -> None:
    """Plan ``changes`` (``[(setting, log's value, new value)]``) on the reproduction's budget; a TP change
    moves the budget by the weights per GPU (the log's weights re-split, else kvplan's weights model), a memory
    fraction change by the fraction of the GPU; the rest of the engine's fixed memory is the log's."""
    from kvplan.fit import plan_fit

    base = {k: v for k, (v, _) in rep.settings.items()}
    new = dict(base)
    for key, _, value in changes:
        new[key] = value
    budget = rep.planned_budget
    notes = []
    delta, why = em.what_if_budget(rep, base, new)
    if delta:
        budget += delta
    notes.extend(why)
    if budget <= 0:
        notes.append(f"the KV budget would be {budget / GIB:.2f} GiB per GPU: no KV memory left")
    opts = _fit_options(em, new, budget)
    rep.what_if = plan_fit(rep.spec, rep.gpu, opts)
    rep.what_if_changes = changes
    rep.what_if_budget = max(0, budget)
    rep.what_if_notes = notes
