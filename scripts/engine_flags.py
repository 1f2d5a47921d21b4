"""Write one engine's section of tests/fixtures/engine_flags.json: every flag its own argument parser accepts.

The engines' parsers, at the versions kvplan models (each run with the interpreter that has the engine)::

    /work/venvs/vllm/bin/python scripts/engine_flags.py vllm        # vLLM 0.33.0 (see scripts/vllm_golden.py)
    /work/venvs/sglang/bin/python scripts/engine_flags.py sglang    # SGLang 0.5.23 (see scripts/sglang_golden.py)
    python3 scripts/engine_flags.py llamacpp --source .../llama.cpp # llama.cpp's common/arg.cpp, read as text

- vLLM: ``vllm.entrypoints.common.cli_args.make_arg_parser(FlexibleArgumentParser())``, the parser of
  ``vllm serve`` and of ``python -m vllm.entrypoints.openai.api_server`` (``launchers/api_server/entry.py
  main``); the CUDA-only extension modules are stubbed by importing scripts/vllm_resolve.py first.
- SGLang: ``ServerArgs.add_cli_args(argparse.ArgumentParser())``, the parser of ``sglang serve`` and
  ``python -m sglang.launch_server`` (``srt/server_args.py prepare_server_args``); CUDA-only packages are
  stubbed as scripts/sglang_golden.py stubs them.
- llama.cpp: every ``add_opt(common_arg(...))`` of ``common/arg.cpp`` with its option strings (``args``, and
  ``args_neg`` for the boolean form), how many values its handler takes (the lambda's parameters), and
  whether llama-server (``LLAMA_EXAMPLE_SERVER``) and llama-cli (``LLAMA_EXAMPLE_CLI``) get it, by the
  filter of ``common_params_parser_init``'s ``add_opt``: in the example, or in ``LLAMA_EXAMPLE_COMMON``,
  and not excluded.

An argparse flag is written as ``{"options": [visible option strings], "accepted": [every string the parser
maps to it], "negatives": [the strings that set it false], "takes": N, "dest": name}``; ``takes`` is 0 for a
switch, 1 for one value, or argparse's ``nargs`` ("?", "+", "*"). TensorRT-LLM's section (``trtllm-serve``,
click options) was transcribed by hand from ``tensorrt_llm/commands/serve.py`` (the repository is too large to
fetch here, so no script reads it); it says which stored version.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "tests" / "fixtures" / "engine_flags.json"
sys.path.insert(0, str(Path(__file__).resolve().parent))


def _argparse_flags(parser: argparse.ArgumentParser) -> tuple[list[dict], list[str]]:
    """(flags, positional dests) of an argparse parser, in the parser's order."""
    accepted: dict[int, list[str]] = {}
    for s, action in parser._option_string_actions.items():
        accepted.setdefault(id(action), []).append(s)
    flags, positionals = [], []
    for a in parser._actions:
        if not a.option_strings:
            positionals.append(a.dest)
            continue
        if isinstance(a, argparse._HelpAction):
            continue
        negs = getattr(a, "negative_option_strings", None)
        if negs is None:
            negs = {s for s in accepted[id(a)] if s.startswith("--no-")} if isinstance(
                a, argparse.BooleanOptionalAction) else set()  # fmt: skip
        if a.nargs == 0 or isinstance(a, argparse.BooleanOptionalAction):
            takes: int | str = 0
        elif a.nargs is None:
            takes = 1
        else:
            takes = a.nargs
        flags.append(
            {
                "options": list(a.option_strings),
                "accepted": sorted(accepted[id(a)]),
                "negatives": sorted(negs),
                "takes": takes,
                "dest": a.dest,
            }
        )
    return flags, positionals


def vllm_section() -> dict:
    import importlib

    importlib.import_module("vllm_resolve")  # first: the CUDA platform stand-ins every vLLM module reads
    import vllm
    from vllm.entrypoints.common.cli_args import make_arg_parser
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    flags, positionals = _argparse_flags(make_arg_parser(FlexibleArgumentParser()))
    return {
        "version": vllm.__version__,
        "source": "vllm/entrypoints/common/cli_args.py make_arg_parser (FrontendArgs + AsyncEngineArgs.add_cli_args)",
        "commands": ["vllm serve MODEL", "python -m vllm.entrypoints.openai.api_server --model MODEL"],
        "positionals": positionals,
        "flags": flags,
    }


