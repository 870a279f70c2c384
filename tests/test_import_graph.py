"""The package's module-level import graph has no circle.

Every module of ``gpytorch_explain`` is parsed with :mod:`ast` (nothing is imported). An edge ``A -> B`` means that
executing ``A``'s module body imports ``B``:

* ``import p.q.r`` and ``from p.q import r`` give an edge to ``p.q.r`` when that is a module of the package, else to
  ``p.q`` (``r`` is then a name defined or re-exported by ``p.q``: a package ``__init__`` counts as a module of its
  own, so a re-export is an edge from the ``__init__`` that re-exports, and an edge *to* it from whoever imports the
  name from the package);
* importing ``p.q.r`` also runs the ``__init__`` of every enclosing package ``p``, ``p.q`` that does not enclose
  ``A`` itself (those are already being initialised when ``A`` runs), so those are edges too;
* relative imports are resolved against ``A``'s package; imports inside functions and under ``if TYPE_CHECKING:``
  are ignored (they run later, or never).

A circle in this graph is an order-dependent import: e.g. a submodule that imports a name from its own package's
``__init__``, which imports that submodule back.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1] / "gpytorch_explain"
PACKAGE = "gpytorch_explain"


def _modules() -> dict[str, Path]:
    mods = {}
    for path in sorted(ROOT.rglob("*.py")):
        parts = list(path.relative_to(ROOT.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        mods[".".join(parts)] = path
    return mods


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _module_level_imports(body: list[ast.stmt]):
    """Import statements executed when the module body runs (not inside functions / TYPE_CHECKING blocks)."""
    for node in body:
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            yield node
        elif isinstance(node, ast.If):
            if not _is_type_checking(node.test):
                yield from _module_level_imports(node.body)
            yield from _module_level_imports(node.orelse)
        elif isinstance(node, ast.Try):
            for block in (node.body, node.orelse, node.finalbody, *(h.body for h in node.handlers)):
                yield from _module_level_imports(block)
        elif isinstance(node, (ast.With, ast.ClassDef)):
            yield from _module_level_imports(node.body)


def _ancestors(name: str) -> list[str]:
    parts = name.split(".")
    return [".".join(parts[:i]) for i in range(1, len(parts))]


def import_graph() -> dict[str, set[str]]:
    mods = _modules()
    graph: dict[str, set[str]] = {m: set() for m in mods}
    for name, path in mods.items():
        is_pkg = path.name == "__init__.py"
        own_pkg = name if is_pkg else name.rpartition(".")[0]
        targets: set[str] = set()
        for node in _module_level_imports(ast.parse(path.read_text(), filename=str(path)).body):
            if isinstance(node, ast.Import):
                targets.update(alias.name for alias in node.names)
                continue
            if node.level:
                base_parts = own_pkg.split(".")
                base = ".".join(base_parts[: len(base_parts) - (node.level - 1)])
                source = f"{base}.{node.module}" if node.module else base
            else:
                source = node.module or ""
            for alias in node.names:
                sub = f"{source}.{alias.name}"
                targets.add(sub if sub in mods else source)
        for target in targets:
            if target != PACKAGE and not target.startswith(PACKAGE + "."):
                continue
            while target not in mods:  # ``import pkg.missing`` -> the nearest existing module
                target = target.rpartition(".")[0]
            for node in [*_ancestors(target), target]:
                if node != name and node not in _ancestors(name):
                    graph[name].add(node)
    return graph


def find_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """One cycle per strongly connected component with more than one module (or a self-loop), Tarjan's algorithm."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[list[str]] = []
    counter = [0]

    def visit(v: str) -> None:
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1 or v in graph[v]:
                components.append(comp)

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return [_cycle_in(graph, set(comp)) for comp in components]


def _cycle_in(graph: dict[str, set[str]], comp: set[str]) -> list[str]:
    """An explicit cycle through the component's smallest module (breadth-first, so a shortest one)."""
    start = min(comp)
    parents: dict[str, str] = {}
    frontier = [start]
    while frontier:
        nxt = []
        for v in frontier:
            for w in sorted(graph[v] & comp):
                if w == start:
                    path = [v]
                    while path[-1] != start:
                        path.append(parents[path[-1]])
                    return [*reversed(path), start]
                if w not in parents:
                    parents[w] = v
                    nxt.append(w)
        frontier = nxt
    return [start, start]


def _fmt(cycle: list[str]) -> str:
    return " -> ".join(cycle)


def test_graph_sees_known_edges():
    graph = import_graph()
    assert "gpytorch_explain.attribution" in graph["gpytorch_explain"]
    assert "gpytorch_explain.attribution.derived" in graph["gpytorch_explain.kernels.derived_kernel"]
    # importing attribution.derived from kernels/ runs attribution/__init__ first
    assert "gpytorch_explain.attribution" in graph["gpytorch_explain.kernels.derived_kernel"]
    # a sibling import does not count the (already initialising) parent package
    assert "gpytorch_explain.attribution" not in graph["gpytorch_explain.attribution.posterior"]


def test_cycle_finder_reports_a_circle():
    graph = {"p": {"p.a"}, "p.a": {"p.b"}, "p.b": {"p"}, "q": {"p"}}
    assert find_cycles(graph) == [["p", "p.a", "p.b", "p"]]
    assert find_cycles({"a": {"b"}, "b": set()}) == []


#: the part of the package this test holds to "no circle" unconditionally; a circle elsewhere (models/, kernels/,
#: operators/ are restructured separately) is reported as an expected failure listing it
STRICT = ("gpytorch_explain.attribution",)


def test_no_import_cycles():
    cycles = find_cycles(import_graph())
    strict = [c for c in cycles if any(m == s or m.startswith(s + ".") for m in c for s in STRICT)]
    assert not strict, "import circles:\n" + "\n".join(_fmt(c) for c in strict)
    if cycles:
        pytest.xfail("import circles outside attribution/:\n" + "\n".join(_fmt(c) for c in cycles))
