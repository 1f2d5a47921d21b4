"""Print vLLM's own cache geometry for the hybrid / linear / MLA config.json fixtures, as JSON.

Run with vLLM's interpreter (not kvplan's venv)::

    /opt/venv-vllm/bin/python scripts/vllm_state_shapes.py > tests/fixtures/vllm_state_shapes.json

For each fixture in tests/fixtures/hf_configs/ (and each config in ``INLINE_CONFIGS``, for model types
with no fixture yet: recorded in the output) it loads the file the way vLLM does
(``vllm.transformers_utils.config.get_config`` on a folder holding it), applies the per-model
``VerifyAndUpdateConfig`` that sets ``mamba_ssm_cache_dtype`` (Nemotron-H, Qwen3.5), and records, for TP = 1,
2, 4 and 8:

- ``states``: the per-request state shapes and dtypes from the model class's own
  ``get_mamba_state_shape_from_config`` / ``get_mamba_state_dtype_from_config`` where that module imports
  on a CPU-only machine (jamba, nemotron_h, granitemoehybrid, lfm2, falcon_h1, zamba2), else from
  ``MambaStateShapeCalculator`` / ``MambaStateDtypeCalculator`` called with the arguments that model
  file passes (qwen3_next.py, qwen3_5.py, kimi_k3 ``KimiLinearForCausalLM``, the ``LinearAttention`` base
  class for MiniMax); ``source`` names which;
- ``layers``: the kind of each decoder layer as the vLLM model file decides it (``layers_block_type``,
  ``hybrid_override_pattern``, ``layer_types``, ``linear_attn_config.kda_layers``, ``attn_type_list``);
  ``full+mamba2`` is a layer that keeps an attention KV cache and a Mamba-2 state (every Falcon-H1 layer,
  Zamba2's ``hybrid`` layers);
- ``attention``: (num_kv_heads, head_dim) of its attention layers as the model file computes them, and for
  MLA the cached latent width (``kv_lora_rank + qk_rope_head_dim``) and the V3.2 indexer cache row
  (``index_head_dim + index_head_dim // 128 * 4`` bytes, uint8).

Config overrides: ``-PARTIAL`` fixtures lack ``torch_dtype``; the script adds the value in ``OVERRIDES``
(recorded in the output) and the test adds the same before reading them with kvplan.

No GPU is needed; conv states use vLLM's default ``SD`` layout ``(d_conv − 1 + spec, dim)``.
"""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path
from types import SimpleNamespace

import torch

FIXTURES = Path(__file__).resolve().parent.parent / "tests" / "fixtures" / "hf_configs"
TPS = (1, 2, 4, 8)
# fixture -> keys added before loading (the trimmed copies lack the dtype; the checkpoints ship bf16)
OVERRIDES = {
    "granite-4.0-h-tiny-PARTIAL": {"torch_dtype": "bfloat16"},
    "lfm2-2.6b-PARTIAL": {"torch_dtype": "bfloat16"},
    "falcon-h1-7b-PARTIAL": {"torch_dtype": "bfloat16"},
}
# configs for model types with no config.json fixture yet: name -> config (recorded in the output)
INLINE_CONFIGS = {
    # Zamba2Config's class defaults (54 layers, 9 hybrid; hidden 2560, 32 heads of 2·2560/32 = 160; 8 Mamba
    # heads of 2·2560/8 = 640, N 64, 1 group)
    "zamba2-class-defaults": {"model_type": "zamba2", "torch_dtype": "bfloat16"},
    # legacy layer names, every Zamba2 dimension given, 2 Mamba groups (replicated at TP 4 and 8)
    "zamba2-small-legacy-names": {
        "model_type": "zamba2",
        "torch_dtype": "bfloat16",
        "num_hidden_layers": 6,
        "layers_block_type": ["mamba", "mamba", "hybrid", "mamba", "mamba", "hybrid"],
        "hybrid_layer_ids": [2, 5],
        "hidden_size": 2048,
        "num_attention_heads": 32,
        "num_key_value_heads": 32,
        "n_mamba_heads": 64,
        "mamba_headdim": 64,
        "mamba_ngroups": 2,
        "mamba_d_state": 128,
        "mamba_d_conv": 4,
        "mamba_expand": 2,
        "num_mem_blocks": 2,
    },
}
FIXTURE_NAMES = (
    "deepseek-v2-lite",
    "deepseek-v3",
    "deepseek-v3.2",
    "kimi-k2-instruct",
    "kimi-linear-48b-a3b-instruct",
    "jamba-1.5-mini",
    "nemotron-3-nano-30b-a3b",
    "nemotron-h-56b-base-8k",
    "granite-4.0-h-tiny-PARTIAL",
    "qwen3-next-80b-a3b-thinking",
    "qwen3.5-0.8b",
    "qwen3.5-122b-a10b",
    "lfm2-2.6b-PARTIAL",
    "minimax-m1",
    "minimax-m2.7",
    "glm4.7-nvfp4",
    "falcon-h1-7b-PARTIAL",
)
# model types with neither a transformers class nor a vLLM 0.33 model (MiniMax-M1 ships remote code only)
REMOTE_ONLY = ("minimax_m1", "minimax_text_01")
DTYPE_NAMES = {torch.bfloat16: "bf16", torch.float16: "fp16", torch.float32: "fp32", torch.uint8: "uint8"}


