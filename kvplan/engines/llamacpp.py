"""llama.cpp's KV-cache rules as ``kvplan fit --engine llamacpp`` applies them (the arithmetic is
:func:`kvplan.fit.request_bytes`; this module names the rule set and checks ``--engine-version``).

One rule set, not tied to a release: llama.cpp ``llama-kv-cache`` as described in
``../shared/reference/ENGINES.md``: n_ctx cells padded to 256 per parallel slot, and for interleaved-SWA models
a second cache of ``min(n_ctx, pad(n_swa + n_ubatch, 256))`` cells (``--swa-full``: n_ctx). llama.cpp releases
are build numbers (``b5000``); ollama's versions (``0.6.8``) are accepted too (``--engine ollama``). Any
version that parses gets this set: kvplan knows of no release boundary to warn about.

Pure Python: no numpy or torch.
"""

from __future__ import annotations

import re

from kvplan.engines import parse_version
from kvplan.errors import UsageError

RULES_VERSION = ""  # no numbered rule set
DESCRIPTION = "llama.cpp llama-kv-cache (n_ctx padded to 256, SWA cache of pad(n_swa + n_ubatch, 256) cells)"


def resolve_rules(version: str | None) -> str:
    """The rule set for a llama.cpp build (``b5000``, ``5000``) or an ollama version (``0.6.8``): the one set.

    Raises:
        UsageError: not a build or version number.
    """
    if version is None or str(version).strip().lower() in ("", "latest", "current"):
        return RULES_VERSION
    text = str(version).strip().lower()
    if re.fullmatch(r"b?\d{1,7}", text) is None and parse_version(text) is None:
        raise UsageError(
            f"--engine-version: {version!r} is not a llama.cpp build (e.g. b5000) or ollama version (e.g. 0.6.8); "
            "llama.cpp rule sets: one (llama-kv-cache)"
        )
    return RULES_VERSION


def older_than_oldest(version: str | None) -> bool:
    """Always False: the one rule set has no oldest release."""
    return False
