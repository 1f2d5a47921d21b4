"""vLLM logs: the settings a log states, where its budget comes from, and each printed figure recomputed.

The rules are :mod:`kvplan.engines.vllm`'s, by the log's version (the V0 engine: the ``0.6`` set whatever the
release; V1: the release's set). Figures:

- ``GPU KV cache size`` (per worker), ``# GPU blocks`` / ``num_gpu_blocks`` (the minimum over workers),
  ``Maximum concurrency``: the plan's counts at the budget (:class:`kvplan.engines.vllm.GroupPlan` /
  the V0 token plan), each worker's from its own line;
- ``# CPU blocks``: :func:`kvplan.engines.vllm.cpu_blocks` (``swap_space``, 4 GiB by default);
- ``Available KV cache memory`` / ``kv_cache_size`` / ``the rest of the memory reserved for KV Cache``: the
  budget, and again from the terms the log prints (requested − weights − activation − non-torch, by the
  version's formula, each term rounded: the sum is checked to the sum of the roundings);
- ``the current vLLM instance can use``: ``total × gpu_memory_utilization``;
- the not-enough-memory error: the KV one request of max_model_len needs, and vLLM's estimated maximum
  model length (:func:`kvplan.engines.vllm.estimate_max_model_len`); the V0 error's ``maximum number of tokens
  that can be stored``: blocks × block size;
- ``Add N padding layers, may waste at most P%``, ``Setting attention block size to N``, ``Padding mamba page
  size by P%``: the layout's.
"""

from __future__ import annotations

from kvplan.fromlog import (
    BUDGET,
    DIFFERS,
    INPUT,
    NOT_MODELLED,
    READ,
    REPRODUCED,
    LogFigure,
    budget_figure,
    count_figure,
    gib_range,
    overlaps,
    range_rounds_to,
    ratio_figure,
)  # fmt: skip
from kvplan.units import GIB

ENGINE = "vllm"
ENGINE_NAME = "vLLM"
KV_FIGURES = ("kv_tokens", "num_gpu_blocks", "available_kv_gib", "kv_cache_size_gib", "kv_cache_size_gib_per_rank",
              "kv_cache_memory_bytes", "max_concurrency", "estimated_max_model_len")  # fmt: skip
KV_LINES = ("'GPU KV cache size'", "'# GPU blocks'", "'Available KV cache memory'", "'Memory profiling results'",
            "'the rest of the memory reserved for KV Cache'")  # fmt: skip
MODEL_LINES = "'non-default args', 'args: Namespace(... model=...)', 'with config: model=', 'Starting to load model'"

LABELS = {
    "kv_cache_memory_bytes": "Current kv cache memory in use",
    "kv_tokens": "GPU KV cache size (tokens)",
    "num_gpu_blocks": "# GPU blocks",
    "available_kv_gib": "Available KV cache memory (GiB)",
    "kv_cache_size_gib": "KV cache size (GiB)",
    "kv_cache_memory_in_use_gib": "Current kv cache memory in use (GiB)",
}
READ_LABELS = {
    "weights_gib": "model weights (GiB)",
    "weights_reported_gib": "weights in the Free memory line (GiB)",
    "peak_activation_gib": "peak activation (GiB)",
    "non_torch_gib": "non-torch memory (GiB)",
    "non_torch_memory_gib": "non_torch_memory (GiB)",
    "non_torch_memory_gib_per_rank": "non_torch_memory per worker (GiB)",
    "cudagraph_gib": "CUDAGraph memory (GiB)",
    "cudagraph_capture_gib": "Graph capturing took (GiB)",
    "free_at_start_gib": "free memory on device at start (GiB)",
    "consumed_gib": "consumed memory, weights + non-torch (GiB)",
    "initial_memory_usage_gib": "initial_memory_usage (GiB)",
    "peak_torch_memory_gib": "peak_torch_memory (GiB)",
    "memory_usage_post_profile_gib": "memory_usage_post_profile (GiB)",
    "kv_cache_memory_fit_bytes": "--kv-cache-memory suggested to fit the requested memory",
    "kv_cache_memory_full_bytes": "--kv-cache-memory suggested to use the whole GPU",
}
KV_DTYPES = {"auto": None, "fp8": "fp8", "fp8_e4m3": "fp8_e4m3", "fp8_e5m2": "fp8_e5m2", "bfloat16": "bf16",
             "float16": "fp16", "fp8_inc": "fp8", "fp8_ds_mla": "fp8"}  # fmt: skip
