"""``kvplan fit --engine trtllm``: TensorRT-LLM's PyTorch-backend KV rules (kvplan.engines.trtllm).

The numbers come from a public TensorRT-LLM 1.1.0rc3 start-up log of gpt-oss-120b (trtllm-serve on a DGX
Spark, --max_batch_size 64, free_gpu_memory_fraction 0.9; the log issue 9 quotes), which prints, twice
(the estimation pass with max_tokens 8,224, then the real pool):

    ... available KV cache memory when calculating max tokens: 5.95 GiB, fraction is set 0.9, kv size is 73728.
    Both free_gpu_memory_fraction and max_tokens are set (to 0.9 and 86711, respectively). ...
    Attention window size 131072 exceeds upper bound 86720 for available blocks. Reducing to 86720.
    Adjusted max_seq_len to 86720
    [MemUsageChange] Allocated 5.95 GiB for max tokens in paged KV cache (86720).

and the rules are those of NVIDIA/TensorRT-LLM ``tensorrt_llm/_torch/pyexecutor/resource_manager.py``
(``KVCacheManager``: ``max_attention_window_vec = [max_seq_len]``, ``calculate_max_num_blocks``:
``ceil(max_tokens / tokens_per_block)``, ``get_max_atten_window_upper_bound``) and ``_util.py``
(``_cal_max_tokens``: ``int(available_kv_mem // kv_size_per_token)``).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from kvplan.engines import trtllm as trt_rules
from kvplan.errors import UsageError
from kvplan.fit import Engine, FitOptions, does_not_fit_message, plan_fit
from kvplan.gpus import get_gpu
from kvplan.loader import load_bundled, load_hf_config
from kvplan.sweep import sweep

FIXTURES = Path(__file__).resolve().parent / "fixtures"
GPT_OSS_KV_SIZE = 36 * 2 * 8 * 64 * 2  # every one of the 36 layers, sliding ones included: 73,728 B per token


def trt(max_model_len: int, budget: int, **kw) -> FitOptions:
    """The 1.1.0rc3 run the tests reproduce (its log: gpt-oss-120b on a DGX Spark); 1.2's floor is tested below."""
    kw.setdefault("engine_version", "1.1.0rc3")
    return FitOptions(engine=Engine.trtllm, max_model_len=max_model_len, kv_cache_memory_bytes=budget, **kw)


def test_gpt_oss_sliding_layers_sized_like_full_ones():
    # "kv size is 73728": 18 sliding (window 128) + 18 full layers, all at 8 KV heads × 64 × K and V × 2 B
    r = plan_fit(load_bundled("gpt-oss-120b"), get_gpu("h100"), trt(4096, 8 * (1 << 30)))
    assert r.kv_bytes_per_token == GPT_OSS_KV_SIZE == 73_728
    assert r.kv_bytes_per_request == 4096 * 73_728  # the 128-token window does not shrink a request
    assert r.engine_version == "1.0"  # the 1.1.0rc3 run: 1.0-1.1's rules


def test_issue_example_max_seq_len_cut_to_86720():
    # max_tokens = int(kv memory // 73,728) = 86,711 (the log's "max_tokens ... 86711"); the pool holds
    # ceil(86,711 / 32) = 2,710 blocks = 86,720 tokens; a 131,072-token request does not fit: the engine
    # starts with max_seq_len cut to 86,720
    budget = 86_711 * GPT_OSS_KV_SIZE + 12_345
    spec = load_bundled("gpt-oss-120b")
    r = plan_fit(spec, get_gpu("h100"), trt(131_072, budget))
    assert (r.num_blocks, r.kv_capacity_tokens) == (2_710, 86_720)
    assert not r.fits
    assert r.max_model_len_fit == 86_720
    assert r.engine_log == (
        "Attention window size 131072 exceeds upper bound 86720 for available blocks. Reducing to 86720. "
        "Allocated 5.95 GiB for max tokens in paged KV cache (86720)"
    )
    assert "would cut max_seq_len to 86,720 (2,710 blocks of 32)" in does_not_fit_message(spec, r, [])
    # a request of the cut length fits, one token more does not
    assert plan_fit(spec, get_gpu("h100"), trt(86_720, budget)).max_requests_by_memory == 1
    assert not plan_fit(spec, get_gpu("h100"), trt(86_721, budget)).fits
    # the estimation pass of the same log: max_tokens 8,224 → 257 blocks, "Allocated 0.56 GiB ... (8224)"
    first = plan_fit(spec, get_gpu("h100"), trt(131_072, 8_224 * GPT_OSS_KV_SIZE))
    assert first.engine_log.startswith("Attention window size 131072 exceeds upper bound 8224")
    assert first.engine_log.endswith("Allocated 0.56 GiB for max tokens in paged KV cache (8224)")


