"""The package's import graph: no cycle between packages, the layering rules, and no module of
the algorithm and task packages reaching into another object's private members.

Every module under ``metagen/`` is parsed with :mod:`ast`; every import — at module level or
inside a function, both make the same dependency — is mapped to the top-level node of
``metagen`` it reaches (``metagen.strategies.x`` -> ``strategies``; a top-level module such as
``metagen/types.py`` is its own node ``types``; ``metagen/__init__.py`` is the node ``metagen``).
Nothing is imported: the test reads source text only.
"""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1] / "metagen"
PACKAGE = "metagen"

#: Package cycles tolerated for now, each as the set of its packages, with the reason. Empty:
#: any cycle fails.
ALLOWED_CYCLES: dict[frozenset[str], str] = {}

#: node -> the nodes it must never import (directly or inside a function).
FORBIDDEN: dict[str, set[str]] = {
    "strategies": {"tasks", "eval", "server", "cli"},
    "scorers": {"tasks", "eval", "server", "cli"},
    "engine": {"strategies", "scorers", "tasks", "eval", "server", "cli"},
    "tasks": {"strategies", "scorers"},
}

#: packages whose modules never touch another object's private member (``x._name`` with ``x``
#: not ``self`` or ``cls``): what one module needs of another is public and documented.
NO_PRIVATE_ACCESS = ("answers", "sandbox", "scorers", "strategies", "tasks")

#: leaf modules below the algorithms: node -> the only nodes it may import.
LEAVES: dict[str, set[str]] = {
    "answers": {"errors", "types"},
}

Edges = dict[tuple[str, str], list[str]]


def _module_parts(path: Path, root: Path) -> list[str]:
    parts = [PACKAGE, *path.relative_to(root).with_suffix("").parts]
    return parts[:-1] if parts[-1] == "__init__" else parts


def _node(parts: list[str]) -> str:
    """The graph node of a module path (``["metagen", "strategies", "x"]`` -> ``strategies``)."""
    return parts[1] if len(parts) > 1 else PACKAGE


def _targets(stmt: ast.Import | ast.ImportFrom, parts: list[str], is_package: bool,
             root: Path) -> list[list[str]]:
    """The metagen module paths one import statement reaches (empty for other packages)."""
    if isinstance(stmt, ast.Import):
        names = [alias.name.split(".") for alias in stmt.names]
        return [n for n in names if n[0] == PACKAGE]
    if stmt.level:
        here = parts if is_package else parts[:-1]
        base = here[:len(here) - stmt.level + 1]
        module = base + (stmt.module.split(".") if stmt.module else [])
    else:
        module = stmt.module.split(".") if stmt.module else []
    if not module or module[0] != PACKAGE:
        return []
    if len(module) > 1:
        return [module]
    # ``from metagen import x``: x is a submodule (its own node) or a name of metagen/__init__
    out = []
    for alias in stmt.names:
        sub = root / alias.name
        if sub.is_dir() or sub.with_suffix(".py").is_file():
            out.append([PACKAGE, alias.name])
        else:
            out.append([PACKAGE])
    return out


def import_edges(root: Path = ROOT) -> Edges:
    """``(importer, imported) -> ["metagen/x/y.py:LINE", ...]`` over every module of ``root``,
    self-edges left out."""
    edges: Edges = defaultdict(list)
    for path in sorted(root.rglob("*.py")):
        parts = _module_parts(path, root)
        src = _node(parts)
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        for stmt in ast.walk(tree):
            if not isinstance(stmt, (ast.Import, ast.ImportFrom)):
                continue
            for target in _targets(stmt, parts, path.name == "__init__.py", root):
                dst = _node(target)
                if dst != src:
                    where = f"{path.relative_to(root.parent)}:{stmt.lineno}"
                    edges[(src, dst)].append(where)
    return dict(edges)


def package_cycles(edges: Edges) -> list[list[str]]:
    """The strongly connected components of more than one node (Tarjan), each sorted."""
    graph: dict[str, set[str]] = defaultdict(set)
    for src, dst in edges:
        graph[src].add(dst)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
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
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return sorted(out)


