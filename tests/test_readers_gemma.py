"""Family tests for the Gemma 2/3/3n/4, GPT-OSS, Llama 4 and Cohere 2 config.json readers.

Each model_type is read from a real config.json (tests/fixtures/hf_configs, see SOURCES.yaml there) or, where
no copy of the published file is at hand, from a dict built from transformers 5.23's config class defaults; the
per-layer kinds and geometry are compared with what transformers itself builds from the same dict (layer_types,
``get_head_shapes``, ``kv_sharing_modes``), the byte counts are exact (arithmetic in the comments), and a tiny
model per family checks kvplan's bytes against the tensors transformers' ``StaticCache`` really allocates.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest

from kvplan.calc import estimate
from kvplan.errors import SpecError
from kvplan.loader import load_bundled
from kvplan.readers import REGISTRY, spec_from_hf_config

FIX = Path(__file__).resolve().parent / "fixtures" / "hf_configs"

TYPES = {
    "gemma2": "gemma",
    "gemma3": "gemma",
    "gemma3_text": "gemma",
    "gemma3n": "gemma",
    "gemma3n_text": "gemma",
    "gemma4": "gemma",
    "gemma4_text": "gemma",
    "gpt_oss": "gpt_oss",
    "llama4": "llama4",
    "llama4_text": "llama4",
    "cohere2": "cohere2",
}

# Gemma 3n E4B: transformers' Gemma3nTextConfig defaults are its "gemma3n_text-E4B style configuration"
# (docstring, checkpoint google/gemma-3n-E4B), matching Google's gemma library gm.nn.Gemma3n_E4B (embed 2048,
# 8 heads, 2 KV heads, head_dim 256, 35 layers of 4 sliding (512) then 1 global). num_kv_shared_layers 15.
GEMMA3N_E4B = {"model_type": "gemma3n", "text_config": {"model_type": "gemma3n_text", "torch_dtype": "bfloat16"}}
GEMMA3N_E4B_EXPLICIT = {
    "model_type": "gemma3n",
    "text_config": {
        "model_type": "gemma3n_text",
        "num_hidden_layers": 35,
        "num_attention_heads": 8,
        "num_key_value_heads": 2,
        "head_dim": 256,
        "hidden_size": 2048,
        "sliding_window": 512,
        "num_kv_shared_layers": 15,
        "max_position_embeddings": 32768,
        "layer_types": (["sliding_attention"] * 4 + ["full_attention"]) * 7,
        "intermediate_size": [16384] * 35,
        "activation_sparsity_pattern": [0.95] * 10 + [0.0] * 25,
        "altup_num_inputs": 4,
        "laurel_rank": 64,
        "hidden_size_per_layer_input": 256,
        "query_pre_attn_scalar": 256,
        "torch_dtype": "bfloat16",
    },
}

# Gemma 3 27B text_config as model_specs/gemma3-27b.yaml records it (62 layers, head_dim 128, window 1024);
# query_pre_attn_scalar 168 = 5376 / 32 is the attention scale, not the head dim.
GEMMA3_27B = {
    "model_type": "gemma3",
    "torch_dtype": "bfloat16",
    "text_config": {
        "model_type": "gemma3_text",
        "num_hidden_layers": 62,
        "num_attention_heads": 32,
        "num_key_value_heads": 16,
        "head_dim": 128,
        "hidden_size": 5376,
        "query_pre_attn_scalar": 168,
        "sliding_window": 1024,
        "sliding_window_pattern": 6,
    },
}


def fixture(name: str) -> dict:
    return json.loads((FIX / name).read_text(encoding="utf-8"))


def read(cfg: dict):
    return spec_from_hf_config(copy.deepcopy(cfg), "t/config.json")


def bytes_at(cfg: dict, seq: int) -> int:
    return estimate(read(cfg), seq).total_bytes


# --- transformers as the oracle ------------------------------------------------------------------


def hf_text_config(cfg: dict):
    """transformers' decoder config for the same dict (its class defaults and __post_init__ applied)."""
    pytest.importorskip("transformers")
    from transformers import AutoConfig

    rest = {k: v for k, v in copy.deepcopy(cfg).items() if k != "model_type"}
    return AutoConfig.for_model(cfg["model_type"], **rest).get_text_config(decoder=True)


