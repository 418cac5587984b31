"""Checking a leg's contract on the archive itself (spec §8.1: never on the staging tree)."""
from __future__ import annotations

import os
import posixpath
import re
import tarfile
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from ..model.plan import Contract
from .bundle import object_format
from .globs import matches, matches_any
from .inspect import dll_exports, exported_symbols, macho_install_names, needed_libraries
from .universal import macho_archs

_API_VERSION = re.compile(rb"#define\s+ORT_API_VERSION\s+(\d+)")
_VERSIONED_LIB = re.compile(r"\.(\d+)\.(\d+)\.(\d+)(?:\.dylib)?$")
_IMPORTED_TARGET = re.compile(rb"add_library\(\s*(?:[A-Za-z0-9_]+::)?([A-Za-z0-9_]+)\s+(?:STATIC|SHARED|INTERFACE|UNKNOWN)\s+IMPORTED")
_BUILD_PATH = re.compile(rb"(?:/[^\s\"';]*)?/cmake-out[^\s\"';]*|[A-Za-z]:[\\/][^\s\"';]*[\\/]cmake-out")


class ContractError(AssertionError):
    """The archive breaks its leg's contract; the message lists every violation."""


@dataclass
class ArchiveView:
    """Names, lazy member bytes and symlink targets of a zip / tar.gz / 7z archive."""

    path: Path
    names: list[str]
    read: Callable[[str], bytes]
    symlinks: dict[str, str]  # member -> link target
    keep: object = None  # resources that must live as long as the view


def open_archive(path: Path) -> ArchiveView:
    if path.name.endswith(".zip"):
        handle = zipfile.ZipFile(path)
        infos = [i for i in handle.infolist() if not i.is_dir()]
        links = {i.filename: handle.read(i).decode() for i in infos
                 if (i.external_attr >> 16) & 0o170000 == 0o120000}
        return ArchiveView(path, [i.filename for i in infos], handle.read, links)
    if path.name.endswith((".tar.gz", ".tgz")):
        tar = tarfile.open(path)
        members = {m.name: m for m in tar.getmembers() if not m.isdir()}
        return ArchiveView(path, list(members), lambda n: tar.extractfile(members[n]).read(),  # type: ignore[union-attr]
                           {n: m.linkname for n, m in members.items() if m.issym()})
    if path.name.endswith(".7z"):
        import py7zr

        unpacked = tempfile.TemporaryDirectory(prefix="verify-7z-")
        with py7zr.SevenZipFile(path) as seven:
            seven.extractall(path=unpacked.name)
        root = Path(unpacked.name)
        entries = [p for p in sorted(root.rglob("*")) if p.is_symlink() or p.is_file()]
        view = ArchiveView(path, [p.relative_to(root).as_posix() for p in entries],
                           lambda n: (root / n).read_bytes(),
                           {p.relative_to(root).as_posix(): os.readlink(p) for p in entries if p.is_symlink()})
        view.keep = unpacked  # removed with the view
        return view
    raise ContractError(f"{path}: unknown archive format")


def _first(view: ArchiveView, pattern: str) -> str | None:
    """The first member matching `pattern`, with symlinks inside the archive followed."""
    for name in sorted(view.names):
        if matches(name, pattern):
            return _follow(view, name)
    return None


def _follow(view: ArchiveView, name: str) -> str | None:
    for _ in range(16):
        if name not in view.symlinks:
            return name if name in view.names else None
        target = view.symlinks[name]
        name = posixpath.normpath(posixpath.join(posixpath.dirname(name), target))
    return None


def _member_file(view: ArchiveView, name: str, tmp: Path) -> Path:
    target = tmp / Path(name).name
    target.write_bytes(view.read(name))
    return target


def _symbols(path: Path) -> set[str]:
    return set(dll_exports(path)) if path.suffix.lower() == ".dll" else exported_symbols(path)


def _slice_symbols(path: Path) -> dict[str, set[str]]:
    """Exported symbols per Mach-O slice of a universal file (" (<arch> slice)": symbols),
    else {"": symbols}: a symbol a universal library promises must be in every slice."""
    archs = macho_archs(path) if object_format(path) == "macho" else []
    if len(archs) < 2:
        return {"": _symbols(path)}
    return {f" ({arch} slice)": exported_symbols(path, arch) for arch in archs}


def _library_api(view: ArchiveView, pattern: str, version: str) -> int:
    for name in view.names:
        match = _VERSIONED_LIB.search(name)
        if matches(name, pattern.rstrip("*") + "*") and match:
            return int(match.group(2))
    return int(version.split(".")[1])


def check(archive: Path, contract: Contract, version: str, build_root: str = "") -> list[str]:
    """Every violation of `contract` by `archive` (empty when it holds)."""
    view = open_archive(archive)
    problems: list[str] = []
    size = archive.stat().st_size
    if size > contract.max_bytes:
        problems.append(f"{archive.name} is {size / 1024**3:.2f} GB, over the {contract.max_bytes / 1024**3:.0f} GB "
                        "release-asset limit")
    for pattern in contract.required:
        if not any(matches(n, pattern) for n in view.names):
            problems.append(f"missing required {pattern}")
    for name in view.names:
        if matches_any(name, contract.forbidden):
            problems.append(f"forbidden file {name}")
    with tempfile.TemporaryDirectory(prefix="verify-") as tmp_dir:
        tmp = Path(tmp_dir)
        problems += _check_binaries(view, contract, tmp)
    problems += _check_headers(view, contract, version)
    problems += _check_cmake(view, contract, build_root)
    return problems


