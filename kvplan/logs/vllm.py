"""vLLM start-up logs: the lines vLLM prints about its KV cache, read into a :class:`kvplan.logs.LogReading`.

Formats (the release ranges are from vLLM's source, see ``/work/notes/vllm-budget.md`` §6 and the fixture
``tests/fixtures/vllm_budget_rules.yaml``):

- V0 engine: ``# GPU blocks: N, # CPU blocks: M`` (``executor/gpu_executor.py`` ≤ 0.6.6; ``# cuda blocks``
  / ``# CUDA blocks`` with the device name, ``executor/executor_base.py`` 0.7–0.10); ``Maximum concurrency
  for S tokens per request: X.XXx`` (0.6.3+); ``Memory profiling results: total_gpu_memory=…`` (0.6.4,
  ``worker/worker.py:232``), the tabular form of vLLM PR #10511, and the three-line form ``the current vLLM
  instance can use total_gpu_memory (T) x gpu_memory_utilization (U) = R`` / ``model weights take …``
  (0.6.5–0.10, ``worker/worker.py``); ``Loading model weights took X GB`` (GiB values); ``The model's max
  seq len (S) is larger than the maximum number of tokens that can be stored in KV cache (N)``
  (``worker/worker.py raise_if_cache_size_invalid``).
- V1 engine: ``# GPU blocks: N`` (0.7, ``v1/core/kv_cache_utils.py``); ``GPU KV cache size: N tokens`` and
  ``Maximum concurrency …`` (0.8–0.27, one per worker), on one line 0.28–0.29, ``<device> KV cache size``
  0.30+; ``Available KV cache memory: X GiB`` (0.9+; ``%.2f`` to 0.13, ``round(x, 2)`` from 0.14);
  ``Free memory on device (F/T GiB) on startup. Desired GPU memory utilization is (U, R GiB). Actual usage
  is …`` (0.10.2–0.26 ``… GiB for weight, … for peak activation, … for non-torch memory, and … for
  CUDAGraph memory``, with ``--kv-cache-memory=N`` suggestions and ``Current kv cache memory in use is N
  bytes``; 0.27+ ``… for consumed memory (weights + non-torch) …``); ``Model loading took X GiB`` (0.8+);
  ``To serve at least one request with the models's max seq len (S), (X GiB KV cache is needed, … (Y
  GiB). … the estimated maximum model length is L.`` (``_check_enough_kv_cache_memory``); ``Add N padding
  layers, may waste at most P% KV cache memory``; ``num_gpu_blocks is: N`` (the engine's cache config).
- Settings: ``non-default args: {…}`` (0.10+), the model of ``args: Namespace(…, model='…', …)`` (the API
  server before it, 0.5–0.8), ``Initializing a V1 LLM engine (vX) with config: model=…,
  max_seq_len=…, tensor_parallel_size=…`` (V0: ``Initializing an LLM engine``), ``Chunked prefill is
  enabled with max_num_batched_tokens=N``, ``Setting attention block size to N tokens`` (hybrid models).

The version: as printed (``vLLM API server version``, ``(vX)`` of the config line), else from the
``[file.py:LINE]`` prefixes (:func:`releases_of`), else the range the formats imply (:func:`format_range`).
"""

from __future__ import annotations

import ast
import re

from kvplan.logs import LogReading, clean, gib_bytes, integer, num
from kvplan.logs.vllm_fingerprints import FINGERPRINTS

N = r"-?[\d,]*\d(?:\.\d+)?"  # a printed number: 1,037,152 / 10.68 / -0.03
PREFIX = re.compile(r"(?:\[|\s|^)(?P<file>[\w-]+\.py):(?P<line>\d+)\]")
WORKER = re.compile(r"\((?:Worker_)?(?:PP(?P<pp>\d+)_)?TP(?P<tp>\d+)")


def _re(pattern: str):
    return re.compile(pattern.replace("{N}", N))


