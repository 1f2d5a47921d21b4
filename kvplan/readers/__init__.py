"""Hugging Face config.json readers: one small reader per architecture family, registered by model_type.

Each family module holds ``READERS: dict[model_type, read]``; only the module of the config's model_type
is imported (``kvplan estimate llama3-8b`` imports none). A reader mirrors one transformers config class,
with that class's defaults for absent keys, and returns a spec mapping (see :mod:`kvplan.specs`).

A multimodal wrapper (``Qwen2_5_VLForConditionalGeneration``, ``LlavaForConditionalGeneration`` ...) is read
through the reader of its text model (:mod:`kvplan.readers.wrappers`), and the spec names both.

A model_type no reader matches is read by transformers itself when it is installed (the optional extra
``kvplan[transformers]``; :mod:`kvplan.readers.transformers_fallback`: its config class, then its cache's
per-layer shapes on the meta device, cached per config hash), labelled "read by transformers X.Y (no kvplan
reader)". Without transformers, and for encoder-only or non-causal configs, a layout key the reader does not
handle, or a likely misspelt key, the config is refused with one line: kvplan never guesses a layout.
"""

from __future__ import annotations

from typing import Any

from kvplan.errors import SpecError

# model_type -> module under kvplan.readers that reads it
REGISTRY: dict[str, str] = {
    # plain decoders: LlamaConfig-shaped
    "llama": "decoder",
    "mistral": "decoder",
    "mixtral": "decoder",
    "qwen2": "decoder",
    "qwen2_moe": "decoder",
    "qwen3": "decoder",
    "qwen3_moe": "decoder",
    "phi3": "decoder",
    "olmo2": "decoder",
    "olmo3": "decoder",
    "glm4": "decoder",
    "glm4_moe": "decoder",
    # plain decoders: other key defaults or window rules (decoder.py _DEFAULTS)
    "gemma": "decoder",
    "granite": "decoder",
    "granitemoe": "decoder",
    "granitemoeshared": "decoder",
    "granite_swa": "decoder",
    "granitemoe_swa": "decoder",
    "olmo": "decoder",
    "olmoe": "decoder",
    "phimoe": "decoder",
    "starcoder2": "decoder",
    "stablelm": "decoder",
    "cohere": "decoder",
    "internlm3": "decoder",
    "exaone4": "decoder",
    "smollm3": "decoder",
    "seed_oss": "decoder",
    "ministral3": "decoder",
    "ernie4_5": "decoder",
    "ernie4_5_moe": "decoder",
    "helium": "decoder",
    "apertus": "decoder",
    "arcee": "decoder",
    "phi": "decoder",
    "glm": "decoder",
    "vaultgemma": "decoder",
    "dots1": "decoder",
    "cwm": "decoder",
    "afmoe": "decoder",
    "exaone_moe": "decoder",
    "hyperclovax": "decoder",
    "hy_v3": "decoder",
    "jais2": "decoder",
    "flex_olmo": "decoder",
    "mellum": "decoder",
    "laguna": "decoder",
    "nanochat": "decoder",
    "solar_open": "decoder",
    "iquestcoder": "decoder",
    "hunyuan_v1_dense": "decoder",
    "nemotron": "decoder",
    "ministral": "decoder",
    "gpt-sw3": "legacy",
    "gpt_neox": "decoder",
    "persimmon": "decoder",
    "opt": "decoder",
    "gpt_bigcode": "legacy",
    "bloom": "legacy",
    # --- gemma / gpt_oss / llama4 / cohere2 family readers (gemma.py, gpt_oss.py, llama4.py, cohere2.py) ---
    "gemma2": "gemma",
    "gemma3": "gemma",
    "gemma3_text": "gemma",
    "gemma3n": "gemma",
    "gemma3n_text": "gemma",
    "gemma4": "gemma",
    "gemma4_text": "gemma",
    "gpt_oss": "gpt_oss",
    "llama4": "llama4",
    "llama4_text": "llama4",
    "cohere2": "cohere2",
    # --- end gemma section ---
    # --- text models of multimodal wrappers and 2025-2026 text types (issue 17) ---
    "qwen2_vl_text": "decoder",
    "qwen2_5_vl_text": "decoder",
    "qwen3_vl_text": "decoder",
    "qwen3_vl_moe_text": "decoder",
    "mimo_v2_flash": "decoder",
    "mllama_text_model": "mllama",
    "mllama": "mllama",
    "glm4_moe_lite": "deepseek",
    "glm_moe_dsa": "deepseek",
    "mamba": "hybrid",
    "openelm": "openelm",
    "deepseek_v4": "deepseek",
    "recurrent_gemma": "recurrent_gemma",
    # --- types transformers builds whose meta forward stops at a data-dependent op (the audit of issue 17) ---
    "mpt": "mosaic",
    "dbrx": "mosaic",
    "jetmoe": "decoder",
    "longcat_flash": "deepseek",
    # --- caches that are not K/V of the usual kinds (stateful.py): transformers' own shapes, no engine rule ---
    "rwkv": "stateful",
    "xlstm": "stateful",
    "zaya": "stateful",
    "inkling_text": "stateful",
    "inkling2_text": "stateful",
    "xlnet": "stateful",
    "cpmant": "stateful",
    "reformer": "stateful",
    # --- end issue 17 section ---
    # --- mla / hybrid / linear readers (deepseek.py, hybrid.py, linear.py) ---
    "deepseek_v2": "deepseek",
    "deepseek_v3": "deepseek",
    "kimi_k2": "deepseek",
    "deepseek_v32": "deepseek",
    "kimi_linear": "deepseek",
    "jamba": "hybrid",
    "nemotron_h": "hybrid",
    "granitemoehybrid": "hybrid",
    "bamba": "hybrid",
    "falcon_h1": "hybrid",
    "zamba2": "hybrid",
    "qwen3_next": "linear",
    "qwen3_5": "linear",
    "qwen3_5_text": "linear",
    "qwen3_5_moe": "linear",
    "qwen3_5_moe_text": "linear",
    "lfm2": "linear",
    "lfm2_moe": "linear",
    "minimax": "linear",
    "minimax_text_01": "linear",
    "minimax_m1": "linear",
    "minimax_m2": "linear",
    # --- end hybrid section ---
    # legacy names
    "gpt2": "legacy",
    "gptj": "legacy",
    "falcon": "legacy",
    "RefinedWeb": "legacy",
    "RefinedWebModel": "legacy",
}


