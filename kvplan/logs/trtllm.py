"""TensorRT-LLM start-up logs (the C++ ``KVCacheManager``, ``tensorrt_llm/_torch/pyexecutor``), read into a
:class:`kvplan.logs.LogReading`.

Formats:

- ``Memory usage when calculating max tokens in paged kv cache: total: T GiB, available: A GiB``
  (``_util.py`` ``KvCacheCreator``; ``available`` = free after the engine, activations and buffers).
- ``Number of blocks in KV cache primary pool: N``; ``Number of tokens per block: B.``;
  ``Max KV cache blocks per sequence: M [window size=W], tokens per block=B, primary blocks=N, secondary
  blocks=S, max sequence length=L`` (1.x); ``Max KV cache pages per sequence: M [window size=W]``.
- ``[MemUsageChange] Allocated X GiB for max tokens in paged KV cache (N).`` (N = blocks × tokens per
  block); older releases ``Allocate N bytes for k/v cache.`` and ``Using N tokens in paged KV cache.``.
- ``Loaded engine size: X MiB``; ``Allocated X MiB for execution context memory.``; ``TensorRT-managed
  allocation in IExecutionContext creation: …, now: CPU c, GPU g (MiB)``; ``Allocated X GB|MB GPU memory
  for runtime buffers.`` / ``… for decoder.``
- ``Both free_gpu_memory_fraction and max_tokens are set (to F and N, respectively).``;
  ``max_seq_len=L, max_num_requests=R, max_num_tokens=T``.
"""

from __future__ import annotations

import re

from kvplan.logs import LogReading, clean, gib_bytes, integer, num

N = r"-?[\d,]*\d(?:\.\d+)?"


def _re(p: str):
    return re.compile(p.replace("{N}", N))


LINES = [
    (
        "usage",
        _re(
            r"Memory usage when calculating max tokens in paged kv cache: total: (?P<t>{N}) GiB, available: "
            r"(?P<a>{N}) GiB"
        ),
    ),
    ("primary", _re(r"Number of blocks in KV cache primary pool: (?P<n>\d+)")),
    ("tpb", _re(r"Number of tokens per block: (?P<n>\d+)")),
    (
        "blocks_per_seq",
        _re(
            r"Max KV cache blocks per sequence: (?P<m>\d+) \[window size=(?P<w>\d+)\], tokens per "
            r"block=(?P<tpb>\d+), primary blocks=(?P<p>\d+), secondary blocks=(?P<s>\d+), max sequence "
            r"length=(?P<l>\d+)"
        ),
    ),
    ("pages_per_seq", _re(r"Max KV cache pages per sequence: (?P<m>\d+)(?: \[window size=(?P<w>\d+)\])?")),
    ("allocated", _re(r"Allocated (?P<gib>{N}) GiB for max tokens in paged KV cache \((?P<n>\d+)\)")),
    ("allocate_bytes", _re(r"Allocate (?P<b>\d+) bytes for k/v cache")),
    ("using_tokens", _re(r"Using (?P<n>\d+) tokens in paged KV cache")),
    ("engine", _re(r"Loaded engine size: (?P<mib>{N}) MiB")),
    ("context", _re(r"Allocated (?P<mib>{N}) MiB for execution context memory")),
    ("now", _re(r"IExecutionContext creation: .*now: CPU \d+, GPU (?P<mib>\d+) \(MiB\)")),
    ("buffers", _re(r"Allocated (?P<x>{N}) (?P<u>GB|MB) GPU memory for (?P<what>runtime buffers|decoder)")),
    (
        "both",
        _re(r"Both free_gpu_memory_fraction and max_tokens are set \(to (?P<f>{N}) and (?P<n>\d+), respectively\)"),
    ),
    ("limits", _re(r"max_seq_len=(?P<l>\d+), max_num_requests=(?P<r>\d+), max_num_tokens=(?P<t>\d+)")),
    ("version", _re(r"TensorRT-LLM version: (?P<v>[\w.+-]+)")),
]


def parse(lines: list[str]) -> LogReading:
    """Read TensorRT-LLM start-up lines (see the module docstring).

    Returns:
        A :class:`~kvplan.logs.LogReading` with engine ``trtllm``.
    """
    r = LogReading(engine="trtllm", lines=len(lines))
    for raw in lines:
        line = clean(raw)
        hit = False
        for kind, pat in LINES:
            m = pat.search(line)
            if not m:
                continue
            hit = True
            g = m.groupdict()
            if kind == "usage":
                r.put("total_gib", num(g["t"]))
                r.put("available_gib", num(g["a"]))
                if r.gpu_total_bytes is None:
                    r.gpu_total_bytes = gib_bytes(num(g["t"]))
                    r.gpu_total_source = f"total: {g['t']} GiB"
            elif kind == "primary":
                r.put("num_blocks_primary", integer(g["n"]))
            elif kind == "tpb":
                r.put("tokens_per_block", integer(g["n"]))
                r.setting("tokens_per_block", integer(g["n"]))
            elif kind == "blocks_per_seq":
                r.put("tokens_per_block", integer(g["tpb"]))
                r.put("num_blocks_primary", integer(g["p"]))
                r.put("max_seq_len", integer(g["l"]))
                r.put("blocks_per_sequence", integer(g["m"]))
                r.setting("tokens_per_block", integer(g["tpb"]))
                r.setting("max_seq_len", integer(g["l"]))
            elif kind == "pages_per_seq":
                r.put("blocks_per_sequence", integer(g["m"]))
                if g.get("w"):
                    r.put("attention_window", integer(g["w"]))
            elif kind == "allocated":
                r.put("allocated_gib", num(g["gib"]))
                r.put("max_tokens", integer(g["n"]))
            elif kind == "allocate_bytes":
                r.put("kv_bytes", integer(g["b"]))
            elif kind == "using_tokens":
                r.put("max_tokens", integer(g["n"]))
            elif kind == "engine":
                r.put("engine_mib", num(g["mib"]))
            elif kind == "context":
                r.put("execution_context_mib", num(g["mib"]))
            elif kind == "now":
                r.put("gpu_now_mib", integer(g["mib"]))
            elif kind == "buffers":
                what = "runtime_buffers" if g["what"] == "runtime buffers" else "decoder"
                r.put(f"{what}_{g['u'].lower()}", num(g["x"]))
            elif kind == "both":
                r.put("free_gpu_memory_fraction", num(g["f"]))
                r.put("max_tokens_requested", integer(g["n"]))
                r.setting("free_gpu_memory_fraction", float(f"{num(g['f']):.7g}"))  # a float32 printed in full
                r.setting("max_tokens", integer(g["n"]))
            elif kind == "limits":
                r.put("max_seq_len", integer(g["l"]))
                r.put("max_num_requests", integer(g["r"]))
                r.put("max_num_tokens", integer(g["t"]))
                r.setting("max_seq_len", integer(g["l"]))
                r.setting("max_num_requests", integer(g["r"]))
                r.setting("max_num_tokens", integer(g["t"]))
            elif kind == "version":
                r.version, r.version_source = g["v"], f"printed: 'TensorRT-LLM version: {g['v']}'"
        if hit:
            r.matched += 1
    for key in ("tp_size", "kv_cache_dtype", "max_seq_len"):
        if key not in r.settings:
            r.missing.append(key)
    r.missing.append("model")
    return r
