"""Calibrate kvplan's speed estimate on published measurements, and regenerate its validation table.

    PYTHONPATH=. python scripts/calibrate_speed.py            # fit, write kvplan/data/speed_estimate.py and
                                                             # the table of docs/throughput-validation.md
    PYTHONPATH=. python scripts/calibrate_speed.py --check    # exit 1 if either file is not what it would write
    PYTHONPATH=. python scripts/calibrate_speed.py --loo      # also the leave-one-out error (slow: one fit per row)

The measurements are tests/fixtures/throughput_measurements.yaml (each with its source). The estimate's
parameters (:class:`kvplan.perf.Efficiency`): per engine, the fractions of peak bandwidth and FLOP/s, the fixed
microseconds per decoder layer, per MoE layer and per TP all-reduce; per GPU class, a factor on the fractions
and one on the fixed costs (NVIDIA Hopper = 1). They minimize the sum of squared log errors (estimate /
measured), with a weak pull of each parameter toward its start (so that what no measurement identifies stays
at a neutral value), by coordinate descent in log space over bounded ranges, from the same bytes and FLOPs kvplan's
figures use (:func:`kvplan.speedcheck.cost_terms`; tests check that the fast path equals kvplan.perf).

The limit (MBU = MFU = 1) takes no part: it is checked, not fitted.
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path
from statistics import median

from kvplan import speedcheck
from kvplan.perf import Efficiency

ROOT = Path(__file__).resolve().parent.parent
FIXTURE = ROOT / "tests/fixtures/throughput_measurements.yaml"
DATA = ROOT / "kvplan/data/speed_estimate.py"
DOC = ROOT / "docs/throughput-validation.md"
ENGINES = ("vllm", "sglang", "trtllm", "llamacpp", "gpt-fast")
CLASSES = ("amd", "nvidia-ampere", "nvidia-ada", "nvidia-blackwell")
# (name, low, high, start): per-engine parameters; the fixed costs are in µs
ENGINE_PARAMS = (("mbu", 0.1, 1.0, 0.7), ("mfu", 0.1, 1.0, 0.5), ("layer_us", 0.1, 2000.0, 20.0),
                 ("moe_layer_us", 0.1, 2000.0, 50.0), ("collective_us", 0.1, 500.0, 10.0))  # fmt: skip
CLASS_PARAMS = (("efficiency", 0.2, 2.0, 1.0), ("fixed", 0.2, 10.0, 1.0))
SWEEPS = 12
PRIOR = 0.05  # weight of the pull of each parameter toward its start (log space): what no row identifies stays put
# launches cost tens of µs per layer, and prefill runs near half the FLOP/s peak: strong pulls keep a slow MoE
# engine's time in its MoE term rather than in every layer and every prefill
PRIORS = {"layer_us": 1.0, "mfu": 1.0}


def keys() -> list[tuple]:
    out = [("engine", e, p) for e in ENGINES for p, *_ in ENGINE_PARAMS]
    out += [("class", c, p) for c in CLASSES for p, *_ in CLASS_PARAMS]
    return out


def bounds(key: tuple) -> tuple[float, float, float]:
    table = ENGINE_PARAMS if key[0] == "engine" else CLASS_PARAMS
    return next((lo, hi, start) for p, lo, hi, start in table if p == key[2])


def efficiency(params: dict, engine: str, cls: str) -> Efficiency:
    """The estimate's efficiencies for an engine on a GPU class (as kvplan.perf.estimate_efficiency builds them)."""
    e = {p: params[("engine", engine, p)] for p, *_ in ENGINE_PARAMS}
    f = params.get(("class", cls, "efficiency"), 1.0)
    g = params.get(("class", cls, "fixed"), 1.0)
    return Efficiency("estimate", "", min(1.0, e["mbu"] * f), min(1.0, e["mfu"] * f), 1.0, e["layer_us"] * g,
                      e["moe_layer_us"] * g, e["collective_us"] * g, 0.0)  # fmt: skip


def engine_of(t) -> str:
    return t.m.engine if t.m.engine in ENGINES else "gpt-fast"


def loss(params: dict, terms: list) -> float:
    total = sum(PRIORS.get(k[2], PRIOR) * math.log(v / bounds(k)[2]) ** 2 for k, v in params.items())
    for t in terms:
        _, est = speedcheck.figures_from_terms(t, efficiency(params, engine_of(t), t.gpu_class))
        total += math.log(est / t.m.measured) ** 2
    return total


