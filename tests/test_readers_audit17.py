"""The audit of issue 17: types transformers builds that kvplan refused (DBRX, MPT, JetMoE, LongCat-Flash,
ProphetNet, XLM, GPT-1, CPM-Ant), vLLM's unserved architectures by version, and what the fallback says."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kvplan.calc import estimate
from kvplan.errors import SpecError, UsageError
from kvplan.readers import spec_from_hf_config

FIX = Path(__file__).parent / "fixtures" / "hf_configs"


def _load(name: str):
    p = FIX / name
    return spec_from_hf_config(json.loads(p.read_text()), str(p))


@pytest.fixture
def layout_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))


# --- native readers: bytes from the config's own numbers ------------------------------------------------


def test_dbrx_reads_kv_heads_from_attn_config():
    spec = _load("dbrx-instruct-mlx-4bit-modified.json")
    # config.json: n_layers 40, n_heads 48, d_model 6144 (head_dim 128), attn_config.kv_n_heads 8, max_seq_len 32768
    assert (spec.num_layers, spec.num_q_heads, spec.num_kv_heads, spec.head_dim) == (40, 48, 8, 128)
    assert spec.max_model_len == 32768 and spec.kind_counts() == {"full": 40}
    # vLLM 0.33 dbrx.py: 40 layers x 2 (K, V) x 8 heads x 128 x 2 B = 163,840 B per token
    assert estimate(spec, 1000, kv_dtype="bf16").bytes_per_request == 163_840 * 1000


def test_mpt_7b_is_mha_on_every_layer():
    spec = _load("mpt-7b-instruct.json")
    # config.json: n_layers 32, n_heads 32, d_model 4096, max_seq_len 2048; MptAttention caches all 32 heads of 128
    assert (spec.num_layers, spec.num_kv_heads, spec.head_dim, spec.max_model_len) == (32, 32, 128, 2048)
    # 32 layers x 2 x 32 heads x 128 x 2 B = 524,288 B per token
    assert estimate(spec, 100, kv_dtype="bf16").bytes_per_request == 524_288 * 100


def test_mpt_kv_n_heads_is_refused():
    config = json.loads((FIX / "mpt-7b-instruct.json").read_text())
    config["attn_config"]["kv_n_heads"] = 8
    with pytest.raises(SpecError, match=r"attn_config.kv_n_heads=8: transformers' MptAttention caches all n_heads=32"):
        spec_from_hf_config(config, "mpt.json")


def test_jetmoe_class_defaults():
    spec = spec_from_hf_config({"model_type": "jetmoe"}, "jetmoe.json")
    # JetMoeConfig: 12 layers, num_key_value_heads 16, kv_channels 128; queries: 16 x num_experts_per_tok 2 = 32
    assert (spec.num_layers, spec.num_q_heads, spec.num_kv_heads, spec.head_dim) == (12, 32, 16, 128)
    assert estimate(spec, 10, kv_dtype="bf16").bytes_per_request == 12 * 2 * 16 * 128 * 2 * 10


def test_longcat_flash_has_two_mla_caches_per_block():
    spec = spec_from_hf_config({"model_type": "longcat_flash"}, "longcat.json")
    # LongcatFlashConfig: num_layers 28 blocks of two MLA sublayers, kv_lora_rank 512 + qk_rope_head_dim 64
    assert spec.kind_counts() == {"mla": 56}
    assert estimate(spec, 10, kv_dtype="bf16").bytes_per_request == 56 * (512 + 64) * 2 * 10
    with pytest.raises(SpecError, match="num_hidden_layers is 2 x num_layers"):
        spec_from_hf_config({"model_type": "longcat_flash", "num_layers": 28, "num_hidden_layers": 28}, "l.json")


# --- vLLM: architectures it no longer serves, by version ------------------------------------------------


def _fit(spec, version=None):
    from kvplan.api import fit

    return fit(spec, "H100", max_model_len=1024, engine="vllm", engine_version=version, kv_cache_memory_bytes=1 << 33)


@pytest.mark.parametrize("version", [None, "0.33", "0.11.0"])
def test_vllm_does_not_serve_mllama_after_0_10_2(version):
    spec = _load("llama3.2-11b-vision-instruct-PARTIAL.json")
    with pytest.raises(UsageError, match=r"does not serve MllamaForConditionalGeneration .*until v0\.10\.2"):
        _fit(spec, version)


@pytest.mark.parametrize("version", ["0.10.2", "0.9", "0.6.3"])
def test_vllm_mllama_before_0_11_is_v0_only(version):
    spec = _load("llama3.2-11b-vision-instruct-PARTIAL.json")
    with pytest.raises(UsageError, match="on the V0 engine only .*SupportsV0Only"):
        _fit(spec, version)


def test_vllm_serves_mpt_until_0_28():
    spec = _load("mpt-7b-instruct.json")
    with pytest.raises(UsageError, match=r"vLLM 0\.33\.0 does not serve MPTForCausalLM .*until v0\.28\.0"):
        _fit(spec)
    assert _fit(spec, "0.28.0").max_concurrent_requests > 0


def test_unserved_table_matches_the_vllm_registry_fixture():
    """The releases are vLLM 0.33.0's own (``pip download --no-deps vllm==0.33.0``, the wheel's
    model_executor/models/registry.py _PREVIOUSLY_SUPPORTED_MODELS, at the lines named)."""
    from kvplan.engines.vllm import UNSERVED_ARCHITECTURES

    assert {a: v[0] for a, v in UNSERVED_ARCHITECTURES.items()} == {
        "MllamaForConditionalGeneration": "0.10.2",  # registry.py:857 (vLLM 0.33.0 wheel)
        "MptForCausalLM": "0.28.0",  # registry.py:890
        "MPTForCausalLM": "0.28.0",  # registry.py:889
    }


# --- the fallback: what it now reads, and what it says ------------------------------------------------


def test_fallback_reads_prophetnet_through_a_dynamic_cache(layout_cache):
    pytest.importorskip("transformers")
    spec = spec_from_hf_config({"model_type": "prophetnet"}, "prophetnet.json")
    # ProphetNetConfig: 12 decoder layers, 16 heads, hidden 1024 -> 64; only the main stream's K/V is cached
    assert spec.kind_counts() == {"full": 12} and (spec.num_kv_heads, spec.head_dim) == (16, 64)


def test_xlm_is_an_encoder_unless_causal(layout_cache):
    with pytest.raises(SpecError, match="'xlm' with causal absent is encoder-only"):
        spec_from_hf_config({"model_type": "xlm"}, "xlm.json")
    pytest.importorskip("transformers")
    spec = spec_from_hf_config({"model_type": "xlm", "causal": True}, "xlm.json")
    # XLMConfig: n_layers 12, n_heads 16, emb_dim 2048 -> 128
    assert spec.kind_counts() == {"full": 12} and (spec.num_kv_heads, spec.head_dim) == (16, 128)


def test_gpt1_keeps_no_cache():
    with pytest.raises(SpecError, match="'openai-gpt' keeps no KV cache to plan: .*past_key_values"):
        spec_from_hf_config({"model_type": "openai-gpt"}, "gpt1.json")


def test_falcon_mamba_says_it_sizes_vllm_state_and_gives_no_rope_warning(cli, tmp_path, monkeypatch):
    pytest.importorskip("transformers")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    p = tmp_path / "falcon-mamba.json"
    p.write_text(json.dumps({"model_type": "falcon_mamba", "torch_dtype": "bfloat16"}))
    code, out, err = cli("estimate", str(p), "--seq", "8192")
    assert code == 0 and err == ""  # 8,192 > FalconMambaConfig's 2,048, but Mamba has no positions to run out of
    assert "read by: transformers 5.23.0 (no kvplan reader); recurrent states sized as vLLM keeps them" in out
    assert "d_conv - 1 conv columns where transformers keeps d_conv" in out


def test_attention_models_still_warn_beyond_their_context(cli):
    code, _, err = cli("estimate", str(FIX / "mpt-7b-instruct.json"), "--seq", "4096")
    assert code == 0 and "beyond mpt-7b-instruct's max context of 2,048 tokens" in err


def test_mamba_native_reader_gives_no_context_warning(cli):
    code, _, err = cli("estimate", str(FIX / "mamba-130m-hf-PARTIAL.json"), "--seq", "100k")
    assert code == 0 and err == ""


# --- OpenELM: no transformers or vLLM class to compare with; llama.cpp's rule, spelled out ----------------


def test_openelm_bytes_follow_llama_cpp_per_layer_kv_heads():
    spec = _load("openelm-1.1b-instruct-mlx-4bit.json")
    # llama.cpp (convert_hf_to_gguf.py OpenELMModel.set_gguf_parameters) writes config.json's per-layer list as
    # openelm.attention.head_count_kv and head_dim as key_length = value_length; its cache then holds, per layer
    # il, K and V of n_embd_k_gqa(il) = n_embd_head_k * n_head_kv(il) elements (src/llama-hparams.cpp).
    # The file's num_kv_heads: 3 x 4, 7 x 5, 8 x 6, 6 x 7, 4 x 8 = 169 heads over 28 layers, head_dim 64:
    # 169 x 64 x 2 (K, V) x 2 B (bf16) = 43,264 B per token.
    assert estimate(spec, 1, kv_dtype="bf16").bytes_per_request == 43_264
    assert estimate(spec, 2048, kv_dtype="bf16").bytes_per_request == 43_264 * 2048
