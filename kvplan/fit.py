"""Capacity of one GPU (one model replica) under a serving engine's memory conventions. Pure, exact ints.

Memory model per GPU (vLLM's meaning of ``gpu_memory_utilization``)::

    KV budget = total × gpu_memory_utilization − weights/GPU − activation peak − non-torch overhead

with ``total`` the CUDA-visible memory (``torch.cuda.mem_get_info``), weights = param_count × weight
bytes / (TP × PP). Each engine convention changes where the fraction applies, the block size and how
sliding layers are counted (``../shared/reference/ENGINES.md`` gathers the engines' rules):

- ``vllm``: ``ceil(total × U)`` minus weights, activation (profiled at max_num_batched_tokens) and
  non-torch memory. The KV rules are the version's (:mod:`kvplan.engines.vllm`; ``--engine-version``):
  0.33 (default) puts layers in KV cache groups of equal size sharing one pool of blocks
  (``num_blocks = budget // bytes per block``), holds one null block back, reserves for two batches in
  flight in sliding (``cdiv(min(window − 1 + in_flight, S), block) + 1``) and chunked layers, aligns
  hybrid attention/Mamba pages, and logs "GPU KV cache size" = ``int(max_concurrency × S)`` with
  "Maximum concurrency" = blocks / blocks per request; concurrency is capped at ``max_num_seqs``
  [vllm 0.33 v1/core/kv_cache_planning.py, kv_cache_utils.py, kv_cache_interface.py]. 0.11 and 0.6
  count every layer in one pool: ``num_blocks = budget // (block_size × Σ_layers bytes/token)``,
  "GPU KV cache size" = blocks × block_size, one batch in flight, no null block.
- ``sglang``: ``mem_fraction_static`` of the memory available at start holds weights and KV:
  budget = (total − overhead) × U − weights; per-token cells, page size 1 [sglang model_runner].
- ``trtllm``: ``free_gpu_memory_fraction`` U of the memory still free after weights and activations:
  budget = U × (total − weights − activation − overhead); 32-token blocks.
- ``llamacpp``: no fraction: the cache is n_ctx cells (padded to 256) × parallel slots; interleaved-SWA
  models get a second cache of ``min(n_ctx, pad(n_swa + n_ubatch, 256))`` cells (``--swa-full`` sizes it
  at n_ctx); budget = total − weights − compute buffer − overhead.

Defaults for activation and overhead are calibrated on the engine logs in
``tests/fixtures/engine_calibration.yaml`` and each is overridable:

- activation (vLLM): ``1 GiB + max_num_batched_tokens × 14 × hidden_size / TP`` bytes: the MLP's gate and
  up projections in 16-bit (2 × 3.5 × hidden × 2 B per token) plus ~1 GiB of sampler and workspace
  buffers. Llama-3.1-8B: 1.44 GiB at 8,192 tokens (printed 1.44), 2.07 GiB at 20,000 (printed
  17.06 − 14.99 = 2.07).
- activation (TensorRT-LLM): the same plus 2 MiB per sequence of ``max_batch_size`` (runtime buffers);
  one log (RTX 5090, max_batch_size 2048).
- non-torch overhead: 0.3 GiB at TP = 1 (logs: 0.26, 0.35), 2 GiB with TP > 1 (NCCL; logs 1.8–3.6).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from enum import Enum

from kvplan.calc import cdiv, check_tp, layer_state_bytes, layer_token_bytes, resolve_kv_dtype, valid_tp_sizes
from kvplan.dtypes import KVDtype, get_weight_dtype
from kvplan.engines import llamacpp as llamacpp_rules
from kvplan.engines import sglang as sglang_rules
from kvplan.engines import trtllm as trtllm_rules
from kvplan.engines import vllm as vllm_rules
from kvplan.errors import DoesNotFit, UsageError
from kvplan.gpus import GPU, load_catalog
from kvplan.specs import ModelSpec
from kvplan.units import GIB, MIB, fmt_gib, plural

MAX_SEARCH_TOKENS = 1 << 40  # upper end of the max_model_len search (a cache with no per-token growth)


class Engine(str, Enum):
    """Serving-engine conventions kvplan can apply."""

    vllm = "vllm"
    sglang = "sglang"
    trtllm = "trtllm"
    llamacpp = "llamacpp"


@dataclass(frozen=True, eq=False)
class EngineConvention:
    """An engine's defaults: block (page) size, memory fraction, batched tokens, and how it counts.

    Attributes:
        engine: which engine.
        block_size: tokens per KV block (vLLM 16, TRT-LLM 32, SGLang page 1, llama.cpp n_ctx pad 256).
        utilization: default memory fraction (vLLM gpu_memory_utilization 0.9, SGLang
            mem_fraction_static 0.88, TRT-LLM free_gpu_memory_fraction 0.9, llama.cpp 1.0).
        max_num_batched_tokens: default tokens per forward step (vLLM 8192, SGLang chunked_prefill_size
            8192, TRT-LLM max_num_tokens 8192, llama.cpp n_ubatch 512).
        max_batch_size: TRT-LLM's default max_batch_size (runtime buffers scale with it); 0 elsewhere.
    """

    engine: Engine
    block_size: int
    utilization: float
    max_num_batched_tokens: int
    max_batch_size: int = 0


CONVENTIONS = {
    Engine.vllm: EngineConvention(Engine.vllm, 16, 0.90, 8192),
    Engine.sglang: EngineConvention(Engine.sglang, 1, 0.88, 8192),
    Engine.trtllm: EngineConvention(Engine.trtllm, 32, 0.90, 8192, max_batch_size=2048),
    Engine.llamacpp: EngineConvention(Engine.llamacpp, 256, 1.0, 512),
}

ACTIVATION_BASE_BYTES = 1 * GIB
ACTIVATION_BYTES_PER_TOKEN_PER_HIDDEN = 14  # 2 projections × 3.5 × hidden × 2 B
TRTLLM_BYTES_PER_SEQUENCE = 2 * MIB
LLAMACPP_COMPUTE_BYTES = GIB // 2
OVERHEAD_TP1_BYTES = 3 * GIB // 10
OVERHEAD_TP_BYTES = 2 * GIB


def get_engine(name: str | Engine) -> Engine:
    """Look up an engine by name (``vllm``, ``sglang``, ``trtllm``, ``llamacpp``).

    Raises:
        UsageError: unknown name.
    """
    if isinstance(name, Engine):
        return name
    key = str(name).strip().lower().replace("-", "").replace(".", "").replace("_", "")
    aliases = {"tensorrtllm": "trtllm", "trt": "trtllm", "ollama": "llamacpp"}
    key = aliases.get(key, key)
    try:
        return Engine(key)
    except ValueError:
        allowed = ", ".join(e.value for e in Engine)
        raise UsageError(f"--engine: unknown engine {name!r}; allowed: {allowed}") from None


def engine_rules(engine: Engine, version: str | None) -> tuple[str, str]:
    """(rule set, its description) an engine applies for ``--engine-version`` ``version`` (None: the newest).

    vLLM and TensorRT-LLM: the newest set not newer than the version (:mod:`kvplan.engines.vllm`,
    :mod:`kvplan.engines.trtllm`); SGLang and llama.cpp have one set each, and take any version that parses.
    A version older than the oldest set gets that set (:func:`engine_version_warning` says so).

    Raises:
        UsageError: a version that does not parse (the message lists the rule sets).
    """
    if engine is Engine.vllm:
        r = vllm_rules.resolve_rules(version)
        return r.version, r.description
    if engine is Engine.trtllm:
        t = trtllm_rules.resolve_rules(version)
        return t.version, t.description
    if engine is Engine.sglang:
        return sglang_rules.resolve_rules(version), sglang_rules.DESCRIPTION
    return llamacpp_rules.resolve_rules(version), llamacpp_rules.DESCRIPTION


ENGINE_NAMES = {
    Engine.vllm: "vLLM",
    Engine.sglang: "SGLang",
    Engine.trtllm: "TensorRT-LLM",
    Engine.llamacpp: "llama.cpp",
}
_ENGINE_MODULES = {Engine.vllm: vllm_rules, Engine.sglang: sglang_rules, Engine.trtllm: trtllm_rules,
                   Engine.llamacpp: llamacpp_rules}  # fmt: skip


def engine_version_warning(engine: str | Engine, version: str | None) -> str | None:
    """The warning for a ``--engine-version`` older than the engine's oldest rule set (kvplan applies that
    set rather than refuse: the output names it), else None.

    Raises:
        UsageError: as :func:`engine_rules`.
    """
    eng = get_engine(engine)
    rules, description = engine_rules(eng, version)
    if version is None or not _ENGINE_MODULES[eng].older_than_oldest(version):
        return None
    return (
        f"--engine-version {str(version).strip()} is older than the oldest {ENGINE_NAMES[eng]} rule set kvplan has; "
        f"applying {rules} ({description})"
    )


def stage_layers(num_layers: int, pipeline_parallel_size: int, partition: tuple[int, ...] | None = None) -> list[range]:
    """Contiguous layer ranges of PP stages: ``partition`` when given, else sizes differing by at most one
    (extra layers to the first)."""
    base, extra = divmod(num_layers, pipeline_parallel_size)
    out, start = [], 0
    for s in range(pipeline_parallel_size):
        n = partition[s] if partition is not None else base + (1 if s < extra else 0)
        out.append(range(start, start + n))
        start += n
    return out


@dataclass(frozen=True, eq=False)
class StageCache:
    """What the layers of one PP stage cost on one GPU: bytes per token per kind, and fixed state.

    Attributes:
        per_kind: ``{kind: (layers, bytes per token across those layers, window or None)}`` for token kinds.
        state_bytes: fixed bytes per request (Mamba states) on this GPU.
    """

    per_kind: dict
    state_bytes: int

    @property
    def bytes_per_token(self) -> int:
        """Bytes one token costs in every token-caching layer of the stage (as a full layer would)."""
        return sum(b for _, b, _ in self.per_kind.values())

    @property
    def growing_bytes_per_token(self) -> int:
        """Bytes per token of the layers whose cache grows with the request (full and MLA)."""
        return sum(b for k, (_, b, _) in self.per_kind.items() if k in ("full", "mla"))


def stage_cache(spec: ModelSpec, kv_dtype: KVDtype, tp: int, layers: range) -> StageCache:
    """Per-kind bytes per token of one stage's layers on one GPU at tensor parallel ``tp``."""
    per_kind: dict[str, tuple[int, int, int | None]] = {}
    state = 0
    for i in layers:
        layer = spec.layers[i]
        kind = layer.kind
        state += layer_state_bytes(layer, spec.dtype, tp)
        tb = layer_token_bytes(layer, kv_dtype, tp)
        if tb:
            n, b, w = per_kind.get(kind, (0, 0, spec.window_of(kind)))
            per_kind[kind] = (n + 1, b + tb, w)
    return StageCache(per_kind, state)


