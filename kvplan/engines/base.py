"""The interface every engine module implements, and the arithmetic the engines share.

An engine (:class:`EngineRules`) answers the same four questions for ``kvplan fit``, ``fleet``, ``sweep`` and
``plot``; :func:`kvplan.fit.plan_fit` composes the answers and knows no engine by name:

1. :meth:`EngineRules.settings`: its settings from the flags and the GPU, defaults resolved (the version's
   rule set, memory fraction, block size, batched tokens, the cap on running requests, engine extras);
2. :meth:`EngineRules.budget`: its budget terms: what the GPU's memory leaves for the KV cache
   (:class:`Budget`);
3. :meth:`EngineRules.plan`: its pools and block rules for one model, KV dtype and TP (a :class:`CachePlan`:
   which pools a request draws from, and how many units of each a request of S tokens takes);
4. the requests that fit, counted by :func:`count_requests` and :func:`longest_request` from the plan's pools,
   the same way for every engine; the plan's :meth:`CachePlan.measures` give the figures the engine prints.

A plan's arithmetic is written once for both scalar and vectorized use: every method that takes ``xp``
computes with :data:`PY` (Python ints: exact, for ``fit`` and ``fleet``) or :func:`numpy_ops` (int64 arrays:
``sweep`` over sequence lengths and GPUs), with the same expressions.

Pure Python at import: no numpy or torch (``kvplan fit`` imports neither).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any, Callable

from kvplan.calc import cdiv, layer_cross_bytes, layer_state_bytes, layer_token_bytes
from kvplan.dtypes import KVDtype
from kvplan.errors import LoadRefused, UsageError
from kvplan.options import MAX_SEARCH_TOKENS, Engine, FitOptions, Parallel, check_int, stage_layers
from kvplan.specs import ModelSpec

INF = 1 << 62  # "does not limit": a pool a request draws nothing from

# --- scalar and vectorized arithmetic -------------------------------------------------------------------

PY = SimpleNamespace(
    name="python",
    minimum=min,
    maximum=max,
    where=lambda cond, a, b: a if cond else b,
    cdiv=cdiv,
    to_int=int,
    any=bool,
    all=bool,
    full=lambda like, value: value,
    logical_not=lambda x: not x,
)
"""Python-int arithmetic for the ``xp`` argument: exact, one configuration at a time."""


def numpy_ops():
    """numpy arithmetic for the ``xp`` argument (int64 arrays; the sweep): imported on first use."""
    import numpy as np

    return SimpleNamespace(
        name="numpy",
        np=np,
        minimum=np.minimum,
        maximum=np.maximum,
        where=np.where,
        cdiv=lambda a, b: -np.floor_divide(-np.asarray(a), b),
        to_int=lambda x: np.asarray(x).astype(np.int64),  # truncates toward zero, as int()
        any=lambda x: bool(np.any(x)),
        all=lambda x: bool(np.all(x)),
        full=lambda like, value: np.full(np.shape(like), value, dtype=np.int64),
        logical_not=np.logical_not,
    )


# --- what an engine decides ---------------------------------------------------------------------------


@dataclass(frozen=True, eq=False)
class Settings:
    """An engine's settings for one plan, defaults resolved.

    Attributes:
        rules: the version's rule set (an object with ``version`` and ``description``).
        utilization: the memory fraction (vLLM ``gpu_memory_utilization``, SGLang ``mem_fraction_static``,
            TensorRT-LLM ``free_gpu_memory_fraction``, llama.cpp 1).
        block_size: tokens per block as given, or the engine's default; None where a backend picks it
            (vLLM's MLA backends).
        max_num_batched_tokens: tokens per forward step.
        max_batch_size: TensorRT-LLM's ``max_batch_size`` (0 elsewhere).
        max_num_seqs: the engine's cap on running requests, or None.
        extra: engine-specific settings (vLLM: async scheduling, prefix caching, hybrid manager, GPU family).
    """

    rules: Any
    utilization: float
    block_size: int | None
    max_num_batched_tokens: int
    max_batch_size: int = 0
    max_num_seqs: int | None = None
    extra: dict = field(default_factory=dict)


@dataclass(frozen=True, eq=False)
class Term:
    """One term of an engine's memory budget, per GPU, bytes.

    Attributes:
        name: ``weights``, ``activation``, ``non_torch`` or ``cudagraph``.
        bytes: kvplan's figure.
        low, high: the range the figure may take: equal to ``bytes`` when it is exact (given by a flag, or the
            checkpoint's own bytes); otherwise from the residuals measured on public engine logs
            (:mod:`kvplan.data.budget_residuals`).
        source: where the figure comes from (the engine code it mirrors, or the flag).
    """

    name: str
    bytes: int
    low: int
    high: int
    source: str = ""

    @property
    def exact(self) -> bool:
        """True when the term is known exactly (no range)."""
        return self.low == self.bytes == self.high


def exact_term(name: str, value: int, source: str) -> Term:
    """A term known exactly (a flag, the checkpoint's bytes)."""
    return Term(name, value, value, value, source)


def modelled_term(name: str, value: int, factors: tuple[float, float], source: str) -> Term:
    """A modelled term with its range ``value × (min(low, 1), max(high, 1))``: the residuals' low and high ratios
    (printed over modelled, measured on the corpus), widened to take in kvplan's own figure (a range whose
    measured ratios all lie on one side of 1 would otherwise leave the point estimate outside it)."""
    lo, hi = min(factors[0], 1.0), max(factors[1], 1.0)
    return Term(name, value, int(value * lo), -(-int(value * hi * 10**6) // 10**6), source)


@dataclass(frozen=True, eq=False)
class Budget:
    """What one GPU's memory leaves for the KV cache under an engine's conventions (bytes, per GPU).

    Attributes:
        gpu_total_bytes: the CUDA-visible total.
        usable_bytes: what the engine's memory fraction leaves (its meaning differs by engine).
        weights_bytes, weights_dtype: the weights per GPU and how they were sized.
        activation_bytes: the activation peak of the engine's profile run.
        overhead_bytes: non-torch memory (NCCL, cuBLAS workspaces, CUDA context growth).
        kv_budget_bytes: bytes for the KV cache (>= 0); ``--kv-cache-memory`` when given.
        kv_budget_given: whether the KV budget was given rather than modelled.
        cudagraph_bytes: the CUDA-graph memory the engine takes from the budget (vLLM ≥ 0.20), else 0.
        terms: every term with its range (:class:`Term`).
        kv_budget_low_bytes, kv_budget_high_bytes: the KV budget when every modelled term is at the high
            (low) end of its range; both equal ``kv_budget_bytes`` when the budget is given or exact.
    """

    gpu_total_bytes: int
    usable_bytes: int
    weights_bytes: int
    weights_dtype: str
    activation_bytes: int
    overhead_bytes: int
    kv_budget_bytes: int
    kv_budget_given: bool
    cudagraph_bytes: int = 0
    terms: tuple = ()
    kv_budget_low_bytes: int = 0
    kv_budget_high_bytes: int = 0

    @property
    def exact(self) -> bool:
        """True when the KV budget is known exactly (given, or every term exact)."""
        return self.kv_budget_low_bytes == self.kv_budget_bytes == self.kv_budget_high_bytes


class CachePlan:
    """How one model's cache sits in an engine's pools on one GPU (one configuration: model, KV dtype, TP,
    settings). Engines subclass it.

    A request of S tokens takes :meth:`demand` units from each of the plan's pools (vLLM: blocks; SGLang:
    token slots of its full and SWA pools; others: bytes); a shared prefix takes :meth:`prefix` units once
    per replica. :meth:`pools` gives each pool's capacity in those units for a KV budget.

    Attributes:
        block_size: tokens per block the engine reports.
        kv_bytes_per_token: bytes one token costs in every token-caching layer (the worst PP stage).
        kv_bytes_per_block: bytes one block takes (``block_size × kv_bytes_per_token`` unless the engine's
            groups say otherwise).
        stage_num_layers: layers of the worst PP stage.
        pool_names: one name per pool (``blocks``, ``bytes``, ``full tokens``, ``swa tokens``).
        unit_bytes: bytes one unit of each pool costs on this GPU (for the bytes a plan shows).
    """

    block_size: int = 1
    kv_bytes_per_token: int = 0
    kv_bytes_per_block: int = 0
    stage_num_layers: int = 0
    pool_names: tuple[str, ...] = ("bytes",)
    unit_bytes: tuple[int, ...] = (1,)

    def pools(self, budget, xp=PY) -> tuple:
        """Capacity of each pool, in its units, for ``budget`` bytes of KV memory (an int, or an array)."""
        raise NotImplementedError

    def demand(self, tokens, xp=PY) -> tuple:
        """Units one request of ``tokens`` tokens takes from each pool (an int, or an array)."""
        raise NotImplementedError

    def decode_demand(self, tokens, xp=PY) -> tuple:
        """Units one request of ``tokens`` tokens holds while it decodes, where the engine frees what a windowed
        layer no longer reads (a runtime model: :meth:`demand` is what the engine plans and admits by). Default:
        :meth:`demand` (the engine keeps every unit a request took)."""
        return self.demand(tokens, xp)

    def prefix(self, tokens: int, xp=PY) -> tuple:
        """Units a shared prefix of ``tokens`` tokens takes from each pool, once per replica (whole blocks)."""
        return tuple(0 for _ in self.pool_names)

    def measures(self, budget, seq, shared_prefix: int = 0, xp=PY) -> dict:
        """The figures the engine reports for ``budget`` and requests of ``seq`` tokens: ``num_blocks``,
        ``kv_bytes_per_request``, ``kv_capacity_tokens``, ``max_concurrency`` (the engine's own ratio) and
        ``block_size`` (ints or arrays)."""
        raise NotImplementedError

    def fit_fields(self) -> dict:
        """Engine-specific :class:`kvplan.fit.FitResult` fields (vLLM's groups, settings applied ...)."""
        return {}

    def request_cap(self, budget, seq, xp=PY):
        """The engine's cap on running requests for ``budget`` bytes and a max_model_len of ``seq`` tokens (ints
        or arrays) when it depends on the pools (SGLang's max_running_requests), else None: the settings'
        ``max_num_seqs`` applies."""
        return None

    def budget_fields(self, budget, seq: int) -> dict:
        """Engine-specific :class:`kvplan.fit.FitResult` fields that depend on the budget (scalar): SGLang's
        resolved settings (``engine_settings``), its request table (``request_table_bytes``) and why it refuses
        to start (``engine_refusal``)."""
        return {}

    def search_limit(self, caps: tuple, xp=PY):
        """Tokens beyond which no request fits ``caps`` (bounds :func:`longest_request`'s search, and keeps
        int64 probes from overflowing); default 2^40."""
        return xp.full(caps[0], MAX_SEARCH_TOKENS)

    def log_line(self, measures: dict, seq: int, pools: tuple) -> str:
        """The start-up line(s) the engine prints for this plan (scalar)."""
        return ""

    def request_bytes(self, tokens: int, shared_prefix: int = 0) -> tuple[int, int]:
        """(unique bytes, shared-prefix bytes) one request of ``tokens`` tokens holds per GPU: its units
        times :attr:`unit_bytes`, summed over pools (``kvplan fleet``'s packing shows these)."""
        d = self.demand(tokens)
        p = self.prefix(shared_prefix)
        unique = sum((a - b) * u for a, b, u in zip(d, p, self.unit_bytes, strict=True))
        shared = sum(b * u for b, u in zip(p, self.unit_bytes, strict=True))
        return unique, shared


def count_requests(caps: tuple, demand: tuple, prefix: tuple, xp=PY) -> tuple:
    """(whole requests that fit, kvplan's ratio) for pools of capacity ``caps`` and requests taking ``demand``
    units of each (a shared prefix takes ``prefix`` units once).

    A request fits when it fits every pool (``demand ≤ cap``); then the count is the smallest over pools of
    ``(cap − prefix) // (demand − prefix)``; a pool a request draws nothing of its own from does not limit,
    and a request that draws nothing at all counts 0. The ratio is the same without the floor (and without
    the fit check): ``min(max(0, cap − prefix) / (demand − prefix))``.
    """
    by = ratio = None
    fits = True
    any_unique = False
    for cap, d, p in zip(caps, demand, prefix, strict=True):
        unique = d - p
        positive = unique > 0
        any_unique = any_unique | positive
        fits = fits & (cap >= d)
        safe = xp.maximum(unique, 1)
        by_i = xp.where(positive, (cap - p) // safe, INF)
        ratio_i = xp.where(positive, xp.maximum(cap - p, 0) / safe, float(INF))
        by = by_i if by is None else xp.minimum(by, by_i)
        ratio = ratio_i if ratio is None else xp.minimum(ratio, ratio_i)
    by = xp.where(fits & any_unique, by, 0)
    ratio = xp.where(any_unique, ratio, 0.0)
    return by, ratio


def longest_request(plan: CachePlan, caps: tuple, xp=PY):
    """The longest request (tokens, up to 2^40) whose demand fits every pool, by binary search (demand is
    non-decreasing in the tokens); 0 when not even an empty request fits. ``caps`` may be arrays (the sweep):
    the search then runs on all elements at once."""
    lo = xp.full(caps[0], 0)
    hi = xp.maximum(xp.minimum(plan.search_limit(caps, xp), MAX_SEARCH_TOKENS), 0)
    while True:
        active = lo < hi
        if not xp.any(active):
            return lo
        mid = (lo + hi + 1) // 2
        ok = True
        for cap, d in zip(caps, plan.demand(mid, xp), strict=True):
            ok = ok & (d <= cap)
        lo = xp.where(active & ok, mid, lo)
        hi = xp.where(active & xp.logical_not(ok), mid - 1, hi)


# --- the per-kind byte model the engines without block groups share ---------------------------------------


@dataclass(frozen=True, eq=False)
class StageCache:
    """What the layers of one PP stage cost on one GPU: bytes per token per kind, and fixed state.

    Attributes:
        per_kind: ``{kind: (layers, bytes per token across those layers, window or None)}`` for token kinds.
        state_bytes: fixed bytes per request (recurrent states, cross-attention caches) on this GPU.
        num_layers: layers of the stage.
    """

    per_kind: dict
    state_bytes: int
    num_layers: int = 0

    @property
    def bytes_per_token(self) -> int:
        """Bytes one token costs in every token-caching layer of the stage (as a full layer would)."""
        return sum(b for _, b, _ in self.per_kind.values())

    @property
    def growing_bytes_per_token(self) -> int:
        """Bytes per token of the layers whose cache grows with the request (full and MLA)."""
        return sum(b for k, (_, b, _) in self.per_kind.items() if k in ("full", "mla"))


def stage_cache(spec: ModelSpec, kv_dtype: KVDtype, tp: int, layers: range) -> StageCache:
    """Per-kind bytes per token of one stage's layers on one GPU at tensor parallel ``tp``
    (:func:`kvplan.calc.layer_token_bytes`, :func:`kvplan.calc.layer_state_bytes`); computed once per spec
    and key (the result is shared: do not change it)."""
    return spec.memo(("stage_cache", kv_dtype, tp, layers.start, layers.stop),
                     lambda: _stage_cache(spec, kv_dtype, tp, layers))  # fmt: skip


def _stage_cache(spec: ModelSpec, kv_dtype: KVDtype, tp: int, layers: range) -> StageCache:
    per_kind: dict[str, tuple[int, int, int | None]] = {}
    state = 0
    for i in layers:
        layer = spec.layers[i]
        kind = layer.kind
        # fixed per request: recurrent states, and cross-attention layers' encoder tokens (Llama 3.2 Vision)
        state += layer_state_bytes(layer, spec.dtype, tp) + layer_cross_bytes(layer, kv_dtype, tp)
        tb = layer_token_bytes(layer, kv_dtype, tp)
        if tb:
            n, b, w = per_kind.get(kind, (0, 0, spec.window_of(kind)))
            per_kind[kind] = (n + 1, b + tb, w)
    return StageCache(per_kind, state, len(layers))


WindowRule = Callable[[str, int, Any, int, Any], Any]
"""``rule(kind, window, seq, block, xp)``: tokens a windowed layer holds for one request of ``seq`` tokens."""


def window_as_blocks(kind: str, window: int, seq, block: int, xp=PY):
    """``min(S, window)`` rounded up to whole blocks: a windowed layer's tokens (SGLang, TensorRT-LLM with a
    window)."""
    return xp.cdiv(xp.minimum(seq, window), block) * block


@dataclass(frozen=True, eq=False)
class TokenPlan(CachePlan):
    """One pool of bytes, requests counted layer kind by layer kind (vLLM before 0.33, SGLang outside its
    hybrid-SWA architectures, TensorRT-LLM, llama.cpp).

    A request of S tokens holds, on the worst PP stage: the fixed state, full/MLA layers
    ``cdiv(S, block) × block`` tokens, windowed layers what ``window_rule`` says (all tokens with
    ``windows_full``). The pool is the KV budget, or ``pool_bytes(budget)`` when the engine allocates whole
    blocks (TensorRT-LLM).

    Attributes:
        stages: every PP stage's :class:`StageCache`.
        worst: index of the stage with the most bytes per request of max_model_len (ties: bytes per token).
        window_rule: the engine's rule for windowed layers.
        windows_full: windowed layers cached for every token.
        in_flight: max_num_batched_tokens (the vLLM and llama.cpp window rules reserve for it).
        blocks_rule: ``rule(budget, bytes_per_token, block, xp) -> blocks`` of the pool, or None for
            ``budget // bytes per block``.
        pool_is_blocks: requests are counted against the blocks allocated (TensorRT-LLM), not the budget.
        concurrency_rule: ``rule(num_blocks, block_size, seq, xp)`` -> the engine's "Maximum concurrency",
            or None for the pool's bytes over one request's (vLLM's V0 engine: blocks × block_size / seq).
    """

    stages: tuple = ()
    worst: int = 0
    block_size: int = 1
    window_rule: Any = None
    windows_full: bool = False
    in_flight: int = 0
    blocks_rule: Any = None
    pool_is_blocks: bool = False
    extras: dict = field(default_factory=dict)
    log: Any = None  # log(measures, seq, pools) -> str
    concurrency_rule: Any = None

    @property
    def kv_bytes_per_token(self) -> int:  # type: ignore[override]
        return self.stages[self.worst].bytes_per_token

    @property
    def kv_bytes_per_block(self) -> int:  # type: ignore[override]
        return self.block_size * self.kv_bytes_per_token

    @property
    def stage_num_layers(self) -> int:  # type: ignore[override]
        return self.stages[self.worst].num_layers

    def stage_bytes(self, cache: StageCache, tokens, xp=PY):
        """Bytes one request of ``tokens`` tokens holds in one stage."""
        block = self.block_size
        full_tokens = xp.cdiv(tokens, block) * block
        total = cache.state_bytes
        for kind, (_, per_token, window) in cache.per_kind.items():
            if kind in ("full", "mla") or window is None or self.windows_full:
                held = full_tokens
            else:
                held = self.window_rule(kind, window, tokens, block, xp)
            total = total + per_token * held
        return total

    def num_blocks(self, budget, xp=PY):
        """Blocks of the pool for ``budget`` bytes."""
        per_token = self.kv_bytes_per_token
        if self.blocks_rule is not None:
            return self.blocks_rule(budget, per_token, self.block_size, xp)
        per_block = self.kv_bytes_per_block
        return budget // per_block if per_block else xp.full(budget, 0)

    def pool_bytes(self, budget, xp=PY):
        """Bytes the pool holds: whole blocks, or the budget when nothing is cached per token."""
        if not self.kv_bytes_per_block:
            return budget
        return self.num_blocks(budget, xp) * self.kv_bytes_per_block

    def pools(self, budget, xp=PY) -> tuple:
        return (self.pool_bytes(budget, xp) if self.pool_is_blocks else budget,)

    def demand(self, tokens, xp=PY) -> tuple:
        worst = None
        for cache in self.stages:
            b = self.stage_bytes(cache, tokens, xp)
            worst = b if worst is None else xp.maximum(worst, b)
        return (worst,)

    def prefix(self, tokens: int, xp=PY) -> tuple:
        shared = (tokens // self.block_size) * self.block_size
        return (shared * self.stages[self.worst].growing_bytes_per_token,)

    def measures(self, budget, seq, shared_prefix: int = 0, xp=PY) -> dict:
        per_request = self.stage_bytes(self.stages[self.worst], seq, xp)
        num_blocks = self.num_blocks(budget, xp)
        pool = self.pool_bytes(budget, xp)
        (shared,) = self.prefix(shared_prefix, xp)
        unique = per_request - shared
        concurrency = xp.where(unique > 0, xp.maximum(pool - shared, 0) / xp.maximum(unique, 1), 0.0)
        if self.concurrency_rule is not None:
            concurrency = self.concurrency_rule(num_blocks, self.block_size, seq, xp)
        return dict(
            num_blocks=num_blocks,
            kv_bytes_per_request=per_request,
            kv_capacity_tokens=num_blocks * self.block_size,
            max_concurrency=concurrency,
            block_size=self.block_size,
        )

    def fit_fields(self) -> dict:
        return dict(self.extras)

    def search_limit(self, caps: tuple, xp=PY):
        """A request of S tokens holds at least ``S × slope`` bytes (slope: the layers cached for every token):
        none beyond ``cap // slope + 1`` fits."""
        slope = max(c.bytes_per_token if self.windows_full else c.growing_bytes_per_token for c in self.stages)
        if slope <= 0:
            return xp.full(caps[0], MAX_SEARCH_TOKENS)
        return caps[0] // slope + 1

    def log_line(self, measures: dict, seq: int, pools: tuple) -> str:
        return self.log(measures, seq, pools) if self.log is not None else ""


def token_plan(spec: ModelSpec, kv_dtype: KVDtype, opts: FitOptions, block_size: int, max_len: int, **kw) -> TokenPlan:
    """A :class:`TokenPlan` of ``spec``'s PP stages (``opts``' TP, PP and partition), its worst stage chosen
    by bytes per request of ``max_len`` tokens, then bytes per token."""
    tp, pp = opts.tensor_parallel_size, opts.pipeline_parallel_size
    ranges = stage_layers(spec.num_layers, pp, opts.pp_layer_partition)
    stages = tuple(stage_cache(spec, kv_dtype, tp, r) for r in ranges)
    plan = TokenPlan(stages=stages, block_size=block_size, **kw)
    if len(stages) > 1:
        worst = max(range(pp), key=lambda i: (plan.stage_bytes(stages[i], max_len), stages[i].bytes_per_token))
        object.__setattr__(plan, "worst", worst)
    return plan


# --- the engine ------------------------------------------------------------------------------------------


class EngineRules:
    """One serving engine's conventions; one subclass per module of :mod:`kvplan.engines`.

    Attributes:
        engine: which engine.
        display_name: its name in output (``vLLM``).
        block_size: default tokens per KV block (vLLM 16, TensorRT-LLM 32, SGLang page 1, llama.cpp pad 256).
        utilization: default memory fraction.
        max_num_batched_tokens: default tokens per forward step.
        max_batch_size: default TensorRT-LLM max_batch_size (0 elsewhere).
        quantized_kv: the 8-bit KV cache to suggest when a plan does not fit (``fp8``; llama.cpp ``q8_0``).
        gguf_weights: whether weights come as GGUF (no FP8 weights to suggest).
        request_cap_name: what the engine calls its cap on running requests (``max_num_seqs``; SGLang
            ``max_running_requests``), for ``limit`` in ``fleet`` and ``sweep``.
        settings_depend_on_seq: the settings depend on max_model_len (SGLang's mem_fraction_static on ROCm):
            the sweep then groups sequence lengths by :meth:`settings_key` too.
        kv_split_source: the engine code the KV-replication note cites (:func:`kvplan.calc.kv_replication`): the
            KV-head split over the attention TP and the MLA latent kept whole on every rank (default vLLM's), and
            optionally the head rule as the engine writes it (default ``max(1, H_kv // TP)``).
        kv_cache_dtypes: the KV cache dtypes the engine's own code takes, as it spells them -> kvplan's dtype
            name (``auto``, the model's dtype, is always taken); :meth:`kv_dtype` refuses the others.
        kv_cache_dtypes_source: the engine code :attr:`kv_cache_dtypes` mirrors, named in the refusal.
    """

    engine: Engine
    display_name: str
    block_size: int = 16
    utilization: float = 0.9
    max_num_batched_tokens: int = 8192
    max_batch_size: int = 0
    quantized_kv: str = "fp8"
    gguf_weights: bool = False
    #: layer kinds the engine does not serve, or whose cache kvplan has no rule for: kind -> the reason
    #: (DeepSeek-V4's ``compressed`` layers, RecurrentGemma's ``rglru`` blocks). ``check`` refuses them.
    unplanned_kinds: dict[str, str] = {}
    request_cap_name: str = "max_num_seqs"
    kv_split_source: tuple[str, ...] = ("vLLM get_num_kv_heads", "vLLM MLAAttentionSpec")
    settings_depend_on_seq: bool = False
    kv_cache_dtypes: dict[str, str] = {}
    kv_cache_dtypes_source: str = ""

    # --- versions ---------------------------------------------------------------------------------------

    def resolve_rules(self, version: str | None):
        """The rule set for ``--engine-version`` ``version`` (None: the newest): an object with ``version``
        and ``description``.

        Raises:
            UsageError: a version that does not parse.
        """
        raise NotImplementedError

    def older_than_oldest(self, version: str | None) -> bool:
        """True when ``version`` is older than the oldest rule set (which then applies, with a warning)."""
        return False

    # --- 1. settings ------------------------------------------------------------------------------------

    def common_settings(self, opts: FitOptions) -> tuple[float, int, int, int]:
        """(memory fraction, block size, max_num_batched_tokens, max_batch_size): ``opts`` where given, else
        the engine's defaults (0 is not a default).

        Raises:
            UsageError: the fraction is outside (0, 1].
        """
        util = self.utilization if opts.gpu_memory_utilization is None else opts.gpu_memory_utilization
        if not 0 < util <= 1:
            raise UsageError(f"--gpu-memory-utilization: {util} must be in (0, 1]")
        block = self.block_size if opts.block_size is None else opts.block_size
        mnbt = self.max_num_batched_tokens if opts.max_num_batched_tokens is None else opts.max_num_batched_tokens
        max_batch = self.max_batch_size if opts.max_batch_size is None else opts.max_batch_size
        return util, block, mnbt, max_batch

    def settings(self, spec: ModelSpec, gpu, opts: FitOptions) -> Settings:
        """The engine's settings for ``opts`` on ``gpu``, defaults resolved.

        Raises:
            UsageError: an unknown version, a fraction outside (0, 1].
        """
        util, block, mnbt, max_batch = self.common_settings(opts)
        return Settings(self.resolve_rules(opts.engine_version), util, block, mnbt, max_batch, opts.max_num_seqs)

    def settings_key(self, spec: ModelSpec, gpu, opts: FitOptions) -> tuple:
        """A key equal for GPUs whose settings are equal (the sweep computes such GPUs together)."""
        return ()

    def kv_dtype(self, spec: ModelSpec, name: str | None) -> KVDtype:
        """The KV dtype of ``--kv-dtype`` ``name`` (None / ``auto``: the model's dtype): one the engine's own
        code takes (:attr:`kv_cache_dtypes`, in its spelling or kvplan's), the one place each engine's cache
        dtypes are checked.

        Raises:
            UsageError: an unknown dtype, or one the engine does not take (the message lists those it takes).
        """
        from kvplan.calc import resolve_kv_dtype
        from kvplan.dtypes import get_kv_dtype

        if name is None or str(name).strip().lower() == "auto":
            return resolve_kv_dtype(spec, None)
        key = str(name).strip().lower()
        if key in self.kv_cache_dtypes:
            return get_kv_dtype(self.kv_cache_dtypes[key])
        try:
            d = get_kv_dtype(key)
        except UsageError:
            d = None
        if d is not None and d.name in self.kv_cache_dtypes.values():
            return d
        allowed = ", ".join(["auto", *self.kv_cache_dtypes])
        raise UsageError(
            f"--kv-dtype: {self.display_name} has no {name!r} KV cache; allowed: {allowed} "
            f"({self.kv_cache_dtypes_source})"
        )

    def kv_label(self, spec: ModelSpec, kv: KVDtype, opts: FitOptions) -> str:
        """The name of the cache a plan at KV dtype ``kv`` keeps (the sweep's KV dtype column): ``kv``'s by
        default; llama.cpp's ``-ctk`` / ``-ctv`` where given."""
        return kv.name

    def request_length(self, spec: ModelSpec, opts: FitOptions, settings: Settings) -> int:
        """Tokens of the request a plan is counted for: ``--max-model-len``, else the model's max context."""
        return spec.max_model_len if opts.max_model_len is None else opts.max_model_len

    def served_length(self, spec: ModelSpec, opts: FitOptions, cache: CachePlan, budget: int, max_len: int):
        """(tokens, warning): the longest request the engine serves once its pools are sized for ``budget`` bytes,
        when that is shorter than ``max_len`` (the request length of :meth:`request_length`) and the engine starts
        anyway, with the engine's start-up warning saying so; else ``(max_len, "")``. The plan is then counted for
        requests of that length (SGLang without ``--context-length``). The default: ``(max_len, "")``."""
        return max_len, ""

    def plan_depends_on_length(self, opts: FitOptions) -> bool:
        """True when the engine's settings and budget change with the request length (llama.cpp sizes its
        context from it): the sweep then plans each length on its own, through the same functions."""
        return False

    def check_kinds(self, spec: ModelSpec) -> None:
        """Refuse a model with a cache kind in :attr:`unplanned_kinds` (a layer kind, a state kept beside its
        attention layers, ``prefix_tokens``: :attr:`kvplan.specs.ModelSpec.cache_kinds`), with the engine's reason.

        Raises:
            UsageError: naming the engine, the kind and why.
        """
        kinds = spec.cache_kinds  # layer kinds, states kept beside attention (cca, sconv), prefix_tokens
        for kind, reason in self.unplanned_kinds.items():
            if kind in kinds:
                if kind == "prefix_tokens":
                    what = "prefix tokens"
                elif kind in spec.layer_kind_set:
                    what = f"{kind} layers"
                else:
                    what = f"{kind} states beside its attention layers"
                raise UsageError(
                    f"--engine {self.engine.value}: {spec.name} has {what}: {reason}; kvplan will not guess "
                    "how the engine caches them (kvplan estimate gives their bytes without an engine)"
                )

    def check(self, spec: ModelSpec, opts: FitOptions, settings: Settings) -> None:
        """Refuse what the engine does not take for this model: a layer kind it has no rule for
        (:meth:`check_kinds`), speculative decoding outside vLLM ≥ 0.33.

        Raises:
            UsageError: naming the flag.
        """
        self.check_kinds(spec)
        check_int("--num-speculative-tokens", opts.num_speculative_tokens, 0)
        check_int("--num-mtp-layers", opts.num_mtp_layers, 0)
        if opts.num_speculative_tokens or opts.speculative_model is not None or opts.num_mtp_layers:
            raise UsageError(
                "--num-speculative-tokens / --speculative-model / --num-mtp-layers: sized under vLLM >= 0.33's rules "
                "only (--engine vllm, the default version)"
            )

    # --- 2. budget --------------------------------------------------------------------------------------

    def activation_bytes(self, spec: ModelSpec, settings: Settings, opts: FitOptions) -> int:
        """The default activation peak per GPU (0: none subtracted)."""
        return 0

    def overhead_bytes(self, spec: ModelSpec, settings: Settings, tp: int, pp: int) -> int:
        """The default non-torch memory per GPU: 0.3 GiB on one GPU, 2 GiB with TP × PP > 1 (calibration logs:
        0.26 and 0.35 GiB on one GPU, 1.8–3.6 GiB with NCCL)."""
        return OVERHEAD_TP1_BYTES if tp * pp == 1 else OVERHEAD_TP_BYTES

    def cudagraph_bytes(self, spec: ModelSpec, settings: Settings, opts: FitOptions) -> int:
        """CUDA-graph memory the engine takes from the KV budget (0: none)."""
        return 0

    def usable_and_budget(self, total: int, util: float, terms: dict[str, int], settings: Settings) -> tuple[int, int]:
        """(usable bytes, KV budget before clamping) for the engine's meaning of its memory fraction, from the
        terms' bytes by name (``weights``, ``activation``, ``non_torch``, ``cudagraph``); the budget must not
        grow with any term."""
        raise NotImplementedError

    def residual_key(self, settings: Settings) -> str:
        """The key of this engine's residuals in :mod:`kvplan.data.budget_residuals` (the engine, and for
        vLLM its generation)."""
        return self.engine.value

    def term_factors(self, name: str, settings: Settings, spec: ModelSpec, opts: FitOptions) -> tuple[float, float]:
        """(low, high) ratio of a modelled term's true value to kvplan's, measured on the corpus
        (:func:`kvplan.data.budget_residuals.factors`)."""
        from kvplan.data.budget_residuals import factors

        return factors(self.residual_key(settings), name, quantized=_quantized(spec, opts),
                       multimodal=self.profiles_encoder(spec))  # fmt: skip

    def profiles_encoder(self, spec: ModelSpec) -> bool:
        """True when the engine's memory profile also runs the model's multimodal encoder (its activation peak
        then has residuals of its own, :func:`kvplan.data.budget_residuals.term_key`). Default: no."""
        return False

    def weights_term(self, spec: ModelSpec, opts: FitOptions, settings: Settings) -> tuple[Term, str]:
        """(the weights term, the weights dtype name) per GPU: ``--weights-gib`` (exact), the checkpoint's own
        bytes (exact), or :func:`kvplan.weights.weights_per_gpu` (modelled: engines pad and repack some
        formats, keep routers and norms per rank).

        Raises:
            UsageError: as :func:`kvplan.weights.weights_per_gpu`.
        """
        from kvplan.weights import expert_split_weights, weights_per_gpu

        tp = opts.tensor_parallel_size
        if opts.weights_bytes is not None:
            return exact_term("weights", opts.weights_bytes, "--weights-gib"), "given"
        if spec.param_count is None and opts.kv_cache_memory_bytes is not None:
            return exact_term("weights", 0, "not needed: the KV budget is given"), "unknown"
        weights, wname = expert_split_weights(spec, opts.weights_dtype, self.parallel(spec, opts))
        draft = opts.speculative_model
        if draft is not None and (draft.param_count is not None or draft.weights_bytes is not None):
            # the draft model sits on the last stage, split over TP (vLLM: draft TP = target TP)
            weights += weights_per_gpu(draft, None, tp, 1)[0]
        if wname == "checkpoint":
            return exact_term("weights", weights, "the checkpoint's tensor bytes"), wname
        source = f"param_count x {wname} / (TP x PP) (kvplan.weights)"
        return modelled_term("weights", weights, self.term_factors("weights", settings, spec, opts), source), wname

    def budget_terms(self, spec: ModelSpec, gpu, opts: FitOptions, settings: Settings) -> tuple[list[Term], str]:
        """(the budget's terms, the weights dtype name): weights, the activation peak, non-torch memory and
        CUDA graphs; a term given by a flag is exact, a modelled one carries its range.

        Raises:
            UsageError: as :meth:`weights_term`.
        """
        weights, wname = self.weights_term(spec, opts, settings)
        tp, pp = opts.tensor_parallel_size, opts.pipeline_parallel_size
        terms = [weights]
        for name, given, flag, default in (
            ("activation", opts.activation_bytes, "--activation-gib",
             lambda: self.activation_bytes(spec, settings, opts)),
            ("non_torch", opts.overhead_bytes, "--overhead-gib", lambda: self.overhead_bytes(spec, settings, tp, pp)),
            ("cudagraph", None, "", lambda: self.cudagraph_bytes(spec, settings, opts)),
        ):  # fmt: skip
            if given is not None:
                terms.append(exact_term(name, given, flag))
                continue
            value = default()
            if value or name != "cudagraph":
                f = self.term_factors(name, settings, spec, opts) if value else (1.0, 1.0)
                terms.append(modelled_term(name, value, f, self.term_source(name, settings)))
        return terms, wname

    def term_source(self, name: str, settings: Settings) -> str:
        """Where a modelled term comes from, for the output (the engine code it mirrors)."""
        return f"{self.display_name} {name} model (kvplan.engines.{self.engine.value})"

    def budget(self, spec: ModelSpec, gpu, opts: FitOptions, settings: Settings) -> Budget:
        """What ``gpu`` leaves for the KV cache: the engine's formula over its terms (:meth:`budget_terms`),
        with the range their ranges give, or ``opts.kv_cache_memory_bytes`` when given (exact).

        Raises:
            UsageError: as :meth:`budget_terms`.
        """
        terms, wname = self.budget_terms(spec, gpu, opts, settings)
        total = gpu.cuda_total_bytes
        util = settings.utilization
        usable, budget = self.usable_and_budget(total, util, {t.name: t.bytes for t in terms}, settings)
        low = self.usable_and_budget(total, util, {t.name: t.high for t in terms}, settings)[1]
        high = self.usable_and_budget(total, util, {t.name: t.low for t in terms}, settings)[1]
        given = opts.kv_cache_memory_bytes is not None
        if given:
            budget = low = high = opts.kv_cache_memory_bytes
        by = {t.name: t.bytes for t in terms}
        return Budget(
            total, usable, by["weights"], wname, by.get("activation", 0), by.get("non_torch", 0), max(0, budget), given,
            cudagraph_bytes=by.get("cudagraph", 0), terms=tuple(terms), kv_budget_low_bytes=max(0, low),
            kv_budget_high_bytes=max(0, high),
        )  # fmt: skip

    # --- 3. pools ---------------------------------------------------------------------------------------

    def plan(self, spec: ModelSpec, kv_dtype: KVDtype, opts: FitOptions, settings: Settings, max_len: int) -> CachePlan:
        """The model's pools and block rules on one GPU (``opts``' TP and PP), for requests up to
        ``max_len`` tokens (the engine sizes some pools by it).

        Raises:
            UsageError: a cache the engine does not take for this model.
        """
        raise NotImplementedError

    # --- parallelism and loading ----------------------------------------------------------------------------

    def parallel(self, spec: ModelSpec, opts: FitOptions) -> Parallel:
        """How one replica lies over its GPUs for ``opts`` (:class:`kvplan.options.Parallel`). The default (the
        engines kvplan models with tensor and pipeline parallelism only): every layer TP-sliced over
        ``--tp`` GPUs, ``--pp`` stages.

        Raises:
            UsageError: data or expert parallelism asked of an engine kvplan does not model them for.
        """
        check_int("--data-parallel-size", opts.data_parallel_size)
        check_int("--ep-size", opts.expert_parallel_size)
        if opts.data_parallel_size > 1 or opts.enable_expert_parallel or (opts.expert_parallel_size or 1) > 1:
            raise UsageError(
                f"--data-parallel-size / --enable-expert-parallel / --ep-size: kvplan models expert and attention "
                f"data parallelism for vLLM and SGLang only, not {self.display_name}"
            )
        tp, pp = opts.tensor_parallel_size, opts.pipeline_parallel_size
        return Parallel(tp, 1, pp, 1, tp, flags=parallel_flags(("--tp", tp), ("--pp", pp)))

    def layouts(self, spec: ModelSpec, tps: list[int], pps: list[int]) -> list[dict]:
        """The layouts ``kvplan fleet`` tries by default: :class:`~kvplan.options.FitOptions` overrides, one
        dict each. The default: every (TP, PP) of ``tps`` × ``pps`` with PP not above the layers."""
        layers = spec.num_layers
        return [dict(tensor_parallel_size=t, pipeline_parallel_size=p) for p in pps for t in tps if p <= layers]

    def load_check(self, spec: ModelSpec, opts: FitOptions, par: Parallel) -> list[str]:
        """The engine's own load-time checks that depend on the layout (block-quantized checkpoints, expert
        counts): UsageError with the engine's message where it refuses to load; otherwise notes (one line
        each) on what it changes to load. The default: none.

        Raises:
            UsageError: the engine refuses to load the checkpoint at this layout.
        """
        return []

    def max_seqs_per_group(self, max_num_seqs: int | None, par: Parallel) -> int | None:
        """The cap on running requests of one attention DP group (the whole replica without DP attention):
        ``max_num_seqs`` by default."""
        return max_num_seqs

    # --- messages ----------------------------------------------------------------------------------------

    def does_not_fit_what(self, result) -> str | None:
        """The engine's own account of what does not fit (None: kvplan's, a request against the budget)."""
        return None

    def does_not_fit_note(self, result) -> str:
        """Text added to the does-not-fit reason (TensorRT-LLM: it starts with a shorter max_seq_len)."""
        return ""


def _quantized(spec: ModelSpec, opts: FitOptions) -> bool:
    """Whether the weights are stored in a quantized format (their residuals differ)."""
    name = str(opts.weights_dtype or spec.weights_dtype or spec.dtype).lower()
    return name not in ("bf16", "fp16", "fp32", "bfloat16", "float16", "half", "float32")


def shipped_block_quantized(spec: ModelSpec, opts: FitOptions) -> bool:
    """True when the checkpoint is served as it ships and is block-quantized (``weight_block_size``): no
    ``--weights-dtype``, or the checkpoint's own."""
    if spec.weight_block_size is None:
        return False
    return opts.weights_dtype is None or opts.weights_dtype == (spec.weights_dtype or spec.dtype)


def fp8_dense_checks(spec: ModelSpec, tp: int, engine: str, source: str) -> None:
    """The row-parallel check both vLLM 0.33 and SGLang 0.5.23 make of a block-quantized linear layer split
    over ``tp`` GPUs (``fp8_utils.py validate_fp8_block_shape`` in each): its input slice must be a multiple
    of ``block_k``. Checked for the layers whose width the spec gives: the attention output projection
    (input ``H_q × v_head_dim``) and, with ``intermediate_size`` known, the dense MLP's down projection.

    Raises:
        UsageError: the engine's message, naming the layer.
    """
    if spec.weight_block_size is None or tp == 1:
        return
    block_k = spec.weight_block_size[1]
    widths = [("o_proj", spec.num_q_heads * spec.v_dim)]
    dense = spec.intermediate_size  # the dense MLP's width, where the spec has it
    if dense and (spec.moe is None or spec.moe.num_moe_layers < spec.num_layers):
        widths.append(("down_proj", dense))
    for layer, width in widths:
        part = width // tp
        if part % block_k:
            raise LoadRefused(
                f"--tp: {engine} refuses to load {spec.name} at TP {tp} ({layer}: {width} / {tp} = {part} per GPU): "
                f'"Weight input_size_per_partition = {part} is not divisible by weight quantization block_k = '
                f'{block_k}." ({source})'
            )


def parallel_flags(*pairs: tuple[str, int]) -> str:
    """The engine flags of a layout, those at their default (1, False) left out: ``--tp 8 --pp 2``."""
    out = []
    for flag, value in pairs:
        if value is True:
            out.append(flag)
        elif value not in (None, False, 1, 0):
            out.append(f"{flag} {value}")
    return " ".join(out)


OVERHEAD_TP1_BYTES = 3 * (1 << 30) // 10
OVERHEAD_TP_BYTES = 2 * (1 << 30)
