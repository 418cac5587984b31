"""TFLite C API: our CMake wrapper (engines/tflite/cmake) over the pinned TensorFlow tree on
desktop and Android; Google's TensorFlowLiteC xcframeworks repackaged on iOS.

Upstream facts: docs/upstream.md#tflite (wrapper semantics, layout, iOS), #leg-names (base
presets), #variant-legs (Metal / CoreML variants), #static-bundle (bundling).
"""
from __future__ import annotations

from backends.model import recipe_kit as kit
from backends.model.engine import Engine
from backends.model.leg import Leg
from typing import Sequence

from backends.model.plan import Bundle, Command, Contract, CopyRule, Download, Plan, Smoke, frozen
from backends.util.line_endings import checkout_sha256

# Our wrapper project, relative to the repository root: configure runs there (cwd "."; SCons
# works from the SConstruct directory), like Smoke.project paths.
WRAPPER = "engines/tflite/cmake"
LIBNAME = "tensorflowlite_c"
HEADERS = (
    "include/tensorflow/lite/c_api.h",
    "include/tensorflow/lite/c_api_experimental.h",
    "include/tensorflow/lite/c_api_types.h",
    "include/tensorflow/lite/common.h",
    "include/tensorflow/lite/builtin_ops.h",
    "include/tensorflow/lite/core/c/c_api.h",
)
API_SYMBOLS = ("TfLiteInterpreterCreate", "TfLiteModelCreate")
# Shipped beside the static Metal bundle (as upstream did); linked into the shared dylib.
METAL_LIB = "lib/libmetal_delegate.a"
# Google's delegate xcframeworks, per accelerator (pod Metal / CoreML subspecs, same tarball).
IOS_FRAMEWORK = "TensorFlowLiteC"
IOS_DELEGATE_FRAMEWORKS = {"metal": "TensorFlowLiteCMetal", "coreml": "TensorFlowLiteCCoreML"}
PODSPEC_FIELD = "source.http"  # the podspec's field naming the release tarball
IOS_SMOKE_DEFINES = {  # the smoke builds for the simulator and runs under `simctl spawn`
    "CMAKE_SYSTEM_NAME": "iOS",
    "CMAKE_OSX_SYSROOT": "iphonesimulator",
    "CMAKE_OSX_ARCHITECTURES": "arm64",
    "CMAKE_OSX_DEPLOYMENT_TARGET": "12.0",
}

NOTES = (
    "configure runs from the repository root (cwd .) on our wrapper engines/tflite/cmake; "
    "TFLITE_WRAPPER_SHA256 puts the wrapper's content into the build step's signature",
)
IOS_NOTES = (
    "two-stage fetch: the podspec (CocoaPods Specs `master`, pinned by its sha256) names the "
    "release tarball in source.http; backends.steps.podspec fetches that through the same cache, "
    "verifying it against the sha256 pinned under the tarball's file name in engines/tflite/engine.toml",
)


# tensorflow/lite/tools/cmake/modules/*.cmake's OverridableFetchContent_Declare downloads: fetched
# and pinned by the project, handed over by upstream's own override variables.
MODULES_READER = "tflite-cmake"
MODULES_OVERRIDE = ("served by OVERRIDABLE_FETCH_CONTENT_<name>_URL (a local file) and _URL_HASH (its pinned "
                    "sha256), which also turn a GIT_REPOSITORY declaration into that archive")


def override_defines(downloads: Sequence[Download]) -> dict[str, str]:
    """OverridableFetchContent's variables for each fetched module download."""
    values: dict[str, str] = {}
    for download in downloads:
        assert download.upstream is not None
        prefix = f"OVERRIDABLE_FETCH_CONTENT_{download.upstream.name}"
        values[f"{prefix}_URL"] = f"{{download:{download.name}}}"
        if download.sha256:
            values[f"{prefix}_URL_HASH"] = f"SHA256={download.sha256}"
    return values


def _metal(leg: Leg) -> bool:
    return "metal" in leg.accelerator


def _platform_defines(leg: Leg, engine: Engine) -> dict[str, str]:
    if leg.os == "macos":
        return {"CMAKE_OSX_ARCHITECTURES": leg.arch,
                "CMAKE_OSX_DEPLOYMENT_TARGET": engine.pins["macos_deploy_target"]}
    if leg.os == "android":
        return kit.android_toolchain_defines(leg, engine.pins["android_api"])
    # Upstream's linux-arm64 base set CMAKE_SYSTEM_NAME/PROCESSOR, turning the native aarch64
    # build into a cross-compile (docs/upstream.md#leg-names); native builds here set neither.
    return {}


