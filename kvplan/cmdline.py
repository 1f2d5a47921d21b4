"""Pasted engine command lines: ``kvplan fit [kvplan flags] -- vllm serve MODEL --tensor-parallel-size 8 ...``.

A user's launch command, taken whole after ``--``, is read as the engine's own parser reads it and turned into
kvplan's flags (:func:`translate`; the CLI calls :func:`paste`). The command names the engine; kvplan's own flags
(``--gpu``, ``--json``, ...) go before ``--``. Every flag each engine's parser accepts is in :data:`TABLES`, one
line each, classified as

- **memory, mapped** (``=``): it changes memory and kvplan has a setting for it; the value goes to that kvplan
  flag (``--tensor-parallel-size 8`` → ``--tp 8``);
- **memory, not modelled** (``!``): it changes memory (weights, KV cache, activations, CUDA graphs, extra GPU
  buffers) and kvplan does not model it: refused in one line naming the flag and what it changes, unless its
  value is the engine's default (the values after ``:``; ``~`` any negative spelling of a switch, ``+`` its
  positive one);
- **ignored** (``-``): no effect on GPU memory (host, port, served-model-name, trust-remote-code, logging,
  templates, sampling defaults, ...); listed in one stderr line.

A flag the parser does not know is refused in one line naming it, the engine and that kvplan does not know
whether it changes memory.

Commands read (the flag lists are each parser's own, dumped by ``scripts/engine_flags.py`` into
``tests/fixtures/engine_flags.json``; tests/test_cmdline.py checks every flag of each is in :data:`TABLES`):

=====================================================  ===========  ===============================================
command                                                engine       parser (version)
=====================================================  ===========  ===============================================
``vllm serve MODEL``,                                  vLLM         ``entrypoints/common/cli_args.py make_arg_parser``
``python -m vllm.entrypoints.openai.api_server``                    (FrontendArgs + AsyncEngineArgs), vLLM 0.33.0;
                                                                    ``FlexibleArgumentParser``: ``_`` read as ``-``,
                                                                    ``--json-arg.key value``, ``-O3``
``python -m sglang.launch_server --model-path MODEL``,  SGLang       ``srt/server_args.py ServerArgs.add_cli_args``
``sglang serve [--model-path] MODEL``                               (``prepare_server_args``), SGLang 0.5.23
``llama-server -m MODEL.gguf``, ``llama-cli ...``      llama.cpp    ``common/arg.cpp`` at 0c1e57098 (LLAMA_EXAMPLE_
                                                                    SERVER / _CLI; ``--x_y`` read as ``--x-y``)
``trtllm-serve [serve] MODEL``                         TensorRT-LLM ``tensorrt_llm/commands/serve.py`` click options
                                                                    (stored version 00209af1, not a release tag)
=====================================================  ===========  ===============================================

Values are read with the engine's own rules: vLLM's ``--max-model-len``, ``--max-num-batched-tokens`` and
``--kv-cache-memory-bytes`` take ``utils/argparse_utils.py human_readable_int`` suffixes (``32k`` = 32,000,
``32K`` = 32,768; ``--max-model-len -1``/``auto``, vLLM's auto-fit, is refused: kvplan reports the longest request
that fits instead); SGLang's, llama.cpp's and TensorRT-LLM's integers are plain integers.

What some flags mean for kvplan:

- ``--enable-expert-parallel`` / ``--data-parallel-size N`` (vLLM), ``--ep-size N``, ``--attn-dp-size N`` and
  ``--dp-size N --enable-dp-attention`` (SGLang): kvplan's own ``--enable-expert-parallel``, ``--ep-size`` and
  ``--data-parallel-size`` where the command has them (``fit``, ``fleet``: the layouts of
  :meth:`kvplan.engines.base.EngineRules.parallel`; experts split whole, each attention group its own
  requests' KV). Elsewhere (``sweep``), EP is the same plan with a note, refused when the experts do not divide
  over TP × DP GPUs, and vLLM's ``--data-parallel-size`` on a dense model is that many replicas (a note), on an
  MoE model refused. SGLang's ``--dp-size`` without ``--enable-dp-attention`` launches independent replicas (a
  note).
- ``--speculative-config`` (vLLM, JSON; ``--spec-method/--spec-model/--spec-tokens`` and
  ``--speculative-config.key value`` fill the same keys, as ``EngineArgs.create_speculative_config`` does):
  ``num_speculative_tokens`` → ``--num-speculative-tokens``; ``model`` → ``--speculative-model`` (loaded as a
  MODEL); ``method`` ``mtp`` (or ``*_mtp``) needs kvplan's ``--num-mtp-layers`` before ``--``; the keys of
  vLLM 0.33's ``config/speculative.py SpeculativeConfig`` that change memory and that kvplan does not model are
  refused (:data:`SPEC_KEYS`).
- SGLang's CUDA-graph and torch.compile flags: SGLang derives its default ``--mem-fraction-static`` from the
  decode CUDA-graph batch size (``arg_groups/memory_hook.py handle_gpu_memory_settings``), so they are refused
  unless the command gives ``--mem-fraction-static`` (the graphs then live outside the fraction).
- llama.cpp ``-ngl N``: all layers on the GPU (``auto``, ``all``, or N ≥ layers + 1, the output layer
  included) is what kvplan plans; fewer is refused. ``-fit off`` without ``-c`` is refused.
"""

from __future__ import annotations

import json
import re
import shlex
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import PurePath
from typing import Callable

from kvplan.errors import UsageError
from kvplan.units import check_ascii_number, shorten

# --- the engines' command lines ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Tool:
    """One engine command kvplan reads.

    Attributes:
        name: how the output names it (``vllm serve``).
        engine: kvplan's engine name (``--engine``).
        table: its key in :data:`TABLES`.
        style: whose parsing rules apply: ``argparse`` (vLLM, SGLang), ``llamacpp`` (common/arg.cpp), ``click``.
        label: the engine and version whose flags the table holds, for messages.
        letter: llama.cpp's tool column in the table (``s`` llama-server, ``c`` llama-cli), else empty.
    """

    name: str
    engine: str
    table: str
    style: str
    label: str
    letter: str = ""


VLLM = Tool("vllm serve", "vllm", "vllm", "argparse", "vLLM 0.33")
VLLM_API = Tool("python -m vllm.entrypoints.openai.api_server", "vllm", "vllm", "argparse", "vLLM 0.33")
SGLANG = Tool("python -m sglang.launch_server", "sglang", "sglang", "argparse", "SGLang 0.5.23")
SGLANG_SERVE = Tool("sglang serve", "sglang", "sglang", "argparse", "SGLang 0.5.23")
LLAMA_SERVER = Tool("llama-server", "llamacpp", "llamacpp", "llamacpp", "llama.cpp 0c1e57098 llama-server", "s")
LLAMA_CLI = Tool("llama-cli", "llamacpp", "llamacpp", "llamacpp", "llama.cpp 0c1e57098 llama-cli", "c")
TRTLLM = Tool("trtllm-serve", "trtllm", "trtllm", "click", "TensorRT-LLM trtllm-serve (serve.py at 00209af1)")

_PYTHON = re.compile(r"python(\d+(\.\d+)?)?(\.exe)?")
COMMANDS = "vllm serve, python -m vllm.entrypoints.openai.api_server, python -m sglang.launch_server, sglang serve, " \
    "llama-server, llama-cli, trtllm-serve"  # fmt: skip


def identify(tokens: list[str]) -> tuple[Tool, list[str]]:
    """The command ``tokens`` run (its program and subcommand) and the arguments after them.

    Raises:
        UsageError: an environment assignment first, or a program kvplan does not read.
    """
    if not tokens:
        raise UsageError(f"--: give the engine's command after it ({COMMANDS})")
    if re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*=.*", tokens[0]):
        raise UsageError(
            f"{tokens[0].split('=')[0]}=...: an environment variable; kvplan reads the command from its program on "
            "(variables such as VLLM_* can change memory: give their effect as kvplan flags)"
        )
    prog = PurePath(tokens[0]).name.lower()
    rest = tokens[1:]
    if _PYTHON.fullmatch(prog) and len(rest) >= 2 and rest[0] == "-m":
        module = rest[1]
        if module == "vllm.entrypoints.openai.api_server":
            return VLLM_API, rest[2:]
        if module == "sglang.launch_server":
            return SGLANG, rest[2:]
        if module in ("vllm.entrypoints.cli.main", "sglang.cli.main"):
            prog, rest = module.split(".")[0], rest[2:]
        else:
            raise UsageError(f"python -m {module}: not an engine command kvplan reads ({COMMANDS})")
    if prog == "vllm" and rest[:1] == ["serve"]:
        return VLLM, rest[1:]
    if prog == "sglang" and rest[:1] == ["serve"]:
        return SGLANG_SERVE, rest[1:]
    if prog in ("llama-server", "llama-server.exe"):
        return LLAMA_SERVER, rest
    if prog in ("llama-cli", "llama-cli.exe"):
        return LLAMA_CLI, rest
    if prog == "trtllm-serve":
        return TRTLLM, rest[1:] if rest[:1] == ["serve"] else rest
    shown = " ".join(tokens[:2])
    raise UsageError(f"{shown}: not an engine command kvplan reads ({COMMANDS})")


# --- the flag tables --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Flag:
    """One flag of an engine's parser, as :data:`TABLES` classifies it.

    Attributes:
        spellings: every string the parser maps to it (the first is the name messages use).
        negatives: the spellings that set a switch false.
        takes: values it takes: 0 (a switch), 1, 2, or argparse's ``?``, ``+``, ``*``.
        kind: ``-`` ignored, ``!`` changes memory and is not modelled, ``=`` mapped to kvplan.
        arg: for ``!`` the reason's key in :data:`REASONS`; for ``=`` the handler and its arguments.
        neutral: for ``!``, the values that are the engine's default (no change): ``~`` a negative spelling,
            ``+`` the positive one of a switch.
        tools: llama.cpp: the tools that have it (``s``, ``c``).
    """

    spellings: tuple[str, ...]
    negatives: frozenset[str]
    takes: int | str
    kind: str
    arg: str = ""
    neutral: tuple[str, ...] = ()
    tools: str = ""

    @property
    def name(self) -> str:
        return self.spellings[0]


def _parse_line(line: str) -> Flag:
    parts = line.split()
    spell, takes, cls = parts[0], parts[1], parts[2]
    tools = parts[3] if len(parts) > 3 else ""
    names = tuple(s.lstrip("~") for s in spell.split(","))
    negatives = frozenset(s[1:] for s in spell.split(",") if s.startswith("~"))
    n: int | str = int(takes) if takes.isdigit() else takes
    kind, arg, neutral = cls[0], cls[1:], ()
    if kind == "!" and ":" in arg:
        arg, values = arg.split(":", 1)
        neutral = tuple(values.split("|"))
    return Flag(names, negatives, n, kind, arg, neutral, tools)


@lru_cache(maxsize=None)
def flags(table: str) -> tuple[Flag, ...]:
    """The flags of one table (``vllm``, ``sglang``, ``llamacpp``, ``trtllm``), in the parser's order."""
    lines: list[str] = []
    for x in TABLES[table].strip("\n").splitlines():
        if x[:1].isspace() and lines:  # a continuation of a long line
            lines[-1] += x.strip()
        elif x.strip():
            lines.append(x.strip())
    return tuple(_parse_line(x) for x in lines)


@lru_cache(maxsize=None)
def _index(tool: Tool) -> dict[str, Flag]:
    out: dict[str, Flag] = {}
    for f in flags(tool.table):
        if tool.letter and tool.letter not in f.tools:
            continue
        for s in f.spellings:
            out[s] = f
    return out


def _reason(tool: Tool, flag: Flag) -> str:
    return REASONS.get(tool.table, {}).get(flag.arg) or REASONS["*"][flag.arg]


# --- reading a command as its engine reads it ------------------------------------------------------------------


@dataclass
class Item:
    """One flag as typed: the flag, the spelling used, and its values (a switch has none)."""

    flag: Flag
    typed: str
    values: list[str]

    @property
    def negative(self) -> bool:
        return self.typed in self.flag.negatives

    @property
    def value(self) -> str:
        return self.values[-1] if self.values else ""


def _unknown(tool: Tool, tok: str, kvplan_names: frozenset[str] = frozenset()) -> UsageError:
    if tok in kvplan_names:
        return UsageError(f"{tok}: not a flag of {tool.label} ({tool.name}); kvplan's own flags go before '--'")
    return UsageError(
        f"{tok}: not a flag of {tool.label} ({tool.name}); kvplan does not know whether it changes memory "
        "(remove it, or give its effect as kvplan flags before '--')"
    )


def _looks_like_option(tok: str) -> bool:
    return tok.startswith("-") and len(tok) > 1 and not re.fullmatch(r"-\d+(\.\d+)?", tok)


def _lookup(tool: Tool, name: str) -> Flag | None:
    index = _index(tool)
    if name in index:
        return index[name]
    if tool.style == "argparse" and name.startswith("--"):  # argparse's allow_abbrev: a unique prefix
        hits = {id(f): f for s, f in index.items() if s.startswith(name) and s.startswith("--")}
        if len(hits) == 1:
            return next(iter(hits.values()))
        if len(hits) > 1:
            shown = ", ".join(sorted({f.name for f in hits.values()})[:4])
            raise UsageError(f"{name}: ambiguous abbreviation for {tool.label} ({shown} ...)")
    return None


