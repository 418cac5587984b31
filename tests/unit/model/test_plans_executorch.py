"""Golden assertions over every ExecuTorch leg's plan (docs/upstream.md#executorch,
#variant-legs, #executorch-cpu-default; docs/history.md#fix-glslc, #fix-mlx-bundling)."""
from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from backends.commands.report import render_plan
from backends.model.matrix import load_matrix
from backends.model.plan import Download, Plan
from backends.model.recipes import _load_recipe, plan_all
from backends.model.submodules import with_selected_submodules

ROOT = Path(__file__).resolve().parents[3]
ENGINE = "executorch"
ACCELERATOR_SWITCHES = ("EXECUTORCH_BUILD_COREML", "EXECUTORCH_BUILD_MPS", "EXECUTORCH_BUILD_MLX",
                        "EXECUTORCH_BUILD_VULKAN")
COMMON = (
    "-DCMAKE_BUILD_TYPE=Release", "-DCMAKE_INSTALL_PREFIX={install}", "-DCMAKE_POSITION_INDEPENDENT_CODE=ON",
    "-DBUILD_TESTING=OFF", "-DEXECUTORCH_BUILD_EXECUTOR_RUNNER=OFF", "-DEXECUTORCH_BUILD_PYBIND=OFF",
    "-DEXECUTORCH_ENABLE_PROGRAM_VERIFICATION=ON", "-DEXECUTORCH_BUILD_EXTENSION_DATA_LOADER=ON",
    "-DEXECUTORCH_BUILD_EXTENSION_FLAT_TENSOR=ON", "-DEXECUTORCH_BUILD_EXTENSION_NAMED_DATA_MAP=ON",
    "-DEXECUTORCH_BUILD_EXTENSION_MODULE=ON", "-DEXECUTORCH_BUILD_EXTENSION_TENSOR=ON",
    "-DEXECUTORCH_BUILD_EXTENSION_RUNNER_UTIL=ON", "-DEXECUTORCH_BUILD_EXTENSION_EVALUE_UTIL=ON",
    "-DEXECUTORCH_BUILD_KERNELS_OPTIMIZED=ON", "-DEXECUTORCH_BUILD_KERNELS_QUANTIZED=ON",
    "-DEXECUTORCH_BUILD_XNNPACK=ON", "-DEXECUTORCH_XNNPACK_ENABLE_WEIGHT_CACHE=ON",
    "-DPYTHON_EXECUTABLE={venv_python}",
)
IOS_OFF = (
    "-DEXECUTORCH_BUILD_EXTENSION_LLM=OFF", "-DEXECUTORCH_BUILD_EXTENSION_LLM_RUNNER=OFF",
    "-DEXECUTORCH_BUILD_EXTENSION_LLM_APPLE=OFF", "-DEXECUTORCH_BUILD_KERNELS_LLM=OFF",
    "-DEXECUTORCH_BUILD_KERNELS_TORCHAO=OFF",
)
# The delegates' targets in ExecuTorch 1.3.1's ExecuTorchTargets export set.
DELEGATE_TARGETS = {"coreml": "coremldelegate", "mps": "mpsdelegate", "mlx": "mlxdelegate", "vulkan": "vulkan_backend"}


@pytest.fixture(scope="module")
def plans() -> dict[str, Plan]:
    matrix = load_matrix(ROOT)
    legs = [leg for leg in matrix.legs if leg.engine == ENGINE and leg.source != "prebuilt"]
    return {plan.leg.id: plan for plan in plan_all(matrix, legs)}


def built(plans: dict[str, Plan]) -> list[Plan]:
    return [p for p in plans.values() if not p.leg.aggregate]


def argv(plan: Plan, label: str) -> tuple[str, ...]:
    matches = [c.argv for c in plan.build if c.label == label]
    assert len(matches) == 1, f"{plan.leg.id}: {len(matches)} commands labelled {label!r}"
    return matches[0]


def all_args(plan: Plan) -> list[str]:
    args = [a for c in (*plan.build, *plan.fixups) for a in c.argv]
    args += [f"{k}={v}" for c in plan.build for k, v in c.env.items()]
    return args + [f"{k}={v}" for k, v in plan.env.items()]


def on_switches(plan: Plan) -> set[str]:
    return {s for s in ACCELERATOR_SWITCHES if f"-D{s}=ON" in all_args(plan)}


