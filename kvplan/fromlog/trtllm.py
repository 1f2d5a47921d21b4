"""TensorRT-LLM logs: settings, budget and figures (:mod:`kvplan.engines.trtllm`'s rules).

The budget: the exact bytes when printed (``Allocate N bytes for k/v cache``), else the smallest budget that
gives the printed ``max tokens`` (``(N)`` of ``Allocated X GiB for max tokens in paged KV cache``, or ``Using
N tokens``) under the version's block rule (:func:`kvplan.engines.trtllm.pool_blocks`), else the primary
blocks. Recomputed: the primary pool's blocks, ``max tokens`` = blocks × tokens per block, the GiB allocated,
and the budget rule itself: ``free_gpu_memory_fraction`` (0.9 by default) × the ``available`` memory printed,
or the ``max_tokens`` asked when both are set (the smaller wins), rounded up to whole blocks.
"""

from __future__ import annotations

from kvplan.fromlog import DIFFERS, INPUT, READ, REPRODUCED, LogFigure, count_figure, gib_range, ratio_figure
from kvplan.units import GIB

ENGINE = "trtllm"
ENGINE_NAME = "TensorRT-LLM"
KV_FIGURES = ("max_tokens", "num_blocks_primary", "allocated_gib", "kv_bytes", "available_gib")
KV_LINES = ("'Allocated X GiB for max tokens in paged KV cache'", "'Number of blocks in KV cache primary pool'",
            "'Memory usage when calculating max tokens in paged kv cache'")  # fmt: skip
MODEL_LINES = "model"
LABELS = {"max_tokens": "max tokens in paged KV cache", "num_blocks_primary": "primary pool blocks",
          "kv_bytes": "bytes for k/v cache", "allocated_gib": "Allocated (GiB)"}  # fmt: skip
DEFAULT_FRACTION = 0.9  # KvCacheConfig.free_gpu_memory_fraction
READ_LABELS = {
    "engine_mib": "engine size (MiB)", "execution_context_mib": "execution context (MiB)",
    "gpu_now_mib": "GPU memory after the context (MiB)", "runtime_buffers_gb": "runtime buffers (GB)",
    "runtime_buffers_mb": "runtime buffers (MB)", "decoder_gb": "decoder (GB)", "decoder_mb": "decoder (MB)",
    "available_gib": "available for the KV cache (GiB)",
}  # fmt: skip


def options(reading) -> dict:
    s = reading.settings
    out: dict = {}
    if isinstance(s.get("tokens_per_block"), int):
        out["block_size"] = (s["tokens_per_block"], "log")
    if isinstance(s.get("max_seq_len"), int):
        out["max_model_len"] = (s["max_seq_len"], "log")
    if s.get("free_gpu_memory_fraction") is not None:
        out["gpu_memory_utilization"] = (s["free_gpu_memory_fraction"], "log")
    if isinstance(s.get("max_num_tokens"), int):
        out["max_num_batched_tokens"] = (s["max_num_tokens"], "log")
    if reading.version:
        out["engine_version"] = (reading.version, "log")
    return out


def version_candidates() -> list:
    """The rule sets to try when the log does not print its version, newest first."""
    from kvplan.engines.trtllm import RULE_SETS

    return [r.version for r in RULE_SETS]


def anchors(reading) -> list:
    out = [
        ("bytes", "kv_bytes"),
        ("measure", "max_tokens", "kv_capacity_tokens"),
        ("measure", "num_blocks_primary", "num_blocks"),
        ("gib", "allocated_gib"),
    ]
    avail = reading.printed.get("available_gib")
    if isinstance(avail, (int, float)):
        frac = reading.settings.get("free_gpu_memory_fraction", DEFAULT_FRACTION)
        out.append(("value", "available_gib", max(0, int(avail * GIB * frac)),
                    f"free_gpu_memory_fraction {frac} × available {avail} GiB (TensorRT-LLM's budget)"))  # fmt: skip
    return out


