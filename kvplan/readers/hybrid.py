"""Attention + Mamba hybrids: Jamba, Nemotron-H, Granite-4.0-H, Bamba, Falcon-H1 and Zamba2.

Mirrors transformers 5.23's ``JambaConfig``, ``NemotronHConfig``, ``GraniteMoeHybridConfig``,
``BambaConfig``, ``FalconH1Config`` and ``Zamba2Config`` with their defaults for absent keys, and was checked
against vLLM 0.33's ``model_executor/models/jamba.py``, ``nemotron_h.py``, ``granitemoehybrid.py``,
``falcon_h1.py`` and ``zamba2.py`` (each one's ``get_mamba_state_shape_from_config`` /
``get_mamba_state_dtype_from_config``) and ``model_executor/layers/mamba/mamba_utils.py``.

Attention layers cache K and V per token; Mamba layers keep a fixed state per request:

- Mamba-1 (Jamba, kind ``mamba``): ``d_inner = mamba_expand × hidden_size``, ``mamba_d_conv``,
  ``mamba_d_state`` (vLLM ``MambaStateShapeCalculator.mamba1_state_shape``).
- Mamba-2 (kind ``mamba2``): heads H, head dim P, state N, groups G, kernel d_conv; conv
  ``(d_conv − 1, (H·P + 2·G'·N) / TP)`` with G' = G, or TP when TP does not divide G, and ssm
  ``(H / TP, P, N)`` (``mamba2_state_shape``). vLLM passes ``intermediate_size`` = H·P for Nemotron-H and
  ``mamba_expand × hidden_size`` (Falcon-H1: ``mamba_d_ssm``) for the others, whose config classes require
  that to equal H·P; a config where it does not is refused.

State dtypes follow ``MambaStateDtypeCalculator.mamba1/mamba2_state_dtype``: the conv state in the model
dtype, the ssm state in ``mamba_ssm_cache_dtype`` when it is not ``auto``. Only Nemotron-H sets it by
default: vLLM's ``NemotronHForCausalLMConfig`` takes config.json's ``mamba_ssm_cache_dtype`` (class default
``float32``), so Nemotron-H ssm states are fp32 unless the file says otherwise; the others keep both states in
the model dtype. transformers' caches differ: they keep ``d_conv`` conv columns where vLLM keeps ``d_conv − 1``
(vLLM adds ``num_speculative_tokens`` more with speculative decoding), shaped ``(dim, d_conv)`` where vLLM has
``(d_conv − 1, dim)``, and they keep every recurrent state in float32; kvplan follows vLLM without speculation.

Layouts:

- jamba: attention where ``i % attn_layer_period == attn_layer_offset`` (defaults 8 and 4), else Mamba-1;
  head_dim = hidden_size / H_q (vLLM ``JambaAttention``).
- nemotron_h: ``layers_block_type`` (alias ``layer_types``), else ``hybrid_override_pattern`` (``M``
  Mamba-2, ``*`` attention, ``-`` MLP, ``E`` MoE; the last two keep no cache: kind ``none``), else the class
  default ``[mamba, moe, attention, mlp]``. The number of layers is the pattern's length (transformers and
  vLLM ignore ``num_hidden_layers``). Mamba-2 dims: ``mamba_num_heads``, ``mamba_head_dim``,
  ``ssm_state_size``, ``n_groups`` (legacy ``mamba_n_groups`` wins), ``conv_kernel`` (legacy
  ``mamba_d_conv`` wins); head_dim defaults to 128 (a legacy ``attention_head_dim`` must agree).
  ``sliding_window`` makes every attention layer sliding, as vLLM does (``per_layer_sliding_window``);
  transformers ignores it.
- granitemoehybrid: ``layer_types`` (alias ``layers_block_type``) of ``mamba`` / ``attention`` (or the new
  names ``linear_attention`` / ``full_attention``), default all Mamba-2; ``mamba_n_heads``, ``mamba_d_head``
  (``auto``: ``mamba_expand × hidden_size / mamba_n_heads``), ``mamba_d_state``, ``mamba_n_groups``,
  ``mamba_d_conv``; head_dim = hidden_size / H_q (vLLM ``GraniteMoeHybridAttention``).
- bamba: attention at ``attn_layer_indices``, the rest Mamba-2, same ``mamba_*`` keys as Granite. vLLM 0.33
  no longer serves Bamba (``BambaForCausalLM`` is in its registry's ``_PREVIOUSLY_SUPPORTED_MODELS``, last
  0.23.0); the shapes are those of ``mamba2_state_shape`` that its ``bamba.py`` used.
- falcon_h1: every layer runs attention and a Mamba-2 mixer in parallel, so every layer is ``full`` with
  ``parallel_state: mamba2`` (it keeps a KV cache AND a Mamba-2 state; vLLM registers the mixer as a second
  layer, index ``num_hidden_layers + i``). Attention: ``num_key_value_heads`` (absent: 8; null: H_q),
  ``head_dim`` (absent or null: hidden_size / H_q, vLLM ``FalconH1AttentionDecoderLayer``). Mamba-2: width
  ``mamba_d_ssm`` (absent: the class default 1024; null: ``mamba_expand × hidden_size``), which vLLM passes
  as ``intermediate_size`` (``FalconH1SSMDecoderLayer`` and ``get_mamba_state_shape_from_config``), heads
  ``mamba_n_heads``, ``mamba_d_head`` (``auto``: width / heads), ``mamba_d_state``, ``mamba_n_groups``,
  ``mamba_d_conv``; FalconH1Config refuses heads × head dim ≠ width, and so does kvplan.
- zamba2: ``layers_block_type`` (alias ``layer_types``; absent: Zamba2Config's 54-entry default), whose
  length must be ``num_hidden_layers`` (transformers' check). ``hybrid`` layers apply the shared attention
  block (weights shared over ``num_mem_blocks``, but each layer has its own KV cache) before their own
  Mamba-2 mixer: ``full`` with ``parallel_state: mamba2``; ``mamba`` / ``linear_attention`` layers keep the
  Mamba-2 state only. Attention: H_kv = H_q (vLLM's ``Zamba2Attention`` passes no KV head count; a
  ``num_key_value_heads`` that differs, which transformers would use, is refused), head size
  ``attention_head_dim`` (alias ``head_dim``; default 2·hidden_size / H_q) with ``attention_head_dim × H_q
  = attention_hidden_size`` (default 2·hidden_size) as vLLM requires. Mamba-2: width ``mamba_expand ×
  hidden_size``, ``n_mamba_heads`` heads of width / heads (a ``mamba_headdim`` key must agree),
  ``mamba_d_state``, ``mamba_ngroups``, ``mamba_d_conv``.

Neither Falcon-H1 nor Zamba2 has a vLLM hook for ``mamba_ssm_cache_dtype``: both states are in the model dtype
unless the user passes ``--mamba-ssm-cache-dtype`` (a config.json key of that name is not read by vLLM).

A ``head_dim`` key that differs from hidden_size / H_q in a Jamba, Granite or Bamba config is refused: vLLM
uses hidden_size / H_q there while transformers would use the key.
"""

