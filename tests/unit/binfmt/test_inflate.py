"""Zip members read through ISA-L (when installed) give zipfile's bytes, and a corrupt member
fails as zipfile fails: a bad CRC-32 or broken deflate data raises, never yields bytes; and
verify reports such an archive as unreadable instead of crashing."""
from __future__ import annotations

import os
import shutil
import zipfile
import zlib
from pathlib import Path

import pytest

from backends.binfmt import inflate
from backends.binfmt.inflate import open_member

MEMBERS = {
    "lib/big.bin": os.urandom(1 << 16) * 40,  # compressible, several read chunks
    "lib/random.bin": os.urandom(3 << 20),
    "include/empty.h": b"",
    "include/api.h": b"#define API 1\n" * 1000,
}


def _archive(path: Path, stored: tuple[str, ...] = ()) -> Path:
    with zipfile.ZipFile(path, "w") as out:
        for name, data in MEMBERS.items():
            out.writestr(name, data, zipfile.ZIP_STORED if name in stored else zipfile.ZIP_DEFLATED)
    return path


def _read(path: Path, name: str, chunk: int | None = None) -> bytes:
    with zipfile.ZipFile(path) as zipped, open_member(zipped, zipped.getinfo(name)) as stream:
        if chunk is None:
            return stream.read()
        parts = []
        while part := stream.read(chunk):
            parts.append(part)
        return b"".join(parts)


@pytest.fixture(params=["isal", "zlib"])
def inflater(request, monkeypatch):
    if request.param == "isal":
        if inflate._inflater is None:
            pytest.skip("python-isal is not installed")
    else:
        monkeypatch.setattr(inflate, "_inflater", None)
    return request.param


@pytest.mark.parametrize("chunk", [None, 1, 4096, 1 << 20])
def test_members_read_as_zipfile_reads_them(tmp_path, inflater, chunk):
    path = _archive(tmp_path / "a.zip", stored=("include/api.h",))
    for name, data in MEMBERS.items():
        if chunk == 1 and len(data) > 100_000:
            continue
        assert _read(path, name, chunk) == data, name


def test_copyfileobj_streams_a_member(tmp_path, inflater):
    path = _archive(tmp_path / "a.zip")
    out = tmp_path / "big.bin"
    with zipfile.ZipFile(path) as zipped, open_member(zipped, zipped.getinfo("lib/big.bin")) as stream, \
            open(out, "wb") as target:
        shutil.copyfileobj(stream, target, 1 << 20)
    assert out.read_bytes() == MEMBERS["lib/big.bin"]


def _corrupt(path: Path, name: str, how: str) -> None:
    with zipfile.ZipFile(path) as zipped:
        info = zipped.getinfo(name)
    data = bytearray(path.read_bytes())
    start = info.header_offset + 30 + len(info.filename.encode()) + len(info.extra)
    if how == "data":
        for offset in range(start + 10, start + 40):
            data[offset] ^= 0xFF
    else:  # the CRC-32 in the local header and the central directory
        crc = info.CRC.to_bytes(4, "little")
        data[:] = data.replace(crc, (info.CRC ^ 1).to_bytes(4, "little"))
    path.write_bytes(bytes(data))


@pytest.mark.parametrize("how", ["data", "crc"])
def test_a_corrupt_member_is_a_bad_zip_file(tmp_path, inflater, how):
    path = _archive(tmp_path / "a.zip")
    _corrupt(path, "include/api.h", how)
    with pytest.raises((zipfile.BadZipFile, zlib.error)):  # zipfile's own reader raises zlib.error
        _read(path, "include/api.h")


def test_verify_reports_a_corrupt_member_as_unreadable(tmp_path, inflater):
    from backends.model.plan import Contract
    from backends.steps.verify import check

    path = tmp_path / "a.zip"
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as out:
        out.writestr("include/api.h", MEMBERS["include/api.h"])
        out.writestr("lib/libapi.so", MEMBERS["lib/big.bin"])  # verify reads every library
    _corrupt(path, "lib/libapi.so", "data")
    contract = Contract(platform="linux-x86_64", required=("include/api.h",), versions=())
    problems = check(path, contract, "1.0.0")
    assert len(problems) == 1 and problems[0].startswith("a.zip cannot be read:"), problems
