"""Differential test: kvplan's config.json readers against transformers 5.23 reading the same file.

For every model_type in :data:`kvplan.readers.REGISTRY` and every fixture config.json of a registered
model_type (``tests/fixtures/hf_configs*/``), kvplan's spec is compared layer by layer with what transformers
builds (:mod:`tests.oracle`: a meta-device model, a 2-token forward into a ``StaticCache``):

- the layer kind (transformers' cache layer type and token mixer, mapped by :func:`transformers_kind`);
- H_kv, head_dim, v_head_dim and the window of every attention layer (from the K/V tensors the attention
  module hands to the cache); the latent widths of MLA layers; the shapes of recurrent states;
- bytes: kvplan's per-layer bytes and ``estimate(...).bytes_per_request`` at ``kv_dtype='bf16'`` against
  the byte size of transformers' StaticCache tensors at ``max_cache_len = N``.

Where kvplan follows vLLM rather than transformers, the difference is listed in :data:`KNOWN_DIFFERENCES`
with its reason and is applied explicitly (a tolerated difference is translated, then compared exactly); a
model-specific entry that no fixture exercises any more fails as stale. Model types transformers 5.23 cannot
build are listed in :data:`NO_ORACLE` and the test asserts that they really cannot be built.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import pytest

from kvplan.calc import (
    estimate,
    layer_compressed_bytes,
    layer_cross_bytes,
    layer_state_bytes,
    layer_token_bytes,
    tokens_cached,
)
from kvplan.dtypes import get_kv_dtype
from kvplan.readers import REGISTRY, spec_from_hf_config
from kvplan.readers.base import NO_CACHE_TYPES, HFConfig
from kvplan.readers.wrappers import text_model_type
from kvplan.specs import HIDDEN_KIND, KV_HEAD_KINDS, STATE_KINDS, LayerSpec, ModelSpec
from tests.oracle import META_STANDINS, OracleLayer, OracleReading, OracleUnavailable, read_with_transformers

FIXTURE_DIRS = [Path(__file__).parent / "fixtures" / "hf_configs"]

# Tokens per request for the comparisons: above every window and chunk in the fixtures (largest: Llama 4's
# 8,192-token chunk), so sliding layers show their cap; and one below most windows, for one fixture per kind.
N_LARGE = 32768
N_SMALL = 1000

# Differences kvplan keeps on purpose (it plans for vLLM serving). id -> (model_types, or None for every
# model_type, reason). Applied by name in the comparisons below.
KNOWN_DIFFERENCES: dict[str, tuple[tuple[str, ...] | None, str]] = {
    "conv-state-window": (
        None,
        "vLLM's MambaStateShapeCalculator keeps d_conv - 1 conv columns per channel (the newest input is not "
        "stored); transformers' LinearAttentionLayer keeps d_conv (kvplan/specs.py StateConfig)",
    ),
    "gdn-recurrent-layout": (
        None,
        "vLLM's gated_delta_net_state_shape orders the recurrent state (H_v, head_v_dim, head_k_dim); "
        "transformers' (H_v, head_k_dim, head_v_dim): the same elements, transposed",
    ),
    "falcon-kv-heads-expanded": (
        ("falcon",),
        "with new_decoder_architecture, transformers' FalconAttention repeats each of the num_kv_heads K/V heads "
        "to all num_attention_heads before caching (modeling_falcon.py), so its cache holds H_q heads; vLLM's "
        "falcon.py caches num_kv_heads (8 in Falcon-40B), which kvplan follows",
    ),
    "mimo-window": (
        ("mimo_v2_flash",),
        "transformers' MiMoV2FlashConfig caches sliding_window_size + 1 tokens (the SGLang reference attends to "
        "the window plus the query); vLLM 0.33's mimo_v2.py passes sliding_window_size as the layer's window, "
        "which kvplan follows",
    ),
    "dynamic-sliding-window": (
        ("deepseek_v4", "inkling_text", "inkling2_text"),
        "DeepSeek-V4 and Inkling are read from transformers' DynamicCache (tests/oracle.py DYNAMIC_CACHE_TYPES), whose "
        "sliding layers keep window - 1 tokens after a forward (DynamicSlidingWindowLayer: the next token is "
        "appended before attending); kvplan counts the window, as vLLM's sliding specs hold it while decoding",
    ),
    "v4-sliding-kv-copy": (
        ("deepseek_v4",),
        "transformers caches DeepSeek-V4's sliding-only layers in a plain DynamicSlidingWindowLayer, which stores "
        "the one K=V vector twice (keys and values); its CSA/HCA cache layers and vLLM 0.33's DeepseekV4SWACache "
        "(a SlidingWindowMLASpec: 'only has one vector instead of K + V') store it once, which kvplan follows",
    ),
    "v4-compressor-state": (
        ("deepseek_v4",),
        "transformers keeps a V4 compressor's unfinished window (the last S mod m tokens' kv and gate projections, "
        "coff x head_dim wide each, plus the CSA overlap) in the model dtype; vLLM 0.33 keeps a fixed fp32 ring of "
        "coff x m tokens of both (vllm/models/deepseek_v4/compressor.py CompressorStateCache: state_dim = "
        "2 * coff * head_dim, sliding_window = coff * compress_ratio, float32), which kvplan follows: the widths "
        "are checked against transformers' buffers, the bytes are vLLM's ring",
    ),
    "cpu-float32-run": (
        ("reformer",),
        "Reformer is run for real on the CPU in float32 (tests/oracle.py CPU_RUN_TYPES: its forward reads tensor "
        "values as numbers, and its CPU layer norm refuses bfloat16), so its cached hidden states are float32 there; "
        "they are the model's activations, kept in the model dtype, which kvplan prices (2 bytes in the comparison)",
    ),
    "recurrent-state-dtype": (
        None,
        "transformers stores the recurrent state in the dtype its kernel returns (float32); vLLM stores it in "
        "mamba_ssm_cache_dtype (config.json or the model dtype), which kvplan follows",
    ),
}

# Registered model types transformers 5.23 has no class for: model_type -> reason. The test asserts the oracle
# really cannot build them, so an entry goes stale (and fails) once transformers can.
NO_ORACLE: dict[str, str] = {
    "openelm": "Apple's OpenELM ships remote code only; transformers 5.23 has no OpenELM class",
    "minimax_m1": "MiniMax-M1 ships remote code only; transformers' MiniMaxConfig (MiniMax-Text-01) does not "
    "read its attn_type_list",
    "minimax": "transformers 5.23's MiniMax keeps a cache of its own and refuses a StaticCache",
    "minimax_text_01": "not a transformers model_type (MiniMax-Text-01's remote-code name)",
    "bamba": "transformers 5.23's Bamba forward fails with a StaticCache on meta (get_seq_length on its "
    "linear-attention layers)",
}

# Registered model types for which no public copy of a real config.json was found (two searches of public
# repositories, see tests/fixtures/hf_configs/SOURCES.yaml "not_found"): they are compared on the config
# class's own defaults, ``{"model_type": X}``, which the class docstring ties to a released model. This
# checks that the reader applies transformers' defaults for every absent key; it is no substitute for a real
# file, and each entry should go once one is found (the test fails when a real fixture exists).
CLASS_DEFAULT_FIXTURES: dict[str, str] = {
    "RefinedWeb": "the 2023 Falcon-40B name (FalconConfig); only copies with keys added by their copiers found",
    "bamba": "BambaConfig defaults (ibm-ai-platform/Bamba-9B); no published file found",
    "cohere2": "Cohere2Config defaults (Command R7B); no published file found",
    "gemma3n": "Gemma3nConfig defaults (google/gemma-3n-E4B): 35 layers, 15 KV-shared; no published file found",
    "gemma3n_text": "Gemma3nTextConfig defaults (google/gemma-3n-E4B); no published file found",
    "glm4": "Glm4Config defaults (THUDM/GLM-4-9B-0414); no published file found",
    "minimax": "MiniMaxConfig defaults (MiniMaxAI/MiniMax-Text-01); no published file found",
    "minimax_text_01": "the MiniMax-Text-01 name, read as MiniMaxConfig; no published file found",
    "olmo3": "Olmo3Config defaults (allenai/Olmo-3-7B); no published file found",
    "zamba2": "Zamba2Config defaults (Zyphra/Zamba2-2.7B); no published file found",
    # plain decoders added with decoder.py's wider _DEFAULTS table (the class docstring's checkpoint named);
    # "searched" = find_string over the stored public files found only test dicts or config print-outs
    "gemma": "GemmaConfig defaults (google/gemma-7b); searched: only GemmaConfig print-outs, not the file",
    "granitemoe": "GraniteMoeConfig defaults (the docstring names ibm-granite/granite-speech-3.2-8b); not searched",
    "granitemoeshared": "GraniteMoeSharedConfig defaults (docstring: ibm-granite/granite-speech-3.2-8b); not searched",
    "granite_swa": "GraniteSWAConfig defaults (ibm-granite/granite-swash-2b): every 4th layer full, window 128; "
    "not searched",
    "granitemoe_swa": "GraniteMoeSWAConfig defaults (ibm-granite/granite-swash-3b-a600m); not searched",
    "olmo": "OlmoConfig defaults (allenai/OLMo-7B-hf); searched: none found",
    "olmoe": "OlmoeConfig defaults (allenai/OLMoE-1B-7B-0924); searched: only trimmed test dicts",
    "phimoe": "PhimoeConfig defaults (microsoft/Phi-3.5-MoE-instruct), sliding_window null; not searched",
    "stablelm": "StableLmConfig defaults (stabilityai/stablelm-3b-4e1t); not searched",
    "cohere": "CohereConfig defaults (CohereForAI/c4ai-command-r-v01); not searched",
    "internlm3": "InternLM3Config defaults (internlm/internlm3-8b-instruct); not searched",
    "exaone4": "Exaone4Config defaults (LGAI-EXAONE/EXAONE-4.0-32B): 3 sliding + 1 full, window 4096; "
    "searched: only test dicts",
    "smollm3": "SmolLM3Config defaults (HuggingFaceTB/SmolLM3-3B); searched: only trimmed or hand-edited dicts",
    "seed_oss": "SeedOssConfig defaults (ByteDance-Seed/Seed-OSS-36B-Instruct); not searched",
    "ministral3": "Ministral3Config defaults (mistralai/Ministral-3-8B-Base-2512); not searched",
    "ernie4_5": "Ernie4_5Config defaults (baidu/ERNIE-4.5-0.3B-PT); not searched",
    "ernie4_5_moe": "Ernie4_5_MoeConfig defaults (baidu/ERNIE-4.5-21B-A3B-PT); not searched",
    "helium": "HeliumConfig defaults (kyutai/helium-1-preview); not searched",
    "apertus": "ApertusConfig defaults (swiss-ai/Apertus-8B-Instruct-2509); not searched",
    "arcee": "ArceeConfig defaults (arcee-ai/AFM-4.5B); not searched",
    "glm": "GlmConfig defaults (THUDM/glm-4-9b-chat); not searched",
    "vaultgemma": "VaultGemmaConfig defaults (google/vaultgemma-1b): alternating sliding/full, window 4096; "
    "not searched",
    "gpt_neox": "GPTNeoXConfig defaults (EleutherAI/gpt-neox-20b); searched: only GPTNeoXConfig print-outs",
    "persimmon": "PersimmonConfig defaults (adept/persimmon-8b-base); not searched",
    "cwm": "CwmConfig defaults (facebook/cwm): layers 0, 4, 8 ... full, window 8192; not searched",
    "afmoe": "AfmoeConfig defaults (Arcee's AFMoE): every 4th layer full, window 1024; not searched",
    "exaone_moe": "ExaoneMoeConfig defaults (LGAI-EXAONE/K-EXAONE-236B-A23B); not searched",
    "hyperclovax": "HyperCLOVAXConfig defaults (naver-hyperclovax/HyperCLOVAX-SEED-Think-14B); not searched",
    "hy_v3": "HYV3Config defaults (tencent/Hy3-preview); not searched",
    "jais2": "Jais2Config defaults (inceptionai/Jais-2-8B-Chat); not searched",
    "flex_olmo": "FlexOlmoConfig defaults (allenai/FlexOlmo-7x7B-1T); not searched",
    "mellum": "MellumConfig defaults (JetBrains/Mellum2-12B-A2.5B-Base): a window but all layers full; not searched",
    "laguna": "LagunaConfig defaults (poolside/laguna-XS.2): a window but all layers full; not searched",
    "nanochat": "NanoChatConfig defaults (karpathy/nanochat-d32); not searched",
    "solar_open": "SolarOpenConfig defaults (upstage/Solar-Open-100B); not searched",
    "iquestcoder": "IQuestCoderConfig defaults (IQuestLab/IQuest-Coder-V1-40B-Instruct); not searched",
    "gpt-sw3": "the GPT-SW3 name, read as GPT2Config (its defaults: GPT-2 small); not searched",
    # issue 17: wrapper text configs and 2025-2026 types without a public real config.json found
    "qwen2_vl_text": "Qwen2VLTextConfig defaults (the text model of Qwen2-VL-72B); not searched (qwen2.5-vl-7b.json "
    "covers the flat Qwen-VL layout)",
    # the audit of issue 17: types whose meta forward needed a stand-in (tests/oracle.py META_STANDINS)
    "jetmoe": "JetMoeConfig defaults (its docstring: jetmoe/jetmoe-8b); searched ('model_type': 'jetmoe', "
    "JetMoEForCausalLM): only transformers' own sources and test dicts",
    "longcat_flash": "LongcatFlashConfig defaults (meituan-longcat/LongCat-Flash-Chat); searched ('zero_expert_num'): "
    "only trimmed subsets (a Swift test's kLongcatFlashConfigJSON, LongCat-Flash-Lite's ngram variant)",
    # caches that are not K/V of the usual kinds (kvplan/readers/stateful.py)
    "xlstm": "xLSTMConfig defaults (NX-AI/xLSTM-7b's geometry: 32 blocks, 8 heads, hidden 4096); searched ('model_type': "
    "'xlstm'): only hand-written dicts and a config sweep table, not the file",
    "xlnet": "XLNetConfig defaults (xlnet-large-cased's geometry, mem_len 512); searched ('model_type': 'xlnet'): only "
    "printed XLNetConfig objects (xlnet-base-cased, mem_len null) and bert4torch's rewritten keys",
    "zaya": "ZayaConfig defaults (its docstring: Zyphra/ZAYA1-8B); not searched",
    "inkling_text": "InklingTextConfig defaults (the text model of Inkling); not searched",
    "inkling2_text": "Inkling2TextConfig defaults (its docstring: thinkingmachines/Inkling-2-Small-MXFP8); not searched",
}

# Token mixer class name (substring) of a transformers recurrent layer -> kvplan state kind. First match wins.
STATE_MIXERS: tuple[tuple[str, str], ...] = (
    ("Mamba2Mixer", "mamba2"),  # Mamba2Mixer, NemotronHMamba2Mixer
    ("GraniteMoeHybridMambaLayer", "mamba2"),
    ("BambaMixer", "mamba2"),
    ("FalconH1Mixer", "mamba2"),
    ("Zamba2MambaMixer", "mamba2"),
    ("MambaMixer", "mamba"),  # MambaMixer, JambaMambaMixer, FalconMambaMixer, ZambaMambaMixer
    ("GatedDeltaNet", "gdn"),  # Qwen3-Next, Qwen3.5, OLMo-Hybrid
    ("DeltaAttention", "gdn"),  # Kimi Linear KDA: per-head q/k/v convs and an H x dk x dv state, as GDN
    ("ShortConv", "short_conv"),  # LFM2
    ("LightningAttention", "linear_attention"),  # MiniMax-Text-01
    ("RecurrentGemmaRecurrentBlock", "rglru"),  # RecurrentGemma's RG-LRU block (state held by the module)
)

# transformers' layer types of the caches a model returns itself (tests/oracle.py OWN_CACHE_TYPES) -> kvplan kind.
OWN_CACHE_KINDS = {"rwkv_state": "rwkv4", "mlstm_state": "mlstm", "hidden_states": HIDDEN_KIND}

# State kinds whose tensors kvplan keeps exactly as transformers does (kvplan/specs.py TRANSFORMERS_STATE_KINDS, less
# rglru, compared above with the vLLM-shaped kinds): compared tensor by tensor, shape and dtype, in transformers' order.
EXACT_STATE_KINDS = ("rwkv4", "mlstm", "cca", "sconv")

_TF_DTYPES = {"bfloat16": "bf16", "float16": "fp16", "float32": "fp32"}
_ITEMSIZE = {"bf16": 2, "fp16": 2, "fp32": 4}


# --- fixtures and parametrization (at collection time) ----------------------------------------------------


@dataclass(frozen=True, eq=False)
class Fixture:
    path: Path
    config: dict
    model_type: str  # kvplan's reading: text_config.model_type first (HFConfig)
    outer_type: str

    @property
    def id(self) -> str:
        return f"{self.path.parent.name}/{self.path.stem}"


BROKEN_FIXTURES: list[str] = []  # fixture files that are not a JSON object (a test fails on them)


def _load_fixtures() -> list[Fixture]:
    out = []
    for d in FIXTURE_DIRS:
        for path in sorted(d.glob("*.json")):
            try:
                config = json.loads(path.read_text())
            except (OSError, ValueError) as e:
                BROKEN_FIXTURES.append(f"{path.name}: {e}")
                continue
            if not isinstance(config, dict):
                BROKEN_FIXTURES.append(f"{path.name}: not a JSON object")
                continue
            model_type = text_model_type(config)[1] or HFConfig(config, str(path)).model_type  # as kvplan reads it
            out.append(Fixture(path, config, model_type, str(config.get("model_type"))))
    return out


FIXTURES = _load_fixtures()
_REAL_TYPES = {t for f in FIXTURES for t in (f.model_type, f.outer_type)}
FIXTURES += [
    Fixture(Path("class-defaults") / f"{t}.json", {"model_type": t}, t, t)
    for t in CLASS_DEFAULT_FIXTURES
    if t not in _REAL_TYPES
]
# Multimodal wrappers with no public config.json found, compared on the wrapper class's defaults with a text_config
# that names its text model as the published file does: wrapper -> (config, why). kvplan reads them through the
# text model's reader (kvplan/readers/wrappers.py); transformers builds the wrapper's text config.
WRAPPER_DEFAULT_FIXTURES: dict[str, tuple[dict, str]] = {
    "exaone4_5": (
        {"model_type": "exaone4_5", "text_config": {"model_type": "exaone4_5_text"}},
        "Exaone4_5_Config defaults (LGAI-EXAONE/EXAONE-4.5-33B); searched: only hand-written or reduced test dicts "
        "(SOURCES.yaml not_found); its text_config names exaone4_5_text as those dicts do",
    ),
}
FIXTURES += [
    Fixture(Path("class-defaults") / f"{t}.json", config, text_model_type(config)[1], t)
    for t, (config, _) in WRAPPER_DEFAULT_FIXTURES.items()
    if t not in _REAL_TYPES
]
REGISTERED = sorted(REGISTRY)
# (a drafter that keeps no cache of its own, Gemma 4's assistant, wraps a registered text config: refused, not compared)
REGISTERED_FIXTURES = [f for f in FIXTURES if f.model_type in REGISTRY or f.outer_type in REGISTRY]
REGISTERED_FIXTURES = [f for f in REGISTERED_FIXTURES if f.outer_type not in NO_CACHE_TYPES]


def _spec_or_none(f: Fixture) -> ModelSpec | None:
    try:
        return spec_from_hf_config(f.config, str(f.path))
    except Exception:  # noqa: BLE001 - reported by the tests themselves
        return None


def _one_fixture_per_kind() -> list[Fixture]:
    """The first registered fixture (with an oracle) that has each layer kind kvplan reads."""
    chosen: dict[str, Fixture] = {}
    for f in REGISTERED_FIXTURES:
        if f.model_type in NO_ORACLE:
            continue
        spec = _spec_or_none(f)
        for layer in spec.layers if spec else ():
            parallel = layer.kind in KV_HEAD_KINDS and layer.state is not None
            chosen.setdefault(f"{layer.kind}+{layer.state.kind}" if parallel else layer.kind, f)
    return list(dict.fromkeys(chosen.values()))


def _allowed(diff: str, model_type: str) -> bool:
    types, _ = KNOWN_DIFFERENCES[diff]
    return types is None or model_type in types


# --- the mapping of transformers' reading to kvplan's terms -----------------------------------------------


def _is_mla(reading: OracleReading, layer: OracleLayer) -> bool:
    """An attention layer whose cache is DeepSeek's latent: one "head" of kv_lora_rank keys."""
    rank = reading.attr("kv_lora_rank")
    return isinstance(rank, int) and layer.num_kv_heads == 1 and layer.head_dim == rank


