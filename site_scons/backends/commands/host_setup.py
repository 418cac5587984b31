"""What chosen legs need on this machine, and what of it is missing (docs/setup.md).

    python -m backends.commands.host_setup --leg ID [--leg ID ...] [--host PLATFORM] [--vswhere PATH]
    python -m backends.commands.host_setup --leg ID [--leg ID ...] --missing apt|brew|pip

The first form prints, per leg, each thing it needs here with where it was found, or exactly
what to install; it exits 0 when nothing is missing and 1 otherwise. The second prints only
the missing packages the set-up scripts install themselves with one manager (tools/setup.sh:
apt or brew; both scripts: pip, into the project's environment), space-separated. `--host`
is the platform to decide for (tools/setup.sh passes what `uname` says; default: this
machine's); `--vswhere` the vswhere.exe that lists Visual Studio's instances (default: on
PATH, else the Visual Studio Installer's). A leg id that does not exist exits 2.
Run with `PYTHONPATH=site_scons` from the project root.
"""
from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Sequence

from backends.commands.invocation import canonical_leg_id
from backends.model.matrix import Matrix, load_matrix
from backends.model.recipes import plan_all
from backends.model.selection import suggest
from backends.model.platforms import platform_table
from backends.model.vocab import VocabularyError, canonical_platform, split_platform
from backends.probes.host import Host, detect_host
from backends.probes.host_checks import Facts, Finding, check
from backends.probes.host_needs import describe, load_packages, needs_here
from backends.steps.sign import IDENTITY_ENV
from backends.util.errors import BackendsError

STATUS_WIDTH = 8


class SetupError(BackendsError, RuntimeError):
    """Bad input: an unknown leg or platform."""


def _legs(typed: Sequence[str], matrix: Matrix) -> list[str]:
    ids = []
    for item in (part.strip() for text in typed for part in text.split(",")):
        canonical = canonical_leg_id(item, tuple(matrix.engines)) or item
        if canonical not in matrix.ids:
            raise SetupError(f"unknown leg {item!r}{suggest(item, matrix.ids)}; `scons list` shows every leg id")
        ids.append(canonical)
    return list(dict.fromkeys(ids))


def _host(text: str) -> Host:
    if not text:
        return detect_host()
    try:
        os_name, arch = split_platform(canonical_platform(text))
    except VocabularyError:
        raise SetupError(f"--host {text}: not a platform; platforms are {platform_table().examples()}") from None
    return Host(os_name, arch)


def _line(status: str, finding: Finding) -> str:
    what = f"{describe(finding.need)} ({finding.need.why})"
    if finding.missing:
        return f"  {status:<{STATUS_WIDTH}} {what}: {finding.remedy}"
    if finding.next:
        return f"  {status:<{STATUS_WIDTH}} {what}: {finding.found}; then, in the shell you build from: {finding.next}"
    return f"  {status:<{STATUS_WIDTH}} {what}: {finding.found}"


def leg_findings(leg_id: str, matrix: Matrix, host: Host, facts: Facts) -> list[Finding] | None:
    """Each need of the leg on `host`, checked as set-up checks (None: the host cannot build it)."""
    plan = plan_all(matrix, [matrix.leg(leg_id)])[0]
    if not host.can_build(plan.leg):
        return None
    packages = load_packages()
    return [check(need, facts, setting_up=True, packages=packages)
            for need in needs_here(plan, matrix, host)]


def report(leg_ids: Sequence[str], matrix: Matrix, host: Host, facts: Facts) -> tuple[str, int]:
    """The report's text, and how many legs are not ready here."""
    lines: list[str] = []
    not_ready = 0
    for leg_id in leg_ids:
        leg = matrix.leg(leg_id)
        lines.append(f"{leg_id} on {host.platform}:")
        findings = leg_findings(leg_id, matrix, host, facts)
        if findings is None:
            runner_os, runner_arch = leg.runner_host
            lines.append(f"  {'no':<{STATUS_WIDTH}} it builds on {leg.runner} ({runner_os}-{runner_arch}), not on "
                         f"{host.platform}: set up a machine like that one")
            not_ready += 1
            continue
        missing = [finding for finding in findings if finding.missing]
        lines += [_line("missing" if f.missing else ("to do" if f.next else "ok"), f) for f in findings]
        if leg.code_signed and host.os == "macos":
            lines.append(f"  {'optional':<{STATUS_WIDTH}} signing: set {IDENTITY_ENV} to a Developer ID Application "
                         "identity in your keychain (without it the dylibs stay unsigned)")
        if missing:
            not_ready += 1
            lines.append(f"  {len(missing)} missing: install {'it' if len(missing) == 1 else 'them'} as shown, then "
                         "run this again")
        else:
            steps = [*dict.fromkeys(f.next for f in findings if f.next), f"scons {leg_id}"]
            lines.append(f"  ready: {'; then '.join(steps)}")
    return "\n".join(lines), not_ready


def missing_packages(leg_ids: Sequence[str], manager: str, matrix: Matrix, host: Host, facts: Facts) -> list[str]:
    """The packages of `manager` the set-up scripts install for the legs here, each once."""
    names = [finding.package for leg_id in leg_ids for finding in leg_findings(leg_id, matrix, host, facts) or ()
             if finding.missing and finding.installable and finding.manager == manager]
    return list(dict.fromkeys(names))


def parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m backends.commands.host_setup", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--root", type=Path, default=Path.cwd(), help="project root (default: .)")
    parser.add_argument("--leg", action="append", required=True,
                        help="a leg id (`scons list`); repeat, or comma-separate")
    parser.add_argument("--host", default="", help="the platform to decide for (default: this machine's)")
    parser.add_argument("--vswhere", default="", help="vswhere.exe (Windows; default: on PATH, else the installer's)")
    parser.add_argument("--missing", choices=("apt", "brew", "pip"),
                        help="print only the missing packages of this manager that set-up installs itself")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = parser().parse_args(argv)
    try:
        matrix = load_matrix(args.root)
        leg_ids = _legs(args.leg, matrix)
        host = _host(args.host)
    except SetupError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    facts = Facts(host.os, host.arch, os.environ, vswhere=args.vswhere)
    if args.missing:
        print(" ".join(missing_packages(leg_ids, args.missing, matrix, host, facts)))
        return 0
    text, not_ready = report(leg_ids, matrix, host, facts)
    print(text)
    return 1 if not_ready else 0


if __name__ == "__main__":
    sys.exit(main())