def assert_matches_transformers(cfg: dict) -> None:
    """kvplan's per-layer kinds, heads, head_dims, windows and shared layers equal transformers'."""
    from transformers.configuration_utils import get_head_shapes

    spec = read(cfg)
    t = hf_text_config(cfg)
    n = t.num_hidden_layers
    heads, dims = get_head_shapes(t)
    heads = heads if isinstance(heads, list) else [heads] * n
    dims = dims if isinstance(dims, list) else [dims] * n
    kinds = {"full_attention": "full", "sliding_attention": "sliding", "chunked_attention": "chunked"}
    modes = t.kv_sharing_modes if hasattr(t, "kv_sharing_modes") else [None] * n
    assert spec.num_layers == n
    for i, layer in enumerate(spec.layers):
        want = kinds[t.layer_types[i]]
        if modes[i] == "reuse":
            assert (layer.kind, layer.attends_as) == ("shared", want), i
            producer = max(j for j in range(n) if modes[j] == "store" and t.layer_types[j] == t.layer_types[i])
            assert layer.shared_from == producer, i
            continue
        assert layer.kind == want, i
        assert (layer.num_kv_heads, layer.head_dim, layer.v_head_dim) == (heads[i], dims[i], dims[i]), i
        assert layer.k_eq_v == bool(getattr(t, "attention_k_eq_v", False) and want == "full"), i
        if want == "sliding":
            assert layer.window == t.sliding_window
        if want == "chunked":
            assert layer.window == t.attention_chunk_size
    assert spec.max_model_len == t.max_position_embeddings
    assert spec.num_q_heads == t.num_attention_heads


ORACLE_CASES = {
    "gemma2 (gemma-2-9b-it)": lambda: fixture("gemma2-9b-it.json"),
    "gemma2 defaults": lambda: {"model_type": "gemma2"},
    "gemma3_text (gemma-3-1b-it)": lambda: fixture("gemma3-1b-it.json"),
    "gemma3 (27B text_config)": lambda: GEMMA3_27B,
    "gemma3 defaults": lambda: {"model_type": "gemma3"},
    "gemma3_text pattern 3": lambda: {"model_type": "gemma3_text", "num_hidden_layers": 7, "sliding_window_pattern": 3},
    "gemma3n E4B defaults": lambda: GEMMA3N_E4B,
    "gemma3n E4B explicit": lambda: GEMMA3N_E4B_EXPLICIT,
    "gemma4 (26B-A4B)": lambda: fixture("gemma4-26b-a4b.json"),
    "gemma4 (31B)": lambda: fixture("gemma4-31b-it-nvfp4.json"),
    "gemma4 defaults": lambda: {"model_type": "gemma4_text"},
    "gemma4 last layer forced full": lambda: {
        "model_type": "gemma4_text",
        "num_hidden_layers": 4,
        "layer_types": ["sliding_attention", "full_attention", "sliding_attention", "sliding_attention"],
    },
    "gemma4 shared + k_eq_v": lambda: {
        "model_type": "gemma4_text",
        "num_hidden_layers": 12,
        "num_attention_heads": 8,
        "num_key_value_heads": 2,
        "num_global_key_value_heads": 1,
        "attention_k_eq_v": True,
        "num_kv_shared_layers": 4,
        "sliding_window": 512,
    },
    "gpt_oss (gpt-oss-120b)": lambda: fixture("gpt-oss-120b.json"),
    "gpt_oss (gpt-oss-20b)": lambda: fixture("gpt-oss-20b.json"),
    "gpt_oss defaults": lambda: {"model_type": "gpt_oss"},
    "llama4 (Scout)": lambda: fixture("llama4-scout-17b-16e-instruct.json"),
    "llama4_text defaults": lambda: {"model_type": "llama4_text"},
    "llama4_text no_rope_layers": lambda: {
        "model_type": "llama4_text",
        "num_hidden_layers": 4,
        "no_rope_layers": [1, 0, 1, 0],
    },
    "cohere2 defaults": lambda: {"model_type": "cohere2"},
    "cohere2 pattern 2": lambda: {"model_type": "cohere2", "num_hidden_layers": 6, "sliding_window_pattern": 2},
}


