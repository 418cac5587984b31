"""Golden plans for every ONNX Runtime leg (docs/upstream.md#onnxruntime, #variant-legs, #ort-headers)."""
from pathlib import Path

import pytest

from backends.model.matrix import load_matrix
from backends.model.recipes import plan_leg
from evidence import foreign, shown

ROOT = Path(__file__).resolve().parents[3]
MATRIX = load_matrix(ROOT)
ENGINE = MATRIX.engines["onnxruntime"]
PLANS = {leg.id: plan_leg(leg, ENGINE, MATRIX) for leg in MATRIX.legs if leg.engine == "onnxruntime"}
COMMON = ["--cmake_extra_defines", "onnxruntime_BUILD_UNIT_TESTS=OFF", "CMAKE_DISABLE_FIND_PACKAGE_re2=ON",
          "onnxruntime_ENABLE_MEMLEAK_CHECKER=OFF", "onnxruntime_ENABLE_LTO=OFF"]
EP_HEADERS = {"coreml": "coreml_provider_factory.h", "dml": "dml_provider_factory.h"}
EP_NAMES = {"coreml": "CoreML", "dml": "DML"}
BASE = ["{python}", "{src}/tools/ci_build/build.py", "--build_dir", "{build}", "--config", "Release", "--parallel",
        "--skip_tests", "--compile_no_warning_as_error"]


def argv_words(plan):
    return [arg for command in plan.build for arg in command.argv]


def build_py(plan):
    return [list(c.argv) for c in plan.build if c.label.startswith("build.py")]


@pytest.mark.parametrize("leg_id", sorted(PLANS))
def test_accelerator_flags_only_where_they_belong(leg_id):
    plan = PLANS[leg_id]
    words = argv_words(plan)
    leg = plan.leg
    assert ("--use_coreml" in words) == (leg.accelerator == ("coreml",) and leg.source == "build")
    assert ("--use_dml" in words) == (leg.accelerator == ("dml",))
    if leg.flavor == "cpu":
        assert not {w for w in words if w.startswith("--use_")} - {"--use_xcode"}


@pytest.mark.parametrize("leg_id", sorted(PLANS))
def test_shared_flag_only_on_shared_source_legs(leg_id):
    plan = PLANS[leg_id]
    expected = plan.leg.kind == "shared" and plan.leg.source == "build"
    assert ("--build_shared_lib" in argv_words(plan)) == expected


def test_macos_static_gpu_exact_command():
    plan = PLANS["onnxruntime-macos-arm64-gpu-static"]
    assert build_py(plan) == [BASE + ["--use_coreml", *COMMON, "CMAKE_OSX_ARCHITECTURES=arm64",
                                      "CMAKE_OSX_DEPLOYMENT_TARGET=11.0",
                                      "CMAKE_IGNORE_PATH=/opt/homebrew;/usr/local{env?;:ORT_IGNORE_PATHS}",
                                      "CMAKE_IGNORE_PREFIX_PATH=/opt/homebrew;/usr/local{env?;:ORT_IGNORE_PATHS}"]]
    assert [c.label for c in plan.build] == ["build.py", "re2"]
    assert [p.name for p in plan.patches] == ["coreml_proto_export", "coreml_proto_build_interface"]
    assert plan.bundle.output == "lib/libonnxruntime.a"
    assert "libprotobuf" in plan.bundle.exclude and "-src/" in plan.bundle.exclude


def test_coreml_patches_only_on_static_coreml_legs():
    for leg_id, plan in PLANS.items():
        wanted = plan.leg.accelerator == ("coreml",) and plan.leg.kind != "shared" and not plan.leg.aggregate
        assert bool(plan.patches) == wanted, leg_id  # an aggregate merges its slices' archives


