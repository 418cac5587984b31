"""ExecuTorch on Windows + Ninja: the flatc ExternalProject must declare `flatc.exe` as its
byproduct, or Ninja finds no rule for the imported `flatc.exe` ("missing and no known rule
to make it"). See docs/upstream.md#executorch-windows-patches."""
from __future__ import annotations

import re

FILES: tuple[str, ...] = ("third-party/CMakeLists.txt",)

# The byproduct line ending in the extension-less host tool; `flatcc` does not match.
_NEEDLE = re.compile(r"(BUILD_BYPRODUCTS\s+<INSTALL_DIR>/bin/flatc)(?=[ \t]*\r?$)", re.MULTILINE)
_FIXED = re.compile(r"BUILD_BYPRODUCTS\s+<INSTALL_DIR>/bin/flatc(\.exe|\$\{CMAKE_EXECUTABLE_SUFFIX\})")


def already_fixed(path: str, text: str) -> bool:
    return bool(_FIXED.search(text)) and not _NEEDLE.search(text)


def apply(path: str, text: str) -> str | None:
    if not _NEEDLE.search(text):
        return None
    return _NEEDLE.sub(r"\1.exe", text)