@pytest.mark.parametrize("case", list(ORACLE_CASES))
def test_per_layer_geometry_matches_transformers(case):
    assert_matches_transformers(ORACLE_CASES[case]())


def test_every_family_type_is_registered():
    for model_type, module in TYPES.items():
        assert REGISTRY[model_type] == module


# --- tiny models: kvplan's bytes equal the tensors transformers' StaticCache allocates ------------------

TINY = {
    "gemma2": {"num_hidden_layers": 4, "sliding_window": 4},
    "gemma3_text": {"num_hidden_layers": 7, "sliding_window": 4, "sliding_window_pattern": 3},
    "gemma3n_text": {
        "num_hidden_layers": 10,
        "sliding_window": 4,
        "num_kv_shared_layers": 5,
        "vocab_size_per_layer_input": 64,
        "hidden_size_per_layer_input": 8,
        "laurel_rank": 4,
        "altup_num_inputs": 2,
    },
    "gemma4_text": {
        "num_hidden_layers": 8,
        "global_head_dim": 16,
        "num_global_key_value_heads": 1,
        "attention_k_eq_v": True,
        "sliding_window": 4,
        "num_kv_shared_layers": 2,
        "hidden_size_per_layer_input": 0,
    },
    "gpt_oss": {"num_hidden_layers": 4, "sliding_window": 4, "num_local_experts": 2, "num_experts_per_tok": 1},
    "llama4_text": {
        "num_hidden_layers": 4,
        "attention_chunk_size": 4,
        "num_local_experts": 2,
        "intermediate_size_mlp": 32,
    },
    "cohere2": {"num_hidden_layers": 8, "sliding_window": 4},
}


@pytest.mark.parametrize("model_type", list(TINY))
def test_bytes_equal_transformers_static_cache(model_type):
    torch = pytest.importorskip("torch")
    pytest.importorskip("transformers")
    from transformers import AutoConfig, AutoModelForCausalLM, StaticCache

    cfg = {
        "vocab_size": 64,
        "hidden_size": 32,
        "intermediate_size": 32,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "head_dim": 8,
        **TINY[model_type],
    }
    c = AutoConfig.for_model(model_type, **cfg)
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(c, dtype=torch.bfloat16).eval()
    seq = 11  # longer than every window / chunk (4)
    cache = StaticCache(config=c, max_cache_len=seq)
    with torch.no_grad():
        model(torch.randint(0, 64, (1, seq)), past_key_values=cache, use_cache=True)
    allocated = 0
    for layer in cache.layers:
        if getattr(layer, "keys", None) is not None:
            allocated += layer.keys.numel() * layer.keys.element_size()
            allocated += layer.values.numel() * layer.values.element_size()
    spec = read({"model_type": model_type, **cfg, "torch_dtype": "bfloat16"})
    assert estimate(spec, seq).total_bytes == allocated


# --- Gemma 2 ----------------------------------------------------------------------------------------


def test_gemma2_9b():
    cfg = fixture("gemma2-9b-it.json")
    s = read(cfg)
    assert (s.num_layers, s.num_q_heads, s.num_kv_heads, s.head_dim) == (42, 16, 8, 256)  # not 224 (q scalar)
    assert s.layer_kinds == ("sliding", "full") * 21 and s.sliding_window == 4096 and s.max_model_len == 8192
    # 21 full × 8192 tok × 2×8×256×2 B + 21 sliding × 4096 × 8,192 B
    assert bytes_at(cfg, 8192) == 21 * 8192 * 8192 + 21 * 4096 * 8192 == 2_113_929_216
    for seq in (1, 4096, 131072):
        assert bytes_at(cfg, seq) == estimate(load_bundled("gemma2-9b"), seq).total_bytes


