"""The core's floors hold: every import (read from the code's own syntax, local imports included)
points to the same package or one below it in `backends.LAYERS`, no two modules import each
other in a loop, the top of site_scons/backends holds packages only, and every package says in
its __init__.py what it holds and what it may import."""
from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest

import backends

PACKAGE = Path(backends.__file__).parent
TOP = "backends"


def _module(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {_module(path): path for path in PACKAGE.rglob("*.py")}


def _absolute(node: ast.ImportFrom, module: str, is_package: bool) -> str:
    if not node.level:
        return node.module or ""
    base = module.split(".")
    if not is_package:
        base = base[:-1]
    if node.level > 1:
        base = base[:-(node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def imports_of(module: str) -> set[str]:
    """The project modules `module` imports (a name imported from a package that is a module of
    its own counts as that module)."""
    path = MODULES[module]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names if alias.name.split(".")[0] == TOP)
        elif isinstance(node, ast.ImportFrom):
            source = _absolute(node, module, path.name == "__init__.py")
            if source.split(".")[0] != TOP:
                continue
            for alias in node.names:
                found.add(f"{source}.{alias.name}" if f"{source}.{alias.name}" in MODULES else source)
    return {name for name in found if name in MODULES and name != module}


GRAPH = {module: imports_of(module) for module in MODULES}


def layer(module: str) -> int:
    parts = module.split(".")
    if len(parts) == 1:
        return -1  # backends itself: LAYERS, imported by nothing
    return backends.LAYERS.index(parts[1])


def test_every_package_is_a_declared_layer() -> None:
    packages = {path.name for path in PACKAGE.iterdir() if (path / "__init__.py").is_file()}
    assert packages == set(backends.LAYERS)


def test_the_top_holds_packages_only() -> None:
    assert sorted(path.name for path in PACKAGE.glob("*.py")) == ["__init__.py"]


@pytest.mark.parametrize("package", backends.LAYERS)
def test_each_package_says_what_it_holds_and_may_import(package: str) -> None:
    doc = ast.get_docstring(ast.parse((PACKAGE / package / "__init__.py").read_text()))
    assert doc and len(doc) > 80, f"backends/{package}/__init__.py: say what the package holds"
    below = backends.LAYERS[:backends.LAYERS.index(package)]
    assert "import" in doc, f"backends/{package}/__init__.py: say which packages it may import"
    assert not below or any(name in doc for name in below) or "every" in doc


def upward(graph: dict[str, set[str]]) -> list[str]:
    return sorted(f"{module} -> {imported}" for module, names in graph.items() for imported in names
                  if layer(imported) > layer(module) >= 0)


def test_no_import_runs_upwards() -> None:
    assert not upward(GRAPH), "imports against the floors (backends.LAYERS):\n  " + "\n  ".join(upward(GRAPH))


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for child in sorted(graph.get(node, ())):
            if child not in index:
                visit(child)
                low[node] = min(low[node], low[child])
            elif child in on_stack:
                low[node] = min(low[node], index[child])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for module in sorted(graph):
        if module not in index:
            visit(module)
    return found


def test_no_import_closes_a_cycle() -> None:
    assert not cycles(GRAPH)


def test_the_checker_sees_an_upward_and_a_circular_import() -> None:
    """Both checks can fail: an import from util up to graph, and a loop between two steps."""
    graph = {module: set(names) for module, names in GRAPH.items()}
    graph["backends.util.files"].add("backends.graph.actions")
    assert upward(graph) == ["backends.util.files -> backends.graph.actions"]
    graph["backends.util.files"].discard("backends.graph.actions")
    graph["backends.steps.stage"].add("backends.steps.verify")
    graph["backends.steps.verify"].add("backends.steps.stage")
    assert cycles(graph) == [["backends.steps.stage", "backends.steps.verify"]]
    assert imports_of("backends.steps.stage") >= {"backends.util.files"}  # what the graph is read from


def test_the_bottom_floor_needs_nothing_but_the_standard_library_and_requests() -> None:
    allowed = {*sys.stdlib_module_names, "__future__", "requests", "urllib3"}
    for module, path in MODULES.items():
        if not module.startswith("backends.util."):
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            names = ([node.module or ""] if isinstance(node, ast.ImportFrom) and not node.level
                     else [alias.name for alias in node.names] if isinstance(node, ast.Import) else [])
            for name in names:
                top = name.split(".")[0]
                assert top in allowed or name.startswith("backends.util"), f"{module} imports {name}"


def test_only_the_graph_imports_scons() -> None:
    importers = sorted(module for module, path in MODULES.items()
                       if any(isinstance(node, (ast.Import, ast.ImportFrom))
                              and any(name.split(".")[0] == "SCons"
                                      for name in ([node.module or ""] if isinstance(node, ast.ImportFrom)
                                                   else [alias.name for alias in node.names]))
                              for node in ast.walk(ast.parse(path.read_text()))))
    assert all(module.startswith("backends.graph.") for module in importers), importers
