"""The contracts on real upstream binaries from the registries, in both directions: each
variant's real library passes its own contract and fails the CPU one naming its evidence
(also with the EP header removed and the binary kept), and a real CPU library fails the
variant's contract.

* ORT CoreML: PyPI's macOS arm64 onnxruntime 1.26.0 (CoreML compiled in)
* ORT DirectML: onnxruntime-directml 1.24.4 (win_amd64); the CPU DLL of onnxruntime 1.26.0
* ORT CUDA: onnxruntime-gpu 1.26.0 (linux x86_64), assembled by inputs.py (slow)
* LibTorch MPS: PyPI's torch 2.13.0 macOS arm64 wheel, an MPS build (slow)
* ExecuTorch CoreML / MLX: the 1.5.1 macOS arm64 wheel's backends
* LiteRT: ai-edge-litert 2.3.0's macOS Metal accelerator plugin
* static libraries: Debian's libabsl-dev archives (the undefined-symbol gate)
"""
from __future__ import annotations

import subprocess
import zipfile
from dataclasses import replace
from pathlib import Path

import pytest

from backends.util import toolchain

import inputs
from backends.model.matrix import load_matrix
from backends.model.plan import Contract
from backends.model.recipes import plan_leg
from backends.steps.checks.paths import foreign_paths
from backends.steps.verify import check
from binaries import license_texts
from binaries import zip_members as _zip_members

ENGINES = ("onnxruntime", "libtorch", "tflite", "litert", "executorch")


def zip_members(path, members, symlinks={}):  # type: ignore[no-untyped-def]
    """A package around the real binaries, with the license texts every contract requires
    (each engine's: the contract checks its own)."""
    texts = {name: data for engine in ENGINES for name, data in license_texts(engine).items()}
    return _zip_members(path, {**texts, **members}, symlinks)

pytestmark = [pytest.mark.e2e]

ROOT = Path(__file__).resolve().parents[2]
MATRIX = load_matrix(ROOT)
ORT_HEADERS = {f"include/{name}": b"#define ORT_API_VERSION 21\n"
               for name in ("onnxruntime_c_api.h", "onnxruntime_cxx_api.h")}


def contract(leg_id: str) -> Contract:
    leg = MATRIX.leg(leg_id)
    return plan_leg(leg, MATRIX.engines[leg.engine], MATRIX).contract


def members_of(wheel: Path, wanted: dict[str, str]) -> dict[str, bytes]:
    """{package member: bytes of the wheel member} for `wanted` = {wheel member: package member}."""
    with zipfile.ZipFile(wheel) as archive:
        return {target: archive.read(source) for source, target in wanted.items()}


def import_library(dll: bytes, name: str, work: Path) -> bytes:
    """The import library of a DLL, from its export table (as the Windows legs make it)."""
    (work / name).write_bytes(dll)
    listing = subprocess.run(["llvm-objdump", "-p", str(work / name)], capture_output=True, text=True, check=True)
    exports = [line.split()[-1] for line in listing.stdout.split("Ordinal      RVA  Name", 1)[1].splitlines()[1:]
               if len(line.split()) == 3]
    (work / "exports.def").write_text(f"LIBRARY {name}\nEXPORTS\n" + "".join(f"  {e}\n" for e in exports))
    subprocess.run(["llvm-dlltool", "-m", "i386:x86-64", "-d", str(work / "exports.def"), "-l", str(work / "x.lib")],
                   check=True)
    return (work / "x.lib").read_bytes()


def problems_naming(problems: list[str], *words: str) -> list[str]:
    return [p for p in problems if all(w in p for w in words)]


# --- ONNX Runtime ---------------------------------------------------------------------------