def transformers_kind(reading: OracleReading, layer: OracleLayer) -> str:
    """kvplan's kind for transformers' layer: full_attention -> full (mla for a latent cache),
    sliding_attention -> sliding, chunked_attention -> chunked, indexed_attention (DSA) -> mla, recurrent
    layers by their token mixer (:data:`STATE_MIXERS`), a KV-sharing consumer -> shared, other dummy
    (MoE / MLP-only) layers -> none; ``hybrid`` / ``hybrid_sliding`` (Falcon-H1, Zamba2: attention with a
    recurrent state beside it) -> full / sliding, their state compared as kvplan's ``parallel_state``.
    Anything else is returned as ``transformers:<type>``."""
    t = layer.layer_type
    if t in OWN_CACHE_KINDS:
        return OWN_CACHE_KINDS[t]
    if "CrossAttention" in layer.mixer:  # Mllama's cross-attention layers cache the vision states
        return "cross"
    if "DeepseekV4Attention" in layer.mixer:  # sliding, CSA and HCA layers: one K=V vector + compressor
        return "compressed"
    if t in ("hybrid", "hybrid_sliding"):
        return "sliding" if t == "hybrid_sliding" else "full"
    if t == "full_attention":
        return "mla" if _is_mla(reading, layer) else "full"
    if t in ("sliding_attention", "chunked_attention"):
        return t.split("_")[0]
    if t == "indexed_attention":
        return "mla"
    if t in ("linear_attention", "conv"):
        for needle, kind in STATE_MIXERS:
            if needle in layer.mixer:
                return kind
        return f"transformers:{t}({layer.mixer}: add it to STATE_MIXERS)"
    if t == "dummy":
        return "shared" if layer.attends_as else "none"
    return f"transformers:{t}({layer.mixer})"