def test_every_leg_is_planned(plans: dict[str, Plan]) -> None:
    engine = load_matrix(ROOT).engines[ENGINE]
    named = {"executorch-linux-x86_64-static", "executorch-ios-gpu-xcframework", "executorch-android-static"}
    assert named <= set(plans)
    assert all(p.archive.startswith(f"executorch-{engine.version}-") for p in plans.values())


def test_vulkan_only_on_the_linux_gpu_leg(plans: dict[str, Plan]) -> None:
    with_vulkan = {i for i, p in plans.items() if "EXECUTORCH_BUILD_VULKAN" in on_switches(p)}
    assert with_vulkan == {"executorch-linux-x86_64-gpu-static"}
    probe = argv(plans["executorch-linux-x86_64-gpu-static"], "glslc probe")
    assert probe == ("{python}", "-m", "backends.probes.glslc")
    assert not [p for i, p in plans.items() if i != "executorch-linux-x86_64-gpu-static"
                and any(c.label == "glslc probe" for c in p.build)]


def test_apple_delegates_only_on_macos_gpu_legs(plans: dict[str, Plan]) -> None:
    switches = {i: on_switches(p) for i, p in plans.items() if on_switches(p)}
    assert switches == {
        "executorch-macos-x86_64-gpu-static": {"EXECUTORCH_BUILD_COREML", "EXECUTORCH_BUILD_MPS"},
        "executorch-macos-arm64-gpu-static": {"EXECUTORCH_BUILD_COREML", "EXECUTORCH_BUILD_MPS",
                                              "EXECUTORCH_BUILD_MLX"},
        "executorch-linux-x86_64-gpu-static": {"EXECUTORCH_BUILD_VULKAN"},
    }


def test_no_cpu_leg_carries_an_accelerator_flag(plans: dict[str, Plan]) -> None:
    for plan in built(plans):
        if plan.leg.flavor == "cpu":
            assert not on_switches(plan), plan.leg.id
            assert plan.contract.accelerators == ()
            foreign = {t for e in plan.contract.foreign_accelerators for t in e.targets}
            assert foreign == set(DELEGATE_TARGETS.values()), plan.leg.id


@pytest.mark.parametrize("leg_id, target", [
    ("executorch-macos-x86_64-static", "12.0"),
    ("executorch-macos-arm64-static", "12.0"),
    ("executorch-macos-x86_64-gpu-static", "12.0"),
    ("executorch-macos-arm64-gpu-static", "14.0"),  # MLX requires it
])
def test_macos_deployment_targets(plans: dict[str, Plan], leg_id: str, target: str) -> None:
    plan = plans[leg_id]
    assert f"-DCMAKE_OSX_DEPLOYMENT_TARGET={target}" in argv(plan, "configure")
    assert plan.env["MACOSX_DEPLOYMENT_TARGET"] == target


def test_common_defines_on_every_desktop_and_android_leg(plans: dict[str, Plan]) -> None:
    for plan in built(plans):
        if plan.leg.platform == "ios":
            continue
        configure = argv(plan, "configure")
        assert configure[:5] == ("cmake", "-S", "{src}", "-B", "{build}")
        defines = [a for a in configure if a.startswith("-D")]
        assert tuple(defines[:len(COMMON)]) == COMMON, plan.leg.id
        assert argv(plan, "build") == ("cmake", "--build", "{build}", "-j", "{jobs:ram_gb/3}", "--target", "install")


def test_exact_argv_macos_arm64(plans: dict[str, Plan]) -> None:
    plan = plans["executorch-macos-arm64-static"]
    assert argv(plan, "configure") == ("cmake", "-S", "{src}", "-B", "{build}", *COMMON,
                                       "-DCMAKE_OSX_ARCHITECTURES=arm64", "-DCMAKE_OSX_DEPLOYMENT_TARGET=12.0",
                                       "-DKLEIDIAI_SOURCE_DIR={extract:dep-kleidiai}")
    pins = load_matrix(ROOT).engines[ENGINE].pins
    assert argv(plan, "torch") == ("{venv_python}", "-m", "pip", "install", f"torch=={pins['torch']}",
                                   "--extra-index-url", pins["torch_index"])


