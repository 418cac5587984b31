"""Contracts of universal (fat Mach-O) archives, checked per slice: a symbol or install name
one slice lacks must not hide behind the other slice. Small dylibs made here with clang,
ld64.lld and llvm-lipo stand in for ONNX Runtime's (the real ones: tests/e2e)."""
from __future__ import annotations

import subprocess
import zipfile
from pathlib import Path

import pytest

from backends.model.matrix import load_matrix
from backends.model.recipes import plan_leg
from backends.steps.universal import lipo_create
from backends.steps.verify import check
from backends.util import toolchain
from binaries import license_texts

ROOT = Path(__file__).resolve().parents[3]
MATRIX = load_matrix(ROOT)
COREML = "OrtSessionOptionsAppendExecutionProvider_CoreML"
COREML_FRAMEWORK = "/System/Library/Frameworks/CoreML.framework/Versions/A/CoreML"
RPATH_NAME = "@rpath/libonnxruntime.dylib"
HEADERS = ("onnxruntime_c_api.h", "onnxruntime_cxx_api.h", "coreml_provider_factory.h")
VERSION = MATRIX.engines["onnxruntime"].version
BALLAST = 5_000_000  # bytes per slice: over the floor of ORT's library, a fifth of the real one


def contract(leg_id: str):
    leg = MATRIX.leg(leg_id)
    return plan_leg(leg, MATRIX.engines[leg.engine], MATRIX).contract


def tool(name: str) -> str:
    found = toolchain.find_tool(name)
    if found is None:
        pytest.skip(f"{name} is not installed (apt-get install llvm clang lld)")
    return found


def run(*argv: object) -> None:
    subprocess.run([str(a) for a in argv], check=True, capture_output=True)


def dylib(work: Path, arch: str, *, coreml: bool = True, install_name: str = RPATH_NAME) -> Path:
    """An ORT-like dylib for one arch: OrtGetApiBase and the CPU EP entry point, the CoreML
    EP entry point linking a CoreML framework stand-in (or neither), the given install
    name, and a release's bulk (the contract's floor: no stub passes for ONNX Runtime)."""
    base = work / f"{arch}-{coreml}-{install_name.rsplit('/', 1)[-1]}"
    base.mkdir(parents=True)
    target = f"{arch}-apple-macos11"
    link = ["-dylib", "-arch", arch, "-platform_version", "macos", "11.0", "11.0"]
    source = ("void *OrtGetApiBase(void) { return 0; }\n"
              "int OrtSessionOptionsAppendExecutionProvider_CPU(void *o, int arena) { return 0; }\n"
              f"static const char ballast[{BALLAST}] __attribute__((used)) = {{1}};\n")
    objects = []
    if coreml:
        (base / "coreml.c").write_text("int MLModelStandIn(void) { return 0; }\n")
        run(tool("clang"), "-target", target, "-c", base / "coreml.c", "-o", base / "coreml.o")
        run(tool("ld64.lld"), *link, "-install_name", COREML_FRAMEWORK, "-o", base / "CoreML", base / "coreml.o")
        source += f"int {COREML}(void *o, unsigned f) {{ return 0; }}\n"
        objects.append(base / "CoreML")
    (base / "ort.c").write_text(source)
    run(tool("clang"), "-target", target, "-c", base / "ort.c", "-o", base / "ort.o")
    out = base / "libonnxruntime.dylib"
    # ORT's release dylibs state their version as the id's current version (verify reads it).
    run(tool("ld64.lld"), *link, "-install_name", install_name, "-current_version", VERSION, "-o", out,
        base / "ort.o", *objects)
    return out


def universal_archive(work: Path, x86_64: Path, arm64: Path, headers=HEADERS) -> Path:
    tool("llvm-lipo")
    fat = work / "fat" / "libonnxruntime.dylib"
    lipo_create([x86_64, arm64], fat)
    archive = work / "universal.zip"
    with zipfile.ZipFile(archive, "w") as handle:
        for name in headers:
            handle.writestr(f"include/{name}", "#define ORT_API_VERSION 21\n")
        handle.write(fat, "lib/libonnxruntime.dylib")
        for name, text in license_texts("onnxruntime").items():
            handle.writestr(name, text)
    return archive


GPU = "onnxruntime-macos-universal-gpu-shared"
CPU = "onnxruntime-macos-universal-shared"


def test_coreml_slices_pass_the_gpu_universal_contract(tmp_path):
    archive = universal_archive(tmp_path, dylib(tmp_path, "x86_64"), dylib(tmp_path, "arm64"))
    assert check(archive, contract(GPU), VERSION) == []


def test_a_slice_without_the_ep_fails_although_the_other_has_it(tmp_path):
    archive = universal_archive(tmp_path, dylib(tmp_path, "x86_64"), dylib(tmp_path, "arm64", coreml=False))
    assert check(archive, contract(GPU), VERSION) == [
        f"coreml evidence missing: no library in slice arm64 defines {COREML}"]


def test_a_slice_with_its_build_install_name_fails(tmp_path):
    build_name = "@rpath/libonnxruntime.1.26.0.dylib"  # the id before the install-name fixup
    archive = universal_archive(tmp_path, dylib(tmp_path, "x86_64", install_name=build_name),
                                dylib(tmp_path, "arm64"))
    problems = check(archive, contract(GPU), VERSION)
    assert problems == [f"lib/libonnxruntime.dylib (x86_64) has the install name {build_name}, "
                        f"expected {RPATH_NAME}: consumers would look for the library there"]


def test_coreml_slices_under_the_cpu_name_fail_on_the_binary(tmp_path):
    """No EP header (the CPU stage drops it), but CoreML is compiled into both slices."""
    archive = universal_archive(tmp_path, dylib(tmp_path, "x86_64"), dylib(tmp_path, "arm64"),
                                headers=HEADERS[:2])
    assert check(archive, contract(CPU), VERSION) == [
        f"lib/libonnxruntime.dylib defines {COREML}: coreml is compiled in, which this package must not ship",
        f"lib/libonnxruntime.dylib links {COREML_FRAMEWORK}: coreml is linked in, which this package must not ship"]


def test_cpu_slices_pass_the_cpu_universal_contract(tmp_path):
    archive = universal_archive(tmp_path, dylib(tmp_path, "x86_64", coreml=False),
                                dylib(tmp_path, "arm64", coreml=False), headers=HEADERS[:2])
    assert check(archive, contract(CPU), VERSION) == []
