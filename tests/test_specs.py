"""Spec loading: every bundled spec, bad specs with their exact messages, the Hugging Face reader."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from kvplan.calc import estimate
from kvplan.errors import SpecError
from kvplan.loader import bundled_names, load_bundled, load_hf_config, load_model, load_spec_yaml

FIXTURES = Path(__file__).resolve().parent / "fixtures"

HF = FIXTURES / "hf_configs"

# Facts from each model's config.json (via ../shared/reference/model_architectures.yaml, which cites the
# copies it was read from): layers, H_q, H_kv, head_dim. Checked against the bundled YAMLs.
CONFIG_FACTS = {
    "llama2-7b": (32, 32, 32, 128),
    "llama3-8b": (32, 32, 8, 128),
    "llama3.1-70b": (80, 64, 8, 128),
    "llama3.1-405b": (126, 128, 8, 128),
    "mistral-nemo-12b": (40, 32, 8, 128),  # explicit head_dim 128; 5120/32 = 160 would be wrong
    "qwen3-32b": (64, 64, 8, 128),  # explicit; 5120/64 = 80 would be wrong
    "gemma2-9b": (42, 16, 8, 256),  # explicit; 3584/16 = 224 would be wrong
    "gemma3-27b": (62, 32, 16, 128),
    "gpt-oss-20b": (24, 64, 8, 64),  # explicit; 2880/64 = 45 would be wrong
    "falcon-7b": (32, 71, 1, 64),  # multi_query
    "phi3-mini": (32, 32, 32, 96),
    "command-r": (40, 64, 64, 128),
}

EXPECTED_MODELS = 43


REFERENCE_43 = (
    "command-r deepseek-v2-lite deepseek-v3 falcon-40b falcon-7b gemma2-27b gemma2-9b gemma3-12b gemma3-27b gemma3-4b "
    "gpt-j-6b gpt-oss-120b gpt-oss-20b gpt2 jamba-v0.1 llama2-13b llama2-70b llama2-7b llama3-70b llama3-8b "
    "llama3.1-405b llama3.1-70b llama3.1-8b llama3.2-1b llama3.2-3b llama4-scout mistral-7b-v0.1 mistral-7b-v0.3 "
    "mistral-nemo-12b mixtral-8x22b mixtral-8x7b phi3-medium phi3-mini phi4 qwen2.5-14b qwen2.5-32b qwen2.5-72b "
    "qwen2.5-7b qwen3-235b-a22b qwen3-30b-a3b qwen3-32b qwen3-8b yi-34b"
).split()


def test_all_43_reference_models_are_bundled():
    assert len(REFERENCE_43) == EXPECTED_MODELS
    assert set(REFERENCE_43) <= set(bundled_names())


@pytest.mark.parametrize("name", bundled_names())
def test_bundled_spec_loads_and_cites_its_config(name):
    spec = load_bundled(name)
    assert spec.name == name
    assert re.fullmatch(r"https://huggingface\.co/[\w.-]+/[\w.-]+/blob/main/config\.json", spec.source)
    assert spec.num_q_heads % spec.num_kv_heads == 0
    assert len(spec.layer_kinds) == spec.num_layers
    assert estimate(spec, 4096).total_bytes > 0


@pytest.mark.parametrize("name, facts", sorted(CONFIG_FACTS.items()))
def test_bundled_geometry_matches_config_json(name, facts):
    s = load_bundled(name)
    assert (s.num_layers, s.num_q_heads, s.num_kv_heads, s.head_dim) == facts


def test_unknown_bundled_name_suggests():
    with pytest.raises(SpecError, match=r"unknown model 'llama3-8bb'.*did you mean llama3-8b"):
        load_bundled("llama3-8bb")


GOOD = """\
name: toy
source: https://huggingface.co/org/toy/blob/main/config.json
num_layers: 4
num_q_heads: 8
num_kv_heads: 2
head_dim: 16
dtype: bf16
max_model_len: 1024
"""


def write(tmp_path: Path, text: str, name: str = "x.yaml") -> Path:
    p = tmp_path / name
    p.write_text(text)
    return p


def test_good_spec_loads(tmp_path):
    s = load_spec_yaml(write(tmp_path, GOOD))
    # 2 × 4 × 2 × 16 × 2 B = 512 B per token
    assert estimate(s, 10).total_bytes == 5120


@pytest.mark.parametrize(
    "change, message",
    [
        (
            ("num_q_heads: 8\nnum_kv_heads: 2", "num_q_heads: 30\nnum_kv_heads: 8"),
            "num_q_heads=30 is not a multiple of num_kv_heads=8",
        ),
        (("num_kv_heads: 2", "num_kv_head: 2"), "unknown key 'num_kv_head' (did you mean num_kv_heads?)"),
        (("num_layers: 4", "num_layers: 0"), "num_layers=0 must be an integer >= 1"),
        (("head_dim: 16", "head_dim: -16"), "head_dim=-16 must be an integer >= 1"),
        (("head_dim: 16", "head_dim: sixteen"), "head_dim='sixteen' must be an integer >= 1"),
        (("head_dim: 16", "head_dim: 16.5"), "head_dim=16.5 must be an integer >= 1"),
        (("dtype: bf16", "dtype: bf17"), "dtype: unknown dtype 'bf17'; allowed: fp32, fp16, bf16"),
        (("max_model_len: 1024\n", ""), "missing required field max_model_len"),
        (
            ("max_model_len: 1024\n", "max_model_len: 1024\nlayers: {default: sliding}\n"),
            "layers has sliding layers but sliding_window is not given",
        ),
        (
            ("max_model_len: 1024\n", "max_model_len: 1024\nlayers: [full, full]\n"),
            "layers lists 2 kinds but num_layers=4",
        ),
        (
            ("max_model_len: 1024\n", "max_model_len: 1024\nlayers: [full, full, full, attn]\n"),
            "layers[3]='attn' is not a layer kind; allowed: full, sliding, chunked, mla, mamba, mamba2, gdn, "
            "short_conv, linear_attention, rglru, rwkv4, mlstm, shared, none, cross, compressed, hidden",
        ),
        (
            ("max_model_len: 1024\n", "max_model_len: 1024\nlayers: {rules: [{kind: full, indices: [9]}]}\n"),
            "layers.rules[0].indices has 9; allowed: 0..3",
        ),
        (
            ("max_model_len: 1024\n", "max_model_len: 1024\nlayers: {default: none}\n"),
            "no layer keeps a cache of its own (all shared or none)",
        ),
        (
            (
                "max_model_len: 1024\n",
                "max_model_len: 1024\nlayers: {default: full, rules: [{kind: shared, indices: [0]}]}\n",
            ),
            "layer 0 is shared but no earlier layer keeps an attention cache for it to read",
        ),
    ],
)
def test_bad_spec_messages(tmp_path, change, message):
    old, new = change
    assert old in GOOD
    p = write(tmp_path, GOOD.replace(old, new))
    with pytest.raises(SpecError) as e:
        load_spec_yaml(p)
    assert str(e.value).startswith(f"{p}: ")
    assert message in str(e.value)


def test_malformed_yaml_and_missing_file(tmp_path):
    with pytest.raises(SpecError, match=r"malformed YAML at line 2"):
        load_spec_yaml(write(tmp_path, "name: a\n  - : [\n"))
    with pytest.raises(SpecError, match=r"no such file"):
        load_spec_yaml(tmp_path / "nope.yaml")
    with pytest.raises(SpecError, match=r"a spec must be a YAML mapping"):
        load_spec_yaml(write(tmp_path, "- 1\n- 2\n"))


def test_layer_rules_and_shared_layers(tmp_path):
    text = (
        GOOD
        + "sliding_window: 4\nlayers:\n  default: sliding\n  rules:\n    - {kind: full, period: 2, offset: 1}\n    - {kind: shared, indices: [3]}\n"
    )
    s = load_spec_yaml(write(tmp_path, text))
    assert s.layer_kinds == ("sliding", "full", "sliding", "shared")
    # 512 B/token per... per layer: 2 × 2 × 16 × 2 = 128 B; S = 10: full 1 × 128 × 10 + sliding 2 × 128 × 4
    assert estimate(s, 10).total_bytes == 128 * 10 + 2 * 128 * 4


# --- Hugging Face config.json reader ----------------------------------------------------------------
@pytest.mark.parametrize(
    "fixture, bundled",
    [
        ("llama3.1-8b.json", "llama3.1-8b"),
        ("qwen3-30b-a3b.json", "qwen3-30b-a3b"),  # explicit head_dim 128 ≠ 2048/32
        ("deepseek-v3.json", "deepseek-v3"),  # MLA keys; num_key_value_heads nominal
        ("gpt-oss-20b.json", "gpt-oss-20b"),  # layer_types; no torch_dtype
        ("qwen2.5-7b.json", "qwen2.5-7b"),  # sliding_window with use_sliding_window false
        ("falcon-7b.json", "falcon-7b"),  # n_head + multi_query
        ("mistral-7b-v0.1.json", "mistral-7b-v0.1"),  # sliding on every layer
        ("gpt2.json", "gpt2"),  # n_layer / n_head / n_embd
        ("gemma2-9b-it.json", "gemma2-9b"),  # head_dim 256 ≠ 3584/16; even layers sliding
    ],
)
def test_hf_reader_matches_bundled_spec(fixture, bundled):
    hf = load_hf_config(HF / fixture)
    spec = load_bundled(bundled)
    for s in (1, 4096, 131072):
        assert estimate(hf, s).total_bytes == estimate(spec, s).total_bytes
    assert hf.layer_kinds == spec.layer_kinds
    assert hf.max_model_len == spec.max_model_len


def test_hf_reader_nested_text_config_structure():
    # MODIFIED copy (a TensorRT-LLM unit test changed it to 6 layers and window 4): check structure only.
    s = load_hf_config(HF / "gemma3-27b-it-modified.json")
    assert (s.num_layers, s.num_q_heads, s.num_kv_heads, s.head_dim, s.dtype) == (6, 32, 16, 128, "bf16")
    assert s.layer_kinds == ("sliding",) * 5 + ("full",)  # global iff (i+1) % 6 == 0
    assert s.sliding_window == 4
    assert s.max_model_len == 131072  # Gemma3TextConfig default: the key is absent
    # 1 full layer × 8,192 B × 100 tokens + 5 sliding × 8,192 B × 4 tokens
    assert estimate(s, 100).total_bytes == 8192 * 100 + 5 * 8192 * 4


def test_hf_reader_folder_and_load_model(tmp_path):
    (tmp_path / "config.json").write_text((HF / "llama3.1-8b.json").read_text())
    assert estimate(load_model(str(tmp_path)), 4096).total_bytes == 536_870_912


def test_hf_reader_jamba_and_llama4_keys():
    jamba = {
        "model_type": "jamba",
        "num_hidden_layers": 32,
        "num_attention_heads": 32,
        "num_key_value_heads": 8,
        "hidden_size": 4096,
        "attn_layer_period": 8,
        "attn_layer_offset": 4,
        "mamba_d_state": 16,
        "mamba_d_conv": 4,
        "mamba_expand": 2,
        "max_position_embeddings": 262144,
        "torch_dtype": "bfloat16",
    }
    from kvplan.readers import spec_from_hf_config

    s = spec_from_hf_config(jamba, "jamba/config.json")
    assert estimate(s, 4096).total_bytes == estimate(load_bundled("jamba-v0.1"), 4096).total_bytes
    scout = {
        "model_type": "llama4",
        "text_config": {
            "num_hidden_layers": 48,
            "num_attention_heads": 40,
            "num_key_value_heads": 8,
            "head_dim": 128,
            "hidden_size": 5120,
            "attention_chunk_size": 8192,
            "max_position_embeddings": 10485760,
        },
        "torch_dtype": "bfloat16",
    }
    s = spec_from_hf_config(scout, "scout/config.json")
    assert s.layer_kinds == load_bundled("llama4-scout").layer_kinds


@pytest.mark.parametrize(
    "text, message",
    [
        ("{", "malformed JSON at line 1"),
        ("[1]", "a config.json must hold a JSON object"),
        (
            '{"model_type": "llama", "num_hidden_layers": 2, "num_attention_heads": 8, "hidden_size": 100}',
            "hidden_size=100 is not a multiple of num_attention_heads=8",
        ),
        (
            '{"model_type": "llama", "num_hidden_layers": 2, "num_attention_heads": 8, "num_key_value_heads": 3, '
            '"head_dim": 4}',
            "num_q_heads=8 is not a multiple of num_kv_heads=3",
        ),
        ('{"num_hidden_layers": 2}', "no model_type: kvplan has no reader for it and will not guess its layout"),
    ],
)
def test_hf_reader_errors(tmp_path, text, message):
    p = write(tmp_path, text, "config.json")
    with pytest.raises(SpecError) as e:
        load_hf_config(p)
    assert message in str(e.value)
    assert str(p) in str(e.value)


@pytest.mark.parametrize(
    "config, message",
    [
        ({"model_type": "jamba", "attn_layer_period": 0}, "attn_layer_period=0 must be an integer >= 1"),
        ({"model_type": "jamba", "attn_layer_period": "2"}, "attn_layer_period='2' must be an integer >= 1"),
        (
            {"model_type": "jamba", "attn_layer_period": 2, "attn_layer_offset": 5},
            "attn_layer_offset=5 must be below attn_layer_period=2",
        ),
        (
            {"model_type": "llama4_text", "attention_chunk_size": 8, "no_rope_layer_interval": 0},
            "no_rope_layer_interval=0 must be an integer >= 1",
        ),
        (
            {"model_type": "llama4_text", "attention_chunk_size": 8, "no_rope_layers": ["a", 1, 1, 1]},
            "no_rope_layers",
        ),
        (
            {"model_type": "gemma3_text", "sliding_window": 4, "sliding_window_pattern": "x"},
            "sliding_window_pattern='x'",
        ),
        (
            {"model_type": "qwen2", "sliding_window": 8, "use_sliding_window": True, "max_window_layers": "x"},
            "max_window_layers='x'",
        ),
        ({"model_type": "mistral", "sliding_window": -1}, "sliding_window=-1 must be an integer >= 1"),
        (
            {"model_type": "llama", "layer_types": [[1], {}, 2, None]},
            "layer_types[0]=[1] is not handled by the llama reader",
        ),
        ({"model_type": "llama", "layer_types": "full_attention"}, "layer_types must be a list of 4 values"),
        (
            {"model_type": "deepseek_v3", "kv_lora_rank": 512, "qk_rope_head_dim": 64, "qk_nope_head_dim": "x"},
            "qk_nope_head_dim='x'",
        ),
        ({"text_config": "abc"}, "text_config must be an object"),
        (
            {"model_type": "llama", "num_hidden_layers": 10**20},
            "num_hidden_layers=100000000000000000000 is larger than kvplan handles",
        ),
        ({"model_type": "falcon", "num_key_value_heads": None, "multi_query": "false"}, "multi_query='false' must be"),
    ],
)
def test_hf_reader_rejects_odd_values(config, message):
    from kvplan.readers import spec_from_hf_config

    base = {"num_hidden_layers": 4, "num_attention_heads": 8, "num_key_value_heads": 2, "head_dim": 16,
            "hidden_size": 128}  # fmt: skip
    with pytest.raises(SpecError) as e:
        spec_from_hf_config({**base, **config}, "c/config.json")
    assert str(e.value).startswith("c/config.json: ")
    assert message in str(e.value)


def test_json_kvplan_cannot_read(tmp_path):
    p = write(tmp_path, "[" * 100_000 + "]" * 100_000, "config.json")
    with pytest.raises(SpecError, match=r"JSON kvplan cannot read"):
        load_hf_config(p)


def test_spec_bounds_and_text(tmp_path):
    for old, new, message in (
        ("num_layers: 4", "num_layers: 1000000000000", "num_layers=1000000000000 is larger than kvplan handles"),
        ("dtype: bf16", "dtype: q4_0", "dtype='q4_0' is a cache format, not a model dtype; allowed: fp32, fp16, bf16"),
        ("name: toy", 'name: "a\\nb"', "name must be one line of printable text"),
    ):
        with pytest.raises(SpecError, match=re.escape(message)):
            load_spec_yaml(write(tmp_path, GOOD.replace(old, new)))
    with pytest.raises(SpecError, match="mamba.d_conv=1 must be an integer >= 2"):
        load_spec_yaml(write(tmp_path, GOOD + "layers: {default: mamba}\nmamba: {d_inner: 8, d_conv: 1, d_state: 1}\n"))


def test_special_files_are_refused(tmp_path):
    import os

    fifo = tmp_path / "x.yaml"
    os.mkfifo(fifo)
    with pytest.raises(SpecError, match="not a regular file"):
        load_spec_yaml(fifo)
    with pytest.raises(SpecError, match="MODEL: empty"):
        load_model("  ")


def test_hf_reader_applies_the_config_class_defaults():
    from kvplan.readers import spec_from_hf_config

    # LlamaConfig: 32 layers, 32 heads, hidden 4096, num_key_value_heads None -> H_q, 2,048 positions
    s = spec_from_hf_config({"model_type": "llama"}, "c/config.json")
    assert (s.num_layers, s.num_q_heads, s.num_kv_heads, s.head_dim, s.max_model_len) == (32, 32, 32, 128, 2048)
    # MistralConfig: num_key_value_heads 8 and sliding_window 4096 when absent; null window = no window
    s = spec_from_hf_config({"model_type": "mistral"}, "c/config.json")
    assert (s.num_kv_heads, s.sliding_window, s.kind_counts()) == (8, 4096, {"sliding": 32})
    s = spec_from_hf_config({"model_type": "mistral", "sliding_window": None}, "c/config.json")
    assert s.kind_counts() == {"full": 32}
    # Qwen3MoeConfig: 24 layers, 32 heads, 4 KV heads, hidden 2048 -> head_dim 64
    s = spec_from_hf_config({"model_type": "qwen3_moe"}, "c/config.json")
    assert (s.num_layers, s.num_q_heads, s.num_kv_heads, s.head_dim) == (24, 32, 4, 64)
    # Olmo3Config: sliding_window 4096 on 3 of every 4 layers
    s = spec_from_hf_config({"model_type": "olmo3"}, "c/config.json")
    assert s.kind_counts() == {"full": 8, "sliding": 24} and s.sliding_window == 4096


@pytest.mark.parametrize("name", bundled_names())
def test_every_bundled_spec_has_a_param_count(name):
    # 'kvplan fit', 'fleet', 'sweep' and 'plot' size weights from param_count; a bundled model without one
    # could only be planned with --weights-gib
    assert load_bundled(name).param_count is not None


# bundled name -> (config.json fixture, param_count, active parameters): param_count is what transformers 5.23
# builds from that config (meta device; vLLM 0.33 loads the same tensors, MTP layers skipped) plus the
# e_score_correction_bias tensors the checkpoint holds and transformers keeps as buffers
PARAM_COUNTS = {
    "gemma4-26b-a4b": ("gemma4-26b-a4b.json", 25_805_933_872, 4_395_322_672),
    "gemma4-31b": ("gemma4-31b-it-nvfp4.json", 31_273_086_512, 31_273_086_512),
    "qwen3.5-0.8b": ("qwen3.5-0.8b.json", 852_985_920, 852_985_920),
    "minimax-m2.7": ("minimax-m2.7.json", 228_689_764_864, 11_030_553_088),
    "falcon-h1-7b": ("falcon-h1-7b-PARTIAL.json", 7_585_513_568, 7_585_513_568),
    "qwen3.5-122b-a10b": ("qwen3.5-122b-a10b.json", 122_562_817_776, 10_222_579_440),
    "glm-4.7": ("glm4.7-nvfp4.json", 352_797_829_024, 33_632_266_144),
    "kimi-k2": ("kimi-k2-instruct.json", 1_026_408_232_448, 32_861_500_928),
    "nemotron-3-nano-30b-a3b": ("nemotron-3-nano-30b-a3b.json", 31_577_940_288, 3_580_076_352),
    "granite-4.0-h-tiny": ("granite-4.0-h-tiny-PARTIAL.json", 6_939_037_248, 1_465_470_528),
}


@pytest.mark.parametrize("name", sorted(PARAM_COUNTS))
def test_param_count_and_active_parameters(name):
    _, total, active = PARAM_COUNTS[name]
    spec = load_bundled(name)
    assert (spec.param_count, spec.active_param_count) == (total, active)


def test_gemma3n_param_count_is_keras_hubs():
    # keras-hub gemma3n_presets "params" of gemma3n_e4b(_it); the model card says 8B raw parameters
    assert load_bundled("gemma3n-e4b").param_count == 7_850_135_376


def test_minimax_fp8_weights_keep_embeddings_head_router_and_norms_in_bf16():
    from kvplan.fit import weights_per_gpu

    spec = load_bundled("minimax-m2.7")
    kept = 2 * 200_064 * 3_072 + 62 * 256 * 3_072 + 62 * 256 + 828_416
    assert spec.param_count_unquantized == kept == 1_278_796_288
    # FP8 with one fp32 scale per 128 × 128 block (weight_block_size [128, 128]) for the rest
    fp8 = spec.param_count - kept
    assert weights_per_gpu(spec, None, 1, 1) == (fp8 + -(-fp8 // 16_384) * 4 + 2 * kept, "fp8")


@pytest.mark.parametrize("name", sorted(PARAM_COUNTS))
def test_param_count_matches_transformers(name):
    import json

    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    fixture = PARAM_COUNTS[name][0]
    config = json.loads((HF / fixture).read_text())
    config.pop("quantization_config", None)
    config.pop("auto_map", None)
    if config["model_type"] == "kimi_k2":  # DeepseekV3ForCausalLM, as vLLM reads it
        config["model_type"] = "deepseek_v3"
    cfg = transformers.AutoConfig.for_model(**config)
    auto = transformers.AutoModelForImageTextToText if "vision_config" in config else transformers.AutoModelForCausalLM
    with torch.device("meta"):
        model = auto.from_config(cfg)
    params = sum(p.numel() for p in model.parameters())
    params += sum(b.numel() for n, b in model.named_buffers() if n.endswith("e_score_correction_bias"))
    assert load_bundled(name).param_count == params