def test_exact_argv_linux(plans: dict[str, Plan]) -> None:
    plan = plans["executorch-linux-x86_64-static"]
    assert argv(plan, "configure") == ("cmake", "-S", "{src}", "-B", "{build}", *COMMON)
    assert argv(plan, "host tools") == (
        "cmake", "-E", "rm", "-rf", "{build}/third-party/flatc_ep", "{build}/third-party/flatcc_ep",
        "{src}/third-party/flatcc/lib", "{src}/third-party/flatcc/bin")
    assert plan.env == {}
    for label in ("configure", "build"):
        assert next(c for c in plan.build if c.label == label).env == {"PYTHONPATH": "{src}/.."}
    assert plan.private_source  # flatcc installs into the source tree


def test_exact_argv_windows_arm64(plans: dict[str, Plan]) -> None:
    plan = plans["executorch-windows-arm64-static"]
    assert argv(plan, "configure") == (
        "cmake", "-S", "{src}", "-B", "{build}", "-G", "Ninja", *COMMON,
        "-DXNNPACK_ENABLE_ARM_FP16_VECTOR=OFF", "-DXNNPACK_ENABLE_ARM_FP16_SCALAR=OFF", "-DXNNPACK_ENABLE_ARM_BF16=OFF",
        "-DKLEIDIAI_SOURCE_DIR={extract:dep-kleidiai}")
    x64 = argv(plans["executorch-windows-x86_64-static"], "configure")
    assert x64 == ("cmake", "-S", "{src}", "-B", "{build}", "-G", "Ninja", *COMMON)


def test_exact_argv_android(plans: dict[str, Plan]) -> None:
    plan = plans["executorch-android-arm64-v8a-static"]
    assert argv(plan, "configure") == (
        "cmake", "-S", "{src}", "-B", "{build}", *COMMON,
        "-DCMAKE_TOOLCHAIN_FILE={env:ANDROID_NDK_HOME}/build/cmake/android.toolchain.cmake",
        "-DANDROID_ABI=arm64-v8a", "-DANDROID_PLATFORM=android-27", "-DKLEIDIAI_SOURCE_DIR={extract:dep-kleidiai}")
    assert plan.smoke is None  # cannot run anywhere


def test_ios_floor_claimed_is_the_floor_built(plans: dict[str, Plan]) -> None:
    """ExecuTorch 1.3.1's ios/ios-simulator presets set DEPLOYMENT_TARGET 17.0 (CMakePresets.json);
    the legs' data claimed iOS 13.0. Each slice is configured for the floor the leg declares."""
    ios = [plan for plan in built(plans) if plan.leg.platform == "ios"]
    assert ios
    for plan in ios:
        floors = {arg.split("=", 1)[1] for label in ("configure ios", "configure ios-simulator")
                  for arg in argv(plan, label) if arg.startswith("-DDEPLOYMENT_TARGET=")}
        assert len(floors) == 1, plan.leg.id
        assert plan.leg.requires["min_os"] == f"iOS {floors.pop()}", plan.leg.id


def test_exact_argv_ios(plans: dict[str, Plan]) -> None:
    cpu = plans["executorch-ios-xcframework"]
    assert argv(cpu, "configure ios") == (
        "cmake", "-S", "{src}", "-B", "{build}/ios", "--preset", "ios", "-DPYTHON_EXECUTABLE={venv_python}", *IOS_OFF,
        "-DDEPLOYMENT_TARGET=17.0",
        "-DEXECUTORCH_BUILD_COREML=OFF", "-DEXECUTORCH_BUILD_MPS=OFF", "-DKLEIDIAI_SOURCE_DIR={extract:dep-kleidiai}")
    gpu = plans["executorch-ios-gpu-xcframework"]
    assert argv(gpu, "configure ios-simulator") == (
        "cmake", "-S", "{src}", "-B", "{build}/ios-simulator", "--preset", "ios-simulator",
        "-DPYTHON_EXECUTABLE={venv_python}", *IOS_OFF, "-DDEPLOYMENT_TARGET=17.0",
        "-DKLEIDIAI_SOURCE_DIR={extract:dep-kleidiai}")
    for plan in (cpu, gpu):
        assert argv(plan, "bundle ios") == (
            "{python}", "-m", "backends.steps.bundle", "--from-tree", "{build}/ios",
            "--exclude", "(/testdata/|-src/|/flatc_ep/|/flatcc_ep/)", "--out", "{build}/xcframework/ios/libexecutorch.a")
        assert argv(plan, "xcframework") == (
            "xcodebuild", "-create-xcframework",
            "-library", "{build}/xcframework/ios/libexecutorch.a", "-headers", "{build}/ios-install/include",
            "-library", "{build}/xcframework/ios-simulator/libexecutorch.a", "-headers", "{build}/ios-install/include",
            "-output", "{build}/executorch.xcframework")
        assert "executorch.xcframework/Info.plist" in plan.contract.required


