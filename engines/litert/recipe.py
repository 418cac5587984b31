"""LiteRT C API: upstream's prebuilt `litert/prebuilt/` binaries where they exist, Bazel at the
same commit elsewhere (static legs merge the link closure into one archive).

Upstream facts: docs/upstream.md#litert (why one commit pins headers, binaries and builds;
flags; closure merge; Android container; iOS), #legs-per-engine (which legs are prebuilt).
"""
from __future__ import annotations

from dataclasses import replace

from backends.model import recipe_kit as kit
from backends.model.engine import Engine
from backends.model.leg import Leg
from backends.model.plan import Bundle, Command, Contract, CopyRule, Download, Plan, Smoke, frozen
from backends.steps.bazel_closure import COLLECT_STAR

ENVIRONMENT_HEADER = "include/litert/c/litert_environment.h"
BUILD_CONFIG_HEADER = "include/litert/build_common/build_config.h"
SYMBOL = "LiteRtCreateEnvironment"
HEADER_RULE = CopyRule("{extract:headers}/*/litert/c/**/*.h", "include/litert/c")
# Every leg has the repository's tarball at the pinned commit (the headers): its LICENSE too.
LICENSE_RULE = CopyRule("{extract:headers}/*/LICENSE", kit.license_dir("litert"), rename="LICENSE")

# GPU and NPU stay out of every leg (LiteRT GPU is out of scope, docs/upstream.md#variant-model).
DEFINES = ("--define=litert_disable_gpu=true", "--define=litert_disable_npu=true")
STATIC_TARGET = "//litert/c:litert_runtime_c_api_so_shim"
SHARED_TARGETS = {"macos": "//litert/c:litert_runtime_c_api_shared_lib", "windows": "//litert/c:libLiteRt"}
SHARED_FILES = {"macos": "libLiteRt.dylib", "windows": "libLiteRt.dll"}
MACOS_X86_STATIC = (
    # A plain cc_library needs the Apple transition, or NEON_2_SSE.h is unwired.
    "--config=macos", "--cpu=darwin_x86_64", "--macos_minimum_os=11.0",
    "--platforms=@build_bazel_apple_support//platforms:macos_x86_64", "--config=bulk_test_cpu",
)
# The system libstdc++'s std::filesystem ABI, not the hermetic toolchain's.
LINUX_X86_STATIC = ("--repo_env=USE_HERMETIC_CC_TOOLCHAIN=0", "--noincompatible_enable_cc_toolchain_resolution")
IOS_SLICES = {"ios_arm64": "ios-arm64", "ios_sim_arm64": "ios-arm64-simulator"}
IOS_MIN_OS = "13.0"
SELF_CONTAINED_PREFIXES = "_ZN6tflite,_ZN6litert,_ZN4absl,_ZN3tsl"

CONFIGURE_ENV = {
    "PYTHON_BIN_PATH": "{python}",
    "USE_DEFAULT_PYTHON_LIB_PATH": "1",  # the first site-packages directory, as upstream chose
    "TF_NEED_ROCM": "0",
    "TF_NEED_CUDA": "0",
    "CC_OPT_FLAGS": "-Wno-sign-compare",
    "TF_SET_ANDROID_WORKSPACE": "0",
}
WINDOWS_ENV = {"MSYS2_ARG_CONV_EXCL": "*", "MSYS_NO_PATHCONV": "1"}  # never mangle //labels
# On Windows, Bazel's output base and LLVM live in the leg's short directory (build/s/<hash>,
# steps/context.py): under build/legs/<id>/work they were ~40 characters deeper than Bazel's
# default output base, and TensorFlow's deepest file lands 196 characters below the output
# base (MAX_PATH: 260; tests/unit/steps/test_windows_paths.py). Native separators: NSIS's /D
# takes the install directory as Windows spells it.
OUTPUT_BASE = "{build}/bazel-base"
WINDOWS_OUTPUT_BASE = "{short}\\bazel"
LLVM_DIR = "{short}\\llvm"  # LLVM 20 for clang-cl: the runner's LLVM 22 trips bazel#17863 (upstream: C:\\LLVM20)

