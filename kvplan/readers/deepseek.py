"""Multi-head latent attention (MLA): DeepSeek-V2, DeepSeek-V3 (and Kimi-K2), DeepSeek-V3.2, Kimi Linear.

Mirrors transformers 5.23's ``DeepseekV2Config``, ``DeepseekV3Config``, ``DeepseekV32Config`` and
``KimiLinearConfig``, with their defaults for absent keys, and was checked against vLLM 0.33's
``model_executor/models/deepseek_v2.py`` (V2, V3; ``Indexer`` / ``DeepseekV32IndexerCache`` for V3.2),
``vllm/models/deepseek_v32/attention.py`` and ``vllm/models/kimi_k3/nvidia/model.py``
(``KimiLinearForCausalLM``).

An MLA layer caches one latent of ``kv_lora_rank + qk_rope_head_dim`` elements per token (576 in every
model here), whatever the head count: ``first_k_dense_replace`` / ``moe_layer_freq`` / ``mlp_layer_types``
only choose a dense MLP or an MoE block and do not change the cache. The spec's ``num_kv_heads`` is
nominal (= ``num_attention_heads``; ``num_key_value_heads`` means nothing for MLA), ``head_dim`` is
``qk_nope_head_dim + qk_rope_head_dim`` (192) and ``v_head_dim`` as given (128): they describe the
uncompressed attention, not the cache. config.json's ``head_dim`` is ignored (the classes overwrite it with
``qk_rope_head_dim``, the RoPE width). MTP layers (``num_nextn_predict_layers``) are not decoder layers and
are not counted.

=============  ======  =====  =========  ============  ===================================================
model_type     layers  H_q    max len    index_head    notes
=============  ======  =====  =========  ============  ===================================================
deepseek_v2    32      32     2048       --            kv_lora_rank 512, qk_rope 64, qk_nope 128, v 128
deepseek_v3    61      128    4096       --            same defaults
kimi_k2        61      128    4096       --            Kimi-K2 ships model_type ``kimi_k2``: vLLM loads it
                                                       with DeepseekV3Config (``transformers_utils/config``
                                                       ``_CONFIG_REGISTRY``); transformers 5.23 has no class
deepseek_v32   61      128    163840     128           DSA indexer key cached beside the latent (below)
kimi_linear    27      32     1048576    --            KDA linear-attention layers + MLA layers (below)
glm4_moe_lite  47      20     202752     --            GLM-4.7-Flash; qk_nope 192, v 256 (Glm4MoeLiteConfig;
                                                       vLLM glm4_moe_lite.py: DeepseekV2's MLA)
glm_moe_dsa    78      64     202752     128           GLM-5: DSA indexer as V3.2 (:func:`read_glm_moe_dsa`)
=============  ======  =====  =========  ============  ===================================================

DeepSeek-V3.2 (DeepSeek Sparse Attention): every layer also caches one indexer key of ``index_head_dim``
elements per token (transformers ``DynamicIndexedLayer.indexer_keys`` ``[B, S, index_head_dim]`` in the model
dtype; vLLM ``DeepseekV32IndexerCache``). Without it kvplan was 18 % low: 576 / (576 + 128) = 0.82.
``index_n_heads`` is the indexer's query heads (its key is single-head) and ``index_topk`` the tokens each
query attends; neither changes the cache. ``layer_types`` may only say ``indexed_attention`` (legacy
``deepseek_sparse_attention``), the class default. vLLM stores the indexer key as FP8 plus one fp32 scale
per 128 elements (``head_dim + head_dim // 128 * 4`` = 132 bytes, uint8), whatever ``--kv-cache-dtype``;
kvplan prices it as ``index_head_dim`` elements of the KV dtype (:func:`kvplan.calc.layer_token_bytes`).

Kimi Linear: layers are KDA (Kimi Delta Attention) or MLA. The layout comes from
``linear_attn_config.kda_layers`` / ``full_attn_layers`` (1-based layer numbers), which is what vLLM reads
(``KimiLinearConfig.is_kda_layer``); a config without ``linear_attn_config`` is refused, because vLLM then
builds every layer as MLA while transformers falls back to one MLA layer in four. A KDA layer's state has
exactly Gated DeltaNet's shapes with ``num_k_heads = num_v_heads = num_heads`` and ``head_k_dim =
head_v_dim = head_dim`` (vLLM ``MambaStateShapeCalculator.kda_state_shape``: conv ``(d_conv − 1,
3·H·d / TP)``, recurrent ``(H / TP, d, d)``), so it is planned as kind ``gdn``; its recurrent state is fp32
(vLLM ``MambaStateDtypeCalculator.kda_state_dtype`` with ``mamba_ssm_cache_dtype`` auto; transformers also
stores it ``.to(torch.float32)``), its conv state in the model dtype. transformers keeps ``d_conv`` conv
columns where vLLM keeps ``d_conv − 1``; kvplan follows vLLM. MLA layers of Kimi Linear are NoPE
(``mla_use_nope``) but still cache ``kv_lora_rank + qk_rope_head_dim`` (vLLM ``MultiHeadLatentAttention``
``head_size``).
"""