def registered_model_types() -> list[str]:
    """Every model_type a reader is registered for, sorted."""
    return sorted(REGISTRY)


def no_reader_message(model_type: str, where: str) -> str:
    """The one-line refusal for a model_type no reader matches (with a did-you-mean when one is close)."""
    from kvplan.readers.base import SPEC_FORMAT_DOC, close_model_type

    close = close_model_type(model_type, REGISTRY) if model_type else None
    hint = f" (did you mean {close!r}?)" if close else ""
    what = f"model_type {model_type!r}" if model_type else "no model_type"
    return (
        f"{where}: {what}{hint}: kvplan has no reader for it and will not guess its layout; "
        f"pip install 'kvplan[transformers]' lets transformers read it, or write a spec YAML (see {SPEC_FORMAT_DOC})"
    )


def reader_for(model_type: str, where: str):
    """The read function for ``model_type`` (its module imported on first use).

    Raises:
        SpecError: no reader is registered (with a did-you-mean, and what to do instead).
    """
    import importlib

    module = REGISTRY.get(model_type)
    if module is None:
        from kvplan.readers.base import ENCODER_TYPES

        if model_type in ENCODER_TYPES:
            raise SpecError(f"{where}: model_type {model_type!r} is encoder-only: it keeps no KV cache to plan")
        raise SpecError(no_reader_message(model_type, where))
    return importlib.import_module(f"kvplan.readers.{module}").READERS[model_type]


def checkpoint_facts(config: dict, text: dict) -> dict:
    """Spec fields the engines' load-time checks read, from any config.json: ``moe_intermediate_size``
    (Qwen2/3-MoE, DeepSeek, GLM-4-MoE ...: one routed expert's width) and ``weight_block_size`` (a
    block-quantized checkpoint: ``quantization_config.weight_block_size``, e.g. ``[128, 128]``). Values of
    the wrong type are left out (the spec then has no such fact), never guessed."""
    out: dict = {}
    width = text.get("moe_intermediate_size")
    if isinstance(width, int) and not isinstance(width, bool) and width > 0:
        out["moe_intermediate_size"] = width
    quant = config.get("quantization_config") or text.get("quantization_config")
    block = quant.get("weight_block_size") if isinstance(quant, dict) else None
    if isinstance(block, list) and len(block) == 2 and all(isinstance(b, int) and b > 0 for b in block):
        out["weight_block_size"] = list(block)
    return out


