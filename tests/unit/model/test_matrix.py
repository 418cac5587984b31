"""The leg matrix against upstream's preset tables and GPU variants (docs/upstream.md), asserted
per named leg and with versions read from engine.toml: a new row or a version bump breaks nothing."""
from pathlib import Path

import pytest

from backends.model.engine import version_key
from backends.model.matrix import AGGREGATE_SLICES, load_matrix
from backends.model.recipes import archive_name, leg_engine

ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture(scope="module")
def matrix():
    return load_matrix(ROOT)


def _build_legs(matrix):
    return [l for l in matrix.legs if not l.aggregate]


def _ids(matrix):
    return {l.id for l in matrix.legs}


def _missing(expected, matrix):
    return sorted(set(expected) - _ids(matrix))


# Upstream's presets, per engine (its preset tables): each must stay a leg here. Asserted per
# named leg, so a new row breaks nothing and a lost one is named.
DESKTOP = ("macos-x86_64", "macos-arm64", "linux-x86_64", "linux-aarch64", "windows-x86_64", "windows-arm64")
ANDROID_ABIS = ("android-arm64-v8a", "android-x86_64")
UPSTREAM_PRESETS = {
    "tflite": [f"tflite-{p}-{k}" for p in DESKTOP + ANDROID_ABIS for k in ("shared", "static")]
    + ["tflite-windows-x86_64-static-debug", "tflite-windows-arm64-static-debug"],
    "onnxruntime": [f"onnxruntime-{p}-static" for p in DESKTOP + ANDROID_ABIS + ("wasm",)]
    + ["onnxruntime-windows-x86_64-static-debug", "onnxruntime-windows-arm64-static-debug"]
    + [f"onnxruntime-{p}-shared" for p in DESKTOP + ("android",)],
    "libtorch": [f"libtorch-{p}-shared" for p in DESKTOP],
    "executorch": [f"executorch-{p}-static" for p in DESKTOP + ANDROID_ABIS],
    "litert": [f"litert-{p}-{k}" for p in DESKTOP for k in ("shared", "static")]
    + [f"litert-{p}-{k}" for p in ANDROID_ABIS for k in ("shared", "static")]
    + ["litert-windows-x86_64-static-debug", "litert-windows-arm64-static-debug"],
}
# The GPU-variant legs upstream's GPU change added (its rows 1-18), iOS variants apart.
UPSTREAM_VARIANTS = [
    "onnxruntime-macos-x86_64-gpu-static", "onnxruntime-macos-x86_64-gpu-shared",
    "onnxruntime-macos-arm64-gpu-static", "onnxruntime-macos-arm64-gpu-shared",
    "onnxruntime-windows-x86_64-gpu-shared", "onnxruntime-windows-arm64-gpu-shared",
    "onnxruntime-linux-x86_64-cuda-shared", "onnxruntime-windows-x86_64-cuda-shared",
    "libtorch-macos-arm64-gpu-shared", "libtorch-linux-x86_64-cuda-shared", "libtorch-windows-x86_64-cuda-shared",
    "executorch-macos-x86_64-gpu-static", "executorch-macos-arm64-gpu-static", "executorch-linux-x86_64-gpu-static",
    "tflite-macos-x86_64-gpu-shared", "tflite-macos-x86_64-gpu-static",
    "tflite-macos-arm64-gpu-shared", "tflite-macos-arm64-gpu-static",
]
UPSTREAM_AGGREGATES = [
    "tflite-macos-universal-static", "tflite-macos-universal-shared", "tflite-android-static",
    "tflite-android-shared", "tflite-ios-xcframework", "tflite-ios-gpu-xcframework",
    "onnxruntime-macos-universal-static", "onnxruntime-macos-universal-shared", "onnxruntime-android-static",
    "onnxruntime-ios-xcframework", "onnxruntime-ios-gpu-xcframework",
    "libtorch-macos-universal-shared",
    "executorch-macos-universal-static", "executorch-android-static", "executorch-ios-xcframework",
    "executorch-ios-gpu-xcframework",
    "litert-macos-universal-shared", "litert-macos-universal-static", "litert-android-shared",
    "litert-android-static", "litert-ios-xcframework",
]
# The shared ExecuTorch legs from the published wheels, new here (docs/executorch-wheel-legs.md).
WHEEL_LEGS = ["executorch-linux-x86_64-shared", "executorch-linux-aarch64-shared", "executorch-macos-arm64-shared",
              "executorch-macos-arm64-gpu-shared"]


