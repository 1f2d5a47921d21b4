"""``kvplan fit --engine vllm`` against vLLM 0.33's own planning functions, every fixture row exactly.

tests/fixtures/vllm_golden.json is written by scripts/vllm_golden.py, which calls vLLM's
``get_global_kv_cache_groups``, ``get_kv_cache_configs`` and ``get_kv_cache_capacity`` on a grid of
geometries and settings with the budget given directly (``--kv-cache-memory``). Each row here is
:func:`kvplan.fit.plan_fit` with the same settings; every number vLLM produced must come out equal:
num_blocks, whether it fits, the longest request (vLLM's estimate, capped at max_model_len), the block size,
the log's "GPU KV cache size" and "Maximum concurrency" (the whole line), the groups (kinds, layers, block
sizes, pages), the padding layers, the hybrid alignment, the in-flight tokens and bytes per block.
"""

from __future__ import annotations

import json
from collections import Counter
from functools import lru_cache
from pathlib import Path

import pytest

from kvplan.calc import resolve_kv_dtype
from kvplan.engines import vllm as vllm_rules
from kvplan.fit import FitOptions, plan_fit
from kvplan.gpus import get_gpu
from kvplan.specs import build_spec, load_bundled

FIXTURE = Path(__file__).resolve().parent / "fixtures" / "vllm_golden.json"
GOLDEN = json.loads(FIXTURE.read_text())
GIB = 1 << 30
# vLLM spec class of each kvplan group kind
SPEC_CLASS = {
    "full": "FullAttentionSpec",
    "sliding": "SlidingWindowSpec",
    "chunked": "ChunkedLocalAttentionSpec",
    "mla": "MLAAttentionSpec",
    "mamba": "MambaSpec",
    "mamba2": "MambaSpec",
    "gdn": "MambaSpec",
}


@lru_cache(maxsize=None)
def geometry(name: str):
    """The fixture geometry as a kvplan ModelSpec (the spec dict is kvplan's YAML format)."""
    data = GOLDEN["geometries"][name]["spec"]
    return build_spec(dict(data, name=name, source="vllm_golden.json", dtype="bf16", max_model_len=1 << 20), name)


def options(config: dict, budget: int) -> FitOptions:
    return FitOptions(
        tensor_parallel_size=config["tp"],
        pipeline_parallel_size=config["pp"],
        kv_dtype=config["kv_dtype"],
        max_model_len=config["max_model_len"],
        max_num_batched_tokens=config["max_num_batched_tokens"],
        async_scheduling=config["async_scheduling"],
        enable_prefix_caching=config["prefix_caching"],
        hybrid_kv_cache_manager=config["hybrid_kv_cache_manager"],
        kv_cache_memory_bytes=budget,
    )