def request_bytes(
    cache: StageCache,
    seq_len: int,
    engine: Engine,
    block_size: int,
    max_num_batched_tokens: int,
    swa_full: bool = False,
) -> int:
    """Bytes one request of ``seq_len`` tokens holds on one GPU under ``engine``'s counting rules.

    full / mla: ``cdiv(S, block) × block`` tokens. sliding: vLLM
    ``cdiv(min(window − 1 + max_num_batched_tokens, S), block) + 1`` blocks; llama.cpp
    ``min(n_ctx, pad(window + n_ubatch, 256))`` cells; others ``min(S, window)`` rounded to blocks.
    chunked: vLLM ``cdiv(min(chunk + max_num_batched_tokens, S), block)`` blocks; others as sliding.
    Plus the fixed state bytes.
    """
    total = cache.state_bytes
    full_tokens = cdiv(seq_len, block_size) * block_size
    for kind, (_, per_token, window) in cache.per_kind.items():
        if kind in ("full", "mla") or window is None or swa_full:
            tokens = full_tokens
        elif engine is Engine.vllm and kind == "sliding":
            tokens = (cdiv(min(window - 1 + max_num_batched_tokens, seq_len), block_size) + 1) * block_size
        elif engine is Engine.vllm and kind == "chunked":
            tokens = cdiv(min(window + max_num_batched_tokens, seq_len), block_size) * block_size
        elif engine is Engine.llamacpp:
            tokens = min(full_tokens, cdiv(window + max_num_batched_tokens, 256) * 256)
        else:
            tokens = cdiv(min(seq_len, window), block_size) * block_size
        total += per_token * tokens
    return total


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
        max_model_len_fit: the longest single request that fits the budget (tokens).
        shared_prefix_tokens / shared_prefix_bytes: prompt tokens counted once per replica, and their bytes.
        engine_version: the rule set applied (vLLM: ``0.33``, ``0.11``, ``0.6``; TensorRT-LLM ``1.0``; SGLang
            ``0.5.23``; "" for llama.cpp, which has one rule set without a number).
        engine_version_asked: ``--engine-version`` as given ("" when not given).
        engine_rules: the rule set in words (:func:`engine_rules`).
        max_num_seqs: the engine's cap on running requests (vLLM ``max_num_seqs``), or None.
        max_requests_by_memory: whole requests of max_model_len the KV pool holds (vLLM 0.33: the null
            block excluded); ``max_concurrent_requests`` is this capped at ``max_num_seqs``.
        max_in_flight_tokens: tokens scheduled but not settled that windowed layers reserve for (vLLM).
        async_scheduling, prefix_caching, hybrid_kv_cache_manager: the vLLM settings applied.
        null_block: whether one block is held back (vLLM ≥ 0.33).
        blocks_per_request: blocks one request of max_model_len takes, all KV cache groups (vLLM 0.33).
        kv_cache_groups: vLLM 0.33's groups: dicts of kind, layers (count), block_size, page_bytes.
        padding_layers: layers vLLM adds so its groups are equal ("Add N padding layers").
        engine_log: the start-up line the engine prints ("GPU KV cache size: ... Maximum concurrency ...").
        num_speculative_tokens, drafter_layers: speculative decoding (vLLM ≥ 0.33): draft tokens per step and
            the drafter's layers in the pool (MTP modules, or a draft model's / EAGLE head's layers).
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
    engine_version_asked: str = ""
    engine_rules: str = ""

    @property
    def fits(self) -> bool:
        """True when at least one request of max_model_len fits."""
        return self.max_requests_by_memory >= 1

    @property
    def limited_by_max_num_seqs(self) -> bool:
        """True when ``max_num_seqs``, not memory, bounds the concurrent requests."""
        return self.max_num_seqs is not None and self.max_requests_by_memory > self.max_num_seqs

    @property
    def kv_room_bytes(self) -> int:
        """Bytes per GPU that requests are counted against under the engine's rules: vLLM ≥ 0.33 the pool
        less the null block (``(num_blocks − 1) × kv_bytes_per_block``), TensorRT-LLM the pool it allocates
        (``num_blocks × kv_bytes_per_block``, rounded up to whole blocks), otherwise the KV budget."""
        if self.kv_cache_groups:
            return max(0, self.num_blocks - (1 if self.null_block else 0)) * self.kv_bytes_per_block
        if self.engine == "trtllm" and self.engine_version and self.kv_bytes_per_block:
            return self.num_blocks * self.kv_bytes_per_block
        return self.kv_budget_bytes

    @property
    def max_model_len_unbounded(self) -> bool:
        """True when no request length outgrows the budget (only windowed and state layers grow nothing)."""
        return self.max_model_len_fit >= MAX_SEARCH_TOKENS

    @property
    def gpus_per_replica(self) -> int:
        """TP × PP."""
        return self.tensor_parallel_size * self.pipeline_parallel_size


