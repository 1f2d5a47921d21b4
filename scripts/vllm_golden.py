"""Write tests/fixtures/vllm_golden.json: vLLM's own KV-cache planning on a grid of geometries and settings.

Run by hand, in a separate environment with vLLM installed (CPU is enough: no model is loaded)::

    python3 -m venv /work/venvs/vllm && /work/venvs/vllm/bin/pip install torch==2.13.0
    /work/venvs/vllm/bin/pip install --no-deps vllm==0.33.0 -r scripts/vllm-requirements.txt
    /work/venvs/vllm/bin/python scripts/vllm_golden.py [--out tests/fixtures/vllm_golden.json]

(about 10 minutes on 2 shared cores). CI never runs this script; tests/test_vllm_golden.py only reads the
fixture and checks that ``kvplan fit --engine vllm`` gives every row's numbers exactly, and that kvplan's
defaults are the ones in its ``defaults`` section.

Every flag a row plans with — async scheduling, prefix caching, the hybrid KV cache manager, the Mamba
cache mode and block size, Model Runner V2 (and so the in-flight batches) — is vLLM's own:
``EngineArgs(model=<the geometry's config.json>, ...).create_engine_config()`` on the CPU as on an H200
(scripts/vllm_resolve.py, which this script imports first), given only what a user gives (a row's
``settings`` and ``env``). The ``defaults`` section is ``vllm_resolve.defaults_section()``: what that
resolution gives for each fixture config.json × GPU × setting.

What it calls (vLLM 0.33.0):

- ``vllm.v1.kv_cache_interface``: ``FullAttentionSpec``, ``SlidingWindowSpec``,
  ``ChunkedLocalAttentionSpec``, ``MLAAttentionSpec``, ``MambaSpec`` — one spec per layer and rank,
  built as the layers build them (``model_executor/layers/attention/attention.py``,
  ``chunked_local_attention.py``, ``mla_attention.py``, ``layers/mamba/abstract.py``);
- ``vllm.model_executor.layers.mamba.mamba_utils``: ``MambaStateShapeCalculator`` /
  ``MambaStateDtypeCalculator`` for the state shapes and dtypes per TP rank;
- ``vllm.platforms.interface.Platform._align_hybrid_block_size``: the attention block size raised to
  cover a Mamba page and the Mamba page padded to the attention page;
- ``vllm.v1.core.kv_cache_planning``: ``get_global_kv_cache_groups``, ``get_kv_cache_configs`` (null
  block, fit check, per-worker block counts), ``_estimate_max_model_len_from_groups``;
- ``vllm.v1.core.kv_cache_utils``: ``generate_scheduler_kv_cache_config``, ``get_kv_cache_capacity``
  (the "GPU KV cache size" and "Maximum concurrency" of the start-up log).

The ``VllmConfig`` is the one vLLM resolved (scheduler, cache, parallel configs; ``max_in_flight_tokens``
comes from it); only the model config is then swapped for a stand-in carrying max_model_len and the
geometry. The budget is given directly, as
``--kv-cache-memory-bytes`` does, so only the KV rules are compared.

Backend choices, which vLLM makes after the model loads (``Platform.update_block_size_for_backend``,
``platforms/interface.py:750``, called from ``v1/executor/uniproc_executor.py:75`` /
``multiproc_executor.py:802``), are inputs here, as on an H100/H200 (SM 9.0): FlashAttention's
kernel blocks (``MultipleOf(16)``, so 16-token blocks); MLA with a bf16 cache on FLASH_ATTN_MLA
(16-token blocks) and with an fp8 cache on FLASHMLA (fixed 64-token blocks, vLLM
``v1/attention/backends/mla/flashmla.py``; FLASH_ATTN_MLA takes no fp8 cache); DeepSeek-V3.2's sparse
MLA on 64-token blocks (its indexer backend takes only 64), an fp8 cache as ``fp8_ds_mla`` (656 B per
token, FLASHMLA_SPARSE) and the indexer keys (``DeepseekV32IndexerCache``) as their own spec; Gated DeltaNet
prefill on FlashInfer, which in prefix-caching ("align") mode exports prefill checkpoints on a
64-token grid and keeps one checkpoint page per layer (``qwen_gdn_linear_attn.py``); the layer-outer
LBNHC cache layout (the default preference when no backend declares one).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import re
import sys
import time
from pathlib import Path
from types import SimpleNamespace

os.environ.setdefault("VLLM_LOGGING_LEVEL", "ERROR")
sys.path.insert(0, str(Path(__file__).resolve().parent))

import vllm_resolve  # noqa: E402  (first: installs the CUDA platform every vLLM module reads at import)

# isort: split
import torch  # noqa: E402
import vllm  # noqa: E402
from vllm.config import VllmConfig  # noqa: E402
from vllm.model_executor.layers.mamba import abstract as mamba_abstract  # noqa: E402
from vllm.model_executor.layers.mamba.mamba_utils import (  # noqa: E402
    MambaStateDtypeCalculator,
    MambaStateShapeCalculator,
)
from vllm.model_executor.models.utils import extract_layer_index  # noqa: E402
from vllm.platforms.interface import Platform  # noqa: E402
from vllm.v1.attention.backend import MultipleOf  # noqa: E402
from vllm.v1.attention.backends.flash_attn import FlashAttentionBackend  # noqa: E402
from vllm.v1.core import kv_cache_planning as planning  # noqa: E402
from vllm.v1.core.kv_cache_config_builder import get_kv_cache_config_builder  # noqa: E402
from vllm.v1.core.kv_cache_utils import generate_scheduler_kv_cache_config, get_kv_cache_capacity  # noqa: E402
from vllm.v1.kv_cache_interface import (  # noqa: E402
    ChunkedLocalAttentionSpec,
    FullAttentionSpec,
    MambaSpec,
    MLAAttentionSpec,
    SlidingWindowSpec,
    SparseCacheRole,
    get_kv_quant_mode,
)

logging.getLogger("vllm").setLevel(logging.ERROR)  # "Add N padding layers" etc.: the fixture records them

ROOT = Path(__file__).resolve().parent.parent
GIB = 1 << 30
TORCH_DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}
VLLM_DTYPE_NAMES = {"bf16": "bfloat16", "fp16": "float16", "fp32": "float32"}


def pattern(n: int, period: int, offset: int, hit: str, other: str) -> list[str]:
    """``n`` layer kinds: ``hit`` where ``i % period == offset``, else ``other``."""
    return [hit if i % period == offset else other for i in range(n)]


# Geometries in kvplan's spec format (kvplan.specs.build_spec); each lists its layers explicitly and
# the TP sizes / fixture lengths it is run at. Numbers follow the models' public config.json files.
GEOMETRIES: dict[str, dict] = {
    "llama3-8b": dict(
        spec=dict(num_layers=32, num_q_heads=32, num_kv_heads=8, head_dim=128, layers=["full"] * 32),
        tps=[1, 2, 8],
    ),
    "llama3-70b": dict(
        spec=dict(num_layers=80, num_q_heads=64, num_kv_heads=8, head_dim=128, layers=["full"] * 80),
        tps=[1, 4, 16],  # TP 16 > 8 KV heads: each rank keeps one (replicated)
    ),
    "mistral-7b-v0.1": dict(
        spec=dict(
            num_layers=32, num_q_heads=32, num_kv_heads=8, head_dim=128, sliding_window=4096, layers=["sliding"] * 32
        ),
        tps=[1, 2],
    ),
    "gemma3-27b": dict(
        spec=dict(
            num_layers=62,
            num_q_heads=32,
            num_kv_heads=16,
            head_dim=128,
            sliding_window=1024,
            layers=pattern(62, 6, 5, "full", "sliding"),
        ),
        tps=[1, 2, 4],
        pps=[1, 2],
    ),
    "gemma2-9b": dict(
        spec=dict(
            num_layers=42,
            num_q_heads=16,
            num_kv_heads=8,
            head_dim=256,
            sliding_window=4096,
            layers=pattern(42, 2, 0, "sliding", "full"),
        ),
        tps=[1, 2],
    ),
    "gpt-oss-20b": dict(
        spec=dict(
            num_layers=24,
            num_q_heads=64,
            num_kv_heads=8,
            head_dim=64,
            sliding_window=128,
            layers=pattern(24, 2, 0, "sliding", "full"),
        ),
        tps=[1, 2],
    ),
    "gpt-oss-120b": dict(
        spec=dict(
            num_layers=36,
            num_q_heads=64,
            num_kv_heads=8,
            head_dim=64,
            sliding_window=128,
            layers=pattern(36, 2, 0, "sliding", "full"),
        ),
        tps=[1, 4],
    ),
    "llama4-scout": dict(
        spec=dict(
            num_layers=48,
            num_q_heads=40,
            num_kv_heads=8,
            head_dim=128,
            attention_chunk_size=8192,
            layers=pattern(48, 4, 3, "full", "chunked"),
        ),
        tps=[1, 8],
    ),
    "mixed-page-5to1": dict(  # Gemma-4-like: sliding 8 × 256, full 2 × 512 (half the sliding page)
        spec=dict(
            num_layers=30,
            num_q_heads=16,
            num_kv_heads=8,
            head_dim=256,
            sliding_window=1024,
            layers=pattern(30, 6, 5, "full", "sliding"),
            geometry={"full": {"num_kv_heads": 2, "head_dim": 512}},
        ),
        tps=[1, 2],
    ),
    "per-layer-heads": dict(  # OpenELM-like: full attention, KV heads differing per layer
        spec=dict(
            num_layers=16,
            num_q_heads=24,
            num_kv_heads=4,
            head_dim=64,
            layers=["full"] * 16,
            per_layer={"num_kv_heads": [3, 3, 3, 4, 4, 4, 4, 4, 6, 6, 6, 6, 8, 8, 8, 8]},
        ),
        tps=[1],
    ),
    "deepseek-v3": dict(
        spec=dict(
            num_layers=61,
            num_q_heads=128,
            num_kv_heads=128,
            head_dim=192,
            layers=["mla"] * 61,
            mla={"kv_lora_rank": 512, "qk_rope_head_dim": 64},
        ),
        tps=[1, 8],
    ),
    "deepseek-v2-lite": dict(
        spec=dict(
            num_layers=27,
            num_q_heads=16,
            num_kv_heads=16,
            head_dim=192,
            layers=["mla"] * 27,
            mla={"kv_lora_rank": 512, "qk_rope_head_dim": 64},
        ),
        tps=[1, 2],
    ),
    "jamba-v0.1": dict(
        spec=dict(
            num_layers=32,
            num_q_heads=32,
            num_kv_heads=8,
            head_dim=128,
            layers=pattern(32, 8, 4, "full", "mamba"),
            mamba={"d_inner": 8192, "d_conv": 4, "d_state": 16},
        ),
        tps=[1, 2, 8],
        pps=[1, 2],
    ),
    "nemotron-h-56b": dict(  # Mamba-2 hybrid with MLP-only layers; ssm state in fp32 (vLLM's NemotronH default)
        spec=dict(
            num_layers=118,
            num_q_heads=64,
            num_kv_heads=8,
            head_dim=128,
            layers="M-M-M-M*-" + "M-M-M-M-M*-" * 9 + "M-M-M-M-M-",
            mamba2={"num_heads": 256, "head_dim": 64, "d_state": 256, "n_groups": 8, "d_conv": 4, "ssm_dtype": "fp32"},
        ),
        tps=[1, 2, 8],
    ),
    "qwen3-next-80b": dict(  # Gated DeltaNet hybrid: 3 GDN : 1 full attention (2 KV heads × 256)
        spec=dict(
            num_layers=48,
            num_q_heads=16,
            num_kv_heads=2,
            head_dim=256,
            layers=pattern(48, 4, 3, "full", "gdn"),
            gdn={"num_k_heads": 16, "num_v_heads": 32, "head_k_dim": 128, "head_v_dim": 128, "d_conv": 4},
        ),
        tps=[1, 2],
    ),
    "deepseek-v3.2": dict(  # MLA plus the DSA indexer's own cache in every layer (index_head_dim 128)
        spec=dict(
            num_layers=61,
            num_q_heads=128,
            num_kv_heads=128,
            head_dim=192,
            layers=["mla"] * 61,
            mla={"kv_lora_rank": 512, "qk_rope_head_dim": 64, "index_head_dim": 128},
        ),
        tps=[1, 8],
        pps=[1, 2],
    ),
    "falcon-h1-7b": dict(  # every layer: attention (2 KV heads × 128) AND a Mamba-2 mixer (parallel_state)
        spec=dict(
            num_layers=44,
            num_q_heads=12,
            num_kv_heads=2,
            head_dim=128,
            layers=["full"] * 44,
            parallel_state="mamba2",
            mamba2={"num_heads": 24, "head_dim": 128, "d_state": 256, "n_groups": 1, "d_conv": 4},
        ),
        tps=[1, 2],
        pps=[1, 2],
    ),
    "zamba2-defaults": dict(  # Zamba2Config's defaults: 9 hybrid layers (attention + own Mamba-2), 45 Mamba-2
        spec=dict(
            num_layers=54,
            num_q_heads=32,
            num_kv_heads=32,
            head_dim=160,
            layers=["full" if i in (6, 12, 18, 24, 30, 36, 42, 47, 51) else "mamba2" for i in range(54)],
            parallel_state="mamba2",
            mamba2={"num_heads": 8, "head_dim": 640, "d_state": 64, "n_groups": 1, "d_conv": 4},
        ),
        tps=[1, 2],
    ),
}
_NEMOTRON_KINDS = {"M": "mamba2", "-": "none", "*": "full"}
GEOMETRIES["nemotron-h-56b"]["spec"]["layers"] = [
    _NEMOTRON_KINDS[c] for c in GEOMETRIES["nemotron-h-56b"]["spec"]["layers"]
]
assert len(GEOMETRIES["nemotron-h-56b"]["spec"]["layers"]) == 118

# Speculative decoding (vLLM 0.33): (geometry, variant). ``num_spec`` = num_speculative_tokens; ``mtp`` MTP
# modules, each a layer like the target's last full-attention / MLA layer (deepseek_mtp.py: layers
# num_hidden_layers + k); ``draft`` a draft model or EAGLE head in kvplan's spec format, its layers numbered
# after the target's (llama_eagle.py: start_layer_id = num_hidden_layers), ``method`` as vLLM names it.
EAGLE_LLAMA3_8B = dict(num_layers=1, num_q_heads=32, num_kv_heads=8, head_dim=128, layers=["full"])
LLAMA32_1B = dict(num_layers=16, num_q_heads=32, num_kv_heads=8, head_dim=64, layers=["full"] * 16)
EAGLE3_GPT_OSS = dict(num_layers=1, num_q_heads=64, num_kv_heads=8, head_dim=64, layers=["full"])
SPECULATIVE = [
    ("llama3-8b", dict(num_spec=3, method="eagle", draft=EAGLE_LLAMA3_8B)),
    ("llama3-70b", dict(num_spec=4, method="draft_model", draft=LLAMA32_1B)),
    ("gpt-oss-20b", dict(num_spec=3, method="eagle3", draft=EAGLE3_GPT_OSS)),  # 12 sliding + 13 full
    ("deepseek-v3", dict(num_spec=1, method="mtp", mtp=1)),
    ("deepseek-v3", dict(num_spec=3, method="mtp", mtp=1)),
    ("deepseek-v3.2", dict(num_spec=2, method="mtp", mtp=1)),
    ("gemma3-27b", dict(num_spec=3, method="mtp", mtp=2)),  # synthetic: multi-module MTP, windows keep 2 more
    ("nemotron-h-56b", dict(num_spec=2, method="ngram")),  # no drafter: the states grow
    ("qwen3-next-80b", dict(num_spec=2, method="mtp", mtp=1)),
    ("falcon-h1-7b", dict(num_spec=2, method="ngram")),
    ("jamba-v0.1", dict(num_spec=2, method="ngram")),  # Mamba-1: more pages, conv states unchanged
]

# Each geometry's real config.json (tests/fixtures/hf_configs), which vLLM's config resolution reads for the
# flags (the geometry itself stays the spec above). per-layer-heads: OpenELM's config needs remote code, so
# a plain full-attention Llama resolves it; zamba2-defaults: Zamba2Config's class defaults, inline.
GEOMETRY_CONFIGS: dict[str, str | dict] = {
    "llama3-8b": "llama3.1-8b",
    "llama3-70b": "llama3.3-70b-instruct",
    "mistral-7b-v0.1": "mistral-7b-v0.1",
    "gemma3-27b": "gemma3-27b-it-modified",
    "gemma2-9b": "gemma2-9b-it",
    "gpt-oss-20b": "gpt-oss-20b",
    "gpt-oss-120b": "gpt-oss-120b",
    "llama4-scout": "llama4-scout-17b-16e-instruct",
    "mixed-page-5to1": "gemma4-26b-a4b",
    "per-layer-heads": "llama3.1-8b",
    "deepseek-v3": "deepseek-v3",
    "deepseek-v2-lite": "deepseek-v2-lite",
    "jamba-v0.1": "jamba-1.5-mini",
    "nemotron-h-56b": "nemotron-h-56b-base-8k",
    "qwen3-next-80b": "qwen3-next-80b-a3b-thinking",
    "deepseek-v3.2": "deepseek-v3.2",
    "falcon-h1-7b": "falcon-h1-7b-PARTIAL",
    "zamba2-defaults": {"model_type": "zamba2", "architectures": ["Zamba2ForCausalLM"], "torch_dtype": "bfloat16"},
}
GOLDEN_GPU = "h200"  # tests/test_vllm_golden.py plans on get_gpu("h200")
# the geometries are run at lengths past some configs' max_position_embeddings (Gemma 2, Nemotron-H 8k)
GOLDEN_ENV = {"VLLM_ALLOW_LONG_MAX_MODEL_LEN": "1"}
_drafts: dict[str, str] = {}


def draft_dir(name: str, **over) -> str:
    """A folder holding a stand-in drafter config.json (a fixture config with ``over`` applied): vLLM's
    SpeculativeConfig reads it for the method's rules; the drafter's geometry is the SPECULATIVE entry's."""
    if name not in _drafts:
        import tempfile

        base, changes = over.pop("base"), over
        data = dict(vllm_resolve.load_config(base), **changes)
        _drafts[name] = tempfile.mkdtemp(prefix=f"draft-{name}-")
        (Path(_drafts[name]) / "config.json").write_text(json.dumps(data))
    return _drafts[name]


