"""The package map as a test: imports between sparsetrain's packages follow docs/architecture.md.

The import graph is built from the source with ``ast`` (every ``import`` / ``from ... import``,
at module level or inside functions, absolute or relative), so an import hidden in a function
body to dodge a cycle is still an edge.
"""

from __future__ import annotations

import ast
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

SOURCE = Path(__file__).resolve().parents[1] / "sparsetrain"

HELPERS = {"errors", "_progress", "_numba_cuda", "_version", "_process", "_sigbus", "_phases", "_launch_counts",
           "_args", "_late_reads"}
"""Top-level modules every package may import; they import only each other."""

ALLOWED: dict[str, set[str]] = {
    "storage": set(),
    "sampling": set(),
    "datasets": {"storage", "sampling"},
    "collective": {"storage"},
    "nn": {"sampling", "storage", "collective"},
    "moe": {"collective"},
    "engine": {"storage", "sampling", "datasets", "collective", "nn", "moe", "partition", "partitioned"},
    "pyg": {"storage", "sampling", "datasets", "collective", "nn", "engine", "partition", "partitioned"},
    "dgl": {"sampling"},
    "partition": {"storage", "sampling", "datasets"},
    "partitioned": {"storage", "sampling", "collective", "partition"},
    "cli": {"datasets", "engine", "partition"},
    "__main__": {"cli"},
    "sparsetrain": set(),  # the root __init__: its lazy re-exports go through importlib, never an import statement
}
"""Package (or top-level module) -> the packages it may import, besides ``HELPERS`` and itself.

Packages that do not exist yet (``nn``, ``pyg``) are listed so that adding them needs no edit here.
"""


@dataclass(frozen=True)
class Edge:
    source: str  # dotted module name of the importing file
    target: str  # dotted module name imported (the deepest existing module)
    where: str  # path:line of the import statement


