"""The config.json readers as a user meets them: typos, encoders, unknown types, one answer per model."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from kvplan.calc import estimate
from kvplan.loader import load_bundled
from kvplan.readers import REGISTRY, spec_from_hf_config

from .conftest import FIXTURES, ROOT

HF = FIXTURES / "hf_configs"


def _config(name: str) -> dict:
    return json.loads((HF / name).read_text())


def test_misspelt_kv_heads_key_is_refused_not_read_as_mha(cli, tmp_path):
    config = _config("llama3.1-8b.json")
    config["num_key_value_head"] = config.pop("num_key_value_heads")  # the typo a user made
    p = tmp_path / "config.json"
    p.write_text(json.dumps(config))
    code, out, err = cli("estimate", str(p), "--seq", "4096")
    # read as MHA it would be 2 × 32 layers × 32 heads × 128 × 2 B × 4096 = 2 GiB instead of 0.5 GiB
    assert (code, out) == (2, "")
    assert err == (
        f"kvplan: error: {p}: unknown key 'num_key_value_head' (did you mean 'num_key_value_heads'?); "
        "a misspelt key is not guessed\n"
    )


def test_correct_llama_config_gives_the_lesson_figure():
    # 2 × 32 layers × 8 KV heads × 128 × 2 B × 4096 tokens = 536,870,912 B
    assert estimate(spec_from_hf_config(_config("llama3.1-8b.json"), "c/config.json"), 4096).total_bytes == 536_870_912


def test_encoder_only_config_is_refused(cli):
    p = HF / "bert-base-uncased.json"
    code, out, err = cli("estimate", str(p), "--seq", "512")
    assert (code, out) == (2, "")
    assert err == f"kvplan: error: {p}: model_type 'bert' is encoder-only: it keeps no KV cache to plan\n"


@pytest.mark.parametrize(
    "config, message",
    [
        ({"model_type": "llama", "is_causal": False}, "the config is not causal"),
        ({"model_type": "llama", "is_encoder_decoder": True}, "is_encoder_decoder is true"),
        ({"model_type": "t5"}, "'t5'"),  # transformers builds T5 but cannot run it as a decoder: refused
        ({"model_type": "lama"}, "model_type 'lama' (did you mean 'llama'?)"),
        (
            {"model_type": "mistral", "sliding_window": 4096, "sliding_window_pattern": 6},
            "sliding_window_pattern is set, and it changes the layer layout or geometry, but the mistral reader "
            "does not handle it",
        ),
        (
            {"model_type": "llama", "hybrid_override_pattern": "M-M*"},
            "hybrid_override_pattern is set, and it changes the layer layout",
        ),
        ({"model_type": "qwen3", "global_head_dim": 512}, "global_head_dim is set"),
    ],
)
def test_configs_kvplan_must_not_guess(config, message):
    with pytest.raises(Exception) as e:
        spec_from_hf_config(config, "c/config.json")
    assert str(e.value).startswith("c/config.json: ")
    assert message in str(e.value)


@pytest.mark.parametrize(
    "model_type, hint",
    [
        ("lama", " (did you mean 'llama'?)"),
        ("qwen3-moe", " (did you mean 'qwen3_moe'?)"),
        ("codegen", ""),  # difflib ratio 0.62 to 'cohere': another family, not a typo
        ("xyz_unknown", ""),
    ],
)
def test_refusal_suggests_only_close_names_and_points_to_the_spec_format(model_type, hint):
    from kvplan.readers import no_reader_message
    from kvplan.readers.base import SPEC_FORMAT_DOC

    message = no_reader_message(model_type, "c/config.json")
    assert message.startswith(f"c/config.json: model_type {model_type!r}{hint}: kvplan has no reader for it")
    assert "did you mean" in message if hint else "did you mean" not in message
    assert message.endswith(f"(see {SPEC_FORMAT_DOC})")
    assert (Path(__file__).parents[1] / SPEC_FORMAT_DOC).read_text().startswith("# Spec format\n")


@pytest.mark.parametrize(
    "fixture, bundled",
    [("phi3-mini-4k-instruct.json", "phi3-mini"), ("phi3-medium-4k-instruct.json", "phi3-medium")],
)
def test_phi3_has_one_answer_its_window_on_every_layer(fixture, bundled):
    # transformers and vLLM 0.33 both keep Phi-3's 2,047-token window on every layer (see decoder.py)
    config = _config(fixture)
    assert config["sliding_window"] == 2047 and "layer_types" not in config
    hf, spec = spec_from_hf_config(config, fixture), load_bundled(bundled)
    assert hf.kind_counts() == spec.kind_counts() == {"sliding": hf.num_layers}
    assert hf.sliding_window == spec.sliding_window == 2047
    for s in (1, 2047, 2048, 4096, 131072):
        assert estimate(hf, s).total_bytes == estimate(spec, s).total_bytes
    if bundled == "phi3-mini":
        # 2 × 32 layers × 32 KV heads × 96 × 2 B = 393,216 B per token, for at most 2,047 tokens:
        # 393,216 × 2,047 = 804,913,152 B at 4,096 tokens (1,610,612,736 B if every token were kept)
        assert estimate(hf, 4096).total_bytes == 804_913_152
        assert estimate(hf, 2047).total_bytes == estimate(hf, 4096).total_bytes


def test_gemma4_issue_example_and_the_published_file():
    config = _config("gemma4-26b-a4b.json")
    text = config["text_config"]
    assert (text["global_head_dim"], text["num_global_key_value_heads"], text["attention_k_eq_v"]) == (512, 2, True)
    # As the issue describes it (no attention_k_eq_v): full layers cache 8 heads × 512, sliding 8 × 256, window 1024
    # 5 full × 8192 tok × 2 × 8 × 512 × 2 B + 25 sliding × 1024 tok × 2 × 8 × 256 × 2 B = 880,803,840 B
    del text["attention_k_eq_v"]
    assert estimate(spec_from_hf_config(config, "g/config.json"), 8192).total_bytes == 880_803_840
    # The published file sets attention_k_eq_v: full layers use num_global_key_value_heads = 2
    # 5 × 8192 × 2 × 2 × 512 × 2 + 25 × 1024 × 2 × 8 × 256 × 2 = 167,772,160 + 209,715,200 = 377,487,360 B
    assert estimate(load_bundled("gemma4-26b-a4b"), 8192).total_bytes == 377_487_360


def test_nemotron_h_prices_only_its_attention_layers_and_adds_mamba2_state():
    s = spec_from_hf_config(_config("nemotron-h-56b-base-8k.json"), "n/config.json")
    assert s.kind_counts() == {"full": 10, "mamba2": 54, "none": 54}
    e = estimate(s, 131072)
    groups = {g.kind: g for g in e.groups}
    # 10 attention layers × 2 × 8 KV heads × 128 × 2 B = 40,960 B per token (not 118 layers' 483,328)
    assert groups["full"].bytes_per_token == 40_960
    assert groups["mamba2"].state_bytes > 0 and groups["none"].bytes == 0


def test_deepseek_v32_counts_its_indexer_keys():
    s = spec_from_hf_config(_config("deepseek-v3.2.json"), "d/config.json")
    # 61 layers × (512 + 64 latent + 128 indexer) × 2 B = 85,888 B per token; 70,272 B without the indexer
    assert estimate(s, 1).total_bytes == 85_888


def test_qwen3_next_linear_attention_layers_are_gated_deltanet_state():
    s = spec_from_hf_config(_config("qwen3-next-80b-a3b-thinking.json"), "q/config.json")
    assert s.kind_counts() == {"full": 12, "gdn": 36}


def test_start_up_imports_no_reader():
    code = (
        "import sys; from kvplan.cli import run; run(['estimate', 'llama3-8b', '--seq', '4096']); "
        "print(sorted(m for m in sys.modules if m.startswith('kvplan.readers')))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=True).stdout
    assert out.strip().splitlines()[-1] == "[]"


def test_every_registered_module_exists_and_reads_its_types():
    import importlib

    for model_type, module in REGISTRY.items():
        readers = importlib.import_module(f"kvplan.readers.{module}").READERS
        assert model_type in readers, f"{model_type} registered to {module}, which has no reader for it"
