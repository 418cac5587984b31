"""What of a leg's needs (host_needs.py) a machine has: where each is found, or exactly what
to install; and the one line a build stops with, before fetching, when its host lacks some.

A machine is its `Facts`: OS and arch, environment (PATH included), and how to run a program
and find a module, so a test can make one (a fake xcode-select, brew or vswhere on PATH).
"""
from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Callable, Mapping, Sequence

from backends.model.matrix import Matrix
from backends.model.plan import Plan
from backends.model.recipes import plan_all
from backends.probes import visual_studio
from backends.probes.host import Host
from backends.model.runner_needs import NDK_VERSION
from backends.probes.host_needs import Need, Package, describe, load_packages, needs_here
from backends.util import toolchain

# The package manager whose rows name what to install on each host OS.
MANAGER_OF_OS = {"linux": "apt", "macos": "brew", "windows": "winget"}
# What the set-up scripts install themselves: system packages where that is the host's way
# (tools/setup.sh: apt through sudo, Homebrew as the user) and Python packages into the
# project's environment. Everything else (winget, npm -g, Xcode, Visual Studio) a person does.
INSTALLABLE = {"linux": ("apt", "pip"), "macos": ("brew", "pip"), "windows": ("pip",)}
INSTALL_COMMANDS = {"apt": "sudo apt-get install {}", "brew": "brew install {}", "winget": "winget install --id {} -e",
                    "npm": "npm install -g {}", "pip": "{python} -m pip install {}"}
SETUP_COMMANDS = {"windows": r"powershell -ExecutionPolicy Bypass -File tools\setup.ps1 -Leg {}",
                  "default": "bash tools/setup.sh --leg {}"}

XCODE_TOOLS_DIR = "CommandLineTools"
RUN_TIMEOUT_S = 30

# Where `backends` is, for the probes a check starts as `python -m backends.probes.<name>`.
PACKAGE_ROOT = str(Path(__file__).resolve().parents[2])


def _run(argv: Sequence[str]) -> tuple[int, str]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, (PACKAGE_ROOT, os.environ.get("PYTHONPATH"))))}
    try:
        done = subprocess.run(list(argv), capture_output=True, text=True, timeout=RUN_TIMEOUT_S, check=False, env=env)
    except (OSError, subprocess.SubprocessError) as error:
        return 127, str(error)
    return done.returncode, done.stdout + done.stderr


def _module_found(name: str) -> bool:
    return importlib.util.find_spec(name) is not None


@dataclass
class Facts:
    """What the checks ask of a host: its OS and arch, its environment (PATH included), and
    how to run a program and find a module. Tests pass a host of their own making."""

    os: str
    arch: str
    environ: Mapping[str, str]
    run: Callable[[Sequence[str]], tuple[int, str]] = _run
    module_found: Callable[[str], bool] = _module_found
    vswhere: str = ""  # vswhere.exe; empty: on PATH, else where the Visual Studio Installer puts it

    def which(self, program: str) -> str | None:
        path = self.environ.get("PATH", "")
        if program.startswith("llvm-"):
            return toolchain.find_tool(program, system=toolchain.PLATFORM_OF_OS.get(self.os), path=path)
        return shutil.which(program, path=path)

    @property
    def msvc_arch(self) -> str:
        return visual_studio.MSVC_HOST_ARCH.get(self.arch, "")

    @cached_property
    def vs_instances(self) -> list[visual_studio.Instance]:
        """The Visual Studio instances vswhere lists (none when it is missing or fails)."""
        program = self.vswhere or self.which("vswhere") or visual_studio.default_vswhere(self.environ)
        code, output = self.run([program, *visual_studio.VSWHERE_ARGS])
        return visual_studio.parse_instances(output) if code == 0 else []


@dataclass(frozen=True)
class Finding:
    """A need on this host: `found` says where (None: missing); `remedy` what to do. When a
    package brings it, `manager` and `package` name it, and `installable` says whether the
    set-up scripts install it themselves. `next` is a step left although it is installed
    (entering the MSVC environment)."""

    need: Need
    found: str | None
    remedy: str = ""
    manager: str = ""
    package: str = ""
    installable: bool = False
    next: str = ""

    @property
    def missing(self) -> bool:
        return self.found is None