def parse(tool: Tool, args: list[str], kvplan_names=frozenset()) -> tuple[list[Item], list[str]]:
    """(flags as typed, positional arguments) of the arguments after a command's program, read with its
    parser's rules (see the module docstring); ``kvplan_names``: the kvplan command's options, named in the
    message when one is typed after ``--``.

    Raises:
        UsageError: an unknown flag, a missing value, a value given to a switch.
    """
    items: list[Item] = []
    positionals: list[str] = []
    i, n = 0, len(args)
    while i < n:
        tok = args[i]
        i += 1
        if tool.style != "llamacpp" and tok == "--":
            positionals.extend(args[i:])
            break
        if not _looks_like_option(tok):
            positionals.append(tok)
            continue
        name, eq, inline = tok.partition("=") if tool.style != "llamacpp" else (tok, "", "")
        dotted = ""
        if tool.style == "argparse" and tool.table == "vllm":
            if re.fullmatch(r"-O(=?.+)?", tok) and tok != "-O":  # -O3, -O=3, -Odecode: --optimization-level
                name, eq, inline = "--optimization-level", "=", tok[3:] if tok[2:3] == "=" else tok[2:]
            elif tok == "-O" and i < n and args[i] in ("0", "1", "2", "3"):
                name = "--optimization-level"
            if name.startswith("--"):
                key, dot, dotted = name[2:].partition(".")
                name = "--" + key.replace("_", "-")
                if dot and dotted.endswith("+"):
                    dotted = dotted[:-1]
        elif name.startswith("--") and tool.style in ("argparse", "llamacpp") and tool.table != "sglang":
            name = name.replace("_", "-")  # llama.cpp: common_params_parse_ex
        flag = _lookup(tool, name)
        if flag is None and tool.style == "llamacpp" and "=" in tok and _lookup(tool, tok.split("=")[0]):
            shown = tok.replace("=", " ", 1)
            raise UsageError(f"{tok}: llama.cpp takes no '=' form (common_params_parse_ex); write {shown}")
        if flag is None:
            raise _unknown(tool, name, frozenset(kvplan_names))
        if dotted:  # --speculative-config.method ngram: vLLM builds the JSON argument from the keys
            if eq:
                value = inline
            elif i < n:
                value, i = args[i], i + 1
            else:
                raise UsageError(f"{tok}: expects a value")
            items.append(Item(flag, name, [json.dumps(_nested(dotted.split("."), value, tok.partition("=")[0]))]))
            continue
        takes = flag.takes
        if takes == 0:
            if eq:
                raise UsageError(f"{name}: a switch of {tool.label}; it takes no value (got {inline!r})")
            items.append(Item(flag, name, []))
            continue
        if eq:
            items.append(Item(flag, name, [inline]))
            continue
        if isinstance(takes, int):
            if i + takes > n:
                raise UsageError(f"{name}: expects {takes} value{'s' if takes > 1 else ''} ({tool.label})")
            items.append(Item(flag, name, args[i : i + takes]))
            i += takes
            continue
        values = []
        while i < n and not _looks_like_option(args[i]) and (takes != "?" or not values):
            values.append(args[i])
            i += 1
        if takes == "+" and not values:
            raise UsageError(f"{name}: expects at least one value ({tool.label})")
        items.append(Item(flag, name, values))
    return items, positionals


MAX_COUNT_DIGITS = 18  # a count or size in a pasted command is below 10^18 (kvplan's own bounds are far lower)


class _NumberBeyond(ValueError):
    """A number in a pasted JSON value that no engine setting holds (the text as typed)."""


def _json_int(text: str) -> int:
    if len(text.lstrip("-")) > MAX_COUNT_DIGITS:
        raise _NumberBeyond(text)
    return int(text)


def _json_float(text: str) -> float:
    import math

    value = float(text)
    if not math.isfinite(value) or abs(value) >= 10**MAX_COUNT_DIGITS:
        raise _NumberBeyond(text)
    return value


def _json_constant(text: str):
    raise _NumberBeyond(text)  # NaN, Infinity, -Infinity: Python's json reads them, JSON has no such numbers


def _json(text: str, typed: str):
    """A pasted JSON value (``--speculative-config '{...}'``, ``--speculative-config.key VALUE``), as vLLM's
    ``json.loads`` reads it, with the numbers bounded: integers of at most :data:`MAX_COUNT_DIGITS` digits
    (``int()`` of 4,300+ digits is Python's ValueError), finite floats below 10^18, no NaN/Infinity.

    Raises:
        json.JSONDecodeError: not JSON (each caller says what it expected).
        UsageError: a number beyond those bounds, or arrays/objects nested past Python's recursion limit
            (naming ``typed``).
    """
    try:
        return json.loads(text, parse_int=_json_int, parse_float=_json_float, parse_constant=_json_constant)
    except _NumberBeyond as e:
        if str(e) in ("NaN", "Infinity", "-Infinity"):
            raise UsageError(f"{typed}: {e} is not a number JSON has; give a finite number") from None
        raise UsageError(
            f"{typed}: the number {shorten(str(e))} is beyond any setting kvplan reads (a finite number below 10^18)"
        ) from None
    except RecursionError:
        raise UsageError(f"{typed}: JSON nested too deep ({len(text):,} characters); give a flat object") from None


def _nested(keys: list[str], value: str, typed: str) -> dict:
    try:
        parsed = _json(value, typed)
    except json.JSONDecodeError:
        parsed = value
    out: object = parsed
    for k in reversed(keys):
        out = {k: out}
    return out  # type: ignore[return-value]


# --- turning flags into kvplan's -------------------------------------------------------------------------------


@dataclass
class Pasted:
    """A command read for kvplan.

    Attributes:
        tool: the command.
        model: the model it serves (a MODEL reference: path, repo id, ``repo@revision``), or None.
        args: kvplan flags (``--engine`` first) with their values.
        ignored: the flags typed that do not change memory (or are at the engine's default), as typed.
        notes: what else the user should know (one line each).
        checks: ``check(spec, tp)`` callables to run once the model is loaded, per TP: a note (str) or None;
            they raise UsageError.
        needs: settings that must be set (kvplan parameter name, or ``tp=N``: the TP must be N) → the message
            when they are not.
    """

    tool: Tool
    model: str | None = None
    args: list[str] = field(default_factory=list)
    ignored: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    checks: list[Callable] = field(default_factory=list)
    needs: dict[str, str] = field(default_factory=dict)


class _Ctx:
    """What handlers share while one command is translated."""

    def __init__(self, tool: Tool, names: set[str], items: list[Item]):
        self.tool = tool
        self.names = names  # option strings of the kvplan command invoked
        self.items = items
        self.out = Pasted(tool)
        self.revision: str | None = None
        self.spec: dict = {}
        self.spec_from: dict[str, str] = {}
        self.fraction_dependent: list[str] = []
        self.dp = 1
        self.ep: str | None = None
        self.dp_attention = False
        self.ctx_given = any(x.flag.name == "-c" for x in items)

    def emit(self, item: Item, target: str, value: str | None = None) -> None:
        if not self.has(target):
            raise UsageError(
                f"{item.typed}: {self.tool.label}'s setting is kvplan's {target}, which this kvplan command does not "
                "have; plan this command with 'kvplan fit'"
            )
        self.out.args.extend([target] if value is None else [target, value])

    def has(self, target: str) -> bool:
        if target in ("--dtype", "--quantization"):  # engine spellings kvplan.aliases rewrites
            return "--weights-dtype" in self.names
        return target in self.names


def _number_text(item: Item, value: str | None = None) -> str:
    """A number's text as typed, stripped: ASCII digits only (one rule for every flag, pasted or kvplan's:
    :func:`kvplan.units.check_ascii_number`; Python's ``int()``/``float()`` would read ``٤`` as 4) and at
    most :data:`MAX_COUNT_DIGITS` digits before any decimal point.

    Raises:
        UsageError: naming the flag.
    """
    v = (item.value if value is None else value).strip()
    check_ascii_number(item.typed, v)
    if len(re.match(r"[-+]?[0-9_]*", v).group().lstrip("+-")) > MAX_COUNT_DIGITS:
        raise UsageError(f"{item.typed}: {shorten(v)} is beyond any setting kvplan reads (below 10^18)")
    return v


def _int(item: Item, tool: Tool) -> str:
    v = _number_text(item)
    if not re.fullmatch(r"-?[0-9]+", v):
        raise UsageError(
            f"{item.typed}: {shorten(item.value, quote=True)} is not an integer ({tool.label} reads an integer here)"
        )
    return str(int(v))


def human_readable_int(item: Item, allow_auto: bool = False) -> int:
    """vLLM 0.33's ``utils/argparse_utils.py human_readable_int``: ``1k`` = 1,000, ``1K`` = 1,024 (k/m/g/t
    decimal, K/M/G/T binary; decimals only with decimal suffixes); with ``allow_auto``
    (``human_readable_int_or_auto``), ``-1`` or ``auto``: -1.

    Raises:
        UsageError: naming the flag, for anything else.
    """
    v = item.value.strip()
    if allow_auto and (v == "-1" or v.lower() == "auto"):
        return -1
    v = _number_text(item, v)
    m = re.fullmatch(r"(\d+(?:\.\d+)?)([kKmMgGtT])", v)
    if m:
        number, suffix = m.groups()
        if suffix in "kmgt":
            from decimal import Decimal

            return int(Decimal(number) * 10 ** (3 * "kmgt".index(suffix) + 3))
        if "." in number:
            raise UsageError(f"{item.typed}: {v!r}: vLLM allows no decimals with binary suffixes like {suffix}")
        return int(number) << (10 * ("KMGT".index(suffix) + 1))
    if not re.fullmatch(r"-?[0-9]+", v):
        raise UsageError(
            f"{item.typed}: {shorten(v, quote=True)} is not an integer (vLLM: 4096, 32k = 32,000, 32K = 32,768)"
        )
    return int(v)


def _convert(item: Item, conv: str, tool: Tool) -> str:
    if conv == "int":
        return _int(item, tool)
    if conv == "frac":
        try:
            return str(float(_number_text(item)))
        except ValueError:
            raise UsageError(
                f"{item.typed}: {shorten(item.value, quote=True)} is not a number ({tool.label})"
            ) from None
    if conv == "vllm_int":
        return str(human_readable_int(item))
    if conv == "vllm_len":
        n = human_readable_int(item, allow_auto=True)
        if n == -1:
            raise UsageError(
                f"{item.typed} {item.value}: vLLM's auto-fit (the longest length that fits); kvplan plans a given "
                "length and reports the longest that fits: drop it, or give a length"
            )
        return str(n)
    return item.value


def _h_flag(ctx: _Ctx, item: Item, target: str, conv: str = "") -> None:
    ctx.emit(item, target, _convert(item, conv, ctx.tool))


def _h_alt(ctx: _Ctx, item: Item, targets: str, conv: str = "") -> None:
    choices = targets.split("|")
    target = next((t for t in choices if ctx.has(t)), choices[-1])
    ctx.emit(item, target, _convert(item, conv, ctx.tool))


def _h_pair(ctx: _Ctx, item: Item, pair: str) -> None:
    pos, _, neg = pair.partition("/")
    target = neg if item.negative else pos
    if target:
        ctx.emit(item, target)


def _h_new(ctx: _Ctx, item: Item, target: str) -> None:
    """An SGLang setting kvplan is gaining under the same name: passed on when the command has it."""
    if not ctx.has(target):
        engine = ctx.tool.label.split()[0]
        raise UsageError(f"{item.typed}: {engine}'s flag changes memory and kvplan does not model it yet")
    ctx.emit(item, target, None if item.flag.takes == 0 else item.value)


def _h_model(ctx: _Ctx, item: Item) -> None:
    ctx.out.model = item.value


def _h_revision(ctx: _Ctx, item: Item) -> None:
    ctx.revision = item.value


def _h_chunked_prefill(ctx: _Ctx, item: Item) -> None:
    """SGLang ``--chunked-prefill-size``: tokens per prefill chunk, kvplan's ``--max-num-batched-tokens``
    (FitOptions); -1 / 0 turn chunking off (whole prompts prefilled), which kvplan does not model."""
    n = int(_int(item, ctx.tool))
    if n <= 0:
        raise UsageError(
            f"{item.typed} {item.value}: chunked prefill off (SGLang then prefills whole prompts; "
            "pool_configurator.py, memory_hook.py); kvplan does not model it"
        )
    ctx.emit(item, "--max-num-batched-tokens", str(n))


def _h_fraction_dependent(ctx: _Ctx, item: Item) -> None:
    ctx.fraction_dependent.append(item.typed)


def _h_spec_config(ctx: _Ctx, item: Item) -> None:
    for value in item.values:
        try:
            data = _json(value, item.typed)
        except json.JSONDecodeError as e:
            raise UsageError(
                f"{item.typed}: not JSON ({e.msg} at column {e.colno}); e.g. "
                '\'{"method": "ngram", "num_speculative_tokens": 5}\''
            ) from None
        if not isinstance(data, dict):
            raise UsageError(f"{item.typed}: a JSON object of SpeculativeConfig keys, not {type(data).__name__}")
        for k, v in data.items():
            key = str(k).replace("-", "_")
            ctx.spec[key] = v
            ctx.spec_from[key] = "--speculative-config"


def _h_spec_part(ctx: _Ctx, item: Item, key: str) -> None:
    """vLLM's ``--spec-method/--spec-model/--spec-tokens``: keys of the speculative config
    (``EngineArgs.create_speculative_config``; the same key in both is vLLM's ValueError)."""
    if key in ctx.spec and ctx.spec_from.get(key) == "--speculative-config":
        raise UsageError(f"{item.typed} and --speculative-config['{key}'] are mutually exclusive (vLLM 0.33)")
    ctx.spec[key] = int(_int(item, ctx.tool)) if key == "num_speculative_tokens" else item.value
    ctx.spec_from[key] = item.typed


def _h_ep(ctx: _Ctx, item: Item) -> None:
    """Expert parallelism: kvplan's own flag where the command has it (``fit``, ``fleet``: the experts split
    whole over the GPUs, :func:`kvplan.weights.expert_split_weights`), else a note (module docstring)."""
    if item.flag.takes == 0:
        if not item.negative and ctx.has("--enable-expert-parallel"):
            ctx.out.args.append("--enable-expert-parallel")
            return
        ctx.ep = None if item.negative else item.typed
    else:
        n = _int(item, ctx.tool)
        if n != "1" and ctx.has("--ep-size"):
            ctx.out.args.extend(["--ep-size", n])
            return
        ctx.ep = None if n == "1" else f"{item.typed} {item.value}"


