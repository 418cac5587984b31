"""LibTorch: repackage the `shared-with-deps` release zips, or run PyTorch's build_libtorch.py.

Upstream facts: docs/upstream.md#libtorch (environment per platform and why), #variant-legs (variants).
"""
from __future__ import annotations

from dataclasses import replace

from backends.model import recipe_kit as kit
from backends.model.engine import Engine
from backends.model.leg import Leg
from backends.model.plan import Command, Contract, CopyRule, Download, Plan, RuntimeLibrary, Smoke, VersionProbe

PACKAGE_DIRS = ("include", "lib", "share", "bin")
TORCH_CONFIG = "share/cmake/Torch/TorchConfig.cmake"

DISABLED = ("USE_CUDA", "USE_ROCM", "USE_CUDNN", "USE_NCCL", "USE_DISTRIBUTED", "USE_TENSORPIPE", "USE_GLOO",
            "USE_MPI", "BUILD_TEST", "BUILD_PYTHON")

# What a C++ consumer never needs: Python bindings and PyTorch's own tests (the wheel
# layout carries them; the release zip mostly does not).
PYTHON_AND_TESTS = (
    "lib/libtorch_python.*", "lib/torch_python.*",
    "lib/libaoti_custom_ops.*", "lib/libbackend_with_compiler.*", "lib/libjitbackend_test.*",
    "lib/libtorchbind_test.*", "lib/*test*.dll", "lib/*test*.lib",
    "bin/test_*", "bin/*Test", "bin/*Test.exe", "bin/*.pt", "bin/*.ptl", "bin/upgrader_models/**",
)

# The NVIDIA redistributables the cu130 zips carry push the package past GitHub's 2 GB
# release-asset limit, and users install CUDA 13 + cuDNN 9 themselves. Torch's own CUDA
# libraries (torch_cuda, c10_cuda, caffe2_nvrtc) stay.
NVIDIA_STEMS = ("cudnn", "cublas", "cudart", "nccl", "nvrtc", "nvToolsExt", "nvJitLink", "cufft", "curand",
                "cusparse", "cusolver", "cupti", "nvshmem", "cufile", "nvperf", "cudss")


def nvidia_redistributables(os_name: str) -> tuple[str, ...]:
    """Globs of the NVIDIA runtime libraries in a cu130 zip (cublas also covers cublasLt)."""
    if os_name == "windows":
        return tuple(f"lib/{stem}*.dll" for stem in NVIDIA_STEMS)
    return tuple(f"lib/lib{stem}*.so*" for stem in NVIDIA_STEMS)


def _main_library(leg: Leg) -> str:
    return {"linux": "lib/libtorch_cpu.so", "windows": "lib/torch_cpu.dll"}.get(leg.os, "lib/libtorch_cpu.dylib")


# Every shared library a LibTorch package ships, by the name its loader knows it by
# (SONAME, install name, DLL name): PyTorch's own and the runtimes it bundles. An NVIDIA
# redistributable is none of these, whatever its file is called.
OWN_LIBRARIES = ("libtorch*", "torch*", "libc10*", "c10*", "libcaffe2*", "caffe2*", "libshm.*", "shm.dll")
BUNDLED_RUNTIMES = (
    "libgomp*", "libomp*", "libiomp5*", "libiompstubs5*",  # OpenMP
    "libarm_compute*", "libopenblas*", "libgfortran*", "libquadmath*",  # Linux aarch64 BLAS
    "uv.dll", "libuv*", "asmjit*", "fbgemm*",  # Windows release zips
)
# What of BUNDLED_RUNTIMES the SBOM names with its own license, and the texts carried for it.
LIBGOMP = RuntimeLibrary("libgomp", "lib/libgomp*.so*", "GPL-3.0-or-later WITH GCC-exception-3.1",
                         "GCC's OpenMP runtime, shipped in upstream's Linux release zip")
LIBGOMP_TEXTS = {"gcc_exception": "GCC-exception-3.1.txt", "gpl3": "GPL-3.0.txt"}
VERSION_FILE = "share/cmake/Torch/TorchConfigVersion.cmake"
# The license texts every package carries (engines/contracts.toml [licenses]): the source tree
# holds both; the release zips neither, so prebuilt legs take them from the tag's files once
# pinned; a wheel origin brings LICENSE and the third-party texts itself (the quick start's
# way, with nothing pinned), and NOTICE then comes only with its pin.
LICENSE_TEXTS = ("LICENSE", "NOTICE")
LICENSE_SOURCES = {"LICENSE": "license", "NOTICE": "notice"}
WHEEL_LICENSES = "{extract:release}/../torch-*.dist-info/licenses"
WHEEL_THIRD_PARTY = WHEEL_LICENSES + "/third_party/**"
# The release and the wheel ship share/cmake/ATen/ATenConfig.cmake with the runner's
# include directory (/__w/pytorch/..., /Users/runner/work/..., C:/actions-runner/...);
# find_package(Torch) never reads it.
STALE_CONFIGS = ("share/cmake/ATen/**",)


