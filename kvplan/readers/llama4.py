"""Llama 4 (Scout, Maverick): iRoPE, chunked attention on RoPE layers and full attention on NoPE layers.

Mirrors transformers 5.23's ``Llama4TextConfig`` (the ``text_config`` of ``Llama4Config``) with its
defaults for absent keys: 48 layers, 40 query heads, 8 KV heads, ``head_dim`` 128 (null: hidden_size /
heads), hidden_size 5120, ``max_position_embeddings`` 131072 (4096 × 32), ``attention_chunk_size`` 8192.
``no_rope_layers`` holds one entry per layer, 1 for a RoPE layer and 0 for a NoPE layer; absent or empty,
it is ``int((i + 1) % no_rope_layer_interval != 0)`` with ``no_rope_layer_interval`` 4, so every 4th layer
(3, 7, ...) is NoPE. ``layer_types`` absent is ``chunked_attention`` on RoPE layers and
``full_attention`` on NoPE layers.

vLLM 0.33's ``model_executor/models/llama4.py`` reads ``no_rope_layers``, not ``layer_types``: a layer
uses ``ChunkedLocalAttention`` when it is a RoPE layer and ``attention_chunk_size`` is set, else plain
(full) attention. kvplan follows that: chunked where RoPE and a chunk size is set, full elsewhere (all
full when ``attention_chunk_size`` is null). A ``layer_types`` list that disagrees with it is refused.
"""

from __future__ import annotations

from kvplan.readers.base import HFConfig, attention_dims

_TYPES = {"full_attention": "full", "chunked_attention": "chunked"}


def read_llama4(cfg: HFConfig) -> dict:
    """A Llama 4 spec mapping (see the module docstring).

    Raises:
        SpecError: ``no_rope_layers`` shorter than the layers or not 0/1 values, or ``layer_types`` that
            disagrees with the RoPE/NoPE layout vLLM serves.
    """
    data = attention_dims(cfg, {"layers": 48, "heads": 40, "kv_heads": 8, "hidden": 5120, "head_dim": 128})
    num_layers = data["num_layers"]
    data.update(
        {
            "dtype": cfg.dtype(),
            "max_model_len": cfg.int("max_position_embeddings", 131072),
        }
    )
    rope = cfg.get("no_rope_layers")
    if rope:  # Llama4TextConfig: an empty list means the default
        if not isinstance(rope, list) or len(rope) < num_layers:
            raise cfg.error(f"no_rope_layers must list at least num_hidden_layers={num_layers} values of 0 or 1")
        for i, v in enumerate(rope[:num_layers]):
            if isinstance(v, bool) or v not in (0, 1):
                raise cfg.error(f"no_rope_layers[{i}]={v!r} must be 1 (RoPE layer) or 0 (NoPE layer)")
        rope = [bool(v) for v in rope[:num_layers]]
    else:
        interval = cfg.int("no_rope_layer_interval", 4)
        rope = [(i + 1) % interval != 0 for i in range(num_layers)]
    cfg.read.add("no_rope_layer_interval")
    chunk = cfg.int("attention_chunk_size", 8192 if "attention_chunk_size" not in cfg.raw else None)
    kinds = ["chunked" if r and chunk else "full" for r in rope]
    given = cfg.layer_types(num_layers, _TYPES)
    if given is not None and given != kinds:
        raise cfg.error(
            "layer_types disagrees with no_rope_layers / attention_chunk_size, which vLLM's llama4.py "
            "follows (chunked on RoPE layers, full on NoPE layers); kvplan will not guess"
        )
    if "chunked" in kinds:
        data["attention_chunk_size"] = chunk
    data["layers"] = kinds
    cfg.ignore("moe_layers", "interleave_moe_layer_step", "attn_temperature_tuning", "use_qk_norm")
    return data


READERS = {"llama4": read_llama4, "llama4_text": read_llama4}
