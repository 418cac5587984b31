"""What a leg needs from the machine that builds it (host_checks.py: what a machine lacks).

One answer for three readers: `python -m backends.commands.host_setup` (a person setting up a Mac,
a Windows or a Linux machine, through tools/setup.sh or tools/setup.ps1), the start of a
build (a leg whose toolchain is missing stops before anything is fetched, naming what to
install), and CI, whose per-leg answer (`backends.model.runner_needs.leg_setup`) this one starts from. What
a leg runs comes from its plan; which package brings which program is data
(host_packages.txt, which tools/setup.sh reads too).
"""
from __future__ import annotations

import functools
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Iterable, Sequence

from backends.model.matrix import Matrix
from backends.model.plan import Command, Plan
from backends.model.runner_needs import NDK_VERSION, Setup, leg_setup
from backends.probes import visual_studio
from backends.probes.host import Host
from backends.util.errors import BackendsError

PACKAGES_FILE = Path(__file__).with_name("host_packages.txt")
MANAGERS = ("apt", "brew", "winget", "npm", "pip")
SETS = ("main", "dev", "leg", "build")
# The LLVM tools verify reads a package's binaries with (binfmt/inspect.py), per binary format;
# and the librarian the bundle step merges static libraries with (steps/bundle.py; ELF archives
# are merged by the GNU ar that comes with the compiler).
FORMAT_OF_OS = {"linux": "elf", "android": "elf", "macos": "macho", "ios": "macho", "windows": "coff",
                "wasm": "wasm"}
INSPECT_TOOLS = {"elf": ("llvm-nm", "llvm-readobj"), "macho": ("llvm-nm", "llvm-otool", "llvm-objdump"),
                 "coff": ("llvm-nm", "llvm-readobj", "llvm-objdump"), "wasm": ("llvm-nm",)}
BUNDLE_TOOLS = {"macho": "llvm-libtool-darwin", "coff": "llvm-lib"}
# Programs Xcode's command-line tools bring on a Mac: a plan that runs one needs them there.
XCODE_TOOLS_PROGRAMS = ("install_name_tool", "codesign", "lipo", "libtool", "xcrun", "clang", "clang++", "git")
# Windows SDK import libraries an accelerator's smoke links (smoke/onnxruntime/CMakeLists.txt:
# the DirectML WARP fallback links d3d12 and dxgi); every leg's programs link kernel32.
SDK_LIBRARIES = ("kernel32.lib",)
ACCELERATOR_SDK_LIBRARIES = {"dml": ("d3d12.lib", "dxgi.lib")}
PROGRAM_WORDS = {"c++": "a C++ compiler (c++)"}


class PackagesError(BackendsError, ValueError):
    """host_packages.txt holds a row that is not `manager sets package programs`."""


@dataclass(frozen=True)
class Package:
    manager: str
    sets: frozenset[str]
    name: str
    programs: tuple[str, ...]


@functools.lru_cache(maxsize=None)
def load_packages(path: Path = PACKAGES_FILE) -> tuple[Package, ...]:
    rows = []
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        fields = line.split()
        if not fields or fields[0].startswith("#"):
            continue
        where = f"{path.name}:{number}"
        if len(fields) != 4:
            raise PackagesError(f"{where}: {len(fields)} columns; a row is: manager sets package programs")
        manager, sets, name, programs = fields
        unknown = sorted({manager} - set(MANAGERS)) + sorted(set(sets.split(",")) - set(SETS))
        if unknown:
            raise PackagesError(f"{where}: unknown {', '.join(unknown)}; managers: {', '.join(MANAGERS)}; "
                                f"sets: {', '.join(SETS)}")
        rows.append(Package(manager, frozenset(sets.split(",")), name,
                            () if programs == "-" else tuple(programs.split(","))))
    return tuple(rows)


def packages_in(manager: str, wanted: str, packages: Sequence[Package]) -> tuple[str, ...]:
    """The names of one manager's packages in one set, in the file's order."""
    return tuple(p.name for p in packages if p.manager == manager and wanted in p.sets)


# -- what a leg needs --------------------------------------------------------------------

