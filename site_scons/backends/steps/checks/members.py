"""Member safety: what unpacking the archive may create. Names are judged in the canonical
form extraction writes (`./x`, `a//x`, `a/./x` and `a\\x` are `x`, `a/x`, `a/x`, `a/x`): no
absolute or `..` names, no name stored twice (nor twice but for case, where the leg's OS
folds case), no symlink that is absolute or resolves outside the root, nothing beneath a
symlink, no hard links, devices or fifos, no setuid, setgid or sticky bit."""
from __future__ import annotations

import re
import stat
from collections import defaultdict
from typing import Callable

from backends.steps.checks.view import DIR, HARDLINK, SPECIAL, SYMLINK, ArchiveView, Entry
from backends.steps.extract import _name_problem, _resolve

_DRIVE_LETTER = re.compile(r"^[A-Za-z]:")
# Where a consumer unpacks the package on a file system that folds case by default.
CASE_FOLDING_OSES = ("macos", "ios", "windows")
Key = Callable[[str], str]  # how the file system compares names
_SPECIAL_BITS = ((stat.S_ISUID, "setuid"), (stat.S_ISGID, "setgid"), (stat.S_ISVTX, "sticky"))


def folds_case(platform: str) -> bool:
    """Whether the leg's OS (`macos-arm64`, `ios`, `windows-x86_64`) folds case in names."""
    return platform.partition("-")[0] in CASE_FOLDING_OSES


def check_members(view: ArchiveView, fold_case: bool = False) -> list[str]:
    key: Key = str.casefold if fold_case else str
    judged = [(e, _name_problem(e.stored or e.name)) for e in view.entries]
    problems = [f"member {e.stored or e.name!r} {reason}" for e, reason in judged if reason]
    safe = [e for e, reason in judged if not reason]
    links = {key(e.name): key(e.target) for e in safe if e.kind == SYMLINK}
    problems += _duplicates(safe, key, fold_case)
    for entry in safe:
        problems += _entry_problems(entry, links, key)
    return problems


def _entry_problems(entry: Entry, links: dict[str, str], key: Key) -> list[str]:
    shown = _shown(entry)
    problems = [f"member {shown} has the {bit} bit (mode {entry.mode:o}): unpacking could keep it"
                for flag, bit in _SPECIAL_BITS if entry.mode & flag]
    if not entry.name and entry.kind != DIR:
        problems.append(f"member {entry.stored!r} is a {entry.kind} named like the archive root")
    elif entry.kind == HARDLINK:
        problems.append(f"member {shown} is a hard link (to {entry.target}): archives hold files and symlinks")
    elif entry.kind == SPECIAL:
        problems.append(f"member {shown} is a device, fifo or other special file")
    elif entry.kind == SYMLINK:
        problems += _symlink_problem(shown, key(entry.name), entry.target, links)
    parent = _symlinked_parent(key(entry.name), links)
    if parent:
        problems.append(f"member {shown} lies beneath the symlink {parent}: unpacking would write through it")
    return problems


def _duplicates(entries: list[Entry], key: Key, fold_case: bool) -> list[str]:
    """Names unpacking makes one file of: one canonical name (case folded where the OS
    folds it) stored more than once. A directory listed twice is harmless."""
    groups: dict[str, list[Entry]] = defaultdict(list)
    for entry in entries:
        if entry.name:
            groups[key(entry.name)].append(entry)
    problems = []
    for group in groups.values():
        if len(group) < 2 or all(e.kind == DIR for e in group):
            continue
        spellings = ", ".join(repr(e.stored or e.name) for e in group)
        case = " (one name on a case-insensitive file system)" if fold_case and len({e.name for e in group}) > 1 else ""
        problems.append(f"member {group[0].name} is stored {len(group)} times{case}: {spellings}; "
                        "unpacking keeps one of them")
    return problems


def _symlink_problem(shown: str, name: str, target: str, links: dict[str, str]) -> list[str]:
    if not target or target.startswith(("/", "\\")) or _DRIVE_LETTER.match(target):
        return [f"symlink {shown} -> {target!r} is absolute: it points outside the package"]
    if _resolve(name, links[name], links) is None:
        return [f"symlink {shown} -> {target} resolves outside the package root"]
    return []


def _symlinked_parent(name: str, links: dict[str, str]) -> str:
    """The first directory above `name` that is a symlink ("" when none is)."""
    parts = name.split("/")
    parents = ("/".join(parts[:depth]) for depth in range(1, len(parts)))
    return next((parent for parent in parents if parent in links), "")


def _shown(entry: Entry) -> str:
    """The canonical name, with the archive's spelling when it differs (a directory's
    trailing `/` aside)."""
    stored = entry.stored.rstrip("/") if entry.kind == DIR else entry.stored
    return entry.name if not stored or stored == entry.name else f"{entry.name} (stored as {entry.stored!r})"
