"""Post-stage fixups: relocatable CMake configs, import libraries, generated headers."""
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from backends.steps import fixups
from backends.util.toolchain import find_tool


def test_cmake_relocate_rewrites_build_paths_and_copies_the_library(tmp_path):
    build = tmp_path / "src" / "executorch" / "cmake-out-linux-x86_64" / "extension" / "evalue_util"
    build.mkdir(parents=True)
    (build / "libextension_evalue_util.a").write_bytes(b"!<arch>\n")
    config_dir = tmp_path / "pkg" / "lib" / "cmake" / "ExecuTorch"
    config_dir.mkdir(parents=True)
    targets = config_dir / "ExecuTorchTargets-release.cmake"
    targets.write_text(
        'set_target_properties(extension_evalue_util PROPERTIES\n'
        f'  IMPORTED_LOCATION_RELEASE "{build}/libextension_evalue_util.a")\n'
        'set_target_properties(executorch PROPERTIES\n'
        '  IMPORTED_LOCATION_RELEASE "${_IMPORT_PREFIX}/lib/libexecutorch.a")\n')
    lib_dir = tmp_path / "pkg" / "lib"
    assert fixups.cmake_relocate(config_dir, lib_dir, []) == ["ExecuTorchTargets-release.cmake"]
    text = targets.read_text()
    assert "cmake-out" not in text
    assert '"${_IMPORT_PREFIX}/lib/libextension_evalue_util.a"' in text
    assert (lib_dir / "libextension_evalue_util.a").is_file()
    assert fixups.cmake_relocate(config_dir, lib_dir, []) == []  # idempotent


def test_cmake_relocate_fails_on_a_library_it_cannot_find(tmp_path):
    config_dir = tmp_path / "cmake"
    config_dir.mkdir()
    (config_dir / "t.cmake").write_text('IMPORTED_LOCATION "/gone/cmake-out/libx.a"\n')
    with pytest.raises(SystemExit, match="neither in the build tree"):
        fixups.cmake_relocate(config_dir, tmp_path, [])


# ExecuTorch 1.3.1's extension/evalue_util/CMakeLists.txt installs its target into the build
# tree and exports it from there: `install(TARGETS ... EXPORT ExecuTorchTargets DESTINATION
# ${CMAKE_BINARY_DIR}/lib)`. This project does the same, so CMake itself writes the export set.
EXPORTING_PROJECT = """cmake_minimum_required(VERSION 3.20)
project(et_export_fixture C)
add_library(extension_evalue_util STATIC util.c)
add_library(executorch STATIC util.c)
install(TARGETS extension_evalue_util EXPORT ExecuTorchTargets DESTINATION ${CMAKE_BINARY_DIR}/lib)
install(TARGETS executorch EXPORT ExecuTorchTargets DESTINATION lib)
install(EXPORT ExecuTorchTargets DESTINATION lib/cmake/ExecuTorch)
"""
WINDOWS_BUILD = "D:/a/anira-backends/anira-backends/build/legs/executorch-windows-x86_64-static/work"


def _cmake_export_set(tmp_path):
    """(install prefix, build dir) of the fixture project after a real configure/build/install."""
    if shutil.which("cmake") is None or shutil.which("cc") is None:
        pytest.skip("needs cmake and a C compiler")
    source, build, prefix = tmp_path / "project", tmp_path / "build", tmp_path / "install"
    source.mkdir()
    (source / "CMakeLists.txt").write_text(EXPORTING_PROJECT)
    (source / "util.c").write_text("int et_util(void) { return 1; }\n")
    for argv in (["cmake", "-S", source, "-B", build, "-DCMAKE_BUILD_TYPE=Release", f"-DCMAKE_INSTALL_PREFIX={prefix}"],
                 ["cmake", "--build", build], ["cmake", "--install", build]):
        subprocess.run(list(map(str, argv)), check=True, capture_output=True)
    return prefix, build


def test_cmake_relocate_on_a_cmake_generated_export_set(tmp_path):
    prefix, build = _cmake_export_set(tmp_path)
    config_dir, lib_dir = prefix / "lib" / "cmake" / "ExecuTorch", prefix / "lib"
    exported = (config_dir / "ExecuTorchTargets-release.cmake").read_text()
    assert f'"{build}/lib/libextension_evalue_util.a"' in exported  # the upstream bug, as CMake writes it
    assert fixups.cmake_relocate(config_dir, lib_dir, [str(build)]) == ["ExecuTorchTargets-release.cmake"]
    relocated = (config_dir / "ExecuTorchTargets-release.cmake").read_text()
    assert str(build) not in relocated and str(tmp_path) not in relocated
    assert '"${_IMPORT_PREFIX}/lib/libextension_evalue_util.a"' in relocated
    assert (lib_dir / "libextension_evalue_util.a").read_bytes() == (build / "lib" / "libextension_evalue_util.a").read_bytes()