@dataclass(frozen=True)
class Need:
    """One thing a leg needs from the host. `kind` says how it is checked and installed:

    program       `subject` on PATH (LLVM tools also under Debian's versioned and Xcode's names)
    xcode-tools   Xcode's command-line tools (`xcode-select -p`)
    xcode         Xcode itself, selected (xcodebuild, the iOS simulator)
    msvc          the MSVC developer environment for target `subject` (x64, arm64)
    windows-sdk   the Windows SDK's import libraries `files` for target `subject`
    ndk           the Android NDK in $ANDROID_NDK_HOME
    emsdk         the Emscripten SDK `subject` ($EMSDK, or emcc on PATH)
    apt           the Debian package `subject` (no program tells it is there)
    probe         what `python -m backends.probes.<subject>` checks (a new enough glslc)
    python        the module `subject` in the Python that runs scons
    """

    kind: str
    subject: str
    why: str
    files: tuple[str, ...] = ()

    @property
    def key(self) -> tuple[str, str]:
        return self.kind, self.subject


def _merged(needs: Iterable[Need]) -> list[Need]:
    """One need per (kind, subject), in first-seen order: their reasons and files joined."""
    merged: dict[tuple[str, str], Need] = {}
    for need in needs:
        seen = merged.get(need.key)
        if seen is None:
            merged[need.key] = need
        else:
            why = seen.why if need.why in seen.why.split("; ") else f"{seen.why}; {need.why}"
            merged[need.key] = replace(seen, why=why, files=tuple(dict.fromkeys((*seen.files, *need.files))))
    return list(merged.values())


def _pip_installed(commands: Sequence[Command]) -> set[str]:
    """Programs a command installs into the leg's venv (`{venv_python} -m pip install scons`)."""
    installed: set[str] = set()
    for command in commands:
        argv = list(command.argv)
        if argv[:4] == ["{venv_python}", "-m", "pip", "install"]:
            installed.update(arg for arg in argv[4:] if not arg.startswith("-"))
    return installed


def _uses_ninja(command: Command) -> bool:
    argv = list(command.argv)
    pairs = zip(argv, argv[1:])
    return command.env.get("CMAKE_GENERATOR") == "Ninja" or any(
        flag in ("-G", "--cmake_generator") and value == "Ninja" for flag, value in pairs)


def _program_needs(plan: Plan, host_os: str) -> list[Need]:
    """The programs the plan's build and fixup commands start (symbols such as {python} are
    the project's own; programs an earlier command pip-installs into the leg's venv too)."""
    commands = (*plan.build, *plan.fixups)
    brought = _pip_installed(commands)
    needs = []
    for command in commands:
        program = command.argv[0] if command.argv else ""
        if _uses_ninja(command):
            needs.append(Need("program", "ninja", "the build's CMake generator"))
        if not program or program.startswith("{") or program in brought:
            continue
        needs.append(_program_need(program, host_os, "the build runs it"))
    return needs


def _program_need(program: str, host_os: str, why: str) -> Need:
    """A program, or on a Mac what brings it there (Xcode, its command-line tools)."""
    if program == "xcodebuild":
        return Need("xcode", "", why)
    if host_os == "macos" and program in XCODE_TOOLS_PROGRAMS:
        return Need("xcode-tools", "", why)
    return Need("program", program, why)


def _compiler_needs(host_os: str, msvc_arch: str, why: str) -> list[Need]:
    if host_os == "macos":
        return [Need("xcode-tools", "", why)]
    if host_os == "windows":
        return [Need("msvc", msvc_arch, why), Need("windows-sdk", msvc_arch, why, SDK_LIBRARIES)]
    return [Need("program", "c++", why)]


def _smoke_needs(plan: Plan, host_os: str, host_msvc_arch: str, run_mode: str) -> list[Need]:
    """The smoke compiles its consumer with CMake and Ninja where the host runs the leg; an
    emulated run (qemu, wine) uses the cross compiler its mode was chosen for."""
    if plan.smoke is None or not run_mode:
        return []
    why = "the smoke builds its consumer"
    needs = [Need("program", "cmake", why), Need("program", "ninja", why)]
    if run_mode in ("native", "rosetta", "simulator"):
        arch = plan.leg.msvc_arch or host_msvc_arch
        needs += _compiler_needs(host_os, arch, why)
        libraries = tuple(lib for acc in plan.leg.accelerator for lib in ACCELERATOR_SDK_LIBRARIES.get(acc, ()))
        if host_os == "windows" and libraries:
            needs.append(Need("windows-sdk", arch, f"the smoke links {', '.join(libraries)}", libraries))
    if run_mode == "simulator":
        needs.append(Need("xcode", "", "the smoke runs in the iOS simulator"))
    return needs


