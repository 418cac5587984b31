"""ONNX Runtime: ORT's own tools/ci_build/build.py for source legs, release repackaging else.

Upstream facts: docs/upstream.md#onnxruntime (flags and why), #variant-legs (variants), #ort-headers.
"""
from __future__ import annotations

from dataclasses import replace

from backends.model import recipe_kit as kit
from backends.model.engine import Engine
from backends.model.leg import Leg
from backends.model.plan import Bundle, Command, Contract, CopyRule, Download, Plan, Smoke, VersionProbe

COMMON_DEFINES = (
    "onnxruntime_BUILD_UNIT_TESTS=OFF",
    "CMAKE_DISABLE_FIND_PACKAGE_re2=ON",  # re2 built from source, so it lands in the bundle
    "onnxruntime_ENABLE_MEMLEAK_CHECKER=OFF",  # aborted Debug consumers at exit
    "onnxruntime_ENABLE_LTO=OFF",  # no /GL or /LTCG in shipped static libraries
)
HOMEBREW_PREFIXES = "/opt/homebrew;/usr/local"
# Full protobuf and protoc are excluded: ORT runs on protobuf-lite.
BUNDLE_EXCLUDE = r"(/testdata/|-src/|libprotoc|libprotobuf[d]?\.(lib|a)$)"

SESSION_HEADERS = "{src}/include/onnxruntime/core/session/*.h"
CPU_HEADERS = (
    "{src}/include/onnxruntime/core/providers/cpu/cpu_provider_factory.h",
    "{src}/include/onnxruntime/core/framework/provider_options.h",
)
EP_HEADER_FILES = {"coreml": "coreml_provider_factory.h", "dml": "dml_provider_factory.h"}
EP_HEADERS = {acc: f"{{src}}/include/onnxruntime/core/providers/{acc}/{name}" for acc, name in EP_HEADER_FILES.items()}
# The license texts every package carries (engines/contracts.toml [licenses]): the source
# tree and the release archives hold both; the AAR neither, so they come from the tag's files.
LICENSE_TEXTS = ("LICENSE", "ThirdPartyNotices.txt")
AAR_LICENSE_SOURCES = {"LICENSE": "license", "ThirdPartyNotices.txt": "notices"}
# The shared macOS library's id: relocatable, found through the consumer's rpath.
MACOS_INSTALL_NAME = "@rpath/libonnxruntime.dylib"
# cmake/deps.txt's downloads: fetched and pinned by the project, laid where ORT's CMake looks
# first for each URL (`<source>/mirror/<URL without https://>`), so CMake still checks its SHA1.
DEPS_READER = "ort-deps"
MIRROR_OVERRIDE = "served from {src}/mirror/<URL without https://>, which ORT's deps.txt loop prefers"
WASM_NOTE = ("upstream's build-time downloads: the WASM build activates emsdk (the cmake/external/emsdk submodule, "
             "pinned by its gitlink), whose `emsdk install` downloads the Emscripten toolchain itself (read by the "
             "emsdk reader): not yet served by the project (docs/hermetic-sources.md)")
DML_NOTE = ("upstream's build-time downloads: --use_dml restores the Microsoft.AI.DirectML NuGet package of "
            "packages.config from nuget.org (read by the nuget reader): not yet served by the project "
            "(docs/hermetic-sources.md)")


def _unserved(engine: Engine, reader: str, note: str) -> str:
    """A note on downloads the project lists but does not serve yet, with the recorded URLs."""
    urls = [item.url for item in engine.build_downloads if item.reader == reader]
    return note + (f"; recorded: {', '.join(urls)}" if urls else "")


def _served(leg: Leg, deps: tuple[Download, ...]) -> bool:
    """Whether the project serves every download of the leg's build: deps.txt's, and none of the
    emsdk toolchain or the DirectML package it does not serve yet. Then build.py runs with the
    network off."""
    return bool(deps) and leg.os != "wasm" and "dml" not in leg.accelerator