from __future__ import annotations

from kvplan.readers.base import HFConfig, max_len

# mamba_ssm_cache_dtype / mamba_ssm_dtype values -> kvplan dtype names (None: the model dtype)
_SSM_DTYPES = {"auto": None, "float32": "fp32", "bfloat16": "bf16", "float16": "fp16"}
# transformers remap_legacy_layer_types: the old names mean the new ones
_LEGACY = {"mamba": "linear_attention", "attention": "full_attention"}
_NEMOTRON_PATTERN = {"M": "linear_attention", "*": "full_attention", "-": "mlp", "E": "moe"}


def _ssm_dtype(cfg: HFConfig, key: str, default: str) -> str | None:
    """A ``mamba_ssm_cache_dtype``-style value as a kvplan dtype name, None for ``auto`` (the conv dtype)."""
    raw = cfg.string(key, default)
    if raw not in _SSM_DTYPES:
        raise cfg.error(f"{key}={raw!r} is not a state dtype; allowed: {', '.join(_SSM_DTYPES)}")
    return _SSM_DTYPES[raw]


def _plain_head_dim(cfg: HFConfig, hidden: int, heads: int) -> int:
    """hidden_size / H_q, as vLLM computes it; a ``head_dim`` key that says otherwise is refused."""
    if hidden % heads:
        raise cfg.error(f"hidden_size={hidden} is not a multiple of num_attention_heads={heads}")
    head_dim = hidden // heads
    if cfg.has("head_dim") and cfg.int("head_dim") != head_dim:
        raise cfg.error(
            f"head_dim={cfg.int('head_dim')} differs from hidden_size / num_attention_heads = {head_dim}: vLLM uses "
            "the latter for this model, transformers the former; kvplan will not guess"
        )
    return head_dim