def _h_dp(ctx: _Ctx, item: Item) -> None:
    """vLLM ``--data-parallel-size``: kvplan's own flag where the command has it (D ranks of TP GPUs, each its
    own requests' KV), else replicas (module docstring)."""
    n = int(_int(item, ctx.tool))
    if n < 1:
        raise UsageError(f"{item.typed}: {item.value} must be at least 1")
    if n > 1 and ctx.has("--data-parallel-size"):
        ctx.out.args.extend(["--data-parallel-size", str(n)])
        return
    ctx.dp = n


def _h_dp_attention(ctx: _Ctx, item: Item) -> None:
    """SGLang ``--enable-dp-attention``: with ``--dp-size N``, N attention groups within the TP GPUs (kvplan's
    ``--data-parallel-size``; :func:`_h_dp_replicas` reads it)."""
    if not ctx.has("--data-parallel-size"):
        raise UsageError(
            f"{item.typed}: SGLang's attention data parallelism is kvplan's --data-parallel-size, which this kvplan "
            "command does not have; plan this command with 'kvplan fit' or 'kvplan fleet'"
        )
    ctx.dp_attention = True


def _h_dp_replicas(ctx: _Ctx, item: Item) -> None:
    n = int(_int(item, ctx.tool))
    if n > 1 and any(x.flag.name == "--enable-dp-attention" for x in ctx.items) and ctx.has("--data-parallel-size"):
        ctx.out.args.extend(["--data-parallel-size", str(n)])  # attention DP (srt/runtime_context.py)
        return
    if n > 1:
        ctx.out.notes.append(
            f"{item.typed} {n}: SGLang runs {n} independent replicas (data_parallel_controller); the plan is one "
            "replica's"
        )
    else:
        ctx.out.ignored.append(item.typed)


def _h_ngl(ctx: _Ctx, item: Item) -> None:
    v = item.value.strip().lower()
    if v in ("auto", "all", "-1"):
        ctx.out.ignored.append(item.typed)
        return
    v = _number_text(item, v)
    if not re.fullmatch(r"[0-9]+", v):
        raise UsageError(
            f"{item.typed}: {shorten(item.value, quote=True)}: a layer count, 'auto' or 'all' (common/arg.cpp)"
        )
    n = int(v)

    def check(spec, tp, typed=item.typed, n=n):
        if n < spec.num_layers + 1:
            raise UsageError(
                f"{typed} {n}: only part of {spec.name} ({spec.num_layers} layers + the output layer) on the GPU; "
                "kvplan plans every layer offloaded (-ngl all)"
            )

    ctx.out.checks.append(check)


def _h_fit(ctx: _Ctx, item: Item) -> None:
    v = item.value.strip().lower()
    if v in ("on", "1", "true", "yes", "enabled"):
        ctx.out.ignored.append(item.typed)
    elif v in ("off", "0", "false", "no", "disabled"):
        if not ctx.ctx_given:
            raise UsageError(
                f"{item.typed} {item.value} without -c: llama.cpp then keeps the model's context as it is; kvplan "
                "plans -fit's choice or a given -c: give -c"
            )
        ctx.out.ignored.append(f"{item.typed} {item.value}")
    else:
        raise UsageError(f"{item.typed}: {item.value!r}: on or off (common/arg.cpp)")


HANDLERS: dict[str, Callable] = {
    "flag": _h_flag, "alt": _h_alt, "pair": _h_pair, "new": _h_new, "model": _h_model, "revision": _h_revision,
    "chunked_prefill": _h_chunked_prefill, "fraction_dependent": _h_fraction_dependent,
    "spec_config": _h_spec_config, "spec_part": _h_spec_part, "ep": _h_ep, "dp": _h_dp,
    "dp_replicas": _h_dp_replicas, "dp_attention": _h_dp_attention, "ngl": _h_ngl, "fit": _h_fit,
}  # fmt: skip


def _neutral(item: Item) -> bool:
    """True when a not-modelled flag is given its engine default (no change)."""
    f = item.flag
    if f.takes == 0:
        return ("~" in f.neutral and item.negative) or ("+" in f.neutral and not item.negative)
    return bool(item.values) and all(v.strip() in f.neutral or v.strip().lower() in f.neutral for v in item.values)


# SpeculativeConfig keys (vLLM 0.33 config/speculative.py): how each is read
SPEC_KEYS: dict[str, str] = {
    "method": "read", "model": "read", "num_speculative_tokens": "read", "revision": "read",
    "draft_tensor_parallel_size": "tp", "tensor_parallel_size": "tp",
    # no effect on GPU memory: host-side proposers, acceptance and sampling rules
    "code_revision": "ignore", "prompt_lookup_max": "ignore", "prompt_lookup_min": "ignore",
    "rejection_sample_method": "ignore", "draft_sample_method": "ignore", "synthetic_acceptance_rates": "ignore",
    "synthetic_acceptance_length": "ignore", "suffix_decoding_max_tree_depth": "ignore",
    "suffix_decoding_max_cached_requests": "ignore", "suffix_decoding_max_spec_factor": "ignore",
    "suffix_decoding_min_token_prob": "ignore", "fly_window_size": "ignore", "fly_entropy_threshold": "ignore",
    "fly_entropy_top_k": "ignore", "moe_backend": "ignore",
    # change the drafter's memory; kvplan sizes a drafter at the target's settings only
    "enforce_eager": "refuse", "quantization": "refuse", "attention_backend": "refuse", "kv_cache_dtype": "refuse",
    "max_model_len": "refuse", "index_share_for_mtp_iteration": "refuse", "disable_padded_drafter_batch": "refuse",
    "disable_eagle_block_drop": "refuse", "disable_lookahead_block_hashes": "refuse",
    "draft_lm_head_quantization": "refuse", "use_local_argmax_reduction": "refuse", "use_heterogeneous_vocab": "refuse",
    "parallel_drafting": "refuse", "num_speculative_tokens_per_batch_size": "refuse", "draft_load_config": "refuse",
    "enable_adaptive_verification": "refuse", "dspark_draft_topk": "refuse", "xpress_topc": "refuse",
}  # fmt: skip
_SPEC_DEFAULTS = {  # the False defaults of SpeculativeConfig's switches: given as False, no change
    k: False
    for k in ("disable_padded_drafter_batch", "disable_eagle_block_drop", "disable_lookahead_block_hashes",
              "use_local_argmax_reduction", "use_heterogeneous_vocab", "parallel_drafting",
              "enable_adaptive_verification")
}  # fmt: skip
_NO_DRAFT_MODEL = ("ngram", "ngram_gpu", "suffix")


def _speculative(ctx: _Ctx) -> None:
    """The speculative config's keys → kvplan's ``--num-speculative-tokens`` / ``--speculative-model`` (the
    draft checkpoint, a MODEL reference) / ``--num-mtp-layers`` (given before ``--``)."""
    spec = ctx.spec
    where = lambda key: ctx.spec_from.get(key, "--speculative-config")  # noqa: E731
    for key, value in spec.items():
        how = SPEC_KEYS.get(key)
        if how is None:
            raise UsageError(
                f"{where(key)}: {key!r} is not a key of vLLM 0.33's SpeculativeConfig; kvplan does not know whether "
                "it changes memory"
            )
        if how == "refuse" and value is not None and _SPEC_DEFAULTS.get(key, None) != value:
            raise UsageError(
                f"{where(key)}: {key} {json.dumps(value)} changes the drafter's memory and kvplan does not model it "
                "(it sizes a drafter at the target model's settings)"
            )
        if how == "ignore":
            ctx.out.ignored.append(f"{where(key)}.{key}")
    method = spec.get("method")
    model = spec.get("model")
    tokens = spec.get("num_speculative_tokens")
    if method is not None and not isinstance(method, str):
        raise UsageError(f"{where('method')}: method must be a name, not {json.dumps(method)}")
    if tokens is not None and (isinstance(tokens, bool) or not isinstance(tokens, int) or tokens < 1):
        raise UsageError(f"{where('num_speculative_tokens')}: num_speculative_tokens must be an integer >= 1")
    for key in ("draft_tensor_parallel_size", "tensor_parallel_size"):
        if spec.get(key) is not None:
            ctx.out.needs[f"tp={spec[key]}"] = (
                f"{where(key)}: {key} {spec[key]}: kvplan sizes the drafter at the target's TP; "
                "only the same TP is modelled"
            )
    if method in _NO_DRAFT_MODEL and model is None:
        pass
    elif method == "mtp" or (isinstance(method, str) and method.endswith("_mtp")):
        ctx.out.needs["num_mtp_layers"] = (
            f"{where('method')}: method {method}: the model's own MTP modules (config.json num_nextn_predict_layers), "
            "which kvplan's spec does not carry; give kvplan's --num-mtp-layers N before '--' (DeepSeek-V3: 1)"
        )
    elif method in (None, "eagle", "eagle3", "draft_model") and isinstance(model, str):
        name = model.lower()
        eagle = "eagle-" in name or "eagle3" in name  # vLLM 0.33 config/speculative.py:1445-1448
        if method in ("eagle", "eagle3") and not eagle or method == "draft_model" and eagle:
            raise UsageError(
                f"{where('method')}: method {method} with model {model!r}: kvplan tells an EAGLE head from a draft "
                "model by its name, as vLLM does without a method ('eagle-' or 'eagle3' in it); not modelled"
            )
        if spec.get("revision"):
            model = f"{model}@{spec['revision']}"
        ctx.out.args.extend(["--speculative-model", model])
    elif method is not None or model is not None:
        raise UsageError(
            f"{where('method')}: method {method or '(from the model)'}"
            f"{' with model ' + repr(model) if model else ''}: kvplan models ngram, suffix, mtp, eagle, eagle3 and "
            "draft_model drafters only"
        )
    if tokens is None:
        what = method or "a draft model"
        raise UsageError(f"{where('method')}: give num_speculative_tokens (vLLM 0.33 needs it for {what})")
    if not ctx.has("--num-speculative-tokens"):
        raise UsageError(
            f"{where('method')}: speculative decoding is kvplan's --num-speculative-tokens, which this kvplan command "
            "does not have; plan this command with 'kvplan fit'"
        )
    ctx.out.args.extend(["--num-speculative-tokens", str(tokens)])


def _parallel_checks(ctx: _Ctx) -> None:
    """Expert and data parallelism (module docstring): notes, and checks once the model is loaded."""
    dp, ep, tool = ctx.dp, ctx.ep, ctx.tool
    if dp > 1 and tool.table == "vllm":

        def check_dp(spec, tp, dp=dp):
            if spec.moe is not None:
                raise UsageError(
                    f"--data-parallel-size {dp}: vLLM spreads {spec.name}'s experts over DP × TP = "
                    f"{dp * tp} GPUs (fused_moe/config.py FusedMoEParallelConfig.make), "
                    "which kvplan does not model; plan one replica without it"
                )
            return f"--data-parallel-size {dp}: {dp} replicas of a dense model; the plan is one replica's"

        ctx.out.checks.append(check_dp)
    elif tool.table == "vllm" and any(x.flag.name == "--data-parallel-size" for x in ctx.items):
        ctx.out.ignored.append("--data-parallel-size 1")
    if ep is None:
        return

    def check_ep(spec, tp, ep=ep, dp=dp):
        moe = spec.moe
        if moe is None:
            return f"{ep}: no effect: {spec.name} has no experts"
        ranks = tp * dp
        if moe.num_experts % ranks:
            raise UsageError(
                f"{ep}: {spec.name}'s {moe.num_experts} experts do not divide over {ranks} GPUs (TP × DP): some hold "
                "one expert more, which kvplan does not model"
            )
        return (
            f"{ep}: the same plan: the KV cache stays sharded by TP, and the experts are split whole over the same "
            "GPUs instead of each sharded (vLLM fused_moe/config.py FusedMoEParallelConfig.make): the same bytes "
            "per GPU"
        )

    ctx.out.checks.append(check_ep)


def translate(tool: Tool, args: list[str], names: set[str]) -> Pasted:
    """kvplan's flags for a command's arguments (after its program): what each flag means to its engine, mapped
    to the kvplan command's options ``names`` (option strings), or refused.

    Raises:
        UsageError: an unknown flag, a flag that changes memory kvplan does not model (at a value other than
            the engine's default), a bad value, or a setting the kvplan command does not have.
    """
    items, positionals = parse(tool, args, names)
    last: dict[str, Item] = {}
    for item in items:  # the last occurrence wins (argparse, click, common_params_parse_ex)
        if item.flag.arg.startswith("spec_config") or item.flag.arg.startswith("spec_part"):
            continue
        last[item.flag.name] = item
    ctx = _Ctx(tool, names, items)
    ctx.out.args.extend(["--engine", tool.engine])
    if tool.table == "llamacpp":
        ctx.out.args.extend(["--llama-tool", "server" if tool is LLAMA_SERVER else "cli"])
    for handler in ("spec_config", "spec_part"):  # the JSON first, then the shortcuts (create_speculative_config)
        for item in items:
            if item.flag.kind == "=" and item.flag.arg.split(":")[0] == handler:
                name, *params = item.flag.arg.split(":")
                HANDLERS[name](ctx, item, *params)
    for item in last.values():
        f = item.flag
        if f.kind == "-":
            ctx.out.ignored.append(item.typed)
        elif f.kind == "!":
            if not _neutral(item):
                raise UsageError(
                    f"{item.typed}: {tool.label}'s flag changes memory ({_reason(tool, f)}) and kvplan does not "
                    "model it; plan without it"
                )
            ctx.out.ignored.append(f"{item.typed} {item.value}".strip())
        else:
            name, *params = f.arg.split(":")
            HANDLERS[name](ctx, item, *params)
    if ctx.spec:
        _speculative(ctx)
    if ctx.fraction_dependent:
        ctx.out.needs["gpu_memory_utilization"] = (
            f"{ctx.fraction_dependent[0]}: SGLang derives its default --mem-fraction-static from the CUDA-graph batch "
            "sizes (arg_groups/memory_hook.py handle_gpu_memory_settings), which kvplan does not model; give "
            "--mem-fraction-static in the command"
        )
        ctx.out.ignored.extend(ctx.fraction_dependent)
    _parallel_checks(ctx)
    model = ctx.out.model
    allowed = {"vllm": 1, "sglang": 1 if tool is SGLANG_SERVE else 0, "trtllm": 1, "llamacpp": 0}[tool.table]
    if len(positionals) > allowed or (positionals and model is not None):
        extra = positionals[allowed:] if model is None else positionals
        raise UsageError(f"{extra[0]}: an argument {tool.label} does not take here ({tool.name})")
    if model is None and positionals:
        model = positionals[0]
    if ctx.revision is not None:
        if model is None:
            raise UsageError(f"--revision {ctx.revision}: the command names no model")
        from kvplan.readers.hub import is_repo_id

        if not is_repo_id(model) or "@" in model:
            raise UsageError(
                f"--revision {ctx.revision}: kvplan reads a revision of a Hugging Face repo id only ({model})"
            )
        model = f"{model}@{ctx.revision}"
    ctx.out.model = model
    return ctx.out


