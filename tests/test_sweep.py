"""kvplan sweep: every row equals the scalar plan_fit, field by field; hand-checked rows; the CLI's outputs."""

from __future__ import annotations

import csv
import io
import json
import random
import subprocess
import sys
from dataclasses import replace

import pytest

from kvplan.errors import UsageError
from kvplan.fit import MAX_SEARCH_TOKENS, Engine, FitOptions, plan_fit
from kvplan.gpus import get_gpu
from kvplan.loader import load_bundled
from kvplan.sweep import OUTPUT_COLUMNS, VALUE_COLUMNS, sweep

from .conftest import ROOT

MIB, GIB = 1 << 20, 1 << 30

# Sliding windows (gemma3-27b 5 of 6, gpt-oss-20b 1 of 2 with window 128, mistral-7b-v0.1 all), chunked
# (llama4-scout), MLA (deepseek-v3), Mamba state (jamba-v0.1), MQA (falcon-7b: only TP 1), TP > H_kv
# (llama3.1-70b, gpt-oss-20b, jamba: H_kv 8 at TP 16; qwen2.5-7b: H_kv 4 at TP 4 ok, TP 8 refused).
MODELS = [
    "gemma3-27b",
    "gpt-oss-20b",
    "mistral-7b-v0.1",
    "llama4-scout",
    "deepseek-v3",
    "jamba-v0.1",
    "falcon-7b",
    "llama3.1-70b",
    "qwen2.5-7b",
    "gemma2-9b",
    "llama3-8b",
]
SEQS = [1, 15, 16, 17, 128, 129, 1000, 4096, 4097, 8192, 32768, 131072, 1 << 20]
GPUS = ["h100", "h200", "l4", "mi300x", "a100-80gb", "16GiB"]
DTYPES = ["auto", "fp8", "int8", "q4_0", "nvfp4", "fp32"]
TPS = [1, 2, 4, 8, 16]
SPECS = [load_bundled(m) for m in MODELS]
GPU_OBJS = [get_gpu(g) for g in GPUS]


def scalar(result, i: int, opts: FitOptions):
    """plan_fit for row i of a sweep: the independent reference."""
    return plan_fit(
        SPECS[int(result.model_index[i])],
        GPU_OBJS[int(result.gpu_index[i])],
        replace(
            opts,
            tensor_parallel_size=int(result.tp[i]),
            max_model_len=int(result.seq[i]),
            kv_dtype=result.kv_dtype_names[int(result.kv_dtype_index[i])],
        ),
    )


def assert_rows_equal(result, rows, opts: FitOptions) -> None:
    for i in rows:
        ref = scalar(result, i, opts)
        for col in VALUE_COLUMNS:
            got, want = result.columns[col][i].item(), getattr(ref, col)
            assert type(got) is type(want) and got == want, (col, got, want, ref)
        assert (result.seq[i], result.tp[i]) == (ref.max_model_len, ref.tensor_parallel_size)
        assert result.kv_dtype_names[int(result.kv_dtype_index[i])] == ref.kv_dtype


def stratified_sample(result, per_pair: int, seed: int) -> list[int]:
    """``per_pair`` random rows of every (model, TP) pair present: every model and TP > H_kv are covered."""
    rnd = random.Random(seed)
    groups: dict[tuple[int, int], list[int]] = {}
    for i, key in enumerate(zip(result.model_index.tolist(), result.tp.tolist(), strict=True)):
        groups.setdefault(key, []).append(i)
    return sorted(i for rows in groups.values() for i in rnd.sample(rows, min(per_pair, len(rows))))


@pytest.mark.parametrize("engine", list(Engine))
def test_sweep_equals_plan_fit_on_a_random_sample(engine):
    opts = FitOptions(engine=engine)
    result = sweep(SPECS, SEQS, GPU_OBJS, DTYPES, TPS, opts)
    sample = stratified_sample(result, per_pair=6, seed=list(Engine).index(engine))
    assert len(sample) >= 200
    assert_rows_equal(result, sample, opts)