def _check_needs(plan: Plan) -> list[Need]:
    """What verify reads the package's binaries with; what bundle and merge write them with."""
    fmt = FORMAT_OF_OS[plan.leg.os]
    needs = [Need("program", tool, f"verify reads {fmt} binaries with it") for tool in INSPECT_TOOLS[fmt]]
    if plan.bundle is not None and fmt in BUNDLE_TOOLS and not plan.bundle.tool:
        needs.append(Need("program", BUNDLE_TOOLS[fmt], "the bundle step merges static libraries with it"))
    if plan.leg.aggregate == "universal":
        needs.append(Need("program", "llvm-lipo", "the universal merge runs it"))
    return needs


def _setup_needs(setup: Setup, host_os: str, packages: Sequence[Package]) -> list[Need]:
    """What CI's setup step installs for the leg (backends.model.runner_needs.leg_setup), as host needs."""
    needs = []
    if setup.ndk:
        needs.append(Need("ndk", "", f"toolchain android (NDK {NDK_VERSION})"))
    if setup.emsdk:
        needs.append(Need("emsdk", setup.emsdk, "toolchain emscripten"))
    for package in setup.apt if host_os == "linux" else ():
        programs = next((p.programs for p in packages if p.manager == "apt" and p.name == package), ())
        needs.append(Need("program", programs[0], "a fixup runs it") if programs else
                     Need("apt", package, "a fixup copies its libraries"))
    needs += [Need("probe", probe, "the build runs this probe first") for probe in setup.probes]
    if setup.python_build_deps:
        needs += [Need("python", name, "the upstream build imports it")
                  for name in packages_in("pip", "build", packages)]
    return needs


def leg_needs(plan: Plan, setup: Setup, host_os: str, host_msvc_arch: str, run_mode: str,
              packages: Sequence[Package] | None = None) -> list[Need]:
    """Everything `plan`'s leg needs from a host of `host_os` that runs its smoke in
    `run_mode` ("" when it cannot run it); `setup` is CI's answer for the leg."""
    packages = load_packages() if packages is None else packages
    leg = plan.leg
    needs: list[Need] = []
    if leg.source == "build":
        needs += _compiler_needs(host_os, leg.msvc_arch or host_msvc_arch, "the build compiles")
    needs += _program_needs(plan, host_os)
    if any(download.kind == "git" for download in plan.downloads):
        needs.append(_program_need("git", host_os, "its sources are git repositories"))
    needs += _setup_needs(setup, host_os, packages)
    needs += _check_needs(plan)
    needs += _smoke_needs(plan, host_os, host_msvc_arch, run_mode)
    return _merged(needs)


def describe(need: Need) -> str:
    """The need in words, for reports and errors."""
    if need.kind == "program":
        return PROGRAM_WORDS.get(need.subject, need.subject)
    return {"xcode-tools": "Xcode's command-line tools", "xcode": "Xcode", "ndk": "the Android NDK",
            "emsdk": f"the Emscripten SDK {need.subject}", "msvc": f"MSVC for {need.subject}",
            "windows-sdk": f"the Windows SDK for {need.subject} ({', '.join(need.files)})",
            "apt": f"the Debian package {need.subject}", "probe": f"a {need.subject} that passes its probe",
            "python": f"the Python package {need.subject}"}[need.kind]


def needs_here(plan: Plan, matrix: Matrix, host: Host) -> list[Need]:
    """`leg_needs` of the plan's leg on `host`, from CI's setup for it."""
    setup = leg_setup(plan, matrix.engines[plan.leg.engine].pins)
    return leg_needs(plan, setup, host.os, visual_studio.MSVC_HOST_ARCH.get(host.arch, ""),
                     host.run_mode(plan.leg, plan.smoke))
