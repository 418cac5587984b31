"""ONNX Runtime static builds with --use_coreml, layer 2: once `coreml_proto` is exported,
its PUBLIC include of `${CMAKE_CURRENT_BINARY_DIR}` is a build-tree path the installed export
rejects ("INTERFACE_INCLUDE_DIRECTORIES property contains path ..."). Wrap it in
`$<BUILD_INTERFACE:...>`; the build itself is unchanged. Fixed upstream by
microsoft/onnxruntime PR #27960. See docs/upstream.md#fix-coreml-build-interface."""
from __future__ import annotations

import re

FILES: tuple[str, ...] = ("cmake/onnxruntime_providers_coreml.cmake",)

_CALL = re.compile(r"target_include_directories\s*\(\s*coreml_proto\b[^)]*\)")
# The binary dir (plus any subpath) not already inside a BUILD_INTERFACE generator expression.
_BARE_DIR = re.compile(r"(?<!BUILD_INTERFACE:)\$\{CMAKE_CURRENT_BINARY_DIR\}[^\s\")>]*")
_WRAPPED = re.compile(r"\$<BUILD_INTERFACE:\$\{CMAKE_CURRENT_BINARY_DIR\}")


def already_fixed(path: str, text: str) -> bool:
    call = _CALL.search(text)
    return call is not None and bool(_WRAPPED.search(call.group(0))) and not _BARE_DIR.search(call.group(0))


def apply(path: str, text: str) -> str | None:
    call = _CALL.search(text)
    if call is None or not _BARE_DIR.search(call.group(0)):
        return None
    wrapped = _BARE_DIR.sub(lambda m: f"$<BUILD_INTERFACE:{m.group(0)}>", call.group(0))
    return text[:call.start()] + wrapped + text[call.end():]
