"""Plain decoders: every layer is GQA attention, full or with one sliding window.

Mirrors transformers' (5.23) config classes, with their defaults for absent keys (the table below): Llama, Mistral,
Mixtral, Qwen2, Qwen2Moe, Qwen3, Qwen3Moe, Phi3, Olmo2, Olmo3, Glm4, Glm4Moe, Gemma, Granite, GraniteMoe,
GraniteMoeShared, GraniteSWA, GraniteMoeSWA, Olmo, Olmoe, Phimoe, Starcoder2, StableLm, Cohere, InternLM3, Exaone4,
ExaoneMoe, SmolLM3, SeedOss, Ministral3, Ernie4_5, Ernie4_5_Moe, Helium, Apertus, Arcee, Phi, Glm, VaultGemma,
Dots1, Cwm, Afmoe, HyperCLOVAX, HYV3, Jais2, FlexOlmo, Mellum, Laguna, IQuestCoder, NanoChat, SolarOpen, GPTNeoX,
Persimmon, OPT, HunYuanDenseV1, Nemotron and Ministral (``<Name>Config``). Checked against vLLM 0.33: ``llama.py``
(also InternLM3, IQuestCoder, Ernie 4.5 and, through ``mistral.py``, Ministral 3: a layer gets a window only where
``layer_types`` says ``sliding_attention``), ``qwen2.py``/``qwen3.py``, ``olmo3.py``, ``gemma.py``, ``granite.py``
(also GraniteSWA), ``granitemoe.py``/``granitemoeshared.py`` (also GraniteMoeSWA), ``olmoe.py``, ``phimoe.py``,
``stablelm.py``, ``commandr.py``, ``exaone4.py``, ``exaone_moe.py``, ``ernie45_moe.py``, ``apertus.py``, ``opt.py``,
``afmoe.py``, ``hyperclovax.py``, ``hy_v3.py``, ``laguna.py``, and the Transformers backend
(``models/transformers/base.py``; KV heads and head size from ``transformers_utils/model_arch_config_convertor.py``)
that serves OLMo, Phi, GLM, Seed-OSS, SmolLM3, Starcoder2, VaultGemma, Arcee, GPT-NeoX, CWM, Jais 2, FlexOlmo and
Mellum, and (no vLLM model of their own: ``registry.py`` falls back to it) Helium, Persimmon, dots.llm1 (``dots1``),
NanoChat and Solar Open.

HunYuanDenseV1, Nemotron and Ministral: transformers 5.23 cannot build their class defaults (``head_dim`` resp.
``num_key_value_heads`` is None there), so those keys are required (``require``); they are checked on published
files. vLLM 0.33 serves HunYuanDenseV1 through its Transformers backend (``registry.py``
``_TRANSFORMERS_SUPPORTED_MODELS``) and Ministral through it too (no ``MinistralForCausalLM`` in ``registry.py``),
so both cache what transformers caches (Ministral: sliding where ``layer_types`` says so, else every layer when
``sliding_window`` is set, as ``MinistralConfig.__post_init__`` builds it); Nemotron through ``nemotron.py``
(``num_key_value_heads``; ``head_dim`` else ``hidden_size // num_attention_heads``). A Hunyuan ``use_cla: true``
(the remote code's cross-layer KV sharing, ignored by both) is refused, and so is a remote-code key
(``attention_head_dim``, Nemotron's ``kv_channels``) that disagrees with the ``head_dim`` the class uses.

Cohere (v1): vLLM takes ``model_max_length`` over ``max_position_embeddings`` when set
(``derive_max_model_len``), and so does kvplan.

Window rules. Where a config has no ``layer_types`` attribute, vLLM sets ``CacheConfig.sliding_window`` to
``sliding_window`` (``engine/arg_utils.py``) and every attention layer without a per-layer window uses it, as
transformers' cache does (``get_layer_types_and_kwargs``): ``windowing: all``. Classes whose
``__post_init__`` builds ``layer_types`` (Exaone4, SmolLM3, VaultGemma, GraniteSWA, ...) are mirrored by
:func:`_pattern`; vLLM reads the same ``layer_types`` from the same config object. Mellum and Laguna carry a
``sliding_window`` but fill ``layer_types`` with ``full_attention``: only an explicit ``layer_types`` slides
(``windowing: explicit``). ExaoneMoe's per-layer ``sliding_windows`` (read by vLLM's ``exaone_moe.py`` only)
is refused.

Ministral3Config has no ``layer_types`` (transformers warns when a config.json has one, then caches a window
its attention mask does not apply, while vLLM's ``llama.py`` applies it): ``layer_types: False`` refuses
sliding entries there rather than pick one reading.

Head rules. ``head_rule: derived`` marks classes whose attention (in transformers or in vLLM) always uses
``hidden_size // num_attention_heads`` (OlmoeAttention and GraniteMoeAttention in vLLM, StableLM, GPT-NeoX,
Persimmon, OPT): a config.json ``head_dim`` that disagrees is refused. ``kv: mha`` marks classes without
``num_key_value_heads`` (every head keeps K and V): a config.json value other than the head count is refused.

Phi-3 sets ``sliding_window`` (2047 in Phi-3-mini and -medium 4k) with no ``layer_types``: transformers'
cache keeps a 2,047-token ring on every layer, and so does vLLM 0.33: with no ``layer_types`` it sets
``CacheConfig.sliding_window`` from the config (``engine/arg_utils.py``), and ``Attention`` applies it to every
layer that has no window of its own (``model_executor/layers/attention/attention.py``; ``phi3.py`` is Llama's
model, which passes none). kvplan does the same: every Phi-3 layer is sliding when the window is set.
"""

