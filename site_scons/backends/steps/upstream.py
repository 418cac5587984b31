"""Running the upstream build commands of a plan through the runner, one log per command."""
from __future__ import annotations

import argparse
import hashlib
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Mapping, Sequence

from backends.model.plan import Command, Plan
from backends.runner.network import isolated, tried_urls
from backends.runner.run import Console, RunError, is_credential, limited_env, passed_environment, run
from backends.steps import venv
from backends.steps.context import LegDirs, env_names, expand, expand_argv
from backends.steps.source import copy_tree
from backends.util.files import WINDOWS, extended_length, mirror_tree
from backends.util.toolchain import identity


def _log_name(index: int, label: str) -> str:
    return f"build-{index:02d}-{re.sub(r'[^A-Za-z0-9_.-]+', '-', label).strip('-')}.log"


SITE_SCONS = Path(__file__).resolve().parents[2]
# The step graph's settings (cache, mirrors, offline, lock) reach the project's helpers as these.
SETTINGS_PREFIX = "ANIRA_"


def settings_variables(environ: Mapping[str, str]) -> dict[str, str]:
    """The ANIRA_* variables a plan's commands receive: never a credential (the binary cache's
    signing key, ANIRA_BINARY_CACHE_KEY, is no input of a build and no business of upstream's
    scripts; in a signature its value would land in step records and "reruns:" lines)."""
    return {key: value for key, value in environ.items() if key.startswith(SETTINGS_PREFIX)
            and not is_credential(key)}


def command_env(command: Command, plan_env: Mapping[str, str], dirs: LegDirs,
                environ: Mapping[str, str], in_venv: bool = False) -> dict[str, str]:
    """The allow-listed environment plus the plan's additions; `python -m backends.*`
    commands find this package, and the step graph's settings travel as ANIRA_*. In the
    leg's venv, its scripts come first on PATH."""
    extra = {k: expand(v, dirs, environ) or "" for k, v in {**plan_env, **command.env}.items()}
    extra["PYTHONPATH"] = os.pathsep.join(filter(None, [str(SITE_SCONS), extra.get("PYTHONPATH", "")]))
    extra.update(settings_variables(environ))
    if in_venv:
        extra.update(venv.activation(dirs.venv, os.environ))
    return limited_env(extra)


# What CMake, Ninja and the upstream build scripts start: their versions are part of a build.
BUILD_TOOLS = ("cmake", "ninja", "cc", "c++", "cl", "clang", "clang-cl")


def _commands(plan: Plan) -> tuple[Command, ...]:
    return (*plan.build, *plan.fixups)


def environment_signature(plan: Plan, environ: Mapping[str, str]) -> dict[str, str]:
    """Every host variable the plan's commands receive (the runner's allow-list, what their
    `{env:X}` symbols read, the step graph's ANIRA_* settings): each can change the output."""
    texts = [text for command in _commands(plan) for text in (*command.argv, *command.env.values(), command.cwd)]
    passed = passed_environment(environ, env_names([*texts, *plan.env.values()]))
    passed.update(settings_variables(environ))
    return dict(sorted(passed.items()))


def toolchain_identity(plan: Plan, environ: Mapping[str, str]) -> dict[str, str]:
    """The compilers and tools the plan's commands will find on their PATH (CC/CXX first,
    as CMake takes them), each with its resolved path and version."""
    env = {**environ, **plan.env}
    names = [env[key] for key in ("CC", "CXX") if env.get(key)] + list(BUILD_TOOLS)
    return identity(names, env.get("PATH", os.defpath))


class NetworkOffError(RunError):
    """A command run with the network off failed: the URLs its output names are what it tried."""

    def __init__(self, error: RunError, urls: Sequence[str]) -> None:
        reason = (f"failed with exit code {error.returncode} with the network off (the project served every "
                  "download it knows of)" + (f"; URLs in its output, what upstream tried: {', '.join(urls)}"
                                             if urls else "") +
                  ": record what it downloads in [[build_downloads]] (docs/hermetic-sources.md)")
        super().__init__(error.label, error.returncode, error.log, error.tail, reason=reason)
        self.urls = list(urls)