def load(name: str):
    """The config object vLLM builds from the fixture (and its text config)."""
    from vllm.transformers_utils.config import get_config

    if name in INLINE_CONFIGS:
        data = dict(INLINE_CONFIGS[name])
    else:
        data = json.loads((FIXTURES / f"{name}.json").read_text())
        data.update(OVERRIDES.get(name, {}))
    data.pop("auto_map", None)  # the remote code is not in the fixture; vLLM's own classes read these files
    if data.get("model_type") in REMOTE_ONLY:  # no vLLM 0.33 / transformers class: a plain config object
        from transformers import PretrainedConfig

        cfg = PretrainedConfig(**data)
        return cfg, cfg
    with tempfile.TemporaryDirectory() as tmp:
        (Path(tmp) / "config.json").write_text(json.dumps(data))
        cfg = get_config(tmp, trust_remote_code=False)
    return cfg, cfg.get_text_config()


def model_dtype(text_cfg) -> torch.dtype:
    """vLLM dtype=auto: the config's dtype; float32 or none -> bf16 on an sm80+ GPU (``_resolve_auto_dtype``)."""
    dtype = getattr(text_cfg, "dtype", None) or getattr(text_cfg, "torch_dtype", None)
    if isinstance(dtype, str):
        dtype = getattr(torch, dtype)
    return torch.bfloat16 if dtype in (None, torch.float32) else dtype


def fake_vllm_config(cfg, text_cfg, tp: int):
    """The attributes the models' get_mamba_state_* classmethods read."""
    cache = SimpleNamespace(
        mamba_cache_dtype="auto", mamba_ssm_cache_dtype="auto", use_replayssm=False, replayssm_buffer_len=None
    )
    return SimpleNamespace(
        parallel_config=SimpleNamespace(tensor_parallel_size=tp),
        model_config=SimpleNamespace(hf_config=cfg, hf_text_config=text_cfg, dtype=model_dtype(text_cfg)),
        cache_config=cache,
        num_speculative_tokens=0,
        speculative_config=None,
        mamba_config=SimpleNamespace(backend=None),
    )


def apply_model_config_update(arch: str, vcfg) -> None:
    """vLLM's MODELS_CONFIG_MAP hook for the architecture (sets mamba_ssm_cache_dtype where one exists)."""
    from vllm.model_executor.models.config import MODELS_CONFIG_MAP

    hook = MODELS_CONFIG_MAP.get(arch)
    if hook is not None and arch.startswith(("NemotronH", "Qwen3_5")):
        hook.verify_and_update_config(vcfg)


