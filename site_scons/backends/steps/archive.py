"""Deterministic archives of a staged tree: zip (parallel deflate), tar.gz, 7z.

Every format: entries relative to the root (no top-level directory), sorted by path,
directories included, one fixed timestamp (1980-01-01, or SOURCE_DATE_EPOCH clamped to
>= 1980), modes 0644/0755 for files and 0755 for directories, symlinks kept as symlinks,
owner 0:0 without names. The archive is written to `<out>.tmp-<pid>` and renamed, so
`out` is never partial.

ZIP is written by hand because the standard zipfile cannot take pre-compressed data:
members are deflated on all cores (zlib releases the GIL) in 16 MiB pieces, pigz-style,
and the container is assembled in path order on the calling thread. Pieces depend only
on the data, never on the thread count, so the bytes are the same for any `threads`
(given the same zlib build; another deflate implementation such as zlib-ng compresses
differently).
"""
from __future__ import annotations

import contextlib
import gzip
import itertools
import os
import stat
import struct
import tarfile
import time
import zlib
from collections import deque
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO, Callable, Generator, Iterable, Iterator, TypeVar

from backends.util.errors import BackendsError, environment
from backends.util.files import CHUNK_SIZE, FileEntry, atomic_write_text, list_tree, sha256_file, temp_path_for

FORMATS = ("zip", "tar.gz", "7z")

# ZIP64 is needed once a size or offset reaches these (module-level so tests can lower them).
ZIP64_LIMIT = 0xFFFFFFFF
ZIP64_COUNT_LIMIT = 0xFFFF
# Files are deflated in pieces of this size; small files are batched up to it per job.
DEFLATE_PIECE = 16 << 20
_DICTIONARY = 32 << 10  # deflate window: each piece is primed with the 32 KiB before it

_EPOCH_1980 = 315532800  # 1980-01-01T00:00:00Z, the earliest time a ZIP can hold
_EPOCH_2107 = 4354819199  # 2107-12-31T23:59:59Z, the latest

_STORED, _DEFLATED = 0, 8
_UNIX = 3
_UTF8_FLAG = 0x800
_MSDOS_DIRECTORY = 0x10

T = TypeVar("T")


class ArchiveError(BackendsError):
    """The tree could not be archived; `out` was left untouched."""


def write_archive(root: Path, out: Path, fmt: str = "zip", *, threads: int | None = None,
                  level: int = 6) -> None:
    """Archive the contents of `root` into `out` (see the module docstring for the rules)."""
    root, out = Path(root), Path(out)
    if fmt not in FORMATS:
        raise ArchiveError(f"unknown archive format {fmt!r}; expected one of {', '.join(FORMATS)}")
    if not root.is_dir():
        raise ArchiveError(f"cannot archive {root}: not a directory; stage the tree first")
    entries = list_tree(root, with_hashes=False)
    epoch = archive_epoch()
    temp = temp_path_for(out)
    try:
        with environment(out):
            _write_format(root, entries, out, temp, fmt, threads, level, epoch)
    except BaseException:
        temp.unlink(missing_ok=True)
        raise


def _write_format(root: Path, entries: list[FileEntry], out: Path, temp: Path, fmt: str, threads: int | None,
                  level: int, epoch: int) -> None:
    out.parent.mkdir(parents=True, exist_ok=True)
    if fmt == "zip":
        with open(temp, "w+b") as stream:
            _write_zip(root, entries, stream, threads or _cpu_count(), level, epoch)
    elif fmt == "tar.gz":
        _write_tar_gz(root, entries, temp, level, epoch)
    else:
        _write_7z(root, entries, temp, level, epoch)
    os.replace(temp, out)


def sha256_sidecar(out: Path) -> Path:
    """Write `<out>.sha256` in `sha256sum` format and return its path."""
    out = Path(out)
    sidecar = out.with_name(out.name + ".sha256")
    atomic_write_text(sidecar, f"{sha256_file(out)}  {out.name}\n")
    return sidecar


