"""Write tests/fixtures/sglang_golden.json: SGLang's own KV-pool planning and budget defaults, run on CPU.

Run by hand, in a separate environment with SGLang installed without its CUDA packages (no model is
loaded and no GPU is needed)::

    python3 -m venv /work/venvs/sglang
    /work/venvs/sglang/bin/pip install torch==2.13.0          # the CPU build
    /work/venvs/sglang/bin/pip install --no-deps sglang==0.5.23 -r scripts/sglang-requirements.txt
    /work/venvs/sglang/bin/python scripts/sglang_golden.py [--out tests/fixtures/sglang_golden.json] [--quick]

CI never runs this script; the fixture it writes is what tests compare ``kvplan fit --engine sglang`` with.

What it calls (SGLang 0.5.23, ``sglang/srt/``):

- ``server_args.prepare_server_args`` + ``ServerArgs.resolve_once`` (the whole ``arg_groups`` resolution
  pipeline: page size, ``--swa-full-tokens-ratio``, Mamba cache strategy, ``memory_hook.handle_gpu_memory_settings``
  for ``mem_fraction_static`` / ``chunked_prefill_size`` / CUDA-graph batch sizes), then
  ``runtime_context.publish`` (the config bags every planner reads);
- ``configs.model_config.ModelConfig.from_server_args`` on a local directory holding the config.json;
- ``model_executor.model_runner_components.layer_setup.resolve_layer_indices``,
  ``load_model_utils.resolve_sliding_window_size`` (with the model class's own
  ``get_attention_sliding_window_size``), ``mem_cache.kv_cache_dtype.configure_kv_cache_dtype``;
- ``mem_cache.kv_cache_configurator.KVCacheConfigurator._resolve_memory_pool_config``: the GPU probe,
  the Mamba/linear-state split (``_handle_max_mamba_cache``), ``model_executor.pool_configurator``
  (``DefaultPoolConfigurator`` / ``HybridSWAPoolConfigurator`` / ``SWARequestCapPoolConfigurator``),
  ``resolve_max_num_reqs``; then ``_build_req_to_token_pool`` on the ``meta`` device for the
  request-table (and Mamba state) tensor shapes.

What is replaced (inputs, not rules):

- The GPU: ``torch.cuda`` answers as one H100 80GB HBM3 (SM 9.0, 81559 MiB as ``nvidia-smi
  --query-gpu=memory.total`` prints it) per rank, so every ``is_cuda()`` branch is the CUDA one; for the
  budget section the card is each GPU of :data:`GPUS` in turn (MI300X through a HIP stand-in).
- "Available memory": ``get_available_gpu_memory`` returns the budget and ``pre_model_load_memory`` is 0, so
  ``rest_memory = budget`` exactly (the ``pre_model_load_memory * (1 - mem_fraction_static)`` slack is shown
  separately in the budget section, ``profile`` rows).
- CUDA-only packages (``sgl_kernel``, ``flashinfer``, ``tvm_ffi``, ``torchvision`` and the others in
  :data:`STUBBED`): module objects whose every attribute is a class that raises when called, so a path
  that really needs a kernel fails loudly instead of being faked.
- The model object: the SGLang model class (``ModelRegistry``) without its ``__init__`` (no weights), holding
  the ``hf_config`` as ``config``; ``quant_config`` is None (no checkpoint declares an FP8 KV recipe in the
  configs used, except the two modelopt ones, whose ``auto`` rows say so).

Partial config.json copies (``*-PARTIAL.json``) lack ``architectures``; the architecture is added (and
recorded in the fixture) so SGLang's registry can pick its config class.

Each case runs in one process after the others; flags that SGLang passes on through environment
variables are undone after every case (:func:`environment_restored`), and ``--check-isolation N`` re-runs
N rows spread over the grid, each in a fresh process, and fails unless every one matches.

The fixture:

- ``kv_rows``: one per (model, tp, page_size, kv_cache_dtype, context_length, flags, budget), the grid of
  :func:`kv_grid` and then the DP-attention rows of :func:`kv_dp_grid` (``--enable-dp-attention --dp-size D``:
  rank 0 of attention-DP group 0, whose pools and ``max_running_requests`` are its group's); ``ok`` with
  ``result`` (``max_total_num_tokens``, ``full_/swa_max_total_num_tokens`` for hybrid SWA,
  ``max_running_requests``, ``max_mamba_cache_size``, ``req_to_token_shape`` of the int32 request table,
  ``mamba_pool_bytes``, ``max_req_len``: the longest request the scheduler admits, from
  ``TpModelWorker.get_worker_info`` on the planned pools), or not ``ok`` with SGLang's ``error`` and the
  ``stage`` it came from;
  ``resolved`` indexes the ``resolved`` table (settings and per-token sizes SGLang resolved; what every
  row of a model shares is in ``models[name].resolved_common``); ``log`` indexes ``log_lines``.
- ``examples``: the issue's Qwen3-Next case and refusals the grid does not reach (full rows, no tables).
- ``budget.rows``: ``mem_fraction_static``, ``chunked_prefill_size``, CUDA-graph batch sizes per GPU, TP
  and flags, as ``handle_gpu_memory_settings`` (and the attention / parallel hooks after it) resolve them;
  ``budget.profile``: ``_profile_available_bytes`` from a measured free memory before and after the weights.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import importlib.abc
import importlib.machinery
import itertools
import json
import logging
import os
import sys
import tempfile
import time
import traceback
import types
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
HF_CONFIGS = ROOT / "tests/fixtures/hf_configs"
GIB = 1 << 30

# --------------------------------------------------------------------------------------------------
# CUDA-only modules: stand-ins that fail loudly when used.
# --------------------------------------------------------------------------------------------------

STUBBED = (
    "sgl_kernel",
    "flashinfer",
    "tvm_ffi",
    "torchvision",
    "deep_gemm",
    "flash_mla",
    "sgl_deep_ep",
    "deep_ep",
    "flash_attn",
    "flash_attn_4",
    "tilelang",
    "quack",
    "cutlass",
    "nvshmem",
    "torch_memory_saver",
    "aiter",
    "humming",
    "cuda",
)
STUB_CALLS: list[str] = []


class _StubMeta(type):
    """A stand-in class: attributes are further stand-ins; calling one raises."""

    def __getattr__(cls, name):
        if name.startswith("__") and name.endswith("__"):
            raise AttributeError(name)
        sub = _StubMeta(f"{cls.__name__}.{name}", (), {"__module__": cls.__module__})
        setattr(cls, name, sub)
        return sub

    def __call__(cls, *args, **kwargs):
        STUB_CALLS.append(f"{cls.__module__}.{cls.__name__}")
        raise RuntimeError(f"CUDA-only stub called: {cls.__module__}.{cls.__name__} (not available on CPU)")

    def __getitem__(cls, item):
        return cls

    def __or__(cls, other):
        return cls

    __ror__ = __or__


class _StubModule(types.ModuleType):
    def __getattr__(self, name):
        if name.startswith("__") and name.endswith("__"):
            raise AttributeError(name)
        value = _StubMeta(name, (), {"__module__": self.__name__})
        setattr(self, name, value)
        return value


class _StubFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in STUBBED:
            return importlib.machinery.ModuleSpec(name, self, is_package=True)
        return None

    def create_module(self, spec):
        module = _StubModule(spec.name)
        module.__path__ = []
        module.__version__ = "0.0.0+cpu-stub"
        return module

    def exec_module(self, module):
        pass


# --------------------------------------------------------------------------------------------------
# The GPU, as torch.cuda and nvidia-smi / rocm-smi answer for it (inputs).
# --------------------------------------------------------------------------------------------------

# smi_total_mib: what SGLang's capacity probe reads (get_nvgpu_memory_capacity: `nvidia-smi
# --query-gpu=memory.total`, MiB; get_amdgpu_memory_capacity: rocm-smi VRAM total / 2^20), from
# nvidia-smi / rocm-smi outputs (kvplan's gpu specs; the values kvplan's model_specs/gpus use).
GPUS = {
    "H100-80GB": dict(name="NVIDIA H100 80GB HBM3", smi_total_mib=81559, capability=(9, 0), platform="cuda"),
    "H200": dict(name="NVIDIA H200", smi_total_mib=143771, capability=(9, 0), platform="cuda"),
    "A100-40GB": dict(name="NVIDIA A100-SXM4-40GB", smi_total_mib=40960, capability=(8, 0), platform="cuda"),
    "A100-80GB": dict(name="NVIDIA A100-SXM4-80GB", smi_total_mib=81920, capability=(8, 0), platform="cuda"),
    "L4": dict(name="NVIDIA L4", smi_total_mib=23034, capability=(8, 9), platform="cuda"),
    "RTX-4090": dict(name="NVIDIA GeForce RTX 4090", smi_total_mib=24564, capability=(8, 9), platform="cuda"),
    "MI300X": dict(name="AMD Instinct MI300X", smi_total_mib=196592, capability=(9, 4), platform="hip"),
}
GPU_STATE = dict(GPUS["H100-80GB"], count=8)


def install_fake_gpu(platform: str) -> None:
    """Make torch.cuda answer as GPU_STATE says (before SGLang is imported, so its import-time
    ``_is_cuda = is_cuda()`` flags take the GPU branch)."""
    import torch

    torch.cuda.is_available = lambda: True
    if platform == "hip":
        torch.version.cuda = None
        torch.version.hip = "6.4.43482"
    else:
        torch.version.cuda = "13.0"
    torch.cuda.device_count = lambda: GPU_STATE["count"]
    torch.cuda.get_device_capability = lambda device=None: GPU_STATE["capability"]
    torch.cuda.get_device_name = lambda device=None: GPU_STATE["name"]

    def props(device=None):
        return types.SimpleNamespace(
            name=GPU_STATE["name"],
            total_memory=GPU_STATE["smi_total_mib"] << 20,
            major=GPU_STATE["capability"][0],
            minor=GPU_STATE["capability"][1],
            multi_processor_count=132,
            is_integrated=False,
            gcnArchName="gfx942:sramecc+:xnack-" if platform == "hip" else "",
        )

    torch.cuda.get_device_properties = props
    torch.cuda.mem_get_info = lambda device=None: (GPU_STATE["smi_total_mib"] << 20, GPU_STATE["smi_total_mib"] << 20)
    torch.cuda.current_device = lambda: 0
    torch.cuda.set_device = lambda device: None
    torch.cuda.synchronize = lambda device=None: None
    torch.cuda.empty_cache = lambda: None


def capacity_mib() -> float:
    """The capacity probe's answer (MiB), as nvidia-smi / rocm-smi would print it."""
    return float(GPU_STATE["smi_total_mib"])