def test_gemma2_defaults():
    s = read({"model_type": "gemma2"})
    # Gemma2Config: 26 layers, 8 q heads, 4 KV heads (not 8), head_dim 256, window 4096, 8,192 positions
    assert (s.num_layers, s.num_q_heads, s.num_kv_heads, s.head_dim, s.sliding_window) == (26, 8, 4, 256, 4096)
    assert s.max_model_len == 8192 and s.dtype == "bf16"  # float32 default: vLLM serves gemma2 in bf16
    # 13 full × 100 tok × 2×4×256×2 B + 13 sliding × 100 × 4,096 B
    assert bytes_at({"model_type": "gemma2"}, 100) == 26 * 100 * 4096


# --- Gemma 3 ----------------------------------------------------------------------------------------


def test_gemma3_1b_text():
    cfg = fixture("gemma3-1b-it.json")
    s = read(cfg)
    assert (s.num_layers, s.num_kv_heads, s.head_dim, s.sliding_window, s.max_model_len) == (26, 1, 256, 512, 32768)
    assert [i for i, k in enumerate(s.layer_kinds) if k == "full"] == [5, 11, 17, 23]
    # 4 full × 8192 tok × 2×1×256×2 B + 22 sliding × 512 × 1,024 B
    assert bytes_at(cfg, 8192) == 4 * 8192 * 1024 + 22 * 512 * 1024 == 45_088_768


def test_gemma3_multimodal_text_config():
    s = read(GEMMA3_27B)
    assert s.head_dim == 128 and s.layer_kinds.count("full") == 10 and s.max_model_len == 131072
    # 10 full × 8192 tok × 2×16×128×2 B + 52 sliding × 1024 × 8,192 B
    assert bytes_at(GEMMA3_27B, 8192) == 10 * 8192 * 8192 + 52 * 1024 * 8192 == 1_107_296_256
    for seq in (1, 4096, 131072):
        assert bytes_at(GEMMA3_27B, seq) == estimate(load_bundled("gemma3-27b"), seq).total_bytes


def test_gemma3_defaults_without_text_config():
    s = read({"model_type": "gemma3"})
    # Gemma3TextConfig: 26 layers, 4 KV heads × 256, window 4096, pattern 6, 131,072 positions
    assert (s.num_layers, s.num_kv_heads, s.head_dim, s.sliding_window, s.max_model_len) == (26, 4, 256, 4096, 131072)
    assert s.layer_kinds.count("full") == 4


# --- Gemma 3n ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("cfg", [GEMMA3N_E4B, GEMMA3N_E4B_EXPLICIT], ids=["defaults", "explicit"])
def test_gemma3n_e4b(cfg):
    s = read(cfg)
    assert (s.num_layers, s.num_q_heads, s.num_kv_heads, s.head_dim, s.sliding_window) == (35, 8, 2, 256, 512)
    assert s.max_model_len == 32768
    shared = [i for i, layer in enumerate(s.layers) if layer.kind == "shared"]
    assert shared == list(range(20, 35))
    # sliding shared layers read layer 18, full ones layer 19: transformers' rule, and vLLM gemma3n.py's
    # first_shared - 2 (sliding) / first_shared - 1 (full) give the same layers here
    assert {(s.layers[i].attends_as, s.layers[i].shared_from) for i in shared} == {("sliding", 18), ("full", 19)}
    # cached: 4 full (4, 9, 14, 19) + 16 sliding; 2×2×256×2 = 2,048 B per token and layer
    # 4 full × 8192 tok × 2,048 B + 16 sliding × 512 × 2,048 B
    assert bytes_at(cfg, 8192) == 4 * 8192 * 2048 + 16 * 512 * 2048 == 83_886_080


def test_gemma3n_per_layer_keys_do_not_change_geometry():
    cfg = copy.deepcopy(GEMMA3N_E4B_EXPLICIT)
    cfg["text_config"]["intermediate_size"] = [8192] * 20 + [16384] * 15
    cfg["text_config"]["activation_sparsity_pattern"] = [0.0] * 35
    assert bytes_at(cfg, 8192) == bytes_at(GEMMA3N_E4B_EXPLICIT, 8192)