def archive_epoch() -> int:
    """The timestamp every entry gets: SOURCE_DATE_EPOCH if set, clamped to ZIP's range."""
    raw = os.environ.get("SOURCE_DATE_EPOCH", "").strip()
    if not raw:
        return _EPOCH_1980
    try:
        value = int(raw)
    except ValueError:
        raise ArchiveError(
            f"SOURCE_DATE_EPOCH={raw!r} is not an integer number of seconds; fix or unset it"
        ) from None
    return min(max(value, _EPOCH_1980), _EPOCH_2107)


def _cpu_count() -> int:
    if hasattr(os, "sched_getaffinity"):
        return max(1, len(os.sched_getaffinity(0)))
    return os.cpu_count() or 1


# --- ZIP: compression jobs ------------------------------------------------------------------


@dataclass(frozen=True)
class _Piece:
    """One compressed piece of a file: whole small files, or DEFLATE_PIECE slices of big ones."""

    crc: int  # of the raw bytes of this piece
    raw_size: int
    method: int  # _STORED only for a whole file that deflate did not shrink
    data: bytes


@dataclass(frozen=True)
class _PieceJob:
    path: Path
    offset: int
    length: int
    file_size: int

    @property
    def whole_file(self) -> bool:
        return self.offset == 0 and self.length == self.file_size

    @property
    def last(self) -> bool:
        return self.offset + self.length == self.file_size


def _piece_jobs(root: Path, entries: Iterable[FileEntry]) -> Iterator[_PieceJob]:
    for entry in entries:
        if entry.kind != "file":
            continue
        path = root / entry.path
        if entry.size == 0:
            yield _PieceJob(path, 0, 0, 0)
        for offset in range(0, entry.size, DEFLATE_PIECE):
            yield _PieceJob(path, offset, min(DEFLATE_PIECE, entry.size - offset), entry.size)


def _batches(jobs: Iterable[_PieceJob]) -> Iterator[list[_PieceJob]]:
    """Group small pieces so a pool task is ~DEFLATE_PIECE of input, not one tiny file."""
    batch: list[_PieceJob] = []
    batch_bytes = 0
    for job in jobs:
        batch.append(job)
        batch_bytes += job.length
        if batch_bytes >= DEFLATE_PIECE or len(batch) >= 512:
            yield batch
            batch, batch_bytes = [], 0
    if batch:
        yield batch


def _compress_batch(batch: list[_PieceJob], level: int) -> list[_Piece]:
    return [_compress_piece(job, level) for job in batch]


def _compress_piece(job: _PieceJob, level: int) -> _Piece:
    with open(job.path, "rb") as stream:
        dictionary = b""
        if job.offset:
            stream.seek(job.offset - _DICTIONARY)
            dictionary = stream.read(_DICTIONARY)
        data = stream.read(job.length)
        if len(data) != job.length or (job.last and stream.read(1)):
            raise ArchiveError(f"{job.path} changed size while it was being archived; "
                               f"nothing may write to the staged tree during packaging")
    compressor = (zlib.compressobj(level, zlib.DEFLATED, -15, zlib.DEF_MEM_LEVEL,
                                   zlib.Z_DEFAULT_STRATEGY, dictionary)
                  if dictionary else zlib.compressobj(level, zlib.DEFLATED, -15))
    # Raw deflate streams concatenate when every piece but the last ends byte-aligned
    # without the final-block bit: Z_SYNC_FLUSH gives exactly that, Z_FINISH ends the file.
    flush_mode = zlib.Z_FINISH if job.last else zlib.Z_SYNC_FLUSH
    compressed = compressor.compress(data) + compressor.flush(flush_mode)
    crc = zlib.crc32(data)
    if job.whole_file and len(compressed) >= len(data):
        return _Piece(crc, len(data), _STORED, data)
    return _Piece(crc, len(data), _DEFLATED, compressed)


def _ordered_results(tasks: Iterable[Callable[[], T]], threads: int) -> Generator[T, None, None]:
    """Run tasks on a pool and yield results in task order, at most 2*threads in flight.

    The bound keeps memory at ~2 * threads * DEFLATE_PIECE whatever the file sizes.
    """
    with ThreadPoolExecutor(max_workers=threads, thread_name_prefix="deflate") as pool:
        window: deque = deque()
        try:
            for task in tasks:
                window.append(pool.submit(task))
                if len(window) >= 2 * threads:
                    yield window.popleft().result()
            while window:
                yield window.popleft().result()
        finally:
            for future in window:
                future.cancel()