# --------------------------------------------------------------------------------------------------
# Models: the config.json files under tests/fixtures/hf_configs and the settings they run at.
# --------------------------------------------------------------------------------------------------

# name -> (fixture file, TP sizes, keys added to a partial copy)
MODELS = {
    "llama3.1-8b": ("llama3.1-8b.json", [1, 2, 4, 8], {}),
    "llama3.3-70b": ("llama3.3-70b-instruct.json", [1, 2, 4, 8], {}),
    "qwen2.5-7b": ("qwen2.5-7b.json", [1, 2, 4], {}),
    "qwen3-8b": ("qwen3-8b.json", [1, 2, 4, 8], {}),
    "qwen3-30b-a3b": ("qwen3-30b-a3b.json", [1, 2, 4, 8], {}),
    "mistral-7b-v0.1": ("mistral-7b-v0.1.json", [1, 2, 4, 8], {}),
    "mixtral-8x7b": ("mixtral-8x7b-v0.1.json", [1, 2, 4, 8], {}),
    "phi3-medium-4k": ("phi3-medium-4k-instruct.json", [1, 2], {}),  # 10 KV heads
    "gemma2-9b": ("gemma2-9b-it.json", [1, 2, 4, 8], {}),
    "gemma3-1b": ("gemma3-1b-it.json", [1, 2, 4], {}),
    "gemma3-27b-modified": ("gemma3-27b-it-modified.json", [1, 2, 4, 8], {}),
    "gemma4-26b-a4b": ("gemma4-26b-a4b.json", [1, 2, 4, 8], {}),
    "gemma4-31b-nvfp4": ("gemma4-31b-it-nvfp4.json", [1, 2, 4, 8], {}),
    "gpt-oss-20b": ("gpt-oss-20b.json", [1, 2, 4, 8], {}),
    "gpt-oss-120b": ("gpt-oss-120b.json", [1, 2, 4, 8], {}),
    "llama4-scout": ("llama4-scout-17b-16e-instruct.json", [1, 2, 4, 8], {}),
    "deepseek-v2-lite": ("deepseek-v2-lite.json", [1, 2, 4, 8], {}),
    "deepseek-v3": ("deepseek-v3.json", [1, 2, 4, 8], {}),
    "deepseek-v3.2": ("deepseek-v3.2.json", [1, 2, 4, 8], {}),
    "kimi-k2": ("kimi-k2-instruct.json", [1, 2, 4, 8], {}),
    "glm4.7-flash": ("glm4.7-flash.json", [1, 2, 4], {}),
    "minimax-m2.7": ("minimax-m2.7.json", [1, 2, 4, 8], {}),
    "qwen3-next-80b-a3b": ("qwen3-next-80b-a3b-thinking.json", [1, 2, 4, 8], {}),
    "qwen3.5-0.8b": ("qwen3.5-0.8b.json", [1, 2, 4], {}),
    "qwen3.5-122b-a10b": ("qwen3.5-122b-a10b.json", [1, 2, 4, 8], {}),
    "nemotron-h-56b": ("nemotron-h-56b-base-8k.json", [1, 2, 4, 8], {}),
    "nemotron-3-nano-30b-a3b": ("nemotron-3-nano-30b-a3b.json", [1, 2, 4], {}),
    "granite-4.0-h-tiny": (
        "granite-4.0-h-tiny-PARTIAL.json",
        [1, 2, 4],
        {"architectures": ["GraniteMoeHybridForCausalLM"]},
    ),
    "granite-4.0-h-1b": (
        "granite-4.0-h-1b-PARTIAL.json",
        [1, 2, 4],
        {"architectures": ["GraniteMoeHybridForCausalLM"]},
    ),
    "falcon-h1-7b": ("falcon-h1-7b-PARTIAL.json", [1, 2, 4], {"architectures": ["FalconH1ForCausalLM"]}),
    "jamba-1.5-mini": ("jamba-1.5-mini.json", [1, 2, 4, 8], {}),
    "kimi-linear-48b": ("kimi-linear-48b-a3b-instruct.json", [1, 2, 4, 8], {}),
}