def _kvplan_layer_bytes(spec: ModelSpec, layer: LayerSpec, n: int) -> int:
    bf16 = get_kv_dtype("bf16")
    token = layer_token_bytes(layer, bf16) * tokens_cached(n + spec.prefix_tokens, spec.window_of(layer.kind))
    compressed = layer_compressed_bytes(layer, bf16, n)
    return token + layer_state_bytes(layer, spec.dtype) + layer_cross_bytes(layer, bf16) + compressed


def _conv_channels_columns(layer: LayerSpec, model_dtype: str) -> tuple[int | None, int, str] | None:
    """kvplan's conv state as (channels, columns, dtype): columns = d_conv - 1, channels the other dimension
    (vLLM orients it either way); channels None when no dimension is d_conv - 1."""
    conv = next((t for t in layer.state.tensors(model_dtype) if t.name == "conv"), None)
    if conv is None:
        return None
    columns = layer.state.d_conv - 1
    dims = list(conv.shape)
    if columns not in dims or len(dims) != 2:
        return None if not dims else (None, columns, conv.dtype)
    dims.remove(columns)
    return dims[0], columns, conv.dtype


# --- the comparisons --------------------------------------------------------------------------------------


@dataclass
class Comparison:
    """Differences found for one fixture: unexplained ones fail; known ones (by id) are tolerated."""

    failures: list[str]
    known: set[str]

    def fail(self, i: int, what: str) -> None:
        self.failures.append(f"layer {i}: {what}")

    def summary(self) -> str:
        # collapse identical messages over layer ranges
        grouped: dict[str, list[int]] = {}
        for line in self.failures:
            idx, msg = line.split(": ", 1)
            grouped.setdefault(msg, []).append(int(idx.split()[1]))
        lines = []
        for msg, idx in grouped.items():
            where = f"layer {idx[0]}" if len(idx) == 1 else f"{len(idx)} layers ({idx[0]}..{idx[-1]})"
            lines.append(f"{where}: {msg}")
        return "\n".join(lines)