def test_block_count_rounds_up():
    # ceil: 86,711 tokens take 2,710 blocks of 32 (later main floors: 2,709); a whole number of blocks is exact
    rules = trt_rules.resolve_rules("1.1.0rc3")
    assert trt_rules.pool_blocks(86_711 * 73_728 + 5, 73_728, 32, rules) == 2_710
    assert trt_rules.pool_blocks(86_720 * 73_728, 73_728, 32, rules) == 2_710
    assert trt_rules.pool_blocks(73_727, 73_728, 32, rules) == 0


def test_max_batch_size_caps_concurrency():
    # llama3-8b, 1,024-token requests, 40 GiB: memory holds 320 requests; max_batch_size 64 binds
    r = plan_fit(load_bundled("llama3-8b"), get_gpu("h100"), trt(1024, 40 << 30, max_batch_size=64))
    assert r.max_requests_by_memory == 320 and r.max_concurrent_requests == 64
    assert r.limited_by_max_num_seqs and r.max_num_seqs == 64


def test_engine_versions():
    assert trt_rules.resolve_rules("1.1.0rc3").version == "1.0"
    assert trt_rules.resolve_rules("1.1").version == "1.0"
    assert trt_rules.resolve_rules("0.21").version == "1.0"  # the oldest set kvplan has
    with pytest.raises(UsageError, match="--engine-version"):
        trt_rules.resolve_rules("newest please")


def test_sweep_applies_the_same_rules():
    spec, gpu = load_bundled("gpt-oss-120b"), get_gpu("h100")
    budget = 86_711 * GPT_OSS_KV_SIZE + 12_345
    opts = FitOptions(engine=Engine.trtllm, kv_cache_memory_bytes=budget, engine_version="1.1.0rc3")
    cols = sweep([spec], [131_072], [gpu], opts=opts).columns
    r = plan_fit(spec, gpu, trt(131_072, budget))
    got = (int(cols["num_blocks"][0]), int(cols["max_model_len_fit"][0]), bool(cols["fits"][0]))
    assert got == (r.num_blocks, r.max_model_len_fit, False) == (2_710, 86_720, False)


def test_block_rounding_by_release():
    # TensorRT-LLM 1.1.0rc3's start-up log (gpt-oss-120b, tests/fixtures/trtllm_rules.yaml): max_tokens 86,711 →
    # "Allocated 5.95 GiB for max tokens in paged KV cache (86720)": ceil(86,711 / 32) = 2,710 blocks. From
    # 1.2.0rc4 the pool floors (resource_manager.py, PR #9093): 2,709 blocks = 86,688 tokens.
    spec = load_bundled("gpt-oss-120b")
    budget = 86_711 * 73_728 + 1_000  # 36 layers × 2 × 8 KV heads × 64 × 2 B per token, every layer full
    for version, blocks in (
        ("1.1.0rc3", 2_710),
        ("1.2.0rc2", 2_710),
        ("1.2.0rc4", 2_709),
        ("1.2.1", 2_709),
        (None, 2_709),
    ):
        r = plan_fit(spec, get_gpu("h100"), FitOptions(engine=Engine.trtllm, engine_version=version,
                                                       kv_cache_memory_bytes=budget, max_model_len=8192))  # fmt: skip
        assert (r.num_blocks, r.kv_capacity_tokens) == (blocks, blocks * 32), version


def test_rule_table_follows_the_rules_fixture():
    # tests/fixtures/trtllm_rules.yaml: each release's block rounding in resource_manager.py
    # calculate_max_num_blocks (observed in a log, read in a stored code version, or bracketed by dates; see its
    # confidence words). kvplan's rule set for that version rounds the same way; 1.2.0rc3 is left open there.
    releases = yaml.safe_load((FIXTURES / "trtllm_rules.yaml").read_text())["releases"]
    decided = {
        v: str(r["rounding"]["value"]).split()[0]
        for v, r in releases.items()
        if "rounding" in r and str(r["rounding"]["value"]) in ("ceil", "floor", "floor (likely)")
    }
    assert len(decided) >= 9 and {"ceil", "floor"} == set(decided.values())
    for version, rounding in decided.items():
        assert trt_rules.resolve_rules(version).ceil_blocks == (rounding == "ceil"), version
    assert str(releases["1.2.0rc3"]["rounding"]["value"]) == "ceil or floor"  # kvplan: ceil (FIRST_FLOOR_RC 4)
    assert trt_rules.resolve_rules("1.2.0rc3").ceil_blocks


def test_rule_table_follows_the_tag_fixture():
    # tests/fixtures/trtllm_source_rules.yaml, written by scripts/trtllm_source_rules.py from a clone of
    # NVIDIA/TensorRT-LLM (git show TAG:resource_manager.py / _util.py / llm_args.py at each 1.x tag)
    path = FIXTURES / "trtllm_source_rules.yaml"
    if not path.exists():
        pytest.skip("no tag fixture: scripts/trtllm_source_rules.py needs a TensorRT-LLM clone with its tags")
    data = yaml.safe_load(path.read_text())
    for tag, rel in data["releases"].items():
        facts = {k: f["value"] for k, f in rel["facts"].items()}
        rules = trt_rules.resolve_rules(facts["version"])
        assert facts["block_rounding"] in ("ceil", "floor"), tag
        assert rules.ceil_blocks == (facts["block_rounding"] == "ceil"), tag
        assert facts["tokens_per_block_default"] == trt_rules.ENGINE.block_size, tag
        assert facts["free_gpu_memory_fraction_default"] == trt_rules.ENGINE.utilization, tag
        assert facts["window_default"] == "every layer at max_seq_len" and rules.windows_as_full, tag
        assert facts["mla_pool"].startswith("K only (kv_factor 1), 1 head of kv_lora_rank + qk_rope_head_dim"), tag


