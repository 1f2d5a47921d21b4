"""kvplan.kvcache: a real cache's bytes equal the formula; writes stay in place; rings keep the window."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from kvplan.calc import estimate  # noqa: E402
from kvplan.errors import UsageError  # noqa: E402
from kvplan.kvcache import StaticKVCache, ring_positions  # noqa: E402
from kvplan.loader import load_bundled, load_spec_yaml  # noqa: E402

# CPU tensors from torch.empty are virtual until written, so these allocations cost no time.

# Tiny synthetic specs, one per new layer kind or geometry feature (bf16 model, H_q 4, H_kv 2, d 16 unless
# overridden). SYNTHETIC_BYTES: bytes of a cache of 16 tokens × 2 requests, worked out by hand.
_HEAD = "source: tests/test_kvcache.py\ndtype: bf16\nmax_model_len: 4096\n"
_GQA = "num_q_heads: 4\nnum_kv_heads: 2\nhead_dim: 16\n"
SYNTHETIC = {
    "mamba2": _GQA + "num_layers: 3\nlayers: [mamba2, full, mamba2]\n"
    "mamba2: {num_heads: 4, head_dim: 8, d_state: 16, n_groups: 2, d_conv: 4, ssm_dtype: fp32}\n",
    "gdn": _GQA + "num_layers: 3\nlayers: [gdn, gdn, full]\n"
    "gdn: {num_k_heads: 2, num_v_heads: 4, head_k_dim: 8, head_v_dim: 8, d_conv: 4}\n",
    "short_conv": _GQA
    + "num_layers: 2\nlayers: [short_conv, full]\nshort_conv: {d_inner: 64, d_conv: 3, conv_dtype: fp32}\n",
    "linear_attention": _GQA + "num_layers: 2\nlayers: [linear_attention, full]\n"
    "linear_attention: {num_heads: 4, head_dim: 16}\n",
    "none": _GQA + "num_layers: 4\nsliding_window: 8\nlayers: [none, full, none, sliding]\n",
    # [sliding, sliding, full, sliding, sliding, full]; the last 2 shared: 4 reads 3, 5 reads 2
    "shared": _GQA + "num_layers: 6\nsliding_window: 8\n"
    "layers: {default: sliding, rules: [{kind: full, period: 3, offset: 2}]}\nnum_kv_shared_layers: 2\n",
    # Gemma-4-like: sliding layers 4 × 16, the global (full) layer its own 2 × 64
    "geometry": "num_q_heads: 8\nnum_kv_heads: 4\nhead_dim: 16\nnum_layers: 4\nsliding_window: 8\n"
    "layers: {default: sliding, rules: [{kind: full, indices: [3]}]}\n"
    "geometry: {full: {num_kv_heads: 2, head_dim: 64}}\n",
    # DeepSeek-V3.2-like: latent 32 + 16 and a 16-wide indexer key
    "mla": "num_q_heads: 4\nnum_kv_heads: 4\nhead_dim: 24\nnum_layers: 2\n"
    "mla: {kv_lora_rank: 32, qk_rope_head_dim: 16, index_head_dim: 16}\n",
}
SYNTHETIC_BYTES = {
    # full: 2 × 2 heads × 16 × 2 B = 128 B/token × 16 = 2,048 B; mamba2 conv (3, 4·8 + 2·2·16 = 96) bf16 = 576 B,
    # ssm (4, 8, 16) fp32 = 2,048 B: 2 layers × 2,624 = 5,248 B; (2,048 + 5,248) × 2 requests
    "mamba2": (2_048 + 2 * (576 + 2_048)) * 2,
    # gdn conv (3, 2·2·8 + 4·8 = 64) bf16 = 384 B, ssm (4, 8, 8) bf16 = 512 B; 2 layers + full 2,048 B
    "gdn": (2 * (384 + 512) + 2_048) * 2,
    # short_conv conv (2, 64) fp32 = 512 B + full 2,048 B
    "short_conv": (512 + 2_048) * 2,
    # linear_attention ssm (4, 16, 16) bf16 = 2,048 B + full 2,048 B
    "linear_attention": (2_048 + 2_048) * 2,
    # none layers 0 B; full 128 B × 16 + sliding 128 B × 8
    "none": (2_048 + 1_024) * 2,
    # sliding layers 0, 1, 3: 128 B × 8 each; full layer 2: 128 B × 16; shared layers 4, 5: 0 B
    "shared": (3 * 1_024 + 2_048) * 2,
    # sliding: 2 × 4 × 16 × 2 B = 256 B/token × 8 × 3 layers; full: 2 × 2 × 64 × 2 B = 512 B/token × 16
    "geometry": (3 * 256 * 8 + 512 * 16) * 2,
    # mla: (32 + 16 + 16) × 2 B = 128 B/token per layer × 2 layers × 16 tokens
    "mla": 2 * 128 * 16 * 2,
}


def synthetic_spec(tmp_path, kind: str):
    """Write the synthetic spec YAML of ``kind`` into tmp_path and load it."""
    path = tmp_path / f"syn-{kind}.yaml"
    path.write_text(f"name: syn-{kind}\n" + _HEAD + SYNTHETIC[kind])
    return load_spec_yaml(path)


@pytest.mark.parametrize(
    "model,seq,batch,expected",
    [
        # 2 × 32 layers × 8 heads × 128 × 2 B = 131,072 B/token; × 16 tokens × 2 requests = 4,194,304 B
        ("llama3-8b", 16, 2, 4_194_304),
        # MQA: 2 × 32 layers × 1 head × 64 × 2 B = 8,192 B/token; × 100 × 3 = 2,457,600 B
        ("falcon-7b", 100, 3, 2_457_600),
        # MLA: 61 layers × (512 + 64) × 2 B = 70,272 B/token, no factor 2; × 33 × 1 = 2,318,976 B
        ("deepseek-v3", 33, 1, 2_318_976),
        # Jamba: 4 attention layers × 2 × 8 × 128 × 2 B = 16,384 B/token × 64 = 1,048,576 B, plus
        # 28 Mamba layers × 8192 × (3 + 16) × 2 B = 8,716,288 B of state; × 2 requests = 19,529,728 B
        ("jamba-v0.1", 64, 2, 19_529_728),
        # Gemma 3 27B: 2 × 16 heads × 128 × 2 B = 8,192 B per token per layer; 10 full + 52 sliding
        # (window 1024 > 40 tokens, so all 62 layers keep 40): 62 × 8,192 × 40 = 20,316,160 B
        ("gemma3-27b", 40, 1, 20_316_160),
    ],
)
def test_bytes_equal_formula(model, seq, batch, expected):
    spec = load_bundled(model)
    cache = StaticKVCache(spec, seq, batch, device="cpu")
    assert cache.nbytes == expected
    assert estimate(spec, seq, batch).total_bytes == expected
    assert cache.formula_bytes() == expected


def test_sliding_window_both_sides_of_the_limit():
    spec = load_bundled("gemma3-27b")
    per = 8_192  # bytes per token per layer: 2 × 16 × 128 × 2 B
    # exactly the window: every layer keeps 1024 tokens: 62 × 1024 × 8192 = 520,093,696 B
    at = StaticKVCache(spec, 1024, device="cpu")
    assert at.nbytes == 62 * 1024 * per == 520_093_696 == estimate(spec, 1024).total_bytes
    # one token over: full layers keep 1025, sliding ones stay at 1024: 10 × 1025 × 8192 + 52 × 1024 × 8192
    over = StaticKVCache(spec, 1025, device="cpu")
    assert over.nbytes == 10 * 1025 * per + 52 * 1024 * per == 520_175_616 == estimate(spec, 1025).total_bytes
    sliding = [layer for layer in over.layers if layer.kind == "sliding"]
    assert len(sliding) == 52 and all(layer.tensors["k"].shape == (1, 16, 1024, 128) for layer in sliding)
    assert over.layers[5].kind == "full" and over.layers[5].tensors["k"].shape == (1, 16, 1025, 128)


@pytest.mark.parametrize(
    "model",
    ["llama3-8b", "gemma3-27b", "deepseek-v3", "jamba-v0.1", "falcon-7b", "llama4-scout", "gpt-oss-20b", "llama2-7b"],
)
@pytest.mark.parametrize("kv_dtype", ["auto", "fp8", "q8_0", "q4_0", "nvfp4", "int8", "fp32"])
def test_every_dtype_matches_formula_on_meta(model, kv_dtype):
    # meta tensors carry shape and dtype without memory: real sizes (128k tokens) checked instantly
    spec = load_bundled(model)
    for seq in (1, 1000, 131_072):
        cache = StaticKVCache(spec, seq, 3, kv_dtype, device="meta")
        assert cache.nbytes == estimate(spec, seq, 3, kv_dtype).total_bytes


def test_packed_dtypes_are_uint8_rows_of_exact_bytes():
    spec = load_bundled("llama3-8b")
    # q8_0: H_kv × d = 1024 elements = 32 blocks × 34 B = 1,088 B per K row (vs 1,024 at 1 B/elem)
    c = StaticKVCache(spec, 10, 2, "q8_0", device="cpu")
    k = c.layers[0].tensors["k"]
    assert k.dtype == torch.uint8 and k.shape == (2, 10, 1088)
    # 2 × 1,088 B × 32 layers = 69,632 B/token; × 10 × 2 = 1,392,640 B
    assert c.nbytes == 1_392_640 == estimate(spec, 10, 2, "q8_0").total_bytes
    # nvfp4: ceil(1024/2) + ceil(1024/16) = 576 B per row
    assert StaticKVCache(spec, 1, 1, "nvfp4", device="meta").layers[0].tensors["v"].shape == (1, 1, 576)
    # int8 with fp32 scales per token-head: 1024 + 8 × 4 = 1,056 B per row
    assert StaticKVCache(spec, 1, 1, "int8", device="meta").layers[0].tensors["k"].shape == (1, 1, 1056)
    # fp8 has a torch type: float8_e4m3fn [B, H_kv, S, d]
    assert StaticKVCache(spec, 1, 1, "fp8", device="meta").layers[0].tensors["k"].dtype == torch.float8_e4m3fn


def test_layer_shapes_per_kind():
    ds = StaticKVCache(load_bundled("deepseek-v3"), 7, 2, device="meta", layers=2)
    assert list(ds.layers[0].tensors) == ["latent"] and ds.layers[0].tensors["latent"].shape == (2, 7, 576)
    jamba = StaticKVCache(load_bundled("jamba-v0.1"), 7, 2, device="meta", layers=5)
    assert jamba.layers[0].kind == "mamba"
    assert jamba.layers[0].tensors["conv"].shape == (2, 3, 8192)  # (B, d_conv − 1, d_inner): vLLM "SD" layout
    assert jamba.layers[0].tensors["ssm"].shape == (2, 8192, 16)  # (B, d_inner, d_state)
    assert jamba.layers[4].kind == "full" and jamba.layers[4].tensors["v"].shape == (2, 8, 7, 128)
    scout = StaticKVCache(load_bundled("llama4-scout"), 10_000, 1, device="meta", layers=4)
    assert scout.layers[0].kind == "chunked" and scout.layers[0].tensors["k"].shape == (1, 8, 8192, 128)
    assert scout.layers[3].kind == "full" and scout.layers[3].tensors["k"].shape == (1, 8, 10_000, 128)


def test_first_n_layers():
    spec = load_bundled("gemma3-27b")
    # layers 0..5: 5 sliding + layer 5 full; S = 2000: 5 × 1024 × 8192 + 2000 × 8192 = 58,327,040 B
    c = StaticKVCache(spec, 2000, 1, device="meta", layers=6)
    assert [layer.kind for layer in c.layers] == ["sliding"] * 5 + ["full"]
    assert c.nbytes == c.formula_bytes() == 58_327_040
    with pytest.raises(UsageError, match="--layers: 63 must be an integer in 1..62"):
        StaticKVCache(spec, 10, layers=63)
    with pytest.raises(UsageError, match="--seq"):
        StaticKVCache(spec, 0)


def test_full_layer_prefill_and_decode_write_in_place():
    spec = load_bundled("llama3-8b")
    c = StaticKVCache(spec, 12, 2, device="cpu", layers=2, fill=0)
    ptrs, nbytes = c.data_ptrs(), c.nbytes
    k = torch.randn(2, 8, 12, 128).bfloat16()
    v = torch.randn(2, 8, 12, 128).bfloat16()
    c.write(0, 0, k[:, :, :9], v[:, :, :9])  # prefill 9 tokens
    for t in range(9, 12):  # decode 3
        c.write(0, t, k[:, :, t : t + 1], v[:, :, t : t + 1])
    assert c.data_ptrs() == ptrs and c.nbytes == nbytes  # no growth, no new storage
    rk, rv, pos = c.read(0, 12)
    assert torch.equal(rk, k) and torch.equal(rv, v) and pos.tolist() == list(range(12))
    assert rk.data_ptr() == c.layers[0].tensors["k"].data_ptr()  # a view, not a copy
    assert torch.count_nonzero(c.layers[1].tensors["k"]) == 0  # layer 1 untouched
    with pytest.raises(ValueError, match="does not grow"):
        c.write(0, 12, k[:, :, :1], v[:, :, :1])


def test_ring_keeps_the_last_window_tokens():
    spec = load_bundled("gpt-oss-20b")  # layer 0 sliding, window 128
    c = StaticKVCache(spec, 300, 1, device="cpu", layers=1)
    layer = c.layers[0]
    assert layer.kind == "sliding" and layer.capacity == 128
    k = torch.randn(1, 8, 300, 64).bfloat16()
    v = torch.randn(1, 8, 300, 64).bfloat16()
    c.write(0, 0, k[:, :, :200], v[:, :, :200])  # more than the ring: only 72..199 survive
    for t in range(200, 203):
        c.write(0, t, k[:, :, t : t + 1], v[:, :, t : t + 1])
    rk, rv, pos = c.read(0, 203)
    # slot s holds the latest position p < 203 with p % 128 == s
    assert pos.tolist() == [p if p % 128 == s else None for s, p in enumerate(pos.tolist())]
    assert sorted(pos.tolist()) == list(range(75, 203))
    for s, p in enumerate(pos.tolist()):
        assert torch.equal(rk[:, :, s], k[:, :, p]) and torch.equal(rv[:, :, s], v[:, :, p])


def test_ring_positions():
    assert ring_positions(3, 4).tolist() == [0, 1, 2, -1]  # slot 3 not written yet
    assert ring_positions(6, 4).tolist() == [4, 5, 2, 3]
    assert ring_positions(8, 4).tolist() == [4, 5, 6, 7]


def test_mla_latent_read_is_mqa_view():
    spec = load_bundled("deepseek-v3")
    c = StaticKVCache(spec, 5, 2, device="cpu", layers=1)
    lat = torch.randn(2, 5, 576).bfloat16()
    c.write(0, 0, lat)
    k, v, pos = c.read(0, 5)
    assert k.shape == (2, 1, 5, 576) and v.shape == (2, 1, 5, 512)
    assert v.data_ptr() == k.data_ptr() == c.layers[0].tensors["latent"].data_ptr()  # no copy
    assert torch.equal(v[:, 0], lat[..., :512])


def test_fill_writes_every_byte():
    c = StaticKVCache(load_bundled("jamba-v0.1"), 3, 1, device="cpu", layers=5, fill=7)
    for t in c.tensors():
        assert torch.all(t.view(torch.uint8) == 7)
    assert c.num_tensors == 4 * 2 + 1 * 2  # 4 Mamba layers (conv, ssm) + 1 attention layer (k, v)


@pytest.mark.parametrize("kv_dtype,torch_dtype", [("fp8", "float8_e4m3fn"), ("fp8_e5m2", "float8_e5m2")])
def test_fp8_ring_writes_in_place(kv_dtype, torch_dtype):
    # index_copy_ has no float8 kernel on CPU: a ring write used to raise NotImplementedError
    spec = load_bundled("gpt-oss-20b")  # layer 0 sliding, window 128
    c = StaticKVCache(spec, 300, 3, kv_dtype, device="cpu", layers=1, fill=0)
    layer = c.layers[0]
    assert layer.ring and layer.tensors["k"].dtype == getattr(torch, torch_dtype)
    ptrs = c.data_ptrs()
    k = torch.randn(2, 8, 300, 64).bfloat16()
    v = torch.randn(2, 8, 300, 64).bfloat16()
    c.write(0, 0, k[:, :, :200], v[:, :, :200], batch_start=1)  # wraps the ring; requests 1..2
    for t in range(200, 203):
        c.write(0, t, k[:, :, t : t + 1], v[:, :, t : t + 1], batch_start=1)
    assert c.data_ptrs() == ptrs
    rk, rv, pos = c.read(0, 203)
    assert sorted(pos.tolist()) == list(range(75, 203))
    want_k, want_v = k.to(rk.dtype), v.to(rv.dtype)
    for s, p in enumerate(pos.tolist()):
        assert torch.equal(rk[1:, :, s].view(torch.uint8), want_k[:, :, p].view(torch.uint8))
        assert torch.equal(rv[1:, :, s].view(torch.uint8), want_v[:, :, p].view(torch.uint8))
    assert torch.count_nonzero(rk[0].view(torch.uint8)) == 0  # request 0 untouched


# --- the per-layer spec model: new kinds, per-layer geometry, MLA indexer, shared layers ---------------


@pytest.mark.parametrize("kind", list(SYNTHETIC))
def test_synthetic_specs_bytes_equal_formula_per_layer(tmp_path, kind):
    spec = synthetic_spec(tmp_path, kind)
    cache = StaticKVCache(spec, 16, 2, device="cpu")
    assert cache.nbytes == SYNTHETIC_BYTES[kind] == estimate(spec, 16, 2).total_bytes == cache.formula_bytes()
    assert cache.mismatched_layers() == []
    for layer in cache.layers:
        assert layer.nbytes == cache.layer_formula_bytes(layer.index)
        assert layer.spec is spec.layers[layer.index]


@pytest.mark.parametrize("kind", list(SYNTHETIC))
@pytest.mark.parametrize("kv_dtype", ["auto", "fp8", "q8_0", "nvfp4", "int8", "fp32"])
def test_synthetic_specs_every_dtype_on_meta(tmp_path, kind, kv_dtype):
    spec = synthetic_spec(tmp_path, kind)
    for seq in (1, 7, 131_072):
        cache = StaticKVCache(spec, seq, 3, kv_dtype, device="meta")
        assert cache.nbytes == estimate(spec, seq, 3, kv_dtype).total_bytes
        assert cache.mismatched_layers() == []


def test_state_tensors_are_exactly_the_spec_shapes_with_a_batch_dim(tmp_path):
    for kind in ("mamba2", "gdn", "short_conv", "linear_attention"):
        spec = synthetic_spec(tmp_path, kind)
        cache = StaticKVCache(spec, 16, 3, "fp8", device="meta")  # states keep their own dtypes, not fp8
        layer = cache.layers[0]
        want = spec.layers[0].state.tensors("bf16")
        assert list(layer.tensors) == [t.name for t in want]
        for t in want:
            assert layer.tensors[t.name].shape == (3, *t.shape)
            assert layer.tensors[t.name].dtype == {"bf16": torch.bfloat16, "fp32": torch.float32}[t.dtype]
    m2 = StaticKVCache(synthetic_spec(tmp_path, "mamba2"), 1, 2, device="meta").layers[0].tensors
    assert m2["conv"].shape == (2, 3, 96) and m2["conv"].dtype == torch.bfloat16  # (B, d_conv − 1, H·P + 2·G·N)
    assert m2["ssm"].shape == (2, 4, 8, 16) and m2["ssm"].dtype == torch.float32  # (B, H, P, N), ssm_dtype fp32
    gdn = StaticKVCache(synthetic_spec(tmp_path, "gdn"), 1, 2, device="meta").layers[0].tensors
    assert gdn["conv"].shape == (2, 3, 64) and gdn["ssm"].shape == (2, 4, 8, 8)  # (B, Hv, dk, dv)
    sc = StaticKVCache(synthetic_spec(tmp_path, "short_conv"), 1, 2, device="meta").layers[0].tensors
    assert list(sc) == ["conv"] and sc["conv"].shape == (2, 2, 64) and sc["conv"].dtype == torch.float32
    la = StaticKVCache(synthetic_spec(tmp_path, "linear_attention"), 1, 2, device="meta").layers[0].tensors
    assert list(la) == ["ssm"] and la["ssm"].shape == (2, 4, 16, 16)  # (B, H, d, d)


def test_each_layer_has_its_own_geometry(tmp_path):
    c = StaticKVCache(synthetic_spec(tmp_path, "geometry"), 16, 2, device="meta")
    assert c.layers[0].kind == "sliding" and c.layers[0].tensors["k"].shape == (2, 4, 8, 16)  # (B, H_kv, W, d)
    assert c.layers[3].kind == "full" and c.layers[3].tensors["v"].shape == (2, 2, 16, 64)  # (B, H_kv, S, d_v)
    q8 = StaticKVCache(synthetic_spec(tmp_path, "geometry"), 16, 2, "q8_0", device="meta")
    # q8_0 rows: 4 × 16 = 64 elements = 2 blocks × 34 B = 68 B; 2 × 64 = 128 elements = 136 B
    assert q8.layers[0].tensors["k"].shape == (2, 8, 68) and q8.layers[3].tensors["k"].shape == (2, 16, 136)


def test_none_and_shared_layers_allocate_nothing(tmp_path):
    none = StaticKVCache(synthetic_spec(tmp_path, "none"), 16, 2, device="meta")
    assert [layer.kind for layer in none.layers] == ["none", "full", "none", "sliding"]
    assert none.layers[0].tensors == {} and none.layers[2].nbytes == 0 and none.num_tensors == 4
    with pytest.raises(ValueError, match="layer 0 .none"):
        none.read(0, 1)
    with pytest.raises(ValueError, match="layer 2 is none: it has no token cache"):
        none.write(2, 0, torch.zeros(2, 2, 1, 16))
    shared = StaticKVCache(synthetic_spec(tmp_path, "shared"), 16, 2, device="meta")
    assert [layer.kind for layer in shared.layers][4:] == ["shared", "shared"]
    assert [layer.source for layer in shared.layers] == [None, None, None, None, 3, 2]
    assert shared.layers[4].tensors == {} and shared.num_tensors == 4 * 2


def test_shared_layer_reads_its_source_storage(tmp_path):
    c = StaticKVCache(synthetic_spec(tmp_path, "shared"), 16, 2, device="cpu", fill=0)
    k = torch.randn(2, 2, 16, 16).bfloat16()
    v = torch.randn(2, 2, 16, 16).bfloat16()
    c.write(2, 0, k, v)  # the full source layer
    rk, rv, pos = c.read(5, 16)  # layer 5 shares layer 2's cache
    assert rk.data_ptr() == c.layers[2].tensors["k"].data_ptr() and rv.data_ptr() == c.layers[2].tensors["v"].data_ptr()
    assert torch.equal(rk, k) and torch.equal(rv, v) and pos.tolist() == list(range(16))
    c.write(3, 0, k, v)  # the sliding source: a ring of 8
    rk, _, pos = c.read(4, 16)
    assert rk.data_ptr() == c.layers[3].tensors["k"].data_ptr() and sorted(pos.tolist()) == list(range(8, 16))
    with pytest.raises(ValueError, match="layer 4 is shared: it has no token cache to write .write layer 3"):
        c.write(4, 0, k, v)


def test_mla_indexer_keys_are_cached_beside_the_latent(tmp_path):
    c = StaticKVCache(synthetic_spec(tmp_path, "mla"), 5, 2, device="cpu")
    assert list(c.layers[0].tensors) == ["latent", "index_k"]
    assert c.layers[0].tensors["latent"].shape == (2, 5, 48)  # (B, S, kv_lora_rank + qk_rope_head_dim)
    assert c.layers[0].tensors["index_k"].shape == (2, 5, 16)  # (B, S, index_head_dim)
    lat, idx = torch.randn(2, 5, 48).bfloat16(), torch.randn(2, 5, 16).bfloat16()
    c.write(0, 0, lat[:, :3], idx[:, :3])  # prefill 3 tokens, latent and indexer keys together
    c.write(0, 3, lat[:, 3:])  # the indexer keys may be left out of a write
    c.write(0, 3, lat[:, 3:], idx[:, 3:])
    assert torch.equal(c.read_index(0, 5), idx) and torch.equal(c.read(0, 5)[0][:, 0], lat)
    assert c.read_index(0, 5).data_ptr() == c.layers[0].tensors["index_k"].data_ptr()
    ds = StaticKVCache(load_bundled("deepseek-v3"), 5, 1, device="cpu", layers=1)
    with pytest.raises(ValueError, match="no index_head_dim"):
        ds.write(0, 0, lat[:1], idx[:1])
    with pytest.raises(ValueError, match="no indexer keys"):
        ds.read_index(0, 5)
