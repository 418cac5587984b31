"""Checking a leg's contract on the archive itself, never on the staging tree: what a
user downloads is what passed. Each concern is a module of `checks/`."""
from __future__ import annotations

import tarfile
import zipfile
import zlib
from pathlib import Path
from typing import Any, Callable

from backends.binfmt.inspect import InspectError
from backends.model.plan import Contract, Evidence
from backends.steps.checks.accelerators import check_accelerators
from backends.steps.checks.binaries import check_formats, check_identities, check_install_names, check_symbols
from backends.steps.checks.described import described_problems
from backends.steps.checks.floors import check_floors, describe
from backends.steps.checks.licenses import check_license_texts
from backends.steps.checks.members import check_members, folds_case
from backends.steps.checks.paths import check_paths
from backends.steps.checks.undefined import check_undefined
from backends.steps.checks.versions import check_header_api, check_versions
from backends.steps.checks.view import ArchiveError, ArchiveView, open_archive
from backends.steps.checks.xcframework import check_xcframeworks
from backends.util.errors import BackendsError
from backends.util.globs import matches, matches_any

_UNREADABLE = (ArchiveError, OSError, EOFError, zipfile.BadZipFile, zlib.error, tarfile.TarError)


class ContractError(BackendsError, AssertionError):
    """The archive breaks its leg's contract; the message lists every violation."""


def check(archive: Path, contract: Contract, version: str, build_root: str = "",
          described: list[dict[str, Any]] | None = None) -> list[str]:
    """Every violation of `contract` by `archive` (empty when it holds). With `described` (a
    manifest's file list: a binary cache entry's, or the one the archive step made from the
    stage), the members must be exactly what it lists, before the contract is looked at.
    One opening of the archive, and one pass over its members on every core, serve both."""
    try:
        view = open_archive(archive)
    except _UNREADABLE as error:
        return [f"{archive.name} cannot be read: {error}"]
    try:
        unsafe = check_members(view, folds_case(contract.platform))
        if unsafe:  # nothing inside an archive that could escape its root is looked at
            return unsafe
        view.scan(hashing=described is not None)
        undescribed = described_problems(view, described) if described is not None else []
        return undescribed or _check_contents(view, contract, version, build_root)
    except _UNREADABLE as error:  # a member whose data is corrupt
        return [f"{archive.name} cannot be read: {error}"]
    finally:
        view.close()


def _check_contents(view: ArchiveView, contract: Contract, version: str, build_root: str) -> list[str]:
    reads_symbols = bool(contract.symbols or contract.accelerators or contract.foreign_accelerators
                         or contract.system_symbols or contract.internal_prefixes)
    view.prefetch(view.libraries, symbols=reads_symbols)
    checks: list[Callable[[], list[str]]] = [
        lambda: _check_size(view, contract),
        lambda: [f"missing required {p}" for p in contract.required if not any(matches(n, p) for n in view.names)],
        lambda: [f"forbidden file {n}" for n in view.names if matches_any(n, contract.forbidden)],
        lambda: check_license_texts(view),
        lambda: check_formats(view, contract.platform),
        lambda: check_floors(view, contract.floors),
        lambda: check_symbols(view, contract),
        lambda: check_install_names(view, contract.install_names),
        lambda: check_xcframeworks(view, contract.min_os),
        lambda: check_accelerators(view, contract.platform, contract.accelerators, contract.foreign_accelerators),
        lambda: check_identities(view, contract.allowed_libraries),
        lambda: check_undefined(view, contract.platform, contract.system_symbols, contract.internal_prefixes),
        lambda: check_header_api(view, contract, version),
        lambda: check_versions(view, contract.versions, version),
    ]
    if contract.relocatable:
        checks.append(lambda: check_paths(view, build_root))
    problems = [problem for run in checks for problem in _guarded(view, run)]
    return problems + list(view.unreadable.values())


def _guarded(view: ArchiveView, run: Callable[[], list[str]]) -> list[str]:
    """A check's violations. A library its tool cannot read (a truncated `\\x7fELF`) is
    recorded as one more, naming the member, and ends only that check."""
    try:
        return run()
    except InspectError as error:
        view.note_unreadable(error)
        return []


def _check_size(view: ArchiveView, contract: Contract) -> list[str]:
    size = view.path.stat().st_size
    if size <= contract.max_bytes:
        return []
    return [f"{view.path.name} is {size:,} bytes, over the {contract.max_bytes:,}-byte release-asset limit "
            "(GitHub refuses larger uploads)"]


def verify(archive: Path, contract: Contract, version: str, build_root: str = "",
           described: list[dict[str, Any]] | None = None) -> dict[str, object]:
    problems = check(archive, contract, version, build_root, described)
    if problems:
        raise ContractError(f"{archive.name} breaks its contract:\n  - " + "\n  - ".join(problems))
    return {"archive": archive.name, "checked": summary(contract)}


def summary(contract: Contract) -> list[str]:
    """What verify checks, in words: the verify manifest and `scons plan=1` print it."""
    checked = [f"requires {p}" for p in contract.required] + [f"forbids {p}" for p in contract.forbidden]
    checked += [f"{lib} exports {sym}" for lib, sym in contract.symbols]
    checked += [f"{lib} has the install name {name}" for lib, name in contract.install_names]
    checked += [_evidence_text(e, "shows") for e in contract.accelerators]
    checked += [_evidence_text(e, "shows no") for e in contract.foreign_accelerators]
    if contract.platform:
        checked.append(f"every library is a {contract.platform} binary")
    if contract.min_os:
        checked.append(f"xcframework slices need at most OS {contract.min_os}")
    if contract.allowed_libraries:
        checked.append("shared libraries only " + ", ".join(contract.allowed_libraries))
    if contract.system_symbols or contract.internal_prefixes:
        checked.append("static libraries self-contained")
    checked += [f"version from {p.kind} {p.member}" for p in contract.versions]
    if contract.header_api:
        checked.append("header API <= library API")
    checked += [f"{floor.library} is no stub ({describe(floor)})" for floor in contract.floors]
    checked.append("members stay inside the package")
    checked.append("license texts are not empty")
    if contract.relocatable:
        checked.append("no foreign absolute paths in CMake, pkg-config, libtool, qmake or other build config files")
    checked.append(f"size <= {contract.max_bytes}")
    return checked


def _evidence_text(evidence: Evidence, verb: str) -> str:
    items = [*evidence.files, *evidence.symbols, *(f"links {n}" for n in evidence.links),
             *(f"target {t}" for t in evidence.targets)]
    return f"{verb} {evidence.accelerator} evidence ({', '.join(items)})"
