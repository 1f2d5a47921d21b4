"""llama.cpp logs: settings, budget and figures (:mod:`kvplan.engines.llamacpp`'s rules).

llama.cpp sizes its cache by ``n_ctx``, not by memory: the figures are recomputed from the cells it printed
and the model's geometry (:func:`kvplan.engines.llamacpp.cache_bytes_per_cell`): the cache's size, its K and
V parts, its layers, the sliding-window cache's cells (:func:`kvplan.engines.llamacpp.swa_cells`), and the
per-device KV buffers (they add up to the cache; each a whole number of layers). The budget the what-ifs are
planned on: the device's free memory less the model, compute and output buffers it printed for that device
(one device), else the cache as allocated.
"""

from __future__ import annotations

from kvplan.fromlog import DIFFERS, INPUT, READ, REPRODUCED, LogFigure, ratio_figure

ENGINE = "llamacpp"
ENGINE_NAME = "llama.cpp"
KV_FIGURES = ("kv_size_mib", "k_mib", "kv_cells")
KV_LINES = ("'llama_kv_cache_unified: size = …'", "'KV self size = …'", "'llama_kv_cache_init: kv_size = …'")
MODEL_LINES = "'general.name'"
LABELS = {"kv_size_mib": "KV cache size (MiB)", "kv_cells": "cells"}
MIB = 1 << 20
TYPES = {"f16": "fp16", "bf16": "bf16", "f32": "fp32", "q8_0": "q8_0", "q4_0": "q4_0", "q4_1": "q4_1", "q5_0": "q5_0",
         "q5_1": "q5_1", "iq4_nl": "iq4_nl"}  # fmt: skip
READ_LABELS = {
    "free_at_start_mib": "device memory free at start (MiB)", "model_buffer_mib": "model buffer (MiB)",
    "model_buffer_mib_per_device": "model buffer per device (MiB)", "cpu_mapped_model_mib": "CPU_Mapped model (MiB)",
    "compute_buffer_mib": "compute buffer (MiB)", "compute_buffer_mib_per_device": "compute buffer per device (MiB)",
    "host_compute_buffer_mib": "host compute buffer (MiB)", "output_buffer_mib": "output buffer (MiB)",
    "model_size_gib": "model size (GiB)", "file_size_gib": "file size (GiB)",
}  # fmt: skip