ANDROID_ABI_CONFIG = {"arm64-v8a": "android_arm64", "x86_64": "android_x86_64"}
ANDROID_ENV = {
    "ANDROID_NDK_API_LEVEL": "21",
    "ANDROID_API_LEVEL": "35",
    "ANDROID_SDK_API_LEVEL": "35",
    "ANDROID_BUILD_TOOLS_VERSION": "35.0.1",
    "ANDROID_SDK_HOME": "/out/android-sdk",
    "TF_SET_ANDROID_WORKSPACE": "1",
    "TF_NEED_CLANG": "1",
    "TF_NEED_ROCM": "0",
    "TF_NEED_CUDA": "0",
    "CC_OPT_FLAGS": "-Wno-sign-compare",
}
CMDLINE_TOOLS = "https://dl.google.com/android/repository/commandlinetools-linux-13114758_latest.zip"

NOTES = (
    "fixup litert-build-config writes include/litert/build_common/build_config.h: an include guard "
    "around LITERT_BUILD_CONFIG_DISABLE_GPU 1 and LITERT_BUILD_CONFIG_DISABLE_NPU 1, and "
    "LITERT_DISABLE_GPU / LITERT_DISABLE_NPU defined from them (upstream synthesizes it too)",
    "headers, prebuilt binaries and from-source builds share one commit: headers from another ref "
    "shift LiteRtCreateModelFrom*'s arguments by one (a leading LiteRtEnvironment since v2.1.5)",
)
BAZEL_NOTES = (
    "every Bazel command uses a per-leg --output_base (Windows: the leg's short directory {short}, "
    "for MAX_PATH) and --symlink_prefix under {build}: legs sharing one source tree never share a "
    "server, outputs or bazel-bin (upstream's scratch files and bazel-bin were shared, "
    "docs/history.md#non-hermetic)",
    "configure.py reads its answers from stdin and takes EOF as the default answer, which is what "
    "upstream's `yes \"\" |` fed it; the runner gives it no stdin",
)
# Not yet served by the project (docs/hermetic-sources.md): the bazel reader lists them from
# the pinned tree (`python -m backends.steps.build_downloads record --reader bazel`).
HERMETIC_NOTE = ("upstream's build-time downloads: Bazel's http_archive repositories of the pinned workspace and "
                 "Bazel itself (.bazelversion, through bazelisk), read by the bazel reader; not yet served (the "
                 "override is --repository_cache/--distdir with --experimental_downloader_config)")
IMAGE_NOTE = ("upstream's build-time downloads: the Android leg pulls the build image by the tag in [pins] "
              "build_image; a digest (name@sha256:...) pins it, a tag does not")
BAZEL_READER = "bazel"
REPOSITORY_CACHE = "{build}/repository_cache"


def _served_note(recorded: int) -> str:
    return (f"upstream's build-time downloads: the {recorded} recorded http_archives of the pinned workspace "
            f"served by --repository_cache={REPOSITORY_CACHE}; Bazel itself (.bazelversion, through bazelisk) "
            "and repositories the workspace's .bzl files declare are not served")


CLOSURE_NOTE = (
    "backends.steps.bazel_closure: `labels` runs `<bazel> cquery <flags> <query> --output=label` and "
    "writes the unique labels without their configuration hash; `collect` runs the starlark collector "
    "(CcInfo.linking_context.linker_inputs[].libraries[] -> pic_static_library, static_library) over "
    "--target, keeps the archives that exist under `bazel info execution_root` (warning on each "
    "dropped one), fails with 'ERROR: no static archives materialised for <target>' when none remain, "
    "and writes their absolute paths one a line (what the bundle step reads)"
)
IMPORT_LIB_NOTE = (
    "fixup import-lib: dumps the DLL's exports and writes the import library with lib.exe/llvm-lib "
    "/machine; its .def stays outside the stage (upstream shipped LiteRt.def, "
    "docs/upstream.md#litert-commit-pin)"
)


