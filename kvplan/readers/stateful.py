"""Models whose cache is not (only) K/V of the usual kinds: RWKV-4, xLSTM, ZAYA, Inkling, XLNet, Reformer, CPM-Ant.

No engine kvplan models serves RWKV-4, xLSTM, XLNet, Reformer or CPM-Ant (vLLM 0.33's
``model_executor/models/registry.py`` has none of them, nor SGLang 0.5.23's ``srt/models/``, nor llama.cpp's
``src/llama-arch.cpp``); ZAYA and Inkling are served by SGLang (and Inkling by vLLM) with state pools kvplan does
not model yet. So every shape and dtype here is transformers 5.23's own, each reader mirrors its config class
(defaults for absent keys), and ``tests/test_oracle.py`` compares each layer and the request's bytes with what
transformers' cache holds. ``kvplan fit`` refuses them per engine with the reason
(:attr:`kvplan.engines.base.EngineRules.unplanned_kinds`).

- ``rwkv`` (``RwkvConfig``, RWKV-4): every layer keeps state kind ``rwkv4``: two token-shift vectors of
  ``hidden_size`` in the model dtype and the WKV numerator, denominator and maximum in float32
  (``RwkvModel.forward``: five ``(B, hidden_size, num_hidden_layers)`` tensors).
- ``xlstm`` (``xLSTMConfig``): every block keeps state kind ``mlstm``: ``C (num_heads, qk_head_dim, v_head_dim)``,
  ``n (num_heads, qk_head_dim)``, ``m (num_heads, 1)`` in the model dtype (``xLSTMCache.rnn_state``).
- ``zaya`` (``ZayaConfig``): every layer is attention (``hybrid``: full; ``hybrid_sliding``: sliding) whose CCA
  projection also keeps, beside its K/V, a conv window over the query and key projections and the previous
  token's delayed value: state kind ``cca`` as ``parallel_state`` (``ZayaCCAProjection``).
- ``inkling_text``, ``inkling2_text`` (``InklingTextConfig``, ``Inkling2TextConfig``): every layer is attention
  (``hybrid``: full, ``num_key_value_heads × head_dim``; ``hybrid_sliding``: sliding over ``sliding_window_size``
  with ``swa_num_key_value_heads × swa_head_dim``) with four short-conv states beside it (K, V and two on the
  residual stream, ``conv_kernel_size`` columns, float32 in transformers' StaticCache): state kind ``sconv``.
- ``xlnet`` (``XLNetConfig``): no K/V: each layer caches its input hidden states (``d_model`` per token), the
  last ``mem_len`` (all of them when ``mem_len`` is null or 0), and recomputes K and V from them every step
  (``XLNetModel.cache_mem``): kind ``hidden``.
- ``reformer`` (``ReformerConfig``, a causal checkpoint: ``is_decoder`` true): every layer caches its input
  hidden states for every token, LSH layers also int64 bucket ids (``ReformerDynamicCache``): kind ``hidden``.
- ``cpmant`` (``CpmAntConfig``): full attention (``num_attention_heads × dim_head``), and every request caches
  ``prompt_length`` learned prompt tokens before its own (``CpmAntModel.forward`` prepends them):
  ``prefix_tokens``.

Recurrent models (RWKV, xLSTM) have no positional limit; XLNet and CPM-Ant give none either. Where a config has
no length, kvplan assumes 2048 tokens, as vLLM does for a config without one (``_get_and_verify_max_len``).
"""

from __future__ import annotations

from kvplan.readers.base import HFConfig, max_len

DEFAULT_MAX_LEN = 2048  # vLLM config/model.py _get_and_verify_max_len: a config that gives no length


