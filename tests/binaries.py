"""Real, tiny binaries of every format the contracts read, made here with clang and LLVM's
linkers: ELF, Mach-O (macOS and iOS device/simulator) and PE, shared and static, with
exactly the symbols, load commands and identities a test names. They stand in for
upstream binaries only where no registry carries one.

Symbols are given by their object-file names without the Mach-O underscore (`_ZN...`,
`OrtGetApiBase`), like the contracts name them.
"""
from __future__ import annotations

import plistlib
import shutil
import subprocess
import zipfile
from pathlib import Path
from typing import Iterable, Mapping

from backends.util import toolchain


def _tool(name: str) -> str:
    return toolchain.require_tool(name, "building test binaries")


def _run(*argv: str | Path, cwd: Path | None = None) -> None:
    subprocess.run([str(a) for a in argv], cwd=cwd, check=True, capture_output=True)


def c_source(defined: Iterable[str] = (), undefined: Iterable[str] = (), prefix: str = "") -> str:
    """C defining a function per name in `defined` and calling each of `undefined`.
    `prefix` is what the object format adds to C names ("_" on Mach-O)."""
    lines = []
    for index, name in enumerate(defined):
        lines += [f'void defined_{index}(void) __asm__("{prefix}{name}");', f"void defined_{index}(void) {{}}"]
    calls = []
    for index, name in enumerate(undefined):
        lines.append(f'extern void undefined_{index}(void) __asm__("{prefix}{name}");')
        calls.append(f"undefined_{index}();")
    if calls:
        lines.append("void fixture_references(void) { " + " ".join(calls) + " }")
    return "\n".join(lines) + "\n"


def _object(work: Path, target: str, defined: Iterable[str], undefined: Iterable[str], prefix: str) -> Path:
    work.mkdir(parents=True, exist_ok=True)
    source = work / "fixture.c"
    source.write_text(c_source(defined, undefined, prefix))
    obj = work / "fixture.o"
    pic = () if "windows" in target else ("-fPIC",)
    _run("clang", "-target", target, *pic, "-c", source, "-o", obj)
    return obj


# --- ELF ------------------------------------------------------------------------------------

ELF_TARGETS = {"x86_64": "x86_64-linux-gnu", "aarch64": "aarch64-linux-gnu"}


def elf_shared(out: Path, symbols: Iterable[str] = (), *, soname: str = "", needed: Iterable[Path] = (),
               version_node: str = "", arch: str = "x86_64") -> Path:
    """A shared object exporting `symbols` (in ELF version `version_node` when given),
    with DT_SONAME `soname` and DT_NEEDED on each library of `needed`."""
    work = out.parent / f".{out.name}.work"
    obj = _object(work, ELF_TARGETS[arch], symbols, (), "")
    argv = ["ld.lld", "-shared", "-o", out, obj]
    if soname:
        argv += ["-soname", soname]
    if version_node:
        (work / "exports.map").write_text(f"{version_node} {{ global: *; }};\n")
        argv += ["--version-script", work / "exports.map"]
    argv += [str(lib) for lib in needed]
    _run(*argv)
    shutil.rmtree(work)
    return out


def elf_static(out: Path, defined: Iterable[str] = (), undefined: Iterable[str] = (), arch: str = "x86_64") -> Path:
    work = out.parent / f".{out.name}.work"
    obj = _object(work, ELF_TARGETS[arch], defined, undefined, "")
    _run(_tool("llvm-ar"), "rcs", out, obj)
    shutil.rmtree(work)
    return out


# --- Mach-O ---------------------------------------------------------------------------------

