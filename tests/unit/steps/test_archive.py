"""archive.py: deterministic zip (parallel deflate, hand-written container), tar.gz, 7z."""
from __future__ import annotations

import errno
import hashlib
import os
import shutil
import stat
import subprocess
import tarfile
import time
import zipfile
import zlib
from pathlib import Path

import pytest

from backends.steps import archive
from backends.steps.archive import ArchiveError, sha256_sidecar, write_archive
from backends.steps.extract import extract
from backends.util.errors import EnvironmentFailure
from backends.util.files import list_tree

SMALL_PIECE = 64 << 10  # so "big" multi-piece files stay small in tests


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    root = tmp_path / "stage"
    (root / "lib" / "cmake").mkdir(parents=True)
    (root / "bin").mkdir()
    (root / "include" / "empty").mkdir(parents=True)
    (root / "include" / "api.h").write_text("#pragma once\nint api(void);\n" * 50)
    (root / "lib" / "libx.so.1.2").write_bytes(b"\x7fELF" + bytes(4000) + os.urandom(4000))
    (root / "lib" / "libx.so.1.2").chmod(0o700)  # exec for owner only -> 0755
    os.symlink("libx.so.1.2", root / "lib" / "libx.so")
    os.symlink("../include", root / "lib" / "inc")
    os.symlink("gone", root / "lib" / "dangling")
    (root / "lib" / "cmake" / "xConfig.cmake").write_text("set(X_FOUND 1)\n")
    (root / "lib" / "cmake" / "xConfig.cmake").chmod(0o600)  # -> 0644
    (root / "bin" / "tool").write_bytes(b"#!/bin/sh\necho tool\n")
    (root / "bin" / "tool").chmod(0o755)
    (root / "bin" / "empty.txt").write_bytes(b"")
    (root / "nön-ascii.txt").write_text("ü\n")
    # several pieces with SMALL_PIECE: one compressible, one that deflate cannot shrink
    (root / "lib" / "big.a").write_bytes(b"".join(os.urandom(64) + b"A" * 960 for _ in range(300)))
    (root / "lib" / "noise.bin").write_bytes(os.urandom(3 * SMALL_PIECE + 5))
    return root


