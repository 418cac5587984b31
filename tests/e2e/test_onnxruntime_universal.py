"""The ONNX Runtime macOS universal legs end to end on real Mach-O libraries (issue 17, item 3).

Stands in for: the `onnxruntime-1.23.2-macOS-{x86_64,arm64}[-gpu]-shared.zip` archives the
macOS slice legs build from source on macos-15. Here each slice is PyPI's 1.23.2 wheel
dylib (the newest ORT with wheels for both macOS architectures, CoreML compiled in, as
upstream's -gpu build has it) staged by that slice leg's own plan: its stage rules over a
build tree holding the dylib where ORT's build leaves it and a source tree holding
ORT 1.21.0's include/ (Debian's orig tarball; the headers are older than the library,
never newer), then its install-name fixup (LLVM's install-name-tool standing in for
Xcode's, same command line) and the project's archiver. It differs from a real slice in
coming from upstream's Python packaging build rather than a `build.py --build_shared_lib`
run here (same C API and CoreML EP; 1.23.2, not the 1.26.0 pin), in carrying older
headers, and in being unsigned.

The universal legs then run unchanged with `inputs=dist`: lipo, archive, verify, smoke
(recorded not run: it needs macOS), publish. The CoreML slices make a verified universal
-gpu archive; the same libraries staged as CPU slices must be rejected by the CPU contract.
"""
from __future__ import annotations

import json
import os
import shutil
import zipfile
from pathlib import Path

import pytest

import inputs
from backends.binfmt import inspect
from backends.binfmt.macho import macho_archs
from backends.model.matrix import load_matrix
from backends.model.recipes import leg_engine, plan_leg
from backends.runner.run import Console
from backends.steps import archive as archive_step
from backends.steps import stage as stage_step
from backends.steps import upstream as upstream_step
from backends.steps.context import LegDirs
from backends.util import toolchain
from scratch import Scons, scratch_project

pytestmark = [pytest.mark.e2e]

VERSION = inputs.ORT_MACOS_VERSION
ARCHS = ("x86_64", "arm64")
COREML = "OrtSessionOptionsAppendExecutionProvider_CoreML"
UNIVERSAL_GPU = "onnxruntime-macos-universal-gpu-shared"
UNIVERSAL_CPU = "onnxruntime-macos-universal-shared"


def _install_name_tool(bin_dir: Path) -> Path:
    """`install_name_tool` on PATH as LLVM's (the recipe's fixup names Xcode's)."""
    llvm = toolchain.find_tool("llvm-install-name-tool")
    if llvm is None:
        pytest.skip("llvm-install-name-tool is not installed (apt-get install llvm)")
    bin_dir.mkdir(parents=True, exist_ok=True)
    (bin_dir / "install_name_tool").symlink_to(llvm)
    return bin_dir


def stage_slice(project: Path, leg_id: str, dylib: Path, source: Path, work: Path) -> Path:
    """The slice leg's archive, staged by its own plan from `dylib`; written into dist/."""
    matrix = load_matrix(project)
    leg = matrix.leg(leg_id)
    plan = plan_leg(leg, leg_engine(matrix, leg, VERSION), matrix)
    build = work / "build"
    (build / "Release").mkdir(parents=True)
    shutil.copy2(dylib, build / "Release" / dylib.name)  # the fixup edits the staged copy only
    dirs = LegDirs(src=source, build=build, install=work / "install", stage=work / "stage", logs=work / "logs")
    stage_step.stage(plan, dirs, os.environ)
    upstream_step.run_commands(plan.fixups, plan.env, dirs, leg_id, os.environ, verbose=False, log_prefix="fixup",
                               console=Console())
    out = project / "dist" / plan.archive
    archive_step.write_archive(dirs.stage, out)
    return out