from __future__ import annotations

from kvplan.readers.base import HFConfig, attention_dims, max_len

_TYPES = {"full_attention": "full", "sliding_attention": "sliding"}

# model_type -> class defaults (transformers 5.23): max_position_embeddings, num_hidden_layers,
# num_attention_heads, num_key_value_heads (absent: = heads), hidden_size, head_dim (absent: hidden // heads),
# sliding_window, how the window applies (windowing), and the head rules of the module docstring.
_DEFAULTS: dict[str, dict] = {
    "llama": {"max_len": 2048, "layers": 32, "heads": 32, "hidden": 4096},
    "mistral": {
        "max_len": 131072,
        "layers": 32,
        "heads": 32,
        "kv_heads": 8,
        "hidden": 4096,
        "window": 4096,
        "windowing": "all",
    },
    "mixtral": {"max_len": 131072, "layers": 32, "heads": 32, "kv_heads": 8, "hidden": 4096, "windowing": "all"},
    "qwen2": {"max_len": 32768, "layers": 32, "heads": 32, "hidden": 4096, "windowing": "qwen"},
    "qwen2_moe": {"max_len": 32768, "layers": 24, "heads": 16, "hidden": 2048, "windowing": "qwen"},
    "qwen3": {"max_len": 32768, "layers": 32, "heads": 32, "hidden": 4096, "head_dim": 128, "windowing": "qwen"},
    "qwen3_moe": {"max_len": 32768, "layers": 24, "heads": 32, "kv_heads": 4, "hidden": 2048, "windowing": "qwen"},
    "phi3": {"max_len": 4096, "layers": 32, "heads": 32, "hidden": 3072, "windowing": "all"},
    "olmo2": {"max_len": 2048, "layers": 32, "heads": 32, "hidden": 4096},
    "olmo3": {"max_len": 2048, "layers": 32, "heads": 32, "hidden": 4096, "window": 4096, "windowing": "olmo3"},
    "glm4": {"max_len": 131072, "layers": 40, "heads": 32, "kv_heads": 2, "hidden": 4096, "head_dim": 128},
    "glm4_moe": {"max_len": 131072, "layers": 46, "heads": 96, "kv_heads": 8, "hidden": 4096},
    # --- plain decoders added for transformers 5.23's wider zoo (same shape, other defaults) ---
    "gemma": {"max_len": 8192, "layers": 28, "heads": 16, "kv_heads": 16, "hidden": 3072, "head_dim": 256},
    "granite": {"max_len": 2048, "layers": 32, "heads": 32, "hidden": 4096},
    "granitemoe": {"max_len": 2048, "layers": 32, "heads": 32, "hidden": 4096, "head_rule": "derived"},
    "granitemoeshared": {"max_len": 2048, "layers": 32, "heads": 32, "hidden": 4096, "head_rule": "derived"},
    "granite_swa": {
        "max_len": 8192,
        "layers": 24,
        "heads": 20,
        "kv_heads": 4,
        "hidden": 2560,
        "window": 128,
        "windowing": "first_of_4_full",
    },
    "granitemoe_swa": {
        "max_len": 2048,
        "layers": 32,
        "heads": 32,
        "hidden": 4096,
        "window": 128,
        "windowing": "first_of_4_full",
        "head_rule": "derived",
    },
    "olmo": {"max_len": 2048, "layers": 32, "heads": 32, "hidden": 4096},
    "olmoe": {"max_len": 4096, "layers": 16, "heads": 16, "hidden": 2048, "head_rule": "derived"},
    "phimoe": {"max_len": 131072, "layers": 32, "heads": 32, "kv_heads": 8, "hidden": 4096, "windowing": "all"},
    "starcoder2": {"max_len": 4096, "layers": 30, "heads": 24, "kv_heads": 2, "hidden": 3072, "windowing": "all"},
    "stablelm": {"max_len": 4096, "layers": 32, "heads": 32, "kv_heads": 32, "hidden": 2560, "head_rule": "derived"},
    "cohere": {
        "max_len": 8192,
        "layers": 40,
        "heads": 64,
        "hidden": 8192,
        "max_keys": ("model_max_length", "max_position_embeddings"),
    },
    "internlm3": {"max_len": 32768, "layers": 48, "heads": 32, "kv_heads": 2, "hidden": 4096, "head_dim": 128},
    "exaone4": {
        "max_len": 2048,
        "layers": 32,
        "heads": 32,
        "kv_heads": 32,
        "hidden": 4096,
        "window": 4096,
        "windowing": "exaone4",
    },
    "smollm3": {"max_len": 32768, "layers": 36, "heads": 16, "kv_heads": 4, "hidden": 2048, "windowing": "smollm3"},
    "seed_oss": {"max_len": 524288, "layers": 64, "heads": 80, "kv_heads": 8, "hidden": 4096, "head_dim": 128},
    "ministral3": {
        "max_len": 262144,
        "layers": 34,
        "heads": 32,
        "kv_heads": 8,
        "hidden": 4096,
        "head_dim": 128,
        "windowing": "all",
        "layer_types": False,
    },
    "ernie4_5": {"max_len": 131072, "layers": 18, "heads": 16, "kv_heads": 2, "hidden": 1024, "head_dim": 128},
    "ernie4_5_moe": {"max_len": 131072, "layers": 28, "heads": 20, "kv_heads": 4, "hidden": 2560},
    "helium": {"max_len": 4096, "layers": 24, "heads": 20, "kv_heads": 20, "hidden": 2560, "head_dim": 128},
    "apertus": {"max_len": 65536, "layers": 32, "heads": 32, "hidden": 4096},
    "arcee": {"max_len": 4096, "layers": 32, "heads": 32, "hidden": 2560},
    "phi": {"max_len": 2048, "layers": 24, "heads": 32, "hidden": 2048},
    "glm": {"max_len": 131072, "layers": 40, "heads": 32, "kv_heads": 2, "hidden": 4096, "head_dim": 128},
    "vaultgemma": {
        "max_len": 8192,
        "layers": 26,
        "heads": 8,
        "kv_heads": 4,
        "hidden": 2304,
        "head_dim": 256,
        "window": 4096,
        "windowing": "alternate",
    },
    "dots1": {
        "max_len": 2048,
        "layers": 62,
        "heads": 32,
        "kv_heads": 32,
        "hidden": 4608,
        "window": 4096,
        "windowing": "dots1",
    },
    "cwm": {
        "max_len": 131072,
        "layers": 64,
        "heads": 48,
        "kv_heads": 8,
        "hidden": 6144,
        "head_dim": 128,
        "window": 8192,
        "windowing": "first_of_4_full",
    },
    "afmoe": {
        "max_len": 16384,
        "layers": 32,
        "heads": 16,
        "hidden": 2048,
        "head_dim": 128,
        "window": 1024,
        "windowing": "afmoe",
    },
    "exaone_moe": {
        "max_len": 2048,
        "layers": 32,
        "heads": 32,
        "kv_heads": 32,
        "hidden": 4096,
        "window": 4096,
        "windowing": "exaone4",
        "refuse": ("sliding_windows",),
    },
    "hyperclovax": {"max_len": 2048, "layers": 32, "heads": 32, "hidden": 4096},
    "hy_v3": {"max_len": 131072, "layers": 80, "heads": 64, "kv_heads": 8, "hidden": 4096, "head_dim": 128},
    "jais2": {"max_len": 8192, "layers": 32, "heads": 26, "hidden": 3328},
    "flex_olmo": {"max_len": 4096, "layers": 32, "heads": 32, "hidden": 4096},
    "mellum": {
        "max_len": 131072,
        "layers": 28,
        "heads": 32,
        "kv_heads": 4,
        "hidden": 2304,
        "head_dim": 128,
        "window": 1024,
        "windowing": "explicit",
    },
    "laguna": {
        "max_len": 131072,
        "layers": 40,
        "heads": 48,
        "kv_heads": 8,
        "hidden": 2048,
        "head_dim": 128,
        "window": 512,
        "windowing": "explicit",
    },
    # --- types whose class defaults transformers 5.23 cannot build (a key it needs is None): read from real files
    # (tests/fixtures/hf_configs: hunyuan-7b-instruct, nemotron-mini-4b-instruct, the Ministral-8B file as ministral)
    "hunyuan_v1_dense": {
        "max_len": 2048,
        "layers": 32,
        "heads": 32,
        "hidden": 4096,
        "require": (
            (
                "head_dim",
                "HunYuanDenseV1Config's default is None, and its rotary embedding then fails "
                "(transformers 5.23: None ** float)",
            ),
        ),  # fmt: skip
        "same_as": (("attention_head_dim", "head_dim"),),
        "refuse_true": (
            (
                "use_cla",
                "the remote code's cross-layer attention (KV shared by cla_share_factor layers), which "
                "transformers' HunYuanDenseV1 and vLLM's Transformers backend ignore",
            ),
        ),  # fmt: skip
    },
    "nemotron": {
        "max_len": 4096,
        "layers": 32,
        "heads": 48,
        "hidden": 6144,
        "require": (
            (
                "num_key_value_heads",
                "NemotronConfig's default is None, and NemotronAttention then divides by it "
                "(transformers 5.23: int // None); vLLM's nemotron.py reads the same attribute",
            ),
        ),  # fmt: skip
        "same_as": (("kv_channels", "head_dim"),),
    },
    "iquestcoder": {"max_len": 131072, "layers": 80, "heads": 40, "kv_heads": 8, "hidden": 5120, "head_dim": 128},
    "nanochat": {"max_len": 2048, "layers": 12, "heads": 6, "hidden": 768},
    "solar_open": {"max_len": 131072, "layers": 48, "heads": 64, "kv_heads": 8, "hidden": 4096, "head_dim": 128},
    "gpt_neox": {"max_len": 2048, "layers": 44, "heads": 64, "hidden": 6144, "head_rule": "derived", "kv": "mha"},
    "persimmon": {"max_len": 16384, "layers": 36, "heads": 64, "hidden": 4096, "head_rule": "derived", "kv": "mha"},
    "opt": {"max_len": 2048, "layers": 12, "heads": 12, "hidden": 768, "head_rule": "derived", "kv": "mha"},
    # --- text configs of multimodal wrappers (kvplan/readers/wrappers.py), transformers 5.23 defaults ---
    # Qwen2VLTextConfig / Qwen2_5_VLTextConfig: Qwen2's window rule with max_window_layers 80 (vLLM qwen2_5_vl.py
    # and qwen2_vl.py run Qwen2Model on the same config); Qwen3VLTextConfig / Qwen3VLMoeTextConfig: no
    # layer_types, so a set sliding_window applies to every layer as in transformers' cache and vLLM's
    # CacheConfig.sliding_window (qwen3_vl.py runs Qwen3Model).
    "qwen2_vl_text": {
        "max_len": 32768,
        "layers": 80,
        "heads": 64,
        "kv_heads": 8,
        "hidden": 8192,
        "windowing": "qwen_vl",
    },
    "qwen2_5_vl_text": {
        "max_len": 32768,
        "layers": 80,
        "heads": 64,
        "kv_heads": 8,
        "hidden": 8192,
        "windowing": "qwen_vl",
    },
    "qwen3_vl_text": {
        "max_len": 128000,
        "layers": 32,
        "heads": 32,
        "hidden": 4096,
        "head_dim": 128,
        "windowing": "all",
    },
    "qwen3_vl_moe_text": {
        "max_len": 128000,
        "layers": 24,
        "heads": 16,
        "hidden": 2048,
        "head_dim": 128,
        "windowing": "all",
    },
}
# MinistralConfig's defaults are MistralConfig's; it needs head_dim set (below)
_DEFAULTS["ministral"] = {
    **_DEFAULTS["mistral"],
    "require": (
        ("head_dim", "MinistralConfig's default is None, and its rotary embedding then fails (transformers 5.23: "
         "None ** float)"),
    ),
}  # fmt: skip


