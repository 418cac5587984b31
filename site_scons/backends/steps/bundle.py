"""Static bundling: merge a leg's own static libraries into one archive (docs/upstream.md#static-bundle).

Tools per object format (docs/decisions.md), chosen because each keeps members whose
names collide across inputs (extract-and-rearchive loses them):

- ELF:    GNU `ar -M` MRI script (CREATE/ADDLIB/SAVE/END) + `ranlib`; `llvm-ar -M`
          when GNU ar is absent (macOS hosts building Android, Windows);
- Mach-O: Apple `libtool -static` on macOS, `llvm-libtool-darwin -static` elsewhere;
- COFF:   the librarian the plan names (LiteRT Windows arm64: its LLVM's llvm-lib), else
          `lib.exe` when on PATH (MSVC environment), else `llvm-lib`; `/MACHINE` from the plan.

The list of libraries comes from the build itself (CMake's install manifest or
Ninja's link closure), never from globbing the build tree.
"""
from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path

from backends.binfmt.objects import nm_symbol_table, object_format
from backends.util import toolchain
from backends.util.errors import BackendsError
from backends.util.files import temp_path_for

STATIC_SUFFIXES = (".a", ".lib")
# MinGW import libraries name DLLs; they are not code to bundle.
IMPORT_LIB_SUFFIXES = (".dll.a",)

# The plain names `_merge_elf` gives its inputs inside the MRI script.
_ALIAS_NAME = re.compile(r"\bin\d+\.a\b")


class BundleError(BackendsError, RuntimeError):
    """Bundling failed; the message names the tool and carries its output."""


# --- which libraries ------------------------------------------------------------------

def is_static_library(path: str | Path) -> bool:
    name = str(path).lower()
    return name.endswith(STATIC_SUFFIXES) and not name.endswith(IMPORT_LIB_SUFFIXES)


def _unique(paths: Sequence[Path]) -> list[Path]:
    return list(dict.fromkeys(paths))


def static_libs_from_manifest(install_manifest: Path) -> list[Path]:
    """The static libraries a CMake install wrote (`install_manifest.txt`, one path a
    line). For engines whose install step installs every library it builds
    (ExecuTorch, TFLite)."""
    if not install_manifest.is_file():
        raise BundleError(
            f"{install_manifest}: no CMake install manifest (did the install step run?)")
    lines = install_manifest.read_text(encoding="utf-8").splitlines()
    return _unique([Path(line.strip()) for line in lines
                    if line.strip() and is_static_library(line.strip())])


def static_libs_from_ninja(build_dir: Path, target: str, *,
                           built_only: bool = True) -> list[Path]:
    """The static libraries in the link closure of a Ninja `target` (e.g. the shared
    library an engine also builds: ORT's `onnxruntime`), via `ninja -t inputs`
    (recursive since Ninja 1.11). `built_only` keeps the archives this build produces
    and drops prebuilt ones from elsewhere (system or SDK libraries)."""
    ninja = toolchain.require_tool("ninja", "listing a build's static libraries")
    inputs = _ninja_tool_lines(ninja, build_dir, ["-t", "inputs", target])
    archives = [line for line in inputs if is_static_library(line)]
    if built_only:
        produced = _ninja_outputs(ninja, build_dir, target)
        archives = [line for line in archives if line in produced]
    return _unique([_in_build_dir(build_dir, line) for line in archives])


def _ninja_outputs(ninja: str, build_dir: Path, target: str) -> set[str]:
    lines = _ninja_tool_lines(ninja, build_dir, ["-t", "targets", "all"])
    produced = set()
    for line in lines:
        path, _, rule = line.rpartition(": ")
        if rule != "phony":
            produced.add(path)
    return produced


def _ninja_tool_lines(ninja: str, build_dir: Path, arguments: list[str]) -> list[str]:
    completed = subprocess.run([ninja, "-C", str(build_dir), *arguments],
                               capture_output=True, text=True, check=False)
    if completed.returncode != 0:
        raise BundleError(
            f"{ninja} {' '.join(arguments)} failed in {build_dir} "
            f"(exit {completed.returncode}; `-t inputs` needs Ninja >= 1.11):\n"
            f"{completed.stdout}{completed.stderr}"
        )
    # `ninja -C` announces "ninja: Entering directory" on stdout.
    return [line for line in completed.stdout.splitlines()
            if line and not line.startswith("ninja: ")]