# --- flags ---------------------------------------------------------------------------------

def _platform_flags(leg: Leg) -> tuple[str, ...]:
    if leg.os == "macos" and leg.arch == "arm64":
        return ("--config=macos_arm64", "--config=bulk_test_cpu")
    if leg.os == "macos":
        return MACOS_X86_STATIC if leg.kind == "static" else ("--config=bulk_test_cpu", "--cpu=darwin_x86_64")
    if leg.os == "linux":
        return ("--config=bulk_test_cpu", "--force_pic") + (LINUX_X86_STATIC if leg.arch == "x86_64" else ())
    if leg.os == "windows" and leg.arch == "arm64":
        # No arm64_windows XNNPACK microkernels; cpuinfo needs a newer revision than LiteRT pins.
        return ("--cpu=arm64_windows", "--define=tflite_with_xnnpack=false",
                "--override_repository=cpuinfo={src:cpuinfo}")
    if leg.os == "android":
        return (f"--config={ANDROID_ABI_CONFIG[leg.arch]}",)
    return ()  # Windows x64: .bazelrc's platform-specific config applies build:windows


def _ios_flags(cpu: str) -> tuple[str, ...]:
    # --cpu is essential (deps select() on it); no --config=ios: its -fembed-bitcode tripled
    # the archive and hid symbols from nm.
    return ("--config=apple-toolchain", "--apple_platform_type=ios", f"--cpu={cpu}",
            f"--platforms=@build_bazel_apple_support//platforms:{cpu}", "--copt=-Wno-c++11-narrowing",
            f"--ios_minimum_os={IOS_MIN_OS}", "--config=bulk_test_cpu")


def bazel_flags(leg: Leg, out: str = "{build}", platform: tuple[str, ...] | None = None) -> tuple[str, ...]:
    flags = _platform_flags(leg) if platform is None else platform
    debug = ("--compilation_mode=dbg",) if leg.config == "debug" else ()  # debug CRT /MDd
    return (*flags, *DEFINES, *debug, f"--symlink_prefix={out}/bazel-")


def output_base(leg: Leg) -> str:
    return WINDOWS_OUTPUT_BASE if leg.os == "windows" else OUTPUT_BASE


def _bazel(base: str = OUTPUT_BASE, program: str = "bazelisk") -> tuple[str, ...]:
    return (program, f"--output_base={base}")


# --- commands ------------------------------------------------------------------------------

def _configure() -> Command:
    return Command("configure.py", ("{python}", "configure.py"), env=frozen(CONFIGURE_ENV))


def _llvm_install() -> Command:
    # NSIS: silent, and /D must be the last argument, unquoted.
    return Command("llvm 20", ("{download:llvm}", "/S", f"/D={LLVM_DIR}"), cwd="{build}")


def _closure(target: str, query_kinds: str, flags: tuple[str, ...], scratch: str, tag: str = "",
             base: str = OUTPUT_BASE) -> list[Command]:
    """Build the target, materialise every library archive of its closure, list them."""
    closure = ("{python}", "-m", "backends.steps.bazel_closure")
    where = ("--bazel", "bazelisk", "--output-base", base)
    suffix = f" {tag}" if tag else ""
    return [
        Command("bazel build" + suffix, (*_bazel(base), "build", *flags, target)),
        Command("closure labels" + suffix, (*closure, "labels", "--query",
                                            f"kind('{query_kinds} rule', deps({target}))",
                                            "--out", f"{scratch}/labels.txt", *where, "--", *flags)),
        # The top-level build leaves the dependencies as objects: build each library for its archive.
        Command("closure build" + suffix, (*_bazel(base), "build", *flags,
                                           f"--target_pattern_file={scratch}/labels.txt")),
        Command("closure collect" + suffix, (*closure, "collect", "--target", target,
                                             "--out", f"{scratch}/closure.txt", *where, "--", *flags)),
    ]