# (message key of the fingerprint table, pattern); the key ties a line's [file.py:LINE] to the releases
LINES: list[tuple[str, str, re.Pattern]] = [
    # --- V1 ---
    (
        "kv_cache_size",
        "kv_one_line",
        _re(
            r"\b(?P<dev>\w+) KV cache size: (?P<tokens>{N}) tokens, Maximum concurrency for (?P<len>{N}) tokens per "
            r"request: "
            r"(?P<conc>{N})x"
        ),
    ),
    ("kv_cache_size", "kv_tokens", _re(r"\b(?P<dev>\w+) KV cache size:\s+(?P<tokens>{N}) tokens")),
    ("kv_concurrency", "concurrency", _re(r"Maximum concurrency for (?P<len>{N}) tokens per request: (?P<conc>{N})x")),
    ("available_kv", "available_kv", _re(r"Available KV cache memory: (?P<gib>{N}) GiB")),
    (
        "free_on_device",
        "free_weight",
        _re(
            r"Free memory on device \((?P<free>{N})/(?P<total>{N}) GiB\) on startup\. Desired GPU memory "
            r"utilization is "
            r"\((?P<u>{N}), (?P<req>{N}) GiB\)\. Actual usage is (?P<w>{N}) GiB for weight, (?P<act>{N}) GiB for peak "
            r"activation, (?P<nt>{N}) GiB for non-torch memory, and (?P<cg>{N}) GiB for CUDAGraph memory\."
        ),
    ),
    (
        "free_on_device",
        "free_consumed",
        _re(
            r"Free memory on device \((?P<free>{N})/(?P<total>{N}) GiB\) on startup\. Desired GPU memory "
            r"utilization is "
            r"\((?P<u>{N}), (?P<req>{N}) GiB\)\. Actual usage is (?P<consumed>{N}) GiB for consumed memory "
            r"\(weights \+ "
            r"non-torch\), (?P<act>{N}) GiB for peak activation, and (?P<cg>{N}) GiB for CUDAGraph memory\."
        ),
    ),
    ("model_loading", "model_loading", _re(r"Model loading took (?P<gib>{N}) GiB")),
    ("graph_capturing", "graph_capturing", _re(r"Graph capturing finished in {N} secs?\.?,? took (?P<gib>{N}) GiB")),
    (
        "encoder_cache",
        "encoder_cache",
        _re(r"Encoder cache will be initialized with a budget of (?P<tokens>{N}) tokens"),
    ),
    ("", "padding_layers", _re(r"Add (?P<n>\d+) padding layers, may waste at most (?P<pct>{N})% KV cache memory")),
    ("", "attention_block", _re(r"Setting attention block size to (?P<n>\d+) tokens")),
    ("", "mamba_padding", _re(r"Padding mamba page size by (?P<pct>{N})%")),
    ("", "num_gpu_blocks_config", _re(r"num_gpu_blocks is: (?P<n>\d+)")),
    (
        "",
        "needed",
        _re(
            r"To serve at least one request with the models's max seq len \((?P<len>\d+)\), \((?P<need>{N}) GiB KV "
            r"cache is "
            r"needed, which is larger than the available KV cache memory \((?P<avail>{N}) GiB\)\.(?: Based on the "
            r"available "
            r"memory, the estimated maximum model length is (?P<est>\d+)\.)?"
        ),
    ),
    ("", "no_memory", _re(r"No available memory for the cache blocks")),
    # --- V0 ---
    (
        "",
        "v0_blocks",
        _re(r"(?:# )?\b(?P<dev>GPU|CUDA|cuda|\w+) blocks: (?P<gpu>\d+)(?:, # CPU blocks: (?P<cpu>\d+))?"),
    ),
    ("v0_weights", "v0_weights", _re(r"Loading model weights took (?P<gib>{N}) GB")),
    (
        "",
        "v0_results",
        _re(
            r"Memory profiling results: total_gpu_memory=(?P<total>{N})GiB initial_memory_usage=(?P<init>{N})GiB "
            r"peak_torch_memory=(?P<peak>{N})GiB memory_usage_post_profile=(?P<post>{N})GiB "
            r"non_torch_memory=(?P<nt>{N})GiB "
            r"kv_cache_size=(?P<kv>{N})GiB gpu_memory_utilization=(?P<u>{N})"
        ),
    ),
    (
        "",
        "v0_can_use",
        _re(
            r"the current vLLM instance can use total_gpu_memory \((?P<total>{N})GiB\) x gpu_memory_utilization "
            r"\((?P<u>{N})\) = (?P<req>{N})GiB"
        ),
    ),
    (
        "",
        "v0_terms",
        _re(
            r"model weights take (?P<w>{N})GiB; non_torch_memory takes (?P<nt>{N})GiB; PyTorch activation peak memory "
            r"takes (?P<act>{N})GiB; the rest of the memory reserved for KV Cache is (?P<kv>{N})GiB"
        ),
    ),
    # vLLM PR #10511's tabular form (one term per line)
    ("", "t_total", _re(r"^\s*total_gpu_memory\s+(?P<gib>{N})GiB")),
    ("", "t_util", _re(r"^\s*gpu_memory_utilization\s+(?P<u>{N})\s*$")),
    ("", "t_req", _re(r"^\s*the current vLLM instance can use\s+(?P<gib>{N})GiB")),
    ("", "t_weights", _re(r"^\s*model weights take\s+(?P<gib>{N})GiB")),
    ("", "t_nt", _re(r"^\s*non_torch_memory\s+(?P<gib>{N})GiB")),
    ("", "t_act", _re(r"^\s*PyTorch activation peak memory\s+(?P<gib>{N})GiB")),
    ("", "t_kv", _re(r"^\s*available_kv_cache_memory\s+(?P<gib>{N})GiB")),
    (
        "",
        "v0_too_long",
        _re(
            r"The model's max seq len \((?P<len>\d+)\) is larger than the maximum number of tokens that can be "
            r"stored in "
            r"KV cache \((?P<tokens>\d+)\)"
        ),
    ),
    # --- settings, version, model ---
    ("", "server_version", _re(r"vLLM API server version (?P<v>[\w.+-]+)")),
    (
        "",
        "config",
        _re(r"Initializing (?:a|an) (?:(?P<gen>V[01]) )?LLM engine(?: \(v(?P<v>[\w.+-]+)\))? with config: (?P<cfg>.*)"),
    ),
    ("", "non_default", _re(r"non-default args: (?P<args>\{.*)")),
    # the API server before the non-default args line prints its whole argparse namespace (``args: Namespace(host=
    # None, port=8000, ..., model='...', ...)``, entrypoints/openai/api_server.py; seen in 0.5.0-0.8.4 logs); only
    # the model is read from it (the rest are the parser's defaults, not what the engine resolved)
    ("", "namespace", _re(r"\bargs: Namespace\((?P<args>.*)")),
    ("", "chunked", _re(r"Chunked prefill is enabled with max_num_batched_tokens=(?P<n>\d+)")),
    ("", "load_model", _re(r"Starting to load model (?P<m>\S+?)(?:\.\.\.)?$")),
    ("", "llm_call", _re(r"\bLLM\(\s*(?:model\s*=\s*)?[\"'](?P<m>[^\"']+)[\"']")),
    ("", "backend", _re(r"Using (?P<b>[A-Z_]+) attention backend")),
]