@dataclass(frozen=True, eq=False)
class FitOptions:
    """Settings of a fit; None means the engine's default. Sizes in bytes, tokens as ints."""

    engine: Engine = Engine.vllm
    tensor_parallel_size: int = 1
    pipeline_parallel_size: int = 1
    max_model_len: int | None = None
    kv_dtype: str | None = None
    weights_dtype: str | None = None
    gpu_memory_utilization: float | None = None
    block_size: int | None = None
    max_num_batched_tokens: int | None = None
    max_batch_size: int | None = None
    activation_bytes: int | None = None
    overhead_bytes: int | None = None
    weights_bytes: int | None = None
    kv_cache_memory_bytes: int | None = None
    shared_prefix_tokens: int = 0
    swa_full: bool = False
    engine_version: str | None = None
    max_num_seqs: int | None = None
    async_scheduling: bool | None = None
    enable_prefix_caching: bool | None = None
    hybrid_kv_cache_manager: bool | None = None
    pp_layer_partition: tuple[int, ...] | None = None
    num_speculative_tokens: int = 0
    speculative_model: ModelSpec | None = None
    num_mtp_layers: int = 0


def check_speculative(spec: ModelSpec, opts: FitOptions, vllm_groups: bool) -> None:
    """Refuse speculative-decoding settings kvplan cannot size: any of them outside vLLM ≥ 0.33's rules, a
    drafter without ``--num-speculative-tokens``, a draft model whose heads the TP does not split.

    Raises:
        UsageError: naming the flag.
    """
    _check("--num-speculative-tokens", opts.num_speculative_tokens, 0)
    _check("--num-mtp-layers", opts.num_mtp_layers, 0)
    asked = opts.num_speculative_tokens or opts.speculative_model is not None or opts.num_mtp_layers
    if not asked:
        return
    if not vllm_groups:
        raise UsageError(
            "--num-speculative-tokens / --speculative-model / --num-mtp-layers: sized under vLLM >= 0.33's rules only "
            "(--engine vllm, the default version)"
        )
    if (opts.speculative_model is not None or opts.num_mtp_layers) and not opts.num_speculative_tokens:
        raise UsageError("--num-speculative-tokens: give the draft tokens per step (>= 1) with a drafter")
    if opts.speculative_model is not None and opts.num_mtp_layers:
        raise UsageError("--speculative-model and --num-mtp-layers: give one drafter, not both")
    if opts.speculative_model is not None:
        check_tp(opts.speculative_model, opts.tensor_parallel_size, "--tp (for --speculative-model)")


def parse_partition(text: str) -> tuple[int, ...]:
    """``"41,39"`` → ``(41, 39)`` (``--pp-layer-partition``).

    Raises:
        UsageError: not integers separated by commas.
    """
    try:
        return tuple(int(x) for x in str(text).split(","))
    except ValueError:
        raise UsageError(
            f"--pp-layer-partition: {text!r} must be layer counts (one per --pp stage) separated by commas, e.g. 41,39"
        ) from None


