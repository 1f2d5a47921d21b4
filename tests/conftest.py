"""Shared test helpers: run the CLI in-process and capture its streams and exit code."""

from __future__ import annotations

from pathlib import Path

import pytest

from kvplan.cli import run

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = Path(__file__).resolve().parent / "fixtures"


@pytest.fixture
def cli(capsys):
    """Call ``cli("estimate", "llama3-8b", "--seq", "4096")`` → (exit_code, stdout, stderr)."""

    def _run(*args: str):
        code = run([str(a) for a in args])
        out, err = capsys.readouterr()
        return code, out, err

    return _run
