"""Plant known bugs in a temporary copy of the tree and check that the test suite catches each one.

Usage (by hand; CI does not run it):

    .venv/bin/python scripts/mutation_check.py            # every planted bug
    .venv/bin/python scripts/mutation_check.py --only gib  # the bugs whose name contains "gib"
    .venv/bin/python scripts/mutation_check.py --list      # what would be planted, nothing run

The tree (without .git, .venv and caches) is copied to a temporary folder once. The tests each bug is
meant to trip are run first on the unchanged copy (they must pass there, or the check says so); then, one
bug at a time, the copy's file is changed by an exact text replacement, those tests run (``pytest -x``,
in the copy, importing the copy's kvplan), and the file is put back. A bug is *caught* when the tests fail.
The working tree is never touched.

Exit status: 0 when every bug was planted and caught; 1 when one was missed, could not be planted (its
text is not in the file any more: update MUTANTS), or its tests fail without it.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
IGNORE = shutil.ignore_patterns(".git", ".venv", "__pycache__", ".pytest_cache", ".ruff_cache", "*.pyc", "*.egg-info")


@dataclass(frozen=True)
class Mutant:
    """One planted bug: in ``path``, the text ``old`` (found exactly once) becomes ``new``."""

    name: str
    path: str
    old: str
    new: str
    tests: tuple[str, ...]
    what: str


KNOWN = "tests/test_known_values.py"
MUTANTS = (
    Mutant(
        "fit-json-gib-1e9",
        "kvplan/render.py",
        'd["kv_budget_gib"] = r.kv_budget_bytes / GIB',
        'd["kv_budget_gib"] = r.kv_budget_bytes / 10**9',
        (KNOWN,),
        "fit --json kv_budget_gib divided by 10^9 instead of 2^30",
    ),
    Mutant(
        "gpus-json-gib-1e9",
        "kvplan/render.py",
        '"cuda_total_gib": gpu.cuda_total_bytes / GIB,',
        '"cuda_total_gib": gpu.cuda_total_bytes / 10**9,',
        (KNOWN, "tests/test_gpus.py"),
        "gpus --json cuda_total_gib divided by 10^9 instead of 2^30",
    ),
    Mutant(
        "one-request-budget-gt",
        "kvplan/fit.py",
        "if budget >= per_request else 0",
        "if budget > per_request else 0",
        (KNOWN,),
        "fit (sglang, trtllm, llama.cpp): a budget of exactly one request holds none (>= became >)",
    ),
    Mutant(
        "one-request-blocks-gt-vllm",
        "kvplan/fit.py",
        "if per_request and usable >= per_request and unique > 0:",
        "if per_request and usable > per_request and unique > 0:",
        (KNOWN,),
        "fit (vLLM): a pool of exactly one request's blocks holds none (>= became >)",
    ),
    Mutant(
        "units-gib-1e9",
        "kvplan/units.py",
        "GIB = 1 << 30",
        "GIB = 10**9",
        (KNOWN, "tests/test_calc.py"),
        "GIB = 10^9 in units.py",
    ),
    Mutant(
        "calc-k-without-v",
        "kvplan/calc.py",
        "return kv_dtype.row_bytes(h * layer.head_dim, h) + kv_dtype.row_bytes(h * layer.v_head_dim, h)",
        "return kv_dtype.row_bytes(h * layer.head_dim, h)",
        (KNOWN, "tests/test_calc.py"),
        "the factor 2 of K and V dropped: only K counted",
    ),
    Mutant(
        "calc-window-ignored",
        "kvplan/calc.py",
        "tokens = seq_len if window is None else min(seq_len, window)",
        "tokens = seq_len",
        (KNOWN, "tests/test_calc.py"),
        "sliding/chunked layers cache every token: min(S, window) became S",
    ),
    Mutant(
        "fleet-exact-budget-refused",
        "kvplan/fleet.py",
        "if unique + prefix > fit.kv_budget_bytes:",
        "if unique + prefix >= fit.kv_budget_bytes:",
        (KNOWN, "tests/test_fleet.py"),
        "fleet refuses a request of exactly the budget (> became >=)",
    ),
    Mutant(
        "fleet-cost-float",
        "kvplan/fleet.py",
        "cost = None if price is None else float(exact_usd(price) * gpus)",
        "cost = None if price is None else gpus * float(price)",
        ("tests/test_fleet.py",),
        "fleet cost in float arithmetic (388.44000000000005)",
    ),
    Mutant(
        "gpus-reserve-dropped",
        "kvplan/gpus.py",
        "return self.smi_total_bytes - self.reserve_bytes",
        "return self.smi_total_bytes",
        ("tests/test_gpus.py",),
        "the estimated CUDA total ignores the driver's reserve",
    ),
    Mutant(
        "plot-first-model-budgets",
        "kvplan/plot.py",
        "r = plan_fit(spec, g, opts)",
        "r = plan_fit(specs[0], g, opts)",
        ("tests/test_plot.py",),
        "plot draws every model with the first model's KV budgets",
    ),
    Mutant(
        "verify-q4-nibbles-swapped",
        "kvplan/verify.py",
        "parts.append((qi[:, :16] & 15) | ((qi[:, 16:] & 15) << 4))",
        "parts.append((qi[:, 16:] & 15) | ((qi[:, :16] & 15) << 4))",
        ("tests/test_verify.py::test_ggml_rows_are_bit_for_bit_llama_cpps",),
        "verify packs q4_0/q4_1/q5_x values into the wrong nibbles",
    ),
)


def run_tests(tree: Path, tests: tuple[str, ...]) -> tuple[bool, str]:
    """(passed, last lines of output) of ``pytest -x -q tests`` in ``tree``, importing the tree's kvplan."""
    env = dict(os.environ, PYTHONPATH=str(tree), PYTHONDONTWRITEBYTECODE="1")
    cmd = [sys.executable, "-m", "pytest", "-x", "-q", "-p", "no:cacheprovider", *tests]
    p = subprocess.run(cmd, cwd=tree, env=env, capture_output=True, text=True, timeout=1800)
    tail = "\n".join((p.stdout + p.stderr).strip().splitlines()[-3:])
    return p.returncode == 0, tail


