"""Contracts checked on the archive itself: the false greens upstream shipped, on real
(tiny) binaries made here, through the contracts the recipes plan for named legs."""
from __future__ import annotations

import subprocess
from dataclasses import replace
from pathlib import Path

import pytest

from backends.model.matrix import load_matrix
from backends.model.plan import Contract
from backends.model.recipes import plan_leg
from backends.steps.verify import ContractError, check, verify
from backends.util import toolchain
from binaries import coff_static, elf_shared, elf_static, license_texts, macho_dylib, zip_members

ROOT = Path(__file__).resolve().parents[3]
MATRIX = load_matrix(ROOT)
ORT_CPU = "onnxruntime-linux-x86_64-shared"


def contract(leg_id: str) -> Contract:
    leg = MATRIX.leg(leg_id)
    return plan_leg(leg, MATRIX.engines[leg.engine], MATRIX).contract


@pytest.fixture(scope="module")
def ort_library(tmp_path_factory) -> Path:
    """What the CPU release's library shows: OrtGetApiBase in ELF version VERS_1.26.0, and
    a release's bulk (the contract's floor: no stub passes for ONNX Runtime)."""
    work = tmp_path_factory.mktemp("ort")
    library = elf_shared(work / "libonnxruntime.so.1.26.0", ("OrtGetApiBase", "OrtSessionOptionsAppendExecutionProvider_CPU"),
                         soname="libonnxruntime.so.1", version_node="VERS_1.26.0")
    return with_ballast(library, 6_000_000)


def with_ballast(library: Path, size: int) -> Path:
    """`library` grown by a section of `size` bytes, to the size of the real one."""
    ballast = library.with_name(library.name + ".ballast")
    ballast.write_bytes(bytes(size))
    subprocess.run([toolchain.require_tool("llvm-objcopy", "test"), "--add-section", f".ballast={ballast}", library],
                   check=True)
    ballast.unlink()
    return library


CPU_HEADERS = {"onnxruntime_c_api.h": 21, "onnxruntime_cxx_api.h": 0}
LINKS = {"lib/libonnxruntime.so.1": "libonnxruntime.so.1.26.0", "lib/libonnxruntime.so": "libonnxruntime.so.1"}


def ort_archive(path: Path, library: Path, headers: dict[str, int], extra: dict[str, bytes | Path] = {}) -> Path:
    members: dict[str, bytes | Path] = {f"include/{n}": f"#define ORT_API_VERSION {api}\n".encode()
                                        for n, api in headers.items()}
    members[f"lib/{library.name}"] = library
    return zip_members(path, {**members, **license_texts("onnxruntime"), **extra}, LINKS)


def test_a_good_cpu_archive_passes(tmp_path, ort_library):
    archive = ort_archive(tmp_path / "cpu.zip", ort_library, CPU_HEADERS)
    checked = verify(archive, contract(ORT_CPU), "1.26.0")["checked"]
    assert "shows no cuda evidence (**/*onnxruntime_providers_cuda.*, OrtSessionOptionsAppendExecutionProvider_CUDA, links cudart)" in checked and "every library is a linux-x86_64 binary" in checked


def test_cpu_archive_under_a_cuda_name_is_caught(tmp_path, ort_library):
    archive = ort_archive(tmp_path / "cuda.zip", ort_library, CPU_HEADERS)
    problems = check(archive, contract("onnxruntime-linux-x86_64-cuda-shared"), "1.26.0")
    assert "cuda evidence missing: no member matches **/*onnxruntime_providers_cuda.*" in problems
    assert "cuda evidence missing: no library defines OrtSessionOptionsAppendExecutionProvider_CUDA" in problems
    assert "cuda evidence missing: no shared library links cudart" in problems
    assert "missing required lib/libonnxruntime_providers_shared.so" in problems


def test_ep_header_in_a_cpu_archive_is_caught(tmp_path, ort_library):
    archive = ort_archive(tmp_path / "leak.zip", ort_library, {**CPU_HEADERS, "coreml_provider_factory.h": 0})
    with pytest.raises(ContractError, match=r"include/coreml_provider_factory.h is coreml evidence"):
        verify(archive, contract(ORT_CPU), "1.26.0")


