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

Exit status: 0 when every bug was planted and caught; 1 when one was missed or its tests fail without it;
2, before anything runs, when a bug cannot be planted: its text is not in its file exactly once (the code
changed: update that row of MUTANTS, the one table of texts), the message naming the bug.
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
        "kvplan/engines/base.py",
        "fits = fits & (cap >= d)",
        "fits = fits & (cap > d)",
        (KNOWN,),
        "fit (every engine's count_requests): a pool of exactly one request holds none (>= became >)",
    ),
    Mutant(
        "one-request-blocks-null-block-vllm",
        "kvplan/engines/vllm.py",
        "return (n - 1 if self.rules.null_block else n,)",
        "return (n,)",
        (KNOWN,),
        "fit (vLLM): the null block is not held back, so a pool of exactly one request's blocks holds one",
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
        "return kv_dtype.row_bytes(h * layer.head_dim, h) + (v_dtype or kv_dtype).row_bytes(h * layer.v_head_dim, h)",
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
        "if any(d > cap for d, cap in zip(demand, pool_caps, strict=True)):",
        "if any(d >= cap for d, cap in zip(demand, pool_caps, strict=True)):",
        (KNOWN, "tests/test_fleet.py"),
        "fleet refuses a request of exactly the budget (> became >=)",
    ),
    Mutant(
        "fleet-cost-float",
        "kvplan/fleet.py",
        "cost = None if price is None else float(exact_usd(price) * gpus)  # exact: 2.49 × 112 = 278.88",
        "cost = None if price is None else gpus * float(price)  # exact: 2.49 × 112 = 278.88",
        ("tests/test_fleet.py::test_cost_is_exact_decimal_and_reason_null",),
        "fleet's layout cost in float arithmetic (104 GPUs × $2.49 = 258.96000000000004)",
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
    Mutant(
        "fleet-packs-whole-budget",
        "kvplan/fleet.py",
        "room = fit.kv_room_bytes",
        "room = fit.kv_budget_bytes",
        (
            "tests/test_fleet.py::test_fleet_counts_requests_against_vllms_room_not_the_whole_budget",
            "tests/test_fleet.py::test_fleet_packs_into_the_pool_less_the_null_block",
        ),
        "fleet packs requests into the whole KV budget, not vLLM's room (requests land in the null block)",
    ),
    Mutant(
        "fleet-ttft-seconds-vs-ms",
        "kvplan/fleet.py",
        "ms = perf.step_bound(spec, fit, hw, [(1, p)], prefill=True).seconds * 1e3\n                if ms > target:",
        "ms = perf.step_bound(spec, fit, hw, [(1, p)], prefill=True).seconds * 1e3\n"
        "                if ms / 1e3 > target:",
        ("tests/test_fleet.py::test_a_ttft_target_in_milliseconds_is_compared_in_milliseconds",),
        "fleet compares a TTFT bound in seconds with --ttft-ms (a missed target is accepted)",
    ),
    Mutant(
        "perf-chunked-reads-every-token",
        "kvplan/perf.py",
        "return min(context, spec.window_of(kind) or context)",
        'return context if kind == "chunked" else min(context, spec.window_of(kind) or context)',
        ("tests/test_perf.py::test_chunked_layers_read_at_most_one_chunk_per_decode_step",),
        "the decode bound reads every cached token in chunked layers (Llama 4's bound about doubles)",
    ),
    Mutant(
        "vllm-sparse-mla-any-dtype",
        "kvplan/engines/vllm.py",
        "        return FP8_DS_MLA_BYTES\n    raise UsageError(",
        "        return FP8_DS_MLA_BYTES\n    return kv_dtype.row_bytes(latent_dim, 1)\n    raise UsageError(",
        ("tests/test_vllm_golden.py::test_deepseek_v32_with_a_cache_no_sparse_backend_takes_is_refused",),
        "vLLM: the sparse-MLA KV dtype refusal removed (DeepSeek-V3.2 with fp8_e5m2 gets a plan)",
    ),
    Mutant(
        "llamacpp-version-prefix-match",
        "kvplan/engines/llamacpp.py",
        'if re.fullmatch(r"b?\\d{1,7}", text) is None',
        'if re.match(r"b?\\d{1,7}", text) is None',
        ("tests/test_fit.py::test_a_llama_cpp_build_number_is_all_of_the_version",),
        "llama.cpp --engine-version read with re.match, not re.fullmatch (b5000x is accepted)",
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

    stale = [(m, (ROOT / m.path).read_text().count(m.old)) for m in mutants]
    stale = [(m, n) for m, n in stale if n != 1]
    for m, n in stale:
        print(
            f"mutation_check: cannot plant {m.name}: its text occurs {n} times in {m.path} (must be once); "
            f"update its row of MUTANTS: {m.old!r}",
            file=sys.stderr,
        )
    if stale:
        return 2

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
