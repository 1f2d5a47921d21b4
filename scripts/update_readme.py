"""Re-run every ```console block of README.md and docs/*.md and write its current output back
(tests/test_readme.py checks they agree). Usage: python scripts/update_readme.py"""

from __future__ import annotations

import contextlib
import io
import re
import shlex
from pathlib import Path

from kvplan.cli import run

ROOT = Path(__file__).resolve().parent.parent
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def refresh(match: re.Match) -> str:
    first = match.group(1).split("\n", 1)[0]
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        run(shlex.split(first[2:])[1:])
    out = "\n".join(line.rstrip() for line in buf.getvalue().strip("\n").splitlines())
    return f"```console\n{first}\n{out}\n```"


if __name__ == "__main__":
    for page in PAGES:
        text = page.read_text()
        new = re.sub(r"```console\n(.*?)```", refresh, text, flags=re.S)
        if new != text:
            page.write_text(new)
            print(f"updated {page.relative_to(ROOT)}")
