"""Reading facts out of built libraries for the verify step, with LLVM tools that
understand ELF, Mach-O and COFF on any host.

Symbol names are *normalized*: the leading underscore Mach-O adds to every C symbol
is removed, so one contract (`OrtGetApiBase`, `_ZN6tflite...`) holds on every OS.
"""
from __future__ import annotations

import os
import re
import subprocess
from functools import lru_cache
from pathlib import Path
from typing import Literal

from backends.binfmt.macho import macho_archs
from backends.binfmt.objects import AR_MAGIC, FormatError, iter_archive_members, nm_symbol_table, object_format
from backends.model.platforms import platform_table
from backends.model.engine import version_key
from backends.util import toolchain
from backends.util.errors import BackendsError

_OFFSET_SUFFIX = re.compile(r"\s+\(offset \d+\)$")
ELF_TYPE_SHARED = 3  # e_type ET_DYN
_LOAD_DYLIB_COMMANDS = {"LC_LOAD_DYLIB", "LC_LOAD_WEAK_DYLIB", "LC_REEXPORT_DYLIB",
                        "LC_LAZY_LOAD_DYLIB", "LC_LOAD_UPWARD_DYLIB"}


class InspectError(BackendsError, RuntimeError):
    """A library could not be read by the tool inspecting it; `path` is the file."""

    def __init__(self, message: str, path: Path | None = None) -> None:
        super().__init__(message)
        self.path = path


def _tool_output(name: str, arguments: list[str], path: Path) -> str:
    tool = toolchain.require_tool(name, f"inspecting {path.name}")
    completed = subprocess.run([tool, *arguments, str(path)], capture_output=True,
                               text=True, check=False)
    if completed.returncode != 0:
        raise InspectError(f"{os.path.basename(tool)} failed on {path} "
                           f"(exit {completed.returncode}):\n{completed.stderr.strip()}", path)
    return completed.stdout


def _is_elf_shared_object(path: Path) -> bool:
    with open(path, "rb") as stream:
        head = stream.read(18)
    order: Literal["little", "big"] = "little" if head[5:6] == b"\x01" else "big"
    return head.startswith(b"\x7fELF") and int.from_bytes(head[16:18], order) == ELF_TYPE_SHARED


def exported_symbols(lib: Path, arch: str = "") -> set[str]:
    """Defined external symbols (normalized names) of an object, archive, ELF shared
    object (its dynamic table), Mach-O dylib (all architectures, or the `arch` slice)
    or PE DLL (its export table)."""
    lib = Path(lib)
    fmt = object_format(lib)
    if fmt == "pe":
        return dll_exports(lib)
    arguments = ["--defined-only", "--extern-only", "--format=posix", "--print-file-name"]
    if fmt == "elf" and _is_elf_shared_object(lib):
        arguments.append("--dynamic")
    if fmt == "macho":
        arguments.append(f"--arch={arch or 'all'}")
    names = set()
    for line in _tool_output("llvm-nm", arguments, lib).splitlines():
        fields = line.rpartition(": ")[2].split()
        if fields:
            names.add(fields[0].split("@", 1)[0])  # ELF symbol versions: OrtGetApiBase@@VERS_1.26.0
    if fmt == "macho":
        names = {name[1:] if name.startswith("_") else name for name in names}
    return names


def symbol_sets(lib: Path, arch: str = "") -> tuple[set[str], set[str]]:
    """(defined, undefined) external symbols: every member and architecture (or the `arch`
    slice of a universal file) of a static library or object; the export table of a shared
    library (which leaves nothing undefined that the loader does not resolve)."""
    lib = Path(lib)
    fmt = object_format(lib)
    if fmt == "pe" or (fmt in ("elf", "macho") and _is_shared(lib)):
        return exported_symbols(lib, arch), set()
    try:
        undefined, defined = nm_symbol_table(lib, arch)
    except FormatError as error:  # one error class for every unreadable library
        raise InspectError(str(error), lib) from None
    return defined, undefined