def speculative_config(geom_name: str, sc: dict) -> dict:
    """``--speculative-config`` for a SPECULATIVE entry. EAGLE heads and the draft model are stand-in
    configs (llama3.1-8b with their layer counts); MTP uses the target's own config; Gemma 3 has no MTP
    module (the entry is synthetic), so its flags come from an n-gram drafter with as many tokens."""
    k, method = sc["num_spec"], sc["method"]
    if method == "ngram" or (method == "mtp" and geom_name == "gemma3-27b"):
        return {"method": "ngram", "num_speculative_tokens": k, "prompt_lookup_max": 4}
    if method == "mtp":
        return {"method": "mtp", "num_speculative_tokens": k}
    layers = len(sc["draft"]["layers"])
    arch = {"eagle": "LlamaForCausalLM", "eagle3": "LlamaForCausalLMEagle3", "draft_model": "LlamaForCausalLM"}
    folder = draft_dir(method, base="llama3.1-8b", num_hidden_layers=layers, architectures=[arch[method]])
    return {"method": method, "model": folder, "num_speculative_tokens": k}


def resolve_case(geom_name: str, case: dict) -> VllmConfig:
    """``EngineArgs(...).create_engine_config()`` for a case on the golden GPU: the geometry's config.json
    with the case's parallelism, KV dtype, max_model_len, batched tokens, and only what a user would give
    besides (``case["settings"]``: EngineArgs fields; ``case["env"]``: environment variables)."""
    ref = GEOMETRY_CONFIGS[geom_name]
    config = vllm_resolve.load_config(ref) if isinstance(ref, str) else dict(ref)
    args = dict(
        tensor_parallel_size=case["tp"],
        pipeline_parallel_size=case["pp"],
        kv_cache_dtype="fp8" if case["kv_dtype"] == "fp8" else "auto",
        max_model_len=case["max_model_len"],
        max_num_batched_tokens=case["max_num_batched_tokens"],
        **case.get("settings", {}),
    )
    if case.get("speculative"):
        args["speculative_config"] = speculative_config(geom_name, case["speculative"])
    cfg, _ = vllm_resolve.engine_config(config, GOLDEN_GPU, dict(GOLDEN_ENV, **case.get("env", {})), **args)
    want = "fp8" if case["kv_dtype"] == "fp8" else "auto"
    assert cfg.cache_config.cache_dtype == want, (geom_name, cfg.cache_config.cache_dtype)
    return cfg