def compare_layers(spec: ModelSpec, reading: OracleReading, model_type: str) -> Comparison:
    """Per layer: kind, attention geometry and window, MLA widths, state shapes and dtypes, sharing."""
    c = Comparison([], set())
    if spec.num_layers != len(reading.layers):
        c.failures.append(f"layer 0: kvplan has {spec.num_layers} layers, transformers {len(reading.layers)}")
        return c
    for ours, tf in zip(spec.layers, reading.layers, strict=True):
        i = tf.index
        want = transformers_kind(reading, tf)
        if ours.kind != want:
            c.fail(i, f"kind: kvplan {ours.kind}, transformers {want} ({tf.layer_type}, {tf.mixer})")
            continue
        if ours.kind == "cross":  # K/V of the encoder tokens: heads, dims and how many tokens
            got = (ours.num_kv_heads, ours.head_dim, ours.v_head_dim, ours.encoder_tokens)
            keys = tf.tensor("keys")
            exp = (tf.num_kv_heads, tf.head_dim, tf.v_head_dim, keys.shape[2] if keys else None)
            if got != exp:
                c.fail(i, f"cross (H_kv, head_dim, v_head_dim, encoder tokens): kvplan {got}, transformers {exp}")
        elif ours.kind in KV_HEAD_KINDS:
            got = (ours.num_kv_heads, ours.head_dim, ours.v_head_dim)
            exp = (tf.num_kv_heads, tf.head_dim, tf.v_head_dim)
            if got != exp and _falcon_expanded(spec, ours, tf, model_type):
                c.known.add("falcon-kv-heads-expanded")
            elif got != exp:
                c.fail(i, f"{ours.kind} (H_kv, head_dim, v_head_dim): kvplan {got}, transformers {exp}")
            window = spec.window_of(ours.kind)
            if _mimo_window(spec, ours, tf, model_type):
                c.known.add("mimo-window")
            elif window != tf.window or (ours.window is not None and ours.window != tf.window):
                c.fail(i, f"{ours.kind} window: kvplan {window} (layer {ours.window}), transformers {tf.window}")
            if _dynamic_window(reading, ours, tf, model_type):
                c.known.add("dynamic-sliding-window")
            if reading.method.endswith("(DynamicCache)") and ours.kind == "full" and tf.tensor("keys") is not None:
                held = tf.tensor("keys").shape[2]  # a DynamicCache holds every token cached, prefix tokens too
                if held != reading.max_cache_len + spec.prefix_tokens:
                    c.fail(i, f"full tokens held after {reading.max_cache_len}: transformers {held}, kvplan "
                              f"{reading.max_cache_len} + prefix_tokens {spec.prefix_tokens}")  # fmt: skip
            # a state beside the attention (parallel_state) must be transformers' hybrid layer state, and back
            tf_state = tf.tensor("conv_states") or tf.tensor("recurrent_states")
            if ours.state is not None and tf_state is not None and ours.state.kind in EXACT_STATE_KINDS:
                _compare_exact_state(c, spec, ours, tf)
            elif ours.state is not None and tf_state is not None:
                _compare_state(c, spec, ours, tf, model_type)
            elif (ours.state is None) != (tf_state is None):
                got, exp = ours.state and ours.state.kind, tf_state and tf_state.name
                c.fail(i, f"{ours.kind} state beside the KV cache: kvplan {got}, transformers {exp} ({tf.layer_type})")
        elif ours.kind == "mla":
            idx = tf.tensor("indexer_keys")
            got = (ours.mla.kv_lora_rank, ours.mla.qk_rope_head_dim, ours.mla.index_head_dim)
            exp = (tf.head_dim, tf.v_head_dim, idx.shape[-1] if idx else None)
            if got != exp:
                c.fail(i, f"mla (kv_lora_rank, qk_rope_head_dim, index_head_dim): kvplan {got}, transformers {exp}")
        elif ours.kind in EXACT_STATE_KINDS:
            _compare_exact_state(c, spec, ours, tf)
        elif ours.kind in STATE_KINDS:
            _compare_state(c, spec, ours, tf, model_type)
        elif ours.kind == HIDDEN_KIND:  # the input hidden states: width, tokens kept, bucket ids
            n = reading.max_cache_len
            window = ours.hidden.window
            got = (ours.hidden.width, min(n, window) if window else n, ours.hidden.index_width)
            mems, states, buckets = tf.tensor("mems"), tf.tensor("states"), tf.tensor("buckets")
            if mems is not None:  # XLNet: (tokens kept, B, d_model)
                exp = (mems.shape[-1], mems.shape[0], 0)
            elif states is not None:  # Reformer: (B, tokens, hidden) and LSH buckets (B, heads, hashes, tokens)
                index = buckets.shape[1] * buckets.shape[2] if buckets else 0
                exp = (states.shape[-1], states.shape[1], index)
                if buckets and (buckets.shape[-1], buckets.dtype) != (states.shape[1], "int64"):
                    c.fail(i, f"hidden: bucket ids {buckets.shape} {buckets.dtype}, not one int64 per token")
                if states.dtype == "float32" and _allowed("cpu-float32-run", model_type):
                    c.known.add("cpu-float32-run")
            else:
                exp = None
            if got != exp:
                c.fail(i, f"hidden (width, tokens kept after {n}, int64 per token): kvplan {got}, transformers {exp}")
        elif ours.kind == "compressed":
            _compare_compressed(c, reading, ours, tf, model_type)
        elif ours.kind == "shared":
            got = (ours.shared_from, ours.attends_as)
            exp = (tf.shared_from, transformers_kind(reading, _as_type(tf, tf.attends_as)))
            if got != exp:
                c.fail(i, f"shared (shared_from, attends_as): kvplan {got}, transformers {exp}")
    return c


