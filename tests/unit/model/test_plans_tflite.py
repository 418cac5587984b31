"""Golden assertions over every TFLite leg's plan (docs/upstream.md#tflite, #leg-names,
#variant-legs) and the wrapper project's key facts."""
from __future__ import annotations

from pathlib import Path

import pytest

from backends.model.matrix import load_matrix
from backends.model.plan import Plan
from backends.model.recipes import plan_all
from evidence import foreign, shown

ROOT = Path(__file__).resolve().parents[3]
ENGINE = "tflite"
WRAPPER = ROOT / "engines" / "tflite" / "cmake" / "CMakeLists.txt"
METAL_LEGS = {f"tflite-macos-{arch}-gpu-{kind}" for arch in ("x86_64", "arm64") for kind in ("shared", "static")}
ACCELERATOR_FLAGS = ("TFLITE_BUILD_METAL_DELEGATE", "TFLITE_ENABLE_GPU", "TFLITE_ENABLE_METAL")
HEAD = ("cmake", "-S", "engines/tflite/cmake", "-B", "{build}", "-G", "Ninja", "-DTFLITE_SOURCE_DIR={src}")


@pytest.fixture(scope="module")
def plans() -> dict[str, Plan]:
    matrix = load_matrix(ROOT)
    legs = [leg for leg in matrix.legs if leg.engine == ENGINE]
    return {plan.leg.id: plan for plan in plan_all(matrix, legs)}


def source_legs(plans: dict[str, Plan]) -> list[Plan]:
    return [p for p in plans.values() if not p.leg.aggregate and p.leg.platform != "ios"]


def argv(plan: Plan, label: str) -> tuple[str, ...]:
    matches = [c.argv for c in plan.build if c.label == label]
    assert len(matches) == 1, f"{plan.leg.id}: {len(matches)} commands labelled {label!r}"
    return matches[0]


def all_args(plan: Plan) -> list[str]:
    return [a for c in (*plan.build, *plan.fixups) for a in c.argv] + [f"{k}={v}" for k, v in plan.env.items()]


def test_every_leg_is_planned(plans: dict[str, Plan]) -> None:
    engine = load_matrix(ROOT).engines[ENGINE]
    assert {"tflite-linux-x86_64-static", "tflite-macos-arm64-gpu-shared", "tflite-ios-xcframework"} <= set(plans)
    assert all(p.archive.startswith(f"tensorflowlite_c-{engine.version}-") for p in plans.values())


def test_metal_options_only_on_macos_gpu_legs(plans: dict[str, Plan]) -> None:
    with_metal = {i for i, p in plans.items() if "-DTFLITE_BUILD_METAL_DELEGATE=ON" in all_args(p)}
    assert with_metal == METAL_LEGS


def test_no_cpu_leg_carries_an_accelerator_flag(plans: dict[str, Plan]) -> None:
    for plan in plans.values():
        if plan.leg.flavor == "cpu":
            assert not [a for a in all_args(plan) if any(flag in a for flag in ACCELERATOR_FLAGS)], plan.leg.id
            assert not [a for a in all_args(plan) if "Metal" in a or "CoreML" in a], plan.leg.id


def test_exact_argv_macos(plans: dict[str, Plan]) -> None:
    plan = plans["tflite-macos-x86_64-shared"]
    assert argv(plan, "configure") == (*HEAD, "-DCMAKE_BUILD_TYPE=Release", "-DTFLITE_BUILD_STATIC=OFF",
                                       "-DCMAKE_OSX_ARCHITECTURES=x86_64", "-DCMAKE_OSX_DEPLOYMENT_TARGET=11.0")
    gpu = plans["tflite-macos-arm64-gpu-static"]
    assert argv(gpu, "configure") == (*HEAD, "-DCMAKE_BUILD_TYPE=Release", "-DTFLITE_BUILD_STATIC=ON",
                                      "-DCMAKE_OSX_ARCHITECTURES=arm64", "-DCMAKE_OSX_DEPLOYMENT_TARGET=11.0",
                                      "-DTFLITE_BUILD_METAL_DELEGATE=ON")