@pytest.fixture(scope="module")
def ort_coreml_dylib(e2e_cache, tmp_path_factory) -> bytes:
    """PyPI's macOS arm64 library with the install-name fixup the shared legs' stage runs."""
    wheel = inputs.platform_wheel("onnxruntime==1.26.0", "macosx_14_0_arm64", "onnxruntime-1.26.0-*macosx*.whl",
                                  e2e_cache)
    dylib = tmp_path_factory.mktemp("coreml") / "libonnxruntime.dylib"
    dylib.write_bytes(members_of(wheel, {"onnxruntime/capi/libonnxruntime.1.26.0.dylib": "lib"})["lib"])
    tool = toolchain.find_tool("llvm-install-name-tool")
    if tool is None:
        pytest.skip("llvm-install-name-tool is not installed (apt-get install llvm)")
    subprocess.run([tool, "-id", "@rpath/libonnxruntime.dylib", str(dylib)], check=True)
    return dylib.read_bytes()


def test_ort_coreml_library_passes_as_gpu_and_fails_as_cpu(tmp_path, ort_coreml_dylib):
    library = {"lib/libonnxruntime.dylib": ort_coreml_dylib}
    gpu = zip_members(tmp_path / "gpu.zip", {**ORT_HEADERS, **library, "include/coreml_provider_factory.h": b""})
    assert check(gpu, contract("onnxruntime-macos-arm64-gpu-shared"), "1.26.0") == []
    # The header dropped, the CoreML build kept: a CPU package by its headers only.
    cpu = zip_members(tmp_path / "cpu.zip", {**ORT_HEADERS, **library})
    problems = check(cpu, contract("onnxruntime-macos-arm64-shared"), "1.26.0")
    assert problems == [
        "lib/libonnxruntime.dylib defines OrtSessionOptionsAppendExecutionProvider_CoreML: coreml is compiled in, "
        "which this package must not ship",
        "lib/libonnxruntime.dylib links /System/Library/Frameworks/CoreML.framework/Versions/A/CoreML: "
        "coreml is linked in, which this package must not ship",
    ]


@pytest.fixture(scope="module")
def ort_windows(e2e_cache, tmp_path_factory) -> dict[str, dict[str, bytes]]:
    """{"dml": 1.24.4 DirectML package members, "cpu": 1.26.0 CPU package members}."""
    work = tmp_path_factory.mktemp("win")
    dml_wheel = inputs.platform_wheel("onnxruntime-directml==1.24.4", "win_amd64", "onnxruntime_directml-*.whl",
                                      e2e_cache)
    cpu_wheel = inputs.platform_wheel("onnxruntime==1.26.0", "win_amd64", "onnxruntime-1.26.0-*win_amd64.whl",
                                      e2e_cache)
    dml = members_of(dml_wheel, {"onnxruntime/capi/onnxruntime.dll": "lib/onnxruntime.dll",
                                 "onnxruntime/capi/DirectML.dll": "lib/DirectML.dll"})
    cpu = members_of(cpu_wheel, {"onnxruntime/capi/onnxruntime.dll": "lib/onnxruntime.dll"})
    for package in (dml, cpu):
        package["lib/onnxruntime.lib"] = import_library(package["lib/onnxruntime.dll"], "onnxruntime.dll", work)
    return {"dml": dml, "cpu": cpu}


def test_ort_directml_dll_passes_as_gpu_and_fails_as_cpu(tmp_path, ort_windows):
    dml = ort_windows["dml"]
    gpu = zip_members(tmp_path / "gpu.zip", {**ORT_HEADERS, **dml, "include/dml_provider_factory.h": b""})
    assert check(gpu, contract("onnxruntime-windows-x86_64-gpu-shared"), "1.24.4") == []
    problems = check(zip_members(tmp_path / "cpu.zip", {**ORT_HEADERS, **dml}),
                     contract("onnxruntime-windows-x86_64-shared"), "1.24.4")
    assert problems_naming(problems, "lib/DirectML.dll is dml evidence")
    assert problems_naming(problems, "OrtSessionOptionsAppendExecutionProvider_DML", "dml is compiled in")
    assert problems_naming(problems, "links DirectML.dll: dml is linked in")


