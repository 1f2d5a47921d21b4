"""kvplan's speed figures beside published measurements (tests/fixtures/throughput_measurements.yaml).

The limit (MBU = MFU = 1) must never be beaten by a measurement; the estimate is calibrated on the same set
(scripts/calibrate_speed.py) and its error is stated in kvplan/data/speed_estimate.py and
docs/throughput-validation.md, which must be what the fixture gives.
"""

from __future__ import annotations

import re
from statistics import median

import pytest

from kvplan import perf, speedcheck
from kvplan.loader import load_bundled

from .conftest import ROOT

FIXTURE = ROOT / "tests/fixtures/throughput_measurements.yaml"
MEASUREMENTS = speedcheck.load_measurements(FIXTURE)
_DERIVED: dict = {}


def derived(m):
    if m.id not in _DERIVED:
        _DERIVED[m.id] = speedcheck.derive(m)
    return _DERIVED[m.id]


@pytest.mark.parametrize("m", MEASUREMENTS, ids=[m.id for m in MEASUREMENTS])
def test_no_measurement_beats_the_limit(m):
    d = derived(m)
    if m.metric == "tps":
        assert m.measured <= d.limit, f"{m.id}: measured {m.measured} tokens/s above the limit {d.limit:.1f}"
    else:
        assert m.measured >= d.limit, f"{m.id}: measured {m.measured} ms below the limit {d.limit:.3f} ms"
    # the estimate assumes no more than the limit does: never faster than it
    assert (d.estimate <= d.limit) if m.metric == "tps" else (d.estimate >= d.limit)


def test_the_set_covers_what_the_issue_asks():
    assert len(MEASUREMENTS) >= 30
    assert {m.engine for m in MEASUREMENTS} >= {"vllm", "sglang", "trtllm", "llamacpp"}
    specs = {m.model: load_bundled(m.model) for m in MEASUREMENTS}
    kinds = set()
    for m in MEASUREMENTS:
        s = specs[m.model]
        kinds.add("mla" if "mla" in s.layer_kinds else "moe" if s.moe is not None else "dense")
    assert kinds == {"dense", "moe", "mla"}
    assert any(m.batch == 1 for m in MEASUREMENTS) and any(m.batch is None for m in MEASUREMENTS)
    vendors = {"amd" if m.gpu.startswith("mi") else "nvidia" for m in MEASUREMENTS}
    assert vendors == {"amd", "nvidia"}
    for m in MEASUREMENTS:
        assert m.source.startswith("https://") and m.version, m.id


def test_the_table_is_what_kvplan_derives():
    doc = (ROOT / "docs/throughput-validation.md").read_text()
    rows = [line for line in doc.splitlines() if re.match(r"\| \d+ \|", line)]
    assert rows == speedcheck.Table([derived(m) for m in MEASUREMENTS]).markdown()


def test_the_stated_error_is_the_measured_one():
    from kvplan.data.speed_estimate import CALIBRATION

    errors = [abs(derived(m).error) for m in MEASUREMENTS]
    assert CALIBRATION["measurements"] == len(MEASUREMENTS)
    assert CALIBRATION["median_abs_error"] == pytest.approx(median(errors), abs=5e-4)
    doc = (ROOT / "docs/throughput-validation.md").read_text()
    assert f"median |error| of the estimate: {CALIBRATION['median_abs_error']:.1%}" in doc


@pytest.mark.parametrize("m", MEASUREMENTS[::7], ids=[m.id for m in MEASUREMENTS[::7]])
def test_the_calibration_fast_path_is_kvplan_perf(m):
    # scripts/calibrate_speed.py evaluates efficiencies from cost terms; they must give kvplan.perf's figures
    s = speedcheck.setup(m)
    terms = speedcheck.cost_terms(m, s)
    for eff in (
        perf.estimate_efficiency(m.engine, s.gpu),
        perf.Efficiency("estimate", "", 0.55, 0.35, 0.8, 17.0, 120.0, 9.0, 3.0),
    ):
        lim, est = speedcheck.figures_from_terms(terms, eff)
        d = speedcheck.derive(m, eff, s)
        assert lim == pytest.approx(d.limit, rel=1e-12) and est == pytest.approx(d.estimate, rel=1e-12)


def test_fixture_is_strict(tmp_path):
    bad = tmp_path / "m.yaml"
    bad.write_text("- {id: a, source: x, engine: vllm, version: '1', model: llama3-8b, gpu: h100, metric: rps, "
                   "scope: run, measured: 1, prompt: 1, output: 1}\n")  # fmt: skip
    with pytest.raises(ValueError, match="metric 'rps'"):
        speedcheck.load_measurements(bad)
