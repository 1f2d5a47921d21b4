"""Issue 17: wrappers named, Llama 3.2 Vision's cross-attention bytes, the transformers fallback and its cache."""

from __future__ import annotations

import builtins
import json
from pathlib import Path

import pytest

from kvplan.calc import estimate
from kvplan.errors import SpecError
from kvplan.readers import spec_from_hf_config

FIX = Path(__file__).parent / "fixtures" / "hf_configs"


def _load(name: str):
    p = FIX / name
    return spec_from_hf_config(json.loads(p.read_text()), str(p))


@pytest.mark.parametrize(
    "name, wrapper, text",
    [
        ("qwen3-vl-8b-instruct.json", "Qwen3VLForConditionalGeneration (qwen3_vl)", "qwen3_vl_text"),
        ("qwen3-vl-30b-a3b-instruct.json", "Qwen3VLMoeForConditionalGeneration (qwen3_vl_moe)", "qwen3_vl_moe_text"),
        ("qwen2.5-vl-7b.json", "Qwen2_5_VLForConditionalGeneration (qwen2_5_vl)", "qwen2_5_vl_text"),
        ("llama3.2-11b-vision-instruct-PARTIAL.json", "MllamaForConditionalGeneration (mllama)", "mllama_text_model"),
    ],
)
def test_wrapper_names_wrapper_and_text_model(name, wrapper, text):
    spec = _load(name)
    assert wrapper in spec.reader and f"reader for {text}" in spec.reader
    assert spec.multimodal["wrapper"] == wrapper.split("(")[1].rstrip(")")


def test_qwen2_5_vl_flat_file_reads_the_top_level_text_keys():
    # config.json: 28 layers, 4 KV heads, hidden 3584 / 28 heads = head_dim 128, use_sliding_window false
    spec = _load("qwen2.5-vl-7b.json")
    assert (spec.num_layers, spec.num_kv_heads, spec.head_dim, spec.kind_counts()) == (28, 4, 128, {"full": 28})
    # 28 layers x 2 (K, V) x 4 heads x 128 x 2 B = 57,344 B per token
    assert estimate(spec, 1000).bytes_per_request == 57_344 * 1000


def test_mllama_cross_attention_bytes_transformers_and_vllm():
    spec = _load("llama3.2-11b-vision-instruct-PARTIAL.json")
    cross = [x for x in spec.layers if x.kind == "cross"]
    assert [i for i, x in enumerate(spec.layers) if x.kind == "cross"] == [3, 8, 13, 18, 23, 28, 33, 38]
    # transformers' _prepare_static_cache: max_num_tiles 4 x ((560 // 14)^2 + 1) = 4 x 1601 = 6,404 tokens
    assert {x.encoder_tokens for x in cross} == {6404}
    est = estimate(spec, 100)
    group = next(g for g in est.groups if g.kind == "cross")
    # 8 layers x 6,404 tokens x 2 (K, V) x 8 heads x 128 x 2 B = 209,846,272 B, whatever the text length
    assert group.bytes == 209_846_272 and estimate(spec, 5000).groups[-1].bytes == 209_846_272
    # vLLM CrossAttentionSpec: cdiv(6404, 16) = 401 blocks of 16 tokens: 8 x 6,416 x 4,096 B = 210,239,488 B
    assert estimate(spec, 100, block_size=16).groups[-1].bytes == 210_239_488
    from kvplan.dtypes import get_kv_dtype
    from kvplan.engines.vllm import build_layout

    layout = build_layout(spec, get_kv_dtype("bf16"), 1, 1, 8192, None, False, True, "sm90")
    cross_group = next(g for g in layout.groups if g.kind == "cross")
    assert cross_group.blocks_per_request(100, 2048) == 401 * (len(cross_group.layers) and 1)


def test_mllama_cross_layers_match_transformers_cache_shapes():
    pytest.importorskip("transformers")
    from tests.oracle import read_with_transformers

    config = json.loads((FIX / "llama3.2-11b-vision-instruct-PARTIAL.json").read_text())
    reading = read_with_transformers(config, 1000)
    layer = reading.layers[3]
    keys, values = layer.tensor("keys"), layer.tensor("values")
    assert keys.shape == (1, 8, 6404, 128) and values.shape == (1, 8, 6404, 128)
    assert layer.nbytes * 8 == 209_846_272  # transformers' own cross cache, all 8 layers


def test_fallback_reads_an_unregistered_type_and_caches_it(tmp_path, monkeypatch):
    pytest.importorskip("transformers")
    from kvplan.readers import transformers_fallback as fb

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    config = {"model_type": "gpt_neo", "num_layers": 4, "num_heads": 4, "hidden_size": 64,
              "attention_types": [[["global", "local"], 2]], "window_size": 32, "max_position_embeddings": 512}
    spec = spec_from_hf_config(config, "gpt-neo.json")
    assert spec.reader.startswith("transformers 5.23") and "(no kvplan reader)" in spec.reader
    # transformers 5.23 caches every GPT-Neo layer whole (get_layer_types_and_kwargs: full_attention; the local
    # layers only mask): 4 layers of 4 heads of 64 / 4 = 16 elements
    assert spec.layer_kinds == ("full",) * 4 and {(x.num_kv_heads, x.head_dim) for x in spec.layers} == {(4, 16)}
    assert len(list((tmp_path / "kvplan" / "transformers-layouts").glob("*.json"))) == 1

    def no_transformers(*_a, **_k):
        raise AssertionError("the second call must read the cached layout")

    monkeypatch.setattr(fb, "read_layout", no_transformers)
    again = spec_from_hf_config(config, "gpt-neo.json")
    assert again.layers == spec.layers


def test_refusal_without_transformers_names_the_extra(monkeypatch):
    real_import = builtins.__import__

    def fake_import(name, *args, **kwargs):
        if name == "transformers" or name.startswith("transformers."):
            raise ImportError("no transformers")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", fake_import)
    with pytest.raises(SpecError, match=r"kvplan\[transformers\]"):
        spec_from_hf_config({"model_type": "codegen"}, "codegen.json")


def test_encoder_only_still_refused():
    with pytest.raises(SpecError, match="encoder-only"):
        spec_from_hf_config({"model_type": "bert"}, "bert.json")