def _compare_compressed(c: Comparison, reading: OracleReading, ours: LayerSpec, tf: OracleLayer, model_type: str) -> None:
    """A DeepSeek-V4 layer: the one K=V head, the window, entries per ratio, the indexer, overlap and the
    compressor's widths, against the DynamicCache transformers filled with ``max_cache_len`` tokens."""
    i, cc, n = tf.index, ours.compressed, reading.max_cache_len
    got = (ours.num_kv_heads, cc.head_dim, cc.head_dim)
    exp = (tf.num_kv_heads, tf.head_dim, tf.v_head_dim)
    if got != exp:
        c.fail(i, f"compressed (H_kv, K dim, V dim = K): kvplan {got}, transformers {exp}")
    window = reading.attr("sliding_window")
    if cc.window != window:
        c.fail(i, f"compressed window: kvplan {cc.window}, transformers sliding_window {window}")
    held = tf.tensor("keys").shape[2]
    if held == min(n, cc.window - 1) and _allowed("dynamic-sliding-window", model_type):
        c.known.add("dynamic-sliding-window")
    elif held != min(n, cc.window):
        c.fail(i, f"compressed window tokens held: transformers {held}, kvplan {min(n, cc.window)}")
    if tf.tensor("values") is not None:
        if _allowed("v4-sliding-kv-copy", model_type) and tf.tensor("values").shape == tf.tensor("keys").shape:
            c.known.add("v4-sliding-kv-copy")
        else:
            c.fail(i, "compressed: transformers caches values besides the shared K=V keys")
    rates = dict(reading.attr("compress_rates") or ())
    comp, idx = tf.tensor("compressed_kv[compressor]"), tf.tensor("compressed_kv[indexer]")
    exp = (rates.get(tf.layer_type, 0), comp.shape[1] if comp else 0, comp.shape[-1] if comp else None,
           idx.shape[-1] if idx else 0, idx.shape[1] if idx else 0, tf.tensor("overlap_kv") is not None)  # fmt: skip
    got = (cc.ratio, cc.entries(n), cc.head_dim if cc.ratio else None, cc.index_head_dim,
           cc.entries(n) if cc.index_head_dim else 0, cc.overlap)  # fmt: skip
    if got != exp:
        c.fail(i, f"compressed (ratio, entries, width, index width, index entries, overlap): kvplan {got}, "
                  f"transformers {exp}")  # fmt: skip
    coff = 2 if cc.overlap else 1
    for name, width in (("compressor", cc.head_dim), ("indexer", cc.index_head_dim)):
        for part in ("buffer_kv", "buffer_gate"):
            t = tf.tensor(f"{part}[{name}]")
            if (t is None) != (not (cc.ratio and width)) or (t is not None and t.shape[-1] != coff * width):
                c.fail(i, f"compressed {part}[{name}] width: transformers {t and t.shape}, kvplan coff x {width}")
    if cc.ratio and _allowed("v4-compressor-state", model_type):
        c.known.add("v4-compressor-state")