def test_header_newer_than_the_library_is_caught(tmp_path, ort_library):
    archive = ort_archive(tmp_path / "new.zip", ort_library, {**CPU_HEADERS, "onnxruntime_c_api.h": 29})
    problems = check(archive, contract(ORT_CPU), "1.26.0")
    assert any("ORT_API_VERSION 29 but the library serves API 26" in p for p in problems)


def test_oversized_archive(tmp_path, ort_library):
    archive = ort_archive(tmp_path / "big.zip", ort_library, CPU_HEADERS)
    problems = check(archive, replace(contract(ORT_CPU), max_bytes=10), "1.26.0")
    assert any("over the 10-byte release-asset limit" in p for p in problems)


# --- issue: what an archive may contain: its binaries and its version ------------------------

def test_a_stub_library_is_not_a_library(tmp_path):
    archive = ort_archive(tmp_path / "stub.zip", _stub(tmp_path / "libonnxruntime.so.1.26.0"), CPU_HEADERS)
    problems = check(archive, contract(ORT_CPU), "1.26.0")
    assert "lib/libonnxruntime.so.1.26.0 (4 bytes) is no binary; linux-x86_64 needs ELF x86_64" in problems


def _stub(path: Path) -> Path:
    path.write_bytes(b"stub")
    return path


def test_a_library_of_another_architecture_is_caught(tmp_path):
    arm = elf_shared(tmp_path / "libonnxruntime.so.1.26.0", ("OrtGetApiBase",), version_node="VERS_1.26.0",
                     arch="aarch64")
    problems = check(ort_archive(tmp_path / "arm.zip", arm, CPU_HEADERS), contract(ORT_CPU), "1.26.0")
    assert any(p.endswith("is ELF aarch64; linux-x86_64 needs ELF x86_64") for p in problems), problems


def test_another_releases_library_fails_the_version_check(tmp_path, ort_library):
    """`version=1.27.0` with the 1.26.0 tarball as its origin."""
    archive = ort_archive(tmp_path / "old.zip", ort_library, CPU_HEADERS)
    problems = check(archive, contract(ORT_CPU), "1.27.0")
    assert ("lib/libonnxruntime.so.1.26.0 says version 1.26.0, but the leg is version 1.27.0: "
            "the archive holds another release's content") in problems
    assert any("(VERS_1.26.0) says version 1.26.0" in p for p in problems)


@pytest.mark.parametrize("leg_version", ["1.26.0/../../../advpub/x", "../1.26.0"])
def test_a_version_that_only_starts_like_the_librarys_is_not_it(tmp_path, ort_library, leg_version):
    archive = ort_archive(tmp_path / "odd.zip", ort_library, CPU_HEADERS)
    problems = check(archive, contract(ORT_CPU), leg_version)
    assert f"lib/libonnxruntime.so.1.26.0 says version 1.26.0, but the leg is version {leg_version}: " \
           "the archive holds another release's content" in problems


@pytest.mark.parametrize("leg_id, member, text", [
    ("libtorch-linux-x86_64-shared", "share/cmake/Torch/TorchConfigVersion.cmake", 'set(PACKAGE_VERSION "{}")\n'),
    ("executorch-linux-x86_64-static", "include/executorch/runtime/core/version.h", '#define ET_VERSION "{}"\n'),
    ("executorch-linux-x86_64-shared", "share/cmake/executorch-config-version.cmake", 'set(PACKAGE_VERSION "{}")\n'),
])
def test_version_files_state_the_legs_version(tmp_path, leg_id, member, text):
    leg_version = MATRIX.leg(leg_id).version or MATRIX.engines[MATRIX.leg(leg_id).engine].version
    version_only = replace(Contract(), versions=contract(leg_id).versions)
    good = zip_members(tmp_path / "good.zip", {member: text.format(leg_version + "+cpu").encode()})
    assert check(good, version_only, leg_version) == []
    old = zip_members(tmp_path / "old.zip", {member: text.format("0.9.0").encode()})
    assert check(old, version_only, leg_version) == [
        f"{member} says version 0.9.0, but the leg is version {leg_version}: the archive holds another release's content"]
    assert check(zip_members(tmp_path / "none.zip", {"README": b""}), version_only, leg_version)[0].startswith(
        "no version evidence")


