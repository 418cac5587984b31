"""One writer per tree: the lock a run holds on build/, and the sweep of what dead runs left.

A run that builds (or cleans) holds `build/.lock` until it exits; a second run in the same
tree waits for it, saying whom it waits for, or refuses at once with `wait=0`. Holding the
lock, a run owns every temp under build/ and dist/: whatever a killed run left there
(`<name>.tmp-<pid>`, `<name>.old-<pid>`) is removed at start. The download cache may be
shared by several trees, so there only temps of dead processes are removed.
"""
from __future__ import annotations

import os
import re
import sys
from pathlib import Path
from typing import Iterator, TextIO

from backends.util.errors import BackendsError
from backends.util.files import remove_path
from backends.util.locks import FileLock, LockBusy

# `<name>.tmp-<pid>`, `.<name>.tmp-<pid>`, `<name>.tmp-<pid>-<thread>`, `<name>.old-<pid>`
# build/<kind>/: the step records and trees shared between legs (commands/gc.py judges them too).
STEP_DIRS = ("downloads", "git", "extract", "src")
_TEMP = re.compile(r"\.(?:tmp|old)-(\d+)(?:-\d+)?$")


class TreeBusy(BackendsError, RuntimeError):
    """Another run holds the tree and this one was told not to wait."""


def lock_tree(build_root: Path, *, wait: bool, stream: TextIO | None = None) -> FileLock:
    """Hold `build_root` for this process (released when it exits, however it exits)."""
    lock = FileLock(build_root / ".lock")
    out = stream or sys.stderr

    def waiting(holder: str) -> None:
        out.write(f"scons: {build_root} is in use by {holder}; waiting for it to finish "
                  "(wait=0 refuses instead)\n")
        out.flush()

    try:
        lock.acquire(wait=wait, on_wait=waiting)
    except LockBusy as busy:
        raise TreeBusy(f"{build_root} is in use by {busy.holder}; wait for it, or run without wait=0") from None
    return lock


def _temps(root: Path, depth: int) -> Iterator[tuple[Path, int]]:
    try:
        entries = list(os.scandir(root))
    except OSError:
        return
    for entry in entries:
        match = _TEMP.search(entry.name)
        if match:
            yield Path(entry.path), int(match.group(1))
        elif depth > 1 and entry.is_dir(follow_symlinks=False):
            yield from _temps(Path(entry.path), depth - 1)


def _alive(pid: int) -> bool:
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OSError):
        return True
    return True


def temp_places(build_root: Path, dist: Path, cache: Path) -> tuple[list[tuple[Path, int]], list[tuple[Path, int]]]:
    """Where the steps write temps, with how deep to look: (owned by the tree, shared).
    Never deeper: an extracted or built tree is upstream's, whatever its files are called."""
    owned = [(build_root, 1), (dist, 1)]
    owned += [(build_root / kind, 2) for kind in STEP_DIRS]
    owned.append((build_root / "binary-cache", 2))  # `<key>/.<file>.tmp-<pid>` of a download cut short
    owned += [(leg / part, 1) for leg in _dirs(build_root / "legs") for part in ("", "archive", "steps")]
    return owned, [(cache / "sha256", 2), (cache / "partial", 1)]


def _dirs(root: Path) -> list[Path]:
    try:
        return [Path(e.path) for e in os.scandir(root) if e.is_dir(follow_symlinks=False)]
    except OSError:
        return []


def sweep_stale_temps(owned: list[tuple[Path, int]], shared: list[tuple[Path, int]]) -> list[Path]:
    """Remove temps left by other runs: every one in `owned` places (this run holds the
    tree), those of dead processes in `shared` ones. Returns what was removed."""
    removed = []
    for (root, depth), must_be_dead in [*((place, False) for place in owned), *((place, True) for place in shared)]:
        for path, pid in _temps(root, depth):
            if pid == os.getpid() or (must_be_dead and _alive(pid)):
                continue
            remove_path(path)
            removed.append(path)
    return removed
