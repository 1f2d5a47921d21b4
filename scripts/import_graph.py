"""Print kvplan's import graph: for each module, the kvplan modules it imports, at module level and inside
functions (``lazy``), and any import cycle (function-level imports count: they run too).

    python scripts/import_graph.py            # a table
    python scripts/import_graph.py --check    # exit 1 on a cycle or a core module importing above the core

The core (:data:`CORE`) must import nothing outside itself; found by reading the source with :mod:`ast`,
nothing is imported.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent / "kvplan"
CORE = {"kvplan.specs", "kvplan.calc", "kvplan.dtypes", "kvplan.units", "kvplan.errors"}


def module_name(path: Path) -> str:
    rel = path.relative_to(ROOT.parent).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def imports(path: Path) -> tuple[set[str], set[str]]:
    """(module-level kvplan imports, imports inside functions) of one file."""
    tree = ast.parse(path.read_text(), str(path))
    top: set[str] = set()
    lazy: set[str] = set()
    me = module_name(path)
    package = me if path.name == "__init__.py" else me.rpartition(".")[0]

    def names(node) -> list[str]:
        if isinstance(node, ast.Import):
            return [a.name for a in node.names]
        if node.level:
            base = package.split(".")
            base = base[: len(base) - node.level + 1]
            mod = ".".join(base + ([node.module] if node.module else []))
        else:
            mod = node.module or ""
        out = []
        for a in node.names:
            full = f"{mod}.{a.name}"
            out.append(
                full
                if (ROOT.parent / Path(*full.split("."))).with_suffix(".py").exists()
                or (ROOT.parent / Path(*full.split("."))).is_dir()
                else mod
            )
        return out

    def visit(node, in_function: bool) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.Import, ast.ImportFrom)):
                for n in names(child):
                    if n.startswith("kvplan") and n != me:
                        (lazy if in_function else top).add(n)
            elif isinstance(child, ast.Call) and getattr(child.func, "id", "") == "__import__":
                continue
            visit(child, in_function or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)))

    visit(tree, False)
    return top, lazy - top


def graph() -> dict[str, tuple[set[str], set[str]]]:
    return {module_name(p): imports(p) for p in sorted(ROOT.rglob("*.py"))}


def cycles(g: dict[str, tuple[set[str], set[str]]]) -> list[list[str]]:
    """Strongly connected components (size > 1) of the import graph, function-level imports included (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []
    counter = [0]

    def edges(m: str) -> set[str]:
        top, lazy = g.get(m, (set(), set()))
        top = {t for t in top | lazy if t in g}
        if m != "kvplan":  # importing kvplan.x runs kvplan/__init__ first: not an edge of interest
            top.discard("kvplan")
        return top

    def strong(v: str) -> None:
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in edges(v):
            if w not in index:
                strong(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    sys.setrecursionlimit(10000)
    for v in g:
        if v not in index:
            strong(v)
    return out


def main(argv: list[str]) -> int:
    g = graph()
    short = lambda s: ", ".join(sorted(x.removeprefix("kvplan.") for x in s)) or "-"  # noqa: E731
    print(f"{'module':28} {'imports (module level)':60} lazy")
    for m, (top, lazy) in g.items():
        print(f"{m.removeprefix('kvplan.'):28} {short(top):60} {short(lazy)}")
    bad = 0
    for comp in cycles(g):
        print("cycle:", " <-> ".join(x.removeprefix("kvplan.") for x in comp))
        bad += 1
    for m in sorted(CORE):
        top, lazy = g.get(m, (set(), set()))
        above = {x for x in top | lazy if x not in CORE and x != "kvplan"}
        if above:
            print(f"core module {m} imports above the core: {short(above)}")
            bad += 1
    return 1 if bad and "--check" in argv else 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