def states_for(model_type: str, cfg, text_cfg, vcfg) -> tuple[str, list, list]:
    """(source, shapes, dtypes) of one request's state in one layer, per vLLM."""
    from vllm.model_executor.layers.mamba.mamba_utils import MambaStateDtypeCalculator as D
    from vllm.model_executor.layers.mamba.mamba_utils import MambaStateShapeCalculator as S

    tp = vcfg.parallel_config.tensor_parallel_size
    mdt, cache = vcfg.model_config.dtype, vcfg.cache_config
    classes = {
        "jamba": ("vllm.model_executor.models.jamba", "JambaForCausalLM"),
        "nemotron_h": ("vllm.model_executor.models.nemotron_h", "NemotronHForCausalLM"),
        "granitemoehybrid": ("vllm.model_executor.models.granitemoehybrid", "GraniteMoeHybridForCausalLM"),
        "lfm2": ("vllm.model_executor.models.lfm2", "Lfm2ForCausalLM"),
        "falcon_h1": ("vllm.model_executor.models.falcon_h1", "FalconH1ForCausalLM"),
        "zamba2": ("vllm.model_executor.models.zamba2", "Zamba2ForCausalLM"),
    }
    if model_type in classes:
        import importlib

        module, name = classes[model_type]
        cls = getattr(importlib.import_module(module), name)
        shapes = cls.get_mamba_state_shape_from_config(vcfg)
        dtypes = cls.get_mamba_state_dtype_from_config(vcfg)
        if model_type == "zamba2":  # the layer's MambaMixer2 computes its head dim; the classmethod reads mamba_headdim
            width = text_cfg.mamba_expand * text_cfg.hidden_size
            layer = S.mamba2_state_shape(
                tp,
                width,
                text_cfg.mamba_ngroups,
                text_cfg.n_mamba_heads,
                width // text_cfg.n_mamba_heads,
                text_cfg.mamba_d_state,
                text_cfg.mamba_d_conv,
                0,
            )
            if tuple(map(tuple, layer)) != tuple(map(tuple, shapes)):
                raise SystemExit(f"zamba2: layer state {layer} != get_mamba_state_shape_from_config {shapes}")
        return f"{name}.get_mamba_state_shape_from_config", shapes, dtypes
    if model_type in ("qwen3_next", "qwen3_5_text", "qwen3_5_moe_text"):  # qwen3_next.py / qwen3_5.py
        c = text_cfg
        shapes = S.gated_delta_net_state_shape(
            tp,
            c.linear_num_key_heads,
            c.linear_num_value_heads,
            c.linear_key_head_dim,
            c.linear_value_head_dim,
            c.linear_conv_kernel_dim,
            0,
        )
        dtypes = D.gated_delta_net_state_dtype(mdt, cache.mamba_cache_dtype, cache.mamba_ssm_cache_dtype)
        return (
            "MambaStateShapeCalculator.gated_delta_net_state_shape (qwen3_next.py / qwen3_5.py arguments)",
            shapes,
            dtypes,
        )
    if model_type == "kimi_linear":  # vllm/models/kimi_k3/nvidia/model.py KimiLinearForCausalLM
        la = cfg.linear_attn_config
        shapes = S.kda_state_shape(tp, la["num_heads"], la["head_dim"], conv_kernel_size=la["short_conv_kernel_size"])
        dtypes = D.kda_state_dtype(mdt, cache.mamba_cache_dtype, cache.mamba_ssm_cache_dtype)
        return "MambaStateShapeCalculator.kda_state_shape (KimiLinearForCausalLM arguments)", shapes, dtypes
    if model_type in ("minimax", "minimax_m1", "minimax_text_01"):  # layers/mamba/linear/base.py LinearAttention
        heads = text_cfg.num_attention_heads
        head_dim = getattr(text_cfg, "head_dim", None) or text_cfg.hidden_size // heads
        shapes = S.linear_attention_state_shape(num_heads=heads, tp_size=tp, head_dim=head_dim)
        dtypes = D.linear_attention_state_dtype(mdt, cache.mamba_cache_dtype)
        return "MambaStateShapeCalculator.linear_attention_state_shape (LinearAttention arguments)", shapes, dtypes
    return "none", (), ()