def _type_list(cfg: HFConfig, key: str, alias: str, n: int | None) -> list | None:
    """A layer-type list given under ``key`` or its attribute_map ``alias`` (refused when both disagree)."""
    first, second = cfg.list(key, n), cfg.list(alias, n)
    if first is not None and second is not None and first != second:
        raise cfg.error(f"{key} and {alias} are both set and disagree")
    return first if first is not None else second


def _kinds(cfg: HFConfig, key: str, types: list, mapping: dict[str, str]) -> list[str]:
    """Map layer type names (legacy names remapped) to kvplan kinds; an unknown name is refused."""
    out = []
    for i, t in enumerate(types):
        name = _LEGACY.get(t, t) if isinstance(t, str) else t
        if name not in mapping:
            allowed = ", ".join(sorted({*mapping, *(k for k, v in _LEGACY.items() if v in mapping)}))
            raise cfg.error(f"{key}[{i}]={t!r} is not handled by the {cfg.model_type} reader; handled: {allowed}")
        out.append(mapping[name])
    return out


def _mamba2_block(cfg: HFConfig, heads: int, head_dim: int, d_state: int, groups: int, d_conv: int) -> dict:
    """The ``mamba2`` spec block, checked as vLLM's MambaMixer2 would (groups divide heads)."""
    if heads % groups:
        raise cfg.error(f"Mamba-2 heads={heads} is not a multiple of n_groups={groups}")
    return {"num_heads": heads, "head_dim": head_dim, "d_state": d_state, "n_groups": groups, "d_conv": d_conv}


def _granite_style_mamba2(
    cfg: HFConfig, hidden: int, d_state: int, d_inner: int | None = None, width: str = "mamba_expand x hidden_size"
) -> dict:
    """Granite / Bamba / Falcon-H1 ``mamba_*`` keys: heads, ``mamba_d_head`` (``auto``: d_inner / heads);
    ``width`` names where d_inner came from, for the messages."""
    heads = cfg.int("mamba_n_heads", 128)
    expand = cfg.int("mamba_expand", 2)
    d_inner = expand * hidden if d_inner is None else d_inner
    raw = cfg.get("mamba_d_head", "auto")
    if raw == "auto":
        if d_inner % heads:
            raise cfg.error(f"mamba_n_heads={heads} does not divide the Mamba width {d_inner} ({width})")
        head_dim = d_inner // heads
    else:
        head_dim = cfg.check_int("mamba_d_head", raw)
    if heads * head_dim != d_inner:
        raise cfg.error(f"mamba_n_heads {heads} x mamba_d_head {head_dim} != the Mamba width {d_inner} ({width})")
    groups = cfg.int("mamba_n_groups", 1)
    return _mamba2_block(cfg, heads, head_dim, d_state, groups, cfg.int("mamba_d_conv", 4, minimum=2))


def _attention(cfg: HFConfig, heads_default: int, kv_default: int | None, hidden: int = 4096) -> tuple[int, int, int]:
    """(H_q, H_kv, hidden_size) with the class defaults; H_kv absent -> ``kv_default`` (None: H_q)."""
    heads = cfg.int("num_attention_heads", heads_default)
    kv = cfg.int("num_key_value_heads", heads if kv_default is None else kv_default)
    return heads, kv, cfg.int("hidden_size", hidden)


