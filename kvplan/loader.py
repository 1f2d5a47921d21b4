"""Loading a model: what a user typed as MODEL, resolved to a :class:`~kvplan.specs.ModelSpec`.

The cache model (:mod:`kvplan.specs`) knows no file format; this module dispatches by input: a bundled
name (``model_specs/*.yaml``), a spec YAML, a Hugging Face ``config.json`` (or its folder) through the
readers (:mod:`kvplan.readers`), a GGUF file (:mod:`kvplan.readers.gguf`), or a Hub repo id
(:mod:`kvplan.readers.hub`). Readers are imported only for the input that needs them: ``kvplan estimate
llama3-8b`` imports none. Nothing here prints: a spec's ``warnings`` carry what the CLI should say.
"""

from __future__ import annotations

import os
from dataclasses import replace
from pathlib import Path

from kvplan.data import bundled_specs_dir
from kvplan.errors import SpecError
from kvplan.specs import ModelSpec, build_spec
from kvplan.textio import clip as _clip
from kvplan.textio import json_object_hook
from kvplan.textio import read_text as _read_text
from kvplan.textio import yaml_load as _yaml_load

__all__ = ["bundled_specs_dir", "bundled_names", "load_all_bundled", "load_bundled", "load_hf_config", "load_model",
           "load_spec_yaml"]  # fmt: skip


def load_spec_yaml(path: str | os.PathLike, require_source: bool = False) -> ModelSpec:
    """Load and validate a spec YAML file.

    A user's spec may leave out ``source``: the file's path stands in, and the spec's ``warnings`` say so
    (the CLI prints them); with ``require_source`` (bundled specs) it is an error.

    Raises:
        SpecError: missing file, malformed YAML, or an invalid spec (the message names file and field).
    """
    p = Path(path)
    data = _yaml_load(_read_text(p), str(p))
    if require_source or not isinstance(data, dict) or data.get("source") is not None:
        return build_spec(data, str(p))
    spec = build_spec({**data, "source": str(p)}, str(p))
    note = f"{_clip(p)}: no source (the config.json the numbers come from); add one so the spec can be checked"
    return replace(spec, warnings=(*spec.warnings, note))


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
        return load_spec_yaml(path, require_source=True)
    import difflib

    names = bundled_names()
    close = difflib.get_close_matches(key, names, n=3, cutoff=0.6)
    hint = f"; did you mean {' or '.join(close)}?" if close else "; run 'kvplan models' for the list"
    raise SpecError(f"unknown model {_clip(name)!r}: not a bundled model name nor an existing file{hint}")


# --- Hugging Face config.json (readers live in kvplan.readers) ------------------------------------


def load_hf_config(path: str | os.PathLike, name: str | None = None) -> ModelSpec:
    """Load a Hugging Face ``config.json`` (or a folder holding one) as a spec. A file named ``config.json``
    is a checkpoint's: its weights (and parameter count) come from the ``model.safetensors`` or
    ``model.safetensors.index.json`` beside it, as for a Hub repo (:func:`kvplan.readers.hub.folder_weight_bytes`).

    A Hugging Face cache folder works too: ``models--org--name`` is followed through ``refs/main`` to its
    snapshot (:func:`kvplan.readers.hub.cache_snapshot`), and a snapshot folder's spec is named ``org/name``
    (``org/name@commit`` for a snapshot other than refs/main's), not after the commit hash.

    Raises:
        SpecError: missing file, malformed JSON, or missing/inconsistent keys.
    """
    import json

    p = Path(path)
    if p.is_dir() and not (p / "config.json").exists() and p.name.startswith("models--"):
        from kvplan.readers.hub import cache_snapshot

        p = cache_snapshot(p) or p  # a Hugging Face cache repo folder: the snapshot refs/main names
    if p.is_dir():
        p = p / "config.json"
    if name is None and p.name == "config.json" and p.parent.parent.name == "snapshots":
        from kvplan.readers.hub import cache_snapshot_name

        name = cache_snapshot_name(p.parent)  # org/name, not the commit hash of the folder
    text = _read_text(p)
    try:
        config = json.loads(text, object_pairs_hook=json_object_hook(str(p)))
    except json.JSONDecodeError as e:
        raise SpecError(f"{p}: malformed JSON at line {e.lineno}, column {e.colno}: {e.msg}") from None
    except (ValueError, RecursionError) as e:  # 5,000-digit numbers, arrays nested 100,000 deep
        raise SpecError(f"{p}: JSON kvplan cannot read ({type(e).__name__}: {str(e)[:80]})") from None
    from kvplan.readers import spec_from_hf_config

    spec = spec_from_hf_config(config, str(p), name=name)
    if p.name == "config.json":
        from kvplan.readers.hub import folder_weight_bytes, with_weights

        spec = with_weights(spec, folder_weight_bytes(p.parent), config)
    return spec


def load_model(ref: str) -> ModelSpec:
    """Resolve what a user typed as MODEL: a spec YAML path, a config.json path or folder, a GGUF file, a
    bundled name, or a Hugging Face repo id ``org/name[@revision]`` (see :mod:`kvplan.readers.hub`).

    Raises:
        SpecError: nothing matches (with suggestions) or the file is invalid.
    """
    if not str(ref).strip():
        raise SpecError("MODEL: empty; give a bundled name (see 'kvplan models'), a spec YAML or a config.json")
    p = Path(ref)
    try:
        return _load_path(p, ref)
    except OSError as e:  # a name too long for the file system, a permission error ...
        raise SpecError(f"{_clip(ref)}: cannot read ({e.strerror or type(e).__name__})") from None


def _load_path(p: Path, ref: str) -> ModelSpec:
    if p.suffix.lower() == ".gguf" or (p.is_file() and p.suffix.lower() not in (".json", ".yaml", ".yml")):
        from kvplan.readers.gguf import is_gguf, load_gguf

        if is_gguf(p):
            return load_gguf(p)
    if "/" in str(ref) and not p.exists():
        from kvplan.readers.hub import bundled_name, is_repo_id, load_repo

        if is_repo_id(ref):  # org/name[@revision]: a bundled hf_repo, the local HF cache, or the Hub
            name = bundled_name(ref)
            return load_bundled(name) if name is not None else load_repo(ref, load_bundled)
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
