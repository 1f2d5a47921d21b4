"""The settings of a plan (:class:`FitOptions`) and their bounds: the one place a plan's options are defined.

The CLI parses flags into these options through :mod:`kvplan.api` (``api.fit_options``); ``fit``, ``fleet``,
``sweep``, ``plot`` and ``verify --fit`` all plan from them. Every engine module reads the same object
(:mod:`kvplan.engines`). Pure data and validation: nothing here imports an engine or prints.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import TYPE_CHECKING

from kvplan.errors import UsageError
from kvplan.units import plural

if TYPE_CHECKING:
    from kvplan.specs import ModelSpec

MAX_SEARCH_TOKENS = 1 << 40  # upper end of the max_model_len search (a cache with no per-token growth)


class Engine(str, Enum):
    """Serving-engine conventions kvplan can apply (one module each in :mod:`kvplan.engines`)."""

    vllm = "vllm"
    sglang = "sglang"
    trtllm = "trtllm"
    llamacpp = "llamacpp"


ENGINE_NAMES = {
    Engine.vllm: "vLLM",
    Engine.sglang: "SGLang",
    Engine.trtllm: "TensorRT-LLM",
    Engine.llamacpp: "llama.cpp",
}
_ENGINE_ALIASES = {"tensorrtllm": "trtllm", "trt": "trtllm", "ollama": "llamacpp", "llamaserver": "llamacpp"}


def get_engine(name: str | Engine) -> Engine:
    """Look up an engine by name (``vllm``, ``sglang``, ``trtllm``, ``llamacpp``; ``tensorrt-llm``,
    ``ollama``, ``llama-server`` and other spellings too).

    Raises:
        UsageError: unknown name.
    """
    if isinstance(name, Engine):
        return name
    key = str(name).strip().lower().replace("-", "").replace(".", "").replace("_", "")
    key = _ENGINE_ALIASES.get(key, key)
    try:
        return Engine(key)
    except ValueError:
        allowed = ", ".join(e.value for e in Engine)
        raise UsageError(f"--engine: unknown engine {name!r}; allowed: {allowed}") from None


@dataclass(frozen=True, eq=False)
class FitOptions:
    """Settings of a plan; None means the engine's default. Sizes in bytes, tokens as ints.

    Attributes:
        engine: whose conventions apply.
        tensor_parallel_size, pipeline_parallel_size: TP and PP.
        max_model_len: tokens per request (None: the model's max context).
        kv_dtype, weights_dtype: dtype names (None / ``auto``: the model's).
        gpu_memory_utilization: the engine's memory fraction (vLLM ``gpu_memory_utilization``, SGLang
            ``mem_fraction_static``, TensorRT-LLM ``free_gpu_memory_fraction``).
        block_size: tokens per KV block (SGLang ``page_size``).
        max_num_batched_tokens: tokens per forward step (SGLang ``chunked_prefill_size``, TensorRT-LLM
            ``max_num_tokens``, llama.cpp ``n_ubatch``).
        max_batch_size: TensorRT-LLM ``max_batch_size``.
        activation_bytes, overhead_bytes, weights_bytes: per-GPU overrides of the budget model's terms.
        kv_cache_memory_bytes: a KV budget per GPU that bypasses the budget model.
        shared_prefix_tokens: prompt tokens every request shares, cached once per replica.
        swa_full: size sliding-window layers for every token (llama.cpp ``--swa-full``).
        engine_version: which version's rules (None: the newest).
        max_num_seqs: the engine's cap on running requests (vLLM ``max_num_seqs``, SGLang
            ``max_running_requests``).
        async_scheduling, enable_prefix_caching, hybrid_kv_cache_manager: vLLM settings (None: default).
        vllm_sampler: the top-k/top-p sampler vLLM's profile run uses (``flashinfer``, ``pytorch``, ``triton``;
            None: the version's default, :data:`kvplan.engines.vllm_budget.SAMPLER_BYTES`). Its log says which
            ("Using FlashInfer for top-p & top-k sampling.").
        pp_layer_partition: layers per PP stage (vLLM ``VLLM_PP_LAYER_PARTITION``).
        num_speculative_tokens, speculative_model, num_mtp_layers: speculative decoding (vLLM).
        enforce_eager: no CUDA graphs (vLLM ``--enforce-eager``, SGLang ``--disable-cuda-graph``): none are
            estimated or subtracted (SGLang: none reserved in its mem_fraction_static default).
        ctx_size: llama.cpp ``-c/--ctx-size``: the context of all slots together (0: the model's context);
            None: the tool's default (the model's context, lowered by llama.cpp's ``-fit`` to what fits).
        n_parallel: llama.cpp ``-np/--parallel``: slots (parallel sequences); None: the tool's default
            (llama-server 4, llama-cli 1).
        kv_unified: llama.cpp ``--kv-unified`` / ``--no-kv-unified``: one cache shared by all slots; None: the
            tool's default (llama-server: on when ``-np`` is not given, else off).
        cache_type_k, cache_type_v: llama.cpp ``-ctk`` / ``-ctv`` (f16, q8_0, ...); None: ``kv_dtype``.
        flash_attn: llama.cpp ``-fa``: ``on``, ``off`` or ``auto`` (None: auto).
        n_batch: llama.cpp ``-b/--batch-size`` (None: 2048); its ``-ub`` is ``max_num_batched_tokens``.
        llama_tool: whose defaults apply under llama.cpp: ``server`` (llama-server, None) or ``cli``
            (llama-cli).
        data_parallel_size: attention data-parallel ranks in one replica, each holding its own requests' KV
            (vLLM ``--data-parallel-size``: D engine ranks of TP GPUs each, D × TP GPUs; SGLang
            ``--attn-dp-size`` / ``--dp-size`` with ``--enable-dp-attention``: D groups within the TP GPUs).
        enable_expert_parallel: split the routed experts over every GPU of a stage instead of TP-slicing them
            (vLLM ``--enable-expert-parallel``: EP = TP × DP; SGLang: ``--ep-size`` = TP).
        expert_parallel_size: SGLang ``--ep-size`` (a divisor of TP); None: 1, or TP × DP with
            ``enable_expert_parallel``.
        swa_full_tokens_ratio: SGLang ``--swa-full-tokens-ratio`` (SWA-pool tokens per full-pool token; None: 0.8).
        mamba_full_memory_ratio: SGLang ``--mamba-full-memory-ratio`` (state memory per KV memory; None: 0.9).
        max_mamba_cache_size: SGLang ``--max-mamba-cache-size`` (state slots), or None.
        disable_radix_cache: SGLang ``--disable-radix-cache`` (1 state slot per request; with max_num_seqs it
            sizes the state and SWA pools from the running requests).
        max_total_tokens: SGLang ``--max-total-tokens`` (a cap on the token pool), or None.
        mamba_ssm_dtype: SGLang ``--mamba-ssm-dtype`` (float32, bfloat16, float16), or None: config.json's, else
            float32.
    """

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
    vllm_sampler: str | None = None
    pp_layer_partition: tuple[int, ...] | None = None
    num_speculative_tokens: int = 0
    speculative_model: ModelSpec | None = None
    num_mtp_layers: int = 0
    enforce_eager: bool = False
    ctx_size: int | None = None
    n_parallel: int | None = None
    kv_unified: bool | None = None
    cache_type_k: str | None = None
    cache_type_v: str | None = None
    flash_attn: str | None = None
    n_batch: int | None = None
    llama_tool: str | None = None
    data_parallel_size: int = 1
    enable_expert_parallel: bool = False
    expert_parallel_size: int | None = None
    swa_full_tokens_ratio: float | None = None
    mamba_full_memory_ratio: float | None = None
    max_mamba_cache_size: int | None = None
    disable_radix_cache: bool = False
    max_total_tokens: int | None = None
    mamba_ssm_dtype: str | None = None


# llama.cpp's own settings: FitOptions field -> its kvplan flag (what an engine other than llama.cpp refuses)
LLAMACPP_FIELDS = {
    "ctx_size": "--ctx-size",
    "n_parallel": "--parallel",
    "kv_unified": "--kv-unified",
    "cache_type_k": "--cache-type-k",
    "cache_type_v": "--cache-type-v",
    "flash_attn": "--flash-attn",
    "n_batch": "--batch-size",
    "llama_tool": "--llama-tool",
}


def check_engine_fields(opts: FitOptions) -> None:
    """Refuse llama.cpp's settings, and vLLM's ``--vllm-sampler``, under another engine (they would be silently
    ignored).

    Raises:
        UsageError: naming the first such flag.
    """
    if opts.vllm_sampler is not None and opts.engine is not Engine.vllm:
        raise UsageError("--vllm-sampler: a vLLM setting; give it with --engine vllm")
    if opts.engine is Engine.llamacpp:
        return
    for name, flag in LLAMACPP_FIELDS.items():
        if getattr(opts, name) is not None:
            raise UsageError(f"{flag}: a llama.cpp setting; give it with --engine llamacpp")


@dataclass(frozen=True)
class Parallel:
    """How an engine lays one replica over its GPUs (one PP stage; every stage alike).

    The routed experts of a stage are spread over all its GPUs: ``ep × moe_tp == attn_tp × attn_dp``.

    Attributes:
        attn_tp: GPUs one attention group spans: its KV heads are split over them (an MLA latent is not).
        attn_dp: attention groups per stage, each serving its own requests with its own KV pool.
        pp: pipeline stages.
        ep: GPUs the routed experts are split over, whole experts each (1: no expert parallelism).
        moe_tp: GPUs each routed expert is sliced over (its intermediate dimension).
        flags: the engine's own flags for this layout (``--tp 8 --enable-expert-parallel``).
    """

    attn_tp: int
    attn_dp: int = 1
    pp: int = 1
    ep: int = 1
    moe_tp: int = 0
    flags: str = ""

    @property
    def gpus_per_stage(self) -> int:
        """GPUs of one pipeline stage: attention TP × attention DP."""
        return self.attn_tp * self.attn_dp

    @property
    def gpus(self) -> int:
        """GPUs of one replica."""
        return self.gpus_per_stage * self.pp

    @property
    def expert_slicing(self) -> int:
        """``moe_tp``, defaulting to every GPU of the stage (TP-sliced experts)."""
        return self.moe_tp or self.gpus_per_stage

    @property
    def name(self) -> str:
        """A short label: ``TP 8``, ``TP 8 × PP 2``, ``TP 1 × DP 8, EP 8``."""
        out = f"TP {self.attn_tp}"
        if self.attn_dp > 1:
            out += f" × DP {self.attn_dp}"
        if self.pp > 1:
            out += f" × PP {self.pp}"
        if self.ep > 1:
            out += f", EP {self.ep}"
        return out


# Options one engine only takes: field -> (flag, engine). Another engine refuses them (EngineRules.check).
ENGINE_ONLY_OPTIONS = {
    "swa_full_tokens_ratio": ("--swa-full-tokens-ratio", Engine.sglang),
    "mamba_full_memory_ratio": ("--mamba-full-memory-ratio", Engine.sglang),
    "max_mamba_cache_size": ("--max-mamba-cache-size", Engine.sglang),
    "disable_radix_cache": ("--disable-radix-cache", Engine.sglang),
    "max_total_tokens": ("--max-total-tokens", Engine.sglang),
    "mamba_ssm_dtype": ("--mamba-ssm-dtype", Engine.sglang),
}


def check_engine_options(opts: FitOptions) -> None:
    """Refuse an option of :data:`ENGINE_ONLY_OPTIONS` given for another engine.

    Raises:
        UsageError: naming the flag and the engine that takes it.
    """
    for name, (flag, owner) in ENGINE_ONLY_OPTIONS.items():
        value = getattr(opts, name)
        if value is not None and value is not False and owner is not get_engine(opts.engine):
            raise UsageError(f"{flag}: {ENGINE_NAMES[owner]}'s setting; give it with --engine {owner.value}")


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
    "--ctx-size": (1 << 32) - 1,  # llama.cpp n_ctx is a uint32_t
    "--parallel": 256,  # llama.cpp LLAMA_MAX_SEQ (src/llama-cparams.h:8)
    "--batch-size": 1 << 31,
    "--data-parallel-size": 1 << 16,
    "--ep-size": 1 << 16,
    "--max-mamba-cache-size": 1 << 24,
    "--max-total-tokens": MAX_SEARCH_TOKENS,
}


def check_int(flag: str, value, minimum: int = 1) -> None:
    """Raise UsageError unless ``value`` (when given) is an int in [minimum, FLAG_LIMITS[flag]].

    Raises:
        UsageError: naming ``flag``, what was wrong and what is allowed.
    """
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise UsageError(f"{flag}: {value!r} must be an integer >= {minimum}")
    limit = FLAG_LIMITS.get(flag)
    if limit is not None and value > limit:
        raise UsageError(f"{flag}: {value:,} is beyond what kvplan plans for (at most {limit:,})")


def check_fraction(flag: str, value: float | None) -> None:
    """Raise UsageError unless ``value`` (when given) is a number in (0, 1].

    Raises:
        UsageError: naming ``flag``.
    """
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value <= 1:
        raise UsageError(f"{flag}: {value} must be in (0, 1]")


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