from __future__ import annotations

from kvplan.readers.base import HFConfig

# model_type -> class defaults
_DEFAULTS: dict[str, dict] = {
    "deepseek_v2": {"layers": 32, "heads": 32, "max_len": 2048},
    "deepseek_v3": {"layers": 61, "heads": 128, "max_len": 4096},
    "kimi_k2": {"layers": 61, "heads": 128, "max_len": 4096},
    "deepseek_v32": {"layers": 61, "heads": 128, "max_len": 163840, "index_head_dim": 128},
    "kimi_linear": {"layers": 27, "heads": 32, "max_len": 1048576},
    # GLM-4.7-Flash (Glm4MoeLiteConfig) and GLM-5 (GlmMoeDsaConfig): MLA with GLM's head dims
    "glm4_moe_lite": {"layers": 47, "heads": 20, "max_len": 202752, "nope": 192, "v": 256},
    "glm_moe_dsa": {"layers": 78, "heads": 64, "max_len": 202752, "nope": 192, "v": 256, "index_head_dim": 128},
}
# the latent dims share their defaults in every class above
_MLA_DEFAULTS = {"kv_lora_rank": 512, "qk_rope_head_dim": 64, "qk_nope_head_dim": 128, "v_head_dim": 128}
_INDEXED = ("indexed_attention", "deepseek_sparse_attention")


def _mla_dims(cfg: HFConfig) -> dict:
    """The spec fields every MLA model shares: layers, nominal heads, head dims, hidden size, dtype, mla."""
    d = _DEFAULTS[cfg.model_type]
    heads = cfg.int("num_attention_heads", d["heads"])
    rope = cfg.int("qk_rope_head_dim", _MLA_DEFAULTS["qk_rope_head_dim"], minimum=0)
    nope = cfg.int("qk_nope_head_dim", d.get("nope", _MLA_DEFAULTS["qk_nope_head_dim"]), minimum=0)
    if rope + nope < 1:
        raise cfg.error("qk_nope_head_dim + qk_rope_head_dim must be at least 1")
    cfg.ignore("num_key_value_heads", "head_dim", "q_lora_rank", "first_k_dense_replace", "moe_layer_freq")
    cfg.ignore("qk_head_dim", "mlp_layer_types")  # GLM: derived (nope + rope) / dense-or-MoE only
    return {
        "num_layers": cfg.int("num_hidden_layers", d["layers"]),
        "num_q_heads": heads,
        "num_kv_heads": heads,
        "head_dim": rope + nope,
        "v_head_dim": cfg.int("v_head_dim", d.get("v", _MLA_DEFAULTS["v_head_dim"])),
        "hidden_size": cfg.int("hidden_size", None),
        "dtype": cfg.dtype(),
        "mla": {
            "kv_lora_rank": cfg.int("kv_lora_rank", _MLA_DEFAULTS["kv_lora_rank"]),
            "qk_rope_head_dim": rope,
        },
    }


def read_deepseek(cfg: HFConfig) -> dict:
    """DeepSeek-V2 / V3 / Kimi-K2: MLA on every layer (one latent per token and layer).

    Raises:
        SpecError: a missing or non-integer dimension (``kvplan.readers.base.HFConfig.int``).
    """
    data = _mla_dims(cfg)
    data["max_model_len"] = cfg.int("max_position_embeddings", _DEFAULTS[cfg.model_type]["max_len"])
    return data


