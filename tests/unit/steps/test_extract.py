"""extract.py: safe extraction of tar, zip (whl) and 7z archives."""
from __future__ import annotations

import hashlib
import io
import os
import stat
import tarfile
import zipfile
from pathlib import Path

import py7zr
import pytest

from backends.steps.extract import ExtractError, archive_format, extract
from backends.util.files import list_tree
from hashed_bytes import count_hashed_bytes

# --- archive builders: (name, kind, payload); kind in file|exec|dir|symlink|hardlink|fifo|chr


def make_tar(path: Path, members: list[tuple[str, str, object]], mode: str = "w:gz") -> Path:
    with tarfile.open(path, mode) as tar:
        for name, kind, payload in members:
            info = tarfile.TarInfo(name)
            data = b""
            if kind in ("file", "exec", "setuid"):
                data = payload if isinstance(payload, bytes) else b""
                info.size = len(data)
                info.mode = {"file": 0o644, "exec": 0o755, "setuid": 0o4755}[kind]
            elif kind == "dir":
                info.type, info.mode = tarfile.DIRTYPE, 0o755
            elif kind == "symlink":
                info.type, info.linkname = tarfile.SYMTYPE, str(payload)
            elif kind == "hardlink":
                info.type, info.linkname = tarfile.LNKTYPE, str(payload)
            elif kind == "fifo":
                info.type = tarfile.FIFOTYPE
            elif kind == "chr":
                info.type = tarfile.CHRTYPE
            tar.addfile(info, io.BytesIO(data) if data else None)
    return path


def make_zip(path: Path, members: list[tuple[str, str, object]]) -> Path:
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as archive:
        for name, kind, payload in members:
            info = zipfile.ZipInfo(name)
            info.create_system = 3
            if kind == "symlink":
                info.external_attr = (stat.S_IFLNK | 0o777) << 16
                archive.writestr(info, str(payload))
            elif kind == "dir":
                info.external_attr = ((stat.S_IFDIR | 0o755) << 16) | 0x10
                archive.writestr(info, b"")
            else:
                mode = 0o755 if kind == "exec" else 0o644
                info.external_attr = (stat.S_IFREG | mode) << 16
                archive.writestr(info, payload if isinstance(payload, bytes) else b"")
    return path


SAFE_MEMBERS: list[tuple[str, str, object]] = [
    ("pkg", "dir", None),
    ("pkg/lib", "dir", None),
    ("pkg/lib/libx.so.1.2", "exec", b"\x7fELF fake"),
    ("pkg/lib/libx.so", "symlink", "libx.so.1.2"),
    ("pkg/include/x.h", "file", b"int x;\n"),
    ("pkg/up", "symlink", "../pkg/include"),
]


def assert_safe_tree(dest: Path) -> None:
    lib = dest / "pkg" / "lib"
    assert os.readlink(lib / "libx.so") == "libx.so.1.2"
    assert (lib / "libx.so").read_bytes() == b"\x7fELF fake"
    assert stat.S_IMODE((lib / "libx.so.1.2").stat().st_mode) == 0o755
    assert stat.S_IMODE((dest / "pkg" / "include" / "x.h").stat().st_mode) == 0o644
    assert os.readlink(dest / "pkg" / "up") == "../pkg/include"


def assert_nothing_left(tmp_path: Path, dest: Path) -> None:
    assert not dest.exists()
    leftovers = [p.name for p in tmp_path.iterdir() if p.name.startswith(dest.name + ".")]
    assert leftovers == []
    assert not (tmp_path / "evil").exists() and not (tmp_path.parent / "evil").exists()


@pytest.mark.parametrize("suffix,mode", [(".tar.gz", "w:gz"), (".tgz", "w:gz"), (".tar", "w"),
                                         (".tar.xz", "w:xz"), (".tar.bz2", "w:bz2")])
def test_tar_family_keeps_symlinks_and_exec_bits(tmp_path: Path, suffix: str, mode: str) -> None:
    archive = make_tar(tmp_path / f"a{suffix}", SAFE_MEMBERS, mode)
    dest = tmp_path / "out"
    entries = extract(archive, dest)
    assert_safe_tree(dest)
    assert entries == list_tree(dest)
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith("out.")] == []


