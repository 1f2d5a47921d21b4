"""Linear-attention hybrids and MiniMax: Qwen3-Next, Qwen3.5, LFM2, MiniMax-Text-01 / M1, MiniMax-M2.

Mirrors transformers 5.23's ``Qwen3NextConfig``, ``Qwen3_5TextConfig`` / ``Qwen3_5MoeTextConfig`` (the
``text_config`` of ``Qwen3_5Config`` / ``Qwen3_5MoeConfig``), ``Lfm2Config`` / ``Lfm2MoeConfig``,
``MiniMaxConfig`` and ``MiniMaxM2Config`` with their defaults for absent keys, and was checked against vLLM
0.33's ``model_executor/models/qwen3_next.py``, ``qwen3_5.py``, ``lfm2.py``, ``lfm2_moe.py``,
``minimax_m2.py``, ``model_executor/layers/mamba/linear/base.py`` (``LinearAttention``) and
``mamba_utils.py`` (``MambaStateShapeCalculator`` / ``MambaStateDtypeCalculator``).

- Qwen3-Next, Qwen3.5: ``layer_types`` of ``linear_attention`` (Gated DeltaNet, kind ``gdn``) and
  ``full_attention`` (kind ``full``), else one full layer every ``full_attention_interval`` (default 4) layers:
  full where ``(i + 1) % interval == 0``. GDN state (``gated_delta_net_state_shape``): conv ``(d_conv − 1,
  (2·Hk·dk + Hv·dv) / TP)``, recurrent ``(Hv / TP, dv, dk)`` from ``linear_num_key_heads``,
  ``linear_num_value_heads``, ``linear_key_head_dim``, ``linear_value_head_dim``, ``linear_conv_kernel_dim``
  (defaults 16, 32, 128, 128, 4). Both states are in the model dtype, except that vLLM's
  ``Qwen3_5ForConditionalGenerationConfig`` sets the recurrent state's dtype from config.json's
  ``mamba_ssm_dtype`` (Qwen3.5 ships ``float32``); Qwen3-Next has no such override. Attention: head_dim
  default 256, H_q / H_kv defaults 16 / 2 (Qwen3.5 dense: 16 / 4). ``mlp_only_layers`` and
  ``decoder_sparse_step`` pick dense or MoE MLPs only.
- LFM2: ``layer_types`` of ``conv`` (kind ``short_conv``) and ``full_attention``, else ``full_attn_idxs``
  (default: every layer full, the class default). Short-conv state (``short_conv_state_shape``): ``(L − 1,
  d / TP)`` with ``L = conv_L_cache`` (default 3) and ``d`` = ``conv_dim`` (vLLM ``lfm2.py``; LFM2-MoE:
  hidden_size), which must equal hidden_size (transformers' conv width). head_dim = hidden_size / H_q.
  LFM2-MoE has no layer_types default (transformers leaves it None): such a config is refused.
- MiniMax-Text-01 / MiniMax-M1 (``minimax``; the published files say ``minimax_text_01`` / ``minimax_m1``):
  ``layer_types`` (``linear_attention`` / ``full_attention``), else the published ``attn_type_list`` (0 =
  lightning linear attention, 1 = softmax attention), else the class default (full where ``(i + 1) % 2``).
  A linear layer keeps ``(H / TP, d, d)`` in the model dtype (vLLM ``LinearAttention``: H =
  ``num_attention_heads``, d = ``head_dim`` or hidden_size / H). vLLM 0.33 no longer serves these two
  (``MiniMaxText01ForCausalLM`` / ``MiniMaxM1ForCausalLM`` are in ``_PREVIOUSLY_SUPPORTED_MODELS``, last
  0.23.0); the shapes are those of the linear-attention base class it used. A set ``sliding_window`` is refused.
- MiniMax-M2: plain full GQA attention on every layer (transformers ``MiniMaxM2Config`` has no layer types,
  vLLM ``minimax_m2.py`` builds every layer with full attention). Its config.json still carries
  ``attn_type_list``; it must be all 1 (a 0 would ask for a layer neither engine implements).

transformers' linear-attention caches keep ``d_conv`` conv columns where vLLM keeps ``d_conv − 1`` (plus
``num_speculative_tokens`` with speculative decoding), and keep the GDN recurrent state in float32 whatever
``mamba_ssm_dtype`` says; kvplan follows vLLM without speculation.
"""

from __future__ import annotations

from kvplan.readers.base import HFConfig, max_len

_SSM_DTYPES = {"auto": None, "float32": "fp32", "bfloat16": "bf16", "float16": "fp16"}