# --- ZIP: the container ---------------------------------------------------------------------


@dataclass
class _CentralRecord:
    name: bytes
    flags: int
    method: int
    crc: int
    compressed_size: int
    size: int
    offset: int
    external_attr: int


class _ZipWriter:
    def __init__(self, stream: BinaryIO, epoch: int) -> None:
        self.stream = stream
        self.offset = 0
        self.records: list[_CentralRecord] = []
        moment = time.gmtime(epoch)
        self.dos_time = (moment.tm_hour << 11) | (moment.tm_min << 5) | (moment.tm_sec // 2)
        self.dos_date = ((moment.tm_year - 1980) << 9) | (moment.tm_mon << 5) | moment.tm_mday

    def _write(self, data: bytes) -> None:
        self.stream.write(data)
        self.offset += len(data)

    def add_dir(self, path: str) -> None:
        external = ((stat.S_IFDIR | 0o755) << 16) | _MSDOS_DIRECTORY
        self._add_complete(path + "/", _STORED, 0, 0, b"", external)

    def add_symlink(self, path: str, target: str) -> None:
        data = os.fsencode(target)
        external = (stat.S_IFLNK | 0o777) << 16
        self._add_complete(path, _STORED, zlib.crc32(data), len(data), data, external)

    def add_file(self, entry: FileEntry, source: Path, pieces: Iterator[_Piece]) -> None:
        external = (stat.S_IFREG | entry.mode) << 16
        first = next(pieces)
        if first.raw_size == entry.size:
            self._add_complete(entry.path, first.method, first.crc, entry.size, first.data, external)
            return
        # A big file streams piece by piece; its header is rewritten once sizes are known.
        record = self._start_record(entry.path, _DEFLATED, 0, 0, entry.size, external)
        self._write(self._local_header(record))
        crc, compressed_size = first.crc, len(first.data)
        self._write(first.data)
        for piece in pieces:
            self._write(piece.data)
            crc = _crc32_combine(crc, piece.crc, piece.raw_size)
            compressed_size += len(piece.data)
        record.crc = crc
        if compressed_size >= entry.size:
            self._restart_as_stored(record, source)
        else:
            record.compressed_size = compressed_size
            self.stream.seek(record.offset)
            self.stream.write(self._local_header(record))
            self.stream.seek(self.offset)

    def _restart_as_stored(self, record: _CentralRecord, source: Path) -> None:
        self.stream.seek(record.offset)
        self.stream.truncate()
        self.offset = record.offset
        record.method, record.compressed_size = _STORED, record.size
        self._write(self._local_header(record))
        with open(source, "rb") as raw:
            while chunk := raw.read(CHUNK_SIZE):
                self._write(chunk)

    def _add_complete(self, path: str, method: int, crc: int, size: int, data: bytes,
                      external: int) -> None:
        record = self._start_record(path, method, crc, len(data), size, external)
        self._write(self._local_header(record))
        self._write(data)

    def _start_record(self, path: str, method: int, crc: int, compressed_size: int, size: int,
                      external: int) -> _CentralRecord:
        try:
            name, flags = path.encode("ascii"), 0
        except UnicodeEncodeError:
            try:
                name, flags = path.encode("utf-8"), _UTF8_FLAG
            except UnicodeEncodeError:  # undecodable bytes in a POSIX file name: keep them raw
                name, flags = os.fsencode(path), 0
        record = _CentralRecord(name, flags, method, crc, compressed_size, size, self.offset, external)
        self.records.append(record)
        return record

    def _local_header(self, record: _CentralRecord) -> bytes:
        # Compressed size never exceeds size (we store what deflate does not shrink), so
        # the size alone decides ZIP64, and a rewritten header keeps its length.
        zip64 = record.size >= ZIP64_LIMIT
        extra = struct.pack("<HHQQ", 1, 16, record.size, record.compressed_size) if zip64 else b""
        sizes = (0xFFFFFFFF, 0xFFFFFFFF) if zip64 else (record.compressed_size, record.size)
        return struct.pack(
            "<4sHHHHHLLLHH", b"PK\x03\x04", 45 if zip64 else 20, record.flags, record.method,
            self.dos_time, self.dos_date, record.crc, *sizes, len(record.name), len(extra),
        ) + record.name + extra

    def _central_header(self, record: _CentralRecord) -> bytes:
        fields = []
        size, compressed_size, offset = record.size, record.compressed_size, record.offset
        if size >= ZIP64_LIMIT:
            fields.append(size)
            size = 0xFFFFFFFF
        if compressed_size >= ZIP64_LIMIT or record.size >= ZIP64_LIMIT:
            fields.append(compressed_size)  # as in the local header: both sizes or none
            compressed_size = 0xFFFFFFFF
        if offset >= ZIP64_LIMIT:
            fields.append(offset)
            offset = 0xFFFFFFFF
        extra = struct.pack(f"<HH{len(fields)}Q", 1, 8 * len(fields), *fields) if fields else b""
        version = 45 if fields else 20
        return struct.pack(
            "<4sHHHHHHLLLHHHHHLL", b"PK\x01\x02", (_UNIX << 8) | version, version, record.flags,
            record.method, self.dos_time, self.dos_date, record.crc, compressed_size, size,
            len(record.name), len(extra), 0, 0, 0, record.external_attr, offset,
        ) + record.name + extra

    def finish(self) -> None:
        directory_offset = self.offset
        for record in self.records:
            self._write(self._central_header(record))
        directory_size = self.offset - directory_offset
        count = len(self.records)
        if count >= ZIP64_COUNT_LIMIT or directory_size >= ZIP64_LIMIT or directory_offset >= ZIP64_LIMIT:
            end64_offset = self.offset
            self._write(struct.pack("<4sQHHLLQQQQ", b"PK\x06\x06", 44, (_UNIX << 8) | 45, 45, 0, 0,
                                    count, count, directory_size, directory_offset))
            self._write(struct.pack("<4sLQL", b"PK\x06\x07", 0, end64_offset, 1))
        self._write(struct.pack(
            "<4sHHHHLLH", b"PK\x05\x06", 0, 0,
            _capped(count, ZIP64_COUNT_LIMIT, 0xFFFF), _capped(count, ZIP64_COUNT_LIMIT, 0xFFFF),
            _capped(directory_size, ZIP64_LIMIT, 0xFFFFFFFF),
            _capped(directory_offset, ZIP64_LIMIT, 0xFFFFFFFF), 0,
        ))


def _capped(value: int, limit: int, marker: int) -> int:
    return marker if value >= limit else value


def _write_zip(root: Path, entries: list[FileEntry], stream: BinaryIO, threads: int, level: int,
               epoch: int) -> None:
    writer = _ZipWriter(stream, epoch)
    tasks = ((lambda batch=batch: _compress_batch(batch, level))
             for batch in _batches(_piece_jobs(root, entries)))
    with contextlib.closing(_ordered_results(tasks, threads)) as results:
        pieces = itertools.chain.from_iterable(results)
        for entry in entries:
            if entry.kind == "dir":
                writer.add_dir(entry.path)
            elif entry.kind == "symlink":
                assert entry.target is not None
                writer.add_symlink(entry.path, entry.target)
            else:
                piece_count = max(1, -(-entry.size // DEFLATE_PIECE))
                writer.add_file(entry, root / entry.path, itertools.islice(pieces, piece_count))
    writer.finish()


# CRC-32 of a concatenation from the CRCs of its parts (zlib's crc32_combine, which
# Python does not expose): multiply crc1 by x^(8*len2) modulo the CRC polynomial.
_CRC_POLY = 0xEDB88320


def _gf2_multiply(a: int, b: int) -> int:
    product, bit = 0, 1 << 31
    while True:
        if a & bit:
            product ^= b
            if a & (bit - 1) == 0:
                return product
        bit >>= 1
        b = (b >> 1) ^ _CRC_POLY if b & 1 else b >> 1


def _x_pow_2n_table() -> list[int]:
    table, power = [], 1 << 30  # x^1
    for _ in range(32):
        table.append(power)
        power = _gf2_multiply(power, power)
    return table


_X_POW_2N = _x_pow_2n_table()


def _crc32_combine(crc1: int, crc2: int, length2: int) -> int:
    power, exponent, k = 1 << 31, length2, 3  # x^0; length in bytes = 2^3 bits each
    while exponent:
        if exponent & 1:
            power = _gf2_multiply(_X_POW_2N[k & 31], power)
        exponent >>= 1
        k += 1
    return _gf2_multiply(power, crc1) ^ crc2


# --- tar.gz and 7z --------------------------------------------------------------------------


def _write_tar_gz(root: Path, entries: list[FileEntry], temp: Path, level: int, epoch: int) -> None:
    # filename="" and mtime=0 keep the temp name and the clock out of the gzip header.
    with open(temp, "wb") as raw, \
            gzip.GzipFile(filename="", mode="wb", fileobj=raw, compresslevel=level, mtime=0) as packed, \
            tarfile.open(fileobj=packed, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for entry in entries:
            info = tarfile.TarInfo(entry.path)
            info.mtime, info.uid, info.gid, info.uname, info.gname = epoch, 0, 0, "", ""
            info.mode = entry.mode
            if entry.kind == "dir":
                info.type = tarfile.DIRTYPE
                tar.addfile(info)
            elif entry.kind == "symlink":
                info.type, info.linkname = tarfile.SYMTYPE, entry.target or ""
                tar.addfile(info)
            else:
                info.size = entry.size
                with open(root / entry.path, "rb") as data:
                    tar.addfile(info, data)


def _write_7z(root: Path, entries: list[FileEntry], temp: Path, level: int, epoch: int) -> None:
    """7z through py7zr (LZMA2, single-threaded, preset = `level`).

    Determinism: py7zr writes no creation or access time and takes the write time and
    attributes from a per-file header dict, which we overwrite with the fixed epoch and
    normalised modes before the header is written at close. LZMA2 itself is deterministic
    for the same liblzma, and members are added in sorted order into one solid folder.
    This relies on py7zr's `header.files_info.files` (checked against py7zr 1.1.4): a
    py7zr upgrade must keep tests/unit/steps/test_archive.py's 7z determinism test green.
    """
    import py7zr
    from py7zr.helpers import ArchiveTimestamp

    filters = [{"id": py7zr.FILTER_LZMA2, "preset": max(0, min(level, 9))}]
    write_time = ArchiveTimestamp.from_datetime(epoch)
    with py7zr.SevenZipFile(temp, mode="w", filters=filters) as sevenzip:
        for entry in entries:
            if entry.kind == "symlink":
                # py7zr's own symlink path reads the link through the filesystem and fails
                # on dangling links; storing the target as the member's data is the format.
                sevenzip.writestr(os.fsencode(entry.target or ""), entry.path)
            else:
                sevenzip.write(root / entry.path, entry.path)
            info = sevenzip.header.files_info.files[-1]
            info["lastwritetime"] = write_time
            info["attributes"] = _7z_attributes(entry)


def _7z_attributes(entry: FileEntry) -> int:
    # Windows attribute bits low, 0x8000 = "Unix mode in the high 16 bits" (p7zip convention).
    unix_extension = 0x8000
    if entry.kind == "dir":
        return stat.FILE_ATTRIBUTE_DIRECTORY | unix_extension | ((stat.S_IFDIR | 0o755) << 16)
    if entry.kind == "symlink":
        return (stat.FILE_ATTRIBUTE_ARCHIVE | stat.FILE_ATTRIBUTE_REPARSE_POINT | unix_extension
                | ((stat.S_IFLNK | 0o777) << 16))
    return stat.FILE_ATTRIBUTE_ARCHIVE | unix_extension | ((stat.S_IFREG | entry.mode) << 16)
