"""The LibTorch -cuda curation rule on a cu130-like tree, through the real recipe and graph.

The fixture zip has the layout of `libtorch-shared-with-deps-<ver>+cu130.zip` (placeholder
file contents): torch's own CUDA libraries must stay, every NVIDIA redistributable must go,
the smoke must say why it did not run, and the archive must pass its contract.
"""
from __future__ import annotations

import json
import zipfile

import pytest

from backends.model.matrix import load_matrix
from scratch import REPO, Scons, scratch_project

LEG = "libtorch-linux-x86_64-cuda-shared"
VERSION = load_matrix(REPO).engines["libtorch"].version
ARCHIVE = f"libtorch-{VERSION}-Linux-x86_64-cuda-shared.zip"
KEPT = ["lib/libtorch.so", "lib/libtorch_cpu.so", "lib/libtorch_cuda.so", "lib/libc10.so", "lib/libc10_cuda.so",
        "lib/libcaffe2_nvrtc.so", "lib/libgomp-a34b3233.so.1", "share/cmake/Torch/TorchConfig.cmake",
        "include/torch/csrc/api/include/torch/torch.h", "include/ATen/ATen.h"]
NVIDIA = ["lib/libcudnn.so.9", "lib/libcudnn_ops.so.9", "lib/libcublas.so.13", "lib/libcublasLt.so.13",
          "lib/libcudart.so.13", "lib/libnccl.so.2", "lib/libnvrtc.so.13", "lib/libnvrtc-builtins.so.13.0",
          "lib/libnvToolsExt.so.1", "lib/libcusparseLt.so.0", "lib/libcufft.so.12", "lib/libcurand.so.10",
          "lib/libcusolver.so.12", "lib/libcupti.so.13", "lib/libnvJitLink.so.13", "lib/libcufile.so.0"]


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    root = tmp_path_factory.mktemp("cu130")
    release = root / f"libtorch-shared-with-deps-{VERSION}+cu130.zip"
    with zipfile.ZipFile(release, "w") as archive:
        for name in KEPT + NVIDIA:
            archive.writestr(f"libtorch/{name}", f"placeholder for {name}\n")
    scons = Scons(scratch_project(root / "project"), root / "cache")
    return scons, scons(LEG, f"origin={release}")


def test_nvidia_redistributables_are_stripped_and_torch_cuda_kept(built):
    scons, _ = built
    with zipfile.ZipFile(scons.project / "dist" / ARCHIVE) as archive:
        names = set(archive.namelist())
    assert set(KEPT) <= names
    assert not names & set(NVIDIA)


def test_smoke_not_run_and_requirements_recorded(built):
    scons, result = built
    assert "smoke not run: the leg cannot run on any CI host (can_run=0)" in result.stdout
    manifest = json.loads((scons.project / "dist" / f"{ARCHIVE}.json").read_text())
    assert manifest["leg"]["requires"] == {"cuda": "13.x", "cudnn": "9", "driver": "r580+",
                                           "gpu": "Turing (sm_75) or newer"}
    assert manifest["sources"][0]["origin"].endswith("+cu130.zip")


def test_changing_the_strip_rule_reruns_stage_to_publish_only(tmp_path, built):
    scons, _ = built
    release = next(scons.project.parent.glob("*+cu130.zip"))
    edited = Scons(scratch_project(tmp_path / "project", copied=("engines/libtorch",)), tmp_path / "cache")
    edited(LEG, f"origin={release}")
    recipe = edited.project / "engines/libtorch/recipe.py"
    recipe.write_text(recipe.read_text().replace('"cudss")', '"cudss", "gomp-")'))
    rerun = edited(LEG, f"origin={release}")
    assert edited.steps_run(rerun) == ["stage", "archive", "verify", "smoke", "publish"]
    with zipfile.ZipFile(edited.project / "dist" / ARCHIVE) as archive:
        assert "lib/libgomp-a34b3233.so.1" not in archive.namelist()
