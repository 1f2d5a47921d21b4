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

# id: the vLLM rule set (kvplan.engines.vllm) of the version the log came from. vllm-01 and vllm-17 are V0
# logs ('# GPU blocks', 'Memory profiling results'); vllm-06 is a V1 log from before CUDA-graph memory was
# subtracted (its 0.23 GiB is printed, not taken from the budget): the rule set kvplan had for those logs.
ENGINE_VERSIONS = {"vllm-01": "0.6", "vllm-06": "0.11", "vllm-17": "0.6"}


def options(case: dict, current: bool = False) -> FitOptions:
    """The log's settings as FitOptions (each engine's name for the memory fraction and batched tokens),
    under the engine version the log came from (``current``: the newest rules instead)."""
    s = case["settings"]
    return FitOptions(
        engine_version=None if current else ENGINE_VERSIONS.get(case["id"]),
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