def fit(terms: list, sweeps: int = SWEEPS) -> dict:
    """Coordinate descent in log space: each parameter in turn by golden-section search over its range."""
    params = {k: bounds(k)[2] for k in keys()}
    used_engines = {engine_of(t) for t in terms}
    used_classes = {t.gpu_class for t in terms}
    used = {("engine", e) for e in used_engines} | {("class", c) for c in used_classes}
    free = [k for k in keys() if k[:2] in used]
    phi = (math.sqrt(5) - 1) / 2
    for _ in range(sweeps):
        for k in free:
            lo, hi, _ = bounds(k)
            a, b = math.log(lo), math.log(hi)

            def f(x: float, k: tuple = k) -> float:
                params[k] = math.exp(x)
                return loss(params, terms)

            c, d = b - phi * (b - a), a + phi * (b - a)
            fc, fd = f(c), f(d)
            for _ in range(28):
                if fc < fd:
                    b, d, fd = d, c, fc
                    c = b - phi * (b - a)
                    fc = f(c)
                else:
                    a, c, fc = c, d, fd
                    d = a + phi * (b - a)
                    fd = f(d)
            params[k] = math.exp((a + b) / 2)
    return params


def errors(params: dict, terms: list) -> list[float]:
    out = []
    for t in terms:
        _, est = speedcheck.figures_from_terms(t, efficiency(params, engine_of(t), t.gpu_class))
        out.append(est / t.m.measured - 1)
    return out


def calibration_source(params: dict, n: int, mae: float, loo: float | None) -> str:
    def r(x: float) -> float:
        return float(f"{x:.4g}")

    lines = [
        '"""The speed estimate\'s calibration (:func:`kvplan.perf.estimate_efficiency`). Written by',
        "``scripts/calibrate_speed.py`` from tests/fixtures/throughput_measurements.yaml; do not edit by hand.",
        '"""',
        "",
        "CALIBRATION = {",
        f'    "measurements": {n},',
        f'    "median_abs_error": {r(mae)},',
        f'    "loo_median_abs_error": {None if loo is None else r(loo)},',
        '    "engines": {',
    ]
    pooled = {p: median(params[("engine", e, p)] for e in ENGINES) for p, *_ in ENGINE_PARAMS}
    per_engine = [(e, {p: params[("engine", e, p)] for p, *_ in ENGINE_PARAMS}) for e in ENGINES]
    for name, vals in [*per_engine, ("*", pooled)]:
        body = ", ".join(f'"{p}": {r(v)}' for p, v in vals.items())
        lines.append(f'        "{name}": {{')
        lines.append(f"            {body},")
        lines.append('            "link": 1.0, "step_us": 0.0,')
        lines.append("        },")
    lines.append("    },")
    lines.append('    "gpu_classes": {')
    lines.append('        "nvidia-hopper": {"efficiency": 1.0, "fixed": 1.0},')
    for c in CLASSES:
        lines.append(f'        "{c}": {{"efficiency": {r(params[("class", c, "efficiency")])}, '
                     f'"fixed": {r(params[("class", c, "fixed")])}}},')  # fmt: skip
    lines.append('        "*": {"efficiency": 1.0, "fixed": 1.0},')
    lines.append("    },")
    lines.append("}")
    return "\n".join(lines) + "\n"


SUMMARY_START = "<!-- summary: scripts/calibrate_speed.py -->"
SUMMARY_END = "<!-- end of summary -->"


