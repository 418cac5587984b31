"""Member names are judged in the one canonical form unpacking writes (`./x`, `a//x`,
`a/./x` and `a\\x` are `x`, `a/x`, `a/x`, `a/x`), through the helper extraction uses too:
no spelling of a name may hide a symlink that escapes the package or a second copy of a
file. Special mode bits, hard links and members beneath a symlink are violations too."""
from __future__ import annotations

import io
import tarfile
import warnings
import zipfile
from pathlib import Path

import pytest

from backends.model.plan import Contract
from backends.steps.checks.view import open_archive
from backends.steps.extract import ExtractError, canonical_name, extract
from backends.steps.verify import check
from binaries import zip_members

HEADER = b"#pragma once\n"


def zip_entries(path: Path, entries: list[tuple[str, int, bytes]]) -> Path:
    """A zip of (name, unix mode with its file type, data) entries, duplicates allowed."""
    with warnings.catch_warnings(), zipfile.ZipFile(path, "w") as archive:
        warnings.simplefilter("ignore", UserWarning)  # zipfile warns on a duplicate name
        for name, mode, data in entries:
            info = zipfile.ZipInfo(name, date_time=(2020, 1, 1, 0, 0, 0))
            info.create_system, info.external_attr = 3, mode << 16
            archive.writestr(info, data)
    return path


def tar_entries(path: Path, entries: list[tuple[str, bytes, int, str]]) -> Path:
    """A tar.gz of (name, tar type, mode, link target) entries; files hold HEADER."""
    with tarfile.open(path, "w:gz") as archive:
        for name, kind, mode, link in entries:
            info = tarfile.TarInfo(name)
            info.type, info.mode, info.linkname = kind, mode, link
            info.size = len(HEADER) if kind == tarfile.REGTYPE else 0
            archive.addfile(info, io.BytesIO(HEADER) if kind == tarfile.REGTYPE else None)
    return path


FILE, LINK, DIRECTORY = 0o100644, 0o120777, 0o040755


# --- symlinks: every spelling of an escaping link is caught --------------------------------

ESCAPING = [
    ("lib//evil", "../../outside", "lib/evil"),
    ("./evil", "../outside", "evil"),
    ("lib/./evil", "../../outside", "lib/evil"),
    ("./lib//./evil", "../../outside", "lib/evil"),
    ("lib\\evil", "../../outside", "lib/evil"),
    ("lib/", "../outside", "lib"),  # a symlink stored with a directory's trailing slash
]


@pytest.mark.parametrize("stored, target, name", ESCAPING)
def test_an_escaping_symlink_is_caught_under_every_spelling(tmp_path, stored, target, name):
    archive = zip_entries(tmp_path / "pkg.zip", [("include/a.h", FILE, HEADER), (stored, LINK, target.encode())])
    assert check(archive, Contract(), "1.0.0") == [
        f"symlink {name} (stored as {stored!r}) -> {target} resolves outside the package root"]


@pytest.mark.parametrize("stored, target, name", ESCAPING[:4])
def test_an_escaping_symlink_in_a_tarball_is_caught_under_every_spelling(tmp_path, stored, target, name):
    archive = tar_entries(tmp_path / "pkg.tar.gz", [("include/a.h", tarfile.REGTYPE, 0o644, ""),
                                                    (stored, tarfile.SYMTYPE, 0o777, target)])
    assert check(archive, Contract(), "1.0.0") == [
        f"symlink {name} (stored as {stored!r}) -> {target} resolves outside the package root"]


@pytest.mark.parametrize("stored, target, name", ESCAPING[:5])
def test_extraction_refuses_what_verify_refuses(tmp_path, stored, target, name):
    """One canonical form: the archive verify fails is one extraction will not unpack."""
    archive = zip_entries(tmp_path / "pkg.zip", [("include/a.h", FILE, HEADER), (stored, LINK, target.encode())])
    with pytest.raises(ExtractError, match="outside the tree"):
        extract(archive, tmp_path / "out")
    assert canonical_name(stored) == name


