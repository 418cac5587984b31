"""Running the upstream build commands of a plan through the runner, one log per command."""
from __future__ import annotations

import os
import re
import shutil
from pathlib import Path
from typing import Mapping, Sequence

from ..model.plan import Command
from ..run import heavy_slot, limited_env, run
from . import venv
from .context import LegDirs, expand, expand_argv
from .source import copy_tree


def _log_name(index: int, label: str) -> str:
    return f"build-{index:02d}-{re.sub(r'[^A-Za-z0-9_.-]+', '-', label).strip('-')}.log"


SITE_SCONS = Path(__file__).resolve().parents[2]


def command_env(command: Command, plan_env: Mapping[str, str], dirs: LegDirs,
                environ: Mapping[str, str], in_venv: bool = False) -> dict[str, str]:
    """The allow-listed environment plus the plan's additions; `python -m backends.*`
    commands find this package, and the step graph's settings travel as ANIRA_*. In the
    leg's venv, its scripts come first on PATH."""
    extra = {k: expand(v, dirs, environ) or "" for k, v in {**plan_env, **command.env}.items()}
    extra["PYTHONPATH"] = os.pathsep.join(filter(None, [str(SITE_SCONS), extra.get("PYTHONPATH", "")]))
    extra.update({k: v for k, v in environ.items() if k.startswith("ANIRA_")})
    if in_venv:
        extra.update(venv.activation(dirs.venv, os.environ))
    return limited_env(extra)


def run_commands(commands: Sequence[Command], plan_env: Mapping[str, str], dirs: LegDirs, label: str,
                 environ: Mapping[str, str], verbose: bool, log_prefix: str = "build") -> list[dict[str, object]]:
    """Run each command in order; returns what ran (argv, cwd, log) for the manifest.
    Commands that name `{venv_python}` get the leg's venv, made first; every command then
    runs in it."""
    in_venv = venv.uses_venv(commands)
    if in_venv:
        venv.ensure(dirs.venv, dirs.logs / f"{log_prefix}-00-venv.log", label)
    ran = []
    for index, command in enumerate(commands, start=1):
        argv = expand_argv(command.argv, dirs, environ)
        cwd = Path(expand(command.cwd, dirs, environ) or dirs.src)
        cwd.mkdir(parents=True, exist_ok=True)
        log = dirs.logs / _log_name(index, command.label).replace("build-", f"{log_prefix}-", 1)
        run(argv, env=command_env(command, plan_env, dirs, environ, in_venv), cwd=cwd, log=log,
            label=f"{label} {command.label}", echo=verbose)
        ran.append({"label": command.label, "argv": argv, "cwd": str(cwd), "log": str(log)})
    return ran


def private_copy(shared_src: Path, private_src: Path, key: str) -> None:
    """Give an in-source build its own copy of the tree, refreshed when the tree key changes."""
    marker = private_src.parent / f".{private_src.name}.key"
    if private_src.is_dir() and marker.is_file() and marker.read_text() == key:
        return
    shutil.rmtree(private_src, ignore_errors=True)
    private_src.mkdir(parents=True)
    for path in sorted(shared_src.rglob("*")):
        target = private_src / path.relative_to(shared_src)
        if path.is_dir() and not path.is_symlink():
            target.mkdir(parents=True, exist_ok=True)
        else:
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(path, target, follow_symlinks=False)
    marker.write_text(key)


def _bind_build_dir(dirs: LegDirs, source_key: str) -> None:
    """Wipe the leg's build dir when it was last used with another source tree.

    A patch edit or a new pin gives the leg a new source tree (keyed by pin + patch
    hashes). CMake keeps the source dir a build dir was configured from, and with
    hard-linked trees (copy_tree) it cannot tell the new tree's CMakeLists.txt from the
    old one: it silently goes on compiling the old, differently patched sources.
    """
    marker = dirs.build / ".anira-source"
    source = f"{dirs.src}\n{source_key}"
    if dirs.build.exists() and not (marker.is_file() and marker.read_text() == source):
        shutil.rmtree(dirs.build)
    dirs.build.mkdir(parents=True, exist_ok=True)
    marker.write_text(source)


def build(commands: Sequence[Command], plan_env: Mapping[str, str], dirs: LegDirs, label: str,
          environ: Mapping[str, str], verbose: bool, slots: int, lock_dir: Path,
          source_key: str = "") -> list[dict[str, object]]:
    _bind_build_dir(dirs, source_key)
    with heavy_slot(lock_dir, slots, label):
        return run_commands(commands, plan_env, dirs, label, environ, verbose)


__all__ = ["build", "copy_tree", "private_copy", "run_commands"]
