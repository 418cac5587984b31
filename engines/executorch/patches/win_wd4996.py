"""ExecuTorch on Windows: cl rejects the GCC/Clang flag `-Wno-deprecated-declarations`
(D8021); `/wd4996` is MSVC's equivalent. See docs/upstream.md#executorch-windows-patches."""
from __future__ import annotations

import re

FILES: tuple[str, ...] = ("**/CMakeLists.txt",)

_NEEDLE = re.compile(r"-Wno-deprecated-declarations(?![\w-])")
_REPLACEMENT = "/wd4996"


def already_fixed(path: str, text: str) -> bool:
    return _REPLACEMENT in text and not _NEEDLE.search(text)


def apply(path: str, text: str) -> str | None:
    if not _NEEDLE.search(text):
        return None
    return _NEEDLE.sub(_REPLACEMENT, text)