def resolved_flags(cfg: VllmConfig) -> dict:
    """The flags of a resolved VllmConfig the fixture rows carry (kvplan's FitOptions take them)."""
    return dict(
        async_scheduling=bool(cfg.scheduler_config.async_scheduling),
        prefix_caching=bool(cfg.cache_config.enable_prefix_caching),
        hybrid_kv_cache_manager=not cfg.scheduler_config.disable_hybrid_kv_cache_manager,
    )


LENGTHS = [1000, 4096, 131072]
BATCHED = [2048, 8192]
KV_DTYPES = ["bf16", "fp8"]
STATE_KINDS = ("mamba", "mamba2", "gdn")


def sparse(spec: dict) -> bool:
    """DeepSeek Sparse Attention: MLA layers with an indexer (DeepSeek-V3.2)."""
    return bool(spec.get("mla", {}).get("index_head_dim"))


def layer_geometry(spec: dict, i: int, kind: str) -> tuple[int, int, int]:
    """(KV heads, head_dim, v_head_dim) of attention layer ``i`` (defaults, then per-kind, then per-layer)."""
    heads, head_dim = spec["num_kv_heads"], spec["head_dim"]
    over = spec.get("geometry", {}).get(kind, {})
    heads, head_dim = over.get("num_kv_heads", heads), over.get("head_dim", head_dim)
    per_layer = spec.get("per_layer", {})
    if "num_kv_heads" in per_layer:
        heads = per_layer["num_kv_heads"][i]
    return heads, head_dim, head_dim


