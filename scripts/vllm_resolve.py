"""vLLM's own config resolution (``EngineArgs.create_engine_config``) on a CPU, as on a given CUDA GPU.

Run with vLLM's interpreter (see scripts/vllm_golden.py for the venv); import this module before anything
else from vLLM, since it installs the CUDA platform that every vLLM module reads at import::

    import vllm_resolve  # first
    vllm_resolve.resolve(config_json_dict, "h100", max_model_len=32768)

or, to print the resolved defaults of one model on one GPU::

    /work/venvs/vllm/bin/python scripts/vllm_resolve.py tests/fixtures/hf_configs/llama3.1-8b.json h100

What is patched, and only that (vLLM 0.33.0):

- the CUDA-only extension modules (``vllm._C_stable_libtorch``, the FlashAttention ``_vllm_fa2_C`` /
  ``_vllm_fa3_C`` …) are empty modules in ``sys.modules``, so the CUDA platform and the model files
  import; ``torch.ops._C.cutlass_scaled_mm_supports_block_fp8``, the one custom op a model import calls
  (``quantization/utils/w8a8_utils.py``), answers False;
- ``vllm.platforms.current_platform`` is ``platforms/cuda.py``'s ``CudaPlatform`` (the non-NVML class
  here) with the three values vLLM reads from the device: ``get_device_name`` (the name nvidia-smi
  prints), ``get_device_total_memory`` (bytes) and ``get_device_capability`` (SM); ``device_count``
  is 8, or the world size when larger;
- Triton's NVIDIA driver answers ``is_active()`` True, so vLLM finds Triton as on a GPU
  (``triton_utils/importing.py HAS_TRITON``): the Mamba/GDN model files import with the real Triton, and
  ``VllmConfig.use_v2_model_runner`` decides Model Runner V2 as it would there; creating the driver
  raises RuntimeError, which the flash-linear-attention utilities catch (their device probe answers
  "cpu": it only picks kernels);
- the model registry inspects model classes in this process (``registry._run_in_subprocess``), so the
  patched platform applies to the import.

Nothing else is chosen here: every value returned is read from the ``VllmConfig`` vLLM built.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
import types
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("VLLM_LOGGING_LEVEL", "ERROR")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

ROOT = Path(__file__).resolve().parent.parent
HF_CONFIGS = ROOT / "tests" / "fixtures" / "hf_configs"

# GPUs: the name nvidia-smi prints, the CUDA-visible total (kvplan/data/gpus.yaml cuda_total_bytes, which
# sits on the same side of vLLM's 70 GiB and 160 GiB thresholds as the card's), the compute capability.
GPUS: dict[str, tuple[str, int, tuple[int, int]]] = {
    "h100": ("NVIDIA H100 80GB HBM3", 85_061_533_696, (9, 0)),
    "h200": ("NVIDIA H200", 150_119_383_040, (9, 0)),
    "a100-40gb": ("NVIDIA A100-SXM4-40GB", 42_298_834_944, (8, 0)),
    "a100-80gb": ("NVIDIA A100-SXM4-80GB", 85_248_180_224, (8, 0)),
    "l4": ("NVIDIA L4", 23_491_248_128, (8, 9)),
    "b200": ("NVIDIA B200", 191_501_434_880, (10, 0)),
    "rtx4090": ("NVIDIA GeForce RTX 4090", 25_095_569_408, (8, 9)),
    "l40s": ("NVIDIA L40S", 47_644_147_712, (8, 9)),  # "other": 44 GiB, Ada
}

_STUB_MODULES = (
    "vllm._C",
    "vllm._C_stable_libtorch",
    "vllm._moe_C",
    "vllm._moe_C_stable_libtorch",
    "vllm._qutlass_C",
    "vllm.vllm_flash_attn._vllm_fa2_C",
    "vllm.vllm_flash_attn._vllm_fa3_C",
)
# custom ops the model files call at import (quantization/utils/w8a8_utils.py): the CUDA build's answers,
# by compute capability (csrc/quantization/w8a8/cutlass: FP8 from SM 8.9, block FP8 from SM 9.0)
_IMPORT_TIME_OPS = {
    "cutlass_scaled_mm_supports_fp8": lambda capability: capability >= 89,
    "cutlass_scaled_mm_supports_block_fp8": lambda capability: capability >= 90,
}
_gpu = {"name": GPUS["h100"][0], "memory": GPUS["h100"][1], "capability": GPUS["h100"][2], "devices": 8}


class _OpNamespace:
    """``torch.ops.<ns>`` without the CUDA library: only the ops a model import calls, each a constant."""

    def __getattr__(self, op: str):
        if op not in _IMPORT_TIME_OPS:
            raise AttributeError(op)
        return _IMPORT_TIME_OPS[op]


_torchvision_lib = None


def _install() -> None:
    import torch

    for name in _STUB_MODULES:
        sys.modules.setdefault(name, types.ModuleType(name))
    for ns in ("_C", "_moe_C"):
        setattr(torch.ops, ns, _OpNamespace())
    # torchvision's wheel is a CUDA build whose _C does not load here; its meta registrations still name
    # two ops (torchvision/_meta_registrations.py: nms, qnms), so their schemas are declared first
    global _torchvision_lib
    _torchvision_lib = torch.library.Library("torchvision", "DEF")
    for op in ("nms", "qnms"):
        _torchvision_lib.define(f"{op}(Tensor dets, Tensor scores, float iou_threshold) -> Tensor")

    # Triton is installed but finds no GPU driver here; vLLM (triton_utils/importing.py) then swaps in
    # placeholders that the Mamba kernels' module-level autotune configs cannot take
    from triton.backends import backends as triton_backends

    triton_backends["nvidia"].driver.is_active = staticmethod(lambda: True)

    def no_device(self, *a, **k):  # a kernel module asking for the device itself (fla/ops/utils.py) gets none
        raise RuntimeError("no CUDA device: vLLM's config resolution only")

    triton_backends["nvidia"].driver.__init__ = no_device

    import vllm.platforms as platforms
    from vllm.platforms import cuda
    from vllm.platforms.interface import DeviceCapability

    cls = cuda.CudaPlatform
    cls.get_device_name = classmethod(lambda c, device_id=0: _gpu["name"])
    cls.get_device_total_memory = classmethod(lambda c, device_id=0: _gpu["memory"])
    cls.get_device_capability = classmethod(lambda c, device_id=0: DeviceCapability(*_gpu["capability"]))
    cls.device_count = classmethod(lambda c: _gpu["devices"])
    platforms.current_platform = cls()

    import vllm.triton_utils
    from vllm.model_executor.models import registry

    assert vllm.triton_utils.HAS_TRITON
    registry._run_in_subprocess = lambda fn: fn()


_install()

import vllm.envs as envs  # noqa: E402
from vllm.engine.arg_utils import EngineArgs  # noqa: E402
from vllm.usage.usage_lib import UsageContext  # noqa: E402

# fixture name -> keys added before vLLM reads it (the trimmed copies lack them; cf. scripts/vllm_state_shapes.py)
OVERRIDES = {
    "falcon-h1-7b-PARTIAL": {"torch_dtype": "bfloat16", "architectures": ["FalconH1ForCausalLM"]},
}
# ENV settings a user changes that move memory planning; resolve() sets them only while it runs
PLANNING_ENVS = ("VLLM_ALLOW_CHUNKED_LOCAL_ATTN_WITH_HYBRID_KV_CACHE", "VLLM_USE_V2_MODEL_RUNNER")


def load_config(name: str) -> dict:
    """A fixture config.json (tests/fixtures/hf_configs/NAME.json) with its OVERRIDES applied."""
    data = json.loads((HF_CONFIGS / f"{name}.json").read_text())
    data.update(OVERRIDES.get(name, {}))
    return data


def set_gpu(gpu: str, devices: int = 8) -> None:
    """Make the pretended device ``gpu`` (a key of GPUS) with ``devices`` GPUs on the node."""
    name, memory, capability = GPUS[gpu]
    _gpu.update(name=name, memory=memory, capability=capability, devices=devices)


def engine_config(config: dict, gpu: str, env: dict[str, str] | None = None, **engine_args):
    """vLLM's ``VllmConfig`` for a config.json dict on ``gpu``, as ``vllm serve`` builds it
    (``UsageContext.OPENAI_API_SERVER``); ``engine_args`` are EngineArgs fields as a user gives them,
    ``env`` environment variables set while it runs.

    Returns:
        (the VllmConfig, ``{name: value}`` of the environment variables vLLM itself set while resolving,
        e.g. ``VLLM_USE_BREAKABLE_CUDAGRAPH`` in ``VllmConfig._maybe_enable_breakable_cudagraph``).
    """
    world = engine_args.get("tensor_parallel_size", 1) * engine_args.get("pipeline_parallel_size", 1)
    set_gpu(gpu, max(8, world))
    saved = dict(os.environ)
    for k in PLANNING_ENVS:
        os.environ.pop(k, None)
    os.environ.update(env or {})
    before = dict(os.environ)
    if hasattr(envs, "disable_envs_cache"):
        envs.disable_envs_cache()
    try:
        with tempfile.TemporaryDirectory() as d:
            (Path(d) / "config.json").write_text(json.dumps(config))
            args = EngineArgs(model=d, skip_tokenizer_init=True, **engine_args)
            cfg = args.create_engine_config(UsageContext.OPENAI_API_SERVER)
            set_by_vllm = {k: v for k, v in os.environ.items() if before.get(k) != v}
            return cfg, set_by_vllm
    finally:  # vLLM sets some (VLLM_USE_BREAKABLE_CUDAGRAPH): each call starts from the same environment
        os.environ.clear()
        os.environ.update(saved)


def resolved(cfg, set_by_vllm: dict | None = None) -> dict:
    """The values of a ``VllmConfig`` that memory planning reads (JSON-ready)."""
    s, c, cc = cfg.scheduler_config, cfg.cache_config, cfg.compilation_config
    m, p = cfg.model_config, cfg.parallel_config
    sc = cfg.speculative_config
    return dict(
        max_num_batched_tokens=s.max_num_batched_tokens,
        max_num_seqs=s.max_num_seqs,
        async_scheduling=bool(s.async_scheduling),
        enable_prefix_caching=bool(c.enable_prefix_caching),
        hybrid_kv_cache_manager=not s.disable_hybrid_kv_cache_manager,
        use_v2_model_runner=bool(cfg.use_v2_model_runner),
        max_concurrent_batches=cfg.max_concurrent_batches,
        max_in_flight_tokens=cfg.max_in_flight_tokens,
        block_size=c.block_size,
        user_specified_block_size=bool(c.user_specified_block_size),
        cache_dtype=str(c.cache_dtype),
        mamba_cache_mode=str(c.mamba_cache_mode),
        mamba_block_size=c.mamba_block_size,
        gpu_memory_utilization=c.gpu_memory_utilization,
        kv_cache_memory_bytes=c.kv_cache_memory_bytes,
        max_model_len=m.max_model_len,
        is_hybrid=bool(m.is_hybrid),
        enforce_eager=bool(m.enforce_eager),
        compilation_mode=int(cc.mode),
        cudagraph_mode=str(cc.cudagraph_mode.name if hasattr(cc.cudagraph_mode, "name") else cc.cudagraph_mode),
        max_cudagraph_capture_size=cc.max_cudagraph_capture_size,
        cudagraph_capture_sizes=list(cc.cudagraph_capture_sizes or []),
        distributed_executor_backend=str(p.distributed_executor_backend),
        num_speculative_tokens=0 if sc is None else sc.num_speculative_tokens,
        speculative_method=None if sc is None else sc.method,
        env_set_by_vllm={k: v for k, v in sorted((set_by_vllm or {}).items()) if k.startswith("VLLM_")},
    )


def resolve(config: dict, gpu: str, env: dict[str, str] | None = None, **engine_args) -> dict:
    """:func:`resolved` of :func:`engine_config`."""
    return resolved(*engine_config(config, gpu, env, **engine_args))


# --- the fixture's "defaults" section: model × GPU × setting ---------------------------------------------

DEFAULTS_MODELS = (
    "llama3.1-8b",
    "llama3.3-70b-instruct",
    "qwen3-30b-a3b",
    "mistral-7b-v0.1",
    "gemma2-9b-it",
    "gemma3-27b-it-modified",
    "gemma4-26b-a4b",
    "gpt-oss-20b",
    "gpt-oss-120b",
    "llama4-scout-17b-16e-instruct",
    "deepseek-v2-lite",
    "deepseek-v3",
    "deepseek-v3.2",
    "jamba-1.5-mini",
    "nemotron-h-56b-base-8k",
    "qwen3-next-80b-a3b-thinking",
    "falcon-h1-7b-PARTIAL",
    "qwen3.5-0.8b",
)
# settings a user changes: label -> (EngineArgs fields, environment variables)
SETTINGS: dict[str, tuple[dict, dict]] = {
    "default": ({}, {}),
    "max_model_len=4096": ({"max_model_len": 4096}, {}),
    "no-prefix-caching": ({"enable_prefix_caching": False}, {}),
    "no-async-scheduling": ({"async_scheduling": False}, {}),
    "kv-cache-dtype=fp8": ({"kv_cache_dtype": "fp8"}, {}),
    "enforce-eager": ({"enforce_eager": True}, {}),
    "max_num_batched_tokens=512": ({"max_num_batched_tokens": 512}, {}),
    "max_num_seqs=64": ({"max_num_seqs": 64}, {}),
    "pp=2": ({"pipeline_parallel_size": 2}, {}),
    "ngram=3": ({"speculative_config": {"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_max": 4}}, {}),
}
EVERY_GPU_SETTINGS = ("default", "max_num_batched_tokens=512", "max_num_seqs=64")
ALL_SETTINGS_GPUS = ("h200",)
# fields of resolved() the fixture leaves out: the same in every entry, or what the entry's args say
FIXTURE_DROPS = (
    "user_specified_block_size",
    "kv_cache_memory_bytes",
    "enforce_eager",
    "is_hybrid",
    "distributed_executor_backend",
    "speculative_method",
    "num_speculative_tokens",
)
CHUNKED_OFF = {"VLLM_ALLOW_CHUNKED_LOCAL_ATTN_WITH_HYBRID_KV_CACHE": "0"}


def _draft(base: str, layers: int, arch: str, text: bool = False) -> str:
    """A folder with a stand-in EAGLE head config.json: ``base`` (its text config when ``text``) cut to
    ``layers`` layers. Only the method decides a default; the head's size does not."""
    data = load_config(base)
    if text:
        data = dict(data["text_config"], model_type=data["text_config"].get("model_type", "llama4_text"))
        data.pop("layer_types", None)
    data.update(num_hidden_layers=layers, architectures=[arch])
    folder = tempfile.mkdtemp(prefix="eagle-")
    (Path(folder) / "config.json").write_text(json.dumps(data))
    return folder


