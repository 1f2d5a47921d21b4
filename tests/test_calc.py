"""Exact byte counts against figures known from outside the code (papers, config.json, hand arithmetic)."""

from __future__ import annotations

import pytest

from kvplan.calc import estimate, kv_heads_per_rank, tokens_cached
from kvplan.dtypes import get_kv_dtype
from kvplan.loader import load_bundled


# --- the lesson: H_q = 32, L = 32, d = 128, S = 4096, fp16 ----------------------------------------
@pytest.mark.parametrize(
    "h_kv, expected",
    [
        (32, 2_147_483_648),  # MHA: 2 × 32 × 32 × 128 × 4096 × 2 B = 2 GiB
        (8, 536_870_912),  # GQA(8): 2 × 32 × 8 × 128 × 4096 × 2 B = 0.5 GiB
        (1, 67_108_864),  # MQA: 2 × 32 × 1 × 128 × 4096 × 2 B = 0.0625 GiB
    ],
)
def test_lesson_topologies(h_kv, expected):
    llama2 = load_bundled("llama2-7b")  # the lesson's MHA model: L=32, H_q=32, d=128, fp16
    assert (llama2.num_layers, llama2.num_q_heads, llama2.head_dim, llama2.dtype) == (32, 32, 128, "fp16")
    assert estimate(llama2.with_kv_heads(h_kv), 4096, kv_dtype="fp16").total_bytes == expected


def test_llama2_7b_is_2_gib_at_4096():
    assert estimate(load_bundled("llama2-7b"), 4096).total_bytes == 2 * 2**30


def test_llama3_8b():
    spec = load_bundled("llama3-8b")
    # 2 × 32 layers × 8 KV heads × 128 × 2 B = 131,072 B per token
    assert estimate(spec, 1).bytes_per_request == 131_072
    # × 4096 tokens = 536,870,912 B = 0.5 GiB = 0.537 GB
    e = estimate(spec, 4096)
    assert e.total_bytes == 536_870_912
    assert e.total_bytes / 2**30 == 0.5
    assert round(e.total_bytes / 1e9, 3) == 0.537
    assert estimate(spec, 4096, batch_size=8).total_bytes == 8 * 536_870_912


def test_deepseek_v3_mla():
    spec = load_bundled("deepseek-v3")
    # MLA: one latent of kv_lora_rank 512 + qk_rope_head_dim 64 = 576 elements, no factor 2:
    # 61 layers × 576 × 2 B = 70,272 B per token
    assert estimate(spec, 1).bytes_per_request == 70_272
    assert estimate(spec, 4096).total_bytes == 70_272 * 4096
    # the latent is kept whole on every TP rank (vLLM MLAAttentionSpec)
    assert estimate(spec, 1, tensor_parallel_size=8).bytes_per_request == 70_272


def test_gemma3_27b_by_hand():
    spec = load_bundled("gemma3-27b")
    # 62 layers; global iff (i+1) % 6 == 0 → 10 full, 52 sliding (window 1024); H_kv 16, head_dim 128, bf16
    # per layer per token: 2 × 16 × 128 × 2 B = 8,192 B
    # S = 4096:   full 10 × 8,192 × 4,096 = 335,544,320; sliding 52 × 8,192 × 1,024 = 436,207,616
    #             total 771,751,936 B
    # S = 131072: full 10 × 8,192 × 131,072 = 10,737,418,240; sliding unchanged 436,207,616
    #             total 11,173,625,856 B
    e = estimate(spec, 4096)
    assert {g.kind: (g.layers, g.tokens_cached, g.bytes) for g in e.groups} == {
        "full": (10, 4096, 335_544_320),
        "sliding": (52, 1024, 436_207_616),
    }
    assert e.total_bytes == 771_751_936
    assert estimate(spec, 131072).total_bytes == 11_173_625_856


def test_gpt_oss_20b_by_hand():
    spec = load_bundled("gpt-oss-20b")
    # 24 layers alternating sliding (128) / full; H_kv 8, head_dim 64 (explicit), bf16
    # per layer per token: 2 × 8 × 64 × 2 B = 2,048 B
    # S = 4096:   full 12 × 2,048 × 4,096 = 100,663,296; sliding 12 × 2,048 × 128 = 3,145,728 → 103,809,024 B
    # S = 131072: full 12 × 2,048 × 131,072 = 3,221,225,472; + 3,145,728 → 3,224,371,200 B
    assert estimate(spec, 4096).total_bytes == 103_809_024
    assert estimate(spec, 131072).total_bytes == 3_224_371_200
    # below the window, sliding layers hold every token: 24 × 2,048 × 100
    assert estimate(spec, 100).total_bytes == 24 * 2048 * 100


def test_jamba_state_is_fixed():
    spec = load_bundled("jamba-v0.1")
    # 4 attention layers: 2 × 8 × 128 × 2 B = 4,096 B/token each → 16,384 B/token
    # 28 Mamba layers: d_inner 8192 × (d_conv−1 = 3 + d_state 16) × 2 B = 311,296 B each → 8,716,288 B
    state = 28 * 8192 * (3 + 16) * 2
    assert state == 8_716_288
    assert estimate(spec, 1).total_bytes == 16_384 + state
    assert estimate(spec, 131072).total_bytes == 16_384 * 131072 + state


def test_llama4_scout_chunked():
    spec = load_bundled("llama4-scout")
    # 48 layers: 12 global (i % 4 == 3), 36 chunked at 8192; 2 × 8 × 128 × 2 B = 4,096 B per layer-token
    per = 4096
    assert estimate(spec, 8192).total_bytes == 48 * per * 8192
    assert estimate(spec, 65536).total_bytes == 12 * per * 65536 + 36 * per * 8192


