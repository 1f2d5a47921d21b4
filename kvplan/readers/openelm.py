"""Apple OpenELM: per-layer query and KV head counts (layer-wise scaling), one head_dim.

OpenELM ships remote code only (``OpenELMForCausalLM`` in the model repo's ``modeling_openelm.py``):
transformers 5.23 has no OpenELM class and vLLM 0.33 has no OpenELM model, so neither can be the oracle; the
arithmetic is plain and is read from the config keys the remote ``OpenELMConfig`` defines: layer ``i``
(of ``num_transformer_layers``) caches K and V of ``num_kv_heads[i]`` heads of ``head_dim`` elements
(``OpenELMMultiHeadCausalAttention``: ``k_heads = num_kv_heads[layer_idx]``), with ``num_query_heads[i]``
query heads; ``max_context_length`` is the maximum context. ``qkv_multipliers`` / ``num_gqa_groups`` are the
recipe that produced the two lists and are not re-derived: the lists are what the weights hold.

The spec's ``num_q_heads`` is the largest per-layer query head count, ``num_kv_heads`` the first layer's (the
``per_layer`` lists carry each layer's own).
"""

from __future__ import annotations

from kvplan.readers.base import HFConfig


def read_openelm(cfg: HFConfig) -> dict:
    """An OpenELM spec mapping (per-layer heads).

    Raises:
        SpecError: a missing key (the remote config class has no defaults kvplan can mirror), lists whose
            length is not ``num_transformer_layers``, or a layer whose query heads are not a multiple of its
            KV heads.
    """
    n = cfg.first_int("num_transformer_layers", "num_hidden_layers")
    head_dim = cfg.int("head_dim")
    kv = cfg.list("num_kv_heads", n)
    q = cfg.list("num_query_heads", n)
    if kv is None or q is None:
        raise cfg.error("missing num_kv_heads or num_query_heads (one value per layer)")
    kv = [cfg.check_int(f"num_kv_heads[{i}]", v) for i, v in enumerate(kv)]
    q = [cfg.check_int(f"num_query_heads[{i}]", v) for i, v in enumerate(q)]
    for i, (qi, ki) in enumerate(zip(q, kv, strict=True)):
        if qi % ki:
            raise cfg.error(f"layer {i}: num_query_heads={qi} is not a multiple of num_kv_heads={ki}")
    cfg.ignore("num_gqa_groups", "qkv_multipliers", "ffn_multipliers", "rope_max_length", "quantization")
    return {
        "num_layers": n,
        "num_q_heads": max(q),
        "num_kv_heads": kv[0],
        "head_dim": head_dim,
        "hidden_size": cfg.int("model_dim", None),
        "dtype": cfg.dtype(),
        "max_model_len": cfg.int("max_context_length"),
        "per_layer": {"num_kv_heads": kv, "num_q_heads": q},
        "notes": (
            f"per-layer heads: KV {min(kv)}..{max(kv)}, query {min(q)}..{max(q)} (head_dim {head_dim}); remote code "
            "only: no transformers or vLLM model to check against"
        ),
    }


READERS = {"openelm": read_openelm}