PRE_MODEL_LOAD_STAND_IN = 1e-30  # GiB; see _kv_case
QUICK_MODELS = ("llama3.1-8b", "gpt-oss-20b", "deepseek-v3", "qwen3-next-80b-a3b")
BUDGETS = [10 * GIB, 40 * GIB]
PAGE_SIZES = [1, 16, 64]
KV_DTYPES = ["auto", "fp8_e4m3"]
CONTEXTS = [4096, 32768, None]  # None: the model's own maximum (SGLang's context_len default)

# Flag variants each model runs with (beyond the defaults), by kind of model.
FLAG_VARIANTS = {
    "all": [
        [],
        ["--max-running-requests", "64"],
        ["--max-total-tokens", "50000"],
    ],
    "swa": [
        ["--swa-full-tokens-ratio", "0.5"],
        ["--swa-full-tokens-ratio", "0.1"],
        ["--disable-radix-cache"],
        ["--disable-radix-cache", "--max-running-requests", "32"],
        ["--disable-radix-cache", "--max-running-requests", "256"],
        ["--disable-hybrid-swa-memory"],
    ],
    "mamba": [
        ["--mamba-full-memory-ratio", "0.5"],
        ["--mamba-full-memory-ratio", "2.0"],
        ["--max-mamba-cache-size", "100"],
        ["--max-mamba-cache-size", "1000"],
        ["--disable-radix-cache"],
        ["--disable-radix-cache", "--max-running-requests", "48"],
        ["--mamba-ssm-dtype", "bfloat16"],
    ],
}


# --------------------------------------------------------------------------------------------------
# Log capture
# --------------------------------------------------------------------------------------------------


class _Capture(logging.Handler):
    def __init__(self):
        super().__init__(level=logging.INFO)
        self.lines: list[str] = []

    def emit(self, record):
        if record.name.startswith("sglang"):
            self.lines.append(f"{record.levelname}: {record.getMessage()}")


CAPTURE = _Capture()


def _attach_capture() -> None:
    root = logging.getLogger()
    for h in list(root.handlers):
        root.removeHandler(h)
    root.addHandler(CAPTURE)
    root.setLevel(logging.INFO)


# --------------------------------------------------------------------------------------------------
# SGLang, imported after the stand-ins are in place.
# --------------------------------------------------------------------------------------------------

SGL: types.SimpleNamespace | None = None


def import_sglang(platform: str) -> types.SimpleNamespace:
    """Install the stand-ins and import the SGLang modules the script calls."""
    global SGL
    sys.meta_path.insert(0, _StubFinder())
    install_fake_gpu(platform)
    os.environ.setdefault("SGLANG_DISABLE_REQUEST_LOGGING", "1")
    import sglang
    import sglang.srt.utils.common as common
    import torch
    import transformers

    common.get_nvgpu_memory_capacity = capacity_mib
    common.get_amdgpu_memory_capacity = capacity_mib
    from sglang.srt import runtime_context as rc
    from sglang.srt.arg_groups import memory_hook
    from sglang.srt.arg_groups.overrides import resolving_view
    from sglang.srt.configs.hybrid_arch import mambaish_config
    from sglang.srt.configs.model_config import AttentionArch, ModelConfig
    from sglang.srt.managers.tp_worker import TpModelWorker
    from sglang.srt.mem_cache import kv_cache_configurator as kvcm
    from sglang.srt.mem_cache import kv_cache_dtype as kvd
    from sglang.srt.model_executor import pool_configurator as pc
    from sglang.srt.model_executor.model_runner import ModelRunner
    from sglang.srt.model_executor.model_runner_components.layer_setup import resolve_layer_indices
    from sglang.srt.model_executor.model_runner_components.load_model_utils import resolve_sliding_window_size
    from sglang.srt.server_args import prepare_server_args
    from sglang.srt.speculative.spec_info import SpeculativeAlgorithm

    # _profile_available_bytes starts with gc.collect() (weight-loading temporaries); with no weights it
    # frees nothing and costs a second per case over the imported model classes.
    kvcm.gc = types.SimpleNamespace(collect=lambda *a: 0)
    SGL = types.SimpleNamespace(
        torch=torch,
        transformers=transformers,
        sglang=sglang,
        common=common,
        rc=rc,
        memory_hook=memory_hook,
        resolving_view=resolving_view,
        mambaish_config=mambaish_config,
        AttentionArch=AttentionArch,
        ModelConfig=ModelConfig,
        kvcm=kvcm,
        kvd=kvd,
        pc=pc,
        resolve_layer_indices=resolve_layer_indices,
        resolve_sliding_window_size=resolve_sliding_window_size,
        prepare_server_args=prepare_server_args,
        SpeculativeAlgorithm=SpeculativeAlgorithm,
        TpModelWorker=TpModelWorker,
        ModelRunner=ModelRunner,
        model_classes={},
    )
    return SGL


# --------------------------------------------------------------------------------------------------
# One KV-pool case
# --------------------------------------------------------------------------------------------------

MODEL_DIRS: dict[str, str] = {}


def model_dir(name: str, tmp: Path) -> str:
    """A directory holding the model's config.json (plus the keys a partial copy lacks)."""
    if name not in MODEL_DIRS:
        fname, _, added = MODELS[name]
        cfg = json.loads((HF_CONFIGS / fname).read_text())
        cfg.update(added)
        d = tmp / name
        d.mkdir(parents=True, exist_ok=True)
        (d / "config.json").write_text(json.dumps(cfg, indent=1))
        MODEL_DIRS[name] = str(d)
    return MODEL_DIRS[name]


