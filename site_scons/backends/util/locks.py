"""The one file lock every part of the project uses (the build tree, download origins,
pin writes, heavy-build slots).

An OS lock on an open file: it is released when the holder exits, however it exits
(kill -9 included), and it excludes threads of one process as well as other processes.
The holder writes its pid and command line into the lock file, so a waiter can say whom
it waits for. POSIX uses `flock`; Windows `msvcrt.locking`, polled (its blocking mode
gives up after ~10 s).
"""
from __future__ import annotations

import os
import sys
import time
from pathlib import Path
from typing import Callable

from backends.util.errors import BackendsError

POLL_SECONDS = 0.1

if sys.platform.startswith("win"):
    import msvcrt

    def _try_lock(fd: int) -> bool:
        try:
            os.lseek(fd, 0, os.SEEK_SET)
            msvcrt.locking(fd, msvcrt.LK_NBLCK, 1)
            return True
        except OSError:
            return False

    def _unlock(fd: int) -> None:
        os.lseek(fd, 0, os.SEEK_SET)
        msvcrt.locking(fd, msvcrt.LK_UNLCK, 1)
else:
    import fcntl

    def _try_lock(fd: int) -> bool:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return True
        except BlockingIOError:
            return False

    def _unlock(fd: int) -> None:
        fcntl.flock(fd, fcntl.LOCK_UN)


class LockBusy(BackendsError, RuntimeError):
    """The lock is held by someone else and the caller would not wait."""

    def __init__(self, path: Path, holder: str) -> None:
        self.path = path
        self.holder = holder
        super().__init__(f"{path} is held by {holder}")


def describe_self() -> str:
    return f"pid {os.getpid()} ({' '.join(sys.argv) or sys.executable})"


class FileLock:
    """`with FileLock(path):` holds `path` exclusively; see the module docstring.

    `record_holder=False` leaves the file's content alone (slot files many processes
    poll), otherwise the holder's description is written into it on acquisition.
    """

    def __init__(self, path: Path, *, record_holder: bool = True) -> None:
        self.path = Path(path)
        self.record_holder = record_holder
        self._fd: int | None = None

    @property
    def held(self) -> bool:
        return self._fd is not None

    def holder(self) -> str:
        """Who holds (or last held) the lock, as its holder recorded it."""
        try:
            text = self.path.read_text(encoding="utf-8", errors="replace").strip()
        except OSError:
            text = ""
        return text or "another process"

    def try_acquire(self) -> bool:
        if self._fd is not None:
            raise RuntimeError(f"{self.path}: already held by this FileLock")
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o666)
        if not _try_lock(fd):
            os.close(fd)
            return False
        self._fd = fd
        if self.record_holder:
            self._write_holder()
        return True

    def acquire(self, *, wait: bool = True, on_wait: Callable[[str], None] | None = None,
                timeout: float | None = None) -> None:
        """Take the lock. Busy: `wait=False` raises LockBusy naming the holder; otherwise
        `on_wait(holder)` is called once and the call blocks (until `timeout`, then LockBusy)."""
        if self.try_acquire():
            return
        holder = self.holder()
        if not wait:
            raise LockBusy(self.path, holder)
        if on_wait is not None:
            on_wait(holder)
        deadline = None if timeout is None else time.monotonic() + timeout
        while not self.try_acquire():
            if deadline is not None and time.monotonic() > deadline:
                raise LockBusy(self.path, self.holder())
            time.sleep(POLL_SECONDS)

    def release(self) -> None:
        if self._fd is None:
            return
        try:
            _unlock(self._fd)
        finally:
            os.close(self._fd)
            self._fd = None

    def _write_holder(self) -> None:
        assert self._fd is not None
        data = (describe_self() + "\n").encode("utf-8", "replace")
        # (On Windows the locked byte also blocks readers: waiters then name "another process".)
        os.lseek(self._fd, 0, os.SEEK_SET)
        os.write(self._fd, data)
        os.ftruncate(self._fd, len(data))

    def __enter__(self) -> "FileLock":
        self.acquire()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.release()
