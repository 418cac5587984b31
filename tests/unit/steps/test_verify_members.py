"""What unpacking a package may create, in every archive format verify reads: files and
symlinks inside its root, nothing else."""
from __future__ import annotations

import io
import tarfile
import zipfile
from pathlib import Path

import pytest

from backends.model.plan import Contract
from backends.steps.verify import check
from binaries import zip_members

HEADER = b"#pragma once\n"


def tar_gz(path: Path, members: list[tarfile.TarInfo]) -> Path:
    with tarfile.open(path, "w:gz") as archive:
        for info in members:
            archive.addfile(info, io.BytesIO(HEADER) if info.isreg() else None)
    return path


def tar_member(name: str, kind: bytes = tarfile.REGTYPE, link: str = "") -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type, info.linkname = kind, link
    info.size = len(HEADER) if kind == tarfile.REGTYPE else 0
    return info


@pytest.mark.parametrize("name, reason", [
    ("/etc/cron.d/package", "has an absolute path"),
    ("include/../../outside.h", "has a '..' component"),
    ("C:/Windows/evil.dll", "has a drive letter"),
])
def test_unsafe_names_in_a_zip(tmp_path, name, reason):
    archive = zip_members(tmp_path / "pkg.zip", {"include/a.h": HEADER, name: HEADER})
    assert check(archive, Contract(required=("include/a.h",)), "1.0.0") == [f"member {name!r} {reason}"]


@pytest.mark.parametrize("link, target, problem", [
    ("lib/libx.so", "/usr/lib/libx.so", "symlink lib/libx.so -> '/usr/lib/libx.so' is absolute: it points outside "
                                        "the package"),
    ("lib/libx.so", "../../libx.so", "symlink lib/libx.so -> ../../libx.so resolves outside the package root"),
    ("lib/up", "..", ""),  # lib/up -> the package root: inside
    ("lib/chain", "up/../..", "symlink lib/chain -> up/../.. resolves outside the package root"),
])
def test_symlinks_stay_inside(tmp_path, link, target, problem):
    archive = zip_members(tmp_path / "pkg.zip", {"include/a.h": HEADER}, {"lib/up": "..", link: target})
    assert check(archive, Contract(), "1.0.0") == ([problem] if problem else [])


def test_hard_links_and_devices_in_a_tarball(tmp_path):
    archive = tar_gz(tmp_path / "pkg.tar.gz", [
        tar_member("include/a.h"),
        tar_member("include/b.h", tarfile.LNKTYPE, "include/a.h"),
        tar_member("lib/tty", tarfile.CHRTYPE),
        tar_member("lib/pipe", tarfile.FIFOTYPE),
    ])
    assert check(archive, Contract(), "1.0.0") == [
        "member include/b.h is a hard link (to include/a.h): archives hold files and symlinks",
        "member lib/tty is a device, fifo or other special file",
        "member lib/pipe is a device, fifo or other special file",
    ]


def test_a_zip_member_with_a_device_mode(tmp_path):
    archive = tmp_path / "pkg.zip"
    with zipfile.ZipFile(archive, "w") as handle:
        info = zipfile.ZipInfo("lib/null")
        info.create_system = 3
        info.external_attr = 0o020666 << 16  # S_IFCHR
        handle.writestr(info, b"")
    assert check(archive, Contract(), "1.0.0") == ["member lib/null is a device, fifo or other special file"]


def test_an_unsafe_7z_is_never_extracted(tmp_path, monkeypatch):
    """py7zr writes no such archive, so its reader stands in: it lists an unsafe name and
    fails the test if anything asks it to extract."""
    import py7zr

    class Listed:
        filename, is_directory, is_symlink, st_fmt, is_socket = "../escaped.txt", False, False, None, False

    class Reader:
        files = [Listed()]

        def __init__(self, *args: object) -> None:
            pass

        def __enter__(self) -> "Reader":
            return self

        def __exit__(self, *args: object) -> None:
            pass

        def extractall(self, **kwargs: object) -> None:
            raise AssertionError("an archive with an unsafe member name was extracted")

    monkeypatch.setattr(py7zr, "SevenZipFile", Reader)
    archive = tmp_path / "pkg.7z"
    archive.write_bytes(b"")
    assert check(archive, Contract(required=("include/a.h",)), "1.0.0") == ["member '../escaped.txt' has a '..' component"]


def test_a_safe_tarball_and_7z_pass(tmp_path):
    import py7zr

    tarball = tar_gz(tmp_path / "pkg.tar.gz", [tar_member("include/a.h"), tar_member("include/b.h", tarfile.SYMTYPE, "a.h")])
    assert check(tarball, Contract(required=("include/a.h", "include/b.h")), "1.0.0") == []
    seven = tmp_path / "pkg.7z"
    with py7zr.SevenZipFile(seven, "w") as handle:
        handle.writestr(HEADER, "include/a.h")
    assert check(seven, Contract(required=("include/a.h",)), "1.0.0") == []
