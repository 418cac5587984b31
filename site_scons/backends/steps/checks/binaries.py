"""The libraries themselves: each is a real binary of the leg's OS and architecture (a
4-byte stub is not), exports what the contract names, and a shared library carries an
identity (SONAME, install name, DLL name) the package may ship."""
from __future__ import annotations

import re
from fnmatch import fnmatch
from pathlib import PurePosixPath

from backends.binfmt.inspect import macho_install_names
from backends.model.platforms import platform_table
from backends.model.plan import Contract
from backends.steps.checks.view import ArchiveView, group_of, is_shared_library_name, slice_of

FORMAT_NAMES = {"elf": "ELF", "macho": "Mach-O", "pe": "PE", "coff": "COFF", "wasm": "WebAssembly"}


def _slice_machines(os_name: str, slice_dir: str) -> set[str]:
    """The machines an xcframework slice directory names (`ios-arm64_x86_64-simulator`)."""
    known = sorted(platform_table().oses[os_name].slice_machines, key=len, reverse=True)
    pattern = "|".join(re.escape(machine) for machine in known)
    return set(re.findall(pattern, slice_dir.partition("-")[2])) if pattern else set()


def expected_binary(platform: str, member: str) -> tuple[tuple[str, ...], set[str]] | None:
    """(formats, architectures) a library at `member` must have on `platform`; None when
    the platform does not say (a fixture platform, an unknown ABI directory)."""
    table = platform_table()
    os_name = platform.partition("-")[0]
    if os_name not in table.oses:
        return None
    facts = table.oses[os_name]
    known = table.platforms.get(platform)
    if facts.slice_machines:  # an xcframework: each slice says its machines
        return facts.formats, _slice_machines(os_name, slice_of(member))
    if known is not None and known.machines:
        return facts.formats, set(known.machines)
    if facts.abi_machines:  # the Android bundle and AAR: lib/<abi>/ says its machine
        abi = group_of(member, platform)
        return (facts.formats, {facts.abi_machines[abi]}) if abi in facts.abi_machines else None
    if known is not None and known.slices:  # a universal binary holds every slice's machine
        return facts.formats, {m for token in known.slices for m in table[token].machines}
    return None


def check_formats(view: ArchiveView, platform: str) -> list[str]:
    problems = []
    for name in view.libraries:
        wanted = expected_binary(platform, name)
        if wanted is None:
            continue
        formats, archs = wanted
        fmt, found = view.archs(name)
        if fmt not in formats or (archs and found != archs):
            what = FORMAT_NAMES[fmt] + f" {'+'.join(sorted(found))}" if fmt in FORMAT_NAMES else "no binary"
            expected = "/".join(FORMAT_NAMES[f] for f in formats) + f" {'+'.join(sorted(archs))}"
            size = view.size(name)
            problems.append(f"{name} ({size} bytes) is {what.strip()}; {platform} needs {expected.strip()}")
    return problems


def slices(view: ArchiveView, name: str, platform: str) -> list[str]:
    """The architectures of a universal macOS library, each to be checked on its own (a
    symbol in only one slice fails a consumer of the other); [""] for any other library."""
    if not platform.endswith("-universal") or not view.is_binary(name):
        return [""]
    fmt, archs = view.archs(name)
    return sorted(archs) if fmt == "macho" and len(archs) > 1 else [""]


def check_symbols(view: ArchiveView, contract: Contract) -> list[str]:
    problems = []
    for lib_pattern, symbol in contract.symbols:
        name = view.first(lib_pattern)
        if name is None:
            problems.append(f"no library {lib_pattern} to look for {symbol} in")
            continue
        for arch in slices(view, name, contract.platform):
            if symbol not in view.symbols(name, arch)[0]:
                problems.append(f"{name}{f' ({arch} slice)' if arch else ''} does not export {symbol}")
    return problems


def check_install_names(view: ArchiveView, install_names: tuple[tuple[str, str], ...]) -> list[str]:
    """A dylib's id in every slice: consumers record it and look for the library there."""
    problems = []
    for lib_pattern, install_name in install_names:
        name = view.first(lib_pattern)
        if name is None:
            problems.append(f"no library {lib_pattern} to read the install name of")
            continue
        for arch, found in macho_install_names(view.file(name)).items():
            if found != install_name:
                problems.append(f"{name} ({arch}) has the install name {found or 'none'}, expected "
                                f"{install_name}: consumers would look for the library there")
    return problems


def shared_libraries(view: ArchiveView) -> list[str]:
    return [name for name in view.binaries if is_shared_library_name(name)]


def check_identities(view: ArchiveView, allowed: tuple[str, ...]) -> list[str]:
    """Every shared library is one the package may ship, by the name the loader knows it
    by (a renamed file keeps its SONAME): an allow-list fails on what nobody listed."""
    if not allowed:
        return []
    problems = []
    for name in shared_libraries(view):
        identity = PurePosixPath(view.identity(name) or name).name
        if not any(fnmatch(identity, pattern) for pattern in allowed):
            problems.append(f"{name} is {identity}, not a library this package ships "
                            f"(allowed: {', '.join(allowed)})")
    return problems
