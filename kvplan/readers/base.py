"""What every config.json reader shares: a view of the config that records what was read, the class
defaults, and the checks that keep a reader from guessing.

A reader is a function ``read(cfg: HFConfig) -> dict`` that returns the fields of a spec YAML (see
:mod:`kvplan.specs`), without ``name`` and ``source``. It reads every key through ``cfg`` so that, when it
returns, :meth:`HFConfig.check_unhandled` can refuse:

- a key from :data:`LAYOUT_KEYS` (one that changes which layer is which, or a layer's geometry) that the
  config sets and the reader never looked at;
- a key that is one edit away from a key the reader asked for and did not find (``num_key_value_head``
  for ``num_key_value_heads``): a typo that would otherwise silently fall back to a default.
"""

from __future__ import annotations

from typing import Any

from kvplan.errors import SpecError
from kvplan.specs import MAX_DIMENSION, MAX_LAYERS

_MISSING = object()

# Keys that count decoder layers: bounded by MAX_LAYERS as soon as they are read, so a reader never builds
# a per-layer list from a huge count (num_hidden_layers: 2000000000 would exhaust memory first).
LAYER_COUNT_KEYS = ("num_hidden_layers", "n_layer", "n_layers", "num_layers", "num_transformer_layers")

# Keys whose value is a list of layer type names: every entry must be a string (a list or object there
# would otherwise reach a dict lookup and fail with a traceback).
LAYER_TYPE_KEYS = ("layer_types", "layers_block_type")

# Keys that change which layer is which kind, or a layer's cache geometry. A config that sets one the
# reader did not consume is refused: kvplan would otherwise print a number for a model it misreads.
LAYOUT_KEYS = (
    "layer_types",
    "layers_block_type",
    "hybrid_override_pattern",
    "full_attn_idxs",
    "attn_layer_indices",
    "attn_layer_period",
    "attn_layer_offset",
    "attn_type_list",
    "num_kv_shared_layers",
    "global_head_dim",
    "num_global_key_value_heads",
    "attention_k_eq_v",
    "block_configs",
    "index_head_dim",
    "index_n_heads",
    "kv_lora_rank",
    "sliding_window",
    "sliding_window_pattern",
    "attention_chunk_size",
    "no_rope_layers",
    "linear_num_value_heads",
    "linear_num_key_heads",
    "mamba_n_heads",
    "mamba_num_heads",
    "mamba_d_state",
    "ssm_state_size",
    "num_kv_heads_per_layer",
    "num_kv_heads",
    "head_dim_per_layer",
    "layer_head_dims",
    "swa_layers",
    "full_attention_layers",
    "global_attn_every_n_layers",
    "mlp_only_layers",
    "per_layer_config",
)

# One field's names in different families' configs (transformers' attribute_maps: FalconConfig n_head_kv and
# num_kv_heads, GPT2Config n_embd / n_head / n_layer / n_positions, MptConfig d_model / n_heads / n_layers /
# max_seq_len, ChatGLM multi_query_group_num / kv_channels / seq_length, Qwen (v1) kv_channels / seq_length):
# a reader that asks for one name and finds another of its group unread refuses it (check_unhandled), as it
# refuses a misspelling; it would otherwise take the class default (MHA for num_key_value_heads).
FIELD_SPELLINGS = (
    ("num_key_value_heads", "num_kv_heads", "n_head_kv", "n_kv_heads", "multi_query_group_num", "kv_n_heads"),
    ("num_attention_heads", "n_head", "n_heads", "num_heads"),
    ("num_hidden_layers", "n_layer", "n_layers", "num_layers"),
    ("hidden_size", "n_embd", "d_model"),
    ("max_position_embeddings", "n_positions", "max_seq_len", "seq_length", "max_sequence_length"),
    ("head_dim", "kv_channels"),
)

# Model types whose configs are encoder-only or bidirectional: they keep no KV cache when serving.
# Encoder-only model types: no KV cache to plan. Besides encoders transformers maps to no causal-LM class,
# the BERT family whose config class defaults to an encoder (``is_decoder`` False) and which transformers also
# maps to a masked-LM class: their causal-LM class is the ``is_decoder`` variant of an encoder, not a published
# decoder (tests/test_readers_v4_rg.py checks this list against transformers 5.23's mappings).
ENCODER_TYPES = (
    "bert",
    "roberta",
    "xlm-roberta",
    "distilbert",
    "albert",
    "electra",
    "deberta",
    "deberta-v2",
    "modernbert",
    "mpnet",
    "camembert",
    "ernie",
    "nomic_bert",
    "big_bird",
    "megatron-bert",
    "rembert",
    "roformer",
    "xmod",
    "roberta-prelayernorm",
    "data2vec-text",
    "xlm-roberta-xl",
    "roc_bert",
)