def read_deepseek_v32(cfg: HFConfig) -> dict:
    """DeepSeek-V3.2: MLA on every layer plus the DSA indexer key (``index_head_dim`` per token and layer).

    Raises:
        SpecError: ``layer_types`` naming anything but ``indexed_attention``, or a bad dimension.
    """
    data = _mla_dims(cfg)
    n = data["num_layers"]
    types = cfg.list("layer_types", n)
    for i, t in enumerate(types or []):
        if t not in _INDEXED:
            raise cfg.error(f"layer_types[{i}]={t!r}: the deepseek_v32 reader handles only indexed_attention layers")
    data["mla"]["index_head_dim"] = cfg.int("index_head_dim", _DEFAULTS[cfg.model_type]["index_head_dim"])
    cfg.ignore("index_n_heads", "index_topk", "mlp_layer_types")
    data["max_model_len"] = cfg.int("max_position_embeddings", _DEFAULTS[cfg.model_type]["max_len"])
    data["notes"] = (
        f"every layer caches the {data['mla']['kv_lora_rank'] + data['mla']['qk_rope_head_dim']}-element MLA "
        f"latent plus a {data['mla']['index_head_dim']}-element DSA indexer key per token"
    )
    return data


def _layer_numbers(cfg: HFConfig, block: dict, key: str, n: int) -> list[int]:
    """``linear_attn_config[key]``: 1-based layer numbers, each in 1..n."""
    value = block.get(key)
    if not isinstance(value, list):
        raise cfg.error(f"linear_attn_config.{key} must be a list of 1-based layer numbers")
    for v in value:
        if isinstance(v, bool) or not isinstance(v, int) or not 1 <= v <= n:
            raise cfg.error(f"linear_attn_config.{key} has {v!r}; allowed: 1..{n} (1-based layer numbers)")
    return value


def read_kimi_linear(cfg: HFConfig) -> dict:
    """Kimi Linear: KDA layers (planned as ``gdn`` states, fp32 recurrent state) and MLA layers.

    Raises:
        SpecError: no ``linear_attn_config`` (vLLM and transformers disagree on the layout then), a layer in
            both or neither of its lists, ``layer_types`` that disagree with it, or a bad dimension.
    """
    data = _mla_dims(cfg)
    n = data["num_layers"]
    block = cfg.get("linear_attn_config")
    if not isinstance(block, dict):
        raise cfg.error(
            "linear_attn_config is missing: vLLM then builds every layer as MLA while transformers uses one "
            "MLA layer in four; kvplan will not guess (write a spec YAML)"
        )
    kda = set(_layer_numbers(cfg, block, "kda_layers", n))
    full = set(_layer_numbers(cfg, block, "full_attn_layers", n))
    both = sorted(kda & full)
    neither = sorted(set(range(1, n + 1)) - kda - full)
    if both or neither:
        what = f"layer {both[0]} is in both" if both else f"layer {neither[0]} is in neither"
        raise cfg.error(f"linear_attn_config: {what} of kda_layers and full_attn_layers (1-based, {n} layers)")
    kinds = ["gdn" if i + 1 in kda else "mla" for i in range(n)]
    types = cfg.list("layer_types", n)
    if types is not None:
        named = {"linear_attention": "gdn", "full_attention": "mla"}
        if [named.get(t) for t in types] != kinds:
            raise cfg.error("layer_types disagrees with linear_attn_config.kda_layers / full_attn_layers")
    heads = block.get("num_heads", 32)
    head_dim = block.get("head_dim", 128)
    d_conv = block.get("short_conv_kernel_size", 4)
    heads = cfg.check_int("linear_attn_config.num_heads", heads)
    head_dim = cfg.check_int("linear_attn_config.head_dim", head_dim)
    d_conv = cfg.check_int("linear_attn_config.short_conv_kernel_size", d_conv, minimum=2)
    cfg.ignore("linear_num_heads", "linear_head_dim", "linear_conv_kernel_dim", "mla_use_nope", "mlp_layer_types")
    data["layers"] = kinds
    data["gdn"] = {
        "num_k_heads": heads,
        "num_v_heads": heads,
        "head_k_dim": head_dim,
        "head_v_dim": head_dim,
        "d_conv": d_conv,
        "ssm_dtype": "fp32",
    }
    data["max_model_len"] = cfg.first_int(
        "max_position_embeddings", "model_max_length", default=_DEFAULTS["kimi_linear"]["max_len"]
    )
    data["notes"] = (
        f"{len(kda)} KDA layers planned as kind gdn (vLLM kda_state_shape: conv (d_conv-1, 3*{heads}*{head_dim}), "
        f"recurrent ({heads}, {head_dim}, {head_dim}) fp32) and {len(full)} MLA layers"
    )
    return data


