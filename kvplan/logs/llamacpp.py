"""llama.cpp start-up logs (``llama-context.cpp``, ``llama-kv-cache*.cpp``, ``llama-model-loader.cpp``; ollama
and LM Studio print the same lines), read into a :class:`kvplan.logs.LogReading`.

Formats (the function name before the colon changed across builds: ``llama_new_context_with_model`` /
``llama_kv_cache_init`` until early 2025, ``llama_context`` / ``llama_kv_cache_unified`` after):

- ``llama_context: n_ctx = N`` (``n_ctx_per_seq``, ``n_batch``, ``n_ubatch``, ``flash_attn``, ``n_seq_max``);
  ``print_info: n_swa = W``.
- ``llama_kv_cache_unified: size = X MiB (C cells, L layers, s/S seqs), K (type): a MiB, V (type): b MiB``;
  older ``llama_kv_cache_init: kv_size = C, offload = 1, type_k = 'f16', type_v = 'f16', n_layer = L`` and
  ``KV self size = X MiB, K (f16): a MiB, V (f16): b MiB``; interleaved SWA: ``creating non-SWA KV cache, size
  = C cells`` then ``creating SWA KV cache, size = C cells`` each followed by its ``size =`` line; ``using
  full-size SWA cache``.
- ``<DEV> KV buffer size = X MiB`` per device, ``<DEV> compute buffer size = X MiB`` (``<DEV>_Host`` for host
  memory), ``<DEV> output buffer size``; ``load_tensors: <DEV> model buffer size = X MiB`` (older
  ``llm_load_tensors: <DEV> buffer size``), ``CPU_Mapped`` for weights left in host memory.
- ``using device CUDA0 (NVIDIA GeForce RTX 3070) - 7100 MiB free``; ``model size = X GiB (B BPW)``;
  ``general.name = …``.
"""

from __future__ import annotations

import re

from kvplan.logs import LogReading, clean, integer, num

N = r"-?[\d,]*\d(?:\.\d+)?"


def _re(p: str):
    return re.compile(p.replace("{N}", N))


PARAM = _re(
    r"(?:llama_context|llama_new_context_with_model):\s+(?P<k>n_ctx_per_seq|n_ctx|n_batch|n_ubatch|flash_attn|n_seq_max|causal_attn|kv_unified|swa_full)\s*=\s*(?P<v>\S+)"
)
LINES = [
    (
        "size",
        _re(
            r"size\s*=\s*(?P<size>{N}) MiB \(\s*(?P<cells>\d+) cells,\s*(?P<layers>\d+) layers,"
            r"\s*(?:(?P<seq>\d+)/)?(?P<seqs>\d+) seqs\), K \((?P<kt>\w+)\):\s*(?P<k>{N}) MiB, V "
            r"\((?P<vt>\w+)\):\s*(?P<v>{N}) MiB"
        ),
    ),
    (
        "self_size",
        _re(
            r"KV self size\s*=\s*(?P<size>{N}) MiB, K \((?P<kt>\w+)\):\s*(?P<k>{N}) MiB, V "
            r"\((?P<vt>\w+)\):\s*(?P<v>{N}) MiB"
        ),
    ),
    (
        "kv_init",
        _re(
            r"llama_kv_cache_init: kv_size = (?P<cells>\d+), offload = \d+, type_k = '(?P<kt>\w+)', type_v = "
            r"'(?P<vt>\w+)', n_layer = (?P<layers>\d+)"
        ),
    ),
    ("creating", _re(r"creating\s+(?P<which>non-SWA|SWA) KV cache, size = (?P<cells>\d+) cells")),
    ("swa_full", _re(r"using full-size SWA cache")),
    ("kv_buffer", _re(r"(?<!\S)(?P<dev>\S+) KV buffer size\s*=\s*(?P<mib>{N}) MiB")),
    ("compute", _re(r"(?<!\S)(?P<dev>\S+) compute buffer size\s*=\s*(?P<mib>{N}) MiB")),
    ("output", _re(r"(?<!\S)(?P<dev>\S+)\s+output buffer size\s*=\s*(?P<mib>{N}) MiB")),
    (
        "model_buffer",
        _re(r"(?:load_tensors|llm_load_tensors):\s+(?P<dev>\S+) (?:model )?buffer size\s*=\s*(?P<mib>{N}) MiB"),
    ),
    ("device", _re(r"using device (?P<dev>\S+) \((?P<name>.*)\) - (?P<mib>\d+) MiB free")),
    ("model_size", _re(r"model size\s*=\s*(?P<gib>{N}) GiB")),
    ("file_size", _re(r"file size\s*=\s*(?P<gib>{N}) GiB")),
    ("name", _re(r"general\.name\s*=\s*(?P<name>.+)$")),
    ("n_swa", _re(r"print_info: n_swa\s*=\s*(?P<n>\d+)")),
    ("build", _re(r"build: (?P<n>\d+) \((?P<commit>\w+)\)")),
]


