"""Model specs: frozen dataclasses and their loaders (bundled name, spec YAML, Hugging Face config.json).

A :class:`ModelSpec` holds what KV-cache sizing needs from a model's config.json: layer count, query and
KV heads, head dims, the model dtype, the parameter count (for weights), the maximum context, and the
kind of cache each layer keeps:

=========  ==========================================================================================
kind       what one layer caches per request of S tokens
=========  ==========================================================================================
full       K and V for all S tokens: ``H_kv × (head_dim + v_head_dim)`` elements per token
sliding    the same per token, for at most ``sliding_window`` tokens (Mistral, Gemma 2/3, GPT-OSS)
chunked    the same per token, for at most ``attention_chunk_size`` tokens (Llama 4 iRoPE layers)
mla        one latent of ``kv_lora_rank + qk_rope_head_dim`` elements per token (DeepSeek V2/V3)
mamba      no tokens: a fixed state of ``d_inner × (d_conv − 1) + d_inner × d_state`` elements (Jamba)
shared     nothing of its own: it reads another layer's cache (cross-layer KV sharing)
=========  ==========================================================================================

Spec YAML format (unknown keys are errors)::

    name: gemma3-27b
    source: https://huggingface.co/google/gemma-3-27b-it/blob/main/config.json
    num_layers: 62
    num_q_heads: 32
    num_kv_heads: 16
    head_dim: 128            # v_head_dim: optional, defaults to head_dim
    hidden_size: 5376        # optional; sizes the activation estimate in `fit`
    dtype: bf16
    param_count: 27400000000 # optional; needed by `fit` for weights
    weights_dtype: bf16      # optional: how the checkpoint ships (fp8, mxfp4 ...); default: dtype
    param_count_unquantized: 0  # optional: parameters kept in dtype when weights_dtype is quantized
    max_model_len: 131072
    sliding_window: 1024     # needed when a layer is sliding
    layers:                  # optional; default: every layer full (mla when an mla: block is given)
      default: sliding
      rules:                 # applied in order; a later rule wins
        - {kind: full, period: 6, offset: 5}   # layer i matches when i % period == offset
        - {kind: full, indices: [61]}          # or an explicit list of layer indices
    # layers may also be an explicit list of num_layers kinds: [sliding, full, ...]
    mla: {kv_lora_rank: 512, qk_rope_head_dim: 64}
    mamba: {d_inner: 8192, d_conv: 4, d_state: 16}   # optional state_dtype (default: dtype)
    notes: free text (assumptions made)
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kvplan.dtypes import get_kv_dtype
from kvplan.errors import SpecError

LAYER_KINDS = ("full", "sliding", "chunked", "mla", "mamba", "shared")
MAX_DIMENSION = 1 << 31  # no count in a spec (layers, heads, dims, tokens) may exceed this
MAX_LAYERS = 100_000
MAX_FILE_BYTES = 16 << 20  # spec, config.json and workload files are read whole: refuse larger ones
MODEL_DTYPES = ("fp32", "fp16", "bf16")
ATTENTION_KINDS = ("full", "sliding", "chunked", "mla")


@dataclass(frozen=True)
class MLAConfig:
    """Multi-head latent attention (DeepSeek-V2, arXiv:2405.04434): one cached latent per token and layer.

    Attributes:
        kv_lora_rank: compressed KV latent width (elements), 512 in DeepSeek V2/V3.
        qk_rope_head_dim: decoupled RoPE key width (elements), 64 in DeepSeek V2/V3.
    """

    kv_lora_rank: int
    qk_rope_head_dim: int

    @property
    def latent_dim(self) -> int:
        """Elements cached per token per layer: ``kv_lora_rank + qk_rope_head_dim`` (576 for DeepSeek-V3)."""
        return self.kv_lora_rank + self.qk_rope_head_dim


@dataclass(frozen=True)
class MambaConfig:
    """A Mamba-1 layer's fixed per-request state (Gu & Dao 2023; Jamba, arXiv:2403.19887).

    State elements per layer = conv ``d_inner × (d_conv − 1)`` + ssm ``d_inner × d_state``
    (vLLM's layout; Hugging Face keeps d_conv conv columns).

    Attributes:
        d_inner: expanded inner width (``mamba_expand × hidden_size``), elements.
        d_conv: causal conv kernel width.
        d_state: SSM state size per channel.
        state_dtype: storage dtype of the state; None means the model dtype.
    """

    d_inner: int
    d_conv: int
    d_state: int
    state_dtype: str | None = None

    def state_elements(self, tp: int = 1) -> int:
        """State elements one request keeps in one layer, on one of ``tp`` tensor-parallel ranks."""
        d_inner = -(-self.d_inner // tp)
        return d_inner * (self.d_conv - 1) + d_inner * self.d_state


@dataclass(frozen=True)
class ModelSpec:
    """A model's KV-cache geometry. All counts are ints; tokens and elements, never bytes.

    Attributes:
        name: short name (``llama3-8b``).
        source: URL or path of the config.json the numbers came from.
        num_layers: decoder layers (L).
        num_q_heads: query heads (H_q).
        num_kv_heads: KV heads (H_kv); H_q is a multiple of it. Nominal for MLA layers.
        head_dim: K head dim (d_head).
        v_head_dim: V head dim (defaults to head_dim).
        hidden_size: model width, or None (only the activation estimate of ``fit`` uses it).
        dtype: model activation dtype, the default KV dtype (canonical name, e.g. ``bf16``).
        param_count: total parameters (MoE: all experts), or None when unknown.
        weights_dtype: the dtype the checkpoint's weights ship in (``fp8``, ``mxfp4``), or None: ``dtype``.
        param_count_unquantized: parameters a quantized checkpoint keeps in ``dtype`` (embeddings ...).
        max_model_len: the model's maximum context (tokens).
        layer_kinds: one of :data:`LAYER_KINDS` per layer, length num_layers.
        sliding_window: tokens a sliding layer keeps, or None.
        attention_chunk_size: tokens a chunked layer keeps, or None.
        mla: the latent config, or None.
        mamba: the state config, or None.
        hf_repo: Hugging Face repository id, when known.
        notes: assumptions made in building the spec.
    """

    name: str
    source: str
    num_layers: int
    num_q_heads: int
    num_kv_heads: int
    head_dim: int
    dtype: str
    max_model_len: int
    layer_kinds: tuple[str, ...]
    v_head_dim: int | None = None
    hidden_size: int | None = None
    param_count: int | None = None
    weights_dtype: str | None = None
    param_count_unquantized: int = 0
    sliding_window: int | None = None
    attention_chunk_size: int | None = None
    mla: MLAConfig | None = None
    mamba: MambaConfig | None = None
    hf_repo: str | None = None
    notes: str = ""
    origin: str = field(default="", compare=False)

    @property
    def v_dim(self) -> int:
        """V head dim actually used (``v_head_dim`` or ``head_dim``)."""
        return self.v_head_dim if self.v_head_dim is not None else self.head_dim

    @property
    def queries_per_kv_head(self) -> int:
        """Query heads served by one KV head (H_q / H_kv): 1 for MHA, H_q for MQA."""
        return self.num_q_heads // self.num_kv_heads

    @property
    def topology(self) -> str:
        """``MHA``, ``GQA``, ``MQA`` or ``MLA`` (the attention layers' head topology)."""
        if self.mla is not None and "mla" in self.layer_kinds:
            return "MLA"
        if self.num_kv_heads == self.num_q_heads:
            return "MHA"
        if self.num_kv_heads == 1:
            return "MQA"
        return "GQA"

    def kind_counts(self) -> dict[str, int]:
        """Layers per kind, in :data:`LAYER_KINDS` order, kinds with no layers left out."""
        return {k: self.layer_kinds.count(k) for k in LAYER_KINDS if k in self.layer_kinds}

    def window_of(self, kind: str) -> int | None:
        """Token limit of a layer kind: the window, the chunk, or None (all tokens / no tokens)."""
        if kind == "sliding":
            return self.sliding_window
        if kind == "chunked":
            return self.attention_chunk_size
        return None

    def with_kv_heads(self, num_kv_heads: int, name: str | None = None) -> ModelSpec:
        """A copy with another H_kv (for the MHA/GQA/MQA comparison).

        Raises:
            SpecError: H_q is not a multiple of the new H_kv.
        """
        from dataclasses import replace

        if num_kv_heads < 1 or self.num_q_heads % num_kv_heads:
            raise SpecError(
                f"{self.name}: num_q_heads={self.num_q_heads} is not a multiple of num_kv_heads={num_kv_heads}"
            )
        return replace(self, num_kv_heads=num_kv_heads, name=name or self.name)


# --- validation helpers ---------------------------------------------------------------------------

_TOP_KEYS = {
    "name",
    "source",
    "hf_repo",
    "num_layers",
    "num_q_heads",
    "num_kv_heads",
    "head_dim",
    "v_head_dim",
    "hidden_size",
    "dtype",
    "param_count",
    "weights_dtype",
    "param_count_unquantized",
    "max_model_len",
    "sliding_window",
    "attention_chunk_size",
    "layers",
    "mla",
    "mamba",
    "notes",
}
_REQUIRED = ("name", "source", "num_layers", "num_q_heads", "num_kv_heads", "head_dim", "dtype", "max_model_len")


def _pos_int(
    where: str, key: str, value: Any, *, allow_none: bool = False, minimum: int = 1, maximum: int = MAX_DIMENSION
) -> int | None:
    if value is None and allow_none:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise SpecError(f"{where}: {key}={value!r} must be an integer >= {minimum}")
    if value < minimum:
        raise SpecError(f"{where}: {key}={value} must be an integer >= {minimum}")
    if value > maximum:
        raise SpecError(f"{where}: {key}={value} is larger than kvplan handles (at most {maximum:,})")
    return value


def _check_keys(where: str, data: dict, allowed: set[str], prefix: str = "") -> None:
    import difflib

    unknown = sorted(set(data) - allowed)
    if unknown:
        k = unknown[0]
        close = difflib.get_close_matches(str(k), sorted(allowed), n=1)
        hint = f" (did you mean {prefix}{close[0]}?)" if close else ""
        raise SpecError(f"{where}: unknown key {prefix}{k!r}{hint}; allowed: {', '.join(sorted(allowed))}")


def _resolve_layers(where: str, layers: Any, num_layers: int, default_kind: str) -> tuple[str, ...]:
    """Turn the ``layers:`` value of a spec into one kind per layer."""

    def check_kind(kind: Any, key: str) -> str:
        if kind not in LAYER_KINDS:
            raise SpecError(f"{where}: {key}={kind!r} is not a layer kind; allowed: {', '.join(LAYER_KINDS)}")
        return kind

    if layers is None:
        return (default_kind,) * num_layers
    if isinstance(layers, list):
        if len(layers) != num_layers:
            raise SpecError(f"{where}: layers lists {len(layers)} kinds but num_layers={num_layers}")
        return tuple(check_kind(k, f"layers[{i}]") for i, k in enumerate(layers))
    if not isinstance(layers, dict):
        raise SpecError(f"{where}: layers must be a list of kinds or a mapping with default and rules")
    _check_keys(where, layers, {"default", "rules"}, "layers.")
    kinds = [check_kind(layers.get("default", default_kind), "layers.default")] * num_layers
    rules = layers.get("rules") or []
    if not isinstance(rules, list):
        raise SpecError(f"{where}: layers.rules must be a list of rules")
    for n, rule in enumerate(rules):
        key = f"layers.rules[{n}]"
        if not isinstance(rule, dict):
            raise SpecError(f"{where}: {key} must be a mapping with kind and period/offset or indices")
        _check_keys(where, rule, {"kind", "period", "offset", "indices"}, f"{key}.")
        kind = check_kind(rule.get("kind"), f"{key}.kind")
        if "indices" in rule:
            if "period" in rule or "offset" in rule:
                raise SpecError(f"{where}: {key} gives both indices and period/offset; use one")
            idx = rule["indices"]
            if not isinstance(idx, list) or not idx:
                raise SpecError(f"{where}: {key}.indices must be a non-empty list of layer indices")
            for i in idx:
                if isinstance(i, bool) or not isinstance(i, int) or not 0 <= i < num_layers:
                    raise SpecError(f"{where}: {key}.indices has {i!r}; allowed: 0..{num_layers - 1}")
                kinds[i] = kind
        elif "period" in rule:
            period = _pos_int(where, f"{key}.period", rule["period"])
            offset = rule.get("offset", 0)
            if isinstance(offset, bool) or not isinstance(offset, int) or not 0 <= offset < period:
                raise SpecError(f"{where}: {key}.offset={offset!r} must be an integer in 0..{period - 1}")
            for i in range(num_layers):
                if i % period == offset:
                    kinds[i] = kind
        else:
            raise SpecError(f"{where}: {key} needs period (with offset) or indices")
    return tuple(kinds)


def _canonical_dtype(where: str, key: str, value: Any) -> str:
    from kvplan.errors import UsageError

    try:
        return get_kv_dtype(str(value), what=f"{where}: {key}").name
    except UsageError as e:
        raise SpecError(str(e)) from None


def build_spec(data: Any, where: str) -> ModelSpec:
    """Validate a parsed spec mapping and build a :class:`ModelSpec`.

    Args:
        data: the mapping from the YAML file (``yaml.safe_load``).
        where: file name used in error messages.

    Raises:
        SpecError: unknown or missing keys, wrong types, values < 1, H_q not a multiple of H_kv, a layer
            kind without its parameters (sliding without sliding_window ...).
    """
    if not isinstance(data, dict):
        raise SpecError(f"{where}: a spec must be a YAML mapping of fields, got {type(data).__name__}")
    _check_keys(where, data, _TOP_KEYS)
    for key in _REQUIRED:
        if data.get(key) is None:
            raise SpecError(f"{where}: missing required field {key}")
    for key in ("name", "source"):
        if not isinstance(data[key], str) or not data[key].strip():
            raise SpecError(f"{where}: {key} must be a non-empty string")
        if any(ord(c) < 32 or ord(c) == 127 for c in data[key]):
            raise SpecError(f"{where}: {key} must be one line of printable text")
    num_layers = _pos_int(where, "num_layers", data["num_layers"], maximum=MAX_LAYERS)
    num_q_heads = _pos_int(where, "num_q_heads", data["num_q_heads"])
    num_kv_heads = _pos_int(where, "num_kv_heads", data["num_kv_heads"])
    head_dim = _pos_int(where, "head_dim", data["head_dim"])
    v_head_dim = _pos_int(where, "v_head_dim", data.get("v_head_dim"), allow_none=True)
    max_model_len = _pos_int(where, "max_model_len", data["max_model_len"])
    hidden_size = _pos_int(where, "hidden_size", data.get("hidden_size"), allow_none=True)
    param_count = _pos_int(where, "param_count", data.get("param_count"), allow_none=True, maximum=1 << 50)
    kept = _pos_int(
        where, "param_count_unquantized", data.get("param_count_unquantized", 0), minimum=0, maximum=1 << 50
    )
    if kept and (param_count is None or kept > param_count):
        raise SpecError(f"{where}: param_count_unquantized={kept} must not exceed param_count={param_count}")
    weights_dtype = data.get("weights_dtype")
    if weights_dtype is not None:
        from kvplan.dtypes import get_weight_dtype
        from kvplan.errors import UsageError

        try:
            weights_dtype = get_weight_dtype(str(weights_dtype), what=f"{where}: weights_dtype").name
        except UsageError as e:
            raise SpecError(str(e)) from None
    sliding_window = _pos_int(where, "sliding_window", data.get("sliding_window"), allow_none=True)
    chunk = _pos_int(where, "attention_chunk_size", data.get("attention_chunk_size"), allow_none=True)
    if num_q_heads % num_kv_heads:
        raise SpecError(f"{where}: num_q_heads={num_q_heads} is not a multiple of num_kv_heads={num_kv_heads}")
    dtype = _canonical_dtype(where, "dtype", data["dtype"])
    if dtype not in MODEL_DTYPES:
        raise SpecError(
            f"{where}: dtype={data['dtype']!r} is a cache format, not a model dtype; allowed: {', '.join(MODEL_DTYPES)}"
        )

    mla = None
    if data.get("mla") is not None:
        m = data["mla"]
        if not isinstance(m, dict):
            raise SpecError(f"{where}: mla must be a mapping with kv_lora_rank and qk_rope_head_dim")
        _check_keys(where, m, {"kv_lora_rank", "qk_rope_head_dim"}, "mla.")
        mla = MLAConfig(
            _pos_int(where, "mla.kv_lora_rank", m.get("kv_lora_rank")),
            _pos_int(where, "mla.qk_rope_head_dim", m.get("qk_rope_head_dim"), minimum=0),
        )
    mamba = None
    if data.get("mamba") is not None:
        m = data["mamba"]
        if not isinstance(m, dict):
            raise SpecError(f"{where}: mamba must be a mapping with d_inner, d_conv and d_state")
        _check_keys(where, m, {"d_inner", "d_conv", "d_state", "state_dtype"}, "mamba.")
        state_dtype = m.get("state_dtype")
        mamba = MambaConfig(
            _pos_int(where, "mamba.d_inner", m.get("d_inner")),
            _pos_int(where, "mamba.d_conv", m.get("d_conv"), minimum=2),
            _pos_int(where, "mamba.d_state", m.get("d_state")),
            None if state_dtype is None else _canonical_dtype(where, "mamba.state_dtype", state_dtype),
        )

    default_kind = "mla" if mla is not None else "full"
    kinds = _resolve_layers(where, data.get("layers"), num_layers, default_kind)
    needs = {
        "sliding": (sliding_window, "sliding_window"),
        "chunked": (chunk, "attention_chunk_size"),
        "mla": (mla, "mla"),
        "mamba": (mamba, "mamba"),
    }
    for kind, (value, key) in needs.items():
        if kind in kinds and value is None:
            raise SpecError(f"{where}: layers has {kind} layers but {key} is not given")
    if mla is not None and "mla" not in kinds:
        raise SpecError(f"{where}: mla is given but no layer is of kind mla")
    if mamba is not None and "mamba" not in kinds:
        raise SpecError(f"{where}: mamba is given but no layer is of kind mamba")
    if all(k == "shared" for k in kinds):
        raise SpecError(f"{where}: every layer is shared; at least one layer must keep its own cache")
    notes = data.get("notes") or ""
    hf_repo = data.get("hf_repo")
    return ModelSpec(
        name=data["name"].strip(),
        source=data["source"].strip(),
        num_layers=num_layers,
        num_q_heads=num_q_heads,
        num_kv_heads=num_kv_heads,
        head_dim=head_dim,
        v_head_dim=v_head_dim,
        hidden_size=hidden_size,
        dtype=dtype,
        param_count=param_count,
        weights_dtype=weights_dtype,
        param_count_unquantized=kept,
        max_model_len=max_model_len,
        layer_kinds=kinds,
        sliding_window=sliding_window,
        attention_chunk_size=chunk,
        mla=mla,
        mamba=mamba,
        hf_repo=None if hf_repo is None else str(hf_repo),
        notes=str(notes).strip(),
        origin=where,
    )


# --- YAML and bundled specs -----------------------------------------------------------------------


def _yaml_load(text: str, where: str) -> Any:
    import yaml

    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    try:
        return yaml.load(text, Loader=loader)  # noqa: S506 - a safe loader (the C build of SafeLoader)
    except RecursionError:
        raise SpecError(f"{where}: YAML nested too deeply") from None
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        at = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(e, "problem", None) or "not valid YAML"
        raise SpecError(f"{where}: malformed YAML{at}: {problem}") from None


def _read_text(path: Path) -> str:
    """Read a whole input file (regular files up to MAX_FILE_BYTES only: not a FIFO or /dev/zero)."""
    try:
        if path.exists() and not path.is_dir():
            if not path.is_file():
                raise SpecError(f"{path}: not a regular file")
            if path.stat().st_size > MAX_FILE_BYTES:
                raise SpecError(f"{path}: larger than {MAX_FILE_BYTES >> 20} MiB; not a spec, config.json or workload")
        return path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise SpecError(f"{path}: no such file") from None
    except IsADirectoryError:
        raise SpecError(f"{path}: is a directory, not a spec file") from None
    except UnicodeDecodeError:
        raise SpecError(f"{path}: not a UTF-8 text file") from None
    except OSError as e:
        raise SpecError(f"{path}: cannot read ({e.strerror})") from None


def load_spec_yaml(path: str | os.PathLike) -> ModelSpec:
    """Load and validate a spec YAML file.

    Raises:
        SpecError: missing file, malformed YAML, or an invalid spec (the message names file and field).
    """
    p = Path(path)
    return build_spec(_yaml_load(_read_text(p), str(p)), str(p))


def bundled_specs_dir() -> Path:
    """The folder of bundled spec YAMLs: inside the installed package, or the source tree's model_specs/."""
    here = Path(__file__).resolve().parent
    packaged = here / "model_specs"
    if packaged.is_dir():
        return packaged
    return here.parent / "model_specs"


def bundled_names() -> list[str]:
    """Names of the bundled models (file stems of model_specs/*.yaml), sorted."""
    return sorted(p.stem for p in bundled_specs_dir().glob("*.yaml"))


def load_bundled(name: str) -> ModelSpec:
    """Load a bundled spec by name (case-insensitive); only that one file is read.

    Raises:
        SpecError: unknown name, with close names suggested ("did you mean llama3-8b?").
    """
    key = name.strip().lower()
    path = bundled_specs_dir() / f"{key}.yaml"
    if key and "/" not in key and path.is_file():
        return load_spec_yaml(path)
    import difflib

    names = bundled_names()
    close = difflib.get_close_matches(key, names, n=3, cutoff=0.6)
    hint = f"; did you mean {' or '.join(close)}?" if close else "; run 'kvplan models' for the list"
    raise SpecError(f"unknown model {name!r}: not a bundled model name nor an existing file{hint}")


# --- Hugging Face config.json ---------------------------------------------------------------------

_HF_DTYPES = {
    "bfloat16": "bf16",
    "float16": "fp16",
    "half": "fp16",
    # vLLM's dtype=auto serves float32 checkpoints in float16 (vllm/config: _get_and_verify_dtype).
    "float32": "fp16",
    "float": "fp16",
}


# Defaults of transformers' config classes for keys that real config.json files leave out.
_HF_DEFAULT_DTYPE = {"gpt_oss": "bfloat16"}  # GptOssConfig files carry no torch_dtype; weights are bf16 + MXFP4
_HF_DEFAULT_MAX_LEN = {
    "gemma3": 131072,  # Gemma3TextConfig.max_position_embeddings
    "gemma3_text": 131072,
    "falcon": 2048,  # FalconConfig: no key; 2048-token training context
    "RefinedWebModel": 2048,
    "gpt2": 1024,  # GPT2Config.n_positions
}


def _first(cfg: dict, *keys: str) -> Any:
    for k in keys:
        if cfg.get(k) is not None:
            return cfg[k]
    return None


def spec_from_hf_config(config: Any, where: str, name: str | None = None) -> ModelSpec:
    """Build a spec from a parsed Hugging Face ``config.json``.

    Handles: absent ``num_key_value_heads`` (MHA); an explicit ``head_dim`` that differs from
    hidden_size / num_attention_heads; ``sliding_window`` with ``use_sliding_window: false`` (Qwen2:
    full attention) or ``max_window_layers``; ``layer_types``; ``sliding_window_pattern`` (Gemma 3:
    global iff (i+1) % pattern == 0, default 6); Gemma 2 (even layers sliding); ``attention_chunk_size``
    with ``no_rope_layers`` (Llama 4: NoPE layers are global, default every 4th); MLA
    (``kv_lora_rank``, ``qk_rope_head_dim``); Jamba (``attn_layer_period/offset``, ``mamba_*``);
    a nested ``text_config`` (multimodal); legacy names (GPT-2 ``n_layer/n_head/n_embd``, Falcon
    ``n_head`` + ``multi_query`` / ``new_decoder_architecture``).

    ``param_count`` is not in config.json and is left None.

    Raises:
        SpecError: a required value is missing or inconsistent (the message names the file and key).
    """
    if not isinstance(config, dict):
        raise SpecError(f"{where}: a config.json must hold a JSON object")
    outer = config
    if config.get("text_config") is not None and not isinstance(config["text_config"], dict):
        raise SpecError(f"{where}: text_config must be an object")
    cfg = dict(config.get("text_config") or config)
    for k in ("torch_dtype", "dtype", "model_type"):
        if cfg.get(k) is None and outer.get(k) is not None:
            cfg[k] = outer[k]
    model_type = str(cfg.get("model_type") or outer.get("model_type") or "")

    def need(value: Any, keys: str, minimum: int = 1) -> int:
        if value is None:
            raise SpecError(f"{where}: missing {keys}")
        if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
            raise SpecError(f"{where}: {keys.split(' ')[0]}={value!r} must be an integer >= {minimum}")
        if value > MAX_DIMENSION:
            raise SpecError(f"{where}: {keys.split(' ')[0]}={value} is larger than kvplan handles ({MAX_DIMENSION:,})")
        return value

    def opt(key: str, default: int, minimum: int = 1) -> int:
        value = cfg.get(key)
        return default if value is None else need(value, key, minimum)

    def flag(key: str) -> bool:
        value = cfg.get(key, False)
        if value is None:
            return False
        if not isinstance(value, bool):
            raise SpecError(f"{where}: {key}={value!r} must be true or false")
        return value

    num_layers = need(_first(cfg, "num_hidden_layers", "n_layer", "num_layers"), "num_hidden_layers (or n_layer)")
    num_q = need(_first(cfg, "num_attention_heads", "n_head", "num_heads"), "num_attention_heads (or n_head)")
    hidden = _first(cfg, "hidden_size", "n_embd", "d_model")
    hidden = None if hidden is None else need(hidden, "hidden_size (or n_embd)")

    if cfg.get("num_key_value_heads") is not None:
        num_kv = cfg["num_key_value_heads"]
    elif flag("new_decoder_architecture") and _first(cfg, "num_kv_heads", "n_head_kv") is not None:
        num_kv = _first(cfg, "num_kv_heads", "n_head_kv")
    elif flag("multi_query"):
        num_kv = 1
    else:
        num_kv = _first(cfg, "num_kv_heads", "n_head_kv") or num_q
    num_kv = need(num_kv, "num_key_value_heads")

    mla = None
    if cfg.get("kv_lora_rank") is not None:
        mla = MLAConfig(
            need(cfg["kv_lora_rank"], "kv_lora_rank"), need(cfg.get("qk_rope_head_dim"), "qk_rope_head_dim")
        )
    if cfg.get("head_dim") is not None and mla is None:
        head_dim = need(cfg["head_dim"], "head_dim")
    elif mla is not None:
        head_dim = opt("qk_nope_head_dim", 0, minimum=0) + mla.qk_rope_head_dim
    else:
        hidden = need(hidden, "hidden_size (or n_embd)")
        if hidden % num_q:
            raise SpecError(f"{where}: hidden_size={hidden} is not a multiple of num_attention_heads={num_q}")
        head_dim = hidden // num_q
    v_head_dim = opt("v_head_dim", head_dim)
    v_head_dim = None if v_head_dim == head_dim else v_head_dim

    raw_dtype = _first(cfg, "torch_dtype", "dtype")
    if raw_dtype is None:  # transformers' default is float32; a few families ship bf16 without the key
        raw_dtype = _HF_DEFAULT_DTYPE.get(model_type, "float32")
    dtype = _HF_DTYPES.get(str(raw_dtype).lower())
    if dtype is None:
        dtype = _canonical_dtype(where, "torch_dtype", raw_dtype)
    max_len = _first(cfg, "max_position_embeddings", "n_positions", "max_seq_len", "seq_length")
    if max_len is None:  # the config class's default applies when the key is absent
        max_len = _HF_DEFAULT_MAX_LEN.get(model_type, 2048)
    max_len = need(max_len, "max_position_embeddings")

    window = None if cfg.get("sliding_window") is None else need(cfg["sliding_window"], "sliding_window")
    if cfg.get("use_sliding_window") is not None and not flag("use_sliding_window"):
        window = None
    chunk = (
        None if cfg.get("attention_chunk_size") is None else need(cfg["attention_chunk_size"], "attention_chunk_size")
    )
    mamba = None
    kinds: list[str]
    layer_types = cfg.get("layer_types")
    type_map = {
        "full_attention": "full",
        "sliding_attention": "sliding",
        "chunked_attention": "chunked",
        "mamba": "mamba",
        "attention": "full",
    }
    if layer_types is not None and not isinstance(layer_types, list):
        raise SpecError(f"{where}: layer_types must be a list of {num_layers} layer type names")
    if isinstance(layer_types, list):
        if len(layer_types) != num_layers:
            raise SpecError(f"{where}: layer_types has {len(layer_types)} entries, num_hidden_layers={num_layers}")
        kinds = []
        for i, t in enumerate(layer_types):
            if not isinstance(t, str) or t not in type_map:
                raise SpecError(f"{where}: layer_types[{i}]={t!r} is not supported; allowed: {', '.join(type_map)}")
            kinds.append(type_map[t])
    elif cfg.get("attn_layer_period") is not None:  # Jamba
        period = need(cfg["attn_layer_period"], "attn_layer_period")
        offset = opt("attn_layer_offset", 0, minimum=0)
        if offset >= period:
            raise SpecError(f"{where}: attn_layer_offset={offset} must be below attn_layer_period={period}")
        kinds = ["full" if i % period == offset else "mamba" for i in range(num_layers)]
    elif chunk is not None:  # Llama 4: RoPE layers are chunked, NoPE layers global
        nope = cfg.get("no_rope_layers")
        if isinstance(nope, list) and len(nope) == num_layers:
            if any(r not in (0, 1) or isinstance(r, float) for r in nope):
                raise SpecError(f"{where}: no_rope_layers must hold 0 (NoPE, global) or 1 (RoPE, chunked) per layer")
            kinds = ["chunked" if r else "full" for r in nope]
        else:
            step = opt("no_rope_layer_interval", 4)
            kinds = ["full" if (i + 1) % step == 0 else "chunked" for i in range(num_layers)]
    elif window is not None and model_type.startswith("gemma3"):
        pattern = opt("sliding_window_pattern", 6)
        kinds = ["full" if (i + 1) % pattern == 0 else "sliding" for i in range(num_layers)]
    elif window is not None and model_type.startswith("gemma2"):
        kinds = ["sliding" if i % 2 == 0 else "full" for i in range(num_layers)]
    elif window is not None and flag("use_sliding_window") and cfg.get("max_window_layers") is not None:
        first = need(
            cfg["max_window_layers"], "max_window_layers", minimum=0
        )  # Qwen2: layers from max_window_layers on use the window
        kinds = ["sliding" if i >= first else "full" for i in range(num_layers)]
    elif window is not None:
        kinds = ["sliding"] * num_layers
    else:
        kinds = ["full"] * num_layers
    if mla is not None:
        kinds = ["mla" if k == "full" else k for k in kinds]
    if "mamba" in kinds:
        if cfg.get("mamba_d_inner") is not None:
            d_inner = need(cfg["mamba_d_inner"], "mamba_d_inner")
        else:
            d_inner = opt("mamba_expand", 2) * need(hidden, "hidden_size")
        mamba = MambaConfig(d_inner, opt("mamba_d_conv", 4, minimum=2), opt("mamba_d_state", 16))
    data: dict[str, Any] = {
        "name": name or str(cfg.get("_name_or_path") or Path(where).parent.name or "model"),
        "source": where,
        "num_layers": num_layers,
        "num_q_heads": num_q,
        "num_kv_heads": num_kv,
        "head_dim": head_dim,
        "v_head_dim": v_head_dim,
        "hidden_size": hidden,
        "dtype": dtype,
        "max_model_len": max_len,
        "sliding_window": window if "sliding" in kinds else None,
        "attention_chunk_size": chunk if "chunked" in kinds else None,
        "layers": kinds,
    }
    if mla is not None:
        data["mla"] = {"kv_lora_rank": mla.kv_lora_rank, "qk_rope_head_dim": mla.qk_rope_head_dim}
    if mamba is not None:
        data["mamba"] = {"d_inner": mamba.d_inner, "d_conv": mamba.d_conv, "d_state": mamba.d_state}
    return build_spec(data, where)


def load_hf_config(path: str | os.PathLike, name: str | None = None) -> ModelSpec:
    """Load a Hugging Face ``config.json`` (or a folder holding one) as a spec.

    Raises:
        SpecError: missing file, malformed JSON, or missing/inconsistent keys.
    """
    import json

    p = Path(path)
    if p.is_dir():
        p = p / "config.json"
    text = _read_text(p)
    try:
        config = json.loads(text)
    except json.JSONDecodeError as e:
        raise SpecError(f"{p}: malformed JSON at line {e.lineno}, column {e.colno}: {e.msg}") from None
    except (ValueError, RecursionError) as e:  # 5,000-digit numbers, arrays nested 100,000 deep
        raise SpecError(f"{p}: JSON kvplan cannot read ({type(e).__name__}: {str(e)[:80]})") from None
    return spec_from_hf_config(config, str(p), name=name)


def load_model(ref: str) -> ModelSpec:
    """Resolve what a user typed as MODEL: a spec YAML path, a config.json path or folder, or a bundled name.

    Raises:
        SpecError: nothing matches (with suggestions) or the file is invalid.
    """
    if not str(ref).strip():
        raise SpecError("MODEL: empty; give a bundled name (see 'kvplan models'), a spec YAML or a config.json")
    p = Path(ref)
    if p.is_dir() or p.suffix.lower() == ".json":
        return load_hf_config(p)
    if p.suffix.lower() in (".yaml", ".yml"):
        return load_spec_yaml(p)
    if p.is_file():
        text = _read_text(p).lstrip()
        return load_hf_config(p) if text.startswith("{") else load_spec_yaml(p)
    return load_bundled(ref)


def load_all_bundled() -> list[ModelSpec]:
    """Every bundled spec, sorted by name."""
    return [load_bundled(n) for n in bundled_names()]