@pytest.mark.parametrize(
    "opts",
    [
        FitOptions(engine=Engine.vllm, block_size=32, max_num_batched_tokens=2048, gpu_memory_utilization=0.5),
        FitOptions(engine=Engine.vllm, weights_dtype="fp8", kv_cache_memory_bytes=3 * GIB + 12345),
        FitOptions(engine=Engine.vllm, engine_version="0.11"),
        FitOptions(engine=Engine.vllm, async_scheduling=False, enable_prefix_caching=False, max_num_seqs=8),
        FitOptions(engine=Engine.vllm, hybrid_kv_cache_manager=True, max_num_batched_tokens=512),
        FitOptions(engine=Engine.llamacpp, swa_full=True, max_num_batched_tokens=1024),
        FitOptions(engine=Engine.trtllm, max_batch_size=64, activation_bytes=GIB, overhead_bytes=0),
        FitOptions(engine=Engine.sglang, gpu_memory_utilization=0.7, weights_bytes=10 * GIB),
    ],
    ids=[
        "vllm-block32-util0.5",
        "vllm-given-budget",
        "vllm-0.11",
        "vllm-sync-no-prefix-caching-8-seqs",
        "vllm-hybrid-manager-512-tokens",
        "llamacpp-swa-full",
        "trtllm-overrides",
        "sglang-weights",
    ],
)
def test_sweep_equals_plan_fit_with_other_settings(opts):
    result = sweep(SPECS, SEQS, GPU_OBJS, DTYPES, TPS, opts)
    assert_rows_equal(result, stratified_sample(result, per_pair=4, seed=7), opts)


def test_skipped_tp_rows_are_counted_not_errors():
    result = sweep(SPECS, SEQS, GPU_OBJS, DTYPES, TPS)
    # falcon-7b (H_q 71, H_kv 1) allows TP 1 only: 4 TPs refused; qwen2.5-7b (H_q 28) refuses 8 and 16;
    # llama4-scout (H_q 40) refuses 16
    assert result.skipped_tp == (
        ("llama4-scout", 16),
        ("falcon-7b", 2),
        ("falcon-7b", 4),
        ("falcon-7b", 8),
        ("falcon-7b", 16),
        ("qwen2.5-7b", 8),
        ("qwen2.5-7b", 16),
    )
    per_pair = len(SEQS) * len(GPUS) * len(DTYPES)  # 13 × 6 × 6 = 468 rows per (model, TP)
    # and the rows of q4_0, a cache vLLM does not have (its CacheDType: tests/fixtures/engine_kv_dtypes.json), for
    # each (model, TP) planned: refused by the engine, not by the heads
    assert {kv for _, kv, _, _ in result.skipped_refused} == {"q4_0"}
    assert len(result.skipped_refused) == len(MODELS) * len(TPS) - 7
    refused_rows = len(result.skipped_refused) * len(SEQS) * len(GPUS)
    assert result.skipped_rows == 7 * per_pair + refused_rows
    assert result.num_rows == len(MODELS) * len(TPS) * per_pair - 7 * per_pair - refused_rows
    for name, tp in result.skipped_tp:  # the scalar code refuses exactly those
        with pytest.raises(UsageError):
            plan_fit(load_bundled(name), GPU_OBJS[0], FitOptions(tensor_parallel_size=tp))


def test_row_order_is_model_seq_gpu_dtype_tp():
    result = sweep(SPECS[-1:], [4096, 8192], GPU_OBJS[:2], ["auto", "fp8"], [1, 2])
    rows = result.rows(fields=("seq", "gpu", "kv_dtype", "tp"))
    assert [tuple(r.values()) for r in rows[:5]] == [
        (4096, "h100-sxm-80gb", "bf16", 1),
        (4096, "h100-sxm-80gb", "bf16", 2),
        (4096, "h100-sxm-80gb", "fp8_e4m3", 1),
        (4096, "h100-sxm-80gb", "fp8_e4m3", 2),
        (4096, "h200-sxm-141gb", "bf16", 1),
    ]
    assert len(rows) == 16


def test_hand_checked_row_llama3_8b_h100():
    # vLLM 0.33's budget: ceil(0.92 × 85,061,533,696) = 78,256,611,001 (gpu_memory_utilization 0.92 from
    # vLLM 0.20) − 16,060,000,000 weights − 2,040,004,608 profile-run activation at 8,192 tokens − 209,715,200
    # non-torch − 294,649,856 CUDA graphs = 59,652,241,337 (the fit table in README.md); a request of 8192
    # tokens: 8192 × 131,072 B = 1 GiB; blocks of 16 × 131,072 = 2 MiB
    r = sweep([load_bundled("llama3-8b")], [8192], [get_gpu("h100")]).rows()[0]
    assert r == {
        "model": "llama3-8b",
        "seq": 8192,
        "gpu": "h100-sxm-80gb",
        "kv_dtype": "bf16",
        "tp": 1,
        "kv_budget_bytes": 59_652_241_337,
        "kv_bytes_per_request": 1_073_741_824,
        "max_concurrent_requests": 55,  # 59,652,241,337 // 1,073,741,824
        "limit": "memory",  # 55 < max_num_seqs 1,024
        # kvplan fit's "Maximum concurrency: 55.55x": 28,443 blocks (the null block left out) / 512 per request;
        # vLLM's log would say 28,444 / 512 = 55.5546875 → "55.55x" too
        "max_concurrency": 28_443 / 512,
        "kv_capacity_tokens": 455_104,  # 28,444 × 16
        "fits": True,
    }
    assert all(type(v) in (int, float, bool, str) for v in r.values())