def parse(lines: list[str]) -> LogReading:
    """Read llama.cpp start-up lines (see the module docstring).

    Returns:
        A :class:`~kvplan.logs.LogReading` with engine ``llamacpp``.
    """
    r = LogReading(engine="llamacpp", lines=len(lines))
    which = None  # the cache the next `size =` line is about: None (single), "non-SWA", "SWA"
    kv_buffers, computes, models = [], [], []
    for raw in lines:
        line = clean(raw)
        hit = False
        m = PARAM.search(line)
        if m:
            hit = True
            k, v = m.group("k"), m.group("v")
            v = integer(v) if re.fullmatch(r"-?\d+", v) else v
            if k == "n_ctx_per_seq":
                r.put("n_ctx", v)  # ollama prints the per-sequence context (one sequence)
                r.setting("n_ctx_per_seq", v)
            else:
                r.put(k, v)
                r.setting(k, v)
        for kind, pat in LINES:
            m = pat.search(line)
            if not m:
                continue
            hit = True
            g = m.groupdict()
            if kind in ("size", "self_size"):
                pre = "swa_" if which == "SWA" else ""
                r.put(f"{pre}kv_size_mib", num(g["size"]))
                if g.get("cells"):
                    r.put(f"{pre}kv_cells", integer(g["cells"]))
                    r.put(f"{pre}kv_layers", integer(g["layers"]))
                if g.get("seqs") and not pre:
                    r.put("n_seq", integer(g["seqs"]))
                    if g.get("seq"):  # "s/S seqs": n_seq_max / streams (llama-kv-cache.cpp: one stream when unified)
                        r.setting("n_seq_max", integer(g["seq"]))
                        r.setting("kv_unified", integer(g["seq"]) > 1 and integer(g["seqs"]) == 1)
                if pre:
                    r.put("swa_k_mib", num(g["k"]))
                    r.put("swa_v_mib", num(g["v"]))
                else:
                    r.put("k_type", g["kt"])
                    r.put("k_mib", num(g["k"]))
                    r.put("v_type", g["vt"])
                    r.put("v_mib", num(g["v"]))
                    r.setting("cache_type_k", g["kt"])
                    r.setting("cache_type_v", g["vt"])
            elif kind == "kv_init":
                r.put("kv_cells", integer(g["cells"]))
                r.put("kv_layers", integer(g["layers"]))
                r.setting("cache_type_k", g["kt"])
                r.setting("cache_type_v", g["vt"])
            elif kind == "creating":
                which = g["which"]
                if which == "SWA":
                    r.put("swa_kv_cells_asked", integer(g["cells"]))
            elif kind == "swa_full":
                r.setting("swa_full", True)
            elif kind == "kv_buffer":
                kv_buffers.append(num(g["mib"]))
            elif kind == "compute":
                if g["dev"].endswith("_Host"):
                    r.put("host_compute_buffer_mib", num(g["mib"]))
                else:
                    computes.append(num(g["mib"]))
                    r.put("compute_buffer_mib", num(g["mib"]))
            elif kind == "output":
                r.put("output_buffer_mib", num(g["mib"]))
            elif kind == "model_buffer":
                if g["dev"] in ("CPU_Mapped", "CPU"):
                    if g["dev"] == "CPU_Mapped":
                        r.put("cpu_mapped_model_mib", num(g["mib"]))
                else:
                    models.append(num(g["mib"]))
                    r.put("model_buffer_mib", num(g["mib"]))
            elif kind == "device":
                r.put("free_at_start_mib", integer(g["mib"]))
                r.gpu_name = r.gpu_name or g["name"]
            elif kind == "model_size":
                r.put("model_size_gib", num(g["gib"]))
            elif kind == "file_size":
                r.put("file_size_gib", num(g["gib"]))
            elif kind == "name":
                r.model_id = r.model_id or g["name"].strip()
            elif kind == "n_swa":
                r.put("n_swa", integer(g["n"]))
            elif kind == "build":
                r.version = f"b{g['n']}"
                r.version_source = f"printed: 'build: {g['n']} ({g['commit']})'"
        if hit:
            r.matched += 1
    if kv_buffers:
        r.per_worker["kv_buffer_mib"] = kv_buffers
        if len(kv_buffers) > 1 and "swa_kv_size_mib" not in r.printed:
            r.printed["kv_buffer_mib_per_device"] = kv_buffers
    if len(computes) > 1:
        r.printed["compute_buffer_mib_per_device"] = computes
    if len(models) > 1:
        r.printed["model_buffer_mib_per_device"] = models
    if "swa_kv_cells" in r.printed:
        r.printed.pop("swa_kv_cells_asked", None)
    elif "swa_kv_cells_asked" in r.printed:
        r.printed["swa_kv_cells"] = r.printed.pop("swa_kv_cells_asked")
    if "n_ctx" not in r.printed and "kv_cells" in r.printed and r.printed.get("n_seq") == 1:
        # one sequence: the unified cache's cells are the context llama_context prints (padded alike)
        r.printed["n_ctx"] = r.printed["kv_cells"]
        r.notes.append(f"n_ctx taken as the cache's {r.printed['kv_cells']} cells (one sequence; no n_ctx line)")
    if "kv_cells" not in r.printed and "n_ctx" in r.printed:
        r.missing.append("kv_cells")
    if r.model_id is None:
        r.missing.append("model")
    return r