# settings the config line and the non-default args state, by vLLM's names
SETTING_KEYS = (
    "model",
    "tensor_parallel_size",
    "pipeline_parallel_size",
    "max_model_len",
    "gpu_memory_utilization",
    "max_num_batched_tokens",
    "max_num_seqs",
    "kv_cache_dtype",
    "dtype",
    "quantization",
    "block_size",
    "enable_prefix_caching",
    "enable_chunked_prefill",
    "enforce_eager",
    "swap_space",
    "kv_cache_memory_bytes",
    "num_gpu_blocks_override",
    "enable_expert_parallel",
    "data_parallel_size",
    "speculative_config",
    "disable_custom_all_reduce",
    "limit_mm_per_prompt",
    "trust_remote_code",
    "cpu_offload_gb",
    "max_seq_len",
    "kv_cache_memory",
    "distributed_executor_backend",
    "load_format",
    "attention_backend",
)
PLAN_SETTINGS = ("tensor_parallel_size", "max_model_len", "kv_cache_dtype", "gpu_memory_utilization")


def _literal(text: str):
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        return None


def _dict_pairs(text: str) -> dict:
    """``{'a': 1, 'b': 'x', …}`` as a dict, also when the line was cut: the pairs that parse."""
    whole = _literal(text)
    if isinstance(whole, dict):
        return whole
    out = {}
    for m in re.finditer(
        r"'(\w+)': ('[^']*'|\"[^\"]*\"|-?\d+(?:\.\d+)?|True|False|None|\{[^{}]*\}|\[[^\[\]]*\])", text
    ):
        v = _literal(m.group(2))
        if v is not None or m.group(2) == "None":
            out.setdefault(m.group(1), v)
    return out