DEFAULT_SWAP_BYTES = 4 * GIB  # CacheConfig.swap_space default, GiB (V0)


def options(reading) -> dict:
    """``{fit_options key: (value, where)}`` of the settings the log states, and the rule set of its version."""
    s = reading.settings
    out: dict = {}
    if reading.tp is not None:
        out["tp"] = (reading.tp, "log")
    if isinstance(reading.pp, int):
        out["pp"] = (reading.pp, "log")
    for key, name in (("max_model_len", "max_model_len"), ("gpu_memory_utilization", "gpu_memory_utilization"),
                      ("max_num_batched_tokens", "max_num_batched_tokens"), ("max_num_seqs", "max_num_seqs"),
                      ("block_size", "block_size"), ("enable_prefix_caching", "enable_prefix_caching")):  # fmt: skip
        if s.get(name) is not None:
            out[key] = (s[name], "log")
    kv = s.get("kv_cache_dtype")
    if isinstance(kv, str) and kv in KV_DTYPES:
        out["kv_dtype"] = (KV_DTYPES[kv], "log")
    if s.get("swap_space") is not None:
        out["swap_space"] = (s["swap_space"], "log")
    if reading.generation == "v0":
        out["engine_version"] = ("0.6", f"log (the V0 engine{': vLLM ' + reading.version if reading.version else ''})")
    elif reading.version:
        out["engine_version"] = (reading.version, f"log ({reading.version_source})")
    else:
        out["engine_version"] = ("0.11", "default (the V1 engine, version not in the log)")
    return out


def anchors(reading) -> list:
    """Where the budget comes from, most exact first."""
    out = [("bytes", "kv_cache_memory_bytes")]
    kv_setting = reading.settings.get("kv_cache_memory_bytes")
    if isinstance(kv_setting, int) and kv_setting > 0:
        out.append(("value", "--kv-cache-memory (non-default args)", kv_setting))
    return out + [
        ("measure", "kv_tokens", "kv_capacity_tokens"),
        ("measure", "num_gpu_blocks", "num_blocks"),
        ("gib", "kv_cache_memory_in_use_gib"),
        ("gib", "available_kv_gib"),
        ("gib", "kv_cache_size_gib"),
        ("gib", "kv_cache_size_gib_per_rank"),  # V0 with workers that differ: the first worker's
    ]


def _at(ctx, budget):
    result, _ = ctx.plan_at(budget)
    return result


def _worker_budgets(ctx):
    """Each worker's budget range from its own ``GPU KV cache size`` line (vLLM prints one per worker)."""
    from kvplan.fromlog import budget_range

    tokens = ctx.reading.per_worker.get("kv_tokens", [])
    seq = ctx.result.max_model_len
    found = {}  # each distinct count searched once: a log whose lines repeat costs what its distinct lines cost
    for t in dict.fromkeys(tokens):
        found[t] = budget_range(lambda b: int(ctx.cache.measures(b, seq)["kv_capacity_tokens"]), t) if t > 0 else None
    return [found[t] for t in tokens]


def plan_budget(ctx) -> tuple[int, str]:
    """(budget, why): the KV budget vLLM plans on. Each worker prints its own ``GPU KV cache size``; the engine
    then gives every worker the fewest blocks any has (vLLM 0.33 ``v1/core/kv_cache_planning.py``
    ``get_kv_cache_configs``: "Change the num_blocks of each rank to the smallest among all ranks"), so with
    workers whose counts differ the plan is counted on the smallest budget that gives that worker's count; else
    the context's budget, ``""``."""
    workers = [w for w in _worker_budgets(ctx) if w is not None]
    if len(workers) < 2:
        return ctx.budget, ""
    low = min(w[0] for w in workers)
    fewest, have = _at(ctx, low).num_blocks, ctx.result.num_blocks
    if low >= ctx.budget or fewest >= have:
        return ctx.budget, ""
    return low, (
        f"planned on the worker with the fewest blocks, {fewest:,} (the budget gives {have:,}): vLLM gives every "
        f"worker the smallest count (get_kv_cache_configs); {low:,} B is the smallest budget giving it"
    )