def sglang_section() -> dict:
    import sglang_golden

    sglang_golden.import_sglang("cuda")
    import sglang
    from sglang.srt.server_args import ServerArgs

    parser = argparse.ArgumentParser(prog="sglang serve")
    ServerArgs.add_cli_args(parser)
    flags, positionals = _argparse_flags(parser)
    return {
        "version": sglang.__version__,
        "source": "sglang/srt/server_args.py ServerArgs.add_cli_args (prepare_server_args)",
        "commands": ["python -m sglang.launch_server --model-path MODEL", "sglang serve [--model-path] MODEL"],
        "positionals": positionals,
        "flags": flags,
    }


# --- llama.cpp: common/arg.cpp read as text ---------------------------------------------------------------

_STRING = re.compile(r'"(?:[^"\\]|\\.)*"')


def _without_comments(text: str, blank_strings: bool = False) -> str:
    """C++ source with ``//`` and ``/* */`` comments removed (string and char literals respected); with
    ``blank_strings``, every string literal also emptied (so a ``[`` or ``(`` in help text is not code)."""
    out, i, n = [], 0, len(text)
    while i < n:
        if text.startswith("//", i):
            i = text.find("\n", i)
            i = n if i < 0 else i
        elif text.startswith("/*", i):
            i = text.index("*/", i) + 2
        elif text[i] in "\"'":
            q, j = text[i], i + 1
            while text[j] != q:
                j += 2 if text[j] == "\\" else 1
            out.append(q + q if blank_strings and q == '"' else text[i : j + 1])
            i = j + 1
        else:
            out.append(text[i])
            i += 1
    return "".join(out)


def _call_end(code: str, open_paren: int) -> int:
    """Index of the parenthesis that closes the one at ``open_paren`` (in code without literals)."""
    depth = 0
    for i in range(open_paren, len(code)):
        if code[i] == "(":
            depth += 1
        elif code[i] == ")":
            depth -= 1
            if depth == 0:
                return i
    raise ValueError("unbalanced parentheses")


_LIST = re.compile(r"\s*\{((?:\s*\"[^\"]*\"\s*,?)*)\s*\}")


def _brace_list(text: str, i: int) -> tuple[list[str] | None, int]:
    """The string literals of a ``{"a", "b"}`` list at ``i`` (after whitespace), and the index after it."""
    m = _LIST.match(text, i)
    if not m:
        return None, i
    return [s[1:-1] for s in _STRING.findall(m.group(1))], m.end()


def _examples(expr: str, named: dict[str, list[str]]) -> list[str]:
    expr = expr.strip()
    return re.findall(r"LLAMA_EXAMPLE_\w+", expr) if expr.startswith("{") else named[expr]


def llamacpp_options(source: str) -> list[dict]:
    """Every ``add_opt(common_arg(...))`` of arg.cpp: args, args_neg, values taken, examples, excludes."""
    text = _without_comments(source)
    code = _without_comments(text, blank_strings=True)  # the same calls, found again: offsets differ
    named = {
        m.group(1): re.findall(r"LLAMA_EXAMPLE_\w+", m.group(2))
        for m in re.finditer(r"static std::initializer_list<enum llama_example> (\w+) = \{([^}]*)\}", text)
    }
    starts_text = [m.end() for m in re.finditer(r"add_opt\(common_arg\(", text)]
    starts_code = [m.end() for m in re.finditer(r"add_opt\(common_arg\(", code)]
    assert len(starts_text) == len(starts_code)
    out = []
    for t0, c0 in zip(starts_text, starts_code, strict=True):
        args, i = _brace_list(text, t0)
        neg = None
        if args is not None and text[i:].lstrip().startswith(","):
            neg, _ = _brace_list(text, text.index(",", i) + 1)
        inner = _call_end(code, c0 - 1)  # the ')' closing common_arg(
        outer = _call_end(code, c0 - len("common_arg(") - 1)  # the ')' closing add_opt(
        lam = re.compile(r"\[[^\]]*\]\s*\(([^)]*)\)").search(code, c0, inner)
        params = [p for p in lam.group(1).split(",") if p.strip()] if lam else []
        tail = code[inner + 1 : outer]
        ex = re.search(r"\.set_examples\((\{[^}]*\}|\w+)\)", tail)
        exc = re.search(r"\.set_excludes\((\{[^}]*\}|\w+)\)", tail)
        out.append(
            {
                "args": args,
                "args_neg": neg or [],
                "takes": 0 if neg is not None else max(0, len(params) - 1),
                "examples": _examples(ex.group(1), named) if ex else ["LLAMA_EXAMPLE_COMMON"],
                "excludes": _examples(exc.group(1), named) if exc else [],
            }
        )
    return out


