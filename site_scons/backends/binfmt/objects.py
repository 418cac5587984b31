"""What an object file or static library is, read from its own bytes: the format by magic
(ELF, Mach-O thin or fat, COFF, PE, wasm), the members of an `ar` archive (GNU, BSD and MS
flavours), and the symbol tables of every member as llvm-nm reads them.
"""
from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from backends.util import toolchain
from backends.util.errors import BackendsError

AR_MAGIC = b"!<arch>\n"
AR_THIN_MAGIC = b"!<thin>\n"
AR_HEADER_SIZE = 60

_MACHO_MAGICS = {
    b"\xfe\xed\xfa\xce", b"\xce\xfa\xed\xfe",  # 32-bit, either byte order
    b"\xfe\xed\xfa\xcf", b"\xcf\xfa\xed\xfe",  # 64-bit, either byte order
}
_FAT_MAGICS = {b"\xca\xfe\xba\xbe", b"\xca\xfe\xba\xbf"}
# Java class files share 0xcafebabe; their next word (a version) is always >= 45,
# while a fat header counts a handful of architectures.
_MAX_FAT_ARCHS = 30
_COFF_MACHINES = {
    0x014C,  # i386
    0x8664,  # x86_64
    0xAA64,  # arm64
    0x01C4,  # armnt
    0xA641,  # arm64ec
    0xA64E,  # arm64x
}
# Import objects and /GL (LTCG) or /bigobj objects start with Sig1=0, Sig2=0xFFFF.
_COFF_ANON_PREFIX = b"\x00\x00\xff\xff"
# Archive members that are symbol tables or name tables, not objects.
_SPECIAL_MEMBERS = {"/", "//", "/SYM64/", "/<ECSYMBOLS>/", "/<HYBRIDMAP>/"}
_MAX_MEMBERS_PROBED = 16


class FormatError(BackendsError, RuntimeError):
    """A file that cannot be read as the object format it is taken for; the message names it."""


@dataclass(frozen=True)
class ArchiveMember:
    name: str
    offset: int  # of the member's data in the archive file
    size: int


def iter_archive_members(path: Path) -> Iterator[ArchiveMember]:
    """The object members of a regular `!<arch>` archive (GNU, BSD or MS flavour),
    skipping symbol and name tables. Reads headers only."""
    with open(path, "rb") as stream:
        if stream.read(len(AR_MAGIC)) != AR_MAGIC:
            return
        offset = len(AR_MAGIC)
        while True:
            stream.seek(offset)
            header = stream.read(AR_HEADER_SIZE)
            if len(header) < AR_HEADER_SIZE or header[58:60] != b"`\n":
                return
            raw_name = header[:16].decode("ascii", "replace").rstrip()
            try:
                size = int(header[48:58].decode("ascii").strip() or "0")
            except ValueError:
                return
            name, data_offset, data_size = _member_name(
                stream, raw_name, offset + AR_HEADER_SIZE, size)
            if not _is_special_member(name):
                yield ArchiveMember(name, data_offset, data_size)
            offset += AR_HEADER_SIZE + _padded(size)


def _padded(size: int) -> int:
    return size + (size & 1)


def _member_name(stream: BinaryIO, raw_name: str, data_offset: int,
                 size: int) -> tuple[str, int, int]:
    # BSD long names: "#1/<len>", the name is the first <len> bytes of the data.
    if raw_name.startswith("#1/") and raw_name[3:].isdigit():
        length = int(raw_name[3:])
        stream.seek(data_offset)
        name = stream.read(length).rstrip(b"\0").decode("utf-8", "replace")
        return name, data_offset + length, size - length
    return raw_name, data_offset, size


def _is_special_member(name: str) -> bool:
    return name in _SPECIAL_MEMBERS or name.startswith("__.SYMDEF")


def format_of_bytes(head: bytes) -> str:
    if head.startswith(b"\x7fELF"):
        return "elf"
    if head[:4] in _MACHO_MAGICS:
        return "macho"
    if head[:4] in _FAT_MAGICS and 0 < int.from_bytes(head[4:8], "big") <= _MAX_FAT_ARCHS:
        return "macho"
    if head.startswith(b"\0asm"):
        return "wasm"
    if head.startswith(b"MZ"):
        return "pe"
    if head.startswith(_COFF_ANON_PREFIX):
        return "coff"
    if len(head) >= 20 and int.from_bytes(head[:2], "little") in _COFF_MACHINES:
        return "coff"
    return "unknown"


def is_ar_archive(path: str | os.PathLike[str]) -> bool:
    """A (non-thin) `ar` archive: a static library of any object format."""
    with open(path, "rb") as stream:
        return stream.read(len(AR_MAGIC)) == AR_MAGIC


def object_format(path: Path) -> str:
    """"elf", "macho" (thin or fat), "coff", "wasm", "pe" (DLL/EXE), "ar" (an archive
    whose members are none of those, or a thin archive) or "unknown", by magic bytes.

    For an archive, the first recognisable object member decides: an MS `.lib`, a
    GNU `.a` of ELF objects and an `.a` of Mach-O objects share the `!<arch>` magic.
    """
    with open(path, "rb") as stream:
        head = stream.read(64)
    if head.startswith(AR_THIN_MAGIC):
        return "ar"
    if not head.startswith(AR_MAGIC):
        return format_of_bytes(head)
    with open(path, "rb") as stream:
        for index, member in enumerate(iter_archive_members(path)):
            if index >= _MAX_MEMBERS_PROBED:
                break
            stream.seek(member.offset)
            found = format_of_bytes(stream.read(min(member.size, 64)))
            if found not in ("unknown", "pe"):
                return found
    return "ar"


def nm_symbol_table(path: Path, arch: str = "") -> tuple[set[str], set[str]]:
    """(undefined, defined external) symbol names of every member and architecture (or
    only the `arch` slice of a universal file), Mach-O names without their leading underscore."""
    nm = toolchain.require_tool("llvm-nm", "reading symbol tables")
    completed = subprocess.run(
        [nm, "--format=posix", "--print-file-name", f"--arch={arch or 'all'}", "--extern-only",
         str(path)],
        capture_output=True, text=True, check=False)
    if completed.returncode != 0:
        raise FormatError(f"{os.path.basename(nm)} failed on {path}:\n{completed.stderr.strip()}")
    strip_underscore = object_format(path) == "macho"
    undefined: set[str] = set()
    defined: set[str] = set()
    for line in completed.stdout.splitlines():
        fields = line.rpartition(": ")[2].split()
        if len(fields) < 2:
            continue
        name, kind = fields[0], fields[1]
        if strip_underscore and name.startswith("_"):
            name = name[1:]
        if kind == "U":
            undefined.add(name)
        elif kind not in ("w", "v"):  # weak undefined: allowed to stay unresolved
            defined.add(name)
    return undefined, defined