def _archives(leg: Leg, engine: Engine) -> tuple[Download, ...]:
    """The workspace's recorded http_archives with upstream's sha256: what Bazel's repository
    cache serves by that hash (Bazel itself, `.bazelversion`'s, is bazelisk's and not served yet)."""
    return tuple(d for d in kit.build_downloads(engine, leg, BAZEL_READER)
                 if d.upstream is not None and d.upstream.upstream_hash.startswith("sha256:"))


def _repository_cache(archives: tuple[Download, ...]) -> list[Command]:
    """Lay the fetched archives where `--repository_cache` finds them (content_addressable/sha256/<hex>/file)."""
    if not archives:
        return []
    files = [f"--file={d.upstream.upstream_hash.removeprefix('sha256:')}={{download:{d.name}}}"
             for d in archives if d.upstream is not None]
    return [Command("repository cache", ("{python}", "-m", "backends.steps.build_downloads", "repository-cache",
                                         "--into", REPOSITORY_CACHE, *files))]


def _host_build(leg: Leg, archives: tuple[Download, ...] = ()) -> list[Command]:
    build = [_configure(), *_repository_cache(archives)]
    if leg.os == "windows" and leg.arch == "arm64":
        build.insert(0, _llvm_install())
    flags = bazel_flags(leg) + ((f"--repository_cache={REPOSITORY_CACHE}",) if archives else ())
    base = output_base(leg)
    if leg.kind == "static":
        return build + _closure(STATIC_TARGET, "cc_library", flags, "{build}", base=base)
    return build + [Command("bazel build", (*_bazel(base), "build", *flags, SHARED_TARGETS[leg.os]))]


def _android_script(leg: Leg) -> str:
    """The steps inside the ml-build image (upstream's android-build.sh), one shell line each.
    {build} inside the script is expanded to the host path: the closure list names host files."""
    flags = bazel_flags(leg, out="/out")
    bazel = " ".join(_bazel("/out/bazel-base", "bazel"))
    argv = " ".join(_shell_quote(a) for a in flags)
    query = _shell_quote(f"kind('cc_library rule', deps({STATIC_TARGET}))")
    sdkmanager = "/out/cmdline-tools/bin/sdkmanager --sdk_root=/out/android-sdk"
    return "\n".join([
        "set -euo pipefail",
        "command -v java >/dev/null || { apt-get update -q && apt-get install -yq default-jdk-headless; }",
        "command -v clang >/dev/null || { apt-get update -q && apt-get install -yq clang; }",
        "command -v clang >/dev/null || { echo 'ERROR: no clang available in container'; exit 1; }",
        "export CLANG_COMPILER_PATH=\"$(command -v clang)\" PYTHON_BIN_PATH=\"$(command -v python3)\"",
        f"[ -x /out/cmdline-tools/bin/sdkmanager ] || {{ curl -fsSL -o /tmp/clt.zip {CMDLINE_TOOLS} "
        "&& unzip -qo /tmp/clt.zip -d /out; }",
        # Not `yes | sdkmanager`: under pipefail `yes` dies of SIGPIPE (141) once sdkmanager has read
        # its answers, and the script would abort; a process substitution's status does not count.
        f"{sdkmanager} --licenses < <(yes) >/dev/null",
        f"{sdkmanager} platform-tools 'platforms;android-35' 'build-tools;35.0.1'",
        "[ -d \"$ANDROID_NDK_HOME/toolchains\" ] || { echo \"ERROR: NDK missing at $ANDROID_NDK_HOME\"; exit 1; }",
        "python3 configure.py </dev/null",
        f"{bazel} build {argv} {STATIC_TARGET}",
        f"{bazel} cquery {argv} {query} --output=label | awk 'NF{{print $1}}' | sort -u > /out/labels.txt",
        f"{bazel} build {argv} --target_pattern_file=/out/labels.txt",
        f"cat > /tmp/collect.star <<'STAR'\n{COLLECT_STAR}STAR",
        f"{bazel} cquery {argv} {STATIC_TARGET} --output=starlark --starlark:file=/tmp/collect.star "
        "| grep -v '^$' | sort -u > /out/closure.all",
        f"execroot=\"$({bazel} info {argv} execution_root)\"",
        ": > /out/closure.txt",
        "while IFS= read -r a; do if [ -f \"$execroot/$a\" ]; then "
        "echo \"{build}${execroot#/out}/$a\" >> /out/closure.txt; fi; done < /out/closure.all",
        f"[ -s /out/closure.txt ] || {{ echo 'ERROR: no static archives materialised for {STATIC_TARGET}'; exit 1; }}",
    ])


