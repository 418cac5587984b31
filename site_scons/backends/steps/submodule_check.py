"""After a failed build: did it fail on a submodule the leg does not check out?

A leg of a git source whose `submodules` is "selected" checks out only the paths its
`[[submodules]]` entries select (steps/git.py); the other submodule directories stay empty.
A build that needs one fails naming a path under it (CMake: "The source directory
.../third-party/pybind11 does not contain a CMakeLists.txt file", a compiler: "fatal error:
.../third-party/pybind11/include/pybind11/pybind11.h: No such file or directory"). This
finds such a path in the failed command's output, so the error names the submodule and the
data entry to add it to instead of leaving a maintainer to read CMake's.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable, Mapping

from backends.runner.run import RunError
from backends.steps import git

# How much of the end of a failed command's log is read: a configure log ends with the error.
LOG_TAIL_BYTES = 256 * 1024


class MissingSubmodule(RunError):
    """A build command failed reading a submodule the leg does not check out; the message
    names it, its URL and what to edit."""


@dataclass(frozen=True)
class Checkout:
    """A git source as a leg checked it out: where, from which URL, with which submodules."""

    tree: Path
    url: str
    selected: tuple[str, ...]

    def unselected(self) -> dict[str, str]:
        """The submodules its `.gitmodules` declares that it was checked out without: path -> URL."""
        return {path: absolute_url(url, self.url) for path, url in git.submodule_urls(self.tree).items()
                if path not in self.selected}


def absolute_url(url: str, base: str) -> str:
    """A relative submodule URL (`../x.git`) resolved against the superproject's, as git does."""
    if not url.startswith(("./", "../")):
        return url
    parts = base.rstrip("/").split("/")
    for piece in url.split("/"):
        if piece == "..":
            parts.pop()
        elif piece != ".":
            parts.append(piece)
    return "/".join(parts)


def named_in(text: str, paths: Iterable[str]) -> tuple[str, str] | None:
    """The first of `paths` a line of `text` names as a path (or a path below it), with that line."""
    patterns = [(path, re.compile(rf"(?:^|[/\s'\"(=]){re.escape(path)}(?:$|[/\s'\":),])")) for path in paths]
    for line in text.splitlines():
        normal = line.replace("\\", "/")  # Windows paths
        for path, pattern in patterns:
            if any(_as_path(path, match.group(0)) for match in pattern.finditer(normal)):
                return path, line.strip()
    return None


def _as_path(path: str, found: str) -> bool:
    """A one-component path (`shim`) counts only beside a `/`: as a word it is just a word."""
    return "/" in path or found.startswith("/") or found.endswith("/")


def output_of(error: RunError) -> str:
    """What the failed command printed: the end of its log, else the tail the error kept."""
    try:
        with open(error.log, "rb") as handle:
            handle.seek(0, 2)
            handle.seek(max(0, handle.tell() - LOG_TAIL_BYTES))
            return handle.read().decode("utf-8", errors="replace")
    except OSError:
        return "\n".join(error.tail)


def check(error: RunError, checkouts: Mapping[str, Checkout],
          advice: Callable[[str, str], str]) -> MissingSubmodule | None:
    """The failure `error` as a MissingSubmodule when its output names a path under a
    submodule some source (by name) was checked out without; `advice(source, path)`: what to edit."""
    text = output_of(error)
    for source, checkout in checkouts.items():
        absent = checkout.unselected()
        found = named_in(text, absent)
        if found is None:
            continue
        path, line = found
        what_to_do = advice(source, path)
        reason = (f"failed with exit code {error.returncode}: the build reads the submodule {path} of {source} "
                  f"({absent[path] or 'no URL in .gitmodules'}), which this leg does not check out (its output: "
                  f"{line!r}); {what_to_do}")
        return MissingSubmodule(error.label, error.returncode, error.log, error.tail, reason=reason)
    return None
