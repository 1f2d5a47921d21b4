"""SGLang 0.5.23's KV planning: what ``kvplan fit --engine sglang`` (and ``fleet`` and ``sweep``) apply.

Every rule below is SGLang 0.5.23's own, read in the installed wheel (``pip install --no-deps sglang==0.5.23``;
file:line under ``sglang/srt/``) and run on CPU by ``scripts/sglang_golden.py``, whose fixture
``tests/fixtures/sglang_golden.json`` ``tests/test_sglang_golden.py`` checks kvplan against row by row.

1. **Budget** (``mem_cache/kv_cache_configurator.py:2990 _profile_available_bytes``): SGLang gives its pools
   what is free after the weights less ``pre_model_load_memory × (1 − mem_fraction_static)`` and, for a
   multimodal model, ``SGLANG_VLM_CACHE_SIZE_MB`` = 100 MiB (``environ.py:1598``, ``:202
   mm_runtime_reservation_gb``): kvplan's ``(total − overhead) × mem_fraction_static − weights − 100 MiB``.
   ``mem_fraction_static`` defaults per GPU (:func:`mem_fraction_static_default`, ``arg_groups/memory_hook.py:47
   handle_gpu_memory_settings``), not a flat fraction.
2. **Mamba / GDN / KDA hybrids** (``kv_cache_configurator.py:3229 _handle_max_mamba_cache``): the state pool
   of ``K`` slots is taken first (:func:`mamba_split`), ``(K + 1) × state`` bytes (a padding slot), the rest
   goes to attention tokens; states in SGLang's dtypes (:func:`state_bytes`: conv bf16, SSM float32 unless set).
3. **Tokens** (``model_executor/pool_configurator.py:219 DefaultPoolConfigurator``): ``available // cell``
   aligned down to the page; the cell counts the attention layers only (:func:`cell_bytes`, DeepSeek-V3.2's
   fp8 rows and indexer included); ``--max-total-tokens`` caps it (``:3075 _apply_token_constraints``).
4. **Hybrid SWA** (``pool_configurator.py:656 HybridSWAPoolConfigurator``, ``:971 SWARequestCapPoolConfigurator``):
   the architectures of ``configs/model_config.py:2651 is_hybrid_swa_model`` get a full pool and an SWA pool
   (:func:`pool_split`, :func:`swa_request_cap`); Gemma 2/3 are forced to one pool
   (``arg_groups/model_overrides/gemma2_gemma3.py:24``).
5. **max_running_requests** (``kv_cache_configurator.py:3119 resolve_max_num_reqs``): :func:`max_running_requests`,
   a cap on the requests a replica runs (the plan's :meth:`SglangPlan.request_cap`), and the int32
   ``req_to_token`` table it sizes outside the KV budget (:func:`request_table_bytes`).
6. **Refusals**: where SGLang stops at start-up (no memory after the Mamba pool, a state pool of no slot, no
   token, an SWA pool that cannot hold one request, an SWA cap that leaves no full pool, a state cache serving
   no request), the plan's pools are empty and :meth:`SglangPlan.refusal` says why, as SGLang does.

7. **Attention DP** (``--attn-dp-size D``, or ``--dp-size D --enable-dp-attention``): D groups of TP / D GPUs,
   each with its own scheduler and pools (:func:`parallel`): KV heads split over TP / D
   (``configs/model_config.py:1700 get_num_kv_heads(attn_tp_size)``), an MLA latent whole on each GPU; a group
   runs ``--max-running-requests // D`` (the default cap is per group, undivided) and holds
   ``--max-mamba-cache-size // D`` state slots (:func:`per_worker`); ``chunked_prefill_size // D`` per step and
   a larger CUDA-graph reserve in ``mem_fraction_static`` (:func:`mem_fraction_static_default`).

Not modelled (outside the fixture): speculative decoding, unified memory, post-capture KV
sizing (off by default, ``environ.py:640``), hierarchical cache, FP4 / mxfp8 KV, DeepSeek-V4 and MiniMax
sparse configurators, ``--disable-overlap-schedule`` and the ``no_buffer`` Mamba strategy.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from kvplan.engines import parse_version
from kvplan.engines.base import (
    PY,
    CachePlan,
    EngineRules,
    Settings,
    fp8_dense_checks,
    parallel_flags,
    shipped_block_quantized,
)
from kvplan.errors import LoadRefused, UsageError
from kvplan.options import Engine, FitOptions, Parallel, check_int, stage_layers
from kvplan.specs import LayerSpec, ModelSpec
from kvplan.units import GIB, MIB

RULES_VERSION = "0.5.23"  # the one rule set: the SGLang release read (see the module docstring)
DESCRIPTION = "SGLang 0.5.23 (memory_hook.py mem_fraction_static, kv_cache_configurator.py, pool_configurator.py)"

DEFAULT_SWA_FULL_TOKENS_RATIO = 0.8  # arg_groups/fields/schedule.py:150 swa_full_tokens_ratio fallback
DEFAULT_MAMBA_FULL_MEMORY_RATIO = 0.9  # arg_groups/fields/schedule.py:220 mamba_full_memory_ratio fallback
SWA_EVICTION_INTERVAL = 128  # environ.py:730 SGLANG_SWA_EVICTION_INTERVAL
PAGE_SIZE = 1  # arg_groups/overrides.py:1341 _page_size_default on CUDA and ROCm
DSA_PAGE_SIZE = 64  # arg_groups/model_overrides/deepseek_v2.py:171 "Setting page size to 64 for DeepSeek DSA"
VLM_CACHE_BYTES = 100 * MIB  # environ.py:1598 SGLANG_VLM_CACHE_SIZE_MB, reserved by kv_cache_configurator.py:202
REQ_TO_TOKEN_EXTRA = 4  # mem_cache/allocation_sizing.py:105 req_to_token row headroom (no speculative decoding)
REQ_TO_TOKEN_BYTES = 4  # int32 (kv_cache_configurator.py:1571 _build_req_to_token_pool)
# kv_cache_configurator.py:227 MAMBA_CACHE_SIZE_MAX_RUNNING_REQUESTS_RATIO 3, plus 2 tracking slots of the
# extra_buffer strategy with the overlap scheduler (mem_cache/allocation_sizing.py:11 get_mamba_tracking_slots;
# "auto" picks extra_buffer, arg_groups/overrides.py:473); 1 with --disable-radix-cache (:3062)
MAMBA_SLOTS_PER_REQUEST = 5
DSA_QUANT_BLOCK = 128  # mem_cache/memory_pool.py:5280 DSATokenToKVPool.quant_block_size (index keys: uint8)
SSM_DTYPES = {"float32": 4, "bfloat16": 2, "float16": 2}  # configs/mamba_utils.py:47 mamba2_state_dtype
_SSM_ALIASES = {"fp32": "float32", "bf16": "bfloat16", "fp16": "float16", "half": "float16", "float": "float32"}
CONV_DTYPE_BYTES = 2  # environ.py:1628 SGLANG_MAMBA_CONV_DTYPE bfloat16

# configs/model_config.py:2651 is_hybrid_swa_model (with SWA_SINK_ARCHS :88): the architectures with an SWA pool
# that kvplan can plan (DeepSeek-V4 has its own configurator; not modelled)
HYBRID_SWA_ARCHITECTURES = frozenset({
    "GptOssForCausalLM", "GraniteSWAForCausalLM", "GraniteMoeSWAForCausalLM", "Llama4ForConditionalGeneration",
    "Gemma4ForCausalLM", "Gemma4ForConditionalGeneration", "Gemma4UnifiedForConditionalGeneration",
    "MiMoV2FlashForCausalLM", "MiMoV2ForCausalLM", "Step3p5ForCausalLM",
})  # fmt: skip
# the model classes whose get_attention_sliding_window_size is sliding_window - 1 (models/gpt_oss.py:131,
# models/gemma4_causal.py:83, models/gemma4_mm.py:314); Llama 4 reads attention_chunk_size
# (model_executor/model_runner_components/load_model_utils.py:144); the others the config's sliding_window
WINDOW_MINUS_ONE = frozenset({
    "GptOssForCausalLM", "Gemma4ForCausalLM", "Gemma4ForConditionalGeneration", "Gemma4UnifiedForConditionalGeneration",
})  # fmt: skip
# configs/model_config.py:691: multimodal off unless --enable-multimodal
MULTIMODAL_DISABLED = frozenset({"Gemma3ForConditionalGeneration", "Llama4ForConditionalGeneration",
                                 "Step3VLForConditionalGeneration", "InklingForConditionalGeneration"})  # fmt: skip
# configs/model_config.py:2501: multimodal architectures that keep the breakable prefill CUDA graph
MULTIMODAL_PREFILL_GRAPH = frozenset({
    "Qwen3_5ForConditionalGeneration", "Qwen3_5MoeForConditionalGeneration", "Qwen4ExpForConditionalGeneration",
    "KimiK25ForConditionalGeneration", "Cohere2VisionForConditionalGeneration", "PaddleOCRVLForConditionalGeneration",
})  # fmt: skip
# architectures SGLang 0.5.23 has no model class for: its Transformers fallback plans every decoder layer as an
# attention layer of the config's geometry (the fixture's Jamba rows: 32 layers, cell 131,072 B)
NO_SGLANG_CLASS = frozenset({"JambaForCausalLM"})
KDA_ARCHITECTURES = frozenset({"KimiLinearForCausalLM"})  # arg_groups/cuda_graph_hook.py:181: no prefill graph


@dataclass(frozen=True)
class SglangRules:
    """One SGLang version's conventions (kvplan has one set: :data:`RULES_VERSION`)."""

    version: str
    description: str