def module_names(root: Path) -> dict[str, Path]:
    """Dotted module name -> file, for every ``.py`` file under ``root`` (a package folder)."""
    names = {}
    for path in sorted(root.rglob("*.py")):
        parts = list(path.relative_to(root.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        names[".".join(parts)] = path
    return names


def import_edges(root: Path) -> list[Edge]:
    """Every import of a module of ``root``'s package by another of its modules."""
    modules = module_names(root)
    top = root.name

    def deepest(name: str) -> str | None:
        while name and name not in modules:
            name = name.rpartition(".")[0]
        return name or None

    edges = []
    for name, path in modules.items():
        package = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
        where = path.relative_to(root.parent)
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    base = ".".join(package[: len(package) - node.level + 1] + ([base] if base else []))
                # ``from pkg import sub`` imports the module pkg.sub; ``from pkg import name`` imports pkg
                targets = [
                    f"{base}.{alias.name}" if f"{base}.{alias.name}" in modules else base for alias in node.names
                ]
            else:
                continue
            for target in targets:
                if target == top or target.startswith(top + "."):
                    resolved = deepest(target)
                    if resolved is not None and resolved != name:
                        edges.append(Edge(name, resolved, f"{where}:{node.lineno}"))
    return edges


def unit(module: str) -> str:
    """The package (or top-level module) a dotted module name belongs to: ``sparsetrain.storage.mmap`` ->
    ``storage``."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else parts[0]


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One cycle of ``graph`` as ``[a, b, ..., a]``, or ``None`` when it is acyclic."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for succ in sorted(graph.get(node, ())):
            if state.get(succ) == 1:
                return path[path.index(succ) :] + [succ]
            if succ not in state and (cycle := visit(succ)) is not None:
                return cycle
        path.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state and (cycle := visit(node)) is not None:
            return cycle
    return None


def describe_cycle(cycle: list[str], edges: list[Edge], key) -> str:
    """``a -> b (file:line) -> c (file:line) ...`` for a cycle over ``key(module)`` nodes."""
    steps = []
    for a, b in zip(cycle, cycle[1:]):
        first = next(e.where for e in edges if key(e.source) == a and key(e.target) == b)
        steps.append(f"{a} -> {b} ({first})")
    return "; ".join(steps)


def violations(root: Path, allowed: dict[str, set[str]] = ALLOWED, helpers: set[str] = HELPERS) -> list[str]:
    """Every way the package at ``root`` breaks the map: unknown packages, edges outside the table, cycles."""
    edges = import_edges(root)
    problems = []
    units = {unit(m) for m in module_names(root)}
    for name in sorted(units - set(allowed) - helpers):
        problems.append(
            f"{root.name}/{name}: not in the package map; add it to ALLOWED in tests/test_architecture.py "
            "and to docs/architecture.md"
        )
    for edge in edges:
        source, target = unit(edge.source), unit(edge.target)
        if source == target:
            continue
        ok = target in helpers if source in helpers else target in helpers or target in allowed.get(source, set())
        if not ok:
            problems.append(
                f"{edge.where}: {source} imports {target} ({edge.target}), which the package map does not allow"
            )
    package_graph = defaultdict(set)
    for edge in edges:
        if unit(edge.source) != unit(edge.target):
            package_graph[unit(edge.source)].add(unit(edge.target))
    if cycle := find_cycle(package_graph):
        problems.append(f"package import cycle: {describe_cycle(cycle, edges, unit)}")
    module_graph = defaultdict(set)
    for edge in edges:
        if unit(edge.source) == unit(edge.target):
            module_graph[edge.source].add(edge.target)
    if cycle := find_cycle(module_graph):
        problems.append(f"module import cycle: {describe_cycle(cycle, edges, lambda m: m)}")
    return problems


def test_allowed_table_is_a_dag():
    assert find_cycle(ALLOWED) is None
    assert all(target in ALLOWED for targets in ALLOWED.values() for target in targets)


def test_sparsetrain_follows_the_package_map():
    problems = violations(SOURCE)
    assert not problems, "\n".join(problems)


def test_the_graph_sees_function_level_and_relative_imports():
    edges = {(e.source, e.target) for e in import_edges(SOURCE)}
    # datasets/dataset.py opens its stores itself (module level); cli.py imports the verbs' modules inside a function
    assert ("sparsetrain.datasets.dataset", "sparsetrain.storage.mmap") in edges
    assert ("sparsetrain.cli", "sparsetrain.engine.cli") in edges
    assert ("sparsetrain.__main__", "sparsetrain.cli") in edges


def write_tree(root: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        path = root / "sparsetrain" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root / "sparsetrain"


def test_violations_name_file_and_line(tmp_path):
    """A hand-made tree with one hidden upward import, one package cycle and one module circle."""
    root = write_tree(
        tmp_path,
        {
            "__init__.py": "",
            "errors.py": "",
            "storage/__init__.py": "",
            "storage/mmap.py": "import os\n\n\ndef f():\n    from ..datasets import format\n",
            "datasets/__init__.py": "from .a import x\n",
            "datasets/format.py": "from sparsetrain.storage import mmap\nfrom sparsetrain.errors import E\n",
            "datasets/a.py": "from sparsetrain.datasets.b import y\n",
            "datasets/b.py": "\n\ndef g():\n    import sparsetrain.datasets.a\n",
            "extras/__init__.py": "",
        },
    )
    assert violations(root) == [
        (
            "sparsetrain/extras: not in the package map; add it to ALLOWED in tests/test_architecture.py and "
            "to docs/architecture.md"
        ),
        (
            "sparsetrain/storage/mmap.py:5: storage imports datasets (sparsetrain.datasets.format), which the "
            "package map does not allow"
        ),
        (
            "package import cycle: datasets -> storage (sparsetrain/datasets/format.py:1); storage -> datasets "
            "(sparsetrain/storage/mmap.py:5)"
        ),
        "module import cycle: sparsetrain.datasets.a -> sparsetrain.datasets.b (sparsetrain/datasets/a.py:1); "
        "sparsetrain.datasets.b -> sparsetrain.datasets.a (sparsetrain/datasets/b.py:4)",
    ]


def test_helpers_import_only_helpers(tmp_path):
    root = write_tree(
        tmp_path,
        {
            "__init__.py": "",
            "errors.py": "from sparsetrain import _version\n",
            "_version.py": "",
            "_progress.py": "import sparsetrain.storage\n",
            "storage/__init__.py": "",
        },
    )
    assert violations(root) == [
        "sparsetrain/_progress.py:1: _progress imports storage (sparsetrain.storage), which the package "
        "map does not allow"
    ]
