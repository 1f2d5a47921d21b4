"""``kvplan fleet`` sizes requests with fit's engine rules (kvplan.fit.request_sizer, FitResult.kv_room_bytes):
vLLM 0.33's KV cache groups, in-flight tokens and null block, TensorRT-LLM's windows-as-full pool, the
max_num_seqs cap, and --pp-layer-partition's worst stage."""

from __future__ import annotations

from kvplan.fit import Engine, FitOptions, plan_fit, request_sizer
from kvplan.fleet import SLO, RequestClass, Workload, plan_layout
from kvplan.gpus import get_gpu
from kvplan.loader import load_bundled

GIB = 1 << 30


def one_class(concurrency: int, tokens: int, shared_prefix: int = 0) -> Workload:
    return Workload("w", (RequestClass("c", concurrency, tokens, shared_prefix),))


def test_one_class_packs_as_many_requests_as_fit_counts():
    # mistral-7b (every layer sliding, window 4096), vLLM 0.33: 10 GiB = 5,120 blocks, one 32k request holds
    # cdiv(min(4095 + 16,384, 32,768), 16) + 1 = 1,281 blocks (two batches in flight), one block is the null
    # block: 3 requests a replica, as fit says (fleet's own per-layer count gave 6: one batch in flight)
    spec, gpu = load_bundled("mistral-7b-v0.1"), get_gpu("h100")
    opts = FitOptions(max_num_batched_tokens=8192, kv_cache_memory_bytes=10 * GIB)
    fit = plan_fit(
        spec, gpu, FitOptions(max_model_len=32768, max_num_batched_tokens=8192, kv_cache_memory_bytes=10 * GIB)
    )
    assert fit.max_requests_by_memory == 3
    row = plan_layout(spec, gpu, one_class(30, 32768), opts, slo=SLO())
    assert (row.requests_per_replica, row.replicas, row.limit) == (3, 10, "memory")
    assert fit.kv_room_bytes == (5120 - 1) * fit.kv_bytes_per_block


def test_gemma3_groups_and_padding_layers_in_fleet():
    spec, gpu = load_bundled("gemma3-27b"), get_gpu("h200")
    opts = FitOptions(max_num_batched_tokens=8192, kv_cache_memory_bytes=20 * GIB)
    fit = plan_fit(
        spec, gpu, FitOptions(max_model_len=32768, max_num_batched_tokens=8192, kv_cache_memory_bytes=20 * GIB)
    )
    row = plan_layout(spec, gpu, one_class(100, 32768), opts, slo=SLO())
    assert row.requests_per_replica == fit.max_requests_by_memory
    unique, prefix = request_sizer(
        spec, gpu, FitOptions(max_model_len=32768, max_num_batched_tokens=8192, kv_cache_memory_bytes=20 * GIB), fit
    )(32768)
    assert (unique, prefix) == (fit.kv_bytes_per_request, 0)


def test_max_num_seqs_binds_and_is_named():
    # llama3-8b at 512 tokens with an fp8 cache on an H200: memory holds thousands, max_num_seqs 1,024 binds
    spec, gpu = load_bundled("llama3-8b"), get_gpu("h200")
    opts = FitOptions(kv_dtype="fp8")
    fit = plan_fit(spec, gpu, FitOptions(kv_dtype="fp8", max_model_len=512))
    assert fit.limited_by_max_num_seqs and fit.max_concurrent_requests == 1024
    row = plan_layout(spec, gpu, one_class(30_000, 512), opts, slo=SLO())
    assert (row.requests_per_replica, row.replicas, row.limit) == (1024, 30, "max_num_seqs")


def test_trtllm_fleet_sizes_windows_as_full():
    # gpt-oss-120b under TensorRT-LLM: 73,728 B per token in every layer; 40 GiB holds
    # ceil((40 GiB // 73,728) / 32) = 18,205 blocks; a 65,536-token request takes 2,048 of them: 8 a replica
    spec, gpu = load_bundled("gpt-oss-120b"), get_gpu("h200")
    opts = FitOptions(engine=Engine.trtllm, kv_cache_memory_bytes=40 * GIB)
    fit = plan_fit(spec, gpu, FitOptions(engine=Engine.trtllm, max_model_len=65536, kv_cache_memory_bytes=40 * GIB))
    assert fit.max_requests_by_memory == fit.num_blocks // 2048 == 8
    row = plan_layout(spec, gpu, one_class(16, 65536), opts, slo=SLO())
    assert (row.requests_per_replica, row.replicas) == (8, 2)


def test_fleet_uses_the_pp_layer_partition():
    # llama3-8b over two stages of 24 and 8 layers: the 24-layer stage is the worst one on every count
    spec, gpu = load_bundled("llama3-8b"), get_gpu("h100")
    opts = FitOptions(pipeline_parallel_size=2, pp_layer_partition=(24, 8), kv_cache_memory_bytes=8 * GIB)
    fit = plan_fit(
        spec,
        gpu,
        FitOptions(
            pipeline_parallel_size=2, pp_layer_partition=(24, 8), max_model_len=8192, kv_cache_memory_bytes=8 * GIB
        ),
    )
    assert fit.kv_bytes_per_block == 24 * 16 * 4096  # 24 layers × 16 tokens × (8 heads × 128 × K and V × 2 B)
    row = plan_layout(spec, gpu, one_class(50, 8192), opts, slo=SLO())
    assert row.requests_per_replica == fit.max_requests_by_memory
    even = plan_layout(
        spec, gpu, one_class(50, 8192), FitOptions(pipeline_parallel_size=2, kv_cache_memory_bytes=8 * GIB), slo=SLO()
    )
    assert even.requests_per_replica > row.requests_per_replica


def test_sglang_fleet_packs_the_full_layer_pool_fit_says_limits_llama4():
    # issue 16: SGLang's hybrid-SWA pools (Llama 4's chunked layers are its SWA layers) let 60 requests of
    # 32k per replica (TP 8 on H100, SGLang's default mem_fraction_static 0.812 there) by fit; fleet must pack the
    # same pools: ceil(5000 / 60) = 84 replicas, not the ~40 that packing by total bytes gave
    from kvplan.fleet import plan_fleet, workload_from_data
    from kvplan.gpus import get_gpu

    spec = load_bundled("llama4-scout")
    opts = FitOptions(engine=Engine.sglang, tensor_parallel_size=8, max_model_len=32768)
    fit = plan_fit(spec, get_gpu("h100"), opts)
    assert fit.gpu_memory_utilization == 0.812 and fit.max_concurrent_requests == 60
    wl = workload_from_data({"name": "w", "classes": [{"name": "c", "concurrency": 5000, "tokens": "32k"}]}, "w")
    rows = plan_fleet(spec, wl, [get_gpu("h100")], FitOptions(engine=Engine.sglang), tps=[8], pps=[1])
    (row,) = [r for r in rows if r.layout == "TP 8"]  # MoE: SGLang's EP / DP-attention layouts are tried too
    assert row.replicas == -(-5000 // 60) == 84
