"""The ExecuTorch shared legs repackaged from the published wheels (issue: ExecuTorch, item 3)."""
from pathlib import Path

import pytest

from backends.model.matrix import load_matrix
from backends.model.recipes import plan_all
from backends.util.globs import matches_any
from evidence import foreign, shown

ROOT = Path(__file__).resolve().parents[3]
MATRIX = load_matrix(ROOT)
PLANS = {p.leg.id: p for p in plan_all(MATRIX, [l for l in MATRIX.legs
                                                if l.engine == "executorch" and l.source == "prebuilt"])}


def test_the_four_wheel_legs_and_their_urls():
    assert sorted(PLANS) == ["executorch-linux-aarch64-shared", "executorch-linux-x86_64-shared",
                             "executorch-macos-arm64-gpu-shared", "executorch-macos-arm64-shared"]
    v = MATRIX.leg("executorch-linux-x86_64-shared").version  # the wheel legs' own version (variants/)
    assert PLANS["executorch-linux-x86_64-shared"].downloads[0].url == (
        "https://files.pythonhosted.org/packages/cp311/e/executorch/"
        f"executorch-{v}-cp311-cp311-manylinux_2_28_x86_64.whl")
    assert PLANS["executorch-linux-aarch64-shared"].archive == f"executorch-{v}-Linux-aarch64-shared.zip"
    assert all(p.downloads[0].roots == ("executorch",) for p in PLANS.values())


@pytest.mark.parametrize("leg_id", ["executorch-linux-x86_64-shared", "executorch-macos-arm64-shared"])
def test_cpu_legs_drop_every_delegate(leg_id):
    plan = PLANS[leg_id]
    ext = "dylib" if "macos" in leg_id else "so"
    for dropped in (f"lib/libexecutorch_backend_coreml.{ext}", f"lib/libexecutorch_backend_mlx.{ext}",
                    "lib/mlx.metallib", f"lib/libexecutorch_backend_qnn.{ext}",
                    f"lib/libexecutorch_backend_openvino.{ext}"):
        assert matches_any(dropped, plan.exclude)
    for acc in ("coreml", "mlx"):
        assert any(matches_any(f"lib/libexecutorch_backend_{acc}.{ext}", (p,)) for p in foreign(plan, acc).files)
    assert not matches_any(f"lib/libexecutorch_backend_xnnpack.{ext}", plan.exclude)


def test_gpu_leg_keeps_coreml_and_mlx():
    plan = PLANS["executorch-macos-arm64-gpu-shared"]
    for kept in ("lib/libexecutorch_backend_coreml.dylib", "lib/libexecutorch_backend_mlx.dylib", "lib/mlx.metallib"):
        assert not matches_any(kept, plan.exclude)
        assert any(matches_any(kept, shown(plan, acc).files) for acc in ("coreml", "mlx"))
    assert shown(plan, "coreml").links == ("CoreML.framework",) and shown(plan, "mlx").links == ("Metal.framework",)
    assert plan.smoke.defines["SMOKE_ACCELERATOR"] == "coreml,mlx"


def test_version_override_moves_the_wheel():
    (plan,) = plan_all(MATRIX, [MATRIX.leg("executorch-linux-x86_64-shared")], version="1.5.0")
    assert "executorch-1.5.0-cp311" in plan.downloads[0].url and plan.archive.startswith("executorch-1.5.0-")