def model_stand_in(mc) -> object:
    """The SGLang model class for the config, without ``__init__`` (no weights), for the one thing the
    planner asks of the model class: ``get_attention_sliding_window_size`` over its hf_config."""
    arch = (mc.hf_config.architectures or [None])[0]
    cls = SGL.model_classes.get(arch)
    if arch not in SGL.model_classes:
        try:
            from sglang.srt.model_loader.utils import get_model_architecture

            cls, _ = get_model_architecture(mc)
        except Exception:  # noqa: BLE001 - recorded as "no model class"
            cls = None
        SGL.model_classes[arch] = cls
    if cls is None:
        return types.SimpleNamespace(config=mc.hf_config, quant_config=None)
    obj = object.__new__(cls)
    object.__setattr__(obj, "config", mc.hf_config)
    object.__setattr__(obj, "quant_config", None)
    text = getattr(mc, "hf_text_config", None)
    if text is not None and text is not mc.hf_config:
        object.__setattr__(obj, "text_config", text)
    return obj


def worker_max_req_len(kvc, mc, config, pool) -> int:
    """The longest request the scheduler admits: ``TpModelWorker.get_worker_info``'s ``max_req_len``
    (``managers/tp_worker.py:550``; it warns when the KV pool holds fewer tokens than ``context_len``), on a
    stand-in worker whose model runner holds the planned pools as ``ModelRunner.alloc_memory_pool`` sets them
    (``model_executor/model_runner.py:985``) and answers with ``ModelRunner``'s own capacity properties."""
    props = ("logical_max_total_num_tokens", "effective_logical_max_total_num_tokens", "effective_max_total_num_tokens")
    runner = type("ModelRunnerStandIn", (), {k: getattr(SGL.ModelRunner, k) for k in props})()
    runner.__dict__.update(
        is_hybrid_swa=mc.is_hybrid_swa,
        kv_cache_configurator=kvc,
        token_to_kv_pool_allocator=None,
        max_total_num_tokens=config.max_total_num_tokens,
        full_max_total_num_tokens=config.full_max_total_num_tokens,
        swa_max_total_num_tokens=config.swa_max_total_num_tokens,
        max_running_requests=config.max_running_requests,
        req_to_token_pool=pool,
        token_to_kv_pool=types.SimpleNamespace(size=config.max_total_num_tokens),
        forward_stream=None,
    )
    worker = types.SimpleNamespace(model_runner=runner, model_config=mc, dllm_algorithm=None, random_seed=0,
                                   device="cuda")  # fmt: skip
    return SGL.TpModelWorker.get_worker_info(worker)[4]


def sliding_window_of(model, mc):
    """SGLang's resolve_sliding_window_size, with the model class's method when it has one."""
    try:
        return SGL.resolve_sliding_window_size(model, mc), None
    except AttributeError as e:  # a method that reads a sub-module (e.g. language_model) of a real instance
        return SGL.resolve_sliding_window_size(types.SimpleNamespace(), mc), f"model method unavailable: {e}"


_PARSER = None


def server_args(argv: list[str]):
    """``prepare_server_args(argv)`` without its ``--config`` merge and logging set-up, on one parser built
    once (building it takes most of a case's time)."""
    global _PARSER
    from sglang.srt.server_args import ServerArgs

    if _PARSER is None:
        _PARSER = argparse.ArgumentParser(prog="sglang serve")
        ServerArgs.add_cli_args(_PARSER)
    raw = _PARSER.parse_args(argv)
    raw._radix_eviction_policy_explicitly_set = any(a.startswith("--radix-eviction-policy") for a in argv)
    return ServerArgs.from_cli_args(raw)


def publish(argv: list[str]):
    """ServerArgs from a command line, resolved and published (rank 0 of the TP group)."""
    sa = server_args(argv)
    _attach_capture()
    SGL.rc.publish(sa, role="scheduler", ranks=SGL.rc.SpawnRanks(world_rank=0, gpu_id=0))
    SGL.rc.get_parallel().override_permanently(world_group=types.SimpleNamespace(cpu_group=None))
    return sa


@contextlib.contextmanager
def environment_restored():
    """Some flags reach SGLang's planners through environment variables (``--mamba-ssm-dtype`` sets
    ``SGLANG_MAMBA_SSM_DTYPE``, serving_hook.py): put os.environ and the env fields' explicit-None flags
    back after each case, so no case sees the one before it."""
    from sglang.srt.environ import EnvField, Envs

    fields = [f for f in vars(Envs).values() if isinstance(f, EnvField)]
    saved_env = dict(os.environ)
    saved_none = [f._set_to_none for f in fields]
    try:
        yield
    finally:
        os.environ.clear()
        os.environ.update(saved_env)
        for f, v in zip(fields, saved_none, strict=True):
            f._set_to_none = v


def kv_case(name: str, tmp: Path, **case) -> dict:
    """SGLang's pool plan for one configuration and budget (:func:`_kv_case`), environment restored after."""
    with environment_restored():
        return _kv_case(name, tmp, **case)


