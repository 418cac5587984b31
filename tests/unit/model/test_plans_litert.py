"""Golden assertions over every LiteRT leg's plan (docs/upstream.md#litert, #legs-per-engine; docs/history.md#non-hermetic)."""
from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from backends.model.matrix import load_matrix
from backends.model.plan import Command, Plan
from backends.model.recipes import plan_all

ROOT = Path(__file__).resolve().parents[3]
ENGINE = "litert"
COMMIT = "89c838788bba9c2ec6bbefd52971daf39d8e2856"
DEFINES = ("--define=litert_disable_gpu=true", "--define=litert_disable_npu=true")
BAZEL = ("bazelisk", "--output_base={build}/bazel-base")
# Windows: the output base and LLVM in the leg's short directory (MAX_PATH; test_windows_paths.py)
WINDOWS_BAZEL = ("bazelisk", "--output_base={short}\\bazel")
LLVM = "{short}\\llvm"
LINK = "--symlink_prefix={build}/bazel-"
STATIC_TARGET = "//litert/c:litert_runtime_c_api_so_shim"
PREBUILT = {
    "litert-macos-arm64-shared": ("macos_arm64", "libLiteRt.dylib"),
    "litert-linux-x86_64-shared": ("linux_x86_64", "libLiteRt.so"),
    "litert-linux-aarch64-shared": ("linux_arm64", "libLiteRt.so"),
    "litert-windows-x86_64-shared": ("windows_x86_64", "libLiteRt.dll"),
    "litert-android-arm64-v8a-shared": ("android_arm64", "libLiteRt.so"),
    "litert-android-x86_64-shared": ("android_x86_64", "libLiteRt.so"),
}
ACCELERATOR_WORDS = ("litert_disable_gpu=false", "litert_disable_npu=false", "--config=cuda", "gpu_delegate",
                     "TF_NEED_CUDA=1", "TF_NEED_ROCM=1")


@pytest.fixture(scope="module")
def plans() -> dict[str, Plan]:
    matrix = load_matrix(ROOT)
    legs = [leg for leg in matrix.legs if leg.engine == ENGINE]
    return {plan.leg.id: plan for plan in plan_all(matrix, legs)}


def built(plans: dict[str, Plan]) -> list[Plan]:
    return [p for p in plans.values() if not p.leg.aggregate]


def command(plan: Plan, label: str) -> Command:
    matches = [c for c in plan.build if c.label == label]
    assert len(matches) == 1, f"{plan.leg.id}: {len(matches)} commands labelled {label!r}"
    return matches[0]


def bazel_commands(plan: Plan) -> list[tuple[str, ...]]:
    return [c.argv for c in plan.build if c.argv[:1] == ("bazelisk",)]


def test_every_leg_is_planned(plans: dict[str, Plan]) -> None:
    engine = load_matrix(ROOT).engines[ENGINE]
    assert {"litert-linux-x86_64-shared", "litert-linux-x86_64-static", "litert-ios-xcframework"} <= set(plans)
    assert all(p.archive.startswith(f"LiteRt-{engine.version}-") for p in plans.values())


def test_headers_on_every_leg_at_the_commit(plans: dict[str, Plan]) -> None:
    for plan in built(plans):
        headers = plan.downloads[0]
        assert headers.name == "headers" and headers.url.endswith(f"/LiteRT/archive/{COMMIT}.tar.gz")
        assert plan.collect[0].pattern == "{extract:headers}/*/litert/c/**/*.h"
        assert plan.collect[0].dest == "include/litert/c"
        assert plan.fixups[0].argv == ("{python}", "-m", "backends.steps.fixups", "litert-build-config",
                                       "{stage}/include/litert/build_common/build_config.h")
        assert any("LITERT_BUILD_CONFIG_DISABLE_GPU" in note for note in plan.notes)


def test_prebuilt_legs_fetch_the_lfs_file_under_a_unique_name(plans: dict[str, Plan]) -> None:
    names = set()
    for leg_id, (sub, file) in PREBUILT.items():
        plan = plans[leg_id]
        release = plan.downloads[1]
        assert release.url == (f"https://media.githubusercontent.com/media/google-ai-edge/LiteRT/{COMMIT}"
                               f"/litert/prebuilt/{sub}/{file}.lfs")
        assert not release.unpack and not plan.build
        names.add(release.filename)
        assert release.filename == f"{sub}-{COMMIT[:12]}-{file}"  # a new commit pin is a new file pin
        rule = plan.collect[1]
        assert (rule.pattern, rule.dest, rule.rename) == ("{download:release}", "lib", file)
    assert len(names) == len(PREBUILT)  # four legs fetch a `libLiteRt.so.lfs`