def _shell_quote(arg: str) -> str:
    return arg if all(c.isalnum() or c in "-_=/.:,@+" for c in arg) else "'" + arg.replace("'", "'\\''") + "'"


def _android_build(leg: Leg, engine: Engine) -> list[Command]:
    image = engine.pins["build_image"]
    ndk_home = f"/ndk/android-ndk-{engine.pins['android_ndk']}"
    env = {**ANDROID_ENV, "ANDROID_NDK_HOME": ndk_home}
    run = ["docker", "run", "--rm", "-v", "{src}:/src", "-v", "{build}:/out", "-v", "{extract:ndk}:/ndk:ro",
           "-w", "/src"]
    for key, value in env.items():
        run += ["-e", f"{key}={value}"]
    return [
        # A bare runner fails loading the TF workspace's cuda_redist / rules_ml_toolchain externals.
        Command("pull", ("docker", "pull", image)),
        Command("android build", (*run, image, "bash", "-c", _android_script(leg))),
    ]


def _ios_build(leg: Leg) -> list[Command]:
    build = [_configure()]
    for cpu in IOS_SLICES:
        scratch = f"{{build}}/{cpu}"
        # objc_library too: signpost_profiler.mm defines a symbol platform_profiler.o needs.
        build += _closure(STATIC_TARGET, "(cc_library|objc_library)", bazel_flags(leg, platform=_ios_flags(cpu)),
                          scratch, tag=cpu)
        archive = f"{scratch}/libLiteRt.a"
        build += [
            Command(f"merge {cpu}", ("{python}", "-m", "backends.steps.bundle", "--from-list",
                                     f"{scratch}/closure.txt", "--out", archive)),
            # A lazily linked smoke proves nothing about an archive: no internal symbol may dangle.
            Command(f"self-contained {cpu}", ("{python}", "-m", "backends.steps.bundle", "--check-self-contained",
                                              archive, "--prefixes", SELF_CONTAINED_PREFIXES)),
        ]
    return build


# --- plans ---------------------------------------------------------------------------------

def _release_download(leg: Leg, engine: Engine) -> Download:
    # Four legs fetch a file named libLiteRt.so.lfs, and every commit's is called so: pin each
    # under `<sub>-<commit>-<file>`, so a new commit pin is a new file pin, never a mismatch.
    filename = f"{leg.params['sub']}-{engine.pins['commit'][:12]}-{leg.params['file']}"
    return replace(kit.url_source(engine, "release", leg.params, unpack=False, filename=filename), kind="file")


def _lib_files(leg: Leg) -> tuple[str, ...]:
    if leg.kind == "static":
        return ("lib/LiteRt.lib",) if leg.os == "windows" else ("lib/libLiteRt.a",)
    if leg.os == "windows":
        return ("lib/libLiteRt.dll", "lib/LiteRt.lib")  # the DLL and the import library we synthesize
    return ("lib/" + kit.lib_file(leg, "LiteRt"),)


def _contract(leg: Leg) -> Contract:
    libs = _lib_files(leg)
    return Contract(
        required=(ENVIRONMENT_HEADER, BUILD_CONFIG_HEADER, *libs),
        forbidden=("lib/*.def",),
        symbols=((libs[0], SYMBOL),),
    )