def _in_build_dir(build_dir: Path, line: str) -> Path:
    path = Path(line)
    return path if path.is_absolute() else build_dir / path


def filter_libs(paths: Sequence[Path], exclude_regex: str) -> list[Path]:
    """`paths` without those whose posix form matches `exclude_regex` (re.search);
    e.g. `(/testdata/|-src/)` or a protobuf exclusion. An empty regex keeps all."""
    if not exclude_regex:
        return list(paths)
    pattern = re.compile(exclude_regex)
    return [path for path in paths if not pattern.search(Path(path).as_posix())]


# --- merging ---------------------------------------------------------------------------

def merge_static(inputs: Sequence[Path], out: Path, fmt: str, *,
                 log: Path | None = None, tool: str = "", machine: str = "") -> None:
    """Merge static archives `inputs` into `out`, keeping every member (also members
    with the same name in different inputs). `fmt` is "elf", "macho" or "coff"
    (see `object_format`). `out` appears only once complete.

    COFF merges may name the librarian (`tool`, else lib.exe in an MSVC environment, else
    llvm-lib) and the `/MACHINE` every member must have (`x64`, `arm64`)."""
    inputs = [Path(path) for path in inputs]
    if not inputs:
        raise BundleError(f"no static libraries to bundle into {out}")
    missing = [str(path) for path in inputs if not path.is_file()]
    if missing:
        raise BundleError(f"cannot bundle {out}: missing inputs: {', '.join(missing)}")
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    if fmt == "coff":
        _merge_coff(inputs, out, log, tool, machine)
        return
    merger = {"elf": _merge_elf, "macho": _merge_macho}.get(fmt)
    if merger is None:
        raise BundleError(f"cannot bundle {out}: unsupported object format {fmt!r} "
                          "(expected elf, macho or coff)")
    if tool or machine:
        raise BundleError(f"cannot bundle {out}: a librarian ({tool or '-'}) and /MACHINE ({machine or '-'}) "
                          f"apply to COFF libraries only, these are {fmt}")
    merger(inputs, out, log)


def _merge_elf(inputs: list[Path], out: Path, log: Path | None) -> None:
    ar, ranlib = _elf_archiver()
    # MRI scripts cannot quote paths (spaces, commas, parentheses break them), so
    # the inputs are linked under plain names into a scratch dir next to `out`.
    with tempfile.TemporaryDirectory(prefix=f".{out.name}.", dir=out.parent) as scratch:
        scratch_dir = Path(scratch)
        names = [_link_plain(path, scratch_dir / f"in{index}.a")
                 for index, path in enumerate(inputs)]
        script = "CREATE merged.a\n" + "".join(f"ADDLIB {name}\n" for name in names)
        script += "SAVE\nEND\n"
        aliases = dict(zip(names, map(str, inputs)))
        _tool([ar, "-M"], cwd=scratch_dir, log=log, stdin=script, aliases=aliases,
              what=f"merging {len(inputs)} archives into {out}")
        if ranlib:
            _tool([ranlib, "merged.a"], cwd=scratch_dir, log=log,
                  what=f"indexing {out}")
        os.replace(scratch_dir / "merged.a", out)


def _elf_archiver() -> tuple[str, str | None]:
    """(ar, ranlib): GNU binutils when present, else llvm-ar (whose MRI output is
    already indexed)."""
    gnu_ar = shutil.which("ar")
    if gnu_ar and "GNU" in toolchain.tool_version(gnu_ar):
        return gnu_ar, shutil.which("ranlib")
    llvm_ar = toolchain.require_tool("llvm-ar", "merging ELF static archives")
    return llvm_ar, None


def _link_plain(source: Path, link: Path) -> str:
    try:
        os.symlink(source.resolve(), link)
    except OSError:  # no symlink privilege (Windows)
        shutil.copyfile(source, link)
    return link.name


