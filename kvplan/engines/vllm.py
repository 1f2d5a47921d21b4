"""vLLM's KV-cache sizing rules, by version: what ``kvplan fit --engine vllm [--engine-version V]`` applies.

Rule sets (``--engine-version`` picks the newest set not newer than the version given). Each set's rules were
read in vLLM's source at the releases named (``pip download --no-deps vllm==X``, the wheel's ``.py`` files;
``v1/core/kv_cache_utils.py`` unless another file is named); ``kvplan fit --from-log`` reproduces the
figures of real start-up logs of each range with them (``tests/test_from_log.py``):

==========  ==============================================================================================
``0.33``    (default) vLLM 0.33.0, mirrored function by function below and checked exactly against vLLM's
            own planning functions (tests/fixtures/vllm_golden.json, scripts/vllm_golden.py): KV cache
            groups with padding layers, a null block held back, async scheduling (2 batches in flight),
            "GPU KV cache size" = ``int(max_concurrency × max_model_len)``, Mamba page alignment, the
            Hopper backends' block sizes, per-GPU batch defaults.
``0.29``    0.29–0.32: as 0.33 for the KV cache (the null block reserved before the fit check,
            ``0.29.0 kv_cache_utils.py:975, 2316``; in-flight batches, ``config/vllm.py
            max_in_flight_tokens``); the batch defaults of 0.28–0.32 (no GB10 exception).
``0.26``    0.26–0.28: no null block reserved; sliding and chunked layers reserve every in-flight batch
            (``0.26.0 v1/kv_cache_interface.py SlidingWindowSpec`` takes ``max_in_flight_tokens``).
``0.20.2``  0.20.2–0.25: "GPU KV cache size" = ``int(max_concurrency × max_model_len)``
            (``0.20.2 kv_cache_utils.py:1706``, ``0.22.1 :1731``); windowed layers reserve one batch of
            ``max_num_batched_tokens`` (``0.20.2 v1/kv_cache_interface.py:435``); no null block.
``0.11``    0.11.0–0.20.1: KV cache groups of ``layers[i::n]`` (``0.11.0 kv_cache_utils.py:998``), one
            pool of ``available // page // group_size`` blocks (``get_num_blocks``), "GPU KV cache size"
            = ``num_blocks // len(groups) × min block size`` (``0.11.0 :1080``, ``0.19.1 :1302``, ``0.20.0
            :1694``), "Maximum concurrency" = ``num_blocks / cdiv(Σ max_memory_usage, page)``
            (``get_max_concurrency_for_kv_cache_config``, ``0.11.0 :780``), one batch reserved by windowed
            layers, no null block, synchronous scheduling.
``0.9``     0.9–0.10: the same counts (``0.10.2 kv_cache_utils.py:856`` uniform, ``:1026`` hybrid: ``num_blocks
            // len(grouped_layers) × min_block_size``; concurrency ``:768``); groups of consecutive layers.
``0.6``     the V0 engine (any release; its rules did not change) and V1 0.7–0.8: one pool counted per
            layer, ``num_gpu_blocks = int(available // block_bytes)``, "Maximum concurrency" = ``num_gpu_blocks
            × block_size / max_model_len`` (V0 ``0.7.3 executor/executor_base.py:114``, V1 ``0.8.5
            kv_cache_utils.py:636``), the longest request ``block_size × num_gpu_blocks`` (V0
            ``worker/worker.py raise_if_cache_size_invalid``), CPU blocks ``int(swap_space // block_bytes)``.
==========  ==============================================================================================

Batch defaults (``max_num_batched_tokens`` / ``max_num_seqs``, :func:`batch_defaults_at`) follow the release
asked, not the set: 0.8 ``≥ 70 GiB: 8,192 / 1,024`` (``0.8.5 engine/arg_utils.py:1596``), 0.9+ A100 excepted
(``0.9.2 :1629``), 0.28+ ``≥ 160 GiB: 16,384 / 1,024`` (``0.29.0 :2698``), 0.33 GB10 excepted.

A version older than 0.6 gets the 0.6 set with a warning (:func:`older_than_oldest`); a value that is not a
version number is an error listing the rule sets.

Hardware: block sizes follow the backends vLLM picks on a Hopper GPU (SM 9.0: H100, H200, H20, GH200)
unless a rule names another family; a GPU given by size is taken as Hopper-class.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field, replace
from math import lcm

from kvplan.calc import cdiv, check_tp, kv_heads_per_rank, layer_token_bytes
from kvplan.dtypes import KVDtype, get_kv_dtype
from kvplan.engines import is_older_than, parse_version, pick_rules, vllm_budget
from kvplan.engines.base import (
    PY,
    CachePlan,
    EngineRules,
    Settings,
    fp8_dense_checks,
    modelled_term,
    parallel_flags,
    shipped_block_quantized,
    token_plan,
)
from kvplan.errors import LoadRefused, UsageError
from kvplan.options import MAX_SEARCH_TOKENS, Engine, FitOptions, Parallel, check_int
from kvplan.specs import CROSS_KIND, KV_HEAD_KINDS, STATE_KINDS, ModelSpec

GIB = 1 << 30
DEFAULT_BLOCK_SIZE = 16  # vllm/config/cache.py CacheConfig.DEFAULT_BLOCK_SIZE
FLASH_ATTN_KERNEL_BLOCK = 16  # v1/attention/backends/flash_attn.py: MultipleOf(16)
GDN_CHECKPOINT_ALIGNMENT = 64  # v1/attention/backends/gdn_attn.py FLASHINFER_GDN_CHECKPOINT_ALIGNMENT


@dataclass(frozen=True)
class VllmRules:
    """One version's KV-cache conventions.

    Attributes:
        version: the rule set (``0.33``).
        kv_cache_groups: layers grouped by spec into equal-size groups sharing one block pool, padding
            layers where the groups do not divide (``kv_cache_planning.py``); else one pool counted per
            layer.
        null_block: one block is held back before the fit check (``get_kv_cache_configs``).
        async_scheduling: async scheduling on by default (``VllmConfig.__post_init__``).
        log_from_concurrency: "GPU KV cache size" = ``int(max_concurrency × max_model_len)``
            (``get_kv_cache_capacity``); else blocks × block_size.
        batch_defaults_per_gpu: ``max_num_batched_tokens`` / ``max_num_seqs`` from the GPU's memory
            (``EngineArgs.get_batch_defaults``, :func:`batch_defaults_at`); else 8,192 / 256.
        description: one line for the output.
        tokens_per_group: "GPU KV cache size" = ``num_blocks // len(groups) × min block size`` (0.9–0.20.1)
            rather than blocks × block_size.
        in_flight_async: windowed layers reserve every in-flight batch (``max_in_flight_tokens``, 0.26+);
            else one batch of ``max_num_batched_tokens``.
        concurrency_from_tokens: "Maximum concurrency" = ``num_blocks × block_size / max_model_len`` and the
            pool counted in whole blocks (V0, V1 0.7–0.8).
        full_rules: the set is exact for the whole of its range (speculative decoding and the planning
            details of 0.33 are modelled only under ``0.33``).
    """

    version: str
    kv_cache_groups: bool
    null_block: bool
    async_scheduling: bool
    log_from_concurrency: bool
    batch_defaults_per_gpu: bool
    description: str
    tokens_per_group: bool = False
    in_flight_async: bool = True
    concurrency_from_tokens: bool = False
    full_rules: bool = False


RULE_SETS = (
    VllmRules(
        "0.33", True, True, True, True, True, "vLLM 0.33.0 (checked against its planning functions)", full_rules=True
    ),
    VllmRules("0.29", True, True, True, True, True, "vLLM 0.29-0.32 (null block reserved, in-flight batches)"),
    VllmRules("0.26", True, False, True, True, True, "vLLM 0.26-0.28 (in-flight batches, no null block)"),
    VllmRules(
        "0.20.2",
        True,
        False,
        True,
        True,
        True,
        "vLLM 0.20.2-0.25 (GPU KV cache size from the concurrency, one batch in flight)",
        in_flight_async=False,
    ),
    VllmRules(
        "0.11",
        True,
        False,
        False,
        False,
        True,
        "vLLM V1 0.11-0.20.1 (KV cache groups, GPU KV cache size = blocks // groups x block size)",
        tokens_per_group=True,
        in_flight_async=False,
    ),
    VllmRules(
        "0.9",
        True,
        False,
        False,
        False,
        True,
        "vLLM V1 0.9-0.10 (KV cache groups, GPU KV cache size = blocks // groups x block size)",
        tokens_per_group=True,
        in_flight_async=False,
    ),
    VllmRules(
        "0.6",
        False,
        False,
        False,
        False,
        False,
        "vLLM V0 engine and V1 0.7-0.8 (one pool per layer, concurrency = blocks x block size / max_model_len)",
        in_flight_async=False,
        concurrency_from_tokens=True,
    ),
)
LATEST = RULE_SETS[0]
OLD_DEFAULT_BATCHED_TOKENS = 8192
OLD_DEFAULT_MAX_NUM_SEQS = 256


def resolve_rules(version: str | None) -> VllmRules:
    """The rule set for a vLLM version (None, ``latest``: the newest): the newest set not newer than it,
    else the oldest (:func:`kvplan.engines.pick_rules`).

    Raises:
        UsageError: not a version number.
    """
    return pick_rules(RULE_SETS, version, "0.33")


def older_than_oldest(version: str | None) -> bool:
    """True when ``version`` parses and is older than the oldest rule set (the CLI warns)."""
    return is_older_than(RULE_SETS, version)


# --- hardware-dependent defaults -------------------------------------------------------------------


def gpu_family(gpu_name: str, is_custom: bool = False) -> str:
    """``sm90`` (Hopper: H100, H200, H20, H800, GH200; also a GPU given by size), ``sm100`` (B200, B300,
    GB200, GB300) or ``other``, from the name nvidia-smi prints."""
    name = gpu_name.upper()
    if is_custom or re.search(r"\bG?H(100|200|20|800)\b", name):
        return "sm90"
    if re.search(r"\bG?B(200|300)\b", name):
        return "sm100"
    return "other"


def batch_defaults(cuda_total_bytes: int, gpu_name: str) -> tuple[int, int]:
    """(max_num_batched_tokens, max_num_seqs) the OpenAI server defaults to on this GPU.

    vLLM 0.33 ``engine/arg_utils.py EngineArgs.get_batch_defaults``: total memory ≥ 160 GiB: 16,384 /
    1,024; ≥ 70 GiB and not an A100 (nor a GB10): 8,192 / 1,024; otherwise 2,048 / 256.
    """
    if cuda_total_bytes >= 160 * GIB:
        return 16384, 1024
    if cuda_total_bytes >= 70 * GIB and "a100" not in gpu_name.lower() and "gb10" not in gpu_name.lower():
        return 8192, 1024
    return 2048, 256


def version_batch_defaults(
    version: str | None, cuda_total_bytes: int, gpu_name: str, max_model_len: int
) -> tuple[int, int]:
    """(max_num_batched_tokens, max_num_seqs) the OpenAI server of vLLM ``version`` defaults to on this GPU
    (None: 0.33, :func:`batch_defaults`).

    V1 0.8: a GPU of at least 70 GiB 8,192 / 1,024, else 2,048 / 256 (``0.8.5 engine/arg_utils.py:1596``);
    0.9–0.27: an A100 takes the small defaults (``0.9.2 engine/arg_utils.py:1629``); 0.28–0.32: at least
    160 GiB 16,384 / 1,024 (``0.29.0 engine/arg_utils.py:2698``; absent in 0.27.0); 0.33: :func:`batch_defaults`
    (a GB10 takes the small ones too). V0 (before 0.8): the scheduler's ``max(max_model_len, 2048)`` tokens
    without chunked prefill (``0.5.5 config.py:909``), 2,048 with it (on for max_model_len > 32,768,
    ``0.6.3 engine/arg_utils.py:936-952``); 256 sequences.
    """
    v = parse_version(version) if version else None
    if v is None or v >= (0, 33, 0):
        return batch_defaults(cuda_total_bytes, gpu_name)
    if v < (0, 8, 0):
        return (2048 if max_model_len > 32768 else max(max_model_len, 2048)), OLD_DEFAULT_MAX_NUM_SEQS
    a100 = "a100" in gpu_name.lower()
    if v >= (0, 28, 0) and cuda_total_bytes >= 160 * GIB:
        return 16384, 1024
    if cuda_total_bytes >= 70 * GIB and (v < (0, 9, 0) or not a100):
        return 8192, 1024
    return 2048, 256


def batch_defaults_at(version: str | None, cuda_total_bytes: int, gpu_name: str) -> tuple[int, int]:
    """:func:`version_batch_defaults` of a V1 release (its batched tokens do not depend on max_model_len)."""
    return version_batch_defaults(version, cuda_total_bytes, gpu_name, 0)


def in_flight_tokens(max_num_batched_tokens: int, pipeline_parallel_size: int, async_scheduling: bool) -> int:
    """Tokens scheduled but not yet settled: ``max_concurrent_batches × max_num_batched_tokens``.

    vLLM 0.33 ``config/vllm.py VllmConfig.max_in_flight_tokens`` / ``max_concurrent_batches``: with
    async scheduling (Model Runner V2) PP + 1 batches, else PP.
    """
    batches = pipeline_parallel_size + 1 if async_scheduling else pipeline_parallel_size
    return batches * max_num_batched_tokens


def pp_ranges(num_layers: int, pipeline_parallel_size: int, partition: tuple[int, ...] | None = None) -> list[range]:
    """Layers of each PP stage: vLLM ``distributed/utils.py get_pp_indices`` (``VLLM_PP_LAYER_PARTITION``
    when given, else the remainder goes one layer each to the stages just before the last)."""
    pp = pipeline_parallel_size
    if partition is not None:
        parts = list(partition)
    else:
        parts = [num_layers // pp] * pp
        for i in range(2, num_layers % pp + 2):
            parts[-i] += 1
    out, start = [], 0
    for n in parts:
        out.append(range(start, start + n))
        start += n
    return out


def mla_block_size(family: str, kv_dtype: KVDtype, sparse: bool = False) -> int:
    """Block size of an MLA model's cache: the backend vLLM 0.33 picks (``platforms/cuda.py``
    ``_get_backend_priorities``) and its kernel block sizes.

    Hopper: FLASH_ATTN_MLA (``MultipleOf(16)``: 16) for a 16-bit cache; it takes no fp8 cache, so fp8
    runs on FLASHMLA (fixed 64-token blocks, ``backends/mla/flashmla.py``). SM100: FLASHINFER_MLA
    (kernel blocks 32 or 64: 32). Elsewhere TRITON_MLA (``MultipleOf(16)``: 16).

    ``sparse`` (DeepSeek-V3.2's indexer): 64 on every CUDA GPU, whatever the dtype — the indexer's
    backend takes only 64-token blocks (``backends/mla/indexer.py DeepseekV32IndexerBackend``:
    ``[64]`` off ROCm) and the sparse MLA backends ``MultipleOf(64)`` (``flashmla_sparse.py``,
    ``flashattn_mla_sparse.py``, ``flashinfer_mla_sparse_sm90.py``).
    """
    if sparse:
        return 64
    if family == "sm90":
        return 64 if kv_dtype.name.startswith("fp8") else DEFAULT_BLOCK_SIZE
    if family == "sm100":
        return 32
    return DEFAULT_BLOCK_SIZE


# --- per-token bytes of attention layers -----------------------------------------------------------

INDEXER_QUANT_BLOCK = 128  # models/deepseek_v32/attention.py DeepseekV32Indexer.quant_block_size
FP8_DS_MLA_BYTES = 656  # mla_attention.py state_content_bytes["fp8_ds_mla"]: 512 fp8 + 4 fp32 scales + 64 bf16


def is_sparse_mla(spec: ModelSpec) -> bool:
    """True for DeepSeek Sparse Attention models (an MLA layer with an indexer: DeepSeek-V3.2)."""
    return spec.memo(
        ("is_sparse_mla",),
        lambda: any(x.kind == "mla" and x.mla is not None and x.mla.index_head_dim for x in spec.layers),
    )


def indexer_token_bytes(index_head_dim: int) -> int:
    """Bytes one token's indexer key takes in one layer: fp8 values plus one fp32 scale per 128 values,
    whatever the KV dtype, on every TP rank.

    vLLM 0.33 ``models/deepseek_v32/attention.py DeepseekV32Indexer``: the cache layer
    (``DeepseekV32IndexerCache``, ``model_executor/models/deepseek_v2.py``) has ``head_dim = index_head_dim +
    index_head_dim // 128 × 4`` in ``torch.uint8`` and registers its own ``MLAAttentionSpec`` (one head,
    no V, ``max_tp_shards=1``): 128 + 4 = 132 B for DeepSeek-V3.2.
    """
    return index_head_dim + index_head_dim // INDEXER_QUANT_BLOCK * 4


def mla_latent_token_bytes(latent_dim: int, kv_dtype: KVDtype, sparse: bool) -> int:
    """Bytes one token's MLA latent takes in one layer (every TP rank).

    Dense MLA: the latent in the KV dtype (``MLAAttentionSpec``: one head of ``kv_lora_rank +
    qk_rope_head_dim``). Sparse MLA (DeepSeek-V3.2): a 16-bit cache as dense; an fp8 cache is served by
    FLASHMLA_SPARSE in DeepSeek's ``fp8_ds_mla`` layout, 656 B per token (``mla_attention.py
    _canonicalize_sparse_mla_kv_cache_dtype`` and ``state_content_bytes``).

    Raises:
        UsageError: a sparse MLA model with a KV dtype the sparse backends do not take.
    """
    if not sparse:
        return kv_dtype.row_bytes(latent_dim, 1)
    if kv_dtype.name in ("bf16", "fp16"):
        return kv_dtype.row_bytes(latent_dim, 1)
    if kv_dtype.name == "fp8_e4m3":
        return FP8_DS_MLA_BYTES
    raise UsageError(
        f"--kv-dtype: {kv_dtype.name} is not a cache vLLM 0.33's sparse MLA backends take (FLASHMLA_SPARSE, "
        "FLASH_ATTN_MLA_SPARSE); allowed: bf16, fp8 (stored as fp8_ds_mla, 656 B per token)"
    )


def token_bytes(layer, kv_dtype: KVDtype, tp: int, sparse: bool = False) -> int:
    """Bytes one token costs in one attention layer on one TP rank, as vLLM 0.33 stores it: K and V
    (:func:`kvplan.calc.layer_token_bytes`), or the MLA latent plus, for DeepSeek-V3.2, the indexer key
    (:func:`indexer_token_bytes`); 0 for other kinds."""
    if layer.kind == "mla":
        index = indexer_token_bytes(layer.mla.index_head_dim) if layer.mla.index_head_dim else 0
        return mla_latent_token_bytes(layer.mla.latent_dim, kv_dtype, sparse) + index
    return layer_token_bytes(layer, kv_dtype, tp)


# --- layer specs and groups ------------------------------------------------------------------------


@dataclass(frozen=True)
class _Layer:
    """One layer's cache on one rank, as vLLM's spec for it (``kv_cache_interface.py``)."""

    index: int  # vLLM's layer index (a parallel Mamba mixer of layer i: num_layers + i, as falcon_h1.py)
    kind: str  # full, sliding, chunked, mla, or a state kind
    key: tuple  # equal keys: equal (or mergeable) specs
    block_size: int
    page: int  # bytes of one block of this layer (padded)
    window: int | None = None
    state_pages: int = 0  # pages one request holds (state layers)
    owner: int = -1  # the decoder layer whose PP stage holds it; -1: index
    encoder_tokens: int = 0  # tokens a cross-attention layer caches per request (CrossAttentionSpec)

    @property
    def is_state(self) -> bool:
        return self.kind in STATE_KINDS

    @property
    def layer(self) -> int:
        """The decoder layer this cache belongs to."""
        return self.index if self.owner < 0 else self.owner


@dataclass(frozen=True)
class KVGroup:
    """A KV cache group: layers sharing one block table (vLLM ``KVCacheGroupSpec``).

    Attributes:
        kind: ``full``, ``sliding``, ``chunked``, ``mla`` or a state kind (``mamba``, ``gdn`` ...).
        layers: layer indices in the group.
        block_size: tokens per block of this group.
        layer_pages: bytes of one block of each layer (padded pages included).
        window: the sliding window / attention chunk, tokens (None otherwise).
        state_pages: pages one request holds in a state group (0 for attention groups).
        uniform_type: one group of layers of one kind but different sizes (vLLM
            ``UniformTypeKVCacheSpecs``, whose page is the sum of the layers' pages).
        owners: the decoder layer each entry of ``layers`` belongs to (its PP stage); equal to
            ``layers`` except for parallel Mamba mixers (Falcon-H1) and drafter layers (the last stage).
        extra_retained: tokens a sliding group keeps beyond its window for speculative decoding
            (``SlidingWindowSpec.extra_retained_tokens``).
        encoder_tokens: the encoder tokens one request caches in a ``cross`` group (0 otherwise).
    """

    kind: str
    layers: tuple[int, ...]
    block_size: int
    layer_pages: tuple[int, ...]
    window: int | None = None
    state_pages: int = 0
    uniform_type: bool = False
    owners: tuple[int, ...] = ()
    extra_retained: int = 0
    encoder_tokens: int = 0

    @property
    def page_bytes(self) -> int:
        """The group spec's page, B: one layer's (the sum of all for a uniform-type group)."""
        return sum(self.layer_pages) if self.uniform_type else self.layer_pages[0]

    def blocks_per_request(self, seq_len, in_flight: int, xp=PY):
        """Blocks one request of ``seq_len`` tokens takes from the pool for this group (an int, or an array
        with ``xp`` = :func:`kvplan.engines.base.numpy_ops`).

        vLLM 0.33 ``kv_cache_interface.py`` ``max_memory_usage_bytes`` / page: full and MLA
        ``cdiv(S, block)``; sliding ``cdiv(min(window − 1 + in_flight, S), block) + 1``
        (``SlidingWindowSpec.max_admission_blocks_per_request``); chunked
        ``cdiv(min(chunk + in_flight, S), block)`` (``ChunkedLocalAttentionSpec``); state: its pages
        (``MambaSpec``: 2 with prefix caching, "align" mode, 1 without).
        """
        if self.kind == "sliding":
            return xp.cdiv(xp.minimum(self.window - 1 + self.extra_retained + in_flight, seq_len), self.block_size) + 1
        if self.kind == "chunked":
            return xp.cdiv(xp.minimum(self.window + in_flight, seq_len), self.block_size)
        if self.kind in STATE_KINDS:
            return seq_len * 0 + self.state_pages
        if self.kind == CROSS_KIND:  # CrossAttentionManager: one static allocation per request
            return seq_len * 0 + cdiv(self.encoder_tokens, self.block_size)  # v1/core/kv_cache_coordinator.py
        return xp.cdiv(seq_len, self.block_size)

    def prefix_blocks(self, prefix_tokens: int) -> int:
        """Whole blocks of a shared prefix this group keeps once (full and MLA groups only)."""
        return prefix_tokens // self.block_size if self.kind in ("full", "mla") else 0


@dataclass(frozen=True)
class VllmLayout:
    """How vLLM 0.33 lays out a model's KV cache on one rank.

    Attributes:
        groups: the KV cache groups (empty for a model without any cache).
        attention_block_size: ``cache_config.block_size`` after the backend and hybrid alignment.
        block_size: the block size vLLM reports (smallest group block size).
        mamba_page_padded: the padded Mamba page, B (None when not padded).
        mamba_cache_mode: ``align`` (prefix caching on a model with state layers), ``none`` otherwise.
        padding_layers: layers added so groups are equal ("Add N padding layers").
        bytes_per_block: bytes one block takes in the pool of each PP stage.
        hybrid_kv_cache_manager: whether layers kept their own kinds (off: local layers cached as full).
    """

    groups: tuple[KVGroup, ...]
    attention_block_size: int
    block_size: int
    mamba_page_padded: int | None
    mamba_cache_mode: str
    padding_layers: int
    bytes_per_block: tuple[int, ...]
    hybrid_kv_cache_manager: bool

    def blocks_per_request(self, seq_len, in_flight: int, xp=PY):
        """Blocks one request of ``seq_len`` tokens takes, all groups (vLLM
        ``get_max_concurrency_for_kv_cache_config``: the groups share one pool)."""
        return sum((g.blocks_per_request(seq_len, in_flight, xp) for g in self.groups), seq_len * 0)

    @property
    def worst_bytes_per_block(self) -> int:
        """The largest stage's bytes per block (that stage holds the fewest blocks)."""
        return max(self.bytes_per_block, default=0)


def _attention_key(layer, kv_dtype: KVDtype, tp: int) -> tuple:
    h = kv_heads_per_rank(layer.num_kv_heads, tp)
    return (layer.kind, h, layer.head_dim, layer.v_head_dim, layer.window)


def _state_key(state, model_dtype: str, tp: int) -> tuple:
    return (state.kind, tuple((t.shape, t.dtype) for t in state.tensors(model_dtype, tp)))


def hybrid_block_size(
    spec: ModelSpec,
    kv_dtype: KVDtype,
    tp: int,
    block_size: int,
    mamba_page: int,
    checkpoint_alignment: int | None,
    align_mode: bool,
) -> tuple[int, int | None]:
    """(attention block size, padded Mamba page or None) of a hybrid attention + state model.

    vLLM 0.33 ``platforms/interface.py Platform._align_hybrid_block_size``: the attention page of one
    token (the model's default KV heads per rank and head size, K and V; the MLA latent for MLA models)
    is scaled to the smallest block that covers the Mamba page, a multiple of the kernel block
    (``max(16, block_size)``; 128 for MLA; ``lcm`` with the prefill-checkpoint alignment in align mode),
    rounded to FlashAttention's 16; the Mamba page is then padded to the attention page.
    """
    if "mla" in spec.layer_kinds:
        mla = next(x for x in spec.layers if x.kind == "mla")
        per_token = kv_dtype.row_bytes(mla.mla.latent_dim, 1)
    else:
        h = kv_heads_per_rank(spec.num_kv_heads, tp)
        per_token = 2 * kv_dtype.row_bytes(h * spec.head_dim, h)
    if mamba_page == 0:
        return block_size, None
    kernel = max(FLASH_ATTN_KERNEL_BLOCK, block_size)
    if "mla" in spec.layer_kinds:
        kernel = max(kernel, 128)
    if align_mode:
        kernel = lcm(kernel, checkpoint_alignment or 1)
    block = kernel * cdiv(mamba_page, kernel * per_token)
    block = FLASH_ATTN_KERNEL_BLOCK * cdiv(block, FLASH_ATTN_KERNEL_BLOCK)
    block = max(block_size, block)
    page = block * per_token
    return block, (page if page != mamba_page else None)


SPEC_WIDENED_STATES = ("mamba2", "gdn", "short_conv")  # conv states with num_spec more rows


def state_tensors(state, model_dtype: str, tp: int, num_spec: int = 0) -> tuple:
    """A state's tensors on one rank, ``(shape, dtype)`` each, with speculative decoding: vLLM 0.33's
    ``MambaStateShapeCalculator`` gives Mamba-2, Gated DeltaNet and short-conv conv states
    ``d_conv − 1 + num_spec`` rows (``mamba2_state_shape``, ``gated_delta_net_state_shape``,
    ``short_conv_state_shape``; ``mamba1_state_shape`` and ``linear_attention_state_shape`` take none)."""
    out = []
    for t in state.tensors(model_dtype, tp):
        shape = t.shape
        if num_spec and t.name == "conv" and state.kind in SPEC_WIDENED_STATES:
            shape = (shape[0] + num_spec, *shape[1:])
        out.append((shape, t.dtype))
    return tuple(out)


def state_bytes(state, model_dtype: str, tp: int, num_spec: int = 0) -> int:
    """Bytes of one request's state in one layer on one rank (:func:`state_tensors`)."""
    total = 0
    for shape, dtype in state_tensors(state, model_dtype, tp, num_spec):
        n = 1
        for d in shape:
            n *= d
        total += get_kv_dtype(dtype).bytes_for(n)
    return total


def state_pages(kind: str, align_mode: bool, gdn_checkpoints: bool, num_spec: int = 0) -> int:
    """Pages one request holds in a state layer (vLLM 0.33 ``MambaSpec.max_memory_usage_bytes``).

    Without prefix caching ("none" mode) 1, in "align" mode 2; plus ``num_spec`` speculative pages
    (``num_speculative_blocks`` = ``num_speculative_tokens``, ``layers/mamba/abstract.py``); plus in align
    mode one prefill-checkpoint page where the layer's spec has ``num_prefill_checkpoint_blocks = 1``: every
    Mamba-2 mixer (``layers/mamba/mamba_mixer2.py MambaMixer2.get_kv_cache_spec``, always) and Gated DeltaNet layers
    whose FlashInfer prefill exports checkpoints (``gdn/qwen_gdn_linear_attn.py``, ``gdn_checkpoints``).
    """
    if not align_mode:
        return 1 + num_spec
    checkpoint = kind == "mamba2" or (kind == "gdn" and gdn_checkpoints)
    return 2 + num_spec + (1 if checkpoint else 0)


def _layer_caches(
    layer,
    i: int,
    index: int,
    owner: int,
    model_dtype: str,
    num_layers: int,
    kv_dtype: KVDtype,
    tp: int,
    block: int,
    sparse: bool,
    states: dict,
) -> list[_Layer]:
    """The caches one decoder layer registers (``index``: its vLLM layer index; ``owner``: the decoder layer
    whose PP stage holds it). ``states`` carries the state settings (mamba_block, mamba_padded, align_mode,
    gdn_checkpoints, num_spec)."""
    out = []
    if layer.kind in KV_HEAD_KINDS:
        per_token = layer_token_bytes(layer, kv_dtype, tp)
        key = _attention_key(layer, kv_dtype, tp)
        out.append(_Layer(index, layer.kind, key, block, per_token * block, layer.window, owner=owner))
    elif layer.kind == CROSS_KIND:  # model_executor/layers/attention/cross_attention.py: CrossAttentionSpec
        h = kv_heads_per_rank(layer.num_kv_heads, tp)
        per_token = kv_dtype.row_bytes(h * layer.head_dim, h) + kv_dtype.row_bytes(h * layer.v_head_dim, h)
        key = (CROSS_KIND, h, layer.head_dim, layer.v_head_dim, layer.encoder_tokens)
        out.append(
            _Layer(index, CROSS_KIND, key, block, per_token * block, owner=owner, encoder_tokens=layer.encoder_tokens)
        )
    elif layer.kind == "mla":
        if layer.mla.index_head_dim:
            idx = indexer_token_bytes(layer.mla.index_head_dim)
            out.append(_Layer(index, "mla", ("mla-indexer", idx), block, idx * block, owner=owner))
        latent = mla_latent_token_bytes(layer.mla.latent_dim, kv_dtype, sparse)
        out.append(_Layer(index, "mla", ("mla", latent), block, latent * block, owner=owner))
    if layer.state is not None and layer.kind in (*STATE_KINDS, *KV_HEAD_KINDS):
        num_spec, padded = states["num_spec"], states["mamba_padded"]
        page = state_bytes(layer.state, model_dtype, tp, num_spec)
        if padded is not None:
            page = max(page, padded)
        kind = layer.state.kind
        key = (kind, state_tensors(layer.state, model_dtype, tp, num_spec), padded)
        at = index if layer.kind in STATE_KINDS else num_layers + index
        pages = state_pages(kind, states["align_mode"], states["gdn_checkpoints"], num_spec)
        out.append(_Layer(at, kind, key, states["mamba_block"], page, state_pages=pages, owner=owner))
    return out


def mtp_template(spec: ModelSpec):
    """The layer an MTP module repeats: the target's last full-attention or MLA layer (DeepSeek-V3's MTP
    block is a decoder layer with MLA, ``model_executor/models/deepseek_mtp.py``).

    Raises:
        UsageError: the model has neither.
    """
    for layer in reversed(spec.layers):
        if layer.kind in ("full", "mla"):
            return layer
    raise UsageError(f"--num-mtp-layers: {spec.name} has no full-attention or MLA layer an MTP module would repeat")


def _layer_specs(
    spec: ModelSpec,
    kv_dtype: KVDtype,
    tp: int,
    block: int,
    mamba_block: int,
    mamba_padded: int | None,
    align_mode: bool,
    gdn_checkpoints: bool,
    num_spec: int = 0,
    draft: ModelSpec | None = None,
    num_mtp_layers: int = 0,
) -> list[_Layer]:
    """One :class:`_Layer` per cache vLLM registers, in its registration order (vLLM
    ``Attention.get_kv_cache_spec``, ``MLAAttention``, ``ChunkedLocalAttention``,
    ``MambaBase.get_kv_cache_spec``).

    A DeepSeek-V3.2 layer registers its indexer cache (``DeepseekV32IndexerCache``, built first) and
    its MLA cache, both under the layer's index. A layer with a ``parallel_state`` (Falcon-H1, Zamba2)
    registers its attention and then its Mamba-2 mixer, which vLLM numbers ``num_layers + i``
    (``falcon_h1.py FalconH1ParallelHybrid``: "all attention/ssm layers must have different index";
    Zamba2 numbers them otherwise, which orders the groups differently but sizes nothing differently).

    Speculative decoding adds the drafter's caches to the same pool, on the last PP stage
    (``kv_cache_interface.py`` ``KVCacheSpec.is_draft``, which grouping ignores): ``num_mtp_layers`` MTP
    modules (layers ``num_layers + k``, each like :func:`mtp_template`), then a draft model's or EAGLE
    head's own layers with its own geometry, at the target's TP (``SpeculativeConfig._verify_and_get_draft_tp``).
    """
    states = dict(
        mamba_block=mamba_block,
        mamba_padded=mamba_padded,
        align_mode=align_mode,
        gdn_checkpoints=gdn_checkpoints,
        num_spec=num_spec,
    )
    n = spec.num_layers
    sparse = is_sparse_mla(spec)
    out = []
    for i, layer in enumerate(spec.layers):
        out += _layer_caches(layer, i, i, i, spec.dtype, n, kv_dtype, tp, block, sparse, states)
    if num_mtp_layers:
        template = mtp_template(spec)
        for k in range(num_mtp_layers):
            out += _layer_caches(template, n + k, n + k, n - 1, spec.dtype, n, kv_dtype, tp, block, sparse, states)
    if draft is not None:
        base, draft_sparse = n + num_mtp_layers, is_sparse_mla(draft)
        for j, layer in enumerate(draft.layers):
            out += _layer_caches(
                layer, j, base + j, n - 1, spec.dtype, 2 * base + draft.num_layers, kv_dtype, tp, block, draft_sparse,
                states,
            )  # fmt: skip
    return out


def _promote_local(layers: list[_Layer]) -> list[_Layer]:
    """The hybrid KV cache manager off: sliding and chunked layers are cached as full ones when the model
    also has full (or MLA) layers (vLLM ``kv_cache_planning.py _promote_local_kv_cache_specs``)."""
    kinds = {x.kind for x in layers}
    if not (kinds & {"full", "mla"} and kinds & {"sliding", "chunked"}):
        return layers
    out = []
    for x in layers:
        if x.kind in ("sliding", "chunked"):
            key = ("full", *x.key[1:4], None)
            x = _Layer(x.index, "full", key, x.block_size, x.page, owner=x.owner)
        out.append(x)
    return out


def _uniform_type(layers: list[_Layer]) -> bool:
    """vLLM ``UniformTypeKVCacheSpecs.is_uniform_type``: one block size and one kind (one window for
    sliding / chunked layers, one page for state layers)."""
    first = layers[0]
    same = all(x.block_size == first.block_size and x.kind == first.kind for x in layers)
    if not same:
        return False
    if first.kind in ("sliding", "chunked"):
        return all(x.window == first.window for x in layers)
    if first.is_state:
        return all(x.page == first.page and x.key == first.key for x in layers)
    return True


def _unify_pages(layers: list[_Layer]) -> list[_Layer]:
    """vLLM ``unify_kv_cache_spec_page_size``: smaller pages grow to the largest by a larger block size
    when they divide it, else are padded (state layers and non-MLA attention).

    Raises:
        UsageError: an MLA page that does not divide the largest page (vLLM refuses the model).
    """
    largest = max(x.page for x in layers)
    out = []
    for x in layers:
        if x.page != largest:
            if x.is_state:
                x = replace(x, key=(*x.key, largest), page=largest)
            elif largest % x.page == 0:
                x = replace(x, block_size=x.block_size * (largest // x.page), page=largest)
            elif x.kind != "mla":
                x = replace(x, key=(*x.key, largest), page=largest)
            else:
                raise UsageError(
                    f"--engine vllm: layer {x.index}'s MLA page ({x.page:,} B) does not divide the largest page "
                    f"({largest:,} B); vLLM 0.33 cannot unify this model's pages"
                )
        out.append(x)
    return out


def _group(kind_layers: list[_Layer], uniform_type: bool = False) -> KVGroup:
    first = kind_layers[0]
    return KVGroup(
        kind=first.kind,
        layers=tuple(x.index for x in kind_layers),
        block_size=first.block_size,
        layer_pages=tuple(x.page for x in kind_layers),
        window=first.window,
        state_pages=first.state_pages,
        uniform_type=uniform_type,
        owners=tuple(x.layer for x in kind_layers),
        encoder_tokens=first.encoder_tokens,
    )


def _hybrid_groups(layers: list[_Layer]) -> tuple[list[KVGroup], int]:
    """(groups, padding layers) of layers with one page size: vLLM
    ``_get_kv_cache_groups_uniform_page_size``.

    Layers are bucketed by spec (first appearance order); the group size is the smallest bucket (the
    largest when it is below 1.5 × the smallest); each bucket splits into ``cdiv(len, size)`` groups,
    the i-th taking ``layers[i::n]``; padding layers fill the groups up to the widest.
    """
    buckets: dict[tuple, list[_Layer]] = {}
    for x in layers:
        buckets.setdefault((x.key, x.block_size), []).append(x)
    sizes = [len(b) for b in buckets.values()]
    size = max(sizes) if max(sizes) < min(sizes) * 1.5 else min(sizes)
    groups = []
    for bucket in buckets.values():
        n = cdiv(len(bucket), size)
        groups.extend(_group(bucket[i::n]) for i in range(n))
    widest = max(len(g.layers) for g in groups)
    return groups, sum(widest - len(g.layers) for g in groups)


def build_layout(
    spec: ModelSpec,
    kv_dtype: KVDtype,
    tp: int,
    pp: int,
    max_model_len: int,
    block_size: int | None,
    prefix_caching: bool,
    hybrid_kv_cache_manager: bool,
    family: str,
    pp_layer_partition: tuple[int, ...] | None = None,
    num_spec: int = 0,
    draft: ModelSpec | None = None,
    num_mtp_layers: int = 0,
) -> VllmLayout:
    """vLLM 0.33's KV cache groups and block sizes for ``spec`` on one rank.

    Follows ``v1/core/kv_cache_planning.py get_kv_cache_groups`` (uniform spec: one group; one kind with
    different sizes: one group whose page is the sum; otherwise pages unified and layers bucketed into
    equal groups), after the hybrid alignment of ``platforms/interface.py`` for models with state layers,
    and the stage split of ``get_pp_indices``. ``block_size`` None: the backend's default
    (:func:`mla_block_size` for MLA models, 16 otherwise).

    Speculative decoding (``num_spec`` = ``num_speculative_tokens``; a ``draft`` model or EAGLE head;
    ``num_mtp_layers`` MTP modules): the drafter's layers join the pool (:func:`_layer_specs`); state
    layers keep ``num_spec`` more pages and wider conv states (:func:`state_pages`, :func:`state_tensors`);
    sliding layers retain ``num_spec − 1`` more tokens with multi-module MTP
    (``get_global_kv_cache_groups``: ``extra_retained_tokens = max(0, num_prefill_lookahead_tokens − 1)``,
    ``VllmConfig.num_prefill_lookahead_tokens``: ``num_speculative_tokens`` for MTP with
    ``min(num_nextn_predict_layers, num_speculative_tokens) > 1``, 1 for other EAGLE-family drafters, 0
    for a draft model).

    Raises:
        UsageError: pages vLLM cannot unify.
    """
    args = (kv_dtype, tp, pp, max_model_len, block_size, prefix_caching, hybrid_kv_cache_manager, family,
            pp_layer_partition, num_spec, draft, num_mtp_layers)  # fmt: skip
    if draft is not None:  # a drafter's spec is not part of the key (it would be hashed layer by layer)
        return _build_layout(spec, *args)
    # The layout is a function of the spec and these values: built once per spec and key (fit's advice plans
    # the same model on every catalog GPU; a 100,000-layer model's layout is 100,000 layers of work). The GPU
    # family enters only an MLA model's default block size and GDN's prefill checkpoints (_build_layout).
    uses_family = (not block_size and "mla" in spec.layer_kind_set) or "gdn" in _state_kinds(spec)
    key = (*args[:7], family if uses_family else None, *args[8:])
    return spec.memo(("vllm.build_layout", *key), lambda: _build_layout(spec, *args))


def _stateful(spec: ModelSpec) -> list:
    """State layers, and attention layers that keep a Mamba-2 state beside their KV (parallel_state)."""
    return spec.memo(
        ("vllm.stateful",),
        lambda: [x for x in spec.layers if x.state is not None and x.kind in (*STATE_KINDS, *KV_HEAD_KINDS)],
    )


def _state_kinds(spec: ModelSpec) -> frozenset:
    return spec.memo(("vllm.state_kinds",), lambda: frozenset(x.state.kind for x in _stateful(spec)))


def _build_layout(
    spec: ModelSpec,
    kv_dtype: KVDtype,
    tp: int,
    pp: int,
    max_model_len: int,
    block_size: int | None,
    prefix_caching: bool,
    hybrid_kv_cache_manager: bool,
    family: str,
    pp_layer_partition: tuple[int, ...] | None,
    num_spec: int,
    draft: ModelSpec | None,
    num_mtp_layers: int,
) -> VllmLayout:
    stateful = _stateful(spec)
    has_state = bool(stateful)
    has_attention = bool(spec.layer_kind_set & {*KV_HEAD_KINDS, "mla"})
    if block_size:
        block = block_size
    elif "mla" in spec.layer_kinds:
        block = mla_block_size(family, kv_dtype, is_sparse_mla(spec))
    else:
        block = DEFAULT_BLOCK_SIZE
    align = has_state and prefix_caching
    state_kinds = _state_kinds(spec)
    # GDN prefill on FlashInfer (Hopper) exports prefill checkpoints in align mode: a 64-token grid and one
    # more page per layer (model_executor/layers/mamba/gdn/qwen_gdn_linear_attn.py); only when every
    # state layer can (layers/mamba/abstract.py get_mamba_prefill_checkpoint_alignment: Mamba-2 mixers
    # declare no alignment, although their specs always keep a checkpoint page).
    checkpoint = GDN_CHECKPOINT_ALIGNMENT if align and family == "sm90" and state_kinds == {"gdn"} else None
    mamba_padded = None
    if has_state and has_attention:
        mamba_page = max(state_bytes(x.state, spec.dtype, tp, num_spec) for x in stateful)
        block, mamba_padded = hybrid_block_size(spec, kv_dtype, tp, block, mamba_page, checkpoint, align)
    mamba_block = block if align else max_model_len
    layers = _layer_specs(
        spec, kv_dtype, tp, block, mamba_block, mamba_padded, align, checkpoint is not None, num_spec, draft,
        num_mtp_layers,
    )  # fmt: skip
    extra_retained = max(0, num_spec - 1) if num_mtp_layers and min(num_mtp_layers, num_spec) > 1 else 0
    if not hybrid_kv_cache_manager:
        layers = _promote_local(layers)
    padding = 0
    if not layers:
        groups: list[KVGroup] = []
    elif len({x.key for x in layers}) == 1:
        groups = [_group(layers)]  # _get_kv_cache_groups_uniform_spec
    elif _uniform_type(layers):
        groups = [_group(layers, uniform_type=True)]  # _get_kv_cache_groups_uniform_type
    else:
        groups, padding = _hybrid_groups(_unify_pages(layers))
    if extra_retained:
        groups = [replace(g, extra_retained=extra_retained) if g.kind == "sliding" else g for g in groups]
    per_block = []
    for stage in pp_ranges(spec.num_layers, pp, pp_layer_partition):
        per_block.append(
            max(
                (sum(p for i, p in zip(g.owners, g.layer_pages, strict=True) if i in stage) for g in groups),
                default=0,
            )
        )
    return VllmLayout(
        groups=tuple(groups),
        attention_block_size=block,
        block_size=min((g.block_size for g in groups), default=block),
        mamba_page_padded=mamba_padded,
        mamba_cache_mode="align" if align else "none",
        padding_layers=padding,
        bytes_per_block=tuple(per_block),
        hybrid_kv_cache_manager=hybrid_kv_cache_manager,
    )


def uses_eagle(num_mtp_layers: int = 0, draft: ModelSpec | None = None) -> bool:
    """True when the drafter is of vLLM's EAGLE family (``config/speculative.py``
    ``SpeculativeConfig.use_eagle``: eagle, eagle3, mtp, dflash, dspark).

    kvplan knows the drafter by ``--num-mtp-layers`` (MTP) or ``--speculative-model``; vLLM 0.33 names a
    draft checkpoint's method from its path when none is given (``config/speculative.py:1445-1448``:
    ``"eagle-"`` in the name → eagle, ``"eagle3"`` → eagle3, else a draft model), and so does this.
    """
    if num_mtp_layers:
        return True
    if draft is None:
        return False
    name = draft.name.lower()
    return "eagle-" in name or "eagle3" in name


def default_hybrid_kv_cache_manager(spec: ModelSpec, num_mtp_layers: int = 0, draft: ModelSpec | None = None) -> bool:
    """vLLM 0.33 ``VllmConfig.__post_init__`` (``config/vllm.py:2228-2294``; the chunked-local rule at
    2235-2256): the hybrid KV cache manager is on (on a CUDA GPU), and off for a model with chunked local
    attention (Llama 4) only when an EAGLE-family drafter is used (:func:`uses_eagle`) or
    ``VLLM_ALLOW_CHUNKED_LOCAL_ATTN_WITH_HYBRID_KV_CACHE=0``.

    That variable defaults to ``"1"`` (``envs.py:1931-1933``; ``envs.py:272`` declares it ``True``): the
    comment above it, "we disable it by default", is stale, and kvplan's rule before issue 16 followed it.
    Checked against vLLM's own resolution in tests/fixtures/vllm_golden.json ``defaults``."""
    if "chunked" in spec.layer_kind_set:
        return not uses_eagle(num_mtp_layers, draft)
    return True


def default_prefix_caching(spec: ModelSpec) -> bool:
    """vLLM 0.33 ``ModelConfig.is_prefix_caching_supported``: on for generative models, hybrids included;
    off for attention-free ones (only state layers)."""
    return any(x.kind in (*KV_HEAD_KINDS, "mla") for x in spec.layers)


def default_prefix_caching_at(spec: ModelSpec, version: str | None) -> bool:
    """Prefix caching by default at vLLM ``version`` (None: 0.33, :func:`default_prefix_caching`): before 0.26
    off for hybrid models (attention + state layers: "Hybrid models do not support prefix caching since the
    feature is still experimental", ``0.25.1 config/model.py:1885``; on from ``0.26.0 config/model.py:1896``),
    so their Mamba layers keep one page and no prefill-checkpoint alignment."""
    from kvplan.engines import parse_version

    v = parse_version(version) if version else None
    if v is not None and v < (0, 26, 0) and any(x.state is not None for x in spec.layers):
        return False
    return default_prefix_caching(spec)


def log_line(kv_cache_tokens: int, max_model_len: int, max_concurrency: float) -> str:
    """The start-up log line (vLLM ``kv_cache_utils.py update_kv_cache_capacity``)."""
    return (
        f"GPU KV cache size: {kv_cache_tokens:,} tokens, Maximum concurrency for {max_model_len:,} tokens per "
        f"request: {max_concurrency:.2f}x"
    )


# --- the engine: settings, budget, pools ------------------------------------------------------------------


@dataclass(frozen=True, eq=False)
class GroupPlan(CachePlan):
    """vLLM ≥ 0.33's one pool of blocks shared by its KV cache groups (:class:`VllmLayout`).

    The pool holds ``min over PP stages of budget // bytes per block`` blocks, one of them the null block
    (``get_kv_cache_configs``); a request of S tokens takes :meth:`VllmLayout.blocks_per_request` blocks (its
    in-flight tokens included); a shared prefix keeps its whole blocks of full and MLA groups once.
    "Maximum concurrency" = ``num_blocks / blocks per request``; "GPU KV cache size" =
    ``int(concurrency × max_model_len)`` (``kv_cache_utils.py get_kv_cache_capacity``).

    Attributes:
        layout: the groups and pages.
        in_flight: tokens scheduled but not settled (:func:`in_flight_tokens`).
        rules: the version's rule set.
        kv_bytes_per_token: bytes one token costs on the worst stage (drafter layers on the last one).
        stage_num_layers: layers of the worst stage.
        extras: FitResult fields (settings applied).
    """

    layout: VllmLayout = None  # type: ignore[assignment]
    in_flight: int = 0
    rules: VllmRules = LATEST
    kv_bytes_per_token: int = 0
    stage_num_layers: int = 0
    pool_names: tuple = ("blocks",)
    extras: dict = field(default_factory=dict)

    @property
    def kv_bytes_per_block(self) -> int:  # type: ignore[override]
        return self.layout.worst_bytes_per_block

    @property
    def unit_bytes(self) -> tuple:  # type: ignore[override]
        return (self.layout.worst_bytes_per_block,)

    @property
    def block_size(self) -> int:  # type: ignore[override]
        return self.layout.block_size

    def num_blocks(self, budget, xp=PY):
        """Blocks of the pool: the smallest stage's ``budget // bytes per block``."""
        out = None
        for b in self.layout.bytes_per_block:
            if b:
                n = budget // b
                out = n if out is None else xp.minimum(out, n)
        return xp.full(budget, 0) if out is None else out

    def pools(self, budget, xp=PY) -> tuple:
        n = self.num_blocks(budget, xp)
        return (n - 1 if self.rules.null_block else n,)

    def demand(self, tokens, xp=PY) -> tuple:
        return (self.layout.blocks_per_request(tokens, self.in_flight, xp),)

    def decode_demand(self, tokens, xp=PY) -> tuple:
        """Blocks a request holds in decode: sliding and chunked groups keep only the window and the request's own
        in-flight tokens (1, 2 with async scheduling), because vLLM frees the blocks a window no longer reads
        before each step (``v1/core/kv_cache_manager.py allocate_slots`` → ``remove_skipped_blocks`` on the
        processed tokens less the request's in-flight ones); full, MLA and state groups as :meth:`demand`."""
        own = 2 if self.extras.get("async_scheduling") else 1
        return (self.layout.blocks_per_request(tokens, own, xp),)

    def prefix(self, tokens: int, xp=PY) -> tuple:
        return (sum(g.prefix_blocks(tokens) for g in self.layout.groups),)

    def reported_block_size(self, seq, xp=PY):
        """The block size vLLM reports: the smallest group's; a state group without prefix caching has
        blocks of max_model_len tokens (``mamba_block_size = max_model_len``), so it counts as ``seq``."""
        layout = self.layout
        if not layout.groups:
            return layout.block_size
        by_len = [g for g in layout.groups if g.kind in STATE_KINDS and layout.mamba_cache_mode == "none"]
        other = min((g.block_size for g in layout.groups if g not in by_len), default=MAX_SEARCH_TOKENS)
        return xp.minimum(other, seq) if by_len else other

    def measures(self, budget, seq, shared_prefix: int = 0, xp=PY) -> dict:
        num_blocks = self.num_blocks(budget, xp)
        (per_request,) = self.demand(seq, xp)
        concurrency = xp.where(per_request > 0, num_blocks / xp.maximum(per_request, 1), 0.0)
        if self.rules.log_from_concurrency:
            tokens = xp.to_int(concurrency * seq)
        elif self.rules.tokens_per_group and self.layout.groups:  # min_block_size over the groups
            tokens = num_blocks // len(self.layout.groups) * self.reported_block_size(seq, xp)
        else:
            tokens = num_blocks * self.layout.block_size
        return dict(
            num_blocks=num_blocks,
            kv_bytes_per_request=per_request * self.layout.worst_bytes_per_block,
            kv_capacity_tokens=tokens,
            max_concurrency=concurrency,
            block_size=self.reported_block_size(seq, xp),
            blocks_per_request=per_request,
        )

    def fit_fields(self) -> dict:
        groups = tuple(
            dict(kind=g.kind, layers=len(g.layers), block_size=g.block_size, page_bytes=g.page_bytes)
            for g in self.layout.groups
        )
        tokens_rule = (
            "concurrency"
            if self.rules.log_from_concurrency
            else ("groups" if self.rules.tokens_per_group else "blocks")
        )
        return dict(self.extras, kv_cache_groups=groups, padding_layers=self.layout.padding_layers,
                    null_block=self.rules.null_block, max_in_flight_tokens=self.in_flight,
                    kv_tokens_rule=tokens_rule)  # fmt: skip

    def log_line(self, measures: dict, seq: int, pools: tuple) -> str:
        return log_line(measures["kv_capacity_tokens"], seq, measures["max_concurrency"])


def v0_concurrency(num_blocks, block_size: int, seq, xp=PY):
    """ "Maximum concurrency" of the V0 engine and of V1 0.7–0.8: ``num_gpu_blocks × block_size / max_model_len``
    (``0.7.3 executor/executor_base.py:114``; ``0.8.5 v1/core/kv_cache_utils.py:636`` ``num_tokens /
    max_model_len``)."""
    return num_blocks * block_size / seq


def cpu_blocks(swap_space_bytes: int, bytes_per_block: int) -> int:
    """ "# CPU blocks" of the V0 engine: ``int(swap_space_bytes // cache_block_size)`` per worker (``0.5.5
    worker/worker.py determine_num_available_blocks``; ``swap_space`` 4 GiB by default, ``config.py
    CacheConfig``)."""
    return swap_space_bytes // bytes_per_block if bytes_per_block else 0


def estimate_max_model_len(needed, available: int, max_model_len: int) -> int:
    """The "estimated maximum model length" of vLLM's not-enough-memory error: the largest length L ≤
    max_model_len with ``needed(L) ≤ available`` by binary search, 0 when not even 1 fits (``0.15.1
    v1/core/kv_cache_utils.py:655 estimate_max_model_len``; ``needed`` sums every layer's
    ``max_memory_usage_bytes``)."""
    if needed(1) > available:
        return 0
    lo, hi, result = 1, max_model_len, 1
    while lo <= hi:
        mid = (lo + hi) // 2
        if needed(mid) <= available:
            result, lo = mid, mid + 1
        else:
            hi = mid - 1
    return result


def legacy_window_tokens(kind: str, window: int, seq, block: int, xp=PY, in_flight: int = 0):
    """Tokens a windowed layer holds for one request under kvplan's rules for vLLM before 0.33: sliding
    ``(cdiv(min(window − 1 + batched, S), block) + 1) × block``, chunked ``cdiv(min(chunk + batched, S),
    block) × block`` (one batch in flight)."""
    if kind == "sliding":
        return (xp.cdiv(xp.minimum(window - 1 + in_flight, seq), block) + 1) * block
    return xp.cdiv(xp.minimum(window + in_flight, seq), block) * block


def check_speculative(spec: ModelSpec, opts: FitOptions, vllm_groups: bool) -> None:
    """Refuse speculative-decoding settings kvplan cannot size: any of them outside vLLM ≥ 0.33's rules, a
    drafter without ``--num-speculative-tokens``, a draft model whose heads the TP does not split.

    Raises:
        UsageError: naming the flag.
    """
    check_int("--num-speculative-tokens", opts.num_speculative_tokens, 0)
    check_int("--num-mtp-layers", opts.num_mtp_layers, 0)
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


# --- parallelism and load-time checks ---------------------------------------------------------------

FP8_MOE_REFINE_FROM = (0, 29, 0)  # vLLM 0.29.0 added fused_moe/oracle/fp8.py refine_fp8_moe_block_shape
FP8_MOE_REFINE_MIN = 32  # refine_fp8_moe_block_shape: "if refine < 32: return None"
EP_GROUP_SIZES = (2, 4, 8, 16)  # the expert-parallel groups kvplan fleet tries (GPUs of one stage)


def parallel(spec: ModelSpec, opts: FitOptions) -> Parallel:
    """vLLM 0.33's layout of one replica: ``--data-parallel-size D`` engine ranks of ``--tensor-parallel-size T``
    GPUs each (``D × T × PP`` GPUs). Each DP rank is its own engine with its own scheduler and KV cache, its
    attention and dense layers TP-split over its T GPUs (KV heads split, an MLA latent on every rank). The
    fused MoE layers span all ``T × D`` GPUs of a stage (``fused_moe/config.py FusedMoEParallelConfig.make``:
    ``flatten_tp_across_dp_and_pcp``): TP-sliced over them, or with ``--enable-expert-parallel`` whole experts
    split over ``EP = T × D`` GPUs (``tp_size=1, ep_size=tp_size``).

    Raises:
        UsageError: ``--ep-size`` (an SGLang flag) other than TP × DP.
    """
    check_int("--data-parallel-size", opts.data_parallel_size)
    tp, dp, pp = opts.tensor_parallel_size, opts.data_parallel_size, opts.pipeline_parallel_size
    if opts.expert_parallel_size not in (None, 1) and opts.expert_parallel_size != tp * dp:
        raise UsageError(
            f"--ep-size {opts.expert_parallel_size}: vLLM has no EP size; --enable-expert-parallel splits the experts "
            f"over all TP × DP = {tp * dp} GPUs of a stage"
        )
    ep_on = opts.enable_expert_parallel or (opts.expert_parallel_size or 1) > 1
    if spec.moe is None:  # no fused-MoE layer to split: vLLM takes the flag and it changes nothing (load_check says so)
        ep_on = False
    use_ep = ep_on and tp * dp > 1  # FusedMoEParallelConfig.make: use_ep needs dp × pcp × tp > 1
    flags = parallel_flags(("--tensor-parallel-size", tp), ("--pipeline-parallel-size", pp),
                           ("--data-parallel-size", dp), ("--enable-expert-parallel", ep_on))  # fmt: skip
    return Parallel(tp, dp, pp, tp * dp if use_ep else 1, 1 if use_ep else tp * dp, flags)


def fp8_moe_check(spec: ModelSpec, moe_tp: int, version: str | None) -> list[str]:
    """vLLM's load-time check of block-quantized FP8 experts at MoE TP ``moe_tp``: the slice of one expert's
    intermediate dimension on a GPU (``intermediate_size // tp_size``, ``fused_moe/config.py``) must be a
    multiple of ``block_n`` (gate/up), and with TP of ``block_k`` (down): ``quantization/utils/fp8_utils.py
    validate_fp8_block_shape_moe``, called from ``quantization/fp8.py Fp8MoEMethod.create_weights``. From vLLM
    0.29 a slice that misses is refined instead when ``gcd(block_n, block_k, slice, hidden) >= 32``
    (``fused_moe/oracle/fp8.py refine_fp8_moe_block_shape``: the scales upsampled to that block, only Triton
    MoE kernels then selectable): a note; below 32 the check refuses.

    Returns:
        Notes (the refinement), one line each.

    Raises:
        UsageError: vLLM's message, where it refuses to load.
    """
    block, width = spec.weight_block_size, spec.moe_intermediate_size
    if block is None or width is None:
        return []
    block_n, block_k = block
    ispp = width // moe_tp
    if ispp % block_n == 0 and (moe_tp == 1 or ispp % block_k == 0):
        return []
    asked = parse_version(version) if version not in (None, "", "latest", "current") else None
    refine = math.gcd(block_n, block_k, ispp, spec.hidden_size or 0)
    where = f"{spec.name} at MoE TP {moe_tp} ({width} / {moe_tp} = {ispp} per GPU)"
    if (asked is None or asked >= FP8_MOE_REFINE_FROM) and refine >= FP8_MOE_REFINE_MIN:
        return [
            f"vLLM refines the FP8 expert block scales from {list(block)} to {[refine, refine]} to load {where} "
            "(fused_moe/oracle/fp8.py refine_fp8_moe_block_shape; Triton MoE kernels only)"
        ]
    if ispp % block_n:
        engine = (
            f"The output_size of gate's and up's weight = {ispp} is not divisible by weight quantization "
            f"block_n = {block_n}."
        )
    else:
        engine = (
            f"The input_size of down's weight = {ispp} is not divisible by weight quantization block_k = {block_k}."
        )
    raise LoadRefused(
        f'--tp: vLLM refuses to load {where}: "{engine}" (quantization/utils/fp8_utils.py '
        "validate_fp8_block_shape_moe); use expert parallelism (--enable-expert-parallel) or a TP whose slice is a "
        f"multiple of {block_n}"
    )


def check_sampler(sampler: str | None, budget_rules) -> None:
    """``--vllm-sampler``: one of :data:`kvplan.engines.vllm_budget.SAMPLER_BYTES`, and only for the V1 engine
    (V0's sampler ran on the driver rank, ``BudgetRules.sampler_bytes`` 40).

    Raises:
        UsageError: naming the flag and what it allows.
    """
    if sampler is None:
        return
    if sampler not in vllm_budget.SAMPLER_BYTES:
        allowed = ", ".join(vllm_budget.SAMPLER_BYTES)
        raise UsageError(f"--vllm-sampler: {sampler!r} is not a vLLM sampler ({allowed})")
    if budget_rules.generation != "v1":
        raise UsageError("--vllm-sampler: the V1 engine's sampler (vLLM >= 0.8); the V0 engine has one sampler")


# Architectures vLLM stopped serving, from vLLM 0.33.0's own table (model_executor/models/registry.py
# _PREVIOUSLY_SUPPORTED_MODELS: "Model architecture X was supported in vLLM until vV, and is not supported anymore"),
# for the architectures kvplan reads, where vLLM's Transformers backend does not take over either
# (registry.py _try_resolve_transformers: transformers' class must be backend-compatible): architecture -> (the
# last release that served it, why nothing serves it after, what it needed before that kvplan does not model or
# None when kvplan's rule sets apply).
UNSERVED_ARCHITECTURES: dict[str, tuple[str, str, str | None]] = {
    "MllamaForConditionalGeneration": (
        "0.10.2",
        "with the encoder-decoder models removed with the V0 engine; its Transformers backend gives every decoder "
        "layer a self-attention cache ('vLLM does not support encoder-decoder models', "
        "models/transformers/base.py _get_attn_cls), not Mllama's cross-attention over the image tokens",
        "vLLM 0.10.2 and older serve it on the V0 engine only (model_executor/models/mllama.py: SupportsV0Only), whose "
        "cross-attention blocks come out of the one per-layer pool (worker/cache_engine.py: every block spans all "
        "layers, cross-attention ones included); kvplan does not model that pool",
    ),
    "MptForCausalLM": (
        "0.28.0",
        "its Transformers backend does not take transformers' MptForCausalLM (_supports_attention_backend false: "
        "its attention adds an ALiBi bias of its own)",
        None,
    ),
}
UNSERVED_ARCHITECTURES["MPTForCausalLM"] = UNSERVED_ARCHITECTURES["MptForCausalLM"]  # the remote-code name


def check_served(spec: ModelSpec, version: str | None) -> None:
    """Refuse a model whose architecture vLLM ``version`` does not serve, or serves only in a way kvplan does not
    model (:data:`UNSERVED_ARCHITECTURES`; None: the newest release, 0.33).

    Raises:
        UsageError: naming the architecture, the vLLM release and vLLM's reason.
    """
    entry = UNSERVED_ARCHITECTURES.get(spec.architecture or "")
    if entry is None:
        return
    last, after, before = entry
    asked = parse_version(str(version)) if version not in (None, "", "latest", "current") else None
    shown = str(version).strip() if asked is not None else "0.33.0"
    if asked is None or asked > parse_version(last):
        raise UsageError(
            f"--engine vllm: vLLM {shown} does not serve {spec.architecture} ({spec.name}): its registry lists it "
            f"among the models 'supported in vLLM until v{last}' (model_executor/models/registry.py "
            f"_PREVIOUSLY_SUPPORTED_MODELS), {after}; give --engine-version {last} or older, or plan another engine"
        )
    if before is not None:
        raise UsageError(f"--engine vllm --engine-version {shown}: {spec.name} ({spec.architecture}): {before}")


class VllmEngine(EngineRules):
    """vLLM, by version (:data:`RULE_SETS`): ``ceil(total × gpu_memory_utilization)`` minus weights,
    activation (profiled at max_num_batched_tokens) and non-torch memory; 0.33 plans KV cache groups in one
    pool of blocks (:class:`GroupPlan`), older versions one pool counted per layer."""

    engine = Engine.vllm
    display_name = "vLLM"
    block_size = DEFAULT_BLOCK_SIZE
    utilization = 0.9
    max_num_batched_tokens = OLD_DEFAULT_BATCHED_TOKENS
    unplanned_kinds = {
        "compressed": "vLLM serves DeepSeek-V4 from 0.20.0 (model_executor/models/registry.py: DeepseekV4ForCausalLM) "
        "with cache specs of its own (0.33: vllm/models/deepseek_v4/attention.py DeepseekV4SWACache, an "
        "MLAAttentionSpec with tokens_per_state, DeepseekV4IndexerCache; compressor.py CompressorStateCache) that "
        "kvplan does not model yet",
        "rglru": "vLLM does not serve RecurrentGemma (no release from 0.5.5 to 0.33.0 registers "
        "RecurrentGemmaForCausalLM in model_executor/models/registry.py)",
        "rwkv4": "vLLM 0.33 serves no RWKV model (model_executor/models/registry.py has no Rwkv class)",
        "mlstm": "vLLM 0.33 serves no xLSTM model (model_executor/models/registry.py has no xLSTM class)",
        "cca": "vLLM 0.33 serves no ZAYA model (model_executor/models/registry.py has no Zaya class)",
        "sconv": "vLLM 0.33 serves Inkling (registry.py: InklingForCausalLM, vllm/models/inkling) with a conv cache of "
        "its own (configs.py mamba2_cache_params: six conv states per layer of sconv_kernel_size - 1 columns, sized "
        "for both the full and the local K/V width, in bf16) beside a paged K/V cache, which kvplan does not model "
        "yet",
        "hidden": "vLLM 0.33 serves no XLNet or Reformer model (model_executor/models/registry.py has neither)",
        "prefix_tokens": "vLLM 0.33 serves no CPM-Ant model (model_executor/models/registry.py has no CpmAnt class)",
    }
    # vllm/config/cache.py CacheDType (0.33.0) -> kvplan's dtypes: the values it takes that kvplan sizes
    # (int8_per_token_head is kvplan's int8), and float32, which only the model dtype makes (--dtype float32 with
    # the auto cache: CacheDType has no float32). Its fp8_inc, fp8_ds_mla, nvfp4_ds_mla, nvfp4_4over6,
    # int4_per_token_head, turboquant_*, octave_* and ultraquant_4bit caches are not modelled.
    kv_cache_dtypes = {
        "float16": "fp16", "bfloat16": "bf16", "float32": "fp32", "fp8": "fp8_e4m3", "fp8_e4m3": "fp8_e4m3",
        "fp8_e5m2": "fp8_e5m2", "int8_per_token_head": "int8", "fp8_per_token_head": "fp8_per_token_head",
        "nvfp4": "nvfp4",
    }  # fmt: skip
    kv_cache_dtypes_source = (
        "vLLM 0.33.0 vllm/config/cache.py CacheDType, those kvplan sizes; float32 through --dtype with the auto cache"
    )

    def resolve_rules(self, version: str | None) -> VllmRules:
        return resolve_rules(version)

    def older_than_oldest(self, version: str | None) -> bool:
        return older_than_oldest(version)

    def settings(self, spec: ModelSpec, gpu, opts: FitOptions) -> Settings:
        """The version's defaults where ``opts`` leaves None: batched tokens and max_num_seqs
        (:func:`version_batch_defaults`); async scheduling (0.33: on); prefix caching
        (:func:`default_prefix_caching`); the hybrid KV cache manager (:func:`default_hybrid_kv_cache_manager`);
        the GPU family for backend block sizes (:func:`gpu_family`). ``block_size`` stays None unless given
        (the backend picks: :func:`mla_block_size`, 16)."""
        rules = resolve_rules(opts.engine_version)
        budget = vllm_budget.resolve(opts.engine_version)
        util, _, mnbt, max_batch = self.common_settings(opts)
        if opts.gpu_memory_utilization is None:
            util = vllm_budget.default_utilization(budget)
        max_len = spec.max_model_len if opts.max_model_len is None else opts.max_model_len
        gpu_mnbt, gpu_seqs = version_batch_defaults(opts.engine_version, gpu.cuda_total_bytes, gpu.name, max_len)
        mnbt = gpu_mnbt if opts.max_num_batched_tokens is None else mnbt
        if opts.max_num_seqs is not None:
            seqs = opts.max_num_seqs
        elif rules.batch_defaults_per_gpu:  # 0.33 engine/arg_utils.py:3233-3235: at most the batched tokens
            seqs = min(gpu_seqs, mnbt)
        else:
            seqs = gpu_seqs
        asynch = rules.async_scheduling if opts.async_scheduling is None else opts.async_scheduling
        prefix = opts.enable_prefix_caching
        if prefix is None:
            prefix = default_prefix_caching_at(spec, opts.engine_version)
        hma = opts.hybrid_kv_cache_manager
        if hma is None:
            hma = default_hybrid_kv_cache_manager(spec, opts.num_mtp_layers, opts.speculative_model)
        extra = dict(async_scheduling=asynch, prefix_caching=prefix, hybrid_kv_cache_manager=hma,
                     family=gpu_family(gpu.name, gpu.is_custom), budget=budget,
                     max_num_batched_tokens_given=opts.max_num_batched_tokens is not None)  # fmt: skip
        block = opts.block_size if rules.kv_cache_groups else (opts.block_size or DEFAULT_BLOCK_SIZE)
        return Settings(rules, util, block, mnbt, max_batch, seqs, extra)

    def settings_key(self, spec: ModelSpec, gpu, opts: FitOptions) -> tuple:
        s = self.settings(spec, gpu, opts)
        return (s.max_num_batched_tokens, s.max_num_seqs, s.extra["family"])

    def check(self, spec: ModelSpec, opts: FitOptions, settings: Settings) -> None:
        """Refuse what this version of vLLM does not serve (:func:`check_served`), a layer kind it has no rule for,
        and speculative decoding outside 0.33's rules."""
        check_served(spec, opts.engine_version)
        self.check_kinds(spec)
        check_speculative(spec, opts, settings.rules.full_rules)
        check_sampler(opts.vllm_sampler, settings.extra["budget"])

    def parallel(self, spec: ModelSpec, opts: FitOptions) -> Parallel:
        return parallel(spec, opts)

    def layouts(self, spec: ModelSpec, tps: list[int], pps: list[int]) -> list[dict]:
        """TP × PP; for a model with moe facts also expert parallelism over each TP, and attention DP with
        EP: D ranks of T GPUs for every EP group of :data:`EP_GROUP_SIZES` (vLLM's DeepSeek / Qwen-MoE
        deployments: ``--data-parallel-size 8 --enable-expert-parallel``)."""
        out = super().layouts(spec, tps, pps)
        if spec.moe is None:
            return out
        for p in pps:
            if p > spec.num_layers:
                continue
            ep = [t for t in tps if t > 1]
            out += [dict(tensor_parallel_size=t, pipeline_parallel_size=p, enable_expert_parallel=True) for t in ep]
            for g in EP_GROUP_SIZES:
                out += [dict(tensor_parallel_size=t, pipeline_parallel_size=p, data_parallel_size=g // t,
                             enable_expert_parallel=True) for t in tps if g % t == 0 and g // t > 1]  # fmt: skip
        return out

    def load_check(self, spec: ModelSpec, opts: FitOptions, par: Parallel) -> list[str]:
        """What the plan says about loading this model: a multimodal wrapper's encoder profile (not modelled:
        :meth:`profiles_encoder`), --enable-expert-parallel on a dense model; block-quantized FP8 checkpoints (as
        they ship): the fused-MoE check (:func:`fp8_moe_check`) and the
        row-parallel linear check (:func:`kvplan.engines.base.fp8_dense_checks`, vLLM 0.33
        ``quantization/utils/fp8_utils.py validate_fp8_block_shape``; merged column-parallel layers are exempt,
        ``layers/linear.py _maybe_allow_fp8_block_shape_mismatch``)."""
        notes = []
        if self.profiles_encoder(spec):
            notes.append(
                f"multimodal: vLLM's profile run also encodes dummy {spec.multimodal.get('wrapper', 'multimodal')} "
                "inputs of the processor's largest size, which kvplan does not model: the activation peak is the "
                "text model's and its range comes from public VLM logs (docs/budget-validation.md); exact: "
                "--kv-cache-memory or --from-log"
            )
        if opts.enable_expert_parallel and spec.moe is None:
            notes.append(
                f"--enable-expert-parallel: no effect: {spec.name} has no routed experts (a dense model, or a spec "
                "without a moe block), so vLLM has no fused-MoE layer to split"
            )
        if not shipped_block_quantized(spec, opts):
            return notes
        fp8_dense_checks(spec, par.attn_tp, "vLLM", "quantization/utils/fp8_utils.py validate_fp8_block_shape")
        return notes + fp8_moe_check(spec, par.expert_slicing, opts.engine_version)

    def activation_bytes(self, spec: ModelSpec, settings: Settings, opts: FitOptions) -> int:
        """The profile run's activation peak (:func:`kvplan.engines.vllm_budget.activation_bytes`): the forward of
        the profile's tokens (V0: ``max(max_model_len, 2048)`` without chunked prefill), then the sampler over
        ``min(tokens, max_num_seqs)`` rows of the vocabulary."""
        b = settings.extra["budget"]
        max_len = spec.max_model_len if opts.max_model_len is None else opts.max_model_len
        tokens = vllm_budget.profile_tokens(b, settings.max_num_batched_tokens, max_len,
                                            settings.extra["max_num_batched_tokens_given"])  # fmt: skip
        return vllm_budget.activation_bytes(spec, b, tokens, settings.max_num_seqs, opts.tensor_parallel_size,
                                            opts.vllm_sampler)  # fmt: skip

    def overhead_bytes(self, spec: ModelSpec, settings: Settings, tp: int, pp: int) -> int:
        """Non-torch memory the version counts (:func:`kvplan.engines.vllm_budget.non_torch_bytes`)."""
        return vllm_budget.non_torch_bytes(settings.extra["budget"], tp, pp)

    def cudagraph_bytes(self, spec: ModelSpec, settings: Settings, opts: FitOptions) -> int:
        """The CUDA-graph estimate vLLM ≥ 0.20 subtracts (:func:`kvplan.engines.vllm_budget.cudagraph_bytes`);
        0 for older versions (graphs come out of the headroom) and with ``--enforce-eager``."""
        if not settings.extra["budget"].cudagraph_subtracted or opts.enforce_eager:
            return 0
        return vllm_budget.cudagraph_bytes(spec, settings.max_num_seqs, settings.max_num_batched_tokens,
                                           opts.tensor_parallel_size)  # fmt: skip

    def usable_and_budget(self, total: int, util: float, terms: dict[str, int], settings: Settings):
        """``requested`` (:func:`kvplan.engines.vllm_budget.requested_bytes`: ``ceil(total × U)`` from 0.14)
        minus every term (``v1/worker/gpu_worker.py determine_available_memory``)."""
        usable = vllm_budget.requested_bytes(total, util, settings.extra["budget"])
        return usable, usable - sum(terms.values())

    def weights_term(self, spec: ModelSpec, opts: FitOptions, settings: Settings):
        """As :meth:`EngineRules.weights_term`, except an MXFP4 MoE checkpoint, which vLLM repacks and pads
        (:func:`kvplan.engines.vllm_budget.mxfp4_weights_bytes`)."""
        term, wname = super().weights_term(spec, opts, settings)
        if wname != "mxfp4" or term.exact:
            return term, wname
        padded = vllm_budget.mxfp4_weights_bytes(spec, opts.tensor_parallel_size, opts.pipeline_parallel_size,
                                                 settings.extra["family"])  # fmt: skip
        if padded is None:
            return term, wname
        source = "MXFP4 experts as vLLM pads them for its MoE kernel (kvplan.engines.vllm_budget)"
        return modelled_term("weights", padded, self.term_factors("weights", settings, spec, opts), source), wname

    def residual_key(self, settings: Settings) -> str:
        return f"vllm-{settings.extra['budget'].generation}"

    def profiles_encoder(self, spec: ModelSpec) -> bool:
        """A multimodal wrapper (``spec.multimodal``): vLLM's profile run also encodes dummy items of the
        processor's largest size (V1 ``gpu_model_runner.py profile_run``: ``embed_multimodal`` on
        ``mm_budget.mm_max_items_per_batch`` items, kept in the encoder cache through the dummy forward; V0
        ``worker/model_runner.py profile_run`` with the dummy multimodal data of ``max_num_seqs`` sequences)."""
        return bool(spec.multimodal)

    def term_source(self, name: str, settings: Settings) -> str:
        b = settings.extra["budget"]
        return {
            "activation": f"vLLM {b.version} profile run: forward + sampler (kvplan.engines.vllm_budget)",
            "non_torch": f"vLLM {b.version} non-torch memory (kvplan.engines.vllm_budget)",
            "cudagraph": f"vLLM {b.version} CUDA-graph estimate (kvplan.engines.vllm_budget)",
        }.get(name, super().term_source(name, settings))

    def plan(self, spec: ModelSpec, kv_dtype: KVDtype, opts: FitOptions, settings: Settings, max_len: int):
        rules, x = settings.rules, settings.extra
        tp, pp = opts.tensor_parallel_size, opts.pipeline_parallel_size
        common = dict(engine_version=rules.version, max_num_seqs=settings.max_num_seqs,
                      prefix_caching=x["prefix_caching"])  # fmt: skip
        if not rules.kv_cache_groups:
            mnbt = settings.max_num_batched_tokens

            def window(kind, w, seq, block, xp=PY):
                return legacy_window_tokens(kind, w, seq, block, xp, mnbt)

            def log(m: dict, seq: int, pools: tuple) -> str:
                if rules.version == "0.6":  # the V0 engine's two lines
                    return (
                        f"# GPU blocks: {m['num_blocks']}; Maximum concurrency for {seq} tokens per request: "
                        f"{m['max_concurrency']:.2f}x"
                    )
                return log_line(m["kv_capacity_tokens"], seq, m["max_concurrency"])

            extras = dict(
                common,
                max_in_flight_tokens=mnbt,
                async_scheduling=False,
                hybrid_kv_cache_manager=False,
                kv_tokens_rule="blocks",
            )
            whole = rules.concurrency_from_tokens
            return token_plan(spec, kv_dtype, opts, settings.block_size, max_len, window_rule=window,
                              windows_full=opts.swa_full, in_flight=mnbt, extras=extras, log=log,
                              pool_is_blocks=whole, concurrency_rule=v0_concurrency if whole else None)  # fmt: skip
        layout = build_layout(
            spec, kv_dtype, tp, pp, max_len, settings.block_size, x["prefix_caching"], x["hybrid_kv_cache_manager"],
            x["family"], opts.pp_layer_partition, opts.num_speculative_tokens, opts.speculative_model,
            opts.num_mtp_layers,
        )  # fmt: skip
        if rules.in_flight_async:
            in_flight = in_flight_tokens(settings.max_num_batched_tokens, pp, x["async_scheduling"])
        else:  # before 0.26 the windowed specs reserve one batch of max_num_batched_tokens
            in_flight = settings.max_num_batched_tokens
        stages = pp_ranges(spec.num_layers, pp, opts.pp_layer_partition)
        worst = max(range(pp), key=lambda i: layout.bytes_per_block[i]) if layout.groups else 0
        sparse = is_sparse_mla(spec)
        per_token = spec.memo(
            ("vllm.stage_token_bytes", kv_dtype, tp, stages[worst].start, stages[worst].stop),
            lambda: sum(token_bytes(spec.layers[i], kv_dtype, tp, sparse) for i in stages[worst]),
        )
        if worst == pp - 1:  # the drafter's layers sit on the last stage
            if opts.num_mtp_layers:
                per_token += opts.num_mtp_layers * token_bytes(mtp_template(spec), kv_dtype, tp, sparse)
            draft = opts.speculative_model
            if draft is not None:
                draft_sparse = is_sparse_mla(draft)
                per_token += sum(token_bytes(x_, kv_dtype, tp, draft_sparse) for x_ in draft.layers)
        drafter = opts.num_mtp_layers + (opts.speculative_model.num_layers if opts.speculative_model else 0)
        extras = dict(common, async_scheduling=x["async_scheduling"],
                      hybrid_kv_cache_manager=x["hybrid_kv_cache_manager"],
                      num_speculative_tokens=opts.num_speculative_tokens, drafter_layers=drafter)  # fmt: skip
        return GroupPlan(layout=layout, in_flight=in_flight, rules=rules, kv_bytes_per_token=per_token,
                         stage_num_layers=len(stages[worst]), extras=extras)  # fmt: skip


ENGINE = VllmEngine()