def test_windows_shared_synthesizes_the_import_lib_and_ships_no_def(plans: dict[str, Plan]) -> None:
    for leg_id, machine in (("litert-windows-x86_64-shared", "x64"), ("litert-windows-arm64-shared", "arm64")):
        plan = plans[leg_id]
        assert plan.fixups[1].argv == ("{python}", "-m", "backends.steps.fixups", "import-lib", "{stage}/lib/libLiteRt.dll",
                                       "--machine", machine, "--out", "{stage}/lib/LiteRt.lib")
        assert {"lib/libLiteRt.dll", "lib/LiteRt.lib"} <= set(plan.contract.required)
        assert ("lib/libLiteRt.dll", "LiteRtCreateEnvironment") in plan.contract.symbols
    for plan in built(plans):
        forbidden = plan.contract.forbidden
        assert "lib/*.def" in forbidden or "**/*.def" in forbidden, plan.leg.id


def test_contract_on_every_leg(plans: dict[str, Plan]) -> None:
    for plan in built(plans):
        if plan.leg.platform == "ios":
            continue
        contract = plan.contract
        assert {"include/litert/c/litert_environment.h", "include/litert/build_common/build_config.h"} <= set(
            contract.required)
        assert contract.symbols[0][1] == "LiteRtCreateEnvironment"
        assert contract.symbols[0][0] in contract.required
        if plan.leg.can_run:
            assert plan.smoke is not None and plan.smoke.project == "smoke/litert"
            assert plan.smoke.model_path == "smoke/tflite/add.tflite"  # the TFLite smoke's model


def test_every_bazel_build_disables_gpu_and_npu(plans: dict[str, Plan]) -> None:
    for plan in built(plans):
        for argv in bazel_commands(plan):
            assert argv[:2] == (WINDOWS_BAZEL if plan.leg.os == "windows" else BAZEL), plan.leg.id
            for define in DEFINES:
                assert define in argv, plan.leg.id
            assert ("--compilation_mode=dbg" in argv) == (plan.leg.config == "debug"), plan.leg.id
        text = " ".join(a for c in plan.build for a in c.argv)
        assert not [w for w in ACCELERATOR_WORDS if w in text], plan.leg.id


def test_exact_argv_macos(plans: dict[str, Plan]) -> None:
    shared = plans["litert-macos-x86_64-shared"]
    assert command(shared, "bazel build").argv == (
        *BAZEL, "build", "--config=bulk_test_cpu", "--cpu=darwin_x86_64", *DEFINES, LINK,
        "//litert/c:litert_runtime_c_api_shared_lib")
    assert shared.collect[1].pattern == "{build}/bazel-bin/litert/c/**/libLiteRt.dylib"
    static = plans["litert-macos-x86_64-static"]
    assert command(static, "bazel build").argv == (
        *BAZEL, "build", "--config=macos", "--cpu=darwin_x86_64", "--macos_minimum_os=11.0",
        "--platforms=@build_bazel_apple_support//platforms:macos_x86_64", "--config=bulk_test_cpu",
        *DEFINES, LINK, STATIC_TARGET)
    arm = plans["litert-macos-arm64-static"]
    assert command(arm, "bazel build").argv == (
        *BAZEL, "build", "--config=macos_arm64", "--config=bulk_test_cpu", *DEFINES, LINK, STATIC_TARGET)


def test_exact_argv_linux(plans: dict[str, Plan]) -> None:
    x86 = plans["litert-linux-x86_64-static"]
    assert command(x86, "bazel build").argv == (
        *BAZEL, "build", "--config=bulk_test_cpu", "--force_pic", "--repo_env=USE_HERMETIC_CC_TOOLCHAIN=0",
        "--noincompatible_enable_cc_toolchain_resolution", *DEFINES, LINK, STATIC_TARGET)
    arm = plans["litert-linux-aarch64-static"]
    assert command(arm, "bazel build").argv == (
        *BAZEL, "build", "--config=bulk_test_cpu", "--force_pic", *DEFINES, LINK, STATIC_TARGET)