def check_pp_partition(spec: ModelSpec, pp: int, partition: tuple[int, ...] | None) -> None:
    """Refuse a ``--pp-layer-partition`` (vLLM ``VLLM_PP_LAYER_PARTITION``) that is not PP counts >= 1
    summing to the model's layers.

    Raises:
        UsageError: the wrong number of stages, a count below 1, or a sum other than num_layers.
    """
    if partition is None:
        return
    given = ",".join(str(n) for n in partition)
    want = (
        f"give {plural(pp, 'count')} (one per --pp stage), each >= 1, that sum to {spec.num_layers} "
        f"({spec.name}'s num_layers)"
    )
    if any(isinstance(n, bool) or not isinstance(n, int) or n < 1 for n in partition):
        raise UsageError(f"--pp-layer-partition: {given} has a count below 1; {want}")
    wrong = []
    if sum(partition) != spec.num_layers:
        wrong.append(f"sums to {plural(sum(partition), 'layer')}")
    if len(partition) != pp:
        wrong.append(f"has {plural(len(partition), 'count')} for --pp {pp}")
    if wrong:
        raise UsageError(f"--pp-layer-partition: {given} {' and '.join(wrong)}; {want}")


def no_param_count_message(spec: ModelSpec, weights_dtype: str | None = None) -> str:
    """The one-line error for weights that cannot be sized: what is missing and what fixes it, told apart
    for a bundled name, a user's spec YAML, a checkpoint whose bytes but not parameters are known (with
    ``weights_dtype``), a safetensors index that does not tell the weights (``spec.weights_note``), a GGUF
    without tensor infos, and a config.json (local or from the Hub)."""
    from pathlib import Path

    from kvplan.specs import bundled_specs_dir

    fix = "give --weights-gib (weights per GPU)"
    origin = spec.origin or spec.source
    if spec.weights_bytes is not None and weights_dtype is not None:
        return (
            f"{spec.name}: the checkpoint's weights are known in bytes ({spec.weights_bytes:,} B) but not in "
            f"parameters, so --weights-dtype {weights_dtype} cannot re-size them; drop --weights-dtype, or {fix}"
        )
    if spec.weights_note:  # a safetensors index was found but does not tell the weights
        return f"{spec.name}: {spec.weights_note}, so weights are unknown; {fix}, or write a spec YAML with param_count"
    if origin.lower().endswith(".gguf"):
        return f"{spec.name}: {origin} has no tensor infos (metadata only), so weights are unknown; {fix}"
    if not origin.lower().endswith((".json", ".gguf")) and "://" not in origin:  # a spec YAML
        if Path(origin).resolve().parent == bundled_specs_dir().resolve():
            return f"{spec.name}: the bundled spec gives no param_count, so weights are unknown; {fix}"
        return (
            f"{spec.name}: {origin} gives no param_count, so weights are unknown; add param_count (total "
            f"parameters) to that spec YAML, or {fix}"
        )
    return (
        f"{spec.name}: a config.json gives no parameter count and no safetensors weights were found with it "
        f"(model.safetensors or model.safetensors.index.json), so weights are unknown; {fix}, or write a spec "
        "YAML with param_count"
    )


def weights_per_gpu(spec: ModelSpec, weights_dtype: str | None, tp: int, pp: int) -> tuple[int, str]:
    """(bytes of weights on one GPU, dtype name): ``ceil(weight bytes / (TP × PP))``.

    Weight bytes = ``(param_count − param_count_unquantized) × weights dtype`` +
    ``param_count_unquantized × model dtype`` when the weights dtype differs from the model's (checkpoints
    keep embeddings, and for MXFP4 MoE models attention and router, in 16 bit); else
    ``param_count × weights dtype``. The weights dtype is ``weights_dtype`` if given, else the spec's
    ``weights_dtype`` (how the checkpoint ships), else the model dtype. A spec with ``weights_bytes`` (read
    from a GGUF's tensor infos or safetensors headers) uses those exact bytes unless ``weights_dtype`` is
    given; the dtype name is then ``checkpoint``.

    Raises:
        UsageError: the spec has no param_count (give --weights-gib; the message says what else fixes it
            for a bundled name, a spec YAML, a config.json or a checkpoint), or an unknown dtype.
    """
    if spec.weights_bytes is not None and weights_dtype is None:  # exact, from a GGUF's or safetensors' headers
        return cdiv(spec.weights_bytes, tp * pp), "checkpoint"
    model_wd = get_weight_dtype(spec.dtype)
    wd = get_weight_dtype(weights_dtype or spec.weights_dtype or spec.dtype)
    if spec.param_count is None:
        raise UsageError(no_param_count_message(spec, weights_dtype))
    kept = spec.param_count_unquantized if wd.bits != model_wd.bits else 0
    total = wd.bytes_for(spec.param_count - kept) + model_wd.bytes_for(kept)
    return cdiv(total, tp * pp), wd.name


def default_activation_bytes(spec: ModelSpec, conv: EngineConvention, mnbt: int, tp: int, max_batch: int) -> int:
    """Activation peak per GPU (see the module docstring for the calibration)."""
    hidden = spec.hidden_size or spec.num_q_heads * spec.head_dim
    if conv.engine is Engine.llamacpp:
        return LLAMACPP_COMPUTE_BYTES
    if conv.engine is Engine.sglang:
        return 0  # outside mem_fraction_static: the remaining (1 − fraction) is left for activations
    act = ACTIVATION_BASE_BYTES + cdiv(mnbt * ACTIVATION_BYTES_PER_TOKEN_PER_HIDDEN * hidden, tp)
    if conv.engine is Engine.trtllm:
        act += max_batch * TRTLLM_BYTES_PER_SEQUENCE
    return act


def fixed_memory(
    spec: ModelSpec, conv: EngineConvention, opts: FitOptions, tp: int, pp: int, mnbt: int, max_batch: int
) -> tuple[int, str, int, int]:
    """(weights bytes, weights dtype name, activation bytes, overhead bytes) per GPU: the overrides in
    ``opts`` where given, else :func:`weights_per_gpu`, :func:`default_activation_bytes` and the
    overhead defaults (0.3 GiB on one GPU, 2 GiB when TP × PP > 1).

    Raises:
        UsageError: as :func:`weights_per_gpu`.
    """
    if opts.weights_bytes is not None:
        weights, wname = opts.weights_bytes, "given"
    elif spec.param_count is None and opts.kv_cache_memory_bytes is not None:
        weights, wname = 0, "unknown"  # the KV budget is given: weights do not enter the plan
    else:
        weights, wname = weights_per_gpu(spec, opts.weights_dtype, tp, pp)
        draft = opts.speculative_model
        if draft is not None and (draft.param_count is not None or draft.weights_bytes is not None):
            # the draft model sits on the last stage, split over TP (vLLM: draft TP = target TP)
            weights += weights_per_gpu(draft, None, tp, 1)[0]
    activation = opts.activation_bytes
    if activation is None:
        activation = default_activation_bytes(spec, conv, mnbt, tp, max_batch)
    overhead = opts.overhead_bytes
    if overhead is None:
        overhead = OVERHEAD_TP1_BYTES if tp * pp == 1 else OVERHEAD_TP_BYTES
    return weights, wname, activation, overhead