def ignored_note(pasted: Pasted) -> str | None:
    """The one stderr line listing the flags that do not change memory, or None."""
    if not pasted.ignored:
        return None
    seen = list(dict.fromkeys(pasted.ignored))
    return f"ignored (no effect on memory): {', '.join(seen)}"


# --- the CLI's side ----------------------------------------------------------------------------------------------

PASTE_COMMANDS = ("fit", "fleet")


def _option_names(command) -> tuple[dict[str, str], set[str]]:
    """(option string → parameter name, option strings that take a value) of a click command."""
    names: dict[str, str] = {}
    valued: set[str] = set()
    for p in getattr(command, "params", ()):
        opts = [*getattr(p, "opts", ()), *getattr(p, "secondary_opts", ())]
        for o in opts:
            if o.startswith("-"):
                names[o] = p.name
                if not getattr(p, "is_flag", False) and not getattr(p, "count", False):
                    valued.add(o)
    return names, valued


def _given(argv: list[str], names: dict[str, str], valued: set[str]) -> tuple[dict[str, str], list[str]]:
    """(parameter name → the option string typed, positional arguments) of kvplan argv (already rewritten)."""
    given: dict[str, str] = {}
    positionals: list[str] = []
    i = 0
    while i < len(argv):
        tok = argv[i]
        opt = tok.split("=", 1)[0]
        if opt in names:
            given.setdefault(names[opt], opt)
            i += 2 if opt in valued and "=" not in tok else 1
            continue
        if not tok.startswith("-") or tok == "-":
            positionals.append(tok)
        i += 1
    return given, positionals


def paste(argv: list[str], command) -> tuple[list[str], Pasted | None]:
    """``kvplan fit [flags] -- <engine command>`` → kvplan's own argv (rewritten by :mod:`kvplan.aliases`) and the
    :class:`Pasted` command; argv unchanged (and None) without ``--`` or for another command.

    ``command`` is the click command (or group) that will parse argv. kvplan's own MODEL, when given before
    ``--``, replaces the command's (a note says so).

    Raises:
        UsageError: as :func:`translate`; ``--engine`` naming another engine than the command's; a setting given
            both before ``--`` and in the command; a command kvplan does not read; ``--`` for another command.
    """
    if "--" not in argv or not argv:
        return argv, None
    sub = command
    commands = getattr(command, "commands", None)
    if commands is not None:
        sub = commands.get(argv[0])
    k = argv.index("--")
    own, cmd = argv[1:k], argv[k + 1 :]
    if len(cmd) == 1 and any(c.isspace() for c in cmd[0]):  # the whole command quoted as one argument
        try:
            cmd = shlex.split(cmd[0])
        except ValueError as e:
            raise UsageError(f"--: the quoted command does not split into arguments ({e})") from None
    try:
        tool, rest = identify(cmd)
    except UsageError:
        if sub is None or argv[0] not in PASTE_COMMANDS or len(cmd) == 1:
            return argv, None  # click's end of options: `kvplan estimate --seq 4k -- MODEL`
        raise
    if sub is None or argv[0] not in PASTE_COMMANDS:
        raise UsageError(f"--: 'kvplan {argv[0]}' does not take an engine command; paste it after 'kvplan fit --'")
    names, valued = _option_names(sub)
    from kvplan.aliases import engine_values, rewrite

    wanted = engine_values(own)
    if wanted:
        from kvplan.options import get_engine

        if any(get_engine(w).value != tool.engine for w in wanted):
            raise UsageError(
                f"--engine {wanted[-1]}: the pasted command is {tool.label.split(' (')[0]}'s ({tool.name}); "
                "drop --engine (the command names the engine)"
            )
    pasted = translate(tool, rest, set(names))
    own_rw = rewrite([argv[0], *own], command)[1:]
    given, positionals = _given(own_rw, names, valued)
    weights = {o: "weights_dtype" for o in ("--dtype", "--quantization")}  # engine spellings kvplan.aliases rewrites
    gen, _ = _given(pasted.args, {**names, **weights}, valued | set(weights))
    for param, opt in gen.items():
        if param in given and param != "engine":
            raise UsageError(
                f"{given[param]}: given to kvplan and set by the {tool.name} command ({opt}); give it once"
            )
    for need, message in pasted.needs.items():
        if need.startswith("tp="):
            tp = _value_of(own_rw, "tp", names) or _value_of(pasted.args, "tp", names) or "1"
            if tp != need[3:]:
                raise UsageError(message)
        elif need not in given and need not in gen:
            raise UsageError(message)
    model = pasted.model
    if positionals:
        if model is not None and positionals[0] != model:
            pasted.notes.append(f"planning {positionals[0]} (given to kvplan) for the command's model {model}")
        model = None
    elif model is None:
        raise UsageError(f"MODEL: the {tool.name} command names no model; give one ({_model_hint(tool)})")
    out = [argv[0], *own, *pasted.args]
    if model is not None:
        out.append(model)
    return out, pasted


def _value_of(argv: list[str], param: str, names: dict[str, str]) -> str | None:
    """The value given to parameter ``param`` in kvplan argv (the last one), or None."""
    found = None
    for i, tok in enumerate(argv):
        opt, eq, inline = tok.partition("=")
        if names.get(opt) == param:
            found = inline if eq else (argv[i + 1] if i + 1 < len(argv) else None)
    return found


def _model_hint(tool: Tool) -> str:
    return {"vllm": "vllm serve MODEL", "sglang": "--model-path MODEL", "llamacpp": "-m MODEL.gguf",
            "trtllm": "trtllm-serve MODEL"}[tool.table]  # fmt: skip


# --- the tables ---------------------------------------------------------------------------------------------------

REASONS: dict[str, dict[str, str]] = {
    "*": {
        "lora": "LoRA adapters' weights and buffers",
        "mm": "multimodal inputs: encoder, its cache and profiling",
        "embeds": "prompt-embedding inputs",
        "offload": "weights or KV cache kept off the GPU",
        "cudagraph": "CUDA-graph capture and compilation",
        "kernels": "kernel choices and their workspaces",
        "backend": "the attention backend, which picks block sizes and workspaces",
        "cp": "context parallelism: the KV cache split across GPUs another way",
        "nodes": "a multi-node layout",
        "dp_local": "data-parallel ranks per node",
        "parallel": "another sharding of layers or buffers across GPUs",
        "eplb": "expert load balancing: redundant experts and their buffers",
        "a2a": "the expert all-to-all backend's buffers",
        "dbo": "micro-batch overlap: batches split and kept twice",
        "allreduce": "all-reduce buffers",
        "worker": "a custom worker",
        "kv": "the KV cache's layout or size",
        "kvtransfer": "KV transfer buffers (disaggregated serving)",
        "mamba": "Mamba/linear-attention state dtypes, blocks or checkpoints",
        "runner": "another kind of model run (pooling, embedding, diffusion)",
        "config": "the model's config, overridden",
        "configfile": "settings read from a file kvplan does not read; paste them as flags",
        "quant": "how the weights are stored",
        "load": "how the weights are loaded (bitsandbytes and others quantize)",
        "impl": "another model implementation",
        "sampler": "sampler buffers",
        "aux": "extra outputs kept per token",
        "weights_sync": "weight-transfer buffers",
        "scheduler": "how many tokens the scheduler keeps free or runs",
        "chunked": "prefill chunking, and so the activation peak",
        "sleep": "memory pools and sleep mode",
        "scaleout": "scale-out buffers",
        "spec": "speculative decoding (a drafter kvplan does not size for this engine)",
        "devices": "several devices or a split across them",
        "fit": "llama.cpp's -fit margins",
        "remote": "a model kvplan cannot read here; give a local GGUF with -m",
        "rope": "RoPE scaling, and so the model's context",
        "router": "router mode: several models",
        "preset": "a preset that downloads a model and sets other flags",
        "serverbase": "a remote server: no model is loaded",
        "maxtotal": "a cap on the KV pool's tokens",
        "prefill": "the prefill batch",
        "dsv4": "DeepSeek-V4's compressed-cache pages",
        "kvscales": "KV scales loaded from a file",
        "lmhead": "an fp32 LM head",
        "unified": "unified memory: pools split dynamically",
        "overlap": "the overlap scheduler's batches in flight",
        "pp": "pipeline micro-batches",
        "dpattn": "data-parallel attention: KV held by each attention rank",
        "moedp": "data-parallel MoE layers",
        "device": "another device",
        "hicache": "a hierarchical (host or storage) KV cache",
        "disagg": "prefill/decode disaggregation buffers",
        "pdmux": "prefill/decode multiplexing",
        "beam": "beam search: a cache per beam",
        "ep": "expert parallelism (TensorRT-LLM's mapping is not read by kvplan)",
    },
    "trtllm": {"backend": "another backend than the PyTorch one kvplan models"},
}

# Each line: spellings (comma-separated; ~ a negative spelling), values taken, class (- ignored; !reason[:defaults]
# changes memory, not modelled; =handler[:args] mapped), and for llama.cpp the tools (s llama-server, c llama-cli).
TABLES: dict[str, str] = {}