def macho_dylib(out: Path, symbols: Iterable[str] = (), *, arch: str = "arm64", install_name: str = "",
                links: Iterable[Path] = (), current_version: str = "", platform: str = "macos",
                min_os: str = "11.0") -> Path:
    """A dylib exporting `symbols`, loading each dylib of `links` (a stub framework made by
    `macho_dylib` with its install name stands in for the system's)."""
    work = out.parent / f".{out.name}.work"
    target = f"{arch}-apple-{platform}{min_os}"
    obj = _object(work, target, symbols, (), "_")
    argv = [_tool("ld64.lld"), "-dylib", "-arch", arch, "-platform_version", platform, min_os, min_os,
            "-install_name", install_name or f"@rpath/{out.name}", "-o", out, obj, *map(str, links)]
    if current_version:
        argv += ["-current_version", current_version]
    _run(*argv)
    shutil.rmtree(work)
    return out


def framework_stub(directory: Path, name: str, arch: str = "arm64") -> Path:
    """A stand-in for /System/Library/Frameworks/<name>.framework, to link against."""
    return macho_dylib(directory / name, (f"{name}Stub",), arch=arch,
                       install_name=f"/System/Library/Frameworks/{name}.framework/Versions/A/{name}")


def macho_static(out: Path, defined: Iterable[str] = (), undefined: Iterable[str] = (), *,
                 target: str = "arm64-apple-macos11.0") -> Path:
    """A static library of one object for `target` (`arm64-apple-ios13.0-simulator`, ...)."""
    work = out.parent / f".{out.name}.work"
    obj = _object(work, target, defined, undefined, "_")
    _run(_tool("llvm-libtool-darwin"), "-static", "-o", out, obj)
    shutil.rmtree(work)
    return out


IOS_SLICES = {"ios-arm64": ("arm64-apple-ios{}", "ios", ""),
              "ios-arm64-simulator": ("arm64-apple-ios{}-simulator", "ios", "simulator")}


def xcframework_members(name: str, library: str, slices: Mapping[str, Path], headers: Mapping[str, bytes] = {}
                        ) -> dict[str, bytes]:
    """The members of `<name>.xcframework` with `library` (a static library, or a
    `<X>.framework` whose binary is `<X>`) in each slice, like `xcodebuild
    -create-xcframework`, its Info.plist, and `headers` per slice."""
    members: dict[str, bytes] = {}
    available = []
    binary_path = f"{library}/{library.removesuffix('.framework')}" if library.endswith(".framework") else library
    for identifier, binary in slices.items():
        _, platform, variant = IOS_SLICES[identifier]
        members[f"{name}.xcframework/{identifier}/{binary_path}"] = binary.read_bytes()
        for header, text in headers.items():
            members[f"{name}.xcframework/{identifier}/Headers/{header}"] = text
        entry = {"LibraryIdentifier": identifier, "LibraryPath": library, "SupportedArchitectures": ["arm64"],
                 "SupportedPlatform": platform}
        if variant:
            entry["SupportedPlatformVariant"] = variant
        available.append(entry)
    members[f"{name}.xcframework/Info.plist"] = plistlib.dumps(
        {"AvailableLibraries": available, "CFBundlePackageType": "XFWK", "XCFrameworkFormatVersion": "1.0"})
    return members


# --- PE -------------------------------------------------------------------------------------

PE_MACHINES = {"x86_64": ("x86_64-pc-windows-msvc", "x64", "i386:x86-64"),
               "arm64": ("aarch64-pc-windows-msvc", "arm64", "arm64")}


def pe_dll(out: Path, symbols: Iterable[str] = (), *, imports: Mapping[str, str] = {}, arch: str = "x86_64") -> Path:
    """A DLL exporting `symbols` and importing function `imports[dll]` from each DLL."""
    target, machine, dlltool_machine = PE_MACHINES[arch]
    work = out.parent / f".{out.name}.work"
    symbols = list(symbols)
    obj = _object(work, target, symbols, imports.values(), "")
    libs = []
    for dll, function in imports.items():
        (work / f"{dll}.def").write_text(f"LIBRARY {dll}\nEXPORTS\n  {function}\n")
        libs.append(work / f"{dll}.lib")
        _run(_tool("llvm-dlltool"), "-m", dlltool_machine, "-d", work / f"{dll}.def", "-l", libs[-1])
    _run("lld-link", "/dll", "/noentry", f"/machine:{machine}", f"/out:{out}", obj, *libs,
         *(f"/export:{s}" for s in symbols))
    shutil.rmtree(work)
    for byproduct in (out.with_suffix(".lib"), out.with_suffix(".exp")):
        byproduct.unlink(missing_ok=True)
    return out