@pytest.mark.parametrize("engine", sorted(UPSTREAM_PRESETS))
def test_upstream_presets_are_all_present(matrix, engine):
    presets = UPSTREAM_PRESETS[engine]
    assert not _missing(presets, matrix)
    assert all(matrix.leg(i).flavor == "cpu" and not matrix.leg(i).aggregate for i in presets)


def test_gpu_variant_legs(matrix):
    assert not _missing(UPSTREAM_VARIANTS, matrix)
    assert {matrix.leg(i).flavor for i in UPSTREAM_VARIANTS} == {"gpu", "cuda"}


def test_aggregates(matrix):
    assert not _missing(UPSTREAM_AGGREGATES, matrix)
    for leg in matrix.legs:
        if leg.aggregate:
            slices = [matrix.leg(i) for i in leg.inputs]
            assert [s.platform for s in slices] == list(AGGREGATE_SLICES[leg.aggregate]), leg.id
            assert {(s.engine, s.flavor, s.kind, s.config) for s in slices} == {
                (leg.engine, leg.flavor, leg.kind, leg.config)}, leg.id
    assert matrix.leg("libtorch-macos-universal-shared").inputs == (
        "libtorch-macos-x86_64-shared", "libtorch-macos-arm64-shared")
    assert matrix.leg("onnxruntime-android-static").inputs == (
        "onnxruntime-android-arm64-v8a-static", "onnxruntime-android-x86_64-static")
    assert matrix.leg("onnxruntime-macos-universal-gpu-shared").inputs == (
        "onnxruntime-macos-x86_64-gpu-shared", "onnxruntime-macos-arm64-gpu-shared")


def test_per_abi_android_legs_feed_the_bundle_only(matrix):
    """Upstream published per-ABI Android archives only by accident (LiteRT's static legs); here
    every per-ABI leg feeds the Android bundle and every other leg is published."""
    for leg in matrix.legs:
        per_abi = leg.os == "android" and leg.platform != "android"
        assert leg.publish == (not per_abi), leg.id


def test_executorch_wheel_legs(matrix):
    """The new shared legs repackage the published wheels, which carry a C++ runtime since 1.5."""
    assert not _missing(WHEEL_LEGS, matrix)
    legs = [matrix.leg(i) for i in WHEEL_LEGS]
    assert all(l.source == "prebuilt" and l.kind == "shared" and version_key(l.version) >= (1, 5) for l in legs)
    assert matrix.leg("executorch-macos-arm64-gpu-shared").accelerator == ("coreml", "mlx")
    leg = matrix.leg("executorch-linux-x86_64-shared")
    engine = leg_engine(matrix, leg)
    assert archive_name(leg, engine) == f"executorch-{leg.version}-Linux-x86_64-shared.zip"


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


# Upstream's archive names, with the engine's version from its engine.toml.
@pytest.mark.parametrize("leg_id, archive", [
    ("onnxruntime-macos-arm64-gpu-static", "onnxruntime-{version}-macOS-arm64-gpu-static.zip"),
    ("libtorch-linux-x86_64-cuda-shared", "libtorch-{version}-Linux-x86_64-cuda-shared.zip"),
    ("tflite-windows-arm64-static-debug", "tensorflowlite_c-{version}-Windows-arm64-static-debug.zip"),
    ("onnxruntime-android-shared", "onnxruntime-{version}-Android-shared.zip"),
    ("litert-macos-universal-static", "LiteRt-{version}-macOS-universal-static.zip"),
    ("onnxruntime-ios-gpu-xcframework", "onnxruntime-{version}-iOS-gpu-xcframework.zip"),
    ("onnxruntime-ios-xcframework", "onnxruntime-{version}-iOS-xcframework.zip"),
    ("onnxruntime-wasm-static", "onnxruntime-{version}-WASM-static.zip"),
    ("executorch-android-static", "executorch-{version}-Android-static.zip"),
    ("tflite-android-arm64-v8a-shared", "tensorflowlite_c-{version}-Android-arm64-v8a-shared.zip"),
    ("libtorch-macos-universal-shared", "libtorch-{version}-macOS-universal-shared.zip"),
    ("tflite-linux-aarch64-static", "tensorflowlite_c-{version}-Linux-aarch64-static.zip"),
])
def test_archive_names_match_upstream(matrix, leg_id, archive):
    leg = matrix.leg(leg_id)
    engine = matrix.engines[leg.engine]
    assert archive_name(leg, engine) == archive.format(version=engine.version)


def test_every_leg_id_and_archive_is_unique(matrix):
    ids = [l.id for l in matrix.legs]
    archives = [archive_name(l, leg_engine(matrix, l)) for l in matrix.legs]
    assert ids and len(ids) == len(set(ids)) and len(archives) == len(set(archives))
