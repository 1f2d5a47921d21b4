"""Parameter counts of multimodal wrappers from config.json: the text model, the vision tower and the projector.

A wrapper (``*ForConditionalGeneration``) holds its text model (counted by :mod:`kvplan.readers.params`, the
recipe of its text model_type), an lm_head (tied or not by the wrapper's rule below), a vision tower and a
projector into the text model's width. Each tower and projector mirrors the modules transformers 5.23 builds,
and every count is checked against ``sum(p.numel() for p in model.parameters())`` of the wrapper built on the
meta device (tests/test_params.py):

==============  ==========================  =============================================================
wrapper         vision tower                projector
==============  ==========================  =============================================================
gemma3          SigLIP (``SiglipVisionModel``: conv patch embedding with bias, learned positions,
                pre-norm layers with biased q/k/v/o and fc1/fc2, post LayerNorm, the attention-pooling head
                when ``vision_use_head``)      ``Gemma3MultiModalProjector``: a vision × text matrix and an
                                            RMSNorm over the vision width
llava           CLIP (``CLIPVisionModel``: class embedding, conv patch embedding without bias, learned
                positions incl. the class token, pre and post LayerNorm), SigLIP or Pixtral, by
                ``vision_config.model_type``    ``LlavaMultiModalProjector``: two linears (vision × layers ->
                                            text, text -> text), biased by ``multimodal_projector_bias``
mistral3        Pixtral (``PixtralVisionModel``: conv patch embedding without bias, RMSNorms, unbiased
                attention and gated MLP)       ``Mistral3MultiModalProjector``: RMSNorm, the patch merger
                                            (vision·s² -> vision), two linears
qwen2_5_vl      ``Qwen2_5_VisionTransformerPretrainedModel``: Conv3d patch embedding without bias, RMSNorm
                blocks with biased qkv / proj and a biased gated MLP, the patch merger (RMSNorm, two biased
                linears of ``hidden × spatial_merge_size²``)
qwen3_vl        ``Qwen3VLVisionModel``: Conv3d patch embedding with bias, learned positions, LayerNorm blocks
                with biased qkv / proj and fc1 / fc2, the merger and one post-shuffle-normed merger per
                ``deepstack_visual_indexes`` entry
==============  ==========================  =============================================================

Absent vision keys take the wrapper class's own vision defaults when config.json has no ``vision_config``
(``LlavaConfig``: CLIP 1024 wide, 24 layers, 336 px, patch 14), and the vision config class's defaults when it
has one (``CLIPVisionConfig``: 768 wide, 12 layers), as transformers does. The lm_head is tied when the
wrapper config's ``tie_word_embeddings`` is true; absent, each class decides (:data:`WRAPPERS` ``tie``: Gemma 3
and Mistral 3 default true; LLaVA and Qwen2.5-VL take the text config's; Qwen3-VL false).

Not counted (``param_count`` stays None, ``kvplan fit`` asks for ``--weights-gib``): other wrappers, a vision
model_type not listed, a MoE text model (Qwen3-VL-MoE), and any value that is not a plain count.
"""

from __future__ import annotations

from typing import Any

# vision model_type -> (recipe, the vision config class's defaults)
_SIGLIP = {"hidden_size": 768, "intermediate_size": 3072, "num_hidden_layers": 12, "num_channels": 3,
           "image_size": 224, "patch_size": 16, "vision_use_head": True}  # fmt: skip
_CLIP = {"hidden_size": 768, "intermediate_size": 3072, "num_hidden_layers": 12, "num_channels": 3,
         "image_size": 224, "patch_size": 32}  # fmt: skip
_PIXTRAL = {"hidden_size": 1024, "intermediate_size": 4096, "num_hidden_layers": 24, "num_channels": 3,
            "patch_size": 16}  # fmt: skip
_QWEN2_5 = {"hidden_size": 3584, "intermediate_size": 3420, "depth": 32, "in_channels": 3, "patch_size": 14,
            "temporal_patch_size": 2, "spatial_merge_size": 2, "out_hidden_size": 3584}  # fmt: skip
_QWEN3 = {"hidden_size": 1152, "intermediate_size": 4304, "depth": 27, "in_channels": 3, "patch_size": 16,
          "temporal_patch_size": 2, "spatial_merge_size": 2, "out_hidden_size": 3584,
          "num_position_embeddings": 2304, "deepstack_visual_indexes": [8, 16, 24]}  # fmt: skip
VISION_DEFAULTS: dict[str, dict[str, Any]] = {
    "siglip_vision_model": _SIGLIP,
    "clip_vision_model": _CLIP,
    "pixtral": _PIXTRAL,
    "qwen2_5_vl": _QWEN2_5,
    "qwen2_5_vl_vision": _QWEN2_5,
    "qwen3_vl": _QWEN3,
    "qwen3_vl_vision": _QWEN3,
}

