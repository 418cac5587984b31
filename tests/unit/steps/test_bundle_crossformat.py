"""Static bundling, lipo and library inspection for ELF, Mach-O and COFF, all on a
Linux host: clang `-target` makes the objects, Debian's LLVM tools do the rest
(docs/upstream.md#offline-sources)."""
from __future__ import annotations

import filecmp
import os
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from backends.binfmt import inspect
from backends.model.matrix import load_matrix
from backends.model.plan import Bundle, Plan
from backends.model.recipe_kit import DEFAULT_BUNDLE_EXCLUDE
from backends.model.recipes import plan_all
from backends.steps import bundle
from backends.steps import stage as stage_step
from backends.steps.context import expand
from backends.steps.context import LegDirs
from backends.util import toolchain
from backends.steps.bundle import (
    BundleError, filter_libs, merge_static, static_libs_from_manifest, static_libs_from_ninja,
    undefined_internal_symbols,
)
from backends.binfmt.macho import macho_archs
from backends.binfmt.objects import object_format
from backends.steps.universal import UniversalError, lipo_create, universal_tree

MACOS_ARM = "arm64-apple-macos11"
MACOS_X86 = "x86_64-apple-macos11"
WINDOWS_X64 = "x86_64-pc-windows-msvc"
LINUX_X64 = "x86_64-pc-linux-gnu"
ROOT = Path(__file__).resolve().parents[3]

SOURCES = {
    "util_a": "int util_a(void) { return 1; }\n",
    "util_b": "int util_b(void) { return 2; }\n",
    # references one of the engine's own symbols and one from the C library
    "user": "extern int eng_missing(void); extern int puts(const char *);\n"
            "int eng_user(void) { puts(\"x\"); return eng_missing(); }\n",
    "provider": "int eng_missing(void) { return 7; }\n",
}


def tool(name: str) -> str:
    found = toolchain.find_tool(name)
    if found is None:
        pytest.skip(f"{name} is not installed (apt-get install llvm clang lld)")
    return found


def sh(*argv: str | Path, cwd: Path | None = None) -> str:
    completed = subprocess.run([str(arg) for arg in argv], cwd=cwd, capture_output=True,
                               text=True, check=False)
    assert completed.returncode == 0, f"{argv}: {completed.stdout}{completed.stderr}"
    return completed.stdout


def compile_c(target: str, source: str, out: Path) -> Path:
    out.parent.mkdir(parents=True, exist_ok=True)
    src = out.with_suffix(".c")
    src.write_text(SOURCES[source])
    sh(tool("clang"), "-target", target, "-c", src, "-o", out)
    return out


def nm_defined(path: Path, *extra: str) -> str:
    return sh(tool("llvm-nm"), "--defined-only", *extra, path)


