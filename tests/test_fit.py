"""kvplan fit: engine conventions, calibration against real engine logs, limits on both sides."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from kvplan.calc import layer_groups
from kvplan.dtypes import get_kv_dtype
from kvplan.fit import Engine, FitOptions, plan_fit, request_bytes, stage_cache, stage_layers
from kvplan.gpus import get_gpu
from kvplan.specs import load_bundled, load_spec_yaml

from .calibration import CALIBRATION, PRINTED_TOKENS, options

MIB, GIB = 1 << 20, 1 << 30
LLAMA31_8B = load_bundled("llama3.1-8b")


def given_budget(budget: int, **kw) -> FitOptions:
    return FitOptions(kv_cache_memory_bytes=budget, **kw)


# --- limits on both sides, by hand ------------------------------------------------------------------
def test_exactly_fits_and_one_token_over():
    spec, gpu = load_bundled("llama3-8b"), get_gpu("h100")
    # vLLM: 16-token blocks of 16 × 131,072 B = 2 MiB; 4096 tokens = 256 blocks = 512 MiB per request
    r = plan_fit(spec, gpu, given_budget(4 * 512 * MIB, max_model_len=4096))
    assert (r.num_blocks, r.kv_capacity_tokens, r.max_concurrent_requests) == (1024, 16384, 4)
    assert r.max_concurrency == 4.0
    # one byte less: 1023 blocks, 3 whole requests
    r = plan_fit(spec, gpu, given_budget(4 * 512 * MIB - 1, max_model_len=4096))
    assert (r.num_blocks, r.max_concurrent_requests) == (1023, 3)
    # one token over: 4097 tokens need 257 blocks; 1024 // 257 = 3
    r = plan_fit(spec, gpu, given_budget(4 * 512 * MIB, max_model_len=4097))
    assert r.kv_bytes_per_request == 257 * 2 * MIB
    assert r.max_concurrent_requests == 3
    # the longest single request: exactly 512 MiB holds 4096 tokens; 1 B less holds 255 blocks = 4080
    assert plan_fit(spec, gpu, given_budget(512 * MIB, max_model_len=4096)).max_model_len_fit == 4096
    assert plan_fit(spec, gpu, given_budget(512 * MIB - 1, max_model_len=4096)).max_model_len_fit == 4080


def test_vllm_budget_formula_by_hand():
    # llama3-8b on an H100 (CUDA total 85,061,533,696 B observed), U = 0.9:
    # usable = ceil(0.9 × 85,061,533,696) = 76,555,380,327
    # weights = 8,030,000,000 × 2 B = 16,060,000,000
    # activation = 1 GiB + 8192 × 14 × 4096 = 1,073,741,824 + 469,762,048 = 1,543,503,872
    # overhead = 0.3 GiB = 322,122,547
    # budget = 76,555,380,327 − 16,060,000,000 − 1,543,503,872 − 322,122,547 = 58,629,753,908
    r = plan_fit(load_bundled("llama3-8b"), get_gpu("h100"), FitOptions(max_model_len=8192))
    assert r.usable_bytes == 76_555_380_327
    assert (r.weights_bytes, r.activation_bytes, r.overhead_bytes) == (16_060_000_000, 1_543_503_872, 322_122_547)
    assert r.kv_budget_bytes == 58_629_753_908
    assert r.num_blocks == 58_629_753_908 // (2 * MIB) == 27_956


def test_tp_beyond_kv_heads_replicates():
    # llama3.1-70b: 8 KV heads; at TP = 16 each GPU keeps max(1, 8 // 16) = 1 head:
    # 2 × 80 layers × 1 × 128 × 2 B = 40,960 B per token per GPU (not 20,480)
    r = plan_fit(load_bundled("llama3.1-70b"), get_gpu("h100"), FitOptions(tensor_parallel_size=16, max_model_len=8192))
    assert r.kv_bytes_per_token == 40_960
    r8 = plan_fit(load_bundled("llama3.1-70b"), get_gpu("h100"), FitOptions(tensor_parallel_size=8, max_model_len=8192))
    assert r8.kv_bytes_per_token == 40_960


def test_mla_latent_on_every_rank():
    # deepseek-v3 at TP = 8: the 576-element latent is not split: 61 × 576 × 2 B = 70,272 B per token per GPU;
    # weights: FP8 for all but the embedding and lm_head (2 × 129,280 × 7,168 = 1,853,358,080 kept in bf16):
    # (671e9 − 1,853,358,080) × 1 B + 1,853,358,080 × 2 B = 672,853,358,080 B; / 8 = 84,106,669,760 per GPU
    r = plan_fit(
        load_bundled("deepseek-v3"),
        get_gpu("h200"),
        FitOptions(tensor_parallel_size=8, weights_dtype="fp8", max_model_len=32768),
    )
    assert r.kv_bytes_per_token == 70_272
    assert r.weights_bytes == 84_106_669_760
    assert r.fits


def test_pp_splits_layers():
    spec = load_bundled("llama3-8b")
    r = plan_fit(spec, get_gpu("h100"), FitOptions(pipeline_parallel_size=2, max_model_len=8192))
    # 16 layers per stage: 2 × 16 × 8 × 128 × 2 B = 65,536 B per token; weights halved
    assert r.kv_bytes_per_token == 65_536
    assert r.weights_bytes == 8_030_000_000
    assert r.stage_num_layers == 16
    assert [len(s) for s in stage_layers(62, 4)] == [16, 16, 15, 15]


def test_vllm_sliding_window_blocks():
    spec = load_bundled("gemma3-27b")
    # full: 10 layers × 8,192 B = 81,920 B/token, 32,768 tokens = 2,048 blocks of 16
    # sliding (vLLM): cdiv(min(1024 − 1 + 8192, 32768), 16) + 1 = 576 + 1 = 577 blocks × 16 tokens
    #                 × 52 layers × 8,192 B = 425,984 B/token
    expected = 81_920 * 32_768 + 425_984 * 577 * 16
    r = plan_fit(spec, get_gpu("h200"), FitOptions(max_model_len=32768))
    assert r.kv_bytes_per_request == expected
    # the other conventions keep min(S, window) tokens in a sliding layer
    c = stage_cache(spec, get_kv_dtype("bf16"), 1, range(62))
    assert request_bytes(c, 32768, Engine.trtllm, 32, 8192) == 81_920 * 32_768 + 425_984 * 1024


def test_shared_prefix_counted_once():
    spec = load_bundled("llama3-8b")
    # budget 2 GiB; 4096-token requests (512 MiB) sharing a 2048-token prefix (256 MiB, counted once):
    # (2048 MiB − 256 MiB) // 256 MiB = 7 requests instead of 4
    r = plan_fit(spec, get_gpu("h100"), given_budget(2 * GIB, max_model_len=4096, shared_prefix_tokens=2048))
    assert r.shared_prefix_bytes == 256 * MIB
    assert r.max_concurrent_requests == 7
    # only whole blocks are shared: 2050 tokens share 128 blocks, the same as 2048
    r = plan_fit(spec, get_gpu("h100"), given_budget(2 * GIB, max_model_len=4096, shared_prefix_tokens=2050))
    assert r.shared_prefix_tokens == 2048


# --- calibration on real engine logs ----------------------------------------------------------------
@pytest.mark.parametrize("case_id", sorted(PRINTED_TOKENS))
def test_calibration_counts_from_printed_budget(case_id):
    """Given the printed KV budget, kvplan's token count brackets the printed one within the print's rounding.

    The logs print budgets to 0.01 GiB, so the exact budget lies in [printed − 0.005, printed + 0.005) GiB.
    """
    case = CALIBRATION[case_id]
    spec, gpu, opts = load_bundled(case["model"]), get_gpu(case["gpu"]), options(case)
    printed = case["printed"]["kv_printed_gib"]
    lo = plan_fit(spec, gpu, replace(opts, kv_cache_memory_bytes=int((printed - 0.005) * GIB))).kv_capacity_tokens
    hi = plan_fit(spec, gpu, replace(opts, kv_cache_memory_bytes=int((printed + 0.005) * GIB))).kv_capacity_tokens
    assert lo <= PRINTED_TOKENS[case_id] <= hi
    assert (hi - lo) / PRINTED_TOKENS[case_id] < 0.003  # the bracket is only as wide as the rounding


@pytest.mark.parametrize("case_id", sorted(PRINTED_TOKENS))
def test_calibration_budget_predicted_within_5_percent(case_id):
    case = CALIBRATION[case_id]
    r = plan_fit(load_bundled(case["model"]), get_gpu(case["gpu"]), options(case))
    printed = case["printed"]["kv_printed_gib"] * GIB
    assert abs(r.kv_budget_bytes - printed) / printed < 0.05


def test_calibration_exact_block_counts():
    # vllm-01: 1952 blocks × 2 MiB (16 × 131,072 B) → exactly 1952 blocks, concurrency 31,232 / 20,000 = 1.5616
    case = CALIBRATION["vllm-01"]
    r = plan_fit(LLAMA31_8B, get_gpu("rtx3090"), replace(options(case), kv_cache_memory_bytes=1952 * 2 * MIB))
    assert r.num_blocks == case["printed"]["num_blocks"]
    assert round(r.max_concurrency, 2) == case["printed"]["max_concurrency"]
    # trtllm-02: 8219 blocks of 32 tokens × 65,536 B (fp8) → 263,008 tokens
    case = CALIBRATION["trtllm-02"]
    r = plan_fit(LLAMA31_8B, get_gpu("rtx5090"), replace(options(case), kv_cache_memory_bytes=8219 * 32 * 65_536))
    assert (r.num_blocks, r.kv_capacity_tokens) == (8219, 263_008)
    # vllm-06: 460,496 tokens; concurrency for 131,072-token requests 3.51
    case = CALIBRATION["vllm-06"]
    r = plan_fit(LLAMA31_8B, get_gpu("h100"), replace(options(case), kv_cache_memory_bytes=460_496 * 131_072))
    assert r.kv_capacity_tokens == 460_496
    assert round(r.max_concurrency, 2) == case["printed"]["max_concurrency"]


def test_calibration_llamacpp_exact():
    case = CALIBRATION["llamacpp-05"]
    spec = load_bundled("llama3.1-70b")
    r = plan_fit(spec, get_gpu("h200"), given_budget(GIB, engine=Engine.llamacpp, max_model_len=4096))
    assert r.kv_bytes_per_request == case["printed"]["kv_mib"] * MIB  # 4096 cells × 80 × 1024 × 2 × 2 B
    f16 = get_kv_dtype("fp16")
    split = case["settings"]["devices_layers"]  # 41 + 39 layers on the two RPC devices
    per_device = [
        sum(g.bytes for g in layer_groups(spec, 4096, f16, layers=range(a, a + n)))
        for a, n in ((0, split[0]), (split[0], split[1]))
    ]
    assert per_device == [m * MIB for m in case["printed"]["device_mib"]]

    case = CALIBRATION["llamacpp-08"]
    spec = load_bundled("gpt-oss-120b")
    full = plan_fit(spec, get_gpu("h200"), given_budget(GIB, engine=Engine.llamacpp, max_model_len=4096, swa_full=True))
    printed = case["printed"]["full_cache_mib"] + case["printed"]["swa_cache_mib"]
    assert full.kv_bytes_per_request == printed * MIB  # both caches at 4096 cells
    # without --swa-full the SWA cache holds min(n_ctx, pad(128 + 512, 256)) = 768 cells (ENGINES.md)
    swa = plan_fit(spec, get_gpu("h200"), given_budget(GIB, engine=Engine.llamacpp, max_model_len=4096))
    assert swa.kv_bytes_per_request == 144 * MIB + 18 * 2048 * 768


def test_calibration_vllm17_block_bytes(tmp_path):
    # CodeLlama-13B (MHA 40 × 128, 40 layers, fp16) at TP = 2: 16 × 20 heads × 128 × 40 layers × 2 × 2 B
    p = tmp_path / "codellama-13b.yaml"
    p.write_text(
        "name: codellama-13b\nsource: https://huggingface.co/codellama/CodeLlama-13b-Instruct-hf/blob/main/config.json\n"
        "num_layers: 40\nnum_q_heads: 40\nnum_kv_heads: 40\nhead_dim: 128\ndtype: fp16\nmax_model_len: 16384\n"
        "param_count: 13000000000\n"
    )
    r = plan_fit(load_spec_yaml(p), get_gpu("rtx4090"), given_budget(GIB, tensor_parallel_size=2, max_model_len=16384))
    assert r.kv_bytes_per_block == 6_553_600
    assert 8 * GIB // r.kv_bytes_per_block == CALIBRATION["vllm-17"]["printed"]["cpu_blocks"]


# --- CLI ------------------------------------------------------------------------------------------------
def test_fit_cli_json_keys(cli):
    code, out, err = cli("fit", "llama3.1-70b", "--gpu", "h100", "--tp", "4", "--max-model-len", "32768", "--json")
    assert code == 0, err
    d = json.loads(out)
    for key in (
        "weights_bytes",
        "activation_bytes",
        "overhead_bytes",
        "kv_budget_bytes",
        "kv_bytes_per_token",
        "kv_capacity_tokens",
        "num_blocks",
        "max_concurrent_requests",
        "max_concurrency",
        "max_model_len_fit",
    ):
        assert key in d
    # 2 × 80 × (8 / 4 = 2 heads) × 128 × 2 B = 81,920 B per token per GPU; weights 70.6e9 × 2 / 4
    assert d["kv_bytes_per_token"] == 81_920
    assert d["weights_bytes"] == 35_300_000_000
    assert d["max_concurrent_requests"] == d["num_blocks"] // 2048


def test_fit_cli_table(cli):
    code, out, _ = cli("fit", "llama3.1-70b", "--gpu", "h100", "--tp", "4", "--max-model-len", "32k")
    assert code == 0
    assert "Max concurrent requests of 32,768 tokens:" in out


def test_does_not_fit_is_exit_1_with_suggestions(cli):
    code, out, err = cli("fit", "llama3.1-8b", "--gpu", "l4", "--max-model-len", "128k")
    assert code == 1
    assert out == ""
    assert err.count("\n") == 1
    assert err.startswith(
        "kvplan: error: llama3.1-8b on l4-24gb (TP=1, PP=1, vllm): one request of max_model_len 131,072 needs "
        "16 GiB of KV per GPU but the KV budget is "
    )
    assert "would fit: --max-model-len " in err and "--tp 2 (the smallest TP that fits)" in err


def test_weights_do_not_fit(cli):
    code, _, err = cli("fit", "llama3.1-70b", "--gpu", "l4")
    assert code == 1
    assert "leave no KV cache memory" in err and "--tp 16 (the smallest TP that fits)" in err


@pytest.mark.parametrize(
    "args, line",
    [
        (
            ["--tp", "3"],
            "kvplan: error: --tp: 3 does not divide llama3-8b's heads (H_q=32, H_kv=8); allowed: 1, 2, 4, 8, 16, 32",
        ),
        (["--engine", "tgi"], "kvplan: error: --engine: unknown engine 'tgi'; allowed: vllm, sglang, trtllm, llamacpp"),
        (["--gpu-memory-utilization", "1.5"], "kvplan: error: --gpu-memory-utilization: 1.5 must be in (0, 1]"),
        (
            ["--kv-cache-memory", "lots"],
            "kvplan: error: --kv-cache-memory: 'lots' is not a size; use bytes or a unit: GB (10^9), GiB (2^30), MB, MiB, TB, TiB",
        ),
    ],
)
def test_fit_bad_flags(cli, args, line):
    code, out, err = cli("fit", "llama3-8b", "--gpu", "h100", *args)
    assert code == 2
    assert err == line + "\n"


def test_checkpoint_weights_dtype_from_spec():
    # gpt-oss-120b ships MoE experts in MXFP4 (4 bit + 1 B per 32) and keeps 2,127,052,800 params in bf16:
    # 114,872,947,200 × 4 bit / 8 = 57,436,473,600 + ceil(114,872,947,200 / 32) = 3,589,779,600 scale bytes
    # + 2,127,052,800 × 2 B = 4,254,105,600 → 65,280,358,800 B = 60.8 GiB, the published checkpoint's size
    r = plan_fit(load_bundled("gpt-oss-120b"), get_gpu("h100"), FitOptions(max_model_len=131072))
    assert r.weights_dtype == "mxfp4"
    assert r.weights_bytes == 57_436_473_600 + 3_589_779_600 + 4_254_105_600
    assert r.fits  # one 80 GB GPU serves it, as the model card says
    # an explicit --weights-dtype bf16 counts every parameter at 2 B
    r = plan_fit(load_bundled("gpt-oss-120b"), get_gpu("h200"), FitOptions(weights_dtype="bf16", max_model_len=8192))
    assert r.weights_bytes == 234_000_000_000


@pytest.mark.parametrize(
    "args, line",
    [
        (["--block-size", "0"], "kvplan: error: --block-size: 0 must be an integer >= 1"),
        (["--max-num-batched-tokens", "0"], "kvplan: error: --max-num-batched-tokens: 0 must be an integer >= 1"),
        (
            ["--engine", "trtllm", "--max-batch-size", "-100000"],
            "kvplan: error: --max-batch-size: -100000 must be an integer >= 1",
        ),
        (
            ["--shared-prefix", "8192"],
            "kvplan: error: --shared-prefix: 8,192 tokens must be shorter than max_model_len 8,192 (each request has tokens of its own)",
        ),
        (
            ["--overhead-gib", "0xyz"],
            "kvplan: error: --overhead-gib: '0xyz' is not a size; use bytes or a unit: GB (10^9), GiB (2^30), MB, MiB, TB, TiB",
        ),
        (
            ["--max-num-batched-tokens", "99999999999999999999"],
            "kvplan: error: --max-num-batched-tokens: 99,999,999,999,999,999,999 is beyond what kvplan plans for (at most 2,147,483,648)",
        ),
    ],
)
def test_fit_bad_values_are_refused(cli, args, line):
    code, _, err = cli("fit", "llama3-8b", "--gpu", "h100", *args)
    assert code == 2
    assert err == line + "\n"


def test_huge_tp_is_refused_at_once(cli):
    # a TP of 10^20 must not loop over candidate sizes
    code, _, err = cli("estimate", "llama3-8b", "--seq", "1", "--tp", "99999999999999999999")
    assert code == 2 and err.startswith("kvplan: error: --tp: 99999999999999999999 does not divide llama3-8b's heads")


def test_suggests_bigger_gpu_at_bigger_tp():
    from kvplan.fit import suggest

    s = suggest(load_bundled("llama3.1-405b"), get_gpu("l4"), FitOptions(max_model_len=8192))
    assert any(x.startswith("--gpu ") and " --tp " in x for x in s)


def test_given_budget_needs_no_param_count(tmp_path):
    p = tmp_path / "config.json"
    p.write_text((Path(__file__).parent / "fixtures/hf_configs/llama3.1-8b.json").read_text())
    from kvplan.specs import load_hf_config

    r = plan_fit(load_hf_config(p), get_gpu("h100"), given_budget(GIB, max_model_len=4096))
    assert r.num_blocks == 512 and r.weights_bytes == 0