# vLLM 0.33.0: entrypoints/common/cli_args.py make_arg_parser (FrontendArgs, AsyncEngineArgs.add_cli_args)
TABLES["vllm"] = """
--headless 0 -
--api-server-count,-asc 1 -
--config 1 !configfile
--grpc 0 -
--lora-modules + !lora
--chat-template 1 -
--chat-template-content-format 1 -
--trust-request-chat-template,~--no-trust-request-chat-template 0 -
--trust-request-mm-kwargs,~--no-trust-request-mm-kwargs 0 -
--default-chat-template-kwargs 1 -
--reasoning-effort-map 1 -
--response-role 1 -
--return-tokens-as-token-ids,~--no-return-tokens-as-token-ids 0 -
--enable-auto-tool-choice,~--disable-auto-tool-choice,~--no-enable-auto-tool-choice 0 -
--exclude-tools-when-tool-choice-none,~--no-exclude-tools-when-tool-choice-none 0 -
--tool-call-parser 1 -
--tool-parser-plugin 1 -
--tool-strict-level 1 -
--tool-server 1 -
--max-log-len 1 -
--enable-prompt-tokens-details,~--disable-prompt-tokens-details,~--no-enable-prompt-tokens-details 0 -
--enable-per-request-metrics,~--disable-per-request-metrics,~--no-enable-per-request-metrics 0 -
--enable-server-load-tracking,~--disable-server-load-tracking,~--no-enable-server-load-tracking 0 -
--enable-force-include-usage,~--disable-force-include-usage,~--no-enable-force-include-usage 0 -
--sse-keep-alive-interval 1 -
--enable-tokenizer-info-endpoint,~--disable-tokenizer-info-endpoint,~--no-enable-tokenizer-info-endpoint 0 -
--enable-log-outputs,~--disable-log-outputs,~--no-enable-log-outputs 0 -
--enable-log-deltas,~--disable-log-deltas,~--no-enable-log-deltas 0 -
--cohere-is-reasoning-model,~--no-cohere-is-reasoning-model 0 -
--cohere-format 1 -
--anthropic-disabled-thinking-effort 1 -
--log-error-stack,~--no-log-error-stack 0 -
--tokens-only,~--no-tokens-only 0 -
--enable-scale-out,~--disable-scale-out,~--no-enable-scale-out 0 !scaleout:~
--fingerprint-mode 1 -
--fingerprint-value 1 -
--host 1 -
--port 1 -
--grpc-port 1 -
--data-parallel-supervisor-port 1 -
--dp-supervisor-probe-interval-s 1 -
--dp-supervisor-probe-timeout-s 1 -
--dp-supervisor-probe-failure-threshold 1 -
--uds 1 -
--uvicorn-log-level 1 -
--disable-uvicorn-access-log,~--enable-uvicorn-access-log,~--no-disable-uvicorn-access-log 0 -
--disable-access-log-for-endpoints 1 -
--allow-credentials,~--no-allow-credentials 0 -
--allowed-origins 1 -
--allowed-methods 1 -
--allowed-headers 1 -
--api-key + -
--ssl-keyfile 1 -
--ssl-certfile 1 -
--ssl-ca-certs 1 -
--enable-ssl-refresh,~--disable-ssl-refresh,~--no-enable-ssl-refresh 0 -
--ssl-cert-reqs 1 -
--ssl-ciphers 1 -
--root-path 1 -
--middleware 1 -
--enable-request-id-headers,~--disable-request-id-headers,~--no-enable-request-id-headers 0 -
--disable-fastapi-docs,~--enable-fastapi-docs,~--no-disable-fastapi-docs 0 -
--h11-max-incomplete-event-size 1 -
--h11-max-header-count 1 -
--enable-offline-docs,~--disable-offline-docs,~--no-enable-offline-docs 0 -
--enable-flash-late-interaction,~--disable-flash-late-interaction,~--no-enable-flash-late-interaction 0 !runner:+
--model 1 =model
--runner 1 !runner:auto|generate
--convert 1 !runner:auto|none
--tokenizer 1 -
--tokenizer-mode 1 -
--trust-remote-code,~--no-trust-remote-code 0 -
--dtype 1 =flag:--dtype
--seed 1 -
--hf-config-path 1 !config
--allowed-local-media-path 1 -
--allowed-media-domains + -
--revision 1 =revision
--code-revision 1 -
--tokenizer-revision 1 -
--max-model-len 1 =flag:--max-model-len:vllm_len
--quantization,-q 1 =flag:--quantization
--quantization-config 1 !quant
--allow-deprecated-quantization,~--no-allow-deprecated-quantization 0 -
--enforce-eager,~--no-enforce-eager 0 =pair:--enforce-eager/
--enable-return-routed-experts,~--disable-return-routed-experts,~--no-enable-return-routed-experts 0 !aux:~
--return-sampling-mask,~--no-return-sampling-mask 0 -
--max-logprobs 1 !sampler:20
--logprobs-mode 1 -
--use-fp64-gumbel,~--no-use-fp64-gumbel 0 -
--enable-trace-replay,~--disable-trace-replay,~--no-enable-trace-replay 0 -
--disable-sliding-window,~--enable-sliding-window,~--no-disable-sliding-window 0 !kv:~
--disable-cascade-attn,~--enable-cascade-attn,~--no-disable-cascade-attn 0 -
--skip-tokenizer-init,~--no-skip-tokenizer-init 0 -
--enable-prompt-embeds,~--disable-prompt-embeds,~--no-enable-prompt-embeds 0 !embeds:~
--served-model-name + -
--config-format 1 -
--hf-token ? -
--hf-overrides 1 !config:{}
--model-class-overrides 1 !config:{}
--pooler-config 1 !runner
--generation-config 1 -
--override-generation-config 1 -
--enable-sleep-mode,~--disable-sleep-mode,~--no-enable-sleep-mode 0 !sleep:~
--sleep-mode-backend 1 !sleep:cumem
--sleep-mode-offload-cudagraph,~--no-sleep-mode-offload-cudagraph 0 !sleep:~
--sleep-preserve-parameter-names + !sleep
--enable-cumem-allocator,~--disable-cumem-allocator,~--no-enable-cumem-allocator 0 !sleep:~
--enable-nccl-comm-suspend,~--disable-nccl-comm-suspend,~--no-enable-nccl-comm-suspend 0 !sleep:~
--model-impl 1 !impl:auto|vllm
--logits-processors + !sampler
--io-processor-plugin 1 !runner
--renderer-num-workers 1 -
--load-format 1 !load:auto|safetensors|pt|fastsafetensors
--download-dir 1 -
--safetensors-load-strategy 1 -
--safetensors-prefetch-num-threads 1 -
--safetensors-prefetch-block-size 1 -
--model-loader-extra-config 1 -
--ignore-patterns + -
--use-tqdm-on-load,~--no-use-tqdm-on-load 0 -
--pt-load-map-location 1 -
--attention-backend 1 !backend
--mamba-backend 1 !mamba
--mamba-ssu-algorithm 1 !mamba
--enable-mamba-cache-stochastic-rounding,~--disable-mamba-cache-stochastic-rounding,
    ~--no-enable-mamba-cache-stochastic-rounding 0 !mamba:~
--mamba-cache-philox-rounds 1 !mamba:0
--reasoning-parser 1 -
--reasoning-parser-plugin 1 -
--distributed-executor-backend 1 -
--pipeline-parallel-size,-pp 1 =flag:--pp:int
--master-addr 1 -
--master-port 1 -
--nnodes,-n 1 !nodes:1
--node-rank,-r 1 -
--distributed-timeout-seconds 1 -
--cpu-distributed-timeout-seconds 1 -
--numa-bind,~--no-numa-bind 0 -
--numa-bind-nodes + -
--numa-bind-cpus + -
--device-ids 1 -
--tensor-parallel-size,-tp 1 =flag:--tp:int
--decode-context-parallel-size,-dcp 1 !cp:1
--dcp-comm-backend 1 !cp
--dcp-q-replicate,~--no-dcp-q-replicate 0 !cp
--dcp-kv-cache-interleave-size 1 !cp:1
--cp-kv-cache-interleave-size 1 !cp
--prefill-context-parallel-size,-pcp 1 !cp:1
--data-parallel-size,-dp 1 =dp
--data-parallel-rank,-dpn 1 -
--data-parallel-start-rank,-dpr 1 -
--data-parallel-size-local,-dpl 1 !dp_local
--data-parallel-address,-dpa 1 -
--data-parallel-rpc-port,-dpp 1 -
--data-parallel-backend,-dpb 1 -
--data-parallel-hybrid-lb,~--no-data-parallel-hybrid-lb,-dph 0 -
--data-parallel-external-lb,~--no-data-parallel-external-lb,-dpe 0 -
--data-parallel-multi-port-external-lb,-dpm 0 -
--enable-hc-sp,~--disable-hc-sp,~--no-enable-hc-sp 0 !parallel:~
--enable-expert-parallel,-ep,~--disable-expert-parallel,~--no-enable-expert-parallel 0 =ep
--enable-batch-sharded-sampling,~--disable-batch-sharded-sampling,~--no-enable-batch-sharded-sampling 0 !parallel
--enable-ep-weight-filter,~--disable-ep-weight-filter,~--no-enable-ep-weight-filter 0 !eplb:~
--all2all-backend 1 !a2a:allgather_reducescatter
--enable-dbo,~--disable-dbo,~--no-enable-dbo 0 !dbo:~
--enable-shm-tensor-arena,~--disable-shm-tensor-arena,~--no-enable-shm-tensor-arena 0 !parallel:~
--ubatch-size 1 !dbo:0
--enable-elastic-ep,~--disable-elastic-ep,~--no-enable-elastic-ep 0 !eplb:~
--elastic-ep-max-dp-size 1 !eplb
--dbo-decode-token-threshold 1 !dbo:32
--dp-sync-interval 1 -
--dbo-prefill-token-threshold 1 !dbo:512
--disable-nccl-for-dp-synchronization,~--enable-nccl-for-dp-synchronization,
    ~--no-disable-nccl-for-dp-synchronization 0 !parallel
--enable-eplb,~--disable-eplb,~--no-enable-eplb 0 !eplb:~
--eplb-config 1 !eplb
--expert-placement-strategy 1 !eplb:linear
--max-parallel-loading-workers 1 -
--ray-workers-use-nsight,~--no-ray-workers-use-nsight 0 -
--disable-custom-all-reduce,~--enable-custom-all-reduce,~--no-disable-custom-all-reduce 0 !allreduce:~
--worker-cls 1 !worker:auto
--worker-extension-cls 1 -
--enable-fault-tolerance,~--disable-fault-tolerance,~--no-enable-fault-tolerance 0 -
--fault-tolerance-config 1 -
--block-size 1 =flag:--block-size:int
--gpu-memory-utilization,--device-memory-utilization 1 =flag:--gpu-memory-utilization:frac
--kv-cache-memory-bytes 1 =flag:--kv-cache-memory:vllm_int
--kv-cache-dtype 1 =flag:--kv-dtype
--num-gpu-blocks-override 1 !kv
--enable-prefix-caching,~--disable-prefix-caching,
    ~--no-enable-prefix-caching 0 =pair:--enable-prefix-caching/--no-enable-prefix-caching
--prefix-caching-hash-algo 1 -
--prefix-cache-retention-interval 1 -
--kv-cache-dtype-skip-layers + !kv:[]
--kv-sharing-fast-prefill,~--no-kv-sharing-fast-prefill 0 !kv:~
--swa-bounded-replay,~--no-swa-bounded-replay 0 !kv:+
--mamba-cache-dtype 1 !mamba:auto
--mamba-ssm-cache-dtype 1 !mamba:auto
--mamba-block-size 1 !mamba
--prefix-match-unit 1 !kv
--mamba-cache-mode 1 !mamba
--enable-mamba-shared-prefix-checkpoint,~--disable-mamba-shared-prefix-checkpoint,
    ~--no-enable-mamba-shared-prefix-checkpoint 0 !mamba:~
--replayssm-buffer-len 1 !mamba:16
--use-replayssm,~--no-use-replayssm 0 !mamba:~
--kv-offloading-size 1 !offload
--kv-offloading-backend 1 !offload:native
--offload-backend 1 !offload:auto
--cpu-offload-gb 1 !offload:0
--cpu-offload-params + !offload
--offload-group-size 1 !offload:0
--offload-num-in-group 1 !offload:1
--offload-prefetch-step 1 !offload:1
--offload-params + !offload
--language-model-only,~--no-language-model-only 0 !mm:~
--limit-mm-per-prompt 1 !mm:{}
--enable-mm-embeds,~--disable-mm-embeds,~--no-enable-mm-embeds 0 !mm:~
--media-io-kwargs 1 -
--mm-processor-kwargs 1 !mm
--mm-processor-cache-gb 1 !mm
--mm-processor-cache-type 1 -
--mm-hasher-algorithm 1 -
--mm-shm-cache-max-object-size-mb 1 !mm
--mm-encoder-only,~--no-mm-encoder-only 0 !mm:~
--mm-encoder-tp-mode 1 !mm:weights
--mm-encoder-attn-backend 1 !mm
--mm-encoder-attn-dtype 1 !mm
--mm-encoder-fp8-scale-path 1 !mm
--mm-encoder-fp8-scale-save-path 1 !mm
--mm-encoder-fp8-scale-save-margin 1 !mm
--interleave-mm-strings,~--no-interleave-mm-strings 0 -
--skip-mm-profiling,~--no-skip-mm-profiling 0 !mm:~
--video-pruning-rate 1 !mm
--video-pruning-method 1 !mm
--mm-tensor-ipc 1 !mm
--mm-processor-device 1 -
--mm-ipc-gpu-memory-gb 1 !mm:0
--mm-device-do-normalize,~--no-mm-device-do-normalize 0 -
--enable-lora,~--disable-lora,~--no-enable-lora 0 !lora:~
--max-loras 1 !lora:1
--max-lora-rank 1 !lora:16
--lora-dtype 1 !lora:auto
--enable-tower-connector-lora,~--disable-tower-connector-lora,~--no-enable-tower-connector-lora 0 !lora:~
--max-cpu-loras 1 !lora
--fully-sharded-loras,~--no-fully-sharded-loras 0 !lora:~
--lora-target-modules + !lora
--default-mm-loras 1 !lora
--specialize-active-lora,~--no-specialize-active-lora 0 !lora:~
--enable-mixed-moe-lora-format,~--disable-mixed-moe-lora-format,~--no-enable-mixed-moe-lora-format 0 !lora:~
--enable-moe-shared-loras,~--disable-moe-shared-loras,~--no-enable-moe-shared-loras 0 !lora:~
--max-lora-cls-labels 1 !lora
--logging-config 1 -
--log-level 1 -
--log-config-file 1 -
--show-hidden-metrics-for-version 1 -
--otlp-traces-endpoint 1 -
--collect-detailed-traces + -
--per-request-spec-decode-metrics 1 -
--kv-cache-metrics,~--no-kv-cache-metrics 0 -
--kv-cache-metrics-sample 1 -
--custom-histogram-buckets 1 -
--cudagraph-metrics,~--no-cudagraph-metrics 0 -
--enable-layerwise-nvtx-tracing,~--disable-layerwise-nvtx-tracing,~--no-enable-layerwise-nvtx-tracing 0 -
--enable-mfu-metrics,~--disable-mfu-metrics,~--no-enable-mfu-metrics 0 -
--enable-logging-iteration-details,~--disable-logging-iteration-details,~--no-enable-logging-iteration-details 0 -
--jit-monitor-mode 1 -
--jit-monitor-verbose,~--no-jit-monitor-verbose 0 -
--max-num-batched-tokens 1 =flag:--max-num-batched-tokens:vllm_int
--max-num-scheduled-tokens 1 !scheduler
--max-num-seqs 1 =flag:--max-num-seqs:int
--max-num-active-seqs 1 !scheduler
--max-num-queued-reqs 1 -
--max-num-queued-tokens 1 -
--long-prefill-token-threshold 1 -
--long-prefill-token-threshold-adaptive,~--no-long-prefill-token-threshold-adaptive 0 -
--scheduling-policy 1 -
--enable-chunked-prefill,~--disable-chunked-prefill,~--no-enable-chunked-prefill 0 !chunked:+
--disable-chunked-mm-input,~--enable-chunked-mm-input,~--no-disable-chunked-mm-input 0 !mm:~
--scheduler-cls 1 !scheduler
--scheduler-reserve-full-isl,~--no-scheduler-reserve-full-isl 0 -
--watermark 1 !scheduler:0.0
--prefill-schedule-interval 1 -
--disable-hybrid-kv-cache-manager,~--enable-hybrid-kv-cache-manager,
    ~--no-disable-hybrid-kv-cache-manager 0 =pair:--disable-hybrid-kv-cache-manager/--enable-hybrid-kv-cache-manager
--async-scheduling,~--no-async-scheduling 0 =pair:--async-scheduling/--no-async-scheduling
--stream-interval 1 -
--cudagraph-capture-sizes + !cudagraph
--max-cudagraph-capture-size 1 !cudagraph
--ir-op-priority 1 !kernels
--enable-flashinfer-autotune,~--disable-flashinfer-autotune,~--no-enable-flashinfer-autotune 0 !kernels
--monokernel,~--no-monokernel 0 !kernels:~
--moe-backend 1 !kernels:auto
--linear-backend 1 !kernels:auto
--sparse-indexer-topk-backend 1 !kernels:auto
--speculative-config,-sc 1 =spec_config
--spec-method 1 =spec_part:method
--spec-model 1 =spec_part:model
--spec-tokens 1 =spec_part:num_speculative_tokens
--watermark-config 1 -
--diffusion-config,-dc 1 !runner
--kv-transfer-config 1 !kvtransfer
--kv-events-config 1 -
--ec-transfer-config 1 !kvtransfer
--ec-manager-config 1 !mm
--compilation-config,-cc 1 !cudagraph
--attention-config,-ac 1 !backend
--engram-config 1 !config
--reasoning-config 1 -
--kernel-config 1 !kernels
--additional-config 1 !config:{}
--structured-outputs-config 1 -
--aux-output-config 1 !aux
--profiler-config 1 -
--watchdog-config 1 -
--optimization-level 1 !cudagraph:2
--performance-mode 1 !cudagraph:balanced
--weight-transfer-config 1 !weights_sync
--disable-log-stats 0 -
--aggregate-engine-logging 0 -
--fail-on-environ-validation,~--no-fail-on-environ-validation 0 -
--shutdown-timeout 1 -
--gdn-prefill-backend 1 !kernels
--kda-prefill-backend 1 !kernels
--kda-decode-backend 1 !kernels
--enable-log-requests,~--disable-log-requests,~--no-enable-log-requests 0 -
"""