def test_both_sides_of_the_limit():
    # vLLM 0.33 holds one block back (the null block): 4 × 512 MiB + one 2 MiB block given: 4096 tokens =
    # 256 blocks of 2 MiB → 1025 − 1 = 1024 usable blocks = 4 requests; 4097 tokens need 257 → 3
    spec, gpu = load_bundled("llama3-8b"), get_gpu("h100")
    res = sweep([spec], [4096, 4097], [gpu], opts=FitOptions(kv_cache_memory_bytes=4 * 512 * MIB + 2 * MIB))
    assert res.columns["max_concurrent_requests"].tolist() == [4, 3]
    assert res.columns["kv_bytes_per_request"].tolist() == [512 * MIB, 257 * 2 * MIB]
    # one byte less: 1024 blocks, 1023 usable, 3 requests of 4096 tokens
    res = sweep([spec], [4096], [gpu], opts=FitOptions(kv_cache_memory_bytes=4 * 512 * MIB + 2 * MIB - 1))
    assert res.columns["max_concurrent_requests"].tolist() == [3]
    # the longest single request: 257 blocks hold 4096 tokens beside the null block; 1 B less: 255 = 4080
    for budget, longest in ((514 * MIB, 4096), (514 * MIB - 1, 4080)):
        res = sweep([spec], [4096], [gpu], opts=FitOptions(kv_cache_memory_bytes=budget))
        assert res.columns["max_model_len_fit"].tolist() == [longest]


def test_both_sides_of_the_limit_vllm_0_11():
    # the rules before 0.33 (no null block): 4 × 512 MiB → 4 requests of 4096 tokens, 3 of 4097
    spec, gpu = load_bundled("llama3-8b"), get_gpu("h100")
    old = FitOptions(kv_cache_memory_bytes=4 * 512 * MIB, engine_version="0.11")
    res = sweep([spec], [4096, 4097], [gpu], opts=old)
    assert res.columns["max_concurrent_requests"].tolist() == [4, 3]
    assert res.columns["kv_bytes_per_request"].tolist() == [512 * MIB, 257 * 2 * MIB]
    for budget, longest in ((512 * MIB, 4096), (512 * MIB - 1, 4080)):
        res = sweep([spec], [4096], [gpu], opts=replace(old, kv_cache_memory_bytes=budget))
        assert res.columns["max_model_len_fit"].tolist() == [longest]


def test_sliding_only_model_fits_any_length_and_no_budget_fits_nothing():
    # mistral-7b-v0.1 is sliding in every layer: vLLM holds cdiv(min(4095 + 8192, S), 16) + 1 blocks at most,
    # so every length up to the search limit fits
    res = sweep([load_bundled("mistral-7b-v0.1")], [1 << 20], [get_gpu("h100")])
    assert res.columns["max_model_len_fit"].tolist() == [MAX_SEARCH_TOKENS]
    # deepseek-v3 (671e9 × 2 B of weights) on an L4: no KV memory at all
    res = sweep([load_bundled("deepseek-v3")], [4096], [get_gpu("l4")])
    row = res.rows(fields=("kv_budget_bytes", "num_blocks", "max_concurrent_requests", "max_model_len_fit", "fits"))
    assert row == [
        {"kv_budget_bytes": 0, "num_blocks": 0, "max_concurrent_requests": 0, "max_model_len_fit": 0, "fits": False}
    ]


