"""The budget model against the public engine-log corpus (issue 15): the ranges kvplan prints hold every budget
an engine printed, the residuals kvplan prints them from are current, and the vLLM rules table agrees with the
version boundaries read from vLLM's release wheels (tests/fixtures/vllm_budget_rules.yaml)."""

from __future__ import annotations

import importlib.util
import statistics
from pathlib import Path

import pytest
import yaml

from kvplan.data.budget_residuals import RESIDUALS
from kvplan.engines import vllm_budget
from kvplan.fit import FitOptions, plan_fit
from kvplan.gpus import get_gpu
from kvplan.loader import load_bundled

from .budget_cases import CORPUS, GIB, NOT_MODELLED, load_cases

ROOT = Path(__file__).resolve().parent.parent
RULES = yaml.safe_load((Path(__file__).parent / "fixtures" / "vllm_budget_rules.yaml").read_text())


def _table():
    spec = importlib.util.spec_from_file_location("budget_table", ROOT / "scripts" / "budget_table.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture(scope="module")
def rows():
    return [r for r in _table().rows() if "kvplan" in r]


def test_every_printed_budget_is_inside_the_range_kvplan_prints(rows):
    # the range is the modelled terms at the extremes measured on these logs: no log may fall outside it
    outside = [r["id"] for r in rows if not r["inside"]]
    assert len(rows) >= 19 and not outside


def test_the_residuals_kvplan_prints_from_are_current(rows):
    # kvplan/data/budget_residuals.py is written by `python scripts/budget_table.py --write`
    assert _table().residuals(rows) == RESIDUALS


def test_median_error_per_engine_does_not_regress(rows):
    # docs/budget-validation.md, measured on the corpus: vLLM V1 from 8.1 % (the model before issue 15) to 1.9 %
    # (the issue's target: 2 %), 10 of its 11 logs within 5 %
    worst = {"vllm-v1": 0.02, "vllm-v0": 0.09, "sglang": 0.10, "trtllm": 0.05}
    for key, limit in worst.items():  # text models; the two multimodal V0 logs are in their own row of the doc
        errs = [abs(r["err"]) for r in rows if r["key"] == key and r["err"] is not None and not r["multimodal"]]
        assert errs and statistics.median(errs) <= limit, key


def test_v1_logs_within_five_percent(rows):
    # the issue's second target: 90 % of a engine's logs within 5 % of the printed budget (vLLM V1: 10 of 11; the
    # eleventh, gpt-oss-120b at 131,072 tokens on one H100 (vllm#27508), keeps a 1.71 GiB budget kvplan puts at
    # 3.86 GiB, inside its range)
    errs = [abs(r["err"]) for r in rows if r["key"] == "vllm-v1" and r["err"] is not None]
    assert sum(e <= 0.05 for e in errs) / len(errs) >= 0.9


def test_the_ranges_hold_out_of_sample():
    # each log left out of the residuals its range is built from: docs/budget-validation.md's last column
    table = _table()
    loo = table.leave_one_out(table.rows())
    v1 = [ok for i, ok in loo.items() if i.startswith("vllm-") and i not in V0_IDS]
    assert v1 and all(v1)


V0_IDS = {"vllm-01", "vllm-vllm-10511-tp1", "vllm-vllm-10517-b", "vllm-vllm-12330", "vllm-gpustack-1800",
          "vllm-vllm-16570"}  # fmt: skip


def test_flashinfer_sampler_as_its_log_says():
    # dennislee22/vLLM-benchmarking log/vllm-7B-1gpuA10080GB-0.5GRAM.log (vLLM 0.10.1.1, Qwen2-7B, A100 80GB, U 0.5,
    # 2,048 batched tokens) prints "Using FlashInfer for top-p & top-k sampling." and "Available KV cache memory:
    # 24.83 GiB"; the version's default sampler (the PyTorch sort path) would profile 256 x 152,064 x 27 B
    r = plan_fit(load_bundled("qwen2.5-7b"), get_gpu("a100-80gb"),
                 FitOptions(gpu_memory_utilization=0.5, max_model_len=16384, max_num_batched_tokens=2048,
                            engine_version="0.10.1.1", vllm_sampler="flashinfer"))  # fmt: skip
    assert abs(r.kv_budget_bytes - 24.83 * GIB) < 0.05 * GIB
    default = plan_fit(load_bundled("qwen2.5-7b"), get_gpu("a100-80gb"),
                       FitOptions(gpu_memory_utilization=0.5, max_model_len=16384, max_num_batched_tokens=2048,
                                  engine_version="0.10.1.1"))  # fmt: skip
    assert r.kv_budget_bytes - default.kv_budget_bytes == 256 * 152064 * (27 - 10)


def test_not_modelled_table_is_not_stale():
    ids = {p.stem for p in CORPUS.glob("*.yaml")}
    assert set(NOT_MODELLED) <= ids
    skipped = {c.id: c.skip for c in load_cases()}
    assert all(skipped[i] == why for i, why in NOT_MODELLED.items())


def test_the_issue_example_gpt_oss_120b_on_one_h100():
    # vllm-project/vllm#27508: gpt-oss-120b, H100, U 0.95, 1,024 batched tokens: vLLM had 1.71 GiB for KV (kvplan
    # said 13.12 before issue 15). Now: MXFP4 experts padded as vLLM lays them out (65.9 GiB) and the sampler's
    # 1,024 rows × 201,088 vocab in the profile run; the printed 1.71 GiB lies inside kvplan's range
    r = plan_fit(load_bundled("gpt-oss-120b"), get_gpu("h100"),
                 FitOptions(gpu_memory_utilization=0.95, max_num_batched_tokens=1024, engine_version="0.10.2"))  # fmt: skip
    assert r.kv_budget_low_bytes <= 1.71 * GIB <= r.kv_budget_high_bytes
    assert abs(r.kv_budget_bytes - 1.71 * GIB) < 2.5 * GIB


def test_vllm_06_activation_and_graphs_as_printed():
    # tests/fixtures/engine_logs/vllm-06.yaml (vLLM 0.31 by its log's line numbers): "1.44 GiB for peak activation"
    # (which includes the CUDA-graph estimate from 0.27) for Llama-3.1-8B at 8,192 batched tokens, 1,024 sequences
    from kvplan.gpus import custom_gpu

    r = plan_fit(load_bundled("llama3.1-8b"), custom_gpu(round(79.25 * GIB), "79.25GiB"),
                 FitOptions(gpu_memory_utilization=0.92, max_model_len=131072, engine_version="0.31"))  # fmt: skip
    assert abs(r.activation_bytes - 1.44 * GIB) / (1.44 * GIB) < 0.03
    assert abs(r.kv_budget_bytes - 56.21 * GIB) / (56.21 * GIB) < 0.01


@pytest.mark.parametrize("rng", RULES["ranges"], ids=lambda r: r["id"])
def test_vllm_budget_rules_follow_the_wheels(rng):
    """Each version range read from vLLM's wheels maps to kvplan's rules: the engine generation, the CUDA-graph
    estimate subtracted by default from 0.20, requested rounded up from 0.14, NCCL's start-up counted to 0.10."""
    first, last = rng["read"][0], rng["read"][-1]
    for version in (first, last):
        b = vllm_budget.resolve(version)
        v = tuple(int(x) for x in version.split(".")[:2])
        if rng["engine"] == "V0":
            if not vllm_budget.is_v0(version):
                continue  # V0 code beside V1 (0.8-0.10): kvplan plans the default engine, V1
            assert b.generation == "v0"
            continue
        if v < (0, 8):
            continue  # V1 in 0.7 was opt-in: kvplan plans V0 there
        assert b.generation == "v1"
        assert b.cudagraph_subtracted == (v >= (0, 20))
        assert b.requested_ceil == (v >= (0, 14))
        assert b.nccl_counted == (v < (0, 11))
