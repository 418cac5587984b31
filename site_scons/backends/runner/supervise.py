"""Run one command so that it, and everything it starts, dies with the build, however the
build dies: a kill -9 of scons alone or of its whole process group included (Linux, macOS).

    python -I supervise.py --parent PID -- argv...

The runner (containment.py) starts every upstream command through this script on Linux and
macOS; Windows has a Job Object instead. It runs as two processes, because a `kill -9` of a
process group takes every process in it at once, and a process that is killed can clean up
nothing:

- the *watch* (this script as the runner starts it) stays in the runner's process group, so
  that whatever signals that group (Ctrl-C, a hang-up, `kill -TERM -<pgid>`) reaches it too,
  and is tied to the runner: by the kernel's parent-death signal on Linux
  (PR_SET_PDEATHSIG: the thread that started it died, a `kill -9` of scons included), by a
  kqueue watch on its pid elsewhere. On any of these it tells the guard to stop, waits until
  the guard is done, and exits;
- the *guard* is forked by the watch into a process group of its own, so a `kill -9
  -<pgid>` of the runner's group does not reach it, and is tied to the watch the same way. It starts the command and, on Linux, is a child subreaper
  (PR_SET_CHILD_SUBREAPER): an orphan is re-parented to it rather than to init, so everything
  the command starts stays below it whatever process group or session it moves to (Ninja
  starts every job in a group of its own). When the watch is gone, on SIGTERM/SIGINT/SIGHUP,
  and when the command fails, it SIGKILLs every descendant found (in /proc, or by `ps`), and
  again until none is left (a killed process's children are re-parented to it, and a fork
  may race the walk), reaping them as they die.

After a command that succeeded, only descendants still in the command's session are killed:
stragglers that nobody waits for and that would hold the log pipe open. Those that called
setsid() outlive the command on purpose and are left alone: a Bazel server keeps its analysis
cache warm for the leg's next Bazel command (bazel_closure.py). After a kill or a failure they
go too: a server nobody will ask again costs memory, killing it costs only a cold start.

Out of reach: a SIGKILL of the guard itself (found by its pid; it is no process any kill of
scons reaches), work handed to a service outside the tree (a container of `docker run`),
and on macOS, which has no subreaper, a process re-parented to launchd before a sweep that
left every process group the sweeps saw. Standard library only, so it runs with `-I`
whatever the child's environment is.
"""
from __future__ import annotations

import ctypes
import os
import signal
import subprocess
import sys
import threading
import time
from typing import NamedTuple

PR_SET_PDEATHSIG = 1
PR_SET_CHILD_SUBREAPER = 36
EXIT_PARENT_GONE = 137
EXIT_NOT_STARTED = 127  # as POSIX shells say it
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)
# States of a process that has exited: nothing left to kill, only to reap.
EXITED_STATES = ("Z", "X")
POLL_SECONDS = 0.01
# A process in uninterruptible sleep (a hung NFS read) ignores SIGKILL until it wakes.
GIVE_UP_SECONDS = 30.0
USAGE = "usage: supervise.py --parent PID -- argv...\n"


class Process(NamedTuple):
    pid: int
    ppid: int
    pgid: int
    session: int
    state: str


# -- how a process learns that its parent is gone ---------------------------------------------

def parent_watch(platform: str) -> str:
    """How this platform tells a process its parent died: "pdeathsig" (Linux's prctl),
    "kqueue" (macOS and the BSDs: a NOTE_EXIT watch), or "" (none: no supervisor there)."""
    if platform.startswith("linux"):
        return "pdeathsig"
    if platform == "darwin" or "bsd" in platform:
        return "kqueue"
    return ""


def _prctl(option: int, value: int, name: str) -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(option, value, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), f"prctl({name}) failed")