def figures(ctx) -> list:
    """Every figure of the log beside kvplan's (see the module docstring)."""
    r, res, cache, p = ctx.reading, ctx.result, ctx.cache, ctx.reading.printed
    lo, hi = ctx.budget_range
    at_lo = _at(ctx, lo) if lo != ctx.budget else res
    at_hi = _at(ctx, hi) if hi != ctx.budget else res
    rules = f"vLLM {res.engine_version} rules"
    out = []
    workers = _worker_budgets(ctx)
    if "kv_tokens" in p:
        how = f"{rules}: {res.num_blocks:,} blocks of {res.block_size} tokens"
        if res.kv_tokens_rule == "groups" and len(res.kv_cache_groups) > 1:
            how += f", // {len(res.kv_cache_groups)} groups"
        elif res.kv_tokens_rule == "concurrency":
            how += " (int(concurrency × max_model_len))"
        if ctx.anchor in ("kv_tokens",):
            out.append(LogFigure("kv_tokens", "GPU KV cache size (tokens)", p["kv_tokens"], res.kv_capacity_tokens,
                                 BUDGET, how + " (the budget was taken from it)"))  # fmt: skip
        else:
            out.append(count_figure(ctx, "kv_tokens", "GPU KV cache size (tokens)", res.kv_capacity_tokens, how,
                                    (at_lo.kv_capacity_tokens, at_hi.kv_capacity_tokens)))  # fmt: skip
    concs = r.per_worker.get("max_concurrency", [])
    if "max_concurrency" in p:
        if len(workers) == len(concs) and len(concs) > 1 and all(w is not None for w in workers):
            # each worker's concurrency from its own token line
            ok, shown = True, []
            for (blo, _), c in zip(workers, concs, strict=True):
                x = _at(ctx, blo).max_concurrency
                shown.append(f"{x:.2f}")
                ok = ok and range_rounds_to(x, x, c)
            out.append(LogFigure("max_concurrency", "Maximum concurrency (per worker)", concs, shown,
                                 REPRODUCED if ok else DIFFERS,
                                 f"{rules}: num_blocks / blocks per request of {res.max_model_len:,} tokens, each "
                                 "worker from its own GPU KV cache size line"))  # fmt: skip
        else:
            out.append(ratio_figure(ctx, "max_concurrency", "Maximum concurrency", at_lo.max_concurrency,
                                    at_hi.max_concurrency, f"{rules}: {_conc_how(res)}"))  # fmt: skip
    if "num_gpu_blocks" in p:
        if len(workers) > 1 and all(w is not None for w in workers):
            blocks = [_at(ctx, w[0]).num_blocks for w in workers]
            out.append(LogFigure("num_gpu_blocks", "num_gpu_blocks (the minimum over workers)", p["num_gpu_blocks"],
                                 min(blocks), REPRODUCED if min(blocks) == p["num_gpu_blocks"] else DIFFERS,
                                 f"each worker's blocks from its GPU KV cache size line: "
                                 f"{', '.join(map(str, blocks))}; "
                                 "vLLM allocates the minimum"))  # fmt: skip
        else:
            out.append(count_figure(ctx, "num_gpu_blocks", "# GPU blocks", res.num_blocks,
                                    f"{rules}: budget // {res.kv_bytes_per_block:,} B per block",
                                    (at_lo.num_blocks, at_hi.num_blocks)))  # fmt: skip
    if "num_cpu_blocks" in p:
        from kvplan.engines.vllm import cpu_blocks

        swap = ctx.reading.settings.get("swap_space")
        swap_bytes = int(swap * GIB) if isinstance(swap, (int, float)) else DEFAULT_SWAP_BYTES
        n = cpu_blocks(swap_bytes, res.kv_bytes_per_block)
        src = f"swap_space {swap} GiB" if swap is not None else "swap_space 4 GiB (the default)"
        out.append(LogFigure("num_cpu_blocks", "# CPU blocks", p["num_cpu_blocks"], n,
                             REPRODUCED if n == p["num_cpu_blocks"] else DIFFERS,
                             f"{src} // {res.kv_bytes_per_block:,} B per block (per worker)"))  # fmt: skip
    for key in ("kv_cache_memory_in_use_gib", "available_kv_gib", "kv_cache_size_gib"):
        if key in p and not (key == "available_kv_gib" and "kv_needed_gib" in p):
            out.append(budget_figure(ctx, key, LABELS[key]))
    if "kv_cache_memory_bytes" in p:
        out.append(LogFigure("kv_cache_memory_bytes", LABELS["kv_cache_memory_bytes"], p["kv_cache_memory_bytes"],
                             ctx.budget, BUDGET if ctx.anchor == "kv_cache_memory_bytes" else (
                                 REPRODUCED if ctx.budget_range[0] <= p["kv_cache_memory_bytes"] <= ctx.budget_range[1]
                                 else DIFFERS), "the KV budget, exact bytes"))  # fmt: skip
    out.extend(_terms(ctx))
    out.extend(_needed(ctx, at_lo, at_hi))
    if "padding_layers" in p:
        out.append(count_figure(ctx, "padding_layers", "padding layers", res.padding_layers,
                                f"{rules}: KV cache groups of {_group_size(res)} layers"))  # fmt: skip
    if "padding_waste_pct" in p:
        pct = _padding_pct(res)
        out.append(ratio_figure(ctx, "padding_waste_pct", "may waste at most (%)", pct, pct,
                                "padding layers / layers of that kind × 100 (kv_cache_utils.py)"))  # fmt: skip
    if "block_size" in p:
        block = getattr(getattr(cache, "layout", None), "attention_block_size", res.block_size)
        out.append(count_figure(ctx, "block_size", "attention block size (tokens)", block,
                                "the attention page scaled to cover the Mamba page "
                                "(platforms/interface.py)"))  # fmt: skip
    if "mamba_page_padding_pct" in p:
        pct = _mamba_padding(ctx)
        out.append(ratio_figure(ctx, "mamba_page_padding_pct", "Mamba page padded by (%)", pct, pct,
                                "(attention page − Mamba page) / Mamba page × 100"))  # fmt: skip
    for key in ("max_model_len", "concurrency_tokens"):
        if key in p:
            out.append(LogFigure(key, "max_model_len (tokens)", p[key], res.max_model_len, INPUT, "the setting"))
    for key in ("total_gib", "total_gpu_memory_gib"):
        if key in p:
            out.append(LogFigure(key, "GPU total memory (GiB)", p[key], round(res.gpu_total_bytes / GIB, 2), INPUT,
                                 "the GPU"))  # fmt: skip
    if "encoder_cache_budget_tokens" in p:
        out.append(LogFigure("encoder_cache_budget_tokens", "encoder cache budget (tokens)",
                             p["encoder_cache_budget_tokens"], None, NOT_MODELLED,
                             "the multimodal encoder cache: kvplan plans the language model's KV cache"))  # fmt: skip
    if "kv_cache_size_gib_per_rank" in p:
        first = p["kv_cache_size_gib_per_rank"][0]
        lo_, hi_ = ctx.budget_range
        ok = overlaps((lo_, hi_), gib_range(first)) or ctx.anchor == "kv_cache_size_gib_per_rank"
        out.append(LogFigure("kv_cache_size_gib_per_rank", "KV Cache per worker (GiB)", p["kv_cache_size_gib_per_rank"],
                             round(ctx.budget / GIB, 2), BUDGET if ctx.anchor == "kv_cache_size_gib_per_rank" else (
                                 REPRODUCED if ok else DIFFERS), "the first worker's is the budget; the others "
                             "differ by their non-torch memory (read)"))  # fmt: skip
    for key, label in READ_LABELS.items():
        if key in p:
            out.append(LogFigure(key, label, p[key], None, READ, "measured by vLLM"))
    return out