def _build_config() -> Command:
    return Command("build_config.h", ("{python}", "-m", "backends.steps.fixups", "litert-build-config",
                                      "{stage}/" + BUILD_CONFIG_HEADER), cwd="{stage}")


def _import_lib(leg: Leg) -> Command:
    machine = leg.msvc_arch
    return Command("import lib", ("{python}", "-m", "backends.steps.fixups", "import-lib", "{stage}/lib/libLiteRt.dll",
                                  "--machine", machine, "--out", "{stage}/lib/LiteRt.lib"), cwd="{stage}")


def _librarian(leg: Leg) -> dict[str, str]:
    """How a Windows closure is merged, as upstream does: `lib /machine:x64`, and on arm64 LLVM's
    `llvm-lib /machine:arm64` (MSVC's lib.exe rejects clang-cl's archives with LNK1160)."""
    if leg.os != "windows":
        return {}
    tool = LLVM_DIR + "\\bin\\llvm-lib.exe" if leg.arch == "arm64" else ""
    return {"tool": tool, "machine": leg.msvc_arch}


def _fixups(leg: Leg) -> tuple[Command, ...]:
    fixups = [_build_config()]
    if leg.os == "windows" and leg.kind == "shared":
        fixups.append(_import_lib(leg))
    return tuple(fixups)


def _leg_plan(leg: Leg, engine: Engine, archive: str, *, downloads: list[Download],
              collect: tuple[CopyRule, ...], build: tuple[Command, ...] = (), env: dict[str, str] | None = None,
              bundle: Bundle | None = None, notes: tuple[str, ...] = ()) -> Plan:
    built = bool(build)
    if leg.os == "windows" and leg.kind == "shared":
        notes += (IMPORT_LIB_NOTE,)
    return Plan(
        leg=leg, version=engine.version, archive=archive,
        downloads=(kit.url_source(engine, "headers"), *downloads),
        patches=kit.patches_for(engine, leg),
        env=frozen(env),
        build=build,
        collect=(*collect, LICENSE_RULE),
        exclude=("lib/*.def",) if leg.os == "windows" else (),
        bundle=bundle,
        fixups=_fixups(leg),
        contract=_contract(leg),
        smoke=Smoke("smoke/litert", model="../tflite/add.tflite"),  # the TFLite smoke's model (y = 3x)
        notes=NOTES + notes,
        # configure.py writes its .bazelrc into the workspace (the Android container as root):
        # every building leg gets its own copy of the tree.
        private_source=built,
    )


def _prebuilt_plan(leg: Leg, engine: Engine, archive: str) -> Plan:
    collect = (HEADER_RULE, CopyRule("{download:release}", "lib", rename=leg.params["file"]))
    return _leg_plan(leg, engine, archive, downloads=[_release_download(leg, engine)], collect=collect)


def _source_downloads(leg: Leg, engine: Engine) -> list[Download]:
    downloads = [kit.git_source(engine)]
    if leg.os == "windows" and leg.arch == "arm64":
        downloads += [kit.url_source(engine, "llvm", unpack=False), kit.git_source(engine, "cpuinfo")]
    if leg.os == "android":
        downloads.append(kit.url_source(engine, "ndk"))
    return downloads


