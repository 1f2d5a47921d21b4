"""Serving-engine rules kvplan mirrors, one module per engine, each rule a small function citing the engine
file (and version) it follows. Every module defines one :class:`kvplan.engines.base.EngineRules` subclass,
registered here and imported only when used (:func:`get`); :mod:`kvplan.engines.base` holds the interface.

- :mod:`kvplan.engines.vllm`: vLLM's KV-cache planning (``vllm/v1/core/kv_cache_planning.py``,
  ``kv_cache_utils.py``, ``kv_cache_interface.py``, ``platforms/interface.py``), by version.

- :mod:`kvplan.engines.trtllm`, :mod:`kvplan.engines.sglang`, :mod:`kvplan.engines.llamacpp`: the same for
  TensorRT-LLM, SGLang and llama.cpp.

``--engine-version`` (:func:`parse_version`) must parse as a version number for every engine; each engine
module's ``resolve_rules`` picks its rule set (the newest not newer than the version), and a version older
than the oldest rule set gets that oldest set with a warning (:func:`kvplan.fit.engine_version_warning`),
not an error: the engine's older releases mostly share those rules, and the output names the set applied.

Pure Python: no numpy or torch (``kvplan estimate`` and ``kvplan fit`` import none).
"""

from __future__ import annotations

import re
from importlib import import_module

from kvplan.options import ENGINE_NAMES, Engine, get_engine

__all__ = ["ENGINE_NAMES", "Engine", "get", "get_engine", "engine_rules", "engine_version_warning"]

_MODULES = {
    Engine.vllm: "kvplan.engines.vllm",
    Engine.sglang: "kvplan.engines.sglang",
    Engine.trtllm: "kvplan.engines.trtllm",
    Engine.llamacpp: "kvplan.engines.llamacpp",
}


def get(engine):
    """The :class:`kvplan.engines.base.EngineRules` of ``engine`` (a name or :class:`Engine`): its module's
    ``ENGINE``, imported on first use.

    Raises:
        UsageError: unknown engine name.
    """
    return import_module(_MODULES[get_engine(engine)]).ENGINE


def engine_rules(engine, version: str | None) -> tuple[str, str]:
    """(rule set, its description) an engine applies for ``--engine-version`` ``version`` (None: the newest).

    Raises:
        UsageError: an unknown engine, or a version that does not parse (the message lists the rule sets).
    """
    r = get(engine).resolve_rules(version)
    return r.version, r.description


def engine_version_warning(engine, version: str | None) -> str | None:
    """The warning for a ``--engine-version`` older than the engine's oldest rule set (kvplan applies that
    set rather than refuse: the output names it), else None.

    Raises:
        UsageError: as :func:`engine_rules`.
    """
    eng = get(engine)
    rules, description = engine_rules(engine, version)
    if version is None or not eng.older_than_oldest(version):
        return None
    return (
        f"--engine-version {str(version).strip()} is older than the oldest {eng.display_name} rule set kvplan has; "
        f"applying {rules} ({description})"
    )


_VERSION_RE = re.compile(r"v?(\d{1,6})(?:\.(\d{1,6}))?(?:\.(\d{1,6}))?(?:[.a-z+-][0-9a-z.+-]*)?")


def parse_version(text: str | None) -> tuple[int, int, int] | None:
    """``"0.11.0rc1"`` → ``(0, 11, 0)``; ``v1.1``, ``0.6.3.post1`` parse too (suffixes ignored); None when
    ``text`` is not a version number."""
    m = _VERSION_RE.fullmatch(str(text or "").strip().lower())
    return None if m is None else tuple(int(g or 0) for g in m.groups())


def pick_rules(rule_sets: tuple, version: str | None, example: str):
    """The newest of ``rule_sets`` (ordered newest first, each with a ``version`` string) not newer than
    ``version``; the newest for None / ``latest``; the oldest for a version older than every set.

    Raises:
        UsageError: ``version`` is not a version number (the message lists the rule sets).
    """
    from kvplan.errors import UsageError

    if version is None or str(version).strip().lower() in ("", "latest", "current"):
        return rule_sets[0]
    asked = parse_version(str(version))
    if asked is None:
        allowed = ", ".join(r.version for r in rule_sets)
        raise UsageError(
            f"--engine-version: {version!r} is not a version number (e.g. {example}); rule sets: {allowed}"
        )
    return next((r for r in rule_sets if asked >= parse_version(r.version)), rule_sets[-1])


def is_older_than(rule_sets: tuple, version: str | None) -> bool:
    """True when ``version`` parses and is older than the oldest of ``rule_sets`` (which :func:`pick_rules`
    then applies; the CLI warns)."""
    asked = None if version is None else parse_version(str(version))
    return asked is not None and asked < parse_version(rule_sets[-1].version)
