"""Visual Studio on a Windows host, as vswhere reports it: which instance has the MSVC tools and
Windows SDK a leg needs, the command that adds what it lacks, and the one that enters its
developer environment (what CI's backends.ci.msvc_env step does on a runner).

vswhere (in the Visual Studio Installer's directory since Visual Studio 2017) lists every
instance, Build Tools included, with the packages (workloads and components) it has installed.
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import PureWindowsPath
from typing import Iterable, Mapping, Sequence

from backends.model.platforms import platform_table

VSWHERE_ARGS = ("-all", "-products", "*", "-include", "packages", "-format", "json", "-utf8")
INSTALLER_DIR = r"Microsoft Visual Studio\Installer"
# The MSVC compiler of each target (the project's msvc_arch) is one Visual Studio component
# (engines/platforms.toml, the Windows platforms' msvc tables).
TOOLS_COMPONENTS = {msvc.arch: msvc.tools_component for msvc in platform_table().msvc_targets()}
SDK_COMPONENT = re.compile(r"Microsoft\.VisualStudio\.Component\.Windows1[01]SDK\.\d+")
SDK_RECOMMENDED = "Microsoft.VisualStudio.Component.Windows11SDK.26100"
# A new install: Build Tools' C++ workload, plus CMake and Ninja (its C++ CMake tools).
BUILD_TOOLS_ID = "Microsoft.VisualStudio.2022.BuildTools"
WORKLOAD = "Microsoft.VisualStudio.Workload.VCTools"
CMAKE_COMPONENT = "Microsoft.VisualStudio.Component.VC.CMake.Project"
# The host's arch as VsDevCmd's -host_arch and -arch spell it (the project's arch tokens ->).
MSVC_HOST_ARCH = platform_table().msvc_of_arch("windows")
DEV_CMD_ARCH = {msvc.arch: msvc.dev_cmd_arch for msvc in platform_table().msvc_targets()}


@dataclass(frozen=True)
class Instance:
    path: str  # installationPath
    name: str  # displayName
    version: str  # installationVersion
    packages: frozenset[str]
    complete: bool = True

    def has(self, components: Iterable[str]) -> bool:
        return all(self._has(component) for component in components)

    def _has(self, component: str) -> bool:
        if component == SDK_RECOMMENDED:  # any Windows 10 or 11 SDK will do
            return any(SDK_COMPONENT.fullmatch(package) for package in self.packages)
        return component in self.packages


def version_key(text: str) -> tuple[int, ...]:
    return tuple(int(part) for part in re.findall(r"\d+", text))


def parse_instances(text: str) -> list[Instance]:
    """vswhere's JSON (`-format json -include packages`), newest first; anything else: none."""
    try:
        payload = json.loads(text or "[]")
    except json.JSONDecodeError:
        return []
    instances = [Instance(path=str(item.get("installationPath", "")), name=str(item.get("displayName", "")),
                          version=str(item.get("installationVersion", "")),
                          packages=frozenset(str(p.get("id", "")) for p in item.get("packages", [])
                                             if isinstance(p, dict)),
                          complete=item.get("isComplete", True) is not False)
                 for item in payload if isinstance(item, dict) and item.get("installationPath")]
    return sorted(instances, key=lambda instance: version_key(instance.version), reverse=True)


def components_for(arch: str) -> tuple[str, ...]:
    """What a leg built for `arch` with MSVC needs of an instance."""
    return TOOLS_COMPONENTS[arch], SDK_RECOMMENDED


def find(instances: Sequence[Instance], components: Iterable[str]) -> Instance | None:
    """The newest complete instance that has every component."""
    wanted = tuple(components)
    return next((instance for instance in instances if instance.complete and instance.has(wanted)), None)


def default_vswhere(environ: Mapping[str, str]) -> str:
    root = environ.get("ProgramFiles(x86)", r"C:\Program Files (x86)")
    return str(PureWindowsPath(root, INSTALLER_DIR, "vswhere.exe"))


def install_command(components: Iterable[str]) -> str:
    """Build Tools with the C++ workload, CMake and Ninja, and `components` (winget)."""
    adds = " ".join(f"--add {c}" for c in dict.fromkeys((WORKLOAD, *components, CMAKE_COMPONENT)))
    return f'winget install --id {BUILD_TOOLS_ID} -e --override "--passive --wait {adds}"'


def modify_command(instance: Instance, components: Iterable[str], vswhere: str) -> str:
    """Add the components `instance` lacks, with the installer beside vswhere (PowerShell)."""
    missing = [c for c in components if not instance.has([c])]
    installer = PureWindowsPath(vswhere).parent / "setup.exe"
    adds = " ".join(f"--add {c}" for c in missing)
    return f'& "{installer}" modify --installPath "{instance.path}" {adds} --passive'


def dev_shell_command(instance: Instance, arch: str, host_arch: str) -> str:
    """PowerShell: enter `instance`'s developer environment for target `arch` in this shell."""
    module = PureWindowsPath(instance.path, "Common7", "Tools", "Microsoft.VisualStudio.DevShell.dll")
    arguments = f"-arch={DEV_CMD_ARCH[arch]} -host_arch={DEV_CMD_ARCH.get(host_arch, host_arch)}"
    return (f'Import-Module "{module}"; Enter-VsDevShell -VsInstallPath "{instance.path}" '
            f'-SkipAutomaticLocation -DevCmdArguments "{arguments}"')
