"""ExecuTorch: a static runtime built from source with CMake (desktop, Android) or with
ExecuTorch's own `ios` / `ios-simulator` presets (iOS xcframework).

Upstream facts: docs/upstream.md#executorch (flags and why), #variant-legs (the -gpu legs),
#executorch-cpu-default (CPU-only default packages); history: docs/history.md#fix-glslc,
#fix-mlx-bundling.
"""
from __future__ import annotations

from dataclasses import replace
from typing import Mapping

from backends.model import recipe_kit as kit
from backends.model.engine import Engine
from backends.model.leg import Leg
from backends.model.plan import Command, Contract, CopyRule, Download, Plan, Smoke, VersionProbe, frozen

# Parallelism = installed RAM in GB / 3 (floor 2, ceiling the core count, 8 GB assumed when
# unknown): unlimited -j OOM-killed the runners (optimized-kernel TUs take GBs each).
JOBS = "{jobs:ram_gb/3}"

COMMON_DEFINES = {
    "CMAKE_BUILD_TYPE": "Release",
    "CMAKE_INSTALL_PREFIX": "{install}",
    "CMAKE_POSITION_INDEPENDENT_CODE": "ON",
    "BUILD_TESTING": "OFF",
    "EXECUTORCH_BUILD_EXECUTOR_RUNNER": "OFF",
    "EXECUTORCH_BUILD_PYBIND": "OFF",
    "EXECUTORCH_ENABLE_PROGRAM_VERIFICATION": "ON",
    "EXECUTORCH_BUILD_EXTENSION_DATA_LOADER": "ON",
    "EXECUTORCH_BUILD_EXTENSION_FLAT_TENSOR": "ON",
    "EXECUTORCH_BUILD_EXTENSION_NAMED_DATA_MAP": "ON",  # 1.3.1 rejects MODULE without it
    "EXECUTORCH_BUILD_EXTENSION_MODULE": "ON",
    "EXECUTORCH_BUILD_EXTENSION_TENSOR": "ON",
    "EXECUTORCH_BUILD_EXTENSION_RUNNER_UTIL": "ON",
    "EXECUTORCH_BUILD_EXTENSION_EVALUE_UTIL": "ON",
    "EXECUTORCH_BUILD_KERNELS_OPTIMIZED": "ON",
    "EXECUTORCH_BUILD_KERNELS_QUANTIZED": "ON",
    "EXECUTORCH_BUILD_XNNPACK": "ON",
    "EXECUTORCH_XNNPACK_ENABLE_WEIGHT_CACHE": "ON",
}
# The configure-time codegen imports torch via find_spec: it must be the interpreter that
# holds the pinned torch (the leg's venv), not whichever python3 comes first on PATH.
PYTHON_DEFINE = {"PYTHON_EXECUTABLE": "{venv_python}"}

# Accelerator -> CMake switch. Only -gpu legs name accelerators (variants/executorch.toml),
# so CPU legs can never carry one of these switches; what proves a delegate is in a
# package (its export-set target, library, symbols) is in engines/contracts.toml.
DELEGATES = {
    "coreml": "EXECUTORCH_BUILD_COREML",
    "mps": "EXECUTORCH_BUILD_MPS",
    "mlx": "EXECUTORCH_BUILD_MLX",
    "vulkan": "EXECUTORCH_BUILD_VULKAN",
}
# The version the build writes into its headers (runtime/core/version.h.in).
VERSION_HEADER = "executorch/runtime/core/version.h"
ET_VERSION = r'#define ET_VERSION "([^"]+)"'