def _translated_compressed_bytes(reading: OracleReading, ours: LayerSpec, tf: OracleLayer) -> int:
    """transformers' DeepSeek-V4 layer in kvplan's terms: the K=V vector for ``min(N, window)`` tokens
    (dynamic-sliding-window) and once (v4-sliding-kv-copy), the compressed entries as they are, and each
    compressor's unfinished window as vLLM's fp32 ring of ``coff × m`` tokens of its kv and gate widths, read
    from transformers' buffers (v4-compressor-state)."""
    n = reading.max_cache_len
    keys = tf.tensor("keys")
    total = keys.nbytes // keys.shape[2] * min(n, ours.compressed.window)
    total += sum(t.nbytes for t in tf.tensors if t.name.startswith("compressed_kv"))
    ratio = dict(reading.attr("compress_rates") or ()).get(tf.layer_type, 0)
    for t in tf.tensors:
        if t.name.startswith("buffer_kv["):
            name = t.name[len("buffer_kv[") : -1]
            coff = 2 if tf.tensor(f"overlap_kv[{name}]") is not None else 1
            gate = tf.tensor(f"buffer_gate[{name}]")
            total += coff * ratio * (t.shape[-1] + gate.shape[-1]) * 4  # float32
    return total


def _dynamic_window(reading: OracleReading, ours: LayerSpec, tf: OracleLayer, model_type: str) -> bool:
    """A sliding layer read from a DynamicCache holds window - 1 tokens after the forward (dynamic-sliding-window)."""
    keys = tf.tensor("keys")
    return (
        _allowed("dynamic-sliding-window", model_type)
        and reading.method.endswith("(DynamicCache)")
        and ours.kind == "sliding"
        and keys is not None
        and ours.window is not None
        and keys.shape[2] == min(reading.max_cache_len, ours.window - 1)
    )


def _mimo_window(spec: ModelSpec, ours: LayerSpec, tf: OracleLayer, model_type: str) -> bool:
    """transformers keeps one token more in a MiMo sliding layer than vLLM (mimo-window)."""
    return _allowed("mimo-window", model_type) and ours.window is not None and tf.window == ours.window + 1


def _falcon_expanded(spec: ModelSpec, ours: LayerSpec, tf: OracleLayer, model_type: str) -> bool:
    """transformers caches every query head where kvplan (vLLM) caches num_kv_heads (falcon-kv-heads-expanded)."""
    return (
        _allowed("falcon-kv-heads-expanded", model_type)
        and tf.num_kv_heads == spec.num_q_heads
        and (ours.head_dim, ours.v_head_dim) == (tf.head_dim, tf.v_head_dim)
    )


def _as_type(layer: OracleLayer, layer_type: str | None) -> OracleLayer:
    from dataclasses import replace

    return replace(layer, layer_type=layer_type or "", num_kv_heads=None, head_dim=None)


def _tf_dtype(name: str, spec: ModelSpec) -> str:
    """transformers' tensor dtype in kvplan's names; the bf16 the oracle builds in stands for the model dtype."""
    return spec.dtype if name == "bfloat16" else _TF_DTYPES.get(name, name)


_EXACT_TENSORS = ("conv_states", "recurrent_states", "state[", "rnn_state[")


