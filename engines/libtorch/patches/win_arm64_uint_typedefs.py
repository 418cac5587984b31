"""LibTorch on Windows arm64: ATen's NEON vec headers use the BSD typedefs `uint`, `ushort`,
`ulong` and `uchar`, which MSVC does not provide. Prepend them, once, to every vec header
that uses one of the words. See docs/upstream.md#libtorch-windows-arm64."""
from __future__ import annotations

import re

FILES: tuple[str, ...] = ("aten/src/ATen/cpu/vec/**/*.h",)

MARKER = "__win_uint_fix__"
_WORDS = re.compile(r"\b(?:uint|ushort|ulong|uchar)\b")
_TYPEDEFS = (
    f"/* {MARKER}: BSD typedefs MSVC lacks (anira-backends patch win_arm64_uint_typedefs) */\n"
    "#if defined(_MSC_VER)\n"
    "typedef unsigned int uint;\n"
    "typedef unsigned short ushort;\n"
    "typedef unsigned long ulong;\n"
    "typedef unsigned char uchar;\n"
    "#endif\n"
)


def already_fixed(path: str, text: str) -> bool:
    return MARKER in text


def apply(path: str, text: str) -> str | None:
    if MARKER in text or not _WORDS.search(text):
        return None
    return _TYPEDEFS + text