def summary(derived: list, params: dict, loo: float | None) -> list[str]:
    """The summary of docs/throughput-validation.md: the limit check, the estimate's error, its parameters."""
    n = len(derived)
    closest = max(derived, key=lambda d: d.of_limit)
    mae = median(abs(d.error) for d in derived)
    out = [
        f"- **The limit holds on all {n} measurements**: none beats it. The closest is `{closest.m.id}` at "
        f"{closest.of_limit:.3f} of the limit; the median measurement reaches "
        f"{median(d.of_limit for d in derived):.2f} of it.",
        f"- **median |error| of the estimate: {mae:.1%}** on the {n} measurements it was calibrated on"
        + ("" if loo is None else f" (leave-one-out, each row predicted by a calibration without it: {loo:.1%})")
        + f"; 90th percentile {sorted(abs(d.error) for d in derived)[int(0.9 * (n - 1))]:.0%}.",
    ]
    for label, group in (("engine", lambda d: d.m.engine), ("metric", lambda d: d.m.metric)):
        parts = []
        for key in sorted({group(d) for d in derived}):
            rows = [d for d in derived if group(d) == key]
            parts.append(f"{key} {median(abs(d.error) for d in rows):.0%} ({len(rows)})")
        out.append(f"- median |error| by {label}: " + ", ".join(parts) + ".")
    out += [
        "",
        "The calibrated estimate (`kvplan/data/speed_estimate.py`):",
        "",
        "| engine | MBU | MFU | µs per layer | µs per MoE layer | µs per all-reduce |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for e in ENGINES:
        v = [params[("engine", e, p)] for p, *_ in ENGINE_PARAMS]
        out.append(f"| {e} | {v[0]:.2f} | {v[1]:.2f} | {v[2]:.1f} | {v[3]:.1f} | {v[4]:.1f} |")
    out += [
        "",
        "| GPU class | factor on MBU and MFU | factor on fixed costs |",
        "|---|---:|---:|",
        "| nvidia-hopper | 1 | 1 |",
    ]
    for c in CLASSES:
        out.append(f"| {c} | {params[('class', c, 'efficiency')]:.2f} | {params[('class', c, 'fixed')]:.2f} |")
    return out


def doc_with_summary(doc: str, lines: list[str]) -> str:
    head, _, rest = doc.partition(SUMMARY_START)
    _, _, tail = rest.partition(SUMMARY_END)
    return head + SUMMARY_START + "\n" + "\n".join(lines) + "\n" + SUMMARY_END + tail


TABLE_START = "<!-- table: scripts/calibrate_speed.py -->"
TABLE_END = "<!-- end of table -->"


def doc_with_table(doc: str, rows: list[str]) -> str:
    head, _, rest = doc.partition(TABLE_START)
    _, _, tail = rest.partition(TABLE_END)
    header = [
        "| # | source | model (kvplan spec) | GPU × TP | weights / KV | N | prompt/output | metric (scope) | "
        "measured | limit | estimate | of limit | estimate error |",
        "|---:|---|---|---|---|---:|---:|---|---:|---:|---:|---:|---:|",
    ]
    return head + TABLE_START + "\n" + "\n".join(header + rows) + "\n" + TABLE_END + tail


def render(params: dict, ms: list, setups: list, loo: float | None) -> tuple[str, str]:
    """(kvplan/data/speed_estimate.py, docs/throughput-validation.md) for ``params``: the stated median error is
    the one the written (rounded) parameters give, row by row through kvplan.perf."""
    import kvplan.data.speed_estimate as module

    saved = module.CALIBRATION
    try:
        source = calibration_source(params, len(ms), 0.0, loo)
        for _ in range(2):  # once for the error of the written parameters, once with it stated
            namespace: dict = {}
            exec(source, namespace)  # noqa: S102 - the text this script writes
            module.CALIBRATION = namespace["CALIBRATION"]
            derived = [speedcheck.derive(m, s=s) for m, s in zip(ms, setups, strict=True)]
            source = calibration_source(params, len(ms), median(abs(d.error) for d in derived), loo)
        doc = doc_with_table(DOC.read_text(), speedcheck.Table(derived).markdown())
        return source, doc_with_summary(doc, summary(derived, params, loo))
    finally:
        module.CALIBRATION = saved


def stated_loo() -> float | None:
    """The leave-one-out error kvplan/data/speed_estimate.py states (kept when --loo is not given)."""
    marker = '"loo_median_abs_error": '
    text = DATA.read_text() if DATA.exists() else ""
    if marker not in text:
        return None
    value = text.split(marker, 1)[1].split(",", 1)[0].strip()
    return None if value == "None" else float(value)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="exit 1 if the written files would change")
    ap.add_argument("--loo", action="store_true", help="also compute the leave-one-out median |error| (slow)")
    ap.add_argument("--rows", action="store_true", help="print each measurement's error")
    args = ap.parse_args(argv)
    ms = speedcheck.load_measurements(FIXTURE)
    setups = [speedcheck.setup(m) for m in ms]
    terms = [speedcheck.cost_terms(m, s) for m, s in zip(ms, setups, strict=True)]
    params = fit(terms)
    if args.rows:
        for m, e in zip(ms, errors(params, terms), strict=True):
            print(f"  {m.id:52s} {e:+.0%}")
    loo = stated_loo()
    if args.loo:
        out = []
        for i in range(len(terms)):
            p = fit(terms[:i] + terms[i + 1 :], sweeps=6)
            out.append(abs(errors(p, [terms[i]])[0]))
            print(f"  leave-one-out {i + 1}/{len(terms)}: {ms[i].id} {out[-1]:.2f}", file=sys.stderr)
        loo = median(out)
    source, doc = render(params, ms, setups, loo)
    mae = source.split('"median_abs_error": ', 1)[1].split(",", 1)[0]
    tail = "" if loo is None else f", leave-one-out {loo:.1%}"
    print(f"{len(ms)} measurements; median |error| {float(mae):.1%}{tail}")
    if args.check:
        return 0 if DATA.read_text() == source and DOC.read_text() == doc else 1
    DATA.write_text(source)
    DOC.write_text(doc)
    return 0


if __name__ == "__main__":
    sys.exit(main())