def test_bad_input_is_a_usage_error():
    spec, gpu = load_bundled("llama3-8b"), get_gpu("h100")
    with pytest.raises(UsageError, match=r"^--tp: 0 must be an integer >= 1$"):
        sweep([spec], [4096], [gpu], tps=[0])
    with pytest.raises(UsageError, match=r"^--pp: 2: sweep handles PP = 1 only"):
        sweep([spec], [4096], [gpu], opts=FitOptions(pipeline_parallel_size=2))
    with pytest.raises(UsageError, match=r"^--kv-dtype: unknown dtype 'fp7'"):
        sweep([spec], [4096], [gpu], ["fp7"])
    # 2^40 tokens × 131,072 B = 2^57 B: beyond the exact float range, refused rather than rounded
    with pytest.raises(
        UsageError,
        match=r"^--seq: 1,099,511,627,776 tokens of llama3-8b: one request: 144,115,188,075,855,872 B is beyond the exact range",
    ):
        sweep([spec], [1 << 40], [gpu])
    with pytest.raises(UsageError, match=r"^--tp: no row left"):
        sweep([load_bundled("falcon-7b")], [4096], [gpu], tps=[2])


def test_zero_block_size_and_batched_tokens_are_errors_not_the_default():
    # `opts.block_size or default` used to take 0 as "the engine's default"
    spec, gpu = load_bundled("llama3-8b"), get_gpu("h100")
    with pytest.raises(UsageError, match=r"^--block-size: 0 must be an integer >= 1$"):
        sweep([spec], [4096], [gpu], opts=FitOptions(block_size=0))
    with pytest.raises(UsageError, match=r"^--max-num-batched-tokens: 0 must be an integer >= 1$"):
        sweep([spec], [4096], [gpu], opts=FitOptions(max_num_batched_tokens=0))


@pytest.mark.parametrize(
    "kwargs, message",
    [
        # 10^20 used to reach numpy as a Python int: OverflowError
        ({"opts": FitOptions(max_num_batched_tokens=10**20)}, "--max-num-batched-tokens: 100,000,000,000,000,000,000"),
        ({"opts": FitOptions(max_num_batched_tokens=(1 << 31) + 1)}, "--max-num-batched-tokens: 2,147,483,649"),
        ({"opts": FitOptions(block_size=(1 << 20) + 1)}, "--block-size: 1,048,577"),
        (
            {"opts": FitOptions(engine=Engine.trtllm, max_batch_size=10**20)},
            "--max-batch-size: 100,000,000,000,000,000,000",
        ),
        ({"tps": [10**20]}, "--tp: 100,000,000,000,000,000,000"),
        ({"seqs": [(1 << 40) + 1]}, "--seq: 1,099,511,627,777"),
    ],
)
def test_integer_settings_beyond_the_exact_range_are_usage_errors(kwargs, message):
    args = {"specs": [load_bundled("llama3-8b")], "seqs": [4096], "gpus": [get_gpu("h100")], **kwargs}
    with pytest.raises(UsageError) as e:
        sweep(**args)
    assert str(e.value).startswith(message + " is beyond the range the vectorized sweep computes exactly (at most ")


def test_largest_settings_still_compute():
    spec, gpu = load_bundled("llama3-8b"), get_gpu("h100")
    opts = FitOptions(block_size=1 << 20, max_num_batched_tokens=1 << 31)
    res = sweep([spec], [4096], [gpu], tps=[1, 1 << 16], opts=opts)
    assert res.num_rows == 1 and res.skipped_tp == (("llama3-8b", 1 << 16),)
    assert_rows_equal_to(res, spec, gpu, opts)


def assert_rows_equal_to(result, spec, gpu, opts):
    for i in range(result.num_rows):
        ref = plan_fit(
            spec, gpu, replace(opts, tensor_parallel_size=int(result.tp[i]), max_model_len=int(result.seq[i]))
        )
        for col in VALUE_COLUMNS:
            assert result.columns[col][i].item() == getattr(ref, col), col


def test_gpu_beyond_8_tib_is_refused_not_miscomputed():
    # vLLM's total × 0.9 × 10^6 left int64 above ~10 TB: a 100 TB GPU got a wrong budget silently
    spec = load_bundled("llama3-8b")
    top = get_gpu("8TiB")
    assert_rows_equal_to(sweep([spec], [4096], [top]), spec, top, FitOptions())
    with pytest.raises(UsageError) as e:
        sweep([spec], [4096], [get_gpu("h100"), get_gpu("100TB")])
    assert str(e.value) == (
        "--gpu: 100TB (100,000,000,000,000 B) is beyond the range the vectorized sweep computes exactly "
        "(at most 8,796,093,022,208 B = 8 TiB per GPU)"
    )


