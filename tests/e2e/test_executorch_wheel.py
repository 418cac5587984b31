"""The ExecuTorch shared legs end to end from the published wheels (issue: ExecuTorch, item 5).

The wheel is fetched through the normal path from a mirror, verified against a test pin,
repackaged into include/ lib/ share/, verified, and smoke-tested with the project's add.pte
(x86_64 natively; aarch64 cross-built and run under qemu-user when that is installed).
"""
from __future__ import annotations

import json
import shutil
import zipfile

import pytest

import inputs
from backends.pins.engine_toml import record_pin
from backends.util.files import sha256_file
from scratch import Scons, scratch_project

pytestmark = [pytest.mark.e2e]


def _build(tmp_path_factory, wheel, leg):
    project = scratch_project(tmp_path_factory.mktemp("et"), copied=("engines/executorch",))
    record_pin(project / "engines/executorch/engine.toml", wheel.name, sha256_file(wheel))
    mirror = tmp_path_factory.mktemp("mirror")
    (mirror / wheel.name).symlink_to(wheel)
    scons = Scons(project, tmp_path_factory.mktemp("cache"))
    return scons, scons(leg, f"mirror={mirror}", "offline=1")


def _smoke(project, leg):
    return json.loads((project / "build/legs" / leg / "steps/smoke.json").read_text())


def test_linux_x86_64_wheel_leg(tmp_path_factory, e2e_cache):
    leg = "executorch-linux-x86_64-shared"
    scons, result = _build(tmp_path_factory, inputs.executorch_wheel(e2e_cache), leg)
    archive = scons.project / "dist" / f"executorch-{inputs.EXECUTORCH_WHEEL_VERSION}-Linux-x86_64-shared.zip"
    with zipfile.ZipFile(archive) as handle:
        names = set(handle.namelist())
    assert {"lib/libexecutorch.so", "lib/libexecutorch_backend_xnnpack.so",
            "share/cmake/executorch-config.cmake", "include/executorch/runtime/executor/program.h"} <= names
    assert not [n for n in names if "qnn" in n or "openvino" in n]
    smoke = _smoke(scons.project, leg)
    assert smoke["status"] == "passed" and any("PASS" in line for line in smoke["output"])
    assert f"[verify] {leg} done" in result.stdout


@pytest.mark.skipif(not (shutil.which("qemu-aarch64") and shutil.which("aarch64-linux-gnu-g++")),
                    reason="needs qemu-user and g++-aarch64-linux-gnu (tools/setup.sh installs them)")
def test_linux_aarch64_wheel_leg_under_qemu(tmp_path_factory, e2e_cache):
    leg = "executorch-linux-aarch64-shared"
    scons, _ = _build(tmp_path_factory, inputs.executorch_wheel_aarch64(e2e_cache), leg)
    smoke = _smoke(scons.project, leg)
    assert smoke["status"] == "passed" and smoke["mode"] == "qemu", smoke
    assert any("PASS" in line for line in smoke["output"])