def _check_binaries(view: ArchiveView, contract: Contract, tmp: Path) -> list[str]:
    problems = []
    exports: dict[str, dict[str, set[str]]] = {}
    for lib_pattern, symbol in contract.symbols + contract.no_symbols:
        name = _first(view, lib_pattern)
        if name is None:
            problems.append(f"no library {lib_pattern} to look for {symbol} in")
            continue
        if name not in exports:
            exports[name] = _slice_symbols(_member_file(view, name, tmp))
        wanted = (lib_pattern, symbol) in contract.symbols
        for where, symbols in exports[name].items():
            if wanted and symbol not in symbols:
                problems.append(f"{name}{where} does not export {symbol}")
            elif not wanted and symbol in symbols:
                problems.append(f"{name}{where} exports {symbol}, which this flavor must not ship")
    for lib_pattern, install_name in contract.install_names:
        name = _first(view, lib_pattern)
        if name is None:
            problems.append(f"no library {lib_pattern} to read the install name of")
            continue
        for arch, found in macho_install_names(_member_file(view, name, tmp)).items():
            if found != install_name:
                problems.append(f"{name} ({arch}) has the install name {found or 'none'}, "
                                f"expected {install_name}: consumers would look for the library there")
    for lib_pattern, needed in contract.links + contract.no_links:
        name = _first(view, lib_pattern)
        if name is None:
            problems.append(f"no library {lib_pattern} to read the linked libraries of")
            continue
        linked = any(needed in dependency for dependency in needed_libraries(_member_file(view, name, tmp)))
        if (lib_pattern, needed) in contract.links and not linked:
            problems.append(f"{name} does not link {needed}: the accelerator is not in this build")
        elif (lib_pattern, needed) in contract.no_links and linked:
            problems.append(f"{name} links {needed}, which this flavor must not ship")
    if contract.macho_archs:
        wanted = sorted(contract.macho_archs)
        for name in view.names:
            if name.startswith("lib/") and name.endswith((".a", ".dylib")) and name not in view.symlinks:
                archs = sorted(macho_archs(_member_file(view, name, tmp)))
                if archs != wanted:
                    problems.append(f"{name} has Mach-O slices {archs or 'none'}, expected {wanted}")
    return problems


def _check_headers(view: ArchiveView, contract: Contract, version: str) -> list[str]:
    if not contract.header_api:
        return []
    header, lib_pattern = contract.header_api
    name = _first(view, header)
    if name is None:
        return [f"no {header} to read ORT_API_VERSION from"]
    match = _API_VERSION.search(view.read(name))
    if not match:
        return [f"{name} defines no ORT_API_VERSION"]
    header_api, lib_api = int(match.group(1)), _library_api(view, lib_pattern, version)
    if header_api > lib_api:
        return [f"{name} declares ORT_API_VERSION {header_api} but the library serves API {lib_api}: "
                "consumers would fail with 'requested API version not available'"]
    return []


def _check_cmake(view: ArchiveView, contract: Contract, build_root: str) -> list[str]:
    configs = [n for n in view.names if n.endswith(".cmake") and n not in view.symlinks]
    if not (contract.cmake_targets or contract.no_cmake_targets or (contract.relocatable and configs)):
        return []
    exported: set[str] = set()
    problems = []
    for name in configs:
        text = view.read(name)
        exported.update(t.decode() for t in _IMPORTED_TARGET.findall(text))
        roots = {build_root, build_root.replace("\\", "/")} - {""}
        if contract.relocatable and (_BUILD_PATH.search(text) or any(r.encode() in text for r in roots)):
            problems.append(f"{name} refers to a build-tree path: the package is not relocatable")
    problems += [f"the CMake config exports no target {t}" for t in contract.cmake_targets if t not in exported]
    problems += [f"the CMake config exports {t}, which this flavor must not ship"
                 for t in contract.no_cmake_targets if t in exported]
    return problems


def verify(archive: Path, contract: Contract, version: str, build_root: str = "") -> dict[str, object]:
    problems = check(archive, contract, version, build_root)
    if problems:
        raise ContractError(f"{archive.name} breaks its contract:\n  - " + "\n  - ".join(problems))
    return {"archive": archive.name, "checked": _summary(contract)}


def _summary(contract: Contract) -> list[str]:
    checked = [f"requires {p}" for p in contract.required] + [f"forbids {p}" for p in contract.forbidden]
    checked += [f"{lib} exports {sym}" for lib, sym in contract.symbols]
    checked += [f"{lib} does not export {sym}" for lib, sym in contract.no_symbols]
    checked += [f"{lib} has the install name {name}" for lib, name in contract.install_names]
    if contract.macho_archs:
        checked.append("Mach-O " + "+".join(contract.macho_archs))
    if contract.header_api:
        checked.append("header API <= library API")
    checked.append(f"size <= {contract.max_bytes}")
    return checked