# SGLang 0.5.23: srt/server_args.py ServerArgs.add_cli_args
TABLES["sglang"] = """
--model-path,--model 1 =model
--tokenizer-path 1 -
--tokenizer-mode 1 -
--tokenizer-backend 1 -
--tokenizer-worker-num 1 -
--detokenizer-worker-num 1 -
--skip-tokenizer-init 0 -
--load-format 1 !load:auto|safetensors|pt
--model-loader-extra-config 1 -
--trust-remote-code 0 -
--context-length 1 =flag:--max-model-len:int
--is-embedding 0 !runner:~
--enable-multimodal 0 !mm
--revision 1 =revision
--model-impl 1 !impl:auto|sglang
--model-config-parser 1 !config:auto
--json-model-override-args 1 !config:{}
--dtype 1 =flag:--dtype
--quantization 1 =flag:--quantization
--quantization-param-path 1 !kvscales
--kv-cache-dtype 1 =flag:--kv-dtype
--enable-fp32-lm-head 0 !lmhead:~
--modelopt-quant 1 !quant
--modelopt-checkpoint-restore-path 1 !quant
--modelopt-checkpoint-save-path 1 !quant
--modelopt-export-path 1 !quant
--quantize-and-serve 0 !quant:~
--rl-quant-profile 1 !quant
--enable-tf32-matmul,~--no-enable-tf32-matmul 0 -
--mem-fraction-static 1 =flag:--gpu-memory-utilization:frac
--max-running-requests 1 =alt:--max-running-requests|--max-num-seqs:int
--max-queued-requests 1 -
--max-total-tokens 1 !maxtotal
--chunked-prefill-size 1 =chunked_prefill
--prefill-decode-interval 1 -
--enable-dynamic-chunking 0 -
--max-prefill-tokens 1 !prefill:16384
--prefill-max-requests 1 !prefill
--schedule-policy 1 -
--enable-priority-scheduling 0 -
--disable-priority-preemption 0 -
--default-priority-value 1 -
--abort-on-priority-when-disabled 0 -
--schedule-low-priority-values-first 0 -
--priority-scheduling-preemption-threshold 1 -
--retraction-policy 1 -
--schedule-conservativeness 1 -
--page-size 1 =alt:--page-size|--block-size:int
--c128-page-size 1 !dsv4:16
--swa-full-tokens-ratio 1 =new:--swa-full-tokens-ratio
--disable-hybrid-swa-memory 0 =pair:--swa-full/
--radix-eviction-policy 1 -
--radix-eviction-policy-config 1 -
--prefill-only-disable-kv-cache 0 !kv:~
--disable-radix-cache 0 =new:--disable-radix-cache
--enable-page-major-kv-layout 0 !kv:~
--enable-unified-memory 0 !unified:~
--disable-chunked-prefix-cache 0 !kv:~
--disable-overlap-schedule 0 !overlap:~
--num-continuous-decode-steps 1 -
--scheduler-recv-interval 1 -
--enable-mixed-chunk 0 !scheduler:~
--nccl-port 1 -
--dist-timeout 1 -
--dist-init-addr,--nccl-init-addr 1 -
--gated-launch-port 1 -
--nnodes 1 !nodes:1
--node-rank 1 -
--tp-size,--tensor-parallel-size 1 =flag:--tp:int
--dcp-size,--decode-context-parallel-size 1 !cp:1
--pp-size,--pipeline-parallel-size 1 =flag:--pp:int
--pp-max-micro-batch-size 1 !pp
--pp-async-batch-depth 1 !pp:0
--dp-size,--data-parallel-size 1 =dp_replicas
--attn-dp-size,--attention-data-parallel-size 1 =new:--data-parallel-size
--load-balance-method 1 -
--attn-cp-size,--attention-context-parallel-size 1 !cp:1
--moe-dp-size,--moe-data-parallel-size 1 !moedp:1
--dwdp-size 1 !parallel:1
--dcp-comm-backend 1 !cp
--dcp-replicate-q-proj,~--no-dcp-replicate-q-proj 0 !cp
--enable-prefill-cp 0 !cp:~
--cp-strategy 1 !cp
--enable-dsa-cache-layer-split 0 !kv:~
--enable-cp-decode-attn-tp 0 !cp:~
--enable-kv-cache-sharding 0 !kv:~
--enable-dp-attention-local-control-broadcast 0 !dpattn:~
--enable-dp-lm-head 0 !dpattn:~
--enable-tp-lm-head-all-to-all,~--no-enable-tp-lm-head-all-to-all 0 !parallel
--enable-attn-tp-input-scattered 0 !parallel:~
--enable-shared-experts-attn-tp 0 !parallel:~
--shared-experts-tp-size 1 !parallel
--enable-dense-mlp-attn-tp 0 !parallel:~
--enable-layernorm-sp 0 !parallel:~
--disable-attn-tp-gather 0 !parallel:~
--enable-p2p-check 0 -
--device 1 !device:cuda
--base-gpu-id 1 -
--gpu-id-step 1 -
--random-seed 1 -
--mlx-enable-sampling 0 !device:~
--watchdog-timeout 1 -
--soft-watchdog-timeout 1 -
--sleep-on-idle 0 -
--use-ray 0 -
--numa-node + -
--gc-threshold + -
--host 1 -
--port 1 -
--fastapi-root-path 1 -
--smg-grpc-mode 0 -
--grpc-mode 0 -
--grpc-port 1 -
--sidecar 1 -
--sidecar-args 1 -
--skip-server-warmup 0 -
--warmups 1 -
--enable-http2 0 -
--http2-max-concurrent-streams 1 -
--http2-initial-connection-window-size 1 -
--ssl-keyfile 1 -
--ssl-certfile 1 -
--ssl-ca-certs 1 -
--ssl-keyfile-password 1 -
--enable-ssl-refresh 0 -
--api-key 1 -
--admin-api-key 1 -
--served-model-name 1 -
--weight-version 1 -
--chat-template 1 -
--trust-request-chat-template 0 -
--hf-chat-template-name 1 -
--completion-template 1 -
--file-storage-path 1 -
--enable-cache-report 0 -
--return-input-ids 0 -
--return-output-ids 0 -
--default-chat-template-kwargs 1 -
--strip-thinking-cache 0 -
--enable-strict-thinking 0 -
--tool-server 1 -
--sampling-defaults 1 -
--asr-max-buffer-seconds 1 -
--asr-max-concurrent-sessions 1 -
--preferred-sampling-params 1 -
--allow-auto-truncate 0 -
--stream-interval 1 -
--batch-notify-size 1 -
--stream-response-default-include-usage 0 -
--incremental-streaming-output 0 -
--enable-streaming-session 0 !kv:~
--enable-session-radix-cache 0 !kv:~
--log-level 1 -
--log-level-http 1 -
--log-requests 0 -
--log-requests-level 1 -
--log-requests-format 1 -
--log-requests-target + -
--uvicorn-access-log-exclude-prefixes * -
--crash-dump-folder 1 -
--show-time-cost 0 -
--enable-metrics 0 -
--smg-http-sidecar-port,--grpc-http-sidecar-port 1 -
--enable-mfu-metrics 0 -
--enable-metrics-for-all-schedulers 0 -
--load-snapshot-publish-interval 1 -
--tokenizer-metrics-custom-labels-header 1 -
--tokenizer-metrics-allowed-custom-labels + -
--extra-metric-labels 1 -
--bucket-time-to-first-token + -
--bucket-inter-token-latency + -
--bucket-e2e-request-latency + -
--prompt-tokens-buckets + -
--generation-tokens-buckets + -
--gc-warning-threshold-secs 1 -
--decode-log-interval 1 -
--enable-request-time-stats-logging 0 -
--kv-events-config 1 -
--load-publish-endpoint 1 -
--enable-forward-pass-metrics 0 -
--forward-pass-metrics-worker-id 1 -
--forward-pass-metrics-ipc-name 1 -
--enable-trace 0 -
--trace-modules 1 -
--otlp-traces-endpoint 1 -
--export-metrics-to-file 0 -
--export-metrics-to-file-dir 1 -
--constrained-json-whitespace-pattern 1 -
--constrained-json-disable-any-whitespace 0 -
--constrained-json-max-whitespace-cnt 1 -
--attention-backend 1 !backend
--decode-attention-backend 1 !backend
--enable-lean-attention 0 !backend:~
--prefill-attention-backend 1 !backend
--grammar-backend 1 -
--radix-cache-backend 1 !kv
--mm-attention-backend 1 !mm
--fp8-gemm-backend 1 !kernels:auto
--fp4-gemm-backend 1 !kernels:auto
--bf16-gemm-backend 1 !kernels:auto
--dsa-prefill-backend 1 !kernels
--dsv4-prefill-backend 1 !kernels:auto
--dsa-decode-backend 1 !kernels
--dsa-paged-mqa-logits-backend 1 !kernels:auto
--dsa-topk-backend 1 !kernels:sgl-kernel
--disable-flashinfer-autotune 0 !kernels:~
--flashinfer-autotune-skip-ops + !kernels
--mamba-backend 1 !kernels:triton
--cuda-graph-config 1 =fraction_dependent
--cuda-graph-backend-decode 1 =fraction_dependent
--cuda-graph-backend-prefill 1 =fraction_dependent
--cuda-graph-max-bs-decode 1 =fraction_dependent
--cuda-graph-max-bs-prefill 1 =fraction_dependent
--cuda-graph-bs-decode + =fraction_dependent
--cuda-graph-bs-prefill + =fraction_dependent
--cuda-graph-prefill-max-context,--context-bucket 1 =fraction_dependent
--disable-prefill-cuda-graph 0 =fraction_dependent
--disable-decode-cuda-graph 0 =fraction_dependent
--disable-cuda-graph-padding 0 =fraction_dependent
--enable-profile-cuda-graph 0 -
--enable-cudagraph-gc 0 -
--debug-cuda-graph 0 -
--enable-layerwise-nvtx-marker 0 -
--enable-nccl-nvls 0 !allreduce:~
--enable-symm-mem 0 !allreduce:~
--triton-attention-reduce-in-fp32 0 !kernels:~
--triton-attention-num-kv-splits 1 !kernels:8
--triton-attention-split-tile-size 1 !kernels
--flashinfer-mla-disable-ragged 0 !kernels:~
--enable-fused-qk-norm-rope,~--no-enable-fused-qk-norm-rope 0 !kernels
--enable-precise-embedding-interpolation 0 !mm:~
--enable-fused-moe-sum-all-reduce 0 !kernels:~
--enable-deepseek-v4-fp4-indexer 0 !kv:~
--disable-custom-all-reduce 0 !allreduce:~
--enable-mscclpp 0 !allreduce:~
--enable-torch-symm-mem 0 !allreduce:~
--enable-scattered-sconv 0 !kernels:~
--pre-warm-nccl 0 !allreduce:~
--boundary-reduction 1 !kernels:auto
--enable-quant-communications 0 !allreduce:~
--enforce-disable-flashinfer-allreduce-fusion 0 !allreduce:~
--flashinfer-allreduce-fusion-backend 1 !allreduce
--enable-aiter-allreduce-fusion 0 !allreduce:~
--enable-torch-compile 0 =fraction_dependent
--enable-torch-compile-debug-mode 0 -
--torch-compile-max-bs 1 =fraction_dependent
--speculative-algorithm 1 !spec
--uno-lora-path 1 !spec
--speculative-draft-model-path,--speculative-draft-model 1 !spec
--speculative-draft-model-revision 1 !spec
--speculative-draft-load-format 1 !spec
--speculative-num-steps 1 !spec
--speculative-eagle-topk 1 !spec
--speculative-num-draft-tokens 1 !spec
--speculative-dflash-block-size 1 !spec
--speculative-dspark-block-size 1 !spec
--speculative-dspark-sps-table-path 1 !spec
--speculative-dspark-confidence-sts-path 1 !spec
--speculative-dspark-align-verify-tokens-to-graph-tier 0 !spec:~
--speculative-accept-threshold-single 1 !spec:1.0
--speculative-accept-threshold-acc 1 !spec:1.0
--speculative-use-rejection-sampling 0 !spec:~
--speculative-token-map 1 !spec
--speculative-attention-mode 1 !spec:prefill
--speculative-draft-attention-backend 1 !spec
--speculative-dsa-topk-backend 1 !spec:sgl-kernel
--speculative-draft-kv-cache-dtype 1 !spec
--speculative-draft-window-size 1 !spec
--speculative-moe-runner-backend 1 !spec
--speculative-moe-a2a-backend 1 !spec
--speculative-enable-w4a4-mxfp4-megamoe,~--no-speculative-enable-w4a4-mxfp4-megamoe 0 !spec
--speculative-draft-model-quantization 1 !spec
--enable-multi-layer-eagle 0 !spec:~
--speculative-adaptive 0 !spec:~
--speculative-adaptive-config 1 !spec
--decoupled-spec-bind-endpoint 1 !spec
--decoupled-spec-connect-endpoints 1 !spec
--decoupled-spec-rank 1 !spec
--decoupled-spec-role 1 !spec:null
--spec-trace-dir 1 -
--speculative-ngram-min-bfs-breadth 1 !spec:1
--speculative-ngram-max-bfs-breadth 1 !spec:10
--speculative-ngram-match-type 1 !spec:BFS
--speculative-ngram-max-trie-depth 1 !spec:18
--speculative-ngram-capacity 1 !spec:10000000
--speculative-ngram-external-corpus-path 1 !spec
--speculative-ngram-external-sam-budget 1 !spec:0
--speculative-ngram-external-corpus-max-tokens 1 !spec:10000000
--ep-size,--expert-parallel-size,--ep 1 =ep
--moe-a2a-backend 1 !a2a:none
--enable-w4a4-mxfp4-megamoe 0 !kernels:~
--deepep-v2-mode 1 !a2a:direct
--moe-runner-backend 1 !kernels:auto
--flashinfer-mxfp4-moe-precision 1 !kernels:default
--deepep-mode 1 !a2a:auto
--fuseep-mode 1 !a2a:2
--deepep-dispatcher-output-dtype 1 !a2a:auto
--ep-num-redundant-experts 1 !eplb:0
--ep-dispatch-algorithm 1 !eplb
--init-expert-location 1 !eplb:trivial
--enable-eplb 0 !eplb:~
--eplb-algorithm 1 !eplb:auto
--eplb-rebalance-num-iterations 1 !eplb:1000
--eplb-rebalance-layers-per-chunk 1 !eplb
--eplb-min-rebalancing-utilization-threshold 1 !eplb:1.0
--expert-distribution-recorder-mode 1 -
--expert-distribution-recorder-buffer-size 1 !eplb
--expert-balancedness-report-mode 1 -
--deepep-config 1 !a2a
--moe-dense-tp-size 1 !parallel
--elastic-ep-backend 1 !eplb
--enable-elastic-expert-backup 0 !eplb:~
--mooncake-ib-device 1 -
--enable-waterfill 0 !eplb:~
--elastic-ep-join-mode 1 !eplb
--elastic-ep-join-rank-offset 1 !eplb:0
--elastic-ep-initial-size 1 !eplb
--max-ep-size 1 !eplb
--elastic-ep-scale-timeout 1 -
--disable-flashinfer-cutlass-moe-fp4-allgather 0 !kernels:~
--disable-shared-experts-fusion 0 !kernels:~
--enforce-shared-experts-fusion 0 !kernels:~
--max-mamba-cache-size 1 =new:--max-mamba-cache-size
--mamba-ssm-dtype 1 !mamba
--mamba-max-states-per-path 1 !mamba:-1
--enable-mamba-cache-stochastic-rounding 0 !mamba:~
--mamba-cache-philox-rounds 1 !mamba:0
--mamba-full-memory-ratio 1 =new:--mamba-full-memory-ratio
--mamba-radix-cache-strategy 1 !mamba:auto
--mamba-track-interval 1 !mamba:256
--enable-int8-mamba-checkpoint 0 !mamba:~
--int8-mamba-ckpt-size 1 !mamba
--linear-attn-backend 1 !kernels:triton
--linear-attn-decode-backend 1 !kernels
--linear-attn-prefill-backend 1 !kernels
--linear-attn-verify-backend 1 !kernels
--enable-linear-replayssm 0 !mamba:~
--linear-replayssm-cache-len 1 !mamba:16
--enable-linear-replayssm-spec 0 !mamba:~
--enable-hierarchical-cache,--enable-hicache 0 !hicache:~
--hicache-host-memory-mode 1 !hicache:cache
--hicache-ratio 1 !hicache
--hicache-size 1 !hicache:0
--hicache-write-policy 1 !hicache:write_through
--hicache-io-backend 1 !hicache:kernel
--hicache-mem-layout 1 !hicache:page_first
--hicache-storage-backend 1 !hicache
--hicache-storage-prefetch-policy 1 !hicache:timeout
--hicache-storage-backend-extra-config 1 !hicache
--hicache-storage-prefetch-retry-poll-interval 1 !hicache:8
--hicache-storage-prefetch-retry-max-attempts 1 !hicache:8
--enable-unified-cache-external-linker 0 !hicache:~
--unified-cache-external-linker-backend 1 !hicache:mooncake
--enable-hisparse 0 !hicache:~
--hisparse-config,--hierarchical-sparse-attention-extra-config 1 !hicache
--enable-broadcast-mm-inputs-process 0 !mm:~
--enable-prefix-mm-cache 0 !mm:~
--mm-enable-dp-encoder,~--no-mm-enable-dp-encoder 0 !mm
--mm-process-config 1 !mm
--mm-processor-worker-num 1 -
--mm-io-worker-num 1 -
--allowed-media-domains + -
--media-url-max-file-size-mb 1 -
--mm-preprocess-cache-size-mb 1 !mm
--trust-mm-content-hashes 0 -
--limit-mm-data-per-request 1 !mm
--enable-mm-global-cache 0 !mm:~
--image-processor-backend 1 -
--mm-global-cache-backend 1 !mm:mooncake
--disable-fast-image-processor 0 -
--mm-feature-transport 1 !mm
--enable-lora 0 !lora:~
--enable-lora-overlap-loading 0 !lora:~
--max-lora-rank 1 !lora
--lora-target-modules * !lora
--lora-paths * !lora
--max-loaded-loras 1 !lora
--max-loras-per-batch 1 !lora:8
--lora-eviction-policy 1 -
--lora-backend 1 !lora:csgmv
--max-lora-chunk-size 1 !lora:16
--experts-shared-outer-loras,~--no-experts-shared-outer-loras 0 !lora
--lora-use-virtual-experts 0 !lora:~
--lora-strict-loading,~--no-lora-strict-loading 0 -
--lora-drain-wait-threshold 1 -
--enable-two-batch-overlap 0 !dbo:~
--enable-single-batch-overlap 0 !dbo:~
--tbo-token-distribution-threshold 1 !dbo:0.48
--cpu-offload-gb 1 !offload:0
--offload-group-size 1 !offload:-1
--offload-num-in-group 1 !offload:1
--offload-prefetch-step 1 !offload:1
--offload-mode 1 !offload:cpu
--enable-lmcache 0 !hicache:~
--lmcache-config-file 1 !hicache
--enable-flexkv 0 !hicache:~
--flexkv-config-file 1 !hicache
--kt-weight-path 1 !offload
--kt-method 1 !offload:AMXINT4
--kt-cpuinfer 1 !offload
--kt-threadpool-count 1 !offload:2
--kt-num-gpu-experts 1 !offload
--kt-max-deferred-experts-per-token 1 !offload
--dllm-algorithm 1 !runner
--dllm-algorithm-config 1 !runner
--dllm-fdfo,~--no-dllm-fdfo 0 !runner
--disaggregation-mode 1 !disagg:null
--disaggregation-transfer-backend 1 !disagg:mooncake
--disaggregation-bootstrap-port 1 -
--disaggregation-ib-device 1 -
--disaggregation-decode-enable-radix-cache 0 !disagg:~
--disaggregation-decode-enable-offload-kvcache 0 !disagg:~
--disaggregation-decode-retraction-backup 1 !disagg
--num-reserved-decode-tokens 1 !disagg:512
--disaggregation-decode-extra-slots 1 !disagg
--disaggregation-decode-polling-interval 1 -
--optimistic-prefill-attempts 1 !disagg:0
--encoder-only 0 !mm:~
--language-only 0 !mm:~
--language-model-only 0 !mm:~
--encoder-transfer-backend 1 !mm:auto
--encoder-urls + !mm
--encoder-bootstrap-port 1 -
--encoder-register-urls + !mm
--enable-adaptive-dispatch-to-encoder 0 !mm:~
--enable-pdmux 0 !pdmux:~
--pdmux-config-path 1 !pdmux
--sm-group-num 1 !pdmux:8
--startup-weight-load-mode 1 -
--custom-weight-loader * !load
--weight-loader-disable-mmap 0 -
--weight-loader-prefetch-checkpoints 0 -
--weight-loader-prefetch-num-threads 1 -
--weight-loader-drop-cache-after-load 0 -
--remote-instance-weight-loader-seed-instance-ip 1 -
--remote-instance-weight-loader-seed-instance-service-port 1 -
--remote-instance-weight-loader-send-weights-group-ports 1 -
--remote-instance-weight-loader-backend 1 -
--remote-instance-weight-loader-start-seed-via-transfer-engine 0 -
--engine-info-bootstrap-port 1 -
--modelexpress-config 1 -
--download-dir 1 -
--model-checksum ? -
--delete-ckpt-after-loading 0 -
--decrypted-config-file 1 -
--decrypted-draft-config-file 1 !spec
--checkpoint-engine-wait-weights-before-ready 0 -
--enable-prefill-delayer 0 -
--prefill-delayer-max-delay-passes 1 -
--prefill-delayer-token-usage-low-watermark 1 -
--prefill-delayer-forward-passes-buckets + -
--prefill-delayer-wait-seconds-buckets + -
--prefill-delayer-queue-min-ratio 1 -
--prefill-delayer-max-delay-ms 1 -
--min-free-slots-delay 1 -
--enable-deterministic-inference 0 -
--rl-on-policy-target 1 !runner
--kv-canary 1 !kv:none
--kv-canary-sweep-interval 1 -
--enable-dynamic-batch-tokenizer 0 -
--dynamic-batch-tokenizer-batch-size 1 -
--dynamic-batch-tokenizer-batch-timeout 1 -
--enable-tokenizer-batch-encode 0 -
--disable-tokenizer-batch-decode 0 -
--debug-tensor-dump-output-folder 1 -
--debug-tensor-dump-layers + -
--debug-tensor-dump-input-file 1 -
--enable-memory-saver 0 !sleep:~
--enable-weights-cpu-backup 0 !sleep:~
--enable-draft-weights-cpu-backup 0 !sleep:~
--enable-custom-logit-processor 0 -
--enable-return-hidden-states 0 !aux:~
--return-hidden-states-mode 1 !aux
--enable-return-routed-experts 0 !aux:~
--enable-return-indexer-topk 0 !aux:~
--sampling-mask-max-tokens 1 !aux:4096
--disable-outlines-disk-cache 0 -
--enable-mis 0 !runner:~
--weight-cache-mode 1 !offload:off
--weight-cache-socket 1 !offload
--weight-cache-timeout 1 -
--forward-hooks 1 !runner
--msprobe-dump-config 1 -
--ple-offload-embedding,~--no-ple-offload-embedding 0 !offload
--ple-offload-backend 1 !offload:pinned
--ple-offload-dir 1 !offload
--disaggregation-enable-kv-checksum 0 !disagg:~
--enable-pd-role-switch 0 !disagg:~
--speculative-domino-candidate-pool-size 1 !spec:2048
--flashinfer-a2a-dispatch-type 1 !a2a
--cuda-graph-max-seq-len-prefill 1 =fraction_dependent
--prefill-kv-cache-dequant-dtype 1 !kv:auto
--dsv4-attn-backend 1 !kernels:auto
--otlp-service-name 1 -
--hicache-host-memory-fraction 1 !hicache:0.8
--enable-linker-mla-dedup 0 -
--swa-prefix-tails 1 !kv
--enable-encoder-swa-bounded-replay 0 !mm:~
--enable-decoder-swa-bounded-replay,~--no-enable-decoder-swa-bounded-replay 0 !kv
--enable-response-store 0 -
--disaggregation-decode-host-receive-threshold 1 !disagg:1.0
--qsa-indexer-dtype 1 !kv:auto
--disaggregation-decode-allocation-policy 1 !disagg:early
--speculative-use-block-verification 0 !spec:~
--speculative-draft-sink-size 1 !spec
--disable-aiter-allreduce-fusion-in-prefill 0 !allreduce:~
--disable-aiter-allreduce-fusion-in-decode 0 !allreduce:~
--enable-amd-monokernel 0 !kernels:~
--dsa-triton-union 1 !kernels:0
--enable-dsa-fused-indexer,~--no-enable-dsa-fused-indexer 0 !kernels
--enable-watermark 0 -
--watermark-config 1 -
--grpc-response-timeout-secs 1 -
--enable-paged-experts 0 !offload:~
--paged-experts-num-resident 1 !offload
--enable-nvidia-megakernel 0 !kernels:~
--enable-megamoe-for-layernorm-sp 0 !kernels:~
--enable-http-worker-reuseport 0 -
--prefill-decode-interval-min-bs 1 -
--unified-cache-external-linker-config 1 !hicache
--enable-return-aux-hidden-states 0 !aux:~
--return-aux-hidden-state-layer-ids + !aux
--sampling-backend 1 !kernels
--reasoning-parser 1 -
--tool-call-parser 1 -
--kv-canary-real-data 1 !kv:none
--config 1 !configfile
--disable-cuda-graph 0 =fraction_dependent
--enable-dp-attention 0 =dp_attention
--monokernel-backend 1 !kernels
--enable-flashinfer-allreduce-fusion 0 !allreduce:~
"""

