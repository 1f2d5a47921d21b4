"""Capacity of one GPU (one model replica) under a serving engine's conventions. Pure, exact ints.

:func:`plan_fit` composes an engine's answers (:mod:`kvplan.engines`; the interface is
:class:`kvplan.engines.base.EngineRules`) and holds no engine's rule itself:

1. the engine's settings from the flags and the GPU (:meth:`~kvplan.engines.base.EngineRules.settings`);
2. its budget: what the GPU's memory leaves for the KV cache after weights, the activation peak and
   non-torch memory, by the engine's meaning of its memory fraction
   (:meth:`~kvplan.engines.base.EngineRules.budget`);
3. its pools and block rules for the model (:meth:`~kvplan.engines.base.EngineRules.plan`);
4. the requests that fit every pool, and the longest request (:func:`kvplan.engines.base.count_requests`,
   :func:`kvplan.engines.base.longest_request`), the same way for every engine; ``kvplan fleet`` packs
   requests into the same pools (:func:`request_sizer`) and ``kvplan sweep`` evaluates the same functions
   over arrays.

Memory model per GPU (vLLM's meaning of ``gpu_memory_utilization``)::

    KV budget = total × gpu_memory_utilization − weights/GPU − activation peak − non-torch overhead

with ``total`` the CUDA-visible memory (``torch.cuda.mem_get_info``), weights = param_count × weight
bytes / (TP × PP) (:mod:`kvplan.weights`). Each engine changes where the fraction applies, the block size
and how windowed layers are counted: see its module in :mod:`kvplan.engines` (each rule cites the engine
source it mirrors).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from kvplan import engines
from kvplan.calc import check_tp, kv_replication, valid_tp_sizes
from kvplan.dtypes import get_weight_dtype
from kvplan.engines import ENGINE_NAMES, Engine, engine_rules, engine_version_warning, get_engine  # noqa: F401
from kvplan.engines.base import count_requests, longest_request
from kvplan.errors import DoesNotFit, UsageError
from kvplan.gpus import GPU, load_catalog
from kvplan.options import (  # noqa: F401 (kvplan.fit.FitOptions and friends stay importable from here)
    FLAG_LIMITS,
    MAX_SEARCH_TOKENS,
    FitOptions,
    check_engine_options,
    check_int,
    check_pp_partition,
    parse_partition,
    stage_layers,
)
from kvplan.specs import ModelSpec
from kvplan.units import fmt_gib
from kvplan.weights import no_param_count_message, weights_per_gpu  # noqa: F401


@dataclass(frozen=True, eq=False)  # eq=False: no caller compares plans, and it halves class-creation time
class FitResult:
    """One GPU's plan. Bytes are ints, per GPU (the worst pipeline stage when PP > 1).

    Attributes:
        weights_bytes, activation_bytes, overhead_bytes: memory taken before the KV cache.
        gpu_total_bytes: CUDA-visible total of the GPU.
        usable_bytes: what the engine's fraction leaves (see the module docstring).
        kv_budget_bytes: memory for the KV cache (``--kv-cache-memory`` when given).
        kv_bytes_per_token: bytes one token costs across all token-caching layers of the stage.
        kv_bytes_per_block: ``block_size × kv_bytes_per_token``.
        kv_bytes_per_request: bytes one request of max_model_len holds (engine rules, blocks, state).
        num_blocks: ``kv_budget_bytes // kv_bytes_per_block``.
        kv_capacity_tokens: vLLM's "GPU KV cache size": for vLLM ≥ 0.33 ``int(max_concurrency ×
            max_model_len)`` (``kv_cache_utils.py get_kv_cache_capacity``: requests' worth of max_model_len,
            not the tokens of context that fit, see ``max_model_len_fit``); otherwise the pool's tokens,
            ``num_blocks × block_size``, a token counted in every layer.
        max_concurrent_requests: whole requests of max_model_len that fit (floor).
        max_concurrency: vLLM's "Maximum concurrency": pool / one request (a ratio; vLLM's log rounds it to
            two decimals and counts the null block, so "7.00x" can mean 6 whole requests).
        max_requests_ratio: kvplan's own ratio: the room requests are counted against (vLLM ≥ 0.33: the
            null block left out; a shared prefix paid once) over one request's own bytes; its floor is
            ``max_requests_by_memory``. Shown cut, never rounded, to two decimals.
        max_concurrent_requests_decode: modelled, where the engine frees windowed layers' blocks as requests
            decode (vLLM's sliding and chunked groups: :meth:`kvplan.engines.base.CachePlan.decode_demand`): the
            requests of max_model_len that can decode at once, one admission reservation kept free; None where
            every request holds what it was admitted with.
        max_model_len_fit: the longest single request that fits the budget (tokens).
        shared_prefix_tokens / shared_prefix_bytes: prompt tokens counted once per replica, and their bytes.
        engine_version: the rule set applied (vLLM: ``0.33``, ``0.11``, ``0.6``; TensorRT-LLM ``1.0``; SGLang
            ``0.5.23``; "" for llama.cpp, which has one rule set without a number).
        engine_version_asked: ``--engine-version`` as given ("" when not given).
        engine_rules: the rule set in words (:func:`engine_rules`).
        max_num_seqs: the engine's cap on running requests (vLLM ``max_num_seqs``; SGLang its resolved
            ``max_running_requests``, which depends on the pools), or None.
        max_requests_by_memory: whole requests of max_model_len the KV pool holds (vLLM 0.33: the null
            block excluded); ``max_concurrent_requests`` is this capped at ``max_num_seqs``.
        max_in_flight_tokens: tokens scheduled but not settled that windowed layers reserve for (vLLM).
        async_scheduling, prefix_caching, hybrid_kv_cache_manager: the vLLM settings applied.
        null_block: whether one block is held back (vLLM ≥ 0.33).
        blocks_per_request: blocks one request of max_model_len takes, all KV cache groups (vLLM 0.33).
        kv_cache_groups: vLLM 0.33's groups: dicts of kind, layers (count), block_size, page_bytes.
        padding_layers: layers vLLM adds so its groups are equal ("Add N padding layers").
        engine_log: the start-up line the engine prints ("GPU KV cache size: ... Maximum concurrency ...").
        pools: ``(name, capacity, bytes per unit)`` of each pool requests draw from, capacity in its units
            (vLLM ≥ 0.33: blocks less the null block; SGLang's hybrid-SWA pools: token slots; otherwise bytes).
        cudagraph_bytes: CUDA-graph memory taken from the budget (vLLM ≥ 0.20's estimate), else 0.
        kv_budget_low_bytes, kv_budget_high_bytes: the range of the KV budget: every modelled term (activation
            peak, non-torch memory, CUDA graphs, weights sized from a parameter count) at the high / low end of
            the residuals measured on public engine logs (:mod:`kvplan.data.budget_residuals`); equal to
            ``kv_budget_bytes`` when the budget is given (``--kv-cache-memory``) or every term exact.
        max_requests_low, max_requests_high: ``max_concurrent_requests`` at those two budgets (of requests of the
            length the engine serves there: :meth:`~kvplan.engines.base.EngineRules.served_length`).
        budget_terms: each term as a dict: name, bytes, low, high, source.
        num_speculative_tokens, drafter_layers: speculative decoding (vLLM ≥ 0.33): draft tokens per step and
            the drafter's layers in the pool (MTP modules, or a draft model's / EAGLE head's layers).
        attention_tensor_parallel_size, data_parallel_size, expert_parallel_size, moe_tensor_parallel_size,
            parallel_flags: the replica's layout (:class:`kvplan.options.Parallel`, the engine's
            :meth:`~kvplan.engines.base.EngineRules.parallel`): the KV cache is sized at the attention TP, each of
            the ``data_parallel_size`` attention groups holds its own requests (the pools above are one group's,
            per GPU); ``parallel_flags`` are the engine's flags for it.
        load_notes: what the engine changes to load the checkpoint at this layout (vLLM's refined FP8 block
            scales), one line each.
        kv_tokens_rule: how the engine's "GPU KV cache size" is counted: ``concurrency`` (``int(max_concurrency ×
            max_model_len)``), ``groups`` (``num_blocks // len(groups) × block_size``), ``blocks`` (``num_blocks ×
            block_size``), "" (no such figure).
        gpu_total_basis: where gpu_total_bytes comes from (:attr:`kvplan.gpus.GPU.cuda_total_basis`).
        kv_replication: copies of the cache across the TP group (:func:`kvplan.calc.kv_replication`), or None.
        engine_warnings: the engine's own start-up warnings for this plan, one line each (SGLang: a KV pool that
            holds fewer tokens than its context_len, so requests are capped at max_req_len).
        request_table_bytes: bytes of the engine's per-request token table, allocated outside the KV budget
            (SGLang's int32 ``req_to_token``: ``(max_running_requests + 1) × (context + 4) × 4``); 0 elsewhere.
        engine_refusal: why the engine refuses to start with this budget (SGLang: a state pool of no slot, an
            SWA pool that holds no request ...), "" when it starts; the pools are then empty.
        model_max_context: the model's own max context (``ModelSpec.max_model_len``, tokens): requests longer than it
            are beyond what the model was trained for, whatever the KV memory holds.
        engine_settings: the engine's own settings and figures under its own names, where kvplan's fields do
            not say them (llama.cpp: ``n_ctx``, ``n_parallel``, ``kv_unified``, each cache's cells and bytes, the
            largest ``-c`` that fits; SGLang: page_size, chunked_prefill_size, mem_fraction_static and how it was
            resolved, max_running_requests and what bounds it, pool sizes, Mamba slots); empty elsewhere.
    """

    model: str
    gpu: str
    gpu_name: str
    engine: str
    tensor_parallel_size: int
    pipeline_parallel_size: int
    kv_dtype: str
    weights_dtype: str
    max_model_len: int
    block_size: int
    gpu_memory_utilization: float
    max_num_batched_tokens: int
    gpu_total_bytes: int
    usable_bytes: int
    weights_bytes: int
    activation_bytes: int
    overhead_bytes: int
    kv_budget_bytes: int
    kv_budget_given: bool
    kv_bytes_per_token: int
    kv_bytes_per_block: int
    kv_bytes_per_request: int
    num_blocks: int
    kv_capacity_tokens: int
    max_concurrent_requests: int
    max_concurrency: float
    max_model_len_fit: int
    shared_prefix_tokens: int
    shared_prefix_bytes: int
    stage_num_layers: int
    engine_version: str = ""
    max_num_seqs: int | None = None
    max_requests_by_memory: int = 0
    max_in_flight_tokens: int = 0
    async_scheduling: bool = False
    prefix_caching: bool = False
    hybrid_kv_cache_manager: bool = False
    null_block: bool = False
    blocks_per_request: int = 0
    kv_cache_groups: tuple = ()
    padding_layers: int = 0
    engine_log: str = ""
    num_speculative_tokens: int = 0
    drafter_layers: int = 0
    max_requests_ratio: float = 0.0
    max_concurrent_requests_decode: int | None = None
    engine_version_asked: str = ""
    engine_rules: str = ""
    pools: tuple = ()
    cudagraph_bytes: int = 0
    kv_budget_low_bytes: int = 0
    kv_budget_high_bytes: int = 0
    max_requests_low: int = 0
    max_requests_high: int = 0
    budget_terms: tuple = ()
    engine_settings: dict = field(default_factory=dict)
    attention_tensor_parallel_size: int = 0
    data_parallel_size: int = 1
    expert_parallel_size: int = 1
    moe_tensor_parallel_size: int = 0
    parallel_flags: str = ""
    load_notes: tuple = ()
    kv_tokens_rule: str = ""
    gpu_total_basis: str = ""
    kv_replication: object = None
    request_table_bytes: int = 0
    engine_refusal: str = ""
    engine_warnings: tuple = ()
    model_max_context: int | None = None

    @property
    def fits(self) -> bool:
        """True when at least one request of max_model_len fits."""
        return self.max_requests_by_memory >= 1

    @property
    def budget_exact(self) -> bool:
        """True when the KV budget is exact (given with --kv-cache-memory, or every term known): no range."""
        return self.kv_budget_low_bytes == self.kv_budget_bytes == self.kv_budget_high_bytes

    @property
    def limited_by_max_num_seqs(self) -> bool:
        """True when ``max_num_seqs``, not memory, bounds the concurrent requests."""
        return self.max_num_seqs is not None and self.max_requests_by_memory > self.max_num_seqs

    @property
    def kv_room_bytes(self) -> int:
        """Bytes per GPU that requests are counted against under the engine's rules: the pools' capacities
        (:attr:`pools`) in bytes: vLLM ≥ 0.33 the pool less the null block (``(num_blocks − 1) ×
        kv_bytes_per_block``), TensorRT-LLM the pool it allocates (whole blocks), SGLang's hybrid-SWA pools
        their slots, otherwise the KV budget."""
        return sum(max(0, cap) * unit for _, cap, unit in self.pools)

    @property
    def max_model_len_unbounded(self) -> bool:
        """True when no request length outgrows the budget (only windowed and state layers grow nothing)."""
        return self.max_model_len_fit >= MAX_SEARCH_TOKENS

    @property
    def parallel(self):
        """The replica's layout, a :class:`kvplan.options.Parallel`."""
        from kvplan.options import Parallel

        attn_tp = self.attention_tensor_parallel_size or self.tensor_parallel_size
        return Parallel(attn_tp, self.data_parallel_size, self.pipeline_parallel_size, self.expert_parallel_size,
                        self.moe_tensor_parallel_size or attn_tp * self.data_parallel_size,
                        self.parallel_flags)  # fmt: skip

    @property
    def gpus_per_replica(self) -> int:
        """GPUs of one replica: attention TP × attention DP × PP (TP × PP without data parallelism)."""
        return self.parallel.gpus


def plan_fit(spec: ModelSpec, gpu: GPU, opts: FitOptions) -> FitResult:
    """How many requests of max_model_len fit on one GPU of a replica of ``spec``.

    Args:
        spec: the model.
        gpu: the GPU (its CUDA-visible total is used).
        opts: settings; None fields take the engine's defaults.

    Returns:
        A :class:`FitResult` (which may not fit: check ``.fits``; :func:`require_fit` raises).

    Raises:
        UsageError: a TP the heads do not allow, utilization outside (0, 1], values < 1, shared prefix
            longer than max_model_len, unknown dtypes, no param_count without --weights-gib, an unknown
            --engine-version.
    """
    return fit_plan(spec, gpu, opts)[0]


def fit_plan(spec: ModelSpec, gpu: GPU, opts: FitOptions):
    """(:class:`FitResult`, the engine's :class:`~kvplan.engines.base.CachePlan`): :func:`plan_fit` and the
    pools it counted, for callers that place requests of other lengths in the same pools (``kvplan fleet``).

    Raises:
        UsageError: as :func:`plan_fit`.
    """
    eng = engines.get(opts.engine)
    tp, pp = opts.tensor_parallel_size, opts.pipeline_parallel_size
    check_int("--tp", tp)
    check_int("--pp", pp)
    check_engine_options(opts)
    for flag, v in (
        ("--max-model-len", opts.max_model_len),
        ("--block-size", opts.block_size),
        ("--max-num-batched-tokens", opts.max_num_batched_tokens),
        ("--max-batch-size", opts.max_batch_size),
        ("--max-num-seqs", opts.max_num_seqs),
    ):
        check_int(flag, v)
    par = eng.parallel(spec, opts)
    check_tp(spec, par.attn_tp)
    if pp > spec.num_layers:
        raise UsageError(f"--pp: {pp} is more stages than {spec.name}'s {spec.num_layers} layers")
    check_pp_partition(spec, pp, opts.pp_layer_partition)
    settings = eng.settings(spec, gpu, opts)
    max_len = eng.request_length(spec, opts, settings)
    check_int("--shared-prefix", opts.shared_prefix_tokens, 0)
    if opts.shared_prefix_tokens >= max_len:
        raise UsageError(
            f"--shared-prefix: {opts.shared_prefix_tokens:,} tokens must be shorter than max_model_len {max_len:,} "
            "(each request has tokens of its own)"
        )
    kv_dtype = eng.kv_dtype(spec, opts.kv_dtype)
    eng.check(spec, opts, settings)
    notes = tuple(eng.load_check(spec, opts, par))
    budget = eng.budget(spec, gpu, opts, settings)
    at_attn = opts if par.attn_tp == tp else replace(opts, tensor_parallel_size=par.attn_tp)
    cache = eng.plan(spec, kv_dtype, at_attn, settings, max_len)

    def served_at(b: int) -> tuple[int, str]:
        """The request length the engine serves with ``b`` bytes for its pools, and its warning."""
        served, warning = eng.served_length(spec, opts, cache, b, max_len)
        if served <= opts.shared_prefix_tokens:  # no request of its own beside the prefix: counted at max_len
            return max_len, ""
        return served, warning

    warning = served_at(budget.kv_budget_bytes)[1]
    result = _result(spec, gpu, opts, settings, budget, cache, kv_dtype.name, max_len, served_at)
    layout = dict(
        attention_tensor_parallel_size=par.attn_tp,
        data_parallel_size=par.attn_dp,
        expert_parallel_size=par.ep,
        moe_tensor_parallel_size=par.expert_slicing,
        parallel_flags=par.flags,
        load_notes=notes,
        engine_warnings=(warning,) if warning else (),
        # the cache is split over the attention TP only, by the engine's rule (its source named in the note)
        kv_replication=kv_replication(spec, par.attn_tp, eng.kv_split_source),
    )
    return replace(result, **layout), cache


def _result(spec, gpu, opts, settings, budget, cache, kv_dtype_name: str, max_len: int, served_at) -> FitResult:
    """The :class:`FitResult` of one configuration: the plan's pools counted (:func:`count_requests`) for requests
    of the length the engine serves at each budget (``served_at(bytes)[0]``: ``max_len``, or the shorter length
    of :meth:`EngineRules.served_length`); the engine's own settings (its request cap and table) follow its
    context, ``max_len``."""
    kv = budget.kv_budget_bytes
    prefix = opts.shared_prefix_tokens
    caps = cache.pools(kv)
    shared = cache.prefix(prefix)
    served = served_at(kv)[0]
    demand = cache.demand(served)
    by_memory, ratio = count_requests(caps, demand, shared)
    m = cache.measures(kv, served, prefix)

    def cap_at(b: int):
        """The engine's cap on running requests at budget ``b``: the plan's (it may depend on the pools), else
        the settings' max_num_seqs."""
        cap = cache.request_cap(b, max_len)
        return settings.max_num_seqs if cap is None else cap

    seqs = cap_at(kv)

    def capped(n: int, cap) -> int:
        return n if cap is None else min(n, cap)

    lows = [capped(count_requests(cache.pools(b), cache.demand(served_at(b)[0]), shared)[0], cap_at(b))
            for b in (budget.kv_budget_low_bytes, budget.kv_budget_high_bytes)]  # fmt: skip
    fields = dict(
        engine_version=settings.rules.version,
        max_num_seqs=seqs,
        max_in_flight_tokens=settings.max_num_batched_tokens,
    )
    if "blocks_per_request" in m:
        fields["blocks_per_request"] = m["blocks_per_request"]
    decode = cache.decode_demand(served)
    if by_memory and decode != demand:
        # a runtime model: every request decoding at `served` tokens holds its decode demand; one request's
        # admission reservation beyond it is kept free (the engine admits the next request by it)
        head = tuple(d - e for d, e in zip(demand, decode, strict=True))
        room = tuple(max(0, c - h) for c, h in zip(caps, head, strict=True))
        fields["max_concurrent_requests_decode"] = capped(count_requests(room, decode, shared)[0], seqs)
    base = dict(
        model=spec.name,
        gpu=gpu.id,
        gpu_name=gpu.name,
        engine=get_engine(opts.engine).value,
        tensor_parallel_size=opts.tensor_parallel_size,
        pipeline_parallel_size=opts.pipeline_parallel_size,
        kv_dtype=kv_dtype_name,
        weights_dtype=budget.weights_dtype,
        max_model_len=served,
        gpu_memory_utilization=settings.utilization,
        max_num_batched_tokens=settings.max_num_batched_tokens,
        gpu_total_bytes=budget.gpu_total_bytes,
        usable_bytes=budget.usable_bytes,
        weights_bytes=budget.weights_bytes,
        activation_bytes=budget.activation_bytes,
        overhead_bytes=budget.overhead_bytes,
        kv_budget_bytes=kv,
        kv_budget_given=budget.kv_budget_given,
        engine_version_asked="" if opts.engine_version is None else str(opts.engine_version).strip(),
        engine_rules=settings.rules.description,
        block_size=m["block_size"],
        kv_bytes_per_token=cache.kv_bytes_per_token,
        kv_bytes_per_block=cache.kv_bytes_per_block,
        kv_bytes_per_request=m["kv_bytes_per_request"],
        num_blocks=m["num_blocks"],
        kv_capacity_tokens=m["kv_capacity_tokens"],
        max_concurrent_requests=capped(by_memory, seqs),
        max_concurrency=m["max_concurrency"],
        max_model_len_fit=longest_request(cache, caps),
        shared_prefix_tokens=(prefix // cache.block_size) * cache.block_size,
        shared_prefix_bytes=sum(n * u for n, u in zip(shared, cache.unit_bytes, strict=True)),
        stage_num_layers=cache.stage_num_layers,
        max_requests_by_memory=by_memory,
        engine_log=cache.log_line(m, served, caps),
        max_requests_ratio=ratio,
        pools=tuple(zip(cache.pool_names, caps, cache.unit_bytes, strict=True)),
        cudagraph_bytes=budget.cudagraph_bytes,
        kv_budget_low_bytes=budget.kv_budget_low_bytes,
        kv_budget_high_bytes=budget.kv_budget_high_bytes,
        max_requests_low=lows[0],
        max_requests_high=lows[1],
        budget_terms=tuple(
            dict(name=t.name, bytes=t.bytes, low=t.low, high=t.high, source=t.source) for t in budget.terms
        ),  # fmt: skip
        gpu_total_basis=gpu.cuda_total_basis,
        model_max_context=spec.max_model_len,
        kv_replication=kv_replication(spec, opts.tensor_parallel_size, engines.get(opts.engine).kv_split_source),
        **fields,
    )
    base.update(cache.fit_fields())  # the engine's own fields (and its names for shared ones: llama.cpp's K/V types)
    base.update(cache.budget_fields(kv, max_len))  # those that follow the budget (SGLang's pools and request cap)
    return FitResult(**base)


def request_sizer(spec: ModelSpec, gpu: GPU, opts: FitOptions, fit: FitResult):
    """A function ``(tokens, shared_prefix) -> (unique bytes, prefix bytes)``: what one request of ``tokens``
    holds per GPU under the same engine rules and pools as ``fit`` (:func:`plan_fit` with ``opts``), beside
    the whole blocks of a shared prefix counted once per replica
    (:meth:`kvplan.engines.base.CachePlan.request_bytes`).

    Raises:
        UsageError: as :func:`plan_fit`.
    """
    return fit_plan(spec, gpu, replace(opts, max_model_len=fit.max_model_len))[1].request_bytes


def has_fp8(gpu: GPU) -> bool:
    """Whether FP8 weights or an FP8 KV cache are worth suggesting on ``gpu``: the catalog's ``fp8`` field
    (native FP8 tensor cores: Ada, Hopper, Blackwell, MI300); a GPU given by size is taken as able (kvplan's
    vLLM rules take it as Hopper-class)."""
    return gpu.fp8 or gpu.is_custom


def _uses_fp8(fit: FitResult) -> bool:
    return fit.kv_dtype.startswith("fp8") or fit.weights_dtype.startswith("fp8")


LARGER_GPU = (11, 10)  # a GPU suggested as larger has at least 11/10 of the CUDA-visible memory of the one given


def suggest(spec: ModelSpec, gpu: GPU, opts: FitOptions) -> list[str]:
    """What would fit instead, same hardware first: the longest max_model_len that fits, an FP8 KV cache
    (llama.cpp: q8_0), FP8 weights; then the smallest TP the heads allow; then a larger catalog GPU.

    FP8 is offered only on a GPU with FP8 support (:func:`has_fp8`; not on a T4, V100 or A100), and a
    larger GPU is one with FP8 support when the plan already uses FP8; with a given KV budget
    (``kv_cache_memory_bytes``) no other GPU is offered (the budget would be the same). A larger GPU has at least
    :data:`LARGER_GPU` times the CUDA-visible memory of ``gpu`` (10 % more): one barely larger that fits only by
    its engine's other defaults (an A100's 79.39 GiB against an H100's 79.22) is no advice to buy hardware.
    """
    out = []
    base = plan_fit(spec, gpu, opts)
    if base.max_model_len_fit >= 1 and base.kv_budget_bytes > 0:
        out.append(f"--max-model-len {base.max_model_len_fit} (the longest that fits)")
    eng = engines.get(opts.engine)
    kv = eng.kv_dtype(spec, opts.kv_dtype)
    if kv.bytes_for(1 << 20) > 1 << 20:  # wider than 8 bits per element
        quant = eng.quantized_kv if eng.quantized_kv != "fp8" or has_fp8(gpu) else None
        try:
            if (
                quant is not None
                and base.kv_budget_bytes > 0
                and plan_fit(spec, gpu, replace(opts, kv_dtype=quant)).fits
            ):
                what = "8-bit blocks" if quant == "q8_0" else "an FP8 KV cache, 1 byte per value"
                out.append(f"--kv-dtype {quant} ({what})")
        except UsageError:  # a cache the engine's backends do not take for this model
            pass
    if (
        opts.weights_bytes is None
        and spec.param_count is not None
        and opts.kv_cache_memory_bytes is None
        and not eng.gguf_weights  # GGUF has no FP8 type
        and has_fp8(gpu)
    ):
        current = get_weight_dtype(opts.weights_dtype or spec.weights_dtype or spec.dtype)
        if current.bits > 8 and plan_fit(spec, gpu, replace(opts, weights_dtype="fp8")).fits:
            out.append("--weights-dtype fp8 (an FP8 checkpoint: half the weights)")
    for tp in valid_tp_sizes(spec):
        if tp <= opts.tensor_parallel_size:
            continue
        try:
            if plan_fit(spec, gpu, replace(opts, tensor_parallel_size=tp)).fits:
                out.append(f"--tp {tp} (the smallest TP that fits)")
                break
        except UsageError:
            continue
    fp8_needed = _uses_fp8(base)
    # a given KV budget (--kv-cache-memory) is the same on any GPU: a larger one changes nothing
    tps = (
        [t for t in valid_tp_sizes(spec) if t >= opts.tensor_parallel_size]
        if opts.kv_cache_memory_bytes is None
        else []
    )
    for tp in tps:  # a larger GPU: the fewest GPUs first (smallest TP), then the smallest GPU
        found = None
        for g in sorted(load_catalog(), key=lambda g: g.cuda_total_bytes):
            num, den = LARGER_GPU
            if g.cuda_total_bytes * den < gpu.cuda_total_bytes * num or (fp8_needed and not has_fp8(g)):
                continue
            if plan_fit(spec, g, replace(opts, tensor_parallel_size=tp)).fits:
                found = g
                break
        if found is not None:
            name = found.aliases[0] if found.aliases else found.id
            extra = f" --tp {tp}" if tp != opts.tensor_parallel_size else ""
            out.append(f"--gpu {name}{extra} ({fmt_gib(found.cuda_total_bytes)})")
            break
    return out


def does_not_fit_reason(spec: ModelSpec, r: FitResult) -> str:
    """Why a plan does not fit, one line: what needs how much against what is available."""
    where = f"{spec.name} on {r.gpu} (TP={r.tensor_parallel_size}, PP={r.pipeline_parallel_size}, {r.engine})"
    return f"{where}: {does_not_fit_detail(r)}"


def does_not_fit_detail(r: FitResult) -> str:
    """:func:`does_not_fit_reason` without the model, GPU and layout it names first."""
    modelled = not r.budget_exact
    about = "≈ " if modelled else ""
    span = f" (modelled: {fmt_gib(r.kv_budget_low_bytes)} to {fmt_gib(r.kv_budget_high_bytes)})" if modelled else ""
    cg = f" + CUDA graphs {fmt_gib(r.cudagraph_bytes)}" if r.cudagraph_bytes else ""
    own = engines.get(r.engine).does_not_fit_what(r)
    if own is not None:
        what = own
    elif r.engine_refusal and r.kv_budget_bytes > 0:
        what = r.engine_refusal
    elif r.kv_budget_bytes <= 0:
        what = (
            f"weights {about}{fmt_gib(r.weights_bytes)} + activation {about}{fmt_gib(r.activation_bytes)} + overhead "
            f"{about}{fmt_gib(r.overhead_bytes)}{cg} per GPU leave no KV cache memory out of {fmt_gib(r.usable_bytes)} "
            f"usable{span}"
        )
    else:
        null = f" (+ a null block of {fmt_gib(r.kv_bytes_per_block)})" if r.null_block else ""
        what = (
            f"one request of max_model_len {r.max_model_len:,} needs {fmt_gib(r.kv_bytes_per_request)} of KV per "
            f"GPU{null} but the KV budget is {about}{fmt_gib(r.kv_budget_bytes)}{span}"
        )
    return what + engines.get(r.engine).does_not_fit_note(r)


def does_not_fit_message(spec: ModelSpec, r: FitResult, suggestions: list[str]) -> str:
    """One line: what needs how much against what is available (:func:`does_not_fit_reason`), and what would
    fit (:func:`suggest`)."""
    hint = "; would fit: " + ", or ".join(suggestions) if suggestions else "; nothing in the catalog fits"
    return f"{does_not_fit_reason(spec, r)}{hint}"


def require_fit(spec: ModelSpec, gpu: GPU, opts: FitOptions) -> FitResult:
    """:func:`plan_fit`, raising :class:`DoesNotFit` (exit 1) with suggestions when nothing fits.

    Raises:
        DoesNotFit: not one request of max_model_len fits; ``.result`` holds the plan, ``.reason`` the
            reason (:func:`does_not_fit_reason`) and ``.suggestions`` what would fit (:func:`suggest`).
        UsageError: as :func:`plan_fit`.
    """
    r = plan_fit(spec, gpu, opts)
    if not r.fits:
        suggestions = suggest(spec, gpu, opts)
        e = DoesNotFit(does_not_fit_message(spec, r, suggestions))
        e.result = r
        e.reason = does_not_fit_reason(spec, r)
        e.suggestions = suggestions
        raise e
    return r


# kvplan.fit(...) calls kvplan.api.fit: the module is made callable (see kvplan/__init__.py)
__import__("kvplan")._make_callable(__name__)