# wrapper model_type -> its vision model_type by default, the vision defaults it sets when config.json has no
# vision_config, the text model_types its recipe counts, and the lm_head tie rule for an absent top-level key
# (True / False: the class default; "text": the text config's, else the text class's default)
WRAPPERS: dict[str, dict[str, Any]] = {
    "gemma3": {"vision": "siglip_vision_model", "absent": _SIGLIP, "text": ("gemma3_text",), "tie": True},
    "llava": {
        "vision": "clip_vision_model",
        "absent": {
            **_CLIP,
            "hidden_size": 1024,
            "intermediate_size": 4096,
            "num_hidden_layers": 24,
            "image_size": 336,
            "patch_size": 14,
        },  # fmt: skip
        "text": ("llama", "mistral", "qwen2"),
        "tie": "text",
    },
    "mistral3": {"vision": "pixtral", "absent": {**_PIXTRAL, "patch_size": 14}, "text": ("mistral",), "tie": True},
    "qwen2_5_vl": {"vision": "qwen2_5_vl_vision", "absent": _QWEN2_5, "text": ("qwen2_5_vl_text",), "tie": "text"},
    "qwen3_vl": {"vision": "qwen3_vl_vision", "absent": _QWEN3, "text": ("qwen3_vl_text",), "tie": False},
}


class Unknown(Exception):
    """A value the count needs is missing or not a plain count."""


def _int(block: dict, defaults: dict, key: str, minimum: int = 1) -> int:
    value = block.get(key)
    if value is None:
        value = defaults.get(key)
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise Unknown(key)
    return value


def _flag(block: dict, defaults: dict, key: str) -> bool:
    value = block.get(key, defaults.get(key))
    if not isinstance(value, bool):
        raise Unknown(key)
    return value


def _linear(n_in: int, n_out: int, bias: bool = True) -> int:
    return n_in * n_out + (n_out if bias else 0)