# Model types that are encoders unless their config says otherwise: model_type -> (key, the value that makes the
# model a decoder). XLMConfig's ``causal`` defaults to false (XLM's masked-LM checkpoints: bidirectional attention,
# no KV cache; transformers also maps xlm to a masked-LM class); its CLM checkpoints set it true.
ENCODER_UNLESS: dict[str, tuple[str, object]] = {"xlm": ("causal", True)}


# Decoder model types whose transformers model keeps no cache at all (nothing to plan, as for an encoder):
# model_type -> where transformers says so.
NO_CACHE_TYPES: dict[str, str] = {
    "openai-gpt": "transformers' OpenAIGPTModel.forward takes no past_key_values (modeling_openai.py): GPT-1 "
    "recomputes every token at each step",
    "gemma4_assistant": "Gemma4AssistantForCausalLM (modeling_gemma4_assistant.py) is a speculative-decoding drafter "
    "whose every layer reads the target Gemma 4 model's K/V (shared_kv_states, 'acts as past cache'; its published "
    "configs set num_kv_shared_layers = num_hidden_layers): it caches nothing of its own; plan the target model",
    "gemma4_unified_assistant": "Gemma4UnifiedAssistantForCausalLM (modeling_gemma4_unified_assistant.py) is a "
    "drafter whose every layer reads the target model's K/V (shared_kv_states; its config class sets "
    "num_kv_shared_layers = num_hidden_layers): it caches nothing of its own; plan the target model",
}


def is_encoder(model_type: str, config: dict) -> bool:
    """True for an encoder-only model_type (:data:`ENCODER_TYPES`), or one of :data:`ENCODER_UNLESS` whose
    config leaves the key that makes it a decoder at its class default."""
    if model_type in ENCODER_TYPES:
        return True
    key, decoder = ENCODER_UNLESS.get(model_type, (None, None))
    return key is not None and config.get(key) != decoder


# A did-you-mean names a registered model_type only this similar (difflib's ratio, 0..1) to the one given:
# typos and spellings ('gemma-3', 'qwen3-moe', 'lama': 0.89-0.92) pass, a different family that shares letters
# ('codegen' / 'cohere': 0.62) does not.
CLOSE_NAME_CUTOFF = 0.8

# Where a spec YAML's format is described (the refusals point there).
SPEC_FORMAT_DOC = "docs/spec-format.md"


def close_model_type(model_type: str, known) -> str | None:
    """The registered model_type ``model_type`` is most likely a misspelling of, or None when none is at least
    :data:`CLOSE_NAME_CUTOFF` similar (a wrong guess is worse than none)."""
    import difflib

    close = difflib.get_close_matches(str(model_type), list(known), n=1, cutoff=CLOSE_NAME_CUTOFF)
    return close[0] if close else None


# config.json dtype names -> kvplan's model dtypes. vLLM's dtype=auto serves float32 checkpoints in a
# 16-bit dtype (vllm/config/model.py: _get_and_verify_dtype; bf16 on Ampere or newer, fp16 before): a
# float32 checkpoint caches 2 bytes per element either way.
HF_DTYPES = {
    "bfloat16": "bf16",
    "float16": "fp16",
    "half": "fp16",
    "float32": "fp16",
    "float": "fp16",
}