def read_glm_moe_dsa(cfg: HFConfig) -> dict:
    """GLM-5 (``glm_moe_dsa``): MLA on every layer plus the DSA indexer key, as DeepSeek-V3.2.

    Mirrors transformers 5.23's ``GlmMoeDsaConfig`` (defaults: 78 layers, 64 heads, kv_lora_rank 512,
    qk_rope 64, qk_nope 192, v 256, index_head_dim 128, ``layer_types`` all ``indexed_attention``) and was
    checked against vLLM 0.33's ``models/deepseek_v32/attention.py`` (``GlmMoeDsaForCausalLM`` is served by the
    V3.2 model). Both give a layer an indexer (and its cached key) unless its indexer is "shared"
    (``indexer_types`` / ``index_topk_pattern`` ``S``, or ``index_topk_freq`` > 1 with
    ``index_skip_topk_offset``): the default and GLM-5's file (neither key) index every layer.

    Raises:
        SpecError: a shared-indexer layout (kvplan has one MLA geometry per model), or a bad dimension.
    """
    types = cfg.get("indexer_types")
    pattern = cfg.get("index_topk_pattern")
    freq = cfg.int("index_topk_freq", 1)
    cfg.ignore("index_skip_topk_offset")
    shared = (isinstance(types, list) and "shared" in types) or (isinstance(pattern, (str, list)) and "S" in pattern)
    if shared or freq > 1:
        raise cfg.error(
            "indexer_types / index_topk_pattern / index_topk_freq make some layers reuse another layer's index "
            "(no indexer key of their own); kvplan has one MLA geometry per model and will not guess"
        )
    cfg.ignore("indexer_rope_interleave", "rope_interleave")
    return read_deepseek_v32(cfg)


_V4_TYPES = ("sliding_attention", "compressed_sparse_attention", "heavily_compressed_attention")
_V4_LEGACY_RATIOS = {0: "sliding_attention", 4: "compressed_sparse_attention", 128: "heavily_compressed_attention"}


def _v4_layer_types(cfg: HFConfig, n: int) -> list[str]:
    """DeepseekV4Config's ``layer_types``: explicit, else the legacy per-layer ``compress_ratios`` (0 / 4 / 128
    name the three types; the list also covers the MTP layer, cut to ``num_hidden_layers``), else the class
    default (two HCA layers, then HCA / CSA alternating)."""
    types = cfg.get("layer_types")
    legacy = cfg.get("compress_ratios")
    if types is None and legacy is not None:
        if not isinstance(legacy, list) or any(r not in _V4_LEGACY_RATIOS for r in legacy):
            raise cfg.error(f"compress_ratios={str(legacy)[:80]} must list 0, 4 or 128 per layer (DeepseekV4Config)")
        types = [_V4_LEGACY_RATIOS[r] for r in legacy]
    if types is None:
        types = ["heavily_compressed_attention"] * min(n, 2) + [
            "compressed_sparse_attention" if i % 2 else "heavily_compressed_attention" for i in range(max(n - 2, 0))
        ]
    if not isinstance(types, list) or len(types) < n:
        raise cfg.error(f"layer_types / compress_ratios must give at least num_hidden_layers={n} layer types")
    types = types[:n]
    bad = next((i for i, t in enumerate(types) if t not in _V4_TYPES), None)
    if bad is not None:
        allowed = ", ".join(_V4_TYPES)
        raise cfg.error(f"layer_types[{bad}]={types[bad]!r} is not a DeepSeek-V4 layer type; allowed: {allowed}")
    return types


