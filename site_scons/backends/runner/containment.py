"""Every command the runner (run.py) starts ends with the run, however the run ends: a kill -9
of scons alone or of its whole process group included (docs/decisions.md, "Children die with
the run"). How, per platform (`mechanism`):

- "supervisor" (Linux, macOS, the BSDs): the command runs under supervise.py, whose guard
  process sits outside scons's process group and ends the command's whole tree when scons (or
  its group) is gone;
- "job" (Windows): the command runs in a Job Object that kills every process in it when its
  last handle closes (JOB_OBJECT_LIMIT_KILL_ON_JOB_CLOSE). Only the run holds the handle, so
  the kernel closes it, ending the tree, when scons exits however it exits. The command
  starts suspended and joins the job before it runs, so nothing it starts escapes. A failed
  or interrupted command's job is ended at once, a successful one's when the run ends (a
  Bazel server stays warm for the leg's next command, as with the supervisor);
- "group" (anything else): a process group of its own, killed when the run is interrupted
  (best effort: a kill -9 of scons leaves it running).
"""
from __future__ import annotations

import ctypes
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Mapping, Sequence

from backends.runner import supervise

SUPERVISOR = Path(__file__).with_name("supervise.py")
STOP_WAIT_SECONDS = supervise.GIVE_UP_SECONDS + 10.0

# Windows (winbase.h, winnt.h): the values are the API's.
CREATE_SUSPENDED = 0x00000004
CREATE_NEW_PROCESS_GROUP = 0x00000200
JOB_OBJECT_LIMIT_KILL_ON_JOB_CLOSE = 0x00002000
JOB_OBJECT_EXTENDED_LIMIT_INFORMATION = 9  # the JOBOBJECTINFOCLASS of SetInformationJobObject
PROCESS_TERMINATE, PROCESS_SET_QUOTA, PROCESS_SUSPEND_RESUME = 0x0001, 0x0100, 0x0800


def mechanism(platform: str = sys.platform) -> str:
    if supervise.parent_watch(platform):
        return "supervisor"
    return "job" if platform == "win32" else "group"


def command_line(argv: Sequence[str], platform: str, parent: int) -> list[str]:
    """What is started for `argv`: the supervisor around it where it runs (`parent` the pid it
    watches), else `argv` itself."""
    if mechanism(platform) == "supervisor":
        return [sys.executable, "-I", str(SUPERVISOR), "--parent", str(parent), "--", *argv]
    return list(argv)


def popen_options(platform: str) -> dict[str, object]:
    """Popen's options: the supervisor stays in scons's process group (its watch must receive
    what signals the group: Ctrl-C); a job's command starts suspended, to join the job first."""
    how = mechanism(platform)
    if how == "job":
        return {"creationflags": CREATE_SUSPENDED | CREATE_NEW_PROCESS_GROUP}
    return {"process_group": 0} if how == "group" else {}


def spawn(argv: Sequence[str], *, env: Mapping[str, str], cwd: Path) -> subprocess.Popen[bytes]:
    """Start `argv` so that it and everything it starts end with this run; its output (stdout
    and stderr) is the returned process's stdout."""
    child = subprocess.Popen(command_line(argv, sys.platform, os.getpid()), cwd=cwd, env=dict(env),
                             stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                             **popen_options(sys.platform))  # type: ignore[call-overload]
    if mechanism() == "job":
        _JOBS[child.pid] = _Job.enter(child.pid)
    return child


def finished(child: subprocess.Popen[bytes]) -> None:
    """The command ended (its exit status in `child.returncode`): after a failure, whatever it
    left running ends now (the supervisor's guard does this itself)."""
    job = _JOBS.get(child.pid)
    if job is not None and child.returncode != 0:
        job.terminate()


def stop(child: subprocess.Popen[bytes]) -> None:
    """End the command and its whole tree now (the run was interrupted), and wait for it."""
    how = mechanism()
    try:
        if how == "supervisor":
            child.terminate()  # the watch has the guard end the tree, then exits
        elif how == "job":
            _JOBS[child.pid].terminate()
        else:
            os.killpg(child.pid, signal.SIGKILL)
        child.wait(timeout=STOP_WAIT_SECONDS)
    except (ProcessLookupError, subprocess.TimeoutExpired):
        child.kill()
        child.wait()


# -- Windows: Job Objects -----------------------------------------------------------------------