def _kv_case(
    name: str, tmp: Path, *, tp: int, page: int, kv_dtype: str, ctx: int | None, flags: list[str], budget: int
):
    """SGLang's pool plan for one configuration and budget (bytes available to the KV pool)."""
    argv = ["--model-path", model_dir(name, tmp), "--tp-size", str(tp), "--page-size", str(page)]
    argv += ["--kv-cache-dtype", kv_dtype]
    if ctx is not None:
        argv += ["--context-length", str(ctx)]
    argv += flags
    row = dict(
        model=name, tp=tp, page_size=page, kv_cache_dtype=kv_dtype, context_length=ctx, flags=flags, budget=budget
    )
    CAPTURE.lines = []
    STUB_CALLS.clear()
    stage = "server_args"
    try:
        sa = publish(argv)
        stage = "model_config"
        mc = SGL.ModelConfig.from_server_args(sa)
        sched = SGL.rc.get_schedule()
        mem = SGL.rc.get_memory()
        # PP 1: a built model reports start_layer 0 / end_layer = its layer count, which is what
        # resolve_layer_indices takes from an object without them.
        model = types.SimpleNamespace(config=mc.hf_config, quant_config=None)
        layer_info = SGL.resolve_layer_indices(model=model, model_config=mc, is_draft_worker=False)
        window, window_note = sliding_window_of(model_stand_in(mc), mc)
        res_str, kv_torch = SGL.kvd.configure_kv_cache_dtype(
            server_args_kv_cache_dtype=SGL.rc.get_model().kv_cache_dtype,
            model=model,
            model_dtype=mc.dtype,
            is_draft_worker=False,
            is_dflash=False,
            speculative_draft_attention_backend=None,
            speculative_draft_kv_cache_dtype=None,
        )
        resolved = dict(
            architecture=(mc.hf_config.architectures or [None])[0],
            context_len=mc.context_len,
            page_size=sched.page_size,
            kv_torch_dtype=str(kv_torch).replace("torch.", ""),
            model_dtype=str(mc.dtype).replace("torch.", ""),
            attention_arch=mc.attention_arch.name,
            is_hybrid_swa=bool(mc.is_hybrid_swa),
            is_multimodal=bool(mc.is_multimodal),
            num_kv_heads_per_rank=mc.get_num_kv_heads(SGL.rc.get_parallel().attn_tp_size),
            head_dim=mc.head_dim,
            v_head_dim=mc.v_head_dim,
            num_effective_layers=layer_info.num_effective_layers,
            full_attention_layers=len(layer_info.full_attention_layer_ids or []),
            swa_attention_layers=len(layer_info.swa_attention_layer_ids or []),
            sliding_window_size=window,
            swa_full_tokens_ratio=sched.swa_full_tokens_ratio,
            mamba_full_memory_ratio=sched.mamba_full_memory_ratio,
            disable_radix_cache=bool(mem.disable_radix_cache),
            chunked_prefill_size=sched.chunked_prefill_size,
            attention_backend=SGL.resolving_view(sa).attention_backend,
        )
        if window_note:
            resolved["sliding_window_note"] = window_note
        if resolved["attention_arch"] == "MLA":
            resolved.update(kv_lora_rank=mc.kv_lora_rank, qk_rope_head_dim=mc.qk_rope_head_dim)
        stage = "configurator"
        kvc = SGL.kvcm.KVCacheConfigurator(
            device="meta",
            gpu_id=0,
            attn_dp_size=SGL.rc.get_parallel().attn_dp_size,
            pp_size=1,
            pp_group=None,
            model=model,
            model_config=mc,
            server_args=sa,
            kv_cache_dtype=kv_torch,
            kv_cache_dtype_str=res_str if res_str is not None else SGL.rc.get_model().kv_cache_dtype,
            model_dtype=mc.dtype,
            page_size=sched.page_size,
            sliding_window_size=window,
            spec_algorithm=SGL.SpeculativeAlgorithm.from_string(SGL.rc.get_spec().speculative_algorithm),
            is_draft_worker=False,
            post_capture_kv_active=False,
            spec_aux_config=types.SimpleNamespace(
                draft_model_config=None, dflash_draft_num_layers=None, eagle_draft_num_layers=None
            ),
            is_hybrid_swa=mc.is_hybrid_swa,
            is_hybrid_swa_compress=mc.is_hybrid_swa_compress,
            use_mla_backend=mc.attention_arch == SGL.AttentionArch.MLA,
            layer_info=layer_info,
            forward_stream=None,
            req_to_token_pool=None,
            token_to_kv_pool_allocator=None,
            memory_pool_config=None,
        )
        mamba = kvc.mambaish_config
        if mamba is not None:
            params = mamba.mamba2_cache_params
            resolved.update(
                mamba_layers=len(params.layers),
                mamba_cache_per_req=int(params.mamba_cache_per_req),
                mamba_conv_shapes=[list(s) for s in params.shape.conv],
                mamba_temporal_shape=list(params.shape.temporal),
                mamba_conv_dtype=str(params.dtype.conv).replace("torch.", ""),
                mamba_temporal_dtype=str(params.dtype.temporal).replace("torch.", ""),
                mamba_slots_per_request=kvc._calculate_mamba_ratio(),
                mamba_attention_layers=len(mamba.full_attention_layer_ids),
            )
        configurator = SGL.pc.create_memory_pool_configurator(kvc)
        resolved["pool_configurator"] = type(configurator).__name__
        for attr in (
            "_cell_size",
            "_full_per_token",
            "_swa_per_token",
            "_full_layers_num",
            "_swa_layers_num",
            "_swa_cap",
        ):
            if hasattr(configurator, attr):
                v = getattr(configurator, attr)
                resolved[attr.lstrip("_")] = v if isinstance(v, (int, float)) else str(v)
        row["resolved"] = resolved
        stage = "plan"
        STUB_CALLS.clear()
        SGL.kvcm.get_available_gpu_memory = lambda *a, **k: budget / GIB
        # pre_model_load_memory: the slack pre * (1 - mem_fraction_static) is ~1e-31 GiB, below a float's
        # resolution at the budget, so rest_memory == budget exactly; not 0, which the "no memory left"
        # refusal divides by (its suggested fractions are then meaningless; the refusal itself is not).
        config = kvc._resolve_memory_pool_config(PRE_MODEL_LOAD_STAND_IN)
        result = dict(
            max_total_num_tokens=config.max_total_num_tokens,
            full_max_total_num_tokens=config.full_max_total_num_tokens,
            swa_max_total_num_tokens=config.swa_max_total_num_tokens,
            max_running_requests=config.max_running_requests,
            max_mamba_cache_size=SGL.rc.get_schedule().max_mamba_cache_size if mamba is not None else None,
        )
        stage = "req_to_token"
        pool = kvc._build_req_to_token_pool(max_num_reqs=config.max_running_requests)
        result["req_to_token_shape"] = list(pool.req_to_token.shape)  # int32: bytes = rows x cols x 4
        assert pool.req_to_token.dtype == SGL.torch.int32
        if mamba is not None and hasattr(pool, "mamba_pool"):
            mp = pool.mamba_pool
            cache = getattr(mp, "mamba_cache", None)
            tensors = []
            if cache is not None:
                for t in list(getattr(cache, "conv", []) or []) + [getattr(cache, "temporal", None)]:
                    if t is not None and hasattr(t, "shape"):
                        tensors.append(dict(shape=list(t.shape), dtype=str(t.dtype).replace("torch.", "")))
            result["mamba_pool_bytes"] = sum(
                SGL.torch.Size(t["shape"]).numel() * getattr(SGL.torch, t["dtype"]).itemsize for t in tensors
            )
        stage = "worker_info"
        result["max_req_len"] = worker_max_req_len(kvc, mc, config, pool)
        row.update(ok=True, result=result)
    except Exception as e:  # noqa: BLE001 - a refusal is a row
        row.update(ok=False, stage=stage, error=f"{type(e).__name__}: {e}")
        if "Loaded weights leave no GPU memory" in str(e):
            # rest_memory <= 0 after the Mamba share; the fractions it suggests are computed from the
            # stand-in pre_model_load_memory, so only the first sentence is SGLang's answer here
            row["error"] = row["error"].split(" Raise ")[0]
        if stage in ("model_config", "configurator", "req_to_token") or STUB_CALLS:
            row["traceback_tail"] = traceback.format_exc(limit=-3).splitlines()[-6:]
    row["log"] = [ln for ln in CAPTURE.lines if _keep_log(ln)]
    if STUB_CALLS:
        row["stub_calls"] = sorted(set(STUB_CALLS))
    return row