def describe(cycle: list[str], edges: Edges) -> str:
    """A cycle's packages and one import line per edge inside it."""
    lines = [f"package cycle: {' <-> '.join(cycle)}"]
    for (src, dst), where in sorted(edges.items()):
        if src in cycle and dst in cycle:
            more = f" (+{len(where) - 1} more)" if len(where) > 1 else ""
            lines.append(f"  {src} -> {dst}: {where[0]}{more}")
    return "\n".join(lines)


@pytest.fixture(scope="module")
def edges() -> Edges:
    return import_edges()


def test_the_walk_sees_the_package(edges):
    # guards the test itself: a walk that found nothing would pass every rule
    assert ("strategies", "scorers") in edges
    assert ("eval", "tasks") in edges
    assert any(src == "engine" for src, _ in edges)


def test_no_cycle_between_packages(edges):
    found = [c for c in package_cycles(edges) if frozenset(c) not in ALLOWED_CYCLES]
    assert not found, "\n".join(describe(c, edges) for c in found)


def test_allowed_cycles_still_exist(edges):
    # an allow-list entry whose cycle is gone must be removed, so that it cannot come back
    cycles = {frozenset(c) for c in package_cycles(edges)}
    stale = [sorted(c) for c in ALLOWED_CYCLES if c not in cycles]
    assert not stale, f"remove these from ALLOWED_CYCLES: {stale}"


@pytest.mark.parametrize("src", sorted(FORBIDDEN))
def test_forbidden_imports(edges, src):
    bad = [f"{src} -> {dst}: {edges[(src, dst)][0]}" for dst in sorted(FORBIDDEN[src])
           if (src, dst) in edges]
    assert not bad, "\n".join(bad)


@pytest.mark.parametrize("leaf", sorted(LEAVES))
def test_leaves_import_only_the_interfaces(edges, leaf):
    assert (ROOT / leaf).is_dir() or (ROOT / f"{leaf}.py").is_file()
    bad = [f"{leaf} -> {dst}: {where[0]}" for (src, dst), where in sorted(edges.items())
           if src == leaf and dst not in LEAVES[leaf]]
    assert not bad, "\n".join(bad)


def private_accesses(path: Path) -> list[str]:
    """``"file:LINE expr"`` for each ``x._name`` in ``path`` where ``x`` is not ``self``/``cls``
    (dunders excluded)."""
    out = []
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    for node in ast.walk(tree):
        if not isinstance(node, ast.Attribute) or not node.attr.startswith("_") \
                or node.attr.startswith("__"):
            continue
        if isinstance(node.value, ast.Name) and node.value.id in ("self", "cls"):
            continue
        out.append(f"{path.relative_to(ROOT.parent)}:{node.lineno} {ast.unparse(node)}")
    return out


@pytest.mark.parametrize("package", NO_PRIVATE_ACCESS)
def test_no_reach_into_privates(package):
    found = [hit for path in sorted((ROOT / package).rglob("*.py"))
             for hit in private_accesses(path)]
    assert not found, "\n".join(found)


def test_a_cycle_is_found_and_named(tmp_path):
    # the detector on a made-up package: a -> b (inside a function) -> a, c outside the loop
    pkg = tmp_path / PACKAGE
    for name, body in {
        "a/__init__.py": "from metagen.b.x import y\n",
        "b/__init__.py": "",
        "b/x.py": "def f():\n    from metagen.a import z\n    return z\n",
        "c.py": "from metagen import a\n",
    }.items():
        (pkg / name).parent.mkdir(parents=True, exist_ok=True)
        (pkg / name).write_text(body)
    found = import_edges(pkg)
    assert package_cycles(found) == [["a", "b"]] and ("c", "a") in found
    text = describe(["a", "b"], found)
    assert "a -> b: metagen/a/__init__.py:1" in text and "b -> a: metagen/b/x.py:2" in text