MACOS_DEPLOYMENT = "12.0"
MLX_DEPLOYMENT = "14.0"  # backends/mlx hard-requires it; only the arm64 -gpu leg has MLX
WINDOWS_ARM64_DEFINES = {  # MSVC arm64 has no <arm_fp16.h> (fatal C1083)
    "XNNPACK_ENABLE_ARM_FP16_VECTOR": "OFF",
    "XNNPACK_ENABLE_ARM_FP16_SCALAR": "OFF",
    "XNNPACK_ENABLE_ARM_BF16": "OFF",
}
IOS_PRESETS = ("ios", "ios-simulator")
IOS_OFF_DEFINES = {
    "EXECUTORCH_BUILD_EXTENSION_LLM": "OFF",
    "EXECUTORCH_BUILD_EXTENSION_LLM_RUNNER": "OFF",
    "EXECUTORCH_BUILD_EXTENSION_LLM_APPLE": "OFF",
    "EXECUTORCH_BUILD_KERNELS_LLM": "OFF",
    "EXECUTORCH_BUILD_KERNELS_TORCHAO": "OFF",
}
# The presets enable CoreML + MPS; the CPU xcframework turns them off
# (docs/upstream.md#executorch-cpu-default).
IOS_CPU_DEFINES = {"EXECUTORCH_BUILD_COREML": "OFF", "EXECUTORCH_BUILD_MPS": "OFF"}
# What the presets turn on (tools/cmake/preset/apple_common.cmake) unless a -D turns it off:
# the submodules a leg checks out follow its switches (engine.toml [[submodules]]).
IOS_PRESET_SWITCHES = (
    "EXECUTORCH_BUILD_XNNPACK", "EXECUTORCH_BUILD_COREML", "EXECUTORCH_BUILD_MPS",
    "EXECUTORCH_XNNPACK_ENABLE_WEIGHT_CACHE", "EXECUTORCH_XNNPACK_SHARED_WORKSPACE",
    "EXECUTORCH_BUILD_EXTENSION_APPLE", "EXECUTORCH_BUILD_EXTENSION_DATA_LOADER",
    "EXECUTORCH_BUILD_EXTENSION_LLM_APPLE", "EXECUTORCH_BUILD_EXTENSION_LLM", "EXECUTORCH_BUILD_EXTENSION_LLM_RUNNER",
    "EXECUTORCH_BUILD_EXTENSION_MODULE", "EXECUTORCH_BUILD_EXTENSION_FLAT_TENSOR",
    "EXECUTORCH_BUILD_EXTENSION_NAMED_DATA_MAP", "EXECUTORCH_BUILD_EXTENSION_TENSOR", "EXECUTORCH_BUILD_KERNELS_LLM",
    "EXECUTORCH_BUILD_KERNELS_OPTIMIZED", "EXECUTORCH_BUILD_KERNELS_QUANTIZED", "EXECUTORCH_BUILD_KERNELS_TORCHAO",
)
IMPLIED_SWITCHES = {("--preset", preset): IOS_PRESET_SWITCHES for preset in IOS_PRESETS}
# Host-tool archives are macOS Mach-O: an xcframework rejects mixed platforms. The default
# exclusion is kept too (upstream's override dropped it, docs/upstream.md#static-bundle).
IOS_BUNDLE_EXCLUDE = r"(/testdata/|-src/|/flatc_ep/|/flatcc_ep/)"

# PyTorch's build env as the libtorch recipe uses it on macOS (docs/upstream.md#libtorch-build),
# plus the x86_64 / 12.0 target. PYTHONPATH is emptied: ExecuTorch's `tools/` shadows PyTorch's.
PYTORCH_ENV = {
    "USE_CUDA": "0", "USE_ROCM": "0", "USE_CUDNN": "0", "USE_NCCL": "0", "USE_DISTRIBUTED": "0",
    "USE_TENSORPIPE": "0", "USE_GLOO": "0", "USE_MPI": "0", "BUILD_TEST": "0", "BUILD_PYTHON": "0",
    "BUILD_SHARED_LIBS": "1", "USE_FBGEMM": "1", "USE_QNNPACK": "1", "USE_PYTORCH_QNNPACK": "1",
    "USE_MKLDNN": "1", "USE_MPS": "0", "USE_NATIVE_ARCH": "0", "MAX_JOBS": "{jobs}",
    "CMAKE_OSX_ARCHITECTURES": "x86_64", "MACOSX_DEPLOYMENT_TARGET": MACOS_DEPLOYMENT,
    "PYTHONPATH": "",
}
# build_libtorch.py builds in the tree (build/, torch/include, torchgen/packaged): each leg builds
# PyTorch in its own copy of the shared checkout, so the two macOS x86_64 legs never share one.
PYTORCH = "{build}/pytorch"

