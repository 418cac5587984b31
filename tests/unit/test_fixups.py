"""Post-stage fixups: relocatable CMake configs, import libraries, generated headers."""
import shutil
import subprocess

import pytest

from backends import fixups
from backends.toolchain import find_tool


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

