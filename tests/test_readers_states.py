"""Caches that are not K/V of the usual kinds (kvplan/readers/stateful.py), and the types whose class defaults
transformers cannot build, read from published files (decoder.py: hunyuan_v1_dense, nemotron, ministral).

Byte expectations are written from config.json and the transformers 5.23 source they cite, not from kvplan's
formulas; tests/test_oracle.py compares every layer and the request's bytes with transformers' own cache.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kvplan.calc import estimate
from kvplan.errors import SpecError, UsageError
from kvplan.readers import spec_from_hf_config
from kvplan.specs import build_spec

FIX = Path(__file__).parent / "fixtures" / "hf_configs"


def _load(name: str, **changes):
    p = FIX / name
    config = json.loads(p.read_text())
    config.update(changes)
    return spec_from_hf_config(config, str(p))


def _defaults(model_type: str, **changes):
    return spec_from_hf_config({"model_type": model_type, **changes}, f"{model_type}.json")


# --- bytes per request, from the config and transformers' source -----------------------------------------------


def test_rwkv4_state_is_fixed_and_partly_fp32():
    spec = _load("rwkv-4-169m-pile.json")
    # RwkvModel.forward: five (B, hidden_size, layers) tensors, two in the model dtype (float32 file -> 2 bytes, as
    # every float32 checkpoint), three in float32: 12 layers x (2 x 768 x 2 + 3 x 768 x 4) B, whatever the length
    want = 12 * (2 * 768 * 2 + 3 * 768 * 4)
    assert spec.kind_counts() == {"rwkv4": 12}
    assert estimate(spec, 1).bytes_per_request == want == estimate(spec, 100_000).bytes_per_request


def test_xlstm_matrix_memory_per_block():
    spec = _defaults("xlstm")
    # xLSTMConfig: qk_dim = round_up(4096 x 0.5, 64) = 2048 -> 256 per head of 8; v 4096 -> 512; xLSTMCache keeps
    # C (8, 256, 512), n (8, 256), m (8, 1) per block in the model dtype (float32 default -> 2 bytes)
    assert estimate(spec, 7).bytes_per_request == 32 * 2 * (8 * 256 * 512 + 8 * 256 + 8)


def test_zaya_cca_state_beside_the_kv():
    spec = _defaults("zaya")
    # ZayaConfig: 40 hybrid layers, 2 KV heads of 128; ZayaCCAProjection keeps a conv window of
    # (cca_time0 - 1) + (cca_time1 - 1) = 2 columns over (8 + 2) x 128 channels and a delayed value of 2 x 128 / 2
    per_layer = 2 * 2 * 128 * 1000 * 2 + (8 + 2) * 128 * 2 * 2 + 128 * 2
    assert spec.kind_counts() == {"full": 40} and spec.cache_kinds == ("full", "cca")
    assert estimate(spec, 1000).bytes_per_request == 40 * per_layer


def test_inkling_short_convs_follow_each_layers_kv_width():
    spec = _defaults("inkling_text")
    # InklingTextConfig: full layers 8 KV heads of 128, sliding layers 16 (swa_num_key_value_heads); four conv states
    # of conv_kernel_size 4 columns in float32: K and V at the layer's own width, two at hidden_size 6144
    full = next(x for x in spec.layers if x.kind == "full")
    sliding = next(x for x in spec.layers if x.kind == "sliding")
    assert [t.shape for t in full.state.tensors(spec.dtype)] == [(1024, 4), (1024, 4), (6144, 4), (6144, 4)]
    assert [t.shape for t in sliding.state.tensors(spec.dtype)] == [(2048, 4), (2048, 4), (6144, 4), (6144, 4)]
    assert {t.dtype for t in full.state.tensors(spec.dtype)} == {"fp32"}
    assert spec.kind_counts() == {"full": 11, "sliding": 55}  # a full layer every sixth ((i + 1) % 6 == 0)


def test_xlnet_memory_keeps_the_last_mem_len_hidden_states():
    spec = _defaults("xlnet")
    # XLNetConfig: 24 layers of d_model 1024, mem_len 512: cache_mem keeps each layer's input for the last 512 tokens
    assert estimate(spec, 100).bytes_per_request == 24 * 100 * 1024 * 2
    assert estimate(spec, 5000).bytes_per_request == 24 * 512 * 1024 * 2
    unbounded = _defaults("xlnet", mem_len=None)  # xlnet-base-cased: mem_len null keeps every token
    assert estimate(unbounded, 5000).bytes_per_request == 24 * 5000 * 1024 * 2


def test_reformer_states_and_lsh_buckets():
    spec = _load("reformer-crime-and-punishment.json")
    # 6 layers keep every token's hidden state (256); the 3 LSH layers also 2 heads x 1 hash int64 bucket ids
    assert estimate(spec, 1000).bytes_per_request == 6 * 1000 * 256 * 2 + 3 * 1000 * 2 * 1 * 8


def test_cpmant_caches_its_prompt_tokens_with_every_request():
    spec = _load("cpm-ant-10b.json")
    # 48 layers, 32 heads of dim_head 128; CpmAntModel.forward prepends prompt_length = 32 tokens to each request
    assert spec.prefix_tokens == 32
    assert estimate(spec, 1000).bytes_per_request == 48 * 2 * 32 * 128 * 2 * (1000 + 32)


# --- engines refuse what they have no rule for -----------------------------------------------------------------


@pytest.mark.parametrize("engine", ["vllm", "sglang", "trtllm", "llamacpp"])
@pytest.mark.parametrize(
    "model, what",
    [
        ("rwkv", "has rwkv4 layers"),
        ("xlstm", "has mlstm layers"),
        ("zaya", "has cca states beside its attention layers"),
        ("inkling2_text", "has sconv states beside its attention layers"),
        ("xlnet", "has hidden layers"),
        ("cpmant", "has prefix tokens"),
    ],
)
def test_engines_refuse_the_new_kinds(engine, model, what):
    from kvplan.api import fit

    with pytest.raises(UsageError, match=f"--engine {engine}: .* {what}: "):
        fit(_defaults(model), "H100", max_model_len=1024, engine=engine, kv_cache_memory_bytes=1 << 30)


def test_vllm_names_its_inkling_cache_and_sglang_its_pools():
    from kvplan.engines.sglang import ENGINE as SGLANG
    from kvplan.engines.vllm import ENGINE as VLLM

    assert "vllm/models/inkling" in VLLM.unplanned_kinds["sconv"]
    assert "srt/models/zaya.py" in SGLANG.unplanned_kinds["cca"]


def test_verify_refuses_hidden_layers_and_prefix_tokens():
    pytest.importorskip("torch")
    from kvplan.verify import verify

    with pytest.raises(UsageError, match="hidden layers .* does not allocate"):
        verify(_defaults("xlnet"), 64, device="cpu")
    with pytest.raises(UsageError, match="32 prefix tokens"):
        verify(_defaults("cpmant"), 64, device="cpu")


# --- what the readers refuse ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "model_type, changes, message",
    [
        ("xlstm", {"embedding_dim": 2048}, "embedding_dim=2048 but hidden_size=4096"),
        ("xlstm", {"num_blocks": 24}, "num_blocks=24 but num_hidden_layers=32"),
        ("rwkv", {"attention_hidden_size": 2048}, "attention_hidden_size=2048 but hidden_size=4096"),
        ("xlnet", {"reuse_len": 128}, "reuse_len=128"),
        ("reformer", {}, "is_decoder is not true"),
        ("reformer", {"is_decoder": True, "attn_layers": ["local", "global"]}, "attn_layers="),
        ("zaya", {"layer_types": ["hybrid_sliding"] * 40}, "sliding_window is null"),
        ("hunyuan_v1_dense", {}, "head_dim is absent or null"),
        ("nemotron", {}, "num_key_value_heads is absent or null"),
        ("ministral", {}, "head_dim is absent or null"),
    ],
)
def test_reader_refusals(model_type, changes, message):
    with pytest.raises(SpecError, match=message):
        _defaults(model_type, **changes)


def test_published_files_of_the_types_whose_defaults_do_not_build():
    hunyuan = _load("hunyuan-7b-instruct.json")
    assert hunyuan.kind_counts() == {"full": 32} and (hunyuan.num_kv_heads, hunyuan.head_dim) == (8, 128)
    nemotron = _load("nemotron-mini-4b-instruct.json")  # hidden 3072 / 24 heads = 128 = kv_channels
    assert nemotron.kind_counts() == {"full": 32} and (nemotron.num_kv_heads, nemotron.head_dim) == (8, 128)
    ministral = _load("ministral-8b-instruct-2410-as-ministral-modified.json")  # 1 full + 3 sliding, window 32768
    assert ministral.kind_counts() == {"full": 9, "sliding": 27} and ministral.sliding_window == 32768
    with pytest.raises(SpecError, match="use_cla is true"):
        _load("hunyuan-7b-instruct.json", use_cla=True)
    with pytest.raises(SpecError, match="attention_head_dim=64 but head_dim=128"):
        _load("hunyuan-7b-instruct.json", attention_head_dim=64)
    with pytest.raises(SpecError, match="kv_channels=64 but head_dim=128"):
        _load("nemotron-mini-4b-instruct.json", kv_channels=64)


def test_drafters_keep_no_cache_of_their_own():
    with pytest.raises(SpecError, match="'gemma4_assistant' keeps no KV cache to plan: .*shared_kv_states"):
        _load("gemma-4-31b-it-assistant.json")


# --- the spec YAML fields -------------------------------------------------------------------------------------


BASE = {"name": "m", "source": "s", "num_layers": 2, "num_q_heads": 4, "num_kv_heads": 2, "head_dim": 8,
        "dtype": "bf16", "max_model_len": 64}  # fmt: skip


def test_hidden_block_and_prefix_tokens_in_a_spec():
    spec = build_spec({**BASE, "layers": ["hidden", "hidden"], "hidden": {"width": 16, "window": 4,
                       "index_width": 3, "index_layers": [1]}}, "x.yaml")  # fmt: skip
    # 2 layers of 16 bf16 per token for at most 4 tokens, layer 1 also 3 int64 per token
    assert estimate(spec, 10).bytes_per_request == 2 * 4 * 16 * 2 + 4 * 3 * 8
    spec = build_spec({**BASE, "prefix_tokens": 5}, "x.yaml")
    assert estimate(spec, 10).bytes_per_request == estimate(build_spec(BASE, "x.yaml"), 15).bytes_per_request
    with pytest.raises(SpecError, match="hidden is given but no layer is of kind hidden"):
        build_spec({**BASE, "hidden": {"width": 16}}, "x.yaml")
    with pytest.raises(SpecError, match="cca"):  # a state kept beside attention only, never a layer of its own
        build_spec({**BASE, "layers": ["cca", "full"], "cca": {"num_heads": 4, "num_k_heads": 2, "head_dim": 8,
                    "d_conv": 2, "d_conv2": 2}}, "x.yaml")  # fmt: skip


def test_the_fallback_still_refuses_a_layout_it_has_no_rule_for():
    from kvplan.readers.transformers_fallback import _state

    layer = {"type": "hybrid", "mixer": "SomeAttention", "state_mixer": "",
             "tensors": {f"conv_states[{i}]": [[1, 64, 4], "float32"] for i in range(3)}}  # fmt: skip
    with pytest.raises(SpecError, match="keeps 3 conv and 0 recurrent states"):
        _state("x.json", 0, layer)