def test_windows_arm64_static_release_exact_command():
    plan = PLANS["onnxruntime-windows-arm64-static"]
    assert build_py(plan) == [BASE + ["--cmake_generator", "Ninja", *COMMON, "onnxruntime_USE_KLEIDIAI=OFF",
                                      "onnxruntime_USE_SVE=OFF", "CMAKE_MSVC_DEBUG_INFORMATION_FORMAT="]]
    assert plan.bundle.output == "lib/onnxruntime.lib"


def test_windows_debug_keeps_debug_info_and_x64_has_kleidiai():
    words = argv_words(PLANS["onnxruntime-windows-x86_64-static-debug"])
    assert "--config" in words and words[words.index("--config") + 1] == "Debug"
    assert "CMAKE_MSVC_DEBUG_INFORMATION_FORMAT=" not in words
    assert "onnxruntime_USE_KLEIDIAI=OFF" not in words


@pytest.mark.parametrize("leg_id", [i for i in PLANS if "-windows-" in i and PLANS[i].build])
def test_windows_uses_ninja(leg_id):
    words = argv_words(PLANS[leg_id])
    assert words[words.index("--cmake_generator") + 1] == "Ninja"


def test_dml_leg_ships_directml():
    plan = PLANS["onnxruntime-windows-arm64-gpu-shared"]
    assert "--use_dml" in argv_words(plan) and "--build_shared_lib" in argv_words(plan)
    staged = [r.pattern.rsplit("/", 1)[-1] for r in plan.collect]
    assert {"onnxruntime.dll", "onnxruntime.lib", "DirectML.dll", "dml_provider_factory.h"} <= set(staged)
    dml = shown(plan, "dml")
    assert "**/DirectML.dll" in dml.files and "DirectML.dll" in dml.links
    assert dml.symbols == ("OrtSessionOptionsAppendExecutionProvider_DML",)


def test_android_and_wasm_commands():
    android = build_py(PLANS["onnxruntime-android-arm64-v8a-static"])[0]
    assert android[len(BASE):len(BASE) + 10] == ["--android", "--android_abi", "arm64-v8a", "--android_api", "27",
                                                 "--android_ndk_path", "{env:ANDROID_NDK_HOME}",
                                                 "--android_sdk_path", "{env?:ANDROID_SDK_ROOT}", "--cmake_extra_defines"]
    wasm = PLANS["onnxruntime-wasm-static"]
    # emsdk from the git mirror cache with the source, at the commit the tag records; no other leg has a submodule
    assert [(d.submodules, d.submodule_paths) for d in wasm.downloads] == [(True, ("cmake/external/emsdk",))]
    assert not any(d.submodules for p in PLANS.values() if p.leg.os != "wasm" for d in p.downloads)
    assert "git" not in [c.argv[0] for c in wasm.build]
    assert ["--build_wasm_static_lib", "--enable_wasm_simd", "--enable_wasm_threads", "--disable_rtti"] == \
        build_py(wasm)[0][len(BASE):len(BASE) + 4]
    assert wasm.bundle is None and "re2" not in [c.label for c in wasm.build]


def test_ios_slices():
    plan = PLANS["onnxruntime-ios-gpu-xcframework"]
    slices = [c for c in build_py(plan)]
    assert len(slices) == 2
    for argv, sysroot in zip(slices, ("iphoneos", "iphonesimulator")):
        assert ["--ios", "--use_xcode", "--apple_sysroot", sysroot, "--osx_arch", "arm64", "--apple_deploy_target",
                "13.0", "--build_apple_framework"] == argv[len(BASE) + 1:len(BASE) + 10]
        assert "--use_coreml" in argv
    cpu = PLANS["onnxruntime-ios-xcframework"]
    assert "--use_coreml" not in argv_words(cpu)
    assert "**/coreml_provider_factory.h" in foreign(cpu, "coreml").files
    assert shown(plan, "coreml").symbols == ("OrtSessionOptionsAppendExecutionProvider_CoreML",)
    assert plan.contract.min_os == "13.0"


