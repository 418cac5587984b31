"""Member safety: what unpacking the archive may create. No absolute or `..` names, no
symlink that is absolute or resolves outside the root, no hard links, devices or fifos."""
from __future__ import annotations

import re

from ..extract import _name_problem, _resolve
from .view import HARDLINK, SPECIAL, SYMLINK, ArchiveView

_DRIVE_LETTER = re.compile(r"^[A-Za-z]:")


def check_members(view: ArchiveView) -> list[str]:
    problems = []
    links = {e.name.rstrip("/"): e.target for e in view.entries if e.kind == SYMLINK}
    for entry in view.entries:
        reason = _name_problem(entry.name)
        if reason:
            problems.append(f"member {entry.name!r} {reason}")
        elif entry.kind == HARDLINK:
            problems.append(f"member {entry.name} is a hard link (to {entry.target}): archives hold files and symlinks")
        elif entry.kind == SPECIAL:
            problems.append(f"member {entry.name} is a device, fifo or other special file")
        elif entry.kind == SYMLINK:
            problems += _symlink_problem(entry.name.rstrip("/"), entry.target, links)
    return problems


def _symlink_problem(name: str, target: str, links: dict[str, str]) -> list[str]:
    if not target or target.startswith(("/", "\\")) or _DRIVE_LETTER.match(target):
        return [f"symlink {name} -> {target!r} is absolute: it points outside the package"]
    if _resolve(name, target, links) is None:
        return [f"symlink {name} -> {target} resolves outside the package root"]
    return []