def _common(cfg: HFConfig, n: int, heads: int, kv: int, head_dim: int, hidden: int, default_len: int) -> dict:
    """The spec keys every hybrid reader fills the same way (max_model_len: the class default when absent)."""
    return {
        "num_layers": n,
        "num_q_heads": heads,
        "num_kv_heads": kv,
        "head_dim": head_dim,
        "hidden_size": hidden,
        "dtype": cfg.dtype(),
        "max_model_len": max_len(cfg, default_len),
    }


def _finish(data: dict, kinds: list[str], state_kind: str, state: dict, window: int | None = None) -> dict:
    """Attach the layer list and only the blocks some layer uses."""
    data["layers"] = kinds
    if state_kind in kinds:
        data[state_kind] = state
    if "sliding" in kinds:
        data["sliding_window"] = window
    return data


def read_jamba(cfg: HFConfig) -> dict:
    """Jamba: attention every ``attn_layer_period`` layers from ``attn_layer_offset``, Mamba-1 elsewhere.

    Raises:
        SpecError: offset not below period, a ``head_dim`` that differs from hidden / heads, a bad dimension.
    """
    n = cfg.int("num_hidden_layers", 32)
    heads, kv, hidden = _attention(cfg, 32, 8)
    period = cfg.int("attn_layer_period", 8)
    offset = cfg.int("attn_layer_offset", 4, minimum=0)
    if offset >= period:
        raise cfg.error(f"attn_layer_offset={offset} must be below attn_layer_period={period}")
    kinds = ["full" if i % period == offset else "mamba" for i in range(n)]
    mamba = {
        "d_inner": cfg.int("mamba_expand", 2) * hidden,
        "d_conv": cfg.int("mamba_d_conv", 4, minimum=2),
        "d_state": cfg.int("mamba_d_state", 16),
    }
    data = _common(cfg, n, heads, kv, _plain_head_dim(cfg, hidden, heads), hidden, 262144)
    return _finish(data, kinds, "mamba", mamba)