def _conc_how(res) -> str:
    if res.engine_version == "0.6":
        return f"{res.num_blocks:,} blocks × {res.block_size} / {res.max_model_len:,}"
    return f"{res.num_blocks:,} blocks / {res.blocks_per_request:,} blocks per request of {res.max_model_len:,} tokens"


def _group_size(res) -> int:
    return max((g["layers"] for g in res.kv_cache_groups), default=0)


def _padding_pct(res) -> float:
    """vLLM's warning: padding layers over the layers of the kind that needed them, in percent."""
    size = _group_size(res)
    by_kind: dict = {}
    for g in res.kv_cache_groups:
        by_kind[g["kind"]] = by_kind.get(g["kind"], 0) + g["layers"]
    for n in by_kind.values():
        pad = -(-n // size) * size - n
        if pad:
            return pad / n * 100
    return 0.0


def _mamba_padding(ctx) -> float:
    from kvplan.engines.vllm import state_bytes

    layout = getattr(ctx.cache, "layout", None)
    padded = getattr(layout, "mamba_page_padded", None)
    states = [x for x in ctx.spec.layers if x.state is not None]
    if not padded or not states:
        return 0.0
    raw = max(state_bytes(x.state, ctx.spec.dtype, ctx.result.tensor_parallel_size) for x in states)
    return (padded - raw) / raw * 100


def _terms(ctx) -> list:
    """The budget again from the terms the log prints, by the version's formula; each term is rounded to
    0.01 GiB, so the check allows the sum of the roundings."""
    p = ctx.reading.printed
    out = []
    total = p.get("total_gpu_memory_gib", p.get("total_gib"))
    util = ctx.reading.settings.get("gpu_memory_utilization")
    if "requested_gib" in p and total is not None and isinstance(util, (int, float)):
        lo, hi = gib_range(total)
        out.append(ratio_figure(ctx, "requested_gib", "requested memory, total × gpu_memory_utilization (GiB)",
                                lo * util / GIB, hi * util / GIB, f"{total} GiB × {util}"))  # fmt: skip

    def have(*keys):  # each term printed (a line may be cut, or another format may print part of them)
        return all(isinstance(p.get(k), (int, float)) for k in keys)

    if have("kv_cache_size_gib", "peak_torch_memory_gib", "non_torch_memory_gib") and total is not None and util:
        # V0 0.6.4 (worker/worker.py:215): total × U − peak torch (weights included) − non-torch
        x = total * util - p["peak_torch_memory_gib"] - p["non_torch_memory_gib"]
        out.append(_sum_figure("kv_cache_size_gib", "kv_cache_size from its terms (GiB)", p["kv_cache_size_gib"], x,
                               3, f"{total} × {util} − peak_torch {p['peak_torch_memory_gib']} − non_torch "
                               f"{p['non_torch_memory_gib']} (vLLM 0.6.4 worker.py)"))  # fmt: skip
    elif have("kv_cache_size_gib", "requested_gib", "peak_activation_gib", "weights_gib", "non_torch_memory_gib"):
        # V0 0.6.5-0.10 (worker/worker.py): requested − weights − non-torch − activation
        w = p.get("weights_gib")
        x = p["requested_gib"] - w - p["non_torch_memory_gib"] - p["peak_activation_gib"]
        out.append(_sum_figure("kv_cache_size_gib", "KV Cache from its terms (GiB)", p["kv_cache_size_gib"], x, 4,
                               f"{p['requested_gib']} − weights {w} − non_torch {p['non_torch_memory_gib']} − "
                               f"activation {p['peak_activation_gib']} (V0 worker.py)"))  # fmt: skip
    if "available_kv_gib" in p and "requested_gib" in p and "peak_activation_gib" in p:
        a = p["peak_activation_gib"]
        if "consumed_gib" in p:  # 0.27+: requested − consumed (weights + non-torch) − activation (graphs included)
            x = p["requested_gib"] - p["consumed_gib"] - a
            how = f"{p['requested_gib']} − consumed {p['consumed_gib']} − activation {a} (0.27+ gpu_worker.py)"
            out.append(_sum_figure("available_kv_gib", "Available KV cache memory from its terms (GiB)",
                                   p["available_kv_gib"], x, 3, how))  # fmt: skip
        elif "weights_reported_gib" in p and _version(ctx) < (0, 18, 0):
            # 0.10.2-0.17: requested − weights − activation − non-torch (the CUDA graphs come after the pool)
            x = p["requested_gib"] - p["weights_reported_gib"] - a - p["non_torch_gib"]
            how = (f"{p['requested_gib']} − weights {p['weights_reported_gib']} − activation {a} − non-torch "
                   f"{p['non_torch_gib']} (gpu_worker.py; the CUDA graphs are captured after the pool)")  # fmt: skip
            out.append(_sum_figure("available_kv_gib", "Available KV cache memory from its terms (GiB)",
                                   p["available_kv_gib"], x, 4, how))  # fmt: skip
    return out


def _version(ctx) -> tuple:
    from kvplan.engines import parse_version

    return parse_version(ctx.opts.engine_version) or (0, 0, 0)


def _sum_figure(key, label, printed, value, terms: int, how: str) -> LogFigure:
    """A figure computed from ``terms`` printed values rounded to 0.01: within ±(terms × 0.005) + 0.005."""
    ok = abs(value - printed) <= terms * 0.005 + 0.005 + 1e-9
    return LogFigure(key + "_terms", label, printed, f"{value:.3f}", REPRODUCED if ok else DIFFERS,
                     how + f" (each term rounded: within ±{terms * 0.005 + 0.005:.3f})")  # fmt: skip


def _needed(ctx, at_lo, at_hi) -> list:
    """The not-enough-memory error's figures: KV needed for one request of max_model_len, and the estimated
    maximum model length (V1); the V0 error's maximum tokens that can be stored (blocks × block size)."""
    from kvplan.engines.vllm import estimate_max_model_len

    p, res, cache = ctx.reading.printed, ctx.result, ctx.cache
    out = []

    def needed(length):
        return sum(d * u for d, u in zip(cache.demand(length), cache.unit_bytes, strict=True))

    if "kv_needed_gib" in p:
        x = needed(res.max_model_len) / GIB
        out.append(
            ratio_figure(
                ctx,
                "kv_needed_gib",
                "KV cache needed for one request (GiB)",
                x,
                x,
                f"one request of {res.max_model_len:,} tokens, every layer (max_memory_usage_bytes)",
            )
        )
        out.append(budget_figure(ctx, "available_kv_gib", LABELS["available_kv_gib"]))
    if "estimated_max_model_len" in p:
        lo, hi = ctx.budget_range
        a = estimate_max_model_len(needed, lo, res.max_model_len)
        b = estimate_max_model_len(needed, hi, res.max_model_len)
        out.append(count_figure(ctx, "estimated_max_model_len", "estimated maximum model length", a,
                                "the longest length whose KV fits the available memory (binary search, "
                                "kv_cache_utils.py estimate_max_model_len)", (a, b)))  # fmt: skip
    return out


def what_if_budget(rep, base: dict, new: dict) -> tuple[int, list]:
    """(budget change, notes) of a what-if: a TP change re-splits the weights (the log's per-GPU weights × old
    TP / new TP, else kvplan's weights model); a memory-fraction change moves ``total × fraction``; the
    activation, non-torch and CUDA-graph memory are kept as the log's."""
    from kvplan.weights import weights_per_gpu

    delta, notes = 0, []
    p = rep.reading.printed
    tp0, tp1 = base.get("tp", 1), new.get("tp", 1)
    pp0, pp1 = base.get("pp") or 1, new.get("pp") or 1
    if (tp0, pp0) != (tp1, pp1):  # the weights are split over TP × PP GPUs
        g0, g1 = tp0 * pp0, tp1 * pp1
        w = p.get("weights_gib")
        if isinstance(w, (int, float)):
            w0 = int(w * GIB)
            w1 = w0 * g0 // g1
            what = f"{tp0} / {tp1}" if pp0 == pp1 else f"{g0} / {g1} GPUs (TP × PP)"
            notes.append(f"weights per GPU {w0 / GIB:.2f} GiB (the log) × {what} = {w1 / GIB:.2f} GiB")
        else:
            w0 = weights_per_gpu(rep.spec, base.get("weights_dtype"), tp0, pp0)[0]
            w1 = weights_per_gpu(rep.spec, base.get("weights_dtype"), tp1, pp1)[0]
            notes.append(f"weights per GPU {w0 / GIB:.2f} → {w1 / GIB:.2f} GiB (kvplan's weights model)")
        delta += w0 - w1
        notes.append("activation and non-torch memory kept as the log's (NCCL buffers and the activation per GPU "
                     "change with TP and PP too: modelled, not measured)")  # fmt: skip
    u0, u1 = base.get("gpu_memory_utilization"), new.get("gpu_memory_utilization")
    if u1 is not None and u0 != u1:
        if u0 is None:
            u0 = 0.9
            notes.append("gpu_memory_utilization not in the log: 0.9 (vLLM's default) taken")
        total = rep.gpu.cuda_total_bytes
        delta += int(total * u1) - int(total * u0)
        notes.append(f"requested memory {u0} → {u1} × {total / GIB:.2f} GiB")
    if new.get("max_num_seqs") != base.get("max_num_seqs") or (
        new.get("max_num_batched_tokens") != base.get("max_num_batched_tokens")
    ):
        notes.append("the activation peak is kept as the log's (vLLM profiles max_num_batched_tokens and a "
                     "sampler of max_num_seqs rows: it changes with them)")  # fmt: skip
    return delta, notes


def weights_bytes(reading) -> int | None:
    """The weights per GPU the log prints (``Model loading took`` / ``Loading model weights took``), B."""
    w = reading.printed.get("weights_gib")
    return int(w * GIB) if isinstance(w, (int, float)) and w > 0 else None