def _siglip(v: dict, d: dict) -> int:
    """SiglipVisionModel (modeling_siglip.py)."""
    h, i = _int(v, d, "hidden_size"), _int(v, d, "intermediate_size")
    layers, c, p = _int(v, d, "num_hidden_layers"), _int(v, d, "num_channels"), _int(v, d, "patch_size")
    positions = (_int(v, d, "image_size") // p) ** 2
    mlp = _linear(h, i) + _linear(i, h)
    layer = 2 * 2 * h + 4 * _linear(h, h) + mlp  # layer_norm1/2, q/k/v/out_proj, fc1/fc2
    n = c * p * p * h + h + positions * h + layers * layer + 2 * h  # patch conv (bias), positions, post norm
    if _flag(v, d, "vision_use_head"):  # probe, MultiheadAttention (in_proj 3h, out_proj), LayerNorm, MLP
        n += h + _linear(h, 3 * h) + _linear(h, h) + 2 * h + mlp
    return n


def _clip(v: dict, d: dict) -> int:
    """CLIPVisionModel (modeling_clip.py)."""
    h, i = _int(v, d, "hidden_size"), _int(v, d, "intermediate_size")
    layers, c, p = _int(v, d, "num_hidden_layers"), _int(v, d, "num_channels"), _int(v, d, "patch_size")
    positions = (_int(v, d, "image_size") // p) ** 2 + 1  # + the class token
    layer = 2 * 2 * h + 4 * _linear(h, h) + _linear(h, i) + _linear(i, h)
    # class embedding, patch conv (no bias), positions, pre_layrnorm, layers, post_layernorm
    return h + c * p * p * h + positions * h + 2 * h + layers * layer + 2 * h


def _pixtral(v: dict, d: dict) -> int:
    """PixtralVisionModel (modeling_pixtral.py): RMSNorms, unbiased attention and gated MLP."""
    h, i = _int(v, d, "hidden_size"), _int(v, d, "intermediate_size")
    layers, c, p = _int(v, d, "num_hidden_layers"), _int(v, d, "num_channels"), _int(v, d, "patch_size")
    return c * p * p * h + h + layers * (2 * h + 4 * h * h + 3 * h * i)


def _qwen2_5_vision(v: dict, d: dict) -> int:
    """Qwen2_5_VisionTransformerPretrainedModel (modeling_qwen2_5_vl.py), its patch merger included."""
    h, i, depth = _int(v, d, "hidden_size"), _int(v, d, "intermediate_size"), _int(v, d, "depth")
    c, p, t = _int(v, d, "in_channels"), _int(v, d, "patch_size"), _int(v, d, "temporal_patch_size")
    s2 = _int(v, d, "spatial_merge_size") ** 2
    block = 2 * h + _linear(h, 3 * h) + _linear(h, h) + 2 * _linear(h, i) + _linear(i, h)  # norms, attn, gated MLP
    merger = h + _linear(h * s2, h * s2) + _linear(h * s2, _int(v, d, "out_hidden_size"))
    return c * t * p * p * h + depth * block + merger


def _qwen3_vision(v: dict, d: dict) -> int:
    """Qwen3VLVisionModel (modeling_qwen3_vl.py): the merger and the deepstack mergers included."""
    h, i, depth = _int(v, d, "hidden_size"), _int(v, d, "intermediate_size"), _int(v, d, "depth")
    c, p, t = _int(v, d, "in_channels"), _int(v, d, "patch_size"), _int(v, d, "temporal_patch_size")
    s2 = _int(v, d, "spatial_merge_size") ** 2
    deepstack = v.get("deepstack_visual_indexes", d["deepstack_visual_indexes"])
    if not isinstance(deepstack, list):
        raise Unknown("deepstack_visual_indexes")
    block = 2 * 2 * h + _linear(h, 3 * h) + _linear(h, h) + _linear(h, i) + _linear(i, h)
    linears = _linear(h * s2, h * s2) + _linear(h * s2, _int(v, d, "out_hidden_size"))
    merger = 2 * h + linears  # LayerNorm over the vision width
    post_shuffle = 2 * h * s2 + linears  # LayerNorm over the merged width
    patch = c * t * p * p * h + h  # Conv3d with bias
    return patch + _int(v, d, "num_position_embeddings") * h + depth * block + merger + len(deepstack) * post_shuffle


_TOWERS = {
    "siglip_vision_model": _siglip,
    "clip_vision_model": _clip,
    "pixtral": _pixtral,
    "qwen2_5_vl": _qwen2_5_vision,
    "qwen2_5_vl_vision": _qwen2_5_vision,
    "qwen3_vl": _qwen3_vision,
    "qwen3_vl_vision": _qwen3_vision,
}


# the towers LlavaForConditionalGeneration is built with (CLIP; SigLIP; Pixtral: mistral-community/pixtral-12b)
_LLAVA_TOWERS = ("clip_vision_model", "siglip_vision_model", "pixtral")


def vision_params(config: dict, wrapper: str, text_hidden: int) -> int:
    """The vision tower and the projector of a wrapper's config.json (parameters).

    Raises:
        Unknown: a wrapper or vision model_type not counted, or a value that is not a plain count.
    """
    w = WRAPPERS.get(wrapper)
    if w is None:
        raise Unknown(wrapper)
    block = config.get("vision_config")
    if block is None:
        v, d, kind = {}, w["absent"], w["vision"]
    elif isinstance(block, dict):
        kind = block.get("model_type") or w["vision"]
        allowed = _LLAVA_TOWERS if wrapper == "llava" else (w["vision"],)
        if kind not in VISION_DEFAULTS or _TOWERS[kind] not in [_TOWERS[a] for a in allowed]:
            raise Unknown(f"vision_config.model_type {kind!r}")
        v, d = block, VISION_DEFAULTS[kind]
    else:
        raise Unknown("vision_config")
    tower = _TOWERS[kind](v, d)
    vh = _int(v, d, "hidden_size")
    if wrapper == "gemma3":  # mm_input_projection_weight (vision x text), mm_soft_emb_norm (vision)
        return tower + vh * text_hidden + vh
    if wrapper == "llava":
        layer = config.get("vision_feature_layer", -2)
        layers = len(layer) if isinstance(layer, list) else 1
        bias = config.get("multimodal_projector_bias", True)
        if not isinstance(bias, bool):
            raise Unknown("multimodal_projector_bias")
        return tower + _linear(vh * layers, text_hidden, bias) + _linear(text_hidden, text_hidden, bias)
    if wrapper == "mistral3":  # norm, patch_merger (vision * s^2 -> vision), linear_1, linear_2
        s2 = _int(config, {"spatial_merge_size": 2}, "spatial_merge_size") ** 2
        layer = config.get("vision_feature_layer", -1)
        layers = len(layer) if isinstance(layer, list) else 1
        bias = config.get("multimodal_projector_bias", False)
        if not isinstance(bias, bool):
            raise Unknown("multimodal_projector_bias")
        return (tower + vh + vh * s2 * vh + _linear(vh * layers, text_hidden, bias)
                + _linear(text_hidden, text_hidden, bias))  # fmt: skip
    return tower  # Qwen-VL: the merger is part of the tower


def lm_head_tied(config: dict, wrapper: str, text_raw: dict, text_default: bool) -> bool:
    """Whether the wrapper's lm_head shares the input embedding (see the module docstring).

    Raises:
        Unknown: a ``tie_word_embeddings`` that is not true or false.
    """
    value = config.get("tie_word_embeddings")
    if value is None:
        rule = WRAPPERS[wrapper]["tie"]
        value = rule if isinstance(rule, bool) else text_raw.get("tie_word_embeddings", text_default)
        if text_raw is config and rule == "text":  # a flat Qwen-VL file: the top level is the text config
            value = text_default
    if not isinstance(value, bool):
        raise Unknown("tie_word_embeddings")
    return value
