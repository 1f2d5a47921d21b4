"""The MLA, hybrid and linear-attention config.json readers (kvplan/readers/deepseek.py, hybrid.py, linear.py).

Real config.json fixtures (tests/fixtures/hf_configs/, provenance in its SOURCES.yaml) are read into specs
whose per-layer kinds, geometry, state tensors and exact bytes are checked here, with the arithmetic in a
comment. Three outside references:

- vLLM 0.33 itself: tests/fixtures/vllm_state_shapes.json was written by scripts/vllm_state_shapes.py with
  vLLM's own ``get_mamba_state_shape_from_config`` / ``MambaStateShapeCalculator`` (run it with
  /opt/venv-vllm/bin/python to refresh it); every state shape and dtype kvplan gives, at TP 1, 2, 4 and 8,
  must equal it, and so must the layer kinds and attention geometry.
- transformers 5.23's config classes: a config.json holding only ``model_type`` must read as the class's
  defaults (the readers mirror them).
- the bundled model_specs/*.yaml written from these fixtures must equal the reader's spec.

``-PARTIAL`` fixtures are trimmed copies without ``torch_dtype``; the published checkpoints are bf16 (the LFM2
model card's "Precision bfloat16"; IBM ships Granite 4.0 in BF16; TII's Falcon-H1 checkpoints are bfloat16), which
the tests add, as the vLLM script did. Model types with no config.json fixture yet (Zamba2) are read from the
configs the vLLM script recorded under ``inline_configs`` (Zamba2Config's class defaults, and a small config with
every Zamba2 dimension given).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kvplan.calc import estimate, layer_state_bytes, layer_token_bytes, resolve_kv_dtype
from kvplan.errors import SpecError
from kvplan.loader import load_bundled
from kvplan.readers import spec_from_hf_config
from kvplan.specs import StateTensor

FIXTURES = Path(__file__).resolve().parent / "fixtures"
HF = FIXTURES / "hf_configs"
VLLM = json.loads((FIXTURES / "vllm_state_shapes.json").read_text())
OVERRIDES = VLLM["config_overrides"]
INLINE = VLLM.get("inline_configs", {})
SIZE = {"bf16": 2, "fp16": 2, "fp32": 4}


def config(name: str, **changes) -> dict:
    """A fixture's config.json (or an inline config of the vLLM fixture) as a dict, with the PARTIAL overrides
    and ``changes`` (None deletes a key)."""
    if name in INLINE:
        data = dict(INLINE[name])
    else:
        data = json.loads((HF / f"{name}.json").read_text())
        data.update(OVERRIDES.get(name, {}))
    for key, value in changes.items():
        if value is None:
            data.pop(key, None)
        else:
            data[key] = value
    return data


def read(data: dict | str, **changes):
    """The spec kvplan reads from a fixture name or a config dict."""
    if isinstance(data, str):
        return spec_from_hf_config(config(data, **changes), f"{data}.json")
    return spec_from_hf_config({**data, **changes}, "config.json")


def refuse(data: dict | str, pattern: str, **changes) -> None:
    with pytest.raises(SpecError, match=pattern):
        read(data, **changes)


def token_bytes(spec) -> int:
    """KV bytes one token costs across all layers, in the model dtype, TP 1."""
    kv = resolve_kv_dtype(spec, None)
    return sum(layer_token_bytes(layer, kv) for layer in spec.layers)


def state_bytes(spec, tp: int = 1) -> int:
    """Fixed state bytes of one request across all layers."""
    return sum(layer_state_bytes(layer, spec.dtype, tp) for layer in spec.layers)


def tensors(spec, kind: str, tp: int = 1) -> list[tuple]:
    return [(t.name, t.shape, t.dtype) for t in spec.states[kind].tensors(spec.dtype, tp)]


def indices(spec, kind: str) -> list[int]:
    return [i for i, k in enumerate(spec.layer_kinds) if k == kind]


# --- Nemotron-H: hybrid_override_pattern -------------------------------------------------------------------


def test_nemotron_3_nano_pattern():
    s = read("nemotron-3-nano-30b-a3b")
    # MEMEM*EMEMEM*EMEMEM*EMEMEM*EMEMEM*EMEMEMEM*EMEMEMEME: M Mamba-2, * attention, E MoE (no cache)
    assert s.num_layers == 52 and s.kind_counts() == {"full": 6, "mamba2": 23, "none": 23}
    assert indices(s, "full") == [5, 12, 19, 26, 33, 42]
    assert {s.layers[i].geometry() for i in indices(s, "full")} == {"2×128"}
    # conv (d_conv − 1, H·P + 2·G·N) = (3, 64·64 + 2·8·128 = 6144) bf16; ssm (H, P, N) fp32 (mamba_ssm_cache_dtype)
    assert tensors(s, "mamba2") == [("conv", (3, 6144), "bf16"), ("ssm", (64, 64, 128), "fp32")]
    assert token_bytes(s) == 6 * 2 * 2 * 128 * 2 == 6144
    assert state_bytes(s) == 23 * (3 * 6144 * 2 + 64 * 64 * 128 * 4) == 49_082_368
    assert s.max_model_len == 262144


def test_nemotron_h_56b_pattern_and_the_overcount_it_fixes():
    s = read("nemotron-h-56b-base-8k")
    assert s.num_layers == 118 and s.kind_counts() == {"full": 10, "mamba2": 54, "none": 54}
    assert token_bytes(s) == 10 * 2 * 8 * 128 * 2 == 40_960
    # conv (3, 256·64 + 2·8·256 = 20480) bf16, ssm (256, 64, 256) fp32
    assert tensors(s, "mamba2") == [("conv", (3, 20480), "bf16"), ("ssm", (256, 64, 256), "fp32")]
    assert state_bytes(s) == 54 * (3 * 20480 * 2 + 256 * 64 * 256 * 4) == 912_605_184
    # Counting every layer as attention (the old reading) overstates the KV: 118/10 = 11.8x, Nano 52/6 = 8.7x
    nano = read("nemotron-3-nano-30b-a3b")
    assert s.num_layers * 2 * 8 * 128 * 2 / token_bytes(s) == pytest.approx(11.8)
    assert nano.num_layers * 2 * 2 * 128 * 2 / token_bytes(nano) == pytest.approx(8.67, abs=0.01)


def test_nemotron_h_layers_block_type_legacy_names_and_refusals():
    pattern = read("nemotron-3-nano-30b-a3b")
    names = {"M": "mamba", "*": "attention", "E": "moe", "-": "mlp"}  # legacy names, remapped by transformers
    text = config("nemotron-3-nano-30b-a3b")["hybrid_override_pattern"]
    listed = read("nemotron-3-nano-30b-a3b", hybrid_override_pattern=None, layers_block_type=[names[c] for c in text])
    assert listed.layers == pattern.layers
    # the list wins over the pattern (transformers NemotronHConfig.__post_init__)
    both = read("nemotron-3-nano-30b-a3b", layers_block_type=["mamba", "attention"], num_hidden_layers=2)
    assert both.layer_kinds == ("mamba2", "full")
    # no pattern and no list: the class default [mamba, moe, attention, mlp]
    assert read({"model_type": "nemotron_h"}).layer_kinds == ("mamba2", "none", "full", "none")
    refuse("nemotron-3-nano-30b-a3b", r"hybrid_override_pattern has 'X'", hybrid_override_pattern="MX*")
    refuse(
        "nemotron-3-nano-30b-a3b", r"layers_block_type\[1\]='conv' is not handled", layers_block_type=["mamba", "conv"]
    )
    refuse("nemotron-h-56b-base-8k", r"attention_head_dim=64 \(legacy key\) differs", attention_head_dim=64)
    # num_hidden_layers is ignored, as transformers and vLLM do: the pattern's length counts
    s = read("nemotron-3-nano-30b-a3b", num_hidden_layers=40)
    assert s.num_layers == 52 and "num_hidden_layers=40 ignored" in s.notes
    # vLLM gives every attention layer the config's sliding_window (per_layer_sliding_window)
    w = read("nemotron-3-nano-30b-a3b", sliding_window=4096)
    assert w.kind_counts()["sliding"] == 6 and w.sliding_window == 4096
    # mamba_ssm_cache_dtype: the file's value; auto = the conv (model) dtype
    assert tensors(read("nemotron-3-nano-30b-a3b", mamba_ssm_cache_dtype="auto"), "mamba2")[1][2] == "bf16"
    assert tensors(read("nemotron-h-56b-base-8k"), "mamba2")[1][2] == "fp32"  # absent: class default float32
    refuse(
        "nemotron-3-nano-30b-a3b", r"mamba_ssm_cache_dtype='int8' is not a state dtype", mamba_ssm_cache_dtype="int8"
    )


# --- DeepSeek / Kimi: MLA --------------------------------------------------------------------------------


def test_deepseek_v3_and_kimi_k2_mla():
    v3 = read("deepseek-v3")
    assert v3.layer_kinds == ("mla",) * 61 and (v3.num_q_heads, v3.num_kv_heads) == (128, 128)
    assert (v3.head_dim, v3.v_dim, v3.mla.latent_dim, v3.mla.index_head_dim) == (192, 128, 576, None)
    assert token_bytes(v3) == 61 * 576 * 2 == 70_272  # first_k_dense_replace 3 changes no cache
    k2 = read("kimi-k2-instruct")  # model_type kimi_k2: DeepseekV3Config (vLLM _CONFIG_REGISTRY)
    assert k2.layer_kinds == ("mla",) * 61 and (k2.num_q_heads, k2.num_kv_heads) == (64, 64)
    assert token_bytes(k2) == 70_272 and k2.max_model_len == 131072
    lite = read("deepseek-v2-lite")
    assert lite.layer_kinds == ("mla",) * 27 and token_bytes(lite) == 27 * 576 * 2 == 31_104


def test_deepseek_v32_indexer_key():
    s = read("deepseek-v3.2")
    assert s.layer_kinds == ("mla",) * 61
    assert (s.mla.kv_lora_rank, s.mla.qk_rope_head_dim, s.mla.index_head_dim) == (512, 64, 128)
    assert s.layers[0].geometry() == "latent 576 + idx 128"
    assert token_bytes(s) == 61 * (576 + 128) * 2 == 85_888
    # without the indexer key kvplan was 18 % low: 70,272 / 85,888 = 0.818
    assert token_bytes(read("deepseek-v3")) / token_bytes(s) == pytest.approx(0.818, abs=0.001)
    assert read("deepseek-v3.2", index_head_dim=None).mla.index_head_dim == 128  # DeepseekV32Config default
    assert read("deepseek-v3.2", layer_types=["indexed_attention"] * 61).layers == s.layers
    refuse("deepseek-v3.2", r"layer_types\[0\]='full_attention'", layer_types=["full_attention"] * 61)
    # an index key in a deepseek_v3 config is not silently dropped
    refuse("deepseek-v3", r"index_head_dim is set, and it changes the layer layout", index_head_dim=128)


def test_kimi_linear_kda_as_gdn():
    s = read("kimi-linear-48b-a3b-instruct")
    # linear_attn_config.full_attn_layers [4, 8, ..., 24, 27] are 1-based
    assert indices(s, "mla") == [3, 7, 11, 15, 19, 23, 26] and s.kind_counts() == {"mla": 7, "gdn": 20}
    # KDA = GDN shapes with Hk = Hv = 32, dk = dv = 128: conv (3, 3·32·128 = 12288) bf16, recurrent fp32
    assert tensors(s, "gdn") == [("conv", (3, 12288), "bf16"), ("ssm", (32, 128, 128), "fp32")]
    assert token_bytes(s) == 7 * 576 * 2 == 8_064
    assert state_bytes(s) == 20 * (3 * 12288 * 2 + 32 * 128 * 128 * 4) == 43_417_600
    assert s.max_model_len == 1048576  # model_max_length
    refuse("kimi-linear-48b-a3b-instruct", r"linear_attn_config is missing", linear_attn_config=None)
    block = config("kimi-linear-48b-a3b-instruct")["linear_attn_config"]
    refuse("kimi-linear-48b-a3b-instruct", r"layer 4 is in both", linear_attn_config={**block, "kda_layers": [4]})
    refuse("kimi-linear-48b-a3b-instruct", r"layer 1 is in neither", linear_attn_config={**block, "kda_layers": [2]})
    refuse("kimi-linear-48b-a3b-instruct", r"layer_types disagrees", layer_types=["full_attention"] * 27)


# --- Jamba, Granite-4.0-H, Bamba, Falcon-H1, Zamba2 -----------------------------------------------------------


def test_jamba_period_offset_and_mamba1_state():
    s = read("jamba-1.5-mini")
    assert indices(s, "full") == [4, 12, 20, 28] and s.kind_counts() == {"full": 4, "mamba": 28}
    # d_inner = mamba_expand 2 × hidden 4096; conv (d_conv − 1, d_inner) — vLLM's "SD" layout — ssm (d_inner, N)
    assert tensors(s, "mamba") == [("conv", (3, 8192), "bf16"), ("ssm", (8192, 16), "bf16")]
    assert token_bytes(s) == 4 * 2 * 8 * 128 * 2 == 16_384
    assert state_bytes(s) == 28 * (3 * 8192 * 2 + 8192 * 16 * 2) == 8_716_288
    assert read("jamba-1.5-mini", attn_layer_offset=0).layer_kinds[:9] == ("full",) + ("mamba",) * 7 + ("full",)
    refuse("jamba-1.5-mini", r"attn_layer_offset=8 must be below attn_layer_period=8", attn_layer_offset=8)
    refuse("jamba-1.5-mini", r"head_dim=64 differs from hidden_size / num_attention_heads = 128", head_dim=64)


def test_granite_4_h_tiny_layer_types_and_group_replication():
    s = read("granite-4.0-h-tiny-PARTIAL")
    assert indices(s, "full") == [5, 15, 25, 35] and s.kind_counts() == {"full": 4, "mamba2": 36}
    assert {s.layers[i].geometry() for i in indices(s, "full")} == {"4×128"}  # head_dim = 1536 / 12
    # conv (3, 48·64 + 2·1·128 = 3328), ssm (48, 64, 128), both in the model dtype (no ssm override)
    assert tensors(s, "mamba2") == [("conv", (3, 3328), "bf16"), ("ssm", (48, 64, 128), "bf16")]
    # TP 2 does not divide 1 group: it is replicated to 2 (vLLM extra_groups_for_head_shards): (3072 + 2·2·128)/2
    assert tensors(s, "mamba2", tp=2) == [("conv", (3, 1792), "bf16"), ("ssm", (24, 64, 128), "bf16")]
    assert token_bytes(s) == 4 * 2 * 4 * 128 * 2 == 8_192
    assert state_bytes(s) == 36 * (3 * 3328 * 2 + 48 * 64 * 128 * 2) == 29_030_400
    new_names = ["full_attention" if k == "full" else "linear_attention" for k in s.layer_kinds]
    assert read("granite-4.0-h-tiny-PARTIAL", layer_types=new_names).layers == s.layers
    assert read("granite-4.0-h-tiny-PARTIAL", mamba_d_head="auto").layers == s.layers  # 2·1536/48 = 64
    refuse("granite-4.0-h-tiny-PARTIAL", r"mamba_n_heads 48 x mamba_d_head 32 != the Mamba width 3072", mamba_d_head=32)
    refuse("granite-4.0-h-tiny-PARTIAL", r"head_dim=64 differs", head_dim=64)
    refuse("granite-4.0-h-tiny-PARTIAL", r"layer_types\[0\]='conv' is not handled", layer_types=["conv"] * 40)


def test_bamba_attn_layer_indices():
    # BambaConfig defaults (hidden 4096, 32 heads, 8 KV heads, 128 Mamba heads of 2·4096/128 = 64, N 256, G 1)
    s = read({"model_type": "bamba", "torch_dtype": "bfloat16", "attn_layer_indices": [9, 18, 27]})
    assert indices(s, "full") == [9, 18, 27] and s.kind_counts() == {"full": 3, "mamba2": 29}
    assert tensors(s, "mamba2") == [("conv", (3, 8704), "bf16"), ("ssm", (128, 64, 256), "bf16")]  # 8192 + 2·256
    assert token_bytes(s) == 3 * 2 * 8 * 128 * 2
    refuse({"model_type": "bamba", "attn_layer_indices": [32]}, r"attn_layer_indices has 32; allowed: 0..31")


def test_falcon_h1_7b_every_layer_keeps_kv_and_a_mamba2_state():
    s = read("falcon-h1-7b-PARTIAL")
    assert s.layer_kinds == ("full",) * 44 and {layer.geometry() for layer in s.layers} == {"2×128"}
    assert all(layer.state is s.states["mamba2"] for layer in s.layers)  # parallel_state: mamba2
    # vLLM passes mamba_d_ssm 3072 (not mamba_expand 2 x hidden 3072 = 6144) as the Mamba width:
    # conv (d_conv − 1, d_ssm + 2·G·N) = (3, 3072 + 2·1·256 = 3584); ssm (H, P, N) = (24, 128, 256); both bf16
    # (Falcon-H1 has no mamba_ssm_cache_dtype hook in vLLM)
    assert tensors(s, "mamba2") == [("conv", (3, 3584), "bf16"), ("ssm", (24, 128, 256), "bf16")]
    # KV: 44 layers x (K + V) x 2 KV heads x 128 x 2 B = 44 x 1,024 = 45,056 B/token
    assert token_bytes(s) == 44 * 2 * 2 * 128 * 2 == 45_056
    # state: 44 x (3·3584·2 = 21,504 + 24·128·256·2 = 1,572,864) = 44 x 1,594,368 = 70,152,192 B per request
    assert state_bytes(s) == 44 * (3 * 3584 * 2 + 24 * 128 * 256 * 2) == 44 * 1_594_368 == 70_152_192
    for tokens in (1, 4096, 131072):
        assert estimate(s, tokens).bytes_per_request == 45_056 * tokens + 70_152_192
    # TP 2: 1 KV head and 12 Mamba heads per rank; the single group is replicated: (3072 + 2·2·256) / 2 = 2048
    assert tensors(s, "mamba2", tp=2) == [("conv", (3, 2048), "bf16"), ("ssm", (12, 128, 256), "bf16")]
    assert state_bytes(s, tp=2) == 44 * (3 * 2048 * 2 + 12 * 128 * 256 * 2) == 35_143_680
    assert s.max_model_len == 262144 and s.num_q_heads == 12 and s.hidden_size == 3072


def test_falcon_h1_keys_and_defaults():
    # (a fixture name deletes a key given as None; a dict sets it to null)
    # mamba_d_ssm null: the width is int(mamba_expand x hidden_size) = 6144, which 24 heads of 128 are not
    falcon = config("falcon-h1-7b-PARTIAL")
    refuse(falcon, r"24 x mamba_d_head 128 != the Mamba width 6144 \(mamba_expand", mamba_d_ssm=None)
    wide = read(falcon, mamba_d_ssm=None, mamba_d_head="auto")  # 6144 / 24 = 256
    assert tensors(wide, "mamba2") == [("conv", (3, 6656), "bf16"), ("ssm", (24, 256, 256), "bf16")]  # 6144 + 512
    # mamba_d_ssm absent: FalconH1Config's default 1024, which 24 x 128 is not (and 24 does not divide)
    refuse("falcon-h1-7b-PARTIAL", r"24 x mamba_d_head 128 != the Mamba width 1024 \(mamba_d_ssm\)", mamba_d_ssm=None)
    refuse(
        {**config("falcon-h1-7b-PARTIAL", mamba_d_ssm=None, mamba_d_head=None)},
        r"mamba_n_heads=24 does not divide the Mamba width 1024",
    )
    assert read("falcon-h1-7b-PARTIAL", mamba_d_head="auto").layers == read("falcon-h1-7b-PARTIAL").layers
    # num_key_value_heads null: H_q (__post_init__); head_dim absent: hidden / H_q = 3072 / 12 = 256
    assert read(falcon, num_key_value_heads=None).layers[0].geometry() == "12×128"
    # absent: the class default 8, which 12 query heads are not a multiple of
    refuse("falcon-h1-7b-PARTIAL", r"num_q_heads=12 is not a multiple of num_kv_heads=8", num_key_value_heads=None)
    assert read("falcon-h1-7b-PARTIAL", head_dim=None).layers[0].geometry() == "2×256"
    # vLLM reads no mamba_ssm_cache_dtype for Falcon-H1: a key of that name leaves the state in the model dtype
    assert tensors(read("falcon-h1-7b-PARTIAL", mamba_ssm_cache_dtype="float32"), "mamba2")[1][2] == "bf16"
    # the mlx-community copy of Falcon-H1-7B-Instruct's config.json has attn_layer_indices: null (not a
    # FalconH1Config key); set to a list, it would claim a layout nobody reads: refused
    assert read(falcon, attn_layer_indices=None).layers == read(falcon).layers
    refuse("falcon-h1-7b-PARTIAL", r"attn_layer_indices is set", attn_layer_indices=[0, 1])


def test_falcon_h1_cache_allocates_kv_and_state():
    torch = pytest.importorskip("torch")
    from kvplan.kvcache import StaticKVCache

    s = read("falcon-h1-7b-PARTIAL")
    cache = StaticKVCache(s, seq_len=100, batch_size=2, device="meta")
    layer = cache.layers[0]
    shapes = {name: (tuple(t.shape), t.dtype) for name, t in layer.tensors.items()}
    assert shapes == {
        "k": ((2, 2, 100, 128), torch.bfloat16),
        "v": ((2, 2, 100, 128), torch.bfloat16),
        "conv": ((2, 3, 3584), torch.bfloat16),
        "ssm": ((2, 24, 128, 256), torch.bfloat16),
    }
    assert cache.nbytes == cache.formula_bytes() == 2 * (45_056 * 100 + 70_152_192)
    assert not cache.mismatched_layers()


_ZAMBA2_HYBRID = [6, 12, 18, 24, 30, 36, 42, 47, 51]  # Zamba2Config's default layers_block_type


def test_zamba2_class_defaults_hybrid_layers():
    s = read("zamba2-class-defaults")  # {"model_type": "zamba2", "torch_dtype": "bfloat16"}
    assert s.num_layers == 54 and indices(s, "full") == _ZAMBA2_HYBRID and s.kind_counts() == {"full": 9, "mamba2": 45}
    # hybrid layers: MHA, 32 heads of attention_head_dim = 2 x 2560 / 32 = 160, and their own Mamba-2 state
    assert {s.layers[i].geometry() for i in _ZAMBA2_HYBRID} == {"32×160"}
    assert all(layer.state is s.states["mamba2"] for layer in s.layers)
    # Mamba-2: width 2 x 2560 = 5120, 8 heads of 640, N 64, 1 group: conv (3, 5120 + 2·64 = 5248), ssm (8, 640, 64)
    assert tensors(s, "mamba2") == [("conv", (3, 5248), "bf16"), ("ssm", (8, 640, 64), "bf16")]
    assert token_bytes(s) == 9 * 2 * 32 * 160 * 2 == 184_320
    # every one of the 54 layers: 3·5248·2 + 8·640·64·2 = 31,488 + 655,360 = 686,848 B
    assert state_bytes(s) == 54 * (3 * 5248 * 2 + 8 * 640 * 64 * 2) == 54 * 686_848 == 37_089_792
    assert s.max_model_len == 4096 and read("zamba2-class-defaults", use_long_context=True).max_model_len == 16384


def test_zamba2_keys_and_refusals():
    small = read("zamba2-small-legacy-names")  # mamba / hybrid (legacy names), hybrid_layer_ids [2, 5]
    assert small.layer_kinds == ("mamba2", "mamba2", "full", "mamba2", "mamba2", "full")
    assert small.layers[2].geometry() == "32×128"  # 2 x 2048 / 32
    # width 2 x 2048 = 4096 = 64 heads x 64; conv (3, 4096 + 2·2·128 = 4608), ssm (64, 64, 128)
    assert tensors(small, "mamba2") == [("conv", (3, 4608), "bf16"), ("ssm", (64, 64, 128), "bf16")]
    # TP 4 does not divide 2 groups: vLLM's calculator replicates them to 4: (4096 + 2·4·128) / 4 = 1280
    assert tensors(small, "mamba2", tp=4) == [("conv", (3, 1280), "bf16"), ("ssm", (16, 64, 128), "bf16")]
    assert token_bytes(small) == 2 * 2 * 32 * 128 * 2 == 32_768
    assert state_bytes(small) == 6 * (3 * 4608 * 2 + 64 * 64 * 128 * 2) == 6 * 1_076_224 == 6_457_344
    new_names = ["hybrid" if k == "full" else "linear_attention" for k in small.layer_kinds]
    assert read("zamba2-small-legacy-names", layers_block_type=new_names).layers == small.layers
    assert read("zamba2-small-legacy-names", layers_block_type=None, layer_types=new_names).layers == small.layers
    # no hybrid layer: pure Mamba-2, no parallel state
    mamba = read("zamba2-small-legacy-names", layers_block_type=["mamba"] * 6, hybrid_layer_ids=None)
    assert mamba.layer_kinds == ("mamba2",) * 6 and token_bytes(mamba) == 0
    # attention_head_dim (or its attribute_map alias head_dim) wins over 2·hidden / H_q when vLLM accepts it
    narrow = read("zamba2-small-legacy-names", attention_head_dim=64, attention_hidden_size=2048)
    assert narrow.layers[2].geometry() == "32×64"
    assert read("zamba2-small-legacy-names", head_dim=64, attention_hidden_size=2048).layers == narrow.layers
    refuse(
        "zamba2-small-legacy-names",
        r"attention_head_dim 64 x num_attention_heads 32 != attention_hidden_size 4096",
        attention_head_dim=64,
    )
    refuse(
        "zamba2-small-legacy-names",
        r"attention_head_dim=64 and head_dim=128 .* disagree",
        attention_head_dim=64,
        head_dim=128,
    )
    refuse(
        "zamba2-small-legacy-names", r"num_key_value_heads=8 differs from num_attention_heads=32", num_key_value_heads=8
    )
    refuse("zamba2-small-legacy-names", r"mamba_headdim=32 differs", mamba_headdim=32)
    refuse("zamba2-small-legacy-names", r"hybrid_layer_ids=\[2\] are not the hybrid layers", hybrid_layer_ids=[2])
    refuse("zamba2-small-legacy-names", r"layers_block_type has 6 entries, num_hidden_layers=7", num_hidden_layers=7)
    refuse({"model_type": "zamba2", "num_hidden_layers": 38}, r"default layers_block_type has 54 entries")
    refuse(
        "zamba2-small-legacy-names",
        r"layers_block_type\[0\]='attention' is not handled",
        layers_block_type=["attention"] * 6,
    )


@pytest.mark.parametrize("name", ["zamba2-class-defaults", "zamba2-small-legacy-names"])
def test_zamba2_equals_transformers_static_cache(name):
    """No Zamba2 config.json fixture yet, so tests/test_oracle.py has none to compare: compare these here."""
    pytest.importorskip("transformers")
    from tests.oracle import read_with_transformers
    from tests.test_oracle import _kvplan_layer_bytes, compare_layers, expected_kvplan_bytes

    s = read(name)
    for n in (1000, 5000):
        reading = read_with_transformers(config(name), n)
        c = compare_layers(s, reading, "zamba2")
        assert not c.failures, c.summary()
        assert c.known == {"conv-state-window", "recurrent-state-dtype"}
        assert [reading.layers[i].layer_type for i in indices(s, "full")] == ["hybrid"] * len(indices(s, "full"))
        expected = expected_kvplan_bytes(s, reading, "zamba2", n)
        assert [_kvplan_layer_bytes(s, layer, n) for layer in s.layers] == expected
        assert estimate(s, n, kv_dtype="bf16").bytes_per_request == sum(expected)


# --- Qwen3-Next / Qwen3.5: layer_types and full_attention_interval ------------------------------------------


def test_qwen3_next_interval_and_layer_types():
    s = read("qwen3-next-80b-a3b-thinking")  # no layer_types: full where (i + 1) % 4 == 0
    assert indices(s, "full") == list(range(3, 48, 4)) and s.kind_counts() == {"full": 12, "gdn": 36}
    # conv (3, 2·16·128 + 32·128 = 8192); recurrent (Hv, dv, dk) = (32, 128, 128); both bf16 in vLLM
    assert tensors(s, "gdn") == [("conv", (3, 8192), "bf16"), ("ssm", (32, 128, 128), "bf16")]
    assert token_bytes(s) == 12 * 2 * 2 * 256 * 2 == 24_576
    assert state_bytes(s) == 36 * (3 * 8192 * 2 + 32 * 128 * 128 * 2) == 39_518_208
    assert indices(read("qwen3-next-80b-a3b-thinking", full_attention_interval=None), "full") == indices(s, "full")
    assert indices(read("qwen3-next-80b-a3b-thinking", full_attention_interval=3), "full") == list(range(2, 48, 3))
    types = ["full_attention" if i < 2 else "linear_attention" for i in range(48)]
    assert indices(read("qwen3-next-80b-a3b-thinking", layer_types=types), "full") == [0, 1]  # the list wins
    refuse("qwen3-next-80b-a3b-thinking", r"layer_types has 2 entries, num_hidden_layers=48", layer_types=types[:2])
    # Qwen3-Next has no mamba_ssm_dtype override in vLLM: the key is not read, the state stays bf16
    assert tensors(read("qwen3-next-80b-a3b-thinking", mamba_ssm_dtype="float32"), "gdn")[1][2] == "bf16"


def test_qwen3_5_text_config_and_fp32_recurrent_state():
    small = read("qwen3.5-0.8b")  # text_config, model_type qwen3_5_text
    assert indices(small, "full") == list(range(3, 24, 4)) and (small.num_q_heads, small.num_kv_heads) == (8, 2)
    # mamba_ssm_dtype float32 → vLLM Qwen3_5ForConditionalGenerationConfig: recurrent fp32, conv bf16
    assert tensors(small, "gdn") == [("conv", (3, 6144), "bf16"), ("ssm", (16, 128, 128), "fp32")]
    assert token_bytes(small) == 6 * 2 * 2 * 256 * 2 == 12_288
    assert state_bytes(small) == 18 * (3 * 6144 * 2 + 16 * 128 * 128 * 4) == 19_537_920
    moe = read("qwen3.5-122b-a10b")  # qwen3_5_moe_text
    assert tensors(moe, "gdn") == [("conv", (3, 12288), "bf16"), ("ssm", (64, 128, 128), "fp32")]
    assert token_bytes(moe) == 12 * 2 * 2 * 256 * 2 == 24_576
    assert state_bytes(moe) == 36 * (3 * 12288 * 2 + 64 * 128 * 128 * 4) == 153_649_152
    text = config("qwen3.5-0.8b")["text_config"]
    plain = {k: v for k, v in text.items() if k != "mamba_ssm_dtype"}
    assert tensors(read(plain), "gdn")[1][2] == "bf16"  # no mamba_ssm_dtype: the model dtype


# --- LFM2 and MiniMax ---------------------------------------------------------------------------------------


def test_lfm2_short_conv():
    s = read("lfm2-2.6b-PARTIAL")
    assert indices(s, "full") == [2, 5, 9, 13, 17, 21, 24, 27] and s.kind_counts() == {"full": 8, "short_conv": 22}
    assert tensors(s, "short_conv") == [("conv", (2, 2048), "bf16")]  # (conv_L_cache − 1, conv_dim)
    assert token_bytes(s) == 8 * 2 * 8 * 64 * 2 == 16_384  # head_dim 2048 / 32
    assert state_bytes(s) == 22 * 2 * 2048 * 2 == 180_224
    idx = read("lfm2-2.6b-PARTIAL", layer_types=None, full_attn_idxs=[2, 5, 9, 13, 17, 21, 24, 27])
    assert idx.layers == s.layers
    assert read("lfm2-2.6b-PARTIAL", layer_types=None).layer_kinds == ("full",) * 30  # Lfm2Config default
    refuse("lfm2-2.6b-PARTIAL", r"conv_dim=1024 differs from hidden_size=2048", conv_dim=1024)
    refuse({"model_type": "lfm2_moe"}, r"layer_types is missing: Lfm2MoeConfig has no default layout")


def test_minimax_m1_attn_type_list():
    s = read("minimax-m1")  # model_type minimax_m1: 0 = lightning (linear) attention, 1 = softmax
    assert indices(s, "full") == list(range(7, 80, 8)) and s.kind_counts() == {"full": 10, "linear_attention": 70}
    # no torch_dtype in this file: kvplan's float32 default is served as a 2-byte dtype
    assert tensors(s, "linear_attention") == [("ssm", (64, 128, 128), s.dtype)]  # (H, d, d)
    assert token_bytes(s) == 10 * 2 * 8 * 128 * 2 == 40_960
    assert state_bytes(s) == 70 * 64 * 128 * 128 * 2 == 146_800_640
    types = ["linear_attention" if t == 0 else "full_attention" for t in config("minimax-m1")["attn_type_list"]]
    assert read("minimax-m1", attn_type_list=None, layer_types=types).layers == s.layers
    assert read({"model_type": "minimax", "num_hidden_layers": 4}).layer_kinds == (
        "full",
        "linear_attention",
        "full",
        "linear_attention",
    )  # MiniMaxConfig default: full where (i + 1) % 2
    refuse("minimax-m1", r"attn_type_list must hold 0", attn_type_list=[2] * 80)
    refuse("minimax-m1", r"sliding_window is set", sliding_window=4096)


def test_minimax_m2_is_plain_full_attention():
    s = read("minimax-m2.7")
    assert s.layer_kinds == ("full",) * 62 and s.layers[0].geometry() == "8×128"
    assert token_bytes(s) == 62 * 2 * 8 * 128 * 2 == 253_952 and s.max_model_len == 204800
    refuse("minimax-m2.7", r"attn_type_list asks for linear-attention layers", attn_type_list=[0] + [1] * 61)


# --- vLLM 0.33's own shapes (tests/fixtures/vllm_state_shapes.json) --------------------------------------------

_KIND = {"kda": "gdn"}  # vLLM's name -> kvplan's kind


def test_vllm_fixture_is_from_vllm_0_33():
    assert VLLM["vllm_version"] == "0.33.0"


@pytest.mark.parametrize("name", sorted(VLLM["models"]))
def test_layers_and_states_equal_vllm(name):
    want = VLLM["models"][name]
    s = read(name)
    # "full+mamba2": an attention layer that also keeps a Mamba-2 state (Falcon-H1, Zamba2 hybrid layers)
    layers = [k.split("+") for k in want["layers"]]
    assert list(s.layer_kinds) == [_KIND.get(k[0], k[0]) for k in layers]
    beside = [layer.state.kind if layer.kind in ("full", "sliding") and layer.state else None for layer in s.layers]
    assert beside == [k[1] if len(k) > 1 else None for k in layers]
    attention = want["attention"]
    for layer in s.layers:
        if layer.kind == "full":
            assert (layer.num_kv_heads, layer.head_dim) == (attention["num_kv_heads"], attention["head_dim"])
        if layer.kind == "mla":
            assert layer.mla.latent_dim == attention["mla_latent"]
            # vLLM stores the V3.2 indexer key as FP8 + an fp32 scale per 128 elements: 132 B, uint8
            if "indexer_row_bytes" in attention:
                d = layer.mla.index_head_dim
                assert d + d // 128 * 4 == attention["indexer_row_bytes"]
    kinds = [k for k in s.states]
    assert len(kinds) <= 1
    for tp, entry in want["tp"].items():
        got: list[StateTensor] = list(s.states[kinds[0]].tensors(s.dtype, int(tp))) if kinds else []
        assert [list(t.shape) for t in got] == entry["shapes"], f"TP {tp}"
        # dtype names must match, except that a file without a dtype is fp16 to kvplan, bf16 to vLLM 0.33
        if want["model_dtype"] == s.dtype:
            assert [t.dtype for t in got] == entry["dtypes"], f"TP {tp}"
        assert [SIZE[t.dtype] for t in got] == [SIZE[d] for d in entry["dtypes"]], f"TP {tp}"


# --- transformers 5.23's class defaults ------------------------------------------------------------------------

_DEFAULT_CASES = [
    ("deepseek_v2", {}),
    ("deepseek_v3", {}),
    ("deepseek_v32", {}),
    ("jamba", {}),
    ("nemotron_h", {}),
    ("granitemoehybrid", {}),
    ("bamba", {}),
    ("qwen3_next", {}),
    ("qwen3_5_text", {}),
    ("qwen3_5_moe_text", {}),
    ("lfm2", {}),
    ("minimax", {}),
    ("minimax_m2", {}),
    ("falcon_h1", {}),
    ("zamba2", {}),
]


@pytest.mark.parametrize("model_type, extra", _DEFAULT_CASES)
def test_absent_keys_read_as_the_transformers_class_defaults(model_type, extra):
    transformers = pytest.importorskip("transformers")
    cls = transformers.models.auto.configuration_auto.CONFIG_MAPPING[model_type]
    ref = cls(**extra)
    s = read({"model_type": model_type, **extra})
    types = getattr(ref, "layer_types", None) or getattr(ref, "layers_block_type", None)
    assert s.num_layers == len(types) if types is not None else s.num_layers == ref.num_hidden_layers
    assert s.num_q_heads == ref.num_attention_heads
    assert s.max_model_len == ref.max_position_embeddings
    if "mla" in s.layer_kinds:
        assert (s.mla.kv_lora_rank, s.mla.qk_rope_head_dim) == (ref.kv_lora_rank, ref.qk_rope_head_dim)
        assert (s.head_dim, s.v_dim) == (ref.qk_nope_head_dim + ref.qk_rope_head_dim, ref.v_head_dim)
        assert s.mla.index_head_dim == getattr(ref, "index_head_dim", None)
        return
    assert s.num_kv_heads == ref.num_key_value_heads
    head_dim = getattr(ref, "head_dim", None) or ref.hidden_size // ref.num_attention_heads
    assert s.head_dim == head_dim
    if types is not None:
        new = {"mamba": "linear_attention", "attention": "full_attention"}
        attention = [new.get(t, t) in ("full_attention", "hybrid") for t in types]  # hybrid: Falcon-H1, Zamba2
        assert [k in ("full", "sliding") for k in s.layer_kinds] == attention


def test_class_default_state_dims_match_transformers():
    transformers = pytest.importorskip("transformers")
    mapping = transformers.models.auto.configuration_auto.CONFIG_MAPPING
    n = mapping["nemotron_h"]()
    assert (
        read({"model_type": "nemotron_h"}).states["mamba2"]
        == read(
            {
                "model_type": "nemotron_h",
                "mamba_num_heads": n.mamba_num_heads,
                "mamba_head_dim": n.mamba_head_dim,
                "ssm_state_size": n.ssm_state_size,
                "n_groups": n.n_groups,
                "conv_kernel": n.conv_kernel,
                "mamba_ssm_cache_dtype": n.mamba_ssm_cache_dtype,
            }
        ).states["mamba2"]
    )
    g = mapping["granitemoehybrid"]()
    m2 = read({"model_type": "granitemoehybrid"}).states["mamba2"]
    assert (m2.num_heads, m2.head_dim, m2.d_state, m2.n_groups, m2.d_conv) == (
        g.mamba_n_heads,
        g.mamba_d_head,
        g.mamba_d_state,
        g.mamba_n_groups,
        g.mamba_d_conv,
    )
    q = mapping["qwen3_next"]()
    gdn = read({"model_type": "qwen3_next"}).states["gdn"]
    assert (gdn.num_k_heads, gdn.num_v_heads, gdn.head_k_dim, gdn.head_v_dim, gdn.d_conv) == (
        q.linear_num_key_heads,
        q.linear_num_value_heads,
        q.linear_key_head_dim,
        q.linear_value_head_dim,
        q.linear_conv_kernel_dim,
    )
    j = mapping["jamba"]()
    mamba = read({"model_type": "jamba"}).states["mamba"]
    assert (mamba.d_inner, mamba.d_state, mamba.d_conv) == (
        j.mamba_expand * j.hidden_size,
        j.mamba_d_state,
        j.mamba_d_conv,
    )
    f = mapping["falcon_h1"]()
    m2 = read({"model_type": "falcon_h1"}).states["mamba2"]  # width mamba_d_ssm 1024: 128 heads of 8
    assert (m2.num_heads, m2.head_dim, m2.d_state, m2.n_groups, m2.d_conv) == (
        f.mamba_n_heads,
        f.mamba_d_head,
        f.mamba_d_state,
        f.mamba_n_groups,
        f.mamba_d_conv,
    )
    z = mapping["zamba2"]()
    m2 = read({"model_type": "zamba2"}).states["mamba2"]
    assert (m2.num_heads, m2.head_dim, m2.d_state, m2.n_groups, m2.d_conv) == (
        z.n_mamba_heads,
        z.mamba_headdim,
        z.mamba_d_state,
        z.mamba_ngroups,
        z.mamba_d_conv,
    )
    lfm = mapping["lfm2"]()
    assert (
        read({"model_type": "lfm2", "num_hidden_layers": 1, "layer_types": ["conv"]}).states["short_conv"].d_conv
        == lfm.conv_L_cache
    )


# --- bundled specs equal the reader on their fixtures -----------------------------------------------------------

_BUNDLED = [
    ("qwen3.5-0.8b", "qwen3.5-0.8b"),
    ("qwen3.5-122b-a10b", "qwen3.5-122b-a10b"),
    ("qwen3-next-80b-a3b", "qwen3-next-80b-a3b-thinking"),
    ("nemotron-3-nano-30b-a3b", "nemotron-3-nano-30b-a3b"),
    ("granite-4.0-h-tiny", "granite-4.0-h-tiny-PARTIAL"),
    ("lfm2-2.6b", "lfm2-2.6b-PARTIAL"),
    ("deepseek-v3.2", "deepseek-v3.2"),
    ("kimi-k2", "kimi-k2-instruct"),
    ("glm-4.7", "glm4.7-nvfp4"),
    ("minimax-m2.7", "minimax-m2.7"),
    ("falcon-h1-7b", "falcon-h1-7b-PARTIAL"),
]


@pytest.mark.parametrize("bundled, fixture", _BUNDLED)
def test_bundled_spec_equals_the_reader(bundled, fixture):
    spec, hf = load_bundled(bundled), read(fixture)
    fields = ("num_layers", "num_q_heads", "num_kv_heads", "head_dim", "v_dim", "hidden_size", "dtype")
    assert [getattr(spec, f) for f in fields] == [getattr(hf, f) for f in fields]
    assert spec.max_model_len == hf.max_model_len
    assert spec.layers == hf.layers
    assert spec.source.endswith("/blob/main/config.json") and spec.hf_repo
    for tokens in (1, 4096, 131072):
        for tp in (1, 2):
            assert estimate(spec, tokens, tensor_parallel_size=tp).total_bytes == (
                estimate(hf, tokens, tensor_parallel_size=tp).total_bytes
            )
