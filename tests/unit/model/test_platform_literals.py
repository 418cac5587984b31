"""No core module spells a platform: every arch token and `<os>-<arch>` platform lives in
engines/platforms.toml, read by model/platforms.py alone. A string constant in code (not a
docstring, not a comment) that names one fails here, so a new platform is data, never a
hunt through the core."""
from __future__ import annotations

import ast
import re
from pathlib import Path

from backends.model.platforms import platform_table

CORE = Path(__file__).resolve().parents[3] / "site_scons" / "backends"
LOADER = CORE / "model" / "platforms.py"

# Upstream's file names that happen to spell an arch, each with why it stays: (module, literal).
ALLOWED: dict[tuple[str, str], str] = {
    ("probes/glslc.py", "/linux/vulkansdk-linux-x86_64-"): "LunarG's tarball name of its one Linux SDK build",
    ("probes/glslc.py", "/x86_64/bin/glslc"): "the directory inside that tarball",
    ("pins/build_downloads.py", "https://github.com/bazelbuild/bazel/releases/download/{version}/"
                                "bazel-{version}-linux-x86_64"):
        "Bazel's release asset for the Linux x86_64 host bazelisk downloads it on (the bazel reader's entry)",
}


def _tokens() -> list[str]:
    """Every arch of the table and every machine its platforms' binaries have."""
    table = platform_table()
    words = {p.arch for p in table.platforms.values() if p.arch and not p.slices}
    words |= {m for p in table.platforms.values() for m in p.machines}
    return sorted(words, key=len, reverse=True)


def _pattern(tokens: list[str]) -> re.Pattern[str]:
    return re.compile(rf"(?<![A-Za-z0-9])({'|'.join(map(re.escape, tokens))})(?![A-Za-z0-9])", re.IGNORECASE)


def _docstrings(tree: ast.AST) -> set[int]:
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
                found.add(id(body[0].value))
    return found


def literals(source: str, pattern: re.Pattern[str]) -> list[tuple[int, str]]:
    """(line, text) of each string constant of `source` that names a platform token."""
    tree = ast.parse(source)
    skip = _docstrings(tree)
    return [(node.lineno, node.value) for node in ast.walk(tree)
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in skip
            and pattern.search(node.value)]


def offenders(root: Path) -> list[str]:
    pattern = _pattern(_tokens())
    found = []
    for path in sorted(root.rglob("*.py")):
        if path == LOADER:
            continue
        relative = path.relative_to(root).as_posix()
        for line, value in literals(path.read_text(encoding="utf-8"), pattern):
            if (relative, value) not in ALLOWED:
                found.append(f"{relative}:{line}: {value!r}")
    return found


def test_tokens_cover_the_grepped_arches() -> None:
    assert {"aarch64", "x86_64", "arm64", "arm64-v8a"} <= set(_tokens())


def test_no_core_module_spells_a_platform() -> None:
    found = offenders(CORE)
    assert not found, "platform tokens in code; move them to engines/platforms.toml:\n" + "\n".join(found)


def test_a_planted_literal_is_found(tmp_path: Path) -> None:
    """The mutation that proves the check can fail: a module that spells a platform."""
    module = tmp_path / "pkg" / "mod.py"
    module.parent.mkdir()
    module.write_text('"""A docstring may say linux-aarch64."""\n# so may a comment: x86_64\n'
                      'HOSTS = {"AMD64": "x64"}\nDEFAULT = "linux-aarch64"\n')
    assert offenders(tmp_path) == ["pkg/mod.py:4: 'linux-aarch64'"]
