"""tests/fixtures/vllm_budget_rules.yaml: vLLM's KV-budget rules and log formats, checked on real logs.

The fixture was written from vLLM's release wheels (0.5.5 … 0.33.0). These tests hold it to vLLM's own
output: each log line below is quoted from a public start-up log (source on each), must match the format
string the fixture gives for the version range it came from, and its printed numbers must obey the
range's formula to the printed precision. The ``[file.py:LINE]`` prefixes of a log must name its release
through the fixture's fingerprints.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

FIXTURE = Path(__file__).resolve().parent / "fixtures" / "vllm_budget_rules.yaml"
RULES = yaml.safe_load(FIXTURE.read_text())
RANGES = {r["id"]: r for r in RULES["ranges"]}
MIB = 1 << 20
GIB = 1 << 30

# Field renderings of the "format" style (see the fixture's header).
FIELD_RE = {
    "gib_2f": r"-?\d+\.\d{2}",
    "gib_round": r"-?\d+(?:\.\d{1,2})?",
    "float": r"\d+(?:\.\d+)?",
    "int": r"-?\d+",
}


def _printf_regex(fmt: str) -> str:
    out, pos = [], 0
    for m in re.finditer(r"%(%|d|s|f|\.(\d+)f)", fmt):
        out.append(re.escape(fmt[pos : m.start()]))
        tok = m.group(1)
        if tok == "%":
            out.append("%")
        elif tok == "d":
            out.append(r"(-?\d+)")
        elif tok == "s":
            out.append(r"(.+?)")
        elif tok == "f":
            out.append(r"(-?\d+\.\d{6})")
        else:
            n = int(m.group(2))
            out.append(r"(-?\d+)" if n == 0 else rf"(-?\d+\.\d{{{n}}})")
        pos = m.end()
    out.append(re.escape(fmt[pos:]))
    return "".join(out)


def _format_regex(fmt: str, fields: dict[str, str]) -> str:
    out, pos = [], 0
    for m in re.finditer(r"\{(\w+)(?::\.(\d+)f)?\}", fmt):
        out.append(re.escape(fmt[pos : m.start()]))
        name, places = m.group(1), m.group(2)
        pattern = rf"-?\d+\.\d{{{places}}}" if places else FIELD_RE[fields[name]]
        out.append(rf"(?P<{name}>{pattern})")
        pos = m.end()
    out.append(re.escape(fmt[pos:]))
    return "".join(out)


def log_format(range_id: str, key: str, since: str | None = None) -> dict:
    """The log entry ``key`` of a range (the one with ``since`` when a range has several)."""
    rng = RANGES[range_id]
    entries = [e for e in rng.get("logs", []) + rng.get("extra_logs", []) if e["key"] == key]
    if since is not None:
        entries = [e for e in entries if e.get("since") == since]
    assert len(entries) == 1, f"{range_id}/{key}: {len(entries)} entries"
    return entries[0]


def parse(range_id: str, key: str, line: str, since: str | None = None, clip_at: str | None = None):
    """Match ``line`` against the fixture's format (cut both at ``clip_at`` for a quote that was cut
    short); return the named fields (format style) or the positional values (printf style)."""
    entry = log_format(range_id, key, since)
    fmt = entry["format"]
    if clip_at is not None:
        fmt = fmt[: fmt.index(clip_at) + len(clip_at)]
        line = line[: line.index(clip_at) + len(clip_at)]
    if entry["style"] == "printf":
        m = re.fullmatch(_printf_regex(fmt), line)
        assert m, f"{range_id}/{key} does not match: {line!r}"
        return m.groups()
    m = re.fullmatch(_format_regex(fmt, entry["fields"]), line)
    assert m, f"{range_id}/{key} does not match: {line!r}"
    return {k: float(v) for k, v in m.groupdict().items()}


def _version_key(v: str) -> tuple[int, ...]:
    return tuple(int(p) for p in re.findall(r"\d+", v)[:3])


# ------------------------------------------------------------------------------------------ structure


def test_ranges_are_ordered_and_disjoint_per_engine():
    for engine in ("V0", "V1"):
        spans = [
            (_version_key(r["read"][0]), _version_key(r["read"][-1])) for r in RULES["ranges"] if r["engine"] == engine
        ]
        assert spans, engine
        for (_, last), (first, _) in zip(spans, spans[1:], strict=False):
            assert last < first, f"{engine} ranges overlap or are out of order"


def test_every_source_names_a_release_that_was_read():
    read = set(RULES["versions_read"])
    for rng in RULES["ranges"]:
        assert set(rng["read"]) <= read, rng["id"]
        for item in rng["terms"] + rng.get("logs", []) + rng.get("extra_logs", []):
            versions = re.findall(r"(\d+\.\d+\.\d+(?:\.post\d+)?) [\w/]+\.py:\d+", item["source"])
            assert versions and set(versions) <= read, (rng["id"], item["source"])
        for term in rng["terms"]:
            assert term["subtracted"] in (True, False, "env"), (rng["id"], term["name"])


def test_cudagraph_estimate_is_subtracted_by_default_from_0_20():
    """VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS: '0' in 0.18.0 envs.py:1636, '1' in 0.20.0 envs.py:1725."""
    defaults = {}
    for rng in RULES["ranges"]:
        for term in rng["terms"]:
            if term["name"] == "cudagraph_estimate":
                defaults[rng["id"]] = term["env_default"]
    assert defaults == {
        "v1-cudagraph-estimate-opt-in": 0,
        "v1-cudagraph-estimate-default": 1,
        "v1-total-consumed": 1,
    }


# ------------------------------------------------------------------------------------------ real logs


def test_v0_memory_profiling_results_line():
    """vLLM V0 (0.6.4 format), Llama-3.1-8B-Instruct on an RTX 3090, U 0.9, max_model_len 20000:
    https://github.com/vllm-project/vllm/issues/10517 (comment by kaspersiminski, 2024-12-02)."""
    line = (
        "Memory profiling results: total_gpu_memory=23.58GiB initial_memory_usage=15.34GiB "
        "peak_torch_memory=17.06GiB memory_usage_post_profile=15.35GiB non_torch_memory=0.35GiB "
        "kv_cache_size=3.81GiB gpu_memory_utilization=0.90"
    )
    total, _, peak, _, non_torch, kv, util = map(
        float, parse("v0-peak-plus-nontorch", "memory_profiling_results", line)
    )
    # available = total x U - torch peak (weights included) - non-torch, each printed to 0.01
    assert total * util - peak - non_torch == pytest.approx(kv, abs=0.015)
    assert parse("v0-free-drop", "weights", "Loading model weights took 14.9888 GB") == ("14.9888",)
    assert parse(
        "v0-peak-plus-nontorch", "max_concurrency", "Maximum concurrency for 20000 tokens per request: 1.56x"
    ) == (
        "20000",
        "1.56",
    )