def _config_pairs(text: str) -> dict:
    """``model='x', dtype=torch.bfloat16, max_seq_len=2048, …`` (the engine config line) as a dict."""
    out = {}
    for m in re.finditer(r"(\w+)=('[^']*'|[^,]*)", text):
        key, raw = m.group(1), m.group(2).strip()
        if raw.startswith("'"):
            val = raw.strip("'")
        elif raw.startswith("torch."):
            val = raw[len("torch.") :]
        else:
            val = _literal(raw)
            if val is None and raw not in ("None",):
                val = raw
        out.setdefault(key, val)
    return out


def _norm_setting(key: str, value):
    if key == "max_seq_len":
        return "max_model_len", value
    if key == "kv_cache_memory":
        return "kv_cache_memory_bytes", value
    if key == "dtype" and isinstance(value, str):
        return key, value.replace("torch.", "")
    return key, value


def releases_of(sites: dict[str, set[str]]) -> list[str]:
    """The vLLM releases whose logger calls sit where the log's prefixes say (``{message key: {'file.py:LINE'}}``),
    oldest first: every site must be one of the release's lines for that message (:data:`FINGERPRINTS`)."""
    out = []
    for release, calls in FINGERPRINTS.items():
        ok = True
        for key, seen in sites.items():
            site = calls.get(key)
            if site is None:
                ok = False
                break
            file, _, lines = site.partition(":")
            allowed = {f"{file}:{n}" for n in lines.split(",")}
            if not seen <= allowed:
                ok = False
                break
        if ok:
            out.append(release)
    return out


_SITE_KEYS = {
    ("kv_one_line", "kv_cache_utils.py"): "kv_cache_size",
    ("kv_tokens", "kv_cache_utils.py"): "kv_cache_size",
    ("v0_blocks", "kv_cache_utils.py"): "kv_cache_size",
    ("concurrency", "kv_cache_utils.py"): "kv_concurrency",
    ("available_kv", "gpu_worker.py"): "available_kv",
    ("free_weight", "gpu_worker.py"): "free_on_device",
    ("free_consumed", "gpu_worker.py"): "free_on_device",
    ("model_loading", "gpu_model_runner.py"): "model_loading",
    ("v0_weights", "gpu_model_runner.py"): "model_loading",
    ("model_loading", "model_runner.py"): "v0_weights",
    ("v0_weights", "model_runner.py"): "v0_weights",
    ("graph_capturing", "gpu_model_runner.py"): "graph_capturing",
    ("graph_capturing", "model_runner.py"): "v0_graph_capturing",
    ("encoder_cache", "gpu_model_runner.py"): "encoder_cache",
    ("v0_blocks", "gpu_executor.py"): "v0_blocks_gpu",
    ("v0_blocks", "executor_base.py"): "v0_blocks",
    ("v0_results", "worker.py"): "v0_memory_profiling",
    ("v0_can_use", "worker.py"): "v0_memory_profiling",
    ("v0_terms", "worker.py"): "v0_memory_profiling",
}


