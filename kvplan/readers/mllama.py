"""Llama 3.2 Vision (``mllama``): self-attention layers plus cross-attention layers over the image tokens.

Mirrors transformers 5.23's ``MllamaTextConfig`` (the ``text_config`` of ``MllamaConfig``; defaults: 40
layers, 32 query / 8 KV heads, hidden_size 4096, ``max_position_embeddings`` 131072, ``cross_attention_layers``
``[3, 8, 13, 18, 23, 28, 33, 38]``) and ``MllamaVisionConfig`` (defaults: ``image_size`` 448, ``patch_size``
14, ``max_num_tiles`` 4). Both attention kinds use ``head_dim = hidden_size / num_attention_heads`` and
``num_key_value_heads`` KV heads (``MllamaTextSelfAttention``, ``MllamaTextCrossAttention``).

The layers listed in ``cross_attention_layers`` are kind ``cross``: they cache K and V of the image's vision
states, not of the text tokens, once per request whatever its length. Their token count is transformers' own
(``MllamaForConditionalGeneration._prepare_static_cache``): ``num_images × max_num_tiles ×
((image_size // patch_size)² + 1)`` (6,404 per image for Llama 3.2 11B/90B Vision: 4 × (40² + 1)); kvplan
plans one image per request. The engine rule for such a cache is vLLM 0.33's ``CrossAttentionSpec``
(``v1/kv_cache_interface.py``; ``v1/core/kv_cache_coordinator.py`` allocates ``cdiv(num_encoder_tokens,
block_size)`` blocks per request once), see :func:`kvplan.calc.layer_cross_bytes`. vLLM 0.33 itself no longer
serves ``MllamaForConditionalGeneration`` (``_PREVIOUSLY_SUPPORTED_MODELS``: last 0.10.2).
"""

from __future__ import annotations

from kvplan.readers.base import HFConfig, attention_dims

_VISION_DEFAULTS = {"image_size": 448, "patch_size": 14, "max_num_tiles": 4}


def image_tokens(cfg: HFConfig) -> int:
    """Vision tokens one image contributes to every cross-attention layer (transformers' rule above).

    Raises:
        SpecError: a vision_config that is not an object, or a non-integer size.
    """
    vision = cfg.outer.get("vision_config") or {}
    if not isinstance(vision, dict):
        raise cfg.error("vision_config must be an object")
    got = {}
    for key, default in _VISION_DEFAULTS.items():
        value = vision.get(key, default)
        got[key] = cfg.check_int(f"vision_config.{key}", value)
    return got["max_num_tiles"] * ((got["image_size"] // got["patch_size"]) ** 2 + 1)


def read_mllama(cfg: HFConfig) -> dict:
    """A Llama 3.2 Vision spec mapping: ``full`` self-attention layers and ``cross`` layers.

    Raises:
        SpecError: a cross-attention layer index outside the layers, or a bad dimension.
    """
    data = attention_dims(cfg, {"layers": 40, "heads": 32, "kv_heads": 8, "hidden": 4096}, head_dim_default=None)
    n = data["num_layers"]
    cross = cfg.list("cross_attention_layers")
    cross = [3, 8, 13, 18, 23, 28, 33, 38] if cross is None else cross
    for i in cross:
        if isinstance(i, bool) or not isinstance(i, int) or not 0 <= i < n:
            raise cfg.error(f"cross_attention_layers has {i!r}; allowed: 0..{n - 1}")
    tokens = image_tokens(cfg)
    data["dtype"] = cfg.dtype()
    data["max_model_len"] = cfg.int("max_position_embeddings", 131072)
    data["layers"] = ["cross" if i in cross else "full" for i in range(n)]
    data["cross_attention"] = {"encoder_tokens": tokens}
    if not cfg.outer.get("architectures"):  # the class transformers builds for it; engines refuse by it (vLLM 0.33)
        data["architecture"] = "MllamaForConditionalGeneration"
    data["multimodal"] = {"image_tokens_per_image": tokens, "images_per_request": 1}
    data["notes"] = (
        f"{len(set(cross))} cross-attention layers cache {tokens:,} image tokens per request (one image: "
        "max_num_tiles x ((image_size // patch_size)^2 + 1)), once, whatever the text length; vLLM 0.33 no longer "
        "serves Mllama (last 0.10.2)"
    )
    return data


READERS = {"mllama": read_mllama, "mllama_text_model": read_mllama}