def _deps(leg: Leg, engine: Engine) -> tuple[tuple[Download, ...], list[Command], tuple[str, ...]]:
    """deps.txt's downloads, the commands that check the tree against them and lay the mirror,
    and plan=1's notes on where they come from."""
    deps = kit.build_downloads(engine, leg, DEPS_READER)
    notes = [kit.where_from(engine, DEPS_READER, len(deps), MIRROR_OVERRIDE)]
    notes += [_unserved(engine, "emsdk", WASM_NOTE)] if leg.os == "wasm" else []
    notes += [_unserved(engine, "nuget", DML_NOTE)] if "dml" in leg.accelerator else []
    if not deps:
        return (), [], tuple(notes)
    mirror = Command("mirror deps.txt", ("{python}", "-m", "backends.steps.build_downloads", "mirror",
                                         "--into", "{src}/mirror",
                                         *(f"--file={d.url}={{download:{d.name}}}" for d in deps)))
    return deps, [kit.check_build_downloads(engine, DEPS_READER), mirror], tuple(notes)


def _platform_args(leg: Leg, engine: Engine) -> tuple[list[str], list[str]]:
    """build.py arguments and extra CMake defines for one platform."""
    args: list[str] = []
    extra: list[str] = []
    if leg.os == "macos":
        ignore = HOMEBREW_PREFIXES + "{env?;:ORT_IGNORE_PATHS}"
        extra += [
            f"CMAKE_OSX_ARCHITECTURES={leg.arch}",
            f"CMAKE_OSX_DEPLOYMENT_TARGET={engine.pins['macos_deploy_target']}",
            f"CMAKE_IGNORE_PATH={ignore}",  # find_library/find_path
            f"CMAKE_IGNORE_PREFIX_PATH={ignore}",  # find_package CONFIG
        ]
    elif leg.os == "windows":
        args += ["--cmake_generator", "Ninja"]  # build.py's VS 2022 default is absent on the runners
        if leg.arch == "arm64":
            extra += ["onnxruntime_USE_KLEIDIAI=OFF", "onnxruntime_USE_SVE=OFF"]  # armasm64 A2029
        if leg.config == "release":
            extra.append("CMAKE_MSVC_DEBUG_INFORMATION_FORMAT=")  # build.py's /Zi made a 854 MB .lib
    elif leg.os == "android":
        args += ["--android", "--android_abi", leg.arch, "--android_api", engine.pins["android_api"],
                 "--android_ndk_path", "{env:ANDROID_NDK_HOME}", "--android_sdk_path", "{env?:ANDROID_SDK_ROOT}"]
    elif leg.os == "wasm":
        args += ["--build_wasm_static_lib", "--enable_wasm_simd", "--enable_wasm_threads", "--disable_rtti"]
    return args, extra


def _accelerator_args(leg: Leg) -> list[str]:
    return [f"--use_{acc}" for acc in leg.accelerator if acc in ("coreml", "dml")]


def _build_py(leg: Leg, build_dir: str, platform_args: list[str], extra_defines: list[str]) -> tuple[str, ...]:
    return kit.join_args(
        ["{python}", "{src}/tools/ci_build/build.py", "--build_dir", build_dir,
         "--config", kit.build_type(leg), "--parallel", "--skip_tests", "--compile_no_warning_as_error"],
        ["--build_shared_lib"] if leg.kind == "shared" else [],
        _accelerator_args(leg),
        platform_args,
        ["--cmake_extra_defines", *COMMON_DEFINES, *extra_defines],
    )


def _re2(build_dir: str, config: str) -> Command:
    # re2 is EXCLUDE_FROM_ALL and only include-attached: a static build never compiles it.
    return Command("re2", ("cmake", "--build", f"{build_dir}/{config}", "--config", config, "--target", "re2"))


