"""Parameter counts from config.json (kvplan.readers.params) against transformers 5.23's own model.

The oracle (:func:`tests.oracle.count_parameters`) builds each config's causal LM on the meta device and sums
``p.numel()`` over ``model.parameters()`` (tied weights once); it also reads the embedding, the MoE layers and
one routed expert from the built modules. kvplan must agree exactly:

- on every real config.json fixture of a counted model_type (and count nothing for any other one);
- on each counted class's default config (4 layers), and with each bias / norm switch and
  ``tie_word_embeddings`` flipped, so the class defaults and the switches are checked too;
- on MoE layouts the fixtures do not show (sparse steps, dense-only layers, dense prefixes, no q LoRA).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kvplan.readers import spec_from_hf_config
from kvplan.readers.params import _FAMILIES, counted_model_types
from kvplan.readers.params_vision import WRAPPERS
from kvplan.readers.wrappers import text_model_type
from tests.oracle import OracleUnavailable, count_parameters

FIXTURES = Path(__file__).parent / "fixtures" / "hf_configs"
CONFIGS = sorted(FIXTURES.glob("*.json"))


def _config(path: Path) -> dict:
    return json.loads(path.read_text())


def _counted(config: dict) -> bool:
    wrapper, text = text_model_type(config)
    if wrapper:  # a wrapper whose vision tower, projector and text model are counted (kvplan.readers.params_vision)
        return wrapper in WRAPPERS and text in WRAPPERS[wrapper]["text"]
    return config.get("model_type") in counted_model_types()


@pytest.mark.parametrize("path", [p for p in CONFIGS if _counted(_config(p))], ids=lambda p: p.stem)
def test_a_counted_fixture_equals_transformers(path):
    config = _config(path)
    spec = spec_from_hf_config(config, str(path))
    truth = count_parameters(config)
    assert spec.param_count == truth.total
    assert spec.param_count_unquantized == truth.embedding
    if truth.moe_layers:
        assert (spec.moe.num_experts, spec.moe.expert_param_count, spec.moe.num_moe_layers) == (
            truth.experts,
            truth.expert,
            truth.moe_layers,
        )
        assert spec.moe.experts_per_token == config["num_experts_per_tok"]
    else:
        assert spec.moe is None


def test_the_fixtures_cover_the_main_families():
    types = {_config(p).get("model_type") for p in CONFIGS if _counted(_config(p))}
    assert {"llama", "mistral", "mixtral", "qwen2", "qwen2_moe", "qwen3", "qwen3_moe", "phi3", "gemma2",
            "gemma3_text", "deepseek_v2", "deepseek_v3", "kimi_k2", "gpt_oss", "glm4_moe"} <= types  # fmt: skip


@pytest.mark.parametrize("path", [p for p in CONFIGS if not _counted(_config(p))], ids=lambda p: p.stem)
def test_other_fixtures_get_no_count(path):
    """No guess: wrappers (their vision tower is not in the text config), hybrids and the rest stay None."""
    try:
        spec = spec_from_hf_config(_config(path), str(path))
    except Exception:  # refused configs (encoder-only, no reader and no transformers fallback): nothing to count
        return
    assert spec.param_count is None


# granitemoehybrid has no _FAMILIES recipe (params.count_granitemoehybrid): its switches, on a layout with
# attention layers (the class default is Mamba-2 only)
_HYBRID_SWITCHES = [{}, {"attention_bias": True}, {"mamba_proj_bias": True}, {"mamba_conv_bias": False},
                    {"tie_word_embeddings": True}, {"num_local_experts": 0, "num_experts_per_tok": 0}]  # fmt: skip


def _switches(model_type: str) -> list[dict]:
    """The class defaults, then each config switch of the recipe flipped, then tie_word_embeddings flipped."""
    if model_type == "granitemoehybrid":
        return [{"layer_types": ["mamba", "attention", "mamba", "mamba"], **s} for s in _HYBRID_SWITCHES]
    recipe = _FAMILIES[model_type]
    keys = {}
    for field in ("qkv_bias", "o_bias", "mlp_bias", "qk_norm_key", "lm_head_bias"):
        spec = recipe.get(field)
        if isinstance(spec, tuple):
            keys[spec[0]] = spec[1]
    return [{}, *({k: not v} for k, v in sorted(keys.items())), {"tie_word_embeddings": not recipe.get("tie", False)}]


# Config classes whose defaults kvplan's reader refuses or transformers itself cannot build: given values instead
_BASE = {
    "glm4_moe": {"head_dim": 128},  # 4096 / 96 heads is not whole: transformers truncates, kvplan refuses
    "internlm3": {},
}
_UNBUILDABLE = {("internlm3", "bias"), ("internlm3", "qkv_bias")}  # InternLM3Config refuses biases


@pytest.mark.parametrize("model_type", counted_model_types())
def test_class_defaults_and_switches_equal_transformers(model_type):
    for switch in _switches(model_type):
        if any((model_type, k) in _UNBUILDABLE for k in switch):
            continue
        config = {"model_type": model_type, "num_hidden_layers": 4, **_BASE.get(model_type, {}), **switch}
        if _FAMILIES.get(model_type, {}).get("moe") == "deepseek":
            config["first_k_dense_replace"] = 1  # one dense layer, three MoE layers
        spec = spec_from_hf_config(config, f"{model_type}.json")
        assert spec.param_count == count_parameters(config).total, switch


@pytest.mark.parametrize(
    "fixture, change",
    [
        ("qwen3-30b-a3b", {"decoder_sparse_step": 2, "num_hidden_layers": 6}),
        ("qwen2-57b-a14b", {"decoder_sparse_step": 3, "num_hidden_layers": 6}),
        ("qwen2-57b-a14b", {"shared_expert_intermediate_size": 0, "num_hidden_layers": 4}),
        ("deepseek-v3", {"first_k_dense_replace": 0, "num_hidden_layers": 3}),
        ("deepseek-v3", {"q_lora_rank": None, "n_shared_experts": 2, "num_hidden_layers": 4}),
        ("deepseek-v2-lite", {"first_k_dense_replace": 2, "num_hidden_layers": 4}),
        ("mixtral-8x7b-v0.1", {"num_local_experts": 4, "num_hidden_layers": 2}),
        ("gpt-oss-20b", {"num_local_experts": 8, "num_hidden_layers": 2, "layer_types": None}),
        ("phi-2", {"qk_layernorm": True, "num_hidden_layers": 2}),
    ],
)
@pytest.mark.filterwarnings("ignore:Initializing zero-element tensors")
def test_moe_and_other_layouts_equal_transformers(fixture, change):
    config = {**_config(FIXTURES / f"{fixture}.json"), **change}
    config = {k: v for k, v in config.items() if v is not None or k == "q_lora_rank"}
    spec = spec_from_hf_config(config, f"{fixture}.json")
    truth = count_parameters(config)
    assert spec.param_count == truth.total
    assert (spec.moe.num_moe_layers if spec.moe else 0) == truth.moe_layers


@pytest.mark.parametrize(
    "config",
    [
        # each wrapper's class defaults (no vision_config: the wrapper's own vision defaults)
        {"model_type": "gemma3", "text_config": {}},
        {"model_type": "llava", "text_config": {}},
        {"model_type": "mistral3", "text_config": {}},
        {"model_type": "qwen2_5_vl", "text_config": {}},
        {"model_type": "qwen3_vl", "text_config": {}},
        # a vision_config present: the vision config class's defaults; another tower; the tie rules
        {"model_type": "llava", "text_config": {}, "vision_config": {}},
        {"model_type": "llava", "text_config": {}, "vision_config": {"model_type": "siglip_vision_model"}},
        {"model_type": "llava", "text_config": {}, "vision_config": {"model_type": "pixtral"}},  # Pixtral-12B's layout
        {
            "model_type": "llava",
            "text_config": {},
            "vision_feature_layer": [-2, -5],
            "multimodal_projector_bias": False,
        },
        {"model_type": "mistral3", "text_config": {}, "vision_config": {}},
        {
            "model_type": "gemma3",
            "text_config": {},
            "vision_config": {"vision_use_head": False, "image_size": 896, "patch_size": 14},
        },  # fmt: skip
        {"model_type": "llava", "tie_word_embeddings": True, "text_config": {}},
        {"model_type": "llava", "text_config": {"tie_word_embeddings": True}},
        {"model_type": "mistral3", "tie_word_embeddings": False, "text_config": {}},
        {"model_type": "qwen3_vl", "text_config": {"tie_word_embeddings": True}},
        {"model_type": "qwen2_5_vl", "text_config": {"tie_word_embeddings": True}},
        {"model_type": "qwen3_vl", "text_config": {}, "vision_config": {"deepstack_visual_indexes": [3]}},
    ],
    ids=lambda c: json.dumps(c, sort_keys=True)[:90],
)
def test_wrappers_with_their_vision_tower_equal_transformers(config):
    spec = spec_from_hf_config(config, "wrapper.json")
    truth = count_parameters(config)
    assert (spec.param_count, spec.param_count_unquantized) == (truth.total, truth.embedding)


def test_a_wrapper_kvplan_does_not_count_gets_no_count():
    """Qwen3-VL-MoE's experts and an unknown vision tower are not counted: no guess."""
    assert _load_spec("qwen3-vl-30b-a3b-instruct.json").param_count is None
    config = {"model_type": "llava", "text_config": {}, "vision_config": {"model_type": "qwen2_5_vl"}}
    assert spec_from_hf_config(config, "llava.json").param_count is None  # transformers cannot build it either