def _merge_macho(inputs: list[Path], out: Path, log: Path | None) -> None:
    libtool = toolchain.require_tool("llvm-libtool-darwin", "merging Mach-O static archives",
                                     prefer_native=True)
    flags = ["-static"]
    if toolchain.is_native(libtool):
        flags.append("-no_warning_for_no_symbols")
    temp = temp_path_for(out)
    _tool([libtool, *flags, "-o", str(temp), *map(str, inputs)], log=log,
          what=f"merging {len(inputs)} archives into {out}", cleanup=temp)
    os.replace(temp, out)


def _merge_coff(inputs: list[Path], out: Path, log: Path | None, tool: str = "", machine: str = "") -> None:
    lib = _coff_librarian(tool)
    temp = temp_path_for(out)
    # A response file keeps long input lists under Windows' command-line limit.
    with tempfile.TemporaryDirectory(prefix=f".{out.name}.", dir=out.parent) as scratch:
        response = Path(scratch) / "inputs.rsp"
        lines = [f'/OUT:"{_windows_path(temp)}"'] + ([f"/MACHINE:{machine}"] if machine else [])
        lines += [f'"{_windows_path(path)}"' for path in inputs]
        response.write_text("\n".join(lines) + "\n", encoding="utf-8")
        # llvm-lib re-expresses member names as paths relative to the output's
        # directory, resolved from its cwd: run it there so "util.obj" stays "util.obj".
        _tool([lib, "/NOLOGO", f"@{response}"], log=log, cwd=out.parent,
              what=f"merging {len(inputs)} libraries into {out}", cleanup=temp)
    os.replace(temp, out)


def _coff_librarian(tool: str) -> str:
    """The plan's librarian when it names one (a leg whose objects lib.exe cannot read, e.g.
    clang-cl's on Windows arm64: LNK1160), else lib.exe in an MSVC environment, else llvm-lib."""
    if not tool:
        return toolchain.require_tool("llvm-lib", "merging COFF static libraries", prefer_native=True)
    found = shutil.which(tool)
    if found is None:
        raise BundleError(f"the librarian this leg merges with, {tool}, does not exist (did the step that "
                          "installs it run?)")
    return found


def _windows_path(path: Path) -> str:
    resolved = os.path.abspath(path)
    return resolved.replace("/", "\\") if sys.platform.startswith("win") else resolved


def _tool(argv: list[str], *, what: str, log: Path | None, cwd: Path | None = None,
          stdin: str | None = None, cleanup: Path | None = None,
          aliases: Mapping[str, str] | None = None) -> None:
    """Run one archiving tool; `aliases` maps scratch names back to the real inputs
    in its messages."""
    completed = subprocess.run(argv, cwd=cwd, input=stdin, text=True,
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                               check=False)
    if aliases:
        completed.stdout = _ALIAS_NAME.sub(
            lambda match: aliases.get(match.group(0), match.group(0)), completed.stdout)
    if log is not None:
        log.parent.mkdir(parents=True, exist_ok=True)
        with open(log, "a", encoding="utf-8") as log_file:
            log_file.write(f"$ {' '.join(argv)}\n")
            if stdin:
                log_file.write(stdin)
            log_file.write(completed.stdout)
    if completed.returncode != 0:
        if cleanup is not None:
            cleanup.unlink(missing_ok=True)
        raise BundleError(
            f"{os.path.basename(argv[0])} failed (exit {completed.returncode}) {what}:\n"
            f"{completed.stdout.strip()}"
        )


# --- self-containment ------------------------------------------------------------------

def undefined_internal_symbols(archive: Path, prefixes: Sequence[str]) -> list[str]:
    """Symbols with one of `prefixes` that `archive` references but defines nowhere:
    a bundle missing one of the engine's own libraries. Weak references are allowed.

    Names are compared without the Mach-O leading underscore, so `_ZN6tflite`
    works for ELF and Mach-O alike.
    """
    undefined, defined = nm_symbol_table(archive)
    dangling = undefined - defined
    return sorted(name for name in dangling if name.startswith(tuple(prefixes)))


