"""What is left running of a test's processes (Linux, /proc): every living process whose
working directory is under the test's directory, or whose command line or environment names
it. Other engineers' and other tests' processes never match: each test has a directory of its
own. The kill tests assert that a killed run leaves none, and the `leftovers` fixture
(tests/conftest.py) ends whatever is left after a test, whatever happened in it.
"""
from __future__ import annotations

import os
import select
import signal
import time
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Survivor:
    pid: int
    name: str  # the kernel's name of it (comm): "cmake", "ninja", "cc1", "python3", ...
    argv: str

    def __str__(self) -> str:
        return f"{self.pid} {self.name}: {self.argv[:200]}"


def survivors(root: Path) -> list[Survivor]:
    needle = str(root.resolve()).encode()
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        process = f"/proc/{entry}"
        try:
            with open(f"{process}/stat", "rb") as stat:
                fields = stat.read()
            if fields[fields.rindex(b")") + 2:][:1] in (b"Z", b"X"):  # exited: nothing runs
                continue
            cwd = os.readlink(f"{process}/cwd").encode()
            with open(f"{process}/cmdline", "rb") as cmdline:
                argv = cmdline.read()
            with open(f"{process}/environ", "rb") as environ:
                environment = environ.read()
        except (FileNotFoundError, ProcessLookupError, PermissionError):
            continue  # gone meanwhile, or another user's
        if cwd == needle or cwd.startswith(needle + b"/") or needle in argv or needle in environment:
            name = fields[fields.index(b"(") + 1:fields.rindex(b")")].decode("utf-8", "replace")
            found.append(Survivor(int(entry), name, argv.replace(b"\0", b" ").decode("utf-8", "replace").strip()))
    return found


def wait_gone(root: Path, hang_guard_s: float) -> list[Survivor]:
    """Wait until nothing of `root` runs, woken by each exit (a pidfd per process: an event, not
    a poll); what still runs when the hang guard passes is returned."""
    deadline = time.monotonic() + hang_guard_s
    while True:
        left = survivors(root)
        if not left or time.monotonic() > deadline:
            return left
        handles = []
        for survivor in left:
            try:
                handles.append(os.pidfd_open(survivor.pid))
            except ProcessLookupError:
                pass
        try:
            if handles:
                select.select(handles, [], [], max(deadline - time.monotonic(), 0.0))
        finally:
            for handle in handles:
                os.close(handle)


def end(root: Path) -> list[Survivor]:
    """SIGKILL whatever of `root` runs, until nothing does; returns what was found running."""
    found = survivors(root)
    for _ in range(100):
        left = survivors(root)
        if not left:
            break
        for survivor in left:
            try:
                os.kill(survivor.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        wait_gone(root, hang_guard_s=5.0)
    return found