# --- Gemma 4 ----------------------------------------------------------------------------------------


def test_gemma4_26b_a4b_issue_example_without_k_eq_v():
    cfg = fixture("gemma4-26b-a4b.json")
    del cfg["text_config"]["attention_k_eq_v"]
    s = read(cfg)
    full = [layer for layer in s.layers if layer.kind == "full"]
    # without attention_k_eq_v, transformers keeps num_key_value_heads (8) on the 512-wide full layers
    assert len(full) == 5 and {(x.num_kv_heads, x.head_dim, x.k_eq_v) for x in full} == {(8, 512, False)}
    # 25 sliding × 1024 tok × 2×8×256×2 B + 5 full × 8192 × 2×8×512×2 B
    assert estimate(s, 8192).total_bytes == 25 * 1024 * 8192 + 5 * 8192 * 16384 == 880_803_840
    assert_matches_transformers(cfg)


def test_gemma4_26b_a4b_published_config():
    cfg = fixture("gemma4-26b-a4b.json")
    s = read(cfg)
    assert cfg["text_config"]["attention_k_eq_v"] is True  # the published file sets it
    full = [i for i, layer in enumerate(s.layers) if layer.kind == "full"]
    assert full == [5, 11, 17, 23, 29]
    assert {(s.layers[i].num_kv_heads, s.layers[i].head_dim, s.layers[i].k_eq_v) for i in full} == {(2, 512, True)}
    assert {(x.num_kv_heads, x.head_dim) for x in s.layers if x.kind == "sliding"} == {(8, 256)}
    # 25 sliding × 1024 tok × 2×8×256×2 B + 5 full × 8192 × 2×2×512×2 B (K and V both kept)
    assert bytes_at(cfg, 8192) == 25 * 1024 * 8192 + 5 * 8192 * 4096 == 377_487_360


def test_gemma4_31b():
    cfg = fixture("gemma4-31b-it-nvfp4.json")
    # 50 sliding × 1024 tok × 2×16×256×2 B + 10 full × 8192 × 2×4×512×2 B
    assert bytes_at(cfg, 8192) == 50 * 1024 * 16384 + 10 * 8192 * 8192 == 1_509_949_440


def test_gemma4_saved_per_layer_config_is_the_geometry():
    pytest.importorskip("transformers")
    from transformers import Gemma4TextConfig

    text = fixture("gemma4-26b-a4b.json")["text_config"]
    saved = Gemma4TextConfig(**{k: v for k, v in text.items() if k != "model_type"}).to_dict()
    assert "per_layer_config" in saved and "global_head_dim" not in saved  # transformers 5.x saves overrides
    s_saved = read(saved)
    s_orig = read(text)
    assert s_saved.layers == s_orig.layers
    # with per_layer_config present, global_head_dim is not used (transformers pops and ignores it)
    saved["global_head_dim"] = 1024
    assert read(saved).layers == s_orig.layers
    assert_matches_transformers(saved)


def test_gemma4_per_layer_config_refuses_other_overrides():
    cfg = {"model_type": "gemma4_text", "num_hidden_layers": 6, "per_layer_config": {"5": {"sliding_window": 8}}}
    with pytest.raises(SpecError, match=r"per_layer_config\['5'\] overrides 'sliding_window'"):
        read(cfg)
    with pytest.raises(SpecError, match="not a layer index"):
        read({"model_type": "gemma4_text", "num_hidden_layers": 6, "per_layer_config": {"6": {"head_dim": 8}}})


def test_gemma4_bidirectional_all_is_refused():
    with pytest.raises(SpecError, match="use_bidirectional_attention is 'all'"):
        read({"model_type": "gemma4_text", "use_bidirectional_attention": "all"})
    read({"model_type": "gemma4_text", "use_bidirectional_attention": "vision"})  # text tokens stay causal


# --- sliding_window_pattern where the class does not read it ------------------------------------------