def test_falcon_7b_mqa():
    # multi_query: one KV head; 2 × 32 layers × 1 × 64 × 2 B = 8,192 B per token
    assert estimate(load_bundled("falcon-7b"), 2048).total_bytes == 8192 * 2048


# --- dtypes: block scales cost memory -------------------------------------------------------------
@pytest.mark.parametrize(
    "dtype, per_token",
    [
        ("fp32", 262_144),
        ("fp16", 131_072),
        ("fp8", 65_536),  # per-tensor scale: 1 B per element
        ("fp8_e5m2", 65_536),
        # int8 with fp32 scale per token per head: (1,024 + 8 × 4) × 2 × 32 = 67,584
        ("int8", 67_584),
        # q8_0: row of 8 × 128 = 1,024 elements = 32 blocks × 34 B = 1,088 B; × 2 (K, V) × 32 layers
        ("q8_0", 69_632),
        # q4_0: 32 blocks × 18 B = 576 B; × 2 × 32 = 36,864
        ("q4_0", 36_864),
        ("q4_1", 32 * 20 * 2 * 32),
        ("q5_0", 32 * 22 * 2 * 32),
        ("q5_1", 32 * 24 * 2 * 32),
        # nvfp4: ceil(1024/2) + ceil(1024/16) = 576 B per row → 36,864
        ("nvfp4", 36_864),
    ],
)
def test_kv_dtypes_llama3_8b(dtype, per_token):
    assert estimate(load_bundled("llama3-8b"), 1, kv_dtype=dtype).total_bytes == per_token


def test_block_quantized_partial_block_rounds_up():
    q8 = get_kv_dtype("q8_0")
    assert q8.row_bytes(33) == 2 * 34  # 33 elements need two 32-element blocks
    assert get_kv_dtype("nvfp4").row_bytes(17) == 9 + 2  # ceil(17/2) + ceil(17/16)


# --- paging, tensor parallelism ---------------------------------------------------------------------
def test_block_size_rounds_each_request_up():
    spec = load_bundled("llama3-8b")
    assert estimate(spec, 4096, block_size=16).total_bytes == 536_870_912  # exact multiple
    assert estimate(spec, 4097, block_size=16).total_bytes == 4112 * 131_072  # one token over: a whole block
    assert tokens_cached(1000, 128, 16) == 128
    assert tokens_cached(100, 128, 16) == 112


def test_sliding_window_rounds_to_blocks_too():
    # gpt-oss sliding window 128 with 48-token blocks: 3 blocks = 144 tokens per sliding layer
    e = estimate(load_bundled("gpt-oss-20b"), 4096, block_size=48)
    sliding = next(g for g in e.groups if g.kind == "sliding")
    assert sliding.tokens_cached == 144


@pytest.mark.parametrize("tp, heads", [(1, 8), (2, 4), (8, 1), (16, 1)])
def test_tp_splits_then_replicates_kv_heads(tp, heads):
    assert kv_heads_per_rank(8, tp) == heads
    # llama3-8b per GPU: 2 × 32 × heads × 128 × 2 B per token
    assert estimate(load_bundled("llama3-8b"), 1, tensor_parallel_size=tp).total_bytes == 2 * 32 * heads * 128 * 2


# --- KV replication at TP > H_kv (the December 2026 trial) -----------------------------------------------


def test_kv_heads_replicated_beyond_h_kv_are_said_in_estimate_and_fit(cli):
    import json

    # Qwen3-235B-A22B: 94 layers, 4 KV heads of 128 (config.json); at TP 8 each rank keeps 1 head: 2 copies
    code, out, err = cli("estimate", "qwen3-235b-a22b", "--seq", "32k", "--tp", "8", "--kv-dtype", "fp8")
    assert code == 0
    note = (
        "KV replicated: TP=8 > H_kv=4, so each KV head is cached on 2 of the 8 GPUs (vLLM get_num_kv_heads: "
        "max(1, H_kv // TP) heads per GPU); the per-GPU bytes × 8 GPUs are 2× the model's cache"
    )
    assert out.rstrip().endswith(note) and "24,064" in out  # 94 × 1 head × 128 × 2 (K, V) × 1 B
    r = json.loads(cli("estimate", "qwen3-235b-a22b", "--seq", "32k", "--tp", "8", "--json")[1])
    assert r["kv_replication"] == {"factor": 2, "kv_heads": 4, "kind": "heads", "note": note}
    assert (
        json.loads(cli("estimate", "qwen3-235b-a22b", "--seq", "32k", "--tp", "4", "--json")[1])["kv_replication"]
        is None
    )
    assert "replicated" not in cli("estimate", "qwen3-235b-a22b", "--seq", "32k", "--tp", "4")[1]
    args = ("fit", "qwen3-235b-a22b", "--gpu", "h200", "--tp", "8", "--max-model-len", "32k", "--kv-dtype", "fp8")
    assert note in cli(*args)[1].splitlines()
    assert json.loads(cli(*args, "--json")[1])["kv_replication"]["factor"] == 2
    # MLA (DeepSeek-V3): one latent per token, kept whole on every rank
    r = json.loads(cli("estimate", "deepseek-v3", "--seq", "4k", "--tp", "8", "--json")[1])
    assert (r["kv_replication"]["factor"], r["kv_replication"]["kind"]) == (8, "mla")
    assert json.loads(cli("estimate", "deepseek-v3", "--seq", "4k", "--json")[1])["kv_replication"] is None