def _contract(leg: Leg) -> Contract:
    required = ["include/torch/csrc/api/include/torch/torch.h", TORCH_CONFIG, VERSION_FILE, _main_library(leg)]
    forbidden = [p for p in PYTHON_AND_TESTS if not p.startswith("bin/*.")]
    if leg.flavor == "cuda":
        forbidden += nvidia_redistributables(leg.os)
    if leg.platform == "linux-aarch64":
        required.append("lib/libarm_compute.so")  # consumers get undefined arm_compute::* without it
    return Contract(
        required=tuple(required),
        forbidden=tuple(forbidden) + STALE_CONFIGS,
        allowed_libraries=OWN_LIBRARIES + BUNDLED_RUNTIMES,
        versions=(VersionProbe("text", VERSION_FILE, r'set\(PACKAGE_VERSION "([^"]+)"\)'),),
    )


def _smoke(leg: Leg) -> Smoke:
    # MPS is probed at run time: GitHub's hosted Macs are virtual machines without it.
    return Smoke("smoke/libtorch", probes=("mps",) if "mps" in leg.accelerator else ())


def _runtime_texts(engine: Engine) -> tuple[tuple[Download, ...], tuple[CopyRule, ...]]:
    """libgomp's license texts, fetched once pinned (`scons lock`), under share/licenses/libgomp/."""
    downloads = tuple(replace(kit.url_source(engine, source, unpack=False), optional=True) for source in LIBGOMP_TEXTS)
    rules = tuple(CopyRule(f"{{download:{source}}}", f"{kit.LICENSE_ROOT}/{LIBGOMP.name}", rename=name, required=False)
                  for source, name in LIBGOMP_TEXTS.items())
    return downloads, rules


def _prebuilt_plan(leg: Leg, engine: Engine, archive: str) -> Plan:
    download = replace(kit.url_source(engine, "release", leg.params), roots=("libtorch", "torch"))
    texts, text_rules = kit.license_downloads(engine, LICENSE_SOURCES)
    collect = tuple(CopyRule(f"{{extract:release}}/{d}/**", d, required=d in ("include", "lib", "share"))
                    for d in PACKAGE_DIRS)
    collect += (*text_rules, CopyRule(f"{WHEEL_LICENSES}/LICENSE", kit.license_dir(engine.name), required=False),
                CopyRule(WHEEL_THIRD_PARTY, f"{kit.license_dir(engine.name)}/third_party", required=False))
    exclude = PYTHON_AND_TESTS + STALE_CONFIGS + (nvidia_redistributables(leg.os) if leg.flavor == "cuda" else ())
    notes: tuple[str, ...] = ()
    if leg.flavor == "cuda":
        notes = ("NVIDIA redistributables stripped (cuDNN, cuBLAS, cudart, NCCL, nvrtc, ...): "
                 "the user provides CUDA 13.x + cuDNN 9, driver r580+",)
    runtimes: tuple[RuntimeLibrary, ...] = ()
    if leg.os == "linux":
        gomp_texts, gomp_rules = _runtime_texts(engine)
        texts, collect, runtimes = (*texts, *gomp_texts), (*collect, *gomp_rules), (LIBGOMP,)
    return Plan(leg=leg, version=engine.version, archive=archive, downloads=(download, *texts), collect=collect,
                exclude=exclude, contract=_contract(leg), smoke=_smoke(leg), notes=notes, runtimes=runtimes)


def _environment(leg: Leg, engine: Engine) -> dict[str, str]:
    env = {name: "0" for name in DISABLED}
    env.update(BUILD_SHARED_LIBS="1", USE_FBGEMM="1", USE_QNNPACK="1", USE_PYTORCH_QNNPACK="1", MAX_JOBS="{jobs}")
    if leg.os == "macos":
        env.update(
            CMAKE_OSX_ARCHITECTURES=leg.arch,
            MACOSX_DEPLOYMENT_TARGET=engine.pins["macos_deploy_target"],
            USE_MKLDNN="1",
            USE_MPS="1" if "mps" in leg.accelerator else "0",
            USE_NATIVE_ARCH="0",  # Apple Clang rejects -mavx512fp16 on AVX-512 runners
        )
    elif leg.os == "linux":
        env.update(USE_MKL="0", BLAS="OpenBLAS", USE_FBGEMM="0",
                   ACL_ROOT_DIR="{src:acl}", USE_MKLDNN="1", USE_MKLDNN_ACL="1")
    elif leg.os == "windows":
        env.update(USE_MKL="0", USE_MKLDNN="0", USE_FBGEMM="0", USE_QNNPACK="0", USE_PYTORCH_QNNPACK="0",
                   CMAKE_GENERATOR="Ninja", BLAS="Eigen",
                   MAX_JOBS="2")  # the 16 GB windows-11-arm runner runs out of memory beyond 2
    return env