@pytest.mark.parametrize(
    "cfg",
    [
        {"model_type": "gemma4_text", "sliding_window_pattern": 2},
        {"model_type": "gemma2", "sliding_window_pattern": 6},
        {"model_type": "gemma3n_text", "sliding_window_pattern": 6, "num_kv_shared_layers": 0},
        {
            "model_type": "gemma3_text",
            "num_hidden_layers": 2,
            "sliding_window_pattern": 6,
            "layer_types": ["full_attention", "full_attention"],
        },
        {
            "model_type": "cohere2",
            "num_hidden_layers": 4,
            "sliding_window_pattern": 4,
            "layer_types": ["full_attention"] * 4,
        },
    ],
)
def test_ignored_sliding_window_pattern_that_disagrees_is_refused(cfg):
    with pytest.raises(SpecError, match="sliding_window_pattern"):
        read(cfg)


def test_ignored_sliding_window_pattern_that_agrees_is_accepted():
    assert read({"model_type": "gemma4_text", "sliding_window_pattern": 6}).layer_kinds.count("full") == 5
    assert read({"model_type": "gemma2", "sliding_window_pattern": 2}).layer_kinds.count("full") == 13


def test_sliding_window_pattern_outside_gemma3_is_not_every_layer_sliding():
    # the plain decoder reader does not read it: refused, never "every layer sliding"
    with pytest.raises(SpecError, match="sliding_window_pattern is set"):
        read(
            {
                "model_type": "mistral",
                "num_hidden_layers": 4,
                "num_attention_heads": 8,
                "hidden_size": 64,
                "sliding_window": 16,
                "sliding_window_pattern": 4,
            }
        )


def test_gemma_sliding_layers_need_a_window():
    with pytest.raises(SpecError, match="sliding_window is null"):
        read({"model_type": "gemma3_text", "sliding_window": None})


# --- GPT-OSS ----------------------------------------------------------------------------------------


def test_gpt_oss_120b():
    cfg = fixture("gpt-oss-120b.json")
    s = read(cfg)
    assert "torch_dtype" not in cfg and "dtype" not in cfg and s.dtype == "bf16"
    assert s.layer_kinds == ("sliding", "full") * 18 and s.sliding_window == 128
    assert (s.num_kv_heads, s.head_dim) == (8, 64)  # 2880 / 64 = 45 would be wrong
    # 18 full × 8192 tok × 2×8×64×2 B + 18 sliding × 128 × 2,048 B
    assert bytes_at(cfg, 8192) == 18 * 8192 * 2048 + 18 * 128 * 2048 == 306_708_480


def test_gpt_oss_20b_matches_bundled():
    cfg = fixture("gpt-oss-20b.json")
    for seq in (1, 4096, 131072):
        assert bytes_at(cfg, seq) == estimate(load_bundled("gpt-oss-20b"), seq).total_bytes


def test_gpt_oss_layer_types_vllm_would_not_serve_are_refused():
    cfg = {"model_type": "gpt_oss", "num_hidden_layers": 4, "layer_types": ["full_attention", "sliding_attention"] * 2}
    with pytest.raises(SpecError, match="even-sliding / odd-full"):
        read(cfg)


# --- Llama 4 ----------------------------------------------------------------------------------------


def test_llama4_scout():
    cfg = fixture("llama4-scout-17b-16e-instruct.json")
    s = read(cfg)
    assert [i for i, k in enumerate(s.layer_kinds) if k == "full"] == list(range(3, 48, 4))
    assert s.attention_chunk_size == 8192 and s.max_model_len == 10485760
    # 48 layers × 8192 tok × 2×8×128×2 B (the chunk is 8,192: every layer keeps all 8,192)
    assert bytes_at(cfg, 8192) == 48 * 8192 * 4096 == 1_610_612_736
    # 12 full × 131072 tok × 4,096 B + 36 chunked × 8192 × 4,096 B
    assert bytes_at(cfg, 131072) == 12 * 131072 * 4096 + 36 * 8192 * 4096 == 7_650_410_496
    for seq in (1, 4096, 131072):
        assert bytes_at(cfg, seq) == estimate(load_bundled("llama4-scout"), seq).total_bytes