def _provider(program: str, packages: Sequence[Package], managers: Sequence[str]) -> Package | None:
    """The first package of `managers` (in their order) that brings `program`."""
    for manager in managers:
        for package in packages:
            if package.manager == manager and program in package.programs and "build" not in package.sets:
                return package
    return None


def install_command(manager: str, names: Sequence[str], python: str = "python") -> str:
    """The command that installs `names` with `manager` (winget takes one id per command)."""
    if manager == "winget":
        return "; ".join(INSTALL_COMMANDS[manager].format(name) for name in names)
    return INSTALL_COMMANDS[manager].format(" ".join(names), python=python)


def _unlinked(program: str, package: Package, facts: Facts) -> str:
    """Where Homebrew installed a formula it does not link into PATH (a keg-only one such as
    llvm), when `program` is there: "" otherwise."""
    code, prefix = facts.run(["brew", "--prefix", package.name])
    candidate = Path(prefix.strip()) / "bin" / program
    return str(candidate.parent) if code == 0 and prefix.strip() and candidate.is_file() else ""


def _program(need: Need, facts: Facts, packages: Sequence[Package]) -> Finding:
    found = facts.which(need.subject)
    package = _provider(need.subject, packages, (MANAGER_OF_OS.get(facts.os, "apt"), "npm"))
    if package is None:
        return Finding(need, found, f"install {need.subject} and put it on PATH")
    unlinked = _unlinked(need.subject, package, facts) if found is None and package.manager == "brew" else ""
    if unlinked:
        return Finding(need, found, f"put {unlinked} on PATH (Homebrew installed {package.name} there without "
                                    "linking it)")
    return Finding(need, found, install_command(package.manager, [package.name]), package.manager, package.name,
                   installable=package.manager in INSTALLABLE.get(facts.os, ()))


def _xcode_tools(need: Need, facts: Facts) -> Finding:
    code, output = facts.run(["xcode-select", "-p"])
    found = output.strip() if code == 0 and output.strip() else None
    return Finding(need, found, "xcode-select --install (a dialog installs Xcode's command-line tools), then run "
                                "this again")


def _xcode(need: Need, facts: Facts) -> Finding:
    remedy = ("install Xcode (the App Store, or developer.apple.com/xcode), then sudo xcode-select -s "
              "/Applications/Xcode.app/Contents/Developer and sudo xcodebuild -license accept")
    code, selected = facts.run(["xcode-select", "-p"])
    if code != 0 or XCODE_TOOLS_DIR in selected:
        return Finding(need, None, remedy + (" (the command-line tools are selected; xcodebuild needs Xcode)"
                                             if code == 0 else ""))
    code, version = facts.run(["xcodebuild", "-version"])
    lines = version.strip().splitlines()
    return Finding(need, f"{lines[0]} ({selected.strip()})" if code == 0 and lines else None, remedy)


def _directory(need: Need, facts: Facts, variable: str, remedy: str) -> Finding:
    value = facts.environ.get(variable, "")
    return Finding(need, f"${variable}={value}" if value and os.path.isdir(value) else None, remedy)


def _emsdk(need: Need, facts: Facts) -> Finding:
    remedy = (f"git clone https://github.com/emscripten-core/emsdk, then in it ./emsdk install {need.subject}, "
              f"./emsdk activate {need.subject} and source ./emsdk_env.sh")
    found = _directory(need, facts, "EMSDK", remedy)
    return found if found.found else Finding(need, facts.which("emcc"), remedy)


def _apt(need: Need, facts: Facts) -> Finding:
    code, status = facts.run(["dpkg-query", "-W", "-f=${Status}", need.subject])
    found = f"{need.subject} (dpkg)" if code == 0 and status.strip().endswith(" installed") else None
    return Finding(need, found, install_command("apt", [need.subject]), "apt", need.subject, installable=True)


