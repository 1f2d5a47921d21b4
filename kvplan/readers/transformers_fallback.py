"""Read a config.json no kvplan reader matches with transformers itself (the optional extra
``pip install 'kvplan[transformers]'``: transformers 5.23 and torch; imported only here, only then).

How (the way the test oracle reads a config, ``tests/oracle.py``): transformers' own config class
(``AutoConfig.for_model(model_type, **config)``, then ``get_text_config(decoder=True)``), its causal LM built
on the ``meta`` device (shapes only, no memory), a 2-token forward into a ``StaticCache``; per decoder layer
the cache layer type (``cache_utils.get_layer_types_and_kwargs``), its window, the K/V shapes the attention
module hands to ``Cache.update``, and the state tensors a recurrent layer keeps. The layout is cached per
config hash (and transformers version) as JSON under ``$XDG_CACHE_HOME/kvplan/transformers-layouts/`` (else
``~/.cache/kvplan/...``), written atomically, so a second call is a file read and imports neither
transformers nor torch.

Engine conventions then apply through kvplan's usual per-layer kinds: a recurrent state is mapped to its
kvplan kind by the token mixer (Mamba-1, Mamba-2, Gated DeltaNet, short conv, lightning attention) and sized
by vLLM's ``MambaStateShapeCalculator`` rules, not by transformers' tensors: vLLM keeps ``d_conv − 1`` conv
columns where transformers keeps ``d_conv``, and keeps the recurrent state in the model dtype where
transformers keeps float32 (each spec says so in its notes). A layer transformers caches in a way kvplan has
no engine rule for (an unknown recurrent mixer, KV sharing, several windows) is refused, never guessed.

The spec is labelled ``reader: "transformers 5.23.0 (no kvplan reader)"``.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any

from kvplan.errors import SpecError

SCHEMA = 1  # bump when the cached layout's fields change
EXTRA = "pip install 'kvplan[transformers]' (transformers==5.23.0 and torch)"

# token mixer class name (substring) of a transformers recurrent layer -> kvplan state kind; first match wins
STATE_MIXERS: tuple[tuple[str, str], ...] = (
    ("Mamba2Mixer", "mamba2"),
    ("GraniteMoeHybridMambaLayer", "mamba2"),
    ("BambaMixer", "mamba2"),
    ("FalconH1Mixer", "mamba2"),
    ("Zamba2MambaMixer", "mamba2"),
    ("MambaMixer", "mamba"),
    ("GatedDeltaNet", "gdn"),
    ("ShortConv", "short_conv"),
    ("LightningAttention", "linear_attention"),
)
_MIXER_NAMES = ("self_attn", "attn", "attention", "self_attention", "linear_attn", "mamba", "mixer", "conv",
                "short_conv", "token_mixer")  # fmt: skip
_DTYPES = {"bfloat16": "bf16", "float16": "fp16", "float32": "fp16"}  # vLLM serves fp32 checkpoints in 16 bit


def cache_dir() -> Path:
    """Where layouts are cached: ``$XDG_CACHE_HOME/kvplan/transformers-layouts`` or ``~/.cache/kvplan/...``."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "kvplan" / "transformers-layouts"


def spec_from_transformers(config: dict, where: str, name: str | None = None, refusal: str = "",
                           known: tuple[str, ...] = ()):  # fmt: skip
    """A :class:`~kvplan.specs.ModelSpec` for a config.json no kvplan reader matches, read by transformers.

    Args:
        refusal: the readers' one-line refusal for this model_type (said when transformers is missing).
        known: the model_types kvplan's readers know (for a did-you-mean).

    Raises:
        SpecError: transformers is not installed (the message names the extra), transformers cannot build
            the model (its reason), or its cache has a layer kvplan has no engine rule for.
    """
    try:
        import transformers
    except ImportError:
        raise SpecError(refusal.replace(
            "pip install 'kvplan[transformers]' lets transformers read it", f"{EXTRA} lets transformers read it"
        )) from None  # fmt: skip
    version = transformers.__version__
    text = json.dumps(config, sort_keys=True)
    key = hashlib.sha256(f"{SCHEMA}\n{version}\n{text}".encode()).hexdigest()[:32]
    path = cache_dir() / f"{key}.json"
    layout = None
    if path.is_file():
        try:
            layout = json.loads(path.read_text())
        except (OSError, ValueError):
            layout = None
    if layout is None:
        layout = read_layout(config, where, known)
        _write_atomic(path, json.dumps(layout, sort_keys=True))
    return build_from_layout(layout, config, where, name, version)