def test_v1_free_memory_line_0_10_2_format():
    """The kv_cache_memory_bytes PR's own log (google/gemma-3-4b-it):
    https://github.com/vllm-project/vllm/pull/21489 (description, 2025-07-24); the quote stops inside the
    second --kv-cache-memory value."""
    line = (
        "Free memory on device (177.66/178.36 GiB) on startup. Desired GPU memory utilization is (0.9, 160.53 "
        "GiB). Actual usage is 8.58 GiB for weight, 9.96 GiB for peak activation, 0.07 GiB for non-torch memory, "
        "and 0.65 GiB for CUDAGraph memory. Replace gpu_memory_utilization config with "
        "`--kv-cache-memory=151519866880` to fit into requested memory, or `--kv-cache-memory="
    )
    f = parse("v1-snapshot-before-nccl", "free_on_device", line, clip_at="or `--kv-cache-memory=")
    assert f["utilization"] == 0.9
    # kv_to_requested = int(requested) - weights - activation - non-torch - CUDA graph - 150 MiB, exact
    # bytes; here from five values printed to 0.01 GiB
    rest = f["requested"] - f["weights"] - f["activation"] - f["non_torch"] - f["cudagraph"] - 150 * MIB / GIB
    assert f["kv_to_requested"] / GIB == pytest.approx(rest, abs=0.03)