_NOISE = (
    "not fully optimized",
    "Multimodal is disabled",
    "avail mem=",
    "pynvml",
    "Ignore import error",
    "re-projected the config bags",
    "SGLANG_USE_CUDA_IPC_TRANSPORT is deprecated",
)


def _keep_log(line: str) -> bool:
    return not any(n in line for n in _NOISE)


def kv_kind(name: str, tmp: Path) -> tuple[str, int]:
    """('swa' | 'mamba' | 'plain', SGLang's default context_len) from a default resolution of the model."""
    row = kv_case(name, tmp, tp=1, page=1, kv_dtype="auto", ctx=None, flags=[], budget=40 * GIB)
    r = row["resolved"]
    if "mamba_layers" in r:
        return "mamba", r["context_len"]
    if r.get("is_hybrid_swa"):
        return "swa", r["context_len"]
    return "plain", r["context_len"]


def kv_grid(quick: bool):
    """(model, tp, page, dtype, ctx, flags, budget) of every KV row."""
    tmp = Path(tempfile.mkdtemp(prefix="sglang-golden-"))
    for name, (_, tps, _) in MODELS.items():
        if quick and name not in QUICK_MODELS:
            continue
        kind, max_ctx = kv_kind(name, tmp)
        variants = FLAG_VARIANTS["all"] + FLAG_VARIANTS.get(kind, [])
        contexts = [c for c in CONTEXTS if c is None or c < max_ctx]
        for tp in tps[:2] if quick else tps:
            for dtype in KV_DTYPES:
                for budget in BUDGETS:
                    # default flags: every page size and context at the first budget, pages 1 and 64 at
                    # 4096 tokens and the model maximum at the others; flag variants at 4096-token contexts,
                    # page 1 at every budget and page 64 at the first
                    first = budget == BUDGETS[0]
                    for page in PAGE_SIZES if first else (1, 64):
                        for ctx in contexts if first else [c for c in contexts if c in (4096, None)]:
                            yield (
                                name,
                                kind,
                                tmp,
                                dict(tp=tp, page=page, kv_dtype=dtype, ctx=ctx, flags=[], budget=budget),
                            )
                    for flags in variants[1:]:
                        for page in (1, 64) if first else (1,):
                            yield (
                                name,
                                kind,
                                tmp,
                                dict(
                                    tp=tp, page=page, kv_dtype=dtype, ctx=min(4096, max_ctx), flags=flags, budget=budget
                                ),
                            )


# DP attention: each attention-DP group of tp / dp GPUs runs its own scheduler and pools (flags beyond the DP ones,
# by kind of model: the per-worker share of --max-running-requests, --max-mamba-cache-size and the SWA request cap)
DP_FLAG_VARIANTS = {
    "all": [[], ["--max-running-requests", "64"]],
    "swa": [["--disable-radix-cache", "--max-running-requests", "32"]],
    "mamba": [["--max-mamba-cache-size", "100"], ["--disable-radix-cache", "--max-running-requests", "48"]],
}


def kv_dp_grid(quick: bool):
    """(model, kind, tmp, case) of the DP-attention KV rows: every model at each TP of 2 or more and every DP
    width that divides it, page 1, the model's dtype, 4,096 tokens (or the model's maximum below that), both
    budgets."""
    tmp = Path(tempfile.mkdtemp(prefix="sglang-golden-"))
    for name, (_, tps, _) in MODELS.items():
        if quick and name not in QUICK_MODELS:
            continue
        kind, max_ctx = kv_kind(name, tmp)
        variants = DP_FLAG_VARIANTS["all"] + DP_FLAG_VARIANTS.get(kind, [])
        for tp in [t for t in tps if t >= 2]:
            for dp in [d for d in (2, 4, 8) if d <= tp and tp % d == 0]:
                if quick and dp != tp:
                    continue
                for budget in BUDGETS:
                    for extra in variants:
                        flags = ["--enable-dp-attention", "--dp-size", str(dp)] + extra
                        case = dict(tp=tp, page=1, kv_dtype="auto", ctx=min(4096, max_ctx), flags=flags, budget=budget)
                        yield name, kind, tmp, case


# The worked example (Qwen3-Next-80B bf16 TP1, 10 GiB; requests of 4096 tokens).
EXAMPLES = [
    ("qwen3-next-80b-a3b", dict(tp=1, page=1, kv_dtype="auto", ctx=None, flags=[], budget=10 * GIB)),
    ("qwen3-next-80b-a3b", dict(tp=1, page=1, kv_dtype="auto", ctx=4096, flags=[], budget=10 * GIB)),
    # refusals the grid does not reach: an SWA pool below one window (validate_swa_pool_size) and a
    # budget below one token per page (MemoryPoolConfig: "Not enough memory")
    (
        "gpt-oss-20b",
        dict(tp=1, page=1, kv_dtype="auto", ctx=4096, flags=["--swa-full-tokens-ratio", "0.001"], budget=GIB),
    ),
    ("llama3.3-70b", dict(tp=1, page=64, kv_dtype="auto", ctx=4096, flags=[], budget=64 * 327680 - 1)),
    ("llama3.3-70b", dict(tp=1, page=64, kv_dtype="auto", ctx=4096, flags=[], budget=64 * 327680)),
]


# --------------------------------------------------------------------------------------------------
# Budget: mem_fraction_static, chunked_prefill_size, CUDA-graph batch sizes per GPU
# --------------------------------------------------------------------------------------------------

# a dense MHA model, an MLA model (other CUDA-graph reserve), a multimodal one (adjust_mem_fraction_for_vlm)
BUDGET_MODELS = ["llama3.1-8b", "deepseek-v3", "qwen3.5-122b-a10b"]
BUDGET_FLAGS = [
    [],
    ["--disable-cuda-graph"],
    ["--disable-prefill-cuda-graph"],
    ["--chunked-prefill-size", "4096"],
    ["--chunked-prefill-size", "16384"],
    ["--chunked-prefill-size", "-1"],
    ["--cuda-graph-max-bs-decode", "64"],
    ["--max-running-requests", "32"],
    ["--enable-dp-attention", "--dp-size", "2"],
    ["--context-length", "8192"],
    ["--context-length", "32768"],
    # DP attention at every width a TP allows (the graph reserve grows with it; chunked_prefill_size is divided
    # by it after mem_fraction_static is resolved), the new flag's spelling, and with the flags it interacts with
    ["--enable-dp-attention", "--dp-size", "4"],
    ["--enable-dp-attention", "--dp-size", "8"],
    ["--attn-dp-size", "4"],
    ["--enable-dp-attention", "--dp-size", "2", "--chunked-prefill-size", "16384"],
    ["--enable-dp-attention", "--dp-size", "2", "--max-running-requests", "32"],
    ["--enable-dp-attention", "--dp-size", "2", "--disable-cuda-graph"],
]


