"""Gemma 2, Gemma 3, Gemma 3n and Gemma 4: interleaved sliding / full attention, per-kind geometry, KV sharing.

Mirrors transformers 5.23's ``Gemma2Config``, ``Gemma3TextConfig`` (and ``Gemma3Config``, whose
``text_config`` it is), ``Gemma3nTextConfig`` and ``Gemma4TextConfig``, with their defaults for absent keys,
and was checked against vLLM 0.33's ``model_executor/models/gemma2.py``, ``gemma3.py``, ``gemma3n.py`` and
``gemma4.py`` (each builds a layer's ``Attention`` from ``config.layer_types[i]``, ``sliding_window`` on the
``sliding_attention`` layers only).

=============  =======  =====  ====  ========  ======  =======  ==========================================
class          layers   H_q    H_kv  head_dim  window  max len  layer_types when absent
=============  =======  =====  ====  ========  ======  =======  ==========================================
Gemma2         26       8      4     256       4096    8192     sliding where (i+1) % 2, else full
Gemma3Text     26       8      4     256       4096    131072   sliding where (i+1) % P, P =
                                                                ``sliding_window_pattern`` (default 6)
Gemma3nText    35       8      2     256       512     32768    full where (i+1) % 5 == 0, else sliding
Gemma4Text     30       8      4     256       512     131072   sliding where (i+1) % 6, else full; the
                                                                last layer is forced to full
=============  =======  =====  ====  ========  ======  =======  ==========================================

Absent ``num_key_value_heads`` is the class default above (not H_q), and absent ``head_dim`` is 256 (not
hidden_size / H_q). ``query_pre_attn_scalar`` is the attention scale (vLLM: ``scaling =
query_pre_attn_scalar ** -0.5``), never the head dim: Gemma 2 9B has 224 there and head_dim 256.

Gemma 4 full-attention layers have their own geometry (``Gemma4TextConfig.__post_init__`` builds
``per_layer_config``; vLLM ``Gemma4DecoderLayer`` reads it): head_dim ``global_head_dim`` (default 512)
and, only when ``attention_k_eq_v`` is true, ``num_global_key_value_heads`` KV heads (else
``num_key_value_heads``). K=V layers still cache two tensors: transformers' cache layers allocate keys
and values separately (``StaticLayer.lazy_initialization``; V is the un-scaled RMS norm of the K
projection, without RoPE), and vLLM loads the K weight into both the K and V slots of ``qkv_proj`` and
passes both to ``Attention`` (a standard K+V page). A config.json saved by transformers 5.x may carry
``per_layer_config`` itself (``{"05": {"head_dim": 512}}``); then it is the layers' geometry and
``global_head_dim`` / ``num_global_key_value_heads`` are not used, as in transformers.

Gemma 3n and Gemma 4 ``num_kv_shared_layers``: the last N layers keep no cache and read the one of the
last earlier non-shared layer of the same type (transformers ``kv_sharing_modes``; vLLM ``gemma4.py``
``kv_sharing_target_layer_name``); kvplan's ``num_kv_shared_layers`` spec key applies that rule. vLLM's
``gemma3n.py`` instead takes layer ``first_shared - 2`` for sliding and ``first_shared - 1`` for full
layers; the two agree on every released Gemma 3n (E2B, E4B: the last non-shared layer is full, the one
before it sliding), and shared layers cost 0 bytes either way. Gemma3nTextConfig's other per-layer lists
(``intermediate_size``, ``activation_sparsity_pattern``) and AltUp / LAuReL keys leave heads and head_dim
unchanged.

``sliding_window_pattern`` is read by Gemma3TextConfig alone (and only when ``layer_types`` is absent);
Gemma2Config, Gemma3nTextConfig and Gemma4TextConfig ignore it. kvplan accepts it where it is ignored
only when it describes the same layout as the one built, and refuses it otherwise.

dtype: vLLM 0.33 serves a float32 (or dtype-less) checkpoint in bfloat16 on Ampere and newer
(``_resolve_auto_dtype``: the platform's first supported dtype), and refuses float16 for gemma2 / gemma3 /
gemma3_text (``_FLOAT16_NOT_SUPPORTED_MODELS``), serving those in bfloat16.
"""

from __future__ import annotations

from typing import Any

from kvplan.readers.base import HF_DTYPES, HFConfig

_TYPES = {"full_attention": "full", "sliding_attention": "sliding"}

