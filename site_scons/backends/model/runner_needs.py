"""What a CI runner needs before it builds a leg (the leg job's setup step), derived from the
leg's plan: the Android NDK, MSVC, emsdk, bazelisk, apt packages its fixups use, a compiler
cache and its size, the probes its build runs, and the job's time limits. `python -m
backends.ci setup --leg <id>` prints it for a workflow; host set-up (probes.host_needs) starts
from it for a person's machine.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Mapping

from backends.model.plan import Command, Plan


def _flag(value: bool) -> str:
    return "true" if value else "false"


# The leg job's time limits (_legs.yml): GitHub stops a job at 360 minutes. The scons step
# stops first, so the compiler cache is still saved (`if: always()`) when it fails or runs
# out of time, and a re-run continues from it; a leg whose cold build (`cold_hours`) needs
# longer says so in `scons list`.
NDK_VERSION = "r27b"  # the Android NDK CI installs for `toolchain = "android"` legs (_legs.yml)

BUILD_STEP_MINUTES = 300
JOB_MINUTES = 345

@dataclass(frozen=True)
class Setup:
    """What a leg's runner needs before `scons <leg>`; every field is a job-output string."""

    ndk: bool
    msvc_arch: str
    emsdk: str  # the emsdk version to install, "" when none (or the recipe brings its own)
    bazelisk: bool
    apt: tuple[str, ...]
    launcher: str  # ccache | sccache | "" (none)
    python_build_deps: bool
    sign: bool
    probes: tuple[str, ...] = ()  # backends.probes modules the build runs; CI runs each with --install first
    free_disk: bool = False  # remove the Linux runner's preinstalled SDKs first (the leg's `free_disk`)
    download_cache: bool = True  # keep .cache/downloads in the Actions cache (not for multi-GB origins)
    compiler_cache_max: str = ""  # the compiler cache's size cap (ccache/sccache max-size), with a launcher

    def outputs(self) -> dict[str, str]:
        return {
            "ndk": _flag(self.ndk),
            "msvc_arch": self.msvc_arch,
            "emsdk": self.emsdk,
            "bazelisk": _flag(self.bazelisk),
            "apt": " ".join(self.apt),
            "launcher": self.launcher,
            "python_build_deps": _flag(self.python_build_deps),
            "sign": _flag(self.sign),
            "probes": " ".join(self.probes),
            "free_disk": _flag(self.free_disk),
            "download_cache": _flag(self.download_cache),
            "compiler_cache_max": self.compiler_cache_max,
        }


def _commands(plan: Plan) -> tuple[Command, ...]:
    return (*plan.build, *plan.fixups)


def _uses_program(commands: Iterable[Command], *names: str) -> bool:
    return any(command.argv and Path(command.argv[0]).name in names for command in commands)


def _apt_packages(plan: Plan) -> tuple[str, ...]:
    """Debian packages the leg's cross compiler and fixups need: a cross-built leg's sysroot
    packages (engines/platforms.toml), `copy-system-libs --ldconfig <lib>` copies the system's
    <lib> (package <lib>-dev), `set-rpath` runs patchelf."""
    packages: list[str] = list(plan.leg.sysroot_packages)
    for command in plan.fixups:
        argv = list(command.argv)
        if "copy-system-libs" in argv and "--ldconfig" in argv:
            packages.append(argv[argv.index("--ldconfig") + 1] + "-dev")
        if "set-rpath" in argv:
            packages.append("patchelf")
    return tuple(dict.fromkeys(packages))


# What the build job exports from `launcher` (GITHUB_ENV); the runner passes both to the build.
LAUNCHER_VARIABLES = ("CMAKE_C_COMPILER_LAUNCHER", "CMAKE_CXX_COMPILER_LAUNCHER")
PROBES_PACKAGE = "backends.probes."


def probes(plan: Plan) -> tuple[str, ...]:
    """The probes a leg's build runs (`python -m backends.probes.<name>`). A build never
    changes the system; CI runs each probe with `--install` before it, the one place where a
    leg's system packages (e.g. a new enough glslc) are installed."""
    return tuple(dict.fromkeys(arg.removeprefix(PROBES_PACKAGE) for command in plan.build
                               for arg in command.argv if arg.startswith(PROBES_PACKAGE)))


def compiler_launcher(plan: Plan) -> str:
    """A compiler cache for CMake-driven builds: ccache, or sccache on Windows; none for
    MSVC Debug (its /Zi PDBs defeat sccache), emcc, Bazel, or legs that compile nothing."""
    leg = plan.leg
    if (not plan.build or not plan.compiler_cache or leg.toolchain == "emscripten"
            or _uses_program(plan.build, "bazel", "bazelisk")):
        return ""
    if leg.os == "windows":
        return "" if leg.config == "debug" else "sccache"
    return "ccache"


# The repository's Actions cache holds 10 GB, and GitHub evicts the least recently used entries
# beyond that, so caches that outgrow it mostly miss. The compiler caches get 6 GB of it,
# shared by the legs one engine has (a change to an engine rebuilds its legs at once; hits
# get no job and write nothing): each is capped at that share over the most compiling legs
# an engine has. The rest is left to the download caches, which CUDA legs do not use: their
# origins are multi-GB upstream zips that would evict everything else for one leg.
COMPILER_CACHE_SHARE_MB = 6000
NO_DOWNLOAD_CACHE_FLAVORS = ("cuda",)


def compiler_cache_max(plans: Iterable[Plan]) -> str:
    """ccache/sccache `max-size` for every compiling leg, e.g. "272M" (see above)."""
    per_engine: dict[str, int] = {}
    for plan in plans:
        if compiler_launcher(plan):
            per_engine[plan.leg.engine] = per_engine.get(plan.leg.engine, 0) + 1
    return f"{COMPILER_CACHE_SHARE_MB // max(per_engine.values(), default=1)}M"


def _emsdk(plan: Plan, pins: Mapping[str, str]) -> str:
    """The emsdk to install for an emscripten leg, unless its build fetches its own or its
    source is checked out with one (ORT's build.py activates the emsdk submodule it pins)."""
    if plan.leg.toolchain != "emscripten":
        return ""
    brought = [*(arg for command in plan.build for arg in command.argv),
               *(path for download in plan.downloads for path in download.submodule_paths)]
    if any("emsdk" in item for item in brought):
        return ""
    return pins.get("emsdk", "latest")


def leg_setup(plan: Plan, pins: Mapping[str, str], cache_max: str = "") -> Setup:
    """What `plan`'s runner needs; `cache_max` is compiler_cache_max over the matrix."""
    leg = plan.leg
    launcher = compiler_launcher(plan)
    return Setup(
        ndk=leg.toolchain == "android",
        msvc_arch=leg.msvc_arch,
        emsdk=_emsdk(plan, pins),
        bazelisk=_uses_program(_commands(plan), "bazel", "bazelisk"),
        apt=_apt_packages(plan) if leg.os in ("linux", "android") else (),
        launcher=launcher,
        python_build_deps=bool(plan.build),
        sign=leg.code_signed,
        probes=probes(plan),
        free_disk=leg.free_disk,
        download_cache=leg.flavor not in NO_DOWNLOAD_CACHE_FLAVORS,
        compiler_cache_max=cache_max if launcher else "",
    )