def test_llama4_explicit_no_rope_layers_and_no_chunking():
    explicit = {"model_type": "llama4_text", "no_rope_layers": [1, 1, 1, 0] * 12}
    assert read(explicit).layers == read({"model_type": "llama4_text"}).layers
    # vLLM llama4.py: no attention_chunk_size -> plain attention on every layer
    assert set(read({"model_type": "llama4_text", "attention_chunk_size": None}).layer_kinds) == {"full"}
    with pytest.raises(SpecError, match="layer_types disagrees with no_rope_layers"):
        read({"model_type": "llama4_text", "num_hidden_layers": 4, "layer_types": ["full_attention"] * 4})
    with pytest.raises(SpecError, match="no_rope_layers must list at least"):
        read({"model_type": "llama4_text", "num_hidden_layers": 4, "no_rope_layers": [1, 0]})


# --- Cohere 2 ---------------------------------------------------------------------------------------


def test_cohere2_defaults():
    cfg = {"model_type": "cohere2", "torch_dtype": "bfloat16"}
    s = read(cfg)
    # Cohere2Config: 40 layers, 64 heads, KV heads = heads, head_dim 8192/64 = 128, window 4096, pattern 4
    assert (s.num_layers, s.num_kv_heads, s.head_dim, s.sliding_window, s.max_model_len) == (40, 64, 128, 4096, 8192)
    assert [i for i, k in enumerate(s.layer_kinds) if k == "full"] == list(range(3, 40, 4))
    # 10 full × 8192 tok × 2×64×128×2 B + 30 sliding × 4096 × 32,768 B
    assert bytes_at(cfg, 8192) == 10 * 8192 * 32768 + 30 * 4096 * 32768 == 6_710_886_400


def test_cohere2_original_release_keys():
    cfg = {"model_type": "cohere2", "order_of_interleaved_layers": "local_attn_first", "sliding_window_pattern": 4}
    assert read(cfg).layers == read({"model_type": "cohere2"}).layers
    with pytest.raises(SpecError, match="order_of_interleaved_layers"):
        read({"model_type": "cohere2", "order_of_interleaved_layers": "global_attn_first"})


# --- bundled specs equal the reader on their config ----------------------------------------------------

BUNDLED = {
    "gemma4-26b-a4b": lambda: fixture("gemma4-26b-a4b.json"),
    "gemma4-31b": lambda: fixture("gemma4-31b-it-nvfp4.json"),
    "gemma3n-e4b": lambda: GEMMA3N_E4B_EXPLICIT,
}


@pytest.mark.parametrize("name", list(BUNDLED))
def test_bundled_spec_equals_reader(name):
    spec = load_bundled(name)
    hf = read(BUNDLED[name]())
    assert hf.layers == spec.layers
    assert (hf.max_model_len, hf.dtype, hf.num_q_heads, hf.hidden_size) == (
        spec.max_model_len,
        spec.dtype,
        spec.num_q_heads,
        spec.hidden_size,
    )
    for seq in (1, 4096, 131072):
        assert estimate(hf, seq).total_bytes == estimate(spec, seq).total_bytes


def test_bundled_gemma_bytes():
    # gemma4-26b-a4b: 5 full × 131072 × 4,096 B + 25 sliding × 1024 × 8,192 B
    assert estimate(load_bundled("gemma4-26b-a4b"), 131072).total_bytes == 5 * 131072 * 4096 + 25 * 1024 * 8192
    # gemma4-31b: 10 full × 131072 × 8,192 B + 50 sliding × 1024 × 16,384 B
    assert estimate(load_bundled("gemma4-31b"), 131072).total_bytes == 10 * 131072 * 8192 + 50 * 1024 * 16384
    # gemma3n-e4b: 4 full × 131072 × 2,048 B + 16 sliding × 512 × 2,048 B (15 shared layers: 0 B)
    assert estimate(load_bundled("gemma3n-e4b"), 131072).total_bytes == 4 * 131072 * 2048 + 16 * 512 * 2048
