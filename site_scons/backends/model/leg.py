"""A leg: one published (or feeding) archive = engine x platform x kind x config x flavor."""
from __future__ import annotations

from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Mapping

from backends.model.platforms import platform_table
from backends.model.vocab import RUNNERS, platform_label, split_platform


def _frozen(mapping: Mapping[str, str] | None = None) -> Mapping[str, str]:
    return MappingProxyType(dict(mapping or {}))


@dataclass(frozen=True)
class Leg:
    engine: str
    platform: str
    kind: str
    config: str
    flavor: str
    source: str
    runner: str
    can_run: bool
    toolchain: str = "none"
    accelerator: tuple[str, ...] = ()
    experimental: bool = False
    publish: bool = True
    aggregate: str = ""
    inputs: tuple[str, ...] = ()
    requires: Mapping[str, str] = field(default_factory=_frozen)
    params: Mapping[str, str] = field(default_factory=_frozen)
    # Set only where a leg's upstream source exists at another version than the engine's
    # pin (ExecuTorch's wheels carry a C++ runtime only since 1.5); names follow it.
    version: str = ""
    cold_hours: float = 0.0  # a cold build's estimated hours on its runner; 0: well within a CI job
    free_disk: bool = False  # CI frees the runner's disk first (inputs of several GB)

    @property
    def os(self) -> str:
        return split_platform(self.platform)[0]

    @property
    def arch(self) -> str:
        return split_platform(self.platform)[1]

    @property
    def id(self) -> str:
        return leg_id(self.engine, self.platform, self.flavor, self.kind, self.config)

    @property
    def msvc_arch(self) -> str:
        return platform_table().msvc_arch(self.platform)

    @property
    def runner_host(self) -> tuple[str, str]:
        return RUNNERS[self.runner]

    @property
    def cross_triple(self) -> str:
        """The GNU triple of the cross compiler the leg is built with where its runner is of its
        OS but of another arch (engines/platforms.toml); "" for a native build."""
        runner_os, runner_arch = self.runner_host
        if runner_os != self.os or runner_arch == self.arch:
            return ""
        return platform_table()[self.platform].cross_triple

    @property
    def sysroot_packages(self) -> tuple[str, ...]:
        """The Debian packages of that cross compiler and its sysroot."""
        return platform_table()[self.platform].sysroot_packages if self.cross_triple else ()

    @property
    def code_signed(self) -> bool:
        """Shared macOS packages are signed: they ship dylibs a hardened-runtime app must be able to load."""
        return self.os == "macos" and self.kind == "shared"

    def archive_stem(self, libname: str, version: str) -> str:
        return archive_stem(libname, version, self.platform, self.flavor, self.kind, self.config)


def _variant_tokens(flavor: str, kind: str, config: str) -> list[str]:
    tokens = [] if flavor == "cpu" else [flavor]
    tokens.append(kind)
    if config == "debug":
        tokens.append("debug")
    return tokens


def leg_id(engine: str, platform: str, flavor: str, kind: str, config: str) -> str:
    """`<engine>-<platform>[-<flavor>]-<kind>[-debug]`; the SCons alias and CI job name."""
    return "-".join([engine, platform, *_variant_tokens(flavor, kind, config)])


def archive_stem(libname: str, version: str, platform: str, flavor: str, kind: str, config: str) -> str:
    """Upstream's archive name without extension (docs/upstream.md#archive-names), the one naming function.

    `<libname>-<version>-<OS>[-<arch>][-gpu|-cuda]-<kind>[-debug]`, e.g.
    `onnxruntime-1.26.0-macOS-arm64-gpu-static`, `onnxruntime-1.26.0-iOS-gpu-xcframework`.
    """
    return "-".join([libname, version, platform_label(platform), *_variant_tokens(flavor, kind, config)])
