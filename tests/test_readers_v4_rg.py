"""Issue 17: DeepSeek-V4 (kind ``compressed``) and RecurrentGemma (state kind ``rglru``) read natively.

Byte expectations are written from config.json and the engine / transformers source they cite, not from
kvplan's formulas; tests/test_oracle.py compares both fixtures layer by layer with transformers 5.23 itself.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kvplan.calc import estimate, layer_compressed_bytes, layer_state_bytes, layer_token_bytes
from kvplan.dtypes import get_kv_dtype
from kvplan.errors import SpecError, UsageError
from kvplan.readers import spec_from_hf_config
from kvplan.specs import build_spec

FIX = Path(__file__).parent / "fixtures" / "hf_configs"
BF16 = get_kv_dtype("bf16")


def _load(name: str, **changes):
    p = FIX / name
    config = json.loads(p.read_text())
    config.update(changes)
    return spec_from_hf_config(config, str(p))


# --- DeepSeek-V4 ---------------------------------------------------------------------------------------


def test_v4_flash_layout_from_compress_ratios():
    spec = _load("deepseek-v4-flash.json")
    ratios = [x.compressed.ratio for x in spec.layers]
    # config.json compress_ratios: 0, 0, then 4 / 128 alternating, 44 entries of which the last is the MTP layer
    assert spec.num_layers == 43 and ratios[:4] == [0, 0, 4, 128] and ratios[-1] == 4
    assert (ratios.count(0), ratios.count(4), ratios.count(128)) == (2, 21, 20)
    csa = [x.compressed for x in spec.layers if x.compressed.ratio == 4]
    assert all(c.overlap and c.index_head_dim == 128 for c in csa)
    assert all(
        not x.compressed.overlap and not x.compressed.index_head_dim for x in spec.layers if x.compressed.ratio != 4
    )
    assert {(x.compressed.head_dim, x.compressed.window) for x in spec.layers} == {(512, 128)}


def test_v4_layer_bytes_from_the_engine_source():
    spec = _load("deepseek-v4-flash.json")
    sliding, csa, hca = spec.layers[0], spec.layers[2], spec.layers[3]
    # one 512-element K=V vector per token in bf16: 1,024 B (vLLM DeepseekV4SWACache: one vector, not K + V)
    assert layer_token_bytes(csa, BF16) == 1024 and layer_token_bytes(sliding, BF16) == 1024
    # vLLM compressor.py CompressorStateCache: coff x ratio tokens of 2 x coff x head_dim float32 values
    # CSA (coff 2, ratio 4): 8 x 2,048 x 4 = 65,536 B, and its indexer's (head 128): 8 x 512 x 4 = 16,384 B
    assert layer_state_bytes(csa, "bf16") == 65_536 + 16_384
    # HCA (coff 1, ratio 128): 128 x 1,024 x 4 = 524,288 B; sliding-only layers keep none
    assert layer_state_bytes(hca, "bf16") == 524_288 and layer_state_bytes(sliding, "bf16") == 0
    # 1,003 tokens: CSA 250 entries of 512 + 128 elements (1,280 B), HCA 7 entries of 1,024 B
    assert layer_compressed_bytes(csa, BF16, 1003) == 250 * 1280
    assert layer_compressed_bytes(hca, BF16, 1003) == 7 * 1024
    assert layer_compressed_bytes(sliding, BF16, 1003) == 0


def test_v4_request_bytes_and_tp():
    spec = _load("deepseek-v4-flash.json")
    per_layer_window = 128 * 1024
    csa = 32768 // 4 * 1280 + 65_536 + 16_384
    hca = 32768 // 128 * 1024 + 524_288
    want = 43 * per_layer_window + 21 * csa + 20 * hca
    assert estimate(spec, 32768).bytes_per_request == want
    # every TP rank keeps the whole cache (vLLM max_tp_shards=1 on every V4 spec)
    assert estimate(spec, 32768, tensor_parallel_size=8).bytes_per_request == want


def test_v4_class_defaults_follow_transformers():
    pytest.importorskip("transformers")
    from transformers import DeepseekV4Config

    spec = spec_from_hf_config({"model_type": "deepseek_v4"}, "deepseek-v4.json")
    expected = {"sliding_attention": 0, "compressed_sparse_attention": 4, "heavily_compressed_attention": 128}
    assert [x.compressed.ratio for x in spec.layers] == [expected[t] for t in DeepseekV4Config().layer_types]


@pytest.mark.parametrize(
    "changes, message",
    [
        ({"compress_ratios": [0, 8] * 22}, "must list 0, 4 or 128"),
        ({"compress_ratios": [0, 4]}, "at least num_hidden_layers=43"),
        ({"compress_rates": {"compressed_sparse_attention": 128}}, "same ratio"),
        ({"layer_types": ["full_attention"] * 43}, "not a DeepSeek-V4 layer type"),
    ],
)
def test_v4_refusals(changes, message):
    with pytest.raises(SpecError, match=message):
        _load("deepseek-v4-flash.json", **changes)


def test_compressed_block_errors():
    base = {"name": "m", "source": "s", "num_layers": 2, "num_q_heads": 4, "num_kv_heads": 1, "head_dim": 8,
            "dtype": "bf16", "max_model_len": 64, "layers": ["compressed", "compressed"]}  # fmt: skip
    with pytest.raises(SpecError, match="compressed is not given"):
        build_spec(dict(base), "m.yaml")
    with pytest.raises(SpecError, match="must list 2 ratios"):
        build_spec({**base, "compressed": {"head_dim": 8, "window": 4, "ratios": [0]}}, "m.yaml")
    spec = build_spec({**base, "compressed": {"head_dim": 8, "window": 4, "ratios": [0, 4]}}, "m.yaml")
    assert [x.compressed.ratio for x in spec.layers] == [0, 4] and spec.topology == "MQA"


# --- RecurrentGemma ------------------------------------------------------------------------------------


def test_recurrentgemma_layout_and_state():
    spec = _load("recurrentgemma-2b.json")
    # block_types (recurrent, recurrent, attention) over 26 layers: attention at 2, 5, ..., 23
    assert [i for i, k in enumerate(spec.layer_kinds) if k == "sliding"] == [2, 5, 8, 11, 14, 17, 20, 23]
    assert spec.kind_counts() == {"sliding": 8, "rglru": 18} and spec.sliding_window == 2048
    # attention: 1 KV head of 2560 / 10 = 256; K and V of 2 B per element: 1,024 B per token
    assert layer_token_bytes(spec.layers[2], BF16) == 1024
    # transformers' conv1d_state (lru_width 2560 x (conv1d_width 4 - 1)) in 16 bits, recurrent_states 2560 fp32
    assert layer_state_bytes(spec.layers[0], spec.dtype) == 2560 * 3 * 2 + 2560 * 4
    assert estimate(spec, 4096).bytes_per_request == 8 * 2048 * 1024 + 18 * 25_600


@pytest.mark.parametrize(
    "changes, message",
    [
        ({"_block_types": ["attention", "recurrent"]}, "differs from block_types"),
        ({"head_dim": 128}, "recomputes it"),
        ({"block_types": ["mlp"]}, "recurrent' / 'attention"),
    ],
)
def test_recurrentgemma_refusals(changes, message):
    with pytest.raises(SpecError, match=message):
        _load("recurrentgemma-2b.json", **changes)


def test_rglru_tp_splits_lru_width():
    spec = _load("recurrentgemma-2b.json")
    # lru_width 2560 over 2 ranks: conv 3 x 1,280 in 16 bits + 1,280 fp32
    assert layer_state_bytes(spec.layers[0], spec.dtype, 2) == 1280 * 3 * 2 + 1280 * 4


# --- what the engines and verify say ------------------------------------------------------------------


@pytest.mark.parametrize("engine", ["vllm", "sglang", "trtllm", "llamacpp"])
@pytest.mark.parametrize("name, kind", [("deepseek-v4-flash.json", "compressed"), ("recurrentgemma-2b.json", "rglru")])
def test_engines_refuse_what_they_do_not_plan(engine, name, kind):
    from kvplan.api import fit

    with pytest.raises(UsageError, match=f"--engine {engine}: .* has {kind} layers: "):
        fit(_load(name), "H100", max_model_len=1024, engine=engine, kv_cache_memory_bytes=1 << 30)


def test_vllm_reason_names_its_registry():
    from kvplan.engines.vllm import ENGINE

    assert "RecurrentGemmaForCausalLM" in ENGINE.unplanned_kinds["rglru"]
    assert "DeepseekV4ForCausalLM" in ENGINE.unplanned_kinds["compressed"]


def test_verify_refuses_compressed_layers():
    pytest.importorskip("torch")
    from kvplan.verify import verify

    with pytest.raises(UsageError, match="compressed layers .* does not allocate"):
        verify(_load("deepseek-v4-flash.json"), 64, device="cpu")


# --- the transformers fallback: types it now reads, and the reasons of those it refuses -----------------


def test_encoder_types_match_transformers_mappings():
    pytest.importorskip("transformers")
    from transformers import AutoConfig
    from transformers.models.auto.modeling_auto import (
        MODEL_FOR_CAUSAL_LM_MAPPING_NAMES,
        MODEL_FOR_MASKED_LM_MAPPING_NAMES,
    )

    from kvplan.readers.base import ENCODER_TYPES

    # a causal-LM type whose config defaults to an encoder (not an encoder-decoder: BART's decoder is one) and
    # which transformers maps to a masked-LM class; Reformer is left out: its published causal checkpoints
    # (google/reformer-crime-and-punishment) set is_decoder true, which its class default lacks
    def encoder(t):
        c = AutoConfig.for_model(t)
        return getattr(c, "is_decoder", None) is False and not getattr(c, "is_encoder_decoder", False)

    bert_family = {
        t for t in MODEL_FOR_CAUSAL_LM_MAPPING_NAMES if t in MODEL_FOR_MASKED_LM_MAPPING_NAMES and encoder(t)
    } - {"reformer"}
    assert bert_family <= set(ENCODER_TYPES), sorted(bert_family - set(ENCODER_TYPES))
    assert {"big_bird", "roformer", "xmod"} <= bert_family


@pytest.fixture
def layout_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))


def test_fallback_reads_zamba_hybrid_layers_with_their_mamba_state(layout_cache):
    pytest.importorskip("transformers")
    spec = spec_from_hf_config({"model_type": "zamba"}, "zamba.json")
    # ZambaConfig defaults: 76 layers, the shared attention block at 13 of them, Mamba-1 mixers everywhere
    # (d_inner = mamba_expand 2 x hidden 3712 = 7424, mamba_d_state 16, mamba_d_conv 4); attention 16 heads of
    # attention_hidden_size 7424 / 16 = 464
    assert spec.kind_counts() == {"full": 13, "mamba": 63}
    full = [x for x in spec.layers if x.kind == "full"]
    assert {(x.num_kv_heads, x.head_dim) for x in full} == {(16, 464)}
    assert {(x.state.kind, x.state.d_inner, x.state.d_state, x.state.d_conv) for x in full} == {("mamba", 7424, 16, 4)}


def test_fallback_reads_kda_as_gdn_with_an_fp32_state(layout_cache):
    pytest.importorskip("transformers")
    spec = spec_from_hf_config({"model_type": "bailing_hybrid"}, "ling3.json")
    # BailingHybridConfig defaults: every 6th layer MLA (kv_lora_rank 512, rope 64), the rest KDA with 32 heads of
    # 128; vLLM kda_state_shape: conv 3 x 32 x 128 channels, recurrent (32, 128, 128) in float32 (kda_state_dtype)
    assert spec.kind_counts() == {"mla": 7, "gdn": 35}
    g = spec.states["gdn"]
    assert (g.num_k_heads, g.num_v_heads, g.head_k_dim, g.head_v_dim, g.ssm_dtype) == (32, 32, 128, 128, "fp32")
    assert (spec.mla.kv_lora_rank, spec.mla.qk_rope_head_dim) == (512, 64)


@pytest.mark.parametrize(
    "model_type, reason",
    [
        ("openai-gpt", "keeps no KV cache"),
        ("gemma4_assistant", "keeps no KV cache"),
    ],
)
def test_fallback_refusals_say_why(layout_cache, model_type, reason):
    pytest.importorskip("transformers")
    with pytest.raises(SpecError, match=reason):
        spec_from_hf_config({"model_type": model_type}, f"{model_type}.json")
