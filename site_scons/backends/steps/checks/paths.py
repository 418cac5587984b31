"""Relocatability: the build metadata a package ships (CMake, pkg-config, libtool, qmake
and other build configuration files) names no absolute path outside the package other than a
system location.

A consumer's machine has neither the runner's checkout (`/home/runner/work/...`,
`/__w/1/s/build/...`, `D:/a/...`) nor its build tree; a system location (`/usr`, an SDK
under `/Applications/Xcode*.app`, `C:/Program Files/...`) is where a consumer's own
toolchain lives. Comments are skipped: CMake's own find modules document paths there.

A path is found wherever a tool would read one: a word of its own, a value after `=`, an
item of a `;` (CMake) or `:` (PATH-like) list, and glued to a flag (`-I/x`, `-isystem/x`,
`-F/x`, `-Wl,-rpath,/x`, `-LC:/x`).
"""
from __future__ import annotations

import re

from backends.steps.checks.view import ArchiveView

# CMake, pkg-config, libtool, qmake, MSBuild, Xcode and other build configuration files.
METADATA = re.compile(r"(\.(cmake|pc|la|prl|pri|props|targets|xcconfig|cfg|conf|ini)|/CMakeLists\.txt"
                      r"|^bin/[^/]+-config)$")
# What starts a path: the line's start, a separator, or a `:` that is no drive letter's.
_BOUNDARY = r"""(?:^|(?<=[\s"'(;=,:]))"""
# A flag glued to the path it names (`-isystem/x`, `-LC:/x`): the flag is dropped.
_GLUED_FLAG = re.compile(_BOUNDARY + r"-{1,2}[A-Za-z][\w+-]*?(?=/|[A-Za-z]:[\\/])")
# An absolute path: POSIX with at least two components (so MSVC flags such as "/wd4996"
# are not paths), or a drive letter (which may hold spaces: "C:/Program Files").
_POSIX_PATH = re.compile(_BOUNDARY + r"""(/[\w.+@-]+/[^\s"';)>:,]*)""")
_DRIVE_PATH = re.compile(_BOUNDARY + r"""([A-Za-z]:[\\/](?:[^\s"';)>]|\s+(?=[^\s"';)>-]))*)""")
_BRACKET_COMMENT = re.compile(r"#\[(=*)\[.*?\]\1\]", re.S)
SYSTEM_PREFIXES = (
    "/usr/", "/lib/", "/lib64/", "/bin/", "/sbin/", "/etc/", "/opt/", "/System/", "/Library/",
    "/Applications/Xcode", "/Developer/",
    "c:/program files", "c:/windows/",
    "c:/opt/",  # ROCm's and MIOpen's default location on Windows (PyTorch's LoadHIP.cmake)
)


def check_paths(view: ArchiveView, build_root: str) -> list[str]:
    problems = []
    roots = {build_root, build_root.replace("\\", "/")} - {""}
    for name in view.names:
        if name in view.symlinks or not METADATA.search(name):
            continue
        text = view.read(name).decode("utf-8", "replace")
        found = foreign_paths(text) + [root for root in roots if root in text]
        if found:
            shown = ", ".join(sorted(set(found))[:3])
            problems.append(f"{name} refers to a path outside the package ({shown}): the package is not relocatable")
    return problems


def foreign_paths(text: str) -> list[str]:
    """Absolute paths in `text` (CMake comments removed) that are no system location, each
    to its first space."""
    return [path.split()[0] for line in _code_lines(text) for path in _absolute_paths(line) if not _is_system(path)]


def _absolute_paths(line: str) -> list[str]:
    line = _GLUED_FLAG.sub(" ", line)
    drives = list(_DRIVE_PATH.finditer(line))
    for match in drives:  # blanked, so a drive's colon starts no POSIX path ("C:/Windows")
        line = line[:match.start(1)] + " " * len(match.group(1)) + line[match.end(1):]
    return [m.group(1) for m in drives] + [m.group(1) for m in _POSIX_PATH.finditer(line)]


def _code_lines(text: str) -> list[str]:
    text = _BRACKET_COMMENT.sub("", text)
    return [line for line in text.splitlines() if not line.lstrip().startswith("#")]


def _is_system(path: str) -> bool:
    normal = re.sub(r"[\\/]+", "/", path)
    if re.match(r"^[A-Za-z]:", normal):
        normal = normal.lower()
    return normal.startswith(SYSTEM_PREFIXES)