def _window(cfg: HFConfig, default: int | None) -> int | None:
    """``sliding_window`` as the class reads it: absent -> class default; null or 0 -> no window."""
    cfg.read.add("sliding_window")
    cfg.asked.add("sliding_window")
    value = cfg.raw["sliding_window"] if "sliding_window" in cfg.raw else default
    if value in (None, 0):
        return None
    return cfg.check_int("sliding_window", value)


def _pattern(cfg: HFConfig, windowing: str, n: int, window: int | None) -> list[str] | None:
    """The per-layer kinds a config class builds when config.json has no ``layer_types`` (None: every layer
    full, or no rule). Each rule is the class's ``__post_init__`` (transformers 5.23).

    Raises:
        SpecError: a setting the class itself cannot build (Exaone4 with no window, or a string
            ``sliding_window_pattern``).
    """
    if windowing == "alternate":  # VaultGemmaConfig: even layers (0, 2, ...) sliding
        return ["sliding" if (i + 1) % 2 else "full" for i in range(n)]
    if windowing == "first_of_4_full":  # GraniteSWAConfig, GraniteMoeSWAConfig, CwmConfig: layers 0, 4, 8 ... full
        return ["full" if i % 4 == 0 else "sliding" for i in range(n)]
    if windowing == "afmoe":  # AfmoeConfig: full where (i + 1) % global_attn_every_n_layers == 0
        every = cfg.int("global_attn_every_n_layers", 4)
        return ["full" if (i + 1) % every == 0 else "sliding" for i in range(n)]
    if windowing == "exaone4":  # Exaone4Config, ExaoneMoeConfig: sliding unless (i + 1) % sliding_window_pattern == 0
        pattern = cfg.get("sliding_window_pattern", 4)
        if window is None:
            raise cfg.error(
                "sliding_window is null and layer_types is absent: Exaone4Config then divides by a "
                "sliding_window_pattern of 0; give layer_types"
            )
        pattern = cfg.check_int("sliding_window_pattern", pattern)
        return ["full" if (i + 1) % pattern == 0 else "sliding" for i in range(n)]
    if windowing == "smollm3":  # SmolLM3Config: sliding where use_sliding_window and the layer has no RoPE
        use = cfg.flag("use_sliding_window", False)
        interval = cfg.int("no_rope_layer_interval", 4)
        rope = cfg.list("no_rope_layers", n)
        if rope is None:
            rope = [int((i + 1) % interval != 0) for i in range(n)]
        return ["sliding" if use and window is not None and not rope[i] else "full" for i in range(n)]
    if window is None:
        return None
    if windowing == "dots1":  # Dots1Config: sliding from max_window_layers (default 62) on
        first = cfg.int("max_window_layers", 62, minimum=0)
        return ["sliding" if i >= first else "full" for i in range(n)]
    if windowing == "all":
        return ["sliding"] * n
    if windowing in ("qwen", "qwen_vl"):  # Qwen2Config: sliding from max_window_layers on, when use_sliding_window
        first = cfg.int("max_window_layers", 28 if windowing == "qwen" else 80, minimum=0)
        use = cfg.flag("use_sliding_window", False)
        return ["sliding" if use and i >= first else "full" for i in range(n)]
    if windowing == "olmo3":  # Olmo3Config: every 4th layer full
        return ["full" if (i + 1) % 4 == 0 else "sliding" for i in range(n)]
    if windowing == "explicit":  # the class fills layer_types with full_attention: the window needs layer_types
        return ["full"] * n
    return ["full"] * n