def _die_with(parent: int) -> None:
    """SIGTERM to this process when `parent` dies; exit at once when it is gone already."""
    how = parent_watch(sys.platform)
    if how == "pdeathsig":
        _prctl(PR_SET_PDEATHSIG, signal.SIGTERM, "PR_SET_PDEATHSIG")
    elif how == "kqueue":
        _watch_exit(parent)
    else:
        raise OSError(f"supervise.py: no way to watch a parent process on {sys.platform}")
    if os.getppid() != parent:  # the parent died before the request took effect
        sys.exit(EXIT_PARENT_GONE)


def _watch_exit(parent: int) -> None:
    """A thread that waits on kqueue for `parent` to exit, then SIGTERMs this process."""
    import select

    queue = select.kqueue()  # type: ignore[attr-defined,unused-ignore]
    event = select.kevent(parent, filter=select.KQ_FILTER_PROC,  # type: ignore[attr-defined,unused-ignore]
                          flags=select.KQ_EV_ADD | select.KQ_EV_ONESHOT,  # type: ignore[attr-defined,unused-ignore]
                          fflags=select.KQ_NOTE_EXIT)  # type: ignore[attr-defined,unused-ignore]
    try:
        queue.control([event], 0)
    except ProcessLookupError:
        sys.exit(EXIT_PARENT_GONE)

    def wait() -> None:
        queue.control(None, 1)
        os.kill(os.getpid(), signal.SIGTERM)

    threading.Thread(target=wait, name="parent watch", daemon=True).start()


# -- the process table ------------------------------------------------------------------------

def _processes() -> list[Process]:
    """Every process the system shows (none when it cannot be listed)."""
    if sys.platform.startswith("linux"):
        return _proc_table()
    try:
        listed = subprocess.run(["ps", "-A", "-o", "pid=,ppid=,pgid=,stat="], capture_output=True, text=True,
                                check=False).stdout
    except OSError:
        return []
    return [Process(pid, ppid, pgid, _session(pid), state) for pid, ppid, pgid, state in parse_ps(listed)]


def _proc_table() -> list[Process]:
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
        found.append(Process(int(name), int(fields[1]), int(fields[2]), int(fields[3]), fields[0]))
    return found


def parse_ps(listed: str) -> list[tuple[int, int, int, str]]:
    """(pid, ppid, pgid, state) of each line of `ps -A -o pid=,ppid=,pgid=,stat=` (BSD's and
    procps' ps alike); lines that are not four such fields are skipped."""
    rows = []
    for line in listed.splitlines():
        fields = line.split()
        if len(fields) == 4 and all(field.isdigit() for field in fields[:3]):
            rows.append((int(fields[0]), int(fields[1]), int(fields[2]), fields[3][0]))
    return rows


def _session(pid: int) -> int:
    try:
        return os.getsid(pid)
    except OSError:  # gone, or in a session we may not ask about
        return -1


def descendants(root: int, processes: list[Process]) -> list[Process]:
    """Every process below `root` in `processes` (by parent pid)."""
    children: dict[int, list[Process]] = {}
    for process in processes:
        children.setdefault(process.ppid, []).append(process)
    found: list[Process] = []
    pending = [root]
    while pending:
        below = children.get(pending.pop(), [])
        found.extend(below)
        pending.extend(process.pid for process in below)
    return found


# -- ending a tree ----------------------------------------------------------------------------

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
    until none is left. Without a subreaper (macOS) also their process groups: what a killed
    parent's children were re-parented away with stays in those."""
    me, session = os.getpid(), os.getsid(0)
    spared = {os.getpgid(0), _group(os.getppid())}  # never the watch's group: scons is in it
    groups: set[int] = set()
    deadline = time.monotonic() + GIVE_UP_SECONDS
    while True:
        living = [process for process in descendants(me, _processes()) if process.state not in EXITED_STATES
                  and not (keep_daemons and process.session != session)]
        for process in living:
            _kill(process.pid)
        if parent_watch(sys.platform) != "pdeathsig":
            groups |= {process.pgid for process in living} - spared
            for group in groups:
                _kill(group, group=True)
        _reap()
        if not living:
            return
        if time.monotonic() > deadline:
            pids = " ".join(str(process.pid) for process in living)
            sys.stderr.write(f"supervise.py: left behind, still alive {GIVE_UP_SECONDS:.0f} s after"
                             f" SIGKILL: {pids}\n")
            return
        time.sleep(POLL_SECONDS)


