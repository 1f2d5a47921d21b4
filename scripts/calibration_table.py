"""Print the engine-calibration table: printed vs kvplan tokens and KV budget, with % differences.

Usage: python scripts/calibration_table.py [--current]   (reads tests/fixtures/engine_calibration.yaml)

For each log with a printed KV budget: tokens kvplan derives from that printed budget (as
``--kv-cache-memory``) vs the printed token count, and the budget kvplan predicts from the GPU and the
settings alone vs the printed budget. By default each vLLM log is read under the rules of the version it
came from (``tests/calibration.py ENGINE_VERSIONS``); ``--current`` applies the newest rules (vLLM 0.33:
null block, per-GPU batch defaults, the log's concurrency formula) to every log instead.
"""

from __future__ import annotations

import sys
from dataclasses import replace
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # the calibration cases live with the tests that check them

from kvplan.fit import Engine, FitOptions, plan_fit  # noqa: E402
from kvplan.gpus import get_gpu  # noqa: E402
from kvplan.loader import load_bundled  # noqa: E402
from tests.calibration import CALIBRATION, PRINTED_TOKENS, options  # noqa: E402

GIB = 1 << 30


def main() -> None:
    current = "--current" in sys.argv[1:]
    cases = CALIBRATION.values()
    print(
        "| case | engine (rules) | GPU | printed tokens | kvplan tokens (from printed budget) | diff "
        "| printed KV GiB | kvplan KV GiB (from GPU + settings) | diff |"
    )
    print("|---|---|---|---:|---:|---:|---:|---:|---:|")
    for case in cases:
        if case["id"] not in PRINTED_TOKENS:
            continue
        spec, gpu, opts = load_bundled(case["model"]), get_gpu(case["gpu"]), options(case, current=current)
        printed_gib = case["printed"]["kv_printed_gib"]
        given = plan_fit(spec, gpu, replace(opts, kv_cache_memory_bytes=int(printed_gib * GIB)))
        predicted = plan_fit(spec, gpu, opts)
        tokens = PRINTED_TOKENS[case["id"]]
        pred_gib = predicted.kv_budget_bytes / GIB
        engine = f"{case['engine']} {predicted.engine_version}".strip()
        print(
            f"| {case['id']} | {engine} | {gpu.id} | {tokens:,} | {given.kv_capacity_tokens:,} | "
            f"{100 * (given.kv_capacity_tokens - tokens) / tokens:+.3f} % | {printed_gib:.2f} | {pred_gib:.2f} | "
            f"{100 * (pred_gib - printed_gib) / printed_gib:+.2f} % |"
        )
    spec = load_bundled("llama3.1-70b")
    r = plan_fit(
        spec,
        get_gpu("h200"),
        FitOptions(engine=Engine.llamacpp, ctx_size=4096, n_parallel=1, kv_cache_memory_bytes=GIB),
    )
    print(
        "| llamacpp-05 | llamacpp | (RPC CPU) | 1280.00 MiB for 4096 cells "
        f"| {r.kv_bytes_per_request / 2**20:.2f} MiB | exact | - | - | - |"
    )
    spec = load_bundled("gpt-oss-120b")
    r = plan_fit(
        spec,
        get_gpu("h200"),
        FitOptions(engine=Engine.llamacpp, ctx_size=4096, n_parallel=1, kv_cache_memory_bytes=GIB, swa_full=True),
    )
    print(
        "| llamacpp-08 | llamacpp | (Apple M4 Max) | 288.00 MiB (2 × 144, --swa-full) "
        f"| {r.kv_bytes_per_request / 2**20:.2f} MiB | exact | - | - | - |"
    )


if __name__ == "__main__":
    main()
