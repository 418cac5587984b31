"""Fixture upstreams and fixture projects for the integration tests and the benches.

Two fixture engines honour the entry points the real recipes rely on:

* ``fixsrc`` (from source): a tiny C CMake project shipped as a release tarball whose
  ``tools/ci_build/build.py`` understands ``--build_dir D --config Release|Debug
  [--build_shared_lib] [--use_coreml] [--install_dir D] [--cmake_extra_defines K=V ...]``
  like ONNX Runtime's. ``--use_coreml`` adds a provider source file, a provider static
  library and installs ``coreml_provider_factory.h``. Upstream's provider is "broken"
  (``FIXSRC_COREML_REGISTERED 0``); the engine's patch script fixes it for coreml legs.
  Setting ``FIXSRC_BUILD_SLEEP=<s>[:<text>]`` in scons's environment makes build.py
  (of the legs whose build dir contains <text>) write ``<build dir>/<config>/SLEEPING``
  after configuring, then sleep: the kill test's hook.
* ``fixbin`` (prebuilt): an upstream-layout release archive
  ``fixbin-linux-x64-<ver>.tgz`` = ``fixbin-linux-x64-<ver>/{include/fixbin.h,
  lib/libfixbin.so.1.0.0 + symlinks}`` built with ``cc``, repackaged by its recipe.

Upstream files are generated into a directory served by `Server` (a thread-based
http.server on 127.0.0.1); engine.toml pins their sha256. `make_project` writes a
complete project: a copy of the repo's SConstruct, ``site_scons`` symlinked to the
repo's, and the fixture engines' engine.toml, recipe.py, patches, variants and smoke
projects. Import this module by path (the benches do) or as ``fixtures`` from tests.
"""
from __future__ import annotations

import gzip
import hashlib
import http.server
import io
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import threading
import time
import zipfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable, Sequence

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "site_scons"))

from backends.model.leg import archive_stem
from backends.model.vocab import FLAVORS, canonical_platform

REPO = Path(__file__).resolve().parents[2]
FIXSRC_VERSION = "1.4.2"
FIXBIN_VERSION = "2.0.1"
FIXED_MTIME = 1577836800  # 2020-01-01: generated upstream archives are byte-stable

# Every step of the graph prints its action line as "[<step>] ..." (graph.Graph._command).
STEP_NAMES = ("fetch", "extract", "patch", "build", "stage", "merge", "archive", "verify", "smoke", "publish",
              "restore", "store")


# --------------------------------------------------------------------------- HTTP server


class _Handler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: object) -> None:  # quiet
        pass

    def do_GET(self) -> None:  # noqa: N802
        self.server.requests.append(self.path)  # type: ignore[attr-defined]
        super().do_GET()


