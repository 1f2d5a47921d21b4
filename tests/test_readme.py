"""Keep the README and docs/ true: every ```console block runs, and prints what the page shows."""

from __future__ import annotations

import re
import shlex

import pytest

from .conftest import ROOT

README = (ROOT / "README.md").read_text()
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def _cases():
    for page in PAGES:
        for block in re.findall(r"```console\n(.*?)```", page.read_text(), flags=re.S):
            first, _, rest = block.partition("\n")
            assert first.startswith("$ kvplan "), f"{page.name}: {first}"
            yield pytest.param(shlex.split(first[2:])[1:], rest, id=f"{page.name}: {first[2:]}")


@pytest.mark.parametrize("argv, expected", list(_cases()))
def test_readme_console_block(cli, argv, expected):
    code, out, err = cli(*argv)
    assert code == 0, err

    def norm(text: str) -> str:
        return "\n".join(line.rstrip() for line in text.strip("\n").splitlines())

    assert norm(out) == norm(expected)


def test_readme_has_the_two_setup_commands():
    assert ".venv/bin/kvplan estimate llama3-8b --seq 4096" in README
    ci = (ROOT / ".ci" / "run").read_text()
    test_cmd = next(line for line in README.splitlines() if "pytest" in line and line.startswith("python3 -m venv"))
    assert test_cmd in ci


def test_readme_is_short():
    # issue 20: a README read in five minutes; the rest lives in docs/
    assert len(README) <= 12_000


def test_readme_links_resolve():
    for link in re.findall(r"\]\((docs/[^)#]+)", README):
        assert (ROOT / link).is_file(), link


def test_docs_links_resolve_from_their_own_folder():
    # docs/sweep.md linked its figure as docs/kv-vs-context.png, which from docs/ is docs/docs/...: broken
    for page in PAGES:
        for link in re.findall(r"\]\(([^)#\s]+)", page.read_text()):
            if not link.startswith(("http://", "https://", "mailto:")):
                assert (page.parent / link).exists(), f"{page.name}: {link}"


def test_docs_name_no_path_of_this_machine():
    # docs/engines-llamacpp.md told readers to run /work/main/.venv/bin/python, a path only the authors had
    for page in PAGES:
        assert "/work/" not in page.read_text(), page.name
