"""The supervisor every upstream command runs under on Linux (containment.py starts it): a
killed or failed run ends the command's whole process tree, grandchildren in sessions and
process groups of their own included, whatever killed the run: a kill -9 of scons alone, of
its whole process group, of the supervisor's watch, a SIGTERM, Ctrl-C. A successful command
leaves only the daemons that left its session. After each kill, nothing of the tree may run
(tests/survivors.py finds every process of the test by its directory), and the `leftovers`
fixture ends whatever a failing test left."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

import survivors

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"),
                                reason="the supervisor's Linux path (macOS's kqueue and Windows' Job Object: "
                                       "test_containment.py checks what they rest on; nothing here runs them)")

SITE_SCONS = Path(__file__).resolve().parents[3] / "site_scons"
SUPERVISOR = SITE_SCONS / "backends/runner/supervise.py"
TIMEOUT = 30.0  # hang guards only

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

# The build (scons), starting the command as the runner does, through containment.spawn.
BUILD = """\
import sys
from pathlib import Path
sys.path.insert(0, sys.argv[1])
from backends.runner import containment
child = containment.spawn(sys.argv[2:], env=dict(__import__("os").environ), cwd=Path.cwd())
sys.stdout.buffer.write(child.stdout.read())
sys.exit(child.wait())
"""


class Tree:
    """The command's daemon and straggler, and every process of the test (its directory is in
    their environment)."""

    def __init__(self, tmp_path: Path) -> None:
        self.root = tmp_path
        self.script = tmp_path / "command.py"
        self.script.write_text(COMMAND)
        self.pidfile = tmp_path / "pids"
        self.env = {**os.environ, "ANIRA_TEST_DIR": str(tmp_path)}
        self.daemon = self.straggler = 0

    def command(self, mode: str) -> list[str]:
        return [sys.executable, str(self.script), str(self.pidfile), mode]

    def build(self, mode: str, **options: object) -> subprocess.Popen[bytes]:
        return subprocess.Popen([sys.executable, "-c", BUILD, str(SITE_SCONS), *self.command(mode)], env=self.env,
                                **options)  # type: ignore[call-overload]

    def supervise(self, mode: str) -> subprocess.Popen[bytes]:
        return subprocess.Popen([sys.executable, "-I", str(SUPERVISOR), "--parent", str(os.getpid()), "--",
                                 *self.command(mode)], env=self.env)

    def started(self, runner: subprocess.Popen[bytes]) -> None:
        deadline = time.monotonic() + TIMEOUT
        while not self.pidfile.is_file():
            assert runner.poll() is None, "the supervisor exited before the command started its children"
            assert time.monotonic() < deadline, "the command never started its children"
            time.sleep(0.05)
        self.daemon, self.straggler = map(int, self.pidfile.read_text().split())

    def assert_all_gone(self) -> None:
        left = survivors.wait_gone(self.root, TIMEOUT)
        assert left == [], "still running:\n" + "\n".join(map(str, left))

    def guard(self) -> survivors.Survivor:
        """The supervisor's process that leads a process group: the guard (the watch is in the
        build's group)."""
        [found] = [s for s in survivors.survivors(self.root) if "supervise.py" in s.argv and os.getpgid(s.pid) == s.pid]
        return found


@pytest.fixture
def tree(tmp_path: Path, leftovers: None) -> Tree:
    return Tree(tmp_path)


def _reaped(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is None:
        process.kill()
    process.wait()


def test_kill_9_of_the_build_ends_the_whole_tree(tree: Tree) -> None:
    build = tree.build("wait")
    try:
        tree.started(build)
        build.kill()  # scons alone
        build.wait()
        tree.assert_all_gone()
    finally:
        _reaped(build)


def test_kill_9_of_the_builds_process_group_ends_the_whole_tree(tree: Tree) -> None:
    """`kill -9 -<pgid>` takes scons and the supervisor's watch at once; the guard is in no
    group of theirs, and ends the tree when the watch is gone."""
    build = tree.build("wait", start_new_session=True)
    try:
        tree.started(build)
        guard = tree.guard()
        assert os.getpgid(guard.pid) != os.getpgid(build.pid)
        os.killpg(build.pid, signal.SIGKILL)
        build.wait()
        tree.assert_all_gone()
    finally:
        _reaped(build)


def test_ctrl_c_of_the_builds_process_group_ends_the_whole_tree(tree: Tree) -> None:
    """A terminal signals the foreground group: the watch is in it, and has the guard stop."""
    build = tree.build("wait", start_new_session=True, stderr=subprocess.DEVNULL)
    try:
        tree.started(build)
        os.killpg(build.pid, signal.SIGINT)
        build.wait(timeout=TIMEOUT)
        tree.assert_all_gone()
    finally:
        _reaped(build)


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGKILL], ids=["SIGTERM", "kill -9"])
def test_a_signal_to_the_supervisor_ends_the_whole_tree(tree: Tree, signum: int) -> None:
    """SIGTERM: the watch has the guard end the tree before it exits; kill -9 of the watch
    alone: the guard sees it gone."""
    watch = tree.supervise("wait")
    try:
        tree.started(watch)
        watch.send_signal(signum)
        returncode = watch.wait(timeout=TIMEOUT)
        if signum == signal.SIGTERM:
            assert returncode == 128 + signal.SIGTERM
            assert survivors.survivors(tree.root) == []
        tree.assert_all_gone()
    finally:
        _reaped(watch)


def test_a_failed_command_ends_the_whole_tree_before_the_supervisor_exits(tree: Tree) -> None:
    watch = tree.supervise("3")
    assert watch.wait(timeout=TIMEOUT) == 3
    tree.started(watch)
    assert survivors.survivors(tree.root) == []


def test_a_successful_command_leaves_its_daemons_but_not_its_stragglers(tree: Tree) -> None:
    """A Bazel server (setsid) stays warm for the next command; a process that did not leave
    the session would hold the log pipe open. (`leftovers` would fail the test for the daemon:
    it is killed here, and waited for: a SIGKILL is delivered when the daemon is next scheduled,
    which on a busy machine is after `leftovers` looks.)"""
    watch = tree.supervise("0")
    assert watch.wait(timeout=TIMEOUT) == 0
    tree.started(watch)
    assert [s.pid for s in survivors.survivors(tree.root)] == [tree.daemon]
    os.kill(tree.daemon, signal.SIGKILL)
    tree.assert_all_gone()


def test_a_usage_error_is_said(tmp_path: Path) -> None:
    done = subprocess.run([sys.executable, "-I", str(SUPERVISOR), "--parent", "x", "--", "true"],
                          capture_output=True, text=True)
    assert done.returncode == 2 and done.stderr.startswith("usage: supervise.py --parent PID -- argv")


def test_a_command_that_cannot_start_is_said(tmp_path: Path) -> None:
    done = subprocess.run([sys.executable, "-I", str(SUPERVISOR), "--parent", str(os.getpid()), "--",
                           str(tmp_path / "missing")], capture_output=True, text=True)
    assert done.returncode == 127 and "cannot start" in done.stderr and "missing" in done.stderr
