"""Path globs with `**` (any number of directories) and `*` (within one path segment)."""
from __future__ import annotations

import re
from functools import lru_cache
from pathlib import Path


@lru_cache(maxsize=4096)
def glob_regex(pattern: str) -> re.Pattern[str]:
    out = []
    i = 0
    while i < len(pattern):
        if pattern.startswith("**/", i):
            out.append("(?:.*/)?")
            i += 3
        elif pattern.startswith("**", i):
            out.append(".*")
            i += 2
        elif pattern[i] == "*":
            out.append("[^/]*")
            i += 1
        elif pattern[i] == "?":
            out.append("[^/]")
            i += 1
        else:
            out.append(re.escape(pattern[i]))
            i += 1
    return re.compile("".join(out) + r"\Z")


def matches(path: str, pattern: str) -> bool:
    return glob_regex(pattern).match(path) is not None


def matches_any(path: str, patterns: tuple[str, ...] | list[str]) -> bool:
    return any(matches(path, p) for p in patterns)


def static_prefix(pattern: str) -> str:
    """The directory part of a pattern before its first wildcard."""
    parts = []
    for part in pattern.split("/"):
        if any(c in part for c in "*?["):
            break
        parts.append(part)
    return "/".join(parts)


def find(pattern: str) -> list[Path]:
    """Files and symlinks matching an absolute pattern, sorted; directories are not returned.
    Matching is on forward-slash paths, so Windows paths (C:\\...) match too."""
    pattern = pattern.replace("\\", "/")
    base = Path(static_prefix(pattern) or "/")
    if not any(c in pattern for c in "*?"):
        path = Path(pattern)
        return [path] if path.is_symlink() or path.is_file() else []
    if not base.is_dir():
        return []
    regex = glob_regex(pattern)
    found = []
    for root, dirs, files in _walk(base):
        for name in files:
            candidate = Path(root, name)
            if regex.match(candidate.as_posix()):
                found.append(candidate)
    return sorted(found)


def _walk(base: Path):
    import os

    for root, dirs, files in os.walk(base):
        # Symlinked directories are reported as entries (kept as links), never followed.
        linked = [d for d in dirs if os.path.islink(os.path.join(root, d))]
        dirs[:] = sorted(d for d in dirs if d not in linked)
        yield root, dirs, sorted(files + linked)