def read_nemotron_h(cfg: HFConfig) -> dict:
    """Nemotron-H: Mamba-2 / attention / MLP / MoE blocks from ``layers_block_type`` or the pattern string.

    Raises:
        SpecError: an unknown block type or pattern character, a legacy ``attention_head_dim`` that disagrees
            with ``head_dim``, a bad ``mamba_ssm_cache_dtype`` or dimension.
    """
    types = _type_list(cfg, "layers_block_type", "layer_types", None)
    source = "layers_block_type"
    if types is None and cfg.has("hybrid_override_pattern"):
        pattern = cfg.get("hybrid_override_pattern")
        if not isinstance(pattern, str) or not pattern:
            raise cfg.error("hybrid_override_pattern must be a non-empty string of M, *, - and E")
        bad = next((c for c in pattern if c not in _NEMOTRON_PATTERN), None)
        if bad is not None:
            raise cfg.error(
                f"hybrid_override_pattern has {bad!r}; allowed: M (Mamba-2), * (attention), - (MLP), E (MoE)"
            )
        types, source = [_NEMOTRON_PATTERN[c] for c in pattern], "hybrid_override_pattern"
    elif types is None:
        types, source = ["linear_attention", "moe", "full_attention", "mlp"], "the NemotronHConfig default"
    else:
        cfg.ignore("hybrid_override_pattern")  # transformers: the list wins over the pattern
    if not types:
        raise cfg.error(f"{source} is empty")
    window = cfg.int("sliding_window", None)
    attention_kind = "sliding" if window else "full"
    mapping = {"linear_attention": "mamba2", "full_attention": attention_kind, "mlp": "none", "moe": "none"}
    kinds = _kinds(cfg, "layers_block_type" if source.startswith("the ") else source, types, mapping)
    n = len(kinds)
    declared = cfg.int("num_hidden_layers", None)
    heads, kv, hidden = _attention(cfg, 32, 8)
    # absent: the class default 128; an explicit null: vLLM's hidden_size / H_q (NemotronHAttention)
    explicit_null = "head_dim" in cfg.raw and cfg.raw["head_dim"] is None
    head_dim = hidden // heads if explicit_null else cfg.int("head_dim", 128)
    if cfg.has("attention_head_dim") and cfg.int("attention_head_dim") != head_dim:
        raise cfg.error(
            f"attention_head_dim={cfg.int('attention_head_dim')} (legacy key) differs from head_dim={head_dim}"
            " (transformers 5 and vLLM use head_dim, default 128); kvplan will not guess"
        )
    mamba2 = _mamba2_block(
        cfg,
        cfg.int("mamba_num_heads", 128),
        cfg.int("mamba_head_dim", 64),
        cfg.int("ssm_state_size", 128),
        cfg.first_int("mamba_n_groups", "n_groups", default=8),
        cfg.first_int("mamba_d_conv", "conv_kernel", default=4, minimum=2),
    )
    ssm = _ssm_dtype(cfg, "mamba_ssm_cache_dtype", "float32")
    if ssm is not None:
        mamba2["ssm_dtype"] = ssm
    cfg.ignore("expand", "mamba_expand", "mtp_layers_block_type", "mtp_hybrid_override_pattern")
    data = _common(cfg, n, heads, kv, head_dim, hidden, 4096)
    counts = {k: kinds.count(k) for k in ("mamba2", attention_kind, "none")}
    notes = [
        f"{source}: {counts['mamba2']} Mamba-2, {counts[attention_kind]} attention, {counts['none']} MLP/MoE "
        "layers (no cache)"
    ]
    if declared is not None and declared != n:
        notes.append(f"num_hidden_layers={declared} ignored: the layer list has {n} (as transformers and vLLM do)")
    if window:
        notes.append(f"sliding_window {window} applied to every attention layer, as vLLM does")
    data["notes"] = "; ".join(notes)
    return _finish(data, kinds, "mamba2", mamba2, window)


def read_granitemoehybrid(cfg: HFConfig) -> dict:
    """Granite-4.0-H: ``layer_types`` of Mamba-2 and attention layers (default all Mamba-2).

    Raises:
        SpecError: an unknown layer type, Mamba dims that do not multiply to ``mamba_expand × hidden_size``,
            a ``head_dim`` that differs from hidden / heads, or a bad dimension.
    """
    n = cfg.int("num_hidden_layers", 32)
    heads, kv, hidden = _attention(cfg, 32, None)
    types = _type_list(cfg, "layer_types", "layers_block_type", n)
    mapping = {"linear_attention": "mamba2", "full_attention": "full"}
    kinds = ["mamba2"] * n if types is None else _kinds(cfg, "layer_types", types, mapping)
    mamba2 = _granite_style_mamba2(cfg, hidden, cfg.int("mamba_d_state", 256))
    cfg.ignore("position_embedding_type")
    data = _common(cfg, n, heads, kv, _plain_head_dim(cfg, hidden, heads), hidden, 2048)
    return _finish(data, kinds, "mamba2", mamba2)


def read_bamba(cfg: HFConfig) -> dict:
    """Bamba: attention at ``attn_layer_indices``, Mamba-2 elsewhere.

    Raises:
        SpecError: an index outside the layers, bad Mamba dims or head_dim (as for Granite).
    """
    n = cfg.int("num_hidden_layers", 32)
    heads, kv, hidden = _attention(cfg, 32, 8)
    indices = cfg.list("attn_layer_indices") or []
    for i in indices:
        if isinstance(i, bool) or not isinstance(i, int) or not 0 <= i < n:
            raise cfg.error(f"attn_layer_indices has {i!r}; allowed: 0..{n - 1}")
    kinds = ["full" if i in indices else "mamba2" for i in range(n)]
    mamba2 = _granite_style_mamba2(cfg, hidden, cfg.int("mamba_d_state", 256))
    data = _common(cfg, n, heads, kv, _plain_head_dim(cfg, hidden, heads), hidden, 262144)
    data["notes"] = "vLLM 0.33 no longer serves Bamba (last in 0.23.0); Mamba-2 shapes as its mamba2_state_shape"
    return _finish(data, kinds, "mamba2", mamba2)