def llamacpp_section(source_dir: Path) -> dict:
    text = (source_dir / "common" / "arg.cpp").read_text(encoding="utf-8")
    options = llamacpp_options(text)

    def tool(example: str) -> list[dict]:
        flags, seen = [], set()
        for o in options:  # an option defined twice (arg.cpp's `if (ex == LLAMA_EXAMPLE_SERVER)`): the first
            key = tuple(o["args"])
            if key in seen:
                continue
            if (example in o["examples"] or "LLAMA_EXAMPLE_COMMON" in o["examples"]) and example not in o["excludes"]:
                seen.add(key)
                flags.append({"options": o["args"], "negatives": o["args_neg"], "takes": o["takes"]})
        return flags

    commit = None
    head = source_dir / ".git"
    if head.exists():
        import subprocess

        commit = (
            subprocess.run(
                ["git", "-C", str(source_dir), "rev-parse", "HEAD"], capture_output=True, text=True, check=False
            ).stdout.strip()
            or None
        )
    return {
        "version": commit,
        "source": "common/arg.cpp common_params_parser_init (add_opt filter: the example, or LLAMA_EXAMPLE_COMMON, "
        "unless excluded); names: '--' args have '_' read as '-' (common_params_parse_ex)",
        "commands": ["llama-server -m MODEL.gguf", "llama-cli -m MODEL.gguf"],
        "tools": {"llama-server": tool("LLAMA_EXAMPLE_SERVER"), "llama-cli": tool("LLAMA_EXAMPLE_CLI")},
    }


def write(data: dict, path: Path) -> None:
    """The fixture as JSON with one flag per line (diffs stay readable)."""

    def flag_lists(section: dict) -> dict:
        lists = {"flags": section["flags"]} if "flags" in section else section["tools"]
        return {k: [json.dumps(f, sort_keys=True) for f in v] for k, v in lists.items()}

    lines = ["{"]
    for n, (engine, section) in enumerate(sorted(data.items())):
        lines.append(f"  {json.dumps(engine)}: {{")
        head = {k: v for k, v in section.items() if k not in ("flags", "tools")}
        for k, v in sorted(head.items()):
            lines.append(f"    {json.dumps(k)}: {json.dumps(v)},")
        groups = flag_lists(section)
        inner = "    " if "flags" in section else "      "
        if "tools" in section:
            lines.append('    "tools": {')
        for g, (name, rows) in enumerate(sorted(groups.items())):
            lines.append(f"{inner}{json.dumps(name)}: [")
            lines.extend(f"{inner}  {r}," for r in rows[:-1])
            lines.append(f"{inner}  {rows[-1]}")
            lines.append(f"{inner}]" + ("," if g < len(groups) - 1 else ""))
        if "tools" in section:
            lines.append("    }")
        lines.append("  }" + ("," if n < len(data) - 1 else ""))
    lines.append("}")
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("engine", choices=["vllm", "sglang", "llamacpp"])
    ap.add_argument("--source", type=Path, help="llama.cpp source tree (for llamacpp)")
    ap.add_argument("--out", type=Path, default=OUT)
    a = ap.parse_args()
    if a.engine == "vllm":
        section = vllm_section()
    elif a.engine == "sglang":
        section = sglang_section()
    else:
        if a.source is None:
            ap.error("llamacpp needs --source (a llama.cpp tree)")
        section = llamacpp_section(a.source)
    data = json.loads(a.out.read_text(encoding="utf-8")) if a.out.exists() else {}
    data[a.engine] = section
    write(data, a.out)
    n = sum(len(v) for v in section["tools"].values()) if "tools" in section else len(section["flags"])
    print(f"{a.out}: {a.engine} {section['version']}: {n} flags", file=sys.stderr)


if __name__ == "__main__":
    main()
