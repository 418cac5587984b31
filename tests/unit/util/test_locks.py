"""The one file lock: exclusion across threads and processes, holder names, refusal, release on death."""
from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from backends.util.locks import FileLock, LockBusy

SITE_SCONS = Path(__file__).resolve().parents[3] / "site_scons"
HOLD = """
import sys, time
sys.path.insert(0, {site!r})
from backends.util.locks import FileLock
lock = FileLock(__import__("pathlib").Path({path!r}))
lock.acquire()
print("held", flush=True)
time.sleep(60)
"""


def _holder(path: Path) -> subprocess.Popen[str]:
    child = subprocess.Popen([sys.executable, "-c", HOLD.format(site=str(SITE_SCONS), path=str(path))],
                             stdout=subprocess.PIPE, text=True)
    assert child.stdout is not None and child.stdout.readline().strip() == "held"
    return child


def test_another_process_holding_it_is_named_and_refused(tmp_path: Path) -> None:
    path = tmp_path / "tree.lock"
    child = _holder(path)
    try:
        lock = FileLock(path)
        with pytest.raises(LockBusy) as busy:
            lock.acquire(wait=False)
        assert f"pid {child.pid}" in busy.value.holder and "-c" in busy.value.holder
        waited: list[str] = []
        with pytest.raises(LockBusy):
            lock.acquire(on_wait=waited.append, timeout=0.3)
        assert waited and f"pid {child.pid}" in waited[0]
    finally:
        child.kill()  # SIGKILL: the OS releases the lock with the process
        child.wait()
    lock = FileLock(path)
    lock.acquire(wait=False)
    assert lock.held and f"pid {os.getpid()}" in lock.holder()
    lock.release()


def test_threads_of_one_process_exclude_each_other(tmp_path: Path) -> None:
    path = tmp_path / "slot.lock"
    inside, overlaps = [0], []

    def work() -> None:
        with FileLock(path, record_holder=False):
            inside[0] += 1
            overlaps.append(inside[0])
            time.sleep(0.02)
            inside[0] -= 1

    threads = [threading.Thread(target=work) for _ in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert overlaps == [1] * 6


def test_a_lock_is_not_taken_twice_by_one_object(tmp_path: Path) -> None:
    lock = FileLock(tmp_path / "x.lock")
    lock.acquire()
    with pytest.raises(RuntimeError, match="already held"):
        lock.try_acquire()
    lock.release()
    lock.release()  # releasing twice is harmless
