"""An origin judged against the prebuilt leg that takes it, before anything is staged
(steps/checks/origin.py): by the binaries' own headers and dynamic tables, in both
directions, on wheels made here of real ELF, PE and Mach-O libraries in PyTorch's wheel
layout. Each case is judged as the archive (the quick start, before extracting) and as the
extracted tree (the extract step) alike. The real wheels: tests/e2e/test_origin_fit_real.py."""
from __future__ import annotations

from pathlib import Path

import pytest

from backends.model.matrix import load_matrix
from backends.model.recipes import leg_engine, plan_leg
from backends.steps.checks import origin
from backends.steps.extract import extract
from binaries import pe_dll, torch_wheel, zip_members
from scratch import REPO

MATRIX = load_matrix(REPO)
CPU, CUDA = "libtorch-linux-x86_64-shared", "libtorch-linux-x86_64-cuda-shared"


def plan_of(leg_id: str):
    leg = MATRIX.leg(leg_id)
    return plan_leg(leg, leg_engine(MATRIX, leg, "2.13.0"), MATRIX)


def expectation(leg_id: str) -> origin.Expectation:
    plan = plan_of(leg_id)
    fits = origin.expectation(plan, plan.downloads[0], REPO / "engines")
    assert fits is not None
    return fits


@pytest.fixture(scope="module")
def wheel(tmp_path_factory):
    """wheel(**torch_wheel's options) -> a torch 2.13.0 wheel, made once for both judges."""
    made: dict[str, Path] = {}

    def make(**kwargs) -> Path:
        key = repr(sorted(kwargs.items()))
        if key not in made:
            made[key] = torch_wheel(tmp_path_factory.mktemp("wheel"), version="2.13.0", **kwargs)
        return made[key]
    return make


@pytest.fixture(params=["archive", "tree"])
def judge(request, tmp_path):
    """judge(leg id, wheel) -> the refusal, read from the archive or from its extracted tree."""
    def run(leg_id: str, archive: Path) -> str:
        fits, plan = expectation(leg_id), plan_of(leg_id)
        if request.param == "archive":
            return origin.judge_archive(fits, archive, plan.downloads[0].roots, MATRIX)
        tree = tmp_path / "extracted" / archive.stem
        listing = extract(archive, tree)
        return origin.judge_tree(fits, tree, tree / "torch", MATRIX, archive.name, listing)
    return run


def test_a_cpu_build_fits_the_cpu_leg(judge, wheel):
    assert judge(CPU, wheel()) == ""


def test_a_library_named_like_cuda_is_judged_by_its_own_name_and_what_it_loads(judge, wheel):
    assert judge(CPU, wheel(cuda="named")) == ""


@pytest.mark.parametrize("cuda, evidence", [("soname", "torch/lib/libtorch_cuda.so is libtorch_cuda.so"),
                                            ("needed", "torch/lib/libhelpers.so links libcudart.so.13")])
def test_a_cuda_build_given_to_the_cpu_leg_is_refused_naming_the_cuda_leg(judge, wheel, cuda, evidence):
    refused = judge(CPU, wheel(cuda=cuda))
    assert refused.startswith(f"origin torch-2.13.0-cp311-cp311-manylinux_2_28_x86_64.whl does not fit {CPU}: ")
    assert f"it is a cuda build ({evidence})" in refused and f"it fits {CUDA}" in refused


def test_a_cuda_build_fits_the_cuda_leg_and_a_cpu_build_does_not(judge, wheel):
    assert judge(CUDA, wheel(cuda="soname")) == ""
    refused = judge(CUDA, wheel())
    assert "it is no cuda build: " in refused and "none links cudart" in refused and f"it fits {CPU}" in refused


def test_text_that_names_cuda_is_no_evidence(judge, wheel):
    """Only binaries are judged: a header or config naming libcudart and libtorch_cuda says
    nothing about the build."""
    mentions = {"torch/include/cuda_notes.h": b"// links libcudart.so.13, see libtorch_cuda.so\n",
                "torch/lib/libtorch_cuda.so.txt": b"libtorch_cuda.so\n"}
    assert judge(CPU, wheel(extra=mentions)) == ""


def test_a_binary_is_found_by_its_bytes_whatever_its_name(judge, wheel, tmp_path):
    libs = tmp_path / "tools"
    libs.mkdir()
    tool = pe_dll(libs / "protoc.dll", ("main_entry",))  # a PE file among ELF libraries, no suffix
    refused = judge(CPU, wheel(extra={"torch/bin/protoc": tool}))
    assert "its binaries are PE x86_64 (torch/bin/protoc)" in refused


@pytest.mark.parametrize("fmt, arch, found, fits", [
    ("elf", "aarch64", "ELF aarch64", "it would fit libtorch-linux-aarch64-shared, which builds from source"),
    ("pe", "x86_64", "PE x86_64", "it fits libtorch-windows-x86_64-shared"),
    ("macho", "arm64", "Mach-O arm64", "it would fit libtorch-macos-arm64-shared, which builds from source"),
])
def test_binaries_of_another_os_or_architecture_are_refused(judge, wheel, fmt, arch, found, fits):
    refused = judge(CPU, wheel(fmt=fmt, arch=arch))
    assert f"its binaries are {found} (" in refused and "linux-x86_64 needs ELF x86_64" in refused
    assert fits in refused


def test_every_binary_under_the_root_is_judged_not_only_those_the_rules_name(tmp_path):
    """ONNX Runtime's Linux rules name libonnxruntime.so*, which a Windows zip lacks: its DLLs
    are named, with the leg they fit."""
    leg_id = "onnxruntime-linux-x86_64-shared"
    plan = plan_leg(MATRIX.leg(leg_id), leg_engine(MATRIX, MATRIX.leg(leg_id), None), MATRIX)
    top = "onnxruntime-win-x64-1.26.0"
    release = zip_members(tmp_path / f"{top}.zip", {
        f"{top}/lib/onnxruntime.dll": pe_dll(tmp_path / "onnxruntime.dll", ("OrtGetApiBase",)),
        f"{top}/include/onnxruntime_c_api.h": b"// api\n"})
    fits = origin.expectation(plan, plan.downloads[0], REPO / "engines")
    assert fits is not None
    refused = origin.judge_archive(fits, release, plan.downloads[0].roots, MATRIX)
    assert "its binaries are PE x86_64" in refused and "it fits onnxruntime-windows-x86_64-shared" in refused


def test_only_prebuilt_legs_judge_and_only_the_downloads_their_stage_reads():
    source_leg = plan_of("libtorch-macos-arm64-shared")
    assert all(origin.expectation(source_leg, d, REPO / "engines") is None for d in source_leg.downloads)
    prebuilt = plan_of(CPU)
    main, *texts = prebuilt.downloads
    assert origin.expectation(prebuilt, main, REPO / "engines") is not None
    assert all(origin.expectation(prebuilt, d, REPO / "engines") is None for d in texts)  # license texts: not unpacked
