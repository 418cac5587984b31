"""Version identity: what the archive says about its own version (a version file, the
library's file name, ELF version definition, dylib current version, DLL version
resource) is the leg's version, so `version=1.27.0` over a 1.26.0 tarball cannot publish
an `onnxruntime-1.27.0-...` archive holding `libonnxruntime.so.1.26.0`. ORT headers
must not declare an API newer than the library serves."""
from __future__ import annotations

import re

from backends.binfmt.inspect import dll_file_version, dylib_version
from backends.model.engine import version_key
from backends.model.plan import Contract, VersionProbe
from backends.model.schema import VERSION
from backends.steps.checks.view import ArchiveView
from backends.util.globs import matches

_API_VERSION = re.compile(rb"#define\s+ORT_API_VERSION\s+(\d+)")
_VERSIONED_LIB = re.compile(r"\.(\d+)\.(\d+)\.(\d+)(?:\.dylib)?$")
_RELEASE = re.compile(r"[0-9]+(?:\.[0-9]+)*")


def check_versions(view: ArchiveView, probes: tuple[VersionProbe, ...], version: str) -> list[str]:
    problems = []
    for probe in probes:
        stated = _read(view, probe)
        if not stated:
            problems.append(f"no version evidence: {_describe(probe)}")
        for where, value in stated:
            if not _same(value, version, probe.kind):
                problems.append(f"{where} says version {value}, but the leg is version {version}: "
                                "the archive holds another release's content")
    return problems


def _describe(probe: VersionProbe) -> str:
    return {"text": f"{probe.member} states no version ({probe.pattern})",
            "file-name": f"no library {probe.member} with an x.y.z file name",
            "elf-version": f"{probe.member} defines no {probe.pattern}x.y.z version",
            "dylib": f"{probe.member} has no LC_ID_DYLIB current version",
            "dll": f"{probe.member} has no VERSIONINFO resource"}.get(probe.kind, probe.kind)


def _read(view: ArchiveView, probe: VersionProbe) -> list[tuple[str, str]]:
    """(where, stated version) pairs; empty when the evidence is missing."""
    if probe.kind == "file-name":
        return [(name, ".".join(m.groups())) for name in view.names
                if matches(name, probe.member) and (m := _VERSIONED_LIB.search(name))]
    member = view.first(probe.member)
    if member is None:
        return []
    if probe.kind == "text":
        match = re.search(probe.pattern.encode(), view.read(member))
        return [(member, match.group(1).decode())] if match else []
    if not view.is_binary(member):
        return []
    if probe.kind == "elf-version":
        prefix = probe.pattern
        found = [name[len(prefix):] for name in view.version_definitions(member)
                 if name.startswith(prefix) and _RELEASE.fullmatch(name[len(prefix):])]
        return [(f"{member} ({prefix}{v})", v) for v in found]
    reader = {"dylib": dylib_version, "dll": dll_file_version}[probe.kind]
    value = reader(view.file(member))
    return [(member, value)] if value else []


def _same(stated: str, version: str, kind: str) -> bool:
    """`2.13.0+cpu` states 2.13.0; a DLL's 1.26.20260508.2 states 1.26 (ORT stamps the
    build date into the third field)."""
    # Only a whole version compares by its numbers: `1.26.0/../x` is not version 1.26.0.
    want = version_key(version, 3) if VERSION.fullmatch(version) else None
    have = version_key(stated, 3)
    if not (want and have):
        return stated == version
    if kind == "dll":
        return have[:2] == want[:2]
    return have == want


def check_header_api(view: ArchiveView, contract: Contract, version: str) -> list[str]:
    if not contract.header_api:
        return []
    header, lib_pattern = contract.header_api
    name = view.first(header)
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


def _library_api(view: ArchiveView, pattern: str, version: str) -> int:
    for name in view.names:
        match = _VERSIONED_LIB.search(name)
        if matches(name, pattern.rstrip("*") + "*") and match:
            return int(match.group(2))
    return int(version.split(".")[1])
