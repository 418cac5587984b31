"""The platform table, `engines/platforms.toml`: per OS its upstream label and binary formats, per
platform its token, aliases, runner labels, binary machines, cross compiler, MSVC target and how
another host runs its smoke. The one reader of that file; every platform fact the core uses
comes from here, so a new platform is a new table in the data (docs/extending.md).

Validated at load, naming the file and the field."""
from __future__ import annotations

import tomllib
from dataclasses import dataclass
from functools import cached_property, lru_cache
from pathlib import Path
from types import MappingProxyType
from typing import Mapping

from backends.model.schema import DataError, Field, boolean, line, list_of, one_of, read, table, table_of, text

FILE_NAME = "platforms.toml"
# The project's own copy: engines/ beside site_scons/.
DEFAULT_FILE = Path(__file__).resolve().parents[3] / "engines" / FILE_NAME
RUN_MODES = ("qemu", "wine", "rosetta", "simulator")


@dataclass(frozen=True)
class OsFacts:
    name: str
    label: str  # upstream's spelling in archive names
    system: str  # what Python's platform.system() says on such a host ("" where none runs this project)
    formats: tuple[str, ...]
    abi_machines: Mapping[str, str]  # lib/<abi>/ -> machine (Android's multi-ABI packages)
    slice_machines: tuple[str, ...]  # machines an xcframework slice directory may name (iOS)
    device_slice: str  # the xcframework slice of a device build (iOS)


@dataclass(frozen=True)
class Msvc:
    arch: str  # the MSVC target (vcvarsall, backends.ci.msvc_env)
    dev_cmd_arch: str  # VsDevCmd's -arch spelling
    processor: str  # PROCESSOR_ARCHITECTURE on a host of this platform
    tools_component: str  # the Visual Studio component holding its compiler
    lib_machine: str  # lib.exe's /machine option for an import library
    dlltool_machine: str  # llvm-dlltool's -m for one


@dataclass(frozen=True)
class Emulation:
    mode: str
    hosts: tuple[str, ...]
    tools: tuple[str, ...] = ()
    needs: tuple[str, ...] = ()
    toolchain_file: str = ""  # under smoke/
    c_abi_only: bool = False
    hint: str = ""


@dataclass(frozen=True)
class Platform:
    token: str
    os: str
    arch: str
    aliases: tuple[str, ...] = ()
    runners: tuple[str, ...] = ()
    machines: tuple[str, ...] = ()
    aggregate: str = ""
    slices: tuple[str, ...] = ()
    native_on: tuple[str, ...] = ()
    debian_arch: str = ""
    cross_triple: str = ""
    sysroot_packages: tuple[str, ...] = ()
    anira_gate: str = ""
    msvc: Msvc | None = None
    emulated: Emulation | None = None

    @property
    def native_hosts(self) -> tuple[str, ...]:
        return self.native_on or (self.token,)


@dataclass(frozen=True)
class Machine:
    name: str
    elf: int = 0  # e_machine
    coff: int = 0  # the COFF/PE Machine field
    macho: tuple[int, ...] = ()  # (cputype,) or (cputype, cpusubtype)
    wasm: bool = False
    family: str = ""


