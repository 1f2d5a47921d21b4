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
from dataclasses import replace
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


@lru_cache(maxsize=None)
def draft_spec(key: str):
    """A fixture drafter (draft model or EAGLE head, kvplan's spec format) as a ModelSpec."""
    data = json.loads(key)
    return build_spec(dict(data, name="draft", source="vllm_golden.json", dtype="bf16", max_model_len=1 << 20), "draft")


def speculative(config: dict) -> dict:
    """The configuration's speculative-decoding settings as FitOptions fields."""
    sc = config.get("speculative")
    if not sc:
        return {}
    draft = sc.get("draft")
    return dict(
        num_speculative_tokens=sc["num_spec"],
        num_mtp_layers=sc.get("mtp", 0),
        speculative_model=None if draft is None else draft_spec(json.dumps(draft, sort_keys=True)),
    )


def options(config: dict, budget: int) -> FitOptions:
    return FitOptions(
        **speculative(config),
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
        None,
        *(
            speculative(config).get(k, d)
            for k, d in (("num_speculative_tokens", 0), ("speculative_model", None), ("num_mtp_layers", 0))
        ),
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


# --- attention layers with a Mamba-2 state beside them; DeepSeek-V3.2's indexer cache ----------------


def fixture_row(geometry_name: str, speculative: dict | None = None, **settings) -> tuple[dict, dict]:
    """(configuration, its 40 GiB row) of the fixture at these settings."""
    want = {**dict(pp=1, max_num_batched_tokens=2048, async_scheduling=True, prefix_caching=True), **settings}
    (config,) = [
        c
        for c in GOLDEN["configs"]
        if c["geometry"] == geometry_name
        and not c.get("example")
        and c.get("speculative") == speculative
        and all(c[k] == v for k, v in want.items())
    ]
    (row,) = [r for r in config["results"] if r["budget"] == 40 * GIB]
    return config, row


def test_fixture_covers_parallel_state_and_the_indexer():
    specs = [g["spec"] for g in GOLDEN["geometries"].values()]
    assert any(s.get("parallel_state") == "mamba2" and set(s["layers"]) == {"full"} for s in specs)  # Falcon-H1
    assert any(s.get("parallel_state") and "mamba2" in s["layers"] for s in specs)  # Zamba2: mixed
    assert any(s.get("mla", {}).get("index_head_dim") for s in specs)  # DeepSeek-V3.2


@pytest.mark.parametrize("prefix_caching", [True, False])
def test_falcon_h1_counts_the_mamba_mixer_of_every_attention_layer(prefix_caching):
    # vLLM registers each Falcon-H1 layer's attention (index i) and its Mamba-2 mixer (index 44 + i): two
    # groups of 44. The hybrid alignment raises the block to cover a Mamba page: the state is conv
    # (3, 3584) + ssm (24, 128, 256) = 1,594,368 B, the attention 2 × 2 × 128 × 2 B = 1,024 B per token:
    # 16 × cdiv(1,594,368, 16 × 1,024) = 1,568 tokens, 1,605,632 B per page. Align mode keeps 3 pages per
    # Mamba-2 layer (2 + MambaMixer2's checkpoint page): cdiv(4096, 1568) + 3 = 6 blocks per request.
    config, row = fixture_row("falcon-h1-7b", tp=1, kv_dtype="bf16", max_model_len=4096, prefix_caching=prefix_caching)
    r = plan_fit(load_bundled("falcon-h1-7b"), get_gpu("h200"), options(config, 40 * GIB))
    assert [(g["kind"], g["layers"]) for g in r.kv_cache_groups] == [("full", 44), ("mamba2", 44)]
    assert (r.block_size, r.kv_bytes_per_block) == (row["block_size"], 44 * 1_605_632) == (1568, 70_647_808)
    assert r.blocks_per_request == (6 if prefix_caching else 4)
    assert (r.num_blocks, r.engine_log) == (row["num_blocks"], row["log"])
    if prefix_caching:
        assert row["log"].endswith("101.17x")  # 607 / 6 (the attention alone: 16-token blocks, no Mamba pages)


@pytest.mark.parametrize("kv_dtype,latent", [("bf16", 1152), ("fp8", 656)])
def test_deepseek_v32_indexer_is_its_own_132_byte_cache(kv_dtype, latent):
    # DeepseekV32IndexerCache: 128 fp8 values + one fp32 scale per 128 = 132 B per token and layer, whatever
    # the KV dtype, grouped with the MLA latent (UniformTypeKVCacheSpecs: one group, pages summed); the
    # sparse backends run 64-token blocks and keep an fp8 cache as fp8_ds_mla (656 B per token)
    spec = load_bundled("deepseek-v3.2")
    config, row = fixture_row("deepseek-v3.2", tp=8, kv_dtype=kv_dtype, max_model_len=4096)
    r = plan_fit(spec, get_gpu("h200"), options(config, 40 * GIB))
    assert r.kv_bytes_per_token == 61 * (latent + 132)
    assert (r.block_size, r.kv_bytes_per_block) == (64, 64 * 61 * (latent + 132)) == (64, config["bytes_per_block"][0])
    assert [g["layers"] for g in r.kv_cache_groups] == [122]  # 61 indexer + 61 MLA caches
    assert (r.num_blocks, r.engine_log) == (row["num_blocks"], row["log"])
    # the engine-neutral estimate keeps transformers' rule: the indexer key in the KV dtype
    from kvplan.calc import layer_token_bytes

    neutral = layer_token_bytes(spec.layers[0], resolve_kv_dtype(spec, kv_dtype))
    assert neutral == (576 + 128) * (2 if kv_dtype == "bf16" else 1)


# --- speculative decoding: the drafter's layers in the pool, wider and more Mamba states ---------------


def spec_case(geometry_name: str, **match) -> list[dict]:
    return [
        c
        for c in GOLDEN["configs"]
        if c["geometry"] == geometry_name
        and c.get("speculative")
        and all(c["speculative"].get(k) == v for k, v in match.items())
    ]


def test_fixture_covers_speculative_decoding():
    methods = Counter(c["speculative"]["method"] for c in GOLDEN["configs"] if c.get("speculative"))
    assert set(methods) == {"eagle", "eagle3", "draft_model", "mtp", "ngram"}


def test_deepseek_v3_mtp_layer_is_one_more_mla_layer():
    # the MTP module registers an MLA cache like the 61 target layers: 62 layers × 64 tokens × 576 B (fp8)
    (config,) = [c for c in spec_case("deepseek-v3", num_spec=1) if c["tp"] == 8 and c["kv_dtype"] == "fp8"][:1]
    assert config["bytes_per_block"] == [62 * 64 * 576]
    assert GOLDEN["layouts"][config["layout"]]["groups"][0]["layers"][-1] == 61  # model.layers.61: the MTP block
    r = plan_fit(geometry("deepseek-v3"), get_gpu("h200"), options(config, 40 * GIB))
    assert r.kv_bytes_per_block == 62 * 64 * 576 and r.kv_bytes_per_token == 62 * 576


def test_draft_model_and_eagle_heads_share_the_pool():
    # llama3-70b + a Llama-3.2-1B-like draft (16 layers of 8 × 64): one group (all full attention), its page
    # the sum; at TP 4: 80 × 16 × 2 × 128 × 2 × 2 + 16 × 16 × 2 × 64 × 2 × 2 = 1,441,792 B per block
    (config,) = [c for c in spec_case("llama3-70b") if c["tp"] == 4 and c["kv_dtype"] == "bf16"][:1]
    assert config["bytes_per_block"] == [1_441_792]
    # gpt-oss-20b + an EAGLE3 head (one full layer): 12 sliding + 13 full layers, groups of 13, 1 padding layer
    (config,) = [c for c in spec_case("gpt-oss-20b") if c["tp"] == 1][:1]
    layout = GOLDEN["layouts"][config["layout"]]
    assert layout["padding_layers"] == 1 and [len(g["layers"]) for g in layout["groups"]] == [12, 13]


def test_multi_module_mtp_keeps_more_sliding_tokens():
    # gemma3-27b + 2 MTP modules, 3 draft tokens: sliding layers retain num_spec − 1 = 2 more tokens
    # (get_global_kv_cache_groups: extra_retained_tokens = num_prefill_lookahead_tokens − 1)
    spec = geometry("gemma3-27b")
    base = vllm_rules.build_layout(spec, resolve_kv_dtype(spec, "bf16"), 1, 1, 131072, None, True, True, "sm90")
    mtp = vllm_rules.build_layout(
        spec, resolve_kv_dtype(spec, "bf16"), 1, 1, 131072, None, True, True, "sm90", None, 3, None, 2
    )
    sliding = [g for g in mtp.groups if g.kind == "sliding"]
    assert sliding and all(g.extra_retained == 2 for g in sliding)
    assert all(g.extra_retained == 0 for g in base.groups)
    # cdiv(min(1023 + 2 + 4096, S), 16) + 1 = 322 blocks instead of cdiv(1023 + 4096, 16) + 1 = 321
    assert sliding[0].blocks_per_request(131072, 4096) == 322


def test_speculative_tokens_grow_mamba_states():
    # nemotron-h (Mamba-2) with 2 draft tokens and no drafter: conv states keep d_conv − 1 + 2 = 5 rows, and
    # each layer keeps 2 + 2 + 1 = 5 pages (2 align, 2 speculative, 1 checkpoint)
    configs = [c for c in spec_case("nemotron-h-56b") if c["tp"] == 1 and c["kv_dtype"] == "bf16"]
    assert configs
    spec = geometry("nemotron-h-56b")
    layout = vllm_rules.build_layout(
        spec, resolve_kv_dtype(spec, "bf16"), 1, 1, 4096, None, True, True, "sm90", None, 2, None, 0
    )
    assert {g.state_pages for g in layout.groups if g.kind == "mamba2"} == {5}
    state = next(x.state for x in spec.layers if x.kind == "mamba2")
    assert vllm_rules.state_tensors(state, "bf16", 1, 2)[0][0][0] == 3 + 2
    for c in configs:
        assert not mismatches(c)


@pytest.mark.parametrize(
    "opts,message",
    [
        (FitOptions(engine="sglang", num_speculative_tokens=2), "vLLM >= 0.33's rules only"),
        (FitOptions(engine_version="0.11", num_mtp_layers=1, num_speculative_tokens=1), "vLLM >= 0.33's rules only"),
        (FitOptions(num_mtp_layers=1), "--num-speculative-tokens: give the draft tokens"),
    ],
)
def test_speculative_settings_outside_vllm_033_are_refused(opts, message):
    from kvplan.errors import UsageError

    with pytest.raises(UsageError, match=message):
        plan_fit(load_bundled("deepseek-v3"), get_gpu("h200"), replace(opts, tensor_parallel_size=8))


@pytest.mark.parametrize("kv_dtype", ["fp8_e5m2", "int8"])
def test_deepseek_v32_with_a_cache_no_sparse_backend_takes_is_refused(cli, kv_dtype):
    # vLLM 0.33: the sparse MLA backends' supported_kv_cache_dtypes (FLASHMLA_SPARSE: auto, bfloat16, fp8_ds_mla,
    # fp8, nvfp4_ds_mla; FLASH_ATTN_MLA_SPARSE and FlashInfer's: auto, float16/bfloat16, fp8, fp8_e4m3) hold no
    # fp8_e5m2 or int8, so platforms/cuda.py get_attn_backend_cls raises "No valid attention backend found ...
    # kv_cache_dtype not supported" (v1/attention/backend.py validate_configuration): no plan, exit 2
    code, out, err = cli("fit", "deepseek-v3.2", "--gpu", "h200", "--tp", "8", "--kv-dtype", kv_dtype)
    assert (code, out) == (2, "")
    assert err == (
        f"kvplan: error: --kv-dtype: {kv_dtype} is not a cache vLLM 0.33's sparse MLA backends take (FLASHMLA_SPARSE, "
        "FLASH_ATTN_MLA_SPARSE); allowed: bf16, fp8 (stored as fp8_ds_mla, 656 B per token)\n"
    )
