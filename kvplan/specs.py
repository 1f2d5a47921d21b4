"""Model specs: frozen dataclasses, one cache description per layer, and their loaders.

A :class:`ModelSpec` holds what KV-cache sizing needs from a model's config.json: the model dtype, the
parameter count (for weights), the maximum context, and one :class:`LayerSpec` per decoder layer saying
what that layer caches for one request of S tokens:

=================  ========================================================================================
kind               what one layer caches per request of S tokens
=================  ========================================================================================
full               K and V for all S tokens: ``H_kv × (head_dim + v_head_dim)`` elements per token
sliding            the same per token, for at most ``sliding_window`` tokens (Mistral, Gemma 2/3/4, GPT-OSS)
chunked            the same per token, for at most ``attention_chunk_size`` tokens (Llama 4 iRoPE layers)
mla                one latent of ``kv_lora_rank + qk_rope_head_dim`` elements per token (DeepSeek V2/V3),
                   plus, with ``index_head_dim``, one indexer key per token (DeepSeek-V3.2 DSA)
mamba              Mamba-1 state, fixed: conv ``d_inner × (d_conv − 1)`` + ssm ``d_inner × d_state`` (Jamba)
mamba2             Mamba-2 state, fixed: conv ``(d_conv − 1) × (d_inner + 2·G·N)`` + ssm ``H × P × N``
                   (Nemotron-H, Granite-4.0-H, Falcon-H1, Bamba, Zamba2)
gdn                Gated DeltaNet state, fixed: conv ``(d_conv − 1) × (2·Hk·dk + Hv·dv)`` + ``Hv × dv × dk``
                   (Qwen3-Next, Qwen3.5)
short_conv         short convolution state, fixed: ``(d_conv − 1) × hidden`` (LFM2)
linear_attention   lightning / linear attention state, fixed: ``H × d × d`` (MiniMax-Text-01, MiniMax-M1)
rglru              RG-LRU state, fixed: conv ``(d_conv − 1) × lru_width`` + recurrent ``lru_width`` in fp32
                   (RecurrentGemma's recurrent blocks; Griffin, arXiv:2402.19427)
compressed         DeepSeek-V4 attention: one shared K=V vector of ``head_dim`` per token for the last
                   ``window`` tokens, plus (ratio m > 0) one compressed entry of ``head_dim`` per m tokens of
                   the whole request, plus (CSA layers) one indexer key per m tokens, plus the compressor's
                   fixed fp32 state (see :class:`CompressedConfig`)
shared             nothing of its own: it reads an earlier layer's cache (Gemma 3n / Gemma 4 KV sharing)
none               nothing at all (MLP- or MoE-only blocks: Nemotron-H ``-`` and ``E``)
cross              K and V of the request's encoder tokens (image tokens), once per request whatever S:
                   ``H_kv × (head_dim + v_head_dim)`` elements per encoder token (Llama 3.2 Vision's
                   cross-attention layers; vLLM ``CrossAttentionSpec``)
rwkv4              RWKV-4 state, fixed: two token-shift vectors of ``d_inner`` in the model dtype and the WKV
                   numerator, denominator and running maximum of ``d_inner`` in fp32 (transformers' RWKV)
mlstm              xLSTM's mLSTM state, fixed: matrix memory ``H × dk × dv``, normalizer ``H × dk`` and
                   stabilizer ``H × 1``, in the model dtype (transformers' ``xLSTMCache``)
hidden             the layer's input hidden states, ``width`` elements per token (for at most ``window``
                   tokens when set), plus ``index_width`` int64 bucket ids per token on Reformer's LSH layers:
                   K and V are recomputed from them every step (XLNet ``mems``, Reformer's
                   ``ReformerDynamicCache``)
=================  ========================================================================================

Two state kinds are kept *beside* an attention layer's K/V (``parallel_state``), shapes as transformers
keeps them: ``cca`` (ZAYA's compressed convolutional attention: a conv window over the query and key
projections and the previous token's delayed value) and ``sconv`` (Inkling's short convolutions on K, V and
the residual stream, sized by each attention layer's own K/V width). ``prefix_tokens`` counts learned tokens
every request caches before its own (CPM-Ant's prompt: each token kind caches ``S + prefix_tokens``).

Spec YAML format (unknown keys are errors)::

    name: gemma4-26b-a4b
    source: https://huggingface.co/google/gemma-4-26B-A4B-it/blob/main/config.json
    architecture: Gemma4ForConditionalGeneration  # optional: config.json's architectures[0]
    num_layers: 30
    num_q_heads: 16
    num_kv_heads: 8          # the default geometry of attention layers ...
    head_dim: 256            # v_head_dim: optional, defaults to head_dim
    hidden_size: 2816        # optional; sizes the activation estimate in `fit`
    vocab_size: 32000        # optional (config.json): the sampler's logits in the engine's profile run
    intermediate_size: 5632  # optional (config.json): the dense MLP's width, in the profile run
    dtype: bf16
    param_count: 25800000000 # optional; needed by `fit` for weights
    weights_dtype: bf16      # optional: how the checkpoint ships (fp8, mxfp4 ...); default: dtype
    param_count_unquantized: 0  # optional: parameters kept in dtype when weights_dtype is quantized
    max_model_len: 262144
    sliding_window: 1024     # needed when a layer is sliding (attention_chunk_size: when chunked)
    layers:                  # optional; default: every layer full (mla when an mla: block is given)
      default: sliding
      rules:                 # applied in order; a later rule wins
        - {kind: full, period: 6, offset: 5}   # layer i matches when i % period == offset
        - {kind: full, indices: [29]}          # or an explicit list of layer indices
    # layers may also be an explicit list of num_layers kinds: [sliding, full, ...]
    geometry:                # ... overridden per layer kind (Gemma 4's global layers)
      full: {num_kv_heads: 2, head_dim: 512, k_eq_v: true}
    per_layer:               # ... or per layer (OpenELM): num_kv_heads, head_dim, v_head_dim, num_q_heads
      num_kv_heads: [3, 3, 4, ...]
    num_kv_shared_layers: 0  # the last N layers reuse the cache of the last earlier layer of their kind
    parallel_state: mamba2   # every attention layer also keeps this state block's state (Falcon-H1, Zamba2)
    mla: {kv_lora_rank: 512, qk_rope_head_dim: 64, index_head_dim: 128}  # index_head_dim: DSA indexer
    mamba: {d_inner: 8192, d_conv: 4, d_state: 16}
    mamba2: {num_heads: 128, head_dim: 64, d_state: 128, n_groups: 8, d_conv: 4}
    gdn: {num_k_heads: 16, num_v_heads: 32, head_k_dim: 128, head_v_dim: 128, d_conv: 4}
    short_conv: {d_inner: 2048, d_conv: 3}
    linear_attention: {num_heads: 64, head_dim: 96}
    rglru: {d_inner: 2560, d_conv: 4}     # RecurrentGemma: d_inner = lru_width; the recurrent state is fp32
    rwkv4: {d_inner: 768}                 # RWKV-4: hidden_size; the WKV state is fp32
    mlstm: {num_heads: 8, head_k_dim: 256, head_v_dim: 512}   # xLSTM (qk_head_dim, v_head_dim)
    cca: {num_heads: 8, num_k_heads: 2, head_dim: 128, d_conv: 2, d_conv2: 2}  # ZAYA (cca_time0, cca_time1)
    sconv: {d_inner: 6144, d_conv: 4}     # Inkling: the stream width; K/V widths are each layer's own
    hidden: {width: 1024, window: 512}    # XLNet: d_model, mem_len (window absent: every token)
    prefix_tokens: 32                     # CPM-Ant: prompt_length learned tokens cached with every request
    compressed: {head_dim: 512, window: 128, index_head_dim: 128, csa_ratio: 4,
                 ratios: [0, 0, 4, 128, ...]}   # DeepSeek-V4: one ratio per layer (0: the sliding branch only)
    cross_attention: {encoder_tokens: 6404}  # encoder (image) tokens a cross layer caches per request
    reader: kvplan mllama reader            # optional: which reader built the spec (shown by the CLI)
    multimodal: {wrapper: mllama, image_tokens_per_image: 6404}  # optional facts about the encoder
    # every state block also takes conv_dtype and ssm_dtype (default: the model dtype)
    moe: {num_experts: 128, experts_per_token: 8, expert_param_count: 4718592}  # optional; `fit`'s speed bound
    # moe also takes num_moe_layers (default num_layers), num_shared_experts (0), shared_expert_param_count
    moe_intermediate_size: 1536     # optional (config.json): one routed expert's MLP width (load checks)
    weight_block_size: [128, 128]   # optional (config.json quantization_config): a block-quantized checkpoint
    notes: free text (assumptions made)
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from functools import cached_property
from typing import Any, Callable

from kvplan.dtypes import get_kv_dtype
from kvplan.errors import SpecError

ATTENTION_KINDS = ("full", "sliding", "chunked", "mla")
KV_HEAD_KINDS = ("full", "sliding", "chunked")  # attention kinds with per-head K and V
STATE_KINDS = ("mamba", "mamba2", "gdn", "short_conv", "linear_attention", "rglru", "rwkv4", "mlstm", "cca", "sconv")
# State kinds only ever kept beside an attention layer's K/V (parallel_state), never a layer of their own.
PARALLEL_ONLY_KINDS = ("cca", "sconv")
# State kinds whose shapes and dtypes are transformers' own (no engine kvplan models serves them): conv states keep
# every column transformers keeps, in transformers' (channels, columns) orientation.
TRANSFORMERS_STATE_KINDS = ("rglru", "rwkv4", "mlstm", "cca", "sconv")
CROSS_KIND = "cross"  # cross-attention to the encoder's tokens: a fixed cost per request (Llama 3.2 Vision)
COMPRESSED_KIND = "compressed"  # DeepSeek-V4's sliding + compressed attention (CSA / HCA layers)
HIDDEN_KIND = "hidden"  # the layer's input hidden states, from which K/V are recomputed (XLNet, Reformer)
LAYER_KINDS = (
    *ATTENTION_KINDS,
    *(k for k in STATE_KINDS if k not in PARALLEL_ONLY_KINDS),
    "shared",
    "none",
    CROSS_KIND,
    COMPRESSED_KIND,
    HIDDEN_KIND,
)
MAX_DIMENSION = 1 << 31  # no count in a spec (layers, heads, dims, tokens) may exceed this
MAX_LAYERS = 100_000
MODEL_DTYPES = ("fp32", "fp16", "bf16")
STATE_DTYPES = ("fp32", "fp16", "bf16")


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


@dataclass(frozen=True)
class MLAConfig:
    """Multi-head latent attention (DeepSeek-V2, arXiv:2405.04434): one cached latent per token and layer.

    Attributes:
        kv_lora_rank: compressed KV latent width (elements), 512 in DeepSeek V2/V3.
        qk_rope_head_dim: decoupled RoPE key width (elements), 64 in DeepSeek V2/V3.
        index_head_dim: width of the DeepSeek Sparse Attention indexer key cached beside the latent
            (elements per token per layer, 128 in DeepSeek-V3.2), or None when the model has no indexer.
    """

    kv_lora_rank: int
    qk_rope_head_dim: int
    index_head_dim: int | None = None

    @property
    def latent_dim(self) -> int:
        """Elements cached per token per layer: ``kv_lora_rank + qk_rope_head_dim`` (576 for DeepSeek-V3)."""
        return self.kv_lora_rank + self.qk_rope_head_dim


@dataclass(frozen=True)
class StateTensor:
    """One fixed-size state tensor a recurrent layer keeps per request (on one TP rank).

    Attributes:
        name: ``conv`` or ``ssm`` (the recurrent / temporal state).
        shape: its shape without the batch dimension, elements.
        dtype: storage dtype name (``bf16``, ``fp32`` ...).
    """

    name: str
    shape: tuple[int, ...]
    dtype: str

    @property
    def elements(self) -> int:
        """Product of the shape."""
        n = 1
        for d in self.shape:
            n *= d
        return n


@dataclass(frozen=True)
class StateConfig:
    """A recurrent layer's fixed per-request state; the shapes follow vLLM's ``MambaStateShapeCalculator``.

    One class serves every state kind; which fields matter depends on ``kind`` (unused ones stay 0):

    - ``mamba`` (Mamba-1, Jamba): conv ``(d_conv − 1, d_inner/TP)``, ssm ``(d_inner/TP, d_state)``.
    - ``mamba2``: ``d_inner = num_heads × head_dim``; groups ``G`` are replicated to TP when
      ``G % TP != 0``; conv ``(d_conv − 1, (d_inner + 2·G·d_state)/TP)``, ssm
      ``(num_heads/TP, head_dim, d_state)``.
    - ``gdn`` (Gated DeltaNet): conv ``(d_conv − 1, (2·num_k_heads·head_k_dim + num_v_heads·head_v_dim)/TP)``,
      ssm ``(num_v_heads/TP, head_v_dim, head_k_dim)``.
    - ``short_conv`` (LFM2): conv ``(d_conv − 1, d_inner/TP)``.
    - ``linear_attention`` (MiniMax lightning attention): ssm ``(num_heads // TP, head_dim, head_dim)``.
    - ``rglru`` (RecurrentGemma's RG-LRU block, ``d_inner`` = ``lru_width``): conv ``(d_conv − 1, d_inner/TP)``,
      ssm ``(d_inner/TP,)`` in fp32 unless ``ssm_dtype`` says otherwise. No engine kvplan models serves it
      (vLLM never registered ``RecurrentGemmaForCausalLM``): the shapes and dtypes are transformers 5.23's
      (``modeling_recurrent_gemma.py`` ``RecurrentGemmaRecurrentBlock``: ``conv1d_state``
      ``(B, lru_width, conv1d_width − 1)`` in the model dtype, ``rg_lru.recurrent_states`` ``(B, lru_width)``
      "always computed in full precision").
    - ``rwkv4`` (RWKV-4, ``d_inner`` = ``hidden_size``): ``ffn_shift`` and ``att_shift`` ``(d_inner/TP,)`` in the
      model dtype (the feed-forward and attention token shifts) and ``num``, ``den``, ``max`` ``(d_inner/TP,)`` in
      fp32 (the WKV numerator, denominator and running maximum). transformers 5.23 ``modeling_rwkv.py``
      ``RwkvModel.forward``: five tensors ``(B, hidden_size, num_hidden_layers)``, the first two in the model dtype,
      the others in ``torch.float32``.
    - ``mlstm`` (xLSTM): ``ssm`` ``(num_heads/TP, head_k_dim, head_v_dim)`` (the matrix memory C), ``n``
      ``(num_heads/TP, head_k_dim)`` and ``m`` ``(num_heads/TP, 1)``, all in the model dtype (transformers 5.23
      ``modeling_xlstm.py`` ``xLSTMCache.rnn_state``, created in the model's dtype and copied into).
    - ``cca`` (ZAYA's compressed convolutional attention, beside the layer's K/V; ``num_heads`` query heads,
      ``num_k_heads`` KV heads of ``head_dim``, ``d_conv`` = ``cca_time0``, ``d_conv2`` = ``cca_time1``):
      ``conv`` ``((num_heads + num_k_heads)·head_dim/TP, (d_conv − 1) + (d_conv2 − 1))`` and ``ssm``
      ``(num_k_heads·head_dim/2/TP,)`` (the previous token's delayed value), in the model dtype
      (transformers 5.23 ``modeling_zaya.py`` ``ZayaCCAProjection``).
    - ``sconv`` (Inkling's short convolutions, beside the layer's K/V): four conv states of ``d_conv``
      columns, on K and V (``num_k_heads·head_k_dim`` channels each: the layer's own KV heads and head dim) and
      two on the residual stream (``d_inner`` = ``hidden_size`` channels each), in fp32 unless ``conv_dtype``
      says otherwise (transformers 5.23 ``modeling_inkling.py``; its StaticCache holds them in float32).

    The kinds of :data:`TRANSFORMERS_STATE_KINDS` follow transformers' shapes and dtypes (no engine kvplan
    models serves them); the others follow vLLM.

    Source: vLLM 0.33 ``model_executor/layers/mamba/mamba_utils.py`` (``MambaStateShapeCalculator``),
    without speculative-decoding rows; conv states keep ``d_conv − 1`` columns (transformers keeps
    ``d_conv``: kvplan follows the engine). dtypes per ``MambaStateDtypeCalculator``: conv =
    ``mamba_cache_dtype`` (default the model dtype), ssm = ``mamba_ssm_cache_dtype`` (default the conv dtype).

    Attributes:
        kind: one of :data:`STATE_KINDS`.
        d_inner, d_conv, d_state, num_heads, head_dim, n_groups, num_k_heads, num_v_heads, head_k_dim,
            head_v_dim, d_conv2: the config.json dimensions (elements) named as in the kind's paper / config class.
        conv_dtype, ssm_dtype: storage dtypes of the conv and recurrent states; None = the model dtype
            (conv) and the conv dtype (ssm).
    """

    kind: str
    d_inner: int = 0
    d_conv: int = 0
    d_state: int = 0
    num_heads: int = 0
    head_dim: int = 0
    n_groups: int = 0
    num_k_heads: int = 0
    num_v_heads: int = 0
    head_k_dim: int = 0
    head_v_dim: int = 0
    d_conv2: int = 0
    conv_dtype: str | None = None
    ssm_dtype: str | None = None

    def tensors(self, model_dtype: str, tp: int = 1) -> tuple[StateTensor, ...]:
        """The state tensors of one request on one of ``tp`` tensor-parallel ranks (vLLM's shapes)."""
        conv = self.conv_dtype or model_dtype
        ssm = self.ssm_dtype or conv  # vLLM MambaStateDtypeCalculator: ssm falls back to the conv dtype
        if self.kind == "rglru":  # transformers keeps the RG-LRU state in float32 whatever the model dtype
            ssm = self.ssm_dtype or "fp32"
        k = self.d_conv - 1
        if self.kind == "mamba":
            d = _cdiv(self.d_inner, tp)
            return (StateTensor("conv", (k, d), conv), StateTensor("ssm", (d, self.d_state), ssm))  # vLLM "SD" layout
        if self.kind == "mamba2":
            groups = self.n_groups if self.n_groups % tp == 0 else tp  # vLLM: extra_groups_for_head_shards
            conv_dim = self.num_heads * self.head_dim + 2 * groups * self.d_state
            return (
                StateTensor("conv", (k, _cdiv(conv_dim, tp)), conv),
                StateTensor("ssm", (_cdiv(self.num_heads, tp), self.head_dim, self.d_state), ssm),
            )
        if self.kind == "gdn":
            conv_dim = 2 * self.num_k_heads * self.head_k_dim + self.num_v_heads * self.head_v_dim
            return (
                StateTensor("conv", (k, _cdiv(conv_dim, tp)), conv),
                StateTensor("ssm", (_cdiv(self.num_v_heads, tp), self.head_v_dim, self.head_k_dim), ssm),
            )
        if self.kind == "short_conv":
            return (StateTensor("conv", (k, _cdiv(self.d_inner, tp)), conv),)
        if self.kind == "linear_attention":
            return (StateTensor("ssm", (self.num_heads // tp, self.head_dim, self.head_dim), ssm),)  # vLLM: floor
        if self.kind == "rglru":
            d = _cdiv(self.d_inner, tp)
            return (StateTensor("conv", (k, d), conv), StateTensor("ssm", (d,), ssm))
        if self.kind == "rwkv4":  # transformers: token shifts in the model dtype, the WKV state in float32
            d = _cdiv(self.d_inner, tp)
            wkv = self.ssm_dtype or "fp32"
            return (
                StateTensor("ffn_shift", (d,), conv),
                StateTensor("att_shift", (d,), conv),
                *(StateTensor(name, (d,), wkv) for name in ("num", "den", "max")),
            )
        if self.kind == "mlstm":  # transformers' xLSTMCache: C, n, m in the model dtype
            h = _cdiv(self.num_heads, tp)
            return (
                StateTensor("ssm", (h, self.head_k_dim, self.head_v_dim), ssm),
                StateTensor("n", (h, self.head_k_dim), ssm),
                StateTensor("m", (h, 1), ssm),
            )
        if self.kind == "cca":  # ZAYA: conv window over [q, k] projections, the previous token's delayed value
            channels = (self.num_heads + self.num_k_heads) * self.head_dim
            columns = (self.d_conv - 1) + (self.d_conv2 - 1)
            return (
                StateTensor("conv", (_cdiv(channels, tp), columns), conv),
                StateTensor("ssm", (_cdiv(self.num_k_heads * self.head_dim // 2, tp),), ssm),
            )
        if self.kind == "sconv":  # Inkling: K, V and two residual-stream short convs, d_conv columns each
            kv = _cdiv(self.num_k_heads * self.head_k_dim, tp)
            stream = _cdiv(self.d_inner, tp)
            dtype = self.conv_dtype or "fp32"
            widths = (kv, kv, stream, stream)
            return tuple(StateTensor(f"conv{i}", (c, self.d_conv), dtype) for i, c in enumerate(widths))
        raise ValueError(f"not a state kind: {self.kind}")

    def elements(self, tp: int = 1) -> int:
        """State elements one request keeps in one layer on one TP rank (all tensors)."""
        return sum(t.elements for t in self.tensors("bf16", tp))


# Fields of each state block in a spec YAML: (required, optional with their minimum).
STATE_FIELDS: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "mamba": (("d_inner", "d_conv", "d_state"), ()),
    "mamba2": (("num_heads", "head_dim", "d_state", "n_groups", "d_conv"), ()),
    "gdn": (("num_k_heads", "num_v_heads", "head_k_dim", "head_v_dim", "d_conv"), ()),
    "short_conv": (("d_inner", "d_conv"), ()),
    "linear_attention": (("num_heads", "head_dim"), ()),
    "rglru": (("d_inner", "d_conv"), ()),
    "rwkv4": (("d_inner",), ()),
    "mlstm": (("num_heads", "head_k_dim", "head_v_dim"), ()),
    "cca": (("num_heads", "num_k_heads", "head_dim", "d_conv", "d_conv2"), ()),
    "sconv": (("d_inner", "d_conv"), ()),
}


@dataclass(frozen=True)
class MoEConfig:
    """Mixture-of-experts facts for the speed bound of ``kvplan fit`` (:mod:`kvplan.perf`); no cache effect.

    Attributes:
        num_experts: routed experts per MoE layer (E): config.json ``num_local_experts`` (Mixtral,
            GPT-OSS), ``num_experts`` (Qwen3-MoE), ``n_routed_experts`` (DeepSeek).
        experts_per_token: routed experts each token uses (k): ``num_experts_per_tok`` / ``experts_per_token``.
        expert_param_count: parameters of one routed expert in one layer (SwiGLU: ``3 × hidden ×
            moe_intermediate_size``, plus biases where the model has them).
        num_moe_layers: layers with an MoE block (DeepSeek: ``num_layers − first_k_dense_replace``).
        num_shared_experts: experts every token uses besides the routed ones (``n_shared_experts``).
        shared_expert_param_count: parameters of one shared expert in one layer (default: expert_param_count).
    """

    num_experts: int
    experts_per_token: int
    expert_param_count: int
    num_moe_layers: int
    num_shared_experts: int = 0
    shared_expert_param_count: int | None = None

    @property
    def shared_param_count(self) -> int:
        """Parameters of one layer's shared experts (0 without any)."""
        per = self.expert_param_count if self.shared_expert_param_count is None else self.shared_expert_param_count
        return self.num_shared_experts * per

    @property
    def routed_param_count(self) -> int:
        """Parameters of every routed expert of every MoE layer."""
        return self.num_moe_layers * self.num_experts * self.expert_param_count

    @property
    def inactive_param_count(self) -> int:
        """Routed-expert parameters one token does not use: ``layers × (E − k) × expert``."""
        return self.num_moe_layers * (self.num_experts - self.experts_per_token) * self.expert_param_count


@dataclass(frozen=True)
class CompressedConfig:
    """One DeepSeek-V4 attention layer's cache (kind ``compressed``; DeepSeek-V4 report §2.3, transformers 5.23
    ``DeepseekV4Config`` / ``modeling_deepseek_v4.py``, vLLM 0.33 ``vllm/models/deepseek_v4``).

    Every V4 layer is shared-KV MQA: one vector of ``head_dim`` serves as key and value, kept for the last
    ``window`` tokens (transformers ``DeepseekV4HCACache.update``: ``values = keys``; vLLM
    ``DeepseekV4SWACache``, a ``SlidingWindowMLASpec``: "only has one vector instead of K + V"). A layer with a
    compression ratio m > 0 also keeps one compressed entry of ``head_dim`` per m tokens of the whole request
    (transformers ``compressed_kv["compressor"]`` ``[B, S // m, head_dim]``; vLLM ``MLAAttentionSpec`` with
    ``tokens_per_state = m``); a CSA layer (Compressed Sparse Attention, ``overlap``) also keeps one Lightning
    Indexer key of ``index_head_dim`` per m tokens (transformers ``compressed_kv["indexer"]``; vLLM
    ``DeepseekV4IndexerCache``).

    The compressor's unfinished window is a fixed state per request. kvplan sizes it as vLLM 0.33 stores it
    (``vllm/models/deepseek_v4/compressor.py`` ``CompressorStateCache``: ``coff × m`` tokens of ``2 × coff ×
    head_dim`` float32 values, coff = 2 with overlap, else 1; the indexer's compressor the same at
    ``index_head_dim``); transformers keeps the same projections of the last ``S mod m`` tokens (plus, with
    overlap, the previous window's first half) in the model dtype (``buffer_kv`` / ``buffer_gate`` /
    ``overlap_kv`` / ``overlap_gate``).

    Attributes:
        head_dim: width of the shared K=V vector and of a compressed entry (elements; 512 in V4).
        window: tokens of the sliding branch (config.json ``sliding_window``, 128).
        ratio: tokens per compressed entry (0: the sliding branch only; 4: CSA; 128: HCA in V4).
        index_head_dim: width of an indexer key (elements) on CSA layers, 0 elsewhere.
        overlap: CSA's overlapping windows (``coff = 2``).
    """

    head_dim: int
    window: int
    ratio: int = 0
    index_head_dim: int = 0
    overlap: bool = False

    def entries(self, seq_len: int) -> int:
        """Compressed entries one request of ``seq_len`` tokens has made: ``S // ratio`` (0 without a ratio)."""
        return seq_len // self.ratio if self.ratio else 0

    def state_elements(self) -> int:
        """fp32 elements of the compressor state one request keeps (vLLM ``CompressorStateCache``): ``coff × m
        × 2 × coff × head_dim``, plus the indexer's compressor at ``index_head_dim``; 0 without a ratio."""
        if not self.ratio:
            return 0
        coff = 2 if self.overlap else 1
        return coff * self.ratio * 2 * coff * (self.head_dim + self.index_head_dim)


@dataclass(frozen=True)
class HiddenConfig:
    """A layer that caches its input hidden states rather than K and V (kind ``hidden``): K and V are
    recomputed from them at every step.

    - XLNet (transformers 5.23 ``modeling_xlnet.py`` ``XLNetModel.cache_mem``): each layer's input, ``d_model``
      per token, the last ``mem_len`` tokens (``mems``; all of them when ``mem_len`` is null or 0), in the model
      dtype.
    - Reformer (``modeling_reformer.py`` ``ReformerDynamicCache``): each layer's input, ``hidden_size`` per token,
      every token, plus on LSH-attention layers the bucket id of each token for each head and hash (int64).

    Attributes:
        width: elements cached per token (``d_model`` / ``hidden_size``), in the cache dtype.
        window: tokens kept (XLNet's ``mem_len``), or None for every token.
        index_width: int64 values per token beside them (Reformer LSH: ``num_attention_heads × num_hashes``), 0 on
            other layers.
    """

    width: int
    window: int | None = None
    index_width: int = 0


@dataclass(frozen=True)
class LayerSpec:
    """What one decoder layer caches, with its own geometry.

    Attributes:
        kind: one of :data:`LAYER_KINDS`.
        num_kv_heads: KV heads (H_kv) of an attention layer (full/sliding/chunked); 0 for other kinds.
        head_dim: K head dim (elements); 0 for non-attention kinds.
        v_head_dim: V head dim (elements); 0 for non-attention kinds.
        k_eq_v: the layer's values are its keys (Gemma 4 ``attention_k_eq_v``); the cache still holds K
            and V (transformers' cache and vLLM's page both keep two tensors).
        window: tokens kept by a sliding or chunked layer, else None.
        mla: the latent config of an ``mla`` layer.
        state: the state config of a state layer, or the state an attention layer keeps beside its KV
            (``parallel_state``: Falcon-H1 and Zamba2 hybrid layers run attention and a Mamba-2 mixer side by side).
        shared_from: for ``shared`` layers, the index of the layer whose cache it reads (None: unknown).
        attends_as: for ``shared`` layers, the attention kind it runs (``sliding`` / ``full``).
        encoder_tokens: for ``cross`` layers, the encoder tokens (image tokens) it caches K and V of, once
            per request (a fixed cost, not per generated token); 0 for other kinds.
        compressed: for ``compressed`` layers (DeepSeek-V4), the layer's :class:`CompressedConfig`.
        hidden: for ``hidden`` layers (XLNet, Reformer), the layer's :class:`HiddenConfig`.
    """

    kind: str
    num_kv_heads: int = 0
    head_dim: int = 0
    v_head_dim: int = 0
    k_eq_v: bool = False
    window: int | None = None
    mla: MLAConfig | None = None
    state: StateConfig | None = None
    shared_from: int | None = None
    attends_as: str | None = None
    encoder_tokens: int = 0
    compressed: CompressedConfig | None = None
    hidden: HiddenConfig | None = None

    def geometry(self) -> str:
        """Short text of the layer's geometry: ``8×256``, ``latent 576 + idx 128``, ``state``."""
        if self.kind in (*KV_HEAD_KINDS, CROSS_KIND):
            v = "" if self.v_head_dim == self.head_dim else f"/{self.v_head_dim}"
            return f"{self.num_kv_heads}×{self.head_dim}{v}" + (" k=v" if self.k_eq_v else "")
        if self.kind == "mla" and self.mla is not None:
            idx = f" + idx {self.mla.index_head_dim}" if self.mla.index_head_dim else ""
            return f"latent {self.mla.latent_dim}{idx}"
        if self.kind == COMPRESSED_KIND and self.compressed is not None:
            c = self.compressed
            ratio = f" + c{c.ratio}" if c.ratio else ""
            idx = f" + idx {c.index_head_dim}" if c.index_head_dim else ""
            return f"1×{c.head_dim} k=v{ratio}{idx}"
        if self.kind == HIDDEN_KIND and self.hidden is not None:
            index = f" + {self.hidden.index_width} int64" if self.hidden.index_width else ""
            return f"hidden {self.hidden.width}{index}"
        return ""


@dataclass(frozen=True)
class ModelSpec:
    """A model's KV-cache geometry. All counts are ints; tokens and elements, never bytes.

    The top-level ``num_kv_heads``, ``head_dim`` and ``v_head_dim`` are the default geometry of attention
    layers (what config.json calls them); :attr:`layers` holds each layer's own, after ``geometry`` and
    ``per_layer`` overrides.

    Attributes:
        name: short name (``llama3-8b``).
        source: URL or path of the config.json the numbers came from.
        num_layers: decoder layers (L), every kind counted.
        num_q_heads: query heads (H_q).
        num_kv_heads: default KV heads (H_kv) of attention layers; H_q is a multiple of it.
        head_dim: default K head dim (d_head).
        v_head_dim: default V head dim (defaults to head_dim).
        hidden_size: model width, or None (only the activation estimate of ``fit`` uses it).
        vocab_size: vocabulary size (config.json ``vocab_size``), or None: the engine's profile run samples
            logits over it (the activation estimate of ``fit``; llama.cpp's compute buffer).
        intermediate_size: the dense MLP's width (config.json ``intermediate_size``), or None (the activation
            estimate then derives it from the parameter count).
        dtype: model activation dtype, the default KV dtype (canonical name, e.g. ``bf16``).
        param_count: total parameters (MoE: all experts), or None when unknown.
        weights_dtype: the dtype the checkpoint's weights ship in (``fp8``, ``mxfp4``), or None: ``dtype``.
        param_count_unquantized: parameters a quantized checkpoint keeps in ``dtype`` (embeddings ...).
        max_model_len: the model's maximum context (tokens).
        layers: one :class:`LayerSpec` per layer, length num_layers.
        sliding_window: tokens a sliding layer keeps, or None.
        attention_chunk_size: tokens a chunked layer keeps, or None.
        mla: the latent config, or None.
        states: state config per state kind present (``{"mamba2": StateConfig, ...}``).
        hf_repo: Hugging Face repository id, when known.
        architecture: the model class config.json names (``architectures[0]``, e.g. ``GptOssForCausalLM``),
            when known; engines that choose a rule by architecture (SGLang's hybrid SWA pool) read it.
        weights_bytes: exact bytes of the checkpoint's weights (all of them, before TP/PP), read from a
            GGUF's tensor infos or safetensors headers; None when only param_count is known. ``kvplan fit``
            uses it unless --weights-dtype is given.
        host_weights_bytes: bytes of ``weights_bytes`` a GGUF runtime keeps in host memory, not on the GPU:
            llama.cpp's input layer (``token_embd``, ``per_layer_token_embd``, ``pos_embd``, ``token_types``;
            src/llama-model.cpp: "always keep it on the CPU"), except a ``token_embd`` that is also the output
            (no ``output.weight``: a copy then sits on the GPU). 0 when unknown or not a GGUF.
        moe: mixture-of-experts facts (:class:`MoEConfig`), or None (dense, or not given).
        moe_intermediate_size: one routed expert's MLP width (config.json ``moe_intermediate_size``), or None;
            the engines' load checks of block-quantized experts read it.
        weight_block_size: ``[block_n, block_k]`` of a block-quantized checkpoint (config.json
            ``quantization_config.weight_block_size``, e.g. ``[128, 128]`` for DeepSeek's and Qwen's FP8), or
            None; it applies when the checkpoint is served as it ships (no --weights-dtype other than its own).
        notes: assumptions made in building the spec.
        reader: which reader built the spec from a config.json (``kvplan qwen3 reader (text model of
            Qwen3VLForConditionalGeneration)``, ``transformers 5.23.0 (no kvplan reader)``); "" for a spec YAML.
        prefix_tokens: learned tokens every request caches before its own in every token-caching layer
            (CPM-Ant's ``prompt_length`` prompt tokens), 0 for other models.
        multimodal: facts about a multimodal wrapper's encoder, for the engine's memory budget (wrapper
            model_type, vision model_type, encoder layers / width / patch size, image tokens per image when
            config.json fixes it); empty for a text-only model. Planning never reads it.
        origin: the file or reference the spec was loaded from.
        warnings: what the loader has to tell the user about this spec (the CLI prints them on stderr; the
            core never prints).
        weights_note: why the checkpoint found beside a config (a safetensors index) does not tell the
            weights, when it does not; ``kvplan fit`` says so instead of "no weights found".
    """

    name: str
    source: str
    num_layers: int
    num_q_heads: int
    num_kv_heads: int
    head_dim: int
    dtype: str
    max_model_len: int
    layers: tuple[LayerSpec, ...]
    v_head_dim: int | None = None
    hidden_size: int | None = None
    vocab_size: int | None = None
    intermediate_size: int | None = None
    param_count: int | None = None
    weights_dtype: str | None = None
    param_count_unquantized: int = 0
    sliding_window: int | None = None
    attention_chunk_size: int | None = None
    mla: MLAConfig | None = None
    states: dict = field(default_factory=dict, compare=False)
    hf_repo: str | None = None
    architecture: str | None = None
    notes: str = ""
    weights_bytes: int | None = None
    host_weights_bytes: int = 0
    moe: MoEConfig | None = None
    moe_intermediate_size: int | None = None
    weight_block_size: tuple[int, int] | None = None
    reader: str = ""
    prefix_tokens: int = 0
    multimodal: dict = field(default_factory=dict, compare=False)
    origin: str = field(default="", compare=False)
    warnings: tuple[str, ...] = field(default=(), compare=False)
    weights_note: str = field(default="", compare=False)

    @property
    def active_param_count(self) -> int | None:
        """Parameters one token uses: param_count less the routed experts it skips (MoE), else param_count."""
        if self.param_count is None or self.moe is None:
            return self.param_count
        return self.param_count - self.moe.inactive_param_count

    @cached_property
    def layer_kinds(self) -> tuple[str, ...]:
        """The kind of each layer, length num_layers (computed once: the spec is frozen)."""
        return tuple(layer.kind for layer in self.layers)

    @cached_property
    def layer_kind_set(self) -> frozenset[str]:
        """The kinds the layers have (computed once): ``kind in spec.layer_kind_set`` without a scan."""
        return frozenset(self.layer_kinds)

    def memo(self, key: tuple, compute: Callable[[], Any]) -> Any:
        """``compute()``, computed once per ``key`` for this spec: values derived from its layers (a TP's
        bytes per token, vLLM's KV cache groups) that a search planning the same model many times (``fit``'s
        advice, ``fleet``, ``sweep``) would otherwise rebuild layer by layer each time. The spec is frozen,
        so a value derived from it stays right; ``key`` must name every other input of ``compute`` (plain
        values: ints, strings, dtypes, tuples), starting with the function's own name."""
        cache = self.__dict__.setdefault("_memo", {})  # beside cached_property's values, outside the fields
        if key not in cache:
            cache[key] = compute()
        return cache[key]

    @cached_property
    def attention_free(self) -> bool:
        """True when no layer attends over positions (every layer a recurrent state or an MLP-only block: Mamba,
        RWKV, xLSTM): its ``max_model_len`` is the engine's default, not a positional limit of the model."""
        return all(kind in (*STATE_KINDS, "none") for kind in self.layer_kinds)

    @cached_property
    def cache_kinds(self) -> tuple[str, ...]:
        """Every cache kind the model keeps: its layer kinds, the state kinds kept beside attention layers
        (``parallel_state``: ``cca``, ``sconv``, ``mamba2`` ...), and ``prefix_tokens`` when it has some; each
        once, in order of appearance. Engines refuse the ones they have no rule for
        (:attr:`kvplan.engines.base.EngineRules.unplanned_kinds`). Computed once: the spec is frozen."""
        out: dict[str, None] = {}
        for layer in self.layers:
            out[layer.kind] = None
            if layer.state is not None:
                out[layer.state.kind] = None
        if self.prefix_tokens:
            out["prefix_tokens"] = None
        return tuple(out)

    @property
    def mamba(self) -> StateConfig | None:
        """The Mamba-1 state config, if any layer is ``mamba``."""
        return self.states.get("mamba")

    @property
    def v_dim(self) -> int:
        """Default V head dim actually used (``v_head_dim`` or ``head_dim``)."""
        return self.v_head_dim if self.v_head_dim is not None else self.head_dim

    @property
    def queries_per_kv_head(self) -> int:
        """Query heads served by one KV head (H_q / H_kv) in the default geometry."""
        return self.num_q_heads // self.num_kv_heads

    @cached_property
    def kv_head_counts(self) -> tuple[int, ...]:
        """The distinct H_kv of the model's attention layers (per-head kinds), ascending (computed once)."""
        return tuple(
            sorted(
                {
                    layer.num_kv_heads
                    for layer in self.layers
                    if layer.kind in (*KV_HEAD_KINDS, CROSS_KIND, COMPRESSED_KIND)
                }
            )
        )

    @property
    def topology(self) -> str:
        """``MHA``, ``GQA``, ``MQA`` or ``MLA`` (the attention layers' head topology); ``none`` if no attention."""
        if "mla" in self.layer_kinds:
            return "MLA"
        heads = self.kv_head_counts
        if not heads:
            return "none"
        if all(h == self.num_q_heads for h in heads):
            return "MHA"
        if all(h == 1 for h in heads):
            return "MQA"
        return "GQA"

    def kind_counts(self) -> dict[str, int]:
        """Layers per kind, in :data:`LAYER_KINDS` order, kinds with no layers left out."""
        kinds = self.layer_kinds
        return {k: kinds.count(k) for k in LAYER_KINDS if k in kinds}

    def window_of(self, kind: str) -> int | None:
        """Token limit of a layer kind: the window, the chunk, or None (all tokens / no tokens)."""
        if kind == "sliding":
            return self.sliding_window
        if kind == "chunked":
            return self.attention_chunk_size
        if kind == COMPRESSED_KIND:  # the sliding branch of DeepSeek-V4's layers (one window per model)
            return next((x.compressed.window for x in self.layers if x.compressed is not None), None)
        if kind == HIDDEN_KIND:  # XLNet's mem_len (one per model); None: every token (Reformer)
            return next((x.hidden.window for x in self.layers if x.hidden is not None), None)
        return None

    def with_kv_heads(self, num_kv_heads: int, name: str | None = None) -> ModelSpec:
        """A copy whose attention layers all have ``num_kv_heads`` KV heads (the MHA/GQA/MQA comparison).

        Raises:
            SpecError: H_q is not a multiple of the new H_kv.
        """
        from dataclasses import replace

        if num_kv_heads < 1 or self.num_q_heads % num_kv_heads:
            raise SpecError(
                f"{self.name}: num_q_heads={self.num_q_heads} is not a multiple of num_kv_heads={num_kv_heads}"
            )
        layers = tuple(
            replace(layer, num_kv_heads=num_kv_heads) if layer.kind in KV_HEAD_KINDS else layer
            for layer in self.layers
        )
        return replace(self, num_kv_heads=num_kv_heads, layers=layers, name=name or self.name)


# --- validation helpers ---------------------------------------------------------------------------

_TOP_KEYS = {
    "name",
    "source",
    "hf_repo",
    "architecture",
    "num_layers",
    "num_q_heads",
    "num_kv_heads",
    "head_dim",
    "v_head_dim",
    "hidden_size",
    "vocab_size",
    "intermediate_size",
    "dtype",
    "param_count",
    "weights_dtype",
    "param_count_unquantized",
    "max_model_len",
    "sliding_window",
    "attention_chunk_size",
    "layers",
    "geometry",
    "per_layer",
    "num_kv_shared_layers",
    "parallel_state",
    "mla",
    *STATE_KINDS,
    "moe",
    "moe_intermediate_size",
    "weight_block_size",
    "notes",
    "cross_attention",
    "compressed",
    "hidden",
    "prefix_tokens",
    "reader",
    "multimodal",
}
_REQUIRED = ("name", "source", "num_layers", "num_q_heads", "num_kv_heads", "head_dim", "dtype", "max_model_len")
_GEOMETRY_KEYS = ("num_kv_heads", "head_dim", "v_head_dim", "k_eq_v")


def _pos_int(
    where: str, key: str, value: Any, *, allow_none: bool = False, minimum: int = 1, maximum: int = MAX_DIMENSION
) -> int | None:
    if value is None and allow_none:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise SpecError(f"{where}: {key}={value!r} must be an integer >= {minimum}")
    if value < minimum:
        raise SpecError(f"{where}: {key}={value} must be an integer >= {minimum}")
    if value > maximum:
        raise SpecError(f"{where}: {key}={value} is larger than kvplan handles (at most {maximum:,})")
    return value


def _check_keys(where: str, data: dict, allowed: set[str] | tuple[str, ...], prefix: str = "") -> None:
    import difflib

    allowed = set(allowed)
    unknown = sorted(set(data) - allowed, key=str)
    if unknown:
        k = unknown[0]
        close = difflib.get_close_matches(str(k), sorted(allowed), n=1)
        hint = f" (did you mean {prefix}{close[0]}?)" if close else ""
        raise SpecError(f"{where}: unknown key {prefix}{k!r}{hint}; allowed: {', '.join(sorted(allowed))}")


def _mapping(where: str, key: str, value: Any, what: str) -> dict:
    if not isinstance(value, dict):
        raise SpecError(f"{where}: {key} must be a mapping of {what}")
    return value


def _resolve_layers(where: str, layers: Any, num_layers: int, default_kind: str) -> list[str]:
    """Turn the ``layers:`` value of a spec into one kind per layer."""

    def check_kind(kind: Any, key: str) -> str:
        if kind not in LAYER_KINDS:
            raise SpecError(f"{where}: {key}={kind!r} is not a layer kind; allowed: {', '.join(LAYER_KINDS)}")
        return kind

    if layers is None:
        return [default_kind] * num_layers
    if isinstance(layers, list):
        if len(layers) != num_layers:
            raise SpecError(f"{where}: layers lists {len(layers)} kinds but num_layers={num_layers}")
        return [check_kind(k, f"layers[{i}]") for i, k in enumerate(layers)]
    if not isinstance(layers, dict):
        raise SpecError(f"{where}: layers must be a list of kinds or a mapping with default and rules")
    _check_keys(where, layers, {"default", "rules"}, "layers.")
    kinds = [check_kind(layers.get("default", default_kind), "layers.default")] * num_layers
    rules = layers.get("rules") or []
    if not isinstance(rules, list):
        raise SpecError(f"{where}: layers.rules must be a list of rules")
    for n, rule in enumerate(rules):
        key = f"layers.rules[{n}]"
        if not isinstance(rule, dict):
            raise SpecError(f"{where}: {key} must be a mapping with kind and period/offset or indices")
        _check_keys(where, rule, {"kind", "period", "offset", "indices"}, f"{key}.")
        kind = check_kind(rule.get("kind"), f"{key}.kind")
        if "indices" in rule:
            if "period" in rule or "offset" in rule:
                raise SpecError(f"{where}: {key} gives both indices and period/offset; use one")
            idx = rule["indices"]
            if not isinstance(idx, list) or not idx:
                raise SpecError(f"{where}: {key}.indices must be a non-empty list of layer indices")
            for i in idx:
                if isinstance(i, bool) or not isinstance(i, int) or not 0 <= i < num_layers:
                    raise SpecError(f"{where}: {key}.indices has {i!r}; allowed: 0..{num_layers - 1}")
                kinds[i] = kind
        elif "period" in rule:
            period = _pos_int(where, f"{key}.period", rule["period"])
            offset = rule.get("offset", 0)
            if isinstance(offset, bool) or not isinstance(offset, int) or not 0 <= offset < period:
                raise SpecError(f"{where}: {key}.offset={offset!r} must be an integer in 0..{period - 1}")
            for i in range(num_layers):
                if i % period == offset:
                    kinds[i] = kind
        else:
            raise SpecError(f"{where}: {key} needs period (with offset) or indices")
    return kinds


def _canonical_dtype(where: str, key: str, value: Any) -> str:
    from kvplan.errors import UsageError

    try:
        return get_kv_dtype(str(value), what=f"{where}: {key}").name
    except UsageError as e:
        raise SpecError(str(e)) from None


def _state_config(where: str, kind: str, value: Any) -> StateConfig:
    m = _mapping(where, kind, value, "its dimensions")
    required, optional = STATE_FIELDS[kind]
    _check_keys(where, m, {*required, *optional, "conv_dtype", "ssm_dtype", "state_dtype"}, f"{kind}.")
    dims = {}
    for key in required:
        minimum = 2 if key == "d_conv" else 1
        if m.get(key) is None:
            raise SpecError(f"{where}: {kind}.{key} is missing; {kind} needs {', '.join(required)}")
        dims[key] = _pos_int(where, f"{kind}.{key}", m[key], minimum=minimum)
    dtypes = {}
    for key in ("conv_dtype", "ssm_dtype"):
        raw = m.get(key, m.get("state_dtype"))
        if raw is not None:
            name = _canonical_dtype(where, f"{kind}.{key}", raw)
            if name not in STATE_DTYPES:
                raise SpecError(f"{where}: {kind}.{key}={raw!r}; allowed: {', '.join(STATE_DTYPES)}")
            dtypes[key] = name
    if kind == "mamba2" and dims["n_groups"] > dims["num_heads"]:
        raise SpecError(f"{where}: mamba2.n_groups={dims['n_groups']} exceeds num_heads={dims['num_heads']}")
    return StateConfig(kind, **dims, **dtypes)


def _per_layer_geometry(where: str, data: dict, num_layers: int) -> dict[str, list]:
    """``per_layer:`` lists, each of num_layers values (None keeps the default for that layer)."""
    if data.get("per_layer") is None:
        return {}
    per_layer = _mapping(where, "per_layer", data["per_layer"], "per-layer lists")
    _check_keys(where, per_layer, {"num_kv_heads", "head_dim", "v_head_dim", "num_q_heads"}, "per_layer.")
    out = {}
    for key, values in per_layer.items():
        if not isinstance(values, list) or len(values) != num_layers:
            raise SpecError(f"{where}: per_layer.{key} must list {num_layers} values (one per layer)")
        out[key] = [_pos_int(where, f"per_layer.{key}[{i}]", v, allow_none=True) for i, v in enumerate(values)]
    return out


def _kind_geometry(where: str, data: dict) -> dict[str, dict]:
    """``geometry:`` overrides per attention kind."""
    if data.get("geometry") is None:
        return {}
    geometry = _mapping(where, "geometry", data["geometry"], "layer kind -> overrides")
    _check_keys(where, geometry, set(KV_HEAD_KINDS), "geometry.")
    out: dict[str, dict] = {}
    for kind, over in geometry.items():
        over = _mapping(where, f"geometry.{kind}", over, "num_kv_heads, head_dim, v_head_dim, k_eq_v")
        _check_keys(where, over, set(_GEOMETRY_KEYS), f"geometry.{kind}.")
        checked: dict[str, Any] = {}
        for key, value in over.items():
            if key == "k_eq_v":
                if not isinstance(value, bool):
                    raise SpecError(f"{where}: geometry.{kind}.k_eq_v={value!r} must be true or false")
                checked[key] = value
            else:
                checked[key] = _pos_int(where, f"geometry.{kind}.{key}", value)
        out[kind] = checked
    return out


def _apply_kv_sharing(where: str, kinds: list[str], shared: int) -> list[tuple[str, int | None, str | None]]:
    """(kind, shared_from, attends_as) per layer: the last ``shared`` layers read the cache of the last
    earlier non-shared layer of the same attention kind (transformers ``Gemma3nTextAttention``:
    ``kv_shared_layer_index``; vLLM gemma3n ``kv_sharing_target_layer_name``)."""
    out: list[tuple[str, int | None, str | None]] = [(k, None, None) for k in kinds]
    if not shared:
        return out
    first = len(kinds) - shared
    if first < 1:
        raise SpecError(f"{where}: num_kv_shared_layers={shared} must be below num_layers={len(kinds)}")
    last = {kinds[j]: j for j in range(first)}  # last non-shared layer of each kind (one pass, not per layer)
    for i in range(first, len(kinds)):
        kind = kinds[i]
        if kind not in KV_HEAD_KINDS:
            raise SpecError(f"{where}: layer {i} is shared (num_kv_shared_layers) but of kind {kind}, not attention")
        source = last.get(kind)
        if source is None:
            raise SpecError(f"{where}: shared layer {i} ({kind}) has no earlier {kind} layer to reuse")
        out[i] = ("shared", source, kind)
    return out


_MOE_REQUIRED = ("num_experts", "experts_per_token", "expert_param_count")
_MOE_KEYS = {*_MOE_REQUIRED, "num_moe_layers", "num_shared_experts", "shared_expert_param_count"}


def _moe_config(where: str, value: Any, num_layers: int, param_count: int | None) -> MoEConfig:
    """The ``moe:`` block: k <= E, MoE layers <= num_layers, experts within param_count."""
    m = _mapping(where, "moe", value, "num_experts, experts_per_token, expert_param_count")
    _check_keys(where, m, _MOE_KEYS, "moe.")
    for key in _MOE_REQUIRED:
        if m.get(key) is None:
            raise SpecError(f"{where}: moe.{key} is missing; moe needs {', '.join(_MOE_REQUIRED)}")
    num = _pos_int(where, "moe.num_experts", m["num_experts"])
    k = _pos_int(where, "moe.experts_per_token", m["experts_per_token"])
    expert = _pos_int(where, "moe.expert_param_count", m["expert_param_count"], maximum=1 << 50)
    layers = _pos_int(where, "moe.num_moe_layers", m.get("num_moe_layers", num_layers))
    if k > num:
        raise SpecError(f"{where}: moe.experts_per_token={k} must not exceed moe.num_experts={num}")
    if layers > num_layers:
        raise SpecError(f"{where}: moe.num_moe_layers={layers} must not exceed num_layers={num_layers}")
    shared = _pos_int(where, "moe.num_shared_experts", m.get("num_shared_experts", 0), minimum=0)
    shared_params = _pos_int(
        where, "moe.shared_expert_param_count", m.get("shared_expert_param_count"), allow_none=True, maximum=1 << 50
    )
    cfg = MoEConfig(num, k, expert, layers, shared, shared_params)
    experts = cfg.routed_param_count + layers * cfg.shared_param_count
    if param_count is not None and experts > param_count:
        raise SpecError(
            f"{where}: moe: the experts hold {experts:,} parameters, more than param_count={param_count:,}"
        )
    return cfg


def _block_size(where: str, value: Any) -> tuple[int, int] | None:
    """``weight_block_size``: two positive ints ``[block_n, block_k]`` (config.json's quantization_config)."""
    if value is None:
        return None
    if not isinstance(value, (list, tuple)) or len(value) != 2:
        raise SpecError(
            f"{where}: weight_block_size={value!r} must be two integers [block_n, block_k], e.g. [128, 128]"
        )
    n, k = (_pos_int(where, f"weight_block_size[{i}]", v, maximum=1 << 20) for i, v in enumerate(value))
    return (n, k)


def _cross_attention(where: str, value: Any) -> int | None:
    """The ``cross_attention:`` block: ``encoder_tokens`` (>= 1), the tokens a cross layer caches per request."""
    if value is None:
        return None
    m = _mapping(where, "cross_attention", value, "encoder_tokens")
    _check_keys(where, m, {"encoder_tokens"}, "cross_attention.")
    return _pos_int(where, "cross_attention.encoder_tokens", m.get("encoder_tokens"))


_COMPRESSED_KEYS = {"head_dim", "window", "ratios", "csa_ratio", "index_head_dim"}


def _compressed_block(where: str, value: Any, num_layers: int) -> dict | None:
    """The ``compressed:`` block (DeepSeek-V4): ``head_dim``, ``window``, ``ratios`` (one per layer, >= 0; 0 is
    the sliding branch only), optional ``csa_ratio`` (layers of this ratio are CSA: overlapping windows and,
    with ``index_head_dim``, an indexer key per entry)."""
    if value is None:
        return None
    m = _mapping(where, "compressed", value, "head_dim, window, ratios")
    _check_keys(where, m, _COMPRESSED_KEYS, "compressed.")
    ratios = m.get("ratios")
    if not isinstance(ratios, list) or len(ratios) != num_layers:
        raise SpecError(f"{where}: compressed.ratios must list {num_layers} ratios (one per layer, 0 for none)")
    return {
        "head_dim": _pos_int(where, "compressed.head_dim", m.get("head_dim")),
        "window": _pos_int(where, "compressed.window", m.get("window")),
        "ratios": [_pos_int(where, f"compressed.ratios[{i}]", r, minimum=0) for i, r in enumerate(ratios)],
        "csa_ratio": _pos_int(where, "compressed.csa_ratio", m.get("csa_ratio"), allow_none=True),
        "index_head_dim": _pos_int(where, "compressed.index_head_dim", m.get("index_head_dim"), allow_none=True),
    }


_HIDDEN_KEYS = {"width", "window", "index_width", "index_layers"}


def _hidden_block(where: str, value: Any, num_layers: int) -> list[HiddenConfig] | None:
    """The ``hidden:`` block (XLNet, Reformer): ``width`` (elements per token), optional ``window`` (tokens kept;
    absent: every token), optional ``index_width`` (int64 per token) on the layers ``index_layers`` lists (every
    layer when it is absent). One :class:`HiddenConfig` per layer."""
    if value is None:
        return None
    m = _mapping(where, "hidden", value, "width, window, index_width, index_layers")
    _check_keys(where, m, _HIDDEN_KEYS, "hidden.")
    width = _pos_int(where, "hidden.width", m.get("width"))
    window = _pos_int(where, "hidden.window", m.get("window"), allow_none=True)
    index = _pos_int(where, "hidden.index_width", m.get("index_width", 0), minimum=0)
    on = m.get("index_layers")
    if on is None:
        on = list(range(num_layers))
    if not isinstance(on, list) or any(isinstance(i, bool) or not isinstance(i, int) or not 0 <= i < num_layers
                                       for i in on):  # fmt: skip
        raise SpecError(f"{where}: hidden.index_layers must list layer indices in 0..{num_layers - 1}")
    with_index = HiddenConfig(width, window, index)
    without = HiddenConfig(width, window, 0)
    chosen = set(on)
    return [with_index if i in chosen else without for i in range(num_layers)]


def _compressed_layer(block: dict, i: int) -> CompressedConfig:
    ratio = block["ratios"][i]
    csa = bool(ratio) and ratio == block["csa_ratio"]
    index = (block["index_head_dim"] or 0) if csa else 0
    return CompressedConfig(block["head_dim"], block["window"], ratio, index, csa)


def _one_line(where: str, key: str, value: Any) -> str:
    """An optional one-line text field ("" when absent)."""
    if value is None:
        return ""
    if not isinstance(value, str) or any(ord(c) < 32 or ord(c) == 127 for c in value):
        raise SpecError(f"{where}: {key} must be one line of printable text")
    return value.strip()


def _multimodal(where: str, value: Any) -> dict:
    """The ``multimodal:`` facts: a mapping of names to numbers, strings, booleans or null."""
    if value is None:
        return {}
    m = _mapping(where, "multimodal", value, "names to numbers or strings")
    for key, v in m.items():
        if not isinstance(key, str) or not (v is None or isinstance(v, (bool, int, str))):
            raise SpecError(f"{where}: multimodal.{key} must be a number, a string, true/false or null")
    return dict(m)


def _architecture(where: str, value: Any) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str) or not value.isidentifier():
        raise SpecError(f"{where}: architecture={str(value)[:80]!r} must be a model class name (GptOssForCausalLM)")
    return value


def build_spec(data: Any, where: str) -> ModelSpec:
    """Validate a parsed spec mapping and build a :class:`ModelSpec` with one :class:`LayerSpec` per layer.

    Args:
        data: the mapping from the YAML file (``yaml.safe_load``), or one a config reader built.
        where: file name used in error messages.

    Raises:
        SpecError: unknown or missing keys, wrong types, values < 1, H_q not a multiple of a layer's
            H_kv, a layer kind without its parameters (sliding without sliding_window ...), a parameter
            block no layer uses.
    """
    if data is None:
        raise SpecError(f"{where}: empty file; a spec is a YAML mapping of fields (see 'kvplan models')")
    if not isinstance(data, dict):
        raise SpecError(f"{where}: a spec must be a YAML mapping of fields, got {type(data).__name__}")
    _check_keys(where, data, _TOP_KEYS)
    for key in _REQUIRED:
        if data.get(key) is None:
            raise SpecError(f"{where}: missing required field {key}")
    for key in ("name", "source"):
        if not isinstance(data[key], str) or not data[key].strip():
            raise SpecError(f"{where}: {key} must be a non-empty string")
        if any(ord(c) < 32 or ord(c) == 127 for c in data[key]):
            raise SpecError(f"{where}: {key} must be one line of printable text")
    num_layers = _pos_int(where, "num_layers", data["num_layers"], maximum=MAX_LAYERS)
    num_q_heads = _pos_int(where, "num_q_heads", data["num_q_heads"])
    num_kv_heads = _pos_int(where, "num_kv_heads", data["num_kv_heads"])
    head_dim = _pos_int(where, "head_dim", data["head_dim"])
    v_head_dim = _pos_int(where, "v_head_dim", data.get("v_head_dim"), allow_none=True)
    max_model_len = _pos_int(where, "max_model_len", data["max_model_len"])
    hidden_size = _pos_int(where, "hidden_size", data.get("hidden_size"), allow_none=True)
    vocab_size = _pos_int(where, "vocab_size", data.get("vocab_size"), allow_none=True, maximum=1 << 31)
    intermediate_size = _pos_int(where, "intermediate_size", data.get("intermediate_size"), allow_none=True)
    param_count = _pos_int(where, "param_count", data.get("param_count"), allow_none=True, maximum=1 << 50)
    kept = _pos_int(
        where, "param_count_unquantized", data.get("param_count_unquantized", 0), minimum=0, maximum=1 << 50
    )
    if kept and (param_count is None or kept > param_count):
        raise SpecError(f"{where}: param_count_unquantized={kept} must not exceed param_count={param_count}")
    weights_dtype = data.get("weights_dtype")
    if weights_dtype is not None:
        from kvplan.dtypes import get_weight_dtype
        from kvplan.errors import UsageError

        try:
            weights_dtype = get_weight_dtype(str(weights_dtype), what=f"{where}: weights_dtype").name
        except UsageError as e:
            raise SpecError(str(e)) from None
    sliding_window = _pos_int(where, "sliding_window", data.get("sliding_window"), allow_none=True)
    chunk = _pos_int(where, "attention_chunk_size", data.get("attention_chunk_size"), allow_none=True)
    if num_q_heads % num_kv_heads:
        raise SpecError(f"{where}: num_q_heads={num_q_heads} is not a multiple of num_kv_heads={num_kv_heads}")
    dtype = _canonical_dtype(where, "dtype", data["dtype"])
    if dtype not in MODEL_DTYPES:
        raise SpecError(
            f"{where}: dtype={data['dtype']!r} is a cache format, not a model dtype; allowed: {', '.join(MODEL_DTYPES)}"
        )

    mla = None
    if data.get("mla") is not None:
        m = _mapping(where, "mla", data["mla"], "kv_lora_rank and qk_rope_head_dim")
        _check_keys(where, m, {"kv_lora_rank", "qk_rope_head_dim", "index_head_dim"}, "mla.")
        mla = MLAConfig(
            _pos_int(where, "mla.kv_lora_rank", m.get("kv_lora_rank")),
            _pos_int(where, "mla.qk_rope_head_dim", m.get("qk_rope_head_dim"), minimum=0),
            _pos_int(where, "mla.index_head_dim", m.get("index_head_dim"), allow_none=True),
        )
    states = {k: _state_config(where, k, data[k]) for k in STATE_KINDS if data.get(k) is not None}
    moe = None if data.get("moe") is None else _moe_config(where, data["moe"], num_layers, param_count)
    moe_intermediate = _pos_int(where, "moe_intermediate_size", data.get("moe_intermediate_size"), allow_none=True)
    block = _block_size(where, data.get("weight_block_size"))
    encoder_tokens = _cross_attention(where, data.get("cross_attention"))
    compressed = _compressed_block(where, data.get("compressed"), num_layers)
    hidden = _hidden_block(where, data.get("hidden"), num_layers)
    prefix_tokens = _pos_int(where, "prefix_tokens", data.get("prefix_tokens", 0), minimum=0)

    default_kind = "mla" if mla is not None else "full"
    kinds = _resolve_layers(where, data.get("layers"), num_layers, default_kind)
    needs: dict[str, tuple[Any, str]] = {
        "sliding": (sliding_window, "sliding_window"),
        "chunked": (chunk, "attention_chunk_size"),
        "mla": (mla, "mla"),
        **{k: (states.get(k), k) for k in STATE_KINDS},
        CROSS_KIND: (encoder_tokens, "cross_attention"),
        COMPRESSED_KIND: (compressed, "compressed"),
        HIDDEN_KIND: (hidden, "hidden"),
    }
    for kind, (value, key) in needs.items():
        if kind in kinds and value is None:
            raise SpecError(f"{where}: layers has {kind} layers but {key} is not given")
    if mla is not None and "mla" not in kinds:
        raise SpecError(f"{where}: mla is given but no layer is of kind mla")
    parallel = data.get("parallel_state")
    if parallel is not None:
        if parallel not in STATE_KINDS or parallel not in states:
            raise SpecError(
                f"{where}: parallel_state={parallel!r} must name a state block the spec gives "
                f"({', '.join(states) or 'none given'})"
            )
        if not any(k in KV_HEAD_KINDS for k in kinds):
            raise SpecError(f"{where}: parallel_state is given but no layer is an attention layer")
    for kind in states:
        if kind not in kinds and kind != parallel:
            raise SpecError(f"{where}: {kind} is given but no layer is of kind {kind}")
    if encoder_tokens is not None and CROSS_KIND not in kinds:
        raise SpecError(f"{where}: cross_attention is given but no layer is of kind cross")
    if compressed is not None and COMPRESSED_KIND not in kinds:
        raise SpecError(f"{where}: compressed is given but no layer is of kind compressed")
    if hidden is not None and HIDDEN_KIND not in kinds:
        raise SpecError(f"{where}: hidden is given but no layer is of kind hidden")
    if prefix_tokens and not any(k in (*ATTENTION_KINDS, COMPRESSED_KIND, HIDDEN_KIND) for k in kinds):
        raise SpecError(f"{where}: prefix_tokens is given but no layer caches tokens")

    geometry = _kind_geometry(where, data)
    per_layer = _per_layer_geometry(where, data, num_layers)
    shared_n = _pos_int(where, "num_kv_shared_layers", data.get("num_kv_shared_layers", 0), minimum=0)
    sharing = _apply_kv_sharing(where, kinds, shared_n)

    unset = [None] * num_layers  # built once: a per-layer copy makes spec building quadratic in num_layers
    per_kv = per_layer.get("num_kv_heads", unset)
    per_d = per_layer.get("head_dim", unset)
    per_dv = per_layer.get("v_head_dim", unset)
    per_q = per_layer.get("num_q_heads", unset)  # OpenELM: query heads per layer (num_q_heads: the largest)

    def attention_layer(i: int, kind: str) -> LayerSpec:
        over = geometry.get(kind, {})
        h = over.get("num_kv_heads", num_kv_heads)
        d = over.get("head_dim", head_dim)
        dv = over.get("v_head_dim", v_head_dim if "head_dim" not in over else None)
        h = per_kv[i] or h
        d = per_d[i] or d
        dv = per_dv[i] or dv or d
        q = per_q[i] or num_q_heads
        if q % h:
            raise SpecError(f"{where}: layer {i} ({kind}): num_q_heads={q} is not a multiple of num_kv_heads={h}")
        key = (kind, h, d, dv, over.get("k_eq_v", False))
        layer = made.get(key)
        if layer is None:  # layers alike share one (frozen) LayerSpec: built once, counted by identity later
            state = states[parallel] if parallel else None  # Falcon-H1, Zamba2: attention and Mamba-2 side by side
            if state is not None and state.kind == "sconv":  # Inkling: its K and V convs are the layer's K/V width
                state = replace(state, num_k_heads=h, head_k_dim=d)
            window = needs.get(kind, (None,))[0]
            layer = LayerSpec(kind, h, d, dv, over.get("k_eq_v", False), window=window, state=state)
            made[key] = layer
        return layer

    made: dict[tuple, LayerSpec] = {}
    plain = {"mla": LayerSpec("mla", mla=mla), **{k: LayerSpec(k, state=v) for k, v in states.items()}}
    layers: list[LayerSpec] = []
    for i, (kind, source, attends_as) in enumerate(sharing):
        if kind in KV_HEAD_KINDS:
            layers.append(attention_layer(i, kind))
        elif kind == "shared" and attends_as is not None:
            base = attention_layer(i, attends_as)
            layers.append(LayerSpec("shared", base.num_kv_heads, base.head_dim, base.v_head_dim, base.k_eq_v,
                                    base.window, shared_from=source, attends_as=attends_as))
        elif kind == CROSS_KIND:
            base = attention_layer(i, "full")
            layers.append(LayerSpec(CROSS_KIND, base.num_kv_heads, base.head_dim, base.v_head_dim,
                                    encoder_tokens=encoder_tokens))
        elif kind in plain:
            layers.append(plain[kind])
        elif kind == COMPRESSED_KIND:
            c = _compressed_layer(compressed, i)
            layers.append(LayerSpec(kind, 1, c.head_dim, c.head_dim, True, c.window, compressed=c))
        elif kind == HIDDEN_KIND:
            key = ("hidden", hidden[i])
            if key not in made:
                made[key] = LayerSpec(kind, window=hidden[i].window, hidden=hidden[i])
            layers.append(made[key])
        else:
            layers.append(plain.setdefault(kind, LayerSpec(kind)))
    for kind in geometry:
        if kind not in kinds:
            raise SpecError(f"{where}: geometry.{kind} is given but no layer is of kind {kind}")
    cached = False  # whether an earlier layer keeps an attention cache
    for i, layer in enumerate(layers):  # a shared layer listed by kind must have an earlier cache to read
        if layer.kind == "shared" and layer.shared_from is None:
            if not cached:
                raise SpecError(
                    f"{where}: layer {i} is shared but no earlier layer keeps an attention cache for it to read; "
                    "a shared layer reuses an earlier layer's cache (see num_kv_shared_layers)"
                )
        cached = cached or layer.kind in ATTENTION_KINDS
    if all(layer.kind in ("shared", "none") for layer in layers):
        raise SpecError(f"{where}: no layer keeps a cache of its own (all shared or none)")
    notes = data.get("notes") or ""
    hf_repo = data.get("hf_repo")
    return ModelSpec(
        name=data["name"].strip(),
        source=data["source"].strip(),
        num_layers=num_layers,
        num_q_heads=num_q_heads,
        num_kv_heads=num_kv_heads,
        head_dim=head_dim,
        v_head_dim=v_head_dim,
        hidden_size=hidden_size,
        vocab_size=vocab_size,
        intermediate_size=intermediate_size,
        dtype=dtype,
        param_count=param_count,
        weights_dtype=weights_dtype,
        param_count_unquantized=kept,
        max_model_len=max_model_len,
        layers=tuple(layers),
        sliding_window=sliding_window,
        attention_chunk_size=chunk,
        mla=mla,
        states=states,
        hf_repo=None if hf_repo is None else str(hf_repo),
        architecture=_architecture(where, data.get("architecture")),
        moe=moe,
        moe_intermediate_size=moe_intermediate,
        weight_block_size=block,
        notes=str(notes).strip(),
        reader=_one_line(where, "reader", data.get("reader")),
        prefix_tokens=prefix_tokens,
        multimodal=_multimodal(where, data.get("multimodal")),
        origin=where,
    )