class HFConfig:
    """A config.json (its ``text_config`` for multimodal models) with the keys each reader read.

    Attributes:
        where: file name for messages.
        raw: the decoder's config mapping (``text_config`` merged over the outer dtype and model_type).
        outer: the whole config.json.
        model_type: the decoder's ``model_type`` (``text_config.model_type`` first, as transformers does).
    """

    def __init__(self, config: dict, where: str):
        if config.get("text_config") is not None and not isinstance(config["text_config"], dict):
            raise SpecError(f"{where}: text_config must be an object")
        self.where = where
        self.outer = config
        self.raw = dict(config.get("text_config") or config)
        for k in ("torch_dtype", "dtype"):
            if self.raw.get(k) is None and config.get(k) is not None:
                self.raw[k] = config[k]
        self.model_type = str(self.raw.get("model_type") or config.get("model_type") or "")
        self.read: set[str] = {"model_type"}
        self.asked: set[str] = set()

    def error(self, message: str) -> SpecError:
        """A SpecError naming the file."""
        return SpecError(f"{self.where}: {message}")

    def has(self, key: str) -> bool:
        """True when the key is set (not null); records that the reader looked at it."""
        self.read.add(key)
        self.asked.add(key)
        return self.raw.get(key) is not None

    def get(self, key: str, default: Any = None) -> Any:
        """The raw value, or ``default`` (the config class default) when absent or null."""
        self.read.add(key)
        self.asked.add(key)
        value = self.raw.get(key)
        return default if value is None else value

    def int(self, key: str, default: Any = _MISSING, minimum: int = 1) -> int:
        """An integer value >= minimum, or ``default`` when absent.

        Raises:
            SpecError: absent with no default, not an integer, below minimum or above kvplan's bound.
        """
        value = self.get(key)
        if value is None:
            if default is _MISSING:
                raise self.error(f"missing {key}")
            return default
        return self.check_int(key, value, minimum)

    def check_int(self, key: str, value: Any, minimum: int = 1) -> int:
        """Validate an integer read from ``key`` (or an element of it)."""
        if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
            raise self.error(f"{key}={value!r} must be an integer >= {minimum}")
        if value > MAX_DIMENSION:
            raise self.error(f"{key}={value} is larger than kvplan handles ({MAX_DIMENSION:,})")
        if key in LAYER_COUNT_KEYS and value > MAX_LAYERS:
            raise self.error(f"{key}={value} is more layers than kvplan handles ({MAX_LAYERS:,})")
        return value

    def first_int(self, *keys: str, default: Any = _MISSING, minimum: int = 1) -> int:
        """The first of ``keys`` that is set, as :meth:`int`; the message names them all when none is."""
        for key in keys:
            if self.has(key):
                return self.int(key, minimum=minimum)
        if default is _MISSING:
            raise self.error(f"missing {keys[0]}" + (f" (or {', '.join(keys[1:])})" if len(keys) > 1 else ""))
        return default

    def flag(self, key: str, default: bool = False) -> bool:
        """A boolean value, or ``default`` when absent.

        Raises:
            SpecError: set to something other than true/false.
        """
        value = self.get(key)
        if value is None:
            return default
        if not isinstance(value, bool):
            raise self.error(f"{key}={value!r} must be true or false")
        return value

    def list(self, key: str, length: int | None = None) -> list | None:
        """A list value (None when absent), of ``length`` items when given.

        Raises:
            SpecError: not a list, or the wrong length.
        """
        value = self.get(key)
        if value is None:
            return None
        if not isinstance(value, list):
            raise self.error(f"{key} must be a list" + (f" of {length} values" if length else ""))
        if length is not None and len(value) != length:
            raise self.error(f"{key} has {len(value)} entries, num_hidden_layers={length}")
        if key in LAYER_TYPE_KEYS:
            bad = next((i for i, t in enumerate(value) if not isinstance(t, str)), None)
            if bad is not None:
                raise self.error(
                    f"{key}[{bad}]={value[bad]!r} is not handled by the {self.model_type or 'generic'} reader: "
                    "a layer type is a name (a string)"
                )
        return value

    def string(self, key: str, default: Any = None) -> Any:
        """A string value, or ``default`` when absent or null.

        Raises:
            SpecError: set to something other than a string (a number, list or object).
        """
        value = self.get(key)
        if value is None:
            return default
        if not isinstance(value, str):
            raise self.error(f"{key}={value!r} must be a string")
        return value

    def ignore(self, *keys: str) -> None:
        """Mark keys as handled on purpose (a reader that knows a key does not matter for the cache)."""
        self.read.update(keys)

    def dtype(self, default: str = "float32") -> str:
        """The model dtype (``torch_dtype`` or transformers 5's ``dtype``), as a kvplan dtype name.

        ``default`` is the config class default when neither key is set (PretrainedConfig: float32).
        """
        raw = self.get("torch_dtype") or self.get("dtype") or default
        name = HF_DTYPES.get(str(raw).lower())
        if name is None:
            raise self.error(f"torch_dtype={raw!r} is not a model dtype; allowed: {', '.join(HF_DTYPES)}")
        return name

    def layer_types(self, num_layers: int, mapping: dict[str, str]) -> list[str] | None:
        """``layer_types`` mapped to kvplan kinds, or None when absent.

        Raises:
            SpecError: wrong length, or a value ``mapping`` does not handle (named, with what is handled).
        """
        types = self.list("layer_types", num_layers)
        if types is None:
            return None
        out = []
        for i, t in enumerate(types):
            if not isinstance(t, str) or t not in mapping:
                raise self.error(
                    f"layer_types[{i}]={t!r} is not handled by the {self.model_type or 'generic'} reader; "
                    f"handled: {', '.join(mapping)}"
                )
            out.append(mapping[t])
        return out

    def check_unhandled(self) -> None:
        """Refuse layout keys the reader did not read and likely misspellings of keys it asked for.

        Raises:
            SpecError: naming the key.
        """
        import difflib

        for key in LAYOUT_KEYS:
            if key not in self.read and self.raw.get(key) not in (None, [], {}, False):
                reader = self.model_type or "generic"
                raise self.error(
                    f"{key} is set, and it changes the layer layout or geometry, but the {reader} reader "
                    "does not handle it; kvplan will not guess (write a spec YAML, see 'kvplan models')"
                )
        missing = sorted(k for k in self.asked if self.raw.get(k) is None)
        lower = {k.lower(): k for k in missing}
        for key in sorted(k for k in self.raw if isinstance(k, str)):
            if key in self.read:
                continue
            close = difflib.get_close_matches(key.lower(), list(lower), n=1, cutoff=0.9)  # case does not count
            if close:
                raise self.error(
                    f"unknown key {key!r} (did you mean {lower[close[0]]!r}?); a misspelt key is not guessed"
                )
            for group in FIELD_SPELLINGS:
                if key.lower() in group:
                    wanted = next((k for k in group if k in missing), None)
                    if wanted is not None:
                        raise self.error(
                            f"unknown key {key!r}: another family's name of {wanted!r}, which the "
                            f"{self.model_type or 'generic'} reader reads (did you mean {wanted!r}?); a misspelt "
                            "key is not guessed"
                        )


