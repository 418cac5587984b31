"""What a leg's stage takes from one extraction: the members its copy rules match and its
excludes keep, so the extraction writes those and leaves out the rest (a wheel's Python
sources, test binaries and Python-only libraries).

Judged on member names, the way `stage.collect` judges paths on disk: a rule's pattern
below `{extract:<name>}`, the destination it gives a member, the plan's excludes over that
destination. Where anything but a copy rule reads the tree (a command, its environment, a
fixup, a bundle, the leg's source), the stage takes everything: `takes` is None. So it is for
an archive that is no zip: a tar's or 7z's listing comes only with its bytes
(steps/extract.py), and keying its whole extraction by rules would only re-extract it.
"""
from __future__ import annotations

import posixpath
from dataclasses import dataclass
from typing import Mapping

from backends.model.plan import Download, Plan
from backends.steps.extract import ExtractError, archive_format
from backends.util.globs import matches, matches_any


@dataclass(frozen=True)
class Take:
    """One copy rule, its pattern below the extraction's root (`lib/**`, `../x-*.dist-info/LICENSE`)."""

    pattern: str
    dest: str
    rename: str = ""


@dataclass(frozen=True)
class Takes:
    """The rules and excludes that decide which members an extraction writes (its key too)."""

    rules: tuple[Take, ...]
    exclude: tuple[str, ...]
    roots: tuple[str, ...] = ()

    def root(self, members: Mapping[str, str]) -> str | None:
        """The download's root among `members` (name -> kind) as the stage will find it on disk
        (the first of `roots` that is a directory, else the tree); None when a root is a symlink
        (the disk would follow it, names cannot)."""
        for root in self.roots:
            if members.get(root) == "symlink":
                return None
            if members.get(root) == "dir" or any(name.startswith(f"{root}/") for name in members):
                return root
        return ""

    def select(self, members: Mapping[str, str]) -> set[str]:
        """The names of `members` (name -> file|dir|symlink|hardlink) the stage may take, and
        the root directory; every name when the root cannot be judged by name."""
        root = self.root(members)
        if root is None:
            return set(members)
        patterns = [(rule, posixpath.normpath(posixpath.join(root, rule.pattern))) for rule in self.rules]
        kept = {name for name, kind in members.items()
                if kind != "dir" and any(self._takes(rule, pattern, name) for rule, pattern in patterns)}
        if root:
            kept.add(root)
        return kept

    def _takes(self, rule: Take, pattern: str, name: str) -> bool:
        if not matches(name, pattern):
            return False
        return not matches_any(destination(rule, pattern, name), self.exclude)


def destination(rule: Take, pattern: str, name: str) -> str:
    """Where `stage.collect` puts member `name` that `pattern` (rooted like it) matched."""
    if rule.rename:
        rel = rule.rename
    elif "**" in pattern:
        below = pattern.split("**", 1)[0].rstrip("/")
        depth = len(below.split("/")) if below else 0
        rel = "/".join(name.split("/")[depth:])
    else:
        rel = posixpath.basename(name)
    return f"{rule.dest.rstrip('/')}/{rel}" if rule.dest else rel


def takes(plan: Plan, download: Download, filename: str) -> Takes | None:
    """What the plan's stage takes from `download`'s extraction (of the archive `filename`:
    the download's, or its origin's); None when it may read all of it."""
    symbol = f"{{extract:{download.name}}}"
    if download.name == "source" or plan.private_source or not download.unpack or not _is_zip(filename):
        return None
    elsewhere = (plan.build, tuple(plan.env.items()), plan.fixups, plan.bundle, plan.smoke, plan.patches)
    if symbol in repr(elsewhere):
        return None
    rules: list[Take] = []
    for rule in plan.collect:
        if symbol not in rule.pattern:
            continue
        rest = rule.pattern[len(symbol):]
        if not rule.pattern.startswith(f"{symbol}/") or "{" in rest:
            return None  # the tree itself, or a symbol only the run resolves
        rules.append(Take(rest[1:], rule.dest, rule.rename))
    return Takes(tuple(rules), tuple(plan.exclude), download.roots)


def _is_zip(filename: str) -> bool:
    try:
        return archive_format(filename) == "zip"
    except ExtractError:
        return False