def _is_shared(lib: Path) -> bool:
    """A shared object, dylib or framework binary; not an archive or relocatable object."""
    with open(lib, "rb") as stream:
        head = stream.read(8)
    if head.startswith(b"\x7fELF"):
        return _is_elf_shared_object(lib)
    return not head.startswith(AR_MAGIC)


def dll_exports(dll: Path) -> set[str]:
    """Names in a PE DLL's export table (ordinal-only exports have none)."""
    output = _tool_output("llvm-readobj", ["--coff-exports"], Path(dll))
    return {match.group(1) for match in re.finditer(r"^\s*Name: (\S+)\s*$", output, re.M)}


def needed_libraries(lib: Path) -> list[str]:
    """Libraries the loader must find: ELF DT_NEEDED, Mach-O LC_LOAD_*DYLIB install
    names (all architectures, without the dylib's own id), PE imported DLLs."""
    lib = Path(lib)
    fmt = object_format(lib)
    if fmt == "elf":
        return _elf_needed(lib)
    if fmt == "macho":
        return _macho_needed(lib)
    if fmt == "pe":
        return _pe_imports(lib)
    raise InspectError(f"{lib}: not a shared library or executable (format {fmt})", lib)


def _elf_needed(lib: Path) -> list[str]:
    output = _tool_output("llvm-readobj", ["--needed-libs"], lib)
    block = re.search(r"NeededLibraries \[\n(.*?)^\]", output, re.S | re.M)
    return [line.strip() for line in block.group(1).splitlines()] if block else []


def _pe_imports(lib: Path) -> list[str]:
    output = _tool_output("llvm-readobj", ["--coff-imports"], lib)
    names = re.findall(r"^(?:Delay)?Import \{\n\s*Name: (\S+)", output, re.M)
    return list(dict.fromkeys(names))


def _macho_needed(lib: Path) -> list[str]:
    names: dict[str, None] = {}
    for commands in _macho_load_commands(lib).values():
        for command in commands:
            if command.get("cmd") in _LOAD_DYLIB_COMMANDS and "name" in command:
                names[command["name"]] = None
    return list(names)


def macho_install_names(lib: Path) -> dict[str, str]:
    """The install name (LC_ID_DYLIB) of each architecture of a dylib; '' where none."""
    return {arch: next((command.get("name", "") for command in commands if command.get("cmd") == "LC_ID_DYLIB"), "")
            for arch, commands in _macho_load_commands(Path(lib)).items()}


def macho_min_os(lib: Path) -> dict[str, str]:
    """Deployment target per architecture: the highest LC_BUILD_VERSION `minos` (or
    legacy LC_VERSION_MIN_* `version`) over all objects; {"arm64": "11.0", ...}."""
    result: dict[str, str] = {}
    for arch, commands in _macho_load_commands(Path(lib)).items():
        versions = [command.get("minos") or command.get("version")
                    for command in commands
                    if command.get("cmd") == "LC_BUILD_VERSION"
                    or command.get("cmd", "").startswith("LC_VERSION_MIN_")]
        found = [version for version in versions if version]
        if found:
            result[arch] = max(found, key=lambda version: version_key(version) or ())
    return result



def _macho_load_commands(lib: Path) -> dict[str, list[dict[str, str]]]:
    """Load commands per architecture, each as {field: first word of its value}; read once
    per file as it is (several checks ask about one library). Callers must not modify it."""
    st = os.stat(lib)
    return _load_commands_of(str(lib), (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns))


