"""``kvplan fit --engine sglang``: SGLang 0.5.23's pools (kvplan.engines.sglang).

Hybrid-SWA architectures (gpt-oss, Llama 4) split the budget into a full pool and an SWA pool
(``pool_configurator.py HybridSWAPoolConfigurator``: ``full = int(budget // (F + 0.8 × W))``, ``swa =
int(full × 0.8)``); other models keep one pool whose slots hold a token in every layer, sliding ones included.
SGLang's code does not import on a CPU machine (CUDA-only dependencies), so these numbers are the formula's,
worked by hand, not a fixture from SGLang itself.
"""

from __future__ import annotations

from kvplan.engines import sglang as sglang_rules
from kvplan.fit import Engine, FitOptions, plan_fit
from kvplan.gpus import get_gpu
from kvplan.loader import load_bundled
from kvplan.sweep import sweep

GIB = 1 << 30


def sgl(max_model_len: int, budget: int) -> FitOptions:
    return FitOptions(engine=Engine.sglang, max_model_len=max_model_len, kv_cache_memory_bytes=budget)


def test_which_models_get_an_swa_pool():
    assert sglang_rules.is_hybrid_swa(load_bundled("gpt-oss-120b"))
    assert sglang_rules.is_hybrid_swa(load_bundled("llama4-scout"))  # chunked layers are SGLang's SWA layers
    assert not sglang_rules.is_hybrid_swa(load_bundled("gemma3-27b"))  # not in is_hybrid_swa_model's list
    assert not sglang_rules.is_hybrid_swa(load_bundled("mistral-7b-v0.1"))  # no full layer
    assert not sglang_rules.is_hybrid_swa(load_bundled("llama3-8b"))


def test_gpt_oss_pool_split():
    # 18 full and 18 sliding layers of 8 KV heads × 64 × K and V × 2 B = 2,048 B: F = W = 36,864 B per token;
    # 10 GiB // (36,864 + 0.8 × 36,864) = 161,817 full slots, int(161,817 × 0.8) = 129,453 SWA slots; a
    # request holds min(S, 128 + 128 + 2) = 258 SWA slots
    r = plan_fit(load_bundled("gpt-oss-120b"), get_gpu("h200"), sgl(131_072, 10 * GIB))
    assert r.engine_log == "Use sliding window memory pool. full_layer_tokens=161817, swa_layer_tokens=129453"
    assert (r.num_blocks, r.kv_capacity_tokens, r.max_requests_by_memory) == (161_817, 161_817, 1)
    assert r.kv_bytes_per_request == 131_072 * 36_864 + 258 * 36_864
    assert r.max_model_len_fit == 161_817
    assert sglang_rules.pool_split(10 * GIB, 36_864, 36_864) == (161_817, 129_453)
    short = plan_fit(load_bundled("gpt-oss-120b"), get_gpu("h200"), sgl(4096, 10 * GIB))
    assert short.max_requests_by_memory == min(161_817 // 4096, 129_453 // 258) == 39


def test_other_models_keep_one_pool_with_windows_as_full():
    # gemma3-27b on SGLang: sliding layers hold every token of a request, as full ones (62 layers × 8,192 B)
    r = plan_fit(load_bundled("gemma3-27b"), get_gpu("h200"), sgl(32_768, 40 * GIB))
    assert r.kv_bytes_per_token == 62 * 8_192
    assert r.kv_bytes_per_request == 32_768 * 62 * 8_192
    assert r.max_requests_by_memory == (40 * GIB) // (32_768 * 62 * 8_192)


def test_sweep_applies_the_split():
    specs, gpu = [load_bundled("gpt-oss-120b"), load_bundled("gemma3-27b")], get_gpu("h200")
    opts = FitOptions(engine=Engine.sglang, kv_cache_memory_bytes=10 * GIB)
    result = sweep(specs, [4096, 131_072], [gpu], opts=opts)
    cols = result.columns
    for i in range(result.num_rows):
        spec, seq = specs[int(result.model_index[i])], int(result.seq[i])
        r = plan_fit(spec, gpu, sgl(seq, 10 * GIB))
        got = tuple(int(cols[k][i]) for k in ("num_blocks", "max_requests_by_memory", "max_model_len_fit"))
        assert got == (r.num_blocks, r.max_requests_by_memory, r.max_model_len_fit)
