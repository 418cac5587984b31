"""Content digests of files, with a cache keyed by the file's full identity.

Deciding whether a step is up to date means knowing the sha256 of its inputs and outputs,
some of them hundreds of MB (wheels, archives). Hashing them on every no-op run would cost
seconds, so a digest is remembered together with the file's identity: device, inode, size,
and the nanosecond mtime and ctime. A replaced file has another inode or ctime, an edited
one another ctime (which no tool can set back, unlike the mtime `touch -r` restores), so a
remembered digest is only reused for the very same, untouched file. As git does for its
index, an entry recorded less than RACY_NS after the file's last change is not trusted:
timestamps are coarse, and a write in the same tick could keep them.

The cache lives in one JSON file (build/digests.json), loaded once and saved at exit; a
lost save (a killed run) only costs re-hashing.
"""
from __future__ import annotations

import json
import os
import stat
import threading
import time
from pathlib import Path

from .steps.files import atomic_write_text, sha256_file

RACY_NS = 2_000_000_000


def _identity(st: os.stat_result) -> list[int]:
    return [st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns]


class DigestCache:
    def __init__(self, path: Path | None) -> None:
        self.path = path
        self._entries: dict[str, dict[str, object]] = {}
        self._dirty = False
        self._lock = threading.Lock()
        if path is not None and path.is_file():
            try:
                loaded = json.loads(path.read_text(encoding="utf-8"))
                self._entries = loaded if isinstance(loaded, dict) else {}
            except (OSError, ValueError):
                self._entries = {}

    def digest(self, path: Path) -> str | None:
        """The sha256 of `path`, or None when it does not exist (or is not a file)."""
        key = os.path.abspath(path)
        try:
            st = os.stat(key)
        except OSError:
            return None
        if not stat.S_ISREG(st.st_mode):
            return None
        identity = _identity(st)
        with self._lock:
            entry = self._entries.get(key)
        if entry and entry.get("identity") == identity and self._settled(entry, st):
            return str(entry["sha256"])
        started = time.time_ns()
        digest = sha256_file(key)
        after = os.stat(key)
        if _identity(after) != identity:  # written while we read it: do not remember
            return digest
        with self._lock:
            self._entries[key] = {"identity": identity, "sha256": digest, "hashed_at": started}
            self._dirty = True
        return digest

    @staticmethod
    def _settled(entry: dict[str, object], st: os.stat_result) -> bool:
        hashed_at = int(entry.get("hashed_at", 0))  # type: ignore[arg-type]
        return max(st.st_mtime_ns, st.st_ctime_ns) + RACY_NS < hashed_at

    def save(self) -> None:
        if self.path is None or not self._dirty:
            return
        with self._lock:
            live = {k: v for k, v in self._entries.items() if os.path.exists(k)}
            text = json.dumps(live, sort_keys=True, separators=(",", ":"))
            self._dirty = False
        self.path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_text(self.path, text)