@pytest.mark.parametrize("version", ["1.1.0rc3", "1.2.0rc2", "1.2.1", None])
@pytest.mark.parametrize("tp", [1, 8])
def test_deepseek_v3_mla_one_head_not_split(version, tp):
    # _util.py create_kv_cache_manager, in every stored version read (tests/fixtures/trtllm_rules.yaml mla_pool):
    # an MLA model gets CacheType.SELFKONLY (kv_factor 1), num_kv_heads=1, head_dim=kv_lora_rank +
    # qk_rope_head_dim; resource_manager.py splits heads as ceil(1 / tp) = 1, so TP does not divide it.
    # DeepSeek-V3's config.json: 61 layers, kv_lora_rank 512, qk_rope_head_dim 64, bfloat16 (2 B):
    # 61 × 1 × 1 × (512 + 64) × 2 = 70,272 B per token on every rank
    cfg = json.loads((FIXTURES / "hf_configs" / "deepseek-v3.json").read_text())
    expected = cfg["num_hidden_layers"] * 1 * 1 * (cfg["kv_lora_rank"] + cfg["qk_rope_head_dim"]) * 2
    assert expected == 70_272
    spec = load_hf_config(FIXTURES / "hf_configs" / "deepseek-v3.json")
    opts = FitOptions(engine=Engine.trtllm, engine_version=version, max_model_len=4096,
                      kv_cache_memory_bytes=8 << 30, tensor_parallel_size=tp)  # fmt: skip
    r = plan_fit(spec, get_gpu("h200"), opts)
    assert r.kv_bytes_per_token == expected


@pytest.mark.parametrize("version", ["1.1.0rc3", "1.2.1", None])
def test_gpt_oss_sliding_layers_full_in_every_rule_set(version):
    # resource_manager.py: without kv_cache_config.max_attention_window, max_attention_window_vec = [max_seq_len]
    # (one window: no VSWA); _util.py fills the window from layer_types only for Gemma4 hybrids (newest stored
    # main), not gpt-oss. config.json: 36 layers (18 sliding, window 128), 8 KV heads × head_dim 64, bf16:
    # 36 × 2 (K, V) × 8 × 64 × 2 = 73,728 B per token, a 4,096-token request 4,096 × 73,728 B
    cfg = json.loads((FIXTURES / "hf_configs" / "gpt-oss-120b.json").read_text())
    assert cfg["layer_types"].count("sliding_attention") == 18 and cfg["sliding_window"] == 128
    per_token = cfg["num_hidden_layers"] * 2 * cfg["num_key_value_heads"] * cfg["head_dim"] * 2
    spec = load_hf_config(FIXTURES / "hf_configs" / "gpt-oss-120b.json")
    r = plan_fit(spec, get_gpu("h200"), trt(4096, 8 << 30, engine_version=version))
    assert (r.kv_bytes_per_token, r.kv_bytes_per_request) == (per_token, 4096 * per_token) == (73_728, 4096 * 73_728)


def test_the_replication_note_cites_tensorrt_llms_own_rule(cli):
    # it cited vLLM's get_num_kv_heads; TensorRT-LLM's KVCacheManager keeps ceil(H_kv / TP) heads per rank and an
    # MLA latent as one K-only head on every rank (the rules fixture's expressions, read from its source)
    rules = yaml.safe_load((FIXTURES / "trtllm_rules.yaml").read_text())["expressions"]
    assert rules["tp_heads_pool"].startswith("(num_kv_heads + tp_size - 1) // tp_size")
    assert rules["mla_pool"].startswith("CacheType.SELFKONLY (kv_factor 1), num_kv_heads=1")
    code, out, _ = cli("fit", "qwen3-235b-a22b", "--gpu", "h100", "--engine", "trtllm", "--tp", "8")
    assert code in (0, 1) and "vLLM" not in out.split("KV replicated")[1].splitlines()[0]
    assert ("each KV head is cached on 2 of the 8 GPUs (TensorRT-LLM KVCacheManager, _torch/pyexecutor/"
            "resource_manager.py: ceil(H_kv / TP) heads per GPU)") in out  # fmt: skip
    code, out, _ = cli("fit", "deepseek-v3", "--gpu", "h200", "--engine", "trtllm", "--tp", "8")
    assert "cached whole on each of the 8 GPUs (TensorRT-LLM create_kv_cache_manager: CacheType.SELFKONLY" in out