def read_rwkv(cfg: HFConfig) -> dict:
    """RWKV-4 (``RwkvConfig``: 32 layers, hidden_size 4096, ``attention_hidden_size`` absent = hidden_size,
    ``context_length`` 1024): every layer keeps an ``rwkv4`` state of ``hidden_size``.

    Raises:
        SpecError: a bad dimension, or ``attention_hidden_size`` unlike ``hidden_size`` (transformers sizes
            the state by hidden_size while the WKV runs at attention_hidden_size: it cannot run such a file).
    """
    n = cfg.int("num_hidden_layers", 32)
    hidden = cfg.int("hidden_size", 4096)
    attention = cfg.int("attention_hidden_size", hidden)
    if attention != hidden:
        raise cfg.error(
            f"attention_hidden_size={attention} but hidden_size={hidden}: transformers 5.23's RwkvModel sizes its "
            "state (B, hidden_size, layers) and writes attention_hidden_size-wide WKV values into it; kvplan will "
            "not guess"
        )
    cfg.ignore("intermediate_size", "rescale_every")
    return {
        "num_layers": n,
        "num_q_heads": 1,
        "num_kv_heads": 1,
        "head_dim": hidden,
        "hidden_size": hidden,
        "dtype": cfg.dtype(),
        "max_model_len": cfg.first_int("context_length", "max_position_embeddings", default=1024),
        "layers": ["rwkv4"] * n,
        "rwkv4": {"d_inner": hidden},
        "notes": (
            f"{n} RWKV-4 layers: two token shifts of {hidden} in the model dtype and the WKV state (numerator, "
            f"denominator, maximum) of {hidden} in fp32 per layer, as transformers 5.23 keeps them (no engine "
            "serves RWKV-4); context_length is the training context, not a limit of the recurrence"
        ),
    }