def read_deepseek_v4(cfg: HFConfig) -> dict:
    """DeepSeek-V4 (``deepseek_v4``): every layer is shared-KV MQA over a sliding window, most also compress
    the whole request (kind ``compressed``, :class:`kvplan.specs.CompressedConfig`).

    Mirrors transformers 5.23's ``DeepseekV4Config`` with its defaults for absent keys: 43 layers, 64 query
    heads, ``head_dim`` 512 (the one K=V head; ``num_key_value_heads`` is not read by the attention: its
    ``kv_proj`` projects to one head of ``head_dim``), ``sliding_window`` 128, ``index_head_dim`` 128,
    ``compress_rates`` ``{compressed_sparse_attention: 4, heavily_compressed_attention: 128}`` (legacy
    ``compress_rate_csa`` / ``compress_rate_hca`` override them), ``layer_types`` explicit, else the legacy
    ``compress_ratios`` (what DeepSeek-V4-Flash's file ships), else two HCA layers then HCA / CSA alternating,
    ``max_position_embeddings`` 1048576. vLLM 0.33 reads the same config class
    (``vllm/models/deepseek_v4/attention.py``: ``compress_ratio = max(1, compress_rates.get(layer_type, 0))``, an
    indexer on ratio-4 layers only; ``transformers_utils/deepseek_v4_utils.py get_compress_ratios``).

    Per layer type: ``sliding_attention`` keeps the sliding branch only (ratio 0); ``compressed_sparse_attention``
    (CSA) also one entry per ``compress_rates[CSA]`` tokens with overlapping windows and an indexer key;
    ``heavily_compressed_attention`` (HCA) one entry per ``compress_rates[HCA]`` tokens. The MTP layer
    (``num_nextn_predict_layers``) is not a decoder layer and is not counted.

    Raises:
        SpecError: a layer type or ratio DeepseekV4Config does not take, equal CSA and HCA rates (kvplan tells
            them apart by their ratio), or a bad dimension.
    """
    n = cfg.int("num_hidden_layers", 43)
    heads = cfg.int("num_attention_heads", 64)
    head_dim = cfg.int("head_dim", 512)
    window = cfg.int("sliding_window", 128)
    index = cfg.int("index_head_dim", 128)
    rates = {"compressed_sparse_attention": 4, "heavily_compressed_attention": 128}
    given = cfg.get("compress_rates")
    if given is not None:
        if not isinstance(given, dict) or set(given) - set(rates):
            raise cfg.error(f"compress_rates={str(given)[:80]} must map {', '.join(rates)} to a ratio")
        rates.update({k: cfg.check_int(f"compress_rates.{k}", v) for k, v in given.items()})
    legacy_rates = (
        ("compress_rate_csa", "compressed_sparse_attention"),
        ("compress_rate_hca", "heavily_compressed_attention"),
    )
    for key, kind in legacy_rates:
        if cfg.has(key):
            rates[kind] = cfg.int(key)
    csa, hca = rates["compressed_sparse_attention"], rates["heavily_compressed_attention"]
    if csa == hca:
        raise cfg.error(
            f"compress_rates gives CSA and HCA layers the same ratio ({csa}); kvplan tells them apart by it"
        )
    types = _v4_layer_types(cfg, n)
    ratios = [0 if t == "sliding_attention" else rates[t] for t in types]
    cfg.ignore(
        "num_key_value_heads", "q_lora_rank", "o_lora_rank", "o_groups", "index_n_heads", "index_topk",
        "qk_rope_head_dim", "partial_rotary_factor", "compress_rope_theta", "num_hash_layers", "mlp_layer_types",
        "num_nextn_predict_layers", "hc_mult", "hc_sinkhorn_iters", "hc_eps", "swiglu_limit", "expert_dtype",
    )  # fmt: skip
    n_csa, n_hca = types.count("compressed_sparse_attention"), types.count("heavily_compressed_attention")
    return {
        "num_layers": n,
        "num_q_heads": heads,
        "num_kv_heads": 1,
        "head_dim": head_dim,
        "hidden_size": cfg.int("hidden_size", 4096),
        "dtype": cfg.dtype(),
        "max_model_len": cfg.int("max_position_embeddings", 1048576),
        "layers": ["compressed"] * n,
        "compressed": {
            "head_dim": head_dim,
            "window": window,
            "ratios": ratios,
            "csa_ratio": csa,
            "index_head_dim": index,
        },  # fmt: skip
        "notes": (
            f"DeepSeek-V4: {n - n_csa - n_hca} sliding-only, {n_csa} CSA (1 entry per {csa} tokens + a {index}-element "
            f"indexer key) and {n_hca} HCA (1 entry per {hca} tokens) layers, each with one {head_dim}-element K=V "
            f"vector per token for the last {window} tokens; compressor states sized as vLLM's fp32 "
            "CompressorStateCache"
        ),
    }


