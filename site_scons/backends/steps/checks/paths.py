"""Relocatability: the build metadata a package ships (CMake, pkg-config and libtool files)
names no absolute path outside the package other than a system location.

A consumer's machine has neither the runner's checkout (`/home/runner/work/...`,
`/__w/1/s/build/...`, `D:/a/...`) nor its build tree; a system location (`/usr`, an SDK
under `/Applications/Xcode*.app`, `C:/Program Files/...`) is where a consumer's own
toolchain lives. Comments are skipped: CMake's own find modules document paths there.
"""
from __future__ import annotations

import re

from .view import ArchiveView

METADATA = re.compile(r"(\.cmake|\.pc|\.la|/CMakeLists\.txt)$")
# An absolute path at the start of a token: POSIX with at least two components (so MSVC
# flags such as "/wd4996" are not paths), or a drive letter.
_POSIX_PATH = re.compile(r"""(?:^|(?<=[\s"'(;=,])|(?<=-[ILl])|(?<=-Wl,-rpath,))(/[\w.+@-]+/[^\s"';)]*)""")
_DRIVE_PATH = re.compile(r"""(?:^|(?<=[\s"'(;=,]))([A-Za-z]:[\\/][^"';)\n]*)""")
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
    """Absolute paths in `text` (CMake comments removed) that are no system location."""
    found = []
    for line in _code_lines(text):
        for pattern in (_POSIX_PATH, _DRIVE_PATH):
            for match in pattern.finditer(line):
                path = match.group(1)
                if not _is_system(path):
                    found.append(path.split()[0] if pattern is _DRIVE_PATH else path)
    return found


def _code_lines(text: str) -> list[str]:
    text = _BRACKET_COMMENT.sub("", text)
    return [line for line in text.splitlines() if not line.lstrip().startswith("#")]


def _is_system(path: str) -> bool:
    normal = re.sub(r"[\\/]+", "/", path)
    if re.match(r"^[A-Za-z]:", normal):
        normal = normal.lower()
    return normal.startswith(SYSTEM_PREFIXES)
