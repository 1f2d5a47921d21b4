"""Plain decoders: every layer is GQA attention, full or with one sliding window.

Mirrors transformers' LlamaConfig, MistralConfig, MixtralConfig, Qwen2Config, Qwen2MoeConfig,
Qwen3Config, Qwen3MoeConfig, Phi3Config, Olmo2Config, Olmo3Config, Glm4Config and Glm4MoeConfig (5.23),
with their defaults for absent keys (the table below), and was checked against vLLM 0.33's
``model_executor/models/llama.py`` (a layer gets a window only where ``layer_types`` says
``sliding_attention``), ``qwen2.py``/``qwen3.py`` and ``olmo3.py``.

Phi-3 sets ``sliding_window`` (2047 in Phi-3-mini) with no ``layer_types``: transformers' cache then keeps a
2,047-token ring on every layer, while vLLM (``phi3.py`` is Llama's model) runs full attention and keeps
every token. kvplan follows vLLM here: a planner answers for serving, and full attention is what is served.
"""

from __future__ import annotations

from kvplan.readers.base import HFConfig, attention_dims, max_len

_TYPES = {"full_attention": "full", "sliding_attention": "sliding"}

# model_type -> class defaults (transformers 5.23): max_position_embeddings, num_hidden_layers,
# num_attention_heads, num_key_value_heads (absent: = heads), hidden_size, head_dim (absent: hidden // heads),
# sliding_window, and how the window applies.
_DEFAULTS: dict[str, dict] = {
    "llama": {"max_len": 2048, "layers": 32, "heads": 32, "hidden": 4096},
    "mistral": {
        "max_len": 131072,
        "layers": 32,
        "heads": 32,
        "kv_heads": 8,
        "hidden": 4096,
        "window": 4096,
        "windowing": "all",
    },
    "mixtral": {"max_len": 131072, "layers": 32, "heads": 32, "kv_heads": 8, "hidden": 4096, "windowing": "all"},
    "qwen2": {"max_len": 32768, "layers": 32, "heads": 32, "hidden": 4096, "windowing": "qwen"},
    "qwen2_moe": {"max_len": 32768, "layers": 24, "heads": 16, "hidden": 2048, "windowing": "qwen"},
    "qwen3": {"max_len": 32768, "layers": 32, "heads": 32, "hidden": 4096, "head_dim": 128, "windowing": "qwen"},
    "qwen3_moe": {"max_len": 32768, "layers": 24, "heads": 32, "kv_heads": 4, "hidden": 2048, "windowing": "qwen"},
    "phi3": {"max_len": 4096, "layers": 32, "heads": 32, "hidden": 3072, "windowing": "ignored"},
    "olmo2": {"max_len": 2048, "layers": 32, "heads": 32, "hidden": 4096},
    "olmo3": {"max_len": 2048, "layers": 32, "heads": 32, "hidden": 4096, "window": 4096, "windowing": "olmo3"},
    "glm4": {"max_len": 131072, "layers": 40, "heads": 32, "kv_heads": 2, "hidden": 4096, "head_dim": 128},
    "glm4_moe": {"max_len": 131072, "layers": 46, "heads": 96, "kv_heads": 8, "hidden": 4096},
}


def _window(cfg: HFConfig, default: int | None) -> int | None:
    """``sliding_window`` as the class reads it: absent -> class default; null or 0 -> no window."""
    cfg.read.add("sliding_window")
    cfg.asked.add("sliding_window")
    value = cfg.raw["sliding_window"] if "sliding_window" in cfg.raw else default
    if value in (None, 0):
        return None
    return cfg.check_int("sliding_window", value)


def read_decoder(cfg: HFConfig) -> dict:
    """A plain decoder's spec mapping (see the module docstring for which keys and defaults)."""
    d = _DEFAULTS[cfg.model_type]
    data = attention_dims(cfg, d)
    n = data["num_layers"]
    data["dtype"] = cfg.dtype()
    data["max_model_len"] = max_len(cfg, d["max_len"])
    cfg.ignore("max_window_layers", "use_sliding_window")
    windowing = d.get("windowing", "none")
    window = _window(cfg, d.get("window")) if windowing != "none" else None
    kinds = cfg.layer_types(n, _TYPES)
    if kinds is None and window is not None:
        if windowing == "all":
            kinds = ["sliding"] * n
        elif windowing == "qwen":  # Qwen2Config: sliding from max_window_layers on, when use_sliding_window
            first = cfg.int("max_window_layers", 28, minimum=0)
            use = cfg.flag("use_sliding_window", False)
            kinds = ["sliding" if use and i >= first else "full" for i in range(n)]
        elif windowing == "olmo3":  # Olmo3Config: every 4th layer full
            kinds = ["full" if (i + 1) % 4 == 0 else "sliding" for i in range(n)]
        else:  # phi3: see the module docstring
            kinds = ["full"] * n
    kinds = kinds or ["full"] * n
    if "sliding" in kinds:
        if window is None:
            raise cfg.error("layer_types has sliding_attention layers but sliding_window is not set")
        data["sliding_window"] = window
    data["layers"] = kinds
    if cfg.model_type == "phi3" and window is not None:
        data["notes"] = f"sliding_window {window} in config.json not applied: vLLM serves Phi-3 with full attention"
    return data


READERS = {model_type: read_decoder for model_type in _DEFAULTS}