def configure_argv(leg: Leg, engine: Engine, modules: Sequence[Download] = ()) -> tuple[str, ...]:
    values = {
        "TFLITE_SOURCE_DIR": "{src}",
        "CMAKE_BUILD_TYPE": kit.build_type(leg),
        "TFLITE_BUILD_STATIC": kit.on_off(leg.kind == "static"),
        **_platform_defines(leg, engine),
    }
    if _metal(leg):
        values["TFLITE_BUILD_METAL_DELEGATE"] = "ON"
    values.update(override_defines(modules))
    return ("cmake", "-S", WRAPPER, "-B", "{build}", "-G", "Ninja", *kit.defines(values))


def wrapper_digest(engine: Engine) -> str:
    """The wrapper's sha256, the same in a CRLF checkout (the plan is part of the leg key)."""
    return checkout_sha256(engine.root / "cmake" / "CMakeLists.txt")


def _build(leg: Leg, engine: Engine, modules: Sequence[Download] = ()) -> list[Command]:
    config = kit.build_type(leg)
    # The step graph keys a build on its commands, not on project files: the digest makes an
    # edit of the wrapper rebuild the TFLite legs (and only them).
    digest = frozen({"TFLITE_WRAPPER_SHA256": wrapper_digest(engine)})
    check = [kit.check_build_downloads(engine, MODULES_READER)] if modules else []
    return [
        *check,
        # Cache variables are sticky: a removed -D would otherwise survive into the next configure.
        Command("fresh cache", ("cmake", "-E", "rm", "-f", "{build}/CMakeCache.txt")),
        Command("configure", configure_argv(leg, engine, modules), env=digest, cwd=".", network=not modules),
        Command("build", ("cmake", "--build", "{build}", "--config", config, "-j", "{jobs}"), network=not modules),
        Command("clean install", ("cmake", "-E", "rm", "-rf", "{install}")),
        Command("install", ("cmake", "--install", "{build}", "--config", config, "--prefix", "{install}")),
    ]


def _shared_libs(leg: Leg) -> tuple[str, ...]:
    if leg.os == "windows":
        return (f"lib/{LIBNAME}.dll", f"lib/{LIBNAME}.lib")  # the DLL and its import library
    return ("lib/" + kit.lib_file(leg, LIBNAME),)


def _contract(leg: Leg, libs: tuple[str, ...]) -> Contract:
    """The C API; the Metal delegate is told by its binary evidence (engines/contracts.toml).
    The shared Metal package links the delegate into the dylib, entry points exported: a
    separate `libmetal_delegate.a` could not link against the dylib's hidden internals."""
    return Contract(
        required=(*HEADERS, *libs),
        forbidden=(METAL_LIB,) if _metal(leg) and leg.kind == "shared" else (),
        symbols=tuple((libs[0], symbol) for symbol in API_SYMBOLS),
    )


def _license_rules(engine: Engine) -> list[CopyRule]:
    """TensorFlow's LICENSE, and those of the third-party sources the build fetched and linked
    in (abseil, ruy, XNNPACK, ...: `<build>/<dependency>/LICENSE*`), whatever the build fetched."""
    return [*kit.license_texts(engine, "{src}", ("LICENSE",)),
            CopyRule("{build}/**/LICENSE*", f"{kit.license_dir(engine.name)}/third_party", required=False)]


def _source_plan(leg: Leg, engine: Engine, archive: str) -> Plan:
    modules = kit.build_downloads(engine, leg, MODULES_READER)
    collect = [CopyRule("{install}/include/**", "include"), *_license_rules(engine)]
    bundle = None
    if leg.kind == "static":
        # The installed archive holds only the C-API objects: merge the whole build tree
        # (Metal legs thereby also carry the delegate) into the one library.
        output = "lib/" + kit.static_lib_name(leg, LIBNAME)
        bundle = Bundle(output=output, libraries_from="{build}", exclude=kit.DEFAULT_BUNDLE_EXCLUDE)
        libs: tuple[str, ...] = (output,)
        if _metal(leg):  # upstream's layout: the delegate archive beside the bundle too
            collect.append(CopyRule("{install}/" + METAL_LIB, "lib"))
    else:
        collect.append(CopyRule("{install}/lib/**", "lib"))
        libs = _shared_libs(leg)
    return Plan(
        leg=leg, version=engine.version, archive=archive,
        downloads=(kit.git_source(engine), *modules),
        patches=kit.patches_for(engine, leg),
        build=tuple(_build(leg, engine, modules)),
        collect=tuple(collect),
        bundle=bundle,
        contract=_contract(leg, libs),
        smoke=Smoke("smoke/tflite", model="add.tflite", probes=leg.accelerator),  # Metal probed at run time
        notes=NOTES + (kit.where_from(engine, MODULES_READER, len(modules), MODULES_OVERRIDE),),
    )