def _explicit_null(cfg: HFConfig, key: str) -> bool:
    """True when config.json sets ``key`` to null (some config classes give null its own meaning)."""
    cfg.get(key)
    return key in cfg.raw and cfg.raw[key] is None


def read_falcon_h1(cfg: HFConfig) -> dict:
    """Falcon-H1: every layer full attention with a Mamba-2 mixer beside it (``parallel_state: mamba2``).

    Sources: transformers 5.23 ``FalconH1Config`` (defaults, ``__post_init__``, ``validate_architecture``) and
    vLLM 0.33 ``model_executor/models/falcon_h1.py`` (``FalconH1AttentionDecoderLayer``,
    ``FalconH1SSMDecoderLayer``, ``FalconH1ForCausalLM.get_mamba_state_shape_from_config``).

    Raises:
        SpecError: Mamba heads × head dim that is not the Mamba width, heads that do not divide it, a hidden
            size not a multiple of the heads (when head_dim is absent), or a bad dimension.
    """
    n = cfg.int("num_hidden_layers", 32)
    heads = cfg.int("num_attention_heads", 32)
    hidden = cfg.int("hidden_size", 4096)
    # FalconH1Config: num_key_value_heads defaults to 8; an explicit null means H_q (__post_init__)
    kv = heads if _explicit_null(cfg, "num_key_value_heads") else cfg.int("num_key_value_heads", 8)
    head_dim = cfg.int("head_dim", None)  # not a FalconH1Config field: vLLM and transformers read the extra key
    if head_dim is None:
        if hidden % heads:
            raise cfg.error(f"hidden_size={hidden} is not a multiple of num_attention_heads={heads} (no head_dim)")
        head_dim = hidden // heads
    # the Mamba width vLLM passes as intermediate_size: mamba_d_ssm (class default 1024), or, when the file
    # sets it to null, int(mamba_expand x hidden_size); mamba_expand is not used otherwise
    if _explicit_null(cfg, "mamba_d_ssm"):
        d_ssm, width = None, "mamba_expand x hidden_size, mamba_d_ssm being null"
    else:
        d_ssm, width = cfg.int("mamba_d_ssm", 1024), "mamba_d_ssm"
        cfg.ignore("mamba_expand")
    mamba2 = _granite_style_mamba2(cfg, hidden, cfg.int("mamba_d_state", 256), d_ssm, width)
    width_value = mamba2["num_heads"] * mamba2["head_dim"]
    return {
        "num_layers": n,
        "num_q_heads": heads,
        "num_kv_heads": kv,
        "head_dim": head_dim,
        "hidden_size": hidden,
        "dtype": cfg.dtype(),
        "max_model_len": max_len(cfg, 8192),
        "layers": ["full"] * n,
        "parallel_state": "mamba2",
        "mamba2": mamba2,
        "notes": (
            f"every layer runs attention ({kv} KV heads x {head_dim}) and a Mamba-2 mixer (width {width_value}) in "
            "parallel: a KV cache and a Mamba-2 state per layer"
        ),
    }


# Zamba2Config.__post_init__'s layers_block_type when the file has none (54 layers, 9 hybrid)
_ZAMBA2_DEFAULT = (
    ["linear_attention"]
    + (["linear_attention"] * 5 + ["hybrid"]) * 7
    + ["linear_attention"] * 4
    + ["hybrid"]
    + ["linear_attention"] * 3
    + ["hybrid"]
    + ["linear_attention"] * 2
)