@dataclass(frozen=True)
class PlatformTable:
    oses: Mapping[str, OsFacts]
    platforms: Mapping[str, Platform]
    machines: Mapping[str, Machine]

    def __getitem__(self, token: str) -> Platform:
        return self.platforms[token]

    @property
    def tokens(self) -> tuple[str, ...]:
        return tuple(self.platforms)

    @cached_property
    def aliases(self) -> Mapping[str, str]:
        """Every accepted spelling (canonical tokens included) -> its canonical token."""
        return MappingProxyType({spelling: p.token for p in self.platforms.values()
                                 for spelling in (p.token, *p.aliases)})

    @cached_property
    def arches(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(p.arch for p in self.platforms.values() if p.arch))

    @cached_property
    def runners(self) -> Mapping[str, tuple[str, str]]:
        """GitHub-hosted runner label -> (os, arch) of the machine it provides."""
        return MappingProxyType({label: (p.os, p.arch) for p in self.platforms.values() for label in p.runners})

    @cached_property
    def aggregate_slices(self) -> Mapping[str, tuple[str, ...]]:
        """Aggregate (universal, android-bundle) -> the per-arch platforms it fuses, in slice order."""
        return MappingProxyType({p.aggregate: p.slices for p in self.platforms.values() if p.aggregate})

    @cached_property
    def elf_machines(self) -> Mapping[int, str]:
        return MappingProxyType({m.elf: m.name for m in self.machines.values() if m.elf})

    @cached_property
    def coff_machines(self) -> Mapping[int, str]:
        return MappingProxyType({m.coff: m.name for m in self.machines.values() if m.coff})

    @cached_property
    def macho_machines(self) -> Mapping[tuple[int, int | None], str]:
        """(cputype, cpusubtype or None for any other) -> the machine's name."""
        return MappingProxyType({(m.macho[0], m.macho[1] if len(m.macho) > 1 else None): m.name
                                 for m in self.machines.values() if m.macho})

    @cached_property
    def wasm_machines(self) -> frozenset[str]:
        return frozenset(m.name for m in self.machines.values() if m.wasm)

    def of_host(self, os_name: str, machine: str) -> str:
        """The platform of a host whose OS is `os_name` and whose CPU any platform of that
        OS names (`machine` as `platform.machine()` says it: amd64, aarch64, arm64, ...)."""
        for p in self.platforms.values():
            if p.os == os_name and machine in (p.arch, *p.machines, *(a.partition("-")[2] for a in p.aliases)):
                return p.token
        return f"{os_name}-{machine}"

    def os_of_system(self, system: str) -> str:
        """The OS of a host whose `platform.system()` is `system`."""
        for facts in self.oses.values():
            if facts.system and facts.system == system:
                return facts.name
        return system.lower()

    def msvc_arch(self, token: str) -> str:
        platform = self.platforms.get(token)
        return platform.msvc.arch if platform and platform.msvc else ""

    def msvc_targets(self) -> tuple[Msvc, ...]:
        return tuple(p.msvc for p in self.platforms.values() if p.msvc)

    def msvc_of_arch(self, os_name: str) -> Mapping[str, str]:
        """A host's arch (its platform token's) -> the MSVC target of that platform."""
        return MappingProxyType({p.arch: p.msvc.arch for p in self.platforms.values() if p.os == os_name and p.msvc})

    def gated(self) -> tuple[str, ...]:
        """The platforms the anira gate runs on, those it always runs on first."""
        return tuple(p.token for gate in ANIRA_GATES for p in self.platforms.values() if p.anira_gate == gate)

    def emulation(self, token: str, mode: str = "") -> Emulation | None:
        """How `token` runs emulated here; with `mode`, only an emulation of that mode."""
        platform = self.platforms.get(token)
        emulated = platform.emulated if platform else None
        return emulated if emulated and (not mode or emulated.mode == mode) else None

    def examples(self) -> str:
        """The tokens, each with its first alias, as help and error messages list them."""
        return ", ".join(f"{p.token} (alias {p.aliases[0]})" if p.aliases else p.token
                         for p in self.platforms.values())


def _strings(value: object, label: str, where: str) -> tuple[str, ...]:
    return tuple(list_of(text)(value, label, where))