def _compare_exact_state(c: Comparison, spec: ModelSpec, ours: LayerSpec, tf: OracleLayer) -> None:
    """A state kvplan keeps as transformers does (:data:`EXACT_STATE_KINDS`): every tensor, in order, with its
    shape (less the batch dimension) and dtype (bf16, the oracle's build dtype, standing for the model dtype)."""
    got = [(t.shape, t.dtype) for t in ours.state.tensors(spec.dtype)]
    exp = [(t.shape[1:], _tf_dtype(t.dtype, spec)) for t in tf.tensors if t.name.startswith(_EXACT_TENSORS)]
    if got != exp:
        c.fail(tf.index, f"{ours.state.kind} state (shape, dtype) per tensor: kvplan {got}, transformers {exp}")


def _compare_state(c: Comparison, spec: ModelSpec, ours: LayerSpec, tf: OracleLayer, model_type: str) -> None:
    i = tf.index
    tensors = {t.name: t for t in ours.state.tensors(spec.dtype)}
    tf_conv, tf_rec = tf.tensor("conv_states"), tf.tensor("recurrent_states")
    conv = _conv_channels_columns(ours, spec.dtype)
    if (conv is None) != (tf_conv is None):
        c.fail(i, f"conv state: kvplan {tensors.get('conv')}, transformers {tf_conv and tf_conv.shape}")
    elif conv is not None:
        channels, columns, dtype = conv
        tf_channels, tf_columns = tf_conv.shape[1], tf_conv.shape[-1]
        if channels != tf_channels:
            c.fail(i, f"conv channels: kvplan {tensors['conv'].shape}, transformers {tf_conv.shape}")
        if columns == tf_columns - 1 and _allowed("conv-state-window", model_type):
            c.known.add("conv-state-window")
        elif columns != tf_columns:
            c.fail(i, f"conv columns (d_conv - 1): kvplan {columns}, transformers {tf_columns}")
        if dtype != _tf_dtype(tf_conv.dtype, spec):
            c.fail(i, f"conv dtype: kvplan {dtype} (model {spec.dtype}), transformers {tf_conv.dtype}")
    ssm = tensors.get("ssm")
    if (ssm is None) != (tf_rec is None):
        c.fail(i, f"recurrent state: kvplan {ssm}, transformers {tf_rec and tf_rec.shape}")
    elif ssm is not None:
        tf_shape = tf_rec.shape[1:]
        if ssm.shape != tf_shape:
            if (
                ours.kind == "gdn"
                and ssm.shape == (tf_shape[0], tf_shape[2], tf_shape[1])
                and _allowed("gdn-recurrent-layout", model_type)
            ):
                c.known.add("gdn-recurrent-layout")
            else:
                c.fail(i, f"recurrent state shape: kvplan {ssm.shape}, transformers {tf_shape}")
        if ssm.dtype != _tf_dtype(tf_rec.dtype, spec):
            if _allowed("recurrent-state-dtype", model_type):
                c.known.add("recurrent-state-dtype")
            else:
                c.fail(i, f"recurrent state dtype: kvplan {ssm.dtype}, transformers {tf_rec.dtype}")


