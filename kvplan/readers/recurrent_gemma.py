"""RecurrentGemma (Griffin, arXiv:2402.19427): RG-LRU recurrent blocks and local-attention blocks.

Mirrors transformers 5.23's ``RecurrentGemmaConfig`` (``models/recurrent_gemma/configuration_recurrent_gemma.py``)
with its defaults for absent keys: 26 layers, hidden_size 2560, 10 attention heads, ``num_key_value_heads``
absent or null = the attention heads, ``lru_width`` absent or null = hidden_size, ``conv1d_width`` 4,
``attention_window_size`` (alias ``sliding_window``) 2048, ``block_types`` ``(recurrent, recurrent, attention)``
repeated over the layers (``layers_block_type``: ``(block_types × 100)[:num_hidden_layers]``).
``__post_init__`` sets ``head_dim = hidden_size // num_attention_heads`` whatever the file says.

What each block keeps per request (transformers ``modeling_recurrent_gemma.py``, the oracle; no engine kvplan
models serves RecurrentGemma: vLLM has never registered ``RecurrentGemmaForCausalLM`` (0.5.5–0.33.0
``model_executor/models/registry.py``), nor does SGLang 0.5.23 or llama.cpp):

- an attention block (``RecurrentGemmaAttention``): K and V of ``num_key_value_heads × head_dim`` for the last
  ``attention_window_size`` tokens (its cache layer is a sliding-window layer): kind ``sliding``;
- a recurrent block (``RecurrentGemmaRecurrentBlock``): ``conv1d_state`` ``(B, lru_width, conv1d_width − 1)`` in
  the model dtype and ``rg_lru.recurrent_states`` ``(B, lru_width)`` in float32 ("recurrent_states always
  computed in full precision"): kind ``rglru`` (:class:`kvplan.specs.StateConfig`), held by the module, not by
  transformers' Cache object.

RecurrentGemmaConfig has no maximum length (local attention and a recurrent state have none); kvplan
assumes 2048 tokens, as vLLM does for a config without one (``config/model.py _get_and_verify_max_len``),
unless the file sets ``max_position_embeddings``.

Files saved by transformers 4.x carry ``_block_types`` (the 4.x attribute); transformers 5.23 reads only
``block_types`` and ignores it, so a ``_block_types`` that disagrees with the layout 5.23 builds is refused.
"""

from __future__ import annotations

from kvplan.readers.base import HFConfig, max_len

_BLOCKS = {"recurrent": "rglru", "attention": "sliding"}
_DEFAULT_BLOCKS = ["recurrent", "recurrent", "attention"]


def _blocks(cfg: HFConfig, key: str) -> list | None:
    value = cfg.get(key)
    if value is None:
        return None
    if not isinstance(value, list) or not value or any(b not in _BLOCKS for b in value):
        raise cfg.error(f"{key}={value!r} must be a non-empty list of 'recurrent' / 'attention'")
    return value


def read_recurrent_gemma(cfg: HFConfig) -> dict:
    """RecurrentGemma: RG-LRU layers (kind ``rglru``) and local-attention layers (kind ``sliding``).

    Raises:
        SpecError: a bad dimension, hidden_size not a multiple of the heads, a ``head_dim`` key unlike
            hidden_size / heads (transformers recomputes it), ``block_types`` that is not a list of
            ``recurrent`` / ``attention``, or a ``_block_types`` unlike the layout transformers 5.23 builds.
    """
    n = cfg.int("num_hidden_layers", 26)
    hidden = cfg.int("hidden_size", 2560)
    heads = cfg.int("num_attention_heads", 10)
    kv = cfg.int("num_key_value_heads", heads)
    if hidden % heads:
        raise cfg.error(f"hidden_size={hidden} is not a multiple of num_attention_heads={heads}")
    head_dim = hidden // heads
    if cfg.has("head_dim") and cfg.int("head_dim") != head_dim:
        raise cfg.error(
            f"head_dim={cfg.int('head_dim')} but hidden_size / num_attention_heads = {head_dim}: transformers' "
            "RecurrentGemmaConfig recomputes it; kvplan will not guess which the checkpoint uses"
        )
    if kv > heads or heads % kv:
        raise cfg.error(f"num_key_value_heads={kv} must divide num_attention_heads={heads}")
    blocks = _blocks(cfg, "block_types") or _DEFAULT_BLOCKS
    kinds = [_BLOCKS[b] for b in (blocks * 100)[:n]]
    legacy = _blocks(cfg, "_block_types")
    if legacy is not None and [_BLOCKS[b] for b in (legacy * 100)[:n]] != kinds:
        raise cfg.error(
            f"_block_types={legacy} (transformers 4.x) differs from block_types={blocks}, which transformers 5.23 "
            "reads; kvplan will not guess the layout"
        )
    window = cfg.first_int("attention_window_size", "sliding_window", default=2048)
    lru_width = cfg.int("lru_width", hidden)
    d_conv = cfg.int("conv1d_width", 4, minimum=2)
    n_rec = kinds.count("rglru")
    return {
        "num_layers": n,
        "num_q_heads": heads,
        "num_kv_heads": kv,
        "head_dim": head_dim,
        "hidden_size": hidden,
        "dtype": cfg.dtype(),
        "max_model_len": max_len(cfg, 2048),
        "sliding_window": window,
        "layers": kinds,
        "rglru": {"d_inner": lru_width, "d_conv": d_conv},
        "notes": (
            f"{n_rec} RG-LRU layers (lru_width {lru_width}, conv {d_conv}: a fixed state per request, the recurrent "
            f"part in fp32) and {n - n_rec} local-attention layers (window {window}); shapes as transformers 5.23 "
            "keeps them (no engine serves RecurrentGemma); no maximum length in the config (2048 assumed)"
        ),
    }


READERS = {"recurrent_gemma": read_recurrent_gemma}
