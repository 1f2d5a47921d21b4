"""How much of transformers' causal-LM zoo kvplan reads, as a table anyone can rerun.

For every model_type in transformers 5.23's ``MODEL_FOR_CAUSAL_LM_MAPPING_NAMES`` (the test oracle; kvplan
itself imports transformers only in its fallback reader), one status:

- ``native``: a kvplan reader is registered (``kvplan.readers.REGISTRY``);
- ``fallback``: no kvplan reader, and the transformers fallback (``kvplan.readers.transformers_fallback``)
  reads the config class's defaults (``{"model_type": X}``) into a spec;
- ``encoder-only``: kvplan's list of encoder-only types, and XLM with its class default ``causal: false``
  (no KV cache to plan);
- ``no KV cache``: a decoder whose transformers model keeps no cache at all (GPT-1: nothing to plan);
- ``refused``: with the reason (transformers cannot build it, or its cache has a layer kvplan has no engine
  rule for).

Also: the multimodal wrappers (``kvplan.readers.wrappers``) whose text model is read natively, and registered
model types that are not causal-LM keys of transformers. Layouts are cached in a temporary folder.

Usage: .venv/bin/python scripts/oracle_report.py [--list]
"""

from __future__ import annotations

import os
import sys
import tempfile
import textwrap

from kvplan.errors import SpecError
from kvplan.readers import REGISTRY, spec_from_hf_config
from kvplan.readers.base import NO_CACHE_TYPES, is_encoder
from kvplan.readers.wrappers import WRAPPER_TEXT_TYPES


def _wrap(names: list[str]) -> str:
    return textwrap.fill(", ".join(names), width=110, initial_indent="  ", subsequent_indent="  ") or "  (none)"


def status(model_type: str) -> tuple[str, str]:
    """(native | fallback | encoder-only | refused, reason) for one transformers model_type."""
    if model_type in REGISTRY:
        return "native", ""
    if is_encoder(model_type, {}):  # the class default: XLM's causal false
        return "encoder-only", ""
    if model_type in NO_CACHE_TYPES:
        return "no KV cache", NO_CACHE_TYPES[model_type]
    try:
        spec = spec_from_hf_config({"model_type": model_type}, f"{model_type} (class defaults)")
    except SpecError as e:
        return "refused", str(e).split(": ", 1)[-1]
    return ("fallback", "") if "no kvplan reader" in spec.reader else ("native", "")


def main() -> None:
    import transformers
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES

    os.environ["XDG_CACHE_HOME"] = tempfile.mkdtemp(prefix="kvplan-report-")
    causal = sorted(MODEL_FOR_CAUSAL_LM_MAPPING_NAMES)
    rows = {t: status(t) for t in causal}
    by: dict[str, list[str]] = {}
    for t, (s, _) in rows.items():
        by.setdefault(s, []).append(t)
    print(f"transformers {transformers.__version__}: {len(causal)} causal-LM model types")
    for s in ("native", "fallback", "encoder-only", "no KV cache", "refused"):
        print(f"  {s:13s} {len(by.get(s, [])):4d}")
    for s in ("native", "fallback", "encoder-only", "no KV cache"):
        print(f"\n{s} ({len(by.get(s, []))}):\n{_wrap(by.get(s, []))}")
    print(f"\nrefused ({len(by.get('refused', []))}):")
    for t in by.get("refused", []):
        print(f"  {t}: {rows[t][1][:200]}")
    native_wrappers = sorted(w for w, text in WRAPPER_TEXT_TYPES.items() if text in REGISTRY)
    print(f"\nmultimodal wrappers whose default text model kvplan reads natively ({len(native_wrappers)}):")
    print(_wrap(native_wrappers))
    extra = sorted(set(REGISTRY) - set(causal))
    print(f"\nregistered in kvplan but not a transformers causal-LM model type ({len(extra)}):\n{_wrap(extra)}")
    if "--list" in sys.argv:
        for t, (s, reason) in rows.items():
            print(f"{t}\t{s}\t{reason}")


if __name__ == "__main__":
    main()