# family -> class defaults (transformers 5.23 configuration_<family>.py)
_DEFAULTS: dict[str, dict[str, Any]] = {
    "gemma2": {"layers": 26, "heads": 8, "kv": 4, "head_dim": 256, "hidden": 2304, "max_len": 8192, "window": 4096},
    "gemma3": {"layers": 26, "heads": 8, "kv": 4, "head_dim": 256, "hidden": 2304, "max_len": 131072, "window": 4096},
    "gemma3n": {"layers": 35, "heads": 8, "kv": 2, "head_dim": 256, "hidden": 2048, "max_len": 32768, "window": 512},
    "gemma4": {"layers": 30, "heads": 8, "kv": 4, "head_dim": 256, "hidden": 2304, "max_len": 131072, "window": 512},
}
_FAMILY = {
    "gemma2": "gemma2",
    "gemma3": "gemma3",
    "gemma3_text": "gemma3",
    "gemma3n": "gemma3n",
    "gemma3n_text": "gemma3n",
    "gemma4": "gemma4",
    "gemma4_text": "gemma4",
}
_NO_FP16 = ("gemma2", "gemma3", "gemma3_text")  # vLLM _FLOAT16_NOT_SUPPORTED_MODELS


def _dtype(cfg: HFConfig) -> str:
    """The dtype vLLM serves the checkpoint in (see the module docstring)."""
    raw = cfg.get("torch_dtype") or cfg.get("dtype") or "float32"
    if str(raw).lower() not in HF_DTYPES:
        cfg.dtype()  # raises the one-line message naming the allowed values
    name = str(raw).lower()
    if name in ("float32", "float"):
        return "bf16"
    if HF_DTYPES[name] == "fp16" and cfg.model_type in _NO_FP16:
        return "bf16"
    return HF_DTYPES[name]


def window(cfg: HFConfig, default: int | None) -> int | None:
    """``sliding_window``: absent -> the class default; null -> no window.

    Raises:
        SpecError: not a positive integer.
    """
    cfg.read.add("sliding_window")
    cfg.asked.add("sliding_window")
    value = cfg.raw["sliding_window"] if "sliding_window" in cfg.raw else default
    if value is None:
        return None
    return cfg.check_int("sliding_window", value)


def pattern_kinds(num_layers: int, period: int) -> list[str]:
    """The Gemma / Cohere 2 period rule: layer i is full where ``(i + 1) % period == 0``, else sliding."""
    return ["full" if (i + 1) % period == 0 else "sliding" for i in range(num_layers)]


def check_ignored_pattern(cfg: HFConfig, kinds: list[str], who: str) -> None:
    """Accept a ``sliding_window_pattern`` the config class does not read only when it describes ``kinds``.

    Raises:
        SpecError: the pattern is not a positive integer, or it describes another layout.
    """
    if not cfg.has("sliding_window_pattern"):
        return
    period = cfg.int("sliding_window_pattern")
    if pattern_kinds(len(kinds), period) != kinds:
        raise cfg.error(
            f"sliding_window_pattern={period} disagrees with the layer layout {who} builds "
            f"({kinds.count('full')} full of {len(kinds)}), and {who} ignores it; kvplan will not guess "
            "which one the checkpoint uses: remove it or set layer_types"
        )


def _geometry(cfg: HFConfig, d: dict[str, Any]) -> dict:
    """Layers, heads, head_dim and width with the class defaults."""
    return {
        "num_layers": cfg.int("num_hidden_layers", d["layers"]),
        "num_q_heads": cfg.int("num_attention_heads", d["heads"]),
        "num_kv_heads": cfg.int("num_key_value_heads", d["kv"]),
        "head_dim": cfg.int("head_dim", d["head_dim"]),
        "hidden_size": cfg.int("hidden_size", d["hidden"]),
    }


def _gemma4_per_layer(cfg: HFConfig, n: int) -> dict[int, dict[str, int]] | None:
    """A saved ``per_layer_config`` (layer index -> {head_dim, num_key_value_heads}), or None.

    Raises:
        SpecError: not a mapping of layer indices to mappings, an index out of range, or an override other
            than head_dim / num_key_value_heads (kvplan does not guess what it changes).
    """
    raw = cfg.get("per_layer_config")
    if raw is None:
        return None
    if not isinstance(raw, dict):
        raise cfg.error("per_layer_config must be an object of layer index -> overrides")
    out: dict[int, dict[str, int]] = {}
    for key, over in raw.items():
        try:
            idx = int(key)
        except (TypeError, ValueError):
            raise cfg.error(f"per_layer_config key {key!r} is not a layer index") from None
        if not 0 <= idx < n:
            raise cfg.error(f"per_layer_config key {key!r} is not a layer index in [0, {n})")
        if not isinstance(over, dict):
            raise cfg.error(f"per_layer_config[{key!r}] must be an object of overrides")
        for name, value in over.items():
            if name not in ("head_dim", "num_key_value_heads"):
                raise cfg.error(
                    f"per_layer_config[{key!r}] overrides {name!r}; the gemma4 reader handles head_dim and "
                    "num_key_value_heads only"
                )
            out.setdefault(idx, {})[name] = cfg.check_int(f"per_layer_config[{key!r}].{name}", value)
    return out


