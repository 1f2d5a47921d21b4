"""Legacy decoders with their own key names: GPT-2, GPT-J and Falcon (MHA / MQA, every layer full).

Mirrors transformers' GPT2Config (``n_layer``, ``n_head``, ``n_embd``, ``n_positions`` = 1024), GPTJConfig
(the same names, ``n_positions`` = 2048) and FalconConfig (``num_hidden_layers``/``n_layer``,
``num_attention_heads``/``n_head``, ``multi_query`` (default true), ``new_decoder_architecture`` with
``num_kv_heads``, ``max_position_embeddings`` = 2048); checked against vLLM 0.33's ``gpt2.py``, ``gpt_j.py``
and ``falcon.py`` (``total_num_kv_heads``: num_kv_heads with the new architecture, 1 with multi_query,
else num_heads).
"""

from __future__ import annotations

from kvplan.readers.base import HFConfig


def _gpt(cfg: HFConfig, default_positions: int, layers: int, heads: int, hidden: int) -> dict:
    num_layers = cfg.first_int("n_layer", "num_hidden_layers", default=layers)
    heads = cfg.first_int("n_head", "num_attention_heads", default=heads)
    hidden = cfg.first_int("n_embd", "hidden_size", default=hidden)
    if hidden % heads:
        raise cfg.error(f"n_embd={hidden} is not a multiple of n_head={heads}")
    return {
        "num_layers": num_layers,
        "num_q_heads": heads,
        "num_kv_heads": heads,
        "head_dim": hidden // heads,
        "hidden_size": hidden,
        "dtype": cfg.dtype(),
        "max_model_len": cfg.first_int("n_positions", "max_position_embeddings", default=default_positions),
    }


def read_gpt2(cfg: HFConfig) -> dict:
    """GPT-2: MHA on every layer; GPT2Config defaults 12 layers, 12 heads, 768 wide, 1,024 positions."""
    return _gpt(cfg, 1024, 12, 12, 768)


def read_gptj(cfg: HFConfig) -> dict:
    """GPT-J: MHA on every layer; GPTJConfig defaults 28 layers, 16 heads, 4,096 wide, 2,048 positions."""
    return _gpt(cfg, 2048, 28, 16, 4096)


def read_falcon(cfg: HFConfig) -> dict:
    """Falcon: MQA (``multi_query``, the default), or GQA with ``new_decoder_architecture``."""
    num_layers = cfg.first_int("num_hidden_layers", "n_layer", default=32)  # FalconConfig defaults (Falcon-7B)
    heads = cfg.first_int("num_attention_heads", "n_head", default=71)
    hidden = cfg.first_int("hidden_size", "n_embd", default=4544)
    if hidden % heads:
        raise cfg.error(f"hidden_size={hidden} is not a multiple of num_attention_heads={heads}")
    if cfg.flag("new_decoder_architecture"):
        kv = cfg.first_int("num_kv_heads", "n_head_kv", default=heads)
        cfg.ignore("multi_query")
    elif cfg.flag("multi_query", True):
        kv = 1
        cfg.ignore("num_kv_heads", "n_head_kv")
    else:
        kv = heads
        cfg.ignore("num_kv_heads", "n_head_kv")
    return {
        "num_layers": num_layers,
        "num_q_heads": heads,
        "num_kv_heads": kv,
        "head_dim": hidden // heads,
        "hidden_size": hidden,
        "dtype": cfg.dtype(),
        "max_model_len": cfg.int("max_position_embeddings", 2048),
    }


READERS = {
    "gpt2": read_gpt2,
    "gptj": read_gptj,
    "falcon": read_falcon,
    "RefinedWeb": read_falcon,
    "RefinedWebModel": read_falcon,
}