def state_shapes(kind: str, block: dict, tp: int, num_spec: int = 0) -> tuple[tuple, tuple]:
    """(shapes, dtypes) of one state layer on one of ``tp`` ranks, by vLLM's calculators."""
    model_dtype = torch.bfloat16
    ssm = VLLM_DTYPE_NAMES[block["ssm_dtype"]] if "ssm_dtype" in block else "auto"
    if kind == "mamba":
        shapes = MambaStateShapeCalculator.mamba1_state_shape(tp, block["d_inner"], block["d_state"], block["d_conv"])
        dtypes = MambaStateDtypeCalculator.mamba1_state_dtype(model_dtype, "auto", ssm)
    elif kind == "mamba2":
        shapes = MambaStateShapeCalculator.mamba2_state_shape(
            tp,
            block["num_heads"] * block["head_dim"],
            block["n_groups"],
            block["num_heads"],
            block["head_dim"],
            block["d_state"],
            block["d_conv"],
            num_spec=num_spec,
        )
        dtypes = MambaStateDtypeCalculator.mamba2_state_dtype(model_dtype, "auto", ssm)
    else:
        shapes = MambaStateShapeCalculator.gated_delta_net_state_shape(
            tp,
            block["num_k_heads"],
            block["num_v_heads"],
            block["head_k_dim"],
            block["head_v_dim"],
            block["d_conv"],
            num_spec=num_spec,
        )
        dtypes = MambaStateDtypeCalculator.gated_delta_net_state_dtype(model_dtype, "auto", ssm)
    return tuple(shapes), tuple(dtypes)


