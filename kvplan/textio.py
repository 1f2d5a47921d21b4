"""Reading the text files users give kvplan (spec YAMLs, config.json, workloads): bounded, strict, one-line errors.

Pure I/O helpers with no knowledge of what the files mean: :func:`read_text` reads a whole regular file of at
most :data:`MAX_FILE_BYTES`, :func:`yaml_load` parses YAML with PyYAML's safe loader and no aliases, and
:func:`clip` keeps a user string short enough for a one-line message.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from kvplan.errors import SpecError

MAX_FILE_BYTES = 16 << 20  # spec, config.json and workload files are read whole: refuse larger ones


def yaml_load(text: str, where: str) -> Any:
    """Parse ``text`` (from ``where``) with the safe loader (the C build when present); no aliases.

    Raises:
        SpecError: an alias, nesting too deep, or malformed YAML (line and column).
    """
    import yaml

    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    try:
        if "*" in text:  # an alias can expand a few hundred bytes into gigabytes ("billion laughs"): refuse them
            for event in yaml.parse(text, Loader=loader):
                if isinstance(event, yaml.AliasEvent):
                    mark = event.start_mark
                    raise SpecError(
                        f"{where}: YAML aliases (*{str(event.anchor)[:40]}) are not allowed in spec and workload "
                        f"files (line {mark.line + 1}); write the value out"
                    )
        return yaml.load(text, Loader=loader)  # noqa: S506 - a safe loader (the C build of SafeLoader)
    except RecursionError:
        raise SpecError(f"{where}: YAML nested too deeply") from None
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        at = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(e, "problem", None) or "not valid YAML"
        raise SpecError(f"{where}: malformed YAML{at}: {problem}") from None


def clip(text: str, limit: int = 120) -> str:
    """A user string for a message: at most ``limit`` characters (long names and bombs stay one short line)."""
    text = str(text)
    return text if len(text) <= limit else f"{text[:limit]}… ({len(text):,} characters)"


def read_text(path: Path) -> str:
    """Read a whole input file (regular files up to MAX_FILE_BYTES only: not a FIFO or /dev/zero)."""
    try:
        if path.exists() and not path.is_dir():
            if not path.is_file():
                raise SpecError(f"{clip(path)}: not a regular file")
            if path.stat().st_size > MAX_FILE_BYTES:
                raise SpecError(
                    f"{clip(path)}: larger than {MAX_FILE_BYTES >> 20} MiB; not a spec, config.json or workload"
                )
        return path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise SpecError(f"{clip(path)}: no such file") from None
    except IsADirectoryError:
        raise SpecError(f"{clip(path)}: is a directory, not a spec file") from None
    except UnicodeDecodeError:
        raise SpecError(f"{clip(path)}: not a UTF-8 text file") from None
    except OSError as e:
        raise SpecError(f"{clip(path)}: cannot read ({e.strerror})") from None