def test_ort_cpu_dll_fails_as_gpu_and_states_its_version(tmp_path, ort_windows):
    cpu = zip_members(tmp_path / "cpu.zip", {**ORT_HEADERS, **ort_windows["cpu"], "include/dml_provider_factory.h": b""})
    problems = check(cpu, contract("onnxruntime-windows-x86_64-gpu-shared"), "1.26.0")
    assert "dml evidence missing: no library defines OrtSessionOptionsAppendExecutionProvider_DML" in problems
    assert "dml evidence missing: no shared library links DirectML.dll" in problems
    assert check(cpu, contract("onnxruntime-windows-x86_64-shared"), "1.27.0") == [
        "include/dml_provider_factory.h is dml evidence (**/dml_provider_factory.h), which this package must not ship",
        "lib/onnxruntime.dll says version 1.26.26.508, but the leg is version 1.27.0: "
        "the archive holds another release's content"]


@pytest.mark.slow
def test_ort_cuda_libraries_fail_as_cpu(tmp_path, e2e_cache):
    prefix = inputs.release_prefix(inputs.ort_linux_x64_cuda_release(e2e_cache),
                               e2e_cache / "prefixes" / "onnxruntime-linux-x64-gpu_cuda13")
    libs = {f"lib/{name}": prefix / "lib" / name for name in
            ("libonnxruntime.so.1.26.0", "libonnxruntime_providers_shared.so", "libonnxruntime_providers_cuda.so")}
    archive = tmp_path / "cpu.zip"
    with zipfile.ZipFile(archive, "w", zipfile.ZIP_STORED) as handle:  # 400 MB: no compression
        for member, path in {**libs, **{k: v for k, v in ORT_HEADERS.items()}}.items():
            handle.write(path, member) if isinstance(path, Path) else handle.writestr(member, path)
        info = zipfile.ZipInfo("lib/libonnxruntime.so")
        info.create_system, info.external_attr = 3, 0o120777 << 16
        handle.writestr(info, "libonnxruntime.so.1.26.0")
    problems = check(archive, contract("onnxruntime-linux-x86_64-shared"), "1.26.0")
    assert problems_naming(problems, "lib/libonnxruntime_providers_cuda.so is cuda evidence")
    assert problems_naming(problems, "defines OrtSessionOptionsAppendExecutionProvider_CUDA: cuda is compiled in")
    assert problems_naming(problems, "libonnxruntime_providers_cuda.so links libcudart.so.12: cuda is linked in")


def test_ort_release_library_of_another_version_fails(tmp_path, e2e_cache):
    """`version=1.27.0` with the 1.26.0 tarball: the real library states 1.26.0 twice."""
    prefix = inputs.release_prefix(inputs.ort_linux_x64_release(e2e_cache), e2e_cache / "prefixes" / "onnxruntime-linux-x64")
    library = prefix / "lib" / "libonnxruntime.so.1.26.0"
    archive = zip_members(tmp_path / "pkg.zip", {**ORT_HEADERS, "lib/libonnxruntime.so.1.26.0": library},
                          {"lib/libonnxruntime.so": "libonnxruntime.so.1.26.0"})
    assert check(archive, contract("onnxruntime-linux-x86_64-shared"), "1.26.0") == []
    assert check(archive, contract("onnxruntime-linux-x86_64-shared"), "1.27.0") == [
        "lib/libonnxruntime.so.1.26.0 says version 1.26.0, but the leg is version 1.27.0: "
        "the archive holds another release's content",
        "lib/libonnxruntime.so.1.26.0 (VERS_1.26.0) says version 1.26.0, but the leg is version 1.27.0: "
        "the archive holds another release's content"]


# --- LibTorch -------------------------------------------------------------------------------