def test_exact_argv_linux_aarch64_is_a_native_build(plans: dict[str, Plan]) -> None:
    plan = plans["tflite-linux-aarch64-static"]
    assert argv(plan, "configure") == (*HEAD, "-DCMAKE_BUILD_TYPE=Release", "-DTFLITE_BUILD_STATIC=ON")
    for plan in source_legs(plans):
        assert not [a for a in argv(plan, "configure") if a.startswith(("-DCMAKE_SYSTEM_NAME", "-DCMAKE_SYSTEM_PROCESSOR"))]


def test_exact_argv_windows_debug(plans: dict[str, Plan]) -> None:
    plan = plans["tflite-windows-arm64-static-debug"]
    assert argv(plan, "configure") == (*HEAD, "-DCMAKE_BUILD_TYPE=Debug", "-DTFLITE_BUILD_STATIC=ON")
    assert argv(plan, "build") == ("cmake", "--build", "{build}", "--config", "Debug", "-j", "{jobs}")
    assert argv(plan, "install") == ("cmake", "--install", "{build}", "--config", "Debug", "--prefix", "{install}")
    assert plan.bundle is not None and plan.bundle.output == "lib/tensorflowlite_c.lib"


def test_exact_argv_android(plans: dict[str, Plan]) -> None:
    plan = plans["tflite-android-arm64-v8a-shared"]
    assert argv(plan, "configure") == (
        *HEAD, "-DCMAKE_BUILD_TYPE=Release", "-DTFLITE_BUILD_STATIC=OFF",
        "-DCMAKE_TOOLCHAIN_FILE={env:ANDROID_NDK_HOME}/build/cmake/android.toolchain.cmake",
        "-DANDROID_ABI=arm64-v8a", "-DANDROID_PLATFORM=android-24")
    assert "lib/libtensorflowlite_c.so" in plan.contract.required


def test_configure_runs_in_the_repository_root_keyed_on_the_wrapper(plans: dict[str, Plan]) -> None:
    import hashlib

    digest = hashlib.sha256(WRAPPER.read_bytes()).hexdigest()
    version = load_matrix(ROOT).engines[ENGINE].version
    for plan in source_legs(plans):
        configure = next(c for c in plan.build if c.label == "configure")
        assert configure.cwd == "." and configure.env["TFLITE_WRAPPER_SHA256"] == digest
        assert plan.downloads[0].url == "https://github.com/tensorflow/tensorflow"
        assert plan.downloads[0].ref == f"v{version}"


def test_static_legs_bundle_the_build_tree_shared_legs_install(plans: dict[str, Plan]) -> None:
    for plan in source_legs(plans):
        static = plan.leg.kind == "static"
        assert f"-DTFLITE_BUILD_STATIC={'ON' if static else 'OFF'}" in argv(plan, "configure")
        lib_rules = [r for r in plan.collect if r.dest == "lib"]
        if static:
            # Metal static packages also ship the delegate archive beside the bundle (upstream's layout).
            shipped = ["{install}/lib/libmetal_delegate.a"] if plan.leg.id in METAL_LEGS else []
            assert plan.bundle is not None and [r.pattern for r in lib_rules] == shipped
            assert plan.bundle.libraries_from == "{build}"
            assert plan.bundle.exclude == "(/testdata/|-src/)"
            assert plan.bundle.output in ("lib/libtensorflowlite_c.a", "lib/tensorflowlite_c.lib")
        else:
            assert plan.bundle is None and [r.pattern for r in lib_rules] == ["{install}/lib/**"]