def read_zamba2(cfg: HFConfig) -> dict:
    """Zamba2: ``hybrid`` layers are full attention with their own Mamba-2 state beside it (``parallel_state``),
    the other layers Mamba-2 only.

    Sources: transformers 5.23 ``Zamba2Config`` (defaults, ``__post_init__``, attribute_map ``layer_types`` ->
    ``layers_block_type`` and ``head_dim`` -> ``attention_head_dim``) and vLLM 0.33
    ``model_executor/models/zamba2.py`` (``Zamba2Attention``: one ``Attention`` of H_q heads of
    ``attention_head_dim`` per hybrid layer; ``Zamba2MambaDecoderLayer``: ``MambaMixer2`` of width
    ``mamba_expand × hidden_size`` and head dim width / ``n_mamba_heads``).

    Raises:
        SpecError: a layer list whose length is not num_hidden_layers, an unknown layer type, a
            ``hybrid_layer_ids`` that is not the hybrid layers, ``num_key_value_heads`` other than H_q,
            ``attention_head_dim × H_q ≠ attention_hidden_size``, a ``mamba_headdim`` other than width / heads,
            or a bad dimension.
    """
    types = _type_list(cfg, "layers_block_type", "layer_types", None)
    source = "layers_block_type"
    if types is None:
        types, source = list(_ZAMBA2_DEFAULT), "Zamba2Config's default layers_block_type"
    n = cfg.int("num_hidden_layers", 54)
    if len(types) != n:
        raise cfg.error(f"{source} has {len(types)} entries, num_hidden_layers={n} (transformers requires them equal)")
    kinds = _kinds(cfg, "layers_block_type", types, {"linear_attention": "mamba2", "hybrid": "full"})
    hybrid = [i for i, k in enumerate(kinds) if k == "full"]
    ids = cfg.list("hybrid_layer_ids")
    if ids is not None and ids != hybrid:
        raise cfg.error(f"hybrid_layer_ids={ids} are not the hybrid layers of {source} ({hybrid})")
    heads = cfg.int("num_attention_heads", 32)
    hidden = cfg.int("hidden_size", 2560)
    kv = cfg.int("num_key_value_heads", heads)
    if kv != heads:
        raise cfg.error(
            f"num_key_value_heads={kv} differs from num_attention_heads={heads}: transformers' Zamba2Attention "
            "would use it, vLLM's runs one KV head per query head; kvplan will not guess"
        )
    attention_width = cfg.int("attention_hidden_size", 2 * hidden)
    head_dim = 2 * hidden // heads  # Zamba2Config.__post_init__; a key in the file wins (set after it)
    if cfg.has("attention_head_dim") and cfg.has("head_dim") and cfg.int("attention_head_dim") != cfg.int("head_dim"):
        raise cfg.error(
            f"attention_head_dim={cfg.int('attention_head_dim')} and head_dim={cfg.int('head_dim')} (its "
            "attribute_map alias) disagree"
        )
    head_dim = cfg.first_int("attention_head_dim", "head_dim", default=head_dim)
    if head_dim * heads != attention_width:
        raise cfg.error(
            f"attention_head_dim {head_dim} x num_attention_heads {heads} != attention_hidden_size {attention_width}"
            " (vLLM's Zamba2Attention requires them equal)"
        )
    expand = cfg.int("mamba_expand", 2)
    mamba_heads = cfg.int("n_mamba_heads", 8)
    width = expand * hidden
    if width % mamba_heads:
        raise cfg.error(f"n_mamba_heads={mamba_heads} does not divide mamba_expand x hidden_size = {width}")
    mamba_head_dim = width // mamba_heads
    if cfg.has("mamba_headdim") and cfg.int("mamba_headdim") != mamba_head_dim:
        raise cfg.error(
            f"mamba_headdim={cfg.int('mamba_headdim')} differs from mamba_expand x hidden_size / n_mamba_heads = "
            f"{mamba_head_dim}: vLLM's mixer uses the latter, transformers' the former; kvplan will not guess"
        )
    mamba2 = _mamba2_block(
        cfg,
        mamba_heads,
        mamba_head_dim,
        cfg.int("mamba_d_state", 64),
        cfg.int("mamba_ngroups", 1),
        cfg.int("mamba_d_conv", 4, minimum=2),
    )
    cfg.ignore("num_mem_blocks", "kv_channels", "num_query_groups")  # shared weights / unused derived values
    data = {
        "num_layers": n,
        "num_q_heads": heads,
        "num_kv_heads": heads,  # vLLM's Zamba2Attention: no separate KV heads
        "head_dim": head_dim,
        "hidden_size": hidden,
        "dtype": cfg.dtype(),
        "max_model_len": 16384 if cfg.flag("use_long_context") else max_len(cfg, 4096),
        "layers": kinds,
        "mamba2": mamba2,
        "notes": (
            f"{source}: {len(hybrid)} hybrid layers (shared attention block, own KV cache, {heads} heads x "
            f"{head_dim}, plus their own Mamba-2 state), {n - len(hybrid)} Mamba-2 layers"
        ),
    }
    if hybrid:
        data["parallel_state"] = "mamba2"
    return data