def test_torch_from_source_only_on_macos_x86_64(plans: dict[str, Plan]) -> None:
    for plan in built(plans):
        from_source = any(c.label == "pytorch" for c in plan.build)
        assert from_source == (plan.leg.platform == "macos-x86_64"), plan.leg.id
        assert any(c.label == "torch" for c in plan.build) != from_source
    plan = plans["executorch-macos-x86_64-gpu-static"]
    pytorch = next(c for c in plan.build if c.label == "pytorch")
    assert pytorch.argv == ("{venv_python}", "tools/build_libtorch.py") and pytorch.cwd == "{build}/pytorch"
    assert pytorch.env["PYTHONPATH"] == ""
    assert pytorch.env["MACOSX_DEPLOYMENT_TARGET"] == "12.0"
    assert pytorch.env["CMAKE_OSX_ARCHITECTURES"] == "x86_64"
    assert pytorch.env["USE_MPS"] == "0" and pytorch.env["BUILD_PYTHON"] == "0"
    assert argv(plan, "torchgen yaml copy")[-1] == "{build}/pytorch/torchgen/packaged/ATen/native"
    assert [d.name for d in plan.downloads] == ["source", "pytorch"]
    configure = next(c for c in plan.build if c.label == "configure")
    assert configure.env["PYTHONPATH"] == "{build}/pytorch:{src}/.."


def test_macos_x86_64_legs_build_pytorch_in_their_own_copy(plans: dict[str, Plan]) -> None:
    """Both macOS x86_64 legs build PyTorch in source (build/, torch/include, torchgen/packaged):
    the shared checkout {src:pytorch} is only ever copied, into the leg's own {build}."""
    legs = [plan for plan in built(plans) if any(d.name == "pytorch" for d in plan.downloads)]
    assert {plan.leg.platform for plan in legs} == {"macos-x86_64"} and len(legs) >= 2
    for plan in legs:
        readers = [c for c in plan.build if "{src:pytorch}" in (c.cwd, *c.argv, *c.env.values())]
        assert [c.label for c in readers] == ["pytorch private copy"], plan.leg.id
        assert readers[0].argv == ("{python}", "-m", "backends.steps.upstream", "private-copy",
                                   "{src:pytorch}", "{build}/pytorch")
        assert plan.build.index(readers[0]) < plan.build.index(next(c for c in plan.build if c.label == "pytorch"))


def _targets(evidence) -> dict[str, tuple[str, ...]]:
    return {e.accelerator: e.targets for e in evidence}


@pytest.mark.parametrize("leg_id", ["executorch-macos-x86_64-gpu-static", "executorch-macos-arm64-gpu-static",
                                    "executorch-linux-x86_64-gpu-static"])
def test_gpu_contracts_require_their_delegates_by_target(plans: dict[str, Plan], leg_id: str) -> None:
    plan = plans[leg_id]
    shipped = _targets(plan.contract.accelerators)
    assert shipped == {acc: (DELEGATE_TARGETS[acc],) for acc in plan.leg.accelerator}
    foreign = _targets(plan.contract.foreign_accelerators)
    assert foreign == {acc: (t,) for acc, t in DELEGATE_TARGETS.items() if acc not in plan.leg.accelerator}


def test_mlx_staging_and_evidence(plans: dict[str, Plan]) -> None:
    arm = plans["executorch-macos-arm64-gpu-static"]
    mlx = next(e for e in arm.contract.accelerators if e.accelerator == "mlx")
    assert {"lib/mlx.metallib", "lib/libmlx.a", "lib/libmlxdelegate.a"} <= set(mlx.files)
    patterns = {r.pattern: r for r in arm.collect}
    assert patterns["{build}/**/libmlx.a"].required and patterns["{build}/**/mlx.metallib"].required
    x86 = plans["executorch-macos-x86_64-gpu-static"]
    assert "lib/mlx.metallib" in next(e for e in x86.contract.foreign_accelerators if e.accelerator == "mlx").files
    assert not [r for r in x86.collect if "mlx" in r.pattern]