def read_longcat_flash(cfg: HFConfig) -> dict:
    """LongCat-Flash: every decoder layer holds two MLA sublayers, each with its own latent cache.

    Mirrors transformers 5.23's ``LongcatFlashConfig`` (defaults: ``num_layers`` 28 blocks, 64 heads,
    ``kv_lora_rank`` 512, ``qk_rope_head_dim`` 64, ``qk_nope_head_dim`` 128, ``v_head_dim`` 128,
    ``max_position_embeddings`` 131072; ``num_hidden_layers`` is the property ``2 × num_layers``) and
    ``LongcatFlashDecoderLayer`` (``self_attn``: two ``LongcatFlashMLA`` with cache indices ``2i`` and ``2i + 1``),
    checked against vLLM 0.33's ``longcat_flash.py`` (``FlashDecoderLayer.self_attn``: two
    ``DeepseekV2MLAAttention`` per layer, ``config.num_layers`` layers). kvplan's layers are the ``2 × num_layers``
    attention sublayers, each one latent of ``kv_lora_rank + qk_rope_head_dim`` per token. The zero (identity)
    experts and the shortcut MoE do not change the cache.

    Raises:
        SpecError: ``num_layers`` and ``num_hidden_layers`` both set and not 1 : 2, or a bad dimension.
    """
    blocks = cfg.int("num_layers", 28)
    if cfg.has("num_hidden_layers") and cfg.int("num_hidden_layers") != 2 * blocks:
        raise cfg.error(
            f"num_hidden_layers={cfg.int('num_hidden_layers')} but num_layers={blocks}: LongcatFlashConfig's "
            "num_hidden_layers is 2 x num_layers (two attention sublayers per block)"
        )
    heads = cfg.int("num_attention_heads", 64)
    rope = cfg.int("qk_rope_head_dim", _MLA_DEFAULTS["qk_rope_head_dim"], minimum=0)
    nope = cfg.int("qk_nope_head_dim", _MLA_DEFAULTS["qk_nope_head_dim"], minimum=0)
    if rope + nope < 1:
        raise cfg.error("qk_nope_head_dim + qk_rope_head_dim must be at least 1")
    cfg.ignore("num_key_value_heads", "head_dim", "qk_head_dim", "q_lora_rank")
    rank = cfg.int("kv_lora_rank", _MLA_DEFAULTS["kv_lora_rank"])
    return {
        "num_layers": 2 * blocks,
        "num_q_heads": heads,
        "num_kv_heads": heads,
        "head_dim": rope + nope,
        "v_head_dim": cfg.int("v_head_dim", _MLA_DEFAULTS["v_head_dim"]),
        "hidden_size": cfg.int("hidden_size", 6144),
        "dtype": cfg.dtype(),
        "max_model_len": cfg.int("max_position_embeddings", 131072),
        "mla": {"kv_lora_rank": rank, "qk_rope_head_dim": rope},
        "notes": f"{blocks} decoder blocks of two MLA sublayers each: {2 * blocks} latent caches",
    }


READERS = {
    "longcat_flash": read_longcat_flash,
    "deepseek_v4": read_deepseek_v4,
    "glm4_moe_lite": read_deepseek,
    "glm_moe_dsa": read_glm_moe_dsa,
    "deepseek_v2": read_deepseek,
    "deepseek_v3": read_deepseek,
    "kimi_k2": read_deepseek,
    "deepseek_v32": read_deepseek_v32,
    "kimi_linear": read_kimi_linear,
}
