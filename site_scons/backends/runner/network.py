"""Running a command with the network off: a new, empty network namespace (`unshare -n`).

A build whose every download the project served needs no network; run without one, a
download upstream tries behind the project's back fails at once instead of passing
unseen. Linux only, where unshare works here (a container may forbid namespaces): root
gets `unshare -n`, anyone else `unshare -rn` (a user namespace maps them to root inside it,
which only the namespace's own network sees). Elsewhere the command runs as it is, and
upstream's disconnected switches are what holds it.
"""
from __future__ import annotations

import functools
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Iterable, Sequence

from backends.runner.run import LOG_HEADER_START, LOG_OUTPUT_START

_URL = re.compile(r"(?:https?|git|ssh)://[^\s'\"<>()\[\]]+")


@functools.cache
def isolation_prefix() -> tuple[str, ...]:
    """The argv prefix that runs a command in a network namespace of its own; () when this
    host cannot (not Linux, no unshare, namespaces refused)."""
    if not sys.platform.startswith("linux") or shutil.which("unshare") is None:
        return ()
    prefix = ("unshare", "-n") if os.geteuid() == 0 else ("unshare", "-rn")
    try:
        probe = subprocess.run([*prefix, "true"], capture_output=True, timeout=10, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return ()
    return (*prefix, "--") if probe.returncode == 0 else ()


def isolated(argv: Sequence[str], prefix: Sequence[str] | None = None) -> list[str]:
    """`argv` run with the network off where this host can."""
    return [*(isolation_prefix() if prefix is None else prefix), *argv]


def urls_in(lines: Iterable[str]) -> list[str]:
    """The URLs a failed command's output names, once each, in order."""
    return list(dict.fromkeys(match.rstrip(".,;:") for line in lines for match in _URL.findall(line)))


def tried_urls(log: Path, limit: int = 20) -> list[str]:
    """The URLs in the output of the log's last command: what a build with the network off
    tried to reach (not its header's argv and environment, nor earlier commands' output)."""
    try:
        return urls_in(last_output(log.read_text(errors="replace").splitlines()))[:limit]
    except OSError:
        return []


def last_output(lines: list[str]) -> list[str]:
    """The output lines of the last command a step log holds: runner.run writes a header per
    command (ending in its `output:` line), the output, then a `==== [...] exit code` line."""
    starts = [i for i, line in enumerate(lines) if line == LOG_OUTPUT_START]
    if not starts:
        return lines
    body = lines[starts[-1] + 1:]
    end = next((i for i, line in enumerate(body) if line.startswith(LOG_HEADER_START)), len(body))
    return body[:end]
