"""The engine-log corpus (tests/fixtures/engine_logs/) read as budget cases: what each log printed, and the
GPU and settings a user would give kvplan for the same run.

Shared by tests/test_budget_corpus.py and scripts/budget_table.py (which writes docs/budget-validation.md and
kvplan/data/budget_residuals.py), so both read the logs the same way. A case is *predictable* when the log
names its model (``model_ref``), its GPU (a catalog name, or the total memory it printed) and a printed KV
budget; the other entries are listed with the reason.

Printed figures are in GiB with two decimals (SGLang's "GB" is 2^30 B too), except where the log prints
exact blocks or tokens: then the budget is those blocks' exact bytes.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from kvplan.calc import resolve_kv_dtype
from kvplan.errors import KvplanError
from kvplan.gpus import custom_gpu, get_gpu

try:
    from kvplan.loader import load_model
    from kvplan.options import FitOptions, get_engine
except ImportError:  # an older kvplan (scripts/budget_table.py --before runs the cases against main c492983)
    from kvplan.fit import FitOptions, get_engine
    from kvplan.loader import load_model

ROOT = Path(__file__).resolve().parent
CORPUS = ROOT / "fixtures" / "engine_logs"
GIB = 1 << 30

# how a log's quantization is stored, as kvplan's weight dtype names
QUANT_WEIGHTS = {
    "none": None,
    "fp8": "fp8",
    "awq": "int4",
    "gptq": "int4",
    "mxfp4": "mxfp4",
    "nvfp4": "nvfp4",
    "int8": "int8",
    "w8a16": "int8",
    "bitsandbytes": "int4",
}


@dataclass
class BudgetCase:
    """One corpus log as a budget case.

    Attributes:
        id: the corpus entry id.
        engine, version, generation: as the entry gives them.
        spec: the model (None: no geometry).
        gpu: the GPU a user would name (catalog), or one of the printed total; None when unknown.
        gpu_from: ``catalog`` or ``printed total``.
        opts: the log's settings as FitOptions.
        printed: GiB (or exact bytes for ``budget_exact``) of each term the log printed: ``budget``,
            ``weights``, ``activation``, ``non_torch``, ``cudagraph``.
        exact_budget: the budget is exact bytes (from printed blocks or tokens), not a rounded GiB figure.
        skip: why the case is not predictable ("" when it is).
    """

    id: str
    engine: str
    version: str | None
    generation: str | None
    entry: dict = field(repr=False)
    spec: object = None
    gpu: object = None
    gpu_from: str = ""
    opts: FitOptions | None = None
    printed: dict = field(default_factory=dict)
    exact_budget: bool = False
    skip: str = ""


DP_ATTENTION_2025 = (
    "SGLang of October 2025 (PR #11309, before 0.5.23) with DP attention 8 on B200: kvplan's DP-attention rules are "
    "0.5.23's; counted, these two runs would move the SGLang non-torch residual median from +3.5 to -4.8 GiB"
)
# Logs whose run kvplan's budget rules do not cover, with the reason (a stale entry fails a test).
NOT_MODELLED = {
    "vllm-vllm-2031-70b-main": "vLLM 0.2.x (PR #2031, December 2023): older than the oldest budget rules (0.5)",
    "vllm-vllm-2031-70b-pr": "vLLM 0.2.x (PR #2031, December 2023): older than the oldest budget rules (0.5)",
    "vllm-vllm-2031-7b-main": "vLLM 0.2.x (PR #2031, December 2023): older than the oldest budget rules (0.5)",
    "vllm-vllm-2031-7b-pr": "vLLM 0.2.x (PR #2031, December 2023): older than the oldest budget rules (0.5)",
    "vllm-17": "vLLM 0.2.5 (vllm-project/vllm#2136): older than the oldest budget rules (0.5)",
    "vllm-vllm-2136-a": "vLLM 0.2.3 (vllm-project/vllm#2136): older than the oldest budget rules (0.5)",
    "vllm-vllm-2136-b": "vLLM 0.2.4 (vllm-project/vllm#2136): older than the oldest budget rules (0.5)",
    **{
        f"vllm-vllm-4454-{run}": "vLLM main of 2024-04-29 (between 0.4.1 and 0.4.2): older than the oldest budget "
        "rules (0.5)"
        for run in ("llama2-gptq", "llama3-8b", "openhermes", "opt125m", "phi2-marlin", "zephyr-awq")
    },
    "vllm-vllm-5248": "vLLM of June 2024 (0.4.x or 0.5.0, the release not stated): mostly older than the oldest "
    "budget rules (0.5)",
    "vllm-vllm-21348": "vLLM with an LMCache KV connector (kv_transfer_config), which takes GPU buffers of its own",
    "sglang-sglang-11309-main": DP_ATTENTION_2025,
    "sglang-sglang-11309-pr": DP_ATTENTION_2025,
}


def _gib(x, pick=max) -> int | None:
    """GiB as bytes; a per-rank list as its ``pick`` (the budget: the smallest rank, which the engine applies)."""
    if isinstance(x, list):
        x = pick(float(v) for v in x) if x else None
    return None if x is None else round(float(x) * GIB)


def _gpu(entry: dict):
    """(GPU, how it was found): a catalog card named in the entry, else one of the printed total."""
    name = str(entry.get("gpu") or "")
    p = entry.get("printed") or {}
    low = name.lower()
    candidates = [re.sub(r"\s*\(.*$", "", name).strip()]  # the name as written, as a user would type it
    m = re.search(r"\b(h100|h200|h20|a100|a10g|a10|l40s|l40|l4|b200|b300|gb200|t4|v100|mi300x|mi325x)\b", low)
    if m:
        key = m.group(1)
        if key == "a100":
            key = "a100-40gb" if "40" in low else "a100-80gb"
        if key == "h100" and "pcie" in low:
            key = "h100-pcie"
        candidates.append(key)
    m = re.search(r"rtx\s*(\d{4})\b", low) or re.search(r"\b(3090|4090|5090)\b", low)
    if m:
        candidates.append(f"rtx{m.group(1)}")
    for key in candidates:
        if not key:
            continue
        try:
            return get_gpu(key), "catalog"
        except KvplanError:
            continue
    total = p.get("total_gib") or p.get("total_gpu_memory_gib")
    if total:
        return custom_gpu(_gib(total), f"{total} GiB (printed)"), "printed total"
    return None, ""


def _setting(s: dict, *names):
    for n in names:
        if s.get(n) is not None:
            return s[n]
    return None


def _fingerprints() -> dict[str, set[str]]:
    """``file.py:LINE`` -> the vLLM releases whose logger call sits there (tests/fixtures/vllm_budget_rules.yaml)."""
    data = yaml.safe_load((ROOT / "fixtures" / "vllm_budget_rules.yaml").read_text())["fingerprints"]
    out: dict[str, set[str]] = {}
    for version, calls in data.items():
        for where in calls.values():
            out.setdefault(str(where).split()[0], set()).add(version)
    return out


def inferred_vllm_version(entry: dict) -> str | None:
    """The oldest vLLM release whose logger line numbers (``[gpu_worker.py:298]``) match the entry's lines,
    evidence or notes; None when they name none."""
    text = (
        " ".join(entry.get("lines") or []) + f" {entry.get('engine_version_evidence') or ''} {entry.get('notes') or ''}"
    )
    table = _fingerprints()
    found = None
    for where in re.findall(r"([a-z_]+\.py:\d+)", text):
        versions = table.get(where)
        if versions:
            found = versions if found is None else (found & versions) or found
    if not found:
        return None
    return min(found, key=lambda v: tuple(int(x) for x in re.findall(r"\d+", v)[:3]))


def _options(entry: dict) -> FitOptions:
    s = entry.get("settings") or {}
    engine = get_engine(entry["engine"])
    tp = _setting(s, "tensor_parallel_size", "tp_size", "tp") or 1
    util = _setting(s, "gpu_memory_utilization", "mem_fraction_static", "free_gpu_memory_fraction",
                    "kv_cache_free_gpu_mem_fraction")  # fmt: skip
    quant = str((entry.get("checkpoint") or {}).get("quantization") or "none").lower()
    kv = _setting(s, "kv_cache_dtype", "kv_dtype")
    kv = None if kv in (None, "auto") else str(kv)
    kv = {"float8_e4m3fn": "fp8", "fp8_e4m3": "fp8"}.get(kv, kv)  # as the log spells it; older kvplans know "fp8"
    version = entry.get("engine_version")
    if engine.value == "vllm" and version is None:
        version = inferred_vllm_version(entry) or ("0.6" if entry.get("engine_generation") == "v0" else None)
    elif engine.value == "vllm" and entry.get("engine_generation") == "v0" and str(version) >= "0.8":
        version = "0.6"  # the V0 engine of a 0.8-0.10 release (VLLM_USE_V1=0): kvplan's V0 rules, not 0.8's V1
    extra = (
        {"enforce_eager": True} if s.get("enforce_eager") and "enforce_eager" in FitOptions.__dataclass_fields__ else {}
    )
    return FitOptions(
        **extra,
        engine=engine,
        tensor_parallel_size=int(tp),
        pipeline_parallel_size=int(_setting(s, "pipeline_parallel_size", "pp_size") or 1),
        max_model_len=_setting(s, "max_model_len", "context_length", "max_seq_len"),
        kv_dtype=kv,
        weights_dtype=QUANT_WEIGHTS.get(quant.split(":")[0]),
        gpu_memory_utilization=None if util is None else float(util),
        max_num_batched_tokens=_setting(s, "max_num_batched_tokens", "chunked_prefill_size", "max_num_tokens"),
        max_batch_size=_setting(s, "max_batch_size"),
        max_num_seqs=_setting(s, "max_num_seqs", "max_running_requests"),
        engine_version=None if version is None else str(version),
        **({"vllm_sampler": s["vllm_sampler"]} if s.get("vllm_sampler") else {}),
    )


def _printed(entry: dict) -> dict:
    """The terms a log printed, in bytes (rounded GiB figures as printed)."""
    p = entry.get("printed") or {}
    out = {}
    if entry["engine"] == "vllm":
        budget = _setting(p, "available_kv_gib", "kv_cache_size_gib", "kv_cache_size_gib_per_rank")
        out["weights"] = _gib(p.get("weights_gib"))
        out["activation"] = _gib(p.get("peak_activation_gib"))
        out["non_torch"] = _gib(_setting(p, "non_torch_gib", "non_torch_memory_gib", "non_torch_memory_gib_per_rank"))
        out["cudagraph"] = _gib(_setting(p, "cudagraph_gib", "cudagraph_capture_gib"))
    elif entry["engine"] == "sglang":
        budget = None
        if p.get("k_size_gb") is not None and p.get("v_size_gb") is not None:
            budget = float(p["k_size_gb"]) + float(p["v_size_gb"])
        elif p.get("kv_size_gb") is not None:
            budget = p["kv_size_gb"]
    elif entry["engine"] == "trtllm":
        budget = p.get("allocated_gib")
    else:
        budget = None
    out["budget"] = _gib(budget, min)
    return {k: v for k, v in out.items() if v is not None}


def load_cases() -> list[BudgetCase]:
    """Every corpus entry as a :class:`BudgetCase`, sorted by id."""
    cases = []
    for path in sorted(CORPUS.glob("*.yaml")):
        entry = yaml.safe_load(path.read_text())
        case = BudgetCase(entry["id"], entry["engine"], entry.get("engine_version"), entry.get("engine_generation"),
                          entry)  # fmt: skip
        case.printed = _printed(entry)
        ref = entry.get("model_ref")
        if ref:
            ref = str(ROOT.parent / ref) if str(ref).startswith("tests/") else ref
            try:
                case.spec = load_model(ref)
            except KvplanError as e:
                case.skip = f"model: {e}"
        case.gpu, case.gpu_from = _gpu(entry)
        case.opts = _options(entry)
        _exact_budget(case)
        if not case.skip and case.id in NOT_MODELLED:
            case.skip = NOT_MODELLED[case.id]
        if not case.skip:
            if case.spec is None:
                case.skip = "no model geometry (model_ref null)"
            elif case.gpu is None:
                case.skip = "no GPU named and no total printed"
            elif "budget" not in case.printed:
                case.skip = "no KV budget printed"
            elif (entry.get("checkpoint") or {}).get("quantization") is None:
                case.skip = "the checkpoint's quantization is not stated (its weights cannot be sized)"
            elif any("max_tokens are set" in line for line in entry.get("lines") or []):
                case.skip = "the KV pool was capped by kv_cache_config.max_tokens, not sized from memory"
            elif entry["engine"] == "llamacpp":
                case.skip = "llama.cpp has no KV budget (the cache is n_ctx cells)"
        cases.append(case)
    return cases


def _exact_budget(case: BudgetCase) -> None:
    """Replace a rounded printed budget by exact bytes when the log prints blocks or tokens."""
    p = case.entry.get("printed") or {}
    if case.spec is None:
        return
    try:
        from kvplan.engines.base import stage_cache
        from kvplan.options import stage_layers
    except ImportError:
        from kvplan.fit import stage_cache, stage_layers

    kv = resolve_kv_dtype(case.spec, case.opts.kv_dtype)
    try:
        ranges = stage_layers(case.spec.num_layers, case.opts.pipeline_parallel_size)
        per_token = stage_cache(case.spec, kv, case.opts.tensor_parallel_size, ranges[0]).bytes_per_token
    except KvplanError:
        return
    rounded = case.printed.get("budget")
    exact = None
    if case.engine == "vllm" and case.generation == "v0" and p.get("num_gpu_blocks"):
        exact = int(p["num_gpu_blocks"]) * 16 * per_token
    elif case.engine == "vllm" and case.generation == "v0" and p.get("kv_tokens") and "max_concurrency" not in p:
        # V0's "tokens that can be stored in KV cache" (raise_if_cache_size_invalid): num_gpu_blocks x 16
        exact = int(p["kv_tokens"]) * per_token
    elif case.engine == "vllm" and p.get("kv_cache_memory_bytes"):
        exact = int(p["kv_cache_memory_bytes"])
    elif case.engine == "sglang" and p.get("max_total_num_tokens") and rounded is not None:
        exact = int(p["max_total_num_tokens"]) * per_token
    elif case.engine == "trtllm" and p.get("max_tokens") and rounded is not None:
        exact = int(p["max_tokens"]) * per_token
    # exact bytes only where they agree with the printed GiB (the KV dtype the log does not state, an indexer
    # the log leaves out, would make them disagree): within its two-decimal rounding and 0.5 %
    if exact is not None and (rounded is None or abs(exact - rounded) <= max(0.006 * GIB, 0.005 * rounded)):
        case.printed["budget"] = exact
        case.exact_budget = True


def predict(case: BudgetCase):
    """kvplan's budget for the case from the GPU and settings alone (:func:`kvplan.fit.plan_fit`), or the
    UsageError / SpecError text."""
    from kvplan.fit import plan_fit

    try:
        return plan_fit(case.spec, case.gpu, case.opts)
    except KvplanError as e:
        return str(e)