def test_stage_fixup_contract_smoke(plans: dict[str, Plan]) -> None:
    for plan in built(plans):
        if plan.leg.platform == "ios":
            continue
        assert [(r.pattern, r.dest) for r in plan.collect][:2] == [("{install}/include/**", "include"),
                                                                   ("{install}/lib/**", "lib")]
        assert [c.argv for c in plan.fixups] == [(
            "{python}", "-m", "backends.steps.fixups", "cmake-relocate", "{stage}/lib/cmake/ExecuTorch",
            "--lib-dir", "{stage}/lib", "--build-root", "{build}")]
        contract = plan.contract
        assert "lib/cmake/ExecuTorch/executorch-config.cmake" in contract.required
        assert contract.relocatable
        lib = "lib/executorch.lib" if plan.leg.os == "windows" else "lib/libexecutorch.a"
        assert lib in contract.required
        if plan.leg.can_run:
            assert plan.smoke is not None and plan.smoke.project == "smoke/executorch"
            assert plan.smoke.model == "add.pte"


def test_windows_patches_only_on_windows(plans: dict[str, Plan]) -> None:
    for plan in built(plans):
        names = {p.name for p in plan.patches}
        expected = {"win_flatc_exe_byproduct", "win_wd4996", "win_static_constexpr_names"}
        assert names == (expected if plan.leg.os == "windows" else set()), plan.leg.id


def test_notes_document_the_source_leaf_and_jobs_token(plans: dict[str, Plan]) -> None:
    for plan in built(plans):
        text = " ".join(plan.notes)
        assert "6475" in text and "{jobs:ram_gb/3}" in text


# -- the submodules each leg checks out (engine.toml [[submodules]], docs/upstream.md#executorch-submodules)

# ExecuTorch v1.3.1's submodules (.gitmodules and the gitlinks of the tag's tree), by host.
UPSTREAM_SUBMODULES = {
    "backends/arm/third-party/ethos-u-core-driver": "git.gitlab.arm.com",
    "backends/cadence/utils/FACTO": "github.com",
    "backends/mlx/third-party/mlx": "github.com",
    "backends/vulkan/third-party/Vulkan-Headers": "github.com",
    "backends/vulkan/third-party/VulkanMemoryAllocator": "github.com",
    "backends/vulkan/third-party/volk": "github.com",
    "backends/xnnpack/third-party/FP16": "github.com",
    "backends/xnnpack/third-party/FXdiv": "github.com",
    "backends/xnnpack/third-party/XNNPACK": "github.com",
    "backends/xnnpack/third-party/cpuinfo": "github.com",
    "backends/xnnpack/third-party/pthreadpool": "github.com",
    "extension/llm/tokenizers": "github.com",
    "kernels/optimized/third-party/eigen": "gitlab.com",
    "shim": "github.com",
    "third-party/ao": "github.com",
    "third-party/flatbuffers": "github.com",
    "third-party/flatcc": "github.com",
    "third-party/gflags": "github.com",
    "third-party/googletest": "github.com",
    "third-party/ios-cmake": "github.com",
    "third-party/json": "github.com",
    "third-party/pocketfft": "github.com",
    "third-party/prelude": "github.com",
    "third-party/pybind11": "github.com",
}
# What a configure with the common flags reads: third-party/CMakeLists.txt, FXdiv/cpuinfo/
# pthreadpool, XNNPACK, the optimized kernels' Eigen and pocketfft.
COMMON_SUBMODULES = (
    "backends/xnnpack/third-party/FXdiv", "backends/xnnpack/third-party/XNNPACK",
    "backends/xnnpack/third-party/cpuinfo", "backends/xnnpack/third-party/pthreadpool",
    "kernels/optimized/third-party/eigen", "third-party/flatbuffers", "third-party/flatcc", "third-party/gflags",
    "third-party/json", "third-party/pocketfft",
)
VULKAN = ("backends/vulkan/third-party/Vulkan-Headers", "backends/vulkan/third-party/VulkanMemoryAllocator",
          "backends/vulkan/third-party/volk")