def _site_key(kind: str, file: str) -> str | None:
    """The fingerprint message key of a line of ``kind`` logged from ``file`` (None: not in the table)."""
    return _SITE_KEYS.get((kind, file))


def _release_key(release: str) -> tuple:
    return tuple(int(x) for x in re.findall(r"\d+", release)[:3])


def nearest_release(sites: dict[str, set[str]], floor: str | None = None) -> str | None:
    """The release (not older than ``floor``) whose logger lines are nearest the log's, summed over the
    messages, among the releases that log every message the log shows at the same files; None if none. A
    development build between two releases has line numbers near one of them."""
    best, best_d = None, None
    for release, calls in FINGERPRINTS.items():
        if floor is not None and _release_key(release) < _release_key(floor):
            continue
        d = 0
        for key, seen in sites.items():
            site = calls.get(key)
            if site is None:
                d = None
                break
            file, _, lines = site.partition(":")
            nums = [int(n) for n in lines.split(",")]
            for s in seen:
                f, _, n = s.partition(":")
                if f != file:
                    d = None
                    break
                d += min(abs(integer(n) - x) for x in nums)
            if d is None:
                break
        if d is not None and (best_d is None or d < best_d):
            best, best_d = release, d
    return best


def format_range(r: LogReading, kinds: set[str], texts: dict[str, str]) -> tuple[str | None, str]:
    """(first release, reason) of the range the line formats imply, when no version is printed and the
    prefixes match no release read."""
    if r.generation == "v0":
        if "v0_results" in kinds:
            return "0.6.4", "format: 'Memory profiling results: total_gpu_memory=' (V0 0.6.4)"
        if "v0_can_use" in kinds or "t_total" in kinds:
            return "0.6.5", "format: 'the current vLLM instance can use' (V0 0.6.5-0.10)"
        return None, "format: V0 engine lines"
    if r.generation != "v1":
        return None, ""
    if "kv_one_line" in kinds:
        dev = texts.get("kv_one_line_dev", "GPU")
        return (
            ("0.30.0", "format: '<device> KV cache size' on one line (0.30+)")
            if dev != "GPU"
            else ("0.28.0", "format: 'GPU KV cache size … Maximum concurrency' on one line (0.28+)")
        )
    rounded = texts.get("rounded_gib")
    if "free_consumed" in kinds:
        return "0.27.0", "format: 'Actual usage is … for consumed memory' (0.27+)"
    if "free_weight" in kinds:
        return "0.10.2", "format: 'Actual usage is … for weight' (0.10.2-0.26)"
    avail = texts.get("available_kv")
    if avail is not None:
        if not re.fullmatch(r"-?\d+\.\d\d", avail):
            return "0.14.1", f"format: 'Available KV cache memory: {avail} GiB' rounded, not %.2f (0.14+)"
        return "0.9.2", "format: 'Available KV cache memory' (0.9+)"
    if rounded is not None:
        return "0.14.1", f"format: '{rounded} GiB' rounded, not %.2f (vLLM format_gib, 0.14+)"
    if "loading_memory" in texts:
        return "0.12.0", "format: 'Model loading took X GiB memory and' (0.12+)"
    if "kv_tokens" in kinds:
        return "0.8.5", "format: 'GPU KV cache size: N tokens' (0.8+)"
    if "v0_blocks" in kinds:
        return "0.7.3", "format: V1 '# GPU blocks: N' (0.7)"
    return None, ""


