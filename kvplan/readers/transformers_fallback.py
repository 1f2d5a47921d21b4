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
KDA (Kimi Delta Attention: Kimi Linear, Ling-3 ``bailing_hybrid``) is Gated DeltaNet's state shapes with one
head count and one head dim (vLLM ``MambaStateShapeCalculator.kda_state_shape``) and a float32 recurrent
state (``MambaStateDtypeCalculator.kda_state_dtype`` with ``mamba_ssm_cache_dtype`` auto). A layer that runs
attention and a recurrent mixer side by side (transformers' ``hybrid`` cache layer: Zamba) keeps both: an
attention kind with ``parallel_state`` (the mixer found among the layer's modules), as vLLM registers
Falcon-H1's and Zamba2's parallel mixers.

Where the forward on meta stops at a data-dependent check that only warns (``warn_if_padding_and_no_attention_mask``)
it is skipped; a model whose meta forward mixes dtypes (XLNet) is built in float32 instead; X-MOD gets its first
language as the default. What transformers cannot build or run on meta, or a cache with no kvplan rule, is
refused with transformers' error or the reason (:data:`NO_RULE_REASONS`).

The spec is labelled ``reader: "transformers 5.23.0 (no kvplan reader)"``.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any

from kvplan.errors import SpecError

SCHEMA = 2  # bump when the cached layout's fields change
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
    ("DeltaAttention", "gdn"),  # KDA: vLLM kda_state_shape is GDN's with Hk = Hv, dk = dv
    ("ShortConv", "short_conv"),
    ("LightningAttention", "linear_attention"),
)
# mixer (substring) -> the recurrent state dtype vLLM keeps whatever the model dtype
STATE_DTYPES = {"DeltaAttention": "fp32"}  # vLLM mamba_utils.py MambaStateDtypeCalculator.kda_state_dtype: float32

# Why a buildable model_type is still refused: model_type -> the reason (what transformers keeps, which engine
# serves it). Said after the generic refusal, so a future transformers that caches them differently is read.
# (RWKV-4, xLSTM, ZAYA, Inkling, XLNet and CPM-Ant, refused here before, have readers of their own:
# kvplan/readers/stateful.py.)
NO_RULE_REASONS = {
    "xmod": "X-MOD routes each token to its language adapter with torch.nonzero, whose output size a meta-device "
    "forward cannot know",
}
_MIXER_NAMES = ("self_attn", "attn", "attention", "self_attention", "linear_attn", "mamba", "mixer", "conv",
                "short_conv", "token_mixer", "temporal_block")  # fmt: skip
_DTYPES = {"bfloat16": "bf16", "float16": "fp16", "float32": "fp16"}  # vLLM serves fp32 checkpoints in 16 bit
_TOKENS = 2  # tokens of the forward that fills the cache


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
    from transformers import AutoConfig, StaticCache
    from transformers.cache_utils import get_layer_types_and_kwargs
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING_NAMES

    transformers.logging.set_verbosity_error()
    raw = dict(config)
    model_type = raw.pop("model_type", None)
    v = transformers.__version__
    if model_type not in CONFIG_MAPPING_NAMES:
        from kvplan.readers.base import SPEC_FORMAT_DOC, close_model_type

        close = close_model_type(str(model_type), known)
        hint = f" (did you mean {close!r}?)" if close else ""
        raise SpecError(
            f"{where}: model_type {model_type!r}{hint}: neither kvplan nor transformers {v} has a reader for it "
            f"(remote code only?); kvplan will not guess its layout: write a spec YAML (see {SPEC_FORMAT_DOC})"
        )
    raw.pop("quantization_config", None)
    why = NO_RULE_REASONS.get(str(model_type))
    because = f"; {why}" if why else ""
    try:
        text = copy.deepcopy(AutoConfig.for_model(model_type, **raw).get_text_config(decoder=True))
        text._attn_implementation = "eager"
        layer_types, layer_kwargs = get_layer_types_and_kwargs(text)
    except Exception as e:  # noqa: BLE001 - transformers' own reason, in one line
        raise SpecError(
            f"{where}: transformers {v} cannot build {model_type!r} ({type(e).__name__}: {str(e)[:160]}); "
            "kvplan has no reader for it and will not guess its layout"
        ) from None
    error = None
    for dtype in (torch.bfloat16, torch.float32):  # XLNet mixes a float32 tensor into a 16-bit model's matmul
        try:
            model = _build(transformers, text, dtype)
            cache = StaticCache(config=text, max_cache_len=64)
        except Exception as e:  # noqa: BLE001
            raise SpecError(
                f"{where}: transformers {v} cannot build {model_type!r} ({type(e).__name__}: {str(e)[:160]}); "
                "kvplan has no reader for it and will not guess its layout"
            ) from None
        seen: dict[int, tuple] = {}
        try:
            _run(model, cache, seen)
            error = None
            break
        except Exception as e:  # noqa: BLE001
            error = e
            if "expected scalar type" not in str(e):
                break
    if error is not None:  # a forward that does not fit a StaticCache's shapes (ProphetNet's ngram streams)
        try:
            model = _build(transformers, text, torch.bfloat16)
            dynamic = transformers.DynamicCache(config=text)
            seen = {}
            _run(model, dynamic, seen)
            cache, error = dynamic, None
        except Exception:  # noqa: BLE001 - the StaticCache's error is the one reported
            pass
    if error is not None:
        e = error
        raise SpecError(
            f"{where}: transformers {v} cannot run {model_type!r} into a StaticCache on meta "
            f"({type(e).__name__}: {str(e)[:160]}){because}; kvplan will not guess its layout"
        ) from None
    extra = sorted({k[2] for k, _ in seen.values() if len(k) == 4 and k[2] != _TOKENS})
    if extra:  # CPM-Ant prepends learned prompt tokens to every request
        raise SpecError(
            f"{where}: {model_type!r} caches {extra[0]} tokens per layer after a {_TOKENS}-token forward (transformers "
            f"{v}): tokens of its own beside the request's, which kvplan's layer kinds do not count{because}; kvplan "
            "will not guess its layout"
        )
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
            "state_mixer": _state_mixer(blocks[i] if blocks is not None else None),
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


def _build(transformers, text, dtype):
    """The causal LM of ``text`` on the meta device: its auto class, else ``<Name>ForCausalLM`` for a decoder config
    the auto mapping lacks (``Emu3TextConfig`` -> ``Emu3ForCausalLM``, ``MusicgenDecoderConfig`` ->
    ``MusicgenForCausalLM``), else the base model (a wrapper's text config)."""
    import torch
    from transformers import AutoModel, AutoModelForCausalLM

    with torch.device("meta"):
        try:
            model = AutoModelForCausalLM.from_config(text, dtype=dtype)
        except ValueError:
            name = type(text).__name__
            for suffix in ("TextConfig", "DecoderConfig", "Config"):
                causal = getattr(transformers, name.replace(suffix, "ForCausalLM"), None) if suffix in name else None
                if causal is not None:
                    model = causal(text).to(dtype)
                    break
            else:
                model = AutoModel.from_config(text, dtype=dtype)
    languages = getattr(text, "languages", None)
    if hasattr(model, "set_default_language") and languages:  # X-MOD: one adapter must be chosen
        model.set_default_language(languages[0])
    return model


def _run(model, cache, seen: dict) -> None:
    """A 2-token forward on meta into ``cache``, recording the K/V shapes each layer hands to it in ``seen``.
    ``warn_if_padding_and_no_attention_mask`` (a warning that reads token values) is skipped."""
    import inspect

    import torch
    from transformers import PreTrainedModel

    update = cache.update

    def recording_update(key_states, value_states, layer_idx, *args, **kwargs):
        if key_states is not None and value_states is not None:
            seen.setdefault(layer_idx, (tuple(key_states.shape), tuple(value_states.shape)))
        return update(key_states, value_states, layer_idx, *args, **kwargs)

    cache.update = recording_update
    params = inspect.signature(model.forward).parameters  # Mamba takes its cache as cache_params, XLM as cache
    arg = next((a for a in ("past_key_values", "cache_params", "cache") if a in params), "past_key_values")
    rows = getattr(model.config, "num_codebooks", None) or 1  # MusicGen's decoder reads one row per codebook
    extra = {}
    if "lengths" in params:  # XLM asserts on lengths.max().item(): the tokens fed, given on the CPU
        extra["lengths"] = torch.full((rows,), _TOKENS, dtype=torch.long, device="cpu")
    warn = PreTrainedModel.warn_if_padding_and_no_attention_mask
    PreTrainedModel.warn_if_padding_and_no_attention_mask = lambda *a, **k: None
    try:  # on meta as the default device too: tensors a forward creates land beside the weights (XLNet)
        with torch.no_grad(), torch.device("meta"):
            model(input_ids=torch.zeros((rows, _TOKENS), dtype=torch.long), **{arg: cache}, use_cache=True, **extra)
    finally:
        PreTrainedModel.warn_if_padding_and_no_attention_mask = warn


def _state_mixer(block) -> str:
    """The class name of the first module of a decoder layer that is a recurrent mixer kvplan knows
    (:data:`STATE_MIXERS`), or ""."""
    if block is None:
        return ""
    for _, module in block.named_modules():
        name = type(module).__name__
        if any(needle in name for needle, _ in STATE_MIXERS):
            return name
    return ""


def _state(where: str, i: int, layer: dict) -> tuple[str, dict]:
    """(kvplan state kind, its block) of a recurrent layer, from the mixer and transformers' tensor shapes.

    Raises:
        SpecError: a mixer kvplan has no engine rule for, or shapes that do not fit the kind.
    """
    mixer = layer.get("state_mixer") or layer["mixer"]
    kind = next((k for needle, k in STATE_MIXERS if needle in mixer), None)
    conv = next((s for name, (s, _) in layer["tensors"].items() if name.startswith("conv")), None)
    rec = next((s for name, (s, _) in layer["tensors"].items() if name.startswith("recurrent")), None)
    shapes = ", ".join(f"{name} {tuple(shape)}" for name, (shape, _) in layer["tensors"].items()
                       if name.startswith(("conv", "recurrent")))  # fmt: skip
    bad = SpecError(
        f"{where}: layer {i} keeps a recurrent state ({mixer or layer['type']}: {shapes}) that kvplan has no "
        "engine rule for; it will not guess its size"
    )
    convs = [n for n in layer["tensors"] if n.startswith("conv")]
    recs = [n for n in layer["tensors"] if n.startswith("recurrent")]
    if len(convs) > 1 or len(recs) > 1:  # Inkling: conv states on K, V and the stream; no kind keeps several
        raise SpecError(
            f"{where}: layer {i} keeps {len(convs)} conv and {len(recs)} recurrent states ({shapes}); a kvplan state "
            "kind keeps one of each: it will not guess how the engine sizes the others"
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
        SpecError: as :func:`spec_from_transformers`, with :data:`NO_RULE_REASONS`' reason for the model_type.
    """
    why = NO_RULE_REASONS.get(str(layout.get("model_type")))
    try:
        return _build_from_layout(layout, config, where, name, version)
    except SpecError as e:
        if why and why not in str(e):
            raise SpecError(f"{e}; {why}") from None
        raise


_ATTENTION_KINDS = {"sliding_attention": "sliding", "chunked_attention": "chunked", "hybrid_sliding": "sliding"}


def _state_block(where: str, i: int, layer: dict) -> tuple[str, dict]:
    """:func:`_state`, with the recurrent state dtype vLLM keeps for the mixer (:data:`STATE_DTYPES`)."""
    kind, block = _state(where, i, layer)
    mixer = layer.get("state_mixer") or layer["mixer"]
    dtype = next((d for needle, d in STATE_DTYPES.items() if needle in mixer), None)
    return kind, ({**block, "ssm_dtype": dtype} if dtype else block)


def _build_from_layout(layout: dict, config: dict, where: str, name: str | None, version: str):
    from kvplan.specs import build_spec

    kinds, heads, dims, vdims, states, notes = [], [], [], [], {}, []
    parallel, hybrid = None, set()  # the state hybrid layers keep beside their KV; which layers are hybrid
    windows: dict[str, set] = {"sliding": set(), "chunked": set()}
    mla = None
    for i, layer in enumerate(layout["layers"]):
        t = layer["type"]
        if layer["shared"]:
            raise SpecError(f"{where}: layer {i} reuses another layer's cache (KV sharing); kvplan will not guess")
        if t in ("full_attention", "sliding_attention", "chunked_attention", "indexed_attention", "hybrid",
                 "hybrid_sliding"):  # fmt: skip
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
            kind = _ATTENTION_KINDS.get(t, "full")
            if kind in windows:
                windows[kind].add(layer["window"])
            kinds.append(kind)
            heads.append(k[1]), dims.append(k[-1]), vdims.append(v[-1])
            if t in ("hybrid", "hybrid_sliding"):  # attention and a recurrent mixer side by side (Zamba)
                skind, block = _state_block(where, i, layer)
                if states.setdefault(skind, block) != block or parallel not in (None, skind):
                    raise SpecError(f"{where}: layer {i}: hybrid layers with different states; kvplan has one "
                                    "parallel state per model")  # fmt: skip
                parallel = skind
                hybrid.add(i)
        elif t in ("linear_attention", "conv"):
            kind, block = _state_block(where, i, layer)
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
    if parallel and set(attn) != hybrid:
        raise SpecError(f"{where}: some attention layers keep a {parallel} state beside their KV and some do not; "
                        "kvplan's parallel_state is every attention layer's")  # fmt: skip
    q = layout.get("num_attention_heads") or 1
    kv0 = heads[attn[0]] if attn else 1
    d0 = dims[attn[0]] if attn else 1
    engine = []  # where kvplan's sizes are an engine's, not transformers': said on the "read by" line too
    if states:
        fp32 = any(b.get("ssm_dtype") == "fp32" for b in states.values())
        engine.append("recurrent states sized as vLLM keeps them (MambaStateShapeCalculator: d_conv - 1 conv columns "
                      "where transformers keeps d_conv" + ("" if fp32 else "; the recurrent state in the model dtype "
                      "where transformers keeps float32") + ")")  # fmt: skip
    if mla and mla["index_head_dim"]:
        notes.append("DSA indexer key priced in the KV dtype, as transformers caches it (vLLM: fp8 + scales)")
    notes += engine
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
        "reader": "; ".join([f"transformers {version} (no kvplan reader)", *engine]),
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
    if parallel:
        data["parallel_state"] = parallel
    archs = config.get("architectures")
    if isinstance(archs, list) and archs and isinstance(archs[0], str) and archs[0].isidentifier():
        data["architecture"] = archs[0]
    return build_spec(data, where)


def _name(where: str, config: dict) -> str:
    p = Path(where)
    name = p.stem if p.name != "config.json" else p.parent.name
    return name or str(config.get("_name_or_path") or "model")