class Server:
    """Serves `root` over HTTP on 127.0.0.1 (an ephemeral port) from a thread."""

    def __init__(self, root: Path) -> None:
        self.root = Path(root)
        self.root.mkdir(parents=True, exist_ok=True)
        handler = lambda *a, **k: _Handler(*a, directory=str(self.root), **k)  # noqa: E731
        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self.httpd.daemon_threads = True
        self.httpd.requests = []  # type: ignore[attr-defined]
        self.thread = threading.Thread(target=self.httpd.serve_forever, name="fixture-http", daemon=True)

    @property
    def base_url(self) -> str:
        host, port = self.httpd.server_address[:2]
        return f"http://{host}:{port}"

    @property
    def requests(self) -> list[str]:
        return self.httpd.requests  # type: ignore[attr-defined]

    def __enter__(self) -> "Server":
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self) -> "Server":
        return self.__enter__()

    def stop(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


# --------------------------------------------------------------------------- archives


def sha256_of(path: Path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def _tar_info(name: str, *, mode: int, kind: bytes = tarfile.REGTYPE, size: int = 0, link: str = "") -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.mode, info.type, info.size, info.linkname = mode, kind, size, link
    info.mtime, info.uid, info.gid, info.uname, info.gname = FIXED_MTIME, 0, 0, "", ""
    return info


def write_tgz(out: Path, tree: Path, prefix: str, extra: Sequence[tuple[str, bytes]] = ()) -> str:
    """A deterministic .tar.gz of `tree` under `prefix/` (+ `extra` raw members); returns its sha256."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.PAX_FORMAT) as tar:
        tar.addfile(_tar_info(prefix, mode=0o755, kind=tarfile.DIRTYPE))
        for path in sorted(tree.rglob("*")):
            name = f"{prefix}/{path.relative_to(tree).as_posix()}"
            if path.is_symlink():
                tar.addfile(_tar_info(name, mode=0o777, kind=tarfile.SYMTYPE, link=os.readlink(path)))
            elif path.is_dir():
                tar.addfile(_tar_info(name, mode=0o755, kind=tarfile.DIRTYPE))
            else:
                data = path.read_bytes()
                mode = 0o755 if os.access(path, os.X_OK) else 0o644
                tar.addfile(_tar_info(name, mode=mode, size=len(data)), io.BytesIO(data))
        for name, data in extra:
            tar.addfile(_tar_info(name, mode=0o644, size=len(data)), io.BytesIO(data))
    out.parent.mkdir(parents=True, exist_ok=True)
    with open(out, "wb") as raw, gzip.GzipFile(filename="", fileobj=raw, mode="wb", mtime=0) as gz:
        gz.write(buffer.getvalue())
    return sha256_of(out)


def write_zip(out: Path, members: Sequence[tuple[str, bytes]]) -> str:
    out.parent.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(out, "w") as archive:
        for name, data in members:
            info = zipfile.ZipInfo(name, date_time=(2020, 1, 1, 0, 0, 0))
            info.external_attr = 0o644 << 16
            archive.writestr(info, data)
    return sha256_of(out)


# --------------------------------------------------------------------------- fixsrc upstream

FIXSRC_HEADER = """\
#ifndef FIXSRC_H
#define FIXSRC_H
#define FIXSRC_API __attribute__((visibility("default")))
#ifdef __cplusplus
extern "C" {
#endif
FIXSRC_API int fixsrc_add(int a, int b);
FIXSRC_API const char *fixsrc_version(void);
#ifdef __cplusplus
}
#endif
#endif
"""

FIXSRC_PROVIDER_HEADER = """\
#ifndef FIXSRC_COREML_PROVIDER_FACTORY_H
#define FIXSRC_COREML_PROVIDER_FACTORY_H
#include "fixsrc.h"
#ifdef __cplusplus
extern "C" {
#endif
/* 0 when the CoreML provider registered; like OrtSessionOptionsAppendExecutionProvider_CoreML. */
FIXSRC_API int FixsrcSessionOptionsAppendExecutionProvider_CoreML(unsigned flags);
#ifdef __cplusplus
}
#endif
#endif
"""

FIXSRC_CORE = """\
#include "fixsrc.h"
#include "util.h"

#ifndef FIXSRC_GREETING
#define FIXSRC_GREETING "fixsrc"
#endif

int fixsrc_add(int a, int b) { return fixsrc_util_add(a, b); }

const char *fixsrc_version(void) { return FIXSRC_GREETING " @VERSION@"; }
"""

FIXSRC_UTIL_H = "#pragma once\nint fixsrc_util_add(int a, int b);\n"
FIXSRC_UTIL = '#include "util.h"\nint fixsrc_util_add(int a, int b) { return a + b; }\n'

# The provider as "upstream" ships it: the registration switch is off (the patch turns it on).
FIXSRC_PROVIDER = """\
#include "coreml_provider_factory.h"

/* upstream bug (fixture): the provider is compiled but never registers */
#define FIXSRC_COREML_REGISTERED 0

int FixsrcSessionOptionsAppendExecutionProvider_CoreML(unsigned flags) {
  (void)flags;
  return FIXSRC_COREML_REGISTERED ? 0 : -1;
}
"""

FIXSRC_CMAKE = """\
cmake_minimum_required(VERSION 3.16)
project(fixsrc VERSION @VERSION@ LANGUAGES C)
option(FIXSRC_USE_COREML "Build the CoreML execution provider" OFF)
option(BUILD_SHARED_LIBS "Build libfixsrc as a shared library" OFF)
set(CMAKE_C_VISIBILITY_PRESET hidden)
set(CMAKE_POSITION_INDEPENDENT_CODE ON)
configure_file(src/fixsrc.c ${CMAKE_CURRENT_BINARY_DIR}/fixsrc.c @ONLY)
set(public_headers include/fixsrc.h)
if(FIXSRC_USE_COREML)
  list(APPEND public_headers include/coreml_provider_factory.h)
endif()
if(BUILD_SHARED_LIBS)
  set(sources ${CMAKE_CURRENT_BINARY_DIR}/fixsrc.c src/util.c)
  if(FIXSRC_USE_COREML)
    list(APPEND sources src/coreml_provider.c)
  endif()
  add_library(fixsrc SHARED ${sources})
  set_target_properties(fixsrc PROPERTIES VERSION ${PROJECT_VERSION} SOVERSION ${PROJECT_VERSION_MAJOR})
  target_include_directories(fixsrc PRIVATE include src)
else()
  # Static builds leave one library per component in the build tree (like ORT's).
  add_library(fixsrc STATIC ${CMAKE_CURRENT_BINARY_DIR}/fixsrc.c)
  add_library(fixsrc_util STATIC src/util.c)
  target_include_directories(fixsrc PRIVATE include src)
  target_include_directories(fixsrc_util PRIVATE src)
  target_link_libraries(fixsrc PRIVATE fixsrc_util)
  if(FIXSRC_USE_COREML)
    add_library(fixsrc_providers_coreml STATIC src/coreml_provider.c)
    target_include_directories(fixsrc_providers_coreml PRIVATE include)
  endif()
  # A fetched dependency's test data: not a real archive; bundling must exclude it.
  file(WRITE ${CMAKE_BINARY_DIR}/_deps/fixdep-src/testdata/broken.a "not an archive\\n")
endif()
if(FIXSRC_GREETING)
  target_compile_definitions(fixsrc PRIVATE "FIXSRC_GREETING=\\"${FIXSRC_GREETING}\\"")
endif()
install(TARGETS fixsrc LIBRARY DESTINATION lib ARCHIVE DESTINATION lib RUNTIME DESTINATION bin)
install(FILES ${public_headers} DESTINATION include)
"""

FIXSRC_BUILD_PY = '''\
#!/usr/bin/env python3
"""fixsrc's build entry point, shaped like onnxruntime's tools/ci_build/build.py."""
import argparse
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

SOURCE = Path(__file__).resolve().parents[2]


def run(argv):
    print("fixsrc build.py: " + " ".join(map(str, argv)), flush=True)
    subprocess.run([str(a) for a in argv], check=True)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--build_dir", required=True)
    parser.add_argument("--config", choices=("Debug", "Release", "RelWithDebInfo", "MinSizeRel"), default="Debug")
    parser.add_argument("--build_shared_lib", action="store_true")
    parser.add_argument("--use_coreml", action="store_true")
    parser.add_argument("--install_dir")
    parser.add_argument("--parallel", action="store_true")
    parser.add_argument("--skip_tests", action="store_true")
    parser.add_argument("--cmake_extra_defines", nargs="+", default=[])
    args = parser.parse_args()
    build = Path(args.build_dir) / args.config
    on_off = lambda flag: "ON" if flag else "OFF"
    run(["cmake", "-S", SOURCE, "-B", build, "-G", "Ninja", f"-DCMAKE_BUILD_TYPE={args.config}",
         f"-DBUILD_SHARED_LIBS={on_off(args.build_shared_lib)}", f"-DFIXSRC_USE_COREML={on_off(args.use_coreml)}",
         *(f"-D{d}" for d in args.cmake_extra_defines)])
    # "<seconds>[:<text>]": sleep after configuring (only when <text> is in the build dir).
    pause, _, where = os.environ.get("FIXSRC_BUILD_SLEEP", "").partition(":")
    if pause and where in str(build):
        (build / "SLEEPING.tmp").write_text(str(os.getpid()))
        os.replace(build / "SLEEPING.tmp", build / "SLEEPING")  # whole when seen: a test reads the pid at once
        print("fixsrc build.py: sleeping", flush=True)
        until = time.monotonic() + float(pause)
        while time.monotonic() < until and not (build / "RELEASE").exists():  # a test may end the pause
            time.sleep(0.05)
    run(["cmake", "--build", build])
    if args.install_dir:
        shutil.rmtree(args.install_dir, ignore_errors=True)
        run(["cmake", "--install", build, "--prefix", args.install_dir])
    return 0


if __name__ == "__main__":
    sys.exit(main())
'''


def fixsrc_tree(dest: Path, version: str = FIXSRC_VERSION) -> Path:
    files = {
        "CMakeLists.txt": FIXSRC_CMAKE.replace("@VERSION@", version),
        "include/fixsrc.h": FIXSRC_HEADER,
        "include/coreml_provider_factory.h": FIXSRC_PROVIDER_HEADER,
        "src/fixsrc.c": FIXSRC_CORE.replace("@VERSION@", version),
        "src/util.h": FIXSRC_UTIL_H,
        "src/util.c": FIXSRC_UTIL,
        "src/coreml_provider.c": FIXSRC_PROVIDER,
        "tools/ci_build/build.py": FIXSRC_BUILD_PY,
        "README.md": f"fixsrc {version}: a fixture upstream for anira-backends' integration tests\n",
    }
    for rel, text in files.items():
        path = dest / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    (dest / "tools/ci_build/build.py").chmod(0o755)
    return dest


def make_fixsrc_release(out_dir: Path, version: str = FIXSRC_VERSION) -> tuple[str, str]:
    """`fixsrc-<version>.tar.gz` in `out_dir`; returns (file name, sha256)."""
    name = f"fixsrc-{version}.tar.gz"
    work = out_dir / f".work-fixsrc-{version}"
    shutil.rmtree(work, ignore_errors=True)
    fixsrc_tree(work / "tree", version)
    sha = write_tgz(out_dir / name, work / "tree", f"fixsrc-{version}")
    shutil.rmtree(work)
    return name, sha


# --------------------------------------------------------------------------- fixbin upstream

FIXBIN_HEADER = """\
#ifndef FIXBIN_H
#define FIXBIN_H
#ifdef __cplusplus
extern "C" {
#endif
__attribute__((visibility("default"))) int fixbin_mul(int a, int b);
#ifdef __cplusplus
}
#endif
#endif
"""
FIXBIN_SOURCE = '#include "fixbin.h"\nstatic int twice(int x) { return x; }\nint fixbin_mul(int a, int b) { return twice(a) * b; }\n'


def fixbin_tree(dest: Path, arch: str = "") -> Path:
    """`include/fixbin.h` + `lib/libfixbin.so.1.0.0` (+ `.so.1`, `.so` symlinks), built with
    cc, or with clang and lld for another `arch` (aarch64)."""
    (dest / "include").mkdir(parents=True, exist_ok=True)
    (dest / "lib").mkdir(parents=True, exist_ok=True)
    (dest / "include/fixbin.h").write_text(FIXBIN_HEADER)
    work = dest.parent / (dest.name + ".cc")
    work.mkdir(parents=True, exist_ok=True)
    (work / "fixbin.c").write_text(FIXBIN_SOURCE)
    shutil.copy(dest / "include/fixbin.h", work / "fixbin.h")
    compiler = ["clang", f"--target={arch}-linux-gnu", "-fuse-ld=lld", "-nostdlib"] if arch else ["cc"]
    subprocess.run([*compiler, "-shared", "-fPIC", "-O2", "-fvisibility=hidden", "-Wl,-soname,libfixbin.so.1",
                    "-o", "libfixbin.so.1.0.0", "fixbin.c"], cwd=work, check=True)
    shutil.move(work / "libfixbin.so.1.0.0", dest / "lib/libfixbin.so.1.0.0")
    shutil.rmtree(work)
    os.symlink("libfixbin.so.1.0.0", dest / "lib/libfixbin.so.1")
    os.symlink("libfixbin.so.1", dest / "lib/libfixbin.so")
    return dest


def fixbin_asset(asset: str = "fixbin-linux-x64", version: str = FIXBIN_VERSION, ext: str = "tgz") -> str:
    return f"{asset}-{version}.{ext}"


def make_fixbin_release(out_dir: Path, version: str = FIXBIN_VERSION, assets: Iterable[str] = ("fixbin-linux-x64",),
                        tree: Path | None = None) -> dict[str, str]:
    """One upstream-layout `<asset>-<version>.tgz` per asset; returns {file name: sha256}."""
    work = out_dir / f".work-fixbin-{version}"
    shutil.rmtree(work, ignore_errors=True)
    built = tree or fixbin_tree(work / "tree")
    pins = {}
    for asset in assets:
        name = fixbin_asset(asset, version)
        pins[name] = write_tgz(out_dir / name, built, f"{asset}-{version}")
    shutil.rmtree(work, ignore_errors=True)
    return pins


def make_zip_slip_release(out_dir: Path, asset: str = "fixbin-linux-x64", version: str = FIXBIN_VERSION) -> tuple[str, str]:
    """A fixbin release .zip with a member that climbs out of the extraction dir."""
    name = fixbin_asset(asset, version, "zip")
    top = f"{asset}-{version}"
    sha = write_zip(out_dir / name, [
        (f"{top}/include/fixbin.h", FIXBIN_HEADER.encode()),
        (f"{top}/../../../zip-slip-escaped.txt", b"escaped\n"),
    ])
    return name, sha


# --------------------------------------------------------------------------- project files

FIXSRC_RECIPE = '''\
"""fixsrc (fixture): the upstream's own tools/ci_build/build.py, then stage, bundle, verify, smoke."""
from __future__ import annotations

from dataclasses import replace

from backends.model import recipe_kit as kit
from backends.model.engine import Engine
from backends.model.leg import Leg
from backends.model.plan import Bundle, Command, Contract, CopyRule, Plan, Smoke

# True reproduces upstream's lost flavor (docs/history.md#fix-flavor-argument): the gpu leg is built without --use_coreml.
FORGET_COREML = False
PROVIDER_HEADER = "coreml_provider_factory.h"
PROVIDER_SYMBOL = "FixsrcSessionOptionsAppendExecutionProvider_CoreML"


def _build_py(leg: Leg) -> tuple[str, ...]:
    argv = ["{python}", "{src}/tools/ci_build/build.py", "--build_dir", "{build}", "--install_dir", "{install}",
            "--config", kit.build_type(leg), "--parallel", "--skip_tests"]
    if leg.kind == "shared":
        argv.append("--build_shared_lib")
    if "coreml" in leg.accelerator and not FORGET_COREML:
        argv.append("--use_coreml")
    if leg.params.get("defines"):
        argv += ["--cmake_extra_defines", *leg.params["defines"].split()]
    return tuple(argv)


def plan(leg: Leg, engine: Engine, archive: str) -> Plan:
    gpu = "coreml" in leg.accelerator
    config = kit.build_type(leg)
    build = (Command("build.py", _build_py(leg), env={"FIXSRC_BUILD_SLEEP": "{env?:FIXSRC_BUILD_SLEEP}"}),)
    collect = [CopyRule("{install}/include/*.h", "include")]
    bundle = None
    if leg.kind == "shared":
        collect.append(CopyRule("{install}/lib/libfixsrc.so*", "lib"))
        lib = "lib/libfixsrc.so"
    else:
        lib = "lib/libfixsrc.a"
        bundle = Bundle(output=lib, libraries_from=f"{{build}}/{config}", exclude=kit.DEFAULT_BUNDLE_EXCLUDE)
    symbol_lib = "lib/libfixsrc.so.*.*.*" if leg.kind == "shared" else lib
    contract = Contract(
        required=("include/fixsrc.h", lib, *((f"include/{PROVIDER_HEADER}",) if gpu else ())),
        forbidden=() if gpu else (f"**/{PROVIDER_HEADER}",),
        symbols=((symbol_lib, "fixsrc_add"), *(((symbol_lib, PROVIDER_SYMBOL),) if gpu else ())),
    )
    return Plan(
        leg=leg, version=engine.version, archive=archive,
        downloads=(replace(kit.url_source(engine, "source"), roots=(f"fixsrc-{engine.version}",)),),
        patches=kit.patches_for(engine, leg),
        build=build, collect=tuple(collect), bundle=bundle, contract=contract,
        smoke=Smoke("smoke/fixsrc"),
    )
'''

FIXSRC_PATCH = '''\
"""Register the CoreML provider (fixture of ORT's coreml_proto fix; applies to coreml legs)."""
FILES = ("src/coreml_provider.c",)
BROKEN = "#define FIXSRC_COREML_REGISTERED 0"
FIXED = "#define FIXSRC_COREML_REGISTERED 1"
# Lands in the library's .rodata, so an edit of it changes the built binary.
NOTE = \'__attribute__((used)) static const char fixsrc_patch_note[] = "register_coreml v1";\'


def already_fixed(path, text):
    return FIXED in text


def apply(path, text):
    return text.replace(BROKEN, FIXED + "\\n" + NOTE)
'''
PATCH_NOTE = "register_coreml v1"

FIXSRC_SMOKE_CMAKE = """\
cmake_minimum_required(VERSION 3.16)
project(fixsrc_smoke LANGUAGES C)
set(SMOKE_KIND "shared" CACHE STRING "shared or static")
set(SMOKE_FLAVOR "cpu" CACHE STRING "cpu, gpu or cuda")
set(SMOKE_ACCELERATOR "none" CACHE STRING "none or coreml")
find_path(FIXSRC_INCLUDE_DIR fixsrc.h PATHS ${CMAKE_PREFIX_PATH} PATH_SUFFIXES include NO_DEFAULT_PATH)
if(SMOKE_KIND STREQUAL "static")
  set(_names libfixsrc.a)
else()
  set(_names fixsrc)
endif()
find_library(FIXSRC_LIBRARY NAMES ${_names} PATHS ${CMAKE_PREFIX_PATH} PATH_SUFFIXES lib NO_DEFAULT_PATH)
if(NOT FIXSRC_INCLUDE_DIR OR NOT FIXSRC_LIBRARY)
  message(FATAL_ERROR "FAIL: no fixsrc package under ${CMAKE_PREFIX_PATH}")
endif()
if(SMOKE_KIND STREQUAL "shared" AND FIXSRC_LIBRARY MATCHES "\\\\.a$")
  message(FATAL_ERROR "FAIL: shared package provides only ${FIXSRC_LIBRARY}")
endif()
set(_has_coreml FALSE)
if(EXISTS "${FIXSRC_INCLUDE_DIR}/coreml_provider_factory.h")
  set(_has_coreml TRUE)
endif()
if(SMOKE_ACCELERATOR MATCHES "coreml" AND NOT _has_coreml)
  message(FATAL_ERROR "FAIL: flavor ${SMOKE_FLAVOR} but no coreml_provider_factory.h")
elseif(NOT SMOKE_ACCELERATOR MATCHES "coreml" AND _has_coreml)
  message(FATAL_ERROR "FAIL: a ${SMOKE_FLAVOR} package must not advertise the CoreML provider")
endif()
add_executable(smoke smoke.c)
target_include_directories(smoke PRIVATE "${FIXSRC_INCLUDE_DIR}")
target_link_libraries(smoke PRIVATE "${FIXSRC_LIBRARY}")
if(_has_coreml)
  target_compile_definitions(smoke PRIVATE SMOKE_COREML=1)
endif()
get_filename_component(_libdir "${FIXSRC_LIBRARY}" DIRECTORY)
set_target_properties(smoke PROPERTIES BUILD_WITH_INSTALL_RPATH ON INSTALL_RPATH "${_libdir}")
enable_testing()
add_test(NAME fixsrc_smoke COMMAND smoke)
set_tests_properties(fixsrc_smoke PROPERTIES PASS_REGULAR_EXPRESSION "PASS")
"""

FIXSRC_SMOKE_C = """\
#include <stdio.h>
#include "fixsrc.h"
#ifdef SMOKE_COREML
#include "coreml_provider_factory.h"
#endif

int main(void) {
  if (fixsrc_add(2, 3) != 5) { printf("FAIL: fixsrc_add\\n"); return 1; }
#ifdef SMOKE_COREML
  if (FixsrcSessionOptionsAppendExecutionProvider_CoreML(0) != 0) {
    printf("FAIL: the CoreML provider did not register\\n");
    return 1;
  }
  printf("coreml provider: registered\\n");
#endif
  printf("%s: PASS\\n", fixsrc_version());
  return 0;
}
"""

FIXBIN_RECIPE = '''\
"""fixbin (fixture): repackage the upstream release tarball, like ORT's linux prebuilt legs."""
from __future__ import annotations

from backends.model import recipe_kit as kit
from backends.model.engine import Engine
from backends.model.leg import Leg
from backends.model.plan import Contract, CopyRule, Plan, Smoke


def plan(leg: Leg, engine: Engine, archive: str) -> Plan:
    download = kit.url_source(engine, "release", leg.params)
    root = "{extract:release}/*"
    collect = (CopyRule(f"{root}/include/**", "include"), CopyRule(f"{root}/lib/libfixbin.so*", "lib"))
    contract = Contract(required=("include/fixbin.h", "lib/libfixbin.so"), forbidden=("**/*provider_factory.h",),
                        symbols=(("lib/libfixbin.so*", "fixbin_mul"),))
    return Plan(leg=leg, version=engine.version, archive=archive, downloads=(download,), collect=collect,
                contract=contract, smoke=Smoke("smoke/fixbin"))
'''

FIXBIN_SMOKE_CMAKE = """\
cmake_minimum_required(VERSION 3.16)
project(fixbin_smoke LANGUAGES C)
find_path(FIXBIN_INCLUDE_DIR fixbin.h PATHS ${CMAKE_PREFIX_PATH} PATH_SUFFIXES include NO_DEFAULT_PATH)
find_library(FIXBIN_LIBRARY NAMES fixbin PATHS ${CMAKE_PREFIX_PATH} PATH_SUFFIXES lib NO_DEFAULT_PATH)
if(NOT FIXBIN_INCLUDE_DIR OR NOT FIXBIN_LIBRARY)
  message(FATAL_ERROR "FAIL: no fixbin package under ${CMAKE_PREFIX_PATH}")
endif()
add_executable(smoke smoke.c)
target_include_directories(smoke PRIVATE "${FIXBIN_INCLUDE_DIR}")
target_link_libraries(smoke PRIVATE "${FIXBIN_LIBRARY}")
get_filename_component(_libdir "${FIXBIN_LIBRARY}" DIRECTORY)
set_target_properties(smoke PROPERTIES BUILD_WITH_INSTALL_RPATH ON INSTALL_RPATH "${_libdir}")
enable_testing()
add_test(NAME fixbin_smoke COMMAND smoke)
set_tests_properties(fixbin_smoke PROPERTIES PASS_REGULAR_EXPRESSION "PASS")
"""

FIXBIN_SMOKE_C = """\
#include <stdio.h>
#include "fixbin.h"
int main(void) {
  if (fixbin_mul(6, 7) != 42) { printf("FAIL: fixbin_mul\\n"); return 1; }
  printf("fixbin: PASS\\n");
  return 0;
}
"""


@dataclass(frozen=True)
class LegRow:
    """One `[[leg]]` row of a variants file."""

    platform: str = "linux-x86_64"
    kind: str | tuple[str, ...] = "shared"
    config: str | tuple[str, ...] = "release"
    flavor: str = "cpu"
    accelerator: str = ""
    source: str = ""
    runner: str = "ubuntu-24.04"
    can_run: bool = True
    params: dict[str, str] = field(default_factory=dict)

    def toml(self) -> str:
        def value(v: object) -> str:
            if isinstance(v, bool):
                return "true" if v else "false"
            if isinstance(v, (tuple, list)):
                return "[" + ", ".join(json.dumps(x) for x in v) + "]"
            if isinstance(v, dict):
                return "{ " + ", ".join(f"{k} = {json.dumps(x)}" for k, x in v.items()) + " }"
            return json.dumps(v)

        lines = ["[[leg]]"]
        for key in ("platform", "kind", "config", "flavor", "accelerator", "source", "runner", "can_run", "params"):
            v = getattr(self, key)
            if v in ("", {}, ()):
                continue
            lines.append(f"{key} = {value(v)}")
        return "\n".join(lines) + "\n"


# The fixsrc legs this host builds: static + shared cpu, shared gpu (coreml, patched), a debug leg.
FIXSRC_LEGS = (
    LegRow(kind="static"),
    LegRow(kind="shared"),
    LegRow(kind="shared", flavor="gpu", accelerator="coreml"),
    LegRow(kind="static", config="debug"),
)
FIXSRC_LEG_IDS = (
    "fixsrc-linux-x86_64-static",
    "fixsrc-linux-x86_64-shared",
    "fixsrc-linux-x86_64-gpu-shared",
    "fixsrc-linux-x86_64-static-debug",
)
FIXBIN_LEGS = (LegRow(kind="shared", source="prebuilt", params={"asset": "fixbin-linux-x64", "ext": "tgz"}),)
FIXBIN_LEG_IDS = ("fixbin-linux-x86_64-shared",)


def _write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def variants_toml(rows: Sequence[LegRow], comment: str) -> str:
    return f"# {comment}\n\n[defaults]\nconfig = \"release\"\nflavor = \"cpu\"\n\n" + "\n".join(r.toml() for r in rows)


def write_fixsrc(project: Path, url: str, sha256: str | None, *, version: str = FIXSRC_VERSION,
                 rows: Sequence[LegRow] = FIXSRC_LEGS, forget_coreml: bool = False) -> None:
    """engines/fixsrc (engine.toml, recipe.py, patch), variants/fixsrc.toml, smoke/fixsrc."""
    engine = project / "engines/fixsrc"
    filename = url.rsplit("/", 1)[-1].replace("{version}", version)
    pin = f'"{filename}" = "{sha256}"\n' if sha256 else ""
    _write(engine / "engine.toml", f"""\
name = "fixsrc"
libname = "fixsrc"
version = "{version}"
license = "MIT"
homepage = "http://127.0.0.1/fixsrc"

[sources.source]
url = "{url}"

[[patches]]
file = "patches/register_coreml.py"
reason = "fixture: upstream compiles the CoreML provider but never registers it"
upstream = "https://example.invalid/fixsrc/pull/1"
until = "{version}"
when = {{ accelerator = "coreml" }}

[sha256]
{pin}""")
    recipe = FIXSRC_RECIPE.replace("FORGET_COREML = False", f"FORGET_COREML = {forget_coreml}")
    _write(engine / "recipe.py", recipe)
    _write(engine / "patches/register_coreml.py", FIXSRC_PATCH)
    _write(project / "variants/fixsrc.toml", variants_toml(rows, "fixsrc (fixture) legs"))
    _write(project / "smoke/fixsrc/CMakeLists.txt", FIXSRC_SMOKE_CMAKE)
    _write(project / "smoke/fixsrc/smoke.c", FIXSRC_SMOKE_C)


def write_fixbin(project: Path, url: str, pins: dict[str, str], *, version: str = FIXBIN_VERSION,
                 rows: Sequence[LegRow] = FIXBIN_LEGS, name: str = "fixbin") -> None:
    """engines/<name> (engine.toml, recipe.py), variants/<name>.toml, smoke/fixbin."""
    engine = project / "engines" / name
    table = "".join(f'"{k}" = "{v}"\n' for k, v in sorted(pins.items()))
    _write(engine / "engine.toml", f"""\
name = "{name}"
libname = "{name}"
version = "{version}"
license = "MIT"

[sources.release]
url = "{url}"

[sha256]
{table}""")
    _write(engine / "recipe.py", FIXBIN_RECIPE)
    _write(project / "variants" / f"{name}.toml", variants_toml(rows, f"{name} (fixture) legs"))
    _write(project / "smoke/fixbin/CMakeLists.txt", FIXBIN_SMOKE_CMAKE)
    _write(project / "smoke/fixbin/smoke.c", FIXBIN_SMOKE_C)


# --------------------------------------------------------------------------- fixgit upstream

FIXGIT_VERSION = "1.0.0"
FIXGIT_LEG_ID = "fixgit-linux-x86_64-shared"
# The library's source in the superproject; its header in a submodule (by relative URL).
FIXGIT_SOURCE = '#include "fixgit.h"\nint fixgit_answer(void) { return FIXGIT_ANSWER; }\n'
FIXGIT_HEADER = ("#pragma once\n#define FIXGIT_ANSWER {answer}\n"
                 "__attribute__((visibility(\"default\"))) int fixgit_answer(void);\n")

FIXGIT_RECIPE = '''\
"""fixgit (fixture): a library built from a git checkout whose header lives in a submodule."""
from __future__ import annotations

from backends.model import recipe_kit as kit
from backends.model.engine import Engine
from backends.model.leg import Leg
from backends.model.plan import Command, Contract, CopyRule, Plan


def plan(leg: Leg, engine: Engine, archive: str) -> Plan:
    cc = ("cc", "-shared", "-fPIC", "-I{src}/api", "-o", "libfixgit.so", "{src}/fixgit.c")
    # Every source is fetched (the tests add a branch-tracking one, like LiteRT's cpuinfo).
    downloads = tuple(kit.git_source(engine, name) for name in engine.sources)
    return Plan(leg=leg, version=engine.version, archive=archive, downloads=downloads,
                build=(Command("cc", cc, cwd="{install}"),),
                collect=(CopyRule("{install}/libfixgit.so", "lib"), CopyRule("{src}/api/fixgit.h", "include")),
                contract=Contract(required=("include/fixgit.h", "lib/libfixgit.so"),
                                  symbols=(("lib/libfixgit.so", "fixgit_answer"),)))
'''
# The superproject's CMake reads a file of its `extra` submodule when FIXGIT_EXTRA is on.
FIXGIT_CMAKELISTS = '''\
cmake_minimum_required(VERSION 3.16)
project(fixgit NONE)
if(FIXGIT_EXTRA)
  include(${CMAKE_CURRENT_SOURCE_DIR}/extra/extra.cmake)
endif()
'''
# FIXGIT_RECIPE with a configure of that CMake first, with FIXGIT_EXTRA on.
FIXGIT_CMAKE_RECIPE = FIXGIT_RECIPE.replace(
    'build=(Command("cc", cc, cwd="{install}"),)',
    'build=(Command("configure", ("cmake", "-S", "{src}", "-B", "{build}", "-DFIXGIT_EXTRA=ON")),\n'
    '                       Command("cc", cc, cwd="{install}"))')


@dataclass
class GitUpstream:
    """Bare repositories `fixgit.git` (tags v<version>, branch main) and its submodule
    `fixgit-api.git` under `root`, with the commit of each tag."""

    root: Path
    tags: dict[str, str] = field(default_factory=dict)

    @property
    def url(self) -> str:
        return f"file://{self.root / 'fixgit.git'}"

    def git(self, repo: str, *args: str) -> str:
        argv = ["git", "-c", "user.name=t", "-c", "user.email=t@t", "-c", "protocol.file.allow=always", *args]
        return subprocess.run(argv, cwd=self.root / "work" / repo, check=True, capture_output=True,
                              text=True).stdout.strip()

    def release(self, version: str, answer: int) -> str:
        """Commit a new header and source, tag v<version> (annotated), push; returns the commit."""
        (self.root / "work/fixgit-api/fixgit.h").write_text(FIXGIT_HEADER.format(answer=answer))
        self.git("fixgit-api", "commit", "-q", "-am", f"answer {answer}")
        self.git("fixgit-api", "push", "-q", "origin", "main")
        self.git("fixgit", "submodule", "update", "-q", "--remote", "api")
        (self.root / "work/fixgit/fixgit.c").write_text(FIXGIT_SOURCE + f"/* {version} */\n")
        self.git("fixgit", "commit", "-q", "-am", f"release {version}")
        self.git("fixgit", "tag", "-a", f"v{version}", "-m", version)
        self.git("fixgit", "push", "-q", "--follow-tags", "origin", "main")
        self.tags[version] = self.git("fixgit", "rev-parse", "HEAD")
        return self.tags[version]

    def take_offline(self, *names: str) -> None:
        """The repositories `names` (every one when none is named) are gone from upstream."""
        for name in names or ("fixgit", "fixgit-api", "fixgit-extra"):
            if (self.root / f"{name}.git").exists():
                shutil.move(self.root / f"{name}.git", self.root / f"{name}.offline")


def make_git_upstream(root: Path, *, extra: bool = False) -> GitUpstream:
    """The fixgit upstream at v1.0.0 (answer 42); `extra`: with a second submodule `extra`
    (`fixgit-extra.git`) whose extra.cmake the superproject's CMakeLists.txt includes when
    FIXGIT_EXTRA is on."""
    upstream = GitUpstream(root)
    for name in ("fixgit-api", "fixgit", *(("fixgit-extra",) if extra else ())):
        subprocess.run(["git", "init", "-q", "--bare", "-b", "main", str(root / f"{name}.git")], check=True)
        subprocess.run(["git", "clone", "-q", str(root / f"{name}.git"), str(root / "work" / name)], check=True,
                       capture_output=True)
        upstream.git(name, "checkout", "-q", "-b", "main")
    (root / "work/fixgit-api/fixgit.h").write_text(FIXGIT_HEADER.format(answer=0))
    upstream.git("fixgit-api", "add", "fixgit.h")
    upstream.git("fixgit-api", "commit", "-q", "-m", "api")
    upstream.git("fixgit-api", "push", "-q", "origin", "main")
    (root / "work/fixgit/fixgit.c").write_text(FIXGIT_SOURCE)
    upstream.git("fixgit", "add", "fixgit.c")
    upstream.git("fixgit", "submodule", "add", "-q", "-b", "main", "../fixgit-api.git", "api")
    if extra:
        (root / "work/fixgit-extra/extra.cmake").write_text('message(STATUS "fixgit extra")\n')
        upstream.git("fixgit-extra", "add", "extra.cmake")
        upstream.git("fixgit-extra", "commit", "-q", "-m", "extra")
        upstream.git("fixgit-extra", "push", "-q", "origin", "main")
        (root / "work/fixgit/CMakeLists.txt").write_text(FIXGIT_CMAKELISTS)
        upstream.git("fixgit", "add", "CMakeLists.txt")
        upstream.git("fixgit", "submodule", "add", "-q", "-b", "main", "../fixgit-extra.git", "extra")
    upstream.git("fixgit", "commit", "-q", "-m", "source")
    upstream.release(FIXGIT_VERSION, 42)
    return upstream


def write_fixgit(project: Path, url: str, *, commit: str = "", version: str = FIXGIT_VERSION,
                 rows: Sequence[LegRow] = (LegRow(kind="shared", can_run=False),), extra_sources: str = "",
                 submodules: str = "true", entries: str = "", recipe: str = FIXGIT_RECIPE) -> None:
    """engines/fixgit (engine.toml with its git source, recipe.py) and variants/fixgit.toml;
    `submodules` is the source's value (`"selected"` with `entries`, its [[submodules]])."""
    engine = project / "engines/fixgit"
    _write(engine / "engine.toml", f"""\
name = "fixgit"
libname = "fixgit"
version = "{version}"
license = "MIT"

[sources.source]
kind = "git"
url = "{url}"
ref = "v{{version}}"
commit = "{commit}"         # recorded by scons lock
submodules = {submodules}
{extra_sources}
{entries}
[sha256]
""")
    _write(engine / "recipe.py", recipe)
    _write(project / "variants/fixgit.toml", variants_toml(rows, "fixgit (fixture) legs"))


def new_project(project: Path) -> Path:
    """An empty project: the repo's SConstruct, symlinks to its site_scons and to the
    contract data every engine shares (engines/contracts.toml)."""
    project.mkdir(parents=True, exist_ok=True)
    shutil.copy(REPO / "SConstruct", project / "SConstruct")
    (project / "site_scons").symlink_to(REPO / "site_scons")
    (project / "engines").mkdir(exist_ok=True)
    (project / "engines" / "contracts.toml").symlink_to(REPO / "engines" / "contracts.toml")
    (project / "variants").mkdir(exist_ok=True)
    return project


@dataclass
class Upstreams:
    """Generated upstream files in a served directory, and their pins."""

    server: Server
    root: Path  # the served directory
    fixsrc_file: str
    fixsrc_sha: str
    fixbin_pins: dict[str, str]

    @property
    def fixsrc_url(self) -> str:
        return f"{self.server.base_url}/fixsrc-{{version}}.tar.gz"

    @property
    def fixbin_url(self) -> str:
        return f"{self.server.base_url}/{{asset}}-{{version}}.{{ext}}"


def make_upstreams(root: Path, server: Server, fixbin_assets: Iterable[str] = ("fixbin-linux-x64",)) -> Upstreams:
    assert server.root == root
    name, sha = make_fixsrc_release(root)
    pins = make_fixbin_release(root, assets=fixbin_assets)
    return Upstreams(server=server, root=root, fixsrc_file=name, fixsrc_sha=sha, fixbin_pins=pins)


def make_project(project: Path, upstreams: Upstreams, *, fixsrc: bool = True, fixbin: bool = True,
                 fixsrc_rows: Sequence[LegRow] = FIXSRC_LEGS, forget_coreml: bool = False) -> Path:
    new_project(project)
    if fixsrc:
        write_fixsrc(project, upstreams.fixsrc_url, upstreams.fixsrc_sha, rows=fixsrc_rows,
                     forget_coreml=forget_coreml)
    if fixbin:
        write_fixbin(project, upstreams.fixbin_url, upstreams.fixbin_pins)
    return project


# --------------------------------------------------------------------------- running scons


@dataclass
class Run:
    argv: list[str]
    returncode: int
    stdout: str
    stderr: str
    seconds: float

    @property
    def output(self) -> str:
        return self.stdout + self.stderr

    def step_lines(self) -> list[str]:
        """The action lines of the steps that ran ("[build] fixsrc-linux-x86_64-static", ...)."""
        return step_lines(self.stdout)

    def __str__(self) -> str:
        return (f"$ {' '.join(self.argv)}  (exit {self.returncode}, {self.seconds:.1f} s)\n"
                f"--- stdout\n{self.stdout}\n--- stderr\n{self.stderr}")


_STEP_LINE = re.compile(r"^\[(%s)\] (.*)$" % "|".join(STEP_NAMES))


_DONE = re.compile(r" done in [0-9.]+ s$")


def step_lines(stdout: str) -> list[str]:
    """Action lines SCons printed for executed steps. Lines the steps print themselves
    (`[patch] patch <name>: applied`, `[archive] dist/<name>: ...`, `[build] <leg> reruns:
    <what changed>`) are not counted."""
    lines = []
    for line in stdout.splitlines():
        match = _STEP_LINE.match(line)
        if not match:
            continue
        step, rest = match.groups()
        if (step == "patch" and rest.startswith("patch ")) or (step in ("publish", "restore") and ": " in rest) \
                or _DONE.search(rest) or " reruns: " in rest:
            continue
        lines.append(line)
    return lines


def scons_argv(*args: str) -> list[str]:
    return [sys.executable, "-m", "SCons", "-Q", *args]


def child_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SCONSFLAGS", "FIXSRC_"))}
    env.pop("ANIRA_TRACEBACK", None)
    env.update(extra or {})
    return env


def scons(project: Path, *args: str, env: dict[str, str] | None = None, timeout: float = 600,
          cwd: Path | None = None, umask: int = -1) -> Run:
    """scons in `project`, or started from `cwd` (give `-C <project>` or `-u` in `args`);
    with `umask`, under that umask."""
    argv = scons_argv(*args)
    started = time.monotonic()
    done = subprocess.run(argv, cwd=cwd or project, env=child_env(env), capture_output=True, text=True,
                          timeout=timeout, umask=umask)
    return Run(argv, done.returncode, done.stdout, done.stderr, time.monotonic() - started)


def step_manifests(project: Path) -> dict[str, int]:
    """mtime_ns of every step target (records and dist files): a step that ran rewrote its target."""
    found = {}
    for pattern in ("build/legs/*/steps/*.json", "build/downloads/*.json", "build/git/*.json",
                    "build/extract/*.json", "build/src/*.json", "dist/*"):
        for path in project.glob(pattern):
            found[path.relative_to(project).as_posix()] = path.stat().st_mtime_ns
    return found


def changed(before: dict[str, int], after: dict[str, int]) -> set[str]:
    return {k for k, v in after.items() if before.get(k) != v}


def archive_name(libname: str, version: str, leg_id: str) -> str:
    """The project's one naming function, applied to a fixture leg id."""
    engine, rest = leg_id.split("-", 1)
    tokens = rest.split("-")
    config = "debug" if tokens[-1] == "debug" else "release"
    if config == "debug":
        tokens.pop()
    kind = tokens.pop()
    flavor = tokens.pop() if tokens[-1] in FLAVORS else "cpu"
    platform = canonical_platform("-".join(tokens))
    return archive_stem(libname, version, platform, flavor, kind, config) + ".zip"


def fixsrc_archive(leg_id: str) -> str:
    return archive_name("fixsrc", FIXSRC_VERSION, leg_id)


def fixbin_archive(leg_id: str) -> str:
    return archive_name("fixbin", FIXBIN_VERSION, leg_id)


def fetchcontent_of_deps_txt(deps_txt: str) -> str:
    """CMake that declares each `name;URL;SHA1` line of `deps_txt` by FetchContent, preferring
    `<source>/mirror/<URL without https://>` as ONNX Runtime's CMake does, and makes `dep`
    available: the fixture upstreams' build-time download."""
    return """\
include(FetchContent)
file(STRINGS %s DEPS)
foreach(DEP IN LISTS DEPS)
  if(NOT DEP MATCHES "^#")
    list(POP_FRONT DEP NAME)
    list(POP_FRONT DEP URL)
    set(DEP_URL_${NAME} ${URL})
    set(DEP_SHA1_${NAME} ${DEP})
    string(REGEX REPLACE "^https://" "${CMAKE_SOURCE_DIR}/mirror/" LOCAL "${URL}")
    if(EXISTS "${LOCAL}")
      set(DEP_URL_${NAME} "${LOCAL}")
    endif()
  endif()
endforeach()
FetchContent_Declare(dep URL ${DEP_URL_dep} URL_HASH SHA1=${DEP_SHA1_dep})
FetchContent_MakeAvailable(dep)
""" % deps_txt
