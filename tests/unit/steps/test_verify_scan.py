"""Verify's one pass over an archive (checks/scan.py): every member inflated once, its
sha256 taken as it streams, an ELF shared object's symbols, needed libraries, SONAME and
versions read from its own tables (no scratch copy, no tool), any other library extracted
in the same pass; and the stage held to the manifest the archive step made of it."""
from __future__ import annotations

import hashlib
import io
import os
import struct
import tarfile
from pathlib import Path

import pytest

from backends.binfmt.elf import DT_GNU_HASH, DT_HASH
from backends.steps.archive import write_archive
from backends.steps.checks.described import described_problems, tree_problems
from backends.steps.checks.view import open_archive
from backends.util.files import list_tree
from backends.binfmt.inspect import (
    binary_archs, elf_version_definitions, exported_symbols, library_identity, needed_libraries,
)
from binaries import elf_shared, elf_static, zip_members

HEADER = b"#pragma once\n"


@pytest.fixture(scope="module")
def libraries(tmp_path_factory) -> dict[str, Path]:
    work = tmp_path_factory.mktemp("libs")
    dependency = elf_shared(work / "libdep.so", ("dep_function",), soname="libdep.so")
    return {
        "lib/libengine.so.1.2.3": elf_shared(work / "libengine.so.1.2.3", ("EngineApi", "EngineRun"),
                                             soname="libengine.so.1", needed=[dependency], version_node="VERS_1.2.3"),
        "lib/libstatic.a": elf_static(work / "libstatic.a", ("static_function",), ("EngineApi",)),
    }


def package(path: Path, libraries: dict[str, Path]) -> Path:
    return zip_members(path, {"include/engine.h": HEADER, **libraries})


def counted(view) -> list[str]:
    """The names the view opens from now on."""
    opened: list[str] = []
    inner = view._open
    view._open = lambda name: (opened.append(name), inner(name))[1]
    return opened


def test_one_pass_hashes_every_member_and_reads_each_once(tmp_path, libraries):
    view = open_archive(package(tmp_path / "pkg.zip", libraries))
    try:
        opened = counted(view)
        view.scan(hashing=True)
        files = [{"path": n, "size": len(data), "mode": "0o644", "sha256": hashlib.sha256(data).hexdigest()}
                 for n, data in {"include/engine.h": HEADER,
                                 **{n: p.read_bytes() for n, p in libraries.items()}}.items()]
        assert described_problems(view, files) == []
        engine = "lib/libengine.so.1.2.3"
        assert view.symbols(engine)[0] >= {"EngineApi", "EngineRun"} and view.needed(engine) == ["libdep.so"]
        assert sorted(opened) == sorted(["include/engine.h", *libraries])
    finally:
        view.close()


def test_an_elf_shared_object_is_read_from_its_tables_without_a_scratch_copy(tmp_path, libraries):
    view = open_archive(package(tmp_path / "pkg.zip", libraries))
    try:
        view.scan(hashing=True)
        name, library = "lib/libengine.so.1.2.3", libraries["lib/libengine.so.1.2.3"]
        assert view.symbols(name) == (exported_symbols(library), set())
        assert view.needed(name) == needed_libraries(library)
        assert view.identity(name) == library_identity(library) == "libengine.so.1"
        assert view.version_definitions(name) == elf_version_definitions(library) == ["VERS_1.2.3"]
        assert view.archs(name) == binary_archs(library) and view.size(name) == library.stat().st_size
        assert view.is_binary(name) and not view.is_static(name)
        assert not any(view.scratch.rglob("libengine*")), "extracted although its tables were read"
    finally:
        view.close()


def test_any_other_library_is_extracted_in_the_same_pass(tmp_path, libraries):
    view = open_archive(package(tmp_path / "pkg.zip", libraries))
    try:
        opened = counted(view)
        view.scan(hashing=False)
        assert view.is_static("lib/libstatic.a")
        assert view.symbols("lib/libstatic.a") == ({"static_function", "fixture_references"}, {"EngineApi"})
        assert view.file("lib/libstatic.a").read_bytes() == libraries["lib/libstatic.a"].read_bytes()
        assert sorted(opened) == sorted(libraries), "without hashing only the libraries are read, once"
    finally:
        view.close()


def without_hash_tables(data: bytes) -> bytes:
    """An x86_64 shared object whose DT_GNU_HASH and DT_HASH entries are DT_DEBUG ones."""
    phoff, = struct.unpack_from("<Q", data, 32)
    entsize, count = struct.unpack_from("<HH", data, 54)
    for index in range(count):
        kind, _, offset, _, _, size = struct.unpack_from("<IIQQQQ", data, phoff + index * entsize)
        if kind == 2:  # PT_DYNAMIC
            break
    patched = bytearray(data)
    for at in range(offset, offset + size, 16):
        if struct.unpack_from("<q", data, at)[0] in (DT_GNU_HASH, DT_HASH):
            struct.pack_into("<q", patched, at, 21)
    return bytes(patched)


def test_tables_that_cannot_be_read_from_the_stream_go_to_the_tools(tmp_path, libraries):
    """No hash table in the dynamic segment: the symbols cannot be counted from it, so
    llvm-nm reads the whole file (it finds them by section header)."""
    broken = tmp_path / "libengine.so.1.2.3"
    broken.write_bytes(without_hash_tables(libraries["lib/libengine.so.1.2.3"].read_bytes()))
    view = open_archive(package(tmp_path / "pkg.zip", {"lib/libengine.so.1.2.3": broken}))
    try:
        view.scan(hashing=True)
        assert view.facts("lib/libengine.so.1.2.3") is None
        assert view.symbols("lib/libengine.so.1.2.3")[0] >= {"EngineApi", "EngineRun"}
    finally:
        view.close()


