"""Contracts checked on the archive itself: the false greens upstream shipped (spec §6.5)."""
import subprocess
import zipfile
from pathlib import Path

import pytest

from backends.model.matrix import load_matrix
from backends.model.recipes import plan_leg
from backends.steps.verify import ContractError, check, verify

ROOT = Path(__file__).resolve().parents[2]
MATRIX = load_matrix(ROOT)


def contract(leg_id):
    leg = MATRIX.leg(leg_id)
    return plan_leg(leg, MATRIX.engines[leg.engine], MATRIX).contract


@pytest.fixture(scope="module")
def ort_library(tmp_path_factory):
    """An ELF library exporting what a CPU ONNX Runtime exports (no EP entry points)."""
    work = tmp_path_factory.mktemp("ort")
    (work / "ort.c").write_text("void *OrtGetApiBase(void) { return 0; }\n"
                                "int OrtSessionOptionsAppendExecutionProvider_CPU(void *o, int a) { return 0; }\n")
    subprocess.run(["cc", "-shared", "-fPIC", "-o", str(work / "libonnxruntime.so.1.26.0"), str(work / "ort.c")],
                   check=True)
    return work / "libonnxruntime.so.1.26.0"


def ort_archive(path, library, headers):
    with zipfile.ZipFile(path, "w") as archive:
        for name, api in headers.items():
            archive.writestr(f"include/{name}", f"#define ORT_API_VERSION {api}\n")
        archive.write(library, "lib/libonnxruntime.so.1.26.0")
        for link, target in (("lib/libonnxruntime.so.1", "libonnxruntime.so.1.26.0"),
                             ("lib/libonnxruntime.so", "libonnxruntime.so.1")):
            info = zipfile.ZipInfo(link)
            info.create_system = 3
            info.external_attr = (0o120777 << 16)
            archive.writestr(info, target)
    return path


CPU_HEADERS = {"onnxruntime_c_api.h": 21, "onnxruntime_cxx_api.h": 0}


def test_a_good_cpu_archive_passes(tmp_path, ort_library):
    archive = ort_archive(tmp_path / "cpu.zip", ort_library, CPU_HEADERS)
    assert verify(archive, contract("onnxruntime-linux-x86_64-shared"), "1.26.0")["checked"]


def test_cpu_archive_under_a_cuda_name_is_caught(tmp_path, ort_library):
    archive = ort_archive(tmp_path / "cuda.zip", ort_library, CPU_HEADERS)
    problems = check(archive, contract("onnxruntime-linux-x86_64-cuda-shared"), "1.26.0")
    assert "missing required lib/libonnxruntime_providers_cuda.so" in problems
    assert "missing required lib/libonnxruntime_providers_shared.so" in problems


def test_ep_header_in_a_cpu_archive_is_caught(tmp_path, ort_library):
    archive = ort_archive(tmp_path / "leak.zip", ort_library, {**CPU_HEADERS, "coreml_provider_factory.h": 0})
    with pytest.raises(ContractError, match="forbidden file include/coreml_provider_factory.h"):
        verify(archive, contract("onnxruntime-linux-x86_64-shared"), "1.26.0")


def test_header_newer_than_the_library_is_caught(tmp_path, ort_library):
    archive = ort_archive(tmp_path / "new.zip", ort_library, {**CPU_HEADERS, "onnxruntime_c_api.h": 29})
    problems = check(archive, contract("onnxruntime-linux-x86_64-shared"), "1.26.0")
    assert any("ORT_API_VERSION 29 but the library serves API 26" in p for p in problems)


def test_cpu_build_under_the_coreml_name_is_caught_by_its_missing_symbol(tmp_path, ort_library):
    """The round-1 bug of the GPU change: a CPU dylib shipped as -gpu (here the ELF stands in)."""
    gpu = contract("onnxruntime-macos-arm64-gpu-shared")
    elf_gpu = type(gpu)(required=("include/coreml_provider_factory.h",),
                        symbols=(("lib/libonnxruntime.so", "OrtSessionOptionsAppendExecutionProvider_CoreML"),))
    archive = ort_archive(tmp_path / "gpu.zip", ort_library, CPU_HEADERS)
    problems = check(archive, elf_gpu, "1.26.0")
    assert "missing required include/coreml_provider_factory.h" in problems
    assert "lib/libonnxruntime.so.1.26.0 does not export OrtSessionOptionsAppendExecutionProvider_CoreML" in problems
    assert gpu.symbols[-1] == ("lib/libonnxruntime.dylib", "OrtSessionOptionsAppendExecutionProvider_CoreML")


def test_oversized_archive_and_build_paths(tmp_path):
    archive = tmp_path / "pkg.zip"
    with zipfile.ZipFile(archive, "w") as handle:
        handle.writestr("lib/cmake/ExecuTorch/ExecuTorchTargets.cmake",
                        'add_library(coremldelegate STATIC IMPORTED)\n'
                        'set_target_properties(x PROPERTIES IMPORTED_LOCATION "/w/src/executorch/cmake-out/libx.a")\n')
    cpu = contract("executorch-macos-arm64-static")
    problems = check(archive, type(cpu)(no_cmake_targets=cpu.no_cmake_targets, max_bytes=10), "1.3.1")
    assert any("over the" in p for p in problems)
    assert any("not relocatable" in p for p in problems)
    assert "the CMake config exports coremldelegate, which this flavor must not ship" in problems


def test_linked_libraries_prove_an_accelerator_is_in_the_build(tmp_path):
    """Like MPS in libtorch_cpu (Metal.framework), here with an ELF library that links libm."""
    (tmp_path / "m.c").write_text("#include <math.h>\ndouble f(double x) { return cos(x); }\n")
    lib = tmp_path / "libf.so"
    subprocess.run(["cc", "-shared", "-fPIC", "-o", str(lib), str(tmp_path / "m.c"), "-lm"], check=True)
    archive = tmp_path / "pkg.zip"
    with zipfile.ZipFile(archive, "w") as handle:
        handle.write(lib, "lib/libf.so")
    Contract = type(contract("libtorch-macos-arm64-gpu-shared"))
    assert check(archive, Contract(links=(("lib/libf.so", "libm.so"),)), "1.0.0") == []
    assert check(archive, Contract(no_links=(("lib/libf.so", "libm.so"),)), "1.0.0") == \
        ["lib/libf.so links libm.so, which this flavor must not ship"]
    assert check(archive, Contract(links=(("lib/libf.so", "Metal.framework"),)), "1.0.0") == \
        ["lib/libf.so does not link Metal.framework: the accelerator is not in this build"]