def make_config(spec: dict, case: dict, cfg: VllmConfig) -> VllmConfig:
    """vLLM's own ``VllmConfig`` for a case (:func:`resolve_case`), its model config swapped for a stand-in
    carrying max_model_len and the geometry (the layers' specs are built here, not by loading a model).
    Scheduler, cache and parallel configs — async scheduling, prefix caching, the hybrid KV cache manager,
    the Mamba cache mode and block size, Model Runner V2 — stay as vLLM resolved them."""
    tp = case["tp"]
    state_kind = next((k for k in STATE_KINDS if k in spec["layers"]), spec.get("parallel_state"))
    assert bool(cfg.model_config.is_hybrid) == (state_kind is not None), (case, cfg.model_config.is_hybrid)
    assert cfg.model_config.max_model_len == case["max_model_len"], cfg.model_config.max_model_len
    model = SimpleNamespace(
        max_model_len=case["max_model_len"],
        original_max_model_len=case["max_model_len"],
        supports_kv_cache_grouping=False,
        use_mla="mla" in spec["layers"],
        use_sparse=sparse(spec),
        dtype=torch.bfloat16,
        architecture="KvplanGolden",
        get_num_kv_heads=lambda parallel: max(1, spec["num_kv_heads"] // tp),
        get_head_size=lambda: 576 if "mla" in spec["layers"] else spec["head_dim"],
        is_hybrid=state_kind is not None,
        state_kind=state_kind,
    )
    object.__setattr__(cfg, "model_config", model)
    spec_case = case.get("speculative")
    if spec_case:  # the SpeculativeConfig fields planning reads (config/speculative.py), for the geometry's drafter
        method, k, mtp = spec_case["method"], spec_case["num_spec"], spec_case.get("mtp", 0)
        eagle = method in ("eagle", "eagle3", "mtp", "dflash", "dspark")
        object.__setattr__(
            cfg,
            "speculative_config",
            SimpleNamespace(
                method=method,
                num_speculative_tokens=k,
                parallel_drafting=False,
                use_eagle=lambda: eagle,
                use_dflash=lambda: False,
                use_dspark=lambda: False,
                uses_draft_model=lambda: method == "draft_model",
                use_multi_module_mtp=lambda: method == "mtp" and min(mtp, k) > 1,
                use_eagle_block_drop=lambda: eagle,
            ),
        )
    cfg.cache_config.kv_cache_layout = "LBNHC"
    return cfg


class _GoldenModel:
    """Stand-in for the model class ``_align_hybrid_block_size`` asks for its Mamba state shapes."""

    spec: dict = {}
    tp: int = 1

    @classmethod
    def get_mamba_state_shape_from_config(cls, vllm_config):
        kind = vllm_config.model_config.state_kind
        return state_shapes(kind, cls.spec[kind], cls.tp, vllm_config.num_speculative_tokens)[0]

    @classmethod
    def get_mamba_state_dtype_from_config(cls, vllm_config):
        kind = vllm_config.model_config.state_kind
        return state_shapes(kind, cls.spec[kind], cls.tp, vllm_config.num_speculative_tokens)[1]


def align_hybrid(cfg: VllmConfig, spec: dict, tp: int) -> None:
    """Run vLLM's own hybrid alignment (attention block size, Mamba page padding) for this geometry."""
    from vllm.model_executor.models import ModelRegistry

    _GoldenModel.spec, _GoldenModel.tp = spec, tp
    gdn = cfg.model_config.state_kind == "gdn"
    saved = (
        ModelRegistry.resolve_model_cls,
        Platform._find_non_ssm_backends,
        mamba_abstract.get_mamba_prefill_checkpoint_alignment,
    )
    ModelRegistry.resolve_model_cls = lambda *a, **k: (_GoldenModel, "KvplanGolden")
    Platform._find_non_ssm_backends = classmethod(lambda cls, vc: [FlashAttentionBackend])
    # GDN prefill on FlashInfer (SM 9.0) exports checkpoints on a 64-token grid; Mamba-1/2 layers none
    mamba_abstract.get_mamba_prefill_checkpoint_alignment = lambda vc: 64 if gdn else None
    try:
        Platform._align_hybrid_block_size(cfg, FlashAttentionBackend)
    finally:
        ModelRegistry.resolve_model_cls, Platform._find_non_ssm_backends = saved[0], saved[1]
        mamba_abstract.get_mamba_prefill_checkpoint_alignment = saved[2]


def mamba_spec(kind: str, block: dict, cc, tp: int, num_spec: int = 0) -> MambaSpec:
    """A state layer's spec as ``MambaBase.get_kv_cache_spec`` builds it, with the layer classes' overrides."""
    from dataclasses import replace

    shapes, dtypes = state_shapes(kind, block, tp, num_spec)
    mamba = MambaSpec(
        shapes=shapes,
        dtypes=dtypes,
        block_size=cc.mamba_block_size,
        page_size_padded=cc.mamba_page_size_padded,
        mamba_cache_mode=cc.mamba_cache_mode,
        num_speculative_blocks=num_spec,
    )
    if kind == "mamba2":  # mamba_mixer2.py MambaMixer2.get_kv_cache_spec: always one checkpoint page
        mamba = replace(mamba, num_prefill_checkpoint_blocks=1, prefill_checkpoint_alignment=1)
    if kind == "gdn" and cc.mamba_cache_mode == "align":  # qwen_gdn_linear_attn.py get_kv_cache_spec
        mamba = replace(mamba, num_prefill_checkpoint_blocks=1, prefill_checkpoint_alignment=cc.mamba_block_size)
    return mamba


def pp_ranges(num_layers: int, pp: int) -> list[range]:
    """vLLM ``distributed/utils.py get_pp_indices``: extra layers go to the stages before the last."""
    from vllm.distributed.utils import get_pp_indices

    return [range(*get_pp_indices(num_layers, rank, pp)) for rank in range(pp)]


def layer_caches(spec: dict, i: int, kind: str, index: int, cfg: VllmConfig, case: dict, draft: bool) -> dict:
    """``{layer name: KVCacheSpec}`` of decoder layer ``i`` of ``spec``, registered as vLLM layer ``index``.

    Names follow the model files: a DeepSeek-V3.2 layer registers ``...indexer.k_cache`` before its MLA
    ``...attn``; a parallel Mamba-2 mixer is ``model.{num_layers + index}.mixer`` (falcon_h1.py)."""
    tp, fp8 = case["tp"], case["kv_dtype"] == "fp8"
    num_spec = case.get("speculative", {}).get("num_spec", 0)
    cc = cfg.cache_config
    block = cc.block_size
    kv_torch = torch.uint8 if fp8 else torch.bfloat16  # vLLM STR_DTYPE_TO_TORCH_DTYPE["fp8"] = uint8
    quant = get_kv_quant_mode(cc.cache_dtype)
    out = {}
    name = f"model.layers.{index}.attn"
    if kind == "mla" and sparse(spec):
        # deepseek_v2.py DeepseekV32IndexerCache: fp8 keys + an fp32 scale per 128, uint8, one head;
        # its backend takes only 64-token kernel blocks (v1/worker/utils.py customize_attention_spec)
        index_dim = spec["mla"]["index_head_dim"]
        out[f"model.layers.{index}.self_attn.indexer.k_cache"] = MLAAttentionSpec(
            block_size=block,
            num_kv_heads=1,
            max_tp_shards=1,
            head_size=index_dim + index_dim // 128 * 4,
            dtype=torch.uint8,
            cache_role=SparseCacheRole.INDEXER,
            block_stride_alignment=MultipleOf(64),
            is_draft=draft,
        )
    if kind in ("full", "sliding", "chunked"):
        heads, d, dv = layer_geometry(spec, i, kind)
        common = dict(
            num_kv_heads=max(1, heads // tp),
            head_size=d,
            head_size_v=dv,
            dtype=kv_torch,
            kv_quant_mode=quant,
            is_draft=draft,
        )
        if kind == "full":
            out[name] = FullAttentionSpec(block_size=block, **common)
        elif kind == "sliding":
            out[name] = SlidingWindowSpec(block_size=block, sliding_window=spec["sliding_window"], **common)
        else:
            common.pop("head_size_v")
            out[name] = ChunkedLocalAttentionSpec(
                block_size=block, attention_chunk_size=spec["attention_chunk_size"], **common
            )
    elif kind == "mla":
        latent = spec["mla"]["kv_lora_rank"] + spec["mla"]["qk_rope_head_dim"]
        kw = dict(
            block_size=block,
            num_kv_heads=1,
            max_tp_shards=1,
            head_size=latent,
            dtype=kv_torch,
            cache_dtype_str=cc.cache_dtype,
            kv_quant_mode=quant,
            is_draft=draft,
        )
        if sparse(spec):  # mla_attention.py MLAAttention.get_kv_cache_spec on a sparse backend
            kw["state_content_bytes"] = {"fp8_ds_mla": 656}.get(cc.cache_dtype)
            kw["topk_buffer_width"] = 2048
            kw["is_index_group_leader"] = True
        if fp8:  # FLASHMLA(_SPARSE)'s 64-token kernel blocks (v1/worker/utils.py customize_attention_spec)
            kw["block_stride_alignment"] = MultipleOf(64)
        out[name] = MLAAttentionSpec(**kw)
    elif kind in STATE_KINDS:
        out[name] = mamba_spec(kind, spec[kind], cc, tp, num_spec)
    if kind in ("full", "sliding", "chunked") and spec.get("parallel_state"):
        n = len(spec["layers"])  # falcon_h1.py: ssm_layer_idx = num_hidden_layers + layer_idx
        out[f"model.{n + index}.mixer"] = mamba_spec(
            spec["parallel_state"], spec[spec["parallel_state"]], cc, tp, num_spec
        )
    return out


def mtp_template(spec: dict) -> int:
    """The layer an MTP module repeats: the target's last full-attention or MLA layer."""
    return max(i for i, k in enumerate(spec["layers"]) if k in ("full", "mla"))


def layer_specs(spec: dict, cfg: VllmConfig, case: dict) -> tuple[dict, dict]:
    """(``{layer name: KVCacheSpec}`` of the whole model on one TP rank, as the layers build them and in
    their registration order; ``{layer name: decoder layer}`` for the PP split). A drafter's layers (MTP
    modules, a draft model or EAGLE head) follow the target's, on the last stage."""
    out, owner = {}, {}
    n = len(spec["layers"])
    for i, kind in enumerate(spec["layers"]):
        for name, layer_spec in layer_caches(spec, i, kind, i, cfg, case, False).items():
            out[name], owner[name] = layer_spec, i
    sc = case.get("speculative") or {}
    mtp = sc.get("mtp", 0)
    for k in range(mtp):
        t = mtp_template(spec)
        for name, layer_spec in layer_caches(spec, t, spec["layers"][t], n + k, cfg, case, True).items():
            out[name], owner[name] = layer_spec, n - 1
    if sc.get("draft"):
        d = sc["draft"]
        for j, kind in enumerate(d["layers"]):
            for name, layer_spec in layer_caches(d, j, kind, n + mtp + j, cfg, case, True).items():
                out[name], owner[name] = layer_spec, n - 1
    return out, owner


def run_case(geom_name: str, case: dict, budgets: list[int] | None) -> tuple[dict, dict]:
    """vLLM's plan for one configuration at each budget (None: budgets around the fit point).

    Returns:
        (the configuration with its results per budget, its group layout).
    """
    spec = GEOMETRIES[geom_name]["spec"]
    resolved_cfg = resolve_case(geom_name, case)
    flags = resolved_flags(resolved_cfg)
    case.update(flags)  # the flags vLLM resolved: the fixture's inputs for kvplan
    cfg = make_config(spec, case, resolved_cfg)
    if cfg.model_config.is_hybrid:
        align_hybrid(cfg, spec, case["tp"])
    if "mla" in spec["layers"] and (case["kv_dtype"] == "fp8" or sparse(spec)):
        # FLASHMLA get_preferred_block_size: its one kernel block size; DeepSeek-V3.2's indexer backend and
        # the sparse MLA backends: 64 (backends/mla/indexer.py, flashmla_sparse.py, flashattn_mla_sparse.py)
        cfg.cache_config.block_size = 64
    if sparse(spec) and case["kv_dtype"] == "fp8":
        # mla_attention.py _canonicalize_sparse_mla_kv_cache_dtype: FLASHMLA_SPARSE serves fp8 as fp8_ds_mla
        cfg.cache_config.cache_dtype = "fp8_ds_mla"
    whole, owner = layer_specs(spec, cfg, case)
    names = list(whole)
    per_worker = [{n: whole[n] for n in names if owner[n] in r} for r in pp_ranges(len(spec["layers"]), case["pp"])]
    groups = planning.get_global_kv_cache_groups(cfg, per_worker)
    builder = get_kv_cache_config_builder(cfg)
    projected = [planning._project_kv_cache_groups_to_worker(groups, w) for w in per_worker]
    per_block = [planning._pool_bytes_per_block_from_builder(builder, cfg, g) for g in projected]
    needed = [planning._max_memory_usage_bytes_from_groups(builder, cfg, g) for g in projected]
    if budgets is None:
        # exactly one request plus the null block, one byte less, and two fixed sizes
        exact = max(n + b for n, b in zip(needed, per_block, strict=True))
        budgets = sorted({exact, exact - 1, 4 * GIB, 40 * GIB})
    group_rows = []
    for g in groups:
        first = next(iter(planning.iter_layer_specs(g.kv_cache_spec)))
        group_rows.append(
            dict(
                kind=type(first).__name__,
                layers=[extract_layer_index(n) for n in g.layer_names],
                block_size=g.kv_cache_spec.block_size,
                page_bytes=g.kv_cache_spec.page_size_bytes,
            )
        )
    widest = max(len(g.layer_names) for g in groups)
    layout = dict(
        attention_block_size=cfg.cache_config.block_size,
        mamba_page_size_padded=cfg.cache_config.mamba_page_size_padded,
        padding_layers=sum(widest - len(g.layer_names) for g in groups),
        groups=group_rows,
    )
    config = dict(
        geometry=geom_name,
        **case,
        in_flight_tokens=cfg.max_in_flight_tokens,
        bytes_per_block=per_block,
        request_bytes=needed,
        results=[],
    )
    for budget in budgets:
        row = dict(budget=budget, num_blocks=min(budget // b for b in per_block))
        check = [budget - b for b in per_block]
        row["max_model_len_estimate"] = min(
            planning._estimate_max_model_len_from_groups(builder, cfg, g, m) if m > 0 else 0
            for g, m in zip(projected, check, strict=True)
        )
        try:
            configs = planning.get_kv_cache_configs(cfg, per_worker, [budget] * case["pp"], groups)
        except ValueError as e:
            m = re.search(r"estimated maximum model length is (\d+)", str(e))
            row.update(fits=False, error_estimate=int(m.group(1)) if m else 0)
            config["results"].append(row)
            continue
        sched = generate_scheduler_kv_cache_config(configs)
        assert sched.num_blocks == row["num_blocks"], (sched.num_blocks, row["num_blocks"])
        participating = [g.kv_cache_spec.block_size for g in sched.kv_cache_groups if g.kv_cache_spec.prefix_cacheable]
        tokens, concurrency = get_kv_cache_capacity(cfg, sched)
        row.update(
            fits=True,
            block_size=min(participating),
            kv_cache_size_tokens=tokens,
            max_concurrency=concurrency,
            log=(
                f"GPU KV cache size: {tokens:,} tokens, Maximum concurrency for {case['max_model_len']:,} tokens "
                f"per request: {concurrency:.2f}x"
            ),
        )
        config["results"].append(row)
    return config, layout


def cases():
    """Every (geometry, setting) the fixture covers: the settings a user gives (``settings``: EngineArgs
    fields, ``env``: environment variables); the flags themselves are vLLM's (:func:`resolve_case`)."""
    chunked_off = {"VLLM_ALLOW_CHUNKED_LOCAL_ATTN_WITH_HYBRID_KV_CACHE": "0"}
    for name, g in GEOMETRIES.items():
        layers = g["spec"]["layers"]
        hybrid = any(k in STATE_KINDS for k in layers) or "parallel_state" in g["spec"]
        windowed = any(k in ("sliding", "chunked") for k in layers)
        for tp in g["tps"]:
            for pp in g.get("pps", [1]):
                for dtype in KV_DTYPES:
                    for length in LENGTHS:
                        for mnbt in BATCHED:
                            variants = [({}, {})]  # vLLM's defaults
                            if windowed and pp == 1:
                                variants.append(({"async_scheduling": False}, {}))  # --no-async-scheduling
                            if "chunked" in layers:  # the hybrid manager turned off for chunked local attention
                                variants += [({}, chunked_off), ({"async_scheduling": False}, chunked_off)]
                            if hybrid and pp == 1:
                                variants.append(({"enable_prefix_caching": False}, {}))  # --no-enable-prefix-caching
                            for settings, env in variants:
                                case = dict(
                                    tp=tp, pp=pp, kv_dtype=dtype, max_model_len=length, max_num_batched_tokens=mnbt
                                )
                                yield name, dict(case, settings=settings, **({"env": env} if env else {}))


def speculative_cases():
    """The speculative-decoding variants: each at its geometry's TPs, both dtypes, two lengths."""
    for name, variant in SPECULATIVE:
        g = GEOMETRIES[name]
        for tp in g["tps"]:
            for dtype in KV_DTYPES:
                for length in (4096, 131072):
                    yield (
                        name,
                        dict(
                            tp=tp,
                            pp=1,
                            kv_dtype=dtype,
                            max_model_len=length,
                            max_num_batched_tokens=2048,
                            settings={},
                            speculative=variant,
                        ),
                    )


# The worked examples, at their exact settings (budgets as --kv-cache-memory-bytes).
EXAMPLES = [
    ("mistral-7b-v0.1", dict(max_model_len=32768, max_num_batched_tokens=8192), [10 * GIB]),
    ("jamba-v0.1", dict(max_model_len=4096, max_num_batched_tokens=8192), [10 * GIB]),
    ("gemma3-27b", dict(max_model_len=32768, max_num_batched_tokens=8192), [20 * GIB]),
    # issue 16: Llama 4 Scout bf16, 10 GiB, 32,768 tokens, 2,048 batched tokens (the hybrid manager vLLM's default)
    ("llama4-scout", dict(max_model_len=32768, max_num_batched_tokens=2048), [10 * GIB]),
    # ... and with the manager turned off, as kvplan's rule before issue 16 assumed
    (
        "llama4-scout",
        dict(
            max_model_len=32768,
            max_num_batched_tokens=2048,
            env={"VLLM_ALLOW_CHUNKED_LOCAL_ATTN_WITH_HYBRID_KV_CACHE": "0"},
        ),
        [10 * GIB],
    ),
]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=str(ROOT / "tests/fixtures/vllm_golden.json"))
    args = ap.parse_args()
    t0 = time.time()
    configs, layouts, ids = [], {}, {}

    def add(name: str, case: dict, budgets: list[int] | None, **extra) -> None:
        config, layout = run_case(name, case, budgets)
        key = json.dumps(layout, sort_keys=True)
        if key not in ids:
            ids[key] = str(len(ids))
            layouts[ids[key]] = layout
        configs.append(dict(config, layout=ids[key], **extra))

    for name, case in cases():
        add(name, case, None)
    for name, case in speculative_cases():
        add(name, case, None)
    for name, over, budgets in EXAMPLES:
        case = dict(tp=1, pp=1, kv_dtype="bf16", settings={}, **over)
        add(name, case, budgets, example=True)
    from vllm import _version

    out = dict(
        vllm_version=vllm.__version__,
        vllm_commit=getattr(_version, "commit_id", None),
        torch_version=torch.__version__,
        generated_by="scripts/vllm_golden.py",
        assumptions=(
            "Hopper (SM 9.0) backends: FlashAttention MultipleOf(16) kernel blocks; MLA bf16 on FLASH_ATTN_MLA "
            "(16-token blocks), fp8 on FLASHMLA (64); sparse MLA (DeepSeek-V3.2) on 64-token blocks, bf16 on "
            "FLASH_ATTN_MLA_SPARSE, fp8 on FLASHMLA_SPARSE as fp8_ds_mla, the indexer cache its own spec; GDN "
            "prefill on FlashInfer (64-token checkpoint grid, one checkpoint page per layer in align mode); "
            "Mamba-2 specs with one checkpoint page (MambaMixer2); parallel Mamba-2 mixers named as falcon_h1.py; "
            "LBNHC layout; budget given directly. Flags (async scheduling, prefix caching, hybrid KV cache "
            "manager, Mamba cache mode, Model Runner V2, in-flight batches) from vLLM's own "
            "EngineArgs.create_engine_config on the golden GPU (scripts/vllm_resolve.py)."
        ),
        golden_gpu=GOLDEN_GPU,
        golden_env=GOLDEN_ENV,
        geometry_configs=GEOMETRY_CONFIGS,
        geometries={k: {"spec": v["spec"], "tps": v["tps"], "pps": v.get("pps", [1])} for k, v in GEOMETRIES.items()},
        layouts=layouts,
        configs=configs,
        defaults=vllm_resolve.defaults_section(),
    )
    rows = [r for c in configs for r in c["results"]]
    text = json.dumps(out, separators=(",", ":"), sort_keys=False)
    Path(args.out).write_text(text + "\n")
    print(
        f"{len(configs)} configurations, {len(rows)} rows, {len(text):,} bytes -> {args.out} "
        f"({time.time() - t0:.1f} s)",
        file=sys.stderr,
    )


if __name__ == "__main__":
    sys.exit(main())