def test_a_link_through_a_case_folded_link_escapes_where_the_os_folds_case(tmp_path):
    """On macOS, `up/..` goes through the symlink `UP -> ..`: one directory more."""
    archive = zip_members(tmp_path / "pkg.zip", {"include/a.h": HEADER},
                          {"lib/UP": "..", "lib/chain": "up/../.."})
    assert check(archive, Contract(platform="linux-x86_64"), "1.0.0") == []
    assert check(archive, Contract(platform="macos-arm64"), "1.0.0") == [
        "symlink lib/chain -> up/../.. resolves outside the package root"]


def test_a_member_beneath_a_symlink_is_caught(tmp_path):
    """`lib/d -> ..` is the root, so `lib/d/e -> ../x` lies in the root and escapes it:
    names alone do not tell, so nothing may lie beneath a symlink (extraction agrees)."""
    archive = zip_members(tmp_path / "pkg.zip", {"include/a.h": HEADER}, {"lib/d": "..", "lib/d/e": "../x"})
    assert check(archive, Contract(), "1.0.0") == [
        "member lib/d/e lies beneath the symlink lib/d: unpacking would write through it"]
    with pytest.raises(ExtractError, match="lies beneath the symlink"):
        extract(archive, tmp_path / "out")


def test_names_that_stay_inside_pass_in_their_canonical_form(tmp_path):
    archive = zip_entries(tmp_path / "pkg.zip", [
        ("./", DIRECTORY, b""),
        ("./include/a.h", FILE, HEADER),
        ("lib//libx.so.1", FILE, HEADER),
        ("lib/./libx.so", LINK, b"libx.so.1"),  # relative, inside
        ("./lib/up", LINK, b".."),  # the package root: inside
        ("lib/headers", LINK, b"./../include/"),
    ])
    contract = Contract(required=("include/a.h", "lib/libx.so.1", "lib/libx.so"))
    assert check(archive, contract, "1.0.0") == []
    view = open_archive(archive)
    try:
        assert view.names == ["include/a.h", "lib/libx.so.1", "lib/libx.so", "lib/up", "lib/headers"]
        assert view.read("lib/libx.so.1") == HEADER and view.first("lib/libx.so") == "lib/libx.so.1"
    finally:
        view.close()
    entries = {e.path for e in extract(archive, tmp_path / "out")}
    assert {"include/a.h", "lib/libx.so.1", "lib/libx.so", "lib/up", "lib/headers"} <= entries


# --- one name, one file -------------------------------------------------------------------

@pytest.mark.parametrize("first, second", [
    ("include/a.h", "include/a.h"),
    ("include/a.h", "./include/a.h"),
    ("include/a.h", "include//a.h"),
    ("include/a.h", "include\\a.h"),
])
def test_a_member_stored_twice_is_caught(tmp_path, first, second):
    archive = zip_entries(tmp_path / "pkg.zip", [(first, FILE, HEADER), (second, FILE, b"#error other\n")])
    assert check(archive, Contract(), "1.0.0") == [
        f"member include/a.h is stored 2 times: {first!r}, {second!r}; unpacking keeps one of them"]


def test_a_file_and_a_symlink_of_one_name_are_caught_in_a_tarball(tmp_path):
    archive = tar_entries(tmp_path / "pkg.tar.gz", [("lib/libx.so", tarfile.REGTYPE, 0o644, ""),
                                                    ("./lib/libx.so", tarfile.SYMTYPE, 0o777, "libx.so.1")])
    (problem,) = check(archive, Contract(), "1.0.0")
    assert problem.startswith("member lib/libx.so is stored 2 times: 'lib/libx.so', './lib/libx.so'")


