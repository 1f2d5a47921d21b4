"""Parameter counts from a config.json alone: embeddings, attention, MLP or MoE experts, norms, lm_head.

``kvplan fit`` sizes weights from the checkpoint's safetensors headers when it can read them; a bare
config.json has none, so the count here stands in (``param_count`` of the spec, then ``weights dtype ×
param_count``). Each family below mirrors the modules transformers 5.23 builds for that model_type
(``<Name>ForCausalLM``), with the config class's defaults for absent keys, and is checked against
``sum(p.numel() for p in model.parameters())`` of that model built on the meta device, on every real
config.json fixture and on each class's default config (tests/test_params.py). Tied embeddings
(``tie_word_embeddings``) are counted once, as ``parameters()`` does.

Counted families (``model_type``):

===============================================  =========================================================
family                                           what each decoder layer holds
===============================================  =========================================================
llama, mistral, qwen2, qwen3, phi3, granite,     q/k/v/o projections (biases where the class has them:
olmo2, olmo3, gemma, gemma2, gemma3_text,        ``attention_bias``, Qwen2's q/k/v), a gated MLP
starcoder2, helium, internlm3, ministral3,       (``gate``, ``up``, ``down``; Starcoder2 and Arcee a plain
seed_oss, smollm3, hyperclovax, exaone4, glm4,   ``up``/``down``), and the norms of the class (2 per layer,
apertus, arcee, ernie4_5, stablelm, phi, cohere  4 in Gemma 2/3, GLM-4 and HyperCLOVAX, 1 in Phi and
                                                 Cohere; LayerNorm biases in Starcoder2, StableLM, Phi,
                                                 PhiMoE);
                                                 q/k norms per head (Qwen3, Gemma 3, Exaone 4, Apertus)
                                                 or over all heads (OLMo 2/3)
mixtral, qwen2_moe, qwen3_moe, olmoe, phimoe,    the same attention, and on MoE layers a router
granitemoe                                       (``num_experts × hidden``) and ``num_experts`` gated
                                                 experts (Qwen2-MoE also a shared expert and its gate)
deepseek_v2, deepseek_v3, kimi_k2, glm4_moe      MLA (DeepSeek: ``q_a``/``q_b`` or ``q``, ``kv_a``,
                                                 ``kv_b``, ``o`` and the two latent norms) or GQA
                                                 (GLM-4.5+), dense MLP on the first
                                                 ``first_k_dense_replace`` layers, then routed and shared
                                                 experts
gpt_oss                                          biased q/k/v/o, attention sinks, a biased router and
                                                 experts with biased ``gate_up`` / ``down``
===============================================  =========================================================

Multimodal wrappers (Gemma 3, LLaVA, Mistral 3, Qwen2.5-VL, Qwen3-VL) are counted with their vision tower and
projector by :func:`count_wrapper_params` (:mod:`kvplan.readers.params_vision`). Not counted (``param_count``
stays None and ``kvplan fit`` asks for ``--weights-gib``): other wrappers, hybrids and linear attention (but
granitemoehybrid, :func:`count_granitemoehybrid`), and every other model_type. MTP layers
(``num_nextn_predict_layers``) are not part of transformers' model and vLLM loads them only for speculative
decoding: they are not counted. Buffers (DeepSeek-V3's
``e_score_correction_bias``) are not parameters. ``quantization_config`` changes how many bytes a weight
takes, not how many weights there are: it is ignored here.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class ParamCount:
    """Parameters of a model, counted from its config.json.

    Attributes:
        total: every parameter (tied embeddings once).
        embedding: the input embedding and, when untied, the lm_head (with its bias, Phi): the parameters a
            quantized checkpoint keeps in 16 bit.
        moe: the spec's ``moe:`` block (num_experts, experts_per_token, expert_param_count, num_moe_layers,
            num_shared_experts, shared_expert_param_count), or None for a dense model.
    """

    total: int
    embedding: int
    moe: dict | None = None


class _Unknown(Exception):
    """A value the count needs is missing or not a plain count: no count (never a guess)."""


# model_type -> its recipe. Keys: vocab, inter (intermediate_size), tie (tie_word_embeddings), hidden: class
# defaults. qkv_bias / o_bias / mlp_bias: True, False, or (config key, class default); o_bias absent: o_proj
# follows an ("attention_bias", ...) qkv_bias, else has none. qk_norm: "head" (head_dim wide), "full" (all
# heads' width), "stablelm" (per head), "phi" (LayerNorm over head_dim), with qk_norm_key (key, default) when a
# flag switches it on. mlp: "gated" or "plain" (up, down). act: trainable activation parameters per layer.
# norms: norms per layer; norm_bias: LayerNorm with bias; lm_head_bias; attention: "mla" or "sinks"; moe: the
# MoE layout ("all" layers, "qwen" sparse steps, "deepseek" dense prefix, "gpt_oss").
_FAMILIES: dict[str, dict[str, Any]] = {
    "llama": {"vocab": 32000, "inter": 11008, "qkv_bias": ("attention_bias", False), "mlp_bias": ("mlp_bias", False)},
    "mistral": {"vocab": 32000, "inter": 14336},
    "qwen2": {"vocab": 151936, "inter": 22016, "qkv_bias": True},
    "qwen3": {"vocab": 151936, "inter": 22016, "qkv_bias": ("attention_bias", False), "qk_norm": "head"},
    "phi3": {"vocab": 32064, "inter": 8192},
    "granite": {"vocab": 32000, "inter": 11008, "qkv_bias": ("attention_bias", False), "mlp_bias": ("mlp_bias", False)},
    "olmo2": {"vocab": 50304, "inter": 11008, "qkv_bias": ("attention_bias", False), "qk_norm": "full"},
    "olmo3": {"vocab": 50304, "inter": 11008, "qkv_bias": ("attention_bias", False), "qk_norm": "full"},
    "gemma": {"vocab": 256000, "inter": 24576, "tie": True, "qkv_bias": ("attention_bias", False)},
    "gemma2": {"vocab": 256000, "inter": 9216, "tie": True, "qkv_bias": ("attention_bias", False), "norms": 4},
    "gemma3_text": {
        "vocab": 262208,
        "inter": 9216,
        "tie": True,
        "qkv_bias": ("attention_bias", False),
        "norms": 4,
        "qk_norm": "head",
    },
    "starcoder2": {
        "vocab": 49152,
        "inter": 12288,
        "tie": True,
        "qkv_bias": ("use_bias", True),
        "o_bias": ("use_bias", True),
        "mlp_bias": ("use_bias", True),
        "mlp": "plain",
        "norm_bias": True,
    },
    "helium": {
        "vocab": 48000,
        "inter": 7040,
        "qkv_bias": ("attention_bias", False),
        "o_bias": False,
        "mlp_bias": ("mlp_bias", False),
    },
    "internlm3": {
        "vocab": 128512,
        "inter": 10240,
        "qkv_bias": ("qkv_bias", False),
        "o_bias": ("bias", False),
        "mlp_bias": ("bias", False),
    },
    "ministral3": {"vocab": 131072, "inter": 14336},
    "seed_oss": {
        "vocab": 155136,
        "inter": 27648,
        "qkv_bias": ("attention_bias", True),
        "o_bias": ("attention_out_bias", False),
        "mlp_bias": ("mlp_bias", False),
    },
    "smollm3": {
        "vocab": 128256,
        "inter": 11008,
        "tie": True,
        "qkv_bias": ("attention_bias", False),
        "mlp_bias": ("mlp_bias", False),
    },
    "hyperclovax": {
        "vocab": 32000,
        "inter": 11008,
        "qkv_bias": ("attention_bias", False),
        "mlp_bias": ("mlp_bias", False),
        "norms": 4,
    },
    "exaone4": {"vocab": 102400, "inter": 16384, "qk_norm": "head"},
    # text models of multimodal wrappers (kvplan.readers.params_vision): Qwen2's and Qwen3's layers, other defaults
    "qwen2_5_vl_text": {"vocab": 152064, "inter": 29568, "qkv_bias": True},
    "qwen3_vl_text": {"vocab": 151936, "inter": 22016, "qkv_bias": ("attention_bias", False), "qk_norm": "head"},
    "glm4": {"vocab": 151552, "inter": 13696, "qkv_bias": ("attention_bias", True), "o_bias": False, "norms": 4},
    "apertus": {
        "vocab": 131072,
        "inter": 14336,
        "qkv_bias": ("attention_bias", False),
        "qk_norm": "head",
        "mlp": "plain",
        "act": 2,
    },
    "arcee": {
        "vocab": 32000,
        "inter": 18432,
        "qkv_bias": ("attention_bias", False),
        "mlp_bias": ("mlp_bias", False),
        "mlp": "plain",
    },
    "ernie4_5": {
        "vocab": 103424,
        "inter": 3072,
        "tie": True,
        "qkv_bias": ("use_bias", False),
        "o_bias": ("use_bias", False),
        "mlp_bias": ("use_bias", False),
    },
    "stablelm": {
        "vocab": 50304,
        "inter": 6912,
        "qkv_bias": ("use_qkv_bias", False),
        "o_bias": False,
        "norm_bias": True,
        "qk_norm": "stablelm",
        "qk_norm_key": ("qk_layernorm", False),
    },
    "phi": {
        "vocab": 51200,
        "inter": 8192,
        "qkv_bias": True,
        "o_bias": True,
        "mlp_bias": True,
        "mlp": "plain",
        "norms": 1,
        "norm_bias": True,
        "lm_head_bias": True,
        "qk_norm": "phi",
        "qk_norm_key": ("qk_layernorm", False),
    },
    "cohere": {
        "vocab": 256000,
        "inter": 22528,
        "tie": True,
        "qkv_bias": ("attention_bias", False),
        "norms": 1,
        "qk_norm": "full",
        "qk_norm_key": ("use_qk_norm", False),
    },
    # MoE decoders: the same attention, experts on MoE layers
    "mixtral": {"vocab": 32000, "inter": 14336, "moe": "all"},
    "phimoe": {
        "vocab": 32064,
        "inter": 6400,
        "qkv_bias": ("attention_bias", False),
        "norm_bias": True,
        "lm_head_bias": ("lm_head_bias", False),
        "moe": "all",
    },
    "granitemoe": {"vocab": 32000, "inter": 11008, "qkv_bias": ("attention_bias", False), "moe": "all"},
    "olmoe": {"vocab": 50304, "inter": 2048, "qkv_bias": ("attention_bias", False), "qk_norm": "full", "moe": "all"},
    "qwen2_moe": {"vocab": 151936, "inter": 5632, "qkv_bias": ("qkv_bias", True), "moe": "qwen"},
    "qwen3_moe": {
        "vocab": 151936,
        "inter": 6144,
        "qkv_bias": ("attention_bias", False),
        "qk_norm": "head",
        "moe": "qwen",
    },
    "glm4_moe": {
        "vocab": 151552,
        "inter": 10944,
        "qkv_bias": ("attention_bias", False),
        "o_bias": False,
        "qk_norm": "head",
        "qk_norm_key": ("use_qk_norm", False),
        "moe": "deepseek",
    },
    # MLA (DeepSeek) and gpt-oss: attention of their own
    "deepseek_v2": {"vocab": 102400, "inter": 11008, "hidden": 4096, "attention": "mla", "moe": "deepseek"},
    "deepseek_v3": {"vocab": 129280, "inter": 18432, "hidden": 7168, "attention": "mla", "moe": "deepseek"},
    "kimi_k2": {"vocab": 129280, "inter": 18432, "hidden": 7168, "attention": "mla", "moe": "deepseek"},
    "gpt_oss": {
        "vocab": 201088,
        "inter": 2880,
        "qkv_bias": ("attention_bias", True),
        "o_bias": ("attention_bias", True),
        "attention": "sinks",
        "moe": "gpt_oss",
    },
}

# MoE class defaults per model_type: experts (num_experts / num_local_experts / n_routed_experts),
# experts per token, expert width (moe_intermediate_size; None: intermediate_size), shared experts.
_MOE_DEFAULTS: dict[str, dict[str, Any]] = {
    "mixtral": {"experts": 8, "top_k": 2},
    "phimoe": {"experts": 16, "top_k": 2},
    "granitemoe": {"experts": 8, "top_k": 2},
    "olmoe": {"experts": 64, "top_k": 8},
    "qwen2_moe": {"experts": 60, "top_k": 4, "moe_inter": 1408, "shared_inter": 5632},
    "qwen3_moe": {"experts": 128, "top_k": 8, "moe_inter": 768},
    "glm4_moe": {"experts": 128, "top_k": 8, "moe_inter": 1408, "shared": 1, "dense": 1},
    "deepseek_v2": {"experts": 64, "top_k": None, "moe_inter": 1407, "shared": 2, "dense": 0},
    "deepseek_v3": {"experts": 256, "top_k": 8, "moe_inter": 2048, "shared": 1, "dense": 3},
    "kimi_k2": {"experts": 256, "top_k": 8, "moe_inter": 2048, "shared": 1, "dense": 3},
    "gpt_oss": {"experts": 128, "top_k": 4},
}


def counted_model_types() -> list[str]:
    """Every model_type whose parameters are counted from config.json, sorted (multimodal wrappers aside:
    :data:`kvplan.readers.params_vision.WRAPPERS`)."""
    return sorted([*(t for t in _FAMILIES if t not in _WRAPPER_TEXT_ONLY), "granitemoehybrid"])


# text families counted only inside their wrapper (transformers builds no causal LM of these text configs alone)
_WRAPPER_TEXT_ONLY = ("qwen2_5_vl_text", "qwen3_vl_text")


def _int(raw: dict, key: str, default: Any, minimum: int = 0) -> int:
    value = raw.get(key)
    if value is None:
        value = default
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise _Unknown(key)
    return value


def _first_int(raw: dict, keys: tuple[str, ...], default: Any, minimum: int = 0) -> int:
    for key in keys:
        if raw.get(key) is not None:
            return _int(raw, key, None, minimum)
    return _int({}, keys[0], default, minimum)


def _flag(raw: dict, spec: Any) -> bool:
    """A bias/norm switch of the recipe: a constant, or (config key, class default)."""
    if isinstance(spec, bool):
        return spec
    key, default = spec
    value = raw.get(key)
    if value is None:
        return default
    if not isinstance(value, bool):
        raise _Unknown(key)
    return value


def _gated(hidden: int, inter: int, bias: bool = False) -> int:
    """A gated MLP (gate, up: hidden -> inter; down: inter -> hidden)."""
    return 3 * hidden * inter + (2 * inter + hidden if bias else 0)


def _attention(raw: dict, r: dict, data: dict, hidden: int) -> int:
    """q/k/v/o projections, their biases, and q/k norms of one layer (GQA attention)."""
    hq, hkv, d = data["num_q_heads"], data["num_kv_heads"], data["head_dim"]
    q, kv = hq * d, hkv * d
    n = hidden * q + 2 * hidden * kv + q * hidden
    if _flag(raw, r.get("qkv_bias", False)):
        n += q + 2 * kv
    qkv = r.get("qkv_bias", False)
    follows = isinstance(qkv, tuple) and qkv[0] == "attention_bias"  # o_proj shares attention_bias
    if _flag(raw, r.get("o_bias", qkv if follows else False)):
        n += hidden
    kind = r.get("qk_norm")
    if kind and _flag(raw, r.get("qk_norm_key", True)):
        if kind == "head":
            n += 2 * d
        elif kind == "full":
            n += q + kv
        elif kind == "stablelm":  # one LayerNorm (weight, no bias) per head: (heads, head_dim)
            n += q + kv
        elif kind == "phi":  # LayerNorm over head_dim with bias, one for q and one for k
            n += 4 * d
    if r.get("attention") == "sinks":
        n += hq
    return n


def _mla(raw: dict, hidden: int, heads: int) -> int:
    """One DeepSeek MLA layer: q_a (+ its norm) and q_b, or q; kv_a with the rope key, its norm, kv_b; o."""
    rope = _int(raw, "qk_rope_head_dim", 64)
    nope = _int(raw, "qk_nope_head_dim", 128)
    v = _int(raw, "v_head_dim", 128)
    rank = _int(raw, "kv_lora_rank", 512, minimum=1)
    if _flag(raw, ("attention_bias", False)):
        raise _Unknown("attention_bias")
    if "q_lora_rank" in raw and raw["q_lora_rank"] is None:  # null: a plain q_proj (DeepSeek-V2-Lite)
        q = hidden * heads * (nope + rope)
    else:  # absent: the class default 1536 (DeepseekV2Config, DeepseekV3Config)
        q_rank = _int(raw, "q_lora_rank", 1536, minimum=1)
        q = hidden * q_rank + q_rank + q_rank * heads * (nope + rope)
    return q + hidden * (rank + rope) + rank + rank * heads * (nope + v) + heads * v * hidden


def count_params(raw: dict, model_type: str, data: dict) -> ParamCount | None:
    """The parameters of a config.json's model, or None when its family is not counted exactly here.

    Args:
        raw: the decoder's config mapping (a multimodal wrapper is not counted: pass it only for text
            models).
        model_type: the decoder's model_type.
        data: the spec mapping the family reader built from the same config (layers, heads, head_dim,
            hidden_size with the class defaults applied).

    Returns:
        A :class:`ParamCount`, or None: an uncounted family, per-layer geometry, or a value that is not a
        plain count (never a guess).

    Source: transformers 5.23 ``modeling_<type>.py`` of each family (module docstring), checked on the meta
    device by tests/test_params.py.
    """
    if model_type == "granitemoehybrid":
        try:
            return count_granitemoehybrid(raw, data)
        except (_Unknown, KeyError, TypeError):
            return None
    r = _FAMILIES.get(model_type)
    if r is None or model_type in _WRAPPER_TEXT_ONLY or data.get("geometry") or data.get("layer_specs"):
        return None
    try:
        return _count(raw, model_type, r, data)
    except (_Unknown, KeyError, TypeError):
        return None


def count_granitemoehybrid(raw: dict, data: dict) -> ParamCount:
    """IBM Granite 4.0-H (``granitemoehybrid``): Mamba-2 or attention layers, each with a shared MLP and, when
    ``num_local_experts`` > 0, routed experts.

    Mirrors transformers 5.23's ``GraniteMoeHybridForCausalLM`` with ``GraniteMoeHybridConfig``'s defaults
    (vocab 32000, ``intermediate_size`` 11008, ``shared_intermediate_size`` 1024, 8 experts of top 2, Mamba-2
    ``mamba_expand`` 2, ``mamba_conv_bias`` true, ``mamba_proj_bias`` false, ``attention_bias`` false, untied
    embeddings). Per layer: two RMSNorms; the shared MLP (``input_linear`` hidden -> 2 × shared width,
    ``output_linear`` back, no biases); the router and the experts (``gate_up_proj`` E × 2I × hidden,
    ``down_proj`` E × hidden × I); a Mamba-2 mixer (``in_proj`` hidden -> 2·d_inner + 2·G·N + H, the depthwise
    ``conv1d`` over d_inner + 2·G·N channels, ``dt_bias`` / ``A_log`` / ``D`` per head, the gated norm over
    d_inner, ``out_proj``) or q/k/v/o attention. The layer kinds and attention / state geometry are the hybrid
    reader's (``data``).

    Raises:
        _Unknown: a value that is not a plain count, or ``mamba_expand × hidden_size`` that differs from
            ``mamba_n_heads × mamba_d_head`` (which width transformers builds is then a question).
    """
    h = data["hidden_size"]
    vocab = _int(raw, "vocab_size", 32000, minimum=1)
    inter = _int(raw, "intermediate_size", 11008, minimum=1)
    shared = _int(raw, "shared_intermediate_size", 1024)
    experts = _int(raw, "num_local_experts", 8)
    top_k = _int(raw, "num_experts_per_tok", 2)
    tie = _flag(raw, ("tie_word_embeddings", False))
    m = data.get("mamba2")
    per_layer = 2 * h + 3 * h * shared
    router_experts = experts * h + 3 * experts * h * inter if experts else 0
    mamba = attention = 0
    if m is not None:
        heads, d_state, groups, d_conv = m["num_heads"], m["d_state"], m["n_groups"], m["d_conv"]
        d_inner = heads * m["head_dim"]
        if _int(raw, "mamba_expand", 2, minimum=1) * h != d_inner:
            raise _Unknown("mamba_expand")
        conv_dim = d_inner + 2 * groups * d_state
        proj_bias = _flag(raw, ("mamba_proj_bias", False))
        in_out = h * (2 * d_inner + 2 * groups * d_state + heads) + d_inner * h
        if proj_bias:
            in_out += 2 * d_inner + 2 * groups * d_state + heads + h
        conv = conv_dim * d_conv + (conv_dim if _flag(raw, ("mamba_conv_bias", True)) else 0)
        mamba = in_out + conv + 3 * heads + d_inner
    hq, hkv, d = data["num_q_heads"], data["num_kv_heads"], data["head_dim"]
    attention = 2 * h * hq * d + 2 * h * hkv * d
    if _flag(raw, ("attention_bias", False)):
        attention += 2 * hq * d + 2 * hkv * d
    kinds = data["layers"]
    n_mamba = sum(k == "mamba2" for k in kinds)
    total = vocab * h * (1 if tie else 2) + h + len(kinds) * (per_layer + router_experts)
    total += n_mamba * mamba + (len(kinds) - n_mamba) * attention
    moe = None
    if experts and 0 < top_k <= experts:
        moe = {"num_experts": experts, "experts_per_token": top_k, "expert_param_count": 3 * h * inter,
               "num_moe_layers": len(kinds), "num_shared_experts": 1,
               "shared_expert_param_count": 3 * h * shared}  # fmt: skip
    return ParamCount(total, vocab * h * (1 if tie else 2), moe)


def _count(raw: dict, model_type: str, r: dict, data: dict) -> ParamCount:
    hidden = data.get("hidden_size")
    if hidden is None:  # the MLA readers leave it out (it does not change the cache)
        hidden = _int(raw, "hidden_size", r.get("hidden"), minimum=1)
    n_layers = data["num_layers"]
    vocab = _int(raw, "vocab_size", r["vocab"], minimum=1)
    inter = _int(raw, "intermediate_size", r["inter"], minimum=1)
    tie = _flag(raw, ("tie_word_embeddings", r.get("tie", False)))
    norm = 2 * hidden if r.get("norm_bias") else hidden
    embedding = vocab * hidden
    head = 0 if tie else vocab * hidden
    total = embedding + head + norm  # the final norm
    if _flag(raw, r.get("lm_head_bias", False)):
        total += vocab
        head += vocab
    if r.get("attention") == "mla":
        attn = _mla(raw, hidden, data["num_q_heads"])
    else:
        attn = _attention(raw, r, data, hidden)
    per_layer = attn + r.get("norms", 2) * norm + r.get("act", 0)
    moe_kind = r.get("moe")
    if moe_kind is None:
        if r.get("mlp", "gated") == "gated":
            mlp = _gated(hidden, inter, _flag(raw, r.get("mlp_bias", False)))
        else:
            mlp = 2 * hidden * inter + (inter + hidden if _flag(raw, r.get("mlp_bias", False)) else 0)
        total += n_layers * (per_layer + mlp)
        return ParamCount(total, embedding + head)
    moe_layers, mlp_total, moe = _moe(raw, model_type, moe_kind, hidden, inter, n_layers)
    total += n_layers * per_layer + mlp_total
    return ParamCount(total, embedding + head, moe if moe_layers else None)


def _moe(raw: dict, model_type: str, kind: str, hidden: int, inter: int, n_layers: int) -> tuple[int, int, dict | None]:
    """(MoE layers, parameters of every layer's MLP or MoE block, the spec's moe: block or None when the
    experts per token are unknown)."""
    m = _MOE_DEFAULTS[model_type]
    experts = _first_int(raw, ("num_experts", "num_local_experts", "n_routed_experts"), m["experts"])
    try:  # DeepseekV2Config defaults it to None: the total is still known, the moe: block is not
        top_k = _first_int(
            raw, ("num_experts_per_tok", "experts_per_token", "num_experts_per_token"), m["top_k"], minimum=1
        )
    except _Unknown:
        top_k = None
    width = _int(raw, "moe_intermediate_size", m["moe_inter"], minimum=1) if "moe_inter" in m else inter
    shared_count, shared_param = 0, 0
    if kind == "gpt_oss":  # gate_up (hidden x 2I) + bias, down (I x hidden) + bias; router with bias
        expert = 3 * hidden * width + 2 * width + hidden
        router = experts * hidden + experts
        moe_flags = [True] * n_layers
    else:
        expert = _gated(hidden, width)
        router = experts * hidden
        if kind == "all":
            moe_flags = [True] * n_layers
        elif kind == "qwen":
            step = _int(raw, "decoder_sparse_step", 1, minimum=1)
            only = raw.get("mlp_only_layers") or []
            if not isinstance(only, list) or not all(isinstance(i, int) and not isinstance(i, bool) for i in only):
                raise _Unknown("mlp_only_layers")
            moe_flags = [i not in only and experts > 0 and (i + 1) % step == 0 for i in range(n_layers)]
            if "shared_inter" in m:  # Qwen2-MoE: one shared expert and its sigmoid gate (hidden -> 1), the
                # gate built even when the expert is 0 wide
                shared_inter = _int(raw, "shared_expert_intermediate_size", m["shared_inter"])
                router += hidden
                if shared_inter:
                    shared_count, shared_param = 1, _gated(hidden, shared_inter)
        else:  # deepseek: dense MLPs on the first first_k_dense_replace layers, MoE after
            dense = _int(raw, "first_k_dense_replace", m["dense"])
            freq = _int(raw, "moe_layer_freq", 1, minimum=1)
            if freq != 1:
                raise _Unknown("moe_layer_freq")
            moe_flags = [i >= dense for i in range(n_layers)]
            shared_count = _int(raw, "n_shared_experts", m["shared"])
            shared_param = _gated(hidden, width)  # one MLP of n_shared × width: n_shared experts of width
    n_moe = sum(moe_flags)
    per_moe = router + experts * expert + shared_count * shared_param
    total = n_moe * per_moe + (n_layers - n_moe) * _gated(hidden, inter)
    if top_k is None or top_k > experts:
        return n_moe, total, None
    block = {"num_experts": experts, "experts_per_token": top_k, "expert_param_count": expert, "num_moe_layers": n_moe}
    if shared_count:
        block["num_shared_experts"] = shared_count
        if shared_param != expert:
            block["shared_expert_param_count"] = shared_param
    return n_moe, total, block


def count_wrapper_params(config: dict, wrapper: str, raw: dict, model_type: str, data: dict) -> ParamCount | None:
    """A multimodal wrapper's parameters: its text model (this module's recipe for ``model_type``), the lm_head by
    the wrapper's tie rule, the vision tower and the projector (:mod:`kvplan.readers.params_vision`); None when
    any part is not counted exactly.

    Source: transformers 5.23 ``modeling_<wrapper>.py`` and the vision models' modules, checked on the meta
    device by tests/test_params.py.
    """
    from kvplan.readers import params_vision as pv

    w = pv.WRAPPERS.get(wrapper)
    r = _FAMILIES.get(model_type)
    if w is None or r is None or model_type not in w["text"] or r.get("moe") or data.get("geometry"):
        return None
    try:
        tie = pv.lm_head_tied(config, wrapper, raw, r.get("tie", False))
        text = _count({**raw, "tie_word_embeddings": tie}, model_type, r, data)
        hidden = data.get("hidden_size") or _int(raw, "hidden_size", r.get("hidden"), minimum=1)
        vision = pv.vision_params(config, wrapper, hidden)
    except (_Unknown, pv.Unknown, KeyError, TypeError):
        return None
    return ParamCount(text.total + vision, text.embedding)


def with_wrapper_param_count(data: dict, config: dict, wrapper: str, raw: dict, model_type: str) -> dict:
    """``data`` with ``param_count`` and ``param_count_unquantized`` (the embedding and an untied lm_head) of a
    multimodal wrapper (:func:`count_wrapper_params`); unchanged when it is not counted."""
    counted = count_wrapper_params(config, wrapper, raw, model_type, data)
    if counted is None:
        return data
    note = (f"param_count {counted.total:,} counted from config.json: the {model_type} text model, the lm_head, "
            f"the vision tower and the projector of {wrapper} (kvplan.readers.params_vision).")  # fmt: skip
    return {**data, "param_count": counted.total, "param_count_unquantized": counted.embedding,
            "notes": f"{data.get('notes', '')} {note}".strip()}  # fmt: skip


def with_param_count(data: dict, raw: dict, model_type: str) -> dict:
    """``data`` (a spec mapping) with ``param_count``, ``param_count_unquantized`` (the embedding and an
    untied lm_head) and, for an MoE, ``moe:`` counted from the config (:func:`count_params`); unchanged
    when the family is not counted or the reader set them already."""
    counted = count_params(raw, model_type, data)
    if counted is None:
        return data
    out = {**data, "param_count": counted.total, "param_count_unquantized": counted.embedding}
    if counted.moe is not None and "moe" not in data:
        out["moe"] = counted.moe
    note = f"param_count {counted.total:,} counted from config.json (kvplan.readers.params)."
    out["notes"] = f"{data.get('notes', '')} {note}".strip()
    return out
