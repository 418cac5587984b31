"""Shipped build metadata (CMake, pkg-config, libtool files) names no absolute path
outside the package but system locations: a consumer has no copy of the runner."""
from __future__ import annotations

import pytest

from backends.model.plan import Contract
from backends.steps.checks.paths import foreign_paths
from backends.steps.verify import check
from binaries import zip_members


@pytest.mark.parametrize("member, text, path", [
    ("share/cmake/Torch/TorchConfig.cmake",
     'set(TORCH_INSTALL_PREFIX "/home/runner/work/backends/backends/build/legs/x/stage")\n',
     "/home/runner/work/backends/backends/build/legs/x/stage"),
    ("lib/cmake/onnxruntime/onnxruntimeTargets.cmake",
     'set_target_properties(onnxruntime::onnxruntime PROPERTIES\n'
     '  INTERFACE_LINK_LIBRARIES "/__w/1/s/build/Release/libre2.a")\n',
     "/__w/1/s/build/Release/libre2.a"),
    ("lib/cmake/ExecuTorch/ExecuTorchTargets.cmake",
     'set_target_properties(executorch PROPERTIES IMPORTED_LOCATION "D:/a/backends/build/lib/executorch.lib")\n',
     "D:/a/backends/build/lib/executorch.lib"),
    ("lib/pkgconfig/tensorflowlite_c.pc", "prefix=/Users/runner/work/stage\nLibs: -L${prefix}/lib\n",
     "/Users/runner/work/stage"),
    ("lib/libfoo.la", "libdir='/tmp/build/install/lib'\n", "/tmp/build/install/lib"),
    ("lib/cmake/x/xConfig.cmake", 'set(_flags "-L/home/runner/x/lib")\n', "/home/runner/x/lib"),
])
def test_a_foreign_path_is_caught(tmp_path, member, text, path):
    archive = zip_members(tmp_path / "pkg.zip", {member: text.encode()})
    (problem,) = check(archive, Contract(), "1.0.0")
    assert problem == f"{member} refers to a path outside the package ({path}): the package is not relocatable"


def test_system_locations_flags_and_comments_are_not_foreign():
    text = "\n".join([
        "# Generated for /home/someone: comments do not count",
        "#[=======[ bracket comment naming C:\\Program Files\\NVIDIA and /opt/local/x ]=======]",
        'get_filename_component(_IMPORT_PREFIX "${CMAKE_CURRENT_LIST_FILE}/../../.." ABSOLUTE)',
        'set_target_properties(t PROPERTIES IMPORTED_LOCATION "${_IMPORT_PREFIX}/lib/libt.a")',
        'set(_realOrig "/usr/lib/x86_64-linux-gnu/cmake/onnxruntime")',
        'set(FRAMEWORK "/Applications/Xcode_16.app/Contents/Developer/Platforms/MacOSX.platform/x.framework")',
        'set(platform_base "C:\\\\Program Files\\\\NVIDIA GPU Computing Toolkit\\\\CUDA\\\\v")',
        'set(ROCM_PATH C:/opt/rocm)',
        'target_compile_options(t INTERFACE "/wd4996" /MP)',
        'message(STATUS "Converting CMAKE_CUDA_FLAGS to CUDA_NVCC_FLAGS:\\n")',
        "URL https://github.com/pytorch/pytorch/archive/v2.12.0.tar.gz",
    ])
    assert foreign_paths(text) == []


@pytest.mark.parametrize("text", [b'set(X "${P}D:\\w\\build\\y")\n', b'set(X "${P}D:/w/build/y")\n'])
def test_the_build_root_is_foreign_in_either_spelling(tmp_path, text):
    archive = zip_members(tmp_path / "pkg.zip", {"lib/cmake/a.cmake": text})
    assert check(archive, Contract(), "1.0.0", build_root="D:\\w\\build") != []
    assert check(archive, Contract(relocatable=False), "1.0.0", build_root="D:\\w\\build") == []