RULE_SETS = (SglangRules(RULES_VERSION, DESCRIPTION),)


def resolve_rules(version: str | None) -> SglangRules:
    """The rule set for an SGLang version: kvplan has one (:data:`RULES_VERSION`); a version is accepted when it
    parses (one older than the set gets it with a warning, :func:`older_than_oldest`).

    Raises:
        UsageError: not a version number.
    """
    if version is None or str(version).strip().lower() in ("", "latest", "current"):
        return RULE_SETS[0]
    if parse_version(version) is None:
        raise UsageError(
            f"--engine-version: {version!r} is not a version number (e.g. 0.5.23); SGLang rule sets: {RULES_VERSION}"
        )
    return RULE_SETS[0]


def older_than_oldest(version: str | None) -> bool:
    """True when ``version`` parses and is older than :data:`RULES_VERSION`."""
    asked = None if version is None else parse_version(version)
    return asked is not None and asked < parse_version(RULES_VERSION)


# --- which pools a model gets ---------------------------------------------------------------------------------


def is_dsa(spec: ModelSpec) -> bool:
    """DeepSeek Sparse Attention (DeepSeek-V3.2): MLA layers with an indexer key (``index_head_dim``)."""
    return spec.memo(
        ("sglang.is_dsa",),
        lambda: any(x.kind == "mla" and x.mla is not None and x.mla.index_head_dim for x in spec.layers),
    )


def is_mla(spec: ModelSpec) -> bool:
    """SGLang's MLA backend (``use_mla_backend``): the model's attention layers are latent (DeepSeek, Kimi)."""
    return "mla" in spec.layer_kind_set


def all_layers_attention(spec: ModelSpec) -> bool:
    """True for an architecture SGLang 0.5.23 has no class for (:data:`NO_SGLANG_CLASS`): every layer is planned
    as attention of the config's default geometry."""
    return spec.architecture in NO_SGLANG_CLASS


def is_hybrid_swa(spec: ModelSpec, swa_full: bool = False) -> bool:
    """True when SGLang gives the model's sliding (or chunked) layers a pool of their own: an architecture of
    :data:`HYBRID_SWA_ARCHITECTURES` (config.json's ``architectures[0]``) with both full and windowed layers,
    unless ``--disable-hybrid-swa-memory`` (``swa_full``). Every other model keeps one pool in which windowed
    layers hold every token (Gemma 2/3: ``model_overrides/gemma2_gemma3.py:24``; Mistral: not in the list)."""
    kinds = spec.layer_kind_set
    if swa_full or not (kinds & {"sliding", "chunked"}) or "full" not in kinds:
        return False
    return spec.architecture in HYBRID_SWA_ARCHITECTURES


def window(spec: ModelSpec) -> int:
    """The SWA window SGLang uses (``resolve_sliding_window_size``): ``sliding_window − 1`` for gpt-oss and
    Gemma 4 (their model classes say so: 127 for gpt-oss), Llama 4's ``attention_chunk_size``, else the
    config's ``sliding_window``."""
    if spec.sliding_window:
        return spec.sliding_window - 1 if spec.architecture in WINDOW_MINUS_ONE else spec.sliding_window
    return spec.attention_chunk_size or 0


def is_multimodal(spec: ModelSpec) -> bool:
    """SGLang's ``ModelConfig.is_multimodal`` (``configs/model_config.py:820``): a wrapper with an encoder (the
    spec's ``multimodal`` facts) whose architecture SGLang does not serve text-only by default (Gemma 3 and
    Llama 4 wrappers: ``:691``, unless ``--enable-multimodal``)."""
    return bool(spec.multimodal) and spec.architecture not in MULTIMODAL_DISABLED


def page_size(spec: ModelSpec, given: int | None) -> int:
    """``--page-size``: as given, else 1 (``arg_groups/overrides.py:1341``); DeepSeek DSA always 64
    (``model_overrides/deepseek_v2.py:171``, which overrides a given one too)."""
    if is_dsa(spec):
        return DSA_PAGE_SIZE
    return PAGE_SIZE if given is None else given


# --- bytes per token and per request ---------------------------------------------------------------------------


def kv_element_bytes(kv_dtype) -> int:
    """Bytes per cached element (``torch._utils._element_size(kv_cache_dtype)``: bf16/fp16 2, fp8 1, fp32 4).

    Raises:
        UsageError: a KV dtype SGLang's pools do not take (block-quantized ggml types, int8, nvfp4).
    """
    if kv_dtype.block_elems != 1 or kv_dtype.scale_bytes_per_head or getattr(kv_dtype, "fp4_scaled", False):
        raise UsageError(
            f"--kv-dtype {kv_dtype.name}: SGLang 0.5.23's KV pools take auto, bf16, fp16, fp32, fp8_e4m3 or fp8_e5m2 "
            "(kvplan does not model its fp4 and mxfp8 caches)"
        )
    return kv_dtype.block_bytes