def test_too_many_configurations_refused_before_computing():
    spec, gpu = load_bundled("llama3-8b"), get_gpu("h100")
    # 2 × 1,000 × 1,000 × 1 × 6 = 12,000,000 > 1,200,000: refused at once (8.9 M rows took over 60 s to write and
    # 2.5 GB); the message says how to split the largest axis
    with pytest.raises(UsageError) as e:
        sweep([spec, spec], list(range(1, 1001)), [gpu] * 1000, tps=[1, 2, 4, 8, 16, 32])
    assert str(e.value) == (
        "MODEL × --seq × --gpu × --kv-dtype × --tp: 12,000,000 configurations asked (2 × 1000 × 1000 × 1 × 6); "
        "one sweep computes at most 1,200,000 (its CSV or JSON then writes in seconds): split --seq's 1,000 values "
        "into 10 runs of at most 100"
    )
    with pytest.raises(UsageError, match=r"\(34 × 34 × 34 × 34 × 34\);.*: split it into several runs \(fewer"):
        sweep([spec] * 34, list(range(1, 35)), [gpu] * 34, ["auto"] * 34, list(range(1, 35)))  # 38 runs: no one axis


def test_a_table_of_every_row_is_bounded(cli, monkeypatch):
    import kvplan.sweep as sweepmod

    monkeypatch.setattr(sweepmod, "MAX_TABLE_ROWS", 10)
    args = ["sweep", "llama3-8b", "--seq", "1k,2k,4k,8k", "--gpu", "h100,l4,h200", "--tp", "1"]
    code, out, err = cli(*args, "--all")
    assert (code, out) == (2, "") and err == (
        "kvplan: error: --all: 12 rows; a table prints at most 10 (rich takes about 30 s per million): give --csv "
        "or --json for every row, or split the sweep into runs of fewer rows\n"
    )
    code, out, _ = cli(*args, "--csv")
    assert code == 0 and len(out.strip().splitlines()) == 13  # a header and every row


# --- CLI --------------------------------------------------------------------------------------------


def test_cli_csv_all_rows_and_skip_note(cli):
    code, out, err = cli(
        "sweep",
        "llama3-8b",
        "falcon-7b",
        "--seq",
        "8192",
        "--seq",
        "128k",
        "--gpu",
        "h100",
        "--tp",
        "1",
        "--tp",
        "2",
        "--csv",
    )
    assert code == 0, err
    rows = list(csv.DictReader(io.StringIO(out)))
    assert list(rows[0]) == list(OUTPUT_COLUMNS)
    assert len(rows) == 6  # 2 models × 2 seqs × 2 TPs, less falcon-7b's two TP=2 rows
    # the budget of tests/test_sweep.py::test_hand_checked_row_llama3_8b_h100
    assert rows[0]["kv_budget_bytes"] == "59652241337" and rows[0]["max_concurrency"] == str(28_443 / 512)
    assert err == (
        "kvplan: warning: skipped 2 rows: --tp does not divide the heads of falcon-7b (TP 2)\n"
        # beyond: llama3-8b (8,192 max) at 128k × 2 TPs, falcon-7b (2,048 max) at 8192 and 128k, TP 1
        "kvplan: warning: 4 rows have --seq beyond the model's max context (computed anyway)\n"
    )


def test_cli_json_rows_are_objects_with_int_bytes(cli):
    code, out, err = cli(
        "sweep", "gemma3-27b", "--seq", "128k", "--gpu", "h200", "--kv-dtype", "fp8", "--tp", "2", "--json"
    )
    assert code == 0, err
    (row,) = json.loads(out)
    ref = plan_fit(
        load_bundled("gemma3-27b"),
        get_gpu("h200"),
        FitOptions(tensor_parallel_size=2, max_model_len=131072, kv_dtype="fp8"),
    )
    assert row == {
        "model": "gemma3-27b",
        "seq": 131072,
        "gpu": "h200-sxm-141gb",
        "kv_dtype": "fp8_e4m3",
        "tp": 2,
        "kv_budget_bytes": ref.kv_budget_bytes,
        "kv_bytes_per_request": ref.kv_bytes_per_request,
        "max_concurrent_requests": ref.max_concurrent_requests,
        "limit": "max_num_seqs" if ref.limited_by_max_num_seqs else "memory",
        "max_concurrency": ref.max_requests_ratio,  # what fit prints as "Maximum concurrency"
        "kv_capacity_tokens": ref.kv_capacity_tokens,
        "fits": True,
    }


