"""Multimodal and other wrapper configs: which text model a ``*ForConditionalGeneration`` config holds.

A wrapper's config.json (Qwen-VL, Gemma 3/4, Mistral 3 / Pixtral, LLaVA, InternVL, Idefics, Kimi-VL, GLM-4.xV,
Llama 4, ...) keeps its decoder in ``text_config``; transformers reads that with the class its
``text_config.model_type`` names, or, when the file gives none, with the wrapper class's default text config
(``sub_configs_defaults["text_config"]``). kvplan does the same: the decoder is read by the reader of that
text model_type, and the spec names both (``reader``: "kvplan decoder reader for qwen2_5_vl_text, the text
model of Qwen2_5_VLForConditionalGeneration (qwen2_5_vl)").

:data:`WRAPPER_TEXT_TYPES` is transformers 5.23's table (each wrapper config class's default text
model_type, read from ``CONFIG_MAPPING[wrapper]().get_text_config(decoder=True).model_type``; contrastive
encoders such as CLIP left out). :data:`FLAT_WRAPPERS` are the wrappers whose older files keep the text keys
at the top level (``Qwen2VLConfig`` / ``Qwen2_5_VLConfig.__post_init__``: "Hub configs are saved as flat
dicts"): there the whole file is the text config. :data:`TEXT_TYPE_RENAMES` are text model_types a wrapper
class rewrites before reading (``Exaone4_5_Config.__post_init__``: ``exaone4_5_text`` -> ``exaone4``).

The encoder's own memory (weights, the image-token activations, the encoder cache) is not a KV cache; the
facts a budget needs are collected by :func:`encoder_facts` into ``spec.multimodal``.
"""

from __future__ import annotations

from typing import Any

# wrapper model_type -> its config class's default text model_type (transformers 5.23)
WRAPPER_TEXT_TYPES: dict[str, str] = {
    "aria": "aria_text",
    "audioflamingo3": "qwen2",
    "aya_vision": "cohere2",
    "blip": "blip_text_model",
    "blip-2": "opt",
    "clvp": "clvp_encoder",
    "cohere2_vision": "cohere2",
    "cohere_compass": "cohere_compass_text",
    "cosmos3_edge": "cosmos3_edge_text",
    "cosmos3_omni": "qwen3_vl_text",
    "deepseek_ocr2": "deepseek_ocr2_text",
    "deepseek_vl": "llama",
    "deepseek_vl_hybrid": "llama",
    "diffusion_gemma": "diffusion_gemma_text",
    "dots3_note": "dots3_note_text",
    "embedding_gemma2": "embedding_gemma2_text",
    "emu3": "emu3_text_model",
    "ernie4_5_vl_moe": "ernie4_5_vl_moe_text",
    "exaone4_5": "exaone4",
    "fast_vlm": "qwen2",
    "florence2": "bart",
    "fun_asr_nano": "qwen3",
    "fuyu": "persimmon",
    "gemma3": "gemma3_text",
    "gemma3n": "gemma3n_text",
    "gemma4": "gemma4_text",
    "gemma4_assistant": "gemma4_text",
    "gemma4_unified": "gemma4_unified_text",
    "gemma4_unified_assistant": "gemma4_unified_text",
    "glm46v": "glm4v_text",
    "glm4v": "glm4v_text",
    "glm4v_moe": "glm4v_moe_text",
    "glm5_next": "glm5_next_text",
    "glm_image": "glm_image_text",
    "glm_ocr": "glm_ocr_text",
    "glmasr": "llama",
    "glmga": "glm4v_text",
    "got_ocr2": "qwen2",
    "granite4_vision": "granite4_vision_text",
    "granite_docling": "granite_docling_text",
    "granite_speech": "granite",
    "granite_speech_plus": "granite",
    "hunyuan_vl": "hunyuan_vl_text",
    "hyperclovax_vision_v2": "hyperclovax",
    "idefics2": "mistral",
    "idefics3": "llama",
    "inkling2": "inkling2_text",
    "inkling_mm_model": "inkling_text",
    "instructblip": "opt",
    "instructblipvideo": "opt",
    "internvl": "qwen2",
    "janus": "llama",
    "jev": "qwen3_5_text",
    "kimi_k25": "deepseek_v3",
    "kosmos-2": "kosmos_2_text_model",
    "kosmos-2.5": "kosmos_2_5_text_model",
    "lfm2_vl": "lfm2",
    "lfm3_vl": "lfm3",
    "lighton_ocr": "qwen3",
    "llama4": "llama4_text",
    "llava": "llama",
    "llava_next": "llama",
    "llava_next_video": "llama",
    "llava_onevision": "qwen2",
    "minicpm_ocr": "qwen3_5_text",
    "minicpmv4_6": "qwen3_5_text",
    "minicpmv4_7": "qwen3_5_text",
    "minimax_m3_vl": "minimax_m3_vl_text",
    "mistral3": "mistral",
    "mistral_large4": "mistral_large4_text",
    "mllama": "mllama_text_model",
    "molmo2": "molmo2_text",
    "moss_transcribe_diarize": "qwen3",
    "muse_glimmer": "muse_glimmer_text",
    "muse_spark": "muse_spark_text",
    "musicflamingo": "qwen2",
    "nemo_speechlm": "nemotron_h",
    "nemotron_h_omni": "nemotron_h",
    "ovis2": "qwen2",
    "paddleocr_vl": "paddleocr_vl_text",
    "paligemma": "gemma",
    "perception_lm": "llama",
    "pix2struct": "pix2struct_text_model",
    "pp_chart2table": "qwen2",
    "pp_formulanet": "pp_formulanet_text",
    "qianfan_ocr": "qwen3",
    "qwen2_5_omni_thinker": "qwen2_5_omni_text",
    "qwen2_5_vl": "qwen2_5_vl_text",
    "qwen2_audio": "qwen2",
    "qwen2_vl": "qwen2_vl_text",
    "qwen3_5": "qwen3_5_text",
    "qwen3_5_moe": "qwen3_5_moe_text",
    "qwen3_asr": "qwen3",
    "qwen3_omni_moe_thinker": "qwen3_omni_moe_text",
    "qwen3_vl": "qwen3_vl_text",
    "qwen3_vl_moe": "qwen3_vl_moe_text",
    "qwen4_exp": "qwen4_exp_text",
    "shieldgemma2": "gemma3_text",
    "smolvlm": "llama",
    "step3p7": "step3p5",
    "unlimited_ocr": "unlimited_ocr_text",
    "vibevoice": "qwen2",
    "vibevoice_asr": "qwen2",
    "video_llama_3": "qwen2",
    "video_llava": "llama",
    "vipllava": "llama",
    "voxtral": "llama",
    "voxtral_realtime": "voxtral_realtime_text",
}