FILTER_REQUIREMENTS = (
    "import os, sys; src, out = sys.argv[1:3]; os.makedirs(os.path.dirname(out), exist_ok=True); "
    'keep = [l for l in open(src).read().splitlines() if "lintrunner" not in l.lower()]; '
    'open(out, "w").write("".join(l + "\\n" for l in keep))'
)
REQUIRE_DIR = "import os, sys; sys.exit(0 if os.path.isdir(sys.argv[1]) else sys.argv[2])"

NOTES = (
    "{src} must end in /executorch: ExecuTorch refuses any other leaf (upstream issue 6475) and "
    "puts the parent of the tree on the include path; the step graph checks out there",
    "PYTHONPATH={src}/.. (configure and build only) makes `import executorch` resolve to this tree: "
    "the codegen runs in pure-python mode from the source, no wheel is built",
    "private source: the flatcc ExternalProject installs into the source tree, so each leg builds in "
    "its own copy of it",
    f"{JOBS}: installed RAM in GB / 3, at least 2 and at most the core count (8 GB assumed if unknown)",
)
RELOCATE_NOTE = (
    "fixup cmake-relocate: every path in {stage}/lib/cmake/ExecuTorch/*.cmake that lies under "
    "--build-root (written with / or \\, a Windows root in any case: CMake writes D:/... for a D:\\... build dir) "
    "or a cmake-out dir and names a static library is copied into --lib-dir and rewritten to "
    "${_IMPORT_PREFIX}/lib/<name>; a referenced library that does not exist is an error "
    "(upstream matched 'cmake-out' with `|| true`)"
)
GLSLC_NOTE = (
    "glslc probe: compiles a shader that requires GL_EXT_integer_dot_product (Ubuntu 24.04's shaderc 2023.8 "
    "rejects ExecuTorch's int8 shaders) and fails naming the remedy; the build never installs anything. "
    "CI runs `python -m backends.probes.glslc --install` first (glslc from apt when missing, the pinned Vulkan "
    "SDK's glslc on Debian/Ubuntu amd64 when too old; via sudo -n on the non-root runner)"
)


def _accelerated(leg: Leg) -> list[str]:
    return [acc for acc in leg.accelerator if acc in DELEGATES]


def _deployment_target(leg: Leg) -> str:
    return MLX_DEPLOYMENT if "mlx" in leg.accelerator else MACOS_DEPLOYMENT


def _pip(*args: str) -> tuple[str, ...]:
    return ("{venv_python}", "-m", "pip", "install", *args)


def _python_setup() -> list[Command]:
    requirements = "{build}/et-build-reqs.txt"
    return [
        Command("pip", _pip("--upgrade", "pip")),
        # lintrunner has no win-arm64 wheel and the codegen does not use it.
        Command("requirements", ("{python}", "-c", FILTER_REQUIREMENTS, "{src}/requirements-dev.txt", requirements)),
        Command("pip requirements", _pip("-r", requirements)),
        Command("pip codegen", _pip("pyyaml", "setuptools", "wheel")),
    ]


def _torch_wheel(engine: Engine) -> list[Command]:
    # Headers only: EXECUTORCH_BUILD_KERNELS_OPTIMIZED finds them via find_spec('torch').
    pins = engine.pins
    return [Command("torch", _pip(f"torch=={pins['torch']}", "--extra-index-url", pins["torch_index"]))]


def _torch_from_source() -> list[Command]:
    """macOS x86_64 has no torch wheel since 2.3: build PyTorch for its headers
    (docs/upstream.md#executorch-torch-headers)."""
    native = f"{PYTORCH}/aten/src/ATen/native"
    packaged = f"{PYTORCH}/torchgen/packaged/ATen/native"
    return [
        Command("pytorch private copy", ("{python}", "-m", "backends.steps.upstream", "private-copy",
                                         "{src:pytorch}", PYTORCH)),
        Command("pytorch requirements", _pip("-r", f"{PYTORCH}/requirements-build.txt"), cwd=PYTORCH),
        Command("pytorch deps", _pip("pyyaml", "typing_extensions", "setuptools", "numpy"), cwd=PYTORCH),
        Command("pytorch fresh cache", ("cmake", "-E", "rm", "-f", f"{PYTORCH}/build/CMakeCache.txt"), cwd=PYTORCH),
        Command("pytorch", ("{venv_python}", "tools/build_libtorch.py"), env=frozen(PYTORCH_ENV), cwd=PYTORCH),
        Command("pytorch headers", ("{python}", "-c", REQUIRE_DIR, f"{PYTORCH}/torch/include",
                                    f"ERROR: pytorch source build produced no torch/include headers under {PYTORCH}"),
                cwd=PYTORCH),
        # setup.py packaging would copy these; build_libtorch.py (BUILD_PYTHON=0) does not.
        Command("torchgen yaml", ("cmake", "-E", "make_directory", packaged), cwd=PYTORCH),
        Command("torchgen yaml copy", ("cmake", "-E", "copy", f"{native}/native_functions.yaml",
                                       f"{native}/tags.yaml", packaged), cwd=PYTORCH),
    ]


