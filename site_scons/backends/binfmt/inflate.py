"""Reading deflated zip members with ISA-L's inflate when python-isal is installed (about
twice zlib's speed: inflating a LibTorch-sized library is most of verifying or extracting
its package), and with zipfile otherwise. The bytes are the same either way, and the
member's CRC-32 and size are checked at its end, as zipfile checks them.
"""
from __future__ import annotations

import io
import struct
import zipfile
import zlib
from types import ModuleType
from typing import BinaryIO, Callable, cast

from backends.util.files import CHUNK_SIZE

_inflater: ModuleType | None
try:
    from isal import isal_zlib as _inflater
except ImportError:  # optional: zipfile's zlib does the same, slower
    _inflater = None

_LOCAL_HEADER = struct.Struct("<4s22xHH")  # signature ... name length, extra length
_LOCAL_SIGNATURE = b"PK\x03\x04"


def open_member(zipped: zipfile.ZipFile, info: zipfile.ZipInfo) -> BinaryIO:
    """A reader of one member's bytes (its own file handle: safe beside other readers)."""
    encrypted = info.flag_bits & 0x1
    # Both readers are used as BinaryIO is (read, close, with), which typeshed's IO[bytes] for
    # zipfile's and io.RawIOBase for ours do not say.
    if _inflater is None or info.compress_type != zipfile.ZIP_DEFLATED or encrypted or zipped.filename is None:
        return cast(BinaryIO, zipped.open(info))
    return cast(BinaryIO, _DeflatedMember(zipped.filename, info, _inflater))


class _DeflatedMember(io.RawIOBase):
    def __init__(self, archive: str, info: zipfile.ZipInfo, inflater: ModuleType) -> None:
        super().__init__()
        self._inflater = inflater
        self._name = info.filename
        self._crc, self._size = info.CRC, info.file_size
        self._file = open(archive, "rb")
        self._file.seek(info.header_offset)
        signature, name_length, extra_length = _LOCAL_HEADER.unpack(self._file.read(_LOCAL_HEADER.size))
        if signature != _LOCAL_SIGNATURE:
            self._file.close()
            raise zipfile.BadZipFile(f"{info.filename}: bad local file header")
        self._file.seek(name_length + extra_length, io.SEEK_CUR)
        self._left = info.compress_size
        self._inflate = inflater.decompressobj(-zlib.MAX_WBITS)
        self._pending, self._offset = b"", 0
        self._seen_crc, self._seen_size = 0, 0
        self._done = False

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: memoryview) -> int:  # type: ignore[override]
        while self._offset == len(self._pending) and not self._done:
            self._pending, self._offset = self._next(), 0
        count = min(len(buffer), len(self._pending) - self._offset)
        buffer[:count] = memoryview(self._pending)[self._offset:self._offset + count]
        self._offset += count
        return count

    def readall(self) -> bytes:
        parts = [self._pending[self._offset:]]
        while not self._done:
            parts.append(self._next())
        self._pending, self._offset = b"", 0
        return b"".join(parts)

    def _next(self) -> bytes:
        if self._left:
            raw = self._file.read(min(CHUNK_SIZE, self._left))
            if not raw:
                raise zipfile.BadZipFile(f"{self._name}: the archive ends inside this member")
            self._left -= len(raw)
            data = self._inflated(self._inflate.decompress, raw)
        else:
            data = self._inflated(lambda _: self._inflate.flush(), b"")
            self._done = True
        self._seen_crc = self._inflater.crc32(data, self._seen_crc)  # ISA-L's: the same CRC, ~5x zlib's speed
        self._seen_size += len(data)
        if self._done and (self._seen_crc, self._seen_size) != (self._crc, self._size):
            raise zipfile.BadZipFile(f"Bad CRC-32 or size for {self._name}: the member is corrupt")
        return data

    def _inflated(self, inflate: Callable[[bytes], bytes], raw: bytes) -> bytes:
        try:
            return inflate(raw)
        except Exception as error:  # isal_zlib.error is no zlib.error: both mean corrupt data
            raise zipfile.BadZipFile(f"{self._name}: the compressed data is corrupt ({error})") from None

    def close(self) -> None:
        self._file.close()
        super().close()
