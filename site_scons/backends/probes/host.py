"""What this machine is, and which legs it can build or run."""
from __future__ import annotations

import os
import platform as _platform
import shutil
import subprocess
from dataclasses import dataclass

from backends.model.leg import Leg
from backends.model.plan import Smoke
from backends.model.platforms import platform_table


@dataclass(frozen=True)
class Host:
    os: str
    arch: str  # the arch of its platform's token in engines/platforms.toml

    @property
    def platform(self) -> str:
        return f"{self.os}-{self.arch}"

    def can_build(self, leg: Leg) -> bool:
        """The leg's runner OS, and its runner arch or (native or cross) target arch. A
        repackaging leg compiles nothing and an aggregate only merges archives (with
        LLVM's lipo off macOS), so any host builds those."""
        if leg.source in ("prebuilt", "aggregate"):
            return True
        runner_os, runner_arch = leg.runner_host
        return self.os == runner_os and self.arch in {runner_arch, leg.arch}

    def run_mode(self, leg: Leg, smoke: Smoke | None = None) -> str:
        """How this host runs the leg's smoke: native, emulated (name), or '' if it cannot.
        `smoke` is the leg's consumer program; wine needs one that MinGW can build. A -cuda
        smoke needs no GPU: its CPU pass and provider list run anywhere, and it appends the
        CUDA provider only where a GPU is present."""
        if not leg.can_run:
            return ""
        platform = platform_table().platforms.get(leg.platform)
        if self.platform in (platform.native_hosts if platform else (leg.platform,)):
            return "native"
        emulated = platform.emulated if platform else None
        if (emulated is None or self.platform not in emulated.hosts
                or not all(shutil.which(tool) for tool in emulated.needs)):
            return ""
        if emulated.c_abi_only and not self._c_abi_consumer(leg, smoke):
            return ""
        return emulated.mode

    @staticmethod
    def _c_abi_consumer(leg: Leg, smoke: Smoke | None) -> bool:
        """A consumer built by another compiler (MinGW for an MSVC-built DLL) links through the
        C ABI only: CPU shared packages (static MSVC libraries do not link with MinGW, and wine
        has no GPU stack)."""
        return leg.kind == "shared" and leg.flavor == "cpu" and smoke is not None and smoke.c_abi

    def why_not_run(self, leg: Leg) -> str:
        if not leg.can_run:
            return "the leg cannot run on any CI host (can_run=0)"
        emulated = platform_table().emulation(leg.platform)
        hint = f" ({emulated.hint})" if emulated and emulated.hint else ""
        return f"{leg.platform} binaries need a {leg.runner} host{hint}; this is {self.platform}"


def detect_host() -> Host:
    table = platform_table()
    system = table.os_of_system(_platform.system())
    return Host(os=system, arch=table.of_host(system, _platform.machine().lower()).partition("-")[2])


# MPS needs macOS 12.3; Metal is on every Mac this project's packages support.
MPS_MIN_MACOS = (12, 3)


def _version(text: str) -> tuple[int, ...]:
    parts = []
    for part in text.split("."):
        if not part.isdigit():
            break
        parts.append(int(part))
    return tuple(parts)


def known_accelerators(system: str, *, virtual_machine: str | None = None, macos_version: str = "",
                       nvidia_device: bool = False) -> dict[str, str]:
    """The accelerators this machine is known to have, each with how that is known. A smoke
    that reports one of them absent fails: there the probe is wrong, not the runner.

    `virtual_machine` is macOS's `kern.hv_vmm_present` ("1" in a VM, such as GitHub's
    hosted Macs, where Apple's Virtualization framework offers no MPS; None: unknown), and
    nothing is known of a Mac that may be one."""
    known: dict[str, str] = {}
    if system == "macos" and virtual_machine == "0":
        why = "this Mac is not a virtual machine (kern.hv_vmm_present=0)"
        known["metal"] = why
        if _version(macos_version) >= MPS_MIN_MACOS:
            known["mps"] = f"{why} and runs macOS {macos_version}"
    if system == "linux" and nvidia_device:
        known["cuda"] = "an NVIDIA device is present (/dev/nvidia0)"
    return known


def _sysctl(name: str) -> str | None:
    try:
        result = subprocess.run(["sysctl", "-n", name], capture_output=True, text=True, timeout=30, check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    return result.stdout.strip() if result.returncode == 0 else None


def detect_accelerators() -> dict[str, str]:
    """`known_accelerators` of this machine."""
    system = detect_host().os
    return known_accelerators(system, virtual_machine=_sysctl("kern.hv_vmm_present") if system == "macos" else None,
                              macos_version=_platform.mac_ver()[0], nvidia_device=os.path.exists("/dev/nvidia0"))
