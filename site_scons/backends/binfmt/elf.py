"""An ELF shared object's dynamic facts read from its own tables, without llvm-nm or
llvm-readobj and without the whole file: the defined dynamic symbols, SONAME, DT_NEEDED
and the version definitions.

The program headers give the dynamic segment (PT_DYNAMIC); its entries give the symbol
table, the string table, the hash table that tells the number of symbols (DT_GNU_HASH or
DT_HASH) and the version definitions, by address (mapped to file offsets through the
PT_LOAD segments). The tables lie in the first segment, ahead of the code; the dynamic
segment lies behind the code, in the writable one.

Bytes are asked for by (offset, size) from a reader: a file, bytes in memory, or a stream
read once front to back (`Sequential`, which keeps the start of the stream and raises
`Behind` when a table lies in bytes it has passed without keeping them: the caller then
reads the whole file another way).

The symbols are those `llvm-nm --dynamic --defined-only --extern-only` lists: not local,
not undefined, no section or file symbol, named without their `@VERSION` suffix.
"""
from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import BinaryIO, Callable

from backends.util.errors import BackendsError

ELF_MAGIC = b"\x7fELF"
ET_DYN = 3
PT_LOAD, PT_DYNAMIC = 1, 2
DT_NULL, DT_NEEDED, DT_HASH, DT_STRTAB, DT_SYMTAB, DT_STRSZ, DT_SYMENT, DT_SONAME = 0, 1, 4, 5, 6, 10, 11, 14
DT_GNU_HASH, DT_VERDEF, DT_VERDEFNUM = 0x6FFFFEF5, 0x6FFFFFFC, 0x6FFFFFFD
SHN_UNDEF = 0
STB_LOCAL = 0
STT_SECTION, STT_FILE = 3, 4
VER_FLG_BASE = 0x1
KEEP_PREFIX = 64 << 20  # bytes of a stream kept for the tables behind the dynamic segment
_CHUNK = 1 << 20
_CHAIN_BLOCK = 4096  # GNU hash chain words read at a time
_MAX_SYMBOLS = 1 << 26

Read = Callable[[int, int], bytes]  # (offset, size) -> at most size bytes from offset


class ElfError(BackendsError, ValueError):
    """Bytes that are no well-formed ELF shared object; the message says what is wrong."""


class Behind(Exception):
    """A table lies in bytes a `Sequential` reader has already passed without keeping them."""


@dataclass(frozen=True)
class DynamicFacts:
    machine: int  # e_machine
    soname: str  # "" without DT_SONAME
    needed: tuple[str, ...]  # DT_NEEDED, sorted as llvm-readobj --needed-libs lists them
    defined: frozenset[str]  # exported symbol names, without versions
    version_definitions: tuple[str, ...]  # VERS_1.26.0, without the base version (the SONAME)


@dataclass(frozen=True)
class _Layout:
    """Word size and byte order of one ELF file."""

    wide: bool  # ELFCLASS64
    order: str  # "<" or ">"

    def unpack(self, fields: str, data: bytes, offset: int = 0) -> tuple[int, ...]:
        return struct.unpack_from(self.order + fields, data, offset)

    @property
    def address(self) -> str:
        return "Q" if self.wide else "I"


def is_shared_object(head: bytes) -> bool:
    """The first 18 bytes or more name an ELF shared object (ET_DYN)."""
    if len(head) < 18 or not head.startswith(ELF_MAGIC) or head[5] not in (1, 2):
        return False
    return struct.unpack_from("<H" if head[5] == 1 else ">H", head, 16)[0] == ET_DYN


def dynamic_facts(read: Read) -> DynamicFacts:
    """The facts of the shared object `read` gives bytes of; ElfError when it is none, Behind
    when a Sequential reader has passed a table."""
    header = _exact(read, 0, 64, "ELF header")
    if not is_shared_object(header) or header[4] not in (1, 2):
        raise ElfError("not an ELF shared object (ET_DYN)")
    layout = _Layout(wide=header[4] == 2, order="<" if header[5] == 1 else ">")
    machine = layout.unpack("H", header, 18)[0]
    loads, dynamic = _segments(read, layout, header)
    entries = _dynamic_entries(read, layout, dynamic)
    address = _Addresses(loads)
    strtab = _table(read, address, entries, DT_STRTAB, _single(entries, DT_STRSZ), "string table (DT_STRTAB)")
    strings = _Strings(strtab)
    count = _symbol_count(read, layout, address, entries)
    entsize = _single(entries, DT_SYMENT, 24 if layout.wide else 16)
    if entsize < (24 if layout.wide else 16):
        raise ElfError(f"symbol table entries of {entsize} bytes (DT_SYMENT) are too short")
    symbols = _table(read, address, entries, DT_SYMTAB, count * entsize, "symbol table (DT_SYMTAB)")
    return DynamicFacts(
        machine=machine,
        soname=strings.at(_single(entries, DT_SONAME)) if DT_SONAME in entries else "",
        needed=tuple(sorted(strings.at(offset) for offset in entries.get(DT_NEEDED, []))),
        defined=frozenset(_defined(layout, symbols, count, entsize, strings)),
        version_definitions=_version_definitions(read, layout, address, entries, strings))