def _load_spec(name: str):
    return spec_from_hf_config(_config(FIXTURES / name), name)


def test_gemma3_fixture_fits_without_weights_gib(cli):
    """It asked for --weights-gib; now its weights are transformers' count (2,794,955,520 parameters for this
    6-layer trimmed file with Gemma3Config's default SigLIP) x 2 B in bf16."""
    assert count_parameters(_config(FIXTURES / "gemma3-27b-it-modified.json")).total == 2_794_955_520
    code, out, err = cli("fit", str(FIXTURES / "gemma3-27b-it-modified.json"), "--gpu", "h100")
    assert code == 0, err
    assert "≈ 5,589,911,040" in out


def test_quantization_config_changes_no_parameter():
    config = _config(FIXTURES / "llama3.1-8b.json")
    quantized = {**config, "quantization_config": {"quant_method": "fp8", "weight_block_size": [128, 128]}}
    plain = spec_from_hf_config(config, "llama.json")
    assert spec_from_hf_config(quantized, "llama.json").param_count == plain.param_count == 8_030_261_248


def test_a_value_that_is_not_a_count_gives_no_count():
    config = {**_config(FIXTURES / "llama3.1-8b.json"), "vocab_size": "128256"}
    assert spec_from_hf_config(config, "llama.json").param_count is None


def test_the_oracle_refuses_what_it_cannot_build():
    with pytest.raises(OracleUnavailable):
        count_parameters({"model_type": "no_such_type"})


def test_a_quantized_config_without_weights_warns_that_the_format_is_not_applied(tmp_path):
    from kvplan.loader import load_model

    folder = tmp_path / "llama-fp8"
    folder.mkdir()
    config = {**_config(FIXTURES / "llama3.1-8b.json"), "quantization_config": {"quant_method": "fp8"}}
    (folder / "config.json").write_text(json.dumps(config))
    spec = load_model(str(folder))
    assert spec.param_count == 8_030_261_248
    assert spec.warnings == (
        "llama-fp8: no safetensors weights found; param_count 8,030,261,248 is counted from config.json, but its "
        "quantization_config (fp8) is not applied to it: fit sizes the weights at bf16 unless --weights-dtype or "
        "--weights-gib says otherwise",
    )
    (folder / "config.json").write_text(json.dumps(_config(FIXTURES / "llama3.1-8b.json")))
    assert load_model(str(folder)).warnings == ()