def expected_kvplan_bytes(spec: ModelSpec, reading: OracleReading, model_type: str, n: int) -> list[int | None]:
    """transformers' StaticCache bytes per layer at bf16, translated through :data:`KNOWN_DIFFERENCES`
    into what kvplan should report (None: the layer kinds differ, no byte expectation)."""
    out: list[int | None] = []
    for ours, tf in zip(spec.layers, reading.layers, strict=True):
        want = transformers_kind(reading, tf)
        if ours.kind != want:
            out.append(None)
        elif ours.kind in EXACT_STATE_KINDS:  # transformers' tensors as they are
            out.append(tf.nbytes)
        elif ours.kind == HIDDEN_KIND:  # as they are; a float32 CPU run's states in the model dtype (cpu-float32-run)
            states = tf.tensor("states")
            run32 = states is not None and states.dtype == "float32" and _allowed("cpu-float32-run", model_type)
            out.append(tf.nbytes - (states.nbytes // 2 if run32 else 0))
        elif ours.kind in STATE_KINDS:
            out.append(_translated_state_bytes(spec, ours, tf))
        elif ours.kind == "compressed":
            out.append(_translated_compressed_bytes(reading, ours, tf))
        elif ours.state is not None and ours.state.kind in EXACT_STATE_KINDS:  # K/V and the state as they are
            kv = sum(t.nbytes for t in tf.tensors if t.name in ("keys", "values"))
            if _dynamic_window(reading, ours, tf, model_type) and n >= ours.window:  # window - 1 tokens -> window
                kv = kv // tf.tensor("keys").shape[2] * ours.window
            out.append(tf.nbytes - sum(t.nbytes for t in tf.tensors if t.name in ("keys", "values")) + kv)
        elif ours.state is not None:  # parallel_state: the K/V tensors as they are, the state translated
            kv = sum(t.nbytes for t in tf.tensors if not t.name.startswith(_STATE_TENSORS))
            out.append(kv + _translated_state_bytes(spec, ours, tf))
        elif ours.kind in KV_HEAD_KINDS and _mimo_window(spec, ours, tf, model_type) and n > ours.window:
            out.append(tf.nbytes // tf.window * ours.window)  # window + 1 cached tokens -> window
        elif ours.kind in KV_HEAD_KINDS and _falcon_expanded(spec, ours, tf, model_type):
            out.append(tf.nbytes // tf.num_kv_heads * ours.num_kv_heads)  # H_q cached heads -> H_kv
        else:
            out.append(tf.nbytes)
    return out


_STATE_TENSORS = ("conv_states", "recurrent_states")


def _translated_state_bytes(spec: ModelSpec, ours: LayerSpec, tf: OracleLayer) -> int:
    """transformers' conv / recurrent state tensors of one layer in kvplan's terms: conv keeps d_conv - 1
    columns (conv-state-window, where transformers keeps d_conv); each tensor in kvplan's state dtype
    (recurrent-state-dtype)."""
    total = 0
    dtypes = {t.name: t.dtype for t in ours.state.tensors(spec.dtype)}
    for t in tf.tensors:
        if not t.name.startswith(_STATE_TENSORS):
            continue
        elements = t.nbytes // t.itemsize
        if t.name.startswith("conv"):
            if t.shape[-1] == ours.state.d_conv:  # transformers keeps d_conv columns, vLLM d_conv - 1
                elements = elements // t.shape[-1] * (t.shape[-1] - 1)
            total += elements * _ITEMSIZE[dtypes.get("conv", "fp32")]
        else:
            total += elements * _ITEMSIZE[dtypes.get("ssm", "fp32")]
    return total


def _reading(f: Fixture, n: int) -> OracleReading:
    try:
        return read_with_transformers(f.config, n)
    except OracleUnavailable as e:
        pytest.fail(
            f"{f.id}: {e} (list the model_type in NO_ORACLE with its reason, or in tests/oracle.py ORACLE_ALIASES)"
        )


def _spec(f: Fixture) -> ModelSpec:
    try:
        return spec_from_hf_config(f.config, str(f.path))
    except Exception as e:  # noqa: BLE001
        pytest.fail(f"{f.id}: kvplan refused a fixture of registered model_type {f.model_type!r}: {e}")


# --- tests ------------------------------------------------------------------------------------------------


def test_every_fixture_is_a_json_object():
    assert not BROKEN_FIXTURES, "unreadable config.json fixtures: " + "; ".join(BROKEN_FIXTURES)


@pytest.mark.parametrize("model_type", REGISTERED)
def test_registered_model_type_has_a_fixture(model_type):
    found = [f.id for f in FIXTURES if model_type in (f.model_type, f.outer_type)]
    real = [i for i in found if not i.startswith("class-defaults/")]
    if model_type in CLASS_DEFAULT_FIXTURES:
        assert not real, f"{model_type}: a real fixture exists now ({real}): remove it from CLASS_DEFAULT_FIXTURES"
    assert found, (
        f"model_type {model_type!r} is registered in kvplan.readers.REGISTRY but no config.json fixture has it: "
        "add a fixture (tests/fixtures/hf_configs/, with its URL in SOURCES.yaml)"
    )


_ORACLE_FIXTURES = [f for f in REGISTERED_FIXTURES if f.model_type not in NO_ORACLE]
_NO_ORACLE_FIXTURES = [f for f in REGISTERED_FIXTURES if f.model_type in NO_ORACLE]


@pytest.mark.parametrize("fixture", _ORACLE_FIXTURES, ids=lambda f: f.id)
def test_layers_match_transformers(fixture):
    spec = _spec(fixture)
    reading = _reading(fixture, N_LARGE)
    c = compare_layers(spec, reading, fixture.model_type)
    assert not c.failures, f"{fixture.id} ({fixture.model_type}) differs from transformers:\n{c.summary()}"


@pytest.mark.parametrize("fixture", _ORACLE_FIXTURES, ids=lambda f: f.id)
def test_bytes_match_transformers_static_cache(fixture):
    _check_bytes(fixture, N_LARGE)


@pytest.mark.parametrize("fixture", _one_fixture_per_kind(), ids=lambda f: f.id)
def test_bytes_match_below_the_windows(fixture):
    _check_bytes(fixture, N_SMALL)


def _check_bytes(fixture: Fixture, n: int) -> None:
    spec = _spec(fixture)
    reading = _reading(fixture, n)
    n = reading.max_cache_len  # below n where transformers cannot run longer (tests/oracle.py POSITION_LIMITED)
    assert spec.num_layers == len(reading.layers), f"{fixture.id}: layer counts differ"
    expected = expected_kvplan_bytes(spec, reading, fixture.model_type, n)
    bad = []
    for layer, exp in zip(spec.layers, expected, strict=True):
        got = _kvplan_layer_bytes(spec, layer, n)
        if exp is not None and got != exp:
            bad.append(f"{layer.kind}: kvplan {got:,} B, transformers (translated) {exp:,} B")
    assert not bad, f"{fixture.id} per-layer bytes at N={n} differ:\n" + "\n".join(sorted(set(bad)))
    if None in expected:
        pytest.fail(f"{fixture.id}: layer kinds differ from transformers (see test_layers_match_transformers)")
    total = estimate(spec, n, kv_dtype="bf16").bytes_per_request
    assert total == sum(expected), f"{fixture.id}: estimate() {total:,} B, transformers {sum(expected):,} B"


@pytest.mark.parametrize("fixture", _NO_ORACLE_FIXTURES, ids=lambda f: f.id)
def test_no_oracle_entries_are_still_true(fixture):
    """A registered model_type transformers cannot build: kvplan must still read it, and the oracle must
    really be unavailable (else remove it from NO_ORACLE so the comparison runs)."""
    _spec(fixture)
    with pytest.raises(OracleUnavailable):
        read_with_transformers(fixture.config, N_SMALL)


@pytest.mark.parametrize("diff", [d for d, (types, _) in KNOWN_DIFFERENCES.items() if types is not None])
def test_known_differences_are_not_stale(diff):
    """A model-specific known difference must still occur in some registered fixture."""
    types, reason = KNOWN_DIFFERENCES[diff]
    fixtures = [f for f in _ORACLE_FIXTURES if f.model_type in types]
    if not fixtures:
        pytest.fail(f"{diff}: no registered fixture of {types} exercises it; drop it ({reason})")
    used = set()
    for f in fixtures:
        spec = _spec_or_none(f)
        if spec is not None:
            used |= compare_layers(spec, read_with_transformers(f.config, N_LARGE), f.model_type).known
    assert diff in used, f"{diff} no longer occurs in {[f.id for f in fixtures]}: remove it from KNOWN_DIFFERENCES"


@pytest.mark.parametrize("model_type", sorted(META_STANDINS))
def test_meta_standins_are_still_needed(model_type, monkeypatch):
    """Each stand-in of tests/oracle.py META_STANDINS must still be what lets the meta forward run: without it
    transformers' forward fails (else drop the entry, the plain forward reads the cache)."""
    import tests.oracle as oracle

    config = next((f.config for f in REGISTERED_FIXTURES if f.model_type == model_type), {"model_type": model_type})
    monkeypatch.setattr(oracle, "META_STANDINS", {})
    with pytest.raises(OracleUnavailable, match="meta forward failed"):
        read_with_transformers(config, 17)  # a length no other test reads (the oracle caches per length)