def _probe(need: Need, facts: Facts, python: str) -> Finding:
    """The probe's own verdict (it names the remedy); it changes nothing without --install."""
    module = f"backends.probes.{need.subject}"
    code, output = facts.run([python, "-m", module])
    said = [line.strip() for line in output.splitlines() if line.strip()] or [f"{module} exited {code}"]
    if code == 0:
        return Finding(need, said[-1])
    return Finding(need, None, f"{said[0]}; `PYTHONPATH=site_scons {python} -m {module} --install` installs what it "
                               "needs, as root or through sudo")


def _python(need: Need, facts: Facts, python: str) -> Finding:
    return Finding(need, need.subject if facts.module_found(need.subject) else None,
                   install_command("pip", [need.subject], python), "pip", need.subject, installable=True)


def _visual_studio_remedy(facts: Facts, components: Sequence[str]) -> str:
    """Add `components` to the newest instance there is, or install Build Tools with them."""
    instances = [instance for instance in facts.vs_instances if instance.complete]
    if not instances:
        return visual_studio.install_command(components)
    vswhere = facts.vswhere or facts.which("vswhere") or visual_studio.default_vswhere(facts.environ)
    return visual_studio.modify_command(instances[0], components, vswhere)


def _msvc(need: Need, facts: Facts, setting_up: bool) -> Finding:
    """Entered for its target: `cl` on PATH from the MSVC bin directory of that target
    (...\\bin\\Host<host>\\<target>\\cl.exe). Setting up, an instance that has the target's
    compiler also counts, with the command that enters its environment still to run."""
    cl = facts.which("cl")
    target = Path(cl).parent.name.lower() if cl else ""
    if target == need.subject:
        return Finding(need, str(cl))
    components = visual_studio.components_for(need.subject)
    instance = visual_studio.find(facts.vs_instances, components)
    if instance is None:
        return Finding(need, None, _visual_studio_remedy(facts, components))
    enter = visual_studio.dev_shell_command(instance, need.subject, facts.msvc_arch)
    if setting_up:
        return Finding(need, f"{instance.name} {instance.version} ({instance.path})", next=enter)
    entered = f"the MSVC environment entered is for {target}; " if target else ""
    return Finding(need, None, f"{entered}enter the {need.subject} one in this shell first: {enter}")


def _sdk_versions(facts: Facts) -> list[Path]:
    """The Windows SDK's Lib/<version> directories, newest first: the one the MSVC
    environment names ($WindowsSdkDir, $WindowsSDKVersion), else every one installed."""
    root, version = facts.environ.get("WindowsSdkDir", ""), facts.environ.get("WindowsSDKVersion", "")
    if root and version:
        return [Path(root.rstrip("\\/")) / "Lib" / version.strip("\\/")]
    kits = Path(facts.environ.get("ProgramFiles(x86)", r"C:\Program Files (x86)")) / "Windows Kits" / "10" / "Lib"
    found = [entry for entry in kits.iterdir() if entry.is_dir()] if kits.is_dir() else []
    return sorted(found, key=lambda entry: visual_studio.version_key(entry.name), reverse=True)


def _windows_sdk(need: Need, facts: Facts) -> Finding:
    """The import libraries `need.files` for the target in one Windows SDK version."""
    for version in _sdk_versions(facts):
        libraries = version / "um" / need.subject
        if all((libraries / name).is_file() for name in need.files):
            return Finding(need, str(libraries))
    return Finding(need, None, _visual_studio_remedy(facts, visual_studio.components_for(need.subject)))


