"""Run one command so that it dies with the build that started it (Linux).

    python -I supervise.py --parent PID -- argv...

The runner (run.py) starts every upstream command through this script. It asks the kernel
for SIGTERM when the thread that started it dies (PR_SET_PDEATHSIG) — a `kill -9` of scons
included — then starts the command in a process group of its own and, on that signal (or
SIGINT/SIGHUP), kills the whole group: cmake, ninja and every compiler below them. Daemons
that leave the group on purpose (a Bazel server) are left alone. Standard library only, so
it runs with `-I` whatever the child's environment is.
"""
from __future__ import annotations

import ctypes
import os
import signal
import subprocess
import sys

PR_SET_PDEATHSIG = 1
EXIT_PARENT_GONE = 137


def _die_with_parent(parent: int) -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_PDEATHSIG) failed")
    if os.getppid() != parent:  # the parent died before the request took effect
        sys.exit(EXIT_PARENT_GONE)


def _exit_code(returncode: int) -> int:
    return 128 - returncode if returncode < 0 else returncode


def main(arguments: list[str]) -> int:
    if len(arguments) < 4 or arguments[0] != "--parent" or arguments[2] != "--":
        sys.stderr.write("usage: supervise.py --parent PID -- argv...\n")
        return 2
    parent, command = int(arguments[1]), arguments[3:]
    started: list[subprocess.Popen[bytes]] = []

    def stop(signum: int, _frame: object) -> None:
        for child in started:
            try:
                os.killpg(child.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        os._exit(128 + signum)

    for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(signum, stop)
    _die_with_parent(parent)
    started.append(subprocess.Popen(command, process_group=0))
    return _exit_code(started[0].wait())


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