def mismatches(config: dict) -> list[str]:
    """Every difference between vLLM's numbers for one configuration and kvplan's."""
    spec, gpu = geometry(config["geometry"]), get_gpu("h200")  # Hopper; batch settings are all given
    layout_want = GOLDEN["layouts"][config["layout"]]
    out = []
    layout = vllm_rules.build_layout(
        spec,
        resolve_kv_dtype(spec, config["kv_dtype"]),
        config["tp"],
        config["pp"],
        config["max_model_len"],
        None,
        config["prefix_caching"],
        config["hybrid_kv_cache_manager"],
        "sm90",
    )
    groups = [
        dict(kind=SPEC_CLASS[g.kind], layers=list(g.layers), block_size=g.block_size, page_bytes=g.page_bytes)
        for g in layout.groups
    ]
    got_layout = dict(
        attention_block_size=layout.attention_block_size,
        mamba_page_size_padded=layout.mamba_page_padded,
        padding_layers=layout.padding_layers,
        groups=groups,
    )
    if got_layout != layout_want:
        out.append(f"layout: vLLM {layout_want} kvplan {got_layout}")
    in_flight = vllm_rules.in_flight_tokens(config["max_num_batched_tokens"], config["pp"], config["async_scheduling"])
    if in_flight != config["in_flight_tokens"]:
        out.append(f"in-flight tokens: vLLM {config['in_flight_tokens']} kvplan {in_flight}")
    if list(layout.bytes_per_block) != config["bytes_per_block"]:
        out.append(f"bytes per block: vLLM {config['bytes_per_block']} kvplan {list(layout.bytes_per_block)}")
    blocks = layout.blocks_per_request(config["max_model_len"], in_flight)
    if [blocks * b for b in layout.bytes_per_block] != config["request_bytes"]:
        out.append(f"request bytes: vLLM {config['request_bytes']} kvplan {blocks} blocks")
    for row in config["results"]:
        r = plan_fit(spec, gpu, options(config, row["budget"]))
        want = dict(num_blocks=row["num_blocks"], fits=row["fits"], longest=row["max_model_len_estimate"])
        got = dict(num_blocks=r.num_blocks, fits=r.fits, longest=min(r.max_model_len_fit, r.max_model_len))
        if not row["fits"]:
            want["longest"] = row["error_estimate"]  # the number vLLM's error message gives
        else:
            want.update(
                block_size=row["block_size"],
                tokens=row["kv_cache_size_tokens"],
                concurrency=row["max_concurrency"],
                log=row["log"],
            )
            got.update(
                block_size=r.block_size, tokens=r.kv_capacity_tokens, concurrency=r.max_concurrency, log=r.engine_log
            )
        if want != got:
            out.append(f"budget {row['budget']:,}: vLLM {want} kvplan {got}")
    return out


def test_fixture_is_vllm_0_33_with_every_kind():
    assert GOLDEN["vllm_version"] == "0.33.0"
    kinds = Counter(k for g in GOLDEN["geometries"].values() for k in set(g["spec"]["layers"]))
    for kind in ("full", "sliding", "chunked", "mla", "mamba", "mamba2", "gdn"):
        assert kinds[kind] >= 1, kind
    rows = [r for c in GOLDEN["configs"] for r in c["results"]]
    assert len(rows) >= 3000
    fits = Counter(r["fits"] for r in rows)
    assert fits[True] > 1000 and fits[False] > 500  # budgets straddle "does not fit"
    # each configuration has a budget that holds exactly one request and one a byte short of it
    for c in GOLDEN["configs"]:
        if c.get("example"):
            continue
        exact = max(n + b for n, b in zip(c["request_bytes"], c["bytes_per_block"], strict=True))
        by_budget = {r["budget"]: r["fits"] for r in c["results"]}
        assert by_budget[exact] is True and by_budget[exact - 1] is False


@pytest.mark.parametrize("name", sorted(GOLDEN["geometries"]))
def test_every_row_matches_vllm(name):
    configs = [c for c in GOLDEN["configs"] if c["geometry"] == name]
    assert configs
    bad = [
        f"{c['geometry']} { ({k: c[k] for k in options(c, 0).__dict__ if k in c}) }: {m}"
        for c in configs
        for m in mismatches(c)
    ]
    assert not bad, f"{len(bad)} mismatches, first: " + "\n".join(bad[:5])


# --- the worked examples (vLLM's numbers in the fixture's example rows) -----------------------


def example(name: str) -> dict:
    (config,) = [c for c in GOLDEN["configs"] if c.get("example") and c["geometry"] == name]
    return config