def test_v1_total_consumed_lines():
    """A V1 log of the 0.28+ formats (an 8B BF16 model, 79.25 GiB GPU, U 0.92, max_model_len 131072),
    quoted in tests/fixtures/engine_calibration.yaml as vllm-06 (public course notes 'VLLM startup log:
    findings', Run2, public file #70231782181); the quote stops after 'CUDAGraph memory.'."""
    line = (
        "Free memory on device (78.84/79.25 GiB) on startup. Desired GPU memory utilization is (0.92, 72.91 GiB). "
        "Actual usage is 15.26 GiB for consumed memory (weights + non-torch), 1.44 GiB for peak activation, and "
        "0.23 GiB for CUDAGraph memory."
    )
    f = parse("v1-total-consumed", "free_on_device", line, clip_at="GiB for CUDAGraph memory.")
    (available,) = parse("v1-total-consumed", "available_kv", "Available KV cache memory: 56.21 GiB")
    # requested = ceil(total x U); available = requested - consumed - peak activation, where the printed
    # peak activation already holds the CUDA-graph estimate when it is applied (0.27+)
    assert f["total"] * f["utilization"] == pytest.approx(f["requested"], abs=0.01)
    assert f["requested"] - f["consumed"] - f["activation"] == pytest.approx(float(available), abs=0.015)
    tokens = parse(
        "v1-total-consumed",
        "kv_cache_size",
        "GPU KV cache size: 460,496 tokens, Maximum concurrency for 131,072 tokens per request: 3.51x",
        since="0.28.0",
    )
    assert tokens == ("460,496", "131,072", "3.51")
    assert parse("v1-total-consumed", "weights", "Model loading took 15.0 GiB memory and 5.420225 seconds") == (
        "15.0",
        "5.420225",
    )


# A vLLM 0.27.1 log (gpustack/runner upgrade to 0.27.1; workers TP0 and TP1, U 0.82):
# https://github.com/gpustack/runner/pull/251 (comment by axsapronov), each line with its [file.py:LINE].
GPUSTACK_0_27_1 = [
    ("profiling_cudagraph", "gpu_model_runner.py:6681", "Profiling CUDA graph memory: PIECEWISE=16 (largest=16)"),
    ("estimated_cudagraph", "gpu_model_runner.py:6806", "Estimated CUDA graph memory: 0.36 GiB total"),
    (
        "cudagraph_profiling_on",
        "gpu_worker.py:578",
        "CUDA graph memory profiling is enabled (default since v0.21.0). The current "
        "--gpu-memory-utilization=0.8200 is equivalent to --gpu-memory-utilization=0.8048 without CUDA graph "
        "memory profiling. To maintain the same effective KV cache size as before, increase "
        "--gpu-memory-utilization to 0.8352. To disable, set VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS=0.",
    ),
    ("available_kv", "gpu_worker.py:563", "Available KV cache memory: 6.87 GiB"),
]


def test_log_prefixes_name_the_release():
    sites = {key: site for key, site, _ in GPUSTACK_0_27_1}
    matching = [
        v
        for v, fp in RULES["fingerprints"].items()
        if all(fp.get(key, "").split(" ")[0] == site for key, site in sites.items())
    ]
    assert matching == ["0.27.0", "0.27.1"]


def test_cudagraph_estimate_lines_of_0_27_1():
    values = {key: parse("v1-total-consumed", key, line) for key, _, line in GPUSTACK_0_27_1}
    assert values["profiling_cudagraph"] == ("PIECEWISE=16 (largest=16)",)
    current, equivalent, suggested = map(float, values["cudagraph_profiling_on"])
    # vLLM prints U - cg/total and U + cg/total, each rounded to 4 places
    assert current - equivalent == pytest.approx(suggested - current, abs=1e-4)
    # the estimate (0.36 GiB) over that share of the device gives the GPU's size: a 24 GiB-class card
    (estimate,) = map(float, values["estimated_cudagraph"])
    assert 22 < estimate / (current - equivalent) < 26