def test_macos_shared_dylib_is_renamed_with_rpath_id():
    plan = PLANS["onnxruntime-macos-x86_64-shared"]
    assert any(r.rename == "libonnxruntime.dylib" for r in plan.collect)
    assert plan.fixups[0].argv == ("install_name_tool", "-id", "@rpath/libonnxruntime.dylib",
                                   "{stage}/lib/libonnxruntime.dylib")


@pytest.mark.parametrize("leg_id", sorted(PLANS))
def test_execution_providers_by_evidence(leg_id):
    """Every leg shows its EPs' headers and entry points and none of the others'."""
    plan = PLANS[leg_id]
    for acc, header in EP_HEADERS.items():
        evidence = shown(plan, acc) if acc in plan.leg.accelerator else foreign(plan, acc)
        assert f"**/{header}" in evidence.files
        assert evidence.symbols == (f"OrtSessionOptionsAppendExecutionProvider_{EP_NAMES[acc]}",)


def test_source_legs_ship_the_pinned_trees_own_headers():
    plan = PLANS["onnxruntime-linux-x86_64-static"]
    assert plan.collect[0].pattern == "{src}/include/onnxruntime/core/session/*.h"
    assert plan.contract.header_api == ("include/onnxruntime_c_api.h", "lib/libonnxruntime.a")


def test_prebuilt_urls():
    v = ENGINE.version
    assert PLANS["onnxruntime-linux-x86_64-shared"].downloads[0].url == (
        f"https://github.com/microsoft/onnxruntime/releases/download/v{v}/onnxruntime-linux-x64-{v}.tgz")
    assert PLANS["onnxruntime-windows-arm64-shared"].downloads[0].url.endswith(f"onnxruntime-win-arm64-{v}.zip")
    assert PLANS["onnxruntime-linux-x86_64-cuda-shared"].downloads[0].url == (
        f"https://github.com/microsoft/onnxruntime/releases/download/v{v}/onnxruntime-linux-x64-gpu_cuda13-{v}.tgz")
    assert PLANS["onnxruntime-android-shared"].downloads[0].url == (
        f"https://repo1.maven.org/maven2/com/microsoft/onnxruntime/onnxruntime-android/{v}/onnxruntime-android-{v}.aar")


def test_cuda_curation():
    plan = PLANS["onnxruntime-linux-x86_64-cuda-shared"]
    staged = [r.pattern.rsplit("/", 1)[-1] for r in plan.collect]
    assert "libonnxruntime_providers_cuda.so" in staged and "libonnxruntime_providers_shared.so" in staged
    assert "include/**/dml_provider_factory.h" in plan.exclude
    assert "**/*tensorrt*" in plan.contract.forbidden
    assert "lib/libonnxruntime_providers_shared.so" in plan.contract.required
    assert shown(plan, "cuda").links == ("cudart",)
    win = PLANS["onnxruntime-windows-x86_64-cuda-shared"]
    assert "lib/onnxruntime_providers_shared.dll" in win.contract.required


def test_cpu_prebuilt_copies_only_the_library_chain():
    plan = PLANS["onnxruntime-linux-x86_64-shared"]
    assert [r.pattern for r in plan.collect] == ["{extract:release}/*/include/**", "{extract:release}/*/LICENSE",
                                                 "{extract:release}/*/ThirdPartyNotices.txt",
                                                 "{extract:release}/*/lib/libonnxruntime.so*"]
    windows = PLANS["onnxruntime-windows-x86_64-shared"]
    assert [r.pattern.rsplit("/", 1)[-1] for r in windows.collect] == ["**", "LICENSE", "ThirdPartyNotices.txt",
                                                                       "onnxruntime.dll", "onnxruntime.lib"]


def test_aar_takes_each_abi():
    plan = PLANS["onnxruntime-android-shared"]
    assert [r.dest for r in plan.collect] == ["include", "share/licenses/onnxruntime", "share/licenses/onnxruntime",
                                              "lib/arm64-v8a", "lib/x86_64"]
    assert plan.smoke is None
