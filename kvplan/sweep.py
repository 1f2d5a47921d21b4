"""``kvplan sweep``: :func:`kvplan.fit.plan_fit` over a cross product of settings, vectorized with numpy.

The cross product is models × sequence lengths (as ``max_model_len``) × GPUs × KV dtypes × TP degrees,
with every other setting (engine, memory fraction, block size, ...) shared. Each row equals, field by
field, ``plan_fit(spec, gpu, FitOptions(..., tensor_parallel_size=tp, max_model_len=seq,
kv_dtype=dtype))`` (tests/test_sweep.py checks a random sample against the scalar function).

How it is vectorized (shapes with axes ``(M, S, G, D, T)``: models, seqs, GPUs, dtypes, TPs):

- per configuration ``(M, 1, 1, D, T)``, built by a small Python loop over models × dtypes × TPs with
  the scalar helpers of :mod:`kvplan.calc` and :mod:`kvplan.fit`: bytes per token of the layers whose
  cache grows with the request (full, MLA), of the sliding and chunked layers (and their windows), the
  fixed Mamba state, weights, activation and overhead per GPU;
- per configuration and GPU ``(M, 1, G, D, T)``: the KV budget (the engine's formula, float64 exactly as
  the scalar code evaluates it), blocks, capacity, and ``max_model_len_fit`` by a binary search run on
  all elements at once (≤ 41 rounds of array operations);
- per configuration and sequence ``(M, S, 1, D, T)``: bytes per request (the engine's block rules);
- per row ``(M, S, G, D, T)``: whole requests that fit and vLLM's "Maximum concurrency".

Every byte count is int64, kept below 2^53 (checked; beyond, a :class:`UsageError`) so that the float
division of "Maximum concurrency" rounds as Python's ``int / int`` does. Before any array is built, every
integer setting is checked against :data:`LIMITS` and each GPU against :data:`MAX_GPU_BYTES` (vLLM's
``total × utilization × 10^6`` must stay inside int64), and the cross product against
:data:`MAX_CONFIGURATIONS` (about 160 B of arrays per configuration at the peak, so at most ~1.6 GB).
Rows whose TP the model's heads do not allow (:func:`kvplan.fit.valid_tp_sizes`) are left out and counted in
:attr:`SweepResult.skipped_rows`.

numpy is imported inside the functions: ``kvplan estimate`` and ``kvplan fit`` never import this module.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any, Iterator, Sequence

from kvplan.calc import layer_state_bytes, layer_token_bytes, resolve_kv_dtype, valid_tp_sizes
from kvplan.engines import sglang as sglang_rules
from kvplan.engines import trtllm as trtllm_rules
from kvplan.engines import vllm as vllm_rules
from kvplan.errors import UsageError
from kvplan.fit import (
    CONVENTIONS,
    MAX_SEARCH_TOKENS,
    Engine,
    FitOptions,
    check_speculative,
    engine_settings,
    fixed_memory,
    get_engine,
    vllm_settings,
)
from kvplan.gpus import GPU
from kvplan.specs import STATE_KINDS, ModelSpec
from kvplan.units import plural

EXACT_LIMIT = 1 << 53  # byte counts stay below this: exact in float64, so ratios round as Python's
LLAMACPP_PAD = 256  # llama.cpp pads cell counts to 256 (kvplan.fit.request_bytes)
# Largest cross product (models × seqs × GPUs × dtypes × TPs) one sweep computes: its arrays peak near
# 160 B per configuration (28M configurations measured 4.5 GB), so 10^7 stays under ~1.6 GB.
MAX_CONFIGURATIONS = 10_000_000
# Upper bounds of the integer settings, checked by the sweep itself before any array is built: with
# them every int64 intermediate (blocks × bytes, the max_model_len_fit probes) stays far below 2^63.
LIMITS = {
    "--seq": MAX_SEARCH_TOKENS,  # 2^40 tokens (then a request must stay below 2^53 B, checked per model)
    "--tp": 1 << 16,
    "--block-size": 1 << 20,
    "--max-num-batched-tokens": 1 << 31,
    "--max-batch-size": 1 << 24,
    "--max-num-seqs": 1 << 24,
}
# Largest GPU (CUDA-visible bytes): vLLM's budget computes total × utilization × 10^6 in int64, which
# holds up to 9.2 × 10^18, i.e. GPUs up to 9.2 TB; 2^43 B = 8 TiB keeps a margin.
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
    "max_concurrency",
    "kv_capacity_tokens",
    "fits",
)
# The table's columns: as OUTPUT_COLUMNS, with the GPU's short name (first alias) for people, and kvplan's own
# concurrency ratio (its floor is the whole requests), shown cut to two decimals under engines without a log figure.
TABLE_COLUMNS = (*("gpu_short" if c == "gpu" else c for c in OUTPUT_COLUMNS), "max_requests_ratio")

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
        skipped_rows: rows left out because TP does not divide the model's heads.
        skipped_tp: ``(model name, tp)`` pairs that were left out.
        beyond_max_context_rows: rows whose seq exceeds the model's max context (computed anyway).
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
    beyond_max_context_rows: int = 0

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
            else:
                cols[f] = self.columns[f][start:stop].tolist()
        return cols

    def rows(self, limit: int | None = None, fields: Sequence[str] = OUTPUT_COLUMNS) -> list[dict[str, Any]]:
        """The first ``limit`` rows (all when None) as dicts of Python ints, floats, bools and strings.

        Args:
            limit: how many rows, from the first.
            fields: which keys, among :data:`OUTPUT_COLUMNS`, ``gpu_short`` and :data:`VALUE_COLUMNS`.
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


