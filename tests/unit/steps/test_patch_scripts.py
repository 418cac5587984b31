"""The engines' patch scripts: each applies on a fixture holding its needle, is idempotent,
recognises the fixed text (ours or upstream's) and leaves unrelated text alone."""
from __future__ import annotations

import importlib.util
import tomllib
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[3]


def load(relative: str) -> ModuleType:
    path = ROOT / relative
    spec = importlib.util.spec_from_file_location(path.stem, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


FLATC = """ExternalProject_Add(
  flatbuffers_ep
  CMAKE_ARGS -DFLATBUFFERS_BUILD_FLATC=ON
  BUILD_BYPRODUCTS <INSTALL_DIR>/bin/flatc
)
ExternalProject_Add(
  flatcc_ep
  BUILD_BYPRODUCTS <INSTALL_DIR>/bin/flatcc
)
"""
WD4996 = "set(_common_compile_options -Wno-deprecated-declarations -fPIC)\n"
CONSTEXPR = """void op() {
  static constexpr const char* const name = "add.out";
  constexpr auto name = "sub.out";
  const char* const name = "mul.out";
  static constexpr auto name = "div.out";
}
"""
VEC = "#pragma once\ninline uint lanes(ushort x) { return x; }\n"
COREML = """  onnxruntime_add_static_library(coreml_proto ${coreml_proto_srcs})
  target_include_directories(coreml_proto
                             PUBLIC $<TARGET_PROPERTY:${PROTOBUF_LIB},INTERFACE_INCLUDE_DIRECTORIES>
                             "${CMAKE_CURRENT_BINARY_DIR}")
  if (NOT onnxruntime_BUILD_SHARED_LIB)
    install(TARGETS coreml_proto
            ARCHIVE   DESTINATION ${CMAKE_INSTALL_LIBDIR}
            LIBRARY   DESTINATION ${CMAKE_INSTALL_LIBDIR}
    )
  endif()
  target_include_directories(onnxruntime_providers_coreml PRIVATE ${CMAKE_CURRENT_BINARY_DIR})
"""
UNRELATED = "cmake_minimum_required(VERSION 3.20)\nproject(unrelated CXX)\nint main() { return 0; }\n"

ORT_COREML = "cmake/onnxruntime_providers_coreml.cmake"
# script -> (fixture path, fixture text, a fragment the patched text must contain)
CASES = {
    "engines/executorch/patches/win_flatc_exe_byproduct.py":
        ("third-party/CMakeLists.txt", FLATC, "BUILD_BYPRODUCTS <INSTALL_DIR>/bin/flatc.exe\n"),
    "engines/executorch/patches/win_wd4996.py":
        ("kernels/optimized/CMakeLists.txt", WD4996, "set(_common_compile_options /wd4996 -fPIC)"),
    "engines/executorch/patches/win_static_constexpr_names.py":
        ("kernels/portable/cpu/op_add.cpp", CONSTEXPR, 'static constexpr auto name = "mul.out";'),
    "engines/libtorch/patches/win_arm64_uint_typedefs.py":
        ("aten/src/ATen/cpu/vec/vec256/vec256_int.h", VEC, "typedef unsigned short ushort;"),
    "engines/onnxruntime/patches/coreml_proto_export.py":
        (ORT_COREML, COREML, "install(TARGETS coreml_proto EXPORT ${PROJECT_NAME}Targets\n"),
    "engines/onnxruntime/patches/coreml_proto_build_interface.py":
        (ORT_COREML, COREML, '"$<BUILD_INTERFACE:${CMAKE_CURRENT_BINARY_DIR}>")'),
}
# Every patch script in the repository, so a new one without a case fails here.
SCRIPTS = sorted(path.relative_to(ROOT).as_posix() for path in ROOT.glob("engines/*/patches/*.py"))


def case(script: str) -> tuple[str, str, str]:
    assert script in CASES, f"{script} has no case in CASES: add a fixture holding its needle and the fix it makes"
    return CASES[script]


@pytest.mark.parametrize("script", SCRIPTS, ids=[Path(s).stem for s in SCRIPTS])
def test_protocol(script: str) -> None:
    path, text, fragment = case(script)
    module = load(script)
    assert isinstance(module.FILES, tuple) and module.FILES
    assert not module.already_fixed(path, text)
    patched = module.apply(path, text)
    assert patched is not None and fragment in patched
    assert module.already_fixed(path, patched)
    assert module.apply(path, patched) is None  # idempotent: nothing left to patch


@pytest.mark.parametrize("script", SCRIPTS, ids=[Path(s).stem for s in SCRIPTS])
def test_unrelated_text_is_left_alone(script: str) -> None:
    path, _, _ = case(script)
    module = load(script)
    assert module.apply(path, UNRELATED) is None
    assert not module.already_fixed(path, UNRELATED)


def test_every_case_is_a_patch_script_its_engine_lists() -> None:
    assert SCRIPTS and set(CASES) == set(SCRIPTS)
    for script in SCRIPTS:
        engine_dir = ROOT / Path(script).parents[1]
        listed = tomllib.loads((engine_dir / "engine.toml").read_text()).get("patches", [])
        assert Path(script).relative_to(engine_dir.relative_to(ROOT)).as_posix() in {p["file"] for p in listed}, \
            f"{script} is not listed under [[patches]] in {engine_dir.name}/engine.toml"


def test_flatc_leaves_flatcc_and_the_imported_location_alone() -> None:
    module = load("engines/executorch/patches/win_flatc_exe_byproduct.py")
    patched = module.apply("third-party/CMakeLists.txt", FLATC)
    assert patched is not None
    assert "<INSTALL_DIR>/bin/flatcc\n" in patched and "flatcc.exe" not in patched
    crlf = FLATC.replace("\n", "\r\n")
    assert "bin/flatc.exe\r\n" in (module.apply("third-party/CMakeLists.txt", crlf) or "")
    upstream_fix = FLATC.replace("bin/flatc\n", "bin/flatc${CMAKE_EXECUTABLE_SUFFIX}\n")
    assert module.already_fixed("third-party/CMakeLists.txt", upstream_fix)


def test_constexpr_names_normalises_every_variant_once() -> None:
    module = load("engines/executorch/patches/win_static_constexpr_names.py")
    patched = module.apply("op.cpp", CONSTEXPR) or ""
    assert patched.count("static constexpr auto name =") == 4
    assert "static static" not in patched and "const char* const name" not in patched
    assert module.already_fixed("op.cpp", 'static constexpr auto name = "x";')


def test_uint_typedefs_carry_the_marker_and_need_the_words() -> None:
    module = load("engines/libtorch/patches/win_arm64_uint_typedefs.py")
    patched = module.apply("aten/src/ATen/cpu/vec/vec.h", VEC) or ""
    assert patched.startswith("/* __win_uint_fix__") and patched.endswith(VEC)
    for typedef in ("unsigned int uint;", "unsigned short ushort;", "unsigned long ulong;", "unsigned char uchar;"):
        assert f"typedef {typedef}" in patched
    assert module.apply("vec.h", "uint8_t x; uintptr_t y; // unsigned\n") is None  # whole words only
    assert module.FILES == ("aten/src/ATen/cpu/vec/**/*.h",)


def test_coreml_patches_detect_the_upstream_fix() -> None:
    export = load("engines/onnxruntime/patches/coreml_proto_export.py")
    interface = load("engines/onnxruntime/patches/coreml_proto_build_interface.py")
    # microsoft/onnxruntime PR #27960's shape: EXPORT on its own line, include wrapped.
    upstream = COREML.replace("install(TARGETS coreml_proto\n",
                              "install(TARGETS coreml_proto\n            EXPORT ${PROJECT_NAME}Targets\n")
    upstream = upstream.replace('"${CMAKE_CURRENT_BINARY_DIR}")', "$<BUILD_INTERFACE:${CMAKE_CURRENT_BINARY_DIR}>)")
    path = "cmake/onnxruntime_providers_coreml.cmake"
    assert export.already_fixed(path, upstream) and export.apply(path, upstream) is None
    assert interface.already_fixed(path, upstream) and interface.apply(path, upstream) is None
    # Only coreml_proto's include is wrapped, not the provider's own binary-dir include.
    patched = interface.apply(path, COREML) or ""
    assert "PRIVATE ${CMAKE_CURRENT_BINARY_DIR})" in patched