# llama.cpp 0c1e57098: common/arg.cpp common_params_parser_init (s: LLAMA_EXAMPLE_SERVER, c: LLAMA_EXAMPLE_CLI)
TABLES["llamacpp"] = """
-h,--help,--usage 0 - sc
--version 0 - sc
-cl,--cache-list 0 - sc
--completion-bash 0 - sc
-t,--threads 1 - sc
-tb,--threads-batch 1 - sc
-C,--cpu-mask 1 - sc
-Cr,--cpu-range 1 - sc
--cpu-strict 1 - sc
--prio 1 - sc
--poll 1 - sc
-Cb,--cpu-mask-batch 1 - sc
-Crb,--cpu-range-batch 1 - sc
--cpu-strict-batch 1 - sc
--prio-batch 1 - sc
--poll-batch 1 - sc
-lcs,--lookup-cache-static 1 - s
-lcd,--lookup-cache-dynamic 1 - s
-c,--ctx-size 1 =flag:--ctx-size:int sc
--kv-unified-per-slot 1 !kv s
-n,--predict,--n-predict 1 - sc
-b,--batch-size 1 =flag:--batch-size:int sc
-ub,--ubatch-size 1 =flag:--max-num-batched-tokens:int sc
--keep 1 - sc
--swa-full 0 =pair:--swa-full/ sc
-ctxcp,--ctx-checkpoints,--swa-checkpoints 1 !kv sc
-cms,--checkpoint-min-step 1 - s
-cram,--cache-ram 1 - sc
-kvu,--kv-unified,~-no-kvu,~--no-kv-unified 0 =pair:--kv-unified/--no-kv-unified s
--cache-idle-slots,~--no-cache-idle-slots 0 - s
--context-shift,~--no-context-shift 0 - sc
-fa,--flash-attn 1 =flag:--flash-attn sc
--perf,~--no-perf 0 - sc
-e,--escape,~--no-escape 0 - sc
-r,--reverse-prompt 1 - sc
-sp,--special 0 - sc
--warmup,~--no-warmup 0 - sc
--spm-infill 0 - s
--samplers 1 - sc
-s,--seed 1 - sc
--sampler-seq,--sampling-seq 1 - sc
--ignore-eos 0 - sc
--temp,--temperature 1 - sc
--top-k 1 - sc
--top-p 1 - sc
--min-p 1 - sc
--top-nsigma,--top-n-sigma 1 - sc
--xtc-probability 1 - sc
--xtc-threshold 1 - sc
--typical,--typical-p 1 - sc
--repeat-last-n 1 - sc
--repeat-penalty 1 - sc
--presence-penalty 1 - sc
--frequency-penalty 1 - sc
--dry-multiplier 1 - sc
--dry-base 1 - sc
--dry-allowed-length 1 - sc
--dry-penalty-last-n 1 - sc
--dry-sequence-breaker 1 - sc
--adaptive-target 1 - sc
--adaptive-decay 1 - sc
--dynatemp-range 1 - sc
--dynatemp-exp 1 - sc
--mirostat 1 - sc
--mirostat-lr 1 - sc
--mirostat-ent 1 - sc
-l,--logit-bias 1 - sc
--grammar 1 - sc
--grammar-file 1 - sc
-j,--json-schema 1 - sc
-jf,--json-schema-file 1 - sc
-bs,--backend-sampling 0 !sampler sc
--pooling 1 !runner s
--rope-scaling 1 !rope sc
--rope-scale 1 !rope sc
--rope-freq-base 1 !rope sc
--rope-freq-scale 1 !rope sc
--yarn-orig-ctx 1 !rope sc
--yarn-ext-factor 1 !rope sc
--yarn-attn-factor 1 !rope sc
--yarn-beta-slow 1 !rope sc
--yarn-beta-fast 1 !rope sc
-kvo,--kv-offload,~-nkvo,~--no-kv-offload 0 !offload:+ sc
--repack,~-nr,~--no-repack 0 - sc
--no-host 0 !offload sc
-ctk,--cache-type-k 1 =flag:--cache-type-k sc
-ctv,--cache-type-v 1 =flag:--cache-type-v sc
-dt,--defrag-thold 1 - sc
-np,--parallel 1 =flag:--parallel:int sc
-cb,--cont-batching,~-nocb,~--no-cont-batching 0 - s
-mm,--mmproj 1 !mm sc
-mmu,--mmproj-url 1 !mm sc
--mmproj-auto,~--no-mmproj,~--no-mmproj-auto 0 - sc
--mmproj-offload,~--no-mmproj-offload 0 - sc
-mmdev,--mmproj-device 1 - sc
--image-min-tokens 1 !mm sc
--image-max-tokens 1 !mm sc
--mtmd-batch-max-tokens 1 !mm s
--video-fps 1 !mm sc
--video-timestamp-interval 1 !mm sc
--video-ffmpeg-dir 1 !mm sc
--rpc 1 !devices sc
-lm,--load-mode 1 - sc
-lzm,--lazy-mode 1 - sc
--numa 1 - sc
-dev,--device 1 !devices sc
--list-devices 0 - sc
-ot,--override-tensor 1 !offload sc
-cmoe,--cpu-moe 0 !offload sc
-ncmoe,--n-cpu-moe 1 !offload:0 sc
-ncffn,--n-cpu-ffn 1 !offload:0 sc
-ngl,--gpu-layers,--n-gpu-layers 1 =ngl sc
-sm,--split-mode 1 !devices:layer|none sc
-ts,--tensor-split 1 !devices sc
-mg,--main-gpu 1 - sc
-fit,--fit 1 =fit sc
-fitt,--fit-target 1 !fit:1024 sc
-fitc,--fit-ctx 1 !fit:4096 sc
--check-tensors 0 - sc
--override-kv 1 !config sc
--op-offload,~--no-op-offload 0 !offload:+ sc
--lora 1 !lora sc
--lora-scaled 1 !lora sc
--control-vector 1 !lora sc
--control-vector-scaled 1 !lora sc
--control-vector-layer-range 2 !lora sc
-a,--alias 1 - s
--tags 1 - s
-m,--model 1 =model sc
-mu,--model-url 1 !remote sc
-dr,--docker-repo 1 !remote sc
-hf,-hfr,--hf-repo 1 !remote sc
-hff,--hf-file 1 !remote sc
-hft,--hf-token 1 - sc
--embd-normalize 1 - s
--host 1 - s
--port 1 - s
--reuse-port 0 - s
--path 1 - s
--cors-origins 1 - s
--cors-methods 1 - s
--cors-headers 1 - s
--cors-credentials,~--no-cors-credentials 0 - s
--api-prefix 1 - s
--ui-config,--webui-config 1 - s
--ui-config-file,--webui-config-file 1 - s
--ui-mcp-proxy,--webui-mcp-proxy,~--no-ui-mcp-proxy,~--no-webui-mcp-proxy 0 - s
--tools 1 - s
--tools-runtime 1 - s
--mcp-servers-config 1 - s
--mcp-servers-json 1 - s
-ag,--agent,~-no-ag,~--no-agent 0 - s
--ui,--webui,~--no-ui,~--no-webui 0 - s
--embedding,--embeddings 0 !runner s
--rerank,--reranking 0 !runner s
--api-key 1 - s
--api-key-file 1 - s
--ssl-key-file 1 - s
--ssl-cert-file 1 - s
--chat-template-kwargs 1 - sc
-to,--timeout 1 - s
--sse-ping-interval 1 - s
--threads-http 1 - s
--cache-prompt,~--no-cache-prompt 0 - s
--cache-reuse 1 - s
--metrics 0 - s
--props 0 - s
--slots,~--no-slots 0 - s
--slot-save-path 1 - s
--media-path 1 - s
--models-dir 1 !router s
--models-preset 1 !router s
--models-max 1 !router s
--models-autoload,~--no-models-autoload 0 - s
--jinja,~--no-jinja 0 - sc
--reasoning-format 1 - sc
-rea,--reasoning 1 - sc
--reasoning-effort 1 - sc
--reasoning-budget 1 - sc
--reasoning-budget-message 1 - sc
--reasoning-preserve,~--no-reasoning-preserve 0 - sc
--chat-template 1 - sc
--chat-template-file 1 - sc
--skip-chat-parsing,~--no-skip-chat-parsing 0 - sc
--prefill-assistant,~--no-prefill-assistant 0 - s
-sps,--slot-prompt-similarity 1 - s
--lora-init-without-apply 0 !lora s
--sleep-idle-seconds 1 - s
--log-disable 0 - sc
--log-file 1 - sc
--log-jsonl,~--no-log-jsonl 0 - sc
--log-prompts-dir 1 - sc
--log-colors 1 - sc
-v,--verbose,--log-verbose 0 - sc
--offline 0 - sc
-lv,--verbosity,--log-verbosity 1 - sc
--log-prefix,~--no-log-prefix 0 - sc
--log-timestamps,~--no-log-timestamps 0 - sc
--spec-draft-hf,-hfd,-hfrd,--hf-repo-draft 1 !spec sc
--spec-draft-threads,-td,--threads-draft 1 - sc
--spec-draft-threads-batch,-tbd,--threads-batch-draft 1 - sc
--spec-draft-cpu-mask,-Cd,--cpu-mask-draft 1 - sc
--spec-draft-cpu-range,-Crd,--cpu-range-draft 1 - sc
--spec-draft-cpu-strict,--cpu-strict-draft 1 - sc
--spec-draft-prio,--prio-draft 1 - sc
--spec-draft-poll,--poll-draft 1 - sc
--spec-draft-cpu-mask-batch,-Cbd,--cpu-mask-batch-draft 1 - sc
--spec-draft-cpu-strict-batch,--cpu-strict-batch-draft 1 - sc
--spec-draft-prio-batch,--prio-batch-draft 1 - sc
--spec-draft-poll-batch,--poll-batch-draft 1 - sc
--spec-draft-type-k,-ctkd,--cache-type-k-draft 1 !spec sc
--spec-draft-type-v,-ctvd,--cache-type-v-draft 1 !spec sc
--spec-draft-override-tensor,-otd,--override-tensor-draft 1 !spec sc
--spec-draft-cpu-moe,-cmoed,--cpu-moe-draft 0 !spec sc
--spec-draft-n-cpu-moe,--spec-draft-ncmoe,-ncmoed,--n-cpu-moe-draft 1 !spec sc
--spec-draft-n-max 1 !spec sc
--spec-draft-n-min 1 !spec sc
--spec-synth-len 1 !spec sc
--spec-synth-rates 1 !spec sc
--spec-draft-p-split,--draft-p-split 1 !spec sc
--spec-draft-p-min,--draft-p-min 1 !spec sc
--spec-draft-backend-sampling,~--no-spec-draft-backend-sampling 0 !spec sc
--spec-draft-device,-devd,--device-draft 1 !spec sc
--spec-draft-ngl,-ngld,--gpu-layers-draft,--n-gpu-layers-draft 1 !spec sc
--spec-draft-model,-md,--model-draft 1 !spec sc
--spec-type 1 !spec sc
--spec-ngram-mod-n-min 1 !spec sc
--spec-ngram-mod-n-max 1 !spec sc
--spec-ngram-mod-n-match 1 !spec sc
--spec-ngram-simple-size-n 1 !spec sc
--spec-ngram-simple-size-m 1 !spec sc
--spec-ngram-simple-min-hits 1 !spec sc
--spec-ngram-map-k-size-n 1 !spec sc
--spec-ngram-map-k-size-m 1 !spec sc
--spec-ngram-map-k-min-hits 1 !spec sc
--spec-ngram-map-k4v-size-n 1 !spec sc
--spec-ngram-map-k4v-size-m 1 !spec sc
--spec-ngram-map-k4v-min-hits 1 !spec sc
--draft,--draft-n,--draft-max 1 !spec sc
--draft-min,--draft-n-min 1 !spec sc
--spec-ngram-size-n 1 !spec s
--spec-ngram-size-m 1 !spec s
--spec-ngram-min-hits 1 !spec s
--embd-gemma-default 0 !preset s
--fim-qwen-1.5b-default 0 !preset s
--fim-qwen-3b-default 0 !preset s
--fim-qwen-7b-default 0 !preset s
--fim-qwen-7b-spec 0 !preset s
--fim-qwen-14b-spec 0 !preset s
--fim-qwen-30b-default 0 !preset s
--gpt-oss-20b-default 0 !preset sc
--gpt-oss-120b-default 0 !preset sc
--vision-gemma-4b-default 0 !preset sc
--vision-gemma-12b-default 0 !preset sc
--spec-default 0 !preset sc
--server-base 1 !serverbase c
--verbose-prompt 0 - c
--display-prompt,~--no-display-prompt 0 - c
-co,--color 1 - c
-p,--prompt 1 - c
-sys,--system-prompt 1 - c
--show-timings,~--no-show-timings 0 - c
-f,--file 1 - c
-sysf,--system-prompt-file 1 - c
-bf,--binary-file 1 - c
-st,--single-turn 0 - c
-mli,--multiline-input 0 - c
--image,--audio,--video 1 !mm c
-o,--output,--output-file 1 - c
--simple-io 0 - c
"""

