"""Legacy decoders with their own key names: GPT-2, GPT-J, Falcon, GPTBigCode and BLOOM (MHA / MQA, every
layer full).

Mirrors transformers' GPT2Config (``n_layer``, ``n_head``, ``n_embd``, ``n_positions`` = 1024), GPTJConfig
(the same names, ``n_positions`` = 2048) and FalconConfig (``num_hidden_layers``/``n_layer``,
``num_attention_heads``/``n_head``, ``multi_query`` (default true), ``new_decoder_architecture`` with
``num_kv_heads``, ``max_position_embeddings`` = 2048); checked against vLLM 0.33's ``gpt2.py``, ``gpt_j.py``
and ``falcon.py`` (``total_num_kv_heads``: num_kv_heads with the new architecture, 1 with multi_query,
else num_heads).

GPTBigCodeConfig (StarCoder, SantaCoder) and BloomConfig are read by :func:`read_gpt_bigcode` and
:func:`read_bloom` (their docstrings give the keys and the vLLM files).
"""

from __future__ import annotations

from kvplan.readers.base import HFConfig, mha_dims


def _gpt(cfg: HFConfig, default_positions: int, layers: int, heads: int, hidden: int) -> dict:
    return mha_dims(cfg, ("n_layer", "n_head", "n_embd", "n_positions"), (layers, heads, hidden, default_positions))


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


def read_gpt_bigcode(cfg: HFConfig) -> dict:
    """GPTBigCode (StarCoder, SantaCoder): MQA by default.

    GPTBigCodeConfig (transformers 5.23) names the keys as GPT-2 does (``n_layer`` 12, ``n_head`` 12,
    ``n_embd`` 768, ``n_positions`` 1,024, the SantaCoder-sized defaults; ``num_hidden_layers`` etc. are
    accepted as aliases) and sets ``num_key_value_heads = 1 if multi_query else n_head`` (``multi_query``
    defaults to true). vLLM 0.33 serves it through the Transformers backend (``models/transformers``), whose
    cache takes ``num_key_value_heads`` from that config object and ``head_size = n_embd // n_head``.

    Raises:
        SpecError: a missing or non-integer value, or ``n_embd`` not a multiple of ``n_head``.
    """
    data = _gpt(cfg, 1024, 12, 12, 768)
    cfg.ignore("num_key_value_heads")  # GPTBigCodeConfig overwrites it from multi_query
    if cfg.flag("multi_query", True):
        data["num_kv_heads"] = 1
    return data


def read_bloom(cfg: HFConfig) -> dict:
    """BLOOM: MHA on every layer, ALiBi (no position table).

    BloomConfig (transformers 5.23): ``n_layer`` (alias ``num_hidden_layers``, default 2), ``n_head`` (alias
    ``num_attention_heads``, default 8), ``hidden_size`` (default 64; the legacy ``n_embed`` wins when set);
    its docstring ties the class to bigscience/bloom. vLLM 0.33's ``bloom.py``: ``num_kv_heads = n_head``,
    ``head_dim = hidden_size // n_head``. BLOOM has no ``max_position_embeddings``: vLLM takes ``seq_length``
    when the config has it, else 2,048 (``config/model.py``, ``_get_and_verify_max_len``).

    Raises:
        SpecError: a missing or non-integer value, or the width not a multiple of ``n_head``.
    """
    return mha_dims(cfg, ("n_layer", "n_head", "n_embed", "seq_length"), (2, 8, 64, 2048))


READERS = {
    "gpt_bigcode": read_gpt_bigcode,
    "bloom": read_bloom,
    "gpt2": read_gpt2,
    "gpt-sw3": read_gpt2,  # GPT-SW3: transformers maps it to GPT2Config, vLLM serves it as GPT2LMHeadModel
    "gptj": read_gptj,
    "falcon": read_falcon,
    "RefinedWeb": read_falcon,
    "RefinedWebModel": read_falcon,
}