@pytest.mark.parametrize("suffix", [".zip", ".whl", ".aar", ".nupkg"])
def test_zip_family_keeps_symlinks_and_exec_bits(tmp_path: Path, suffix: str) -> None:
    archive = make_zip(tmp_path / f"a{suffix}", SAFE_MEMBERS)
    dest = tmp_path / "out"
    extract(archive, dest)
    assert_safe_tree(dest)


def test_7z_keeps_symlinks_and_exec_bits(tmp_path: Path) -> None:
    source = tmp_path / "src"
    (source / "pkg" / "lib").mkdir(parents=True)
    (source / "pkg" / "include").mkdir()
    (source / "pkg" / "lib" / "libx.so.1.2").write_bytes(b"\x7fELF fake")
    (source / "pkg" / "lib" / "libx.so.1.2").chmod(0o755)
    (source / "pkg" / "include" / "x.h").write_bytes(b"int x;\n")
    (source / "pkg" / "empty").write_bytes(b"")
    os.symlink("libx.so.1.2", source / "pkg" / "lib" / "libx.so")
    os.symlink("../pkg/include", source / "pkg" / "up")
    with py7zr.SevenZipFile(tmp_path / "a.7z", "w") as archive:
        archive.writeall(source / "pkg", "pkg")
    dest = tmp_path / "out"
    extract(tmp_path / "a.7z", dest)
    assert_safe_tree(dest)
    assert (dest / "pkg" / "empty").read_bytes() == b""


def test_leading_dot_slash_and_setuid_are_normalised(tmp_path: Path) -> None:
    archive = make_tar(tmp_path / "a.tgz", [("./", "dir", None), ("./bin/tool", "setuid", b"x")])
    extract(archive, tmp_path / "out")
    assert stat.S_IMODE((tmp_path / "out" / "bin" / "tool").stat().st_mode) == 0o755


def test_extract_replaces_the_old_tree(tmp_path: Path) -> None:
    dest = tmp_path / "out"
    (dest / "stale").mkdir(parents=True)
    (dest / "stale" / "old.txt").write_text("old")
    extract(make_tar(tmp_path / "a.tgz", SAFE_MEMBERS), dest)
    assert not (dest / "stale").exists()
    assert (dest / "pkg" / "include" / "x.h").exists()


def test_hardlinks_inside_the_tree_are_kept(tmp_path: Path) -> None:
    archive = make_tar(tmp_path / "a.tar", [("a/data", "file", b"shared"), ("a/again", "hardlink", "a/data")], "w")
    extract(archive, tmp_path / "out")
    assert (tmp_path / "out" / "a" / "again").read_bytes() == b"shared"
    assert os.stat(tmp_path / "out" / "a" / "again").st_ino == os.stat(tmp_path / "out" / "a" / "data").st_ino


UNSAFE_TAR = {
    "dotdot": [("ok.txt", "file", b"x"), ("../evil", "file", b"x")],
    "nested dotdot": [("a/../../evil", "file", b"x")],
    "absolute": [("/tmp/evil", "file", b"x")],
    "symlink out": [("link", "symlink", "../../evil")],
    "absolute symlink": [("link", "symlink", "/etc")],
    "symlink chain": [("a/b", "symlink", ".."), ("c", "symlink", "a/b/..")],
    "write through symlink": [("d", "symlink", "sub"), ("sub", "dir", None), ("d/evil", "file", b"x")],
    "hardlink out": [("h", "hardlink", "../evil")],
    "hardlink absolute": [("h", "hardlink", "/etc/passwd")],
    "hardlink to nothing": [("h", "hardlink", "not-there")],
    "fifo": [("pipe", "fifo", None)],
    "device": [("dev", "chr", None)],
}


@pytest.mark.parametrize("case", sorted(UNSAFE_TAR))
def test_unsafe_tar_is_rejected_and_leaves_nothing(tmp_path: Path, case: str) -> None:
    archive = make_tar(tmp_path / "bad.tar.gz", UNSAFE_TAR[case])
    dest = tmp_path / "out"
    with pytest.raises(ExtractError, match=r"bad\.tar\.gz: member '.+'") as error:
        extract(archive, dest)
    assert "refusing to extract" in str(error.value)
    assert_nothing_left(tmp_path, dest)


