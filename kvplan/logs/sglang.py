"""SGLang start-up logs (``srt/model_executor/model_runner.py`` and the memory-pool modules), read into a
:class:`kvplan.logs.LogReading`.

Formats (SGLang prints GB meaning GiB: ``get_available_gpu_memory`` divides by ``1 << 30``):

- ``Init torch distributed ends. mem usage=X GB``; ``Load weight begin. avail mem=X GB``; ``Load weight end.
  type=<Architecture>, dtype=torch.bfloat16, avail mem=X GB, mem usage=Y GB.``
- ``KV Cache is allocated. [dtype: D, ]#tokens: N, K size: X GB, V size: Y GB`` (MHA pools), ``… KV size: X
  GB`` (MLA pools); ``Mamba Cache is allocated. max_mamba_cache_size: N, conv_state size: XGB, ssm_state
  size: YGB``; ``Use sliding window memory pool. full_layer_tokens=N, swa_layer_tokens=M``.
- ``Memory pool end. avail mem=X GB``; ``Capture cuda graph begin. … avail mem=X GB``; ``Capture cuda graph
  end. Time elapsed: T s. avail mem=X GB. mem usage=Y GB.``
- ``max_total_num_tokens=N, chunked_prefill_size=C, max_prefill_tokens=P, max_running_requests=R,
  context_len=L`` (the scheduler's summary); ``max_total_tokens=N is larger than the profiled value M. Use
  the profiled value instead.``; ``Input length (N tokens) exceeds the maximum allowed length (M tokens).``
- ``server_args=ServerArgs(model_path='…', tp_size=…, mem_fraction_static=…, …)``: the settings.
- Line prefixes ``[2025-03-08 12:29:13 DP0 TP0]`` name the rank.
"""

from __future__ import annotations

import ast
import re

from kvplan.logs import LogReading, clean, integer, num

N = r"-?[\d,]*\d(?:\.\d+)?"
RANK = re.compile(r"\[\d{4}-\d\d-\d\d [\d:]+ (?:DP(?P<dp>\d+) )?(?:PP(?P<pp>\d+) )?TP(?P<tp>\d+)(?: EP\d+)?\]")


def _re(p: str):
    return re.compile(p.replace("{N}", N))


LINES = [
    ("init_dist", _re(r"Init torch distributed ends\. mem usage=(?P<gb>{N}) GB")),
    ("weights_begin", _re(r"Load weight begin\. avail mem=(?P<gb>{N}) GB")),
    (
        "weights_end",
        _re(
            r"Load weight end\.(?: type=(?P<arch>\w+),)?(?: dtype=(?:torch\.)?(?P<dtype>\w+),)? avail "
            r"mem=(?P<gb>{N}) GB(?:, mem usage=(?P<used>{N}) GB)?"
        ),
    ),
    (
        "kv",
        _re(
            r"KV Cache is allocated\.(?: dtype: (?P<dtype>\w+),)?(?: #tokens: (?P<tokens>\d+),)?(?: K size: "
            r"(?P<k>{N}) GB, V size: (?P<v>{N}) GB| KV size: (?P<kv>{N}) GB)"
        ),
    ),
    (
        "mamba",
        _re(
            r"Mamba Cache is allocated\. max_mamba_cache_size: (?P<n>\d+), conv_state size: (?P<conv>{N}) ?GB, "
            r"ssm_state size: (?P<ssm>{N}) ?GB"
        ),
    ),
    ("swa", _re(r"Use sliding window memory pool\. full_layer_tokens=(?P<full>\d+), swa_layer_tokens=(?P<swa>\d+)")),
    ("pool_end", _re(r"Memory pool end\. avail mem=(?P<gb>{N}) GB")),
    ("graph_begin", _re(r"Capture cuda graph begin\..*avail mem=(?P<gb>{N}) GB")),
    ("graph_end", _re(r"Capture cuda graph end\..*avail mem=(?P<gb>{N}) GB\.?(?: mem usage=(?P<used>{N}) GB)?")),
    ("summary", _re(r"max_total_num_tokens=(?P<tokens>\d+)(?P<rest>(?:, \w+=-?\d+)*)")),
    ("profiled", _re(r"max_total_tokens=(?P<asked>\d+) is larger than the profiled value (?P<prof>-?\d+)")),
    ("too_long", _re(r"Input length \((?P<n>\d+) tokens\) exceeds the maximum allowed length \((?P<max>\d+) tokens\)")),
    ("server_args", _re(r"server_args=ServerArgs\((?P<args>.*)\)?")),
]
SUMMARY_KEYS = {"chunked_prefill_size", "max_prefill_tokens", "max_running_requests", "context_len"}
SETTING_KEYS = ("tp_size", "dp_size", "pp_size", "ep_size", "mem_fraction_static", "kv_cache_dtype", "context_length",
                "chunked_prefill_size", "max_prefill_tokens", "max_running_requests", "max_total_tokens", "page_size",
                "attention_backend", "enable_dp_attention", "dtype", "quantization", "disable_radix_cache",
                "swa_full_tokens_ratio", "cuda_graph_max_bs")  # fmt: skip