def _check_rules(cfg: HFConfig, d: dict, data: dict) -> None:
    """Apply ``head_rule: derived`` and ``kv: mha`` (module docstring) to ``data``.

    Raises:
        SpecError: a config.json value the class's attention does not use.
    """
    heads, hidden = data["num_q_heads"], data["hidden_size"]
    if d.get("head_rule") == "derived":
        if hidden % heads:
            raise cfg.error(f"hidden_size={hidden} is not a multiple of num_attention_heads={heads}")
        if cfg.has("head_dim") and data["head_dim"] != hidden // heads:
            raise cfg.error(
                f"head_dim={data['head_dim']} but the {cfg.model_type} attention uses hidden_size / "
                f"num_attention_heads = {hidden // heads}; kvplan will not guess which one is served"
            )
        data["head_dim"] = hidden // heads
    if d.get("kv") == "mha" and data["num_kv_heads"] != heads:
        raise cfg.error(
            f"num_key_value_heads={data['num_kv_heads']} but the {cfg.model_type} attention keeps all "
            f"num_attention_heads={heads} K/V heads (its config class has no num_key_value_heads)"
        )


def read_decoder(cfg: HFConfig) -> dict:
    """A plain decoder's spec mapping (see the module docstring for which keys and defaults).

    Raises:
        SpecError: a missing or inconsistent value, or a window layout the class cannot build.
    """
    d = _DEFAULTS[cfg.model_type]
    for key in d.get("refuse", ()):
        if cfg.has(key):
            raise cfg.error(f"{key} is set (per-layer windows, read by vLLM only); kvplan has one window per kind")
    for key, why in d.get("require", ()):
        if not cfg.has(key):
            raise cfg.error(f"{key} is absent or null: {why}; transformers cannot build such a file")
    for key, why in d.get("refuse_true", ()):
        if cfg.get(key) is True:
            raise cfg.error(f"{key} is true: {why}; kvplan will not guess which cache the checkpoint needs")
    data = attention_dims(cfg, d)
    for key, used in d.get("same_as", ()):
        if cfg.has(key) and cfg.int(key) != data[used]:
            raise cfg.error(
                f"{key}={cfg.int(key)} but {used}={data[used]}: the {cfg.model_type} config class reads {used} only "
                f"(the remote code read {key}); kvplan will not guess which the checkpoint was trained with"
            )
    _check_rules(cfg, d, data)
    n = data["num_layers"]
    data["dtype"] = cfg.dtype()
    data["max_model_len"] = max_len(cfg, d["max_len"], *d.get("max_keys", ()))
    cfg.ignore("max_window_layers", "use_sliding_window")
    windowing = d.get("windowing", "none")
    window = _window(cfg, d.get("window")) if windowing != "none" else None
    kinds = cfg.layer_types(n, _TYPES)
    if kinds is None:
        kinds = _pattern(cfg, windowing, n, window)
    else:  # the class reads these only to build layer_types
        cfg.ignore("sliding_window_pattern", "no_rope_layers", "no_rope_layer_interval")
        if d.get("layer_types") is False and "sliding" in kinds:
            raise cfg.error(
                f"layer_types has sliding_attention layers, which the {cfg.model_type} config class does not "
                "read (transformers caches a window its attention does not apply); kvplan will not guess"
            )
    kinds = kinds or ["full"] * n
    if "sliding" in kinds:
        if window is None:
            raise cfg.error("layer_types has sliding_attention layers but sliding_window is not set")
        data["sliding_window"] = window
    data["layers"] = kinds
    return data


