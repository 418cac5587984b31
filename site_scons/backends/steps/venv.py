"""The private Python environment of a leg's upstream build: where its `pip install`s go.

Upstream builds install Python packages: PyTorch's requirements-build.txt, ExecuTorch's
requirements-dev.txt and the torch wheel its codegen imports, SCons for the Arm Compute
Library. Plans write those commands with `{venv_python}`; the leg's build then runs in a
virtual environment of its own, `build/legs/<leg id>/venv`, made from the interpreter that
runs SCons, with its scripts directory first on PATH (as an activated environment has it),
so `scons` or `cmake` installed there are the ones found. A local build never changes the
user's Python, and `rm -rf build` removes everything it installed.
"""
from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path
from typing import Iterable, Mapping

from backends.model.plan import Command
from backends.runner.run import Console, limited_env, run

SYMBOL = "{venv_python}"
# Which interpreter a venv was made from; another one (a Python upgrade) makes it anew.
MARKER = ".anira-base-python"


def uses_venv(commands: Iterable[Command]) -> bool:
    return any(SYMBOL in text for command in commands
               for text in (*command.argv, *command.env.values(), command.cwd))


def scripts_dir(venv: Path) -> Path:
    return venv / ("Scripts" if os.name == "nt" else "bin")


def interpreter(venv: Path) -> Path:
    return scripts_dir(venv) / ("python.exe" if os.name == "nt" else "python")


def base_python() -> str:
    """The interpreter a new venv is made from, with its version (a venv's own base when SCons
    itself runs in one)."""
    return f"{getattr(sys, '_base_executable', sys.executable)} {sys.version.split()[0]}"


def ensure(venv: Path, log: Path, label: str, *, console: Console) -> None:
    """Create the venv unless it exists and was made from this interpreter."""
    marker = venv / MARKER
    if interpreter(venv).is_file() and marker.is_file() and marker.read_text() == base_python():
        return
    shutil.rmtree(venv, ignore_errors=True)
    venv.parent.mkdir(parents=True, exist_ok=True)
    run([sys.executable, "-m", "venv", str(venv)], env=limited_env({}), cwd=venv.parent, log=log,
        label=f"{label} venv", console=console)
    marker.write_text(base_python())


def activation(venv: Path, environ: Mapping[str, str]) -> dict[str, str]:
    """The variables an activated venv sets: its scripts first on PATH, VIRTUAL_ENV."""
    path = os.pathsep.join(filter(None, [str(scripts_dir(venv)), environ.get("PATH", "")]))
    return {"PATH": path, "VIRTUAL_ENV": str(venv)}