def _exact(read: Read, offset: int, size: int, what: str) -> bytes:
    data = read(offset, size)
    if len(data) != size:
        raise ElfError(f"the file ends inside its {what} (bytes {offset}-{offset + size})")
    return data


def _segments(read: Read, layout: _Layout, header: bytes) -> tuple[list[tuple[int, int, int]], tuple[int, int]]:
    """The PT_LOAD segments as (address, file offset, file size), and PT_DYNAMIC's (offset, size)."""
    if layout.wide:
        phoff, = layout.unpack("Q", header, 32)
        entsize, count = layout.unpack("HH", header, 54)
    else:
        phoff, = layout.unpack("I", header, 28)
        entsize, count = layout.unpack("HH", header, 42)
    minimum = 56 if layout.wide else 32
    if count == 0xFFFF or entsize < minimum:
        raise ElfError(f"program headers of {entsize} bytes x {count} are not read here")
    table = _exact(read, phoff, entsize * count, "program headers")
    loads, dynamic = [], None
    for index in range(count):
        at = index * entsize
        if layout.wide:
            kind, _, offset, vaddr, _, filesz = layout.unpack("IIQQQQ", table, at)
        else:
            kind, offset, vaddr, _, filesz = layout.unpack("IIIII", table, at)
        if kind == PT_LOAD:
            loads.append((vaddr, offset, filesz))
        elif kind == PT_DYNAMIC:
            dynamic = (offset, filesz)
    if dynamic is None:
        raise ElfError("no dynamic segment (PT_DYNAMIC)")
    return loads, dynamic


def _dynamic_entries(read: Read, layout: _Layout, dynamic: tuple[int, int]) -> dict[int, list[int]]:
    offset, size = dynamic
    data = _exact(read, offset, size, "dynamic segment")
    step, fields = (16, "qQ") if layout.wide else (8, "iI")
    entries: dict[int, list[int]] = {}
    for at in range(0, size - step + 1, step):
        tag, value = layout.unpack(fields, data, at)
        if tag == DT_NULL:
            break
        entries.setdefault(tag, []).append(value)
    return entries


def _single(entries: dict[int, list[int]], tag: int, default: int | None = None) -> int:
    values = entries.get(tag)
    if values:
        return values[0]
    if default is None:
        raise ElfError(f"the dynamic segment has no entry {tag:#x}")
    return default


class _Addresses:
    """Virtual addresses to file offsets, through the PT_LOAD segments."""

    def __init__(self, loads: list[tuple[int, int, int]]) -> None:
        self.loads = loads

    def offset(self, address: int, size: int, what: str) -> int:
        for vaddr, offset, filesz in self.loads:
            if vaddr <= address and address + size <= vaddr + filesz:
                return offset + address - vaddr
        raise ElfError(f"the {what} at {address:#x} ({size} bytes) lies in no loaded segment")


def _table(read: Read, address: _Addresses, entries: dict[int, list[int]], tag: int, size: int, what: str) -> bytes:
    return _exact(read, address.offset(_single(entries, tag), size, what), size, what)


class _Strings:
    def __init__(self, table: bytes) -> None:
        self.table = table

    def at(self, offset: int) -> str:
        end = self.table.find(b"\0", offset)
        if offset >= len(self.table) or end < 0:
            raise ElfError(f"a name at {offset} lies outside the string table ({len(self.table)} bytes)")
        return self.table[offset:end].decode("utf-8", "surrogateescape")


def _symbol_count(read: Read, layout: _Layout, address: _Addresses, entries: dict[int, list[int]]) -> int:
    """Symbols in the dynamic symbol table: DT_HASH's nchain, or past the last GNU hash chain."""
    if DT_GNU_HASH in entries:
        count = _gnu_hash_count(read, layout, address, _single(entries, DT_GNU_HASH))
    elif DT_HASH in entries:
        start = address.offset(_single(entries, DT_HASH), 8, "hash table (DT_HASH)")
        count = layout.unpack("I", _exact(read, start + 4, 4, "hash table (DT_HASH)"))[0]
    else:
        raise ElfError("no hash table (DT_GNU_HASH, DT_HASH) tells the number of dynamic symbols")
    if count > _MAX_SYMBOLS:
        raise ElfError(f"{count} dynamic symbols: not a real symbol table")
    return count