def layers_and_attention(model_type: str, cfg, c) -> tuple[list[str], dict]:
    """Each layer's kind and the attention geometry, as the vLLM model file computes them."""
    n = getattr(c, "num_hidden_layers", None)
    if model_type in ("deepseek_v2", "deepseek_v3", "deepseek_v32", "kimi_k2"):  # deepseek_v2.py
        attn = {"mla_latent": c.kv_lora_rank + c.qk_rope_head_dim}
        if hasattr(c, "index_topk"):  # deepseek_v2.py is_v32; Indexer k_cache head_dim, uint8
            attn["indexer_row_bytes"] = c.index_head_dim + c.index_head_dim // 128 * 4
        return ["mla"] * n, attn
    if model_type == "kimi_linear":  # KimiLinearConfig.is_kda_layer
        kinds = ["kda" if c.is_kda_layer(i) else "mla" for i in range(n)]
        return kinds, {"mla_latent": c.kv_lora_rank + c.qk_rope_head_dim}
    if model_type == "jamba":  # jamba.py: ALL_DECODER_LAYER_TYPES[config.layers_block_type[i]]
        kinds = ["full" if t == "attention" else "mamba" for t in c.layers_block_type]
        return kinds, {"num_kv_heads": c.num_key_value_heads, "head_dim": c.hidden_size // c.num_attention_heads}
    if model_type == "nemotron_h":  # nemotron_h.py: config.hybrid_override_pattern[i]
        m = {"M": "mamba2", "*": "full", "-": "none", "E": "none"}
        head_dim = c.head_dim if getattr(c, "head_dim", None) is not None else c.hidden_size // c.num_attention_heads
        return [m[ch] for ch in c.hybrid_override_pattern], {
            "num_kv_heads": c.num_key_value_heads,
            "head_dim": head_dim,
        }
    if model_type == "granitemoehybrid":  # granitemoehybrid.py: config.layer_types[i]
        m = {"full_attention": "full", "linear_attention": "mamba2"}
        return [m[t] for t in c.layer_types], {
            "num_kv_heads": c.num_key_value_heads,
            "head_dim": c.hidden_size // c.num_attention_heads,
        }
    if model_type in ("qwen3_next", "qwen3_5_text", "qwen3_5_moe_text"):  # config.layer_types[i]
        m = {"full_attention": "full", "linear_attention": "gdn"}
        head_dim = c.head_dim or c.hidden_size // c.num_attention_heads
        return [m[t] for t in c.layer_types], {"num_kv_heads": c.num_key_value_heads, "head_dim": head_dim}
    if model_type == "lfm2":  # lfm2.py: is_attn = layer_types[i] == "full_attention"
        kinds = ["full" if t == "full_attention" else "short_conv" for t in c.layer_types]
        return kinds, {"num_kv_heads": c.num_key_value_heads, "head_dim": c.hidden_size // c.num_attention_heads}
    if model_type in ("minimax_m1", "minimax_text_01", "minimax"):  # attn_type_list: 0 linear, 1 softmax
        kinds = ["full" if t == 1 else "linear_attention" for t in c.attn_type_list]
        head_dim = getattr(c, "head_dim", None) or c.hidden_size // c.num_attention_heads
        return kinds, {"num_kv_heads": c.num_key_value_heads, "head_dim": head_dim}
    if model_type == "falcon_h1":  # falcon_h1.py FalconH1ParallelHybrid: attention and Mamba-2 in every layer
        head_dim = c.head_dim if getattr(c, "head_dim", None) is not None else c.hidden_size // c.num_attention_heads
        return ["full+mamba2"] * n, {"num_kv_heads": c.num_key_value_heads, "head_dim": head_dim}
    if model_type == "zamba2":  # zamba2.py: "hybrid" -> Zamba2HybridLayer (Attention + own mixer), else mixer only
        # Zamba2Attention: Attention(num_heads, attention_head_dim) without num_kv_heads (= num_heads), and it
        # raises unless attention_head_dim x num_attention_heads == attention_hidden_size
        if c.attention_head_dim * c.num_attention_heads != c.attention_hidden_size:
            raise SystemExit("zamba2: vLLM's Zamba2Attention would refuse this config")
        kinds = ["full+mamba2" if t == "hybrid" else "mamba2" for t in c.layers_block_type]
        return kinds, {"num_kv_heads": c.num_attention_heads, "head_dim": c.attention_head_dim}
    if model_type in ("minimax_m2", "glm4_moe"):  # every layer full attention
        head_dim = getattr(c, "head_dim", None) or c.hidden_size // c.num_attention_heads
        return ["full"] * n, {"num_kv_heads": c.num_key_value_heads, "head_dim": head_dim}
    raise SystemExit(f"no rule for {model_type}")


def main() -> None:
    import vllm

    out = {
        "_about": "written by scripts/vllm_state_shapes.py with vLLM's own code; see its docstring",
        "vllm_version": vllm.__version__,
        "config_overrides": OVERRIDES,
        "inline_configs": INLINE_CONFIGS,
        "models": {},
    }
    for name in (*FIXTURE_NAMES, *INLINE_CONFIGS):
        cfg, text_cfg = load(name)
        model_type = text_cfg.model_type
        arch = (getattr(cfg, "architectures", None) or [""])[0]
        kinds, attention = layers_and_attention(model_type, cfg, text_cfg)
        entry = {"model_type": model_type, "architecture": arch, "layers": kinds, "attention": attention, "tp": {}}
        for tp in TPS:
            vcfg = fake_vllm_config(cfg, text_cfg, tp)
            apply_model_config_update(arch, vcfg)
            source, shapes, dtypes = states_for(model_type, cfg, text_cfg, vcfg)
            entry["state_source"] = source
            entry["model_dtype"] = DTYPE_NAMES[vcfg.model_config.dtype]
            entry["tp"][str(tp)] = {
                "shapes": [list(s) for s in shapes],
                "dtypes": [DTYPE_NAMES[d] for d in dtypes],
                "mamba_ssm_cache_dtype": vcfg.cache_config.mamba_ssm_cache_dtype,
            }
        out["models"][name] = entry
    json.dump(out, sys.stdout, indent=1)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