def test_a_tarball_is_scanned_in_order(tmp_path, libraries):
    archive = tmp_path / "pkg.tar.gz"
    with tarfile.open(archive, "w:gz") as tar:
        for name, library in libraries.items():
            tar.add(library, name)
    view = open_archive(archive)
    try:
        view.scan(hashing=True)
        for name, library in libraries.items():
            assert view.digest(name) == (library.stat().st_size, hashlib.sha256(library.read_bytes()).hexdigest())
        assert "EngineApi" in view.symbols("lib/libengine.so.1.2.3")[0]
    finally:
        view.close()


def manifest_files(stage: Path) -> list[dict[str, object]]:
    """The manifest's file list as the archive step makes it (steps/manifest.py)."""
    return [{"path": e.path, "size": e.size, "mode": oct(e.mode), **({"sha256": e.sha256} if e.sha256 else {}),
             **({"link": e.target} if e.target else {})} for e in list_tree(stage) if e.kind != "dir"]


def sha256_of(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture
def stage(tmp_path) -> Path:
    root = tmp_path / "stage"
    (root / "lib").mkdir(parents=True)
    (root / "include").mkdir()
    (root / "include/engine.h").write_bytes(HEADER)
    (root / "lib/libengine.so.1").write_bytes(b"\x7fELF library")
    os.symlink("libengine.so.1", root / "lib/libengine.so")
    return root


def test_the_stage_is_what_its_manifest_lists(stage):
    files = manifest_files(stage)
    assert tree_problems(stage, files, sha256_of) == []
    (stage / "include/engine.h").write_bytes(b"#pragma twice\n")
    (stage / "include/extra.h").write_bytes(HEADER)
    os.remove(stage / "lib/libengine.so")
    os.symlink("elsewhere.so", stage / "lib/libengine.so")
    assert tree_problems(stage, files, sha256_of) == [
        f"include/extra.h is in {stage} but not in the manifest",
        f"include/engine.h in {stage} is not what the manifest lists (sha256, size differ)",
        f"lib/libengine.so in {stage} is not what the manifest lists (link, size differ)",
    ]


def test_an_archive_written_from_the_stage_is_its_manifest_member_by_member(tmp_path, stage):
    archive = tmp_path / "pkg.zip"
    write_archive(stage, archive)
    files = manifest_files(stage)
    view = open_archive(archive)
    try:
        view.scan(hashing=True)
        assert described_problems(view, files) == []
        changed = [dict(record, sha256="0" * 64) if record["path"] == "include/engine.h" else record
                   for record in files]
        assert described_problems(view, changed) == [
            "member include/engine.h (13 bytes, sha256 "
            f"{hashlib.sha256(HEADER).hexdigest()[:12]}) is not what its manifest lists (13 bytes, sha256 000000000000)"]
    finally:
        view.close()


def test_a_corrupt_member_is_found_by_the_pass(tmp_path, libraries):
    archive = package(tmp_path / "pkg.zip", libraries)
    data = bytearray(archive.read_bytes())
    at = data.find(libraries["lib/libengine.so.1.2.3"].read_bytes()[64:128])
    data[at + 10] ^= 0xFF
    archive.write_bytes(bytes(data))
    view = open_archive(archive)
    try:
        with pytest.raises(Exception, match="(?i)crc"):
            view.scan(hashing=True)
    finally:
        view.close()


def test_the_scan_reads_a_member_given_as_a_stream(tmp_path, libraries):
    """io streams without a name work too (7z views read files from a temporary tree)."""
    data = libraries["lib/libengine.so.1.2.3"].read_bytes()
    from backends.binfmt.scan import Member, scan

    found = scan([Member("lib/libengine.so.1.2.3", len(data), True, lambda: tmp_path / "slot")],
                 lambda name: io.BytesIO(data), hashing=True, concurrent=True)
    scanned = found["lib/libengine.so.1.2.3"]
    assert scanned.sha256 == hashlib.sha256(data).hexdigest() and scanned.size == len(data)
    assert scanned.facts is not None and "EngineApi" in scanned.facts.defined and scanned.extracted is None


def test_a_stage_written_to_after_its_step_fails_verify_and_the_smoke(tmp_path, stage):
    """What the smoke consumed and what the archive holds are the stage its record signs."""
    from types import SimpleNamespace

    from backends.graph.actions import StepFailure, _stage_as_recorded
    from backends.util.digests import DigestCache
    from backends.graph.records import Inputs, Records

    records = Records(tmp_path, DigestCache(None))
    steps = tmp_path / "steps"
    steps.mkdir()
    records.write(steps / "stage.json", {}, Inputs((), ()), (), trees=(stage,))
    run = SimpleNamespace(records=records)
    nodes = SimpleNamespace(dirs=SimpleNamespace(stage=stage, steps=steps),
                            plan=SimpleNamespace(leg=SimpleNamespace(aggregate="")))
    _stage_as_recorded(run, nodes, "while the smoke ran")
    (stage / "include/engine.h").write_bytes(b"#pragma twice\n")
    with pytest.raises(StepFailure, match=f"{stage} changed while the smoke ran, after its step recorded it"):
        _stage_as_recorded(run, nodes, "while the smoke ran")