def _gnu_hash_count(read: Read, layout: _Layout, address: _Addresses, table: int) -> int:
    what = "GNU hash table (DT_GNU_HASH)"
    start = address.offset(table, 16, what)
    nbuckets, symoffset, bloom_size, _ = layout.unpack("IIII", _exact(read, start, 16, what))
    buckets_at = start + 16 + bloom_size * (8 if layout.wide else 4)
    buckets = layout.unpack(f"{nbuckets}I", _exact(read, buckets_at, 4 * nbuckets, what))
    last = max(buckets, default=0)
    if last < symoffset:  # every bucket empty: only the symbols before symoffset
        return symoffset
    chain_at = buckets_at + 4 * nbuckets + 4 * (last - symoffset)
    index = last
    while index <= _MAX_SYMBOLS:
        block = read(chain_at, 4 * _CHAIN_BLOCK)
        words = layout.unpack(f"{len(block) // 4}I", block)
        if not words:
            raise ElfError(f"the file ends inside its {what}")
        for word in words:
            if word & 1:
                return index + 1
            index += 1
        chain_at += 4 * len(words)
    raise ElfError(f"the {what} has a chain without an end")


def _defined(layout: _Layout, table: bytes, count: int, entsize: int, strings: _Strings) -> set[str]:
    # A large library has ~10^5 symbols: one struct pass, the names decoded once each.
    fields = "IBBH" if layout.wide else "IIIBBH"
    fields += "x" * (entsize - struct.calcsize("=" + fields))
    offsets = set()
    for entry in struct.iter_unpack(layout.order + fields, table[entsize:count * entsize]):
        name, info, shndx = (entry[0], entry[1], entry[3]) if layout.wide else (entry[0], entry[3], entry[5])
        if info >> 4 != STB_LOCAL and shndx != SHN_UNDEF and info & 0xF not in (STT_SECTION, STT_FILE):
            offsets.add(name)
    names = {strings.at(offset).split("@", 1)[0] for offset in offsets}
    names.discard("")
    return names


def _version_definitions(read: Read, layout: _Layout, address: _Addresses, entries: dict[int, list[int]],
                         strings: _Strings) -> tuple[str, ...]:
    """Names of the Verdef entries (each its first Verdaux's), the base version left out."""
    if DT_VERDEF not in entries:
        return ()
    what = "version definitions (DT_VERDEF)"
    at = address.offset(_single(entries, DT_VERDEF), 20, what)
    names = []
    for _ in range(_single(entries, DT_VERDEFNUM, 0)):
        _, flags, _, _, _, aux, following = layout.unpack("HHHHIII", _exact(read, at, 20, what))
        name, = layout.unpack("I", _exact(read, at + aux, 4, what))
        if not flags & VER_FLG_BASE:
            names.append(strings.at(name))
        if not following:
            break
        at += following
    return tuple(names)


# --- readers ------------------------------------------------------------------------------

def from_bytes(data: bytes) -> DynamicFacts:
    return dynamic_facts(lambda offset, size: data[offset:offset + size])


def from_file(stream: BinaryIO) -> DynamicFacts:
    """From a file object that seeks."""
    def read(offset: int, size: int) -> bytes:
        stream.seek(offset)
        return stream.read(size)
    return dynamic_facts(read)


class Sequential:
    """A stream read once, front to back, in chunks: each chunk goes to `observe` (a hash)
    as it is read. Asked bytes are served from the first `keep` bytes (kept), from the last
    chunk, or by reading on; bytes passed and not kept raise Behind."""

    def __init__(self, stream: BinaryIO, observe: Callable[[bytes], object] = lambda _: None,
                 keep: int = KEEP_PREFIX, first: bytes = b"") -> None:
        self.stream = stream
        self.observe = observe
        self.keep = keep
        self.kept = bytearray()
        self.window, self.window_at = b"", 0
        self.position = 0  # bytes read from the stream
        self.ended = False
        if first:
            self._take(first)

    def read(self, offset: int, size: int) -> bytes:
        parts, cursor, end = [], offset, offset + size
        while cursor < end:
            if cursor < len(self.kept):
                part = bytes(self.kept[cursor:end])
            elif self.window_at <= cursor < self.window_at + len(self.window):
                part = self.window[cursor - self.window_at:end - self.window_at]
            elif cursor < self.position:
                raise Behind(f"bytes {cursor}-{end} were read past")
            elif not self._next():
                break  # the stream ends: a short answer
            else:
                continue
            parts.append(part)
            cursor += len(part)
        return b"".join(parts)

    def drain(self) -> None:
        """Read the rest of the stream (each chunk observed)."""
        while self._next():
            pass

    def _next(self) -> bool:
        if self.ended:
            return False
        chunk = self.stream.read(_CHUNK)
        if not chunk:
            self.ended = True
            return False
        self._take(chunk)
        return True

    def _take(self, chunk: bytes) -> None:
        self.observe(chunk)
        if self.position < self.keep:
            self.kept += chunk[:self.keep - self.position]
        self.window, self.window_at = chunk, self.position
        self.position += len(chunk)
