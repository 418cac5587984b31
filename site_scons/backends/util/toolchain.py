"""Finding the binary tools the steps call (llvm-lipo, llvm-nm, lib.exe, ...).

Debian installs LLVM tools with a version suffix (`llvm-lipo-14`) and only some of
them unsuffixed; Xcode and MSVC ship their own spellings (`lipo`, `libtool`, `lib.exe`)
with a compatible command line. `find_tool` hides those differences.
"""
from __future__ import annotations

import functools
import os
import shutil
import subprocess
import sys
from typing import Iterable

from backends.util.errors import BackendsError

# Debian/apt.llvm.org suffixes, newest first.
LLVM_SUFFIXES = tuple(range(20, 13, -1))

# Native tools that accept the same command line as the LLVM tool, per host OS.
# GNU libtool (Linux) and `lib` anywhere but Windows are unrelated programs.
_NATIVE_EQUIVALENTS: dict[str, dict[str, tuple[str, ...]]] = {
    "llvm-lipo": {"darwin": ("lipo",)},
    "llvm-libtool-darwin": {"darwin": ("libtool",)},
    "llvm-lib": {"win32": ("lib.exe",)},
    # Xcode's nm and otool are LLVM's, with the same options.
    "llvm-nm": {"darwin": ("nm",)},
    "llvm-otool": {"darwin": ("otool",)},
    "llvm-objdump": {"darwin": ("objdump",)},
}


class ToolMissing(BackendsError, RuntimeError):
    """A tool a step needs is not installed on this host."""


# The project's OS names -> sys.platform's, for asking about a host other than this one.
PLATFORM_OF_OS = {"macos": "darwin", "windows": "win32", "linux": "linux"}


def _host() -> str:
    return "win32" if sys.platform.startswith("win") else sys.platform


def native_equivalents(name: str, system: str | None = None) -> tuple[str, ...]:
    """The Apple/MSVC spellings that can stand in for `name` on this host (or on the
    sys.platform `system`)."""
    return _NATIVE_EQUIVALENTS.get(name, {}).get(system or _host(), ())


def candidate_names(name: str, *, prefer_native: bool = False, system: str | None = None) -> list[str]:
    """Every spelling `find_tool` tries, in order."""
    llvm_names = [name] + [f"{name}-{suffix}" for suffix in LLVM_SUFFIXES]
    native = list(native_equivalents(name, system))
    return native + llvm_names if prefer_native else llvm_names + native


def find_tool(name: str, *, prefer_native: bool = False, system: str | None = None,
              path: str | None = None) -> str | None:
    """The absolute path of `name` (or a versioned/native spelling of it), or None.

    `prefer_native=True` tries Xcode's/MSVC's tool first (what upstream uses on that
    host); otherwise the LLVM spellings come first. `system` and `path` ask as a host of
    that sys.platform with that PATH would (default: this one's).
    """
    for candidate in candidate_names(name, prefer_native=prefer_native, system=system):
        found = shutil.which(candidate, path=path)
        if found:
            return found
    return None


def require_tool(name: str, purpose: str, *, prefer_native: bool = False) -> str:
    """Like `find_tool`, but a missing tool is a `ToolMissing` error naming its use."""
    found = find_tool(name, prefer_native=prefer_native)
    if found is None:
        hint = ("install Debian's llvm package or Xcode" if name.startswith("llvm-")
                else "install it or put it on PATH")
        raise ToolMissing(f"{name} not found (needed for {purpose}); {hint}")
    return found


def is_native(tool_path: str) -> bool:
    """True when `tool_path` is Xcode's/MSVC's tool rather than an LLVM one."""
    base = os.path.basename(tool_path).lower()
    return not base.startswith("llvm-")


@functools.lru_cache(maxsize=None)
def tool_version(path: str) -> str:
    """The first line `path --version` prints, for step signatures.

    Tools without `--version` (Apple lipo, lib.exe) still print a banner or usage
    line; that line identifies them well enough. Empty output gives "unknown".
    """
    try:
        completed = subprocess.run(
            [path, "--version"],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            timeout=60,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as error:
        return f"unknown ({error})"
    for line in completed.stdout.decode("utf-8", "replace").splitlines():
        if line.strip():
            return line.strip()
    return "unknown"


def identity(names: Iterable[str], path: str) -> dict[str, str]:
    """Which program each name starts on a child's PATH, and its version: the compiler a
    child uses is the one its PATH finds, not ours. {name: "<realpath>: <version>"}."""
    found = {}
    for name in names:
        program = shutil.which(name, path=path) if name else None
        found[name] = f"{os.path.realpath(program)}: {tool_version(program)}" if program else "absent"
    return found