def read_mamba(cfg: HFConfig) -> dict:
    """Pure Mamba-1 (``MambaForCausalLM``): every layer a Mamba-1 mixer, no attention and no KV cache.

    Mirrors transformers 5.23's ``MambaConfig`` (defaults: 32 layers, hidden_size 768, ``state_size`` 16,
    ``expand`` 2, ``conv_kernel`` 4; ``__post_init__`` sets ``intermediate_size = int(expand × hidden_size)``
    whatever the file says) and vLLM 0.33's ``model_executor/models/mamba.py``
    (``get_mamba_state_shape_from_config``: ``mamba1_state_shape(intermediate_size, state_size, conv_kernel)``).
    A file whose ``intermediate_size`` is not ``expand × hidden_size`` is refused: vLLM reads the file's value,
    transformers recomputes it.

    The spec's head fields are nominal (1 head of 1 element: there is no attention layer). MambaConfig has no
    maximum length; vLLM then assumes 2048 tokens (``config/model.py`` ``_get_and_verify_max_len``: "Assuming
    the model's maximum length is 2048"), and so does kvplan.

    Raises:
        SpecError: ``intermediate_size`` unlike ``expand × hidden_size``, or a bad dimension.
    """
    n = cfg.int("num_hidden_layers", 32)
    hidden = cfg.int("hidden_size", 768)
    expand = cfg.get("expand", 2)
    if isinstance(expand, bool) or not isinstance(expand, (int, float)) or expand <= 0:
        raise cfg.error(f"expand={expand!r} must be a positive number")
    d_inner = int(expand * hidden)
    if cfg.has("intermediate_size") and cfg.int("intermediate_size") != d_inner:
        raise cfg.error(
            f"intermediate_size={cfg.int('intermediate_size')} but expand x hidden_size = {d_inner}: vLLM reads "
            "the former, transformers' MambaConfig recomputes the latter; kvplan will not guess"
        )
    mamba = {"d_inner": d_inner, "d_conv": cfg.int("conv_kernel", 4, minimum=2), "d_state": cfg.int("state_size", 16)}
    # legacy mamba_ssm names some published files also carry (n_layer, d_model, d_inner): MambaConfig ignores them
    cfg.ignore("n_layer", "d_model", "d_inner", "ssm_cfg", "time_step_rank")
    return {
        "num_layers": n,
        "num_q_heads": 1,
        "num_kv_heads": 1,
        "head_dim": 1,
        "hidden_size": hidden,
        "dtype": cfg.dtype(),
        "max_model_len": max_len(cfg, 2048),
        "layers": ["mamba"] * n,
        "mamba": mamba,
        "notes": (
            f"{n} Mamba-1 layers (d_inner {d_inner}, d_state {mamba['d_state']}, d_conv {mamba['d_conv']}): a fixed "
            "state per request, no KV cache; no maximum length in the config (vLLM assumes 2048)"
        ),
    }


READERS = {
    "mamba": read_mamba,
    "jamba": read_jamba,
    "nemotron_h": read_nemotron_h,
    "granitemoehybrid": read_granitemoehybrid,
    "bamba": read_bamba,
    "falcon_h1": read_falcon_h1,
    "zamba2": read_zamba2,
}