@pytest.fixture(scope="module")
def work(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("crossformat")


Archiver = Callable[[Path, Path], None]


def with_ar(name: str) -> Archiver:
    def archive(lib: Path, obj: Path) -> None:
        sh(tool(name), "rc", lib, obj)
    return archive


def with_llvm_lib(lib: Path, obj: Path) -> None:
    # Run next to the object so the member is named plainly "util.obj".
    sh(tool("llvm-lib"), f"/out:{lib.name}", obj.name, cwd=lib.parent)


def archive_pair(work: Path, target: str, archive: Archiver, obj_suffix: str = ".o",
                 lib_suffix: str = ".a") -> tuple[Path, Path]:
    """Two archives that each hold a member named `util<obj_suffix>`, defining
    different symbols: what extract-and-rearchive would collapse into one."""
    libs = []
    for letter in "ab":
        directory = work / target / letter
        obj = compile_c(target, f"util_{letter}", directory / f"util{obj_suffix}")
        lib = directory / f"lib{letter}{lib_suffix}"
        archive(lib, obj)
        libs.append(lib)
    return libs[0], libs[1]


@pytest.fixture(scope="module")
def macho_bundles(work: Path) -> dict[str, Path]:
    """One merged static bundle per macOS architecture."""
    bundles = {}
    for target, arch in ((MACOS_ARM, "arm64"), (MACOS_X86, "x86_64")):
        liba, libb = archive_pair(work, target, with_ar("llvm-ar"))
        out = work / "bundles" / arch / "libeng.a"
        merge_static([liba, libb], out, "macho")
        bundles[arch] = out
    return bundles


# --- (a) ELF ----------------------------------------------------------------------------

def test_elf_merge_keeps_duplicate_member_names(work: Path) -> None:
    liba, libb = archive_pair(work / "spaced dir (x)", LINUX_X64, with_ar("ar"))
    out = work / "elf out" / "libbundle.a"
    merge_static([liba, libb], out, "elf", log=work / "logs" / "bundle.log")
    assert sh(tool("ar"), "t", out).split() == ["util.o", "util.o"]
    symbols = nm_defined(out)
    assert "util_a" in symbols and "util_b" in symbols
    assert object_format(out) == "elf"
    assert "ADDLIB" in (work / "logs" / "bundle.log").read_text()
    assert not [p for p in out.parent.iterdir() if p.name != out.name]  # no scratch left


def test_elf_merge_falls_back_to_llvm_ar(work: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    tool("llvm-ar")
    liba, libb = archive_pair(work / "fallback", LINUX_X64, with_ar("ar"))
    real_which = shutil.which
    monkeypatch.setattr(bundle.shutil, "which",
                        lambda name, *a, **k: None if name in ("ar", "ranlib")
                        else real_which(name, *a, **k))
    out = work / "fallback" / "libbundle.a"
    merge_static([liba, libb], out, "elf")
    symbols = nm_defined(out)
    assert "util_a" in symbols and "util_b" in symbols


def test_merge_errors_name_tool_and_output(work: Path) -> None:
    tool("ar")
    bogus = work / "bogus" / "libbad.a"
    bogus.parent.mkdir(parents=True, exist_ok=True)
    bogus.write_text("not an archive")
    with pytest.raises(BundleError, match=r"ar failed \(exit \d+\)") as caught:
        merge_static([bogus], work / "bogus" / "out.a", "elf")
    assert f"{bogus}: file format not recognized" in str(caught.value)
    assert not (work / "bogus" / "out.a").exists()
    with pytest.raises(BundleError, match="missing inputs"):
        merge_static([work / "nope.a"], work / "out.a", "elf")
    with pytest.raises(BundleError, match="unsupported object format 'wasm'"):
        merge_static([bogus], work / "out.a", "wasm")


# --- (b) Mach-O -------------------------------------------------------------------------

def test_macho_merge_keeps_duplicate_member_names(macho_bundles: dict[str, Path]) -> None:
    for arch, out in macho_bundles.items():
        assert sh(tool("llvm-ar"), "t", out).split() == ["util.o", "util.o"]
        symbols = nm_defined(out)
        assert "_util_a" in symbols and "_util_b" in symbols
        assert object_format(out) == "macho"
        assert macho_archs(out) == [arch]


# --- (c) universal ----------------------------------------------------------------------

def test_lipo_create_and_thin_back(work: Path, macho_bundles: dict[str, Path]) -> None:
    lipo = tool("llvm-lipo")
    fat = work / "universal" / "libeng.a"
    lipo_create([macho_bundles["x86_64"], macho_bundles["arm64"]], fat)
    info = sh(lipo, "-info", fat)
    assert "x86_64" in info and "arm64" in info
    assert sorted(macho_archs(fat)) == ["arm64", "x86_64"]
    assert object_format(fat) == "macho"
    thin = work / "universal" / "thin_arm64.a"
    sh(lipo, "-thin", "arm64", fat, "-output", thin)
    assert filecmp.cmp(thin, macho_bundles["arm64"], shallow=False)
    symbols = nm_defined(fat, "--arch=all")
    assert symbols.count("_util_a") == 2


def test_lipo_create_rejects_same_arch_and_fat_inputs(work: Path,
                                                      macho_bundles: dict[str, Path]) -> None:
    tool("llvm-lipo")
    with pytest.raises(UniversalError, match="both arm64"):
        lipo_create([macho_bundles["arm64"], macho_bundles["arm64"]], work / "x.a")
    fat = work / "universal-reject" / "fat.a"
    lipo_create([macho_bundles["x86_64"], macho_bundles["arm64"]], fat)
    with pytest.raises(UniversalError, match="must be thin"):
        lipo_create([fat, macho_bundles["arm64"]], work / "y.a")
    with pytest.raises(UniversalError, match="at least two"):
        lipo_create([macho_bundles["arm64"]], work / "z.a")


def make_package(root: Path, bundle_lib: Path, arch: str) -> Path:
    (root / "lib" / "cmake" / "foo").mkdir(parents=True)
    (root / "include").mkdir()
    shutil.copy2(bundle_lib, root / "lib" / "libfoo.a")
    os.symlink("libfoo.a", root / "lib" / "libfoo_alias.a")
    (root / "lib" / "cmake" / "foo" / "foo-config.cmake").write_text(f"# {arch}\n")
    (root / "include" / "foo.h").write_text("int util_a(void);\n")
    return root


def test_universal_tree(work: Path, macho_bundles: dict[str, Path]) -> None:
    tool("llvm-lipo")
    base = work / "trees"
    x86 = make_package(base / "x86", macho_bundles["x86_64"], "x86_64")
    arm = make_package(base / "arm", macho_bundles["arm64"], "arm64")
    (arm / "lib" / "default.metallib").write_bytes(b"metal")
    (x86 / "share").mkdir()
    (x86 / "share" / "x86-only.txt").write_text("x")
    out = base / "uni"
    (out / "stale").mkdir(parents=True)  # wiped first
    report = universal_tree(x86, arm, out)

    assert sorted(macho_archs(out / "lib" / "libfoo.a")) == ["arm64", "x86_64"]
    assert (out / "lib" / "libfoo_alias.a").is_symlink()
    assert os.readlink(out / "lib" / "libfoo_alias.a") == "libfoo.a"
    assert (out / "lib" / "cmake" / "foo" / "foo-config.cmake").read_text() == "# arm64\n"
    assert (out / "include" / "foo.h").is_file()
    assert (out / "lib" / "default.metallib").read_bytes() == b"metal"
    assert (out / "share" / "x86-only.txt").is_file()
    assert not (out / "stale").exists()
    assert report == [  # in path order
        "kept arm64 copy of lib/cmake/foo/foo-config.cmake (differs from x86_64)",
        "only in arm64: lib/default.metallib",
        "lipo lib/libfoo.a",
        "only in x86_64: share/x86-only.txt",
    ]


# --- (d) COFF ---------------------------------------------------------------------------

def test_coff_merge_keeps_duplicate_member_names(work: Path) -> None:
    liba, libb = archive_pair(work, WINDOWS_X64, with_llvm_lib, ".obj", ".lib")
    for lib in (liba, libb):
        assert sh(tool("llvm-ar"), "t", lib).split() == ["util.obj"]
    out = work / "coff" / "engine.lib"
    merge_static([liba, libb], out, "coff")
    assert sh(tool("llvm-ar"), "t", out).split() == ["util.obj", "util.obj"]
    symbols = nm_defined(out)
    assert "util_a" in symbols and "util_b" in symbols
    assert object_format(out) == "coff"
    assert object_format(liba.parent / "util.obj") == "coff"


WINDOWS_ARM64 = "aarch64-pc-windows-msvc"
# What MSVC's lib.exe says about clang-cl's archives on windows-11-arm.
FAKE_LIB_EXE = "#!/bin/sh\necho 'fatal error LNK1160: invalid archive member' >&2\nexit 1160\n"


def leg_dirs(root: Path) -> LegDirs:
    return LegDirs(src=root / "src", build=root / "work", install=root / "install", stage=root / "stage",
                   logs=root / "logs")


def litert_plan(leg_id: str) -> Plan:
    matrix = load_matrix(ROOT)
    return plan_all(matrix, [matrix.leg(leg_id)])[0]


@pytest.fixture
def msvc_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """This host as a Windows runner after the MSVC setup: lib.exe first on PATH (one that
    fails like MSVC's on clang-cl archives) and the Windows tool preferences."""
    bin_dir = tmp_path / "msvc-bin"
    bin_dir.mkdir()
    (bin_dir / "lib.exe").write_text(FAKE_LIB_EXE)
    (bin_dir / "lib.exe").chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setattr(toolchain, "_host", lambda: "win32")
    return bin_dir


def test_litert_windows_arm64_merges_with_its_own_llvm_lib(tmp_path: Path, msvc_environment: Path) -> None:
    plan = litert_plan("litert-windows-arm64-static")
    assert plan.bundle is not None
    dirs = leg_dirs(tmp_path / "leg")
    liba, libb = archive_pair(tmp_path / "closure", WINDOWS_ARM64, with_llvm_lib, ".obj", ".lib")
    dirs.build.mkdir(parents=True)
    (dirs.build / "closure.txt").write_text(f"{liba}\n{libb}\n")
    # The LLVM 20 the leg installs into {short}\llvm (its llvm-lib.exe is llvm-ar by that name);
    # the plan spells the path with Windows separators, one name here.
    librarian = Path(expand(plan.bundle.tool, dirs, {}))
    librarian.parent.mkdir(parents=True, exist_ok=True)
    librarian.symlink_to(tool("llvm-lib"))
    assert stage_step.bundle(plan.bundle, dirs, {}) == [str(liba), str(libb)]
    merged = dirs.stage / "lib" / "LiteRt.lib"
    assert sh(tool("llvm-ar"), "t", merged).split() == ["util.obj", "util.obj"]
    assert "Machine: IMAGE_FILE_MACHINE_ARM64" in sh(tool("llvm-readobj"), "--file-headers", merged)
    log = (dirs.logs / "bundle.log").read_text()
    assert str(librarian) in log and "lib.exe fatal" not in log


def test_coff_merge_passes_the_legs_machine(tmp_path: Path) -> None:
    """/MACHINE reaches the librarian: x64 members under an arm64 leg's merge are an error."""
    liba, libb = archive_pair(tmp_path, WINDOWS_X64, with_llvm_lib, ".obj", ".lib")
    with pytest.raises(BundleError, match="conflicts with library machine type arm64"):
        merge_static([liba, libb], tmp_path / "out.lib", "coff", machine="arm64")
    merge_static([liba, libb], tmp_path / "out.lib", "coff", machine="x64")
    with pytest.raises(BundleError, match="COFF libraries only"):
        merge_static([liba], tmp_path / "out.a", "elf", machine="x64")


def test_a_missing_librarian_is_named(tmp_path: Path) -> None:
    liba, _ = archive_pair(tmp_path, WINDOWS_X64, with_llvm_lib, ".obj", ".lib")
    with pytest.raises(BundleError, match="llvm/bin/llvm-lib.exe, does not exist"):
        merge_static([liba], tmp_path / "out.lib", "coff", tool=str(tmp_path / "llvm" / "bin" / "llvm-lib.exe"))


# --- (e) object_format ------------------------------------------------------------------

def test_object_format_detection(work: Path, macho_bundles: dict[str, Path]) -> None:
    base = work / "formats"
    elf_obj = compile_c(LINUX_X64, "util_a", base / "elf.o")
    macho_obj = compile_c(MACOS_ARM, "util_a", base / "macho.o")
    coff_obj = compile_c(WINDOWS_X64, "util_a", base / "coff.obj")
    assert object_format(elf_obj) == "elf"
    assert object_format(macho_obj) == "macho"
    assert object_format(coff_obj) == "coff"
    assert object_format(macho_bundles["arm64"]) == "macho"

    wasm_obj = base / "wasm.o"
    try:
        compile_c("wasm32-unknown-unknown", "util_a", wasm_obj)
    except AssertionError:  # clang built without the WebAssembly target
        wasm_obj.write_bytes(b"\0asm\x01\0\0\0")
    assert object_format(wasm_obj) == "wasm"
    wasm_lib = base / "libwasm.a"
    sh(tool("llvm-ar"), "rc", wasm_lib, wasm_obj)
    assert object_format(wasm_lib) == "wasm"

    text_member = base / "notes.txt"
    text_member.write_text("just text\n")
    generic = base / "libtext.a"
    sh(tool("llvm-ar"), "rc", generic, text_member)
    assert object_format(generic) == "ar"
    assert object_format(text_member) == "unknown"
    java = base / "Foo.class"
    java.write_bytes(b"\xca\xfe\xba\xbe\x00\x00\x00\x37" + b"\0" * 16)
    assert object_format(java) == "unknown"


# --- (f) self-containment ---------------------------------------------------------------

@pytest.mark.parametrize("target", [LINUX_X64, MACOS_ARM, WINDOWS_X64])
def test_undefined_internal_symbols(work: Path, target: str) -> None:
    base = work / "selfcontained" / target
    obj = ".obj" if "windows" in target else ".o"
    user = compile_c(target, "user", base / f"user{obj}")
    provider = compile_c(target, "provider", base / f"provider{obj}")
    dangling, complete = base / "libdangling.a", base / "libcomplete.a"
    sh(tool("llvm-ar"), "rc", dangling, user)
    sh(tool("llvm-ar"), "rc", complete, user, provider)
    assert undefined_internal_symbols(dangling, ["eng_"]) == ["eng_missing"]
    assert undefined_internal_symbols(complete, ["eng_"]) == []
    assert undefined_internal_symbols(dangling, ["_ZN6tflite"]) == []  # puts is not ours


# --- where the library list comes from ----------------------------------------------------

def test_static_libs_from_manifest_and_filter(tmp_path: Path) -> None:
    manifest = tmp_path / "install_manifest.txt"
    manifest.write_text("\n".join([
        "/p/include/x.h", "/p/lib/libexecutorch.a", "/p/lib/libflatccrt.a",
        "/p/lib/cmake/x.cmake", "/p/lib/libz.dll.a", "/p/lib/engine.lib",
        "/p/lib/libexecutorch.a", "",
    ]))
    libs = static_libs_from_manifest(manifest)
    assert libs == [Path("/p/lib/libexecutorch.a"), Path("/p/lib/libflatccrt.a"),
                    Path("/p/lib/engine.lib")]
    assert filter_libs(libs, "flatcc") == [Path("/p/lib/libexecutorch.a"),
                                           Path("/p/lib/engine.lib")]
    assert filter_libs(libs, "") == libs
    assert filter_libs([Path("/b/_deps/x-src/t.a"), Path("/b/testdata/in.a"),
                        Path("/b/lib.a")], r"(/testdata/|-src/)") == [Path("/b/lib.a")]
    with pytest.raises(BundleError, match="no CMake install manifest"):
        static_libs_from_manifest(tmp_path / "missing.txt")


def test_bundle_exclusion_matches_below_the_tree_not_where_it_lives(tmp_path: Path) -> None:
    """A checkout under `.../anira-backends-src/` (the default exclusion matches `-src/`) must
    not empty the bundle; fetched sources below the build tree are still left out."""
    dirs = leg_dirs(tmp_path / "anira-backends-src" / "build" / "legs" / "tflite-linux-x86_64-static")
    liba, libb = archive_pair(dirs.build / "lib", LINUX_X64, with_ar("llvm-ar"))
    fetched, _ = archive_pair(dirs.build / "_deps" / "abseil-src", LINUX_X64, with_ar("llvm-ar"))
    spec = Bundle(output="lib/libtensorflowlite_c.a", libraries_from="{build}", exclude=DEFAULT_BUNDLE_EXCLUDE)
    assert sorted(stage_step.bundle(spec, dirs, {})) == sorted([str(liba), str(libb)])
    assert fetched.is_file()
    assert sh(tool("llvm-ar"), "t", dirs.stage / spec.output).split() == ["util.o", "util.o"]


def test_static_libs_from_ninja_link_closure(tmp_path: Path) -> None:
    ninja = tool("ninja")
    (tmp_path / "a.c").write_text(SOURCES["util_a"])
    (tmp_path / "b.c").write_text(SOURCES["util_b"])
    system_lib = tmp_path / "sdk" / "libsystem.a"
    system_lib.parent.mkdir()
    system_lib.write_bytes(b"!<arch>\n")
    (tmp_path / "build.ninja").write_text(f"""\
rule touch
  command = touch $out
build a.o: touch a.c
build b.o: touch b.c
build c.o: touch a.c
build liba.a: touch a.o
build sub/libb.a: touch b.o
build libunrelated.a: touch c.o
build libengine.so: touch liba.a sub/libb.a | {system_lib}
build engine: phony libengine.so
""")
    sh(ninja, "-C", tmp_path, "engine")
    libs = static_libs_from_ninja(tmp_path, "engine")
    assert libs == [tmp_path / "liba.a", tmp_path / "sub" / "libb.a"]
    assert system_lib in static_libs_from_ninja(tmp_path, "engine", built_only=False)
    with pytest.raises(BundleError, match="ninja"):
        static_libs_from_ninja(tmp_path, "no-such-target")


# --- inspection ---------------------------------------------------------------------------

def test_inspect_elf_shared_object(work: Path) -> None:
    base = work / "inspect-elf"
    obj = base / "a.o"
    obj.parent.mkdir(parents=True)
    (base / "a.c").write_text(SOURCES["util_a"] + "static int hidden(void) { return 0; }\n")
    sh(tool("clang"), "-fPIC", "-c", base / "a.c", "-o", obj)
    so = base / "libutil.so"
    sh(tool("clang"), "-shared", obj, "-o", so)
    assert "util_a" in inspect.exported_symbols(so)
    assert "hidden" not in inspect.exported_symbols(so)
    assert any(name.startswith("libc.so") for name in inspect.needed_libraries(so))


def test_inspect_macho_dylib(work: Path) -> None:
    ld64 = tool("ld64.lld")
    base = work / "inspect-macho"
    dylibs = {}
    for target, arch in ((MACOS_ARM, "arm64"), (MACOS_X86, "x86_64")):
        obj = compile_c(target, "provider", base / arch / "provider.o")
        dep = base / arch / "libdep.dylib"
        sh(ld64, "-dylib", "-arch", arch, "-platform_version", "macos", "11.0", "11.0",
           "-install_name", "@rpath/libdep.dylib", "-o", dep, obj)
        user = compile_c(target, "util_b", base / arch / "user.o")
        lib = base / arch / "libeng.dylib"
        sh(ld64, "-dylib", "-arch", arch, "-platform_version", "macos", "12.0", "12.0",
           "-install_name", "@rpath/libeng.dylib", "-o", lib, user, dep)
        dylibs[arch] = lib
    assert inspect.exported_symbols(dylibs["arm64"]) == {"util_b"}
    assert inspect.needed_libraries(dylibs["arm64"]) == ["@rpath/libdep.dylib"]
    assert inspect.macho_min_os(dylibs["arm64"]) == {"arm64": "12.0"}
    tool("llvm-lipo")
    fat = base / "libeng.dylib"
    lipo_create([dylibs["x86_64"], dylibs["arm64"]], fat)
    assert inspect.macho_min_os(fat) == {"x86_64": "12.0", "arm64": "12.0"}
    assert inspect.needed_libraries(fat) == ["@rpath/libdep.dylib"]
    assert inspect.exported_symbols(fat) == {"util_b"}


def test_macho_min_os_of_static_archive(macho_bundles: dict[str, Path]) -> None:
    tool("llvm-otool")
    assert inspect.macho_min_os(macho_bundles["arm64"]) == {"arm64": "11.0"}


def test_inspect_dll_exports_and_imports(work: Path) -> None:
    lld_link = tool("lld-link")
    base = work / "inspect-dll"
    obj = compile_c(WINDOWS_X64, "util_a", base / "a.obj")
    dll = base / "eng.dll"
    sh(lld_link, "/dll", "/noentry", "/export:util_a", f"/out:{dll}", obj)
    assert object_format(dll) == "pe"
    assert inspect.dll_exports(dll) == {"util_a"}
    assert inspect.exported_symbols(dll) == {"util_a"}
    assert inspect.needed_libraries(dll) == []
