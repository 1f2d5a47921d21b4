"""Cost of kvplan on the largest and most hostile inputs it accepts or refuses (issue 20's slow cases).

Each case runs ``python -m kvplan ...`` as a whole process (``--runs`` times; the median is reported), on
inputs written to a temporary folder, and prints the CPU seconds of the process (user + system, from
``resource.getrusage(RUSAGE_CHILDREN)``: other processes on a shared machine barely move it) and its wall
seconds. The exit status is 1 when a case's median CPU time is above its target (none for the cases only
reported). The tests check values and that work grows linearly (counted, not timed); the times live here.

    .venv/bin/python scripts/bench_inputs.py [--runs 3] [--only fleet]

Cases:

- estimate on 100,000-layer spec YAMLs (plain, num_kv_shared_layers, a layers: rule block): target 1 s;
- a GGUF claiming 2^63 tensors over 1 MiB of zeros (refused from the file size): target 1 s;
- fleet of a 1,000-class workload over every catalog GPU and TP, no SLO: target 15 s;
- fleet with latency targets (every class a tpot_ms, a billion requests each, so the packing asks the step of
  most mixes): 100 classes over every catalog GPU, target 25 s (59 s before the packing's check kept each
  class's cap and the stage's per-token terms); 1,000 classes (shared prefixes too) on an H100 and an L4,
  target 6 s (10.7 s before);
- sweep --all table of 5 models x 8 --seq x 20 GPUs x 2 KV dtypes x 4 TPs (6,400 rows) to a pipe: target 2 s;
- fit of a 100,000-layer model that does not fit, on vLLM and on llama.cpp (the advice plans it about 140
  times, at every TP and catalog GPU; the per-layer work is computed once per spec and key and reused,
  ``ModelSpec.memo``): target 5 s each (before: 59 s on vLLM, 862 s on llama.cpp).
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

BIG_SPEC = (
    "name: big\nsource: bench\nnum_layers: 100000\nnum_q_heads: 8\nnum_kv_heads: 8\nhead_dim: 128\n"
    "dtype: bf16\nmax_model_len: 1048576\nparam_count: 1000000000\n"
)
GPUS = [
    "a100-sxm-40gb", "a100-pcie-40gb", "a100-sxm-80gb", "a100-pcie-80gb", "h100-sxm-80gb", "h100-pcie-80gb",
    "h100-nvl-94gb", "h200-sxm-141gb", "h200-nvl-141gb", "h20-96gb", "l4-24gb", "l40s-48gb", "l40-48gb",
    "rtx4090-24gb", "b200-180gb", "mi300x-192gb", "a10g-24gb", "t4-16gb", "v100-32gb", "mi355x-288gb",
]  # fmt: skip


def write_inputs(folder: Path) -> dict[str, Path]:
    """The input files of the cases, in ``folder``."""
    out = {}
    variants = {
        "plain": "",
        "shared": "num_kv_shared_layers: 50000\n",
        "rules": "layers: {default: full, rules: [{kind: full, period: 4, offset: 3}]}\n",
    }
    for key, extra in variants.items():
        out[key] = folder / f"big-{key}.yaml"
        out[key].write_text(BIG_SPEC + extra)
    # GGUF v3: magic, version, tensor_count = 2^63, kv_count = 1 (general.architecture = llama), then zeros
    arch = struct.pack("<Q", 20) + b"general.architecture" + struct.pack("<I", 8) + struct.pack("<Q", 5) + b"llama"
    out["gguf"] = folder / "many-tensors.gguf"
    out["gguf"].write_bytes(b"GGUF" + struct.pack("<IQQ", 3, 2**63, 1) + arch + b"\0" * (1 << 20))
    lines = ["name: big", "classes:"]
    lines += [f"  - {{name: c{i}, concurrency: {1 + i % 50}, tokens: {512 + 37 * i}}}" for i in range(1000)]
    out["workload"] = folder / "classes-1000.yaml"
    out["workload"].write_text("\n".join(lines) + "\n")
    for n, prefix in ((100, False), (1000, True)):  # latency targets: the break-it pass's c100_tpot and many.yaml
        lines = ["name: slo", "classes:"]
        lines += [f"  - {{name: c{i}, concurrency: 1000000000, tokens: {1000 + i}, tpot_ms: {50 + i}"
                  + (f", shared_prefix: {i}}}" if prefix else "}") for i in range(n)]  # fmt: skip
        out[f"slo{n}"] = folder / f"classes-{n}-tpot.yaml"
        out[f"slo{n}"].write_text("\n".join(lines) + "\n")
    return out


def cases(files: dict[str, Path]) -> list[tuple[str, list[str], float | None]]:
    """(label, kvplan argv, target CPU seconds or None)."""
    sweep = ["sweep", "llama3-8b", "qwen3-8b", "mistral-7b-v0.1", "gemma3-27b", "llama3-70b"]
    for s in ("1k", "2k", "4k", "8k", "16k", "32k", "64k", "128k"):
        sweep += ["--seq", s]
    for g in GPUS:
        sweep += ["--gpu", g]
    sweep += ["--kv-dtype", "auto", "--kv-dtype", "fp8", "--tp", "1", "--tp", "2", "--tp", "4", "--tp", "8", "--all"]
    return [
        ("estimate: 100,000 layers", ["estimate", str(files["plain"]), "--seq", "4k"], 1.0),
        ("estimate: 100,000 layers, 50,000 shared", ["estimate", str(files["shared"]), "--seq", "4k"], 1.0),
        ("estimate: 100,000 layers, layers: rules", ["estimate", str(files["rules"]), "--seq", "4k"], 1.0),
        ("estimate: GGUF of 2^63 tensors over 1 MiB", ["estimate", str(files["gguf"]), "--seq", "4k"], 1.0),
        ("fleet: 1,000 classes, every catalog GPU", ["fleet", "llama3-8b", "--workload", str(files["workload"])], 15.0),
        (
            "fleet: 100 classes with tpot_ms, every catalog GPU",
            ["fleet", "llama3-8b", "--workload", str(files["slo100"])],
            25.0,
        ),
        (
            "fleet: 1,000 classes with tpot_ms, h100 + l4",
            ["fleet", "llama3-8b", "--workload", str(files["slo1000"]), "--gpu", "h100", "--gpu", "l4"],
            6.0,
        ),
        ("sweep --all: 6,400-row table", sweep, 2.0),
        ("fit: 100,000 layers that do not fit (advice)", ["fit", str(files["plain"]), "--gpu", "l4"], 5.0),
        ("fit: the same on llama.cpp", ["fit", str(files["plain"]), "--gpu", "l4", "--engine", "llamacpp"], 5.0),
    ]


def run_once(argv: list[str]) -> tuple[float, float, int]:
    """(CPU seconds, wall seconds, exit code) of one ``python -m kvplan`` process, output discarded."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    p = subprocess.run([sys.executable, "-m", "kvplan", *argv], cwd=ROOT, stdout=subprocess.DEVNULL,
                       stderr=subprocess.DEVNULL, env=dict(os.environ, PYTHONPATH=str(ROOT)))  # fmt: skip
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return cpu, wall, p.returncode


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=3, help="runs per case (the median is reported)")
    ap.add_argument("--only", help="run only the cases whose label contains this text")
    args = ap.parse_args()
    failed = 0
    with tempfile.TemporaryDirectory(prefix="kvplan-bench-") as tmp:
        todo = [c for c in cases(write_inputs(Path(tmp))) if not args.only or args.only in c[0]]
        print(f"{'case':46} {'exit':>4} {'CPU s':>8} {'wall s':>8} {'target':>7}")
        for label, argv, target in todo:
            runs = [run_once(argv) for _ in range(args.runs)]
            cpu = statistics.median(r[0] for r in runs)
            wall = statistics.median(r[1] for r in runs)
            verdict = "" if target is None else ("ok" if cpu <= target else "SLOW")
            failed += verdict == "SLOW"
            shown = "-" if target is None else f"{target:g}"
            print(f"{label:46} {runs[0][2]:>4} {cpu:>8.2f} {wall:>8.2f} {shown:>7} {verdict}", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