def test_static_library_with_a_dangling_internal_symbol(tmp_path):
    """The LiteRT iOS signpost_profiler miss: one object's dependency was left out."""
    lib = elf_static(tmp_path / "libLiteRt.a", ("LiteRtCreateEnvironment", "_ZN6tflite11Interpreter6InvokeEv"),
                     ("_ZN6tflite9profiling27MaybeCreateSignpostProfilerEv", "_ZNSt6vectorIiSaIiEE9push_backEv",
                      "_Znwm", "memcpy", "pthread_create", "LiteRtGetMissing"))
    archive = zip_members(tmp_path / "pkg.zip", {"lib/libLiteRt.a": lib})
    gate = replace(contract("litert-linux-x86_64-static"), required=(), symbols=(), versions=())
    (problem,) = check(archive, gate, "2.1.5")
    assert problem.startswith("2 undefined symbols that neither the package nor the OS defines")
    assert "LiteRtGetMissing (in lib/libLiteRt.a)" in problem
    assert "_ZN6tflite9profiling27MaybeCreateSignpostProfilerEv" in problem
    assert "_ZNSt6vector" not in problem and "memcpy" not in problem and "_Znwm" not in problem
    complete = elf_static(tmp_path / "libLiteRt-complete.a", ("_ZN6tflite9profiling27MaybeCreateSignpostProfilerEv",
                                                              "LiteRtGetMissing"))
    fixed = zip_members(tmp_path / "fixed.zip", {"lib/libLiteRt.a": lib, "lib/libextra.a": complete})
    assert check(fixed, gate, "2.1.5") == []


def test_static_library_with_a_dangling_symbol_on_windows(tmp_path):
    """MSVC names: the STL and the C runtime come from the link line, tflite:: does not."""
    lib = coff_static(tmp_path / "tensorflowlite_c.lib", ("TfLiteModelCreate",),
                      ("?Invoke@Interpreter@tflite@@QEAAHXZ", "?_Xlength_error@std@@YAXPEBD@Z", "??2@YAPEAX_K@Z",
                       "__imp_?foo@bar@@YAXXZ", "memcpy", "TfLiteMissing"))
    archive = zip_members(tmp_path / "pkg.zip", {"lib/tensorflowlite_c.lib": lib})
    gate = replace(contract("tflite-windows-x86_64-static"), required=(), symbols=())
    (problem,) = check(archive, gate, "2.17.0")
    assert problem.startswith("2 undefined symbols")
    assert "?Invoke@Interpreter@tflite@@QEAAHXZ" in problem and "TfLiteMissing" in problem
    assert "std@@" not in problem and "memcpy" not in problem


def test_a_package_may_ship_only_its_own_libraries(tmp_path):
    """LibTorch -cuda: an NVIDIA library the strip globs miss is caught by its SONAME."""
    torch = elf_shared(tmp_path / "libtorch_cuda.so", ("_ZN3c104cuda6deviceEv",), soname="libtorch_cuda.so")
    renamed = elf_shared(tmp_path / "libextra.so", ("cutensorCreate",), soname="libcutensor.so.2")
    allowed = Contract(allowed_libraries=contract("libtorch-linux-x86_64-cuda-shared").allowed_libraries)
    good = zip_members(tmp_path / "good.zip", {"lib/libtorch_cuda.so": torch})
    assert check(good, allowed, "2.12.0") == []
    bad = zip_members(tmp_path / "bad.zip", {"lib/libtorch_cuda.so": torch, "lib/libextra.so": renamed})
    (problem,) = check(bad, allowed, "2.12.0")
    assert problem.startswith("lib/libextra.so is libcutensor.so.2, not a library this package ships")


def test_universal_packages_carry_both_slices_in_every_library(tmp_path):
    arm = macho_dylib(tmp_path / "arm64.dylib", ("TfLiteModelCreate",), arch="arm64")
    x86 = macho_dylib(tmp_path / "x86_64.dylib", ("TfLiteModelCreate",), arch="x86_64")
    fat = tmp_path / "libtensorflowlite_c.dylib"
    subprocess.run([toolchain.require_tool("llvm-lipo", "test"), "-create", arm, x86, "-output", fat], check=True)
    universal = Contract(platform="macos-universal")
    assert check(zip_members(tmp_path / "fat.zip", {"lib/libtensorflowlite_c.dylib": fat}), universal, "2.17.0") == []
    (problem,) = check(zip_members(tmp_path / "thin.zip", {"lib/libtensorflowlite_c.dylib": arm}), universal, "2.17.0")
    assert problem.endswith("is Mach-O arm64; macos-universal needs Mach-O arm64+x86_64")