def coff_static(out: Path, defined: Iterable[str] = (), undefined: Iterable[str] = (), arch: str = "x86_64") -> Path:
    """An MSVC static library (`.lib`) of one object."""
    work = out.parent / f".{out.name}.work"
    obj = _object(work, PE_MACHINES[arch][0], defined, undefined, "")
    _run(_tool("llvm-lib"), f"/out:{out}", obj)
    shutil.rmtree(work)
    return out


# --- archives -------------------------------------------------------------------------------

def license_texts(engine: str) -> dict[str, bytes]:
    """The license texts every package of `engine` carries (engines/contracts.toml
    [licenses], every row), as archive members with a line of stand-in text each."""
    from backends.model.contract_data import contracts_file, load_contract_data

    data = load_contract_data(contracts_file(Path(__file__).resolve().parents[1] / "engines"))
    names = dict.fromkeys(name for row in data.licenses.get(engine, ()) for name in row.files)
    return {f"share/licenses/{engine}/{name}": f"stand-in for {engine}'s {name}\n".encode() for name in names}


def zip_members(path: Path, members: Mapping[str, bytes | Path], symlinks: Mapping[str, str] = {}) -> Path:
    """A package archive: `members` (bytes, or a file to store), and `symlinks`."""
    with zipfile.ZipFile(path, "w") as archive:
        for name, data in members.items():
            info = zipfile.ZipInfo(name, date_time=(2020, 1, 1, 0, 0, 0))
            info.external_attr = 0o644 << 16
            archive.writestr(info, data.read_bytes() if isinstance(data, Path) else data)
        for name, target in symlinks.items():
            info = zipfile.ZipInfo(name, date_time=(2020, 1, 1, 0, 0, 0))
            info.create_system = 3
            info.external_attr = 0o120777 << 16
            archive.writestr(info, target)
    return path


TORCH_LIBRARIES = ("libtorch_cpu", "libc10", "libtorch")  # the CPU libraries of a torch wheel's torch/lib


def torch_wheel(work: Path, *, version: str = "2.13.0+cpu", fmt: str = "elf", arch: str = "x86_64", cuda: str = "",
                extra: Mapping[str, bytes | Path] = {}) -> Path:
    """A torch wheel of tiny real libraries in the real one's layout (`torch/lib`, headers,
    CMake config, a dist-info pip reads), of format `fmt` ("elf", "pe", "macho") for `arch`.
    `cuda`: "soname" adds libtorch_cuda.so (a CUDA library by its SONAME), "needed" a library
    under a CPU-looking name that loads libcudart.so.13, "named" a CPU library whose file is
    named libtorch_cuda.so."""
    libs = work / "libs"
    libs.mkdir(parents=True)
    members: dict[str, bytes | Path] = {"torch/include/torch/torch.h": b"// header\n",
                                        "torch/share/cmake/Torch/TorchConfig.cmake": b"# cmake\n"}
    for name in TORCH_LIBRARIES:
        if fmt == "elf":
            members[f"torch/lib/{name}.so"] = elf_shared(libs / f"{name}.so", (f"{name}_entry",), soname=f"{name}.so",
                                                          arch=arch)
        elif fmt == "pe":
            dll = name.removeprefix("lib")
            members[f"torch/lib/{dll}.dll"] = pe_dll(libs / f"{dll}.dll", (f"{name}_entry",), arch=arch)
        else:
            members[f"torch/lib/{name}.dylib"] = macho_dylib(libs / f"{name}.dylib", (f"{name}_entry",), arch=arch)
    if cuda == "soname":
        members["torch/lib/libtorch_cuda.so"] = elf_shared(libs / "libtorch_cuda.so", ("cuda_entry",),
                                                           soname="libtorch_cuda.so")
    elif cuda == "needed":
        cudart = elf_shared(libs / "libcudart.so.13", ("cudaMalloc",), soname="libcudart.so.13")
        members["torch/lib/libhelpers.so"] = elf_shared(libs / "libhelpers.so", ("helper",), soname="libhelpers.so",
                                                        needed=[cudart])
    elif cuda == "named":
        members["torch/lib/libtorch_cuda.so"] = elf_shared(libs / "renamed.so", ("cpu_entry",),
                                                           soname="libtorch_cpu_extra.so")
    tag = "cp311-cp311-manylinux_2_28_x86_64"
    info = f"torch-{version}.dist-info"
    members[f"{info}/METADATA"] = f"Metadata-Version: 2.1\nName: torch\nVersion: {version}\n".encode()
    members[f"{info}/WHEEL"] = f"Wheel-Version: 1.0\nGenerator: tests\nRoot-Is-Purelib: false\nTag: {tag}\n".encode()
    members[f"{info}/licenses/LICENSE"] = b"fixture license\n"
    members.update(extra)
    members[f"{info}/RECORD"] = "".join(f"{name},,\n" for name in [*members, f"{info}/RECORD"]).encode()
    return zip_members(work / f"torch-{version}-{tag}.whl", members)