# --- command line ----------------------------------------------------------------------
#
#   python -m backends.steps.bundle --from-tree DIR [--exclude REGEX] --out FILE
#   python -m backends.steps.bundle --from-list FILE --out FILE
#   python -m backends.steps.bundle --check-self-contained ARCHIVE --prefixes P1|P2|...
#
# --from-tree is upstream's bundle-static.sh strategy (every archive under the build tree,
# docs/upstream.md#static-bundle) for the recipes that plan it; --from-list merges a list the build wrote (the
# Bazel closure, backends.steps.bazel_closure).

DEFAULT_TREE_EXCLUDE = r"(/testdata/|-src/)"
_MAX_SYMBOLS_SHOWN = 200


def tree_archives(root: Path, suffix: str, exclude_regex: str,
                  skip: Path | None = None) -> list[Path]:
    """Every `*<suffix>` static archive under `root`, sorted, minus `exclude_regex`.

    The regex is matched against the path below `root` with a leading "/" (so
    `/testdata/` matches a top-level testdata dir): where the tree itself lives, e.g.
    a checkout under `.../anira-src/`, must not exclude everything. `skip` (the output
    of a previous run) is never an input."""
    root = Path(os.path.abspath(root))
    skipped = Path(os.path.abspath(skip)) if skip is not None else None
    found = sorted(path for path in root.rglob(f"*{suffix}")
                   if path.is_file() and is_static_library(path) and path != skipped)
    relative = {Path("/" + path.relative_to(root).as_posix()): path for path in found}
    return [relative[kept] for kept in filter_libs(list(relative), exclude_regex)]


def listed_archives(list_file: Path) -> list[Path]:
    """The archives a list file names, one absolute path a line (blank lines ignored),
    duplicates dropped."""
    try:
        lines = list_file.read_text(encoding="utf-8").splitlines()
    except OSError as error:
        raise BundleError(f"cannot read the archive list {list_file}: {error}") from None
    paths = [Path(line.strip()) for line in lines if line.strip()]
    relative = [str(path) for path in paths if not path.is_absolute()]
    if relative:
        raise BundleError(f"{list_file}: archive paths must be absolute; relative: "
                          f"{', '.join(relative)}")
    if not paths:
        raise BundleError(f"{list_file} lists no archives; did the step that writes it "
                          "(e.g. `bazel_closure collect`) succeed?")
    return _unique(paths)


def common_format(archives: Sequence[Path]) -> str:
    """The one object format ("elf", "macho", "coff") of `archives`; archives without a
    recognisable object member do not vote. Mixed formats are an error: a host tool's
    archive in a cross build's tree, to exclude."""
    missing = [str(path) for path in archives if not path.is_file()]
    if missing:
        raise BundleError(f"missing archives: {', '.join(missing)}")
    by_format: dict[str, list[Path]] = {}
    for path in archives:
        fmt = object_format(path)
        if fmt in ("elf", "macho", "coff"):
            by_format.setdefault(fmt, []).append(path)
    if not by_format:
        raise BundleError(
            f"cannot tell the object format of {len(archives)} archives (no ELF, Mach-O or "
            f"COFF member; thin or bitcode archives?): {', '.join(map(str, archives[:5]))}")
    if len(by_format) > 1:
        detail = "; ".join(f"{fmt}: {len(paths)} (e.g. {paths[0]})"
                           for fmt, paths in sorted(by_format.items()))
        raise BundleError(f"archives of mixed object formats ({detail}); exclude the foreign "
                          "ones (host tools) with --exclude")
    return next(iter(by_format))


def merge_archives(archives: Sequence[Path], out: Path) -> None:
    fmt = common_format(archives)
    print(f"bundle: merging {len(archives)} {fmt} archives into {out}:", flush=True)
    for path in archives:
        print(f"  {path}", flush=True)
    merge_static(archives, out, fmt)
    print(f"bundle: wrote {out}", flush=True)


def demangle(names: Sequence[str]) -> list[str]:
    """`names` through c++filt / llvm-cxxfilt when one is installed, else unchanged."""
    tool = shutil.which("c++filt") or toolchain.find_tool("llvm-cxxfilt")
    if tool is None or not names:
        return list(names)
    completed = subprocess.run([tool], input="\n".join(names) + "\n", capture_output=True,
                               text=True, check=False)
    demangled = completed.stdout.splitlines()
    if completed.returncode != 0 or len(demangled) != len(names):
        return list(names)
    return demangled