def test_contracts(plans: dict[str, Plan]) -> None:
    win = plans["tflite-windows-x86_64-shared"].contract
    assert {"lib/tensorflowlite_c.dll", "lib/tensorflowlite_c.lib", "include/tensorflow/lite/c_api.h"} <= set(win.required)
    assert ("lib/tensorflowlite_c.dll", "TfLiteInterpreterCreate") in win.symbols
    for plan in source_legs(plans):
        contract = plan.contract
        symbols = {s for _, s in contract.symbols}
        assert {"TfLiteInterpreterCreate", "TfLiteModelCreate"} <= symbols
        metal = shown(plan, "metal") if plan.leg.id in METAL_LEGS else foreign(plan, "metal")
        assert "TFLGpuDelegateCreate" in metal.symbols
        assert plan.smoke is None or (plan.smoke.project, plan.smoke.model) == ("smoke/tflite", "add.tflite")
        if plan.leg.os == "macos":
            assert "**/metal_delegate.h" in metal.files
    # Shared: the delegate is inside the dylib, its entry points exported (a separate .a cannot
    # link against a dylib that exports only _TfLite*); static: merged into the bundle and beside it.
    assert "lib/libmetal_delegate.a" in plans["tflite-macos-arm64-gpu-shared"].contract.forbidden
    assert "lib/libmetal_delegate.a" not in shown(plans["tflite-macos-arm64-gpu-shared"], "metal").files
    assert "lib/libmetal_delegate.a" in shown(plans["tflite-macos-arm64-gpu-static"], "metal").files


def test_ios_repackages_the_podspec_frameworks(plans: dict[str, Plan]) -> None:
    cpu, gpu = plans["tflite-ios-xcframework"], plans["tflite-ios-gpu-xcframework"]
    version = load_matrix(ROOT).engines[ENGINE].version
    for plan in (cpu, gpu):
        download, license_text = plan.downloads
        assert download.name == "podspec" and not download.unpack
        assert license_text.name == "license" and license_text.filename == f"tflite-{version}-LICENSE"
        assert download.url.endswith(f"/TensorFlowLiteC/{version}/TensorFlowLiteC.podspec.json")
        assert "TensorFlowLiteC.xcframework/ios-arm64/TensorFlowLiteC.framework/TensorFlowLiteC" in plan.contract.required
        assert any("*simulator*" in r for r in plan.contract.required)
    assert argv(gpu, "podspec") == (
        "{python}", "-m", "backends.steps.podspec", "{download:podspec}", "--field", "source.http",
        "--pins", "engines/tflite/engine.toml",
        "--xcframeworks", "TensorFlowLiteC", "TensorFlowLiteCMetal", "TensorFlowLiteCCoreML",
        "--out", "{build}/xcframeworks")
    assert argv(cpu, "podspec")[-4:] == ("--xcframeworks", "TensorFlowLiteC", "--out", "{build}/xcframeworks")
    assert {r.dest for r in gpu.collect} == {"TensorFlowLiteC.xcframework", "TensorFlowLiteCMetal.xcframework",
                                             "TensorFlowLiteCCoreML.xcframework", "share/licenses/tflite"}
    assert "TensorFlowLiteCMetal.xcframework/**" in foreign(cpu, "metal").files
    assert shown(gpu, "coreml").symbols == ("TfLiteCoreMlDelegateCreate",)
    assert "TensorFlowLiteCCoreML.xcframework/**" in shown(gpu, "coreml").files
    assert any("two-stage" in note for note in cpu.notes)


def test_wrapper_project_facts() -> None:
    text = WRAPPER.read_text()
    assert "project(tflite-c C CXX)" in text
    assert "FetchContent" not in text  # the step graph fetches and verifies the source
    assert 'add_subdirectory("${_tflite_c_dir}"' in text and "/tensorflow/lite/c" in text
    for fact in ("set(CMAKE_CXX_STANDARD 20)", "CMAKE_CXX_STANDARD_REQUIRED ON", "TFLITE_C_BUILD_SHARED_LIBS",
                 "TFLITE_ENABLE_XNNPACK", "TFLITE_ENABLE_GPU", "TFLITE_ENABLE_METAL", "CMAKE_WINDOWS_EXPORT_ALL_SYMBOLS ON",
                 "MultiThreaded$<$<CONFIG:Debug>:Debug>DLL", "/Z7", "CXX_STANDARD 20",
                 'set(CMAKE_SYSTEM_PROCESSOR "${CMAKE_OSX_ARCHITECTURES}")',
                 "RUNTIME DESTINATION lib", "LIBRARY DESTINATION lib", "ARCHIVE DESTINATION lib",
                 "DESTINATION include/tensorflow/lite/core/c", "DESTINATION include/tensorflow/lite/core/async/c",
                 "builtin_ops.h", "delegates/gpu/metal_delegate.h"):
        assert fact in text, fact