def _ios_frameworks(leg: Leg) -> list[str]:
    return [IOS_FRAMEWORK] + [IOS_DELEGATE_FRAMEWORKS[a] for a in leg.accelerator if a in IOS_DELEGATE_FRAMEWORKS]


def podspec_argv(leg: Leg) -> tuple[str, ...]:
    return ("{python}", "-m", "backends.steps.podspec", "{download:podspec}",
            "--field", PODSPEC_FIELD, "--pins", "engines/tflite/engine.toml",
            "--xcframeworks", *_ios_frameworks(leg), "--out", "{build}/xcframeworks")


def _ios_contract(leg: Leg) -> Contract:
    binary = f"{IOS_FRAMEWORK}.framework/{IOS_FRAMEWORK}"
    return Contract(required=(f"{IOS_FRAMEWORK}.xcframework/Info.plist",
                              f"{IOS_FRAMEWORK}.xcframework/ios-arm64/{binary}",
                              f"{IOS_FRAMEWORK}.xcframework/*simulator*/{binary}"))


def _ios_plan(leg: Leg, engine: Engine, archive: str) -> Plan:
    texts, text_rules = kit.license_downloads(engine, {"LICENSE": "license"})
    return Plan(
        leg=leg, version=engine.version, archive=archive,
        # Every version's podspec is called TensorFlowLiteC.podspec.json: pin it under a versioned name.
        downloads=(kit.url_source(engine, "podspec", unpack=False, names=PODSPEC_FIELD,
                                  filename=f"{IOS_FRAMEWORK}-{engine.version}.podspec.json"), *texts),
        build=(Command("podspec", podspec_argv(leg), cwd="."),),  # the repository root, for --pins
        collect=(*(CopyRule(f"{{build}}/xcframeworks/{name}.xcframework/**", f"{name}.xcframework")
                   for name in _ios_frameworks(leg)), *text_rules),
        contract=_ios_contract(leg),
        smoke=Smoke("smoke/tflite", defines=IOS_SMOKE_DEFINES, model="add.tflite", probes=leg.accelerator),
        notes=IOS_NOTES + _ios_smoke_notes(leg),
    )


def _ios_smoke_notes(leg: Leg) -> tuple[str, ...]:
    notes: tuple[str, ...] = ("smoke: a simulator build, run with `xcrun simctl spawn` on a booted device",)
    if leg.accelerator:
        notes += ("the smoke runs a Metal and a CoreML pass through the delegate xcframeworks "
                  "(docs/history.md#open-questions); the Metal pass only where the probe finds a GPU (a "
                  "simulator on a virtual machine has none: recorded as not available on this runner)",)
    return notes


# The Metal delegate from source on macOS; Google's delegate xcframeworks on iOS.
DESKTOP_ACCELERATORS = {"metal": kit.Support(("macos",))}
IOS_ACCELERATORS = {acc: kit.Support(("ios",), ("prebuilt",)) for acc in IOS_DELEGATE_FRAMEWORKS}


def validate(leg: Leg) -> None:
    kit.refuse_unless(leg, (leg.platform == "ios") == (leg.source == "prebuilt"),
                      "repackages Google's xcframeworks on ios and builds every other platform from source")
    kit.check_accelerators(leg, IOS_ACCELERATORS if leg.platform == "ios" else DESKTOP_ACCELERATORS)
    kit.refuse_unless(leg, leg.os != "wasm", "has no WASM toolchain wiring (upstream built WASM only standalone)")


def plan(leg: Leg, engine: Engine, archive: str) -> Plan:
    if leg.platform == "ios":
        return _ios_plan(leg, engine, archive)
    return _source_plan(leg, engine, archive)