# TensorRT-LLM tensorrt_llm/commands/serve.py `serve` (stored version 00209af1)
TABLES["trtllm"] = """
--tokenizer 1 -
--custom_tokenizer 1 -
--host 1 -
--port 1 -
--backend 1 !backend:pytorch
--custom_module_dirs 1 !config
--log_level 1 -
--max_beam_width 1 !beam:1
--max_batch_size 1 =flag:--max-batch-size:int
--max_num_tokens 1 =flag:--max-num-batched-tokens:int
--max_seq_len 1 =flag:--max-model-len:int
--tensor_parallel_size,--tp_size 1 =flag:--tp:int
--pipeline_parallel_size,--pp_size 1 =flag:--pp:int
--context_parallel_size,--cp_size 1 !cp:1
--moe_expert_parallel_size,--ep_size 1 !ep
--moe_cluster_parallel_size,--cluster_size 1 !ep:1
--gpus_per_node 1 -
--free_gpu_memory_fraction,--kv_cache_free_gpu_memory_fraction 1 =flag:--gpu-memory-utilization:frac
--num_postprocess_workers 1 -
--trust_remote_code 0 -
--revision 1 =revision
--config,--extra_llm_api_options 1 !configfile
--reasoning_parser 1 -
--tool_parser 1 -
--metadata_server_config_file 1 -
--server_role 1 -
--fail_fast_on_attention_window_too_large 0 -
--otlp_traces_endpoint 1 -
--disagg_cluster_uri 1 -
--enable_chunked_prefill 0 !chunked
--media_io_kwargs 1 -
--chat_template 1 -
"""