# --- CMake export sets ----------------------------------------------------------------------

def cmake_export_sets(work: Path, sets: Mapping[str, Iterable[str]], export: str = "ExecuTorchTargets",
                      destination: str = "lib/cmake/ExecuTorch") -> dict[str, dict[str, bytes]]:
    """What `install(EXPORT)` writes for each set of static targets, by CMake itself:
    {set name: {archive member: bytes}} (the export file and its per-config file)."""
    targets = sorted({t for names in sets.values() for t in names})
    lines = ["cmake_minimum_required(VERSION 3.20)", "project(fixture LANGUAGES C)",
             'file(WRITE "${CMAKE_BINARY_DIR}/f.c" "int f(void) { return 0; }\\n")']
    lines += [f'add_library({t} STATIC "${{CMAKE_BINARY_DIR}}/f.c")' for t in targets]
    for name, names in sets.items():
        lines += [f"install(TARGETS {' '.join(names)} EXPORT {name} DESTINATION {name}/lib)",
                  f"install(EXPORT {name} FILE {export}.cmake DESTINATION {name}/{destination})"]
    work.mkdir(parents=True, exist_ok=True)
    (work / "CMakeLists.txt").write_text("\n".join(lines) + "\n")
    for argv in (["cmake", "-S", work, "-B", work / "build", "-G", "Ninja", f"-DCMAKE_INSTALL_PREFIX={work / 'out'}"],
                 ["cmake", "--build", work / "build"], ["cmake", "--install", work / "build"]):
        _run(*argv)
    return {name: {f"{destination}/{p.name}": p.read_bytes()
                   for p in sorted((work / "out" / name / destination).glob("*.cmake"))} for name in sets}


# --- a package showing given accelerator evidence -------------------------------------------

def evidence_members(work: Path, platform: str, evidence: Iterable, *, files: bool = True) -> dict[str, bytes]:
    """Members of a package of `platform` that show `evidence` (plan.Evidence items) in
    binaries of the platform's format: a file per glob (unless `files` is False), a
    library per accelerator defining its symbols, loading its links and named (SONAME,
    install name, DLL name) by its first `libraries` glob, a library named by each further
    one, and a CMake-generated export set with its targets. iOS libraries go into an
    xcframework's device and simulator slices."""
    members: dict[str, bytes] = {}
    targets: list[str] = []
    for item in evidence:
        if files:
            members.update({_materialize(glob): b"evidence\n" for glob in item.files})
        symbols = [_materialize(s) for s in item.symbols]
        named = [_materialize(glob) for glob in item.libraries]
        if symbols or item.links or named:
            members.update(_evidence_library(work / item.accelerator, platform, item.accelerator, symbols, item.links,
                                             *named[:1]))
        for index, identity in enumerate(named[1:]):
            label = f"{item.accelerator}_{index}"
            members.update(_evidence_library(work / label, platform, label, [], (), identity))
        targets += item.targets
    if targets:
        (export,) = cmake_export_sets(work / "cmake", {"evidence": targets}).values()
        members.update(export)
    return members


