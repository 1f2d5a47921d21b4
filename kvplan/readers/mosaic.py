"""MosaicML's key names: MPT (``mpt``) and DBRX (``dbrx``): ``d_model``, ``n_heads``, ``n_layers``,
``max_seq_len``, the attention settings nested in ``attn_config``. Every layer is full attention.

MPT mirrors transformers 5.23's ``MptConfig`` (defaults: ``d_model`` 2048, ``n_heads`` 16, ``n_layers`` 24,
``max_seq_len`` 2048; ``attribute_map`` accepts ``hidden_size`` / ``num_attention_heads`` /
``num_hidden_layers``) and ``MptAttention``, which caches all ``n_heads`` heads of ``d_model / n_heads``
(``Wqkv`` is ``3 × d_model`` wide whatever ``attn_config.attn_type`` says). vLLM served MPT until 0.28.0
(``mpt.py``: ``total_num_kv_heads = attn_config.kv_n_heads`` when the key is there, else ``n_heads``;
``head_dim = d_model // n_heads``); 0.29+ lists ``MptForCausalLM`` among ``_PREVIOUSLY_SUPPORTED_MODELS``
(last 0.28.0), and transformers' ``MptForCausalLM`` is not compatible with vLLM's Transformers backend
(``_supports_attention_backend`` false), so ``kvplan fit`` refuses it there
(:data:`kvplan.engines.vllm.UNSERVED_ARCHITECTURES`). An ``attn_config.kv_n_heads`` other than ``n_heads``
(remote-code GQA variants) is refused: transformers would cache ``n_heads``, vLLM ``kv_n_heads``.

DBRX mirrors ``DbrxConfig`` (defaults: ``d_model`` 2048, ``n_heads`` 16, ``n_layers`` 24, ``max_seq_len``
2048) with ``DbrxAttentionConfig`` (``kv_n_heads`` default 1): ``DbrxAttention`` caches ``kv_n_heads`` heads of
``d_model / n_heads``, as vLLM 0.33's ``dbrx.py`` does (``total_num_kv_heads = attn_config.kv_n_heads``,
``head_dim = d_model // n_heads``). The experts (``ffn_config``) do not change the cache.
"""

from __future__ import annotations

from kvplan.readers.base import HFConfig, mha_dims


def _attn_config(cfg: HFConfig) -> dict:
    """``attn_config`` as a mapping ({} when absent).

    Raises:
        SpecError: set to something other than an object.
    """
    block = cfg.get("attn_config", {})
    if not isinstance(block, dict):
        raise cfg.error("attn_config must be an object")
    return block


def _dims(cfg: HFConfig, layers: int, heads: int, hidden: int, positions: int) -> dict:
    return mha_dims(cfg, ("n_layers", "n_heads", "d_model", "max_seq_len"), (layers, heads, hidden, positions))


def read_mpt(cfg: HFConfig) -> dict:
    """MPT: MHA on every layer (see the module docstring).

    Raises:
        SpecError: a missing or non-integer value, ``d_model`` not a multiple of ``n_heads``, or an
            ``attn_config.kv_n_heads`` other than ``n_heads``.
    """
    data = _dims(cfg, 24, 16, 2048, 2048)
    block = _attn_config(cfg)
    kv = block.get("kv_n_heads")
    if kv is not None and kv != data["num_q_heads"]:
        raise cfg.error(
            f"attn_config.kv_n_heads={kv!r}: transformers' MptAttention caches all n_heads={data['num_q_heads']} "
            "heads while vLLM's mpt.py caches kv_n_heads; kvplan will not guess which one serves it"
        )
    if not cfg.outer.get("architectures"):  # transformers' class; vLLM refuses it by name after 0.28.0
        data["architecture"] = "MptForCausalLM"
    return data


def read_dbrx(cfg: HFConfig) -> dict:
    """DBRX: GQA on every layer, ``attn_config.kv_n_heads`` KV heads (see the module docstring).

    Raises:
        SpecError: a missing or non-integer value, or ``d_model`` not a multiple of ``n_heads``.
    """
    data = _dims(cfg, 24, 16, 2048, 2048)
    kv = _attn_config(cfg).get("kv_n_heads", 1)
    data["num_kv_heads"] = cfg.check_int("attn_config.kv_n_heads", kv)
    if data["num_q_heads"] % data["num_kv_heads"]:
        raise cfg.error(f"n_heads={data['num_q_heads']} is not a multiple of attn_config.kv_n_heads={kv}")
    cfg.ignore("num_key_value_heads")  # DbrxConfig sets it from attn_config.kv_n_heads
    return data


READERS = {"mpt": read_mpt, "dbrx": read_dbrx}