@dataclass
class _Configs:
    """Per (model, dtype, TP) scalars as int64 arrays of shape (M, 1, 1, D, T)."""

    growing: Any  # bytes per token of the layers cached for every token (full, MLA; sliding when swa_full)
    sliding: Any  # bytes per token of the sliding layers (0: none)
    sliding_window: Any  # their window, tokens (1 when none)
    chunked: Any  # bytes per token of the chunked layers (0: none)
    chunk: Any  # their chunk, tokens (1 when none)
    state: Any  # fixed bytes per request (Mamba)
    per_token: Any  # bytes per token of all token-caching layers (FitResult.kv_bytes_per_token)
    weights: Any
    activation: Any
    overhead: Any
    valid: Any  # bool: the model's heads allow this TP


def _check_int(flag: str, value, limit: int) -> None:
    """Raise UsageError unless ``value`` is an int in 1..``limit`` (the sweep's own bounds, see :data:`LIMITS`)."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise UsageError(f"{flag}: {value!r} must be an integer >= 1")
    if value > limit:
        raise UsageError(
            f"{flag}: {value:,} is beyond the range the vectorized sweep computes exactly (at most {limit:,})"
        )


def _check_bytes(what: str, value: int) -> int:
    """``value`` (a byte count from the scalar helpers), or UsageError when it is not below 2^53."""
    if value >= EXACT_LIMIT:
        raise UsageError(f"{what}: {value:,} B is beyond the exact range of the vectorized sweep (2^53 B)")
    return value


def _cdiv(np, a, b):
    """Ceiling division of non-negative int64 arrays (as :func:`kvplan.calc.cdiv`)."""
    return -np.floor_divide(-a, b)


def _request_bytes(np, cfg: _Configs, seq, engine: Engine, block: int, mnbt: int):
    """Bytes one request of ``seq`` tokens holds, vectorized :func:`kvplan.fit.request_bytes` (PP = 1).

    Args:
        np: the numpy module.
        cfg: configuration arrays; ``seq`` is an int64 array broadcastable against them.

    Returns:
        int64 array of the broadcast shape.
    """
    full_tokens = _cdiv(np, seq, block) * block
    total = cfg.state + cfg.growing * full_tokens
    for per_token, window, kind in ((cfg.sliding, cfg.sliding_window, "sliding"), (cfg.chunked, cfg.chunk, "chunked")):
        if not per_token.any():
            continue
        if engine is Engine.vllm and kind == "sliding":
            tokens = (_cdiv(np, np.minimum(window - 1 + mnbt, seq), block) + 1) * block
        elif engine is Engine.vllm:
            tokens = _cdiv(np, np.minimum(window + mnbt, seq), block) * block
        elif engine is Engine.llamacpp:
            tokens = np.minimum(full_tokens, _cdiv(np, window + mnbt, LLAMACPP_PAD) * LLAMACPP_PAD)
        else:
            tokens = _cdiv(np, np.minimum(seq, window), block) * block
        total = total + per_token * tokens
    return total


def _configs(np, specs, kv_dtypes, tps, conv, opts: FitOptions, mnbt: int, max_batch: int, swa_full):
    """Build the per-configuration arrays (a loop over models × dtypes × TPs, scalar helpers of fit/calc).
    ``swa_full``: one bool, or one per model."""
    shape = (len(specs), 1, 1, len(kv_dtypes), len(tps))
    arrays = {k: np.zeros(shape, dtype=np.int64) for k in _Configs.__dataclass_fields__ if k != "valid"}
    arrays["sliding_window"][...] = 1
    arrays["chunk"][...] = 1
    valid = np.zeros(shape, dtype=bool)
    names = np.zeros((len(specs), len(kv_dtypes)), dtype=np.int64)
    dtype_names: list[str] = []
    for m, spec in enumerate(specs):
        # a TP above H_q never divides it, so the search stops there whatever --tp asks
        allowed = set(valid_tp_sizes(spec, limit=min(max(64, *tps), spec.num_q_heads)))
        by_kind: dict[str, list] = {}
        for layer in spec.layers:
            by_kind.setdefault(layer.kind, []).append(layer)
        for t, tp in enumerate(tps):
            weights, _, activation, overhead = fixed_memory(spec, conv, opts, tp, 1, mnbt, max_batch)
            weights = _check_bytes(f"{spec.name}: weights per GPU", weights)
            activation = _check_bytes(f"{spec.name}: activation per GPU", activation)
            overhead = _check_bytes(f"{spec.name}: overhead per GPU", overhead)
            for d, name in enumerate(kv_dtypes):
                kv_dtype = resolve_kv_dtype(spec, name)
                if kv_dtype.name not in dtype_names:
                    dtype_names.append(kv_dtype.name)
                names[m, d] = dtype_names.index(kv_dtype.name)
                at = (m, 0, 0, d, t)
                valid[at] = tp in allowed
                arrays["weights"][at] = weights
                arrays["activation"][at] = activation
                arrays["overhead"][at] = overhead
                for kind, layers in by_kind.items():
                    arrays["state"][at] += sum(layer_state_bytes(x, spec.dtype, tp) for x in layers)
                    per_token = sum(layer_token_bytes(x, kv_dtype, tp) for x in layers)
                    if not per_token:
                        continue
                    arrays["per_token"][at] += per_token
                    window = spec.window_of(kind)
                    full_windows = swa_full[m] if isinstance(swa_full, (list, tuple)) else swa_full
                    if kind in ("full", "mla") or window is None or full_windows:
                        arrays["growing"][at] += per_token
                    elif kind == "sliding":
                        arrays["sliding"][at] += per_token
                        arrays["sliding_window"][at] = window
                    else:
                        arrays["chunked"][at] += per_token
                        arrays["chunk"][at] = window
    return _Configs(valid=valid, **arrays), names, tuple(dtype_names)


def _budget(np, cfg: _Configs, totals, engine: Engine, util: float, given: int | None):
    """(usable, budget) per configuration and GPU, int64 (M, 1, G, D, T): the formulas of plan_fit.

    The float steps are float64 as in the scalar code (``int(x)`` truncates toward zero, as ``astype``):
    vLLM ``ceil(total × U)`` is ``-(-int(total × U × 10^6) // 10^6)``.
    """
    total = totals + np.zeros_like(cfg.weights)  # broadcast to (M, 1, G, D, T)
    if engine is Engine.vllm:
        scaled = (total.astype(np.float64) * util * 10**6).astype(np.int64)
        usable = -np.floor_divide(-scaled, 10**6)
        budget = usable - cfg.weights - cfg.activation - cfg.overhead
    elif engine is Engine.sglang:
        usable = ((total - cfg.overhead).astype(np.float64) * util).astype(np.int64)
        budget = usable - cfg.weights - cfg.activation
    elif engine is Engine.trtllm:
        usable = total - cfg.weights - cfg.activation - cfg.overhead
        budget = (usable.astype(np.float64) * util).astype(np.int64)
    else:
        usable = (total.astype(np.float64) * util).astype(np.int64)
        budget = usable - cfg.weights - cfg.activation - cfg.overhead
    if given is not None:
        budget = np.full_like(budget, given)
    return usable, np.maximum(budget, 0)


def _max_model_len_fit(np, cfg: _Configs, budget, engine: Engine, block: int, mnbt: int):
    """Largest S in [0, 2^40] with request_bytes(S) ≤ budget, per element: plan_fit's binary search, vectorized.

    The predicate is monotone in S, so the answer is the same whatever the search path. Probes are
    clamped to ``budget // growing + 2 × block + 1`` tokens, beyond which a request surely exceeds the
    budget, so int64 never overflows.
    """
    shape = budget.shape
    growing = np.broadcast_to(cfg.growing, shape)
    cap = np.where(growing > 0, budget // np.maximum(growing, 1) + 2 * block + 1, MAX_SEARCH_TOKENS)
    lo = np.zeros(shape, dtype=np.int64)
    hi = np.full(shape, MAX_SEARCH_TOKENS, dtype=np.int64)
    while True:
        active = lo < hi
        if not active.any():
            return lo
        mid = (lo + hi + 1) // 2
        ok = _request_bytes(np, cfg, np.minimum(mid, cap), engine, block, mnbt) <= budget
        lo = np.where(active & ok, mid, lo)
        hi = np.where(active & ~ok, mid - 1, hi)


def sweep(
    specs: Sequence[ModelSpec],
    seqs: Sequence[int],
    gpus: Sequence[GPU],
    kv_dtypes: Sequence[str] = ("auto",),
    tps: Sequence[int] = (1,),
    opts: FitOptions | None = None,
) -> SweepResult:
    """:func:`kvplan.fit.plan_fit` for every (model, seq, GPU, KV dtype, TP), vectorized.

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
            beyond 2^53. All are checked before the arrays are built.
    """
    import numpy as np

    opts = opts or FitOptions()
    for flag, axis in (("MODEL", specs), ("--seq", seqs), ("--gpu", gpus), ("--kv-dtype", kv_dtypes), ("--tp", tps)):
        if not len(axis):
            raise UsageError(f"{flag}: give at least one value")
    asked = len(specs) * len(seqs) * len(gpus) * len(kv_dtypes) * len(tps)
    if asked > MAX_CONFIGURATIONS:
        raise UsageError(
            f"MODEL × --seq × --gpu × --kv-dtype × --tp: {asked:,} configurations asked ({len(specs)} × "
            f"{len(seqs)} × {len(gpus)} × {len(kv_dtypes)} × {len(tps)}); one sweep computes at most "
            f"{MAX_CONFIGURATIONS:,}: split it into several runs"
        )
    for tp in tps:
        _check_int("--tp", tp, LIMITS["--tp"])
    for s in seqs:
        _check_int("--seq", s, LIMITS["--seq"])
    for g in gpus:
        if g.cuda_total_bytes > MAX_GPU_BYTES:
            raise UsageError(
                f"--gpu: {gpu_label(g).removeprefix('custom ')} ({g.cuda_total_bytes:,} B) is beyond the range "
                f"the vectorized sweep computes exactly (at most {MAX_GPU_BYTES:,} B = 8 TiB per GPU)"
            )
    if opts.pipeline_parallel_size != 1:
        raise UsageError(f"--pp: {opts.pipeline_parallel_size}: sweep handles PP = 1 only (use 'kvplan fit --pp')")
    if opts.shared_prefix_tokens:
        raise UsageError("--shared-prefix: sweep does not take a shared prefix (use 'kvplan fit --shared-prefix')")
    conv = CONVENTIONS[get_engine(opts.engine)]
    engine = conv.engine
    util, block, mnbt, max_batch = engine_settings(conv, opts)  # None: the engine's default; 0 is an error
    for flag, value in (("--block-size", block), ("--max-num-batched-tokens", mnbt)):
        _check_int(flag, value, LIMITS[flag])
    if opts.max_batch_size is not None:  # the default is 0 outside TRT-LLM (no per-sequence buffers)
        _check_int("--max-batch-size", opts.max_batch_size, LIMITS["--max-batch-size"])
    if opts.max_num_seqs is not None:
        _check_int("--max-num-seqs", opts.max_num_seqs, LIMITS["--max-num-seqs"])
    if opts.kv_cache_memory_bytes is not None and opts.kv_cache_memory_bytes >= EXACT_LIMIT:
        raise UsageError(f"--kv-cache-memory: {opts.kv_cache_memory_bytes:,} B is beyond 2^53 B")

    # GPUs sharing the engine's GPU-dependent defaults (vLLM: batched tokens, max_num_seqs, backend family)
    # are computed together; one tier for every other engine and version.
    groups_rules = engine is Engine.vllm and vllm_rules.resolve_rules(opts.engine_version).kv_cache_groups
    check_speculative(specs[0], replace(opts, tensor_parallel_size=1), groups_rules)  # TPs: checked per row
    tiers: dict[tuple, list[int]] = {}
    for i, g in enumerate(gpus):
        if engine is Engine.vllm:
            vs = vllm_settings(specs[0], g, opts)
            key = (engine_settings(conv, opts, g)[2], vs.max_num_seqs, vs.family)
        elif engine is Engine.trtllm:  # max_batch_size caps running requests (as plan_fit)
            key = (mnbt, max_batch if opts.max_num_seqs is None else opts.max_num_seqs, "")
        else:
            key = (mnbt, None, "")
        tiers.setdefault(key, []).append(i)
    for key in tiers:
        _check_int("--max-num-batched-tokens", key[0], LIMITS["--max-num-batched-tokens"])

    M, S, G, D, T = len(specs), len(seqs), len(gpus), len(kv_dtypes), len(tps)
    full = (M, S, G, D, T)
    seq_axis = np.asarray(seqs, dtype=np.int64).reshape(1, S, 1, 1, 1)
    columns: dict[str, Any] = {}
    valid_cfg = dtype_code = dtype_names = None
    for (tier_mnbt, tier_seqs, family), index in tiers.items():
        sub = [gpus[i] for i in index]
        if groups_rules:
            part, valid_cfg, dtype_code, dtype_names = _tier_vllm_groups(
                np, specs, seqs, sub, kv_dtypes, tps, conv, opts, util, tier_mnbt, tier_seqs, family
            )
        else:
            part, valid_cfg, dtype_code, dtype_names = _tier_legacy(
                np, specs, seqs, sub, kv_dtypes, tps, conv, opts, util, block, tier_mnbt, max_batch, tier_seqs
            )
        if len(tiers) == 1:
            columns = {k: np.broadcast_to(v, full) for k, v in part.items()}
            break
        for k, v in part.items():
            if k not in columns:
                columns[k] = np.zeros(full, dtype=v.dtype)
            columns[k][:, :, index] = np.broadcast_to(v, (M, S, len(index), D, T))

    valid = np.broadcast_to(valid_cfg, full)
    all_valid = bool(valid.all())

    def rows_of(arr):
        """(N,) rows of an array broadcastable to (M, S, G, D, T), skipped rows left out."""
        a = np.broadcast_to(arr, full)
        return a.reshape(-1) if all_valid else a[valid]

    columns = {k: rows_of(columns[k]) for k in VALUE_COLUMNS if k != "fits"}
    columns["fits"] = columns["max_requests_by_memory"] >= 1
    index = np.indices((M, S, G, D, T), sparse=True)
    dtype_index = dtype_code[:, None, None, :, None]  # (M, 1, 1, D, 1)
    spec_max = np.asarray([s.max_model_len for s in specs], dtype=np.int64).reshape(M, 1, 1, 1, 1)
    beyond = np.broadcast_to(seq_axis > spec_max, full)
    skipped_tp = tuple((specs[m].name, int(tps[t])) for m in range(M) for t in range(T) if not valid_cfg[m, 0, 0, 0, t])
    result = SweepResult(
        model_names=tuple(s.name for s in specs),
        gpu_labels=tuple(gpu_label(g) for g in gpus),
        gpu_short_labels=tuple(gpu_label(g, short=True) for g in gpus),
        kv_dtype_names=dtype_names,
        engine=engine.value,
        block_size=block,
        model_index=rows_of(index[0]),
        gpu_index=rows_of(index[2]),
        kv_dtype_index=rows_of(dtype_index),
        seq=rows_of(seq_axis),
        tp=rows_of(np.asarray(tps, dtype=np.int64).reshape(1, 1, 1, 1, T)),
        columns=columns,
        skipped_rows=int(valid.size - np.count_nonzero(valid)),
        skipped_tp=tuple(dict.fromkeys(skipped_tp)),
        beyond_max_context_rows=int(np.count_nonzero(beyond & valid)),
    )
    if result.num_rows == 0:
        pairs = ", ".join(f"{m} TP={t}" for m, t in result.skipped_tp)
        raise UsageError(f"--tp: no row left: the heads of every model refuse every --tp given ({pairs})")
    return result


def _check_request_bounds(np, specs, cfg: _Configs, seqs, gpus, opts: FitOptions, block: int, mnbt: int) -> None:
    """Per model, in Python ints: a request of max(seqs) holds at most max_seq + 3 blocks (+ the batched
    tokens and llama.cpp's pad for windowed layers) per layer; it must stay below 2^53 B (exact in
    float64). The max_model_len_fit probes add at most the budget and a window: below 2^62 (int64).

    Raises:
        UsageError: a model beyond those bounds.
    """
    max_seq, extra = max(seqs), 3 * block + mnbt + LLAMACPP_PAD + 1
    budget_bound = max(g.cuda_total_bytes for g in gpus) + (opts.kv_cache_memory_bytes or 0)
    for m, spec in enumerate(specs):
        state, per_token = int(cfg.state[m].max()), int(cfg.per_token[m].max())
        worst = state + per_token * (max_seq + extra)
        if worst >= EXACT_LIMIT:
            raise UsageError(
                f"--seq: {max_seq:,} tokens of {spec.name} would need about {worst:,} B per request, beyond "
                "the exact range of the vectorized sweep (2^53 B); use 'kvplan fit'"
            )
        # GPUs <= 2^43 B and a given budget < 2^53 B: only a huge window can break this bound now
        window = min(max(int(cfg.sliding_window[m].max()), int(cfg.chunk[m].max())), MAX_SEARCH_TOKENS)
        if state + budget_bound + per_token * (window + extra) >= 1 << 62:
            raise UsageError(
                f"{spec.name}: a sliding window or attention chunk of {window:,} tokens at {per_token:,} B per "
                "token is beyond the range the vectorized sweep computes exactly; use 'kvplan fit'"
            )


def _tier_legacy(np, specs, seqs, gpus, kv_dtypes, tps, conv, opts, util, block, mnbt, max_batch, max_num_seqs):
    """Every engine but vLLM ≥ 0.33: one pool counted per layer (:func:`kvplan.fit.plan_fit`'s first branch).

    Returns:
        (columns broadcastable to (M, S, G, D, T), valid (M, 1, 1, D, T), dtype codes, dtype names).
    """
    engine = conv.engine
    # TensorRT-LLM (kvplan.engines.trtllm): windows sized as full, ceil(max_tokens / block) blocks, requests
    # counted against the pool it allocates
    trt = trtllm_rules.resolve_rules(opts.engine_version) if engine is Engine.trtllm else None
    # SGLang (kvplan.engines.sglang): hybrid-SWA architectures split full and SWA pools; the others size
    # windows as full (one pool of max_total_num_tokens slots in every layer)
    hybrid = [engine is Engine.sglang and sglang_rules.is_hybrid_swa(sp) for sp in specs]
    swa_full = [
        opts.swa_full or (trt is not None and trt.windows_as_full) or (engine is Engine.sglang and not h)
        for h in hybrid
    ]
    cfg, dtype_code, dtype_names = _configs(np, specs, kv_dtypes, tps, conv, opts, mnbt, max_batch, swa_full)
    _check_request_bounds(np, specs, cfg, seqs, gpus, opts, block, mnbt)
    S, G = len(seqs), len(gpus)
    seq_axis = np.asarray(seqs, dtype=np.int64).reshape(1, S, 1, 1, 1)
    totals = np.asarray([g.cuda_total_bytes for g in gpus], dtype=np.int64).reshape(1, 1, G, 1, 1)
    # per configuration × GPU (M, 1, G, D, T)
    usable, budget = _budget(np, cfg, totals, engine, util, opts.kv_cache_memory_bytes)
    per_block = block * cfg.per_token
    if trt is not None:
        max_tokens = budget // np.maximum(cfg.per_token, 1)
        blocks = _cdiv(np, max_tokens, block) if trt.ceil_blocks else max_tokens // block
        num_blocks = np.where(cfg.per_token > 0, blocks, 0)
    else:
        num_blocks = np.where(per_block > 0, budget // np.maximum(per_block, 1), 0)
    pool = np.where(per_block > 0, num_blocks * per_block, budget)
    room = pool if trt is not None else budget
    fit_len = _max_model_len_fit(np, cfg, room, engine, block, mnbt)
    # per configuration × seq (M, S, 1, D, T)
    per_request = _request_bytes(np, cfg, seq_axis, engine, block, mnbt)
    # per row (M, S, G, D, T); shared prefix is 0, so unique bytes = per_request
    positive = per_request > 0
    by_memory = np.where(positive & (room >= per_request), room // np.maximum(per_request, 1), 0)
    concurrency = np.where(positive, pool / np.where(positive, per_request, 1), 0.0)
    requests_ratio = np.where(positive, room / np.where(positive, per_request, 1), 0.0)  # floor = by_memory
    if any(hybrid):  # SGLang's full / SWA pool split, as plan_fit (kvplan.engines.sglang)
        hyb = np.asarray(hybrid).reshape(len(specs), 1, 1, 1, 1)
        win = np.asarray([sglang_rules.window(sp) for sp in specs], dtype=np.int64).reshape(len(specs), 1, 1, 1, 1)
        full_pt, swa_pt = cfg.growing, cfg.sliding + cfg.chunked
        ratio = sglang_rules.DEFAULT_SWA_FULL_TOKENS_RATIO
        cell = full_pt + ratio * swa_pt
        full = np.where(cell > 0, np.floor_divide(budget.astype(np.float64), np.where(cell > 0, cell, 1)), 0)
        full = full.astype(np.int64) // block * block
        swa = (full.astype(np.float64) * ratio).astype(np.int64) // block * block
        limit = win + sglang_rules.SWA_EVICTION_INTERVAL + 2 * block
        swa_req = np.minimum(seq_axis, limit)
        num_blocks = np.where(hyb, full // block, num_blocks)
        per_request = np.where(hyb, seq_axis * full_pt + swa_pt * swa_req, per_request)
        by_memory = np.where(hyb, np.minimum(full // seq_axis, swa // swa_req), by_memory)
        concurrency = np.where(hyb, np.minimum(full / seq_axis, swa / swa_req), concurrency)
        requests_ratio = np.where(hyb, np.minimum(full / seq_axis, swa / swa_req), requests_ratio)
        longest = np.where(swa >= np.minimum(full, limit), full, np.minimum(full, swa))
        fit_len = np.where(hyb, longest, fit_len)
    capped = by_memory if max_num_seqs is None else np.minimum(by_memory, max_num_seqs)
    columns = {
        "usable_bytes": usable,
        "weights_bytes": cfg.weights,
        "activation_bytes": cfg.activation,
        "overhead_bytes": cfg.overhead,
        "kv_budget_bytes": budget,
        "kv_bytes_per_token": cfg.per_token,
        "kv_bytes_per_block": per_block,
        "kv_bytes_per_request": per_request,
        "num_blocks": num_blocks,
        "kv_capacity_tokens": num_blocks * block,
        "max_concurrent_requests": capped,
        "max_concurrency": concurrency,
        "max_model_len_fit": fit_len,
        "block_size": np.full((1, 1, 1, 1, 1), block, dtype=np.int64),
        "max_requests_by_memory": by_memory,
        "max_requests_ratio": requests_ratio,
    }
    return columns, cfg.valid, dtype_code, dtype_names


# Kinds of a KV cache group class in the vectorized vLLM ≥ 0.33 rules (kvplan.engines.vllm.KVGroup).
_NONE, _GROWING, _SLIDING, _CHUNKED, _STATE = range(5)


def _group_code(group) -> int:
    if group.kind == "sliding":
        return _SLIDING
    if group.kind == "chunked":
        return _CHUNKED
    if group.kind in ("full", "mla"):
        return _GROWING
    return _STATE


def _blocks_per_request(np, classes, seq, in_flight: int):
    """Blocks one request of ``seq`` tokens takes, vectorized :meth:`kvplan.engines.vllm.VllmLayout.blocks_per_request`.

    Args:
        classes: per class k, arrays (kind, count, block, window, pages) of shape (M, 1, 1, D, T).
        seq: int64 array broadcastable against them.
    """
    total = 0
    for kind, count, block, window, pages in classes:
        growing = _cdiv(np, seq, block)
        sliding = _cdiv(np, np.minimum(window - 1 + in_flight, seq), block) + 1
        chunked = _cdiv(np, np.minimum(window + in_flight, seq), block)
        blocks = np.where(
            kind == _GROWING,
            growing,
            np.where(
                kind == _SLIDING, sliding, np.where(kind == _CHUNKED, chunked, np.where(kind == _STATE, pages, 0))
            ),
        )
        total = total + count * blocks
    return total


def _tier_vllm_groups(np, specs, seqs, gpus, kv_dtypes, tps, conv, opts, util, mnbt, max_num_seqs, family):
    """vLLM ≥ 0.33 on GPUs sharing batch defaults and backend family (:func:`kvplan.fit._plan_vllm_groups`).

    Per configuration (model, dtype, TP) the group layout comes from :func:`kvplan.engines.vllm.build_layout`
    (a Python loop); the groups are summarized as classes (kind, block, window, pages) with a count, so that
    blocks per request, fits and the longest request are array operations.

    Returns:
        (columns broadcastable to (M, S, G, D, T), valid (M, 1, 1, D, T), dtype codes, dtype names).
    """
    M, S, G, D, T = len(specs), len(seqs), len(gpus), len(kv_dtypes), len(tps)
    shape = (M, 1, 1, D, T)
    names = ("weights", "activation", "overhead", "per_token", "per_block", "block", "len_block")
    a = {k: np.zeros(shape, dtype=np.int64) for k in names}
    a["block"][...] = 1
    valid = np.zeros(shape, dtype=bool)
    dtype_code = np.zeros((M, D), dtype=np.int64)
    dtype_names: list[str] = []
    layouts: dict[tuple, dict] = {}
    max_seq = max(seqs)
    for m, spec in enumerate(specs):
        allowed = set(valid_tp_sizes(spec, limit=min(max(64, *tps), spec.num_q_heads)))
        draft = opts.speculative_model
        if draft is not None:  # a TP the draft model's heads refuse is refused too (plan_fit's check_tp)
            allowed &= set(valid_tp_sizes(draft, limit=min(max(64, *tps), draft.num_q_heads)))
        vs = vllm_settings(spec, gpus[0], opts)
        for t, tp in enumerate(tps):
            weights, _, activation, overhead = fixed_memory(spec, conv, opts, tp, 1, mnbt, 0)
            for d, name in enumerate(kv_dtypes):
                kv_dtype = resolve_kv_dtype(spec, name)
                if kv_dtype.name not in dtype_names:
                    dtype_names.append(kv_dtype.name)
                dtype_code[m, d] = dtype_names.index(kv_dtype.name)
                at = (m, 0, 0, d, t)
                valid[at] = tp in allowed
                if not valid[at]:
                    continue
                layout = vllm_rules.build_layout(
                    spec, kv_dtype, tp, 1, max_seq, opts.block_size, vs.prefix_caching, vs.hybrid_kv_cache_manager,
                    family, None, opts.num_speculative_tokens, draft, opts.num_mtp_layers,
                )  # fmt: skip
                a["weights"][at] = _check_bytes(f"{spec.name}: weights per GPU", weights)
                a["activation"][at] = _check_bytes(f"{spec.name}: activation per GPU", activation)
                a["overhead"][at] = _check_bytes(f"{spec.name}: overhead per GPU", overhead)
                sparse = vllm_rules.is_sparse_mla(spec)
                a["per_token"][at] = sum(vllm_rules.token_bytes(x, kv_dtype, tp, sparse) for x in spec.layers)
                if opts.num_mtp_layers:  # the drafter's layers, as plan_fit
                    mtp = vllm_rules.mtp_template(spec)
                    a["per_token"][at] += opts.num_mtp_layers * vllm_rules.token_bytes(mtp, kv_dtype, tp, sparse)
                if draft is not None:
                    ds = vllm_rules.is_sparse_mla(draft)
                    a["per_token"][at] += sum(vllm_rules.token_bytes(x, kv_dtype, tp, ds) for x in draft.layers)
                a["per_block"][at] = layout.worst_bytes_per_block
                # a state group without prefix caching has blocks of max_model_len tokens (vLLM sets
                # mamba_block_size = max_model_len), which the reported block size takes when smaller
                state_len = [g for g in layout.groups if g.kind in STATE_KINDS and layout.mamba_cache_mode == "none"]
                other = [g.block_size for g in layout.groups if g not in state_len]
                a["block"][at] = min(other, default=MAX_SEARCH_TOKENS)
                a["len_block"][at] = bool(state_len)
                counts: dict[tuple, int] = {}
                for g in layout.groups:
                    key = (_group_code(g), g.block_size, g.window or 1, g.state_pages)
                    counts[key] = counts.get(key, 0) + 1
                layouts[at] = counts
                # the largest request at max(seqs) must stay exact in float64
                in_flight = vllm_rules.in_flight_tokens(mnbt, 1, vs.async_scheduling)
                worst = layout.blocks_per_request(max_seq, in_flight) * layout.worst_bytes_per_block
                if worst >= EXACT_LIMIT:
                    raise UsageError(
                        f"--seq: {max_seq:,} tokens of {spec.name} would need about {worst:,} B per request, beyond "
                        "the exact range of the vectorized sweep (2^53 B); use 'kvplan fit'"
                    )
    K = max((len(c) for c in layouts.values()), default=0)
    classes = []
    for k in range(K):
        kind, count, block, window, pages = (np.zeros(shape, dtype=np.int64) for _ in range(5))
        block[...] = 1
        window[...] = 1
        for at, counts in layouts.items():
            if k < len(counts):
                (code, b, w, p), n = list(counts.items())[k]
                kind[at], count[at], block[at], window[at], pages[at] = code, n, b, w, p
        classes.append((kind, count, block, window, pages))

    vs = vllm_settings(specs[0], gpus[0], opts)
    in_flight = vllm_rules.in_flight_tokens(mnbt, 1, vs.async_scheduling)
    seq_axis = np.asarray(seqs, dtype=np.int64).reshape(1, S, 1, 1, 1)
    totals = np.asarray([g.cuda_total_bytes for g in gpus], dtype=np.int64).reshape(1, 1, G, 1, 1)
    cfg = _Configs(
        growing=None, sliding=None, sliding_window=None, chunked=None, chunk=None, state=None,
        per_token=a["per_token"], weights=a["weights"], activation=a["activation"], overhead=a["overhead"], valid=valid,
    )  # fmt: skip
    usable, budget = _budget(np, cfg, totals, Engine.vllm, util, opts.kv_cache_memory_bytes)  # (M, 1, G, D, T)
    per_block = a["per_block"]
    num_blocks = np.where(per_block > 0, budget // np.maximum(per_block, 1), 0)
    free = num_blocks - 1  # the null block
    per_request = _blocks_per_request(np, classes, seq_axis, in_flight)  # (M, S, 1, D, T) blocks
    positive = per_request > 0
    by_memory = np.where(positive & (free >= per_request), free // np.maximum(per_request, 1), 0)
    concurrency = np.where(positive, num_blocks / np.where(positive, per_request, 1), 0.0)
    ratio = np.where(positive, np.maximum(free, 0) / np.where(positive, per_request, 1), 0.0)  # floor = by_memory
    tokens = (concurrency * seq_axis).astype(np.int64)  # int(max_concurrency × max_model_len)
    # longest S with blocks(S) ≤ num_blocks − 1 (monotone in S): the binary search of plan_fit, on all at once
    lo = np.zeros(budget.shape, dtype=np.int64)
    hi = np.full(budget.shape, MAX_SEARCH_TOKENS, dtype=np.int64)
    has_groups = np.broadcast_to(per_block > 0, budget.shape)
    while True:
        active = lo < hi
        if not active.any():
            break
        mid = (lo + hi + 1) // 2
        ok = has_groups & (_blocks_per_request(np, classes, mid, in_flight) <= free)
        lo = np.where(active & ok, mid, lo)
        hi = np.where(active & ~ok, mid - 1, hi)
    columns = {
        "usable_bytes": usable,
        "weights_bytes": a["weights"],
        "activation_bytes": a["activation"],
        "overhead_bytes": a["overhead"],
        "kv_budget_bytes": budget,
        "kv_bytes_per_token": a["per_token"],
        "kv_bytes_per_block": per_block,
        "kv_bytes_per_request": per_request * per_block,
        "num_blocks": num_blocks,
        "kv_capacity_tokens": tokens,
        "max_concurrent_requests": np.minimum(by_memory, max_num_seqs),
        "max_concurrency": concurrency,
        "max_model_len_fit": lo,
        "block_size": np.where(a["len_block"] > 0, np.minimum(a["block"], seq_axis), a["block"]),
        "max_requests_by_memory": by_memory,
        "max_requests_ratio": ratio,
    }
    return columns, valid, dtype_code, tuple(dtype_names)


def skipped_message(result: SweepResult) -> str:
    """One line naming the rows skipped for TP, e.g. ``skipped 7,920 rows: --tp does not divide the heads of
    falcon-7b (TP 2, 4), phi3-medium (TP 4)``."""
    by_model: dict[str, list[int]] = {}
    for name, tp in result.skipped_tp:
        by_model.setdefault(name, []).append(tp)
    what = ", ".join(f"{name} (TP {', '.join(str(t) for t in tps)})" for name, tps in by_model.items())
    return f"skipped {plural(result.skipped_rows, 'row')}: --tp does not divide the heads of {what}"
