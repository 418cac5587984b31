"""The supervisor every upstream command runs under on Linux: a killed or failed run ends the
command's whole process tree, grandchildren in sessions and process groups of their own
included; a successful one leaves only the daemons that left its session."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"),
                                reason="the supervisor is Linux's (run.py uses process groups elsewhere)")

SUPERVISOR = Path(__file__).resolve().parents[2] / "site_scons/backends/supervise.py"
TIMEOUT = 30.0

# The command: starts a daemon (setsid, as the Bazel client starts its server) and a straggler
# in a process group of its own (as Ninja starts its jobs), records both pids, then waits or
# exits with the given code.
COMMAND = """\
import subprocess, sys, time
from pathlib import Path
quiet = dict(stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
daemon = subprocess.Popen(["sleep", "300"], start_new_session=True, **quiet)
straggler = subprocess.Popen(["sleep", "300"], process_group=0, **quiet)
pidfile = Path(sys.argv[1])
pidfile.with_suffix(".tmp").write_text(f"{daemon.pid} {straggler.pid}")
pidfile.with_suffix(".tmp").replace(pidfile)
if sys.argv[2] == "wait":
    time.sleep(300)
sys.exit(int(sys.argv[2]))
"""

# The build that starts the supervisor (scons), with its own pid as --parent.
PARENT = """\
import os, subprocess, sys
sys.exit(subprocess.call([sys.executable, "-I", sys.argv[1], "--parent", str(os.getpid()), "--", *sys.argv[2:]]))
"""


class Tree:
    """The command's daemon and straggler, killed after the test whatever happened."""

    def __init__(self, tmp_path: Path) -> None:
        self.script = tmp_path / "command.py"
        self.script.write_text(COMMAND)
        self.pidfile = tmp_path / "pids"
        self.daemon = self.straggler = 0

    def command(self, mode: str) -> list[str]:
        return [sys.executable, str(self.script), str(self.pidfile), mode]

    def started(self, runner: subprocess.Popen[bytes]) -> None:
        deadline = time.monotonic() + TIMEOUT
        while not self.pidfile.is_file():
            assert runner.poll() is None, "the supervisor exited before the command started its children"
            assert time.monotonic() < deadline, "the command never started its children"
            time.sleep(0.05)
        self.daemon, self.straggler = map(int, self.pidfile.read_text().split())

    def cleanup(self) -> None:
        for pid in (self.daemon, self.straggler):
            if pid and _running(pid):
                os.kill(pid, signal.SIGKILL)


@pytest.fixture
def tree(tmp_path: Path) -> Iterator[Tree]:
    made = Tree(tmp_path)
    yield made
    made.cleanup()


def _supervise(command: list[str]) -> subprocess.Popen[bytes]:
    return subprocess.Popen([sys.executable, "-I", str(SUPERVISOR), "--parent", str(os.getpid()), "--", *command])


def _running(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(") ", 1)[1][0] not in "ZX"
    except FileNotFoundError:
        return False


def _assert_gone(*pids: int) -> None:
    deadline = time.monotonic() + TIMEOUT
    while any(_running(pid) for pid in pids):
        alive = [pid for pid in pids if _running(pid)]
        assert time.monotonic() < deadline, f"still running after {TIMEOUT:.0f} s: {alive}"
        time.sleep(0.05)


def test_kill_9_of_the_build_ends_the_whole_tree(tree: Tree) -> None:
    build = subprocess.Popen([sys.executable, "-c", PARENT, str(SUPERVISOR), *tree.command("wait")])
    try:
        tree.started(build)
        build.kill()
        build.wait()
        _assert_gone(tree.daemon, tree.straggler)
    finally:
        if build.poll() is None:
            build.kill()
            build.wait()


def test_sigterm_to_the_supervisor_ends_the_whole_tree(tree: Tree) -> None:
    supervisor = _supervise(tree.command("wait"))
    try:
        tree.started(supervisor)
        supervisor.terminate()
        assert supervisor.wait(timeout=TIMEOUT) == 128 + signal.SIGTERM
        _assert_gone(tree.daemon, tree.straggler)
    finally:
        if supervisor.poll() is None:
            supervisor.kill()
            supervisor.wait()


def test_a_failed_command_ends_the_whole_tree_before_the_supervisor_exits(tree: Tree) -> None:
    supervisor = _supervise(tree.command("3"))
    assert supervisor.wait(timeout=TIMEOUT) == 3
    tree.started(supervisor)
    assert not _running(tree.daemon) and not _running(tree.straggler)


def test_a_successful_command_leaves_its_daemons_but_not_its_stragglers(tree: Tree) -> None:
    """A Bazel server (setsid) stays warm for the next command; a process that did not leave
    the session would hold the log pipe open."""
    supervisor = _supervise(tree.command("0"))
    assert supervisor.wait(timeout=TIMEOUT) == 0
    tree.started(supervisor)
    assert not _running(tree.straggler)
    assert _running(tree.daemon)