def _group(pid: int) -> int:
    try:
        return os.getpgid(pid)
    except OSError:
        return -1


def _kill(pid: int, group: bool = False) -> None:
    try:
        (os.killpg if group else os.kill)(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def _end_everything(started: list[int]) -> None:
    for pid in started:  # its group at once, even where the process table cannot be read
        _kill(pid, group=True)
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


# -- the two roles ------------------------------------------------------------------------------

def watch(parent: int, command: list[str]) -> int:
    """Fork the guard into a process group of its own and relay its exit status; on a stop
    signal or the parent's death, stop the guard and wait until it has ended the tree. A fork,
    not a second interpreter: it costs a millisecond, not a Python start."""
    guard_pid: list[int] = []
    stopped: list[int] = []

    def stop(signum: int, _frame: object) -> None:
        stopped.append(signum)
        if guard_pid:
            _signal(guard_pid[0], signal.SIGTERM)
        else:
            os._exit(128 + signum)  # the guard, if it was being forked, finds its parent gone

    for signum in STOP_SIGNALS:
        signal.signal(signum, stop)
    me = os.getpid()
    pid = os.fork()
    if pid == 0:
        os._exit(_as_guard(me, command))
    guard_pid.append(pid)
    _die_with(parent)
    _, status = os.waitpid(pid, 0)
    return 128 + stopped[0] if stopped else _exit_code(os.waitstatus_to_exitcode(status))


def _as_guard(watch_pid: int, command: list[str]) -> int:
    """The forked child's life: the guard's, in a process group of its own; never back into
    the watch's code."""
    try:
        os.setpgid(0, 0)
        return guard(watch_pid, command)
    except SystemExit as leaving:
        return leaving.code if isinstance(leaving.code, int) else 1
    except BaseException as error:  # noqa: BLE001 - the child must not return into the watch
        sys.stderr.write(f"supervise.py: the guard failed: {error!r}\n")
        return 1


def _signal(pid: int, signum: int) -> None:
    try:
        os.kill(pid, signum)
    except ProcessLookupError:
        pass


def guard(parent: int, command: list[str]) -> int:
    """Start the command and end its whole tree when the watch goes, on a stop signal, or when
    the command fails; after a success, end only the stragglers still in the session."""
    started: list[int] = []

    def stop(signum: int, _frame: object) -> None:
        for other in STOP_SIGNALS:  # a second signal must not restart the cleanup
            signal.signal(other, signal.SIG_IGN)
        _end_everything(started)
        os._exit(128 + signum)

    for signum in STOP_SIGNALS:
        signal.signal(signum, stop)
    if parent_watch(sys.platform) == "pdeathsig":
        _prctl(PR_SET_CHILD_SUBREAPER, 1, "PR_SET_CHILD_SUBREAPER")
    _die_with(parent)
    try:
        child = subprocess.Popen(command, process_group=0)
    except OSError as error:
        sys.stderr.write(f"supervise.py: cannot start {command[0]!r}: {error}\n")
        return EXIT_NOT_STARTED
    started.append(child.pid)
    child.returncode = _wait_for(child.pid)  # reaped by us, so Popen must not wait for it
    if child.returncode == 0:
        _end_descendants(keep_daemons=True)
    else:
        _end_everything(started)
    return _exit_code(child.returncode)


def main(arguments: list[str]) -> int:
    if len(arguments) < 4 or arguments[0] != "--parent" or not arguments[1].isdigit() or arguments[2] != "--":
        sys.stderr.write(USAGE)
        return 2
    return watch(int(arguments[1]), arguments[3:])


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
