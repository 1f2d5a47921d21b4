"""SGLang logs: settings, budget and figures (:mod:`kvplan.engines.sglang`'s rules).

The budget is the printed token count (page size 1: a token is a slot) times the bytes a token costs on one
rank; the figures recomputed from it: ``K size`` / ``V size`` (MHA pools) or ``KV size`` (MLA), the
hybrid-SWA split (``full_layer_tokens`` / ``swa_layer_tokens``), ``max_running_requests``
(:func:`kvplan.engines.sglang.max_running_requests`), ``context_len`` (the model's), ``max_prefill_tokens``
(the default); with ``mem_fraction_static`` stated, the token count again from the printed memory:
``avail after weights − avail before weights × (1 − mem_fraction_static)`` (``model_runner.py
profile_max_num_token``, each figure rounded to 0.01 GB).
"""

from __future__ import annotations

from kvplan.fromlog import (
    DIFFERS,
    INPUT,
    NOT_MODELLED,
    READ,
    REPRODUCED,
    LogFigure,
    count_figure,
    ratio_figure,
)  # fmt: skip
from kvplan.units import GIB

ENGINE = "sglang"
ENGINE_NAME = "SGLang"
KV_FIGURES = ("max_total_num_tokens", "k_size_gb", "kv_size_gb", "full_layer_tokens")
KV_LINES = ("'KV Cache is allocated'", "'max_total_num_tokens='", "'Use sliding window memory pool'")
MODEL_LINES = "'server_args=ServerArgs(model_path=...)'"
LABELS = {"max_total_num_tokens": "max_total_num_tokens (#tokens)", "full_layer_tokens": "full_layer_tokens"}
KV_DTYPES = {"auto": None, "fp8_e4m3": "fp8_e4m3", "fp8_e5m2": "fp8_e5m2", "float8_e4m3fn": "fp8_e4m3",
             "float8_e5m2": "fp8_e5m2", "bfloat16": "bf16", "float16": "fp16"}  # fmt: skip
READ_LABELS = {
    "init_mem_usage_gb": "torch distributed init (GB)",
    "avail_before_weights_gb": "avail mem before weights (GB)",
    "avail_after_weights_gb": "avail mem after weights (GB)",
    "weights_gb": "weights (GB)",
    "avail_after_pool_gb": "avail mem after the pool (GB)",
    "avail_before_cuda_graph_gb": "avail mem before CUDA graphs (GB)",
    "avail_after_cuda_graph_gb": "avail mem after CUDA graphs (GB)",
    "cuda_graph_gb": "CUDA graphs (GB)",
    "input_tokens": "input length (tokens)",
    "max_total_tokens_requested": "max_total_tokens asked",
    "profiled_max_total_num_tokens": "profiled max_total_num_tokens",
}


def options(reading) -> dict:
    s = reading.settings
    out: dict = {}
    for name in ("tp_size", "tp", "tensor_parallel_size"):
        if isinstance(s.get(name), int):
            out["tp"] = (s[name], "log")
            break
    if s.get("mem_fraction_static") is not None:
        out["gpu_memory_utilization"] = (s["mem_fraction_static"], "log")
    kv = s.get("kv_cache_dtype")
    if isinstance(kv, str) and kv in KV_DTYPES:
        out["kv_dtype"] = (KV_DTYPES[kv], "log")
    if isinstance(s.get("page_size"), int):
        out["block_size"] = (s["page_size"], "log")
    ctx_len = reading.printed.get("context_len", s.get("context_length"))
    if isinstance(ctx_len, int):
        out["max_model_len"] = (ctx_len, "log (context_len)")
    chunk = reading.printed.get("chunked_prefill_size", s.get("chunked_prefill_size"))
    if isinstance(chunk, int):
        out["max_num_batched_tokens"] = (chunk, "log (chunked_prefill_size)")
    if reading.version:
        out["engine_version"] = (reading.version, "log")
    return out


def anchors(reading) -> list:
    return [
        ("measure", "full_layer_tokens", "num_blocks"),
        ("measure", "max_total_num_tokens", "kv_capacity_tokens"),
    ]