@pytest.mark.slow
def test_libtorch_mps_build_passes_as_gpu_and_fails_as_cpu(tmp_path, e2e_cache):
    wheel = inputs.platform_wheel("torch==2.13.0", "macosx_14_0_arm64", "torch-2.13.0-*macosx*.whl", e2e_cache)
    with zipfile.ZipFile(wheel) as handle:
        names = [n for n in handle.namelist() if n.startswith("torch/lib/lib") and n.endswith(".dylib")
                 and "python" not in n]
        wanted = {n: n.removeprefix("torch/") for n in names}
        wanted.update({f"torch/{m}": m for m in ("share/cmake/Torch/TorchConfig.cmake",
                                                 "share/cmake/Torch/TorchConfigVersion.cmake",
                                                 "include/torch/csrc/api/include/torch/torch.h")})
        archive = tmp_path / "mps.zip"
        with zipfile.ZipFile(archive, "w", zipfile.ZIP_STORED) as out:
            for source, target in wanted.items():
                out.writestr(target, handle.read(source))
            for name, data in license_texts("libtorch").items():
                out.writestr(name, data)
    assert check(archive, contract("libtorch-macos-arm64-gpu-shared"), "2.13.0") == []
    problems = check(archive, contract("libtorch-macos-arm64-shared"), "2.13.0")
    assert problems_naming(problems, "lib/libtorch_cpu.dylib defines _ZN2at3mps9MPSDevice11getInstanceEv")
    assert problems_naming(problems, "lib/libtorch_cpu.dylib links", "Metal.framework", "mps is linked in")
    assert problems_naming(problems, "MetalPerformanceShaders", "mps is linked in")


def test_libtorch_wheel_aten_config_names_the_runners_checkout(e2e_cache):
    """Why the LibTorch legs drop share/cmake/ATen: upstream's file is not relocatable."""
    prefix = inputs.wheel_prefix(inputs.torch_cpu_wheel(e2e_cache), "torch", e2e_cache / "prefixes" / "libtorch-cpu")
    text = (prefix / "share/cmake/ATen/ATenConfig.cmake").read_text()
    assert foreign_paths(text) == ["/__w/pytorch/pytorch/torch/include"]
    torch_config = (prefix / "share/cmake/Torch/TorchConfig.cmake").read_text()
    assert foreign_paths(torch_config) == [] and "ATen" not in torch_config


# --- ExecuTorch and LiteRT ------------------------------------------------------------------

@pytest.fixture(scope="module")
def executorch_macos(e2e_cache) -> dict[str, bytes]:
    wheel = inputs.platform_wheel("executorch==1.5.1", "macosx_14_0_arm64", "executorch-1.5.1-*macosx*.whl", e2e_cache)
    with zipfile.ZipFile(wheel) as handle:
        wanted = {n: n.removeprefix("executorch/") for n in handle.namelist()
                  if n.startswith(("executorch/lib/lib", "executorch/share/cmake/")) or n == "executorch/lib/mlx.metallib"
                  or n == "executorch/include/executorch/runtime/executor/program.h"}
    return members_of(wheel, wanted)


def test_executorch_wheel_backends_by_evidence(tmp_path, executorch_macos):
    dropped = ("qnn", "openvino", "cuda")
    members = {k: v for k, v in executorch_macos.items() if not any(f"backend_{d}" in k for d in dropped)}
    gpu = zip_members(tmp_path / "gpu.zip", members)
    assert check(gpu, contract("executorch-macos-arm64-gpu-shared"), "1.5.1") == []
    cpu_members = {k: v for k, v in members.items() if "backend_coreml" not in k and "backend_mlx" not in k
                   and not k.endswith("mlx.metallib")}
    problems = check(zip_members(tmp_path / "cpu-under-gpu.zip", cpu_members),
                     contract("executorch-macos-arm64-gpu-shared"), "1.5.1")
    assert "coreml evidence missing: no shared library links CoreML.framework" in problems
    assert "mlx evidence missing: no library defines _ZN10executorch8backends3mlx*" in problems
    # The CoreML backend under another file name is still CoreML.
    renamed = {**cpu_members, "lib/libexecutorch_extra.dylib": members["lib/libexecutorch_backend_coreml.dylib"]}
    problems = check(zip_members(tmp_path / "renamed.zip", renamed), contract("executorch-macos-arm64-shared"), "1.5.1")
    assert problems_naming(problems, "lib/libexecutorch_extra.dylib defines _ZN10executorch8backends6coreml")
    assert problems_naming(problems, "lib/libexecutorch_extra.dylib links", "CoreML", "coreml is linked in")