UNSAFE_ZIP = {
    "zip slip": [("ok.txt", "file", b"x"), ("../evil", "file", b"x")],
    "absolute": [("/evil", "file", b"x")],
    "drive letter": [("C:/evil", "file", b"x")],
    "backslash dotdot": [("..\\evil", "file", b"x")],
    "symlink out": [("lib/link", "symlink", "../../evil")],
    "write through symlink": [("d", "symlink", "."), ("d/x", "file", b"x")],
}


@pytest.mark.parametrize("case", sorted(UNSAFE_ZIP))
def test_unsafe_zip_is_rejected_and_leaves_nothing(tmp_path: Path, case: str) -> None:
    archive = make_zip(tmp_path / "bad.zip", UNSAFE_ZIP[case])
    dest = tmp_path / "out"
    with pytest.raises(ExtractError, match=r"bad\.zip: member"):
        extract(archive, dest)
    assert_nothing_left(tmp_path, dest)


def test_unsafe_7z_symlink_is_rejected(tmp_path: Path) -> None:
    with py7zr.SevenZipFile(tmp_path / "bad.7z", "w") as archive:
        archive.writestr(b"../../evil", "link")  # py7zr cannot add a dangling link itself
        archive.header.files_info.files[-1]["attributes"] = 0x8000 | ((stat.S_IFLNK | 0o777) << 16)
    with pytest.raises(ExtractError, match="outside the tree"):
        extract(tmp_path / "bad.7z", tmp_path / "out")
    assert_nothing_left(tmp_path, tmp_path / "out")


def test_corrupt_archive_is_an_extract_error(tmp_path: Path) -> None:
    (tmp_path / "broken.zip").write_bytes(b"PK\x03\x04 not really a zip")
    with pytest.raises(ExtractError, match="broken.zip"):
        extract(tmp_path / "broken.zip", tmp_path / "out")
    assert_nothing_left(tmp_path, tmp_path / "out")


def test_format_inference(tmp_path: Path) -> None:
    assert archive_format("x.TGZ") == "tar.gz"
    assert archive_format("torch-2.13.0-cp311-linux_x86_64.whl") == "zip"
    assert archive_format("a.7z") == "7z"
    with pytest.raises(ExtractError, match="unknown archive type"):
        archive_format("a.rar")


@pytest.mark.parametrize("name,data", [("broken.7z", b"7z\xbc\xaf\x27\x1c garbage"),
                                       ("broken.tar.gz", b"\x1f\x8b\x08\x00 truncated")])
def test_corrupt_7z_and_tgz_are_extract_errors(tmp_path: Path, name: str, data: bytes) -> None:
    (tmp_path / name).write_bytes(data)
    with pytest.raises(ExtractError, match=name.replace(".", r"\.")):
        extract(tmp_path / name, tmp_path / "out")
    assert_nothing_left(tmp_path, tmp_path / "out")


# --- stream integrity: every format's own checksum is checked to the end ------------------


def _tar_bytes(fmt: str, payload: bytes) -> bytes:
    import bz2
    import gzip as gzip_module
    import lzma

    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        info = tarfile.TarInfo("pkg/lib/data.bin")
        info.size = len(payload)
        tar.addfile(info, io.BytesIO(payload))
    compress = {"tar.gz": lambda d: gzip_module.compress(d, mtime=0), "tar.bz2": bz2.compress,
                "tar.xz": lzma.compress}[fmt]
    return compress(buffer.getvalue())


