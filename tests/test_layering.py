"""The house's layering (issue 20): no import circle in kvplan/, and the core imports nothing above it.

Read from the source by scripts/import_graph.py (ast, function-level imports included): a circle of lazy
imports is still a circle."""

from __future__ import annotations

import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _graph_module():
    spec = importlib.util.spec_from_file_location("import_graph", ROOT / "scripts" / "import_graph.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_no_import_cycle():
    g = _graph_module()
    assert g.cycles(g.graph()) == []


def test_core_imports_nothing_above_it():
    g = _graph_module()
    graph = g.graph()
    for m in sorted(g.CORE):
        top, lazy = graph[m]
        assert {x for x in top | lazy if x not in g.CORE} == set(), m


def test_the_graph_sees_a_lazy_import(tmp_path):
    # the checker itself: an import inside a function counts (specs importing render did, before)
    g = _graph_module()
    top, lazy = g.imports(ROOT / "kvplan" / "cli.py")
    assert "kvplan.loader" in lazy and "kvplan.errors" in top


def test_fit_holds_no_engine_rule():
    # fit.py composes the engines' answers: it names no engine module and branches on no engine
    text = (ROOT / "kvplan" / "fit.py").read_text()
    for name in ("Engine.vllm", "Engine.sglang", "Engine.trtllm", "Engine.llamacpp", "engines.vllm", "engines.sglang",
                 "engines.trtllm", "engines.llamacpp", '== "vllm"', '== "trtllm"', '== "sglang"', '== "llamacpp"'):  # fmt: skip
        assert name not in text, name