def options(reading) -> dict:
    p, s = reading.printed, reading.settings
    out: dict = {}
    cells = p.get("kv_cells")
    n_seq = p.get("n_seq", 1) or 1
    if isinstance(cells, int):
        out["max_model_len"] = (cells // n_seq, "log (the cache's cells per sequence)")
    elif isinstance(p.get("n_ctx"), int):
        out["max_model_len"] = (p["n_ctx"] // n_seq, "log (n_ctx)")
    kt = s.get("cache_type_k")
    if kt in TYPES:
        out["kv_dtype"] = (TYPES[kt], "log (type_k)")
    out["tp"] = (1, "llama.cpp (layers split over devices, not heads)")
    seqs, unified = s.get("n_seq_max"), s.get("kv_unified")
    if isinstance(seqs, int) and seqs >= 1:  # the slots the context was made for (not llama-server's default -np)
        out["n_parallel"] = (seqs, "log (n_seq_max)")
        if unified in (0, 1, True, False, "true", "false"):
            out["kv_unified"] = (unified in (1, True, "true"), "log (kv_unified)")
        if isinstance(cells, int) and seqs > 1:  # -c: the cells of all slots (llama.cpp's n_ctx)
            out["ctx_size"] = (cells, "log (the cache's cells)")
    if isinstance(p.get("n_ubatch"), int):
        out["max_num_batched_tokens"] = (p["n_ubatch"], "log (n_ubatch)")
    if s.get("swa_full"):
        out["swa_full"] = (True, "log (full-size SWA cache)")
    return out


def _device_budget(reading) -> int | None:
    """Free device memory less the model, compute and output buffers of one device, B (None unless printed)."""
    p = reading.printed
    if "kv_buffer_mib_per_device" in p or "compute_buffer_mib_per_device" in p or "model_buffer_mib_per_device" in p:
        return None
    if not all(k in p for k in ("free_at_start_mib", "model_buffer_mib", "compute_buffer_mib")):
        return None
    rest = p["free_at_start_mib"] - p["model_buffer_mib"] - p["compute_buffer_mib"] - p.get("output_buffer_mib", 0)
    return int(rest * MIB)


def anchors(reading) -> list:
    out = []
    device = _device_budget(reading)
    if device is not None and device > 0:
        out.append(("value", "free device memory − model, compute and output buffers (the log)", device))
    kv = reading.printed.get("kv_size_mib")
    swa = reading.printed.get("swa_kv_size_mib", 0)
    if isinstance(kv, (int, float)):
        out.append(("value", "the cache as allocated (KV + SWA size, the log)", int((kv + swa) * MIB)))
    return out


def figures(ctx) -> list:
    from kvplan.dtypes import get_kv_dtype
    from kvplan.engines.llamacpp import cache_bytes_per_cell, swa_cells

    p, spec = ctx.reading.printed, ctx.spec
    out = []
    kt = get_kv_dtype(TYPES.get(p.get("k_type", "f16"), "fp16"))
    vt = get_kv_dtype(TYPES.get(p.get("v_type", "f16"), "fp16"))
    has_swa = "swa_kv_size_mib" in p or "swa_kv_cells" in p
    n, k, v = cache_bytes_per_cell(spec, kt, vt, False if has_swa else None)
    cells = p.get("kv_cells")
    if isinstance(cells, int):
        for key, per, label in (("kv_size_mib", k + v, "KV cache size"), ("k_mib", k, "K"), ("v_mib", v, "V")):
            if key in p:
                x = cells * per / MIB
                out.append(ratio_figure(ctx, key, f"{label} (MiB)", x, x, f"{cells:,} cells × {per:,} B per cell"))
    if "kv_layers" in p:
        out.append(
            LogFigure(
                "kv_layers",
                "layers of the cache",
                p["kv_layers"],
                n,
                REPRODUCED if n == p["kv_layers"] else DIFFERS,
                "the model's " + ("full-attention layers" if has_swa else "attention layers"),
            )
        )
    if has_swa:
        sn, sk, sv = cache_bytes_per_cell(spec, kt, vt, True)
        scells = p.get("swa_kv_cells")
        if isinstance(scells, int):
            for key, per, label in (("swa_kv_size_mib", sk + sv, "SWA cache size"), ("swa_k_mib", sk, "SWA K"),
                                    ("swa_v_mib", sv, "SWA V")):  # fmt: skip
                if key in p:
                    x = scells * per / MIB
                    out.append(ratio_figure(ctx, key, f"{label} (MiB)", x, x, f"{scells:,} cells × {per:,} B per cell"))
        if "swa_kv_layers" in p:
            out.append(
                LogFigure(
                    "swa_kv_layers",
                    "layers of the SWA cache",
                    p["swa_kv_layers"],
                    sn,
                    REPRODUCED if sn == p["swa_kv_layers"] else DIFFERS,
                    "the model's sliding layers",
                )
            )
        if isinstance(scells, int) and isinstance(cells, int):
            n_swa = p.get("n_swa", spec.sliding_window or 0)
            ubatch = p.get("n_ubatch", 512)
            fa = p.get("flash_attn")
            full = bool(ctx.reading.settings.get("swa_full"))
            if (isinstance(fa, int) or full) and isinstance(ubatch, int) and isinstance(n_swa, int):
                x = swa_cells(cells, n_swa, p.get("n_seq", 1) or 1, ubatch, bool(fa), full)
                out.append(
                    LogFigure(
                        "swa_kv_cells",
                        "SWA cache cells",
                        scells,
                        x,
                        REPRODUCED if x == scells else DIFFERS,
                        f"min(n_ctx, pad(n_swa {n_swa} + n_ubatch {ubatch}, {256 if fa else 32}))"
                        if not ctx.reading.settings.get("swa_full")
                        else "n_ctx (full-size SWA cache)",
                    )
                )
    if "kv_buffer_mib_per_device" in p and "kv_size_mib" in p:
        bufs = p["kv_buffer_mib_per_device"]
        per_layer = (k + v) * (cells or 0) / MIB / max(n, 1)
        layers = [b / per_layer if per_layer else 0 for b in bufs]
        whole = all(abs(x - round(x)) < 1e-6 for x in layers) and round(sum(layers)) == n
        total = sum(bufs)
        ok = abs(total - p["kv_size_mib"]) < 0.011 and whole
        out.append(LogFigure("kv_buffer_mib_per_device", "KV buffer per device (MiB)", bufs,
                             " + ".join(f"{round(x)} layers" for x in layers), REPRODUCED if ok else DIFFERS,
                             f"each device's buffer is whole layers of {per_layer:,.2f} MiB; they add up to the "
                             "cache"))  # fmt: skip
    for key in ("kv_cells", "n_ctx", "n_seq", "n_ubatch", "flash_attn", "n_swa", "k_type", "v_type"):
        if key in p:
            out.append(LogFigure(key, key, p[key], None, INPUT, "a setting"))
    for key, label in READ_LABELS.items():
        if key in p:
            out.append(LogFigure(key, label, p[key], None, READ, "measured by llama.cpp"))
    return out


def what_if_budget(rep, base: dict, new: dict) -> tuple[int, list]:
    return 0, []
