"""The data that ships with kvplan: the GPU catalog (``gpus.yaml``, compiled to ``gpus_catalog.py``) and the
bundled model specs (``model_specs/``)."""

from __future__ import annotations

from pathlib import Path


def bundled_specs_dir() -> Path:
    """The folder of bundled spec YAMLs: inside the installed package, or the source tree's model_specs/."""
    here = Path(__file__).resolve().parent.parent  # kvplan/
    packaged = here / "model_specs"  # the wheel puts model_specs/ inside the package
    if packaged.is_dir():
        return packaged
    return here.parent / "model_specs"
