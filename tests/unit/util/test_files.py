"""util/files.py: hashing, atomic writes, canonical JSON, tree listings, link-or-copy."""
from __future__ import annotations

import errno
import hashlib
import os
from pathlib import Path

import pytest

from backends.util import files
from backends.util.files import (
    FileEntry, atomic_write_bytes, atomic_write_text, hardlink_or_copy, list_tree, sha256_file, write_json,
)
from hashed_bytes import count_hashed_bytes


def test_sha256_file_streams_multiple_chunks(tmp_path: Path) -> None:
    data = os.urandom(files.CHUNK_SIZE * 2 + 123)
    path = tmp_path / "blob"
    path.write_bytes(data)
    assert sha256_file(path) == hashlib.sha256(data).hexdigest()


def test_atomic_write_replaces_and_leaves_no_temp(tmp_path: Path) -> None:
    target = tmp_path / "out.bin"
    target.write_bytes(b"old")
    atomic_write_bytes(target, b"new")
    atomic_write_text(tmp_path / "out.txt", "héllo\n")
    assert target.read_bytes() == b"new"
    assert (tmp_path / "out.txt").read_bytes() == "héllo\n".encode()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.bin", "out.txt"]


def test_atomic_write_failure_keeps_old_content(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    target = tmp_path / "out.bin"
    target.write_bytes(b"old")

    def refuse(src: str, dst: str) -> None:
        raise OSError(errno.EIO, "simulated")

    monkeypatch.setattr(files.os, "replace", refuse)
    with pytest.raises(OSError):
        atomic_write_bytes(target, b"new")
    assert target.read_bytes() == b"old"
    assert [p.name for p in tmp_path.iterdir()] == ["out.bin"]


def test_write_json_is_canonical(tmp_path: Path) -> None:
    write_json(tmp_path / "a.json", {"b": 1, "a": [1, {"d": 2, "c": 3}]})
    assert (tmp_path / "a.json").read_text() == (
        '{\n  "a": [\n    1,\n    {\n      "c": 3,\n      "d": 2\n    }\n  ],\n  "b": 1\n}\n'
    )


def test_list_tree_kinds_modes_order_and_no_following(tmp_path: Path) -> None:
    (tmp_path / "b" / "c").mkdir(parents=True)
    (tmp_path / "b" / "tool").write_bytes(b"#!/bin/sh\n")
    (tmp_path / "b" / "tool").chmod(0o700)
    (tmp_path / "b" / "data").write_bytes(b"xyz")
    (tmp_path / "b" / "data").chmod(0o600)
    (tmp_path / "a-file").write_bytes(b"")
    os.symlink("b", tmp_path / "link-to-dir")
    os.symlink("missing", tmp_path / "dangling")

    entries = list_tree(tmp_path)
    assert [e.path for e in entries] == sorted(e.path for e in entries)
    by_path = {e.path: e for e in entries}
    assert set(by_path) == {"a-file", "b", "b/c", "b/data", "b/tool", "dangling", "link-to-dir"}
    assert by_path["b"] == FileEntry("b", "dir", 0, 0o755)
    assert by_path["b/tool"].mode == 0o755 and by_path["b/data"].mode == 0o644
    assert by_path["b/data"].sha256 == hashlib.sha256(b"xyz").hexdigest()
    assert by_path["b/data"].size == 3
    assert by_path["link-to-dir"] == FileEntry("link-to-dir", "symlink", 1, 0o777, None, "b")
    assert by_path["dangling"].target == "missing"
    assert all(e.sha256 is None for e in list_tree(tmp_path, with_hashes=False))


def test_list_tree_rejects_fifos(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "pipe")
    with pytest.raises(ValueError, match="unsupported file type"):
        list_tree(tmp_path)


def test_hardlink_or_copy_links_when_possible(tmp_path: Path) -> None:
    (tmp_path / "src").write_bytes(b"data")
    hardlink_or_copy(tmp_path / "src", tmp_path / "dst")
    assert (tmp_path / "dst").read_bytes() == b"data"
    assert os.stat(tmp_path / "dst").st_ino == os.stat(tmp_path / "src").st_ino


@pytest.mark.parametrize("code", [errno.EXDEV, errno.EPERM])
def test_hardlink_or_copy_falls_back_to_copy(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, code: int) -> None:
    (tmp_path / "src").write_bytes(b"data")

    def no_link(src: str, dst: str) -> None:
        raise OSError(code, os.strerror(code))

    monkeypatch.setattr(files.os, "link", no_link)
    hardlink_or_copy(tmp_path / "src", tmp_path / "dst")
    assert (tmp_path / "dst").read_bytes() == b"data"
    assert os.stat(tmp_path / "dst").st_ino != os.stat(tmp_path / "src").st_ino


def test_hardlink_or_copy_other_errors_propagate(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        hardlink_or_copy(tmp_path / "missing", tmp_path / "dst")


def test_hardlink_or_copy_recreates_symlinks(tmp_path: Path) -> None:
    os.symlink("somewhere/else", tmp_path / "link")
    hardlink_or_copy(tmp_path / "link", tmp_path / "copy")
    assert os.readlink(tmp_path / "copy") == "somewhere/else"


def test_a_run_reads_an_unchanged_file_once(tmp_path: Path, run_digests: None,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    archive = tmp_path / "a.zip"
    archive.write_bytes(b"archive bytes")
    expected = hashlib.sha256(b"archive bytes").hexdigest()
    read = count_hashed_bytes(monkeypatch)
    assert sha256_file(archive) == sha256_file(archive) == expected
    assert sum(read) == len(b"archive bytes")


def test_a_file_replaced_in_a_run_is_read_again(tmp_path: Path, run_digests: None) -> None:
    archive = tmp_path / "a.zip"
    archive.write_bytes(b"first")
    assert sha256_file(archive) == hashlib.sha256(b"first").hexdigest()
    files.atomic_write_bytes(archive, b"other")  # same size, another inode: what a step does
    assert sha256_file(archive) == hashlib.sha256(b"other").hexdigest()


def test_a_hard_link_keeps_the_digest_the_run_took(tmp_path: Path, run_digests: None,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    entry, archive = tmp_path / "entry.zip", tmp_path / "a.zip"
    entry.write_bytes(b"cached archive")
    digest = sha256_file(entry)
    read = count_hashed_bytes(monkeypatch)
    hardlink_or_copy(entry, archive)  # moves the inode's ctime: the identity the run knew is gone
    assert sha256_file(archive) == sha256_file(entry) == digest
    assert read == []


def test_without_a_run_every_call_reads(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    archive = tmp_path / "a.zip"
    archive.write_bytes(b"bytes")
    read = count_hashed_bytes(monkeypatch)
    sha256_file(archive)
    sha256_file(archive)
    assert sum(read) == 2 * len(b"bytes")