def figures(ctx) -> list:
    from kvplan.calc import resolve_kv_dtype
    from kvplan.engines.sglang import DEFAULT_MAX_PREFILL_TOKENS, kv_bytes_per_token, printed_max_running_requests

    p, res = ctx.reading.printed, ctx.result
    out = []
    tokens = p.get("max_total_num_tokens")
    kv = resolve_kv_dtype(ctx.spec, ctx.opts.kv_dtype)
    k, v, latent = kv_bytes_per_token(ctx.spec, kv, res.tensor_parallel_size)
    if tokens is not None:
        out.append(count_figure(ctx, "max_total_num_tokens", "max_total_num_tokens (#tokens)", res.kv_capacity_tokens,
                                f"budget // {res.kv_bytes_per_token:,} B per token"))  # fmt: skip
    if "full_layer_tokens" in p:
        full, swa = (c for _, c, _ in res.pools) if len(res.pools) == 2 else (res.kv_capacity_tokens, None)
        out.append(count_figure(ctx, "full_layer_tokens", "full_layer_tokens", full, "the hybrid-SWA split"))
        if "swa_layer_tokens" in p:
            out.append(LogFigure("swa_layer_tokens", "swa_layer_tokens", p["swa_layer_tokens"], swa,
                                 REPRODUCED if swa == p["swa_layer_tokens"] else DIFFERS,
                                 "int(full × swa_full_tokens_ratio 0.8), pages"))  # fmt: skip
    n = tokens if tokens is not None else res.kv_capacity_tokens
    for key, per, label in (("k_size_gb", k, "K size"), ("v_size_gb", v, "V size"), ("kv_size_gb", latent, "KV size")):
        if key in p:
            x = n * per / GIB
            out.append(ratio_figure(ctx, key, f"{label} (GB, i.e. GiB)", x, x,
                                    f"{n:,} tokens × {per:,} B per token per rank"))  # fmt: skip
    if "max_running_requests" in p and tokens is not None:
        ctx_len = p.get("context_len", res.max_model_len)
        x = printed_max_running_requests(tokens, ctx_len)
        out.append(
            LogFigure(
                "max_running_requests",
                "max_running_requests",
                p["max_running_requests"],
                x,
                REPRODUCED if x == p["max_running_requests"] else DIFFERS,
                f"min(max(int({tokens:,} / {ctx_len:,} × 512), 2048), 4096) + 1 (model_runner.py)",
            )
        )
    if "context_len" in p:
        x = ctx.spec.max_model_len
        out.append(
            LogFigure(
                "context_len",
                "context_len",
                p["context_len"],
                x,
                REPRODUCED if x == p["context_len"] else DIFFERS,
                "the model's max context",
            )
        )
    if "max_prefill_tokens" in p:
        given = ctx.reading.settings.get("max_prefill_tokens")
        x = given if isinstance(given, int) else DEFAULT_MAX_PREFILL_TOKENS
        out.append(
            LogFigure(
                "max_prefill_tokens",
                "max_prefill_tokens",
                p["max_prefill_tokens"],
                x,
                REPRODUCED if x == p["max_prefill_tokens"] else DIFFERS,
                "the setting" if isinstance(given, int) else "SGLang's default (server_args.py)",
            )
        )
    if "chunked_prefill_size" in p:
        out.append(LogFigure("chunked_prefill_size", "chunked_prefill_size", p["chunked_prefill_size"],
                             res.max_num_batched_tokens, INPUT, "the setting"))  # fmt: skip
    out.extend(_from_memory(ctx, k + v + latent))
    for key in ("mamba_cache_slots", "conv_state_gb", "ssm_state_gb"):
        if key in p:
            out.append(LogFigure(key, key, p[key], None, NOT_MODELLED,
                                 "SGLang's Mamba pool (its own slots and dtypes): not modelled"))  # fmt: skip
    if "max_allowed_length" in p:
        out.append(LogFigure("max_allowed_length", "maximum allowed input length", p["max_allowed_length"], None,
                             NOT_MODELLED, "the scheduler's input limit: not modelled"))  # fmt: skip
    for key, label in READ_LABELS.items():
        if key in p:
            out.append(LogFigure(key, label, p[key], None, READ, "measured by SGLang"))
    return out


def _from_memory(ctx, per_token: int) -> list:
    """The token count from the printed memory and ``mem_fraction_static``: ``int(rest × 2^30 // cell)``
    with ``rest = avail after weights − avail before weights × (1 − fraction)`` (GB figures rounded)."""
    p = ctx.reading.printed
    frac = ctx.opts.gpu_memory_utilization
    if not isinstance(frac, (int, float)) or "avail_after_weights_gb" not in p or "avail_before_weights_gb" not in p:
        return []
    if "max_total_num_tokens" not in p or per_token <= 0:
        return []
    a, b = p["avail_after_weights_gb"], p["avail_before_weights_gb"]
    lo = ((a - 0.005) - (b + 0.005) * (1 - frac)) * GIB // per_token
    hi = ((a + 0.005) - (b - 0.005) * (1 - frac)) * GIB // per_token
    t = p["max_total_num_tokens"]
    ok = lo <= t <= hi
    # a fraction that leaves less than nothing gives no tokens, not a negative count
    shown = f"{int(max(lo, 0)):,} to {int(max(hi, 0)):,}" if hi > 0 else "0 (no memory left at this fraction)"
    return [LogFigure("max_total_num_tokens_memory", "max_total_num_tokens from the memory figures", t,
                      shown, REPRODUCED if ok else DIFFERS,
                      f"({a} − {b} × (1 − {frac})) GiB // {per_token:,} B (model_runner.py profile_max_num_token; "
                      "each figure rounded)")]  # fmt: skip


def what_if_budget(rep, base: dict, new: dict) -> tuple[int, list]:
    from kvplan.fromlog.vllm import what_if_budget as weights_moved

    delta, notes = weights_moved(rep, base, {k: v for k, v in new.items() if k != "gpu_memory_utilization"})
    u0, u1 = base.get("gpu_memory_utilization"), new.get("gpu_memory_utilization")
    if u1 is not None and u0 is None:  # not in the log: the default SGLang resolved for the reading's GPU
        u0 = rep.result.gpu_memory_utilization
        notes.append(f"mem_fraction_static not in the log: {u0} (SGLang's default for this GPU and settings) taken")
    if u1 is not None and u0 is not None and u0 != u1:
        before = rep.reading.printed.get("avail_before_weights_gb")
        if isinstance(before, (int, float)):
            delta += int(before * GIB * (u1 - u0))
            notes.append(f"mem_fraction_static {u0} → {u1} of the {before} GB available at start")
    p = rep.reading.printed
    if "weights_gb" in p and base.get("tp", 1) != new.get("tp", 1):
        notes.insert(0, f"SGLang's weights per GPU: {p['weights_gb']} GB (the log)")
    return delta, notes


def weights_bytes(reading) -> int | None:
    """The weights per GPU the log prints (``Load weight end. … mem usage=X GB``), B."""
    w = reading.printed.get("weights_gb")
    return int(w * GIB) if isinstance(w, (int, float)) and w > 0 else None
