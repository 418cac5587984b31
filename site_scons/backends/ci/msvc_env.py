"""The MSVC developer environment for the rest of a Windows job (what `vcvarsall.bat` sets).

    python -m backends.ci.msvc_env --arch x64|arm64

Finds the newest Visual Studio (or Build Tools) with the leg's C++ tools through `vswhere`,
runs its `vcvarsall.bat` for this host and the target architecture, and appends every
variable it set or changed to `$GITHUB_ENV` (stdout outside CI), so later steps build with
cl.exe, link.exe and the Windows SDK. CI runs it on the leg jobs whose `msvc_arch` is set,
in place of a third-party action: no action on Node 24 does this, and the job holds a write
token and signing secrets.
"""
from __future__ import annotations

import argparse
import os
import secrets
import subprocess
import sys
from pathlib import Path, PureWindowsPath
from typing import Callable, Mapping, Sequence

from backends.ci.main import append_to_runner_file
from backends.model.platforms import platform_table
from backends.probes.visual_studio import INSTALLER_DIR, TOOLS_COMPONENTS, components_for, install_command
from backends.util.errors import BackendsError

# Where vswhere is and which component holds each target's compiler: the same facts host set-up
# reads (probes/visual_studio.py).
VSWHERE = Path(*PureWindowsPath(INSTALLER_DIR).parts, "vswhere.exe")
COMPONENTS = TOOLS_COMPONENTS
HOSTS = {msvc.processor: msvc.arch for msvc in platform_table().msvc_targets()}  # PROCESSOR_ARCHITECTURE ->
VCVARS_ARCH = {msvc.arch: msvc.dev_cmd_arch for msvc in platform_table().msvc_targets()}  # a cross pair's halves


def _install(target: str) -> str:
    return ('install Visual Studio Build Tools with the "Desktop development with C++" workload: '
            + install_command(components_for(target)))


# An argument list, or for cmd.exe a whole command line: Python's quoting of a list (\" inside
# "...") is not cmd's.
Run = Callable[[Sequence[str] | str], subprocess.CompletedProcess[str]]


class MsvcError(BackendsError, RuntimeError):
    """No usable MSVC on this host; the message says what to install."""


def _run(argv: Sequence[str] | str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv if isinstance(argv, str) else list(argv), capture_output=True, text=True, check=False)


def vcvars_argument(target: str, host: str) -> str:
    """vcvarsall's argument: the target itself on a native host, else `<host>_<target>`."""
    host_arch = HOSTS.get(host.upper())
    if target not in COMPONENTS or host_arch is None:
        raise MsvcError(f"no MSVC environment for target {target!r} on a {host or 'unknown'} host "
                        f"(targets: {', '.join(COMPONENTS)}; hosts: {', '.join(HOSTS)})")
    if host_arch == target:
        return target
    return f"{VCVARS_ARCH[host_arch]}_{VCVARS_ARCH[target]}"


def find_vcvarsall(target: str, environ: Mapping[str, str], run: Run = _run) -> Path:
    vswhere = Path(environ.get("ProgramFiles(x86)", r"C:\Program Files (x86)")) / VSWHERE
    if not vswhere.is_file():
        raise MsvcError(f"{vswhere} is missing: {_install(target)}")
    found = run([str(vswhere), "-latest", "-products", "*", "-requires", COMPONENTS[target], "-property",
                 "installationPath"])
    install = found.stdout.strip().splitlines()[0].strip() if found.returncode == 0 and found.stdout.strip() else ""
    if not install:
        raise MsvcError(f"vswhere finds no Visual Studio with {COMPONENTS[target]}: {_install(target)}")
    vcvarsall = Path(install) / "VC" / "Auxiliary" / "Build" / "vcvarsall.bat"
    if not vcvarsall.is_file():
        raise MsvcError(f"{vcvarsall} is missing: repair the installation, or {_install(target)}")
    return vcvarsall


def developer_environment(vcvarsall: Path, argument: str, environ: Mapping[str, str],
                          run: Run = _run) -> dict[str, str]:
    """The variables vcvarsall sets or changes (names as cmd spells them)."""
    marker = f"--anira-env-{secrets.token_hex(8)}--"
    # /s: cmd drops the outer quotes and runs the rest as typed, the path's own quotes kept.
    done = run(f'cmd.exe /d /s /c "call "{vcvarsall}" {argument} && echo {marker} && set"')
    output = done.stdout.split(marker, 1)
    if done.returncode != 0 or len(output) != 2:
        raise MsvcError(f"{vcvarsall} {argument} failed (exit {done.returncode}): "
                        f"{(done.stdout + done.stderr).strip()[-2000:]}")
    before = {name.upper(): value for name, value in environ.items()}
    changed = {}
    for line in output[1].splitlines():
        name, sep, value = line.partition("=")
        if sep and name and before.get(name.upper()) != value:
            changed[name] = value
    return changed


def github_env_lines(variables: Mapping[str, str]) -> str:
    """`$GITHUB_ENV` text: each value in a heredoc block whose delimiter it cannot contain."""
    blocks = []
    for name, value in variables.items():
        delimiter = f"ANIRA_EOF_{secrets.token_hex(8)}"
        blocks.append(f"{name}<<{delimiter}\n{value}\n{delimiter}\n")
    return "".join(blocks)


def main(argv: Sequence[str] | None = None, environ: Mapping[str, str] | None = None, run: Run = _run) -> int:
    parser = argparse.ArgumentParser(prog="python -m backends.ci.msvc_env", description=__doc__.split("\n\n")[0])
    parser.add_argument("--arch", required=True, choices=sorted(COMPONENTS), help="the leg's msvc_arch")
    args = parser.parse_args(argv)
    environ = os.environ if environ is None else environ
    try:
        vcvarsall = find_vcvarsall(args.arch, environ, run)
        argument = vcvars_argument(args.arch, environ.get("PROCESSOR_ARCHITECTURE", ""))
        variables = developer_environment(vcvarsall, argument, environ, run)
    except MsvcError as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    append_to_runner_file("GITHUB_ENV", github_env_lines(variables), sys.stdout, environ)
    print(f"MSVC environment: {vcvarsall} {argument} ({len(variables)} variables)", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
