"""Cohere 2 (Command R7B, Command A): three sliding-window layers, then one full layer, repeating.

Mirrors transformers 5.23's ``Cohere2Config`` with its defaults for absent keys: 40 layers, 64 query heads,
KV heads = query heads when ``num_key_value_heads`` is absent or null, hidden_size 8192,
``max_position_embeddings`` 8192, ``sliding_window`` 4096. ``head_dim`` absent is hidden_size / heads
(``Cohere2Config.__post_init__``; a ``head_dim`` in config.json is set after it and wins), and vLLM 0.33's
``model_executor/models/commandr.py`` reads that attribute. ``layer_types`` absent is
``sliding_attention`` where ``(i + 1) % sliding_window_pattern`` (default 4), else ``full_attention``;
``sliding_window_pattern`` is only read then. The original release's ``order_of_interleaved_layers``
(``local_attn_first``) is what that rule builds; another value is refused.

vLLM (``commandr.py``, ``Cohere2ForCausalLM``) gives ``sliding_attention`` layers a window of
``sliding_window + 1`` tokens (Cohere's sliding layers see ``[pos - sliding_window, pos]``), one token more
than transformers' mask and ``StaticSlidingWindowLayer`` (``sliding_window`` tokens, the current one
included). kvplan's spec keeps config.json's ``sliding_window``, as transformers caches it: against vLLM a
sliding layer is one token short once a request is longer than the window.
"""

from __future__ import annotations

from kvplan.readers.base import HFConfig
from kvplan.readers.gemma import check_ignored_pattern, pattern_kinds, window

_TYPES = {"full_attention": "full", "sliding_attention": "sliding"}


def read_cohere2(cfg: HFConfig) -> dict:
    """A Cohere 2 spec mapping (see the module docstring).

    Raises:
        SpecError: no head_dim and hidden_size not a multiple of the heads, sliding layers with a null window, an
            ``order_of_interleaved_layers`` other than ``local_attn_first``, or a ``sliding_window_pattern``
            that disagrees with ``layer_types``.
    """
    num_layers = cfg.int("num_hidden_layers", 40)
    heads = cfg.int("num_attention_heads", 64)
    hidden = cfg.int("hidden_size", 8192)
    if cfg.has("head_dim"):
        head_dim = cfg.int("head_dim")
    elif hidden % heads:
        raise cfg.error(f"hidden_size={hidden} is not a multiple of num_attention_heads={heads}")
    else:
        head_dim = hidden // heads
    data = {
        "num_layers": num_layers,
        "num_q_heads": heads,
        "num_kv_heads": cfg.int("num_key_value_heads", heads),
        "head_dim": head_dim,
        "hidden_size": hidden,
        "dtype": cfg.dtype(),
        "max_model_len": cfg.int("max_position_embeddings", 8192),
    }
    order = cfg.get("order_of_interleaved_layers", "local_attn_first")
    if order != "local_attn_first":
        raise cfg.error(
            f"order_of_interleaved_layers={order!r}: Cohere2Config always puts the sliding layers first "
            "(local_attn_first); kvplan will not guess another order"
        )
    kinds = cfg.layer_types(num_layers, _TYPES)
    if kinds is None:
        kinds = pattern_kinds(num_layers, cfg.int("sliding_window_pattern", 4))
    else:
        check_ignored_pattern(cfg, kinds, "Cohere2Config with layer_types")
    win = window(cfg, 4096)
    if "sliding" in kinds:
        if win is None:
            raise cfg.error("sliding_window is null but layer_types has sliding_attention layers")
        data["sliding_window"] = win
    data["layers"] = kinds
    cfg.ignore("use_embedding_sharing", "position_embedding_type", "rotary_pct", "use_gated_activation")
    return data


READERS = {"cohere2": read_cohere2}
