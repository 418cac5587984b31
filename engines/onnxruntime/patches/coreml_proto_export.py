"""ONNX Runtime static builds with --use_coreml: `coreml_proto` is installed without
`EXPORT ${PROJECT_NAME}Targets`, yet the exported CoreML provider and `onnxruntime` depend on
it, so CMake's generate step aborts ("requires target coreml_proto that is not in any export
set"). Fixed upstream by microsoft/onnxruntime PR #27960. See docs/upstream.md#fix-coreml-export."""
from __future__ import annotations

import re

FILES: tuple[str, ...] = ("cmake/onnxruntime_providers_coreml.cmake",)

_INSTALL = re.compile(r"install\s*\(\s*TARGETS\s+coreml_proto\b")
_EXPORT = re.compile(r"\bEXPORT\b")


def _install_call(text: str) -> re.Match[str] | None:
    return _INSTALL.search(text)


def _call_body(text: str, match: re.Match[str]) -> str:
    end = text.find(")", match.end())
    return text[match.end(): end if end >= 0 else len(text)]


def already_fixed(path: str, text: str) -> bool:
    match = _install_call(text)
    return match is not None and bool(_EXPORT.search(_call_body(text, match)))


def apply(path: str, text: str) -> str | None:
    match = _install_call(text)
    if match is None or _EXPORT.search(_call_body(text, match)):
        return None
    return text[:match.end()] + " EXPORT ${PROJECT_NAME}Targets" + text[match.end():]