@pytest.fixture(autouse=True)
def small_pieces(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(archive, "DEFLATE_PIECE", SMALL_PIECE)
    monkeypatch.delenv("SOURCE_DATE_EPOCH", raising=False)


def touch_everything(root: Path, when: float) -> None:
    for directory, dirs, files in os.walk(root):
        for name in dirs + files:
            os.utime(os.path.join(directory, name), (when, when), follow_symlinks=False)


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def unix_mode(info: zipfile.ZipInfo) -> int:
    return info.external_attr >> 16


@pytest.mark.parametrize("fmt", ["zip", "tar.gz", "7z"])
def test_same_tree_gives_same_bytes(tree: Path, tmp_path: Path, fmt: str) -> None:
    write_archive(tree, tmp_path / f"a.{fmt}", fmt, threads=1)
    touch_everything(tree, time.time() - 86400 * 400)
    write_archive(tree, tmp_path / f"b.{fmt}", fmt, threads=2)
    assert digest(tmp_path / f"a.{fmt}") == digest(tmp_path / f"b.{fmt}")
    assert not list(tmp_path.glob("*.tmp-*"))


def test_zip_layout_modes_times_and_content(tree: Path, tmp_path: Path) -> None:
    out = tmp_path / "pkg.zip"
    write_archive(tree, out)
    with zipfile.ZipFile(out) as zipped:
        assert zipped.testzip() is None
        infos = {info.filename: info for info in zipped.infolist()}
        names = [info.filename for info in zipped.infolist()]
        assert [n.rstrip("/") for n in names] == [e.path for e in list_tree(tree)]  # sorted, no top dir
        assert "include/empty/" in infos and "stage/" not in infos
        assert all(info.date_time == (1980, 1, 1, 0, 0, 0) for info in infos.values())
        assert unix_mode(infos["lib/libx.so.1.2"]) == stat.S_IFREG | 0o755
        assert unix_mode(infos["bin/tool"]) == stat.S_IFREG | 0o755
        assert unix_mode(infos["lib/cmake/xConfig.cmake"]) == stat.S_IFREG | 0o644
        assert unix_mode(infos["lib/"]) == stat.S_IFDIR | 0o755
        assert unix_mode(infos["lib/libx.so"]) == stat.S_IFLNK | 0o777
        assert all(info.create_system == 3 for info in infos.values())
        assert zipped.read("lib/libx.so") == b"libx.so.1.2"
        assert infos["lib/noise.bin"].compress_type == zipfile.ZIP_STORED  # did not shrink
        assert infos["bin/empty.txt"].compress_type == zipfile.ZIP_STORED
        assert infos["lib/big.a"].compress_type == zipfile.ZIP_DEFLATED
        for name, info in infos.items():
            if stat.S_ISREG(unix_mode(info)):
                assert zipped.read(name) == (tree / name).read_bytes(), name


def test_zip_passes_unzip_and_keeps_symlinks(tree: Path, tmp_path: Path) -> None:
    if shutil.which("unzip") is None:
        pytest.skip("unzip is not installed")
    out = tmp_path / "pkg.zip"
    write_archive(tree, out)
    tested = subprocess.run(["unzip", "-t", str(out)], capture_output=True, text=True)
    assert tested.returncode == 0, tested.stdout + tested.stderr
    unpacked = tmp_path / "unzipped"
    subprocess.run(["unzip", "-q", str(out), "-d", str(unpacked)], check=True)
    assert os.readlink(unpacked / "lib" / "libx.so") == "libx.so.1.2"
    assert os.readlink(unpacked / "lib" / "dangling") == "gone"
    assert os.access(unpacked / "bin" / "tool", os.X_OK)
    assert [(e.path, e.kind, e.mode, e.sha256, e.target) for e in list_tree(unpacked)] == \
        [(e.path, e.kind, e.mode, e.sha256, e.target) for e in list_tree(tree)]


def test_zip_round_trips_through_cmake_tar(tree: Path, tmp_path: Path) -> None:
    if shutil.which("cmake") is None:
        pytest.skip("cmake is not installed")
    out = tmp_path / "pkg.zip"
    write_archive(tree, out)
    unpacked = tmp_path / "cmake-unpacked"
    unpacked.mkdir()
    subprocess.run(["cmake", "-E", "tar", "xf", str(out)], cwd=unpacked, check=True)
    assert list_tree(unpacked) == list_tree(tree)


def test_zip_round_trips_through_our_extract(tree: Path, tmp_path: Path) -> None:
    write_archive(tree, tmp_path / "pkg.zip")
    assert extract(tmp_path / "pkg.zip", tmp_path / "out") == list_tree(tree)


def test_zip64_records_when_limits_are_reached(tree: Path, tmp_path: Path,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(archive, "ZIP64_LIMIT", 1000)  # sizes, offsets, directory size
    monkeypatch.setattr(archive, "ZIP64_COUNT_LIMIT", 5)  # entry count
    out = tmp_path / "zip64.zip"
    write_archive(tree, out)
    raw = out.read_bytes()
    assert b"PK\x06\x06" in raw and b"PK\x06\x07" in raw  # ZIP64 end record and locator
    with zipfile.ZipFile(out) as zipped:
        assert zipped.testzip() is None
        big = zipped.getinfo("lib/big.a")
        assert big.file_size == (tree / "lib" / "big.a").stat().st_size
        assert big.extract_version == 45
        assert zipped.read("lib/noise.bin") == (tree / "lib" / "noise.bin").read_bytes()
    if shutil.which("unzip"):
        tested = subprocess.run(["unzip", "-t", str(out)], capture_output=True, text=True)
        assert tested.returncode == 0, tested.stdout + tested.stderr
    assert extract(out, tmp_path / "out") == list_tree(tree)


def test_source_date_epoch_is_used_and_clamped(tree: Path, tmp_path: Path,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SOURCE_DATE_EPOCH", "1700000000")  # 2023-11-14 22:13:20 UTC
    write_archive(tree, tmp_path / "a.zip")
    write_archive(tree, tmp_path / "a.tar.gz", "tar.gz")
    with zipfile.ZipFile(tmp_path / "a.zip") as zipped:
        assert zipped.infolist()[0].date_time == (2023, 11, 14, 22, 13, 20)
    with tarfile.open(tmp_path / "a.tar.gz") as tar:
        assert {member.mtime for member in tar.getmembers()} == {1700000000}
    monkeypatch.setenv("SOURCE_DATE_EPOCH", "0")
    write_archive(tree, tmp_path / "b.zip")
    with zipfile.ZipFile(tmp_path / "b.zip") as zipped:
        assert zipped.infolist()[0].date_time == (1980, 1, 1, 0, 0, 0)
    monkeypatch.setenv("SOURCE_DATE_EPOCH", "yesterday")
    with pytest.raises(ArchiveError, match="SOURCE_DATE_EPOCH"):
        write_archive(tree, tmp_path / "c.zip")


def test_tar_gz_round_trip(tree: Path, tmp_path: Path) -> None:
    out = tmp_path / "pkg.tar.gz"
    write_archive(tree, out, "tar.gz")
    assert out.read_bytes()[4:8] == bytes(4)  # gzip header mtime 0
    with tarfile.open(out) as tar:
        members = tar.getmembers()
        assert [m.name for m in members] == [e.path for e in list_tree(tree)]
        assert all((m.uid, m.gid, m.uname, m.gname) == (0, 0, "", "") for m in members)
        assert tar.getmember("lib/libx.so").issym()
        assert tar.getmember("bin/tool").mode == 0o755
    assert extract(out, tmp_path / "out") == list_tree(tree)


def test_7z_round_trip(tree: Path, tmp_path: Path) -> None:
    out = tmp_path / "pkg.7z"
    write_archive(tree, out, "7z")
    assert extract(out, tmp_path / "out") == list_tree(tree)


def test_failure_leaves_no_partial_output(tree: Path, tmp_path: Path,
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    out = tmp_path / "pkg.zip"
    out.write_bytes(b"previous archive")

    def broken(job: object, level: int) -> None:
        raise OSError("disk on fire")

    monkeypatch.setattr(archive, "_compress_piece", broken)
    with pytest.raises(OSError, match="disk on fire"):
        write_archive(tree, out, threads=2)
    assert out.read_bytes() == b"previous archive"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["pkg.zip", "stage"]


def test_bad_arguments(tree: Path, tmp_path: Path) -> None:
    with pytest.raises(ArchiveError, match="unknown archive format 'rar'"):
        write_archive(tree, tmp_path / "a.rar", "rar")
    with pytest.raises(ArchiveError, match="not a directory"):
        write_archive(tmp_path / "missing", tmp_path / "a.zip")


def test_sha256_sidecar(tree: Path, tmp_path: Path) -> None:
    out = tmp_path / "pkg.zip"
    write_archive(tree, out)
    sidecar = sha256_sidecar(out)
    assert sidecar == tmp_path / "pkg.zip.sha256"
    assert sidecar.read_text() == f"{digest(out)}  pkg.zip\n"
    if shutil.which("sha256sum"):
        subprocess.run(["sha256sum", "--check", "--quiet", sidecar.name], cwd=tmp_path, check=True)


def test_crc32_combine_matches_zlib() -> None:
    for first, second in [(b"", b""), (b"a", b""), (b"", b"b"), (b"hello ", b"world"),
                          (os.urandom(1000), os.urandom(70000))]:
        combined = archive._crc32_combine(zlib.crc32(first), zlib.crc32(second), len(second))
        assert combined == zlib.crc32(first + second)


def test_a_full_disk_under_an_archive_names_the_archive(tmp_path: Path) -> None:
    """The archive step writes through to a disk that is full (/dev/full stands in for the temp)."""
    if not os.path.exists("/dev/full"):
        pytest.skip("no /dev/full here")
    tree, out = tmp_path / "tree", tmp_path / "out" / "a.tar.gz"
    tree.mkdir()
    (tree / "lib.so").write_bytes(os.urandom(1 << 16))
    out.parent.mkdir()
    os.symlink("/dev/full", archive.temp_path_for(out))
    with pytest.raises(EnvironmentFailure) as raised:
        archive.write_archive(tree, out, "tar.gz")
    assert (raised.value.errno, raised.value.filename) == (errno.ENOSPC, str(out))