@pytest.mark.parametrize("platform", ["macos-arm64", "ios", "windows-x86_64"])
def test_names_differing_in_case_are_one_file_where_the_os_folds_case(tmp_path, platform):
    archive = zip_entries(tmp_path / "pkg.zip", [("include/A.h", FILE, HEADER), ("include/a.h", FILE, HEADER)])
    assert check(archive, Contract(platform=platform), "1.0.0") == [
        "member include/A.h is stored 2 times (one name on a case-insensitive file system): 'include/A.h', "
        "'include/a.h'; unpacking keeps one of them"]
    assert check(archive, Contract(platform="linux-x86_64"), "1.0.0") == []


def test_a_directory_listed_twice_is_harmless(tmp_path):
    archive = zip_entries(tmp_path / "pkg.zip", [("include/", DIRECTORY, b""), ("./include/", DIRECTORY, b""),
                                                 ("include/a.h", FILE, HEADER)])
    assert check(archive, Contract(platform="macos-arm64"), "1.0.0") == []


# --- what unpacking must not create -------------------------------------------------------

@pytest.mark.parametrize("mode, bit", [
    (0o104755, "setuid"),
    (0o102755, "setgid"),
    (0o101644, "sticky"),
    (0o041777, "sticky"),  # a world-writable sticky directory
])
def test_special_mode_bits_in_a_zip_are_caught(tmp_path, mode, bit):
    name = "lib/" if mode >> 12 == 0o04 else "lib/libx.so"
    archive = zip_entries(tmp_path / "pkg.zip", [(name, mode, b"" if name.endswith("/") else HEADER)])
    assert check(archive, Contract(), "1.0.0") == [
        f"member {name.rstrip('/')} has the {bit} bit (mode {mode & 0o7777:o}): unpacking could keep it"]


def test_a_setuid_library_in_a_tarball_is_caught(tmp_path):
    archive = tar_entries(tmp_path / "pkg.tar.gz", [("lib/libx.so", tarfile.REGTYPE, 0o6755, "")])
    assert check(archive, Contract(), "1.0.0") == [
        "member lib/libx.so has the setuid bit (mode 6755): unpacking could keep it",
        "member lib/libx.so has the setgid bit (mode 6755): unpacking could keep it"]


def test_ordinary_modes_pass(tmp_path):
    archive = zip_entries(tmp_path / "pkg.zip", [("bin/", DIRECTORY, b""), ("bin/tool", 0o100755, HEADER),
                                                 ("include/a.h", FILE, HEADER), ("lib/libx.so", 0o100775, HEADER)])
    assert check(archive, Contract(), "1.0.0") == []


def test_a_hard_link_under_any_spelling_is_caught(tmp_path):
    archive = tar_entries(tmp_path / "pkg.tar.gz", [("include/a.h", tarfile.REGTYPE, 0o644, ""),
                                                    ("./include//b.h", tarfile.LNKTYPE, 0o644, "include/a.h")])
    assert check(archive, Contract(), "1.0.0") == [
        "member include/b.h (stored as './include//b.h') is a hard link (to include/a.h): "
        "archives hold files and symlinks"]


def test_a_symlink_named_like_the_root_is_caught(tmp_path):
    archive = zip_entries(tmp_path / "pkg.zip", [("include/a.h", FILE, HEADER), (".", LINK, b"include")])
    assert check(archive, Contract(), "1.0.0") == ["member '.' is a symlink named like the archive root"]


def test_a_7z_with_a_member_beneath_a_symlink_is_never_extracted(tmp_path, monkeypatch):
    import os

    import py7zr

    os.symlink("..", tmp_path / "up")
    archive = tmp_path / "pkg.7z"
    with py7zr.SevenZipFile(archive, "w") as handle:
        handle.write(tmp_path / "up", "lib/up")
        handle.writestr(HEADER, "lib/up/escaped.h")

    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError("an archive that writes through a symlink was extracted")

    monkeypatch.setattr(py7zr.SevenZipFile, "extractall", refuse)
    problems = check(archive, Contract(), "1.0.0")
    assert "member lib/up/escaped.h lies beneath the symlink lib/up: unpacking would write through it" in problems
