"""`scons -c`: remove what the selected legs built, whatever version or options built it.

SCons' own clean removes the targets the graph declares for *this* command line, so a clean
without the build's `version=` listed thousands of files that never existed and left the
real archive. Here a leg's own places are removed whole: its build directory
(`build/legs/<leg id>/`) and, in `dist/` and `dist/.stale/`, every archive of the leg in any
version and format, with its sidecars. Downloads, extractions and source trees are shared by
legs and stay: `scons gc=1` removes those no leg uses.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable

from backends.model.plan import Plan
from backends.util.files import human_size, relative_label, remove_path

_FORMATS = r"(?:zip|tar\.gz|7z)"
_SIDECARS = r"(?:\.json|\.sha256)?"


@dataclass(frozen=True)
class Cleaned:
    paths: tuple[Path, ...]
    size: int
    legs: int


def archive_pattern(plan: Plan) -> re.Pattern[str]:
    """The leg's archive names in any version and format, sidecars included."""
    stem = plan.archive.removesuffix(".zip")
    prefix, version, rest = stem.partition(f"-{plan.version}-")
    if not version:  # a name without the version in it: only its own spellings
        return re.compile(rf"{re.escape(stem)}\.{_FORMATS}{_SIDECARS}")
    return re.compile(rf"{re.escape(prefix)}-[0-9][^-/]*-{re.escape(rest)}\.{_FORMATS}{_SIDECARS}")


def targets(root: Path, plans: Iterable[Plan]) -> Cleaned:
    found: list[Path] = []
    plans = list(plans)
    for plan in plans:
        leg_dir = root / "build" / "legs" / plan.leg.id
        if leg_dir.exists():
            found.append(leg_dir)
        pattern = archive_pattern(plan)
        for directory in (root / "dist", root / "dist" / ".stale"):
            if directory.is_dir():
                found += sorted(p for p in directory.iterdir() if p.is_file() and pattern.fullmatch(p.name))
    return Cleaned(tuple(found), sum(_size(path) for path in found), len(plans))


def clean(root: Path, plans: Iterable[Plan], *, dry_run: bool, verbose: bool) -> list[str]:
    """Remove (or, dry, name) the selected legs' build trees and archives; the lines to print."""
    cleaned = targets(root, plans)
    verb = "would remove" if dry_run else "removed"
    lines = [f"  {verb} {relative_label(path, root)}" for path in cleaned.paths] if verbose else []
    trees = sum(1 for path in cleaned.paths if path.parent.name == "legs")
    files = len(cleaned.paths) - trees
    if not dry_run:
        for path in cleaned.paths:
            remove_path(path)
    lines.append(f"scons -c: {verb} {trees} build tree{'s' * (trees != 1)} and {files} file{'s' * (files != 1)} "
                 f"in dist/ ({human_size(cleaned.size)}) of {cleaned.legs} leg{'s' * (cleaned.legs != 1)}; "
                 "shared downloads and extractions stay (`scons gc=1` removes what no leg uses)"
                 + ("; verbose=1 lists each path" if cleaned.paths and not verbose else ""))
    return lines


def _size(path: Path) -> int:
    if path.is_symlink() or path.is_file():
        return path.lstat().st_size
    return sum(p.lstat().st_size for p in path.rglob("*") if p.is_file() or p.is_symlink())
