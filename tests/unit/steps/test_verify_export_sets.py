"""ExecuTorch's delegate targets, read from the export sets CMake generated.

ExecuTorch 1.3.1 installs its hand-written tools/cmake/executorch-config.cmake unchanged
into every package; after including ExecuTorchTargets.cmake it says, inside
`if(TARGET mlxdelegate)`, `add_library(mlx STATIC IMPORTED)`. Searching every .cmake file
for `add_library(... IMPORTED)` therefore found `mlx` in every package: the CPU legs
failed, and the arm64 -gpu leg's check could never fail. The config below keeps that
construct (the real file is upstream code and is not copied here); the export sets are
what CMake itself writes for `install(EXPORT ExecuTorchTargets)`.
"""
from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from backends.model.matrix import load_matrix
from backends.model.plan import Contract, Evidence
from backends.model.recipes import plan_leg
from backends.steps.checks.cmake import exported_targets
from backends.steps.checks.view import open_archive
from backends.steps.verify import check
from binaries import cmake_export_sets, zip_members

ROOT = Path(__file__).resolve().parents[3]
MATRIX = load_matrix(ROOT)
HAND_WRITTEN_CONFIG = b"""\
include("${CMAKE_CURRENT_LIST_DIR}/ExecuTorchTargets.cmake")
if(TARGET mlxdelegate)
  if(NOT TARGET mlx)
    find_library(_mlx_library mlx HINTS "${_root}/lib")
    if(_mlx_library)
      add_library(mlx STATIC IMPORTED)
      set_target_properties(mlx PROPERTIES IMPORTED_LOCATION "${_mlx_library}")
    endif()
  endif()
endif()
"""
CPU = ("executorch", "executorch_core", "xnnpack_backend")
SETS = {"cpu": CPU, "gpu_without_mlx": (*CPU, "coremldelegate", "mpsdelegate"),
        "gpu": (*CPU, "coremldelegate", "mpsdelegate", "mlxdelegate")}


@pytest.fixture(scope="module")
def export_sets(tmp_path_factory) -> dict[str, dict[str, bytes]]:
    return cmake_export_sets(tmp_path_factory.mktemp("cmake"), SETS)


def package(path: Path, export_set: dict[str, bytes]) -> Path:
    return zip_members(path, {"lib/cmake/ExecuTorch/executorch-config.cmake": HAND_WRITTEN_CONFIG, **export_set})


def targets_only(leg_id: str) -> Contract:
    """The leg's contract, reduced to the CMake targets of its accelerator evidence."""
    leg = MATRIX.leg(leg_id)
    contract = plan_leg(leg, MATRIX.engines[leg.engine], MATRIX).contract
    keep = lambda evidence: tuple(Evidence(e.accelerator, targets=e.targets) for e in evidence if e.targets)  # noqa: E731
    return replace(Contract(), accelerators=keep(contract.accelerators),
                   foreign_accelerators=keep(contract.foreign_accelerators))


def test_only_generated_export_sets_export_targets(tmp_path, export_sets):
    view = open_archive(package(tmp_path / "cpu.zip", export_sets["cpu"]))
    assert set(exported_targets(view)) == set(CPU)  # not mlx, whatever the config's text says
    view.close()


def test_a_cpu_package_passes_with_the_upstream_config(tmp_path, export_sets):
    archive = package(tmp_path / "cpu.zip", export_sets["cpu"])
    assert check(archive, targets_only("executorch-macos-arm64-static"), "1.3.1") == []


def test_the_gpu_package_needs_mlxdelegate_in_its_export_set(tmp_path, export_sets):
    gpu = targets_only("executorch-macos-arm64-gpu-static")
    assert check(package(tmp_path / "gpu.zip", export_sets["gpu"]), gpu, "1.3.1") == []
    assert check(package(tmp_path / "no-mlx.zip", export_sets["gpu_without_mlx"]), gpu, "1.3.1") == [
        "mlx evidence missing: no CMake export set exports the target mlxdelegate"]


def test_a_delegate_target_in_a_cpu_package_is_caught(tmp_path, export_sets):
    archive = package(tmp_path / "leak.zip", export_sets["gpu"])
    problems = check(archive, targets_only("executorch-macos-arm64-static"), "1.3.1")
    assert problems == [
        f"lib/cmake/ExecuTorch/ExecuTorchTargets.cmake exports the target {target} ({acc} evidence), "
        "which this package must not ship"
        for acc, target in (("coreml", "coremldelegate"), ("mps", "mpsdelegate"), ("mlx", "mlxdelegate"))]