def _torch(leg: Leg, engine: Engine) -> list[Command]:
    if leg.platform == "macos-x86_64":
        return _torch_from_source()
    return _torch_wheel(engine)


# XNNPACK's configure downloads KleidiAI (cmake/DownloadKleidiAI.cmake) unless KLEIDIAI_SOURCE_DIR
# names a tree: the project fetches the pinned archive and points it there.
KLEIDIAI_READER = "xnnpack-kleidiai"
KLEIDIAI_OVERRIDE = "served by KLEIDIAI_SOURCE_DIR (the pinned archive, extracted)"


def _kleidiai(leg: Leg, engine: Engine) -> tuple[Download, ...]:
    """KleidiAI for the legs its `[[build_downloads]]` entry's `when` selects (XNNPACK uses it on arm64),
    extracted with its archive's top directory as the root."""
    return tuple(replace(d, roots=kit.archive_roots(d.url))
                 for d in kit.build_downloads(engine, leg, KLEIDIAI_READER, unpack=True))


def _platform_defines(leg: Leg, engine: Engine) -> dict[str, str]:
    if leg.os == "macos":
        return {"CMAKE_OSX_ARCHITECTURES": leg.arch, "CMAKE_OSX_DEPLOYMENT_TARGET": _deployment_target(leg)}
    if leg.os == "windows" and leg.arch == "arm64":
        return dict(WINDOWS_ARM64_DEFINES)
    if leg.os == "android":
        return kit.android_toolchain_defines(leg, engine.pins["android_api"])
    return kit.cross_defines(leg)  # none unless its runner is of another arch


def _delegate_defines(leg: Leg) -> dict[str, str]:
    return {DELEGATES[acc]: "ON" for acc in _accelerated(leg)}


def configure_argv(leg: Leg, engine: Engine) -> tuple[str, ...]:
    generator = ("-G", "Ninja") if leg.os == "windows" else ()
    values = {**COMMON_DEFINES, **PYTHON_DEFINE, **_platform_defines(leg, engine), **_delegate_defines(leg)}
    values.update({"KLEIDIAI_SOURCE_DIR": f"{{extract:{d.name}}}" for d in _kleidiai(leg, engine)})
    return ("cmake", "-S", "{src}", "-B", "{build}", *generator, *kit.defines(values))


def _host_tool_cleanup(build_dir: str, tag: str = "") -> Command:
    # flatc/flatcc ExternalProjects fail silently ("subcommand failed") on a rebuild over old
    # state, and install back into the source tree: start them clean every time.
    return Command(f"host tools{tag}", ("cmake", "-E", "rm", "-rf", f"{build_dir}/third-party/flatc_ep",
                                  f"{build_dir}/third-party/flatcc_ep", "{src}/third-party/flatcc/lib",
                                  "{src}/third-party/flatcc/bin"))


def _fresh_cache(build_dir: str, tag: str = "") -> Command:
    # Cache variables are sticky: a removed -D would otherwise survive into the next configure.
    return Command(f"fresh cache{tag}", ("cmake", "-E", "rm", "-f", f"{build_dir}/CMakeCache.txt"))


