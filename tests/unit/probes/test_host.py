"""Which legs this host builds, and how it runs their smoke (native, qemu, wine, ...)."""
from __future__ import annotations

from pathlib import Path

import pytest

from backends.model.matrix import load_matrix
from backends.model.recipes import plan_leg
from backends.probes import host as host_module
from backends.probes.host import Host

ROOT = Path(__file__).resolve().parents[3]
MATRIX = load_matrix(ROOT)
LINUX = Host("linux", "x86_64")
MACOS = Host("macos", "arm64")
CROSS_TOOLS = ("x86_64-w64-mingw32-g++", "wine", "qemu-aarch64", "aarch64-linux-gnu-g++")


def plan(leg_id: str):
    leg = MATRIX.leg(leg_id)
    return plan_leg(leg, MATRIX.engines[leg.engine], MATRIX)


def run_mode(host: Host, leg_id: str) -> str:
    built = plan(leg_id)
    return host.run_mode(built.leg, built.smoke)


@pytest.fixture
def tools(monkeypatch):
    """The cross tools this host has: all of them unless a test removes some."""
    installed = set(CROSS_TOOLS)
    monkeypatch.setattr(host_module.shutil, "which", lambda name: f"/usr/bin/{name}" if name in installed else None)
    return installed


def test_windows_c_api_cpu_shared_runs_under_wine(tools):
    assert run_mode(LINUX, "onnxruntime-windows-x86_64-shared") == "wine"


@pytest.mark.parametrize("leg_id, why", [
    ("libtorch-windows-x86_64-shared", "C++ API: MinGW cannot consume an MSVC C++ ABI"),
    ("onnxruntime-windows-x86_64-static", "MSVC static libraries do not link with MinGW"),
    ("onnxruntime-windows-x86_64-gpu-shared", "DirectML needs a GPU stack wine does not have"),
    ("onnxruntime-windows-arm64-shared", "wine here runs x86_64 only"),
])
def test_what_wine_does_not_run(tools, leg_id, why):
    assert run_mode(LINUX, leg_id) == "", why


@pytest.mark.parametrize("missing", ["x86_64-w64-mingw32-g++", "wine"])
def test_wine_needs_mingw_and_wine(tools, missing):
    tools.discard(missing)
    leg = MATRIX.leg("onnxruntime-windows-x86_64-shared")
    assert run_mode(LINUX, leg.id) == ""
    assert "mingw-w64 and wine" in LINUX.why_not_run(leg)


def test_wine_is_for_linux_x86_64_hosts(tools):
    assert run_mode(MACOS, "onnxruntime-windows-x86_64-shared") == ""


def test_aarch64_runs_under_qemu(tools):
    assert run_mode(LINUX, "onnxruntime-linux-aarch64-shared") == "qemu"


def test_universal_smoke_needs_macos(tools):
    leg = MATRIX.leg("onnxruntime-macos-universal-gpu-shared")
    assert run_mode(LINUX, leg.id) == ""
    assert "macos-15" in LINUX.why_not_run(leg)
    assert run_mode(MACOS, leg.id) == "native"


@pytest.mark.parametrize("leg_id", ["onnxruntime-windows-x86_64-shared", "executorch-macos-arm64-shared",
                                    "onnxruntime-macos-universal-gpu-shared", "onnxruntime-android-static"])
def test_repackaging_and_aggregate_legs_build_anywhere(leg_id):
    assert LINUX.can_build(MATRIX.leg(leg_id)) and MACOS.can_build(MATRIX.leg(leg_id))


@pytest.mark.parametrize("leg_id, linux, macos", [
    ("onnxruntime-macos-arm64-gpu-shared", False, True),
    ("onnxruntime-windows-x86_64-static", False, False),
    ("onnxruntime-linux-x86_64-static", True, False),
])
def test_source_legs_build_on_their_runner_os(leg_id, linux, macos):
    leg = MATRIX.leg(leg_id)
    assert (LINUX.can_build(leg), MACOS.can_build(leg)) == (linux, macos)