# model_type -> class defaults: layers, H_q, H_kv, hidden, max len
_QWEN: dict[str, dict] = {
    "qwen3_next": {"layers": 48, "heads": 16, "kv": 2, "hidden": 2048},
    "qwen3_5_text": {"layers": 32, "heads": 16, "kv": 4, "hidden": 4096},
    "qwen3_5_moe_text": {"layers": 40, "heads": 16, "kv": 2, "hidden": 2048},
}
_QWEN["qwen3_5"] = _QWEN["qwen3_5_text"]  # a Qwen3.5 file whose text_config has no model_type
_QWEN["qwen3_5_moe"] = _QWEN["qwen3_5_moe_text"]


def _attention_kinds(cfg: HFConfig, n: int, linear_kind: str, linear_name: str = "linear_attention") -> list:
    """``layer_types`` of ``linear_name`` / ``full_attention`` as (linear_kind, full); None when absent."""
    return cfg.layer_types(n, {linear_name: linear_kind, "full_attention": "full"})


def read_qwen_gdn(cfg: HFConfig) -> dict:
    """Qwen3-Next / Qwen3.5: Gated DeltaNet layers with a full-attention layer every few layers.

    Raises:
        SpecError: an unknown layer type, a bad ``full_attention_interval``, ``mamba_ssm_dtype`` or dimension.
    """
    d = _QWEN[cfg.model_type]
    n = cfg.int("num_hidden_layers", d["layers"])
    heads = cfg.int("num_attention_heads", d["heads"])
    data = {
        "num_layers": n,
        "num_q_heads": heads,
        "num_kv_heads": cfg.int("num_key_value_heads", d["kv"]),
        "head_dim": cfg.int("head_dim", 256),
        "hidden_size": cfg.int("hidden_size", d["hidden"]),
        "dtype": cfg.dtype(),
        "max_model_len": max_len(cfg, 32768),
    }
    kinds = _attention_kinds(cfg, n, "gdn")
    if kinds is None:
        interval = cfg.int("full_attention_interval", 4)
        kinds = ["gdn" if (i + 1) % interval else "full" for i in range(n)]
    else:
        cfg.ignore("full_attention_interval")  # transformers uses it only when layer_types is absent
    gdn = {
        "num_k_heads": cfg.int("linear_num_key_heads", 16),
        "num_v_heads": cfg.int("linear_num_value_heads", 32),
        "head_k_dim": cfg.int("linear_key_head_dim", 128),
        "head_v_dim": cfg.int("linear_value_head_dim", 128),
        "d_conv": cfg.int("linear_conv_kernel_dim", 4, minimum=2),
    }
    if gdn["num_v_heads"] % gdn["num_k_heads"]:
        raise cfg.error(
            f"linear_num_value_heads={gdn['num_v_heads']} is not a multiple of "
            f"linear_num_key_heads={gdn['num_k_heads']}"
        )
    if not cfg.model_type.startswith("qwen3_next"):
        raw = cfg.string("mamba_ssm_dtype", "auto")
        if raw not in _SSM_DTYPES:
            raise cfg.error(f"mamba_ssm_dtype={raw!r} is not a state dtype; allowed: {', '.join(_SSM_DTYPES)}")
        if _SSM_DTYPES[raw]:
            gdn["ssm_dtype"] = _SSM_DTYPES[raw]
    cfg.ignore("mlp_only_layers", "decoder_sparse_step", "use_sliding_window", "max_window_layers")
    data["layers"] = kinds
    if "gdn" in kinds:
        data["gdn"] = gdn
    return data


def read_lfm2(cfg: HFConfig) -> dict:
    """LFM2 / LFM2-MoE: short-convolution layers and full-attention layers.

    Raises:
        SpecError: an unknown layer type or index, ``conv_dim`` unlike hidden_size, LFM2-MoE without
            ``layer_types``, a ``head_dim`` unlike hidden / heads, or a bad dimension.
    """
    moe = cfg.model_type == "lfm2_moe"
    n = cfg.int("num_hidden_layers", 32)
    heads = cfg.int("num_attention_heads", 32)
    hidden = cfg.int("hidden_size", 2048 if moe else 2560)
    if hidden % heads:
        raise cfg.error(f"hidden_size={hidden} is not a multiple of num_attention_heads={heads}")
    if cfg.has("head_dim") and cfg.int("head_dim") != hidden // heads:
        raise cfg.error(f"head_dim={cfg.int('head_dim')} differs from hidden_size / num_attention_heads (vLLM's)")
    kinds = _attention_kinds(cfg, n, "short_conv", "conv")
    if kinds is None and moe:
        raise cfg.error("layer_types is missing: Lfm2MoeConfig has no default layout")
    if kinds is None:
        idxs = cfg.list("full_attn_idxs")
        idxs = list(range(n)) if idxs is None else idxs
        for i in idxs:
            if isinstance(i, bool) or not isinstance(i, int) or not 0 <= i < n:
                raise cfg.error(f"full_attn_idxs has {i!r}; allowed: 0..{n - 1}")
        kinds = ["full" if i in idxs else "short_conv" for i in range(n)]
    else:
        cfg.ignore("full_attn_idxs")  # transformers uses it only when layer_types is absent
    width = cfg.int("conv_dim", hidden) if not moe else hidden
    if width != hidden:
        raise cfg.error(
            f"conv_dim={width} differs from hidden_size={hidden}: vLLM uses conv_dim, transformers hidden_size"
        )
    data = {
        "num_layers": n,
        "num_q_heads": heads,
        "num_kv_heads": cfg.int("num_key_value_heads", 8),
        "head_dim": hidden // heads,
        "hidden_size": hidden,
        "dtype": cfg.dtype(),
        "max_model_len": max_len(cfg, 128000),
        "layers": kinds,
    }
    if "short_conv" in kinds:
        data["short_conv"] = {"d_inner": width, "d_conv": cfg.int("conv_L_cache", 3, minimum=2)}
    return data


