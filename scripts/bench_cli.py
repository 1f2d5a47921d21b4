"""Start-up cost of the CLI: ``kvplan estimate`` and ``kvplan fit`` as whole processes against a floor.

The floor is what any typer + PyYAML + rich program pays: ``python -c "import typer, yaml, rich.table"``
with the same interpreter. Each command runs ``--runs`` times, interleaved with the others (so drift in
machine load hits all alike), after one warm-up round; the script prints wall-clock medians (ms) and
the ratio of each to the floor, and exits 1 if a ratio is above ``--target`` (default 1.3).

    .venv/bin/python scripts/bench_cli.py [--runs 15] [--target 1.3]

Bytecode caching is switched on for the timed processes (``PYTHONDONTWRITEBYTECODE`` removed from their
environment; ``--no-pyc`` keeps it): an installed kvplan has its ``.pyc`` files, and without them each run
compiles kvplan's modules again (~11 ms here). The warm-up round writes them (``kvplan/__pycache__``, ignored
by git).

Where a ratio is high: ``python -X importtime -m kvplan estimate llama3-8b --seq 4096``.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def commands() -> dict[str, list[str]]:
    """Label → argv. The console script is included when the interpreter's folder has one."""
    py = sys.executable
    cmds = {
        "floor: import typer, yaml, rich.table": [py, "-c", "import typer, yaml, rich.table"],
        "python -m kvplan estimate llama3-8b --seq 4096": [
            py,
            "-m",
            "kvplan",
            "estimate",
            "llama3-8b",
            "--seq",
            "4096",
        ],
        "python -m kvplan fit llama3-8b --gpu h100": [py, "-m", "kvplan", "fit", "llama3-8b", "--gpu", "h100"],
    }
    script = Path(py).parent / "kvplan"
    if script.is_file() and os.access(script, os.X_OK):
        cmds["kvplan estimate llama3-8b --seq 4096"] = [str(script), "estimate", "llama3-8b", "--seq", "4096"]
        cmds["kvplan fit llama3-8b --gpu h100"] = [str(script), "fit", "llama3-8b", "--gpu", "h100"]
    return cmds


def run_once(argv: list[str], env: dict[str, str]) -> float:
    """Wall-clock seconds of one process (stdout and stderr discarded); raises if it fails."""
    t0 = time.perf_counter()
    subprocess.run(argv, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
    return time.perf_counter() - t0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=15, help="runs per command (>= 10 for a stable median)")
    ap.add_argument("--target", type=float, default=1.3, help="largest acceptable ratio to the floor")
    ap.add_argument("--no-pyc", action="store_true", help="keep PYTHONDONTWRITEBYTECODE as the environment has it")
    args = ap.parse_args()

    env = dict(os.environ)
    if not args.no_pyc:
        env.pop("PYTHONDONTWRITEBYTECODE", None)
    cmds = commands()
    for argv in cmds.values():  # warm-up: page cache, .pyc files
        run_once(argv, env)
    samples: dict[str, list[float]] = {k: [] for k in cmds}
    for _ in range(args.runs):
        for label, argv in cmds.items():
            samples[label].append(run_once(argv, env))

    floor_label = next(iter(cmds))
    floor = statistics.median(samples[floor_label])
    pyc = "no .pyc caching (PYTHONDONTWRITEBYTECODE)" if env.get("PYTHONDONTWRITEBYTECODE") else ".pyc cached"
    print(f"{sys.executable}, {args.runs} interleaved runs each, median wall-clock, {pyc}")
    worst = 0.0
    for label, times in samples.items():
        med = statistics.median(times)
        ratio = med / floor
        if label != floor_label:
            worst = max(worst, ratio)
        print(
            f"  {med * 1000:7.1f} ms  {ratio:5.2f}× floor  "
            f"(min {min(times) * 1000:.1f}, max {max(times) * 1000:.1f})  {label}"
        )
    verdict = "within" if worst <= args.target else "above"
    print(f"worst ratio {worst:.2f}× ({verdict} the {args.target}× target)")
    return 0 if worst <= args.target else 1


if __name__ == "__main__":
    sys.exit(main())
