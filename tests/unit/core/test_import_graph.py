"""The package's imports keep its layers: no cycles, nothing importing back up.

Read from the source with ``ast`` (every ``import``, those inside functions included;
``if TYPE_CHECKING:`` blocks left out, as they never run), drawn as a networkx graph of
``actorrt`` modules.
"""

from __future__ import annotations

import ast
from pathlib import Path

import networkx as nx
import pytest

PACKAGE = Path(__file__).resolve().parents[3] / "actorrt"


def _module(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {_module(p): p for p in PACKAGE.rglob("*.py")}


def _target(name: str) -> str | None:
    """The package module an imported name lives in (its longest module prefix)."""
    while name and name not in MODULES:
        name = name.rpartition(".")[0]
    return name or None


def _imports(module: str, path: Path) -> set[str]:
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    tree = ast.parse(path.read_text())
    never_run = {  # the body of ``if TYPE_CHECKING:``; its ``else:`` does run
        id(inner)
        for node in ast.walk(tree)
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test)
        for stmt in node.body
        for inner in ast.walk(stmt)
    }
    found: set[str] = set()
    for node in ast.walk(tree):  # imports inside functions too
        if id(node) in never_run:
            continue
        if isinstance(node, ast.Import):
            found.update(t for a in node.names if (t := _target(a.name)))
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # relative: from this package, up level - 1
                parts = package.split(".")
                parts = parts[: len(parts) - node.level + 1]
                base = ".".join(parts + ([node.module] if node.module else []))
            found.update(t for a in node.names if (t := _target(f"{base}.{a.name}")))
    found.discard(module)
    return found


def _graph() -> nx.DiGraph:
    graph = nx.DiGraph()
    for module, path in MODULES.items():
        graph.add_node(module)
        graph.add_edges_from((module, target) for target in _imports(module, path))
    return graph


GRAPH = _graph()


def _uses(layer: str) -> set[str]:
    """What the modules under ``layer`` import from outside it."""
    inside = {m for m in GRAPH if m == layer or m.startswith(layer + ".")}
    return {t for m in inside for t in GRAPH.successors(m) if t not in inside}


def test_the_graph_reads_the_imports():
    # a sample of edges that exist, so that a reader that found nothing cannot pass
    assert ("actorrt.runtime.runtime", "actorrt.options") in GRAPH.edges
    assert ("actorrt.refs", "actorrt.errors") in GRAPH.edges
    assert GRAPH.number_of_edges() > 200


def test_the_package_has_no_import_cycle():
    cycles = list(nx.simple_cycles(GRAPH))
    assert not cycles, f"import cycles: {cycles[:5]}"


@pytest.mark.parametrize(
    ("layer", "never"),
    [
        # placement is pure functions over plain data: planned before anything launches
        ("actorrt.placement", ("actorrt.runtime", "actorrt.cluster", "actorrt.options")),
        # options are checked at decoration, below the runtime that uses them
        ("actorrt.options", ("actorrt.runtime", "actorrt.cluster")),
        # the runtime sits under the caller's side and the launch
        (
            "actorrt.runtime",
            ("actorrt.cluster", "actorrt.api", "actorrt.actor_class", "actorrt.refs"),
        ),
        ("actorrt.errors", ("actorrt.runtime", "actorrt.placement", "actorrt.cluster")),
    ],
)
def test_a_layer_never_imports_the_layers_above_it(layer, never):
    above = {t for t in _uses(layer) if any(t == n or t.startswith(n + ".") for n in never)}
    assert not above, f"{layer} imports {sorted(above)}, which sit above it"