def test_exact_argv_windows_arm64(plans: dict[str, Plan]) -> None:
    arm64 = ("--cpu=arm64_windows", "--define=tflite_with_xnnpack=false", "--override_repository=cpuinfo={src:cpuinfo}")
    debug = plans["litert-windows-arm64-static-debug"]
    assert command(debug, "bazel build").argv == (
        *WINDOWS_BAZEL, "build", *arm64, *DEFINES, "--compilation_mode=dbg", LINK, STATIC_TARGET)
    shared = plans["litert-windows-arm64-shared"]
    assert command(shared, "bazel build").argv == (
        *WINDOWS_BAZEL, "build", *arm64, *DEFINES, LINK, "//litert/c:libLiteRt")
    for plan in (debug, shared, plans["litert-windows-arm64-static"]):
        assert plan.env["USE_CLANG_CL"] == "1" and plan.env["BAZEL_LLVM"] == LLVM
        assert plan.env["MSYS2_ARG_CONV_EXCL"] == "*" and plan.env["MSYS_NO_PATHCONV"] == "1"
        # one native path: NSIS's /D, last and unquoted (upstream installed to C:\\LLVM20)
        assert command(plan, "llvm 20").argv == ("{download:llvm}", "/S", "/D=" + LLVM)
        downloads = {d.name: d for d in plan.downloads}
        assert downloads["llvm"].url.endswith("/llvmorg-20.1.8/LLVM-20.1.8-woa64.exe")
        assert downloads["cpuinfo"].kind == "git"
    x64 = plans["litert-windows-x86_64-static"]
    assert command(x64, "bazel build").argv == (*WINDOWS_BAZEL, "build", *DEFINES, LINK, STATIC_TARGET)
    assert "USE_CLANG_CL" not in x64.env and "cpuinfo" not in {d.name for d in x64.downloads}


def test_configure_py_on_every_host_build(plans: dict[str, Plan]) -> None:
    for plan in built(plans):
        if plan.leg.source != "build" or plan.leg.os == "android":
            continue
        configure = command(plan, "configure.py")
        assert configure.argv == ("{python}", "configure.py")
        assert dict(configure.env) == {"PYTHON_BIN_PATH": "{python}", "USE_DEFAULT_PYTHON_LIB_PATH": "1",
                                       "TF_NEED_ROCM": "0", "TF_NEED_CUDA": "0", "CC_OPT_FLAGS": "-Wno-sign-compare",
                                       "TF_SET_ANDROID_WORKSPACE": "0"}
        assert plan.private_source


def test_static_closure_merge(plans: dict[str, Plan]) -> None:
    for plan in built(plans):
        if plan.leg.kind != "static" or plan.leg.os == "android":
            continue
        flags = command(plan, "bazel build").argv[3:-1]
        bazel = WINDOWS_BAZEL if plan.leg.os == "windows" else BAZEL
        assert command(plan, "closure labels").argv == (
            "{python}", "-m", "backends.steps.bazel_closure", "labels",
            "--query", f"kind('cc_library rule', deps({STATIC_TARGET}))", "--out", "{build}/labels.txt",
            "--bazel", "bazelisk", "--output-base", bazel[1].split("=", 1)[1], "--", *flags)
        assert command(plan, "closure build").argv == (*bazel, "build", *flags, "--target_pattern_file={build}/labels.txt")
        assert command(plan, "closure collect").argv[:8] == (
            "{python}", "-m", "backends.steps.bazel_closure", "collect", "--target", STATIC_TARGET,
            "--out", "{build}/closure.txt")
        assert plan.bundle is not None and plan.bundle.libraries_from == "{build}/closure.txt"
        assert plan.bundle.output == ("lib/LiteRt.lib" if plan.leg.os == "windows" else "lib/libLiteRt.a")
        # upstream: `lib /machine:x64`; on arm64 `llvm-lib /machine:arm64` (lib.exe: LNK1160 on clang-cl archives)
        librarian = {"x86_64": ("", "x64"), "arm64": (LLVM + "\\bin\\llvm-lib.exe", "arm64")}
        expected = librarian[plan.leg.arch] if plan.leg.os == "windows" else ("", "")
        assert (plan.bundle.tool, plan.bundle.machine) == expected, plan.leg.id