def figures(ctx) -> list:
    from kvplan.engines.trtllm import pool_blocks, resolve_rules

    p, res = ctx.reading.printed, ctx.result
    rules = resolve_rules(ctx.opts.engine_version)
    block, per_token = res.block_size, res.kv_bytes_per_token
    out = []
    if "max_tokens" in p:
        out.append(count_figure(ctx, "max_tokens", "max tokens in paged KV cache", res.kv_capacity_tokens,
                                f"{res.num_blocks:,} blocks × {block}"))  # fmt: skip
    if "num_blocks_primary" in p:
        out.append(
            count_figure(
                ctx,
                "num_blocks_primary",
                "primary pool blocks",
                res.num_blocks,
                f"cdiv(budget // {per_token:,} B per token, {block}) (resource_manager.py)",
            )
        )
    if "allocated_gib" in p:
        x = res.kv_capacity_tokens * per_token / GIB
        out.append(ratio_figure(ctx, "allocated_gib", "Allocated (GiB)", x, x,
                                f"{res.kv_capacity_tokens:,} tokens × {per_token:,} B"))  # fmt: skip
    if "kv_bytes" in p:
        out.append(
            LogFigure(
                "kv_bytes",
                "bytes for k/v cache",
                p["kv_bytes"],
                ctx.budget,
                "budget" if ctx.anchor == "kv_bytes" else REPRODUCED,
                "the KV budget, exact bytes",
            )
        )
    # the budget rule: fraction × available, or max_tokens asked (the smaller), to whole blocks
    frac = ctx.reading.settings.get("free_gpu_memory_fraction", DEFAULT_FRACTION)
    asked = ctx.reading.settings.get("max_tokens")
    if "available_gib" in p and ("max_tokens" in p or "num_blocks_primary" in p) and per_token:
        lo, hi = gib_range(p["available_gib"])
        b_lo = pool_blocks(int(lo * frac), per_token, block, rules)
        b_hi = pool_blocks(int(hi * frac), per_token, block, rules)
        if isinstance(asked, int):
            cap = pool_blocks(asked * per_token, per_token, block, rules)
            b_lo, b_hi = min(b_lo, cap), min(b_hi, cap)
        printed = p.get("num_blocks_primary", p.get("max_tokens", 0) // block)
        ok = b_lo <= printed <= b_hi
        out.append(LogFigure("num_blocks_primary_budget", "primary blocks from free_gpu_memory_fraction × available",
                             printed, f"{b_lo:,} to {b_hi:,}", REPRODUCED if ok else DIFFERS,
                             f"{frac} × {p['available_gib']} GiB (each rounded) // {per_token:,} B per token, "
                             f"to blocks of {block} (TensorRT-LLM's budget)"))  # fmt: skip
    elif isinstance(asked, int) and "max_tokens" in p and per_token:
        cap = pool_blocks(asked * per_token, per_token, block, rules) * block
        out.append(LogFigure("max_tokens_asked", "max tokens from the max_tokens asked", p["max_tokens"], cap,
                             REPRODUCED if cap == p["max_tokens"] else DIFFERS,
                             f"max_tokens {asked:,} rounded up to whole blocks of {block}"))  # fmt: skip
    for key in (
        "tokens_per_block",
        "max_seq_len",
        "max_num_requests",
        "max_num_tokens",
        "free_gpu_memory_fraction",
        "max_tokens_requested",
        "total_gib",
        "blocks_per_sequence",
        "attention_window",
    ):
        if key in p:
            out.append(LogFigure(key, key, p[key], None, INPUT, "a setting, or the GPU"))
    for key, label in READ_LABELS.items():
        if key in p:
            if key == ctx.anchor:
                out.append(
                    LogFigure(
                        key,
                        label,
                        p[key],
                        round(ctx.budget / GIB, 2),
                        "budget",
                        f"the budget: free_gpu_memory_fraction {frac} × this (TensorRT-LLM's rule)",
                    )
                )
            else:
                out.append(LogFigure(key, label, p[key], None, READ, "measured by TensorRT-LLM"))
    return out


def what_if_budget(rep, base: dict, new: dict) -> tuple[int, list]:
    from kvplan.fromlog.vllm import what_if_budget as weights_moved

    delta, notes = weights_moved(rep, base, {k: v for k, v in new.items() if k != "gpu_memory_utilization"})
    u0, u1 = base.get("gpu_memory_utilization", DEFAULT_FRACTION), new.get("gpu_memory_utilization")
    avail = rep.reading.printed.get("available_gib")
    if u1 is not None and u0 != u1 and isinstance(avail, (int, float)):
        delta += int(avail * GIB * u1) - int(avail * GIB * u0)
        notes.append(f"free_gpu_memory_fraction {u0} → {u1} of the {avail} GiB available")
    return delta, notes
