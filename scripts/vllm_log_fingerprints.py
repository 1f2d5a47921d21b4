"""Where vLLM logs its memory-budget lines, version by version: the ``[file.py:LINE]`` of each logger call.

vLLM prefixes every log line with the file and line of the logger call (``INFO 08-14 14:07:22
[gpu_worker.py:563] Available KV cache memory: 6.87 GiB``), so these line numbers name the release a
log came from. This script reads vLLM's own source, unpacked from the release wheels, and prints the
``fingerprints:`` block of ``tests/fixtures/vllm_budget_rules.yaml``. It imports nothing from vLLM.

Usage::

    # one folder per release, each holding the wheel's vllm/**.py files:
    #   pip download --no-deps --only-binary=:all: vllm==0.27.1 -d wheels/
    #   unzip -q wheels/vllm-0.27.1-*.whl 'vllm/*.py' -d SRC/0.27.1
    python scripts/vllm_log_fingerprints.py SRC > fingerprints.yaml

A message built into ``msg`` first and logged later (``logger.info(msg)``) is given at that later call
with its level (``gpu_worker.py:789 info``), since the later call is what the prefix shows.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

# key: (file under vllm/, pattern of the message's first literal)
MESSAGES: dict[str, tuple[str, str]] = {
    "available_kv": ("v1/worker/gpu_worker.py", r'"Available KV cache memory: '),
    "cudagraph_profiling_on": ("v1/worker/gpu_worker.py", r'"CUDA graph memory profiling is enabled'),
    "cudagraph_profiling_off": (
        "v1/worker/gpu_worker.py",
        r'"CUDA graph memory profiling is disabled|"In v0\.19, CUDA graph memory profiling',
    ),
    "cudagraph_pool_actual": ("v1/worker/gpu_worker.py", r'"CUDA graph pool memory: '),
    "free_on_device": ("v1/worker/gpu_worker.py", r'"Desired GPU memory utilization is "'),
    "profiling_cudagraph": ("v1/worker/gpu_model_runner.py", r'"Profiling CUDA graph memory: '),
    "estimated_cudagraph": ("v1/worker/gpu_model_runner.py", r'"Estimated CUDA graph memory: %'),
    "graph_capturing": ("v1/worker/gpu_model_runner.py", r'"Graph capturing finished in'),
    "model_loading": ("v1/worker/gpu_model_runner.py", r'"Model loading took|"Loading model weights took'),
    "encoder_cache": ("v1/worker/gpu_model_runner.py", r'"Encoder cache will be initialized with a'),
    "kv_cache_size": ("v1/core/kv_cache_utils.py", r'"(%s|GPU) KV cache size: |"# GPU blocks: '),
    "kv_concurrency": ("v1/core/kv_cache_utils.py", r'"Maximum concurrency for %s tokens per request'),
    "v0_memory_profiling": ("worker/worker.py", r'"Memory profiling takes|"Memory profiling results'),
    "v0_blocks": ("executor/executor_base.py", r'"# %s blocks: %d'),
    "v0_blocks_gpu": ("executor/gpu_executor.py", r'"# GPU blocks: %d'),
    "v0_weights": ("worker/model_runner.py", r'"Loading model weights took|"Model loading took'),
    "v0_graph_capturing": ("worker/model_runner.py", r'"Graph capturing finished in'),
}
LOGGER_CALL = re.compile(r"logger\.(\w+)\(")
LOGGED_MSG = re.compile(r"logger\.(\w+)\(msg\)")


def _call_site(lines: list[str], i: int) -> str | None:
    """'LINE' of the logger call whose arguments hold line ``i`` (0-based), or 'LINE level' of the later
    ``logger.<level>(msg)`` for a message assigned to ``msg``; None when the literal is not logged."""
    for j in range(i, max(-1, i - 12), -1):
        if LOGGER_CALL.search(lines[j]):
            return str(j + 1)
        if re.match(r"\s*(msg|raise)\b", lines[j]) or "raise " in lines[j]:
            break
    for j in range(i, min(len(lines), i + 60)):
        if "raise " in lines[j]:
            return None
        m = LOGGED_MSG.search(lines[j])
        if m:
            return f"{j + 1} {m.group(1)}"
    return None


def fingerprint(vllm_dir: Path) -> dict[str, str]:
    """{message key: 'file.py:LINE[,LINE…]'} for one unpacked ``vllm/`` folder."""
    out: dict[str, str] = {}
    for key, (rel, pattern) in MESSAGES.items():
        path = vllm_dir / rel
        if not path.is_file():
            continue
        lines = path.read_text(encoding="utf-8").splitlines()
        sites = [s for i, line in enumerate(lines) if re.search(pattern, line) and (s := _call_site(lines, i))]
        if sites:
            out[key] = f"{path.name}:{','.join(sites)}"
    return out


def _version_key(name: str) -> tuple:
    return tuple(int(p) if p.isdigit() else p for p in re.split(r"[.]", name))


def main(argv: list[str]) -> int:
    if len(argv) != 1 or not Path(argv[0]).is_dir():
        print("usage: vllm_log_fingerprints.py SRC  (SRC/<version>/vllm/... from the release wheels)", file=sys.stderr)
        return 2
    root = Path(argv[0])
    print("fingerprints:")
    for vdir in sorted((d for d in root.iterdir() if (d / "vllm").is_dir()), key=lambda d: _version_key(d.name)):
        fp = fingerprint(vdir / "vllm")
        print(f'  "{vdir.name}":')
        for key, site in fp.items():
            print(f'    {key}: "{site}"')
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
