"""How each platform ties a command's processes to the run (runner/containment.py, runner/supervise.py): the
decisions and data the macOS and Windows paths rest on, checked here on any host (the Linux
path runs for real in test_supervise.py and the integration kill tests)."""
from __future__ import annotations

import ctypes
import sys

import pytest

from backends.runner import containment, supervise
from backends.runner.supervise import Process


@pytest.mark.parametrize("platform, mechanism, watch", [
    ("linux", "supervisor", "pdeathsig"),
    ("darwin", "supervisor", "kqueue"),
    ("freebsd14", "supervisor", "kqueue"),
    ("win32", "job", ""),
    ("cygwin", "group", ""),
])
def test_each_platform_has_its_way(platform: str, mechanism: str, watch: str) -> None:
    assert containment.mechanism(platform) == mechanism
    assert supervise.parent_watch(platform) == watch


def test_the_supervisor_wraps_the_command_and_stays_in_the_runners_group() -> None:
    argv = ["cmake", "--build", "."]
    wrapped = containment.command_line(argv, "darwin", 4242)
    assert wrapped == [sys.executable, "-I", str(containment.SUPERVISOR), "--parent", "4242", "--", *argv]
    assert containment.popen_options("linux") == {}  # its watch must get what signals scons's group


def test_a_windows_command_starts_suspended_to_join_its_job_first() -> None:
    assert containment.command_line(["cmake"], "win32", 1) == ["cmake"]
    flags = containment.popen_options("win32")["creationflags"]
    assert flags == containment.CREATE_SUSPENDED | containment.CREATE_NEW_PROCESS_GROUP == 0x204


def test_elsewhere_a_command_gets_a_process_group_of_its_own() -> None:
    assert containment.command_line(["make"], "cygwin", 1) == ["make"]
    assert containment.popen_options("cygwin") == {"process_group": 0}


def test_the_job_kills_its_processes_when_its_last_handle_closes() -> None:
    limits = containment.kill_on_close()
    assert limits.BasicLimitInformation.LimitFlags == 0x2000  # JOB_OBJECT_LIMIT_KILL_ON_JOB_CLOSE, alone
    assert containment.JOB_OBJECT_EXTENDED_LIMIT_INFORMATION == 9


@pytest.mark.skipif(ctypes.sizeof(ctypes.c_void_p) != 8, reason="the layout of 64-bit Windows")
def test_the_job_limits_have_windows_layout() -> None:
    """JOBOBJECT_EXTENDED_LIMIT_INFORMATION as winnt.h lays it out on x64 and arm64."""
    assert ctypes.sizeof(containment.BasicLimits) == 64
    assert containment.BasicLimits.LimitFlags.offset == 16
    assert containment.BasicLimits.Affinity.offset == 48
    assert ctypes.sizeof(containment.IoCounters) == 48
    assert containment.ExtendedLimits.IoInfo.offset == 64
    assert ctypes.sizeof(containment.ExtendedLimits) == 144


MACOS_PS = """\
    1     0     1 Ss
  412     1   412 Ss
 9001   412  9001 S+
 9002  9001  9002 R
 9003  9002  9002 Z
garbage line
"""


def test_macos_processes_are_read_from_ps() -> None:
    assert supervise.parse_ps(MACOS_PS) == [(1, 0, 1, "S"), (412, 1, 412, "S"), (9001, 412, 9001, "S"),
                                            (9002, 9001, 9002, "R"), (9003, 9002, 9002, "Z")]


def test_descendants_are_every_process_below_the_root() -> None:
    table = [Process(pid, ppid, pgid, 1, state) for pid, ppid, pgid, state in supervise.parse_ps(MACOS_PS)]
    assert [p.pid for p in supervise.descendants(412, table)] == [9001, 9002, 9003]
    assert supervise.descendants(9003, table) == []
