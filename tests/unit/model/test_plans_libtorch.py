"""Golden plans for every LibTorch leg (docs/upstream.md#libtorch, #variant-legs)."""
from fnmatch import fnmatch
from pathlib import Path

import pytest

from backends.model.matrix import load_matrix
from backends.model.recipes import plan_leg
from backends.util.globs import matches_any
from evidence import shown

ROOT = Path(__file__).resolve().parents[3]
MATRIX = load_matrix(ROOT)
ENGINE = MATRIX.engines["libtorch"]
PLANS = {leg.id: plan_leg(leg, ENGINE, MATRIX) for leg in MATRIX.legs if leg.engine == "libtorch"}


def build_env(plan):
    return dict(next(c for c in plan.build if c.label == "build_libtorch").env)


@pytest.mark.parametrize("leg_id", [i for i in PLANS if "-macos-" in i and "universal" not in i])
def test_mps_only_on_the_gpu_leg(leg_id):
    env = build_env(PLANS[leg_id])
    assert env["USE_MPS"] == ("1" if leg_id == "libtorch-macos-arm64-gpu-shared" else "0")


@pytest.mark.parametrize("leg_id", sorted(PLANS))
def test_cu130_only_on_cuda_legs(leg_id):
    urls = [d.url for d in PLANS[leg_id].downloads]
    assert any("cu130" in u for u in urls) == leg_id.endswith("-cuda-shared")


def test_prebuilt_urls_exact():
    v = ENGINE.version
    assert PLANS["libtorch-linux-x86_64-shared"].downloads[0].url == (
        f"https://download.pytorch.org/libtorch/cpu/libtorch-shared-with-deps-{v}%2Bcpu.zip")
    assert PLANS["libtorch-windows-x86_64-cuda-shared"].downloads[0].url == (
        f"https://download.pytorch.org/libtorch/cu130/libtorch-win-shared-with-deps-{v}%2Bcu130.zip")
    assert PLANS["libtorch-linux-x86_64-shared"].downloads[0].filename == f"libtorch-shared-with-deps-{v}+cpu.zip"


def test_common_build_environment():
    env = build_env(PLANS["libtorch-macos-arm64-shared"])
    for name in ("USE_CUDA", "USE_ROCM", "USE_CUDNN", "USE_NCCL", "USE_DISTRIBUTED", "USE_TENSORPIPE", "USE_GLOO",
                 "USE_MPI", "BUILD_TEST", "BUILD_PYTHON"):
        assert env[name] == "0"
    assert env["BUILD_SHARED_LIBS"] == "1" and env["USE_NATIVE_ARCH"] == "0" and env["USE_MKLDNN"] == "1"
    assert env["CMAKE_OSX_ARCHITECTURES"] == "arm64" and env["MACOSX_DEPLOYMENT_TARGET"] == "11.0"
    assert "BLAS" not in env  # Accelerate is auto-detected on macOS


def test_linux_aarch64_uses_acl_and_openblas():
    plan = PLANS["libtorch-linux-aarch64-shared"]
    env = build_env(plan)
    assert (env["BLAS"], env["USE_MKL"], env["USE_FBGEMM"], env["USE_MKLDNN_ACL"]) == ("OpenBLAS", "0", "0", "1")
    acl = next(c for c in plan.build if c.label == "acl")
    assert acl.argv == ("scons", "Werror=0", "debug=0", "neon=1", "opencl=0", "embed_kernels=0", "os=linux",
                        "arch=armv8a", "build=native", "multi_isa=1", "fixed_format_kernels=1", "openmp=1",
                        "cppthreads=0", "-j{jobs}")
    assert [d.name for d in plan.downloads] == ["source", "acl"]
    assert plan.downloads[1].ref == "v52.6.0"
    assert [c.label for c in plan.fixups] == ["openblas", "rpath"]


def test_windows_arm64_environment_and_patch():
    plan = PLANS["libtorch-windows-arm64-shared"]
    env = build_env(plan)
    assert (env["BLAS"], env["MAX_JOBS"], env["CMAKE_GENERATOR"]) == ("Eigen", "2", "Ninja")
    assert env["USE_MKLDNN"] == env["USE_QNNPACK"] == env["USE_PYTORCH_QNNPACK"] == "0"
    assert [p.name for p in plan.patches] == ["win_arm64_uint_typedefs"]
    assert all(not p.patches for i, p in PLANS.items() if i != "libtorch-windows-arm64-shared")


def test_source_legs_build_privately():
    for plan in PLANS.values():
        assert plan.private_source == (plan.leg.source == "build")


def test_cuda_strip_rule():
    plan = PLANS["libtorch-linux-x86_64-cuda-shared"]
    strip = plan.exclude
    for dropped in ("lib/libcudnn.so.9", "lib/libcublasLt.so.13", "lib/libcudart.so.13", "lib/libnccl.so.2",
                    "lib/libnvrtc.so.13", "lib/libnvrtc-builtins.so.13.0", "lib/libcusparseLt.so.0"):
        assert matches_any(dropped, strip), dropped
    for kept in ("lib/libtorch_cuda.so", "lib/libc10_cuda.so", "lib/libcaffe2_nvrtc.so", "lib/libtorch_cpu.so",
                 "lib/libgomp.so.1", "lib/libc10.so"):
        assert not matches_any(kept, strip), kept
    assert {"lib/*torch_cuda.*", "lib/*c10_cuda.*"} <= set(shown(plan, "cuda").files)
    for nvidia in ("libcudnn.so.9", "libcutensor.so.2", "libnvpl_blas_lp64_gomp.so.0"):  # stripped or not: never allowed
        assert not any(fnmatch(nvidia, p) for p in plan.contract.allowed_libraries), nvidia
    for own in ("libtorch_cuda.so", "libc10_cuda.so", "libcaffe2_nvrtc.so", "libgomp-a34b3233.so.1"):
        assert any(fnmatch(own, p) for p in plan.contract.allowed_libraries), own
    assert plan.smoke is None  # can_run=0: libtorch_cuda cannot load without the NVIDIA libraries
    win = PLANS["libtorch-windows-x86_64-cuda-shared"]
    assert matches_any("lib/cudnn64_9.dll", win.exclude) and not matches_any("lib/torch_cuda.dll", win.exclude)


def test_wheel_layout_is_an_accepted_root():
    assert PLANS["libtorch-linux-x86_64-shared"].downloads[0].roots == ("libtorch", "torch")
    assert matches_any("lib/libtorch_python.so", PLANS["libtorch-linux-x86_64-shared"].exclude)
    assert matches_any("bin/test_api", PLANS["libtorch-linux-x86_64-shared"].exclude)
    assert not matches_any("bin/torch_shm_manager", PLANS["libtorch-linux-x86_64-shared"].exclude)


def test_contract_requires_torch_config():
    for plan in PLANS.values():
        assert "share/cmake/Torch/TorchConfig.cmake" in plan.contract.required