@pytest.mark.parametrize("fmt", ["tar.gz", "tar.bz2", "tar.xz"])
@pytest.mark.parametrize("where", ["trailer", "payload"])
def test_a_flipped_byte_in_a_compressed_tar_is_refused(tmp_path: Path, fmt: str, where: str) -> None:
    data = bytearray(_tar_bytes(fmt, os.urandom(50_000)))
    data[-5 if where == "trailer" else len(data) // 2] ^= 0x10
    archive = tmp_path / f"pkg.{fmt}"
    archive.write_bytes(bytes(data))
    with pytest.raises(ExtractError, match="cannot extract"):
        extract(archive, tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_a_flipped_byte_in_a_zip_member_is_refused(tmp_path: Path) -> None:
    archive = tmp_path / "pkg.zip"
    payload = os.urandom(50_000)
    with zipfile.ZipFile(archive, "w", zipfile.ZIP_STORED) as zipped:
        zipped.writestr("lib/data.bin", payload)
    data = bytearray(archive.read_bytes())
    data[data.index(payload[:64]) + 1000] ^= 0x10  # stored: the CRC alone can tell
    archive.write_bytes(bytes(data))
    with pytest.raises(ExtractError, match="CRC"):
        extract(archive, tmp_path / "out")


def test_a_flipped_byte_in_a_7z_is_refused(tmp_path: Path) -> None:
    import py7zr

    archive = tmp_path / "pkg.7z"
    source = tmp_path / "data.bin"
    source.write_bytes(os.urandom(50_000))
    with py7zr.SevenZipFile(archive, "w", filters=[{"id": py7zr.FILTER_COPY}]) as seven:
        seven.write(source, "lib/data.bin")
    data = bytearray(archive.read_bytes())
    data[1000] ^= 0x10
    archive.write_bytes(bytes(data))
    with pytest.raises(ExtractError):
        extract(archive, tmp_path / "out")


@pytest.mark.parametrize("code", ["ENOSPC", "EDQUOT", "EACCES", "EROFS"])
def test_the_machines_refusal_is_named_with_the_path_not_blamed_on_the_archive(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, code: str) -> None:
    import errno as errno_module
    from backends.steps import extract as extract_module
    from backends.util.errors import ADVICE, EnvironmentFailure

    archive = tmp_path / "pkg.tar.gz"
    archive.write_bytes(_tar_bytes("tar.gz", b"x" * 100))
    number = getattr(errno_module, code)

    def refused(*args: object, **kwargs: object) -> None:
        raise OSError(number, os.strerror(number))

    monkeypatch.setattr(extract_module.shutil, "copyfileobj", refused)
    with pytest.raises(EnvironmentFailure) as error:
        extract(archive, tmp_path / "out")
    assert error.value.errno == number and error.value.filename == str(tmp_path)
    assert ADVICE[number] in str(error.value) and "is the file complete" not in str(error.value)
    assert not (tmp_path / "out").exists()


def test_a_zip_on_every_core_is_the_tree_it_lists_and_its_bytes_are_hashed_once(
        tmp_path: Path, run_digests: None, monkeypatch: pytest.MonkeyPatch) -> None:
    from backends.util import files

    members = [(f"lib/part{index}.bin", "exec" if index % 3 == 0 else "file", bytes([index]) * (index * 997))
               for index in range(1, 40)] + [("lib/libx.so", "symlink", "part1.bin"), ("include/", "dir", None)]
    archive = make_zip(tmp_path / "pkg.zip", members)
    expected = {name: hashlib.sha256(payload).hexdigest() for name, _, payload in members[:-2]}
    hashed = count_hashed_bytes(monkeypatch)
    entries = extract(archive, tmp_path / "out")
    for name, kind, _ in members[:-2]:
        assert files.sha256_file(tmp_path / "out" / name) == expected[name]
        assert os.access(tmp_path / "out" / name, os.X_OK) == (kind == "exec")
    # every byte hashed once, as it was written: not again for the listing or the checks
    assert sum(hashed) == sum(len(payload) for _, _, payload in members[:-2])
    assert os.readlink(tmp_path / "out" / "lib" / "libx.so") == "part1.bin"
    assert {e.path for e in entries} == {"include", "lib", "lib/libx.so", *(m[0] for m in members[:-2])}


@pytest.mark.filterwarnings("ignore:Duplicate name")
def test_a_repeated_member_name_still_ends_as_the_later_member(tmp_path: Path) -> None:
    archive = tmp_path / "pkg.zip"
    with zipfile.ZipFile(archive, "w") as zipped:
        zipped.writestr("a.txt", b"first")
        zipped.writestr("b.txt", b"other")
        zipped.writestr("a.txt", b"second")
    extract(archive, tmp_path / "out")
    assert (tmp_path / "out" / "a.txt").read_bytes() == b"second"


def test_stored_and_deflated_members_side_by_side_are_all_written(tmp_path: Path) -> None:
    archive = tmp_path / "pkg.zip"
    with zipfile.ZipFile(archive, "w") as zipped:
        for index in range(12):
            method = zipfile.ZIP_STORED if index % 2 else zipfile.ZIP_DEFLATED
            zipped.writestr(f"d{index % 3}/m{index}.bin", bytes([index]) * 5000, compress_type=method)
    extract(archive, tmp_path / "out")
    for index in range(12):
        assert (tmp_path / "out" / f"d{index % 3}" / f"m{index}.bin").read_bytes() == bytes([index]) * 5000