def _write_atomic(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` through a temporary file and a rename (a reader never sees half a file);
    a cache that cannot be written is skipped silently (the next call reads transformers again)."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        tmp.write_text(text)
        os.replace(tmp, path)
    except OSError:
        pass


def read_layout(config: dict, where: str, known: tuple[str, ...] = ()) -> dict:
    """transformers' per-layer cache layout of ``config`` as plain JSON data (see the module docstring);
    ``known``: kvplan's model_types, for a did-you-mean.

    Raises:
        SpecError: no config class, or building / running the model on meta failed (with the reason).
    """
    import copy

    import torch
    import transformers
    from transformers import AutoConfig, AutoModel, AutoModelForCausalLM, StaticCache
    from transformers.cache_utils import get_layer_types_and_kwargs
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING_NAMES

    transformers.logging.set_verbosity_error()
    raw = dict(config)
    model_type = raw.pop("model_type", None)
    v = transformers.__version__
    if model_type not in CONFIG_MAPPING_NAMES:
        import difflib

        close = difflib.get_close_matches(str(model_type), list(known), n=1)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        raise SpecError(
            f"{where}: model_type {model_type!r}{hint}: neither kvplan nor transformers {v} has a reader for it "
            "(remote code only?); kvplan will not guess its layout: write a spec YAML (see README, 'Spec format')"
        )
    raw.pop("quantization_config", None)
    try:
        text = copy.deepcopy(AutoConfig.for_model(model_type, **raw).get_text_config(decoder=True))
        text._attn_implementation = "eager"
        layer_types, layer_kwargs = get_layer_types_and_kwargs(text)
        with torch.device("meta"):
            try:  # a wrapper's text config (Qwen3VLTextConfig ...) has no causal-LM class: its base text model
                model = AutoModelForCausalLM.from_config(text, dtype=torch.bfloat16)
            except ValueError:
                model = AutoModel.from_config(text, dtype=torch.bfloat16)
        cache = StaticCache(config=text, max_cache_len=64)
    except Exception as e:  # noqa: BLE001 - transformers' own reason, in one line
        raise SpecError(
            f"{where}: transformers {v} cannot build {model_type!r} ({type(e).__name__}: {str(e)[:160]}); "
            "kvplan has no reader for it and will not guess its layout"
        ) from None
    seen: dict[int, tuple] = {}
    update = cache.update

    def recording_update(key_states, value_states, layer_idx, *args, **kwargs):
        if key_states is not None and value_states is not None:
            seen.setdefault(layer_idx, (tuple(key_states.shape), tuple(value_states.shape)))
        return update(key_states, value_states, layer_idx, *args, **kwargs)

    cache.update = recording_update
    try:
        with torch.no_grad():
            import inspect

            params = inspect.signature(model.forward).parameters  # Mamba takes its cache as cache_params
            arg = "cache_params" if "cache_params" in params and "past_key_values" not in params else "past_key_values"
            model(input_ids=torch.zeros((1, 2), dtype=torch.long, device="meta"), **{arg: cache}, use_cache=True)
    except Exception as e:  # noqa: BLE001
        raise SpecError(
            f"{where}: transformers {v} cannot run {model_type!r} into a StaticCache on meta "
            f"({type(e).__name__}: {str(e)[:160]}); kvplan will not guess its layout"
        ) from None
    n = text.num_hidden_layers
    blocks = next((m for _, m in model.named_modules() if isinstance(m, torch.nn.ModuleList) and len(m) == n), None)
    sharing = getattr(text, "kv_sharing_modes", None) or [None] * n
    layers = []
    for i, (layer_type, kwargs, cache_layer) in enumerate(zip(layer_types, layer_kwargs, cache.layers, strict=True)):
        k, vv = seen.get(i, (None, None))
        mixer = ""
        if blocks is not None:
            children = dict(blocks[i].named_children())
            mixer = next((type(children[m]).__name__ for m in _MIXER_NAMES if m in children), "")
        tensors = {}
        for tname in ("keys", "values", "indexer_keys"):
            t = getattr(cache_layer, tname, None)
            if t is not None:
                tensors[tname] = [list(t.shape), str(t.dtype).removeprefix("torch.")]
        for tname in ("conv_states", "recurrent_states"):
            for idx, t in sorted((getattr(cache_layer, tname, None) or {}).items()):
                if t is not None:
                    tensors[f"{tname}[{idx}]"] = [list(t.shape), str(t.dtype).removeprefix("torch.")]
        layers.append({
            "type": layer_type, "window": kwargs.get("sliding_window"), "mixer": mixer, "shared": sharing[i] == "reuse",
            "k": list(k) if k else None, "v": list(vv) if vv else None, "tensors": tensors,
        })  # fmt: skip

    def attr(name: str):
        try:  # a heterogeneous config (per-layer attributes) raises on a global read
            value = getattr(text, name, None)
        except Exception:  # noqa: BLE001
            return None
        return value if value is None or isinstance(value, (bool, int, float, str)) else str(value)

    kv_lora = attr("kv_lora_rank")
    return {
        "transformers": v,
        "model_type": model_type,
        "text_model_type": str(getattr(text, "model_type", model_type)),
        "config_class": type(text).__name__,
        "model_class": type(model).__name__,
        "num_attention_heads": attr("num_attention_heads"),
        "hidden_size": attr("hidden_size"),
        "max_position_embeddings": attr("max_position_embeddings"),
        "kv_lora_rank": kv_lora if isinstance(kv_lora, int) else None,
        "dtype": str(config.get("torch_dtype") or config.get("dtype") or attr("dtype") or "float32").removeprefix(
            "torch."
        ),
        "layers": layers,
    }


def _state(where: str, i: int, layer: dict) -> tuple[str, dict]:
    """(kvplan state kind, its block) of a recurrent layer, from the mixer and transformers' tensor shapes.

    Raises:
        SpecError: a mixer kvplan has no engine rule for, or shapes that do not fit the kind.
    """
    kind = next((k for needle, k in STATE_MIXERS if needle in layer["mixer"]), None)
    conv = next((s for name, (s, _) in layer["tensors"].items() if name.startswith("conv")), None)
    rec = next((s for name, (s, _) in layer["tensors"].items() if name.startswith("recurrent")), None)
    bad = SpecError(
        f"{where}: layer {i} keeps a recurrent state ({layer['mixer'] or layer['type']}) that kvplan has no "
        "engine rule for; it will not guess its size"
    )
    try:
        if kind == "mamba":  # conv (1, d_inner, d_conv), ssm (1, d_inner, d_state)
            return kind, {"d_inner": conv[1], "d_conv": conv[-1], "d_state": rec[-1]}
        if kind == "mamba2":  # conv (1, H*P + 2*G*N, d_conv), ssm (1, H, P, N)
            h, p, s = rec[1], rec[2], rec[3]
            groups = (conv[1] - h * p) // (2 * s)
            return kind, {"num_heads": h, "head_dim": p, "d_state": s, "n_groups": groups, "d_conv": conv[-1]}
        if kind == "gdn":  # conv (1, 2*Hk*dk + Hv*dv, d_conv), recurrent (1, Hv, dk, dv)
            hv, dk, dv = rec[1], rec[2], rec[3]
            hk = (conv[1] - hv * dv) // (2 * dk)
            return kind, {"num_k_heads": hk, "num_v_heads": hv, "head_k_dim": dk, "head_v_dim": dv, "d_conv": conv[-1]}
        if kind == "short_conv":  # conv (1, hidden, L)
            return kind, {"d_inner": conv[1], "d_conv": conv[-1]}
        if kind == "linear_attention":  # recurrent (1, H, d, d)
            return kind, {"num_heads": rec[1], "head_dim": rec[2]}
    except (TypeError, IndexError, ZeroDivisionError):
        raise bad from None
    raise bad


def build_from_layout(layout: dict, config: dict, where: str, name: str | None, version: str):
    """Turn a cached transformers layout into a spec (kvplan's kinds, the engine's state rules).

    Raises:
        SpecError: as :func:`spec_from_transformers`.
    """
    from kvplan.specs import build_spec

    kinds, heads, dims, vdims, states, notes = [], [], [], [], {}, []
    windows: dict[str, set] = {"sliding": set(), "chunked": set()}
    mla = None
    for i, layer in enumerate(layout["layers"]):
        t = layer["type"]
        if layer["shared"]:
            raise SpecError(f"{where}: layer {i} reuses another layer's cache (KV sharing); kvplan will not guess")
        if t in ("full_attention", "sliding_attention", "chunked_attention", "indexed_attention", "hybrid"):
            k, v = layer["k"], layer["v"]
            if k is None or v is None:
                raise SpecError(f"{where}: layer {i} ({t}) handed no K/V to transformers' cache; kvplan will not guess")
            rank = layout.get("kv_lora_rank")
            if rank and k[1] == 1 and k[-1] == rank:  # MLA: the latent (1 head of kv_lora_rank) + the rope key
                idx = layer["tensors"].get("indexer_keys")
                mla = {"kv_lora_rank": rank, "qk_rope_head_dim": v[-1], "index_head_dim": idx[0][-1] if idx else None}
                kinds.append("mla")
                heads.append(None), dims.append(None), vdims.append(None)
                continue
            kind = {"sliding_attention": "sliding", "chunked_attention": "chunked"}.get(t, "full")
            if kind in windows:
                windows[kind].add(layer["window"])
            kinds.append(kind)
            heads.append(k[1]), dims.append(k[-1]), vdims.append(v[-1])
            if t == "hybrid":
                raise SpecError(f"{where}: layer {i} runs attention and a recurrent mixer side by side; kvplan will "
                                "not guess which state it keeps")  # fmt: skip
        elif t in ("linear_attention", "conv"):
            kind, block = _state(where, i, layer)
            if states.setdefault(kind, block) != block:
                raise SpecError(f"{where}: {kind} layers of different sizes; kvplan has one {kind} block per model")
            kinds.append(kind)
            heads.append(None), dims.append(None), vdims.append(None)
        elif t == "dummy":
            kinds.append("none")
            heads.append(None), dims.append(None), vdims.append(None)
        else:
            raise SpecError(f"{where}: layer {i} is a transformers {t!r} cache layer kvplan has no rule for")
    for kind, ws in windows.items():
        if len(ws) > 1 or None in ws:
            raise SpecError(f"{where}: {kind} layers with windows {sorted(map(str, ws))}; kvplan has one per kind")
    attn = [i for i, k in enumerate(kinds) if k in ("full", "sliding", "chunked")]
    q = layout.get("num_attention_heads") or 1
    kv0 = heads[attn[0]] if attn else 1
    d0 = dims[attn[0]] if attn else 1
    if states:
        notes.append("recurrent states sized by vLLM's MambaStateShapeCalculator (d_conv - 1 conv columns where "
                     "transformers keeps d_conv; the recurrent state in the model dtype where transformers keeps "
                     "float32)")  # fmt: skip
    if mla and mla["index_head_dim"]:
        notes.append("DSA indexer key priced in the KV dtype, as transformers caches it (vLLM: fp8 + scales)")
    data: dict[str, Any] = {
        "name": name or _name(where, config),
        "source": where,
        "num_layers": len(kinds),
        "num_q_heads": q if attn and all(q % heads[i] == 0 for i in attn) else (kv0 if attn else 1),
        "num_kv_heads": kv0,
        "head_dim": d0,
        "dtype": _DTYPES.get(layout["dtype"].lower(), "fp16"),
        "max_model_len": layout.get("max_position_embeddings") or 2048,
        "layers": kinds,
        "reader": f"transformers {version} (no kvplan reader)",
        "notes": "; ".join(
            [f"{layout['config_class']} / {layout['model_class']} read by transformers {version}", *notes]
        ),  # fmt: skip
    }
    if isinstance(layout.get("hidden_size"), int):
        data["hidden_size"] = layout["hidden_size"]
    if attn and (len({heads[i] for i in attn}) > 1 or len({dims[i] for i in attn}) > 1 or
                 any(vdims[i] != dims[i] for i in attn)):  # fmt: skip
        data["per_layer"] = {"num_kv_heads": heads, "head_dim": dims, "v_head_dim": vdims}
    for kind, ws in windows.items():
        if ws:
            data["sliding_window" if kind == "sliding" else "attention_chunk_size"] = next(iter(ws))
    if mla:
        data["mla"] = {k: v for k, v in mla.items() if v is not None}
        if not attn:
            data["num_kv_heads"] = data["num_q_heads"] = q
            data["head_dim"] = mla["kv_lora_rank"]
    data.update(states)
    archs = config.get("architectures")
    if isinstance(archs, list) and archs and isinstance(archs[0], str) and archs[0].isidentifier():
        data["architecture"] = archs[0]
    return build_spec(data, where)


def _name(where: str, config: dict) -> str:
    p = Path(where)
    name = p.stem if p.name != "config.json" else p.parent.name
    return name or str(config.get("_name_or_path") or "model")