def _args(text: str) -> dict:
    out = {}
    for m in re.finditer(r"(\w+)=('[^']*'|\[[^\]]*\]|[^,()]+)", text):
        raw = m.group(2).strip()
        try:
            val = ast.literal_eval(raw)
        except (ValueError, SyntaxError, MemoryError, RecursionError):
            val = raw
        out.setdefault(m.group(1), val)
    return out


def parse(lines: list[str]) -> LogReading:
    """Read SGLang start-up lines (see the module docstring).

    Returns:
        A :class:`~kvplan.logs.LogReading` with engine ``sglang``.
    """
    r = LogReading(engine="sglang", lines=len(lines))
    max_tp = -1
    for raw in lines:
        line = clean(raw)
        rank = RANK.search(line)
        if rank:
            max_tp = max(max_tp, integer(rank.group("tp")))
        hit = False
        for kind, pat in LINES:
            m = pat.search(line)
            if not m:
                continue
            hit = True
            g = m.groupdict()
            if kind == "init_dist":
                r.put("init_mem_usage_gb", num(g["gb"]))
            elif kind == "weights_begin":
                r.put("avail_before_weights_gb", num(g["gb"]))
            elif kind == "weights_end":
                r.put("avail_after_weights_gb", num(g["gb"]))
                if g.get("used"):
                    r.put("weights_gb", num(g["used"]))
                if g.get("arch"):
                    r.architecture = r.architecture or g["arch"]
                if g.get("dtype"):
                    r.setting("dtype", g["dtype"])
            elif kind == "kv":
                if g.get("tokens"):
                    r.put("max_total_num_tokens", integer(g["tokens"]))
                if g.get("dtype"):
                    r.setting("kv_cache_dtype", g["dtype"])
                if g.get("k") is not None:
                    r.put("k_size_gb", num(g["k"]))
                    r.put("v_size_gb", num(g["v"]))
                else:
                    r.put("kv_size_gb", num(g["kv"]))
            elif kind == "mamba":
                r.put("mamba_cache_slots", integer(g["n"]))
                r.put("conv_state_gb", num(g["conv"]))
                r.put("ssm_state_gb", num(g["ssm"]))
            elif kind == "swa":
                r.put("full_layer_tokens", integer(g["full"]))
                r.put("swa_layer_tokens", integer(g["swa"]))
            elif kind == "pool_end":
                r.put("avail_after_pool_gb", num(g["gb"]))
            elif kind == "graph_begin":
                r.put("avail_before_cuda_graph_gb", num(g["gb"]))
            elif kind == "graph_end":
                r.put("avail_after_cuda_graph_gb", num(g["gb"]))
                if g.get("used"):
                    r.put("cuda_graph_gb", num(g["used"]))
            elif kind == "summary":
                r.put("max_total_num_tokens", integer(g["tokens"]))
                for k, v in re.findall(r"(\w+)=(-?\d+)", g["rest"]):
                    if k in SUMMARY_KEYS:
                        r.put(k, integer(v))
            elif kind == "profiled":
                r.put("max_total_tokens_requested", integer(g["asked"]))
                r.put("profiled_max_total_num_tokens", integer(g["prof"]))
                r.setting("max_total_tokens", integer(g["asked"]))
                if integer(g["prof"]) <= 0:
                    r.notes.append(f"the profiled KV pool is {g['prof']} tokens: no memory left for the cache")
            elif kind == "too_long":
                r.put("input_tokens", integer(g["n"]))
                r.put("max_allowed_length", integer(g["max"]))
            elif kind == "server_args":
                args = _args(g["args"])
                path = args.get("model_path")
                if isinstance(path, str):
                    r.model_id = r.model_id or path
                for k in SETTING_KEYS:
                    if k in args:
                        r.setting(k, args[k])
        if hit:
            r.matched += 1
    tp = r.settings.get("tp_size")
    if isinstance(tp, int):
        r.tp = tp
    elif max_tp >= 1:
        r.min_tp = max_tp + 1
        r.notes.append(f"rank prefixes name TP{max_tp}: TP is at least {max_tp + 1}")
    for key in ("tp_size", "mem_fraction_static"):
        if key not in r.settings:
            r.missing.append(key)
    if r.model_id is None:
        r.missing.append("model")
    return r