def test_android_static_in_the_ml_build_image(plans: dict[str, Plan]) -> None:
    for abi, config in (("arm64-v8a", "android_arm64"), ("x86_64", "android_x86_64")):
        plan = plans[f"litert-android-{abi}-static"]
        image = "us-docker.pkg.dev/ml-oss-artifacts-published/ml-public-container/ml-build:latest"
        assert command(plan, "pull").argv == ("docker", "pull", image)
        run = command(plan, "android build").argv
        assert run[:3] == ("docker", "run", "--rm") and image in run
        for env in ("ANDROID_NDK_API_LEVEL=21", "ANDROID_API_LEVEL=35", "ANDROID_SDK_API_LEVEL=35",
                    "ANDROID_BUILD_TOOLS_VERSION=35.0.1", "TF_SET_ANDROID_WORKSPACE=1", "TF_NEED_CLANG=1",
                    "ANDROID_NDK_HOME=/ndk/android-ndk-r25b"):
            assert env in run
        script = run[-1]
        assert f"--config={config} --define=litert_disable_gpu=true --define=litert_disable_npu=true" in script
        assert "python3 configure.py </dev/null" in script and "'platforms;android-35'" in script
        assert "{build}${execroot#/out}" in script  # the closure list names host paths
        ndk = {d.name: d for d in plan.downloads}["ndk"]
        assert ndk.url == "https://dl.google.com/android/repository/android-ndk-r25b-linux.zip"
        assert plan.bundle is not None and plan.bundle.libraries_from == "{build}/closure.txt"


# Like sdkmanager: reads one answer per pending license, records them, exits 0 (or 1 on "n").
FAKE_SDKMANAGER = """#!/bin/bash
for license in android-sdk-license android-sdk-preview-license; do
  read -r answer
  [ "$answer" = y ] || { echo "license $license declined"; exit 1; }
  echo "$license" >> "$(dirname "$0")/accepted"
done
"""


@pytest.mark.parametrize("abi", ["arm64-v8a", "x86_64"])
def test_android_license_step_survives_pipefail(plans: dict[str, Plan], tmp_path: Path, abi: str) -> None:
    """The container script's own `set -euo pipefail` line and its license line, run by bash
    against an sdkmanager that stops reading after its answers (as the real one does)."""
    script = command(plans[f"litert-android-{abi}-static"], "android build").argv[-1].splitlines()
    assert script[0] == "set -euo pipefail"
    licenses = [line for line in script if "--licenses" in line]
    assert len(licenses) == 1
    fake = tmp_path / "out" / "cmdline-tools" / "bin" / "sdkmanager"
    fake.parent.mkdir(parents=True)
    fake.write_text(FAKE_SDKMANAGER)
    fake.chmod(0o755)
    steps = "\n".join([script[0], licenses[0].replace("/out/", f"{tmp_path}/out/"), "echo after-licenses"])
    done = subprocess.run(["bash", "-c", steps], capture_output=True, text=True)
    assert done.returncode == 0, (done.returncode, done.stderr)
    assert done.stdout.strip() == "after-licenses"
    assert (fake.parent / "accepted").read_text().split() == ["android-sdk-license", "android-sdk-preview-license"]
    # A failing sdkmanager still stops the script.
    fake.write_text("#!/bin/bash\nexit 3\n")
    assert subprocess.run(["bash", "-c", steps], capture_output=True, text=True).returncode == 3


def test_ios_slices_and_gates(plans: dict[str, Plan]) -> None:
    plan = plans["litert-ios-xcframework"]
    for cpu in ("ios_arm64", "ios_sim_arm64"):
        assert command(plan, f"bazel build {cpu}").argv == (
            *BAZEL, "build", "--config=apple-toolchain", "--apple_platform_type=ios", f"--cpu={cpu}",
            f"--platforms=@build_bazel_apple_support//platforms:{cpu}", "--copt=-Wno-c++11-narrowing",
            "--ios_minimum_os=13.0", "--config=bulk_test_cpu", *DEFINES, LINK, STATIC_TARGET)
        labels = command(plan, f"closure labels {cpu}").argv
        assert f"kind('(cc_library|objc_library) rule', deps({STATIC_TARGET}))" in labels
        assert command(plan, f"self-contained {cpu}").argv == (
            "{python}", "-m", "backends.steps.bundle", "--check-self-contained", f"{{build}}/{cpu}/libLiteRt.a",
            "--prefixes", "_ZN6tflite,_ZN6litert,_ZN4absl,_ZN3tsl")
        assert not [a for c in plan.build for a in c.argv if "bitcode" in a]
    xcframework = next(c for c in plan.fixups if c.label == "xcframework").argv
    assert xcframework[:2] == ("xcodebuild", "-create-xcframework")
    assert xcframework[-2:] == ("-output", "{stage}/LiteRt.xcframework")
    assert ("LiteRt.xcframework/ios-arm64/libLiteRt.a", "LiteRtCreateEnvironment") in plan.contract.symbols