def _round_up(x: float, multiple: int) -> int:
    """xLSTMConfig's ``round_up_to_next_multiple_of``: ``int(((x + m - 1) // m) * m)``."""
    return int(((x + multiple - 1) // multiple) * multiple)


def read_xlstm(cfg: HFConfig) -> dict:
    """xLSTM (``xLSTMConfig``: ``hidden_size`` 4096, ``num_hidden_layers`` 32 (``embedding_dim`` and ``num_blocks``
    must agree with them), ``num_heads`` 8, ``qk_dim_factor`` 0.5, ``v_dim_factor`` 1.0): every block keeps an
    ``mlstm`` state with ``qk_head_dim = round_up(hidden × qk_dim_factor, 64) // num_heads`` and
    ``v_head_dim = round_up(hidden × v_dim_factor, 64) // num_heads``.

    Raises:
        SpecError: a bad dimension, a dimension factor that is not a positive number, or ``embedding_dim`` /
            ``num_blocks`` unlike ``hidden_size`` / ``num_hidden_layers``.
    """
    hidden = cfg.int("hidden_size", 4096)
    n = cfg.int("num_hidden_layers", 32)
    for key, used, name in (("embedding_dim", hidden, "hidden_size"), ("num_blocks", n, "num_hidden_layers")):
        if cfg.has(key) and cfg.int(key) != used:
            raise cfg.error(
                f"{key}={cfg.int(key)} but {name}={used}: transformers 5.23's xLSTMConfig takes {name} (its default "
                f"when absent) and copies it to {key} only when {name} is null, which its strict class refuses; "
                "kvplan will not guess which the checkpoint was trained with"
            )
    heads = cfg.int("num_heads", 8)
    factors = {}
    for key, default in (("qk_dim_factor", 0.5), ("v_dim_factor", 1.0)):
        value = cfg.get(key, default)
        if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
            raise cfg.error(f"{key}={value!r} must be a positive number")
        factors[key] = value
    qk = _round_up(hidden * factors["qk_dim_factor"], 64) // heads
    v = _round_up(hidden * factors["v_dim_factor"], 64) // heads
    if qk < 1 or v < 1:
        raise cfg.error(f"num_heads={heads} leaves no head dimension (qk_head_dim {qk}, v_head_dim {v})")
    return {
        "num_layers": n,
        "num_q_heads": heads,
        "num_kv_heads": heads,
        "head_dim": qk,
        "hidden_size": hidden,
        "dtype": cfg.dtype(),
        "max_model_len": DEFAULT_MAX_LEN,
        "layers": ["mlstm"] * n,
        "mlstm": {"num_heads": heads, "head_k_dim": qk, "head_v_dim": v},
        "notes": (
            f"{n} mLSTM blocks: C ({heads}, {qk}, {v}), n ({heads}, {qk}), m ({heads}, 1) per block in the model "
            "dtype, as transformers 5.23's xLSTMCache keeps them (no engine serves xLSTM); no positional limit "
            f"(max_model_len {DEFAULT_MAX_LEN} assumed)"
        ),
    }


_HYBRID = {"hybrid": "full", "hybrid_sliding": "sliding"}


def _hybrid_kinds(cfg: HFConfig, n: int, default: list[str]) -> list[str]:
    kinds = cfg.layer_types(n, _HYBRID)
    return kinds if kinds is not None else default


def read_zaya(cfg: HFConfig) -> dict:
    """ZAYA (``ZayaConfig``: 40 layers, 8 query / 2 KV heads of ``head_dim`` 128, hidden 2048, ``cca_time0`` =
    ``cca_time1`` = 2, ``sliding_window`` null, ``layer_types`` every layer ``hybrid``, max 131,072): attention
    layers with a ``cca`` state beside their K/V.

    Raises:
        SpecError: a bad dimension, a ``layer_types`` entry other than hybrid / hybrid_sliding, or sliding layers
            without ``sliding_window``.
    """
    n = cfg.int("num_hidden_layers", 40)
    heads = cfg.int("num_attention_heads", 8)
    kv = cfg.int("num_key_value_heads", 2)
    head_dim = cfg.int("head_dim", 128)
    hidden = cfg.int("hidden_size", 2048)
    kinds = _hybrid_kinds(cfg, n, ["full"] * n)
    data = {
        "num_layers": n,
        "num_q_heads": heads,
        "num_kv_heads": kv,
        "head_dim": head_dim,
        "hidden_size": hidden,
        "dtype": cfg.dtype(),
        "max_model_len": max_len(cfg, 131072),
        "layers": kinds,
        "parallel_state": "cca",
        "cca": {
            "num_heads": heads,
            "num_k_heads": kv,
            "head_dim": head_dim,
            "d_conv": cfg.int("cca_time0", 2),
            "d_conv2": cfg.int("cca_time1", 2),
        },
    }
    window = cfg.get("sliding_window")
    if "sliding" in kinds:
        if window is None:
            raise cfg.error("layer_types has hybrid_sliding layers but sliding_window is null")
        data["sliding_window"] = cfg.check_int("sliding_window", window)
    data["notes"] = (
        f"{n} attention layers ({kv} KV heads of {head_dim}), each with ZAYA's CCA state beside its K/V (a conv window "
        "over the query and key projections, the previous token's delayed value), as transformers 5.23 keeps it"
    )
    return data


def _read_inkling(cfg: HFConfig, d: dict) -> dict:
    """Inkling / Inkling 2 text models (see the module docstring); ``d`` holds the class defaults."""
    n = cfg.int("num_hidden_layers", d["layers"])
    heads = cfg.int("num_attention_heads", d["heads"])
    kv = cfg.int("num_key_value_heads", d["kv"])
    head_dim = cfg.int("head_dim", 128)
    swa_kv = cfg.int("swa_num_key_value_heads", d["swa_kv"])
    swa_head_dim = cfg.int("swa_head_dim", 128)
    swa_heads = cfg.int("swa_num_attention_heads", d["heads"])
    hidden = cfg.int("hidden_size", d["hidden"])
    window = cfg.first_int("sliding_window_size", "sliding_window", default=d["window"])
    d_conv = cfg.first_int("conv_kernel_size", "sconv_kernel_size", default=4, minimum=2)
    kinds = cfg.layer_types(n, _HYBRID)
    if kinds is None:
        local = cfg.list("local_layer_ids") if d["local_ids"] else None
        if local is not None:
            if any(isinstance(i, bool) or not isinstance(i, int) or not 0 <= i < n for i in local):
                raise cfg.error(f"local_layer_ids must list layer indices in 0..{n - 1}")
            kinds = ["sliding" if i in set(local) else "full" for i in range(n)]
        else:  # the class default: a full layer every sixth ((i + 1) % 6 == 0), sliding elsewhere
            kinds = ["full" if (i + 1) % 6 == 0 else "sliding" for i in range(n)]
    cfg.ignore("local_layer_ids", "mlp_layer_types", "num_mtp_layers", "mtp_local_layer_ids")
    if heads % kv or swa_heads % swa_kv:
        raise cfg.error(
            f"num_attention_heads={heads} / num_key_value_heads={kv} or swa_num_attention_heads={swa_heads} / "
            f"swa_num_key_value_heads={swa_kv} are not whole groups"
        )
    q = max(heads, swa_heads)
    if q % kv or q % swa_kv:
        raise cfg.error(f"query heads {heads} (full) and {swa_heads} (sliding) differ; kvplan has one query count")
    data = {
        "num_layers": n,
        "num_q_heads": q,
        "num_kv_heads": kv,
        "head_dim": head_dim,
        "hidden_size": hidden,
        "dtype": cfg.dtype(),
        "max_model_len": max_len(cfg, d["max_len"], "max_position_embeddings", "model_max_length"),
        "layers": kinds,
        "parallel_state": "sconv",
        "sconv": {"d_inner": hidden, "d_conv": d_conv},
    }
    if "sliding" in kinds:
        data["sliding_window"] = window
        data["geometry"] = {"sliding": {"num_kv_heads": swa_kv, "head_dim": swa_head_dim}}
    else:
        cfg.ignore("swa_num_key_value_heads", "swa_head_dim", "swa_num_attention_heads")
    data["notes"] = (
        f"{kinds.count('full')} full layers ({kv} KV heads of {head_dim}) and {kinds.count('sliding')} sliding layers "
        f"({swa_kv} KV heads of {swa_head_dim}, window {window}), each with four short-conv states beside its K/V "
        f"(K, V and two of the residual stream of {hidden}, {d_conv} columns, fp32) as transformers 5.23 keeps them"
    )
    return data


def read_inkling_text(cfg: HFConfig) -> dict:
    """Inkling (``InklingTextConfig``: 66 layers, 64 query / 8 KV heads of 128 on full layers, 16 KV heads of 128
    on sliding layers (``swa_*``), ``sliding_window_size`` 512, hidden 6144, ``conv_kernel_size`` 4, max 131,072,
    ``layer_types`` from ``local_layer_ids`` or a full layer every sixth).

    Raises:
        SpecError: a bad dimension or layer list.
    """
    return _read_inkling(
        cfg,
        {
            "layers": 66,
            "heads": 64,
            "kv": 8,
            "swa_kv": 16,
            "hidden": 6144,
            "window": 512,
            "max_len": 131072,
            "local_ids": True,
        },  # fmt: skip
    )


def read_inkling2_text(cfg: HFConfig) -> dict:
    """Inkling 2 (``Inkling2TextConfig``: 48 layers, 48 query / 8 KV heads of 128 on both kinds, window 1024, hidden
    4608, ``conv_kernel_size`` 4, max 1,048,576, a full layer every sixth).

    Raises:
        SpecError: a bad dimension or layer list.
    """
    return _read_inkling(
        cfg,
        {
            "layers": 48,
            "heads": 48,
            "kv": 8,
            "swa_kv": 8,
            "hidden": 4608,
            "window": 1024,
            "max_len": 1048576,
            "local_ids": False,
        },  # fmt: skip
    )


def read_xlnet(cfg: HFConfig) -> dict:
    """XLNet (``XLNetConfig``: ``n_layer`` 24, ``d_model`` 1024, ``n_head`` 16, ``mem_len`` 512, ``reuse_len``
    null): every layer caches its input hidden states (kind ``hidden``), ``d_model`` per token, the last
    ``mem_len`` tokens (every token when ``mem_len`` is null or 0).

    Raises:
        SpecError: a bad dimension, ``d_model`` not a multiple of ``n_head``, or ``reuse_len`` set (the model then
            caches only the first ``reuse_len`` tokens of each segment).
    """
    n = cfg.first_int("n_layer", "num_hidden_layers", default=24)
    d_model = cfg.first_int("d_model", "hidden_size", default=1024)
    heads = cfg.first_int("n_head", "num_attention_heads", default=16)
    if d_model % heads:
        raise cfg.error(f"d_model={d_model} is not a multiple of n_head={heads}")
    if cfg.get("reuse_len") not in (None, 0):
        raise cfg.error(
            f"reuse_len={cfg.get('reuse_len')!r}: XLNet then caches only the first reuse_len tokens of each segment "
            "(XLNetModel.cache_mem); kvplan will not guess what a request keeps"
        )
    raw = cfg.raw["mem_len"] if "mem_len" in cfg.raw else 512
    cfg.read.add("mem_len")
    window = None if raw in (None, 0) else cfg.check_int("mem_len", raw)
    cfg.ignore("d_head", "use_mems_eval", "use_mems_train", "attn_type", "bi_data", "clamp_len", "same_length")
    hidden: dict = {"width": d_model}
    if window is not None:
        hidden["window"] = window
    return {
        "num_layers": n,
        "num_q_heads": heads,
        "num_kv_heads": heads,
        "head_dim": d_model // heads,
        "hidden_size": d_model,
        "dtype": cfg.dtype(),
        "max_model_len": DEFAULT_MAX_LEN,
        "layers": ["hidden"] * n,
        "hidden": hidden,
        "notes": (
            f"{n} layers cache their input hidden states ({d_model} per token, "
            + (f"the last mem_len = {window} tokens" if window else "every token: mem_len is null")
            + "), from which XLNet recomputes K and V every step (transformers 5.23 XLNetModel.cache_mem); no "
            f"positional limit (max_model_len {DEFAULT_MAX_LEN} assumed)"
        ),
    }


def read_reformer(cfg: HFConfig) -> dict:
    """Reformer (``ReformerConfig``: ``attn_layers`` local / lsh alternating over 6 layers, which sets
    ``num_hidden_layers``; hidden_size 256, 12 heads, ``num_hashes`` 1, max 4096; ``is_decoder`` false): every
    layer caches its input hidden states for every token (``ReformerDynamicCache.states_cache``), and an LSH layer
    also the bucket id of each token for each head and hash (``buckets_cache``, int64): kind ``hidden``.

    Raises:
        SpecError: ``is_decoder`` not true (transformers' ``ReformerModelWithLMHead`` asserts it: the class default
            is the bidirectional encoder), an ``attn_layers`` entry other than local / lsh, or
            ``num_hidden_layers`` unlike ``len(attn_layers)``.
    """
    if cfg.get("is_decoder") is not True:
        raise cfg.error(
            "is_decoder is not true: transformers' ReformerModelWithLMHead asserts is_decoder=True (the class "
            "default is the bidirectional encoder, which keeps no cache); a causal Reformer checkpoint sets it"
        )
    blocks = cfg.get("attn_layers", ["local", "lsh", "local", "lsh", "local", "lsh"])
    if not isinstance(blocks, list) or not blocks or any(b not in ("local", "lsh") for b in blocks):
        raise cfg.error(f"attn_layers={blocks!r} must be a non-empty list of 'local' / 'lsh'")
    n = len(blocks)
    if cfg.has("num_hidden_layers") and cfg.int("num_hidden_layers") != n:
        raise cfg.error(
            f"num_hidden_layers={cfg.int('num_hidden_layers')} but attn_layers lists {n}: ReformerConfig sets "
            "num_hidden_layers = len(attn_layers); kvplan will not guess"
        )
    hidden = cfg.int("hidden_size", 256)
    heads = cfg.int("num_attention_heads", 12)
    hashes = cfg.int("num_hashes", 1)
    lsh = [i for i, b in enumerate(blocks) if b == "lsh"]
    cfg.ignore("attention_head_size", "num_buckets", "local_attn_chunk_length", "lsh_attn_chunk_length")
    hidden_block: dict = {"width": hidden}
    if lsh:
        hidden_block.update({"index_width": heads * hashes, "index_layers": lsh})
    return {
        "num_layers": n,
        "num_q_heads": heads,
        "num_kv_heads": heads,
        "head_dim": cfg.int("attention_head_size", 64),
        "hidden_size": hidden,
        "dtype": cfg.dtype(),
        "max_model_len": max_len(cfg, 4096),
        "layers": ["hidden"] * n,
        "hidden": hidden_block,
        "notes": (
            f"{n} layers cache their input hidden states ({hidden} per token, every token), the {len(lsh)} LSH layers "
            f"also {heads} heads x {hashes} hashes of int64 bucket ids per token, as transformers 5.23's "
            "ReformerDynamicCache keeps them (no engine serves Reformer)"
        ),
    }


def read_cpmant(cfg: HFConfig) -> dict:
    """CPM-Ant (``CpmAntConfig``: 48 layers, 32 heads of ``dim_head`` 128, hidden 4096, ``prompt_length`` 32): full
    attention on every layer, every head caching K and V, and ``prompt_length`` learned prompt tokens cached with
    every request before its own (``prefix_tokens``).

    Raises:
        SpecError: a bad dimension.
    """
    n = cfg.int("num_hidden_layers", 48)
    heads = cfg.int("num_attention_heads", 32)
    head_dim = cfg.int("dim_head", 128)
    prompt = cfg.int("prompt_length", 32, minimum=0)
    cfg.ignore("prompt_types", "segment_types", "position_bias_num_buckets", "position_bias_max_distance")
    return {
        "num_layers": n,
        "num_q_heads": heads,
        "num_kv_heads": heads,
        "head_dim": head_dim,
        "hidden_size": cfg.int("hidden_size", 4096),
        "dtype": cfg.dtype(),
        "max_model_len": DEFAULT_MAX_LEN,
        "prefix_tokens": prompt,
        "notes": (
            f"every request caches prompt_length = {prompt} learned prompt tokens before its own (transformers 5.23 "
            "CpmAntModel.forward prepends them); relative position buckets, no length in the config "
            f"(max_model_len {DEFAULT_MAX_LEN} assumed)"
        ),
    }


READERS = {
    "rwkv": read_rwkv,
    "xlstm": read_xlstm,
    "zaya": read_zaya,
    "inkling_text": read_inkling_text,
    "inkling2_text": read_inkling2_text,
    "xlnet": read_xlnet,
    "cpmant": read_cpmant,
    "reformer": read_reformer,
}
