"""A scratch copy of the project (symlinked code and data, private build/ and dist/) and
`scons` run in it: shared by the end-to-end tests and the benchmarks; and a benchmark
loaded as a module, for the tests that drive its simulation."""
from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

REPO = Path(__file__).resolve().parents[1]


@dataclass
class Scons:
    project: Path
    cache: Path

    def __call__(self, *args: str, check: bool = True,
                 env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
        argv = [sys.executable, "-m", "SCons", "-Q", f"cache={self.cache}", *args]
        result = subprocess.run(argv, cwd=self.project, capture_output=True, text=True, timeout=900,
                                env={**os.environ, **(env or {})})
        if check and result.returncode != 0:
            raise AssertionError(f"scons {' '.join(args)} failed ({result.returncode}):\n"
                                 f"{result.stdout[-4000:]}\n{result.stderr[-4000:]}")
        return result

    def run(self, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
        """Like calling it, but a failure is the caller's to judge."""
        return self(*args, check=False, env=env)

    def steps_run(self, result: subprocess.CompletedProcess[str]) -> list[str]:
        """The steps a run executed, from their `[<step>] <leg> done in` lines (runner
        lines are `[<leg> <command>] done in`, with a space inside the brackets)."""
        steps = []
        for line in result.stdout.splitlines():
            if line.startswith("[") and "]" in line and " done in " in line:
                label = line[1:line.index("]")]
                if " " not in label:
                    steps.append(label)
        return steps


def scratch_project(root: Path, copied: tuple[str, ...] = ()) -> Path:
    """A project sharing the repo's code and data; `copied` entries are real copies to edit."""
    root.mkdir(parents=True, exist_ok=True)
    for name in ("SConstruct", "site_scons", "smoke", "variants", "engines"):
        if name in copied or any(c.startswith(name + "/") for c in copied):
            continue
        (root / name).symlink_to(REPO / name)
    for name in copied:
        top = name.split("/", 1)[0]
        if "/" in name:
            (root / top).mkdir(exist_ok=True)
            for entry in (REPO / top).iterdir():
                if not (root / top / entry.name).exists() and f"{top}/{entry.name}" != name:
                    (root / top / entry.name).symlink_to(entry)
        shutil.copytree(REPO / name, root / name, symlinks=True) if (REPO / name).is_dir() \
            else shutil.copy2(REPO / name, root / name)
    return root


def project_copy(dest: Path, names: Sequence[str]) -> Path:
    """A real copy of these files and folders of the project (no bytecode, no lock files)."""
    dest.mkdir(parents=True, exist_ok=True)
    for name in names:
        source = REPO / name
        if source.is_dir():
            shutil.copytree(source, dest / name, ignore=shutil.ignore_patterns("__pycache__", "*.toml.lock"))
        else:
            shutil.copy(source, dest / name)
    return dest


def bench_module(name: str) -> Any:
    """`bench/<name>.py` as a module (benches are scripts, not a package)."""
    spec = importlib.util.spec_from_file_location(f"{name}_bench", REPO / "bench" / f"{name}.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module