def test_cli_table_caps_rows_unless_all(cli):
    args = ["sweep", "llama3-8b", "--gpu", "h100", "--gpu", "l4"] + [
        a for s in range(1, 102) for a in ("--seq", str(s * 64))
    ]
    code, out, err = cli(*args)  # 101 seqs × 2 GPUs = 202 rows
    assert code == 0
    assert "sweep: 202 configurations, vllm convention, blocks of 16 tokens, first 200 shown" in out
    assert err == "kvplan: warning: showing the first 200 of 202 rows; --all for every row, --csv or --json for data\n"
    code, out, err = cli(*args, "--all")
    assert code == 0 and err == ""
    assert "sweep: 202 configurations, vllm convention, blocks of 16 tokens\n" in out and "shown" not in out
    assert out.count(" llama3-8b ") == 202


def test_cli_table_singulars_and_cut_concurrency(cli):
    # one row: "1 configuration", "blocks of 1 token" (SGLang pages), "1 row has"; at mem_fraction_static 0.88 (SGLang's
    # default on an L4 is 0.684, which leaves llama3-8b's weights no KV cache)
    code, out, err = cli(
        "sweep", "llama3-8b", "--seq", "12k", "--gpu", "l4", "--engine", "sglang", "--mem-fraction-static", "0.88"
    )
    assert code == 0
    assert "sweep: 1 configuration, sglang convention, blocks of 1 token\n" in out
    assert err == "kvplan: warning: 1 row has --seq beyond the model's max context (computed anyway)\n"
    opts = FitOptions(engine=Engine.sglang, max_model_len=12288, gpu_memory_utilization=0.88)
    ref = plan_fit(load_bundled("llama3-8b"), get_gpu("l4"), opts)
    # 2.6877 requests' worth: rounding would print 2.69; the table cuts it to 2.68, beside 2 whole requests,
    # and the tokens column is the pool's (blocks × 1)
    assert (ref.max_requests_by_memory, f"{ref.max_requests_ratio:.2f}") == (2, "2.69")
    assert "(cut)" in out and "pool" in out
    row = next(line for line in out.splitlines() if line.lstrip().startswith("llama3-8b"))
    assert row.split()[7:12] == ["2", "memory", "2.68x", f"{ref.num_blocks:,}", "yes"]


def test_cli_table_vllm_concurrency_is_fits_and_tokens_the_logs(cli):
    # llama3.1-70b at TP 2, 32k: 163,840 B per token per GPU, blocks of 16 = 2,621,440 B, 2,048 per request.
    # A budget of 14,329 blocks (37,562,613,760 B): vLLM logs 14,329 / 2,048 = 6.9966 → "7.00x" and
    # int(6.9966 × 32,768) = 229,264 tokens, but beside the null block 14,328 blocks hold 6 requests: kvplan fit
    # prints "Maximum concurrency: 6.99x" (14,328 / 2,048 = 6.9960, cut), and so does the sweep (it printed 7.00x,
    # vLLM's figure, beside fit's 6.99 and 6 whole requests)
    budget = str(14_329 * 2_621_440)
    code, out, _ = cli("fit", "llama3.1-70b", "--max-model-len", "32k", "--gpu", "h100", "--tp", "2",
                       "--kv-cache-memory", budget)  # fmt: skip
    assert code == 0 and "Maximum concurrency: 6.99x (vLLM's log rounds it to 7.00x; 6 whole requests fit)" in out
    code, out, _ = cli(
        "sweep", "llama3.1-70b", "--seq", "32k", "--gpu", "h100", "--tp", "2", "--kv-cache-memory", budget
    )
    assert code == 0
    assert "vLLM log" in out and "concurrency" in out and "cache tokens" in out
    row = next(line for line in out.splitlines() if line.lstrip().startswith("llama3.1-70b"))
    assert row.split()[7:12] == ["6", "memory", "6.99x", "229,264", "yes"]
    assert (
        "concurrency: kvplan fit's \"Maximum concurrency\" (the null block left out; vLLM's log rounds its own" in out
    )
    assert "not the tokens of context that fit; whole requests: what fits" in out
    code, out, _ = cli("sweep", "llama3.1-70b", "--seq", "32k", "--gpu", "h100", "--tp", "2",
                       "--kv-cache-memory", budget, "--json")  # fmt: skip
    assert json.loads(out)[0]["max_concurrency"] == 14_328 / 2_048


