"""The packages import in one direction only, and no module imports itself through others.

Layers, lowest first: the base modules of quicbed/ (errors, paths, yamlio, rowschema, and
doctor: what the host must have), then topology, workloads (what a workload fetches, its
content and what its rows measure: served by the servers, run by the clients, read by analysis
and experiments), servers, clients, analysis, experiments, course labs (labs/), and the
application (quicbed.cli). A module may import its own layer or lower
ones. Imports inside functions count too: a cycle hidden in a function is still a cycle.
"""

from __future__ import annotations

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
# folder -> package, as pyproject.toml's package-dir maps them.
PACKAGES = {
    "quicbed": "quicbed",
    "topology": "quicbed.topology",
    "servers": "quicbed.servers",
    "clients": "quicbed.clients",
    "workloads": "quicbed.workloads",
    "analysis": "quicbed.analysis",
    "experiments": "quicbed.experiments",
    "labs": "quicbed.labs",
}
LAYERS = [
    "base",
    "quicbed.topology",
    "quicbed.workloads",
    "quicbed.servers",
    "quicbed.clients",
    "quicbed.analysis",
    "quicbed.experiments",
    "quicbed.labs",
    "app",
]
APP = {"quicbed.cli"}


def _modules() -> dict[str, Path]:
    out = {}
    for folder, package in PACKAGES.items():
        for path in (REPO / folder).rglob("*.py"):
            parts = path.relative_to(REPO / folder).with_suffix("").parts
            if parts[-1] == "__init__":
                parts = parts[:-1]
            out[".".join((package, *parts))] = path
    return out


def _imports(name: str, path: Path, known: set[str]) -> set[str]:
    """The project modules `name` imports (`from pkg import mod` counts as pkg.mod)."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            found |= {f"{base}.{a.name}" if f"{base}.{a.name}" in known else base for a in node.names}
    return {m for m in found if m in known and m != name}


def _graph() -> dict[str, set[str]]:
    modules = _modules()
    return {name: _imports(name, path, set(modules)) for name, path in modules.items()}


def layer(module: str) -> int:
    if module in APP:
        return LAYERS.index("app")
    for package in sorted(PACKAGES.values(), key=len, reverse=True):
        if package != "quicbed" and (module == package or module.startswith(package + ".")):
            return LAYERS.index(package)
    return LAYERS.index("base")


def test_the_scan_sees_the_packages() -> None:
    graph = _graph()
    assert "quicbed.experiments.schema" in graph and "quicbed.topology.net" in graph
    assert "quicbed.experiments.registry" in graph["quicbed.experiments.schema"]


def test_packages_import_downwards_only() -> None:
    upward = [f"{a} -> {b}" for a, targets in _graph().items() for b in targets if layer(b) > layer(a)]
    assert not upward, "imports against the layering:\n" + "\n".join(sorted(upward))


def test_no_import_cycles() -> None:
    graph, cycles = _graph(), []
    state: dict[str, int] = {}  # 1: on the current path, 2: done

    def visit(module: str, trail: list[str]) -> None:
        state[module] = 1
        for target in sorted(graph[module]):
            # A package's __init__ importing its own modules is how packages re-export.
            if module == target.rpartition(".")[0] and target.startswith(module + "."):
                continue
            if state.get(target) == 1:
                cycles.append(" -> ".join([*trail[trail.index(target) :], target]))
            elif target not in state:
                visit(target, [*trail, target])
        state[module] = 2

    for module in sorted(graph):
        if module not in state:
            visit(module, [module])
    assert not cycles, "import cycles:\n" + "\n".join(cycles)