def attn_dp_size(flags: list[str]) -> int:
    """The attention-DP width a flag list asks for (``--attn-dp-size N``, or ``--dp-size N`` with
    ``--enable-dp-attention``), 1 without it."""
    for flag in ("--attn-dp-size", "--dp-size"):
        if flag in flags and (flag == "--attn-dp-size" or "--enable-dp-attention" in flags):
            return int(flags[flags.index(flag) + 1])
    return 1


def budget_case(gpu: str, name: str, tmp: Path, tp: int, flags: list[str]) -> dict:
    """What ``handle_gpu_memory_settings`` resolves on ``gpu`` at ``tp``."""
    with environment_restored():
        return _budget_case(gpu, name, tmp, tp, flags)


def _budget_case(gpu: str, name: str, tmp: Path, tp: int, flags: list[str]) -> dict:
    GPU_STATE.update(GPUS[gpu])
    argv = ["--model-path", model_dir(name, tmp), "--tp-size", str(tp)] + flags
    row = dict(gpu=gpu, smi_total_mib=GPUS[gpu]["smi_total_mib"], model=name, tp=tp, flags=flags)
    CAPTURE.lines = []
    try:
        sa = publish(argv)
        cfg = SGL.resolving_view(sa)
        cg = cfg.cuda_graph_config
        row.update(
            ok=True,
            mem_fraction_static=cfg.mem_fraction_static,
            chunked_prefill_size=cfg.chunked_prefill_size,
            max_prefill_tokens=cfg.max_prefill_tokens,
            decode_graph_backend=str(cg.decode.backend),
            decode_graph_max_bs=cg.decode.max_bs,
            decode_graph_num_bs=len(cg.decode.bs or []),
            prefill_graph_backend=str(cg.prefill.backend),
            prefill_graph_max_bs=cg.prefill.max_bs,
            prefill_graph_num_bs=len(cg.prefill.bs or []),
            reserve_for_graph_mb=SGL.memory_hook.reserve_for_graph_mb(sa),
            attention_backend=cfg.attention_backend,
            page_size=cfg.page_size,
            post_capture_kv_sizing=SGL.memory_hook.post_capture_kv_sizing_planned(sa),
        )
    except Exception as e:  # noqa: BLE001
        row.update(ok=False, error=f"{type(e).__name__}: {e}")
    row["log"] = [ln for ln in CAPTURE.lines if _keep_log(ln)]
    return row


def profile_case(name: str, tmp: Path, pre_model_load_gb: float, after_load_gb: float, extra: list[str]) -> dict:
    """``_profile_available_bytes`` on an H100: KV budget from the free memory measured before the weights
    (``pre_model_load_memory``) and after them (``get_available_gpu_memory``), both GiB (2^30)."""
    with environment_restored():
        return _profile_case(name, tmp, pre_model_load_gb, after_load_gb, extra)


def _profile_case(name: str, tmp: Path, pre_model_load_gb: float, after_load_gb: float, extra: list[str]) -> dict:
    GPU_STATE.update(GPUS["H100-80GB"])
    row = dict(model=name, pre_model_load_gb=pre_model_load_gb, available_after_load_gb=after_load_gb, flags=extra)
    try:
        sa = publish(["--model-path", model_dir(name, tmp)] + extra)
        mc = SGL.ModelConfig.from_server_args(sa)
        model = types.SimpleNamespace(config=mc.hf_config, quant_config=None)
        layer_info = SGL.resolve_layer_indices(model=model, model_config=mc, is_draft_worker=False)
        window, _ = sliding_window_of(model_stand_in(mc), mc)
        kvc = SGL.kvcm.KVCacheConfigurator(
            device="meta", gpu_id=0, attn_dp_size=1, pp_size=1, pp_group=None, model=model, model_config=mc,
            server_args=sa, kv_cache_dtype=mc.dtype, kv_cache_dtype_str="auto", model_dtype=mc.dtype,
            page_size=SGL.rc.get_schedule().page_size, sliding_window_size=window,
            spec_algorithm=SGL.SpeculativeAlgorithm.from_string(None), is_draft_worker=False,
            post_capture_kv_active=False,
            spec_aux_config=types.SimpleNamespace(draft_model_config=None, dflash_draft_num_layers=None,
                                                  eagle_draft_num_layers=None),
            is_hybrid_swa=mc.is_hybrid_swa, is_hybrid_swa_compress=mc.is_hybrid_swa_compress,
            use_mla_backend=mc.attention_arch == SGL.AttentionArch.MLA, layer_info=layer_info,
            forward_stream=None, req_to_token_pool=None, token_to_kv_pool_allocator=None, memory_pool_config=None,
        )  # fmt: skip
        SGL.kvcm.get_available_gpu_memory = lambda *a, **k: after_load_gb
        mfs = SGL.rc.get_schedule().mem_fraction_static
        budget = kvc._profile_available_bytes(pre_model_load_gb)
        row.update(
            ok=True,
            mem_fraction_static=mfs,
            slack_gb=pre_model_load_gb * (1 - mfs),
            kv_budget_bytes=budget,
            max_mamba_cache_size=SGL.rc.get_schedule().max_mamba_cache_size,
        )
    except Exception as e:  # noqa: BLE001
        row.update(ok=False, error=f"{type(e).__name__}: {e}")
    return row


def budget_section(tmp: Path, platform: str, quick: bool) -> dict:
    rows = []
    gpus = [g for g, v in GPUS.items() if v["platform"] == platform]
    for gpu in gpus:
        for name in BUDGET_MODELS[:1] if quick else BUDGET_MODELS:
            for tp in (1, 2, 4, 8):
                for flags in BUDGET_FLAGS[:2] if quick else BUDGET_FLAGS:
                    dp = attn_dp_size(flags)
                    if dp > 1 and (tp < dp or tp % dp):  # SGLang asserts tp_size % attn_dp_size == 0
                        continue
                    rows.append(budget_case(gpu, name, tmp, tp, flags))
    profiles = []
    if platform == "cuda":
        # H100 80GB: torch.cuda.mem_get_info free at start ~79.2 GiB (CUDA context already taken)
        for name, after in (
            ("llama3.1-8b", 64.2),
            ("qwen3-next-80b-a3b", 30.0),
            ("qwen3-next-80b-a3b", 12.0),
            ("gpt-oss-20b", 66.0),
        ):
            for extra in ([], ["--mem-fraction-static", "0.9"]):
                profiles.append(profile_case(name, tmp, 79.2, after, extra))
    return dict(rows=rows, profile=profiles)


# --------------------------------------------------------------------------------------------------