def _source_plan(leg: Leg, engine: Engine, archive: str) -> Plan:
    collect = [HEADER_RULE]
    bundle = None
    notes: tuple[str, ...] = BAZEL_NOTES
    env = dict(WINDOWS_ENV) if leg.os == "windows" else {}
    if leg.os == "windows" and leg.arch == "arm64":
        env.update({"USE_CLANG_CL": "1", "BAZEL_LLVM": LLVM_DIR})
    archives = () if leg.os == "android" else _archives(leg, engine)
    notes += (_served_note(len(archives)) if archives else HERMETIC_NOTE,)
    if leg.kind == "static":
        build = _android_build(leg, engine) if leg.os == "android" else _host_build(leg, archives)
        bundle = Bundle(output=_lib_files(leg)[0], libraries_from="{build}/closure.txt", **_librarian(leg))
        notes += (CLOSURE_NOTE,)
        if leg.os == "windows" and leg.arch == "arm64":
            notes += ("bundle: clang-cl archives need llvm-lib /machine:arm64 (lib.exe fails with LNK1160): the "
                      "merge uses the llvm-lib of the LLVM that compiled them, whatever the MSVC setup put on PATH",)
        if leg.os == "android":
            notes += (IMAGE_NOTE,) if "@sha256:" not in engine.pins["build_image"] else ()
            notes += ("android: the ml-build image runs the build with {build} as /out and the pinned NDK "
                      "as /ndk; it writes {build}/closure.txt with host paths",)
    else:
        build = _host_build(leg, archives)
        name = SHARED_FILES[leg.os]
        collect.append(CopyRule(f"{{build}}/bazel-bin/litert/c/**/{name}", "lib", rename=name))
    return _leg_plan(leg, engine, archive, downloads=[*_source_downloads(leg, engine), *archives],
                     collect=tuple(collect),
                     build=tuple(build), env=env, bundle=bundle, notes=notes)


def _ios_plan(leg: Leg, engine: Engine, archive: str) -> Plan:
    xcframework = ["xcodebuild", "-create-xcframework"]
    for cpu in IOS_SLICES:
        xcframework += ["-library", f"{{build}}/{cpu}/libLiteRt.a", "-headers", "{stage}/include"]
    fixups = (
        _build_config(),
        Command("xcframework", (*xcframework, "-output", "{stage}/LiteRt.xcframework"), cwd="{stage}"),
        Command("drop loose headers", ("cmake", "-E", "rm", "-rf", "{stage}/include"), cwd="{stage}"),
    )
    device = f"LiteRt.xcframework/{IOS_SLICES['ios_arm64']}"
    return Plan(
        leg=leg, version=engine.version, archive=archive,
        downloads=(kit.url_source(engine, "headers"), kit.git_source(engine)),
        build=tuple(_ios_build(leg)),
        collect=(HEADER_RULE, LICENSE_RULE),
        fixups=fixups,
        contract=Contract(
            required=("LiteRt.xcframework/Info.plist", f"{device}/libLiteRt.a",
                      f"LiteRt.xcframework/{IOS_SLICES['ios_sim_arm64']}/libLiteRt.a",
                      f"{device}/Headers/litert/c/litert_environment.h",
                      f"{device}/Headers/litert/build_common/build_config.h"),
            forbidden=("**/*.def",),
            symbols=((f"{device}/libLiteRt.a", SYMBOL),),
        ),
        notes=NOTES + BAZEL_NOTES + (HERMETIC_NOTE, CLOSURE_NOTE,
                                     "headers are staged first, then folded into both slices by xcodebuild "
                                     "in the fixup step", "no iOS smoke: the nm gates and the contract check it"),
        private_source=True,
    )


def validate(leg: Leg) -> None:
    kit.check_accelerators(leg, {})  # LiteRT GPU and NPU are out of scope: every leg is CPU-only
    kit.refuse_unless(leg, leg.os != "wasm", "has no WASM build")
    if leg.source == "prebuilt":
        kit.refuse_unless(leg, leg.kind == "shared" and {"sub", "file"} <= set(leg.params),
                          "repackages upstream's shared litert/prebuilt/<sub>/<file> binaries, named by params")
    elif leg.kind == "shared":
        kit.refuse_unless(leg, leg.os in SHARED_TARGETS,
                          f"builds shared libraries from source on {', '.join(SHARED_TARGETS)} only; "
                          "elsewhere shared legs repackage upstream's prebuilts")


def plan(leg: Leg, engine: Engine, archive: str) -> Plan:
    if leg.platform == "ios":
        return _ios_plan(leg, engine, archive)
    if leg.source == "prebuilt":
        return _prebuilt_plan(leg, engine, archive)
    return _source_plan(leg, engine, archive)