class BasicLimits(ctypes.Structure):
    """JOBOBJECT_BASIC_LIMIT_INFORMATION."""

    _fields_ = [("PerProcessUserTimeLimit", ctypes.c_int64), ("PerJobUserTimeLimit", ctypes.c_int64),
                ("LimitFlags", ctypes.c_uint32), ("MinimumWorkingSetSize", ctypes.c_size_t),
                ("MaximumWorkingSetSize", ctypes.c_size_t), ("ActiveProcessLimit", ctypes.c_uint32),
                ("Affinity", ctypes.c_size_t), ("PriorityClass", ctypes.c_uint32),
                ("SchedulingClass", ctypes.c_uint32)]


class IoCounters(ctypes.Structure):
    """IO_COUNTERS."""

    _fields_ = [(name, ctypes.c_uint64) for name in ("ReadOperationCount", "WriteOperationCount",
                                                     "OtherOperationCount", "ReadTransferCount",
                                                     "WriteTransferCount", "OtherTransferCount")]


class ExtendedLimits(ctypes.Structure):
    """JOBOBJECT_EXTENDED_LIMIT_INFORMATION: 144 bytes on 64-bit Windows."""

    _fields_ = [("BasicLimitInformation", BasicLimits), ("IoInfo", IoCounters),
                ("ProcessMemoryLimit", ctypes.c_size_t), ("JobMemoryLimit", ctypes.c_size_t),
                ("PeakProcessMemoryUsed", ctypes.c_size_t), ("PeakJobMemoryUsed", ctypes.c_size_t)]


def kill_on_close() -> ExtendedLimits:
    """The only limit a command's job has: its processes end when its last handle closes."""
    limits = ExtendedLimits()
    limits.BasicLimitInformation.LimitFlags = JOB_OBJECT_LIMIT_KILL_ON_JOB_CLOSE
    return limits


class _Job:
    """A Job Object handle of this process's (never inherited: no child can keep it open)."""

    def __init__(self, handle: int) -> None:
        self.handle = handle

    @classmethod
    def enter(cls, pid: int) -> _Job:
        """A new kill-on-close job holding the suspended process `pid`, which then runs."""
        kernel32 = _kernel32()
        process = kernel32.OpenProcess(PROCESS_SET_QUOTA | PROCESS_TERMINATE | PROCESS_SUSPEND_RESUME, False, pid)
        if not process:
            raise ctypes.WinError(ctypes.get_last_error())  # type: ignore[attr-defined,unused-ignore]
        try:
            job = kernel32.CreateJobObjectW(None, None)
            limits = kill_on_close()
            if not job or not kernel32.SetInformationJobObject(job, JOB_OBJECT_EXTENDED_LIMIT_INFORMATION,
                                                               ctypes.byref(limits), ctypes.sizeof(limits)) \
                    or not kernel32.AssignProcessToJobObject(job, process):
                error = ctypes.WinError(ctypes.get_last_error())  # type: ignore[attr-defined,unused-ignore]
                kernel32.TerminateProcess(process, 1)  # never a command that runs outside its job
                raise error
            resume = ctypes.WinDLL("ntdll").NtResumeProcess  # type: ignore[attr-defined,unused-ignore]
            resume.argtypes = [ctypes.c_void_p]
            if resume(process) != 0:
                kernel32.TerminateJobObject(job, 1)
                raise OSError(f"cannot resume process {pid} in its job")
            return cls(job)
        finally:
            kernel32.CloseHandle(process)

    def terminate(self) -> None:
        _kernel32().TerminateJobObject(self.handle, 1)


# By command pid. Process-wide on purpose, not run state: each is the OS handle of a kill-on-close
# job, held until this process exits; the kernel then closes it, which ends whatever a command
# left running even when SCons itself is killed (tests/unit/test_module_state.py allows it).
_JOBS: dict[int, _Job] = {}


def _kernel32() -> ctypes.CDLL:
    kernel32 = ctypes.WinDLL("kernel32", use_last_error=True)  # type: ignore[attr-defined,unused-ignore]
    handle, dword, pointer = ctypes.c_void_p, ctypes.c_uint32, ctypes.c_void_p
    kernel32.OpenProcess.restype, kernel32.OpenProcess.argtypes = handle, [dword, ctypes.c_int, dword]
    kernel32.CreateJobObjectW.restype, kernel32.CreateJobObjectW.argtypes = handle, [pointer, pointer]
    kernel32.SetInformationJobObject.argtypes = [handle, ctypes.c_int, pointer, dword]
    kernel32.AssignProcessToJobObject.argtypes = [handle, handle]
    kernel32.TerminateJobObject.argtypes = [handle, ctypes.c_uint]
    kernel32.TerminateProcess.argtypes = [handle, ctypes.c_uint]
    kernel32.CloseHandle.argtypes = [handle]
    return kernel32