FLAG_LIMITS = {  # upper bounds that keep every count far inside exact int64 / float64 arithmetic
    "--max-model-len": MAX_SEARCH_TOKENS,
    "--seq": MAX_SEARCH_TOKENS,
    "--block-size": 1 << 20,
    "--max-num-batched-tokens": 1 << 31,
    "--max-batch-size": 1 << 24,
    "--shared-prefix": MAX_SEARCH_TOKENS,
    "--tp": 1 << 16,
    "--pp": 1 << 16,
    "--max-num-seqs": 1 << 24,
    "--num-speculative-tokens": 1 << 10,
    "--num-mtp-layers": 1 << 10,
}


def engine_settings(conv: EngineConvention, opts: FitOptions, gpu: GPU | None = None) -> tuple[float, int, int, int]:
    """(memory fraction, block size, max_num_batched_tokens, max_batch_size): ``opts`` where given (None
    takes the engine's default; 0 is not a default), else ``conv``'s. vLLM ≥ 0.33 takes its batched-token
    default from the GPU's memory (:func:`kvplan.engines.vllm.batch_defaults`) when ``gpu`` is given.

    Raises:
        UsageError: the fraction is outside (0, 1]; an unknown --engine-version.
    """
    util = conv.utilization if opts.gpu_memory_utilization is None else opts.gpu_memory_utilization
    if not 0 < util <= 1:
        raise UsageError(f"--gpu-memory-utilization: {util} must be in (0, 1]")
    block = conv.block_size if opts.block_size is None else opts.block_size
    mnbt = conv.max_num_batched_tokens if opts.max_num_batched_tokens is None else opts.max_num_batched_tokens
    if opts.max_num_batched_tokens is None and conv.engine is Engine.vllm and gpu is not None:
        if vllm_rules.resolve_rules(opts.engine_version).batch_defaults_per_gpu:
            mnbt = vllm_rules.batch_defaults(gpu.cuda_total_bytes, gpu.name)[0]
    max_batch = conv.max_batch_size if opts.max_batch_size is None else opts.max_batch_size
    return util, block, mnbt, max_batch


@dataclass(frozen=True)
class VllmSettings:
    """vLLM settings of a fit beyond :func:`engine_settings`, defaults resolved.

    Attributes:
        rules: the version's rule set.
        max_num_seqs: cap on running requests.
        async_scheduling: async scheduling on (2 batches in flight).
        prefix_caching: prefix caching on (Mamba "align" mode: 2 pages per state layer).
        hybrid_kv_cache_manager: layers keep their own kinds (off: local layers cached as full).
        family: GPU family for backend block sizes (``sm90``, ``sm100``, ``other``).
    """

    rules: vllm_rules.VllmRules
    max_num_seqs: int
    async_scheduling: bool
    prefix_caching: bool
    hybrid_kv_cache_manager: bool
    family: str


def vllm_settings(spec: ModelSpec, gpu: GPU, opts: FitOptions) -> VllmSettings:
    """The vLLM version's defaults where ``opts`` leaves None (see :mod:`kvplan.engines.vllm`).

    Raises:
        UsageError: an unknown --engine-version.
    """
    rules = vllm_rules.resolve_rules(opts.engine_version)
    seqs = opts.max_num_seqs
    if seqs is None:
        seqs = (
            vllm_rules.batch_defaults(gpu.cuda_total_bytes, gpu.name)[1]
            if rules.batch_defaults_per_gpu
            else vllm_rules.OLD_DEFAULT_MAX_NUM_SEQS
        )
    asynch = rules.async_scheduling if opts.async_scheduling is None else opts.async_scheduling
    prefix = (
        vllm_rules.default_prefix_caching(spec) if opts.enable_prefix_caching is None else opts.enable_prefix_caching
    )
    hma = opts.hybrid_kv_cache_manager
    if hma is None:
        hma = vllm_rules.default_hybrid_kv_cache_manager(spec)
    return VllmSettings(rules, seqs, asynch, prefix, hma, vllm_rules.gpu_family(gpu.name, gpu.is_custom))