@lru_cache(maxsize=256)
def _load_commands_of(path: str, identity: tuple[int, ...]) -> dict[str, list[dict[str, str]]]:
    lib = Path(path)
    try:
        archs = macho_archs(lib)
    except FormatError as error:  # a `.dylib` that is no Mach-O file: unreadable as one
        raise InspectError(str(error), lib) from None
    per_arch: dict[str, list[dict[str, str]]] = {}
    for arch in archs:
        if len(archs) > 1:
            # One slice of a fat file: llvm-otool 14 ignores -arch (it prints the same slice
            # whatever is asked), objdump honours --arch and prints the same listing.
            output = _tool_output("llvm-objdump", ["--macho", "--private-headers", f"--arch={arch}"], lib)
        else:
            output = _tool_output("llvm-otool", ["-l"], lib)
        per_arch[arch] = _parse_load_commands(output)
    return per_arch


def _parse_load_commands(output: str) -> list[dict[str, str]]:
    commands: list[dict[str, str]] = []
    for line in output.splitlines():
        fields = line.split(None, 1)
        if len(fields) != 2:
            continue
        key, value = fields
        if key == "cmd":
            commands.append({"cmd": value.strip()})
        elif key == "name" and commands:
            # Install names may contain spaces: "name /A B/libx.dylib (offset 24)".
            commands[-1][key] = _OFFSET_SUFFIX.sub("", value.strip())
        elif commands and key not in commands[-1]:
            commands[-1][key] = value.split()[0]
    return commands


# --- what a binary is: format, architectures, identity, version -------------------------

# Machine ids -> names (engines/platforms.toml, [machine.*]).
ELF_MACHINES = platform_table().elf_machines
COFF_MACHINES = platform_table().coff_machines
IMAGE_FILE_DLL = 0x2000
_VS_FIXEDFILEINFO = (0xFEEF04BD).to_bytes(4, "little")
_DLL_NAME = re.compile(r"^\s*DLL name: (\S+)\s*$", re.M)
_SONAME = re.compile(r"SONAME\s+Library soname: \[([^\]]+)\]")


def binary_archs(lib: Path) -> tuple[str, set[str]]:
    """(format, architectures) of a library: elf/macho/pe/coff/wasm with the machine of
    the file or of its archive members; ("unknown", set()) for anything else."""
    lib = Path(lib)
    fmt = object_format(lib)
    if fmt == "macho":
        return fmt, set(macho_archs(lib))
    if fmt == "wasm":
        return fmt, set(platform_table().wasm_machines)
    heads = _object_heads(lib)
    if fmt == "elf":
        return fmt, {ELF_MACHINES.get(_elf_machine(head), "unknown") for head in heads if head.startswith(b"\x7fELF")}
    if fmt == "pe":
        return fmt, {COFF_MACHINES.get(_pe_machine(lib), "unknown")}
    if fmt == "coff":
        return fmt, {COFF_MACHINES.get(m, "unknown") for m in map(_coff_machine, heads) if m is not None}
    return fmt, set()


def _object_heads(lib: Path) -> list[bytes]:
    """The first bytes of the file, or of the first object members of an archive."""
    with open(lib, "rb") as stream:
        if stream.read(8) != AR_MAGIC:
            stream.seek(0)
            return [stream.read(64)]
        heads = []
        for index, member in enumerate(iter_archive_members(lib)):
            if index >= 64:
                break
            stream.seek(member.offset)
            heads.append(stream.read(min(member.size, 64)))
        return heads


def _elf_machine(head: bytes) -> int:
    order: Literal["little", "big"] = "little" if head[5:6] == b"\x01" else "big"
    return int.from_bytes(head[18:20], order)


def _coff_machine(head: bytes) -> int | None:
    if head.startswith(b"\x00\x00\xff\xff"):  # import object, or an anonymous (/GL, /bigobj) object
        return int.from_bytes(head[6:8], "little")
    machine = int.from_bytes(head[:2], "little")
    return machine if machine in COFF_MACHINES else None


def _pe_machine(lib: Path) -> int:
    return _pe_file_header(lib)[0]


def pe_is_dll(lib: Path) -> bool:
    """A PE file that loads as a library (IMAGE_FILE_DLL), not an executable."""
    return bool(_pe_file_header(lib)[1] & IMAGE_FILE_DLL)