def _headers(leg: Leg) -> list[CopyRule]:
    rules = [CopyRule(SESSION_HEADERS, "include"), *(CopyRule(h, "include") for h in CPU_HEADERS)]
    rules += [CopyRule(EP_HEADERS[acc], "include") for acc in leg.accelerator if acc in EP_HEADERS]
    return rules


def _contract(leg: Leg, libs: tuple[str, ...], versions: tuple[VersionProbe, ...] = ()) -> Contract:
    """Headers and libraries; which execution providers are compiled in is told by their
    binary evidence (engines/contracts.toml), the same for every leg."""
    main_lib = libs[0] if libs else ""
    symbols = ((main_lib, "OrtGetApiBase"),) if leg.os not in ("android", "wasm") else ()
    return Contract(
        required=("include/onnxruntime_c_api.h", "include/onnxruntime_cxx_api.h", *libs),
        # Headers advertise execution providers: the cuda package offers CUDA, not TensorRT.
        forbidden=("**/*tensorrt*",) if leg.flavor == "cuda" else (),
        symbols=symbols,
        install_names=((main_lib, MACOS_INSTALL_NAME),) if leg.os == "macos" and leg.kind == "shared" else (),
        header_api=("include/onnxruntime_c_api.h", main_lib) if main_lib else None,
        versions=versions,
    )


def _smoke(leg: Leg) -> Smoke:
    # The CUDA pass runs only where an NVIDIA GPU is: the program probes for one.
    probes = ("cuda",) if leg.flavor == "cuda" else ()
    return Smoke("smoke/onnxruntime", model="add.onnx", c_abi=True, probes=probes)


def _source_plan(leg: Leg, engine: Engine, archive: str) -> Plan:
    platform_args, extra = _platform_args(leg, engine)
    config = kit.build_type(leg)
    # WASM's emsdk is a submodule the source is checked out with (engine.toml [[submodules]]).
    deps, serve, notes = _deps(leg, engine)
    build = [*serve, Command("build.py", _build_py(leg, "{build}", platform_args, extra),
                             network=not _served(leg, deps))]
    collect = _headers(leg) + list(kit.license_texts(engine, "{src}", LICENSE_TEXTS))
    bundle = None
    fixups: list[Command] = []
    versions: tuple[VersionProbe, ...] = ()
    if leg.os == "wasm":
        collect.append(CopyRule(f"{{build}}/{config}/libonnxruntime_webassembly.a", "lib", rename="libonnxruntime.a"))
        libs: tuple[str, ...] = ("lib/libonnxruntime.a",)
    elif leg.kind == "shared" and leg.os == "macos":
        collect.append(CopyRule(f"{{build}}/{config}/libonnxruntime.*.*.*.dylib", "lib", rename="libonnxruntime.dylib"))
        fixups.append(Command("install-name", ("install_name_tool", "-id", MACOS_INSTALL_NAME,
                                               "{stage}/lib/libonnxruntime.dylib"), cwd="{stage}"))
        libs = ("lib/libonnxruntime.dylib",)
        versions = (VersionProbe("dylib", "lib/libonnxruntime.dylib"),)
    elif leg.kind == "shared" and leg.os == "windows":
        collect += [CopyRule(f"{{build}}/{config}/{name}", "lib")
                    for name in ("onnxruntime.dll", "onnxruntime.lib", "DirectML.dll")]
        libs = ("lib/onnxruntime.dll", "lib/onnxruntime.lib")
        versions = (VersionProbe("dll", "lib/onnxruntime.dll"),)
    else:
        build.append(_re2("{build}", config))
        output = "lib/" + kit.static_lib_name(leg, "onnxruntime")
        bundle = Bundle(output=output, libraries_from=f"{{build}}/{config}", exclude=BUNDLE_EXCLUDE)
        libs = (output,)
    return Plan(
        leg=leg, version=engine.version, archive=archive,
        downloads=(kit.git_source(engine), *deps),
        patches=kit.patches_for(engine, leg),
        build=tuple(build), collect=tuple(collect), bundle=bundle, fixups=tuple(fixups),
        contract=_contract(leg, libs, versions), smoke=_smoke(leg), notes=notes,
    )


