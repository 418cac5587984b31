"""The leg matrix against the spec's tables (upstream-spec §1.2-1.7, §6.2)."""
from collections import Counter
from pathlib import Path

import pytest

from backends.model.matrix import load_matrix
from backends.model.recipes import archive_name

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def matrix():
    return load_matrix(ROOT)


def _build_legs(matrix):
    return [l for l in matrix.legs if not l.aggregate]


NEW_WHEEL_LEGS = {"executorch-linux-x86_64-shared", "executorch-linux-aarch64-shared", "executorch-macos-arm64-shared",
                  "executorch-macos-arm64-gpu-shared"}


def test_upstream_presets_are_all_present(matrix):
    cpu = [l for l in _build_legs(matrix) if l.flavor == "cpu" and l.platform != "ios" and l.id not in NEW_WHEEL_LEGS]
    assert Counter(l.engine for l in cpu) == {"tflite": 18, "onnxruntime": 18, "libtorch": 6, "executorch": 8,
                                               "litert": 18}
    assert len(cpu) == 68


def test_gpu_variant_legs(matrix):
    variants = [l for l in _build_legs(matrix) if l.flavor != "cpu" and l.platform != "ios"
                and l.id not in NEW_WHEEL_LEGS]
    assert sorted(l.id for l in variants) == sorted([
        "onnxruntime-macos-x86_64-gpu-static", "onnxruntime-macos-x86_64-gpu-shared",
        "onnxruntime-macos-arm64-gpu-static", "onnxruntime-macos-arm64-gpu-shared",
        "onnxruntime-windows-x86_64-gpu-shared", "onnxruntime-windows-arm64-gpu-shared",
        "onnxruntime-linux-x86_64-cuda-shared", "onnxruntime-windows-x86_64-cuda-shared",
        "libtorch-macos-arm64-gpu-shared", "libtorch-linux-x86_64-cuda-shared", "libtorch-windows-x86_64-cuda-shared",
        "executorch-macos-x86_64-gpu-static", "executorch-macos-arm64-gpu-static",
        "executorch-linux-x86_64-gpu-static",
        "tflite-macos-x86_64-gpu-shared", "tflite-macos-x86_64-gpu-static",
        "tflite-macos-arm64-gpu-shared", "tflite-macos-arm64-gpu-static",
    ])


def test_aggregates(matrix):
    aggregates = {l.id: l for l in matrix.legs if l.aggregate or l.platform == "ios"}
    assert sorted(aggregates) == sorted([
        "tflite-macos-universal-static", "tflite-macos-universal-shared", "tflite-android-static",
        "tflite-android-shared", "tflite-ios-xcframework", "tflite-ios-gpu-xcframework",
        "onnxruntime-macos-universal-static", "onnxruntime-macos-universal-shared", "onnxruntime-android-static",
        "onnxruntime-macos-universal-gpu-static", "onnxruntime-macos-universal-gpu-shared",
        "onnxruntime-ios-xcframework", "onnxruntime-ios-gpu-xcframework",
        "libtorch-macos-universal-shared",
        "executorch-macos-universal-static", "executorch-android-static", "executorch-ios-xcframework",
        "executorch-ios-gpu-xcframework",
        "litert-macos-universal-shared", "litert-macos-universal-static", "litert-android-shared",
        "litert-android-static", "litert-ios-xcframework",
    ])
    assert aggregates["libtorch-macos-universal-shared"].inputs == (
        "libtorch-macos-x86_64-shared", "libtorch-macos-arm64-shared")
    assert aggregates["onnxruntime-android-static"].inputs == (
        "onnxruntime-android-arm64-v8a-static", "onnxruntime-android-x86_64-static")
    assert aggregates["onnxruntime-macos-universal-gpu-shared"].inputs == (
        "onnxruntime-macos-x86_64-gpu-shared", "onnxruntime-macos-arm64-gpu-shared")


def test_published_archive_counts_match_upstream(matrix):
    """spec §1.7, except LiteRT's per-ABI Android static archives, which no longer leak (§8.4)."""
    published = Counter(l.engine for l in matrix.legs if l.publish and l.flavor == "cpu" and l.id not in NEW_WHEEL_LEGS)
    assert published == {"tflite": 19, "onnxruntime": 20, "libtorch": 7, "executorch": 9, "litert": 19}


def test_executorch_wheel_legs(matrix):
    """The new shared legs repackage the published wheels, which carry a C++ runtime since 1.5."""
    legs = {l.id: l for l in matrix.legs if l.id in NEW_WHEEL_LEGS}
    assert len(legs) == 4
    assert all(l.source == "prebuilt" and l.kind == "shared" and l.version == "1.5.1" for l in legs.values())
    assert legs["executorch-macos-arm64-gpu-shared"].accelerator == ("coreml", "mlx")
    assert archive_name(legs["executorch-linux-x86_64-shared"], matrix.engines["executorch"].with_version("1.5.1")) \
        == "executorch-1.5.1-Linux-x86_64-shared.zip"


