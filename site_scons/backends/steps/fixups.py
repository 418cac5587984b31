"""Post-stage fixups that recipes run as commands: `python -m backends.steps.fixups <fixup> ...`.

Each fixup is idempotent (a rerun on a fixed tree changes nothing) and fails loudly: no
`|| true` (docs/history.md#false-greens).
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

from backends.binfmt.inspect import dll_exports
from backends.model.platforms import platform_table
from backends.util.toolchain import find_tool, require_tool

# Paths in CMake files end at whitespace, a quote, a list `;` or a generator expression's `>`
# (`$<LINK_ONLY:/path/libx.a>`), and start after one of those or a genex's `:`/`<`.
_START = r'(?<![^\s";:<])'
_END = r'(?![^\s";>])'
# The part of a path below a build root that names a static library: `/<dirs>/(lib)?<name>.(a|lib)`,
# with either separator (CMake writes `/` on Windows too).
_BELOW = r'(?P<below>(?:[\\/][^\s";<>\\/]+)*[\\/](?P<name>[^\s";<>\\/]+\.(?:a|lib)))' + _END
# Any path with a `cmake-out*` component (upstream's build directories).
_CMAKE_OUT = re.compile(_START + r'(?P<root>[^\s";<>]*cmake-out[^\s";<>\\/]*)' + _BELOW)
_DRIVE = re.compile(r"^[A-Za-z]:$")


def build_root_pattern(root: str) -> re.Pattern[str]:
    """A build root as CMake writes it into export files: `/` or `\\` between components (CMake
    uses `/` on Windows while the root may be given with `\\`), and a Windows path matched
    case-insensitively (drive letters come in either case)."""
    parts = [part for part in re.split(r"[\\/]+", root.rstrip("\\/")) if part]
    windows = bool(parts) and bool(_DRIVE.match(parts[0]))
    body = r"[\\/]+".join(re.escape(part) for part in parts)
    if root[:1] in ("/", "\\"):
        body = r"[\\/]+" + body
    flags = "(?i:{})" if windows else "(?:{})"
    return re.compile(_START + "(?P<root>" + flags.format(body) + ")" + _BELOW)


def _library_path(match: re.Match[str], root: str | None) -> Path:
    """The file a matched path names: below the root as given (its separators and case are
    this host's), or the matched text itself for a `cmake-out` path."""
    if root is None:
        return Path(match.group("root") + match.group("below"))
    return Path(root, *re.split(r"[\\/]+", match.group("below").strip("\\/")))


def cmake_relocate(config_dir: Path, lib_dir: Path, build_roots: Sequence[str]) -> list[str]:
    """Rewrite build-tree library paths in installed CMake files to `${_IMPORT_PREFIX}/lib/<name>`,
    copying each referenced library into the package (upstream install bug: some targets,
    e.g. extension_evalue_util, install to `${CMAKE_BINARY_DIR}/lib` and are exported from there).

    A path is under a build tree when it starts with one of `build_roots` (either separator,
    Windows roots case-insensitively) or has a `cmake-out*` component."""
    patterns: list[tuple[re.Pattern[str], str | None]] = [(build_root_pattern(r), r) for r in build_roots if r]
    patterns.append((_CMAKE_OUT, None))
    rewritten = []
    for config in sorted(config_dir.glob("*.cmake")):
        text = config.read_text()

        def relocate(match: re.Match[str], root: str | None) -> str:
            source, name = _library_path(match, root), match.group("name")
            if source.is_file() and not (lib_dir / name).exists():
                shutil.copy2(source, lib_dir / name)
            if not (lib_dir / name).exists():
                raise SystemExit(f"cmake-relocate: {config.name} refers to {match.group(0)} ({source}), which is "
                                 f"neither in the build tree nor in {lib_dir}")
            return f"${{_IMPORT_PREFIX}}/lib/{name}"

        new = text
        for pattern, root in patterns:
            new = pattern.sub(lambda match: relocate(match, root), new)
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


# An MSVC target -> (lib.exe's /machine, llvm-dlltool's -m), from engines/platforms.toml.
MACHINES = {msvc.arch: (msvc.lib_machine, msvc.dlltool_machine) for msvc in platform_table().msvc_targets()}


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
    parser = argparse.ArgumentParser(prog="python -m backends.steps.fixups", description=__doc__)
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
