"""``kvplan sweep``: :func:`kvplan.fit.plan_fit` over a cross product of settings, from the same rule functions.

The cross product is models × sequence lengths (as ``max_model_len``) × GPUs × KV dtypes × TP degrees,
with every other setting (engine, memory fraction, block size, ...) shared. Each row is what
``plan_fit(spec, gpu, FitOptions(..., tensor_parallel_size=tp, max_model_len=seq, kv_dtype=dtype))`` gives,
by construction: the sweep calls the engine's own rule functions (:mod:`kvplan.engines`), never a copy:

- per configuration (model, KV dtype, TP, and the GPUs sharing the engine's GPU-dependent settings): the
  engine's settings, its pools and block rules (:meth:`~kvplan.engines.base.EngineRules.plan`), once;
- per configuration and GPU: the engine's budget (:meth:`~kvplan.engines.base.EngineRules.budget`, Python
  ints);
- over the GPUs and sequence lengths at once: the plan's pools, demands and figures
  (:meth:`~kvplan.engines.base.CachePlan.measures`), the requests that fit
  (:func:`~kvplan.engines.base.count_requests`) and the longest request
  (:func:`~kvplan.engines.base.longest_request`), the same functions ``plan_fit`` calls, evaluated on int64
  arrays (:func:`~kvplan.engines.base.numpy_ops`) instead of Python ints.

Every byte count is int64, kept below 2^53 (checked; beyond, a :class:`UsageError`) so that the float
division of "Maximum concurrency" rounds as Python's ``int / int`` does. Before any array is built, every
integer setting is checked against :data:`LIMITS`, each GPU against :data:`MAX_GPU_BYTES`, and the cross
product against :data:`MAX_CONFIGURATIONS`. Rows whose TP the model's heads do not allow
(:func:`kvplan.calc.valid_tp_sizes`), and rows the engine refuses (a KV dtype its backends do not take for
that model; a checkpoint it will not load at that TP, :meth:`~kvplan.engines.base.EngineRules.load_check`),
are left out and counted in :attr:`SweepResult.skipped_rows`.

numpy is imported inside the functions: ``kvplan estimate`` and ``kvplan fit`` never import this module.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any, Iterator, Sequence

from kvplan import engines
from kvplan.calc import valid_tp_sizes
from kvplan.dtypes import get_kv_dtype
from kvplan.engines.base import count_requests, longest_request, numpy_ops
from kvplan.errors import UsageError
from kvplan.gpus import GPU
from kvplan.options import MAX_SEARCH_TOKENS, FitOptions, check_engine_options, check_fraction
from kvplan.specs import ModelSpec
from kvplan.units import plural

EXACT_LIMIT = 1 << 53  # byte counts stay below this: exact in float64, so ratios round as Python's
# Rows of one sweep: what its output writes in seconds. Measured on this project's 2-core machine (8 models x
# 125 --seq x 37 GPUs x 5 KV dtypes x 6 TPs, 1.02 M rows): computing 1.4 s and 350 MB of arrays, then --csv or
# --json 5 s; 8.9 M rows took over 60 s and 2.5 GB. The table with --all is slower still (MAX_TABLE_ROWS).
MAX_CONFIGURATIONS = 1_200_000
MAX_TABLE_ROWS = 100_000  # rows `sweep --all` prints as a table (rich: about 30 s per million rows, 3 GB)
# Upper bounds of the integer settings, checked by the sweep itself before any array is built: with
# them every int64 intermediate stays far below 2^63.
LIMITS = {
    "--seq": MAX_SEARCH_TOKENS,  # 2^40 tokens (then a request must stay below 2^53 B, checked per model)
    "--tp": 1 << 16,
    "--block-size": 1 << 20,
    "--max-num-batched-tokens": 1 << 31,
    "--max-batch-size": 1 << 24,
    "--max-num-seqs": 1 << 24,
}
# Largest GPU (CUDA-visible bytes): vLLM's budget computes total × utilization × 10^6, exact in Python;
# 2^43 B = 8 TiB keeps every budget far below 2^53.
MAX_GPU_BYTES = 1 << 43

# The columns of a sweep's output (table, CSV, JSON), in order.
OUTPUT_COLUMNS = (
    "model",
    "seq",
    "gpu",
    "kv_dtype",
    "tp",
    "kv_budget_bytes",
    "kv_bytes_per_request",
    "max_concurrent_requests",
    "limit",
    "max_concurrency",
    "kv_capacity_tokens",
    "fits",
)
# ``limit``: what sets max_concurrent_requests: ``memory`` or the engine's cap (``max_num_seqs``; SGLang
# ``max_running_requests``), as ``kvplan fleet``. ``max_concurrency``: the ratio ``kvplan fit`` prints as "Maximum
# concurrency" (:attr:`kvplan.fit.FitResult.max_requests_ratio`, from the same count_requests: vLLM's null block left
# out, so its floor is max_concurrent_requests before the cap); vLLM's own log figure (the null block counted) is
# ``fit --json``'s max_concurrency, kept in ``columns["max_concurrency"]``.
OUTPUT_SOURCES = {"max_concurrency": "max_requests_ratio"}  # output column -> the array it is read from
# The table's columns: as OUTPUT_COLUMNS, with the GPU's short name (first alias) for people (max_concurrency shown
# cut to two decimals, as fit prints it).
TABLE_COLUMNS = tuple("gpu_short" if c == "gpu" else c for c in OUTPUT_COLUMNS)

# FitResult fields held as one array each (int64, except max_concurrency and max_requests_ratio float64 and
# fits bool).
VALUE_COLUMNS = (
    "usable_bytes",
    "weights_bytes",
    "activation_bytes",
    "overhead_bytes",
    "kv_budget_bytes",
    "kv_bytes_per_token",
    "kv_bytes_per_block",
    "kv_bytes_per_request",
    "num_blocks",
    "kv_capacity_tokens",
    "max_concurrent_requests",
    "max_concurrency",
    "max_model_len_fit",
    "block_size",
    "max_requests_by_memory",
    "max_requests_ratio",
    "fits",
)


@dataclass(frozen=True)
class SweepResult:
    """The rows of a sweep, as numpy columns of length ``num_rows`` (row order: model, seq, GPU, dtype, TP).

    Attributes:
        model_names: the models, in the order given; ``model_index`` points into it.
        gpu_labels: the GPUs (catalog id, or ``custom 80GiB`` for a size); ``gpu_index`` points into it.
        gpu_short_labels: the same GPUs by their first alias (``h100``), for tables.
        kv_dtype_names: resolved KV dtype names (``auto`` resolved per model); ``kv_dtype_index`` points in.
        engine: the engine convention applied.
        block_size: tokens per KV block.
        model_index, gpu_index, kv_dtype_index: int64 arrays, shape (N,).
        seq: max_model_len of each row, tokens, int64 (N,).
        tp: tensor-parallel size of each row, int64 (N,).
        columns: :data:`VALUE_COLUMNS` → array (N,); bytes and tokens are int64, exact.
        skipped_rows: rows left out: TP does not divide the model's heads, or the engine refuses the row.
        skipped_tp: ``(model name, tp)`` pairs that were left out.
        skipped_refused: ``(model name, kv dtype, tp, the engine's reason)`` of configurations the engine refuses.
        beyond_max_context_rows: rows whose seq exceeds the model's max context (computed anyway).
        request_cap_name: what the engine calls its cap on running requests (``max_num_seqs``; SGLang
            ``max_running_requests``): the ``limit`` of a row it bounds.
    """

    model_names: tuple[str, ...]
    gpu_labels: tuple[str, ...]
    gpu_short_labels: tuple[str, ...]
    kv_dtype_names: tuple[str, ...]
    engine: str
    block_size: int
    model_index: Any
    gpu_index: Any
    kv_dtype_index: Any
    seq: Any
    tp: Any
    columns: dict[str, Any] = field(repr=False)
    skipped_rows: int = 0
    skipped_tp: tuple[tuple[str, int], ...] = ()
    skipped_refused: tuple[tuple[str, str, int, str], ...] = ()
    beyond_max_context_rows: int = 0
    request_cap_name: str = "max_num_seqs"

    @property
    def num_rows(self) -> int:
        """Rows computed (skipped ones excluded)."""
        return int(self.seq.shape[0])

    def _lists(self, start: int, stop: int, fields: Sequence[str]) -> dict[str, list]:
        """Rows ``start:stop`` as one Python list per field (ints, floats, bools, strings)."""
        cols: dict[str, list] = {}
        for f in fields:
            if f == "model":
                cols[f] = [self.model_names[i] for i in self.model_index[start:stop].tolist()]
            elif f in ("gpu", "gpu_short"):
                labels = self.gpu_labels if f == "gpu" else self.gpu_short_labels
                cols[f] = [labels[i] for i in self.gpu_index[start:stop].tolist()]
            elif f == "kv_dtype":
                cols[f] = [self.kv_dtype_names[i] for i in self.kv_dtype_index[start:stop].tolist()]
            elif f in ("seq", "tp"):
                cols[f] = getattr(self, f)[start:stop].tolist()
            elif f == "limit":
                capped = self.columns["limited_by_max_num_seqs"][start:stop].tolist()
                cols[f] = [self.request_cap_name if c else "memory" for c in capped]
            else:
                cols[f] = self.columns[OUTPUT_SOURCES.get(f, f)][start:stop].tolist()
        return cols

    def rows(self, limit: int | None = None, fields: Sequence[str] = OUTPUT_COLUMNS) -> list[dict[str, Any]]:
        """The first ``limit`` rows (all when None) as dicts of Python ints, floats, bools and strings.

        Args:
            limit: how many rows, from the first.
            fields: which keys, among :data:`OUTPUT_COLUMNS`, ``gpu_short`` and :data:`VALUE_COLUMNS`
                (``max_concurrency`` is the output column: kvplan's ratio, :data:`OUTPUT_SOURCES`).
        """
        n = self.num_rows if limit is None else max(0, min(limit, self.num_rows))
        cols = self._lists(0, n, fields)
        return [dict(zip(cols, vals, strict=True)) for vals in zip(*cols.values(), strict=True)]

    def iter_rows(self, fields: Sequence[str] = OUTPUT_COLUMNS, chunk: int = 1 << 16) -> Iterator[dict[str, Any]]:
        """Every row as a dict (as :meth:`rows`), converted ``chunk`` rows at a time to bound memory."""
        for start in range(0, self.num_rows, chunk):
            cols = self._lists(start, min(start + chunk, self.num_rows), fields)
            for vals in zip(*cols.values(), strict=True):
                yield dict(zip(cols, vals, strict=True))


def gpu_label(gpu: GPU, short: bool = False) -> str:
    """How a GPU is named in sweep rows: its catalog id (``short``: its first alias, when it has one), or
    ``custom 80GiB`` for one given by size."""
    if gpu.is_custom:
        return gpu.name
    return gpu.aliases[0] if short and gpu.aliases else gpu.id


def _check_int(flag: str, value, limit: int) -> None:
    """Raise UsageError unless ``value`` is an int in 1..``limit`` (the sweep's own bounds, see :data:`LIMITS`)."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise UsageError(f"{flag}: {value!r} must be an integer >= 1")
    if value > limit:
        raise UsageError(
            f"{flag}: {value:,} is beyond the range the vectorized sweep computes exactly (at most {limit:,})"
        )


def _check_axes(specs, seqs, gpus, kv_dtypes, tps, opts: FitOptions) -> None:
    """Every bound of :func:`sweep`, checked before any array is built.

    Raises:
        UsageError: an empty axis, too many configurations, a value out of :data:`LIMITS`, a GPU beyond
            :data:`MAX_GPU_BYTES`, PP > 1 or a shared prefix.
    """
    for flag, axis in (("MODEL", specs), ("--seq", seqs), ("--gpu", gpus), ("--kv-dtype", kv_dtypes), ("--tp", tps)):
        if not len(axis):
            raise UsageError(f"{flag}: give at least one value")
    asked = len(specs) * len(seqs) * len(gpus) * len(kv_dtypes) * len(tps)
    if asked > MAX_CONFIGURATIONS:
        axes = (("MODEL", specs), ("--seq", seqs), ("--gpu", gpus), ("--kv-dtype", kv_dtypes), ("--tp", tps))
        runs = -(-asked // MAX_CONFIGURATIONS)
        flag, axis = max(axes, key=lambda a: len(a[1]))
        how = (f"split {flag}'s {len(axis):,} values into {runs} runs of at most {-(-len(axis) // runs):,}"
               if len(axis) >= runs else "split it into several runs (fewer values of each axis per run)")  # fmt: skip
        raise UsageError(
            f"MODEL × --seq × --gpu × --kv-dtype × --tp: {asked:,} configurations asked ({len(specs)} × "
            f"{len(seqs)} × {len(gpus)} × {len(kv_dtypes)} × {len(tps)}); one sweep computes at most "
            f"{MAX_CONFIGURATIONS:,} (its CSV or JSON then writes in seconds): {how}"
        )
    for tp in tps:
        _check_int("--tp", tp, LIMITS["--tp"])
    for q in seqs:
        _check_int("--seq", q, LIMITS["--seq"])
    for g in gpus:
        if g.cuda_total_bytes > MAX_GPU_BYTES:
            raise UsageError(
                f"--gpu: {gpu_label(g).removeprefix('custom ')} ({g.cuda_total_bytes:,} B) is beyond the range "
                f"the vectorized sweep computes exactly (at most {MAX_GPU_BYTES:,} B = 8 TiB per GPU)"
            )
    for flag, value in (
        ("--block-size", opts.block_size),
        ("--max-num-batched-tokens", opts.max_num_batched_tokens),
        ("--max-batch-size", opts.max_batch_size),
        ("--max-num-seqs", opts.max_num_seqs),
    ):
        if value is not None:
            _check_int(flag, value, LIMITS[flag])
    check_fraction("--gpu-memory-utilization", opts.gpu_memory_utilization)
    if opts.kv_cache_memory_bytes is not None and opts.kv_cache_memory_bytes >= EXACT_LIMIT:
        raise UsageError(f"--kv-cache-memory: {opts.kv_cache_memory_bytes:,} B is beyond 2^53 B")
    if opts.pipeline_parallel_size != 1:
        raise UsageError(f"--pp: {opts.pipeline_parallel_size}: sweep handles PP = 1 only (use 'kvplan fit --pp')")
    if opts.shared_prefix_tokens:
        raise UsageError("--shared-prefix: sweep does not take a shared prefix (use 'kvplan fit --shared-prefix')")


def _exact(what: str, value: int) -> int:
    """``value`` (a byte count), or UsageError when it is not below 2^53."""
    if value >= EXACT_LIMIT:
        raise UsageError(f"{what}: {value:,} B is beyond the exact range of the sweep (2^53 B); use 'kvplan fit'")
    return value


def _configuration(np, xp, eng, spec, cache, budgets, seq) -> dict:
    """The columns of one configuration over its GPUs (rows of ``budgets``) and sequence lengths: the
    plan's figures, counted as :func:`kvplan.fit.plan_fit` counts them. Arrays of shape (GPUs, S)."""
    budget = budgets[:, None]
    caps = cache.pools(budget, xp)
    by_memory, ratio = count_requests(caps, cache.demand(seq, xp), cache.prefix(0, xp), xp)
    m = cache.measures(budget, seq, 0, xp)
    return dict(
        kv_bytes_per_request=m["kv_bytes_per_request"],
        num_blocks=m["num_blocks"],
        kv_capacity_tokens=m["kv_capacity_tokens"],
        max_concurrency=m["max_concurrency"],
        block_size=m["block_size"],
        max_requests_by_memory=by_memory,
        max_requests_ratio=ratio,
        max_model_len_fit=longest_request(cache, caps, xp),
    )


def _plan_lengths(np, xp, eng, spec, gpus, o, m, t, span, seq, max_seq, kvs, columns, max_num_seqs, valid, refused):
    """One model and TP over every GPU and KV dtype, for the sequence lengths ``seq`` (columns ``span`` of the
    seq axis): the engine's settings and budget per GPU tier, its plan per KV dtype, the figures into
    ``columns``; a KV dtype the engine refuses goes into ``refused``."""
    lo, hi = span
    width = hi - lo
    tiers: dict[tuple, list[int]] = {}
    for i, g in enumerate(gpus):  # GPUs sharing the engine's GPU-dependent settings
        tiers.setdefault(eng.settings_key(spec, g, o), []).append(i)
    for index in tiers.values():
        settings = eng.settings(spec, gpus[index[0]], o)
        eng.check(spec, o, settings)
        budgets = [eng.budget(spec, gpus[i], o, settings) for i in index]
        for b in budgets:
            _exact(f"{spec.name}: weights per GPU", b.weights_bytes)
        budget = np.asarray([b.kv_budget_bytes for b in budgets], dtype=np.int64)
        at = (m, slice(lo, hi), index)
        for col, attr in (("usable_bytes", "usable_bytes"), ("weights_bytes", "weights_bytes"),
                          ("activation_bytes", "activation_bytes"), ("overhead_bytes", "overhead_bytes"),
                          ("kv_budget_bytes", "kv_budget_bytes")):  # fmt: skip
            values = np.asarray([getattr(b, attr) for b in budgets], dtype=np.int64)
            for d in range(len(kvs)):
                columns[col][(*at, d, t)] = values[:, None]  # (GPUs, S): numpy puts the list index first
        for d, kv in enumerate(kvs):
            if kv is None:  # refused by the engine's kv_dtype
                continue
            try:
                cache = eng.plan(spec, kv, o, settings, max_seq)
            except UsageError as e:  # a KV dtype the engine's backends do not take for this model
                refused.setdefault((spec.name, kv.name, o.tensor_parallel_size), str(e))
                continue
            _exact(f"--seq: {max_seq:,} tokens of {spec.name}: one request",
                   cache.measures(max(budget.tolist()), max_seq)["kv_bytes_per_request"])  # fmt: skip
            valid[m, 0, 0, d, t] = True
            cols = _configuration(np, xp, eng, spec, cache, budget, seq)
            for k, v in cols.items():
                columns[k][(*at, d, t)] = np.broadcast_to(v, (len(index), width))
            columns["kv_bytes_per_token"][(*at, d, t)] = cache.kv_bytes_per_token
            columns["kv_bytes_per_block"][(*at, d, t)] = cache.kv_bytes_per_block
            cap = cache.request_cap(budget[:, None], seq, xp)  # the plan's cap (SGLang), else the settings'
            if cap is None:
                cap = -1 if settings.max_num_seqs is None else settings.max_num_seqs
            max_num_seqs[(*at, d, t)] = np.broadcast_to(cap, (len(index), width))


def sweep(
    specs: Sequence[ModelSpec],
    seqs: Sequence[int],
    gpus: Sequence[GPU],
    kv_dtypes: Sequence[str] = ("auto",),
    tps: Sequence[int] = (1,),
    opts: FitOptions | None = None,
) -> SweepResult:
    """:func:`kvplan.fit.plan_fit` for every (model, seq, GPU, KV dtype, TP), from the same rule functions.

    Args:
        specs: models (M).
        seqs: max_model_len values, tokens (S).
        gpus: GPUs (G); each one's CUDA-visible total is used.
        kv_dtypes: KV dtype names (D); ``auto`` is each model's dtype.
        tps: tensor-parallel sizes (T); those a model's heads do not allow are skipped for that model.
        opts: every other setting (engine, utilization, block size, ...); its TP, max_model_len and
            kv_dtype are replaced by the axes. PP must be 1 and no shared prefix.

    Returns:
        A :class:`SweepResult` of ``M × S × G × D × T`` rows less the skipped ones.

    Raises:
        UsageError: an empty axis, a value < 1 or above :data:`LIMITS`, a GPU above :data:`MAX_GPU_BYTES`,
            more than :data:`MAX_CONFIGURATIONS` configurations, a utilization outside (0, 1], an unknown
            dtype, a model without param_count (and no weights_bytes), every row skipped, or byte counts
            beyond 2^53.
    """
    import numpy as np

    opts = opts or FitOptions()
    _check_axes(specs, seqs, gpus, kv_dtypes, tps, opts)
    check_engine_options(opts)
    xp = numpy_ops()
    eng = engines.get(opts.engine)
    M, S, G, D, T = len(specs), len(seqs), len(gpus), len(kv_dtypes), len(tps)
    full = (M, S, G, D, T)
    seq = np.asarray(seqs, dtype=np.int64)[None, :]
    max_seq = max(seqs)
    ints = [c for c in VALUE_COLUMNS if c not in ("max_concurrency", "max_requests_ratio", "fits")]
    columns: dict[str, Any] = {c: np.zeros(full, dtype=np.int64) for c in ints}
    columns["max_concurrency"] = np.zeros(full, dtype=np.float64)
    columns["max_requests_ratio"] = np.zeros(full, dtype=np.float64)
    max_num_seqs = np.zeros(full, dtype=np.int64)
    valid = np.zeros((M, 1, 1, D, T), dtype=bool)
    dtype_code = np.zeros((M, D), dtype=np.int64)
    dtype_names: list[str] = []
    skipped_tp: list[tuple[str, int]] = []
    refused: dict[tuple[str, str, int], str] = {}
    for m, spec in enumerate(specs):
        # a TP above H_q never divides it, so the search stops there whatever --tp asks
        allowed = set(valid_tp_sizes(spec, limit=min(max(64, *tps), spec.num_q_heads)))
        draft = opts.speculative_model
        if draft is not None:  # a TP the draft model's heads refuse is refused too (plan_fit's check_tp)
            allowed &= set(valid_tp_sizes(draft, limit=min(max(64, *tps), draft.num_q_heads)))
        kvs = []
        for d, name in enumerate(kv_dtypes):
            try:
                kv = eng.kv_dtype(spec, name)
            except UsageError as e:  # a cache dtype the engine does not take: its rows are refused, as plan_fit does
                if str(name).strip().lower() not in eng.kv_cache_dtypes:
                    get_kv_dtype(name)  # a name kvplan does not know at all is an error, not a skipped row
                for tp in tps:
                    if tp in allowed:
                        refused.setdefault((spec.name, str(name), tp), str(e))
                label = str(name)
                if label not in dtype_names:
                    dtype_names.append(label)
                dtype_code[m, d] = dtype_names.index(label)
                kvs.append(None)
                continue
            label = eng.kv_label(spec, kv, opts)  # llama.cpp's -ctk / -ctv, where given, name the cache
            if label not in dtype_names:
                dtype_names.append(label)
            dtype_code[m, d] = dtype_names.index(label)
            kvs.append(kv)
        for t, tp in enumerate(tps):
            if tp not in allowed:
                skipped_tp.append((spec.name, tp))
                continue
            base = replace(opts, tensor_parallel_size=tp)
            try:  # the engine's load-time checks at this layout, as plan_fit runs them (no KV dtype or GPU in them)
                eng.load_check(spec, base, eng.parallel(spec, base))
            except UsageError as e:
                for kv in kvs:
                    refused.setdefault((spec.name, kv.name, tp), str(e))
                continue
            # an engine whose settings follow the request length (llama.cpp sizes -c from it; SGLang's
            # mem_fraction_static on ROCm) plans each length on its own; the others plan once for all lengths
            per_length = eng.plan_depends_on_length(base) or eng.settings_depend_on_seq
            for lo, hi in [(j, j + 1) for j in range(S)] if per_length else [(0, S)]:
                o = replace(base, max_model_len=int(seqs[lo])) if per_length else base
                top = int(seqs[lo]) if per_length else max_seq
                _plan_lengths(np, xp, eng, spec, gpus, o, m, t, (lo, hi), seq[:, lo:hi], top, kvs, columns,
                              max_num_seqs, valid, refused)  # fmt: skip
    valid_rows = np.broadcast_to(valid, full)
    if not valid_rows.any():
        if refused:
            raise UsageError(f"every row refused: {next(iter(refused.values()))}")
        pairs = ", ".join(f"{name} TP={tp}" for name, tp in dict.fromkeys(skipped_tp))
        raise UsageError(f"--tp: no row left: the heads of every model refuse every --tp given ({pairs})")
    all_valid = bool(valid_rows.all())

    def rows_of(arr):
        """(N,) rows of an array broadcastable to (M, S, G, D, T), skipped rows left out."""
        a = np.broadcast_to(arr, full)
        return a.reshape(-1) if all_valid else a[valid_rows]

    by_memory = columns["max_requests_by_memory"]
    capped = np.where(max_num_seqs >= 0, np.minimum(by_memory, np.where(max_num_seqs >= 0, max_num_seqs, 0)), by_memory)
    columns["max_concurrent_requests"] = capped
    out = {k: rows_of(v) for k, v in columns.items()}
    out["fits"] = out["max_requests_by_memory"] >= 1
    out["limited_by_max_num_seqs"] = rows_of((max_num_seqs >= 0) & (by_memory > max_num_seqs))
    index = np.indices(full, sparse=True)
    spec_max = np.asarray([sp.max_model_len for sp in specs], dtype=np.int64).reshape(M, 1, 1, 1, 1)
    seq_axis = np.asarray(seqs, dtype=np.int64).reshape(1, S, 1, 1, 1)
    beyond = np.broadcast_to(seq_axis > spec_max, full)
    skipped = int(valid_rows.size - np.count_nonzero(valid_rows))
    return SweepResult(
        model_names=tuple(sp.name for sp in specs),
        gpu_labels=tuple(gpu_label(g) for g in gpus),
        gpu_short_labels=tuple(gpu_label(g, short=True) for g in gpus),
        kv_dtype_names=tuple(dtype_names),
        engine=eng.engine.value,
        block_size=int(out["block_size"][0]) if len(out["block_size"]) else 0,
        model_index=rows_of(index[0]),
        gpu_index=rows_of(index[2]),
        kv_dtype_index=rows_of(dtype_code[:, None, None, :, None]),
        seq=rows_of(seq_axis),
        tp=rows_of(np.asarray(tps, dtype=np.int64).reshape(1, 1, 1, 1, T)),
        columns=out,
        skipped_rows=skipped,
        skipped_tp=tuple(dict.fromkeys(skipped_tp)),
        skipped_refused=tuple((name, kv, tp, why) for (name, kv, tp), why in refused.items()),
        beyond_max_context_rows=int(np.count_nonzero(beyond & valid_rows)),
        request_cap_name=eng.request_cap_name,
    )


def skipped_message(result: SweepResult) -> str:
    """One line naming the rows skipped, e.g. ``skipped 7,920 rows: --tp does not divide the heads of
    falcon-7b (TP 2, 4), phi3-medium (TP 4); vLLM refuses deepseek-v3.2 int8 (TP 1): ...``."""
    parts = []
    by_model: dict[str, list[int]] = {}
    for name, tp in result.skipped_tp:
        by_model.setdefault(name, []).append(tp)
    if by_model:
        what = ", ".join(f"{name} (TP {', '.join(str(t) for t in tps)})" for name, tps in by_model.items())
        parts.append(f"--tp does not divide the heads of {what}")
    by_case: dict[tuple[str, str], list[int]] = {}
    reasons: dict[tuple[str, str], str] = {}
    for name, kv, tp, why in result.skipped_refused:
        by_case.setdefault((name, kv), []).append(tp)
        reasons.setdefault((name, kv), why)
    for (name, kv), tps in by_case.items():
        parts.append(f"the engine refuses {name} {kv} (TP {', '.join(str(t) for t in tps)}): {reasons[(name, kv)]}")
    return f"skipped {plural(result.skipped_rows, 'row')}: " + "; ".join(parts)