def test_litert_metal_accelerator_is_gpu_evidence_the_cpu_runtime_is_not(tmp_path, e2e_cache):
    wheel = inputs.platform_wheel("ai-edge-litert==2.3.0", "macosx_12_0_arm64", "ai_edge_litert-2.3.0-*macosx*.whl",
                                  e2e_cache)
    libs = members_of(wheel, {"ai_edge_litert/libLiteRt.dylib": "lib/libLiteRt.dylib",
                              "ai_edge_litert/libLiteRtMetalAccelerator.dylib": "lib/libLiteRtMetalAccelerator.dylib"})
    evidence = replace(Contract(), foreign_accelerators=contract("litert-macos-arm64-shared").foreign_accelerators)
    runtime = zip_members(tmp_path / "cpu.zip", {"lib/libLiteRt.dylib": libs["lib/libLiteRt.dylib"]})
    assert check(runtime, evidence, "2.1.5") == []  # it links Metal, for buffer interop only
    both = zip_members(tmp_path / "gpu.zip", libs)
    problems = check(both, evidence, "2.1.5")
    assert problems_naming(problems, "lib/libLiteRtMetalAccelerator.dylib is metal evidence")
    assert problems_naming(problems, "lib/libLiteRtMetalAccelerator.dylib defines LiteRtAcceleratorImpl")


# --- static libraries -----------------------------------------------------------------------

def test_undefined_symbols_on_debians_abseil_archives(tmp_path, e2e_cache):
    deb = inputs.debian_package(e2e_cache, "libabsl-dev", "bookworm")
    subprocess.run(["dpkg-deb", "-x", str(deb), str(tmp_path / "deb")], check=True)
    archives = {f"lib/{p.name}": p for p in sorted((tmp_path / "deb").rglob("libabsl_*.a"))}
    gate = replace(Contract(), system_symbols=contract("litert-linux-x86_64-static").system_symbols)
    assert check(zip_members(tmp_path / "all.zip", archives), gate, "0") == []
    (problem,) = check(zip_members(tmp_path / "strings.zip", {"lib/libabsl_strings.a": archives["lib/libabsl_strings.a"]}),
                       gate, "0")
    assert "undefined symbols that neither the package nor the OS defines" in problem
    assert "_ZN4absl" in problem and "(in lib/libabsl_strings.a)" in problem


@pytest.mark.slow
def test_undefined_symbols_on_pytorchs_windows_libraries(tmp_path, e2e_cache):
    """MSVC names: torch 2.13.0's win_amd64 static libraries (fmt, cpuinfo, sleef, ittnotify)
    and import libraries leave only the C runtime's and the STL's symbols undefined."""
    wheel = inputs.platform_wheel("torch==2.13.0", "win_amd64", "torch-2.13.0-*win_amd64.whl", e2e_cache)
    with zipfile.ZipFile(wheel) as handle:
        wanted = {n: n.removeprefix("torch/") for n in handle.namelist()
                  if n.startswith("torch/lib/") and n.endswith((".lib", ".dll")) and "python" not in n}
    libraries = members_of(wheel, wanted)
    gate = replace(Contract(), system_symbols=contract("libtorch-windows-x86_64-shared").system_symbols)
    assert check(zip_members(tmp_path / "all.zip", libraries), gate, "0") == []  # the failing direction: unit tests
