"""The TFLite Metal legs linked as a macOS consumer links them, on this host: the wrapper
(engines/tflite/cmake) is configured with the leg's own plan commands for Darwin (clang
-target, ld64.lld, a stub SDK), over a fixture tree shaped like TensorFlow 2.17's
tensorflow/lite: `tensorflow-lite` holds the GPU delegate's common code (tflite::gpu),
`metal_delegate` is a static library that links nothing, and the C library's dylib
exports only `_TfLite*` (upstream's tensorflow/lite/c/exported_symbols.lds)."""
from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from backends.binfmt.objects import nm_symbol_table
from backends.model.matrix import load_matrix
from backends.model.plan import Plan
from backends.model.recipes import plan_all
from backends.steps.bundle import merge_static, undefined_internal_symbols
from backends.steps.context import LegDirs, expand_argv
from backends.util.toolchain import find_tool

ROOT = Path(__file__).resolve().parents[3]

# --- a tree shaped like TensorFlow 2.17's tensorflow/lite (targets, options, export list) ---
LITE_CMAKE = """cmake_minimum_required(VERSION 3.16)
project(tensorflow-lite C CXX)
option(TFLITE_ENABLE_GPU "Enable GPU" OFF)
option(TFLITE_ENABLE_METAL "Enable Metal delegate (iOS only)" OFF)
option(TFLITE_ENABLE_XNNPACK "Enable XNNPACK backend" ON)
set(_srcs core.cc)
if(TFLITE_ENABLE_GPU)
  list(APPEND _srcs delegates/gpu/common/model_builder.cc)
  if(TFLITE_ENABLE_METAL AND "${CMAKE_SYSTEM_NAME}" STREQUAL "Darwin")
    add_library(metal_delegate STATIC delegates/gpu/metal_delegate.cc)
  endif()
endif()
add_library(tensorflow-lite ${_srcs})
"""
C_CMAKE = """cmake_minimum_required(VERSION 3.16)
project(tensorflow-lite-c C CXX)
option(TFLITE_C_BUILD_SHARED_LIBS "Build shared libraries" ON)
get_filename_component(TENSORFLOW_SOURCE_DIR "${CMAKE_CURRENT_LIST_DIR}/../../../" ABSOLUTE)
add_subdirectory("${TENSORFLOW_SOURCE_DIR}/tensorflow/lite" "${CMAKE_CURRENT_BINARY_DIR}/tensorflow-lite" EXCLUDE_FROM_ALL)
set(TFLITE_C_LIBTYPE STATIC)
if(TFLITE_C_BUILD_SHARED_LIBS)
  set(TFLITE_C_LIBTYPE SHARED)
endif()
add_library(tensorflowlite_c ${TFLITE_C_LIBTYPE} c_api.cc)
if(TFLITE_C_BUILD_SHARED_LIBS AND APPLE)
  target_link_options(tensorflowlite_c PRIVATE "-Wl,-exported_symbols_list,${TENSORFLOW_SOURCE_DIR}/tensorflow/lite/c/exported_symbols.lds")
endif()
target_link_libraries(tensorflowlite_c tensorflow-lite)
"""
SOURCES = {
    "CMakeLists.txt": LITE_CMAKE,
    "c/CMakeLists.txt": C_CMAKE,
    "c/exported_symbols.lds": "_TfLite*\n",
    "core.cc": "namespace tflite { int Interpret(int x) { return x + 1; } }\n",
    "c/c_api.cc": 'namespace tflite { int Interpret(int x); }\nextern "C" int TfLiteInterpreterInvoke(int x) '
                  "{ return tflite::Interpret(x); }\n",
    "delegates/gpu/common/model_builder.cc": "namespace tflite { namespace gpu { int BuildModel(int x) "
                                             "{ return 3 * x; } } }\n",
    "delegates/gpu/metal_delegate.cc": 'namespace tflite { namespace gpu { int BuildModel(int x); } }\n'
                                       'extern "C" void* TFLGpuDelegateCreate(const void*) '
                                       "{ return (void*)(long)tflite::gpu::BuildModel(2); }\n"
                                       'extern "C" void TFLGpuDelegateDelete(void*) {}\n',
}
HEADERS = ("c/c_api.h", "c/c_api_experimental.h", "c/c_api_types.h", "c/common.h", "builtin_ops.h",
           "core/c/c_api.h", "core/async/c/types.h", "delegates/gpu/metal_delegate.h")
CONSUMER = """extern int TfLiteInterpreterInvoke(int);
extern void* TFLGpuDelegateCreate(const void*);
int main(void) { return TFLGpuDelegateCreate(0) != 0 && TfLiteInterpreterInvoke(1) == 2 ? 0 : 1; }
"""


def tbd(install_name: str, symbols: str) -> str:
    return (f"--- !tapi-tbd\ntbd-version: 4\ntargets: [ x86_64-macos, arm64-macos ]\ninstall-name: '{install_name}'\n"
            f"exports:\n  - targets: [ x86_64-macos, arm64-macos ]\n    symbols: [ {symbols} ]\n...\n")


def stub_sdk(root: Path) -> Path:
    """libSystem and the Metal/Foundation frameworks as text stubs: what ld64 links against."""
    (root / "usr" / "lib").mkdir(parents=True)
    (root / "usr" / "lib" / "libSystem.tbd").write_text(tbd("/usr/lib/libSystem.B.dylib", "dyld_stub_binder"))
    for framework in ("Metal", "Foundation"):
        directory = root / "System" / "Library" / "Frameworks" / f"{framework}.framework"
        directory.mkdir(parents=True)
        (directory / f"{framework}.tbd").write_text(
            tbd(f"/System/Library/Frameworks/{framework}.framework/Versions/A/{framework}", f"_{framework}Version"))
    return root