def check(need: Need, facts: Facts, *, setting_up: bool = False, python: str = sys.executable,
          packages: Sequence[Package] | None = None) -> Finding:
    """Whether this host has `need`. A build asks for what its commands will find (the MSVC
    environment entered); `setting_up` also counts what is installed but not yet entered."""
    packages = load_packages() if packages is None else packages
    ndk = (f"install the Android NDK {NDK_VERSION} (Android Studio's SDK manager, or "
           "developer.android.com/ndk/downloads) and set ANDROID_NDK_HOME to its directory")
    checks: dict[str, Callable[[], Finding]] = {
        "program": lambda: _program(need, facts, packages),
        "xcode-tools": lambda: _xcode_tools(need, facts),
        "xcode": lambda: _xcode(need, facts),
        "msvc": lambda: _msvc(need, facts, setting_up),
        "windows-sdk": lambda: _windows_sdk(need, facts),
        "ndk": lambda: _directory(need, facts, "ANDROID_NDK_HOME", ndk),
        "emsdk": lambda: _emsdk(need, facts),
        "apt": lambda: _apt(need, facts),
        "probe": lambda: _probe(need, facts, python),
        "python": lambda: _python(need, facts, python),
    }
    if need.kind not in checks:
        raise ValueError(f"no check for needs of kind {need.kind!r}")
    return checks[need.kind]()


# -- the build's check -------------------------------------------------------------------

@dataclass(frozen=True)
class Shortfall:
    """Legs this host could build but for what it lacks."""

    legs: tuple[str, ...]
    findings: tuple[Finding, ...] = field(default=())

    def message(self, host_os: str) -> str:
        """One line: the legs, what is missing, one install command per package manager (the
        rest each with its own remedy), and the set-up command that installs what it can."""
        remedies: dict[str, list[Finding]] = {}  # one command per package manager, else per remedy
        for finding in self.findings:
            remedies.setdefault(f"manager:{finding.manager}" if finding.package else finding.remedy, []).append(finding)
        parts = []
        for remedy, found in remedies.items():
            if remedy.startswith("manager:"):
                packages = list(dict.fromkeys(f.package for f in found))
                remedy = f"`{install_command(found[0].manager, packages)}`"
            parts.append(f"{', '.join(describe(f.need) for f in found)} ({remedy})")
        setup = SETUP_COMMANDS.get(host_os, SETUP_COMMANDS["default"]).format(self.legs[0])
        return (f"{', '.join(self.legs)} cannot be built on this host, which lacks {'; '.join(parts)}; `{setup}` "
                "installs what it can and names the rest")


def shortfall(needs_by_leg: Mapping[str, Sequence[Need]], facts: Facts,
              packages: Sequence[Package] | None = None) -> Shortfall | None:
    """What the legs lack here, each missing need once; None when nothing is missing."""
    packages = load_packages() if packages is None else packages
    legs: list[str] = []
    findings: dict[tuple[str, str], Finding] = {}
    for leg_id, needs in needs_by_leg.items():
        for need in needs:
            if need.key not in findings:
                findings[need.key] = check(need, facts, packages=packages)
            if findings[need.key].missing:
                legs.append(leg_id)
    missing = tuple(finding for finding in findings.values() if finding.missing)
    return Shortfall(tuple(dict.fromkeys(legs)), missing) if missing else None


# Installing these is set-up's business, not a reason to refuse a build: CI's set-up installs
# the upstream builds' Python packages for every from-source leg, whether its build imports
# them or not, so a build that lacks one fails in its own step, naming the module.
SETUP_ONLY_KINDS = ("python",)


def host_facts(host: Host, environ: Mapping[str, str] | None = None) -> Facts:
    return Facts(host.os, host.arch, os.environ if environ is None else environ)


def build_shortfall(plans: Sequence[Plan], matrix: Matrix, host: Host, facts: Facts,
                    with_inputs: bool = False) -> Shortfall | None:
    """What this host lacks to build the planned legs (and, `with_inputs`, the input legs of
    their aggregates it builds too), checked before anything is fetched."""
    if with_inputs:
        inputs = [matrix.leg(i) for plan in plans for i in plan.leg.inputs]
        plans = [*plans, *plan_all(matrix, [leg for leg in inputs if host.can_build(leg)])]
    needs = {plan.leg.id: [need for need in needs_here(plan, matrix, host) if need.kind not in SETUP_ONLY_KINDS]
             for plan in plans}
    return shortfall(needs, facts)