def layer_cell_bytes(layer, kv_dtype, tp: int) -> int:
    """Bytes one token costs in one attention layer on one TP rank, as SGLang's pools store it (0 for others).

    MHA (``pool_configurator.py:492``): ``max(1, H_kv // TP) × (head_dim + v_head_dim) × element``
    (``configs/model_config.py:1700 get_num_kv_heads``). MLA (``:379``, ``kv_cache_configurator.py:3412
    calculate_mla_kv_cache_dim``): ``(kv_lora_rank + qk_rope_head_dim) × element``; with a DSA indexer
    (DeepSeek-V3.2) the fp8_e4m3 row is ``kv_lora_rank + kv_lora_rank // 128 × 4 + qk_rope_head_dim × 2``
    (656 B: fp8 latent, fp32 scales, bf16 rope, ``:3465``) and the index key adds ``index_head_dim +
    index_head_dim // 128 × 4`` uint8 bytes (132, ``pool_configurator.py:560``; ``index_kpool`` 1).
    """
    size = kv_element_bytes(kv_dtype)
    if layer.kind in ("full", "sliding", "chunked"):
        return max(1, layer.num_kv_heads // tp) * (layer.head_dim + layer.v_head_dim) * size
    if layer.kind == "mla" and layer.mla is not None:
        m = layer.mla
        if not m.index_head_dim:
            return m.latent_dim * size
        if kv_dtype.name == "fp8_e4m3":
            row = m.kv_lora_rank + m.kv_lora_rank // DSA_QUANT_BLOCK * 4 + m.qk_rope_head_dim * 2
        else:
            row = m.latent_dim * size
        return row + m.index_head_dim + m.index_head_dim // DSA_QUANT_BLOCK * 4
    return 0


def ssm_dtype_name(spec: ModelSpec, given: str | None) -> str:
    """The SSM (temporal) state dtype (``configs/mamba_utils.py:47 mamba2_state_dtype``): ``--mamba-ssm-dtype``
    (SGLANG_MAMBA_SSM_DTYPE), else config.json's ``mamba_ssm_dtype`` (the spec's state ``ssm_dtype``, where its
    reader read one), else float32.

    Raises:
        UsageError: a ``--mamba-ssm-dtype`` other than float32, bfloat16, float16.
    """
    if given is not None:
        key = _SSM_ALIASES.get(str(given).strip().lower(), str(given).strip().lower())
        if key not in SSM_DTYPES:
            raise UsageError(f"--mamba-ssm-dtype: {given!r}; allowed: {', '.join(SSM_DTYPES)}")
        return key
    for state in spec.states.values():
        if state.ssm_dtype:
            return _SSM_ALIASES.get(state.ssm_dtype, state.ssm_dtype)
    return "float32"


def state_bytes(spec: ModelSpec, layers, tp: int, ssm_dtype: str) -> tuple[int, int]:
    """(conv bytes, SSM bytes) one request's recurrent state takes on one TP rank over ``layers``: SGLang's
    ``mamba_cache_per_req`` (``configs/mamba_utils.py:116``): conv elements × 2 (bf16) + temporal elements ×
    the SSM dtype, per state layer (an attention layer with a parallel Mamba mixer counts too: Falcon-H1). The
    shapes are those of :meth:`kvplan.specs.StateConfig.tensors`, which the fixture's shapes match."""
    conv = ssm = 0
    for i in layers:
        st = spec.layers[i].state
        if st is None:
            continue
        for t in st.tensors(spec.dtype, tp):
            if t.name == "conv":
                conv += t.elements * CONV_DTYPE_BYTES
            else:
                ssm += t.elements * SSM_DTYPES[ssm_dtype]
    return conv, ssm


# --- the arithmetic (xp: Python ints or numpy arrays) -----------------------------------------------------------

OK, NO_KV_MEMORY, NO_STATE_SLOT, NO_TOKEN, SWA_TOO_SMALL, SWA_CAP_NO_ROOM, NO_REQUEST = range(7)


def mamba_split(budget, per_req: int, ratio: float, fixed_slots: int | None, xp=PY):
    """(state slots K, bytes left to the attention pools) for ``budget`` bytes (``_handle_max_mamba_cache``,
    ``kv_cache_configurator.py:3229``), in SGLang's float GiB arithmetic:
    ``K = fixed_slots`` (``--max-mamba-cache-size``, or ``--max-running-requests`` with ``--disable-radix-cache``)
    or ``int((rest × r / (1 + r) × 2^30 − per_req) // per_req)``; then ``rest −= (K + 1) × per_req`` (the
    pool's padding slot) and ``int(rest × 2^30)``. K ≤ 0 or rest ≤ 0: SGLang refuses (:meth:`SglangPlan.refusal`).
    """
    rest = budget / (1 << 30)
    if fixed_slots is not None:
        slots = xp.full(budget, fixed_slots)
    else:
        mamba_bytes = rest * ratio / (1 + ratio) * (1 << 30)
        slots = xp.to_int((mamba_bytes - per_req) // per_req)
    rest = rest - (slots + 1) * per_req / (1 << 30)
    return slots, xp.to_int(rest * (1 << 30)), rest


def pool_split(budget, full_per_token: int, swa_per_token: int, ratio: float = DEFAULT_SWA_FULL_TOKENS_RATIO,
               page: int = PAGE_SIZE, xp=PY) -> tuple:  # fmt: skip
    """(full_layer_tokens, swa_layer_tokens) of ``HybridSWAPoolConfigurator`` (``pool_configurator.py:915``,
    ``:880``): ``cell = F + ratio × W`` (float), ``full = int(budget // cell)`` aligned down to the page,
    ``swa = int(full × ratio)`` aligned down; F and W are bytes per token of all full and all SWA layers."""
    cell = full_per_token + ratio * swa_per_token
    full = xp.to_int(budget // cell) // page * page if cell > 0 else xp.full(budget, 0)
    swa = xp.to_int(full * ratio) // page * page
    return full, swa


def swa_request_cap(max_running_requests: int, win: int, chunked_prefill_size: int, page: int) -> int:
    """SWA tokens of ``SWARequestCapPoolConfigurator`` (``pool_configurator.py:924 compute_swa_request_cap``,
    used with ``--disable-radix-cache`` and ``--max-running-requests``): ``R × (window + 128 + page + page) +
    2 × chunked_prefill_size + page`` (two chunks in flight with the overlap scheduler), aligned up to the page."""
    cap = max(1, max_running_requests) * (win + SWA_EVICTION_INTERVAL + 2 * page) + 2 * chunked_prefill_size + page
    return -(-cap // page) * page


def max_running_requests(tokens, context_len, given: int | None, slots=None, slots_per_request: int = 1, xp=PY):
    """``resolve_max_num_reqs`` (``kv_cache_configurator.py:3119``): ``min(given, tokens // 2)`` for a given
    ``--max-running-requests``, else ``min(clamp(int(tokens / context_len × 512), 2048, 4096), tokens // 2)``;
    hybrids then at most ``slots // slots_per_request`` (the Mamba cap)."""
    if given is not None:
        r = xp.minimum(xp.full(tokens, max(1, given)), tokens // 2)
    else:
        est = xp.to_int(tokens / context_len * 512)
        r = xp.minimum(xp.maximum(xp.minimum(est, 4096), 2048), tokens // 2)
    if slots is not None:
        r = xp.minimum(r, slots // slots_per_request)
    return r


def per_worker(given: int | None, attn_dp: int) -> int | None:
    """One attention-DP group's share of the replica's ``--max-running-requests``: ``max(1, given //
    attn_dp_size)`` (``kv_cache_configurator.py:3128 resolve_max_num_reqs``, ``pool_configurator.py:956``); None
    when not given (SGLang's default, :func:`max_running_requests`, is per group and is not divided)."""
    return None if given is None else max(1, given // attn_dp)


def request_table_bytes(max_running: int, context_len: int) -> int:
    """Bytes of SGLang's ``req_to_token`` table, allocated after the KV pools (outside their budget):
    ``int32[(max_running_requests + 1), context_len + 4]`` (``kv_cache_configurator.py:1571``,
    ``mem_cache/allocation_sizing.py:105``)."""
    return (max_running + 1) * (context_len + REQ_TO_TOKEN_EXTRA) * REQ_TO_TOKEN_BYTES


def log_line(full_tokens: int, swa_tokens: int) -> str:
    """SGLang's start-up line for the SWA split (``pool_configurator.py _solve_pool_sizes``)."""
    return f"Use sliding window memory pool. full_layer_tokens={full_tokens}, swa_layer_tokens={swa_tokens}"


def mamba_log_line(slots: int, conv: int, ssm: int) -> str:
    """SGLang's line for the state pool (``mem_cache/memory_pool.py:1005``): the pool holds ``slots + 1``."""
    return (
        f"Mamba Cache is allocated. max_mamba_cache_size: {slots}, conv_state size: {(slots + 1) * conv / GIB:.2f}GB, "
        f"ssm_state size: {(slots + 1) * ssm / GIB:.2f}GB"
    )


# --- the plan ---------------------------------------------------------------------------------------------------


@dataclass(frozen=True, eq=False)
class SglangPlan(CachePlan):
    """SGLang's pools for one model on one GPU: one token pool (``default``), or a full and an SWA pool
    (``swa``: the ratio split; ``swa_cap``: the SWA pool sized from ``--max-running-requests``), and for a
    hybrid a pool of state slots. A request of S tokens takes S tokens (whole pages) of the full pool, at most
    ``window + 128 + 2 × page`` of the SWA pool (``compute_swa_request_cap``'s per-request worst case) and
    ``slots_per_request`` state slots (5, SGLang's own ratio: its slot, two tracking slots and the prefix cache's;
    1 with ``--disable-radix-cache``). The running requests are capped at :meth:`request_cap`.

    Attributes:
        kind: ``default``, ``swa`` or ``swa_cap``.
        cell: bytes per token of the one pool (``default``).
        full_per_token, swa_per_token: bytes per token of all full and all SWA layers (``swa``, ``swa_cap``).
        window: the SWA window (:func:`window`).
        ratio: ``--swa-full-tokens-ratio``.
        swa_cap_tokens: the SWA pool of ``swa_cap``.
        page: ``--page-size``.
        conv_bytes, ssm_bytes: one request's state (0 without states).
        mamba_ratio, fixed_slots: ``--mamba-full-memory-ratio``; the slots set by a flag, or None.
        slots_per_request: state slots a running request takes.
        max_total_tokens: ``--max-total-tokens``, or None.
        max_running, max_running_given: ``--max-running-requests`` per attention-DP group (:func:`per_worker`) and
            as given for the replica, or None.
        attn_dp: attention-DP groups of the replica (``--attn-dp-size``); the pools are one group's.
        context_len: max_model_len (the request table's width; the pool of a model without attention layers).
    """

    kind: str = "default"
    cell: int = 0
    full_per_token: int = 0
    swa_per_token: int = 0
    window: int = 0
    ratio: float = DEFAULT_SWA_FULL_TOKENS_RATIO
    swa_cap_tokens: int = 0
    page: int = PAGE_SIZE
    conv_bytes: int = 0
    ssm_bytes: int = 0
    mamba_ratio: float = DEFAULT_MAMBA_FULL_MEMORY_RATIO
    fixed_slots: int | None = None
    slots_per_request: int = MAMBA_SLOTS_PER_REQUEST
    max_total_tokens: int | None = None
    max_running: int | None = None
    max_running_given: int | None = None
    attn_dp: int = 1
    context_len: int = 0
    stage_num_layers: int = 0
    extras: dict = field(default_factory=dict)

    # --- shapes ---

    @property
    def state_per_request(self) -> int:
        """SGLang's ``mamba_cache_per_req`` (conv + SSM), bytes; 0 without states."""
        return self.conv_bytes + self.ssm_bytes

    @property
    def hybrid_swa(self) -> bool:
        return self.kind != "default"

    @property
    def block_size(self) -> int:  # type: ignore[override]
        return self.page

    @property
    def kv_bytes_per_token(self) -> int:  # type: ignore[override]
        return self.cell if self.kind == "default" else self.full_per_token + self.swa_per_token

    @property
    def kv_bytes_per_block(self) -> int:  # type: ignore[override]
        return self.page * self.kv_bytes_per_token

    @property
    def pool_names(self) -> tuple:  # type: ignore[override]
        names = ("full tokens",) if self.kind == "default" else ("full tokens", "swa tokens")
        return (*names, "mamba slots") if self.state_per_request else names

    @property
    def unit_bytes(self) -> tuple:  # type: ignore[override]
        units = (self.cell,) if self.kind == "default" else (self.full_per_token, self.swa_per_token)
        return (*units, self.state_per_request) if self.state_per_request else units

    # --- SGLang's start-up arithmetic ---

    def solve(self, budget, xp=PY) -> dict:
        """SGLang's pool sizes for ``budget`` bytes (an int or an array): ``full``, ``swa`` tokens, state
        ``slots``, ``running`` (max_running_requests at :attr:`context_len`), ``code`` (:data:`OK` or why SGLang
        refuses) and the figures the refusal names."""
        page = self.page
        per_req = self.state_per_request
        zero = xp.full(budget, 0)
        code = zero
        avail = budget
        slots = zero
        rest = None
        if per_req:
            slots, avail, rest = mamba_split(budget, per_req, self.mamba_ratio, self.fixed_slots, xp)
            code = xp.where(slots <= 0, NO_STATE_SLOT, xp.where(rest <= 0, NO_KV_MEMORY, code))
        if self.kind == "default":
            if self.cell:
                full = avail // self.cell // page * page
            else:  # no attention layer: DefaultPoolConfigurator._zero_kv_max_tokens
                full = xp.full(budget, self.max_total_tokens or self.context_len)
            swa = zero
        elif self.kind == "swa":
            full, swa = pool_split(avail, self.full_per_token, self.swa_per_token, self.ratio, page, xp)
            code = xp.where((code == OK) & (self.window + page >= swa), SWA_TOO_SMALL, code)
        else:
            swa = xp.full(budget, self.swa_cap_tokens)
            full = (avail - self.swa_cap_tokens * self.swa_per_token) // self.full_per_token // page * page
            code = xp.where((code == OK) & (full <= 0), SWA_CAP_NO_ROOM, code)
        first_full, first_swa = full, swa
        if self.max_total_tokens is not None:  # _apply_token_constraints, then calculate_pool_sizes_from_max_tokens
            t = self.max_total_tokens
            capped = t < full
            if self.kind == "swa":
                swa = xp.where(capped, xp.to_int(t // page * page * self.ratio) // page * page, swa)
            elif self.kind == "swa_cap":
                swa = xp.where(capped, min(self.swa_cap_tokens, t), swa)
            full = xp.where(capped, t // page * page, full)
            if self.kind == "swa":
                code = xp.where((code == OK) & (self.window + page >= swa), SWA_TOO_SMALL, code)
        code = xp.where((code == OK) & (full <= 0), NO_TOKEN, code)
        running = max_running_requests(full, self.context_len, self.max_running,
                                       slots if per_req else None, self.slots_per_request, xp)  # fmt: skip
        if per_req:
            code = xp.where((code == OK) & (running <= 0), NO_REQUEST, code)
        ok = code == OK
        return dict(
            full=xp.where(ok, full, 0), swa=xp.where(ok, swa, 0), slots=xp.where(ok, slots, 0),
            running=xp.where(ok, running, 0), code=code, raw_full=full, raw_swa=swa, first_full=first_full,
            first_swa=first_swa, raw_slots=slots, rest=rest, avail=avail, raw_running=running,
        )  # fmt: skip

    def pools(self, budget, xp=PY) -> tuple:
        s = self.solve(budget, xp)
        caps = (s["full"],) if self.kind == "default" else (s["full"], s["swa"])
        return (*caps, s["slots"]) if self.state_per_request else caps

    def request_cap(self, budget, seq, xp=PY):
        """max_running_requests (:func:`max_running_requests`) for ``budget`` and a context of ``seq`` tokens;
        0 where SGLang refuses to start."""
        s = self.solve(budget, xp)
        per_req = self.state_per_request
        r = max_running_requests(s["raw_full"], seq, self.max_running, s["raw_slots"] if per_req else None,
                                 self.slots_per_request, xp)  # fmt: skip
        return xp.where(s["code"] == OK, r, 0)

    def demand(self, tokens, xp=PY) -> tuple:
        full = xp.cdiv(tokens, self.page) * self.page
        out = (full,)
        if self.kind != "default":
            out = (full, xp.minimum(full, self.window + SWA_EVICTION_INTERVAL + 2 * self.page))
        return (*out, xp.full(tokens, self.slots_per_request)) if self.state_per_request else out

    def prefix(self, tokens: int, xp=PY) -> tuple:
        shared = (tokens // self.page) * self.page
        return (shared,) + (0,) * (len(self.pool_names) - 1)

    def measures(self, budget, seq, shared_prefix: int = 0, xp=PY) -> dict:
        """The figures of :meth:`CachePlan.measures`, and ``profiled_full`` / ``profiled_swa``: the split before
        ``--max-total-tokens`` re-sized it (SGLang logs both)."""
        s = self.solve(budget, xp)
        caps = (s["full"],) if self.kind == "default" else (s["full"], s["swa"])
        caps = (*caps, s["slots"]) if self.state_per_request else caps
        need = self.demand(seq, xp)
        pooled = need[:2] if self.hybrid_swa else need[:1]
        per_request = sum(n * u for n, u in zip(pooled, self.unit_bytes, strict=False))
        concurrency = None
        for cap, d in zip(caps, need, strict=True):
            c = cap / xp.maximum(d, 1)
            concurrency = c if concurrency is None else xp.minimum(concurrency, c)
        return dict(
            num_blocks=caps[0] // self.page,
            kv_bytes_per_request=per_request + self.state_per_request,
            kv_capacity_tokens=caps[0],
            max_concurrency=concurrency,
            block_size=self.page,
            profiled_full=s["first_full"],
            profiled_swa=s["first_swa"],
        )

    def fit_fields(self) -> dict:
        return dict(self.extras)

    def search_limit(self, caps: tuple, xp=PY):
        return caps[0] + 1  # S full tokens

    def log_line(self, measures: dict, seq: int, pools: tuple) -> str:
        """SGLang's lines for these pools, "; "-joined: the SWA split (``HybridSWAPoolConfigurator`` logs it, the
        request-cap one does not; twice when --max-total-tokens re-sizes it), then the state pool."""
        lines = []
        if self.kind == "swa" and pools[0]:
            first = (measures.get("profiled_full"), measures.get("profiled_swa"))
            if first[0] is not None and first[0] != pools[0]:
                lines.append(log_line(*first))
            lines.append(log_line(pools[0], pools[1]))
        if self.state_per_request and pools[-1]:
            lines.append(mamba_log_line(pools[-1], self.conv_bytes, self.ssm_bytes))
        return "; ".join(lines)

    # --- what fit prints ---

    def refusal(self, budget) -> str:
        """Why SGLang refuses to start with ``budget`` bytes for its pools (its own message, quoted), or ""."""
        s = self.solve(budget)
        code = s["code"]
        gib = budget / GIB
        if code == OK:
            return ""
        if code == NO_STATE_SLOT:
            return (
                f"SGLang refuses to start: the hybrid state cache gets {s['raw_slots']} slots of "
                f"{self.state_per_request / MIB:.2f} MiB out of {gib:.2f} GiB (\"Not enough GPU memory for hybrid "
                "(mamba/linear-attention) state cache\", kv_cache_configurator.py:3394)"
            )
        if code == NO_KV_MEMORY:
            pool = (s["raw_slots"] + 1) * self.state_per_request / GIB
            return (
                f"SGLang refuses to start: {s['raw_slots']} state slots (+1 padding) take {pool:.2f} GiB of the "
                f"{gib:.2f} GiB, leaving nothing for the KV cache (\"Loaded weights leave no GPU memory for the KV "
                "cache\", kv_cache_configurator.py:3043); lower --max-mamba-cache-size / --max-running-requests"
            )
        if code == SWA_TOO_SMALL:
            swa = s["first_swa"] if self.window + self.page >= s["first_swa"] else s["raw_swa"]
            return (
                f"SGLang refuses to start: the SWA pool ({swa} tokens) cannot hold even one request: the prefill "
                f"admission floor is sliding_window_size ({self.window}) + page_size ({self.page}) "
                "(pool_configurator.py:210); raise --swa-full-tokens-ratio or the KV budget"
            )
        if code == SWA_CAP_NO_ROOM:
            swa_gib = self.swa_cap_tokens * self.swa_per_token / GIB
            given = f"--max-running-requests {self.max_running_given}"
            if self.attn_dp > 1:
                given += f" // attn_dp_size {self.attn_dp}"
            return (
                f"SGLang refuses to start: the SWA pool cap ({self.swa_cap_tokens} tokens, {swa_gib:.2f} GiB, sized "
                f"for {self.max_running} running requests, {given}, with --disable-radix-cache) leaves no room for the "
                f"full KV pool within {s['avail'] / GIB:.2f} GiB (pool_configurator.py:1010); "
                "lower --max-running-requests"
            )
        if code == NO_TOKEN:
            return (
                "SGLang refuses to start: the KV budget holds no token (\"Not enough memory\", pool_configurator.py:96)"
            )
        return (
            f"SGLang refuses to start: the hybrid state cache of {s['raw_slots']} slots serves "
            f"{s['raw_slots']} // {self.slots_per_request} = 0 requests (\"Hybrid (mamba/linear-attention) state "
            "cache is too small to serve any requests\", kv_cache_configurator.py:3152); raise "
            "--mamba-full-memory-ratio or --max-mamba-cache-size, or --mamba-ssm-dtype bfloat16"
        )

    def budget_fields(self, budget, seq: int) -> dict:
        """The FitResult fields that depend on the budget: SGLang's resolved settings and the request table."""
        s = self.solve(budget)
        running = s["running"]
        slots = s["slots"]
        per_req = self.state_per_request
        if self.max_running is not None:
            bound = f"--max-running-requests {self.max_running_given}"
            if self.attn_dp > 1:
                bound += f" // attn_dp_size {self.attn_dp} = {self.max_running} per DP group"
        else:
            bound = "clamp(int(tokens / context_len × 512), 2048, 4096)"
            if self.attn_dp > 1:
                bound += " per DP group"
        if s["code"] == OK:
            if per_req and running == slots // self.slots_per_request and running < s["full"] // 2:
                bound = f"the Mamba state cache: {slots} slots // {self.slots_per_request} per request"
            elif running == s["full"] // 2 and running != self.max_running:
                bound = f"tokens // 2 = {s['full']:,} // 2"
        details = dict(self.extras.get("engine_settings", {}))
        details.update(
            max_running_requests=running,
            max_running_requests_bound=bound,
            full_tokens=s["full"],
        )
        if self.hybrid_swa:
            details.update(swa_tokens=s["swa"], swa_window=self.window,
                           swa_pool="request cap" if self.kind == "swa_cap" else "ratio")  # fmt: skip
        if per_req:
            details.update(
                mamba_slots=slots, mamba_slots_per_request=self.slots_per_request,
                mamba_state_bytes_per_request=per_req, mamba_pool_bytes=(slots + 1) * per_req if slots else 0,
            )  # fmt: skip
        table = request_table_bytes(running, seq) if s["code"] == OK else 0
        details["req_to_token_bytes"] = table
        if s["code"] == OK:  # the longest request the scheduler admits (managers/tp_worker.py:568 get_worker_info)
            details["max_req_len"] = min(seq, s["full"]) - 1
        return dict(engine_settings=details, request_table_bytes=table, engine_refusal=self.refusal(budget))


# --- mem_fraction_static -------------------------------------------------------------------------------------


def smi_total_mib(gpu) -> int:
    """The probe SGLang sizes its defaults by: nvidia-smi's (rocm-smi's) total, MiB (``utils/common.py:802
    get_device_memory_capacity``); for a GPU given by size, that size (kvplan's CUDA-visible total)."""
    return gpu.smi_total_mib if gpu.smi_total_bytes is not None else gpu.cuda_total_bytes // MIB


def chunked_prefill_default(gpu_mem: int) -> int:
    """``chunked_prefill_size`` by GPU memory (``memory_hook.py:90-170``): < 20 GiB 2048, < 60 GiB 4096,
    < 160 GiB 8192, else 16384."""
    if gpu_mem < 20 * 1024:
        return 2048
    if gpu_mem < 60 * 1024:
        return 4096
    if gpu_mem < 160 * 1024:
        return 8192
    return 16384


def decode_graph_max_bs(gpu_mem: int, tp: int, max_running: int | None) -> int:
    """The decode CUDA graph's largest batch (``memory_hook.py:90-188``): 8 below 20 GiB; 48 (TP < 4) or 160
    below 35 GiB; 32 or 160 below 60 GiB; 256 or 512 below 160 GiB; 512 above; at most
    ``--max-running-requests``."""
    if gpu_mem < 20 * 1024:
        bs = 8
    elif gpu_mem < 35 * 1024:
        bs = 48 if tp < 4 else 160
    elif gpu_mem < 60 * 1024:
        bs = 32 if tp < 4 else 160
    elif gpu_mem < 160 * 1024:
        bs = 256 if tp < 4 else 512
    else:
        bs = 512
    return bs if max_running is None else min(bs, max_running)


def prefill_graph_sizes(max_bs: int) -> list[int]:
    """The prefill CUDA graph's token buckets up to ``max_bs`` (``arg_groups/cuda_graph_hook.py:480``)."""
    sizes = [*range(4, 33, 4), *range(48, 257, 16), *range(288, 513, 32), *range(576, 1025, 64),
             *range(1280, 4097, 256), *range(4608, max_bs + 1, 512)]  # fmt: skip
    return [s for s in sizes if s <= max_bs]


def vlm_factor(spec: ModelSpec) -> float:
    """``adjust_mem_fraction_for_vlm`` (``memory_hook.py:417``): ``0.95 × clamp(1 − 0.1 × (L × H² / (24 ×
    1024²) − 1), 0.8, 1.05)`` of the vision encoder's ``num_hidden_layers`` (24 when the config names it
    otherwise, Qwen's ``depth``) and ``hidden_size`` (1024)."""
    mm = spec.multimodal
    layers = mm.get("vision_num_hidden_layers") or 24
    hidden = mm.get("vision_hidden_size") or 1024
    ratio = layers * hidden**2 / (24 * 1024**2)
    return 0.95 * max(0.8, min(1.05, 1.0 - 0.1 * (ratio - 1.0)))


def attention_backend(spec: ModelSpec, gpu, tp: int) -> str:
    """The default attention backend where it changes the memory fraction (``arg_groups/model_override_base.py
    :300``): on ROCm ``aiter`` (MLA: only with 16 or 128 heads per rank, else ``triton``); on CUDA ``fa3``
    (Hopper; kvplan takes every NVIDIA GPU so)."""
    if gpu.vendor != "amd":
        return "fa3"
    if is_mla(spec):
        return "aiter" if max(1, spec.num_q_heads // tp) in (16, 128) else "triton"
    return "aiter"


def mem_fraction_static_default(
    spec: ModelSpec, gpu, opts: FitOptions, chunked: int, max_len: int
) -> tuple[float, str]:
    """(mem_fraction_static, how it was resolved) when not given (``memory_hook.py:281``)::

        reserved = 512 + 1.5 × max(chunked_prefill_size, 2048) + TP × PP / 8 × 1024 + graphs      (MiB)
        graphs   = 2 × decode max_bs  [decode graph]
                 + 3 × decode max_bs × D  (+ 1.5 × decode max_bs × D when max_bs > 300)  [DP attention, D groups]
                 + 8 × prefill buckets (MLA: 1536)  [prefill graph]
        reserved = max(reserved, 10240) on GPUs above 60 GiB
        mfs      = round((gpu_mem − reserved) / gpu_mem, 3)
                   × vlm_factor (multimodal)  × 0.85 (aiter backend, context > 8192)

    The decode graph is off with ``--disable-cuda-graph``; the prefill graph (``breakable`` on CUDA) also on
    ROCm, with PP > 1, for multimodal models outside SGLang's list, and for Kimi-Linear's KDA
    (``cuda_graph_hook.py:150-240``). The DP-attention padding (``memory_hook.py:361 reserve_for_graph_mb``) is
    reserved with the decode graph off too, and ``chunked_prefill_size`` here is the whole replica's: SGLang
    divides it by D only afterwards (``parallel_hook.py:325 handle_data_parallelism``, which runs after
    ``handle_gpu_memory_settings``). The 0.85 is ``arg_groups/attention_hook.py:268``. SGLang does not clamp
    the result (below 0 on 24 GB cards with ``--chunked-prefill-size 16384``).
    """
    gpu_mem = smi_total_mib(gpu)
    tp, pp = opts.tensor_parallel_size, opts.pipeline_parallel_size
    mla = is_mla(spec)
    mm = is_multimodal(spec)
    eager = opts.enforce_eager
    decode_bs = decode_graph_max_bs(gpu_mem, tp, opts.max_num_seqs)
    mm_off = mm and spec.architecture not in MULTIMODAL_PREFILL_GRAPH
    prefill_graph = not (eager or gpu.vendor == "amd" or pp > 1 or mm_off or spec.architecture in KDA_ARCHITECTURES)
    graphs = 0.0 if eager else decode_bs * 2
    dp = opts.data_parallel_size
    if dp > 1:  # attention DP: padding for the DP gather, more above a decode batch of 300
        graphs += decode_bs * dp * 3
        if decode_bs > 300:
            graphs += decode_bs * dp * 1.5
    if prefill_graph:
        max_bs = min(8192, chunked) if mla else chunked
        if opts.max_total_tokens is not None:
            max_bs = min(max_bs, opts.max_total_tokens)
        if "llama-2" in (spec.hf_repo or spec.name).lower():
            max_bs = min(max_bs, 4096)
        graphs += 1.5 * 1024 if mla else len(prefill_graph_sizes(max_bs)) * 8
    reserved = 512 + max(chunked, 2048) * 1.5 + tp * pp / 8 * 1024 + graphs
    if gpu_mem > 60 * 1024:
        reserved = max(reserved, 10 * 1024)
    mfs = round((gpu_mem - reserved) / gpu_mem, 3)
    how = f"round(({gpu_mem} MiB − {reserved:g} MiB reserved) / {gpu_mem} MiB, 3)"
    if mm:
        mfs = mfs * vlm_factor(spec)
        how += " × the VLM factor"
    if attention_backend(spec, gpu, tp) == "aiter" and max_len > 8192:
        mfs = mfs * 0.85
        how += " × 0.85 (aiter, context > 8192)"
    return mfs, how


# --- the engine -------------------------------------------------------------------------------------------------


# --- parallelism and load-time checks ---------------------------------------------------------------


def parallel(spec: ModelSpec, opts: FitOptions) -> Parallel:
    """SGLang 0.5.23's layout of one replica: ``--tp T`` GPUs per stage. ``--attn-dp-size D`` (the deprecated
    ``--dp-size D --enable-dp-attention``, ``arg_groups/parallel_hook.py handle_deprecated_dp_attention``)
    splits them into D attention groups of ``T / D`` GPUs (``runtime_context.py derive_attn_tp_size``), each
    with its own scheduler and KV pool; ``--ep-size E`` splits the routed experts over E GPUs, each expert
    TP-sliced over ``T / E`` (``derive_parallel_widths``: ``moe_tp_size = tp_size // moe_ep_size``).

    Raises:
        UsageError: SGLang's own refusals: ``tp_size % attn_dp_size`` (``parallel_hook.py``: "assert
            cfg.tp_size % cfg.attn_dp_size == 0"), ``tp_size`` not divisible by ``ep_size``
            (``model_runner_components/moe_ep_setup.py``), routed experts not divisible by it
            (``layers/moe/fused_moe_triton/layer.py``: "assert self._num_global_routed % storage_ep_size == 0");
            expert parallelism for a model without moe facts.
    """
    check_int("--data-parallel-size", opts.data_parallel_size)
    check_int("--ep-size", opts.expert_parallel_size)
    tp, dp, pp = opts.tensor_parallel_size, opts.data_parallel_size, opts.pipeline_parallel_size
    if tp % dp:
        raise UsageError(
            f"--attn-dp-size {dp}: SGLang runs attention DP inside the TP group, so --tp ({tp}) must be a multiple of "
            "it (arg_groups/parallel_hook.py: tp_size % attn_dp_size == 0)"
        )
    ep = opts.expert_parallel_size or (tp if opts.enable_expert_parallel else 1)
    if ep > 1 and spec.moe is None:
        raise UsageError(
            f"--ep-size {ep}: {spec.name} has no moe facts (a dense model, or a spec without a moe block), so "
            "there are no routed experts to split"
        )
    if tp % ep:
        raise UsageError(f"--ep-size: tp_size {tp} must be divisible by ep_size {ep} (SGLang moe_ep_setup.py)")
    if ep > 1 and spec.moe.num_experts % ep:
        raise UsageError(
            f"--ep-size {ep}: SGLang needs the {spec.moe.num_experts} routed experts of {spec.name} divisible by "
            "the EP size (layers/moe/fused_moe_triton/layer.py: _num_global_routed % ep_size == 0)"
        )
    flags = parallel_flags(("--tp", tp), ("--pp", pp), ("--attn-dp-size", dp), ("--ep-size", ep))
    return Parallel(tp // dp, dp, pp, ep, tp // ep, flags)


def fp8_moe_check(spec: ModelSpec, tp: int, ep: int) -> None:
    """SGLang 0.5.23's check of a block-quantized MoE checkpoint (``model_runner_components/moe_ep_setup.py
    check_quantized_moe_compatibility``, called at start-up from ``model_runner.py``): with ``moe_tp = tp //
    ep``, ``moe_intermediate_size`` must divide by moe_tp and its slice by ``block_n``.

    Raises:
        UsageError: SGLang's message.
    """
    block, width = spec.weight_block_size, spec.moe_intermediate_size
    if block is None or width is None:
        return
    moe_tp = tp // ep
    if width % moe_tp:
        engine = (
            f"moe_intermediate_size {width} must be divisible by moe_tp_size ({moe_tp}) which is tp_size ({tp}) "
            f"divided by moe_ep_size ({ep})."
        )
    elif (width // moe_tp) % block[0]:
        engine = (
            f"For quantized MoE models, please make sure (moe_intermediate_size={width} / moe_tp_size={moe_tp}) % "
            f"weight_block_size_n={block[0]} == 0 where moe_tp_size is equal to tp_size ({tp}) divided by ep_size "
            f"({ep}). You can fix this by setting arguments `--tp` and `--ep` correctly."
        )
    else:
        return
    raise LoadRefused(f"--tp: SGLang refuses to load {spec.name} at TP {tp}, EP {ep}: \"{engine}\"")


class SglangEngine(EngineRules):
    """SGLang 0.5.23 (see the module docstring): ``mem_fraction_static`` of the memory available at start holds
    the weights and the pools, resolved per GPU; one token pool, SWA pools for the hybrid-SWA architectures,
    a state pool for hybrids; max_running_requests caps the running requests."""

    engine = Engine.sglang
    display_name = "SGLang"
    unplanned_kinds = {
        "compressed": "SGLang 0.5.23 serves DeepSeek-V4 (srt/models/deepseek_v4.py) with pools kvplan does not model",
        "rglru": "SGLang 0.5.23 has no RecurrentGemma model (srt/models/ has none)",
        "rwkv4": "SGLang 0.5.23 has no RWKV model (srt/models/ has none)",
        "mlstm": "SGLang 0.5.23 has no xLSTM model (srt/models/ has none)",
        "cca": "SGLang 0.5.23 serves ZAYA (srt/models/zaya.py) with its CCA conv and value state in the MambaPool, "
        "which kvplan does not model yet",
        "sconv": "SGLang 0.5.23 serves Inkling (srt/models/inkling.py) with its short-conv states in a pool kvplan "
        "does not model yet",
        "hidden": "SGLang 0.5.23 has no XLNet or Reformer model (srt/models/ has none)",
        "prefix_tokens": "SGLang 0.5.23 has no CPM-Ant model (srt/models/ has none)",
    }
    # srt/arg_groups/fields/model.py (0.5.23) kv_cache_dtype choices: auto, fp8_e5m2, fp8_e4m3, mxfp8, bf16,
    # bfloat16, nvfp4, fp4_mx_block16 (kvplan does not model the mxfp8 and fp4 caches); with auto the cache is the
    # model dtype (--dtype choices half, float16, bfloat16, float, float32)
    kv_cache_dtypes = {
        "bf16": "bf16", "bfloat16": "bf16", "float16": "fp16", "float32": "fp32", "fp8_e4m3": "fp8_e4m3",
        "fp8_e5m2": "fp8_e5m2",
    }  # fmt: skip
    kv_cache_dtypes_source = (
        "SGLang 0.5.23 --kv-cache-dtype choices, srt/arg_groups/fields/model.py, float16/float32 through --dtype; "
        "kvplan does not model its mxfp8, nvfp4 and fp4_mx_block16 caches"
    )
    block_size = PAGE_SIZE
    utilization = 0.88  # not used: mem_fraction_static_default resolves it
    max_num_batched_tokens = 8192
    request_cap_name = "max_running_requests"
    # configs/model_config.py:1700 get_num_kv_heads(attn_tp_size), called by pool_configurator.py:494 for the MHA
    # cell; pool_configurator.py:379 the MLA cell (kv_lora_rank + qk_rope_head_dim, calculate_mla_kv_cache_dim),
    # not divided by the attention TP
    kv_split_source = (
        "SGLang ModelConfig.get_num_kv_heads(attn_tp_size), configs/model_config.py:1700",
        "SGLang MLA pool: kv_lora_rank + qk_rope_head_dim per token on every rank, pool_configurator.py:379",
    )
    settings_depend_on_seq = True  # mem_fraction_static × 0.85 on ROCm above 8,192 tokens of context

    def resolve_rules(self, version: str | None) -> SglangRules:
        return resolve_rules(version)

    def older_than_oldest(self, version: str | None) -> bool:
        return older_than_oldest(version)

    def settings(self, spec: ModelSpec, gpu, opts: FitOptions) -> Settings:
        """Defaults resolved as SGLang resolves them: the page (:func:`page_size`), ``chunked_prefill_size``
        (``--max-num-batched-tokens``; :func:`chunked_prefill_default`) and ``mem_fraction_static``
        (:func:`mem_fraction_static_default`). With attention DP (``--attn-dp-size D``, ``opts.data_parallel_size``)
        each group prefills ``chunked_prefill_size // D`` tokens a step (``parallel_hook.py:325
        handle_data_parallelism``: "DP attention is enabled. chunked prefill size is adjusted from 8192 to 4096"),
        after mem_fraction_static was resolved from the undivided size. ``max_num_seqs`` stays None: the cap
        depends on the pools (:meth:`SglangPlan.request_cap`).

        Raises:
            UsageError: a fraction outside (0, 1], a ratio or count out of range.
        """
        rules = resolve_rules(opts.engine_version)
        util, _, _, max_batch = self.common_settings(opts)
        gpu_mem = smi_total_mib(gpu)
        chunked = opts.max_num_batched_tokens
        if chunked is None:
            chunked = chunked_prefill_default(gpu_mem)
        max_len = spec.max_model_len if opts.max_model_len is None else opts.max_model_len
        if opts.gpu_memory_utilization is None:
            util, how = mem_fraction_static_default(spec, gpu, opts, chunked, max_len)
        else:
            how = "--mem-fraction-static"
        page = page_size(spec, opts.block_size)
        dp = opts.data_parallel_size
        extra = dict(page_size=page, chunked_prefill_size=chunked // dp, mem_fraction_static_source=how,
                     smi_total_mib=gpu_mem, multimodal=is_multimodal(spec))  # fmt: skip
        if dp > 1:
            extra["chunked_prefill_source"] = f"{chunked:,} // attn_dp_size {dp}"
        return Settings(rules, util, page, chunked // dp, max_batch, None, extra)

    def settings_key(self, spec: ModelSpec, gpu, opts: FitOptions) -> tuple:
        s = self.settings(spec, gpu, opts)
        return (s.utilization, s.max_num_batched_tokens, s.block_size, s.extra["multimodal"])

    def check(self, spec: ModelSpec, opts: FitOptions, settings: Settings) -> None:
        """As :meth:`EngineRules.check`, and SGLang's own flags in range."""
        super().check(spec, opts, settings)
        for flag, value in (("--max-mamba-cache-size", opts.max_mamba_cache_size),
                            ("--max-total-tokens", opts.max_total_tokens)):  # fmt: skip
            check_int(flag, value)
        r = opts.swa_full_tokens_ratio
        if r is not None and (isinstance(r, bool) or not isinstance(r, (int, float)) or not 0 < r <= 1):
            raise UsageError(f"--swa-full-tokens-ratio: {r} must be in (0, 1] (SWA tokens per full-layer token)")
        m = opts.mamba_full_memory_ratio
        if m is not None and (isinstance(m, bool) or not isinstance(m, (int, float)) or not 0 < m <= 1000):
            raise UsageError(
                f"--mamba-full-memory-ratio: {m} must be a number in (0, 1000] (state memory per KV memory)"
            )
        ssm_dtype_name(spec, opts.mamba_ssm_dtype)

    def overhead_bytes(self, spec: ModelSpec, settings: Settings, tp: int, pp: int) -> int:
        """Memory gone before SGLang measures what it may use: the CUDA context and, with several GPUs,
        torch.distributed's start-up ("Init torch distributed ends. mem usage=0.13 GB"): 0.3 GiB on one GPU,
        0.5 GiB with TP × PP > 1 (modelled, calibrated on the corpus logs)."""
        return 3 * GIB // 10 if tp * pp == 1 else GIB // 2

    def parallel(self, spec: ModelSpec, opts: FitOptions) -> Parallel:
        return parallel(spec, opts)

    def layouts(self, spec: ModelSpec, tps: list[int], pps: list[int]) -> list[dict]:
        """TP × PP; for a model with moe facts also ``--ep-size`` = TP and, with it, ``--attn-dp-size`` = TP
        (SGLang's DeepSeek / Qwen-MoE deployments: ``--tp 8 --ep-size 8 --enable-dp-attention --dp-size 8``)."""
        out = super().layouts(spec, tps, pps)
        if spec.moe is None:
            return out
        for p in pps:
            for t in tps:
                if t == 1 or p > spec.num_layers or spec.moe.num_experts % t:
                    continue
                out.append(dict(tensor_parallel_size=t, pipeline_parallel_size=p, expert_parallel_size=t))
                out.append(dict(tensor_parallel_size=t, pipeline_parallel_size=p, expert_parallel_size=t,
                                data_parallel_size=t))  # fmt: skip
        return out

    def load_check(self, spec: ModelSpec, opts: FitOptions, par: Parallel) -> list[str]:
        """Block-quantized checkpoints as they ship: :func:`fp8_moe_check` and the row-parallel linear check
        (:func:`kvplan.engines.base.fp8_dense_checks`, SGLang ``layers/quantization/fp8_utils.py
        validate_fp8_block_shape``) at the attention TP."""
        if not shipped_block_quantized(spec, opts):
            return []
        fp8_dense_checks(spec, par.attn_tp, "SGLang", "layers/quantization/fp8_utils.py validate_fp8_block_shape")
        fp8_moe_check(spec, par.gpus_per_stage, par.ep)
        return []

    def served_length(self, spec: ModelSpec, opts: FitOptions, cache: SglangPlan, budget: int, max_len: int):
        """SGLang starts with a KV pool that holds fewer tokens than its context_len, warning so, and caps every
        request at ``max_req_len = min(context_len − 1, pool tokens − 1)`` (``managers/tp_worker.py:558
        get_worker_info``; the pool: the full-layer pool of a hybrid-SWA model, ``model_runner.py:1495``). Without
        ``--max-model-len`` (SGLang's ``--context-length``) kvplan plans what it serves: requests of max_req_len
        tokens, with its warning; a given length is kept (the plan then says none of that length fits, and
        :meth:`does_not_fit_what` what SGLang would serve)."""
        if opts.max_model_len is not None:
            return max_len, ""
        s = cache.solve(budget)
        pool = s["full"]
        if s["code"] != OK or pool >= max_len or pool < 2:
            return max_len, ""
        return pool - 1, (
            f'SGLang starts with "KV pool holds {pool} tokens, fewer than --context-length {max_len}" '
            f"(managers/tp_worker.py:558) and serves requests up to max_req_len {pool - 1:,} tokens: planned at that "
            "length (--max-model-len to plan another)"
        )

    def does_not_fit_what(self, result) -> str | None:
        """With more than one pool (a state pool, an SWA pool) the full-layer pool gets only part of the KV budget:
        what does not fit is a request's tokens against that pool, and what the other pools took (kvplan's default,
        a request's bytes against the whole budget, would read as if it fitted). None otherwise, or when SGLang
        refuses to start (:meth:`SglangPlan.refusal` says why)."""
        from kvplan.units import fmt_gib

        es = result.engine_settings
        pools = {name: (cap, unit) for name, cap, unit in result.pools}
        if result.engine_refusal or len(pools) < 2 or result.kv_budget_bytes <= 0 or "full tokens" not in pools:
            return None
        full, unit = pools["full tokens"]
        need = -(-result.max_model_len // result.block_size) * result.block_size
        if need <= full:
            return None
        others = []
        if "swa tokens" in pools:
            swa, swa_unit = pools["swa tokens"]
            others.append(f"the SWA pool {swa:,} tokens ({fmt_gib(swa * swa_unit)})")
        if "mamba slots" in pools:
            slots = pools["mamba slots"][0]
            others.append(
                f"the Mamba state pool {slots:,} slots + 1 padding ({fmt_gib(es.get('mamba_pool_bytes', 0))}, "
                f"mamba_full_memory_ratio {es.get('mamba_full_memory_ratio', DEFAULT_MAMBA_FULL_MEMORY_RATIO):g})"
            )
        about = "" if result.budget_exact else "≈ "
        what = (
            f"one request of max_model_len {result.max_model_len:,} needs {need:,} tokens of the full-layer pool "
            f"({fmt_gib(need * unit)}), which holds {full:,} ({fmt_gib(full * unit)}): of the {about}"
            f"{fmt_gib(result.kv_budget_bytes)} KV budget, {' and '.join(others)} take the rest"
        )
        if es.get("max_req_len", 0) > 0:
            what += (
                f"; SGLang itself starts, warns, and serves requests up to max_req_len {es['max_req_len']:,} tokens "
                "(managers/tp_worker.py:558)"
            )
        return what

    def budget_terms(self, spec: ModelSpec, gpu, opts: FitOptions, settings: Settings):
        """As :meth:`EngineRules.budget_terms`, plus the 100 MiB a multimodal model reserves (exact:
        ``SGLANG_VLM_CACHE_SIZE_MB``, ``kv_cache_configurator.py:202``)."""
        from kvplan.engines.base import exact_term

        terms, wname = super().budget_terms(spec, gpu, opts, settings)
        if settings.extra["multimodal"]:
            terms.append(exact_term("multimodal", VLM_CACHE_BYTES, "SGLANG_VLM_CACHE_SIZE_MB (100 MiB)"))
        return terms, wname

    def usable_and_budget(self, total: int, util: float, terms: dict[str, int], settings: Settings):
        """``usable = int((total − overhead) × mem_fraction_static)``; budget = usable − weights − the multimodal
        reservation (``_profile_available_bytes``: free after the weights less ``free before × (1 − mfs)``)."""
        usable = int((total - terms["non_torch"]) * util)
        return usable, usable - terms["weights"] - terms.get("activation", 0) - terms.get("multimodal", 0)

    def plan(self, spec: ModelSpec, kv_dtype, opts: FitOptions, settings: Settings, max_len: int) -> SglangPlan:
        """The model's pools (:class:`SglangPlan`) on the worst PP stage (most bytes per token).

        Raises:
            UsageError: a KV dtype SGLang's pools do not take (:func:`kv_element_bytes`).
        """
        tp, pp = opts.tensor_parallel_size, opts.pipeline_parallel_size
        page = settings.block_size
        stages = stage_layers(spec.num_layers, pp, opts.pp_layer_partition)
        swa_full = opts.swa_full
        hybrid = is_hybrid_swa(spec, swa_full)
        every = all_layers_attention(spec)

        # DefaultPoolConfigurator prices every layer with ModelConfig's one geometry (head_dim, get_num_kv_heads):
        # a hybrid-SWA architecture kept in one pool (--disable-hybrid-swa-memory) pays its full layers' geometry
        # for its sliding layers too (Gemma 4: 2 × 512, not 8 × 256)
        one_geometry = None
        if every:
            one_geometry = LayerSpec("full", spec.num_kv_heads, spec.head_dim, spec.v_dim)
        elif swa_full and spec.architecture in HYBRID_SWA_ARCHITECTURES:
            one_geometry = next((x for x in spec.layers if x.kind == "full"), None)

        def stage(layers):
            full = swa = 0
            for i in layers:
                layer = spec.layers[i]
                if one_geometry is not None and (every or layer.kind in ("full", "sliding", "chunked")):
                    layer = one_geometry
                b = layer_cell_bytes(layer, kv_dtype, tp)
                if hybrid and layer.kind in ("sliding", "chunked"):
                    swa += b
                else:
                    full += b
            conv, ssm = (0, 0) if every else state_bytes(spec, layers, tp, ssm_name)
            return full, swa, conv, ssm

        ssm_name = None if every else ssm_dtype_name(spec, opts.mamba_ssm_dtype)
        # each stage's sums, once per spec and key: one_geometry and hybrid follow from the spec and swa_full
        per_stage = [spec.memo(("sglang.stage", kv_dtype, tp, r.start, r.stop, bool(swa_full), ssm_name),
                               lambda r=r: stage(r)) for r in stages]  # fmt: skip
        worst = max(range(pp), key=lambda i: (per_stage[i][0] + per_stage[i][1], per_stage[i][2] + per_stage[i][3]))
        full, swa, conv, ssm = per_stage[worst]
        if pp > 1 and conv + ssm:  # every rank prices the largest stage's share (kv_cache_configurator.py:3233)
            conv, ssm = max(per_stage[i][2] for i in range(pp)), max(per_stage[i][3] for i in range(pp))
        radix_off = opts.disable_radix_cache
        # attention DP: each of the D groups runs its own scheduler and pools with its share of the replica's
        # --max-running-requests and --max-mamba-cache-size (kv_cache_configurator.py:3128 resolve_max_num_reqs,
        # :3305 and :3330 _handle_max_mamba_cache; pool_configurator.py:956 compute_swa_request_cap)
        dp = opts.data_parallel_size
        running = per_worker(opts.max_num_seqs, dp)
        fixed = None if opts.max_mamba_cache_size is None else opts.max_mamba_cache_size // dp
        if fixed is None and radix_off and running is not None:
            fixed = running
        ratio = DEFAULT_SWA_FULL_TOKENS_RATIO if opts.swa_full_tokens_ratio is None else opts.swa_full_tokens_ratio
        win = window(spec) if hybrid else 0
        kind = "default"
        cap = 0
        if hybrid:
            kind = "swa"
            chunked = settings.max_num_batched_tokens
            if radix_off and running is not None and chunked > 0 and win and full > 0:
                kind = "swa_cap"
                cap = swa_request_cap(running, win, chunked, page)
        mamba_ratio = opts.mamba_full_memory_ratio
        if mamba_ratio is None:
            mamba_ratio = DEFAULT_MAMBA_FULL_MEMORY_RATIO
        engine_settings = dict(
            page_size=page,
            chunked_prefill_size=settings.max_num_batched_tokens,
            mem_fraction_static=settings.utilization,
            mem_fraction_static_source=settings.extra["mem_fraction_static_source"],
            context_len=max_len,
            pool_configurator={"default": "DefaultPoolConfigurator", "swa": "HybridSWAPoolConfigurator",
                               "swa_cap": "SWARequestCapPoolConfigurator"}[kind],  # fmt: skip
            multimodal_reserved_bytes=VLM_CACHE_BYTES if settings.extra["multimodal"] else 0,
        )
        if "chunked_prefill_source" in settings.extra:
            engine_settings["chunked_prefill_source"] = settings.extra["chunked_prefill_source"]
        if hybrid:
            engine_settings["swa_full_tokens_ratio"] = ratio
        if conv + ssm:
            engine_settings.update(mamba_full_memory_ratio=mamba_ratio,
                                   mamba_ssm_dtype=ssm_dtype_name(spec, opts.mamba_ssm_dtype))  # fmt: skip
        if is_dsa(spec) and opts.block_size not in (None, DSA_PAGE_SIZE):
            engine_settings["note"] = (
                f"--page-size {opts.block_size} is overridden: SGLang sets 64 for DeepSeek DSA "
                "(model_overrides/deepseek_v2.py:171)"
            )
        if every:
            engine_settings["note"] = (
                f"SGLang 0.5.23 has no {spec.architecture} class: its Transformers fallback sizes the pool for "
                f"all {spec.num_layers} layers as attention"
            )
        return SglangPlan(
            kind=kind, cell=full if kind == "default" else 0, full_per_token=full, swa_per_token=swa, window=win,
            ratio=ratio, swa_cap_tokens=cap, page=page, conv_bytes=conv, ssm_bytes=ssm, mamba_ratio=mamba_ratio,
            fixed_slots=fixed, slots_per_request=1 if radix_off else MAMBA_SLOTS_PER_REQUEST,
            max_total_tokens=opts.max_total_tokens, max_running=running, context_len=max_len, attn_dp=dp,
            max_running_given=opts.max_num_seqs,
            stage_num_layers=len(stages[worst]), extras=dict(engine_settings=engine_settings),
        )  # fmt: skip


ENGINE = SglangEngine()


# --- what the start-up log prints (kvplan fit --from-log) ---------------------------------------------------


def kv_bytes_per_token(spec: ModelSpec, kv_dtype, tp: int) -> tuple[int, int, int]:
    """(K, V, MLA latent) bytes one token costs on one TP rank across the model's layers, as SGLang's pools
    hold them: ``MHATokenToKVPool`` K and V buffers of ``kv_heads_per_rank × head_dim`` per layer (its log:
    ``K size: X GB, V size: Y GB`` = tokens × these / 2^30), ``MLATokenToKVPool`` one latent of
    ``kv_lora_rank + qk_rope_head_dim`` per layer on every rank (``KV size``)."""
    from kvplan.calc import kv_heads_per_rank
    from kvplan.specs import KV_HEAD_KINDS

    k = v = latent = 0
    for layer in spec.layers:
        if layer.kind in KV_HEAD_KINDS:
            h = kv_heads_per_rank(layer.num_kv_heads, tp)
            k += kv_dtype.row_bytes(h * layer.head_dim, h)
            v += kv_dtype.row_bytes(h * layer.v_head_dim, h)
        elif layer.kind == "mla":
            latent += kv_dtype.row_bytes(layer.mla.latent_dim, 1)
    return k, v, latent


def printed_max_running_requests(max_total_num_tokens: int, context_len: int) -> int:
    """The ``max_running_requests`` SGLang prints without ``--max-running-requests``: the request pool's
    requests (:func:`max_running_requests`) plus its one extra slot (``ReqToTokenPool(size=max_num_reqs + 1)``;
    the scheduler prints the pool's size: 2049 in the corpus logs sglang-04 and sglang-llms-in-clouds-qwq32b)."""
    return max_running_requests(max_total_num_tokens, context_len, None) + 1


DEFAULT_MAX_PREFILL_TOKENS = 16384  # srt/server_args.py ServerArgs.max_prefill_tokens
