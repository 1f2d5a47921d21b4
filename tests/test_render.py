"""The plain console (kvplan.render.PlainConsole) prints what rich prints off a terminal.

Piped or redirected, kvplan's lines and tables are written without rich's console (start-up time, see
docs/development.md); whatever it does not handle goes to rich. Every command's text output is compared with
the rich Console's on the same inputs: the expected text is rich's, the layout library kvplan printed with.
"""

from __future__ import annotations

import io
from pathlib import Path

import pytest

from kvplan import render

ROOT = Path(__file__).resolve().parent.parent
LOG = ROOT / "tests" / "fixtures" / "engine_logs" / "vllm-06.yaml"

COMMANDS = [
    ["estimate", "llama3-8b", "--seq", "4096"],
    ["estimate", "gemma3-27b", "--seq", "32k", "--batch", "8", "--tp", "2"],
    ["estimate", "llama3-8b", "qwen3-8b", "--seq", "8k"],
    ["models"],
    ["gpus"],
    ["compare", "llama3-8b", "--seq", "8k"],
    ["fit", "llama3-8b", "--gpu", "h100"],
    ["fit", "llama3.1-70b", "--gpu", "h100", "--tp", "4", "--max-model-len", "32k", "--concurrency", "16"],
    ["fit", "gemma3-27b", "--gpu", "h200", "--engine", "sglang", "--max-model-len", "32k"],
    ["fit", "llama3.1-8b", "--gpu", "l40s", "--engine", "trtllm", "--pp", "2"],
    ["fit", "llama3.1-8b", "--gpu", "rtx4090", "--engine", "llamacpp", "--ctx-size", "16384"],
    ["fit", "qwen3-next-80b-a3b", "--gpu", "h200", "--tp", "2", "--shared-prefix", "2k"],
    ["fleet", "llama3-8b", "--concurrency", "64", "--seq", "8k", "--gpu", "h100", "--gpu", "l4"],
    ["sweep", "llama3-8b", "--seq", "4k", "--seq", "32k", "--gpu", "h100", "--gpu", "l4"],
]


def _run(cli, monkeypatch, args, plain: bool):
    if not plain:
        monkeypatch.setattr(render.PlainConsole, "usable", staticmethod(lambda file: False))
    code, out, _ = cli(*args)
    monkeypatch.undo()
    return code, out


@pytest.mark.parametrize("args", COMMANDS, ids=lambda a: " ".join(a[:2]))
def test_plain_output_is_richs(cli, monkeypatch, args):
    plain = _run(cli, monkeypatch, args, plain=True)
    assert plain == _run(cli, monkeypatch, args, plain=False)
    assert plain[1]  # something was printed


def test_from_log_output_is_richs(cli, monkeypatch, tmp_path):
    import yaml

    p = tmp_path / "vllm-06.log"
    p.write_text("\n".join(yaml.safe_load(LOG.read_text())["lines"]) + "\n")
    args = ["fit", "llama3.1-8b", "--from-log", p, "--max-model-len", "64k"]
    assert _run(cli, monkeypatch, args, plain=True) == _run(cli, monkeypatch, args, plain=False)


@pytest.mark.parametrize(
    "obj",
    [
        "plain line",
        "trailing spaces   ",
        "   ",
        "",
        "two\nlines",
        "tab\there",
        "bell\x07",
        "wide 漢字 ≈ ×",
        "[bold]x[/]",
    ],
)
def test_lines_print_as_rich_prints_them(obj):
    from rich.text import Text

    for o in (obj, Text(obj, style="bold")):
        a, b = io.StringIO(), io.StringIO()
        render.PlainConsole(a).print(o)
        render._rich_console(b, render.PIPE_WIDTH).print(o)
        assert a.getvalue() == b.getvalue(), repr(o)


def test_a_table_plain_console_does_not_lay_out_goes_to_rich():
    from rich import box
    from rich.table import Table

    for t in (Table(title="t", box=box.SIMPLE), Table(title="t\x1b[2J"), Table(caption="c")):
        t.add_column("a")
        t.add_column("b", justify="center")
        t.add_row("1", "漢字")
        a, b = io.StringIO(), io.StringIO()
        render.PlainConsole(a).print(t)
        render._rich_console(b, render.PIPE_WIDTH).print(t)
        assert a.getvalue() == b.getvalue()


@pytest.mark.parametrize("args", [a for a in COMMANDS if a[0] in ("estimate", "fit")], ids=lambda a: " ".join(a[:2]))
def test_estimate_and_fit_print_without_richs_console(cli, monkeypatch, args):
    def refuse(out, width):
        raise AssertionError("rich's Console was made")

    monkeypatch.setattr(render, "_rich_console", refuse)
    code, out, err = cli(*args)
    assert code == 0 and out, err