def read_mimo_v2_flash(cfg: HFConfig) -> dict:
    """MiMo-V2-Flash: full-attention layers and sliding-window layers with twice the KV heads.

    Mirrors transformers 5.23's ``MiMoV2FlashConfig`` (defaults: 48 layers, 64 query / 4 KV heads, head_dim
    192, v_head_dim 128, ``sliding_window`` 129; ``layer_types`` absent: full on layer 0 and every 6th layer
    ``(i + 1) % 6 == 0``, sliding elsewhere) and ``MiMoV2FlashAttention`` (a sliding layer has
    ``2 × num_key_value_heads`` KV heads), checked against vLLM 0.33's ``model_executor/models/mimo_v2.py``
    (``MiMoV2FlashDecoderLayer``): sliding where ``hybrid_layer_pattern[i] == 1``, with
    ``swa_num_key_value_heads`` / ``swa_head_dim`` / ``swa_v_head_dim`` and a window of ``sliding_window_size``.

    Window: transformers sets ``sliding_window = sliding_window_size + 1`` ("the reference SGLang
    implementation attends to sliding_window_size previous tokens plus the query"); vLLM passes
    ``sliding_window_size`` itself as the layer's window. kvplan plans vLLM's: ``sliding_window_size`` when
    set, else ``sliding_window``.

    Raises:
        SpecError: ``hybrid_layer_pattern`` that disagrees with ``layer_types`` (or the class default), or
            ``swa_*`` geometry that differs from what transformers' attention builds (2 × KV heads, the same
            head dims): transformers and vLLM would then serve different caches.
    """
    data = attention_dims(cfg, {"layers": 48, "heads": 64, "kv_heads": 4, "hidden": 4096, "head_dim": 192})
    n, kv, heads = data["num_layers"], data["num_kv_heads"], data["num_q_heads"]
    data["v_head_dim"] = cfg.int("v_head_dim", 128)
    data["dtype"] = cfg.dtype()
    data["max_model_len"] = max_len(cfg, 131072)
    kinds = cfg.layer_types(n, _TYPES)
    if kinds is None:
        kinds = ["full" if (i == 0 or not (i + 1) % 6) else "sliding" for i in range(n)]
    pattern = cfg.list("hybrid_layer_pattern", n)
    if pattern is not None and ["sliding" if v == 1 else "full" for v in pattern] != kinds:
        raise cfg.error(
            "hybrid_layer_pattern (vLLM's layout) disagrees with layer_types / MiMoV2FlashConfig's default "
            "(transformers' layout); kvplan will not guess"
        )
    swa = {
        "swa_num_key_value_heads": 2 * kv,
        "swa_num_attention_heads": heads,
        "swa_head_dim": data["head_dim"],
        "swa_v_head_dim": data["v_head_dim"],
    }
    for key, want in swa.items():
        if cfg.has(key) and cfg.int(key) != want:
            raise cfg.error(
                f"{key}={cfg.int(key)} but transformers' MiMoV2FlashAttention builds {want} on sliding layers "
                "(vLLM reads the key); kvplan will not guess"
            )
    if cfg.has("sliding_window_size"):
        window = cfg.int("sliding_window_size")
        cfg.ignore("sliding_window")
        note = f"window {window} (vLLM: sliding_window_size; transformers caches sliding_window_size + 1)"
    else:
        window = _window(cfg, 129)
        note = f"window {window} (sliding_window)"
    # attention_chunk_size is in the published file but neither transformers (layer_types set) nor vLLM reads it
    cfg.ignore("attention_chunk_size", "mlp_layer_types", "moe_layer_freq", "swa_rope_theta")
    data["layers"] = kinds
    if "sliding" in kinds:
        data["sliding_window"] = window
        data["geometry"] = {"sliding": {"num_kv_heads": 2 * kv}}
    data["notes"] = (
        f"{kinds.count('full')} full layers ({kv} KV heads) and {kinds.count('sliding')} sliding layers "
        f"({2 * kv} KV heads, {note})"
    )
    return data


