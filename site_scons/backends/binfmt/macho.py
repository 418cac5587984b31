"""Mach-O architectures, read from the headers themselves (thin, fat and archives of Mach-O
objects) rather than asked of lipo: llvm-lipo 14
(Debian 12) crashes on `-archs`/`-info` of a thin static archive.
"""
from __future__ import annotations

from pathlib import Path
from typing import BinaryIO, Literal

from backends.binfmt.objects import FormatError, iter_archive_members, object_format
from backends.model.platforms import platform_table

_CPU_SUBTYPE_MASK = 0x00FFFFFF
# (cputype, cpusubtype or None) -> lipo's name (engines/platforms.toml, [machine.*] macho).
_ARCH_NAMES = platform_table().macho_machines
_THIN_LITTLE = {b"\xce\xfa\xed\xfe", b"\xcf\xfa\xed\xfe"}
_THIN_BIG = {b"\xfe\xed\xfa\xce", b"\xfe\xed\xfa\xcf"}
_FAT = b"\xca\xfe\xba\xbe"
_FAT_64 = b"\xca\xfe\xba\xbf"


def arch_name(cputype: int, cpusubtype: int) -> str:
    subtype = cpusubtype & _CPU_SUBTYPE_MASK
    return (_ARCH_NAMES.get((cputype, subtype))
            or _ARCH_NAMES.get((cputype, None))
            or f"cputype{cputype}")


def _thin_arch(head: bytes) -> str | None:
    magic = head[:4]
    order: Literal["little", "big"]
    if magic in _THIN_LITTLE:
        order = "little"
    elif magic in _THIN_BIG:
        order = "big"
    else:
        return None
    return arch_name(int.from_bytes(head[4:8], order), int.from_bytes(head[8:12], order))


def _fat_archs(stream: BinaryIO) -> list[str]:
    header = stream.read(8)
    entry_size = 32 if header[:4] == _FAT_64 else 20
    count = int.from_bytes(header[4:8], "big")
    archs = []
    for _ in range(count):
        entry = stream.read(entry_size)
        archs.append(arch_name(int.from_bytes(entry[0:4], "big"),
                               int.from_bytes(entry[4:8], "big")))
    return archs


def macho_archs(path: Path) -> list[str]:
    """The architectures of a Mach-O file, fat file or archive of Mach-O objects
    (lipo's names: x86_64, arm64, ...). Raises `FormatError` for anything else."""
    if object_format(path) != "macho":
        raise FormatError(f"{path} is not a Mach-O file or archive")
    with open(path, "rb") as stream:
        head = stream.read(12)
        if head[:4] in (_FAT, _FAT_64):
            stream.seek(0)
            return _fat_archs(stream)
        if (arch := _thin_arch(head)) is not None:
            return [arch]
        archs: dict[str, None] = {}
        for member in iter_archive_members(path):
            stream.seek(member.offset)
            arch = _thin_arch(stream.read(min(member.size, 12)))
            if arch is not None:
                archs[arch] = None
        return list(archs)