def test_mistral_10_gib_32k_is_4_00x():
    # every layer sliding (window 4096), async: 2 × 8192 in flight: cdiv(min(4095 + 16384, 32768), 16) + 1
    # = 1281 blocks of 32 × 64 KiB = 2 MiB; 10 GiB = 5120 blocks: 5120 / 1281 = 3.997 → "4.00x"
    r = plan_fit(
        load_bundled("mistral-7b-v0.1"),
        get_gpu("h100"),
        FitOptions(max_model_len=32768, max_num_batched_tokens=8192, kv_cache_memory_bytes=10 * GIB),
    )
    assert (r.num_blocks, r.blocks_per_request) == (5120, 1281)
    assert r.engine_log == example("mistral-7b-v0.1")["results"][0]["log"]
    assert r.engine_log.endswith("Maximum concurrency for 32,768 tokens per request: 4.00x")
    assert r.kv_capacity_tokens == 130_969  # int(5120 / 1281 × 32768), not 5120 × 16
    assert r.max_concurrent_requests == 3  # (5120 − 1) // 1281
    # synchronous scheduling (one batch in flight): cdiv(4095 + 8192, 16) + 1 = 769 blocks
    sync = plan_fit(
        load_bundled("mistral-7b-v0.1"),
        get_gpu("h100"),
        FitOptions(
            max_model_len=32768, max_num_batched_tokens=8192, kv_cache_memory_bytes=10 * GIB, async_scheduling=False
        ),
    )
    assert sync.blocks_per_request == 769


def test_gemma3_27b_padding_layers():
    # 52 sliding + 10 full layers: groups of 10; the sliding layers split into 6 groups (9, 9, 9, 9, 8, 8):
    # 8 padding layers, so a block holds 10 pages of 16 tokens × 16 heads × 256 × 2 B = 128 KiB
    r = plan_fit(
        load_bundled("gemma3-27b"),
        get_gpu("h200"),
        FitOptions(max_model_len=32768, max_num_batched_tokens=8192, kv_cache_memory_bytes=20 * GIB),
    )
    assert r.padding_layers == 8
    assert [g["layers"] for g in r.kv_cache_groups] == [9, 9, 9, 9, 8, 8, 10]
    assert r.kv_bytes_per_block == 10 * 131_072
    assert r.engine_log == example("gemma3-27b")["results"][0]["log"]


def test_jamba_10_gib_4096_is_124_12x():
    # the attention block grows to cover a Mamba page (311,296 B bf16 = 76 tokens of 4 KiB → 80), the Mamba
    # page is padded to 80 × 4096 = 327,680 B; 8 groups of 4 layers; prefix caching keeps 2 pages per Mamba
    # layer: cdiv(4096, 80) + 7 × 2 = 66 blocks per request; 10 GiB / (4 × 327,680) = 8192 blocks
    r = plan_fit(
        load_bundled("jamba-v0.1"),
        get_gpu("h100"),
        FitOptions(max_model_len=4096, max_num_batched_tokens=8192, kv_cache_memory_bytes=10 * GIB),
    )
    assert (r.block_size, r.num_blocks, r.blocks_per_request) == (80, 8192, 66)
    assert r.engine_log == example("jamba-v0.1")["results"][0]["log"]
    assert r.engine_log.endswith("124.12x")
    # fp8 attention halves the attention page: 160-token blocks
    fp8 = plan_fit(
        load_bundled("jamba-v0.1"),
        get_gpu("h100"),
        FitOptions(max_model_len=4096, kv_dtype="fp8", kv_cache_memory_bytes=10 * GIB),
    )
    assert fp8.block_size == 160
    # without prefix caching one page per Mamba layer: 52 + 7 = 59 blocks
    none = plan_fit(
        load_bundled("jamba-v0.1"),
        get_gpu("h100"),
        FitOptions(max_model_len=4096, kv_cache_memory_bytes=10 * GIB, enable_prefix_caching=False),
    )
    assert none.blocks_per_request == 59


def test_fp8_mla_on_hopper_uses_64_token_blocks():
    spec = load_bundled("deepseek-v3")
    fp8 = plan_fit(
        spec,
        get_gpu("h200"),
        FitOptions(tensor_parallel_size=8, kv_dtype="fp8", max_model_len=4096, kv_cache_memory_bytes=GIB),
    )
    bf16 = plan_fit(
        spec, get_gpu("h200"), FitOptions(tensor_parallel_size=8, max_model_len=4096, kv_cache_memory_bytes=GIB)
    )
    assert (fp8.block_size, bf16.block_size) == (64, 16)
    assert fp8.kv_bytes_per_block == 61 * 64 * 576  # one fp8 latent of 576 B per token per layer