EXTRA_SUBMODULES = {
    "executorch-linux-x86_64-gpu-static": VULKAN,
    "executorch-macos-arm64-gpu-static": ("backends/mlx/third-party/mlx",),
    "executorch-ios-xcframework": ("third-party/ios-cmake",),
    "executorch-ios-gpu-xcframework": ("third-party/ios-cmake",),
}


def source_of(plan: Plan) -> Download:
    return next(d for d in plan.downloads if d.name == "source")


def test_each_leg_checks_out_only_the_submodules_its_build_reads(plans: dict[str, Plan]) -> None:
    for plan in built(plans):
        download = source_of(plan)
        expected = tuple(sorted(COMMON_SUBMODULES + EXTRA_SUBMODULES.get(plan.leg.id, ())))
        assert download.submodules and download.submodule_paths == expected, plan.leg.id
    pytorch = [d for p in built(plans) for d in p.downloads if d.name == "pytorch"]
    assert pytorch and all(d.submodules and not d.submodule_paths for d in pytorch)  # PyTorch's: every one


def test_every_selected_path_is_a_submodule_of_the_pinned_release() -> None:
    engine = load_matrix(ROOT).engines[ENGINE]
    assert engine.version == "1.3.1", "UPSTREAM_SUBMODULES lists 1.3.1's: read the new tag's .gitmodules"
    assert engine.sources["source"].select_submodules
    for entry in engine.submodules:
        assert set(entry.paths) <= set(UPSTREAM_SUBMODULES), entry.label


def test_no_leg_depends_on_a_host_it_does_not_build_from(plans: dict[str, Plan]) -> None:
    never = {"backends/arm/third-party/ethos-u-core-driver", "backends/cadence/utils/FACTO", "third-party/prelude",
             "shim", "backends/xnnpack/third-party/FP16", "third-party/pybind11", "third-party/googletest",
             "third-party/ao", "extension/llm/tokenizers"}
    for plan in built(plans):
        paths = set(source_of(plan).submodule_paths)
        assert not paths & never, plan.leg.id
        assert {UPSTREAM_SUBMODULES[p] for p in paths} == {"github.com", "gitlab.com"}, plan.leg.id  # Eigen's


def _with_define(plan: Plan, label: str, define: str) -> Plan:
    return replace(plan, build=tuple(replace(c, argv=(*c.argv, define)) if c.label == label else c
                                     for c in plan.build))


def test_the_selection_follows_the_configure_flags(plans: dict[str, Plan]) -> None:
    engine = load_matrix(ROOT).engines[ENGINE]
    linux = plans["executorch-linux-x86_64-static"]
    pybind = with_selected_submodules(_with_define(linux, "configure", "-DEXECUTORCH_BUILD_PYBIND=ON"), engine)
    assert set(source_of(pybind).submodule_paths) == {*COMMON_SUBMODULES, "third-party/pybind11"}
    no_xnnpack = with_selected_submodules(_with_define(linux, "configure", "-DEXECUTORCH_BUILD_XNNPACK=OFF"), engine)
    assert "backends/xnnpack/third-party/XNNPACK" not in source_of(no_xnnpack).submodule_paths  # a later -D wins
    # The iOS presets turn the LLM extension and torchao on; the recipe's -D...=OFF turn them off again.
    ios = plans["executorch-ios-xcframework"]
    assert not {"extension/llm/tokenizers", "third-party/ao"} & set(source_of(ios).submodule_paths)
    with_llm = replace(ios, build=tuple(replace(c, argv=tuple(a for a in c.argv if a not in IOS_OFF))
                                        for c in ios.build))
    implied = _load_recipe(ROOT / "engines" / ENGINE / "recipe.py").IMPLIED_SWITCHES
    selected = source_of(with_selected_submodules(with_llm, engine, implied)).submodule_paths
    assert {"extension/llm/tokenizers", "third-party/ao"} <= set(selected)


def test_plan_text_lists_the_selected_submodules(plans: dict[str, Plan]) -> None:
    text = render_plan(plans["executorch-linux-x86_64-static"])
    assert "    submodules: 10 selected by engines/executorch/engine.toml [[submodules]]" in text
    assert all(f"\n      {path}\n" in text for path in COMMON_SUBMODULES)
    assert "ethos-u" not in text and "pybind11" not in text
