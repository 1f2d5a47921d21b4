"""Values known from outside the code (hand arithmetic in each comment), so that a planted bug shows:
GiB = bytes / 2^30 in the JSON, a budget of exactly one request, exact prices, K and V both cached.

scripts/mutation_check.py plants such bugs in a copy of the tree and checks that these tests fail.
"""

from __future__ import annotations

import json

import pytest

from kvplan.fit import FitOptions, get_engine
from kvplan.fleet import plan_layout, workload_from_data
from kvplan.gpus import get_gpu
from kvplan.loader import load_bundled

# llama3-8b: 32 layers × 8 KV heads × 128 × 2 B × 2 (K and V) = 131,072 B per token; a request of
# 4,096 tokens = 536,870,912 B = 0.5 GiB exactly (2^29 B).
REQUEST_4K = 536_870_912
BLOCK_16 = 16 * 131_072  # one vLLM block of 16 tokens: 2,097,152 B (2 MiB)


def _fit_json(cli, *args):
    code, out, err = cli("fit", "llama3-8b", "--gpu", "h100", "--max-model-len", "4096", *args, "--json")
    return code, json.loads(out), err


@pytest.mark.parametrize(
    "size, gib",
    [
        ("17179869184", 16.0),  # 16 × 2^30 B = 16 GiB (not 17.18, as bytes / 10^9 would give)
        ("3758096384", 3.5),  # 3.5 × 1,073,741,824 = 3,758,096,384 B
        ("1000000000", 0.9313225746154785),  # 10^9 B / 2^30 = 0.931322574615478515625
    ],
)
def test_fit_json_kv_budget_gib_is_bytes_over_2_to_the_30(cli, size, gib):
    code, d, err = _fit_json(cli, "--kv-cache-memory", size)
    assert code == 0, err
    assert d["kv_budget_bytes"] == int(size) and d["kv_budget_gib"] == gib


def test_gpus_json_cuda_total_gib(cli):
    code, out, err = cli("gpus", "--json")
    assert code == 0, err
    by_id = {g["id"]: g for g in json.loads(out)}
    # H100 SXM: 81,121 MiB observed (vLLM 'total_gpu_memory 79.22GiB') = 85,061,533,696 B;
    # / 2^30 = 81,121 / 1,024 = 79.2197265625 GiB (85.06 if divided by 10^9)
    h100 = by_id["h100-sxm-80gb"]
    assert (h100["cuda_total_bytes"], h100["cuda_total_gib"]) == (85_061_533_696, 79.2197265625)
    # A100-SXM4-80GB, estimated: (81,920 − 621) MiB = 81,299 MiB = 85,248,180,224 B; / 1,024 = 79.3935546875 GiB
    a100 = by_id["a100-sxm-80gb"]
    assert (a100["cuda_total_bytes"], a100["cuda_total_gib"]) == (85_248_180_224, 79.3935546875)


def test_estimate_json_total_gib(cli):
    code, out, err = cli("estimate", "llama3-8b", "--seq", "4096", "--batch", "3", "--json")
    assert code == 0, err
    d = json.loads(out)
    # 3 × 536,870,912 B = 1,610,612,736 B = 1.5 GiB = 1.610612736 GB
    assert (d["bytes_per_request"], d["total_bytes"], d["total_gib"], d["total_gb"]) == (
        REQUEST_4K,
        1_610_612_736,
        1.5,
        1.610612736,
    )


@pytest.mark.parametrize("engine", ["sglang", "llamacpp"])
def test_a_budget_of_exactly_one_request_fits_one(cli, engine):
    # No null block in these engines: a budget of exactly 536,870,912 B holds one request of 4,096 tokens
    # (sglang pages of 1 token and llama.cpp cells of 256 divide 4,096); one byte less holds none.
    one = ("--parallel", "1") if engine == "llamacpp" else ()  # llama-server's default is 4 slots
    code, d, err = _fit_json(cli, "--engine", engine, *one, "--kv-cache-memory", str(REQUEST_4K))
    assert (code, d["kv_bytes_per_request"], d["max_concurrent_requests"], d["fits"]) == (0, REQUEST_4K, 1, True), err
    code, d, _ = _fit_json(cli, "--engine", engine, *one, "--kv-cache-memory", str(REQUEST_4K - 1))
    assert (code, d["max_concurrent_requests"], d["fits"]) == (1, 0, False)