@pytest.mark.parametrize("leg_id, runner, can_run, toolchain, source", [
    ("libtorch-macos-x86_64-shared", "macos-15-intel", True, "none", "build"),
    ("executorch-macos-x86_64-static", "macos-15-intel", True, "none", "build"),
    ("tflite-macos-x86_64-static", "macos-15", True, "none", "build"),
    ("onnxruntime-android-shared", "ubuntu-24.04", False, "none", "prebuilt"),
    ("onnxruntime-wasm-static", "ubuntu-24.04", True, "emscripten", "build"),
    ("litert-android-arm64-v8a-static", "ubuntu-24.04", False, "none", "build"),
    ("litert-android-x86_64-shared", "ubuntu-24.04", False, "android", "prebuilt"),
    ("litert-macos-x86_64-shared", "macos-15", True, "none", "build"),
    ("litert-windows-arm64-shared", "windows-11-arm", True, "none", "build"),
    ("libtorch-linux-x86_64-cuda-shared", "ubuntu-24.04", False, "none", "prebuilt"),
    ("onnxruntime-windows-arm64-static-debug", "windows-11-arm", True, "none", "build"),
])
def test_leg_facts(matrix, leg_id, runner, can_run, toolchain, source):
    leg = matrix.leg(leg_id)
    assert (leg.runner, leg.can_run, leg.toolchain, leg.source) == (runner, can_run, toolchain, source)


def test_accelerators_and_requirements(matrix):
    assert matrix.leg("executorch-macos-arm64-gpu-static").accelerator == ("coreml", "mps", "mlx")
    assert matrix.leg("executorch-macos-x86_64-gpu-static").accelerator == ("coreml", "mps")
    assert matrix.leg("executorch-linux-x86_64-gpu-static").experimental
    for leg in matrix.legs:
        if leg.flavor == "cuda":
            assert leg.requires["cuda"] == "13.x" and leg.requires["cudnn"] == "9"
            assert leg.requires["driver"] == "r580+"
        assert bool(leg.accelerator) == (leg.flavor != "cpu")
    assert matrix.leg("executorch-macos-arm64-static").requires["min_os"] == "macOS 12.0"
    assert "14.0" in matrix.leg("executorch-macos-arm64-gpu-static").requires["min_os"]


def test_msvc_arch_is_derived(matrix):
    assert matrix.leg("tflite-windows-arm64-static").msvc_arch == "arm64"
    assert matrix.leg("tflite-windows-x86_64-static").msvc_arch == "x64"
    assert matrix.leg("tflite-linux-x86_64-static").msvc_arch == ""


@pytest.mark.parametrize("leg_id, archive", [
    ("onnxruntime-macos-arm64-gpu-static", "onnxruntime-1.26.0-macOS-arm64-gpu-static.zip"),
    ("libtorch-linux-x86_64-cuda-shared", "libtorch-2.12.0-Linux-x86_64-cuda-shared.zip"),
    ("tflite-windows-arm64-static-debug", "tensorflowlite_c-2.17.0-Windows-arm64-static-debug.zip"),
    ("onnxruntime-android-shared", "onnxruntime-1.26.0-Android-shared.zip"),
    ("litert-macos-universal-static", "LiteRt-2.1.5-macOS-universal-static.zip"),
    ("onnxruntime-ios-gpu-xcframework", "onnxruntime-1.26.0-iOS-gpu-xcframework.zip"),
    ("onnxruntime-ios-xcframework", "onnxruntime-1.26.0-iOS-xcframework.zip"),
    ("onnxruntime-wasm-static", "onnxruntime-1.26.0-WASM-static.zip"),
    ("executorch-android-static", "executorch-1.3.1-Android-static.zip"),
    ("tflite-android-arm64-v8a-shared", "tensorflowlite_c-2.17.0-Android-arm64-v8a-shared.zip"),
    ("libtorch-macos-universal-shared", "libtorch-2.12.0-macOS-universal-shared.zip"),
    ("tflite-linux-aarch64-static", "tensorflowlite_c-2.17.0-Linux-aarch64-static.zip"),
])
def test_archive_names_match_upstream(matrix, leg_id, archive):
    leg = matrix.leg(leg_id)
    assert archive_name(leg, matrix.engines[leg.engine]) == archive


def test_every_leg_id_round_trips(matrix):
    ids = [l.id for l in matrix.legs]
    assert len(ids) == len(set(ids))