def _pe_file_header(lib: Path) -> tuple[int, int]:
    """(Machine, Characteristics) of a PE file's COFF header; (0, 0) for no PE file."""
    with open(lib, "rb") as stream:
        stream.seek(0x3C)
        offset = int.from_bytes(stream.read(4), "little")
        stream.seek(offset)
        header = stream.read(24)
    if len(header) < 24 or header[:4] != b"PE\0\0":
        return 0, 0
    return int.from_bytes(header[4:6], "little"), int.from_bytes(header[22:24], "little")


def library_identity(lib: Path) -> str:
    """The name a loader knows a shared library by: ELF SONAME, Mach-O install name
    (LC_ID_DYLIB), a DLL's export-table name; "" when it has none."""
    lib = Path(lib)
    fmt = object_format(lib)
    if fmt == "elf":
        match = _SONAME.search(_tool_output("llvm-readobj", ["--dynamic-table"], lib))
        return match.group(1) if match else ""
    if fmt == "macho":
        return next((name for name in macho_install_names(lib).values() if name), "")
    if fmt == "pe":
        match = _DLL_NAME.search(_tool_output("llvm-objdump", ["-p"], lib))
        return match.group(1) if match else ""
    return ""


def elf_version_definitions(lib: Path) -> list[str]:
    """The symbol versions an ELF shared object defines (VERS_1.26.0), without its base
    version (which is its SONAME)."""
    output = _tool_output("llvm-readobj", ["--version-info"], Path(lib))
    block = re.search(r"^VersionDefinitions \[\n(.*?)^\]", output, re.S | re.M)
    if not block:
        return []
    definitions = re.split(r"^\s*Definition \{", block.group(1), flags=re.M)[1:]
    return [m.group(1) for d in definitions if "Base (0x1)" not in d and (m := re.search(r"Name: (\S+)", d))]


def dylib_version(lib: Path) -> str:
    """A Mach-O dylib's LC_ID_DYLIB current version ("1.26.0"), "" without one."""
    output = _tool_output("llvm-otool", ["-l"], Path(lib))
    match = re.search(r"cmd LC_ID_DYLIB\n(?:.*\n)*?\s*current version (\S+)", output)
    return match.group(1) if match else ""


def dll_file_version(lib: Path) -> str:
    """A PE file's VS_FIXEDFILEINFO file version ("1.26.26.508"), "" without one."""
    data = Path(lib).read_bytes()
    at = data.find(_VS_FIXEDFILEINFO)
    if at < 0 or len(data) < at + 16:
        return ""
    most, least = int.from_bytes(data[at + 8:at + 12], "little"), int.from_bytes(data[at + 12:at + 16], "little")
    return f"{most >> 16}.{most & 0xFFFF}.{least >> 16}.{least & 0xFFFF}"


def macho_platforms(lib: Path) -> set[str]:
    """Every platform a Mach-O file or archive was built for (LC_BUILD_VERSION `platform`:
    macos, ios, iossimulator, ...; legacy LC_VERSION_MIN_* mapped alike)."""
    platforms = set()
    for arch, commands in _macho_load_commands(Path(lib)).items():
        for command in commands:
            cmd = command.get("cmd", "")
            if cmd == "LC_BUILD_VERSION" and "platform" in command:
                platforms.add(command["platform"].lower())
            elif cmd.startswith("LC_VERSION_MIN_"):
                platforms.add(_LEGACY_PLATFORMS.get((cmd, _is_x86(arch)), cmd))
    return platforms


def _is_x86(arch: str) -> bool:
    machine = platform_table().machines.get(arch)
    return machine is not None and machine.family == "x86"


_LEGACY_PLATFORMS = {
    ("LC_VERSION_MIN_MACOSX", False): "macos", ("LC_VERSION_MIN_MACOSX", True): "macos",
    ("LC_VERSION_MIN_IPHONEOS", False): "ios", ("LC_VERSION_MIN_IPHONEOS", True): "iossimulator",
}
