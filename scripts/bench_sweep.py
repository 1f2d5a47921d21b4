"""Benchmark ``kvplan sweep``: the vectorized sweep against a loop of the scalar ``plan_fit``.

Builds ~10^6 configurations (43 bundled models × 62 sequence lengths × 33 catalog GPUs × 4 KV dtypes ×
3 TP degrees, less the TPs a model's heads refuse), times the vectorized sweep (median of --repeat runs,
computing only: no printing; numpy already imported), times ``plan_fit`` in a Python loop over a random
sample of rows and extrapolates, checks that the sampled rows are equal, and prints configurations per
second for both and the speed-up.

    .venv/bin/python scripts/bench_sweep.py [--repeat 5] [--sample 2000] [--engine vllm]
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import time
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from kvplan.fit import Engine, FitOptions, plan_fit  # noqa: E402
from kvplan.gpus import load_catalog  # noqa: E402
from kvplan.loader import load_all_bundled  # noqa: E402
from kvplan.sweep import VALUE_COLUMNS, sweep  # noqa: E402

DTYPES = ["auto", "fp8", "int8", "q4_0"]
TPS = [1, 2, 4]


def seq_lengths(n: int = 62) -> list[int]:
    """``n`` context lengths from 256 to ~2M tokens, geometric (several per doubling), as ints."""
    return sorted({round(256 * 2 ** (13 * i / (n - 1))) for i in range(n)})


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=5, help="vectorized runs (the median is reported)")
    ap.add_argument("--sample", type=int, default=2000, help="rows timed with the scalar plan_fit")
    ap.add_argument("--engine", default="vllm", choices=[e.value for e in Engine])
    args = ap.parse_args()

    specs, gpus, seqs = load_all_bundled(), load_catalog(), seq_lengths()
    opts = FitOptions(engine=Engine(args.engine))
    candidates = len(specs) * len(seqs) * len(gpus) * len(DTYPES) * len(TPS)
    import numpy  # noqa: F401  (import time is not the sweep's)

    times = []
    for _ in range(args.repeat):
        t0 = time.perf_counter()
        result = sweep(specs, seqs, gpus, DTYPES, TPS, opts)
        times.append(time.perf_counter() - t0)
    vec_s = statistics.median(times)
    n = result.num_rows

    rnd = random.Random(0)
    rows = rnd.sample(range(n), min(args.sample, n))
    t0 = time.perf_counter()
    refs = [
        plan_fit(
            specs[int(result.model_index[i])],
            gpus[int(result.gpu_index[i])],
            replace(
                opts,
                tensor_parallel_size=int(result.tp[i]),
                max_model_len=int(result.seq[i]),
                kv_dtype=result.kv_dtype_names[int(result.kv_dtype_index[i])],
            ),
        )
        for i in rows
    ]
    scalar_s = time.perf_counter() - t0
    mismatches = sum(
        any(result.columns[c][i].item() != getattr(ref, c) for c in VALUE_COLUMNS)
        for i, ref in zip(rows, refs, strict=True)
    )

    vec_rate = n / vec_s
    scalar_rate = len(rows) / scalar_s
    print(
        f"configurations: {n:,} computed ({candidates:,} in the cross product, {result.skipped_rows:,} skipped for TP)"
    )
    print(
        f"  {len(specs)} models × {len(seqs)} seq lengths × {len(gpus)} GPUs × {len(DTYPES)} KV dtypes × "
        f"{len(TPS)} TPs, {args.engine}"
    )
    print(
        f"vectorized sweep: {vec_s:.3f} s median of {args.repeat} (min {min(times):.3f}, max {max(times):.3f}) "
        f"= {vec_rate:,.0f} configurations/s"
    )
    print(
        f"scalar plan_fit loop: {len(rows):,} rows in {scalar_s:.3f} s = {scalar_rate:,.0f} configurations/s "
        f"(extrapolated to all rows: {n / scalar_rate:,.1f} s)"
    )
    print(f"speed-up: {vec_rate / scalar_rate:,.0f}×")
    print(f"sampled rows equal to plan_fit: {len(rows) - mismatches:,} of {len(rows):,}")
    return 1 if mismatches else 0


if __name__ == "__main__":
    sys.exit(main())