def _gemma4(cfg: HFConfig, data: dict, kinds: list[str]) -> None:
    """Gemma 4 full-layer geometry (``geometry.full`` or ``per_layer``) and K=V, into ``data``."""
    n = data["num_layers"]
    kv, head_dim = data["num_kv_heads"], data["head_dim"]
    k_eq_v = cfg.flag("attention_k_eq_v", False)
    global_dim = cfg.int("global_head_dim", 512)
    global_kv = cfg.int("num_global_key_value_heads", None)
    saved = _gemma4_per_layer(cfg, n)
    if saved is None:  # Gemma4TextConfig.__post_init__: overrides on full_attention layers
        full = {"head_dim": global_dim}
        if k_eq_v and global_kv is not None:
            full["num_key_value_heads"] = global_kv
        saved = {i: full for i, kind in enumerate(kinds) if kind == "full"}
    heads = [saved.get(i, {}).get("num_key_value_heads", kv) for i in range(n)]
    dims = [saved.get(i, {}).get("head_dim", head_dim) for i in range(n)]
    full_geo = {(heads[i], dims[i]) for i in range(n) if kinds[i] == "full"}
    sliding_geo = {(heads[i], dims[i]) for i in range(n) if kinds[i] == "sliding"}
    geometry: dict[str, dict] = {}
    if len(full_geo) <= 1 and sliding_geo <= {(kv, head_dim)}:
        if full_geo:
            (fh, fd) = next(iter(full_geo))
            over = {k: v for k, v in (("num_kv_heads", fh), ("head_dim", fd)) if v != data[k]}
            if over:
                geometry["full"] = over
    else:
        data["per_layer"] = {"num_kv_heads": heads, "head_dim": dims}
    if k_eq_v and "full" in kinds:
        geometry.setdefault("full", {})["k_eq_v"] = True
    if geometry:
        data["geometry"] = geometry


def read_gemma(cfg: HFConfig) -> dict:
    """A Gemma 2 / 3 / 3n / 4 spec mapping (see the module docstring for the rules and defaults).

    Raises:
        SpecError: a non-causal Gemma 4 (``use_bidirectional_attention: all``), sliding layers with no
            window, a ``sliding_window_pattern`` that disagrees with the layout, a bad ``per_layer_config``,
            or a shared layer with no earlier layer of its type.
    """
    family = _FAMILY[cfg.model_type]
    d = _DEFAULTS[family]
    who = {"gemma2": "Gemma2Config", "gemma3": "Gemma3TextConfig", "gemma3n": "Gemma3nTextConfig"}.get(
        family, "Gemma4TextConfig"
    )
    if family == "gemma4" and cfg.get("use_bidirectional_attention") == "all":
        raise cfg.error("use_bidirectional_attention is 'all': the model is not causal and keeps no KV cache")
    data = _geometry(cfg, d)
    n = data["num_layers"]
    data["dtype"] = _dtype(cfg)
    data["max_model_len"] = cfg.int("max_position_embeddings", d["max_len"])
    cfg.ignore(
        "query_pre_attn_scalar",
        "sliding_window_size",
        "cache_implementation",
        "attn_logit_softcapping",
        "final_logit_softcapping",
        "use_bidirectional_attention",
    )
    kinds = cfg.layer_types(n, _TYPES)
    if kinds is None and family == "gemma3":  # Gemma3TextConfig reads the legacy pattern (default 6)
        kinds = pattern_kinds(n, cfg.int("sliding_window_pattern", 6))
    else:
        if kinds is None:
            kinds = pattern_kinds(n, {"gemma2": 2, "gemma3n": 5, "gemma4": 6}[family])
        check_ignored_pattern(cfg, kinds, who)
    if family == "gemma4":
        kinds[-1] = "full"  # Gemma4TextConfig.__post_init__ forces the last layer to full attention
    win = window(cfg, d["window"])
    if "sliding" in kinds:
        if win is None:
            raise cfg.error("sliding_window is null but layer_types has sliding_attention layers")
        data["sliding_window"] = win
    data["layers"] = kinds
    if family in ("gemma3n", "gemma4"):
        shared = cfg.int("num_kv_shared_layers", 15 if family == "gemma3n" else 0, minimum=0)
        if shared:
            data["num_kv_shared_layers"] = shared
        cfg.ignore("activation_sparsity_pattern", "intermediate_size", "hidden_size_per_layer_input")
    if family == "gemma4":
        _gemma4(cfg, data, kinds)
    return data


READERS = {model_type: read_gemma for model_type in _FAMILY}