def run_platform(platform: str, quick: bool) -> dict:
    """Everything that runs under one fake platform (the KV grid runs under CUDA only)."""
    import_sglang(platform)
    tmp = Path(tempfile.mkdtemp(prefix="sglang-golden-"))
    out = dict(budget=budget_section(tmp, platform, quick))
    if platform == "cuda":
        GPU_STATE.update(GPUS["H100-80GB"])
        rows = []
        t0 = time.time()
        for i, (name, kind, mtmp, case) in enumerate(itertools.chain(kv_grid(quick), kv_dp_grid(quick))):
            row = kv_case(name, mtmp, **case)
            row["kind"] = kind
            rows.append(row)
            if i % 200 == 0:
                print(f"  {i} rows, {time.time() - t0:.0f} s ({name})", file=sys.stderr, flush=True)
        examples = []
        for name, case in EXAMPLES:
            examples.append(kv_case(name, tmp, **case))
        out.update(kv_rows=rows, examples=examples)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=str(ROOT / "tests/fixtures/sglang_golden.json"))
    ap.add_argument("--quick", action="store_true", help="a few rows per section (a smoke run)")
    ap.add_argument("--platform", choices=["cuda", "hip"], help=argparse.SUPPRESS)  # child process
    ap.add_argument("--part", help=argparse.SUPPRESS)
    ap.add_argument("--one", help=argparse.SUPPRESS)
    ap.add_argument(
        "--check-isolation",
        type=int,
        default=0,
        metavar="N",
        help="re-run N rows, spread over the grid, each in a fresh process, and fail unless they match",
    )
    args = ap.parse_args()
    if args.one:  # child: one KV row in a fresh process (the isolation check)
        import_sglang("cuda")
        spec = json.loads(args.one)
        row = kv_case(spec.pop("model"), Path(tempfile.mkdtemp(prefix="sglang-golden-")), **spec)
        Path(args.part).write_text(json.dumps(row))
        return
    if args.platform:  # child: one platform's rows as JSON into --part
        part = run_platform(args.platform, args.quick)
        Path(args.part).write_text(json.dumps(part))
        return
    import subprocess

    t0 = time.time()
    parts = {}
    with tempfile.TemporaryDirectory() as td:
        for platform in ("cuda", "hip"):
            path = Path(td) / f"{platform}.json"
            cmd = [sys.executable, __file__, "--platform", platform, "--part", str(path)]
            if args.quick:
                cmd.append("--quick")
            subprocess.run(cmd, check=True)
            parts[platform] = json.loads(path.read_text())
        kv_rows = parts["cuda"]["kv_rows"]
        if args.check_isolation:
            step = max(1, len(kv_rows) // args.check_isolation)
            for row in kv_rows[step // 2 :: step][: args.check_isolation]:
                spec = dict(model=row["model"], tp=row["tp"], page=row["page_size"], kv_dtype=row["kv_cache_dtype"],
                            ctx=row["context_length"], flags=row["flags"], budget=row["budget"])  # fmt: skip
                path = Path(td) / "one.json"
                subprocess.run([sys.executable, __file__, "--one", json.dumps(spec), "--part", str(path)], check=True)
                fresh = json.loads(path.read_text())
                same = all(fresh.get(k) == row.get(k) for k in ("ok", "resolved", "result", "error"))
                print(f"isolation {'ok' if same else 'MISMATCH'}: {spec}", file=sys.stderr)
                if not same:
                    raise SystemExit(f"row differs when run alone: {spec}\n{row}\n{fresh}")
    from importlib.metadata import version

    # Shared tables: a row's "resolved" (the settings SGLang resolved, the same at every budget) and its
    # "log" lines are indices into them; what every resolution of a model agrees on is the model's
    # "resolved_common", left out of its rows' entries.
    resolved_ids: dict[str, int] = {}
    resolved_table: list[dict] = []
    log_ids: dict[str, int] = {}
    log_table: list[str] = []
    kinds = {}
    common: dict[str, dict] = {}
    for row in kv_rows:
        if "resolved" in row:
            seen = common.setdefault(row["model"], dict(row["resolved"]))
            for k in list(seen):
                if row["resolved"].get(k, object()) != seen[k]:
                    del seen[k]
    for row in kv_rows:
        kinds[row["model"]] = row.pop("kind", None)
        if "resolved" in row:
            row["resolved"] = {k: v for k, v in row["resolved"].items() if k not in common[row["model"]]}
            key = json.dumps(row["resolved"], sort_keys=True)
            if key not in resolved_ids:
                resolved_ids[key] = len(resolved_table)
                resolved_table.append(row["resolved"])
            row["resolved"] = resolved_ids[key]
        lines = []
        for line in row.pop("log", []):
            if line not in log_ids:
                log_ids[line] = len(log_table)
                log_table.append(line)
            lines.append(log_ids[line])
        if lines:
            row["log"] = lines
        if "result" in row:
            row["result"] = {k: v for k, v in row["result"].items() if v is not None}
    budget_rows = parts["cuda"]["budget"]["rows"] + parts["hip"]["budget"]["rows"]
    for row in budget_rows:
        lines = []
        for line in row.pop("log", []):
            if line not in log_ids:
                log_ids[line] = len(log_table)
                log_table.append(line)
            lines.append(log_ids[line])
        if lines:
            row["log"] = lines
    out = dict(
        sglang_version=version("sglang"),
        transformers_version=version("transformers"),
        torch_version=version("torch"),
        generated_by="scripts/sglang_golden.py",
        generated_on=datetime.date.today().isoformat(),
        assumptions=(
            "KV rows: one H100 80GB HBM3 (SM 9.0, nvidia-smi total 81559 MiB) per TP rank, CUDA code paths; "
            "the KV budget handed to _resolve_memory_pool_config as get_available_gpu_memory() with "
            "pre_model_load_memory=0 (no slack): rest_memory = budget; no speculative decoding, PP 1, DP 1 except "
            "the --enable-dp-attention rows (rank 0 of attention-DP group 0: its group's pools and requests); "
            "model objects without weights (quant_config None)."
        ),
        models={
            k: dict(config=v[0], tps=v[1], added_keys=v[2], kind=kinds.get(k), resolved_common=common.get(k, {}))
            for k, v in MODELS.items()
        },
        resolved=resolved_table,
        log_lines=log_table,
        kv_rows=kv_rows,
        examples=parts["cuda"]["examples"],
        budget=dict(
            rows=budget_rows,
            profile=parts["cuda"]["budget"]["profile"],
        ),
    )
    text = json.dumps(out, separators=(",", ":"))
    Path(args.out).write_text(text + "\n")
    n_ok = sum(r["ok"] for r in out["kv_rows"])
    print(
        f"{len(out['kv_rows'])} KV rows ({n_ok} planned, {len(out['kv_rows']) - n_ok} refused), "
        f"{len(out['budget']['rows'])} budget rows, {len(text):,} bytes -> {args.out} ({time.time() - t0:.0f} s)",
        file=sys.stderr,
    )


if __name__ == "__main__":
    sys.exit(main())