def _ios_plan(leg: Leg, engine: Engine, archive: str) -> Plan:
    deps, serve, notes = _deps(leg, engine)
    build: list[Command] = list(serve)
    for slice_name, sysroot in (("device", "iphoneos"), ("simulator", "iphonesimulator")):
        slice_dir = f"{{build}}/{slice_name}"
        args = ["--ios", "--use_xcode", "--apple_sysroot", sysroot, "--osx_arch", "arm64",
                "--apple_deploy_target", engine.pins["apple_deploy_target"], "--build_apple_framework"]
        build.append(Command(f"build.py {slice_name}", _build_py(leg, slice_dir, args, []),
                             network=not _served(leg, deps)))
        build.append(_re2(slice_dir, "Release"))
        build.append(Command(f"bundle {slice_name}", (
            "{python}", "-m", "backends.steps.bundle", "--from-tree", f"{slice_dir}/Release",
            # Upstream kept full libprotobuf in the iOS slices only (docs/upstream.md#ort-ios);
            # same rule as desktop here.
            "--exclude", BUNDLE_EXCLUDE, "--out", f"{slice_dir}/libonnxruntime.a")))
    # The headers are staged first (include/), then fused with both slices into the framework.
    xcframework = Command("xcframework", (
        "xcodebuild", "-create-xcframework",
        "-library", "{build}/device/libonnxruntime.a", "-headers", "{stage}/include",
        "-library", "{build}/simulator/libonnxruntime.a", "-headers", "{stage}/include",
        "-output", "{stage}/onnxruntime.xcframework"), cwd="{stage}")
    drop_headers = Command("drop loose headers", ("cmake", "-E", "rm", "-rf", "{stage}/include"), cwd="{stage}")
    return Plan(
        leg=leg, version=engine.version, archive=archive,
        downloads=(kit.git_source(engine), *deps),
        patches=kit.patches_for(engine, leg),
        build=tuple(build),
        collect=(*_headers(leg), *kit.license_texts(engine, "{src}", LICENSE_TEXTS)),
        fixups=(xcframework, drop_headers),
        contract=Contract(required=("onnxruntime.xcframework/Info.plist",
                                    "onnxruntime.xcframework/*/Headers/onnxruntime_c_api.h")),
        notes=("no iOS smoke: the xcframework is checked by its contract only", *notes),
    )