def run_commands(commands: Sequence[Command], plan_env: Mapping[str, str], dirs: LegDirs, label: str,
                 environ: Mapping[str, str], verbose: bool, log_prefix: str = "build", *,
                 console: Console) -> list[dict[str, object]]:
    """Run each command in order; returns what ran (argv, cwd, log) for the manifest.
    Commands that name `{venv_python}` get the leg's venv, made first; every command then
    runs in it."""
    in_venv = venv.uses_venv(commands)
    if in_venv:
        venv.ensure(dirs.venv, dirs.logs / f"{log_prefix}-00-venv.log", label, console=console)
    ran: list[dict[str, object]] = []
    for index, command in enumerate(commands, start=1):
        argv = expand_argv(command.argv, dirs, environ)
        cwd = Path(expand(command.cwd, dirs, environ) or dirs.src)
        cwd.mkdir(parents=True, exist_ok=True)
        log = dirs.logs / _log_name(index, command.label).replace("build-", f"{log_prefix}-", 1)
        run_argv = argv if command.network else isolated(argv)
        try:
            run(run_argv, env=command_env(command, plan_env, dirs, environ, in_venv), cwd=cwd, log=log,
                label=f"{label} {command.label}", echo=verbose, console=console)
        except RunError as error:
            if command.network or run_argv == argv:
                raise
            raise NetworkOffError(error, tried_urls(log)) from None
        ran.append({"label": command.label, "argv": argv, "cwd": str(cwd), "log": str(log),
                    **({"network": "off"} if run_argv != argv else {})})
    return ran


def tree_key(tree: Path) -> str:
    """What identifies a shared tree's content: a checkout's HEAD commit (the submodules' follow
    it) and its path (each selection of submodules has a checkout of its own, graph/declare.py), else
    a digest of every file's path, size and mtime."""
    if (tree / ".git").exists():
        try:
            head = subprocess.run(["git", "-C", str(tree), "rev-parse", "HEAD"], capture_output=True, text=True,
                                  check=False)
        except OSError:  # no git here: the listing below still tells trees apart
            head = None
        if head is not None and head.returncode == 0:
            return f"git:{head.stdout.strip()}:{tree.resolve()}"
    listing = hashlib.sha256()
    for path in sorted(tree.rglob("*")):
        if path.is_file() and not path.is_symlink():
            stat = path.stat()
            listing.update(f"{path.relative_to(tree).as_posix()}\0{stat.st_size}\0{stat.st_mtime_ns}\n".encode())
    return f"files:{listing.hexdigest()}"


def _copy(src: str, dst: str) -> None:
    shutil.copy2(src, dst, follow_symlinks=False)  # a symlink stays one


def private_copy(shared_src: Path, private_src: Path, key: str, windows: bool = WINDOWS) -> None:
    """Give an in-source build its own copy of the tree, refreshed when the tree key changes.
    On Windows every path goes through its extended-length form: PyTorch's tree has paths
    past MAX_PATH (260 characters), which plain `shutil` cannot reach."""
    marker = private_src.parent / f".{private_src.name}.key"
    if private_src.is_dir() and marker.is_file() and marker.read_text() == key:
        return
    shutil.rmtree(extended_length(private_src, windows), ignore_errors=True)
    private_src.parent.mkdir(parents=True, exist_ok=True)
    mirror_tree(shared_src, private_src, _copy, windows)
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
          environ: Mapping[str, str], verbose: bool, source_key: str = "", *,
          console: Console) -> list[dict[str, object]]:
    """Run the leg's upstream build (how many run at once, SCons decides: graph/declare.py)."""
    _bind_build_dir(dirs, source_key)
    return run_commands(commands, plan_env, dirs, label, environ, verbose, console=console)


def main(argv: Sequence[str] | None = None) -> int:
    """`python -m backends.steps.upstream private-copy SHARED PRIVATE`: a recipe's in-source
    build of a second tree (ExecuTorch's PyTorch) in the leg's own copy of it."""
    parser = argparse.ArgumentParser(prog="python -m backends.steps.upstream")
    sub = parser.add_subparsers(dest="command", required=True)
    copy = sub.add_parser("private-copy", help="copy SHARED to PRIVATE unless PRIVATE already holds its content")
    copy.add_argument("shared", type=Path)
    copy.add_argument("private", type=Path)
    args = parser.parse_args(argv)
    if not args.shared.is_dir():
        print(f"ERROR: private-copy: {args.shared} is not a directory (did its fetch step run?)", file=sys.stderr)
        return 1
    key = tree_key(args.shared)
    private_copy(args.shared, args.private, key)
    print(f"private copy of {args.shared} in {args.private} ({key})")
    return 0


__all__ = ["build", "copy_tree", "private_copy", "run_commands", "tree_key"]

if __name__ == "__main__":
    sys.exit(main())