@pytest.mark.parametrize("given_root", [
    WINDOWS_BUILD.replace("/", "\\"),  # how {build} reaches the fixup on a Windows runner
    "d:" + WINDOWS_BUILD[2:].replace("/", "\\"),  # a lower-case drive letter
])
def test_cmake_relocate_windows_root_matches_cmakes_forward_slashes(tmp_path, monkeypatch, given_root):
    """On Windows CMake writes `D:/...` into export files while {build} arrives as `D:\\...`."""
    prefix, build = _cmake_export_set(tmp_path)
    config_dir, lib_dir = prefix / "lib" / "cmake" / "ExecuTorch", prefix / "lib"
    targets = config_dir / "ExecuTorchTargets-release.cmake"
    # As MSVC names the libraries: `<name>.lib`.
    targets.write_text(re.sub(r'lib(\w+)\.a"', r'\1.lib"', targets.read_text().replace(str(build), WINDOWS_BUILD)))
    # The build tree under the root as given: on this host a directory literally named like the
    # Windows path (backslashes are ordinary characters here), relative to the working directory.
    monkeypatch.chdir(tmp_path)
    windows_lib = Path(given_root, "lib", "extension_evalue_util.lib")
    windows_lib.parent.mkdir(parents=True)
    windows_lib.write_bytes(b"!<arch>\n")
    assert fixups.cmake_relocate(config_dir, lib_dir, [given_root]) == ["ExecuTorchTargets-release.cmake"]
    relocated = targets.read_text()
    assert "D:/a/" not in relocated
    assert '"${_IMPORT_PREFIX}/lib/extension_evalue_util.lib"' in relocated
    assert (lib_dir / "extension_evalue_util.lib").read_bytes() == b"!<arch>\n"


@pytest.mark.parametrize(("text", "relocated"), [
    # inside a generator expression the path ends at `>`
    ('INTERFACE_LINK_LIBRARIES "$<LINK_ONLY:/b/work/lib/libx.a>;m"', 'INTERFACE_LINK_LIBRARIES "$<LINK_ONLY:${_IMPORT_PREFIX}/lib/libx.a>;m"'),
    # another tree that merely starts with the same characters is not the build root
    ('IMPORTED_LOCATION "/b/work2/lib/libx.a"', None),
])
def test_cmake_relocate_path_boundaries(tmp_path, text, relocated):
    config_dir, lib_dir = tmp_path / "cmake", tmp_path / "lib"
    config_dir.mkdir()
    lib_dir.mkdir()
    (lib_dir / "libx.a").write_bytes(b"!<arch>\n")
    (config_dir / "t.cmake").write_text(text)
    fixups.cmake_relocate(config_dir, lib_dir, ["/b/work"])
    assert (config_dir / "t.cmake").read_text() == (relocated or text)


def test_litert_build_config(tmp_path):
    out = tmp_path / "include" / "litert" / "build_common" / "build_config.h"
    fixups.litert_build_config(out)
    text = out.read_text()
    assert "#define LITERT_DISABLE_GPU 1" in text and "#define LITERT_DISABLE_NPU 1" in text


@pytest.mark.skipif(not (shutil.which("x86_64-w64-mingw32-gcc") or find_tool("clang")) or not find_tool("llvm-dlltool"),
                    reason="needs a Windows-targeting compiler and llvm-dlltool")
def test_import_lib_from_dll_exports(tmp_path):
    source = tmp_path / "eng.c"
    source.write_text("__declspec(dllexport) int eng_add(int a, int b) { return a + b; }\n")
    dll = tmp_path / "eng.dll"
    clang = find_tool("clang")
    lld = shutil.which("lld-link") or find_tool("lld-link")
    if clang and lld:
        subprocess.run([clang, "-target", "x86_64-pc-windows-msvc", "-fuse-ld=lld", "-shared", "-nostdlib",
                        "-Wl,/noentry", str(source), "-o", str(dll)], check=True)
    else:
        subprocess.run(["x86_64-w64-mingw32-gcc", "-shared", str(source), "-o", str(dll)], check=True)
    out = tmp_path / "eng.lib"
    fixups.import_lib(dll, "x64", out)
    listing = subprocess.run([find_tool("llvm-nm"), str(out)], capture_output=True, text=True, check=True).stdout
    assert "__imp_eng_add" in listing
    assert not list(tmp_path.glob("*.def"))