def read_jetmoe(cfg: HFConfig) -> dict:
    """JetMoE: full attention on every layer, ``num_key_value_heads`` KV heads of ``kv_channels``.

    Mirrors transformers 5.23's ``JetMoeConfig`` (defaults: 12 layers, ``num_key_value_heads`` 16,
    ``kv_channels`` 128 (``head_dim`` is its ``attribute_map`` alias), ``hidden_size`` 2048,
    ``max_position_embeddings`` 4096; ``num_attention_heads`` is set to ``num_key_value_heads ×
    num_experts_per_tok`` whatever the file says) and ``JetMoeAttention``: only the queries go through the
    attention experts (MoA); one ``kv_proj`` gives K and V of ``num_key_value_heads × kv_channels``, which are
    cached and then repeated ``num_experts_per_tok`` times for the attention. vLLM 0.33 has no JetMoE model
    of its own and serves it through its Transformers backend (``models/transformers``), whose cache takes
    ``num_key_value_heads`` and ``head_dim`` from that config object.

    Raises:
        SpecError: a missing or non-integer value, or ``head_dim`` and ``kv_channels`` both set and different.
    """
    kv = cfg.int("num_key_value_heads", 16)
    head_dim = cfg.first_int("kv_channels", "head_dim", default=128)
    if cfg.has("kv_channels") and cfg.has("head_dim") and cfg.int("head_dim") != head_dim:
        raise cfg.error(
            f"head_dim={cfg.int('head_dim')} and kv_channels={head_dim}: JetMoeConfig maps one onto the other"
        )
    top_k = cfg.int("num_experts_per_tok", 2)
    cfg.ignore("num_attention_heads", "num_local_experts")  # JetMoeConfig overwrites the former
    data = {
        "num_layers": cfg.int("num_hidden_layers", 12),
        "num_q_heads": kv * top_k,
        "num_kv_heads": kv,
        "head_dim": head_dim,
        "hidden_size": cfg.int("hidden_size", 2048),
        "dtype": cfg.dtype(),
        "max_model_len": max_len(cfg, 4096),
    }
    for key in ("vocab_size", "intermediate_size"):
        value = cfg.raw.get(key)
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            data[key] = value
    return data


READERS = {model_type: read_decoder for model_type in _DEFAULTS}
READERS["mimo_v2_flash"] = read_mimo_v2_flash
READERS["jetmoe"] = read_jetmoe