def _machine_id(value: object, label: str, where: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise DataError(f"{where}: {label} must be a header's machine id (a positive integer), not {value!r}")
    return value


def _macho_id(value: object, label: str, where: str) -> tuple[int, ...]:
    ids = tuple(list_of(_machine_id)(value, label, where))
    if len(ids) > 2:
        raise DataError(f"{where}: {label} is [cputype] or [cputype, cpusubtype], not {value!r}")
    return ids


def _emulation(value: object, label: str, where: str) -> Emulation:
    values = read(table(value, label, where), EMULATION_FIELDS, f"{where}.{label}")
    if values["mode"] not in RUN_MODES:
        raise DataError(f"{where}.{label}.mode: {values['mode']!r} is none of {', '.join(RUN_MODES)}")
    return Emulation(**values)


def _msvc(value: object, label: str, where: str) -> Msvc:
    return Msvc(**read(table(value, label, where), MSVC_FIELDS, f"{where}.{label}"))


OS_FIELDS = (
    Field("label", line),
    Field("system", line, ""),
    Field("formats", _strings),
    Field("abi_machines", table_of(text), MappingProxyType({})),
    Field("slice_machines", _strings, ()),
    Field("device_slice", line, ""),
)
MSVC_FIELDS = (Field("arch", line), Field("dev_cmd_arch", line), Field("processor", line),
               Field("tools_component", line), Field("lib_machine", line), Field("dlltool_machine", line))
ANIRA_GATES = ("always", "with-archives")
EMULATION_FIELDS = (
    Field("mode", line),
    Field("hosts", _strings),
    Field("tools", _strings, ()),
    Field("needs", _strings, ()),
    Field("toolchain_file", line, ""),
    Field("c_abi_only", boolean, False),
    Field("hint", line, ""),
)
PLATFORM_FIELDS = (
    Field("os", line),
    Field("arch", text),
    Field("aliases", _strings, ()),
    Field("runners", _strings, ()),
    Field("machines", _strings, ()),
    Field("aggregate", line, ""),
    Field("slices", _strings, ()),
    Field("native_on", _strings, ()),
    Field("debian_arch", line, ""),
    Field("cross_triple", line, ""),
    Field("sysroot_packages", _strings, ()),
    Field("anira_gate", one_of(ANIRA_GATES), ""),
    Field("msvc", _msvc, None),
    Field("emulated", _emulation, None),
)
MACHINE_FIELDS = (
    Field("elf", _machine_id, 0),
    Field("coff", _machine_id, 0),
    Field("macho", _macho_id, ()),
    Field("wasm", boolean, False),
    Field("family", line, ""),
)
FILE_FIELDS = (Field("os", table), Field("platform", table), Field("machine", table))


def _platform(token: str, value: object, oses: Mapping[str, OsFacts], where: str) -> Platform:
    values = read(table(value, token, where), PLATFORM_FIELDS, f"{where}: platform.{token}")
    platform = Platform(token=token, **values)
    if platform.os not in oses:
        raise DataError(f"{where}: platform.{token}.os: no [os.{platform.os}]; oses: {', '.join(oses)}")
    expected = f"{platform.os}-{platform.arch}" if platform.arch else platform.os
    if token != expected:
        raise DataError(f"{where}: platform.{token}: the token is <os>-<arch> ({expected!r}), or the bare OS")
    return platform


def _cross_check(table_: PlatformTable, where: str) -> None:
    """Every platform a platform names exists, and no spelling means two platforms."""
    seen: dict[str, str] = {}
    for p in table_.platforms.values():
        for named in (*p.slices, *p.native_on, *(p.emulated.hosts if p.emulated else ())):
            if named not in table_.platforms:
                raise DataError(f"{where}: platform.{p.token} names {named!r}, which is no platform of the table")
        for machine in p.machines:
            if machine not in table_.machines:
                raise DataError(f"{where}: platform.{p.token} has machine {machine!r}, which no [machine.*] names")
        for spelling in (p.token, *p.aliases):
            if seen.setdefault(spelling, p.token) != p.token:
                raise DataError(f"{where}: {spelling!r} spells both {seen[spelling]} and {p.token}")
        if bool(p.aggregate) != bool(p.slices):
            raise DataError(f"{where}: platform.{p.token}: an aggregate names its slices, and slices their aggregate")
    labels = [label for p in table_.platforms.values() for label in p.runners]
    if len(labels) != len(set(labels)):
        raise DataError(f"{where}: a runner label names two platforms")


def parse_platforms(data: Mapping[str, object], where: str) -> PlatformTable:
    values = read(data, FILE_FIELDS, where)
    oses = {name: OsFacts(name=name, **read(table(raw, name, where), OS_FIELDS, f"{where}: os.{name}"))
            for name, raw in values["os"].items()}
    platforms = {token: _platform(token, raw, oses, where) for token, raw in values["platform"].items()}
    machines = {name: Machine(name=name, **read(table(raw, name, where), MACHINE_FIELDS, f"{where}: machine.{name}"))
                for name, raw in values["machine"].items()}
    result = PlatformTable(MappingProxyType(oses), MappingProxyType(platforms), MappingProxyType(machines))
    _cross_check(result, where)
    return result


@lru_cache(maxsize=None)
def load_platforms(path: Path = DEFAULT_FILE) -> PlatformTable:
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, tomllib.TOMLDecodeError) as error:
        raise DataError(f"{path}: {error}") from None
    return parse_platforms(data, str(path))


def platform_table() -> PlatformTable:
    """The project's platform table."""
    return load_platforms(DEFAULT_FILE)