FLAT_WRAPPERS = ("qwen2_vl", "qwen2_5_vl")
TEXT_TYPE_RENAMES = {"exaone4_5_text": "exaone4"}

# vision_config keys reported in spec.multimodal (the encoder's size and patching), when the file sets them
_VISION_KEYS = (
    "model_type",
    "depth",
    "num_hidden_layers",
    "hidden_size",
    "intermediate_size",
    "num_heads",
    "num_attention_heads",
    "attention_heads",
    "patch_size",
    "image_size",
    "spatial_merge_size",
    "temporal_patch_size",
    "max_num_tiles",
    "out_hidden_size",
)


def text_model_type(config: dict) -> tuple[str | None, str | None]:
    """(wrapper model_type, text model_type) of a config.json; (None, None) when it is not a known wrapper.

    The text model_type is ``text_config.model_type`` (renamed as the wrapper class renames it), else the
    wrapper's default; for a flat Qwen-VL file (no ``text_config``) the wrapper's default text type.
    """
    outer = config.get("model_type")
    if not isinstance(outer, str) or outer not in WRAPPER_TEXT_TYPES:
        return None, None
    text = config.get("text_config")
    if text is None and outer not in FLAT_WRAPPERS:
        return None, None
    named = text.get("model_type") if isinstance(text, dict) else None
    if not isinstance(named, str) or not named:
        named = WRAPPER_TEXT_TYPES[outer]
    return outer, TEXT_TYPE_RENAMES.get(named, named)


def encoder_facts(config: dict, wrapper: str, text_type: str) -> dict[str, Any]:
    """What the engine's memory budget needs about a wrapper's encoder, from config.json alone.

    Keys: ``wrapper``, ``text_model_type``, ``vision_<key>`` for :data:`_VISION_KEYS` the file sets,
    ``mm_tokens_per_image`` (Gemma 3: a fixed count) when set, and ``processor_limits``: where the per-image
    token limits live when config.json does not fix them (the processor's ``preprocessor_config.json``:
    ``max_pixels`` / ``min_pixels`` for Qwen-VL, ``max_image_tiles`` for Mllama); kvplan does not read it.
    """
    out: dict[str, Any] = {"wrapper": wrapper, "text_model_type": text_type}
    vision = config.get("vision_config")
    if isinstance(vision, dict):
        for key in _VISION_KEYS:
            value = vision.get(key)
            if isinstance(value, (bool, int, str)):
                out[f"vision_{key}"] = value
    for key in ("mm_tokens_per_image", "image_seq_length", "image_token_id", "image_token_index"):
        value = config.get(key)
        if isinstance(value, int) and not isinstance(value, bool):
            out[key] = value
    out["processor_limits"] = "preprocessor_config.json (image size / max_pixels / tiles); not read by kvplan"
    return out