def _desktop_build(leg: Leg, engine: Engine) -> list[Command]:
    build = _python_setup() + _torch(leg, engine)
    if "vulkan" in leg.accelerator:
        build.append(Command("glslc probe", ("{python}", "-m", "backends.probes.glslc")))
    codegen = _codegen_env(leg)
    served = bool(_kleidiai(leg, engine))  # KleidiAI is the one download upstream's configure makes
    build += [
        _fresh_cache("{build}"),
        _host_tool_cleanup("{build}"),
        Command("clean install", ("cmake", "-E", "rm", "-rf", "{install}")),
        Command("configure", configure_argv(leg, engine), env=codegen, network=not served),
        Command("build", ("cmake", "--build", "{build}", "-j", JOBS, "--target", "install"), env=codegen,
                network=not served),
    ]
    return build


# The license texts (engines/contracts.toml [licenses]): ExecuTorch's LICENSE from the checkout,
# with those of the third-party submodules it links in (`<src>/**/third-party/<name>/LICENSE*`);
# the wheel's from its dist-info.
LICENSE_DIR = kit.license_dir("executorch")
SOURCE_LICENSES = (CopyRule("{src}/LICENSE", LICENSE_DIR, rename="LICENSE"),
                   CopyRule("{src}/**/third-party/*/LICENSE*", f"{LICENSE_DIR}/third_party", required=False))
WHEEL_LICENSE = CopyRule("{extract:wheel}/../executorch-*.dist-info/licenses/LICENSE", LICENSE_DIR, rename="LICENSE")


def _collect(leg: Leg) -> list[CopyRule]:
    rules = [CopyRule("{install}/include/**", "include"), CopyRule("{install}/lib/**", "lib"), *SOURCE_LICENSES]
    if "mlx" in leg.accelerator:
        # MLX is not installed by ExecuTorch; its metallib must sit beside the libraries. Upstream
        # gated this on a never-set shell variable, so it never shipped
        # (docs/history.md#fix-mlx-bundling).
        rules += [CopyRule("{build}/**/libmlx.a", "lib", rename="libmlx.a"),
                  CopyRule("{build}/**/mlx.metallib", "lib", rename="mlx.metallib")]
    return rules


def _relocate() -> Command:
    return Command("cmake-relocate", ("{python}", "-m", "backends.steps.fixups", "cmake-relocate",
                                      "{stage}/lib/cmake/ExecuTorch", "--lib-dir", "{stage}/lib",
                                      "--build-root", "{build}"), cwd="{stage}")


def _contract(leg: Leg) -> Contract:
    return Contract(
        required=(
            "lib/cmake/ExecuTorch/executorch-config.cmake",
            "include/executorch/runtime/executor/program.h",
            "lib/" + kit.static_lib_name(leg, "executorch"),
        ),
        versions=(VersionProbe("text", f"include/{VERSION_HEADER}", ET_VERSION),),
        relocatable=True,
    )


def _codegen_env(leg: Leg) -> Mapping[str, str]:
    """Only the commands that run ExecuTorch's codegen get the source tree on PYTHONPATH: it
    would hide this project's own `backends` package from the fixup commands."""
    if leg.platform == "macos-x86_64":
        return frozen({"PYTHONPATH": f"{PYTORCH}:{{src}}/.."})  # macOS only: ':' is the separator
    return frozen({"PYTHONPATH": "{src}/.."})


def _plan_env(leg: Leg) -> dict[str, str]:
    return {"MACOSX_DEPLOYMENT_TARGET": _deployment_target(leg)} if leg.os == "macos" else {}


def _downloads(leg: Leg, engine: Engine) -> tuple[Download, ...]:
    downloads = [kit.git_source(engine)]
    if leg.platform == "macos-x86_64":
        downloads.append(kit.git_source(engine, "pytorch"))
    return (*downloads, *_kleidiai(leg, engine))


def _desktop_plan(leg: Leg, engine: Engine, archive: str) -> Plan:
    kleidiai = _kleidiai(leg, engine)
    notes = list(NOTES) + [RELOCATE_NOTE, kit.where_from(engine, KLEIDIAI_READER, len(kleidiai), KLEIDIAI_OVERRIDE)]
    if "vulkan" in leg.accelerator:
        notes.append(GLSLC_NOTE)
    return Plan(
        leg=leg, version=engine.version, archive=archive,
        downloads=_downloads(leg, engine),
        patches=kit.patches_for(engine, leg),
        # sccache and MSVC's /Fd PDB handling clash (docs/upstream.md#executorch-build)
        compiler_cache=leg.os != "windows",
        env=frozen(_plan_env(leg)),
        build=tuple(([kit.check_build_downloads(engine, KLEIDIAI_READER)] if kleidiai else [])
                    + _desktop_build(leg, engine)),
        collect=tuple(_collect(leg)),
        fixups=(_relocate(),),
        contract=_contract(leg),
        smoke=Smoke("smoke/executorch", model="add.pte"),
        notes=tuple(notes),
        private_source=True,
    )