def split_prefixes(text: str) -> list[str]:
    """`P1|P2` (as upstream's grep) or `P1,P2` (as the LiteRT recipe writes them)."""
    return [prefix.strip() for prefix in re.split(r"[|,]", text) if prefix.strip()]


def check_self_contained(archive: Path, prefixes: Sequence[str]) -> int:
    """The number of defined external symbols of `archive`; a `BundleError` listing the
    internal symbols it references but defines nowhere."""
    if not archive.is_file():
        raise BundleError(f"{archive}: no such archive (did the merge step run?)")
    dangling = undefined_internal_symbols(archive, prefixes)
    if dangling:
        shown = dangling[:_MAX_SYMBOLS_SHOWN]
        lines = [f"  {pretty}" + (f"  [{name}]" if pretty != name else "")
                 for name, pretty in zip(shown, demangle(shown))]
        if len(dangling) > len(shown):
            lines.append(f"  ... and {len(dangling) - len(shown)} more")
        raise BundleError(
            f"{archive}: merged archive has internal undefined symbols with no in-archive "
            f"definition (unlinkable): {len(dangling)} with prefixes {'|'.join(prefixes)}:\n"
            + "\n".join(lines)
            + "\nthe merge is missing the libraries that define them: check the archive list "
              "(closure query kinds, exclusions) against the build")
    _, defined = nm_symbol_table(archive)
    return len(defined)


def _argument_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m backends.steps.bundle",
        description="Merge static archives into one, or check a merged archive is self-contained.")
    mode = parser.add_mutually_exclusive_group(required=True)
    mode.add_argument("--from-tree", type=Path, metavar="DIR",
                      help="merge every *.a (*.lib when --out ends in .lib) under DIR")
    mode.add_argument("--from-list", type=Path, metavar="FILE",
                      help="merge the archives FILE lists, one absolute path a line")
    mode.add_argument("--check-self-contained", type=Path, metavar="ARCHIVE",
                      help="fail if ARCHIVE references internal symbols it does not define")
    parser.add_argument("--exclude", metavar="REGEX", default=None,
                        help=f"with --from-tree: skip paths (below DIR) matching REGEX "
                             f"(default {DEFAULT_TREE_EXCLUDE}; an empty REGEX keeps all)")
    parser.add_argument("--out", type=Path, metavar="FILE", help="the merged archive")
    parser.add_argument("--prefixes", metavar="P1|P2|...",
                        help="with --check-self-contained: the internal symbol prefixes")
    return parser


def _validate(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    merging = args.from_tree is not None or args.from_list is not None
    if merging and args.out is None:
        parser.error("--from-tree and --from-list need --out")
    if args.exclude is not None and args.from_tree is None:
        parser.error("--exclude only applies to --from-tree")
    if args.check_self_contained is not None and not split_prefixes(args.prefixes or ""):
        parser.error("--check-self-contained needs --prefixes (e.g. _ZN6tflite|_ZN4absl)")


def _run(args: argparse.Namespace) -> None:
    if args.check_self_contained is not None:
        archive: Path = args.check_self_contained
        count = check_self_contained(archive, split_prefixes(args.prefixes))
        print(f"{archive}: self-contained ({count} defined symbols)")
        return
    out: Path = args.out
    if args.from_tree is not None:
        suffix = ".lib" if out.name.lower().endswith(".lib") else ".a"
        exclude = DEFAULT_TREE_EXCLUDE if args.exclude is None else args.exclude
        archives = tree_archives(args.from_tree, suffix, exclude, skip=out)
        if not archives:
            raise BundleError(f"no *{suffix} archives found under {args.from_tree}"
                              + (f" (after excluding {exclude})" if exclude else ""))
    else:
        archives = listed_archives(args.from_list)
    merge_archives(archives, out)


def main(argv: Sequence[str] | None = None) -> int:
    parser = _argument_parser()
    args = parser.parse_args(argv)
    _validate(parser, args)
    try:
        _run(args)
    except (BundleError, toolchain.ToolMissing, re.error) as error:
        print(f"ERROR: {error}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