@pytest.mark.parametrize(
    "args, line",
    [
        (["--csv", "--json"], "kvplan: error: --csv, --json: choose one output format"),
        (["--tp", "0"], "kvplan: error: --tp: 0 must be an integer >= 1"),
        (["--engine", "tgi"], "kvplan: error: --engine: unknown engine 'tgi'; allowed: vllm, sglang, trtllm, llamacpp"),
        (["--block-size", "0"], "kvplan: error: --block-size: 0 must be an integer >= 1"),
        (["--max-num-batched-tokens", "0"], "kvplan: error: --max-num-batched-tokens: 0 must be an integer >= 1"),
        (
            ["--max-num-batched-tokens", "99999999999999999999"],
            "kvplan: error: --max-num-batched-tokens: 99,999,999,999,999,999,999 is beyond the range the vectorized "
            "sweep computes exactly (at most 2,147,483,648)",
        ),
        (
            ["--gpu", "9TiB"],
            "kvplan: error: --gpu: 9TiB (9,895,604,649,984 B) is beyond the range the vectorized sweep computes "
            "exactly (at most 8,796,093,022,208 B = 8 TiB per GPU)",
        ),
    ],
)
def test_cli_bad_flags_one_line_exit_2(cli, args, line):
    code, out, err = cli("sweep", "llama3-8b", "--seq", "4096", "--gpu", "h100", *args)
    assert (code, out, err) == (2, "", line + "\n")


def test_fit_and_estimate_never_import_sweep_numpy_or_matplotlib():
    code = (
        "import sys; from kvplan.cli import run;"
        "rc = run(['fit', 'llama3-8b', '--gpu', 'h100']) or run(['estimate', 'llama3-8b', '--seq', '4096']);"
        "bad = sorted(m for m in ('numpy', 'matplotlib', 'kvplan.sweep', 'kvplan.plot') if m in sys.modules);"
        "print('HEAVY', bad, file=sys.stderr); sys.exit(rc)"
    )
    r = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert "HEAVY []" in r.stderr


# --- the table printed without rich's per-cell layout (issue 20: 8,000 rows took 8 s) -------------------


def _sweep_table_both_ways(specs, seqs, gpus, kvs, tps, engine="vllm", width=None):
    """(kvplan's simple-head table, rich's Table) printed for one sweep."""
    import io

    from kvplan import render
    from kvplan import sweep as sweepmod
    from kvplan.fit import FitOptions, get_engine
    from kvplan.gpus import get_gpu

    res = sweepmod.sweep(specs, seqs, [get_gpu(g) for g in gpus], kvs, tps, FitOptions(engine=get_engine(engine)))
    rows = res.rows(None, sweepmod.TABLE_COLUMNS)
    outs = []
    for fast in (True, False):
        buf = io.StringIO()
        con = render.console(buf, width=width)
        real = render.print_simple_head_table
        if not fast:
            render.print_simple_head_table = lambda *a: False  # rich's own Table, as before
        try:
            render.sweep_table(rows, res.num_rows, res.engine, res.block_size, con, res.columns.get("block_size"))
        finally:
            render.print_simple_head_table = real
        outs.append(buf.getvalue())
    return outs


@pytest.mark.parametrize(
    "models, seqs, gpus, kvs, tps, engine",
    [
        (["llama3-8b", "gemma3-27b"], [1024, 131072], ["h100", "l4"], ["auto"], [1, 2], "vllm"),
        (["deepseek-v3", "jamba-v0.1", "qwen3-next-80b-a3b"], [4096, 1 << 20], ["h200", "mi300x"], ["auto", "fp8"],
         [1, 8], "vllm"),
        (["llama3-8b", "mistral-7b-v0.1"], [4096, 32768], ["h100"], ["auto", "q8_0"], [1], "llamacpp"),
        (["llama3-8b"], [4096], ["h100", "a10g"], ["auto"], [1, 2], "sglang"),
    ],
)  # fmt: skip
def test_sweep_table_is_the_table_rich_prints(models, seqs, gpus, kvs, tps, engine):
    from kvplan.loader import load_bundled

    fast, rich_table = _sweep_table_both_ways([load_bundled(m) for m in models], seqs, gpus, kvs, tps, engine)
    assert fast == rich_table


