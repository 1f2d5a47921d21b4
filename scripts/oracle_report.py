"""How much of transformers' causal-LM zoo kvplan's config readers cover.

Takes every model_type in transformers' ``MODEL_FOR_CAUSAL_LM_MAPPING_NAMES`` (transformers 5.23, the test
oracle; kvplan itself never imports it) and asks kvplan's registry (``kvplan.readers.reader_for``) whether it
has a reader: read, or refused (no reader, or encoder-only). Also lists registered model types that are not
causal-LM keys of transformers (remote-code and legacy names, multimodal wrappers).

Usage: .venv/bin/python scripts/oracle_report.py
"""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

from kvplan.errors import SpecError
from kvplan.readers import REGISTRY, reader_for, spec_from_hf_config
from kvplan.readers.base import HFConfig

FIXTURES = Path(__file__).resolve().parent.parent / "tests" / "fixtures"


def _wrap(names: list[str]) -> str:
    return textwrap.fill(", ".join(names), width=110, initial_indent="  ", subsequent_indent="  ") or "  (none)"


def _fixture_outcomes() -> dict[str, list[bool]]:
    """model_type -> [kvplan read the fixture?] over the config.json fixtures of that type."""
    out: dict[str, list[bool]] = {}
    for path in sorted(FIXTURES.glob("hf_configs*/*.json")):
        try:
            config = json.loads(path.read_text())
            model_type = HFConfig(config, str(path)).model_type
        except (OSError, ValueError, AttributeError, SpecError):
            continue
        try:
            spec_from_hf_config(config, str(path))
            ok = True
        except SpecError:
            ok = False
        for t in {model_type, str(config.get("model_type"))}:
            out.setdefault(t, []).append(ok)
    return out


def main() -> None:
    import transformers
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES

    causal = sorted(MODEL_FOR_CAUSAL_LM_MAPPING_NAMES)
    read, refused, encoders = [], [], []
    for model_type in causal:
        try:
            reader_for(model_type, "report")
            read.append(model_type)
        except SpecError as e:
            refused.append(model_type)
            if "encoder-only" in str(e):
                encoders.append(model_type)
    extra = sorted(set(REGISTRY) - set(causal))
    print(f"transformers {transformers.__version__}: {len(causal)} causal-LM model types")
    print(f"kvplan reads {len(read)} ({100 * len(read) / len(causal):.0f}%), refuses {len(refused)}")
    print(f"\nread ({len(read)}):\n{_wrap(read)}")
    outcomes = _fixture_outcomes()
    refusing = [t for t in read if outcomes.get(t) and not any(outcomes[t])]
    untested = [t for t in read if t not in outcomes]
    print(f"  of which registered but refusing every fixture of the type ({len(refusing)}): {', '.join(refusing)}")
    print(f"  of which without a config.json fixture ({len(untested)}): {', '.join(untested)}")
    print(f"\nrefused ({len(refused)}), of which encoder-only in kvplan's list ({len(encoders)}):\n{_wrap(encoders)}")
    rest = [t for t in refused if t not in encoders]
    print(f"\nrefused, no reader ({len(rest)}):\n{_wrap(rest)}")
    print(f"\nregistered in kvplan but not a transformers causal-LM model type ({len(extra)}):\n{_wrap(extra)}")


if __name__ == "__main__":
    main()
