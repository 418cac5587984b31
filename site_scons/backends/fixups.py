"""Post-stage fixups that recipes run as commands: `python -m backends.fixups <fixup> ...`.

Each fixup is idempotent (a rerun on a fixed tree changes nothing) and fails loudly: no
`|| true` (spec §8.1.7).
"""
from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Sequence

from .steps.inspect import dll_exports
from .toolchain import find_tool, require_tool

# A path into an ExecuTorch build tree (`cmake-out...`, or the given build root) that
# names a static library: `<anything>/cmake-out<anything>/(lib)?<name>.(a|lib)`.
_BUILD_TREE_LIB = r'(?P<path>[^\s";]*(?:{roots})[^\s";]*/(?P<name>[^/\s";]+\.(?:a|lib)))'


def cmake_relocate(config_dir: Path, lib_dir: Path, build_roots: Sequence[str]) -> list[str]:
    """Rewrite build-tree library paths in installed CMake files to `${_IMPORT_PREFIX}/lib/<name>`,
    copying each referenced library into the package (upstream install bug: some targets,
    e.g. extension_evalue_util, point at the build directory)."""
    roots = "|".join(["cmake-out", *(re.escape(r) for r in build_roots if r)])
    pattern = re.compile(_BUILD_TREE_LIB.format(roots=roots))
    rewritten = []
    for config in sorted(config_dir.glob("*.cmake")):
        text = config.read_text()

        def relocate(match: re.Match[str]) -> str:
            source, name = Path(match.group("path")), match.group("name")
            if source.is_file() and not (lib_dir / name).exists():
                shutil.copy2(source, lib_dir / name)
            if not (lib_dir / name).exists():
                raise SystemExit(f"cmake-relocate: {config.name} refers to {source}, which is neither in the "
                                 f"build tree nor in {lib_dir}")
            return f"${{_IMPORT_PREFIX}}/lib/{name}"

        new = pattern.sub(relocate, text)
        if new != text:
            config.write_text(new)
            rewritten.append(config.name)
    return rewritten


def set_rpath(lib_dir: Path, rpath: str) -> list[str]:
    patchelf = require_tool("patchelf", "setting $ORIGIN rpaths (apt-get install patchelf)")
    changed = []
    for lib in sorted(lib_dir.glob("*.so*")):
        if lib.is_symlink() or not lib.is_file() or lib.read_bytes()[:4] != b"\x7fELF":
            continue
        subprocess.run([patchelf, "--set-rpath", rpath, str(lib)], check=True)
        changed.append(lib.name)
    return changed


def copy_system_libs(prefix: str, dest: Path) -> list[str]:
    """Copy (dereferenced) every library `ldconfig -p` lists whose name starts with `prefix`."""
    listing = subprocess.run(["ldconfig", "-p"], check=True, capture_output=True, text=True).stdout
    copied = []
    for line in listing.splitlines():
        name, _, path = line.strip().partition(" => ")
        if name.startswith(prefix) and path:
            shutil.copy2(Path(path).resolve(), dest / name.split()[0])
            copied.append(name.split()[0])
    if not copied:
        raise SystemExit(f"copy-system-libs: ldconfig knows no {prefix}*; install it (e.g. libopenblas-dev)")
    return copied


MACHINES = {"x64": ("/machine:x64", "i386:x86-64"), "arm64": ("/machine:arm64", "arm64")}


def import_lib(dll: Path, machine: str, out: Path) -> None:
    """An MSVC import library for a DLL from its export table (the .def stays out of the package)."""
    exports = dll_exports(dll)
    if not exports:
        raise SystemExit(f"import-lib: {dll.name} exports nothing")
    with tempfile.TemporaryDirectory() as tmp:
        definition = Path(tmp) / (dll.stem + ".def")
        definition.write_text(f"LIBRARY {dll.name}\nEXPORTS\n" + "".join(f"  {name}\n" for name in sorted(exports)))
        lib_exe = find_tool("lib", prefer_native=True) if sys.platform == "win32" else None
        if lib_exe:
            argv = [lib_exe, "/nologo", f"/def:{definition}", f"/out:{out}", MACHINES[machine][0]]
        else:
            dlltool = require_tool("llvm-dlltool", "making an import library from a DLL")
            argv = [dlltool, "-m", MACHINES[machine][1], "-d", str(definition), "-l", str(out)]
        subprocess.run(argv, check=True)


LITERT_BUILD_CONFIG = """\
// Written by anira-backends: LiteRT's generated build configuration for a CPU-only package.
#ifndef LITERT_BUILD_COMMON_BUILD_CONFIG_H_
#define LITERT_BUILD_COMMON_BUILD_CONFIG_H_

#define LITERT_BUILD_CONFIG_DISABLE_GPU 1
#define LITERT_BUILD_CONFIG_DISABLE_NPU 1

#if LITERT_BUILD_CONFIG_DISABLE_GPU
#define LITERT_DISABLE_GPU 1
#endif
#if LITERT_BUILD_CONFIG_DISABLE_NPU
#define LITERT_DISABLE_NPU 1
#endif

#endif  // LITERT_BUILD_COMMON_BUILD_CONFIG_H_
"""


def litert_build_config(out: Path) -> None:
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(LITERT_BUILD_CONFIG)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m backends.fixups", description=__doc__)
    sub = parser.add_subparsers(dest="fixup", required=True)
    relocate = sub.add_parser("cmake-relocate")
    relocate.add_argument("config_dir", type=Path)
    relocate.add_argument("--lib-dir", type=Path, required=True)
    relocate.add_argument("--build-root", action="append", default=[])
    rpath = sub.add_parser("set-rpath")
    rpath.add_argument("--rpath", required=True)
    rpath.add_argument("lib_dir", type=Path)
    system = sub.add_parser("copy-system-libs")
    system.add_argument("--ldconfig", required=True)
    system.add_argument("dest", type=Path)
    implib = sub.add_parser("import-lib")
    implib.add_argument("dll", type=Path)
    implib.add_argument("--machine", choices=sorted(MACHINES), required=True)
    implib.add_argument("--out", type=Path, required=True)
    config = sub.add_parser("litert-build-config")
    config.add_argument("out", type=Path)
    args = parser.parse_args(argv)
    if args.fixup == "cmake-relocate":
        print("relocated:", ", ".join(cmake_relocate(args.config_dir, args.lib_dir, args.build_root)) or "nothing")
    elif args.fixup == "set-rpath":
        print("rpath set on:", ", ".join(set_rpath(args.lib_dir, args.rpath)) or "nothing")
    elif args.fixup == "copy-system-libs":
        print("copied:", ", ".join(copy_system_libs(args.ldconfig, args.dest)))
    elif args.fixup == "import-lib":
        import_lib(args.dll, args.machine, args.out)
    else:
        litert_build_config(args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