def model_settings(model: str) -> dict[str, tuple[dict, dict]]:
    """Settings only some models take: EAGLE / MTP drafters, the chunked-local-attention switch."""
    out: dict[str, tuple[dict, dict]] = {}
    if model == "llama4-scout-17b-16e-instruct":
        eagle = _draft(model, 1, "Llama4ForCausalLM", text=True)
        out["eagle=3"] = ({"speculative_config": {"method": "eagle", "model": eagle, "num_speculative_tokens": 3}}, {})
        out["env:VLLM_ALLOW_CHUNKED_LOCAL_ATTN_WITH_HYBRID_KV_CACHE=0"] = ({}, CHUNKED_OFF)
    if model == "llama3.1-8b":
        eagle = _draft(model, 1, "LlamaForCausalLM")
        out["eagle=3"] = ({"speculative_config": {"method": "eagle", "model": eagle, "num_speculative_tokens": 3}}, {})
    if model in ("deepseek-v3", "qwen3-next-80b-a3b-thinking"):
        out["mtp=1"] = ({"speculative_config": {"method": "mtp", "num_speculative_tokens": 1}}, {})
    return out


def defaults_section(log=None) -> dict:
    """``{"entries": [...], "cudagraph_capture_sizes": {id: sizes}}``: what vLLM resolves for each model
    (DEFAULTS_MODELS) × GPU × setting. An entry: model (fixture name), gpu (GPUS key), setting (label),
    args / env (what the user gave), and ``resolved`` (:func:`resolved`, the capture sizes by id) or
    ``error`` (vLLM's message when it refuses the setting)."""
    entries, sizes, ids = [], {}, {}
    for model in DEFAULTS_MODELS:
        config = load_config(model)
        settings = dict(SETTINGS, **model_settings(model))
        for gpu in GPUS:
            for label, (args, env) in settings.items():
                if gpu not in ALL_SETTINGS_GPUS and label not in EVERY_GPU_SETTINGS:
                    continue
                entry = dict(model=model, gpu=gpu, setting=label, args=_public(args), env=env)
                try:
                    r = resolve(config, gpu, env, **args)
                except Exception as e:  # vLLM refuses the setting for this model: recorded
                    entry["error"] = f"{type(e).__name__}: {str(e).splitlines()[0][:300]}"
                else:
                    key = json.dumps(r["cudagraph_capture_sizes"])
                    if key not in ids:
                        ids[key] = str(len(ids))
                        sizes[ids[key]] = r["cudagraph_capture_sizes"]
                    r["cudagraph_capture_sizes"] = ids[key]
                    for k in FIXTURE_DROPS:
                        r.pop(k)
                    if not r["env_set_by_vllm"]:
                        r.pop("env_set_by_vllm")
                    entry["resolved"] = r
                entries.append(entry)
                if log:
                    log(entry)
    return dict(
        usage_context="OPENAI_API_SERVER",
        config_overrides={m: OVERRIDES[m] for m in DEFAULTS_MODELS if m in OVERRIDES},
        gpus={k: dict(name=n, total_memory=m, capability=list(c)) for k, (n, m, c) in GPUS.items()},
        entries=entries,
        cudagraph_capture_sizes=sizes,
    )


def _public(args: dict) -> dict:
    """EngineArgs as recorded: a stand-in drafter's temporary folder is named ``<stand-in>``."""
    out = dict(args)
    sc = out.get("speculative_config")
    if sc and "model" in sc:
        out["speculative_config"] = dict(sc, model="<stand-in EAGLE head>")
    return out


def main() -> None:
    if sys.argv[1:2] == ["--defaults"]:  # the whole defaults section, as JSON
        print(json.dumps(defaults_section(lambda e: print(e["model"], e["gpu"], e["setting"], file=sys.stderr))))
        return
    path, gpu = sys.argv[1], sys.argv[2] if len(sys.argv) > 2 else "h100"
    name = Path(path).stem
    config = json.loads(Path(path).read_text())
    config.update(OVERRIDES.get(name, {}))
    kw = {}
    for arg in sys.argv[3:]:
        k, v = arg.split("=", 1)
        kw[k] = json.loads(v)
    print(json.dumps(resolve(config, gpu, **kw), indent=1))


if __name__ == "__main__":
    main()
