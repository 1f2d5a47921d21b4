"""GPT-OSS (gpt-oss-20b / gpt-oss-120b): alternating sliding (128 tokens) and full attention layers.

Mirrors transformers 5.23's ``GptOssConfig`` with its defaults for absent keys: 36 layers, 64 query heads,
8 KV heads, ``head_dim`` 64 (null: hidden_size / heads), hidden_size 2880, ``sliding_window`` 128,
``max_position_embeddings`` 131072 and, when ``layer_types`` is absent, ``sliding_attention`` where
``(i + 1) % 2`` (the even layers), else ``full_attention``.

vLLM 0.33's ``model_executor/models/gpt_oss.py`` does not read ``layer_types``: it gives layer i the window
when ``i % 2 == 0`` (``_build_attention``). A ``layer_types`` list that differs from that alternation is
refused, since transformers and vLLM would cache different layers. Learned attention sinks are one
parameter per head and add nothing per token.

dtype: the released config.json files carry no ``torch_dtype``; the checkpoints hold bfloat16 attention,
embedding and router weights and MXFP4 experts (``quantization_config.quant_method: mxfp4``), and vLLM
reads the dtype from the safetensors header when config.json has none
(``ModelArchConfigConvertorBase.get_torch_dtype``), serving them in bfloat16. Absent dtype -> bf16 here.
"""

from __future__ import annotations

from kvplan.readers.base import HFConfig, attention_dims
from kvplan.readers.gemma import window

_TYPES = {"full_attention": "full", "sliding_attention": "sliding"}


def read_gpt_oss(cfg: HFConfig) -> dict:
    """A GPT-OSS spec mapping (see the module docstring).

    Raises:
        SpecError: sliding layers with a null ``sliding_window``, or ``layer_types`` that vLLM's fixed
            even/odd alternation would not serve.
    """
    data = attention_dims(cfg, {"layers": 36, "heads": 64, "kv_heads": 8, "hidden": 2880, "head_dim": 64})
    num_layers = data["num_layers"]
    data.update(
        {
            "dtype": cfg.dtype(default="bfloat16"),
            "max_model_len": cfg.int("max_position_embeddings", 131072),
        }
    )
    alternating = ["sliding" if i % 2 == 0 else "full" for i in range(num_layers)]
    kinds = cfg.layer_types(num_layers, _TYPES)
    if kinds is not None and kinds != alternating:
        raise cfg.error(
            "layer_types is not the even-sliding / odd-full alternation that vLLM's gpt_oss.py applies "
            "whatever layer_types says; kvplan will not guess which one is served"
        )
    kinds = alternating
    win = window(cfg, 128)
    if win is None:
        raise cfg.error("sliding_window is null but GPT-OSS has sliding_attention layers (vLLM: even layers)")
    data["sliding_window"] = win
    data["layers"] = kinds
    cfg.ignore("initial_context_length", "experts_per_token", "quantization_config")
    return data


READERS = {"gpt_oss": read_gpt_oss}