def _ios_slice_dir(preset: str) -> str:
    return f"{{build}}/{preset}"


def ios_configure_argv(leg: Leg, engine: Engine, preset: str) -> tuple[str, ...]:
    # The presets' ios-cmake toolchain takes the floor from DEPLOYMENT_TARGET: passed from the pin, so
    # the xcframework is built for exactly the floor the leg's data claims, whatever a new preset says.
    values = {**PYTHON_DEFINE, **IOS_OFF_DEFINES, "DEPLOYMENT_TARGET": engine.pins["ios_deployment_target"]}
    if not leg.accelerator:
        values.update(IOS_CPU_DEFINES)
    values.update({"KLEIDIAI_SOURCE_DIR": f"{{extract:{d.name}}}" for d in _kleidiai(leg, engine)})
    return ("cmake", "-S", "{src}", "-B", _ios_slice_dir(preset), "--preset", preset, *kit.defines(values))


def _ios_slice(leg: Leg, engine: Engine, preset: str) -> list[Command]:
    slice_dir = _ios_slice_dir(preset)
    served = bool(_kleidiai(leg, engine))  # as on the desktop: KleidiAI is the one download of a slice's build
    return [
        _fresh_cache(slice_dir, f" {preset}"),
        _host_tool_cleanup(slice_dir, f" {preset}"),
        Command(f"configure {preset}", ios_configure_argv(leg, engine, preset), env=_codegen_env(leg),
                network=not served),
        Command(f"build {preset}", ("cmake", "--build", slice_dir, "--config", "Release", "-j", JOBS),
                env=_codegen_env(leg), network=not served),
        Command(f"bundle {preset}", ("{python}", "-m", "backends.steps.bundle", "--from-tree", slice_dir,
                                     "--exclude", IOS_BUNDLE_EXCLUDE,
                                     "--out", f"{{build}}/xcframework/{preset}/libexecutorch.a")),
    ]


def _ios_build(leg: Leg, engine: Engine) -> list[Command]:
    build = _python_setup() + _torch_wheel(engine)
    for preset in IOS_PRESETS:
        build += _ios_slice(leg, engine, preset)
    headers = "{build}/ios-install/include"
    xcframework = ["xcodebuild", "-create-xcframework"]
    for preset in IOS_PRESETS:
        xcframework += ["-library", f"{{build}}/xcframework/{preset}/libexecutorch.a", "-headers", headers]
    build += [
        # Upstream swallowed a failing install (`|| true`, docs/history.md#false-greens): here
        # it fails the leg.
        Command("clean headers", ("cmake", "-E", "rm", "-rf", "{build}/ios-install")),
        Command("headers", ("cmake", "--install", _ios_slice_dir("ios"), "--config", "Release",
                            "--prefix", "{build}/ios-install")),
        Command("clean xcframework", ("cmake", "-E", "rm", "-rf", "{build}/executorch.xcframework")),
        Command("xcframework", (*xcframework, "-output", "{build}/executorch.xcframework")),
    ]
    return build


def _ios_plan(leg: Leg, engine: Engine, archive: str) -> Plan:
    kleidiai = _kleidiai(leg, engine)
    check = [kit.check_build_downloads(engine, KLEIDIAI_READER)] if kleidiai else []
    return Plan(
        leg=leg, version=engine.version, archive=archive,
        downloads=(kit.git_source(engine), *kleidiai),
        patches=kit.patches_for(engine, leg),
        build=tuple(check + _ios_build(leg, engine)),
        collect=(CopyRule("{build}/executorch.xcframework/**", "executorch.xcframework"), *SOURCE_LICENSES),
        contract=Contract(
            required=(
                "executorch.xcframework/Info.plist",
                "executorch.xcframework/ios-arm64/libexecutorch.a",
                "executorch.xcframework/*simulator/libexecutorch.a",
                "executorch.xcframework/ios-arm64/Headers/executorch/runtime/executor/program.h",
            ),
            versions=(VersionProbe("text", f"executorch.xcframework/ios-arm64/Headers/{VERSION_HEADER}", ET_VERSION),),
        ),
        notes=NOTES + ("no iOS smoke: the xcframework is checked by its contract only",
                       kit.where_from(engine, KLEIDIAI_READER, len(kleidiai), KLEIDIAI_OVERRIDE)),
        private_source=True,
    )