ACL_SCONS_ARGS = ("Werror=0", "debug=0", "neon=1", "opencl=0", "embed_kernels=0", "os=linux", "arch=armv8a",
                  "build=native", "multi_isa=1", "fixed_format_kernels=1", "openmp=1", "cppthreads=0")


def _acl_commands() -> list[Command]:
    return [
        Command("acl scons", ("{venv_python}", "-m", "pip", "install", "scons")),  # the venv's scons runs next
        Command("acl", ("scons", *ACL_SCONS_ARGS, "-j{jobs}"), cwd="{src:acl}"),
    ]


def _source_plan(leg: Leg, engine: Engine, archive: str) -> Plan:
    env = _environment(leg, engine)
    build = [
        Command("pip", ("{venv_python}", "-m", "pip", "install", "--upgrade", "pip")),
        # requirements.txt would pull lintrunner, which has no win-arm64 wheel.
        Command("pip build deps", ("{venv_python}", "-m", "pip", "install", "-r", "{src}/requirements-build.txt")),
        Command("pip tools", ("{venv_python}", "-m", "pip", "install", "pyyaml", "typing_extensions", "setuptools",
                              "numpy")),
    ]
    downloads = [kit.git_source(engine)]
    if leg.os == "linux":
        downloads.append(kit.git_source(engine, "acl"))
        build += _acl_commands()
    build += [
        # Cached CMake variables are sticky: an environment change (BLAS, USE_MPS) would be ignored.
        Command("fresh cache", ("cmake", "-E", "rm", "-f", "{src}/build/CMakeCache.txt")),
        Command("build_libtorch", ("{venv_python}", "tools/build_libtorch.py"), env=env),
    ]
    collect = [CopyRule(f"{{src}}/torch/{d}/**", d, required=d != "bin") for d in PACKAGE_DIRS]
    collect += kit.license_texts(engine, "{src}", LICENSE_TEXTS)
    fixups: list[Command] = []
    if leg.os == "linux":
        # Without these, consumers get undefined arm_compute::* / cblas_* symbols.
        collect.append(CopyRule("{src:acl}/build/libarm_compute*.so", "lib", dereference=True))
        fixups += [
            Command("openblas", ("{python}", "-m", "backends.steps.fixups", "copy-system-libs", "--ldconfig", "libopenblas",
                                 "{stage}/lib"), cwd="{stage}"),
            Command("rpath", ("{python}", "-m", "backends.steps.fixups", "set-rpath", "--rpath", "$ORIGIN", "{stage}/lib"),
                    cwd="{stage}"),
        ]
    return Plan(
        leg=leg, version=engine.version, archive=archive,
        downloads=tuple(downloads), patches=kit.patches_for(engine, leg),
        build=tuple(build), collect=tuple(collect), exclude=PYTHON_AND_TESTS + STALE_CONFIGS, fixups=tuple(fixups),
        contract=_contract(leg), smoke=_smoke(leg), private_source=True,
        notes=("build_libtorch.py builds in <src>/build and installs into <src>/torch: each leg gets a private "
               "copy of the source tree, so the MPS and CPU builds never share objects",
               "upstream's build-time downloads: none known; PyTorch's third-party code comes as git submodules, "
               "pinned by the source's commit"),
    )


# MPS from source on Apple silicon (USE_MPS=1); CUDA from the cu130 release zips.
ACCELERATORS = {
    "mps": kit.Support(("macos-arm64",)),
    "cuda": kit.Support(("linux-x86_64", "windows-x86_64"), ("prebuilt",)),
}


def validate(leg: Leg) -> None:
    kit.check_accelerators(leg, ACCELERATORS)
    kit.refuse_unless(leg, leg.os in ("macos", "linux", "windows"),
                      "builds for macos, linux and windows only (PyTorch's mobile and web builds are other projects)")
    # Registration relies on static initializers, and upstream's static releases ended at 2.1.2.
    kit.refuse_unless(leg, leg.kind == "shared", "ships shared libraries only")
    kit.refuse_unless(leg, leg.config == "release", "builds Release only (build_libtorch.py, the release zips)")
    if leg.source == "prebuilt":
        kit.refuse_unless(leg, leg.os in ("linux", "windows") and {"asset", "channel"} <= set(leg.params),
                          "repackages the linux and windows release zips, named by params asset and channel")


def plan(leg: Leg, engine: Engine, archive: str) -> Plan:
    if leg.source == "prebuilt":
        return _prebuilt_plan(leg, engine, archive)
    return _source_plan(leg, engine, archive)