def _materialize(glob: str) -> str:
    return glob.replace("**/", "include/").replace("**", "x").replace("*", "x")


def _evidence_library(work: Path, platform: str, name: str, symbols: list[str], links: Iterable[str],
                      identity: str = "") -> dict[str, bytes]:
    """One library of the evidence; `identity`, when given, is its SONAME, install name or DLL name."""
    work.mkdir(parents=True, exist_ok=True)
    os_name, _, arch = platform.partition("-")
    if os_name == "ios":
        slices = {ident: macho_static(work / f"{ident}.a", symbols, target=target.format("14.0"))
                  for ident, (target, _, _) in IOS_SLICES.items()}
        return xcframework_members(f"Evidence{name}", f"libevidence_{name}.a", slices)
    if os_name == "macos":
        return {f"lib/libevidence_{name}.dylib": _macos_dylib(work, arch, symbols, links, identity).read_bytes()}
    if os_name == "windows":
        imports = {link if link.lower().endswith(".dll") else f"{link}64_13.dll": "imported" for link in links}
        exports = symbols or ([f"evidence_{name}_entry"] if identity else [])  # a DLL name needs an export table
        dll = pe_dll(work / (identity or "evidence.dll"), exports, imports=imports, arch=arch)
        return {f"lib/evidence_{name}.dll": dll.read_bytes()}
    needed = [elf_shared(work / f"lib{link}.so.1", (f"{link}_stub",), soname=f"lib{link}.so.1", arch=ELF_ARCH[arch])
              for link in links]
    library = elf_shared(work / "lib.so", symbols, needed=needed, arch=ELF_ARCH[arch], soname=identity)
    return {f"lib/libevidence_{name}.so": library.read_bytes()}


ELF_ARCH = {"x86_64": "x86_64", "aarch64": "aarch64", "arm64-v8a": "aarch64"}
UNIVERSAL_SLICES = ("x86_64", "arm64")


def _macos_dylib(work: Path, arch: str, symbols: list[str], links: Iterable[str], identity: str = "") -> Path:
    """One dylib for `arch`; for `universal`, one per slice, fused by lipo (each slice shows it all)."""
    slices = []
    for slice_arch in UNIVERSAL_SLICES if arch == "universal" else (arch,):
        where = work / slice_arch
        where.mkdir(parents=True, exist_ok=True)
        stubs = [framework_stub(where, link.removesuffix(".framework"), slice_arch) for link in links]
        slices.append(macho_dylib(where / "lib.dylib", symbols, arch=slice_arch, links=stubs,
                                  install_name=f"@rpath/{identity}" if identity else ""))
    if len(slices) == 1:
        return slices[0]
    _run(_tool("llvm-lipo"), "-create", *slices, "-output", work / "lib.dylib")
    return work / "lib.dylib"


def stand_in_sbom(archive: str) -> dict[str, object]:
    """The `sbom` and `files` fields of a manifest carrying a minimal SBOM for `archive`, its
    member's sha256 listed (what the release checks before uploading it beside the archive)."""
    import hashlib

    from backends.steps import sbom

    document = {"spdxVersion": "SPDX-2.3", "name": archive}
    member = f"share/sbom/{archive.removesuffix('.zip')}.spdx.json"
    data = sbom.serialize(document)
    return {"sbom": {"path": member, "document": document},
            "files": [{"path": member, "size": len(data), "mode": "0o644", "sha256": hashlib.sha256(data).hexdigest()}]}
