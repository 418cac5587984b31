"""No run state in module globals of the SCons layer: what one run needs about itself (its
settings, its terminal, its records) travels in the run context (graph/actions.RunContext),
never in a module variable a function or the SConscript writes while the run goes. Read from
the code's syntax: a `global` statement, or a store into, or a mutating call on, a name the
module binds at its top (`FLAG[0] = ...`, `TABLE.update(...)`), made inside a function; in the
SConscript, such a store into a name it imports."""
from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

import backends

SITE_SCONS = Path(backends.__file__).parent.parent
CHECKED = ("backends/graph", "backends/runner")
# Process-wide on purpose, with the reason beside each in its module.
ALLOWED = {
    ("backends/runner/containment.py", "_JOBS"),  # the OS handles of kill-on-close Windows jobs
}
MUTATORS = frozenset({"append", "extend", "insert", "pop", "popitem", "remove", "clear", "update",
                      "setdefault", "add", "discard", "sort", "reverse"})


def _top_level_names(tree: ast.Module, imports: bool) -> set[str]:
    names: set[str] = set()
    for node in tree.body:
        if isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
            for target in node.targets if isinstance(node, ast.Assign) else [node.target]:
                names.update(_bound(target))
        elif imports and isinstance(node, (ast.Import, ast.ImportFrom)):
            names.update((alias.asname or alias.name).split(".")[0] for alias in node.names)
    return names


def _bound(target: ast.expr) -> Iterator[str]:
    """The names an assignment to `target` binds (not those it stores into: `X[0] = ...`)."""
    if isinstance(target, ast.Name):
        yield target.id
    elif isinstance(target, (ast.Tuple, ast.List)):
        for element in target.elts:
            yield from _bound(element)
    elif isinstance(target, ast.Starred):
        yield from _bound(target.value)


def _root(node: ast.expr) -> str | None:
    while isinstance(node, (ast.Subscript, ast.Attribute)):
        node = node.value
    return node.id if isinstance(node, ast.Name) else None


def _locals(function: ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda) -> set[str]:
    arguments = function.args
    names = {a.arg for a in [*arguments.posonlyargs, *arguments.args, *arguments.kwonlyargs,
                             *filter(None, [arguments.vararg, arguments.kwarg])]}
    names.update(n.id for n in ast.walk(function) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store))
    return names


def _writes(scope: ast.AST, shared: set[str]) -> Iterator[tuple[int, str]]:
    """(line, name) of each write into a name of `shared` within `scope`."""
    for node in ast.walk(scope):
        if isinstance(node, ast.Global):
            yield from ((node.lineno, name) for name in node.names)
        targets: list[ast.expr] = []
        if isinstance(node, ast.Assign):
            targets = node.targets
        elif isinstance(node, (ast.AugAssign, ast.AnnAssign)):
            targets = [node.target]
        elif isinstance(node, ast.Delete):
            targets = node.targets
        for target in targets:
            if isinstance(target, (ast.Subscript, ast.Attribute)) and _root(target) in shared:
                yield node.lineno, str(_root(target))
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) \
                and node.func.attr in MUTATORS and _root(node.func.value) in shared:
            yield node.lineno, str(_root(node.func.value))


def module_state_writes(path: Path, source: str) -> list[str]:
    """Where `source` (the file at `path`) writes run state into a module global."""
    tree = ast.parse(source)
    where = path.relative_to(SITE_SCONS).as_posix() if path.is_relative_to(SITE_SCONS) else path.name
    if path.suffix == ".SConscript":  # its top level runs with the build: a store into what it imports
        found = list(_writes(tree, _top_level_names(tree, imports=True) - _top_level_names(tree, imports=False)))
    else:
        shared = _top_level_names(tree, imports=False)
        found = []
        for function in ast.walk(tree):
            if isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
                own = _locals(function)
                found.extend((line, name) for line, name in _writes(function, shared)
                             if name not in own or any(isinstance(n, ast.Global) and name in n.names
                                                       for n in ast.walk(function)))
    return sorted({f"{where}:{line}: {name}" for line, name in found if (where, name) not in ALLOWED})


def _checked_files() -> list[Path]:
    files = [path for package in CHECKED for path in sorted((SITE_SCONS / package).rglob("*.py"))]
    return files + sorted(SITE_SCONS.glob("*.SConscript"))


@pytest.mark.parametrize("path", _checked_files(), ids=lambda p: p.relative_to(SITE_SCONS).as_posix())
def test_no_function_writes_run_state_into_a_module_global(path: Path) -> None:
    assert module_state_writes(path, path.read_text(encoding="utf-8")) == []


@pytest.mark.parametrize("source", [
    "FLAG = [False]\ndef set_it(on):\n    FLAG[0] = on\n",
    "_LAST = [0.0]\ndef note():\n    _LAST[0] += 1\n",
    "STATE = None\ndef set_it(value):\n    global STATE\n    STATE = value\n",
    "TABLE = {}\ndef register(key, value):\n    TABLE.update({key: value})\n",
    "class C: pass\nRUN = C()\ndef start(run):\n    RUN.current = run\n",
])
def test_the_check_finds_a_module_global_written_at_run_time(source: str) -> None:
    assert module_state_writes(SITE_SCONS / "backends/graph/example.py", source)


def test_the_check_finds_the_sconscript_writing_into_an_imported_global() -> None:
    source = "from backends.runner.run import PARALLEL_STEPS\nPARALLEL_STEPS[0] = GetOption('num_jobs') > 1\n"
    assert module_state_writes(SITE_SCONS / "graph.SConscript", source) == ["graph.SConscript:2: PARALLEL_STEPS"]


def test_the_check_leaves_locals_and_constants_alone() -> None:
    source = ("LIMIT = 3\nNAMES: dict[str, int] = {}\nNAMES['a'] = 1\n"
              "def f(NAMES):\n    NAMES['b'] = 2\n    seen = []\n    seen.append(LIMIT)\n    return seen\n")
    assert module_state_writes(SITE_SCONS / "backends/graph/example.py", source) == []
