"""Origins judged against their leg on real upstream binaries (steps/checks/origin.py), in
both directions: PyPI's own torch 2.13.0 Linux wheel (a CUDA 13 build, what a plain machine's
pip gets) given to the CPU leg is refused at extract naming the -cuda leg, before anything is
staged; the CPU wheel fits the CPU leg and not the -cuda leg; ONNX Runtime's CUDA and aarch64 releases and PyTorch's
Windows wheel are told from the Linux x86_64 CPU builds. The fixtures of every case:
tests/unit/steps/test_origin_fit.py."""
from __future__ import annotations

from pathlib import Path

import pytest

import inputs
from backends.model.matrix import load_matrix
from backends.model.recipes import leg_engine, plan_leg
from backends.steps.checks import origin
from scratch import REPO, Scons, scratch_project

pytestmark = pytest.mark.e2e
MATRIX = load_matrix(REPO)
TORCH = inputs.TORCH_CPU_VERSION.split("+")[0]
CPU, CUDA = "libtorch-linux-x86_64-shared", "libtorch-linux-x86_64-cuda-shared"
ORT_CPU, ORT_CUDA, ORT_ARM = ("onnxruntime-linux-x86_64-shared", "onnxruntime-linux-x86_64-cuda-shared",
                              "onnxruntime-linux-aarch64-shared")


def judged(leg_id: str, archive: Path, version: str | None = None) -> str:
    leg = MATRIX.leg(leg_id)
    plan = plan_leg(leg, leg_engine(MATRIX, leg, version), MATRIX)
    fits = origin.expectation(plan, plan.downloads[0], REPO / "engines")
    assert fits is not None
    return origin.judge_archive(fits, archive, plan.downloads[0].roots, MATRIX)


@pytest.mark.slow
def test_pypis_cuda_wheel_given_to_the_cpu_leg_is_refused_at_extract(tmp_path, e2e_cache):
    wheel = inputs.torch_cuda_wheel(e2e_cache)
    scons = Scons(scratch_project(tmp_path / "project"), tmp_path / "cache")
    result = scons.run(CPU, f"version={TORCH}", f"origin={wheel}")
    assert result.returncode != 0
    assert (f"{CPU}: extract failed: origin {wheel.name} does not fit {CPU}: it is a cuda build "
            "(torch/lib/libc10_cuda.so is libc10_cuda.so, torch/lib/libtorch_cuda.so is libtorch_cuda.so") \
        in result.stderr, result.stderr
    assert f"it fits {CUDA}" in result.stderr
    assert "stage" not in scons.steps_run(result)
    assert not (scons.project / "build/legs" / CPU / "stage").exists()
    assert not list((scons.project / "build/extract").glob("*/tree"))  # the refused tree is gone


@pytest.mark.slow
def test_the_cpu_wheel_fits_the_cpu_leg_and_not_the_cuda_leg(e2e_cache):
    wheel = inputs.torch_cpu_wheel(e2e_cache)
    assert judged(CPU, wheel, TORCH) == ""
    refused = judged(CUDA, wheel, TORCH)
    assert "it is no cuda build: " in refused and f"it fits {CPU}" in refused


@pytest.mark.slow
def test_pytorchs_windows_wheel_is_refused_by_the_linux_leg(e2e_cache):
    wheel = inputs.platform_wheel(f"torch=={TORCH}", "win_amd64", f"torch-{TORCH}-*win_amd64.whl", e2e_cache)
    refused = judged(CPU, wheel, TORCH)
    assert "its binaries are PE x86_64" in refused and "linux-x86_64 needs ELF x86_64" in refused
    assert "it fits libtorch-windows-x86_64-shared" in refused


@pytest.mark.slow
def test_onnxruntimes_cuda_release_is_told_from_its_cpu_release(e2e_cache):
    cuda, cpu = inputs.ort_linux_x64_cuda_release(e2e_cache), inputs.ort_linux_x64_release(e2e_cache)
    assert judged(ORT_CUDA, cuda) == "" and judged(ORT_CPU, cpu) == ""
    refused = judged(ORT_CPU, cuda)
    assert "it is a cuda build (" in refused and "libonnxruntime_providers_cuda.so links libcudart" in refused
    assert f"it fits {ORT_CUDA}" in refused
    assert f"it fits {ORT_CPU}" in judged(ORT_CUDA, cpu)


def test_onnxruntimes_aarch64_release_is_refused_by_the_x86_64_leg(e2e_cache):
    release = inputs.ort_linux_aarch64_release(e2e_cache)
    assert judged(ORT_ARM, release) == ""
    refused = judged(ORT_CPU, release)
    assert "its binaries are ELF aarch64" in refused and f"it fits {ORT_ARM}" in refused
