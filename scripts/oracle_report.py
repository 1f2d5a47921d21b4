"""How much of transformers' causal-LM zoo kvplan reads, as a table anyone can rerun.

For every model_type in transformers 5.23's ``MODEL_FOR_CAUSAL_LM_MAPPING_NAMES`` (the test oracle; kvplan
itself imports transformers only in its fallback reader), one status:

- ``native``: a kvplan reader is registered (``kvplan.readers.REGISTRY``);
- ``fallback``: no kvplan reader, and the transformers fallback (``kvplan.readers.transformers_fallback``)
  reads the config class's defaults (``{"model_type": X}``) into a spec;
- ``encoder-only``: kvplan's list of encoder-only types, and XLM with its class default ``causal: false``
  (no KV cache to plan);
- ``no KV cache``: a decoder whose transformers model keeps no cache at all (GPT-1: nothing to plan);
- ``encoder-decoder``: the published checkpoints are encoder-decoder models (``is_encoder_decoder: true``), which
  kvplan does not plan; transformers' causal-LM class is their decoder half (Marian);
- ``refused``: with the reason (transformers cannot build it, or its cache has a layer kvplan has no engine
  rule for).

A type that has no reader and a published config.json among ``tests/fixtures/hf_configs`` is classified by that
file rather than by its class defaults (the defaults of BLT or Marian do not build, a published file does or
says why not); the reason names the file.

Also: the multimodal wrappers (``kvplan.readers.wrappers``) whose text model is read natively, and registered
model types that are not causal-LM keys of transformers. Layouts are cached in a temporary folder.

Usage: .venv/bin/python scripts/oracle_report.py [--list]
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
import textwrap
from pathlib import Path

from kvplan.errors import SpecError
from kvplan.readers import REGISTRY, spec_from_hf_config
from kvplan.readers.base import NO_CACHE_TYPES, is_encoder
from kvplan.readers.wrappers import WRAPPER_TEXT_TYPES


def _wrap(names: list[str]) -> str:
    return textwrap.fill(", ".join(names), width=110, initial_indent="  ", subsequent_indent="  ") or "  (none)"


FIXTURES = Path(__file__).resolve().parent.parent / "tests" / "fixtures" / "hf_configs"
STATUSES = ("native", "fallback", "encoder-only", "encoder-decoder", "no KV cache", "refused")


# What is known of the types still refused, beside transformers' error: model_type -> note (said after it).
NOTES = {
    "blt": "BltModel.forward itself builds DynamicCache(config=BltConfig) for any cached forward, and BltConfig has "
    "no num_hidden_layers (its local encoder/decoder and global transformer each have their own): transformers 5.23 "
    "cannot run BLT with a cache even from the published itazap/blt-1b-hf config",
    "cohere_compass_text": "the class default rope_parameters has no per-layer-type entry; no published "
    "CohereLabs/North-Micro-Vision-Instruct config.json was found in the stored material",
    "hunyuan_v1_moe": "the class default head_dim is None; transformers builds a config that sets it, but no published "
    "tencent/Hunyuan-A13B-Instruct config.json with model_type hunyuan_v1_moe was found in the stored material",
    "qwen4_exp": "indexed_attention layers need the QSA indexer_* keys (None by default); no published Qwen4-Exp "
    "config.json was found (only trimmed or hand-written test dicts), and with a realistic one the meta forward stops "
    "at the experts' torch.nonzero",
    "qwen4_exp_text": "as qwen4_exp",
}


def published_configs() -> dict[str, Path]:
    """model_type -> the first published config.json of that (outer) model_type among the test fixtures."""
    out: dict[str, Path] = {}
    for path in sorted(FIXTURES.glob("*.json")):
        try:
            config = json.loads(path.read_text())
        except ValueError:
            continue
        if isinstance(config, dict) and isinstance(config.get("model_type"), str):
            out.setdefault(config["model_type"], path)
    return out


def status(model_type: str, published: dict[str, Path] | None = None) -> tuple[str, str]:
    """(native | fallback | encoder-only | encoder-decoder | no KV cache | refused, reason) for one model_type;
    an unregistered type with a published config among ``published`` is read from that file."""
    if model_type in REGISTRY:
        return "native", ""
    if is_encoder(model_type, {}):  # the class default: XLM's causal false
        return "encoder-only", ""
    if model_type in NO_CACHE_TYPES:
        return "no KV cache", NO_CACHE_TYPES[model_type]
    path = (published or {}).get(model_type)
    config, where = ({"model_type": model_type}, f"{model_type} (class defaults)")
    if path is not None:
        config, where = json.loads(path.read_text()), f"tests/fixtures/hf_configs/{path.name}"
    try:
        spec = spec_from_hf_config(config, where)
    except SpecError as e:
        reason = str(e).split(": ", 1)[-1] + (f" (read from {where})" if path is not None else "")
        reason += f"; {NOTES[model_type]}" if model_type in NOTES else ""
        if "is_encoder_decoder is true" in str(e):
            return "encoder-decoder", reason
        return "refused", reason
    return ("fallback", "") if "no kvplan reader" in spec.reader else ("native", "")


def main() -> None:
    import transformers
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES

    os.environ["XDG_CACHE_HOME"] = tempfile.mkdtemp(prefix="kvplan-report-")
    causal = sorted(MODEL_FOR_CAUSAL_LM_MAPPING_NAMES)
    published = published_configs()
    rows = {t: status(t, published) for t in causal}
    by: dict[str, list[str]] = {}
    for t, (s, _) in rows.items():
        by.setdefault(s, []).append(t)
    print(f"transformers {transformers.__version__}: {len(causal)} causal-LM model types")
    for s in STATUSES:
        print(f"  {s:15s} {len(by.get(s, [])):4d}")
    for s in STATUSES[:-1]:
        print(f"\n{s} ({len(by.get(s, []))}):\n{_wrap(by.get(s, []))}")
    print(f"\nrefused ({len(by.get('refused', []))}):")
    for t in by.get("refused", []):
        print(f"  {t}: {rows[t][1][:200]}")
    native_wrappers = sorted(
        w for w, text in WRAPPER_TEXT_TYPES.items() if text in REGISTRY and w not in NO_CACHE_TYPES
    )
    print(f"\nmultimodal wrappers whose default text model kvplan reads natively ({len(native_wrappers)}):")
    print(_wrap(native_wrappers))
    extra = sorted(set(REGISTRY) - set(causal))
    print(f"\nregistered in kvplan but not a transformers causal-LM model type ({len(extra)}):\n{_wrap(extra)}")
    if "--list" in sys.argv:
        for t, (s, reason) in rows.items():
            print(f"{t}\t{s}\t{reason}")


if __name__ == "__main__":
    main()
