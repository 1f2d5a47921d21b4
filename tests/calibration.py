"""The engine-calibration cases (tests/fixtures/engine_calibration.yaml) and their settings as FitOptions.

Shared by tests/test_fit.py and scripts/calibration_table.py so both read the logs the same way.
"""

from __future__ import annotations

from pathlib import Path

import yaml

from kvplan.fit import Engine, FitOptions

FIXTURE = Path(__file__).resolve().parent / "fixtures" / "engine_calibration.yaml"
CALIBRATION = {c["id"]: c for c in yaml.safe_load(FIXTURE.read_text())}

# id: the KV capacity in tokens the engine printed (vllm-01 printed blocks: 1,952 × 16 tokens)
PRINTED_TOKENS = {"vllm-01": 1952 * 16, "vllm-06": 460_496, "sglang-04": 444_500, "trtllm-02": 263_008}


def options(case: dict) -> FitOptions:
    """The log's settings as FitOptions (each engine's name for the memory fraction and batched tokens)."""
    s = case["settings"]
    return FitOptions(
        engine=Engine(case["engine"]),
        gpu_memory_utilization=s.get("gpu_memory_utilization")
        or s.get("mem_fraction_static")
        or s.get("free_gpu_memory_fraction"),
        max_model_len=s["max_model_len"],
        max_num_batched_tokens=s.get("max_num_batched_tokens") or s.get("max_num_tokens"),
        max_batch_size=s.get("max_batch_size"),
        kv_dtype=s.get("kv_dtype"),
        weights_dtype=s.get("weights_dtype"),
    )