@pytest.fixture(scope="module")
def project(tmp_path_factory, e2e_cache) -> Path:
    """A scratch project whose dist/ holds the four real slice archives (-gpu and CPU)."""
    root = scratch_project(tmp_path_factory.mktemp("universal"))
    work = tmp_path_factory.mktemp("slices")
    source = inputs.ort_source_include(e2e_cache)
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("PATH", f"{_install_name_tool(work / 'bin')}{os.pathsep}{os.environ['PATH']}")
        for arch in ARCHS:
            dylib = inputs.ort_macos_dylib(arch, work / "wheel" / arch, e2e_cache)
            for flavor in ("gpu", "cpu"):
                leg_id = f"onnxruntime-macos-{arch}{'-gpu' if flavor == 'gpu' else ''}-shared"
                stage_slice(root, leg_id, dylib, source, work / leg_id)
    return root


@pytest.fixture(scope="module")
def gpu(project, tmp_path_factory):
    scons = Scons(project, tmp_path_factory.mktemp("cache"))
    return scons, scons(UNIVERSAL_GPU, f"version={VERSION}", "inputs=dist")


def _member(archive: Path, name: str, dest: Path) -> Path:
    with zipfile.ZipFile(archive) as handle:
        dest.write_bytes(handle.read(name))
    return dest


def _steps(project: Path, leg: str, step: str) -> dict:
    return json.loads((project / "build/legs" / leg / "steps" / f"{step}.json").read_text())


def test_gpu_universal_archive_is_lipo_of_both_real_slices(gpu, tmp_path):
    scons, result = gpu
    archive = scons.project / "dist" / f"onnxruntime-{VERSION}-macOS-universal-gpu-shared.zip"
    assert archive.is_file(), result.stdout
    assert "lipo lib/libonnxruntime.dylib" in _steps(scons.project, UNIVERSAL_GPU, "merge")["report"]
    dylib = _member(archive, "lib/libonnxruntime.dylib", tmp_path / "libonnxruntime.dylib")
    assert macho_archs(dylib) == list(ARCHS)
    # Both slices keep what the slice legs staged: the @rpath install name, ORT's entry
    # point, the CoreML EP's entry point and the CoreML framework it links.
    assert inspect.macho_install_names(dylib) == {arch: "@rpath/libonnxruntime.dylib" for arch in ARCHS}
    for arch in ARCHS:
        assert {"OrtGetApiBase", COREML} <= inspect.exported_symbols(dylib, arch), arch
    assert any("/CoreML.framework/" in name for name in inspect.needed_libraries(dylib))
    with zipfile.ZipFile(archive) as handle:
        names = set(handle.namelist())
    assert {"include/onnxruntime_c_api.h", "include/coreml_provider_factory.h"} <= names


def test_gpu_universal_verify_checked_slices_symbols_and_install_name(gpu):
    scons, _ = gpu
    checked = _steps(scons.project, UNIVERSAL_GPU, "verify")["checked"]
    assert "every library is a macos-universal binary" in checked  # both slices, each checked
    assert any(line.startswith("shows coreml evidence (") and COREML in line for line in checked), checked
    assert "lib/libonnxruntime.dylib has the install name @rpath/libonnxruntime.dylib" in checked


def test_gpu_universal_smoke_is_recorded_not_run(gpu):
    scons, result = gpu
    smoke = _steps(scons.project, UNIVERSAL_GPU, "smoke")
    assert smoke["status"] == "not run" and "macos-15" in smoke["reason"], smoke
    assert f"[{UNIVERSAL_GPU}] smoke not run:" in result.stdout


def test_cpu_universal_rejects_the_coreml_slices(project, tmp_path_factory):
    """The same libraries staged as the CPU slices (no EP header): verify must see CoreML
    in the binary, in each slice, and nothing may be published."""
    scons = Scons(project, tmp_path_factory.mktemp("cache"))
    result = scons(UNIVERSAL_CPU, f"version={VERSION}", "inputs=dist", check=False)
    assert result.returncode != 0
    output = result.stdout + result.stderr
    assert f"lib/libonnxruntime.dylib defines {COREML}: coreml is compiled in" in output, output[-3000:]
    assert "links /System/Library/Frameworks/CoreML.framework" in output, output[-3000:]
    assert not (project / "dist" / f"onnxruntime-{VERSION}-macOS-universal-shared.zip").exists()