def test_sweep_table_counts_wide_characters_as_rich_does(tmp_path):
    from kvplan.loader import load_bundled, load_model

    p = tmp_path / "wide.yaml"
    p.write_text("name: 模型-8b\nsource: test\nnum_layers: 32\nnum_q_heads: 32\nnum_kv_heads: 8\nhead_dim: 128\n"
                 "dtype: bf16\nmax_model_len: 8192\nparam_count: 8030261248\n", encoding="utf-8")  # fmt: skip
    fast, rich_table = _sweep_table_both_ways([load_model(str(p)), load_bundled("llama3-8b")], [4096], ["h100"],
                                              ["auto"], [1])  # fmt: skip
    assert fast == rich_table and "模型-8b" in fast


def test_a_table_wider_than_the_terminal_is_left_to_rich():
    import io

    from kvplan.loader import load_bundled
    from kvplan.render import console, print_simple_head_table

    con = console(io.StringIO(), width=20)
    assert print_simple_head_table(con, "t", [("a", "left"), ("b", "right")], [("x" * 30, "1")]) is False
    assert con.file.getvalue() == ""  # nothing printed: the caller's rich Table shrinks the columns
    fast, rich_table = _sweep_table_both_ways([load_bundled("llama3-8b")], [4096], ["h100"], ["auto"], [1], width=60)
    assert fast == rich_table


def test_a_row_capped_by_max_num_seqs_says_so_in_table_csv_and_json(cli):
    # the December 2026 trial: Llama-3.1-8B, 8k, A100 80GB, fp8 KV, TP 4: over 500 requests' worth of pool, but
    # vLLM 0.33 runs at most max_num_seqs = 256 on an A100 (fit prints "bounded by max_num_seqs")
    args = ("sweep", "llama3.1-8b", "--seq", "8k", "--gpu", "a100-80gb", "--kv-dtype", "fp8", "--tp", "4,1")
    code, out, err = cli(*args, "--csv")
    assert code == 0, err
    header, capped, free = out.splitlines()
    limit = header.split(",").index("limit")
    assert (capped.split(",")[limit], capped.split(",")[header.split(",").index("max_concurrent_requests")]) == (
        "max_num_seqs",
        "256",
    )
    assert free.split(",")[limit] == "memory"
    rows = json.loads(cli(*args, "--json")[1])
    assert [(r["tp"], r["max_concurrent_requests"], r["limit"]) for r in rows] == [
        (4, 256, "max_num_seqs"),
        (1, rows[1]["max_concurrent_requests"], "memory"),
    ]
    table = cli(*args)[1]
    line = next(x for x in table.splitlines() if x.lstrip().startswith("llama3.1-8b") and " 4 " in x)
    assert line.split()[7:9] == ["256", "max_num_seqs"]
    fit = json.loads(cli("fit", "llama3.1-8b", "--gpu", "a100-80gb", "--max-model-len", "8k", "--kv-dtype", "fp8",
                         "--tp", "4", "--json")[1])  # fmt: skip
    # the pool holds more (544 requests' worth at the modelled budget; the cap binds over its whole range)
    assert (fit["max_concurrent_requests"], fit["max_num_seqs"]) == (256, 256)
    assert fit["max_requests_by_memory"] > 256 and fit["max_requests_low"] == fit["max_requests_high"] == 256


def test_a_layout_the_engine_will_not_load_is_skipped_as_fit_refuses_it():
    # Qwen3-235B-A22B-FP8 (config.json: moe_intermediate_size 1536, weight_block_size [128, 128]) under SGLang:
    # at TP 8 each rank's expert slice is 1536 / 8 = 192 columns, not whole 128-column blocks, and SGLang refuses
    # to start (moe_ep_setup.py check_quantized_moe_compatibility); at TP 4, 384 = 3 × 128 loads. The sweep
    # runs the engine's load check as plan_fit does (it gave the TP 8 row a plan before).
    spec, opts = load_bundled("qwen3-235b-a22b-fp8"), FitOptions(engine=Engine.sglang)
    result = sweep([spec], [4096], [get_gpu("h200")], ["auto"], [4, 8], opts)
    assert result.tp.tolist() == [4] and result.skipped_rows == 1
    with pytest.raises(UsageError) as refused:
        plan_fit(spec, get_gpu("h200"), replace(opts, tensor_parallel_size=8))
    assert result.skipped_refused == (("qwen3-235b-a22b-fp8", result.kv_dtype_names[0], 8, str(refused.value)),)
    assert "(moe_intermediate_size=1536 / moe_tp_size=8) % weight_block_size_n=128 == 0" in str(refused.value)
