"""Reading the text files users give kvplan (spec YAMLs, config.json, workloads): bounded, strict, one-line errors.

Pure I/O helpers with no knowledge of what the files mean: :func:`read_text` reads a whole regular file of at
most :data:`MAX_FILE_BYTES`, :func:`yaml_load` parses YAML with PyYAML's safe loader
(:func:`yaml_loader`: no sexagesimal numbers, bounded integers, no key twice in a mapping) and no aliases,
:func:`json_object_hook` refuses a JSON object with a key twice, and :func:`clip` keeps a user string short enough
for a one-line message.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from kvplan.errors import SpecError

MAX_FILE_BYTES = 16 << 20  # spec, config.json and workload files are read whole: refuse larger ones
MAX_YAML_INT_DIGITS = 4300  # Python's own limit on int() of a decimal string (sys.int_info.default_max_str_digits)
_LOADER = None

# YAML 1.1's int and float forms as PyYAML resolves them (resolver.py), less the sexagesimal ones
# (``1:30`` read as 90): a time-like value stays a string, and the field that gets it says what it wants.
_YAML_INT = r"""^(?:[-+]?0b[0-1_]+
    |[-+]?0[0-7_]+
    |[-+]?(?:0|[1-9][0-9_]*)
    |[-+]?0x[0-9a-fA-F_]+)$"""
_YAML_FLOAT = r"""^(?:[-+]?(?:[0-9][0-9_]*)\.[0-9_]*(?:[eE][-+][0-9]+)?
    |\.[0-9][0-9_]*(?:[eE][-+][0-9]+)?
    |[-+]?\.(?:inf|Inf|INF)
    |\.(?:nan|NaN|NAN))$"""


def yaml_loader():
    """The YAML loader of spec and workload files: PyYAML's SafeLoader (its C build when present) without
    sexagesimal numbers, with integers of at most :data:`MAX_YAML_INT_DIGITS` digits (longer ones are a
    ConstructorError naming the line, not a ValueError from ``int()``)."""
    global _LOADER
    if _LOADER is not None:
        return _LOADER
    import re

    import yaml

    base = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    int_tag, float_tag = "tag:yaml.org,2002:int", "tag:yaml.org,2002:float"
    plain = {int_tag: re.compile(_YAML_INT, re.X), float_tag: re.compile(_YAML_FLOAT, re.X)}

    class DuplicateKey(yaml.YAMLError):
        """A mapping with the same key twice: the key, the marks of its first and second use."""

        def __init__(self, key, first, second):
            super().__init__(f"duplicate key {key!r}")
            self.key, self.first, self.second = key, first, second
            self.problem = f"duplicate key {clip(key, 60)!r} (first at line {first.line + 1})"
            self.problem_mark = second

    class SpecLoader(base):
        def construct_mapping(self, node, deep=False):
            """A mapping; a key given twice is an error (PyYAML keeps the last one silently)."""
            self.flatten_mapping(node)
            seen: dict = {}
            for key_node, _ in node.value:
                key = self.construct_object(key_node, deep=True)
                try:
                    first = seen.setdefault(key, key_node.start_mark)
                except TypeError:  # an unhashable key: SafeConstructor refuses it itself
                    continue
                if first is not key_node.start_mark:
                    raise DuplicateKey(key, first, key_node.start_mark)
            return super().construct_mapping(node, deep)

    SpecLoader.yaml_implicit_resolvers = {
        first: [(tag, plain.get(tag, regexp)) for tag, regexp in resolvers]
        for first, resolvers in base.yaml_implicit_resolvers.items()
    }

    def construct_int(loader, node):
        digits = len(loader.construct_scalar(node).lstrip("+-").replace("_", ""))
        if digits > MAX_YAML_INT_DIGITS:
            raise yaml.constructor.ConstructorError(
                None, None, f"an integer of {digits:,} digits; at most {MAX_YAML_INT_DIGITS:,}", node.start_mark
            )
        return yaml.constructor.SafeConstructor.construct_yaml_int(loader, node)

    SpecLoader.add_constructor(int_tag, construct_int)
    SpecLoader.DuplicateKey = DuplicateKey
    _LOADER = SpecLoader
    return SpecLoader


def json_object_hook(where: str):
    """An ``object_pairs_hook`` for :func:`json.loads`: a dict, or a :class:`SpecError` naming ``where`` and the
    key when an object has a key twice (Python's json keeps the last one silently)."""

    def pairs(items: list) -> dict:
        out: dict = {}
        for key, value in items:
            if key in out:
                raise SpecError(
                    f"{where}: duplicate key {clip(key, 60)!r} in a JSON object; which value is meant is not guessed"
                )
            out[key] = value
        return out

    return pairs


def yaml_load(text: str, where: str) -> Any:
    """Parse a spec or workload file with :func:`yaml_loader`.

    Raises:
        SpecError: malformed YAML, an alias (``*a``: a few hundred bytes can expand into gigabytes), nesting
            too deep, an integer over 4,300 digits, a value PyYAML cannot build (a date like 2001-13-45).
    """
    import yaml

    loader = yaml_loader()
    try:
        if "*" in text:  # an alias can expand a few hundred bytes into gigabytes ("billion laughs"): refuse them
            for event in yaml.parse(text, Loader=loader):
                if isinstance(event, yaml.AliasEvent):
                    mark = event.start_mark
                    raise SpecError(
                        f"{where}: YAML aliases (*{str(event.anchor)[:40]}) are not allowed in spec and workload "
                        f"files (line {mark.line + 1}); write the value out"
                    )
        return yaml.load(text, Loader=loader)  # noqa: S506 - a safe loader (SafeLoader's resolvers and constructors)
    except RecursionError:
        raise SpecError(f"{where}: YAML nested too deeply") from None
    except loader.DuplicateKey as e:
        raise SpecError(
            f"{where}: duplicate key {clip(e.key, 60)!r} at line {e.second.line + 1} (first at line "
            f"{e.first.line + 1}); which value is meant is not guessed"
        ) from None
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        at = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(e, "problem", None) or "not valid YAML"
        constructor = isinstance(e, yaml.constructor.ConstructorError)
        what = "a YAML value kvplan cannot read" if constructor else "malformed YAML"
        raise SpecError(f"{where}: {what}{at}: {problem}") from None
    except (ValueError, OverflowError) as e:  # a constructor's own error: datetime.date(2001, 13, 45)
        raise SpecError(f"{where}: a YAML value kvplan cannot read ({type(e).__name__}: {str(e)[:80]})") from None


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
