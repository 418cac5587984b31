"""ExecuTorch on Windows: kernels pass `&name` as a template non-type argument, which MSVC
accepts only for an object with static storage (C2131). Normalise every
`(static )?(const char* const|constexpr auto) name =` to `static constexpr auto name =`.
See docs/upstream.md#executorch-windows-patches.

Upstream's script edited every file of the tree; only C++ sources and headers carry the
declaration, so only those are scanned."""
from __future__ import annotations

import re

FILES: tuple[str, ...] = ("**/*.cpp", "**/*.cc", "**/*.h", "**/*.hpp")

_DECLARATION = re.compile(r"(?:static )?(?:const char\* const|constexpr auto) name =")
_NORMAL = "static constexpr auto name ="


def _unfixed(text: str) -> list[str]:
    return [m.group(0) for m in _DECLARATION.finditer(text) if m.group(0) != _NORMAL]


def already_fixed(path: str, text: str) -> bool:
    return _NORMAL in text and not _unfixed(text)


def apply(path: str, text: str) -> str | None:
    if not _unfixed(text):
        return None
    return _DECLARATION.sub(_NORMAL, text)