def darwin_toolchain(tmp: Path, arch: str) -> Path:
    path = tmp / "darwin.cmake"
    path.write_text(f"""set(CMAKE_SYSTEM_NAME Darwin)
set(CMAKE_SYSTEM_PROCESSOR {arch})
set(CMAKE_OSX_SYSROOT {stub_sdk(tmp / "sdk")})
set(CMAKE_C_COMPILER {find_tool("clang")})
set(CMAKE_CXX_COMPILER {find_tool("clang")}++)
set(CMAKE_C_COMPILER_TARGET {arch}-apple-macos11)
set(CMAKE_CXX_COMPILER_TARGET {arch}-apple-macos11)
set(CMAKE_EXE_LINKER_FLAGS_INIT "-fuse-ld=lld -nostdlib++")
set(CMAKE_SHARED_LINKER_FLAGS_INIT "-fuse-ld=lld -nostdlib++")
set(CMAKE_AR {find_tool("llvm-ar")})
set(CMAKE_RANLIB {find_tool("llvm-ranlib")})
set(CMAKE_INSTALL_NAME_TOOL {find_tool("llvm-install-name-tool")})
""")
    return path


def tensorflow_tree(root: Path) -> Path:
    lite = root / "tensorflow" / "lite"
    for relative, text in SOURCES.items():
        (lite / relative).parent.mkdir(parents=True, exist_ok=True)
        (lite / relative).write_text(text)
    for relative in HEADERS:
        (lite / relative).parent.mkdir(parents=True, exist_ok=True)
        (lite / relative).write_text("/* fixture */\n")
    return root


def clang_available() -> bool:
    clang = find_tool("clang")
    if not clang or not all(find_tool(t) for t in ("llvm-ar", "llvm-ranlib", "llvm-nm", "llvm-install-name-tool")):
        return False
    probe = subprocess.run([clang, "-target", "arm64-apple-macos11", "-fuse-ld=lld", "-###", "-x", "c", "/dev/null"],
                           capture_output=True, text=True)
    return probe.returncode == 0 and shutil.which("cmake") is not None and shutil.which("ninja") is not None


pytestmark = pytest.mark.skipif(not clang_available(), reason="needs cmake, ninja, clang with ld64.lld and LLVM tools")


def leg_plan(leg_id: str) -> Plan:
    matrix = load_matrix(ROOT)
    return plan_all(matrix, [matrix.leg(leg_id)])[0]


def build_leg(tmp: Path, leg_id: str) -> LegDirs:
    """The leg's own build commands (configure, build, install), for Darwin on this host."""
    plan = leg_plan(leg_id)
    dirs = LegDirs(src=tensorflow_tree(tmp / "tensorflow-src"), build=tmp / "work", install=tmp / "install",
                   stage=tmp / "stage", logs=tmp / "logs")
    toolchain = f"-DCMAKE_TOOLCHAIN_FILE={darwin_toolchain(tmp, plan.leg.arch)}"
    for command in plan.build:
        argv = expand_argv(command.argv, dirs, {})
        if command.label == "configure":
            argv.append(toolchain)
        done = subprocess.run(argv, cwd=ROOT if command.cwd == "." else dirs.src, capture_output=True, text=True)
        assert done.returncode == 0, f"{command.label}: {done.stdout}{done.stderr}"
    return dirs


def link_consumer(tmp: Path, arch: str, *libraries: str | Path) -> subprocess.CompletedProcess[str]:
    source = tmp / "consumer.c"
    source.write_text(CONSUMER)
    return subprocess.run([find_tool("clang"), "-target", f"{arch}-apple-macos11", "-isysroot", str(tmp / "sdk"),
                           "-fuse-ld=lld", str(source), *map(str, libraries), "-o", str(tmp / "consumer")],
                          capture_output=True, text=True)


def exported(dylib: Path) -> set[str]:
    return nm_symbol_table(dylib)[1]


def test_shared_metal_leg_links_as_a_consumer_links_it(tmp_path: Path) -> None:
    dirs = build_leg(tmp_path, "tflite-macos-arm64-gpu-shared")
    lib = dirs.install / "lib"
    dylib = lib / "libtensorflowlite_c.dylib"
    symbols = exported(dylib)
    assert {"TFLGpuDelegateCreate", "TFLGpuDelegateDelete", "TfLiteInterpreterInvoke"} <= symbols
    assert not [name for name in symbols if name.startswith("_ZN6tflite")]  # internals stay hidden
    assert not (lib / "libmetal_delegate.a").exists()
    assert (dirs.install / "include/tensorflow/lite/delegates/gpu/metal_delegate.h").is_file()
    linked = link_consumer(tmp_path, "arm64", dylib)
    assert linked.returncode == 0, linked.stderr


def test_static_metal_leg_bundles_the_delegate_and_ships_it_beside(tmp_path: Path) -> None:
    plan = leg_plan("tflite-macos-x86_64-gpu-static")
    dirs = build_leg(tmp_path, plan.leg.id)
    assert (dirs.install / "lib" / "libmetal_delegate.a").is_file()
    # What the stage's bundle merges: every archive of the build tree but fetched sources.
    assert plan.bundle is not None and plan.bundle.libraries_from == "{build}"
    archives = sorted(dirs.build.rglob("*.a"))
    merged = tmp_path / "libtensorflowlite_c.a"
    merge_static(archives, merged, "macho")
    assert undefined_internal_symbols(merged, ["_ZN6tflite"]) == []
    linked = link_consumer(tmp_path, "x86_64", merged, "-framework", "Metal", "-framework", "Foundation")
    assert linked.returncode == 0, linked.stderr