def _prebuilt_plan(leg: Leg, engine: Engine, archive: str) -> Plan:
    if leg.platform == "android":
        download = kit.url_source(engine, "aar")
        texts, text_rules = kit.license_downloads(engine, AAR_LICENSE_SOURCES)
        collect = [CopyRule("{extract:aar}/headers/**", "include"), *text_rules]
        collect += [CopyRule(f"{{extract:aar}}/jni/{abi}/libonnxruntime.so", f"lib/{abi}")
                    for abi in leg.params["abis"].split()]
        libs: tuple[str, ...] = tuple(f"lib/{abi}/libonnxruntime.so" for abi in leg.params["abis"].split())
        return Plan(leg=leg, version=engine.version, archive=archive, downloads=(download, *texts),
                    collect=tuple(collect), contract=_contract(leg, libs))
    download = kit.url_source(engine, "release", leg.params)
    root = "{extract:release}/*"
    collect = [CopyRule(f"{root}/include/**", "include"), *kit.license_texts(engine, root, LICENSE_TEXTS)]
    exclude: list[str] = []
    cuda = leg.flavor == "cuda"
    if leg.os == "linux":
        collect.append(CopyRule(f"{root}/lib/libonnxruntime.so*", "lib"))
        if cuda:
            collect += [CopyRule(f"{root}/lib/libonnxruntime_providers_shared.so", "lib"),
                        CopyRule(f"{root}/lib/libonnxruntime_providers_cuda.so", "lib")]
        libs = ("lib/libonnxruntime.so",)
    else:
        # Only the DLL and its import library: no ~400 MB .pdb, no bridge shim on CPU legs.
        collect += [CopyRule(f"{root}/lib/onnxruntime.dll", "lib"), CopyRule(f"{root}/lib/onnxruntime.lib", "lib")]
        if cuda:
            collect += [CopyRule(f"{root}/lib/onnxruntime_providers_shared.dll", "lib"),
                        CopyRule(f"{root}/lib/onnxruntime_providers_shared.lib", "lib", required=False),
                        CopyRule(f"{root}/lib/onnxruntime_providers_cuda.dll", "lib")]
        libs = ("lib/onnxruntime.dll", "lib/onnxruntime.lib")
    if cuda:
        # Headers advertise execution providers: the cuda package offers CUDA, not DML or TensorRT.
        exclude += ["include/**/dml_provider_factory.h", "include/**/tensorrt_provider_factory.h"]
    else:
        exclude += [f"include/**/{name}" for name in EP_HEADER_FILES.values()]
    contract = _contract(leg, libs, _release_versions(leg))
    if cuda:  # the CUDA provider is its evidence; ORT loads it through the shared bridge
        bridge = "lib/libonnxruntime_providers_shared.so" if leg.os == "linux" else "lib/onnxruntime_providers_shared.dll"
        contract = replace(contract, required=contract.required + (bridge,))
    return Plan(leg=leg, version=engine.version, archive=archive, downloads=(download,),
                collect=tuple(collect), exclude=tuple(exclude), contract=contract, smoke=_smoke(leg))


# The execution providers this recipe builds: CoreML and DirectML from source (build.py
# --use_coreml / --use_dml), CUDA from upstream's gpu_cuda13 releases.
ACCELERATORS = {
    "coreml": kit.Support(("macos", "ios")),
    "dml": kit.Support(("windows",)),
    "cuda": kit.Support(("linux-x86_64", "windows-x86_64"), ("prebuilt",)),
}


def validate(leg: Leg) -> None:
    kit.check_accelerators(leg, ACCELERATORS)
    if leg.source == "prebuilt":
        released = leg.kind == "shared" and (leg.os in ("linux", "windows") or leg.platform == "android")
        kit.refuse_unless(leg, released, "repackages upstream's shared releases only: linux, windows and "
                                         "android (the AAR)")
        needed = ("abis",) if leg.platform == "android" else ("asset", "ext")
        kit.refuse_unless(leg, all(key in leg.params for key in needed),
                          f"needs params {', '.join(needed)} to name the release file")
    elif leg.kind == "shared":
        kit.refuse_unless(leg, leg.os in ("macos", "windows"),
                          "builds shared libraries from source on macos and windows only; elsewhere shared "
                          "legs repackage upstream's release (source = \"prebuilt\")")


def _release_versions(leg: Leg) -> tuple[VersionProbe, ...]:
    """The release's library states its version: `libonnxruntime.so.1.26.0` with ELF
    version VERS_1.26.0; onnxruntime.dll's VERSIONINFO (1.26.<build date>)."""
    if leg.os == "linux":
        return (VersionProbe("file-name", "lib/libonnxruntime.so.*"),
                VersionProbe("elf-version", "lib/libonnxruntime.so", "VERS_"))
    return (VersionProbe("dll", "lib/onnxruntime.dll"),)


def plan(leg: Leg, engine: Engine, archive: str) -> Plan:
    if leg.platform == "ios":
        return _ios_plan(leg, engine, archive)
    if leg.source == "prebuilt":
        return _prebuilt_plan(leg, engine, archive)
    return _source_plan(leg, engine, archive)