# --- shared runtime repackaged from the published wheel ------------------------------------

# Libraries of the wheel per accelerator; delegates a flavor does not ship are dropped, and
# with them their exported targets (the wheel's config defines a component only when its
# library exists). QNN and OpenVINO need vendor SDKs at run time: out of scope
# (docs/upstream.md#variant-model).
WHEEL_DELEGATES = {
    "coreml": ("lib/libexecutorch_backend_coreml.*",),
    "mlx": ("lib/libexecutorch_backend_mlx.*", "lib/mlx.metallib"),
}
WHEEL_ALWAYS_DROPPED = ("lib/libexecutorch_backend_qnn.*", "lib/libexecutorch_backend_openvino.*",
                        "lib/libexecutorch_backend_cuda.*")
WHEEL_VERSION_FILE = "share/cmake/executorch-config-version.cmake"


def _wheel_library(leg: Leg, name: str) -> str:
    return f"lib/lib{name}.dylib" if leg.os == "macos" else f"lib/lib{name}.so"


def _wheel_plan(leg: Leg, engine: Engine, archive: str) -> Plan:
    download = replace(kit.url_source(engine, "wheel", leg.params), roots=("executorch",))
    foreign = tuple(p for acc, patterns in WHEEL_DELEGATES.items() if acc not in leg.accelerator for p in patterns)
    return Plan(
        leg=leg, version=engine.version, archive=archive, downloads=(download,),
        collect=(*(CopyRule(f"{{extract:wheel}}/{d}/**", d) for d in ("include", "lib", "share")), WHEEL_LICENSE),
        exclude=WHEEL_ALWAYS_DROPPED + foreign,
        contract=Contract(
            required=("include/executorch/runtime/executor/program.h", "share/cmake/executorch-config.cmake",
                      _wheel_library(leg, "executorch"), _wheel_library(leg, "executorch_backend_xnnpack")),
            forbidden=WHEEL_ALWAYS_DROPPED,
            versions=(VersionProbe("text", WHEEL_VERSION_FILE, r'set\(PACKAGE_VERSION "([^"]+)"\)'),),
        ),
        smoke=Smoke("smoke/executorch", model="add.pte"),
        notes=("repackaged from the published wheel: shared libraries (XNNPACK, optimized and quantized kernels, "
               "threadpool, etdump) with find_package(executorch) through share/cmake; see "
               "docs/executorch-wheel-legs.md for what differs from the static legs",),
    )


# The delegates of the source builds (DELEGATES' switches) and of the published wheels.
ACCELERATORS = {
    "coreml": kit.Support(("macos", "ios"), ("build", "prebuilt")),
    "mps": kit.Support(("macos", "ios")),
    "mlx": kit.Support(("macos-arm64",), ("build", "prebuilt")),
    "vulkan": kit.Support(("linux",)),
}


def validate(leg: Leg) -> None:
    kit.check_accelerators(leg, ACCELERATORS)
    kit.refuse_unless(leg, leg.os != "wasm", "has no WASM build")
    kit.refuse_unless(leg, leg.config == "release", "builds Release only")
    if leg.source == "prebuilt":
        kit.refuse_unless(leg, leg.kind == "shared" and leg.os in ("linux", "macos") and "wheel" in leg.params,
                          "repackages the shared runtime of the linux and macos wheels, named by params wheel")
    else:
        kit.refuse_unless(leg, leg.kind in ("static", "xcframework"), "builds static libraries from source")


def plan(leg: Leg, engine: Engine, archive: str) -> Plan:
    if leg.platform == "ios":
        return _ios_plan(leg, engine, archive)
    if leg.source == "prebuilt":
        return _wheel_plan(leg, engine, archive)
    return _desktop_plan(leg, engine, archive)
