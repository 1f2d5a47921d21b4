"""The engine start-up log corpus (tests/fixtures/engine_logs/*.yaml): schema, provenance and parsing checks.

Each entry quotes real log lines from a public source (an issue, a pull request, a page or a stored file)
and lists the figures of those lines under ``printed``. These tests keep the corpus usable as calibration
data: every entry has the schema's keys and no others, names a source, quotes at least one line, and every
number under ``printed`` occurs in the quoted lines (so a figure cannot drift from the text it was read
from). ``model_ref`` must load with the project's own loader. INDEX.md must match the entries.
"""

from __future__ import annotations

import math
import re
import sys
from pathlib import Path

import pytest
import yaml

try:  # the project's loader: kvplan.loader on main after the layering change, kvplan.specs before it
    from kvplan.loader import load_model
except ImportError:  # pragma: no cover - older tree
    from kvplan.loader import load_model

ROOT = Path(__file__).resolve().parent.parent
LOGS = ROOT / "tests" / "fixtures" / "engine_logs"
FILES = sorted(LOGS.glob("*.yaml"))
ENTRIES = {p.stem: yaml.safe_load(p.read_text(encoding="utf-8")) for p in FILES}

KEYS = {
    "id",
    "source",
    "engine",
    "engine_version",
    "engine_version_evidence",
    "engine_generation",
    "model",
    "model_ref",
    "checkpoint",
    "gpu",
    "gpu_count",
    "settings",
    "lines",
    "printed",
    "trimmed",
    "notes",
}
SOURCE_KEYS = {"repo", "number", "kind", "url", "where"}
ENGINES = {"vllm", "sglang", "trtllm", "llamacpp"}
# 'file': a stored public file whose repository and address were not recorded (three entries converted
# from tests/fixtures/engine_calibration.yaml); every other kind must give its address.
KINDS = {"issue", "pr", "discussion", "page", "file"}
NUMBER = re.compile(r"-?\d+(?:,\d{3})*(?:\.\d+)?")


def _numbers(lines: list[str]) -> set[float]:
    return {float(m.replace(",", "")) for line in lines for m in NUMBER.findall(line)}


def _printed_numbers(value: object) -> list[float]:
    if isinstance(value, bool) or value is None or isinstance(value, str):
        return []
    if isinstance(value, (int, float)):
        return [float(value)]
    if isinstance(value, list):
        return [x for v in value for x in _printed_numbers(v)]
    raise AssertionError(f"printed value {value!r} is not a number, a string or a list")


def test_corpus_size_and_engines():
    assert len(ENTRIES) >= 60
    assert {e["engine"] for e in ENTRIES.values()} == ENGINES


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.stem)
def test_entry_schema(path: Path):
    e = ENTRIES[path.stem]
    assert set(e) == KEYS, f"{path.name}: keys {sorted(set(e) ^ KEYS)} differ from the schema"
    assert e["id"] == path.stem
    assert e["engine"] in ENGINES
    if e["engine"] == "vllm":
        assert e["engine_generation"] in {"v0", "v1"}
    else:
        assert e["engine_generation"] is None
    assert e["engine_version"] is None or isinstance(e["engine_version"], str)
    assert isinstance(e["engine_version_evidence"], str) and e["engine_version_evidence"]
    assert set(e["checkpoint"]) == {"quantization", "notes"}
    assert e["gpu_count"] is None or (isinstance(e["gpu_count"], int) and e["gpu_count"] >= 1)
    assert isinstance(e["settings"], dict)
    assert isinstance(e["trimmed"], bool)
    lines = e["lines"]
    assert isinstance(lines, list) and lines and all(isinstance(s, str) and s.strip() for s in lines)


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.stem)
def test_entry_source(path: Path):
    src = ENTRIES[path.stem]["source"]
    assert set(src) == SOURCE_KEYS
    assert src["kind"] in KINDS
    assert isinstance(src["where"], str) and src["where"]
    if src["kind"] == "file":
        return
    url = src["url"]
    assert isinstance(url, str) and url.startswith("https://"), f"{path.name}: no source URL"
    if src["kind"] in {"issue", "pr"}:
        part = "issues" if src["kind"] == "issue" else "pull"
        assert url.split("#")[0] == f"https://github.com/{src['repo']}/{part}/{src['number']}"


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.stem)
def test_printed_figures_occur_in_lines(path: Path):
    e = ENTRIES[path.stem]
    assert isinstance(e["printed"], dict), (
        f"{path.name}: printed must be a mapping (empty when the lines carry no figure)"
    )
    seen = _numbers(e["lines"])
    for key, value in e["printed"].items():
        for x in _printed_numbers(value):
            assert any(math.isclose(x, y, rel_tol=0, abs_tol=1e-9) for y in seen), (
                f"{path.name}: printed.{key} = {x} does not occur in the quoted lines"
            )


def test_ids_unique():
    ids = [e["id"] for e in ENTRIES.values()]
    assert len(ids) == len(set(ids))


@pytest.mark.parametrize("ref", sorted({e["model_ref"] for e in ENTRIES.values() if e["model_ref"]}), ids=str)
def test_model_ref_loads(ref: str):
    target = ROOT / ref if ref.startswith("tests/") else ref
    spec = load_model(str(target))
    assert spec.num_layers == len(spec.layers) > 0


def test_calibration_cases_are_in_the_corpus():
    calibration = yaml.safe_load((ROOT / "tests" / "fixtures" / "engine_calibration.yaml").read_text())
    assert {c["id"] for c in calibration} <= set(ENTRIES)


def test_index_is_current():
    sys.path.insert(0, str(ROOT / "scripts"))
    try:
        import engine_logs_index
    finally:
        sys.path.pop(0)
    assert (LOGS / "INDEX.md").read_text(encoding="utf-8") == engine_logs_index.render(engine_logs_index.load_entries())