def check_imports_copy(tree: Path) -> None:
    """Stop unless ``import kvplan`` in the copy finds the copy (not an installed kvplan)."""
    env = dict(os.environ, PYTHONPATH=str(tree))
    code = "import kvplan, sys; print(kvplan.__file__)"
    out = subprocess.run([sys.executable, "-c", code], cwd=tree, env=env, capture_output=True, text=True).stdout
    if not out.strip().startswith(str(tree)):
        sys.exit(f"mutation_check: kvplan imports from {out.strip()!r}, not the copy in {tree}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--only", help="plant only the bugs whose name contains this text")
    ap.add_argument("--list", action="store_true", help="list the bugs and their tests; run nothing")
    ap.add_argument("--keep", action="store_true", help="keep the temporary copy (its path is printed)")
    args = ap.parse_args()
    mutants = [m for m in MUTANTS if not args.only or args.only in m.name]
    if not mutants:
        print(f"no planted bug matches {args.only!r}", file=sys.stderr)
        return 1
    if args.list:
        for m in mutants:
            print(f"{m.name:28} {m.path:18} {m.what}  [{' '.join(m.tests)}]")
        return 0

    tmp = Path(tempfile.mkdtemp(prefix="kvplan-mutants-"))
    tree = tmp / "tree"
    shutil.copytree(ROOT, tree, ignore=IGNORE)
    check_imports_copy(tree)
    results: list[tuple[Mutant, str, str]] = []
    try:
        baseline: dict[tuple[str, ...], tuple[bool, str]] = {}
        for m in mutants:
            if m.tests not in baseline:
                baseline[m.tests] = run_tests(tree, m.tests)
        for m in mutants:
            ok, tail = baseline[m.tests]
            if not ok:
                results.append((m, "TESTS FAIL UNMUTATED", tail))
                continue
            f = tree / m.path
            original = f.read_text()
            if original.count(m.old) != 1:
                results.append((m, "NOT PLANTED", f"{m.old!r} occurs {original.count(m.old)} times in {m.path}"))
                continue
            f.write_text(original.replace(m.old, m.new))
            t0 = time.perf_counter()
            try:
                passed, tail = run_tests(tree, m.tests)
            finally:
                f.write_text(original)
            verdict = "MISSED" if passed else "caught"
            results.append((m, verdict, f"{time.perf_counter() - t0:.1f} s; {tail.splitlines()[-1] if tail else ''}"))
            print(f"{verdict:8} {m.name}", file=sys.stderr, flush=True)
    finally:
        if args.keep:
            print(f"copy kept in {tree}", file=sys.stderr)
        else:
            shutil.rmtree(tmp, ignore_errors=True)

    width = max(len(m.name) for m, _, _ in results)
    print(f"{'planted bug':{width}}  {'result':20}  what")
    for m, verdict, detail in results:
        print(f"{m.name:{width}}  {verdict:20}  {m.what}")
        print(f"{'':{width}}  {'':20}  {m.path}; tests: {' '.join(m.tests)}; {detail}")
    caught = sum(v == "caught" for _, v, _ in results)
    print(f"{caught} of {len(results)} planted bugs caught")
    return 0 if caught == len(results) else 1


if __name__ == "__main__":
    sys.exit(main())
