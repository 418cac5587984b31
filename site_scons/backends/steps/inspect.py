"""Reading facts out of built libraries for the verify step, with LLVM tools that
understand ELF, Mach-O and COFF on any host.

Symbol names are *normalized*: the leading underscore Mach-O adds to every C symbol
is removed, so one contract (`OrtGetApiBase`, `_ZN6tflite...`) holds on every OS.
"""
from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

from backends import toolchain
from backends.steps.bundle import object_format
from backends.steps.universal import macho_archs

_OFFSET_SUFFIX = re.compile(r"\s+\(offset \d+\)$")
ELF_TYPE_SHARED = 3  # e_type ET_DYN
_LOAD_DYLIB_COMMANDS = {"LC_LOAD_DYLIB", "LC_LOAD_WEAK_DYLIB", "LC_REEXPORT_DYLIB",
                        "LC_LAZY_LOAD_DYLIB", "LC_LOAD_UPWARD_DYLIB"}


class InspectError(RuntimeError):
    """A library could not be read by the tool inspecting it."""


def _tool_output(name: str, arguments: list[str], path: Path) -> str:
    tool = toolchain.require_tool(name, f"inspecting {path.name}")
    completed = subprocess.run([tool, *arguments, str(path)], capture_output=True,
                               text=True, check=False)
    if completed.returncode != 0:
        raise InspectError(f"{os.path.basename(tool)} failed on {path} "
                           f"(exit {completed.returncode}):\n{completed.stderr.strip()}")
    return completed.stdout


def _is_elf_shared_object(path: Path) -> bool:
    with open(path, "rb") as stream:
        head = stream.read(18)
    order = "little" if head[5:6] == b"\x01" else "big"
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
    raise InspectError(f"{lib}: not a shared library or executable (format {fmt})")


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
        versions = [version for version in versions if version]
        if versions:
            result[arch] = max(versions, key=_version_key)
    return result


def _version_key(version: str) -> tuple[int, ...]:
    return tuple(int(part) for part in re.findall(r"\d+", version))


def _macho_load_commands(lib: Path) -> dict[str, list[dict[str, str]]]:
    """Load commands per architecture, each as {field: first word of its value}."""
    archs = macho_archs(lib)
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
