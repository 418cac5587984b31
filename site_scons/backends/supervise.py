"""Run one command so that it, and everything it starts, dies with the build (Linux).

    python -I supervise.py --parent PID -- argv...

The runner (run.py) starts every upstream command through this script on Linux; elsewhere it
gives the command a process group of its own instead (best effort, see run.py). The script:

- asks the kernel for SIGTERM when the thread that started it dies (PR_SET_PDEATHSIG), a
  `kill -9` of scons included;
- makes itself a child subreaper (PR_SET_CHILD_SUBREAPER): an orphan is re-parented to it
  rather than to init, so everything the command starts stays below it whatever process
  group or session it moves to. Killing the command's group is not enough: Ninja starts every
  job (`sh -c c++ ...`, cc1plus) in a group of its own;
- on that signal (or SIGTERM/SIGINT/SIGHUP), and when the command fails, SIGKILLs every
  descendant found in /proc, again until none is left (a killed process's children are
  re-parented here, and a fork may race the walk), reaping them as they die.

After a command that succeeded, only descendants still in this script's session are killed:
stragglers that nobody waits for and that would hold the log pipe open. Those that called
setsid() outlive the command on purpose and are left alone: a Bazel server keeps its analysis
cache warm for the leg's next Bazel command (bazel_closure.py). After a kill or a failure they
go too: a server nobody will ask again costs memory, killing it costs only a cold start.

Out of reach: a SIGKILL of this script itself, and work handed to a service outside the tree
(a container of `docker run`). Standard library only, so it runs with `-I` whatever the
child's environment is.
"""
from __future__ import annotations

import ctypes
import os
import signal
import subprocess
import sys
import time
from typing import NamedTuple

PR_SET_PDEATHSIG = 1
PR_SET_CHILD_SUBREAPER = 36
EXIT_PARENT_GONE = 137
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)
# States of a process that has exited: nothing left to kill, only to reap.
EXITED_STATES = ("Z", "X")
POLL_SECONDS = 0.01
# A process in uninterruptible sleep (a hung NFS read) ignores SIGKILL until it wakes.
GIVE_UP_SECONDS = 30.0


class Process(NamedTuple):
    pid: int
    ppid: int
    session: int
    state: str


def _prctl(option: int, value: int, name: str) -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(option, value, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), f"prctl({name}) failed")


def _die_with_parent(parent: int) -> None:
    _prctl(PR_SET_PDEATHSIG, signal.SIGTERM, "PR_SET_PDEATHSIG")
    if os.getppid() != parent:  # the parent died before the request took effect
        sys.exit(EXIT_PARENT_GONE)


def _processes() -> list[Process]:
    """Every process /proc shows (none when it is not mounted)."""
    try:
        names = [name for name in os.listdir("/proc") if name.isdigit()]
    except OSError:
        return []
    found = []
    for name in names:
        try:
            with open(f"/proc/{name}/stat", "rb") as stat:
                text = stat.read().decode("ascii", "replace")
        except OSError:  # it exited meanwhile
            continue
        # "pid (comm) state ppid pgrp session ...": comm may hold spaces and parentheses.
        fields = text[text.rindex(")") + 2:].split()
        found.append(Process(int(name), int(fields[1]), int(fields[3]), fields[0]))
    return found


def _descendants(root: int) -> list[Process]:
    children: dict[int, list[Process]] = {}
    for process in _processes():
        children.setdefault(process.ppid, []).append(process)
    found: list[Process] = []
    pending = [root]
    while pending:
        below = children.get(pending.pop(), [])
        found.extend(below)
        pending.extend(process.pid for process in below)
    return found


def _reap() -> None:
    """Collect every child of ours that has exited, without waiting for the others."""
    while True:
        try:
            pid, _status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


def _end_descendants(*, keep_daemons: bool) -> None:
    """SIGKILL every living descendant (but those that left our session, with `keep_daemons`)
    until none is left."""
    me, session = os.getpid(), os.getsid(0)
    deadline = time.monotonic() + GIVE_UP_SECONDS
    while True:
        living = [process for process in _descendants(me) if process.state not in EXITED_STATES
                  and not (keep_daemons and process.session != session)]
        for process in living:
            try:
                os.kill(process.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        _reap()
        if not living:
            return
        if time.monotonic() > deadline:
            pids = " ".join(str(process.pid) for process in living)
            sys.stderr.write(f"supervise.py: left behind, still alive {GIVE_UP_SECONDS:.0f} s after"
                             f" SIGKILL: {pids}\n")
            return
        time.sleep(POLL_SECONDS)


def _end_everything(started: list[int]) -> None:
    for pid in started:  # its group at once, even where /proc is not mounted
        try:
            os.killpg(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    _end_descendants(keep_daemons=False)


def _wait_for(pid: int) -> int:
    """The exit status of child `pid` (-N for signal N), reaping the orphans re-parented to
    us meanwhile."""
    while True:
        reaped, status = os.waitpid(-1, 0)
        if reaped == pid:
            return os.waitstatus_to_exitcode(status)


def _exit_code(returncode: int) -> int:
    return 128 - returncode if returncode < 0 else returncode


def main(arguments: list[str]) -> int:
    if len(arguments) < 4 or arguments[0] != "--parent" or arguments[2] != "--":
        sys.stderr.write("usage: supervise.py --parent PID -- argv...\n")
        return 2
    parent, command = int(arguments[1]), arguments[3:]
    started: list[int] = []

    def stop(signum: int, _frame: object) -> None:
        for other in STOP_SIGNALS:  # a second signal must not restart the cleanup
            signal.signal(other, signal.SIG_IGN)
        _end_everything(started)
        os._exit(128 + signum)

    for signum in STOP_SIGNALS:
        signal.signal(signum, stop)
    _prctl(PR_SET_CHILD_SUBREAPER, 1, "PR_SET_CHILD_SUBREAPER")
    _die_with_parent(parent)
    child = subprocess.Popen(command, process_group=0)
    started.append(child.pid)
    child.returncode = _wait_for(child.pid)  # reaped by us, so Popen must not wait for it
    if child.returncode == 0:
        _end_descendants(keep_daemons=True)
    else:
        _end_everything(started)
    return _exit_code(child.returncode)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