def read_minimax(cfg: HFConfig) -> dict:
    """MiniMax-Text-01 / MiniMax-M1: lightning (linear) attention layers and softmax attention layers.

    Raises:
        SpecError: an unknown layer type, an ``attn_type_list`` value other than 0/1, a set sliding_window,
            or a bad dimension.
    """
    n = cfg.int("num_hidden_layers", 32)
    heads = cfg.int("num_attention_heads", 32)
    hidden = cfg.int("hidden_size", 4096)
    if not cfg.has("head_dim") and hidden % heads:
        raise cfg.error(f"hidden_size={hidden} is not a multiple of num_attention_heads={heads}")
    data = {
        "num_layers": n,
        "num_q_heads": heads,
        "num_kv_heads": cfg.int("num_key_value_heads", 8),
        "head_dim": cfg.int("head_dim", hidden // heads),
        "hidden_size": hidden,
        "dtype": cfg.dtype(),
        "max_model_len": max_len(cfg, 4096 * 32),
    }
    kinds = _attention_kinds(cfg, n, "linear_attention")
    if kinds is None and cfg.has("attn_type_list"):
        types = cfg.list("attn_type_list", n)
        if any(t not in (0, 1) or isinstance(t, bool) for t in types):
            raise cfg.error("attn_type_list must hold 0 (linear attention) or 1 (softmax attention) per layer")
        kinds = ["full" if t == 1 else "linear_attention" for t in types]
    elif kinds is None:
        kinds = ["full" if (i + 1) % 2 else "linear_attention" for i in range(n)]
    else:
        cfg.ignore("attn_type_list")
    data["layers"] = kinds
    if "linear_attention" in kinds:
        data["linear_attention"] = {"num_heads": data["num_q_heads"], "head_dim": data["head_dim"]}
    data["notes"] = (
        f"{kinds.count('linear_attention')} lightning-attention layers (state {data['num_q_heads']} x "
        f"{data['head_dim']} x {data['head_dim']} per request) and {kinds.count('full')} softmax-attention layers"
    )
    return data


def read_minimax_m2(cfg: HFConfig) -> dict:
    """MiniMax-M2: full GQA attention on every layer.

    Raises:
        SpecError: ``attn_type_list`` with a 0 (linear attention, which neither engine builds for M2).
    """
    n = cfg.int("num_hidden_layers", 62)
    data = {
        "num_layers": n,
        "num_q_heads": cfg.int("num_attention_heads", 48),
        "num_kv_heads": cfg.int("num_key_value_heads", 8),
        "head_dim": cfg.int("head_dim", 128),
        "hidden_size": cfg.int("hidden_size", 3072),
    }
    types = cfg.list("attn_type_list", n)
    if types is not None and any(t != 1 or isinstance(t, bool) for t in types):
        raise cfg.error(
            "attn_type_list asks for linear-attention layers (0), but MiniMax-M2 (transformers MiniMaxM2Config, "
            "vLLM minimax_m2.py) builds full attention on every layer; kvplan will not guess"
        )
    data["dtype"] = cfg.dtype()
    data["max_model_len"] = max_len(cfg, 196608)
    data["layers"] = ["full"] * n
    return data


READERS = {
    **{model_type: read_qwen_gdn for model_type in _QWEN},
    "lfm2": read_lfm2,
    "lfm2_moe": read_lfm2,
    "minimax": read_minimax,
    "minimax_text_01": read_minimax,
    "minimax_m1": read_minimax,
    "minimax_m2": read_minimax_m2,
}