def attention_dims(cfg: HFConfig, defaults: dict | None = None, *, head_dim_default: Any = _MISSING) -> dict:
    """The decoder's common fields: layers, query/KV heads, head_dim, hidden_size, as spec keys.

    ``defaults`` holds the config class's defaults for absent keys (``layers``, ``heads``, ``kv_heads``,
    ``hidden``, ``head_dim``); without it those keys are required. ``num_key_value_heads`` set to null, or
    absent with no class default, means H_kv = H_q (every transformers decoder config does this);
    ``head_dim`` absent means the class default; null, or absent with no default, means
    ``hidden_size // num_attention_heads``.

    Raises:
        SpecError: a missing or non-integer value, or hidden_size not a multiple of the heads.
    """
    d = defaults or {}
    num_layers = cfg.int("num_hidden_layers", d.get("layers", _MISSING))
    num_q = cfg.int("num_attention_heads", d.get("heads", _MISSING))
    kv_default = d.get("kv_heads") if "num_key_value_heads" not in cfg.raw else None
    num_kv = cfg.int("num_key_value_heads", kv_default or num_q)
    hidden = cfg.int("hidden_size", d.get("hidden"))
    if head_dim_default is _MISSING:
        head_dim_default = d.get("head_dim")
    if cfg.has("head_dim"):
        head_dim = cfg.int("head_dim")
    elif head_dim_default is not None and "head_dim" not in cfg.raw:  # null: the class derives it
        head_dim = head_dim_default
    else:
        if hidden is None:
            raise cfg.error("missing hidden_size (needed for head_dim = hidden_size / num_attention_heads)")
        if hidden % num_q:
            raise cfg.error(f"hidden_size={hidden} is not a multiple of num_attention_heads={num_q}")
        head_dim = hidden // num_q
    out = {
        "num_layers": num_layers,
        "num_q_heads": num_q,
        "num_kv_heads": num_kv,
        "head_dim": head_dim,
        "hidden_size": hidden,
    }
    # sizes the engine's profile run (kvplan fit's activation estimate), not the cache: taken when present
    for key in ("vocab_size", "intermediate_size"):
        value = cfg.raw.get(key)
        if isinstance(value, int) and not isinstance(value, bool) and 0 < value <= MAX_DIMENSION:
            out[key] = value
    return out


def max_len(cfg: HFConfig, default: int, *keys: str) -> int:
    """The maximum context: the first of ``keys`` (default ``max_position_embeddings``) that is set, else
    the config class default."""
    return cfg.first_int(*(keys or ("max_position_embeddings",)), default=default)


def mha_dims(cfg: HFConfig, names: tuple[str, str, str, str], defaults: tuple[int, int, int, int]) -> dict:
    """An MHA decoder's attention dims from its family's own key names, each falling back to the Hugging Face
    standard name, then to the config class's default: ``names`` = (layers, heads, width, positions) keys
    (GPT-2 ``n_layer, n_head, n_embd, n_positions``; MPT ``n_layers, n_heads, d_model, max_seq_len``),
    ``defaults`` their class defaults. K/V heads = query heads; head_dim = width / heads.

    Raises:
        SpecError: the width is not a multiple of the heads (the message names both keys).
    """
    layers_key, heads_key, width_key, positions_key = names
    layers, heads, width, positions = defaults
    num_layers = cfg.first_int(layers_key, "num_hidden_layers", default=layers)
    heads = cfg.first_int(heads_key, "num_attention_heads", default=heads)
    hidden = cfg.first_int(width_key, "hidden_size", default=width)
    if hidden % heads:
        raise cfg.error(f"{width_key}={hidden} is not a multiple of {heads_key}={heads}")
    return {
        "num_layers": num_layers,
        "num_q_heads": heads,
        "num_kv_heads": heads,
        "head_dim": hidden // heads,
        "hidden_size": hidden,
        "dtype": cfg.dtype(),
        "max_model_len": cfg.first_int(positions_key, "max_position_embeddings", default=positions),
    }