def parse(lines: list[str]) -> LogReading:
    """Read vLLM start-up lines (see the module docstring for the formats).

    Returns:
        A :class:`~kvplan.logs.LogReading` with engine ``vllm``.
    """
    r = LogReading(engine="vllm", lines=len(lines))
    sites: dict[str, set[str]] = {}
    kinds: set[str] = set()
    texts: dict[str, str] = {}
    v0 = v1 = False
    max_tp = -1
    cfg_gen = None
    for raw in lines:
        line = clean(raw)
        w = WORKER.search(line)
        if w:
            max_tp = max(max_tp, integer(w.group("tp")))
        if "VllmWorkerProcess" in line:
            v0 = True
        if "EngineCore" in line or "Worker_TP" in line or "[core.py:" in line:
            v1 = True  # V1's engine-core process and its workers (v1/engine/core.py)
        pm = PREFIX.search(line)
        hit = False
        for _key, kind, pat in LINES:
            m = pat.search(line)
            if not m:
                continue
            if kind == "v0_blocks" and ("KV cache size" in line or "cache_config_info" in line):
                continue
            if kind == "concurrency" and "KV cache size" in line:
                continue  # the one-line form, read above
            if kind == "kv_tokens" and "Maximum concurrency" in line:
                continue
            hit = True
            kinds.add(kind)
            site_key = _site_key(kind, pm.group("file")) if pm else None
            if site_key:
                sites.setdefault(site_key, set()).add(f"{pm.group('file')}:{pm.group('line')}")
            g = m.groupdict()
            if kind in ("kv_one_line", "kv_tokens"):
                r.put("kv_tokens", num(g["tokens"]))
                texts.setdefault(f"{kind}_dev", g["dev"])
                v1 = True
                if kind == "kv_one_line":
                    r.put("concurrency_tokens", num(g["len"]))
                    r.put("max_concurrency", num(g["conc"]))
            elif kind == "concurrency":
                r.put("concurrency_tokens", num(g["len"]))
                r.put("max_concurrency", num(g["conc"]))
            elif kind == "available_kv":
                r.put("available_kv_gib", num(g["gib"]))
                texts.setdefault("available_kv", g["gib"])
                v1 = True
            elif kind in ("free_weight", "free_consumed"):
                v1 = True
                r.put("free_at_start_gib", num(g["free"]))
                r.put("total_gib", num(g["total"]))
                r.put("requested_gib", num(g["req"]))
                r.setting("gpu_memory_utilization", num(g["u"]))
                r.put("peak_activation_gib", num(g["act"]))
                r.put("cudagraph_gib", num(g["cg"]))
                if kind == "free_weight":
                    r.put("weights_reported_gib", num(g["w"]))
                    r.put("non_torch_gib", num(g["nt"]))
                else:
                    r.put("consumed_gib", num(g["consumed"]))
                rest = line[m.end() :]
                sugg = re.findall(r"--kv-cache-memory=(\d+)", rest)
                if len(sugg) == 2:
                    r.put("kv_cache_memory_fit_bytes", integer(sugg[0]))
                    r.put("kv_cache_memory_full_bytes", integer(sugg[1]))
                m2 = re.search(r"Current kv cache memory in use is (\d+) bytes", rest)
                if m2:
                    r.put("kv_cache_memory_bytes", integer(m2.group(1)))
                m3 = re.search(rf"Current kv cache memory in use is ({N}) GiB", rest)
                if m3:
                    r.put("kv_cache_memory_in_use_gib", num(m3.group(1)))
                if r.gpu_total_bytes is None:
                    r.gpu_total_bytes = gib_bytes(num(g["total"]))
                    r.gpu_total_source = f"Free memory on device (…/{g['total']} GiB)"
            elif kind == "model_loading":
                r.put("weights_gib", num(g["gib"]))
                if " GiB memory and" in line:
                    texts.setdefault("loading_memory", g["gib"])
                    if not re.fullmatch(r"-?\d+\.\d{2,}", g["gib"]):
                        texts.setdefault("rounded_gib", g["gib"])
                if " GiB memory and" in line or "gpu_model_runner" in line:
                    v1 = True  # "%s GiB memory and" is V1 0.12+ (the V0 engine was gone by 0.11)
                elif pm and pm.group("file") == "model_runner.py":
                    v0 = True
            elif kind == "graph_capturing":
                r.put("cudagraph_capture_gib", num(g["gib"]))
            elif kind == "encoder_cache":
                r.put("encoder_cache_budget_tokens", num(g["tokens"]))
            elif kind == "padding_layers":
                r.put("padding_layers", integer(g["n"]))
                r.put("padding_waste_pct", num(g["pct"]))
            elif kind == "attention_block":
                r.put("block_size", integer(g["n"]))
                r.setting("block_size", integer(g["n"]))
            elif kind == "mamba_padding":
                r.put("mamba_page_padding_pct", num(g["pct"]))
            elif kind == "num_gpu_blocks_config":
                r.put("num_gpu_blocks", integer(g["n"]))
            elif kind == "needed":
                v1 = True
                r.put("max_model_len", integer(g["len"]))
                r.setting("max_model_len", integer(g["len"]))
                r.put("kv_needed_gib", num(g["need"]))
                for t in (g["need"], g["avail"]):
                    if not re.fullmatch(r"-?\d+\.\d\d", t):
                        texts.setdefault("rounded_gib", t)
                r.put("available_kv_gib", num(g["avail"]))
                if g.get("est"):
                    r.put("estimated_max_model_len", integer(g["est"]))
            elif kind == "no_memory":
                r.notes.append("the engine stopped: 'No available memory for the cache blocks' (a budget <= 0)")
            elif kind == "v0_blocks":
                r.put("num_gpu_blocks", integer(g["gpu"]))
                if g.get("cpu") is not None:
                    r.put("num_cpu_blocks", integer(g["cpu"]))
                    v0 = True
                elif "kv_cache_utils" in line:
                    v1 = True
            elif kind == "v0_weights":
                r.put("weights_gib", num(g["gib"]))
                if pm and pm.group("file") == "gpu_model_runner.py":
                    v1 = True
            elif kind == "v0_results":
                v0 = True
                r.put("total_gpu_memory_gib", num(g["total"]))
                r.put("initial_memory_usage_gib", num(g["init"]))
                r.put("peak_torch_memory_gib", num(g["peak"]))
                r.put("memory_usage_post_profile_gib", num(g["post"]))
                r.put("non_torch_memory_gib", num(g["nt"]))
                r.put("kv_cache_size_gib", num(g["kv"]))
                r.setting("gpu_memory_utilization", num(g["u"]))
            elif kind == "v0_can_use":
                v0 = True
                r.put("total_gpu_memory_gib", num(g["total"]))
                r.put("requested_gib", num(g["req"]))
                r.setting("gpu_memory_utilization", num(g["u"]))
            elif kind == "v0_terms":
                v0 = True
                r.put("weights_gib", num(g["w"]))
                r.put("non_torch_memory_gib", num(g["nt"]))
                r.put("peak_activation_gib", num(g["act"]))
                r.put("kv_cache_size_gib", num(g["kv"]))
            elif kind.startswith("t_"):
                v0 = True
                name = {"t_total": "total_gpu_memory_gib", "t_req": "requested_gib", "t_weights": "weights_gib",
                        "t_nt": "non_torch_memory_gib", "t_act": "peak_activation_gib",
                        "t_kv": "kv_cache_size_gib"}.get(kind)  # fmt: skip
                if name:
                    r.put(name, num(g["gib"]))
                else:
                    r.setting("gpu_memory_utilization", num(g["u"]))
            elif kind == "v0_too_long":
                v0 = True
                r.put("max_model_len", integer(g["len"]))
                r.setting("max_model_len", integer(g["len"]))
                r.put("kv_tokens", integer(g["tokens"]))
            elif kind == "server_version":
                if r.version is None:
                    r.version, r.version_source = g["v"], f"printed: 'vLLM API server version {g['v']}'"
            elif kind == "config":
                cfg_gen = (g.get("gen") or "V0").lower()
                if g.get("v") and r.version is None:
                    r.version, r.version_source = g["v"], f"printed: 'LLM engine (v{g['v']})'"
                for k, v in _config_pairs(g["cfg"]).items():
                    k, v = _norm_setting(k, v)
                    if k in SETTING_KEYS or k == "max_model_len":
                        r.setting(k, v)
            elif kind == "non_default":
                for k, v in _dict_pairs(g["args"]).items():
                    k, v = _norm_setting(k, v)
                    if k in SETTING_KEYS or k == "model_tag":
                        r.setting(k, v)
            elif kind == "namespace":
                found = re.search(r"(?:^|[ ,])model='(?P<m>[^']+)'", g["args"]) or re.search(
                    r"(?:^|[ ,])model_tag='(?P<m>[^']+)'", g["args"]
                )
                if found:
                    r.setting("model", found.group("m"))
            elif kind == "chunked":
                r.setting("max_num_batched_tokens", integer(g["n"]))
            elif kind in ("load_model", "llm_call"):
                r.model_id = r.model_id or g["m"]
            elif kind == "backend":
                r.setting("attention_backend", g["b"])
        if hit:
            r.matched += 1
    _per_rank(r)
    # the engine
    if cfg_gen in ("v0", "v1"):
        r.generation = cfg_gen
    elif v1 and not v0:
        r.generation = "v1"
    elif v0 and not v1:
        r.generation = "v0"
    elif v0 and v1:
        r.generation = "v1" if "kv_tokens" in r.printed or "available_kv_gib" in r.printed else "v0"
    elif "num_gpu_blocks" in r.printed:
        # a bare '# GPU blocks: N' without a V1 prefix: the V0 engine printed it from 0.1 to 0.10 (with
        # '# CPU blocks'), V1 only in 0.7 (v1/core/kv_cache_utils.py)
        r.generation = "v0"
        r.notes.append("'# GPU blocks' without '# CPU blocks' or a V1 prefix: taken as the V0 engine")
    # the model and the parallelism
    model = r.settings.get("model") or r.settings.get("model_tag")
    if r.model_id is None and isinstance(model, str):
        r.model_id = model
    r.settings.pop("model_tag", None)
    r.settings.pop("model", None)
    tp = r.settings.get("tensor_parallel_size")
    if isinstance(tp, int):
        r.tp = tp
    elif max_tp >= 1:
        r.min_tp = max_tp + 1
        r.notes.append(f"worker prefixes name TP rank {max_tp}: TP is at least {max_tp + 1}")
    pp = r.settings.get("pipeline_parallel_size")
    r.pp = pp if isinstance(pp, int) else None
    if r.gpu_total_bytes is None and "total_gpu_memory_gib" in r.printed:
        total = r.printed["total_gpu_memory_gib"]
        r.gpu_total_bytes = gib_bytes(total)
        r.gpu_total_source = f"total_gpu_memory {total} GiB"
    # the version: printed, else the releases whose logger lines the prefixes name, else the formats' range
    floor, why = format_range(r, kinds, texts)
    if r.version is None and sites:
        shown = ", ".join(f"[{s}]" for ss in sites.values() for s in sorted(ss))
        found = releases_of(sites)
        if found:
            r.versions = tuple(found)
            r.version = found[0]
            span = found[0] if len(found) == 1 else f"{found[0]} to {found[-1]}"
            r.version_source = f"fingerprint: {shown} = vLLM {span}"
        else:
            near = nearest_release(sites, floor)
            if near is not None:
                r.version = near
                r.version_source = (
                    f"fingerprint: {shown} match no release read exactly; nearest by line numbers: vLLM {near} "
                    "(a build between releases)"
                )
            else:
                r.notes.append(f"the [file.py:LINE] prefixes {shown} match no vLLM release kvplan has read")
    if r.version is None and floor:
        r.version, r.version_source = floor, why
    if "concurrency_tokens" in r.printed:
        r.setting("max_model_len", r.printed["concurrency_tokens"])
    for key in PLAN_SETTINGS:
        if key not in r.settings and not (key == "tensor_parallel_size" and r.tp):
            r.missing.append(key)
    if r.model_id is None:
        r.missing.append("model")
    return r


def _per_rank(r: LogReading) -> None:
    """V0's per-worker memory-profiling terms: one value when every worker printed the same, else a list
    ``<key>_per_rank`` (the corpus's convention)."""
    for key in ("non_torch_memory_gib", "kv_cache_size_gib"):
        vals = r.per_worker.get(key, [])
        if len(set(vals)) > 1:
            r.printed.pop(key)
            r.printed[f"{key}_per_rank"] = vals
