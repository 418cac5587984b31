"""Foreign absolute paths are found where a consumer's tools read them: glued to compiler and
linker flags, and as items of `:` and `;` path lists, in every kind of build metadata a
package ships (CMake, pkg-config, libtool, qmake, other build configuration files). System
locations pass in every spelling."""
from __future__ import annotations

import pytest

from backends.model.plan import Contract
from backends.steps.checks.paths import foreign_paths
from backends.steps.verify import check
from binaries import zip_members

FOREIGN = [
    ("Cflags: -isystem/home/runner/work/x/include", "/home/runner/work/x/include"),
    ("Cflags: -I/home/runner/work/x/include", "/home/runner/work/x/include"),
    ("Cflags: -iquote/home/runner/work/x/include", "/home/runner/work/x/include"),
    ("Cflags: -idirafter/__w/1/s/include", "/__w/1/s/include"),
    ("Libs: -L/home/runner/work/x/lib -lx", "/home/runner/work/x/lib"),
    ("Libs: -F/Users/runner/work/x/Frameworks -framework X", "/Users/runner/work/x/Frameworks"),
    ("Libs: -iframework/Users/runner/work/x/Frameworks", "/Users/runner/work/x/Frameworks"),
    ("Libs: -Wl,-rpath,/home/runner/work/x/lib", "/home/runner/work/x/lib"),
    ("Libs: -Wl,-rpath=/home/runner/work/x/lib", "/home/runner/work/x/lib"),
    ("Libs: -Wl,-rpath-link,/tmp/build/lib", "/tmp/build/lib"),
    ("Libs: -Wl,-L/tmp/build/lib", "/tmp/build/lib"),
    ("Libs: --sysroot=/home/runner/sysroot", "/home/runner/sysroot"),
    ('set(_dirs "/usr/lib:/home/runner/work/x/lib")', "/home/runner/work/x/lib"),  # a `:` list
    ('set(_dirs "/usr/lib;/home/runner/work/x/lib")', "/home/runner/work/x/lib"),  # a `;` list
    ("LD_LIBRARY_PATH=/usr/lib:/__w/1/s/lib:/usr/local/lib", "/__w/1/s/lib"),
    ('set(_flags "-F/Users/runner/work/x/Frameworks")', "/Users/runner/work/x/Frameworks"),
    ("INTERFACE_LINK_OPTIONS \"$<$<CONFIG:Release>:/home/runner/lib>\"", "/home/runner/lib"),
    ('set(_libs "-LC:/actions-runner/_work/x/lib")', "C:/actions-runner/_work/x/lib"),
    ("/LIBPATH:D:/a/x/build/lib", "D:/a/x/build/lib"),
    ('set(_dirs "C:/Windows/System32;D:/a/x/lib")', "D:/a/x/lib"),
    ("QMAKE_PRL_BUILD_DIR = /home/runner/work/x/build", "/home/runner/work/x/build"),
    ("dependency_libs=' -L/tmp/build/lib /tmp/build/lib/libfoo.la'", "/tmp/build/lib"),
]


@pytest.mark.parametrize("text, path", FOREIGN)
def test_a_foreign_path_in_a_flag_or_a_list_is_found(text, path):
    assert path in foreign_paths(text + "\n")


@pytest.mark.parametrize("member", [
    "lib/pkgconfig/onnxruntime.pc", "lib/cmake/x/xConfig.cmake", "lib/libx.la", "lib/x.prl", "mkspecs/x.pri",
    "share/x/build.cfg", "share/x/paths.ini", "bin/x-config", "lib/cmake/x/CMakeLists.txt",
])
@pytest.mark.parametrize("text, path", [FOREIGN[0], FOREIGN[5], FOREIGN[12]])
def test_every_kind_of_build_metadata_is_read(tmp_path, member, text, path):
    archive = zip_members(tmp_path / "pkg.zip", {member: text.encode()})
    assert check(archive, Contract(), "1.0.0") == [
        f"{member} refers to a path outside the package ({path}): the package is not relocatable"]


@pytest.mark.parametrize("text", [
    "Cflags: -I/usr/include -isystem/usr/local/include -I${includedir}",
    "Libs: -L/usr/lib/x86_64-linux-gnu -L${libdir} -lonnxruntime",
    "Libs: -F/System/Library/Frameworks -framework CoreML",
    "Libs: -F/Applications/Xcode_16.app/Contents/Developer/Platforms/MacOSX.platform/Developer/Library/Frameworks",
    "Libs: -Wl,-rpath,$ORIGIN/../lib -Wl,-rpath,@loader_path/../lib",
    "Libs: -Wl,--push-state,--as-needed -latomic -Wl,--pop-state",
    'set(_dirs "/usr/lib:/usr/local/lib;/opt/rocm/lib")',
    'set(_dirs "C:/Windows/System32;C:/Program Files/NVIDIA GPU Computing Toolkit/CUDA/v12.4/lib")',
    'set(_libs "-LC:/Program Files/x/lib")',
    'target_compile_options(t INTERFACE "/wd4996" /MP "$<$<CONFIG:Debug>:/MDd>")',
    "URL https://github.com/pytorch/pytorch/archive/v2.13.0.tar.gz",
    'set_property(TARGET t PROPERTY INTERFACE_LINK_LIBRARIES "Foo::Bar;${_IMPORT_PREFIX}/lib/libt.a")',
    "prefix=${pcfiledir}/../..",
])
def test_system_locations_and_relative_paths_in_flags_pass(text):
    assert foreign_paths(text + "\n") == []


def test_a_relocatable_package_with_flags_passes(tmp_path):
    archive = zip_members(tmp_path / "pkg.zip", {
        "lib/pkgconfig/x.pc": b"prefix=${pcfiledir}/../..\nLibs: -L${prefix}/lib -Wl,-rpath,${prefix}/lib -lx\n"
                              b"Cflags: -I${prefix}/include -isystem/usr/include\n",
        "lib/cmake/x/xTargets.cmake": b'set_target_properties(x PROPERTIES INTERFACE_LINK_OPTIONS '
                                      b'"-F/System/Library/Frameworks;-Wl,-rpath,/usr/lib")\n',
    })
    assert check(archive, Contract(), "1.0.0") == []