def _check(flag: str, value, minimum=1) -> None:
    """Raise UsageError unless ``value`` (when given) is an int in [minimum, FLAG_LIMITS[flag]]."""
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise UsageError(f"{flag}: {value!r} must be an integer >= {minimum}")
    limit = FLAG_LIMITS.get(flag)
    if limit is not None and value > limit:
        raise UsageError(f"{flag}: {value:,} is beyond what kvplan plans for (at most {limit:,})")


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
    conv = CONVENTIONS[get_engine(opts.engine)]
    tp, pp = opts.tensor_parallel_size, opts.pipeline_parallel_size
    _check("--tp", tp)
    _check("--pp", pp)
    for flag, v in (
        ("--max-model-len", opts.max_model_len),
        ("--block-size", opts.block_size),
        ("--max-num-batched-tokens", opts.max_num_batched_tokens),
        ("--max-batch-size", opts.max_batch_size),
        ("--max-num-seqs", opts.max_num_seqs),
    ):
        _check(flag, v)
    check_tp(spec, tp)
    if pp > spec.num_layers:
        raise UsageError(f"--pp: {pp} is more stages than {spec.name}'s {spec.num_layers} layers")
    check_pp_partition(spec, pp, opts.pp_layer_partition)
    rules_version, rules_text = engine_rules(conv.engine, opts.engine_version)
    util, block, mnbt, max_batch = engine_settings(conv, opts, gpu)
    max_len = spec.max_model_len if opts.max_model_len is None else opts.max_model_len
    _check("--shared-prefix", opts.shared_prefix_tokens, 0)
    if opts.shared_prefix_tokens >= max_len:
        raise UsageError(
            f"--shared-prefix: {opts.shared_prefix_tokens:,} tokens must be shorter than max_model_len {max_len:,} "
            "(each request has tokens of its own)"
        )
    kv_dtype = resolve_kv_dtype(spec, opts.kv_dtype)

    weights, wname, activation, overhead = fixed_memory(spec, conv, opts, tp, pp, mnbt, max_batch)
    total = gpu.cuda_total_bytes
    if conv.engine is Engine.vllm:
        usable = -(-int(total * util * 10**6) // 10**6)  # ceil(total × U), as vLLM's requested_memory
        budget = usable - weights - activation - overhead
    elif conv.engine is Engine.sglang:
        usable = int((total - overhead) * util)
        budget = usable - weights - activation
    elif conv.engine is Engine.trtllm:
        usable = total - weights - activation - overhead
        budget = int(usable * util)
    else:
        usable = int(total * util)
        budget = usable - weights - activation - overhead
    given = opts.kv_cache_memory_bytes is not None
    if given:
        budget = opts.kv_cache_memory_bytes
    budget = max(0, budget)
    common = dict(
        model=spec.name,
        gpu=gpu.id,
        gpu_name=gpu.name,
        engine=conv.engine.value,
        tensor_parallel_size=tp,
        pipeline_parallel_size=pp,
        kv_dtype=kv_dtype.name,
        weights_dtype=wname,
        max_model_len=max_len,
        gpu_memory_utilization=util,
        max_num_batched_tokens=mnbt,
        gpu_total_bytes=total,
        usable_bytes=usable,
        weights_bytes=weights,
        activation_bytes=activation,
        overhead_bytes=overhead,
        kv_budget_bytes=budget,
        kv_budget_given=given,
        engine_version_asked="" if opts.engine_version is None else str(opts.engine_version).strip(),
        engine_rules=rules_text,
    )
    if conv.engine is Engine.vllm:
        vs = vllm_settings(spec, gpu, opts)
        check_speculative(spec, opts, vs.rules.kv_cache_groups)
        if vs.rules.kv_cache_groups:
            return _plan_vllm_groups(spec, kv_dtype, opts, vs, common, max_len, mnbt)
        extra = dict(
            engine_version=vs.rules.version,
            max_num_seqs=vs.max_num_seqs,
            max_in_flight_tokens=mnbt,
            async_scheduling=False,
            prefix_caching=vs.prefix_caching,
            hybrid_kv_cache_manager=False,
        )
    elif conv.engine is Engine.trtllm:
        check_speculative(spec, opts, False)
        trt = trtllm_rules.resolve_rules(opts.engine_version)
        # max_batch_size caps the requests the scheduler runs at once (--max-num-seqs overrides it)
        seqs = max_batch if opts.max_num_seqs is None else opts.max_num_seqs
        extra = dict(engine_version=trt.version, max_num_seqs=seqs, max_in_flight_tokens=mnbt)
    else:
        check_speculative(spec, opts, False)
        extra = dict(engine_version=rules_version, max_in_flight_tokens=mnbt)
    trt = trtllm_rules.resolve_rules(opts.engine_version) if conv.engine is Engine.trtllm else None
    # TensorRT-LLM (PyTorch backend) sizes every attention layer for max_seq_len: windows as full; so does
    # SGLang outside its hybrid-SWA architectures (one pool of max_total_num_tokens slots in every layer)
    swa_full = (
        opts.swa_full
        or (trt is not None and trt.windows_as_full)
        or (conv.engine is Engine.sglang and not sglang_rules.is_hybrid_swa(spec))
    )

    # The worst stage: most bytes per request of max_model_len.
    ranges = stage_layers(spec.num_layers, pp, opts.pp_layer_partition)
    stages = [stage_cache(spec, kv_dtype, tp, r) for r in ranges]
    sizes = [len(r) for r in ranges]

    def req(c: StageCache, s: int) -> int:
        return request_bytes(c, s, conv.engine, block, mnbt, swa_full)

    worst = max(range(pp), key=lambda i: (req(stages[i], max_len), stages[i].bytes_per_token))
    cache = stages[worst]
    per_request = req(cache, max_len)
    per_block = block * cache.bytes_per_token
    if trt is not None:  # ceil(max_tokens / block) blocks, max_tokens = budget // bytes per token
        num_blocks = trtllm_rules.pool_blocks(budget, cache.bytes_per_token, block, trt)
    else:
        num_blocks = budget // per_block if per_block else 0
    shared_tokens = (opts.shared_prefix_tokens // block) * block  # only whole blocks are shared
    shared_bytes = shared_tokens * cache.growing_bytes_per_token
    unique = per_request - shared_bytes
    pool = num_blocks * per_block if per_block else budget
    # what requests are counted against: the budget, or for TensorRT-LLM the pool it allocates (ceil)
    room = pool if trt is not None else budget
    if unique <= 0:
        max_requests = 0
        concurrency = ratio = 0.0
    else:
        max_requests = max(0, (room - shared_bytes) // unique) if room >= per_request else 0
        concurrency = max(0.0, (pool - shared_bytes) / unique)
        ratio = max(0.0, (room - shared_bytes) / unique)  # floor = max_requests

    lo, hi = 0, MAX_SEARCH_TOKENS  # largest S with req(S) <= room (req is non-decreasing in S)
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if req(cache, mid) <= room:
            lo = mid
        else:
            hi = mid - 1
    log = ""
    if conv.engine is Engine.sglang and sglang_rules.is_hybrid_swa(spec):
        # SGLang's hybrid-SWA pools (kvplan.engines.sglang): full and sliding layers in separate pools
        win = sglang_rules.window(spec)
        swa_pt = cache.bytes_per_token - cache.growing_bytes_per_token
        full_tokens, swa_tokens = sglang_rules.pool_split(budget, cache.growing_bytes_per_token, swa_pt)
        swa_req = sglang_rules.swa_tokens_per_request(max_len, win)
        num_blocks = full_tokens // block
        per_request = max_len * cache.growing_bytes_per_token + swa_pt * swa_req
        by_full = (full_tokens - shared_tokens) // (max_len - shared_tokens) if full_tokens >= max_len else 0
        max_requests = min(by_full, swa_tokens // swa_req)
        concurrency = min(full_tokens / max_len, swa_tokens / swa_req)
        ratio = min(max(0, full_tokens - shared_tokens) / (max_len - shared_tokens), swa_tokens / swa_req)
        lo = sglang_rules.longest_request(full_tokens, swa_tokens, win)
        log = sglang_rules.log_line(full_tokens, swa_tokens)
    seqs = extra.get("max_num_seqs")
    if conv.engine is Engine.vllm and extra["engine_version"] == "0.6":  # the V0 engine's two lines
        log = f"# GPU blocks: {num_blocks}; Maximum concurrency for {max_len} tokens per request: {concurrency:.2f}x"
    elif conv.engine is Engine.vllm:
        log = vllm_rules.log_line(num_blocks * block, max_len, concurrency)
    elif trt is not None:
        log = trtllm_rules.log_lines(max_len, num_blocks, block, cache.bytes_per_token)
    return FitResult(
        **common,
        block_size=block,
        kv_bytes_per_token=cache.bytes_per_token,
        kv_bytes_per_block=per_block,
        kv_bytes_per_request=per_request,
        num_blocks=num_blocks,
        kv_capacity_tokens=num_blocks * block,
        max_concurrent_requests=max_requests if seqs is None else min(max_requests, seqs),
        max_concurrency=concurrency,
        max_model_len_fit=lo,
        shared_prefix_tokens=shared_tokens,
        shared_prefix_bytes=shared_bytes,
        stage_num_layers=sizes[worst],
        max_requests_by_memory=max_requests,
        engine_log=log,
        max_requests_ratio=ratio,
        **extra,
    )


def _plan_vllm_groups(
    spec: ModelSpec, kv_dtype: KVDtype, opts: FitOptions, vs: VllmSettings, common: dict, max_len: int, mnbt: int
) -> FitResult:
    """vLLM ≥ 0.33: KV cache groups, null block, in-flight tokens, the log's formulas.

    ``num_blocks`` = the smallest stage's ``budget // bytes per block``; one request takes
    ``blocks_per_request`` blocks over all groups; it fits when ``blocks_per_request ≤ num_blocks − 1``
    (the null block, ``get_kv_cache_configs``); "Maximum concurrency" = ``num_blocks /
    blocks_per_request`` and "GPU KV cache size" = ``int(concurrency × max_model_len)``
    (``kv_cache_utils.py get_kv_cache_capacity``); ``max_model_len_fit`` is the longest S whose blocks fit
    beside the null block (``_estimate_max_model_len_from_groups``, not capped at max_model_len).
    """
    tp, pp = common["tensor_parallel_size"], common["pipeline_parallel_size"]
    budget = common["kv_budget_bytes"]
    layout = vllm_rules.build_layout(
        spec,
        kv_dtype,
        tp,
        pp,
        max_len,
        opts.block_size,
        vs.prefix_caching,
        vs.hybrid_kv_cache_manager,
        vs.family,
        opts.pp_layer_partition,
        opts.num_speculative_tokens,
        opts.speculative_model,
        opts.num_mtp_layers,
    )
    in_flight = vllm_rules.in_flight_tokens(mnbt, pp, vs.async_scheduling)
    per_block = layout.worst_bytes_per_block
    num_blocks = min((budget // b for b in layout.bytes_per_block if b), default=0)
    usable = num_blocks - 1 if vs.rules.null_block else num_blocks
    per_request = layout.blocks_per_request(max_len, in_flight)
    shared_blocks = sum(g.prefix_blocks(opts.shared_prefix_tokens) for g in layout.groups)
    unique = per_request - shared_blocks
    if per_request and usable >= per_request and unique > 0:
        by_memory = (usable - shared_blocks) // unique
    else:
        by_memory = 0
    ratio = max(0, usable - shared_blocks) / unique if per_request and unique > 0 else 0.0  # floor = by_memory
    concurrency = num_blocks / per_request if per_request else 0.0
    tokens = int(concurrency * max_len) if vs.rules.log_from_concurrency else num_blocks * layout.block_size

    lo, hi = 0, MAX_SEARCH_TOKENS  # largest S whose blocks fit beside the null block
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if layout.groups and layout.blocks_per_request(mid, in_flight) <= usable:
            lo = mid
        else:
            hi = mid - 1
    stages = vllm_rules.pp_ranges(spec.num_layers, pp, opts.pp_layer_partition)
    worst = max(range(pp), key=lambda i: layout.bytes_per_block[i]) if layout.groups else 0
    sparse = vllm_rules.is_sparse_mla(spec)  # DeepSeek-V3.2: vLLM's indexer and fp8_ds_mla bytes
    per_token = sum(vllm_rules.token_bytes(spec.layers[i], kv_dtype, tp, sparse) for i in stages[worst])
    if worst == pp - 1:  # the drafter's layers sit on the last stage
        per_token += opts.num_mtp_layers * (
            vllm_rules.token_bytes(vllm_rules.mtp_template(spec), kv_dtype, tp, sparse) if opts.num_mtp_layers else 0
        )
        draft = opts.speculative_model
        if draft is not None:
            draft_sparse = vllm_rules.is_sparse_mla(draft)
            per_token += sum(vllm_rules.token_bytes(x, kv_dtype, tp, draft_sparse) for x in draft.layers)
    groups = tuple(
        dict(kind=g.kind, layers=len(g.layers), block_size=g.block_size, page_bytes=g.page_bytes) for g in layout.groups
    )
    return FitResult(
        **common,
        block_size=layout.block_size,
        kv_bytes_per_token=per_token,
        kv_bytes_per_block=per_block,
        kv_bytes_per_request=per_request * per_block,
        num_blocks=num_blocks,
        kv_capacity_tokens=tokens,
        max_concurrent_requests=min(by_memory, vs.max_num_seqs),
        max_concurrency=concurrency,
        max_model_len_fit=lo,
        shared_prefix_tokens=(opts.shared_prefix_tokens // layout.block_size) * layout.block_size,
        shared_prefix_bytes=shared_blocks * per_block,
        stage_num_layers=len(stages[worst]),
        engine_version=vs.rules.version,
        max_num_seqs=vs.max_num_seqs,
        max_requests_by_memory=by_memory,
        max_in_flight_tokens=in_flight,
        async_scheduling=vs.async_scheduling,
        prefix_caching=vs.prefix_caching,
        hybrid_kv_cache_manager=vs.hybrid_kv_cache_manager,
        null_block=vs.rules.null_block,
        blocks_per_request=per_request,
        kv_cache_groups=groups,
        padding_layers=layout.padding_layers,
        engine_log=vllm_rules.log_line(tokens, max_len, concurrency),
        num_speculative_tokens=opts.num_speculative_tokens,
        drafter_layers=opts.num_mtp_layers + (opts.speculative_model.num_layers if opts.speculative_model else 0),
        max_requests_ratio=ratio,
    )


def request_sizer(spec: ModelSpec, gpu: GPU, opts: FitOptions, fit: FitResult):
    """A function ``(tokens, shared_prefix) -> (unique bytes, prefix bytes)``: what one request of ``tokens``
    holds per GPU (the worst stage) under the same engine rules as ``fit`` (:func:`plan_fit` with ``opts``),
    beside the whole blocks of a shared prefix counted once per replica. Requests are then counted against
    :attr:`FitResult.kv_room_bytes` (``kvplan fleet`` packs them so).

    vLLM ≥ 0.33: blocks of all KV cache groups (:meth:`kvplan.engines.vllm.VllmLayout.blocks_per_request`,
    in-flight tokens included) × the worst stage's bytes per block; otherwise :func:`request_bytes` with
    the engine's window rule (TensorRT-LLM sizes windows as full).

    Raises:
        UsageError: as :func:`plan_fit`.
    """
    kv_dtype = resolve_kv_dtype(spec, opts.kv_dtype)
    tp, pp = opts.tensor_parallel_size, opts.pipeline_parallel_size
    if fit.kv_cache_groups or (fit.engine == "vllm" and vllm_rules.resolve_rules(opts.engine_version).kv_cache_groups):
        vs = vllm_settings(spec, gpu, opts)
        layout = vllm_rules.build_layout(
            spec, kv_dtype, tp, pp, fit.max_model_len, opts.block_size, vs.prefix_caching,
            vs.hybrid_kv_cache_manager, vs.family, opts.pp_layer_partition, opts.num_speculative_tokens,
            opts.speculative_model, opts.num_mtp_layers,
        )  # fmt: skip
        per_block = layout.worst_bytes_per_block

        def vllm_size(tokens: int, shared_prefix: int = 0) -> tuple[int, int]:
            blocks = layout.blocks_per_request(tokens, fit.max_in_flight_tokens)
            shared = sum(g.prefix_blocks(shared_prefix) for g in layout.groups)
            return (blocks - shared) * per_block, shared * per_block

        return vllm_size
    engine = get_engine(opts.engine)
    trt = trtllm_rules.resolve_rules(opts.engine_version) if engine is Engine.trtllm else None
    swa_full = (
        opts.swa_full
        or (trt is not None and trt.windows_as_full)
        or (engine is Engine.sglang and not sglang_rules.is_hybrid_swa(spec))
    )
    caches = [stage_cache(spec, kv_dtype, tp, r) for r in stage_layers(spec.num_layers, pp, opts.pp_layer_partition)]
    # SGLang's hybrid-SWA pools: a request's full slots and its SWA slots (one budget: the split is by ratio)
    hybrid_swa = engine is Engine.sglang and sglang_rules.is_hybrid_swa(spec)

    def size(tokens: int, shared_prefix: int = 0) -> tuple[int, int]:
        per_stage = []
        for cache in caches:
            if hybrid_swa:
                swa = sglang_rules.swa_tokens_per_request(tokens, sglang_rules.window(spec))
                full = cache.growing_bytes_per_token
                whole = tokens * full + swa * (cache.bytes_per_token - full)
            else:
                whole = request_bytes(cache, tokens, engine, fit.block_size, fit.max_num_batched_tokens, swa_full)
            shared = (shared_prefix // fit.block_size) * fit.block_size * cache.growing_bytes_per_token
            per_stage.append((whole - shared, shared))
        return max(per_stage)

    return size


def has_fp8(gpu: GPU) -> bool:
    """Whether FP8 weights or an FP8 KV cache are worth suggesting on ``gpu``: the catalog's ``fp8`` field
    (native FP8 tensor cores: Ada, Hopper, Blackwell, MI300); a GPU given by size is taken as able (kvplan's
    vLLM rules take it as Hopper-class)."""
    return gpu.fp8 or gpu.is_custom


def _uses_fp8(fit: FitResult) -> bool:
    return fit.kv_dtype.startswith("fp8") or fit.weights_dtype.startswith("fp8")


def suggest(spec: ModelSpec, gpu: GPU, opts: FitOptions) -> list[str]:
    """What would fit instead, same hardware first: the longest max_model_len that fits, an FP8 KV cache
    (llama.cpp: q8_0), FP8 weights; then the smallest TP the heads allow; then a larger catalog GPU.

    FP8 is offered only on a GPU with FP8 support (:func:`has_fp8`; not on a T4, V100 or A100), and a
    larger GPU is one with FP8 support when the plan already uses FP8; with a given KV budget
    (``kv_cache_memory_bytes``) no other GPU is offered (the budget would be the same).
    """
    out = []
    base = plan_fit(spec, gpu, opts)
    if base.max_model_len_fit >= 1 and base.kv_budget_bytes > 0:
        out.append(f"--max-model-len {base.max_model_len_fit} (the longest that fits)")
    engine = get_engine(opts.engine)
    kv = resolve_kv_dtype(spec, opts.kv_dtype)
    if kv.bytes_for(1 << 20) > 1 << 20:  # wider than 8 bits per element
        quant = "q8_0" if engine is Engine.llamacpp else "fp8" if has_fp8(gpu) else None
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
        and engine is not Engine.llamacpp  # GGUF has no FP8 type
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
            if g.cuda_total_bytes <= gpu.cuda_total_bytes or (fp8_needed and not has_fp8(g)):
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
    if r.kv_budget_bytes <= 0:
        what = (
            f"weights {fmt_gib(r.weights_bytes)} + activation {fmt_gib(r.activation_bytes)} + overhead "
            f"{fmt_gib(r.overhead_bytes)} per GPU leave no KV cache memory out of {fmt_gib(r.usable_bytes)} usable"
        )
    else:
        null = f" (+ a null block of {fmt_gib(r.kv_bytes_per_block)})" if r.null_block else ""
        what = (
            f"one request of max_model_len {r.max_model_len:,} needs {fmt_gib(r.kv_bytes_per_request)} of KV per "
            f"GPU{null} but the KV budget is {fmt_gib(r.kv_budget_bytes)}"
        )
    if r.engine == "trtllm" and r.engine_version and r.num_blocks:  # it starts, with a shorter max_seq_len
        what += (
            f"; TensorRT-LLM {r.engine_version} would cut max_seq_len to {r.num_blocks * r.block_size:,} "
            f"({plural(r.num_blocks, 'block')} of {r.block_size})"
        )
    return f"{where}: {what}"


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