def spec_from_hf_config(config: Any, where: str, name: str | None = None):
    """Build a :class:`~kvplan.specs.ModelSpec` from a parsed Hugging Face ``config.json``.

    ``param_count`` is counted from the config's shapes for the families :mod:`kvplan.readers.params`
    knows (exact against transformers' model), else left None.

    Raises:
        SpecError: not a JSON object, an unknown or encoder-only model_type, a non-causal config, a missing
            or inconsistent value, a layout key the reader does not handle, or a likely misspelt key (the
            message names the file and key).
    """
    import json
    from pathlib import Path

    from kvplan.readers.base import ENCODER_TYPES, ENCODER_UNLESS, NO_CACHE_TYPES, HFConfig, is_encoder
    from kvplan.readers.wrappers import encoder_facts, text_model_type
    from kvplan.specs import build_spec

    if not isinstance(config, dict):
        raise SpecError(f"{where}: a config.json must hold a JSON object")
    text_config = config.get("text_config")
    for key, value in (
        ("model_type", config.get("model_type")),
        ("text_config.model_type", text_config.get("model_type") if isinstance(text_config, dict) else None),
    ):
        if value is not None and not isinstance(value, str):
            from kvplan.textio import clip

            shown = clip(json.dumps(value), 60)
            raise SpecError(f'{where}: {key}={shown} must be a string (a model type, e.g. "llama")')
    cfg = HFConfig(config, where)
    wrapper, text_type = text_model_type(config)
    if text_type:
        cfg.model_type = text_type
    for key in ("is_encoder_decoder",):
        if (cfg.raw.get(key) is True or config.get(key) is True) and cfg.model_type not in REGISTRY:
            raise SpecError(f"{where}: {key} is true: kvplan plans decoder-only (causal) models")
    for kind in (cfg.model_type, config.get("model_type")):  # a drafter wraps a text config kvplan reads
        if kind in NO_CACHE_TYPES:
            raise SpecError(f"{where}: model_type {kind!r} keeps no KV cache to plan: {NO_CACHE_TYPES[kind]}")
    if cfg.model_type in ENCODER_UNLESS and is_encoder(cfg.model_type, cfg.raw):
        key, value = ENCODER_UNLESS[cfg.model_type]
        raise SpecError(
            f"{where}: model_type {cfg.model_type!r} with {key} "
            f"{json.dumps(cfg.raw[key]) if key in cfg.raw else 'absent'} is encoder-only "
            f"(bidirectional, its config class's default): it keeps no KV cache to plan; a decoder sets "
            f"{key}: {json.dumps(value)}"
        )
    if cfg.model_type not in REGISTRY and cfg.model_type not in ENCODER_TYPES and cfg.model_type:
        from kvplan.readers.transformers_fallback import spec_from_transformers

        refusal = no_reader_message(cfg.model_type, where)
        return spec_from_transformers(config, where, name, refusal, tuple(REGISTRY))
    read = reader_for(cfg.model_type, where)
    for key in ("is_encoder_decoder",):
        if cfg.raw.get(key) is True or config.get(key) is True:
            raise SpecError(f"{where}: {key} is true: kvplan plans decoder-only (causal) models")
    if cfg.raw.get("is_causal") is False or cfg.raw.get("use_bidirectional_attention") is True:
        raise SpecError(f"{where}: the config is not causal (is_causal/use_bidirectional_attention): no KV cache")
    cfg.ignore("is_causal", "use_bidirectional_attention", "is_encoder_decoder")
    from kvplan.readers.base import LAYER_COUNT_KEYS

    for key in LAYER_COUNT_KEYS:  # bounded before any reader builds a per-layer list or asks for other keys
        if cfg.raw.get(key) is not None:
            cfg.check_int(key, cfg.raw[key], 0)
    data = read(cfg)
    cfg.check_unhandled()
    if "param_count" not in data:
        from kvplan.readers.params import with_param_count, with_wrapper_param_count

        if wrapper:  # the text model plus the vision tower and projector, where counted exactly
            data = with_wrapper_param_count(data, config, wrapper, cfg.raw, cfg.model_type)
        else:
            data = with_param_count(data, cfg.raw, cfg.model_type)
    reader = f"kvplan {REGISTRY[cfg.model_type]} reader for {cfg.model_type}"
    if wrapper:
        archs = config.get("architectures")
        arch = archs[0] if isinstance(archs, list) and archs and isinstance(archs[0], str) else wrapper
        reader += f", the text model of {arch} ({wrapper})"
        data["multimodal"] = {**encoder_facts(config, wrapper, cfg.model_type), **data.get("multimodal", {})}
    data.setdefault("reader", reader)
    data.update(checkpoint_facts(config, cfg.raw))
    if not name:  # the file's stem (my-model.json), its folder for a config.json, else the config's own name
        p = Path(where)
        name = p.stem if p.name != "config.json" else p.parent.name
        name = name or str(cfg.raw.get("_name_or_path") or config.get("_name_or_path") or "model")
    archs = config.get("architectures")
    if isinstance(archs, list) and archs and isinstance(archs[0], str) and archs[0].isidentifier():
        data.setdefault("architecture", archs[0])
    data = {"name": name, "source": where, **data}
    return build_spec(data, where)
