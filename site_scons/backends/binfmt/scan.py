"""One pass over an archive's members, on every core. Each member is inflated once, and
while it streams: its size and sha256 are taken (when a manifest's file list is to be
checked), its first bytes kept, an ELF shared object's dynamic facts read from its tables
(elf.py), and any other library, which a tool must read (a static library,
a Mach-O or PE file), written to the scratch directory.

Members are read on every core (zipfile's inflate, ISA-L's and hashlib's release the
GIL; every zip member is read through a file handle of its own), the largest first, small
ones in batches (a task per header file would cost more than reading it). A member large
enough to be the critical path hashes on a thread of its own beside its inflate. A tar.gz
is one stream: its members are read in order, on one thread.
"""
from __future__ import annotations

import hashlib
import os
import queue
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO, Callable, Iterable

from backends.binfmt.elf import Behind, DynamicFacts, ElfError, Sequential, dynamic_facts, is_shared_object

CHUNK = 1 << 20
HEAD = 64  # what tells a file's format (bundle.object_format reads as much)
PIPELINED = 64 << 20  # members at least this large hash beside their inflate
BATCH_BYTES, BATCH_MEMBERS = 8 << 20, 256  # a task's share of small members
_QUEUED = 8  # chunks in flight between a member's inflate and its hash


@dataclass(frozen=True)
class Scanned:
    """What one pass over a member found."""

    head: bytes
    size: int | None = None  # bytes read to the member's end; None when it was not read to its end
    sha256: str = ""  # with hashing
    facts: DynamicFacts | None = None  # an ELF shared object's, read from its tables
    extracted: Path | None = None  # the scratch copy of a library a tool must read


@dataclass(frozen=True)
class Member:
    name: str  # as the view names it
    declared: int  # size the archive declares (orders the work)
    library: bool
    slot: Callable[[], Path]  # the scratch file for a library a tool must read


def scan(members: Iterable[Member], open_member: Callable[[str], BinaryIO], *, hashing: bool,
         concurrent: bool) -> dict[str, Scanned]:
    """Every member of `members` read once (see the module docstring). Non-libraries are
    read only when `hashing`."""
    work = [m for m in members if hashing or m.library]
    if not concurrent:
        return {m.name: scan_member(m, open_member, hashing) for m in work}
    work.sort(key=lambda m: m.declared, reverse=True)
    batches = list(_batches(work))
    workers = max(1, min(len(batches), os.cpu_count() or 1))
    with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="scan") as pool:
        done = pool.map(lambda batch: [(m.name, scan_member(m, open_member, hashing)) for m in batch], batches)
        return {name: scanned for batch in done for name, scanned in batch}


def _batches(members: list[Member]) -> Iterable[list[Member]]:
    batch: list[Member] = []
    size = 0
    for member in members:
        batch.append(member)
        size += member.declared
        if size >= BATCH_BYTES or len(batch) >= BATCH_MEMBERS:
            yield batch
            batch, size = [], 0
    if batch:
        yield batch


def scan_member(member: Member, open_member: Callable[[str], BinaryIO], hashing: bool) -> Scanned:
    with open_member(member.name) as stream:
        first = stream.read(CHUNK)
        head = first[:HEAD]
        tally = _Tally(hashing, member.declared >= PIPELINED)
        try:
            if member.library and is_shared_object(head):
                return _shared_object(stream, first, tally, hashing)
            if member.library:
                return _extracted(stream, first, tally, member.slot())
            if not hashing:
                return Scanned(head)
            tally.update(first)
            while chunk := stream.read(CHUNK):
                tally.update(chunk)
            return Scanned(head, *tally.result())
        finally:
            tally.close()


def _shared_object(stream: BinaryIO, first: bytes, tally: _Tally, hashing: bool) -> Scanned:
    """Its dynamic facts from the bytes as they pass (None when they cannot be read so: the
    view reads the whole file with a tool), and, with hashing, every byte hashed."""
    reader = Sequential(stream, tally.update, first=first)
    try:
        facts: DynamicFacts | None = dynamic_facts(reader.read)
    except (ElfError, Behind):
        facts = None
    if not hashing:
        return Scanned(first[:HEAD], facts=facts)
    reader.drain()
    return Scanned(first[:HEAD], *tally.result(), facts=facts)


def _extracted(stream: BinaryIO, first: bytes, tally: _Tally, target: Path) -> Scanned:
    with open(target, "wb") as out:
        chunk = first
        while chunk:
            tally.update(chunk)
            out.write(chunk)
            chunk = stream.read(CHUNK)
    size, digest = tally.result()
    return Scanned(first[:HEAD], size, digest, extracted=target)


class _Tally:
    """Size and (with hashing) sha256 of the bytes given; for a large member, hashed on a
    thread of its own while the caller inflates the next chunk."""

    def __init__(self, hashing: bool, pipelined: bool) -> None:
        self.size = 0
        self.digest = hashlib.sha256() if hashing else None
        self._queue: queue.Queue[bytes | None] | None = None
        self._thread: threading.Thread | None = None
        if self.digest is not None and pipelined:
            self._queue = queue.Queue(maxsize=_QUEUED)
            self._thread = threading.Thread(target=self._hash_queued, name="scan-hash", daemon=True)
            self._thread.start()

    def update(self, chunk: bytes) -> None:
        self.size += len(chunk)
        if self._queue is not None:
            self._queue.put(chunk)
        elif self.digest is not None:
            self.digest.update(chunk)

    def _hash_queued(self) -> None:
        assert self._queue is not None and self.digest is not None
        while (chunk := self._queue.get()) is not None:
            self.digest.update(chunk)

    def result(self) -> tuple[int, str]:
        self.close()
        return self.size, self.digest.hexdigest() if self.digest is not None else ""

    def close(self) -> None:
        if self._thread is not None:
            assert self._queue is not None
            self._queue.put(None)
            self._thread.join()
            self._thread = None