def test_trtllm_rounds_its_token_pool_up_to_whole_blocks(cli):
    # TensorRT-LLM 1.0-1.1 (_util.py _cal_max_tokens, then ceil to blocks of 32): one byte less than a
    # 4,096-token request is 4,095 tokens -> ceil(4,095 / 32) = 128 blocks = 4,096 tokens: still one request.
    # 127 blocks' worth (127 × 32 × 131,072 B = 532,676,608 B) holds 4,064 tokens: none.
    old = ("--engine", "trtllm", "--engine-version", "1.0")
    code, d, err = _fit_json(cli, *old, "--kv-cache-memory", str(REQUEST_4K - 1))
    assert (code, d["max_concurrent_requests"], d["fits"]) == (0, 1, True), err
    code, d, _ = _fit_json(cli, *old, "--kv-cache-memory", str(127 * 32 * 131_072))
    assert (code, d["max_concurrent_requests"], d["fits"]) == (1, 0, False)


def test_trtllm_1_2_rounds_its_token_pool_down(cli):
    # TensorRT-LLM 1.2 (from 1.2.0rc4, resource_manager.py: blocks = tokens // tokens_per_block): one byte less
    # than a 4,096-token request is 127 whole blocks = 4,064 tokens: no request; exactly 128 blocks: one.
    code, d, _ = _fit_json(cli, "--engine", "trtllm", "--kv-cache-memory", str(REQUEST_4K - 1))
    assert (code, d["max_concurrent_requests"], d["fits"]) == (1, 0, False)
    code, d, err = _fit_json(cli, "--engine", "trtllm", "--kv-cache-memory", str(REQUEST_4K))
    assert (code, d["max_concurrent_requests"], d["fits"]) == (0, 1, True), err


def test_vllm_one_request_and_its_null_block(cli):
    # vLLM (>= 0.33) holds one block back as the null block: one request of 256 blocks of 2 MiB needs
    # 257 blocks = 538,968,064 B; 256 blocks (exactly the request's bytes) hold none.
    code, d, err = _fit_json(cli, "--kv-cache-memory", str(257 * BLOCK_16))
    assert (code, d["max_concurrent_requests"], d["fits"]) == (0, 1, True), err
    code, d, _ = _fit_json(cli, "--kv-cache-memory", str(257 * BLOCK_16 - 1))
    assert (code, d["max_concurrent_requests"], d["fits"]) == (1, 0, False)


def test_fleet_class_of_exactly_the_budget_fits():
    # One request per replica: a KV budget of exactly 536,870,912 B (sglang: no null block) serves a
    # class of 4,096-token requests with one replica each: 3 requests → 3 replicas of 1.
    spec = load_bundled("llama3-8b")
    wl = workload_from_data({"classes": [{"name": "c", "concurrency": 3, "tokens": 4096}]}, "w.yaml")
    opts = FitOptions(engine=get_engine("sglang"), kv_cache_memory_bytes=REQUEST_4K)
    row = plan_layout(spec, get_gpu("h100"), wl, opts)
    assert (row.fits, row.replicas, row.requests_per_replica, row.reason) == (True, 3, 1, None)
    opts = FitOptions(engine=get_engine("sglang"), kv_cache_memory_bytes=REQUEST_4K - 1)
    row = plan_layout(spec, get_gpu("h100"), wl, opts)
    assert not row.fits and row.reason.startswith("one request of class c (4,096 tokens) needs 0.5 GiB")


def test_k_and_v_are_both_cached_and_windows_cap_sliding_layers(cli):
    # Mistral-7B-v0.1: 32 layers, all sliding (window 4,096), 8 KV heads × 128, bf16: 131,072 B per token
    # (K and V); at 8,192 tokens every layer keeps only its window: 4,096 × 131,072 = 536,870,912 B.
    code, out, err = cli("estimate", "mistral-7b-v0.1", "--seq", "8192", "--json")
    assert code == 0, err
    d = json.loads(out)
    assert d["bytes_per_request"] == REQUEST_4K
    assert [(g["kind"], g["window"], g["tokens_cached"], g["bytes_per_token"]) for g in d["groups"]] == [
        ("sliding", 4096, 4096, 131_072)
    ]
