"""How to install an optional dependency, worded for the way kvplan itself was installed.

A kvplan installed from a package index gets ``pip install 'kvplan[verify]'``. A kvplan installed from a
clone (``pip install .``, ``pip install -e .``, or run from the source tree) gets ``pip install
'.[verify]'`` run in the clone: ``'kvplan[verify]'`` there would fetch kvplan again from the index and,
for torch, the default build with the whole CUDA stack. The torch extras say to install the wanted torch
build first (``pip install torch==2.13.0`` on a CPU machine, or the CUDA build for the GPU).

Only error paths import this module (``importlib.metadata`` costs start-up time).
"""

from __future__ import annotations

# extra -> (the package it brings, whether torch must be chosen first)
EXTRAS: dict[str, tuple[str, bool]] = {
    "verify": ("torch", True),
    "plot": ("matplotlib", False),
}


def installed_from_clone() -> bool:
    """True when kvplan runs from a source tree or was installed from a local folder (PEP 610
    ``direct_url.json`` with ``dir_info``), False when it came from an index (or a wheel URL)."""
    import json
    from importlib import metadata

    try:
        dist = metadata.distribution("kvplan")
    except metadata.PackageNotFoundError:
        return True  # imported from a checkout without installing it
    from pathlib import Path

    import kvplan

    here = Path(kvplan.__file__).resolve().parent
    try:
        located = Path(dist.locate_file("kvplan")).resolve()
    except (TypeError, ValueError, OSError):
        located = here
    if located != here:
        return True  # another kvplan is installed, but this one runs from a source tree
    text = dist.read_text("direct_url.json")
    if not text:
        return False
    try:
        info = json.loads(text)
    except ValueError:
        return False
    return isinstance(info, dict) and "dir_info" in info


def extra_hint(extra: str) -> str:
    """The install command for ``extra``, e.g. ``pip install 'kvplan[plot]'`` or, in a clone,
    ``pip install '.[plot]' (in your kvplan clone)``."""
    package, torch_first = EXTRAS.get(extra, (extra, False))
    first = (
        "install the torch build for your machine first (CPU: pip install torch==2.13.0), then " if torch_first else ""
    )
    if installed_from_clone():
        return f"{first}pip install '.[{extra}]' in your kvplan clone"
    return f"{first}pip install 'kvplan[{extra}]'"
