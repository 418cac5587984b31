"""Content digests of files, with a cache keyed by the file's full identity.

Deciding whether a step is up to date means knowing the sha256 of its inputs and outputs,
some of them hundreds of MB (wheels, archives). Hashing them on every no-op run would cost
seconds, so a digest is remembered together with the file's identity: device, inode, size,
and the nanosecond mtime and ctime. A replaced file has another inode or ctime, an edited
one another ctime (which no tool can set back, unlike the mtime `touch -r` restores), so a
remembered digest is only reused for the very same, untouched file. As git does for its
index, an entry recorded too soon after the file's last change is not trusted: timestamps
are coarse, and a write in the same tick could keep them. Too soon is 2 s where the
filesystem keeps whole seconds, 100 ms where it keeps sub-second times (its tick is a few
ms): a build's outputs, hashed as it ends, are trusted by the next run without a re-read.

A hard link shares its inode with the file it links, so a settled digest is also found by
identity, whatever path it was taken under: a stage hard-linked from an extraction costs no
second read. Linking changes the inode's ctime, so without that index every file of an
extracted tree would be hashed again after the first stage.

A tree (an extraction, a stage) has a digest too: one hash over every entry's relative path,
kind, executable bit and content (a symlink's target), each file's content from the cache.

The cache lives in one JSON file (build/digests.json), loaded once and saved at exit; a
lost save (a killed run) only costs re-hashing.
"""
from __future__ import annotations

import hashlib
import json
import os
import stat
import threading
import time
from pathlib import Path

from backends.util.errors import BackendsError
from backends.util.files import atomic_write_text, sha256_file

RACY_NS = 2_000_000_000  # where the filesystem keeps whole seconds (FAT's 2 s, ext3, HFS+)
# Where it keeps sub-second times, its clock ticks in milliseconds (a kernel jiffy, NTFS's
# 100 ns, exFAT's 10 ms): a digest taken this long after the change is past the change's tick.
FINE_RACY_NS = 100_000_000
EXECUTABLE = "111"  # the executable bits of a tree entry, as its digest line writes them


def _identity(st: os.stat_result) -> list[int]:
    return [st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns]


class FileVanished(BackendsError, RuntimeError):
    """A file that was there to be hashed is gone (or is no longer a regular file)."""


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
        self._by_identity = {self._identity_key(identity): entry for entry in self._entries.values()
                             if isinstance(entry, dict) and isinstance(identity := entry.get("identity"), list)}

    @staticmethod
    def _identity_key(identity: list[int]) -> tuple[int, ...]:
        return tuple(identity)

    def digest(self, path: Path) -> str | None:
        """The sha256 of `path`, or None when it does not exist (or is not a file)."""
        key = os.path.abspath(path)
        try:
            st = os.stat(key)
        except OSError:
            return None
        if not stat.S_ISREG(st.st_mode):
            return None
        return self._file_digest(key, st)

    def _file_digest(self, key: str, st: os.stat_result) -> str:
        """The sha256 of the regular file at absolute `key`, whose stat is `st`."""
        identity = _identity(st)
        with self._lock:
            entry = self._entries.get(key)
            if not entry or entry.get("identity") != identity:
                entry = self._by_identity.get(self._identity_key(identity))  # a hard link of a hashed file
        if entry and entry.get("identity") == identity and self._settled(entry, st):
            if self._entries.get(key) is not entry:
                with self._lock:
                    self._entries[key] = entry
                    self._dirty = True
            return str(entry["sha256"])
        started = time.time_ns()
        digest = sha256_file(key)
        after = os.stat(key)
        if _identity(after) != identity:  # written while we read it: do not remember
            return digest
        with self._lock:
            entry = {"identity": identity, "sha256": digest, "hashed_at": started}
            self._entries[key] = entry
            self._by_identity[self._identity_key(identity)] = entry
            self._dirty = True
        return digest

    def require(self, path: Path) -> str:
        """The sha256 of `path`, which must be a file: raises FileVanished when it is not (a
        key or record that took a missing file for content would name none)."""
        found = self.digest(path)
        if found is None:
            raise FileVanished(f"{path} is no longer a file: it was removed or replaced while this run read it")
        return found

    def tree_digest(self, root: Path) -> str | None:
        """One digest of the tree below `root`, or None when it is not a directory (or holds
        what no package holds: a socket, a fifo, a device)."""
        if not root.is_dir() or root.is_symlink():
            return None
        lines: list[tuple[str, str]] = []
        try:
            self._tree_lines(os.path.abspath(root), "", lines)
        except (OSError, ValueError):
            return None
        lines.sort(key=lambda line: line[0])
        digest = hashlib.sha256()
        for _, line in lines:
            digest.update(line.encode())
        return digest.hexdigest()

    def _tree_lines(self, directory: str, prefix: str, out: list[tuple[str, str]]) -> None:
        """Each entry's line of the tree digest, keyed by its relative path: one scan, one
        lstat per entry (a null build checks every stage and extraction this way; the
        entries are those of files.list_tree, the lines what tree_digest hashed of them)."""
        with os.scandir(directory) as scan:
            children = list(scan)
        for child in children:
            relative = prefix + child.name
            st = child.stat(follow_symlinks=False)
            if stat.S_ISLNK(st.st_mode):
                out.append((relative, f"symlink\0{relative}\0{EXECUTABLE}\0{os.readlink(child.path)}\n"))
            elif stat.S_ISDIR(st.st_mode):
                out.append((relative, f"dir\0{relative}\0{EXECUTABLE}\0\n"))
                self._tree_lines(child.path, relative + "/", out)
            elif stat.S_ISREG(st.st_mode):
                executable = EXECUTABLE if st.st_mode & 0o111 else "0"
                out.append((relative, f"file\0{relative}\0{executable}\0{self._file_digest(child.path, st)}\n"))
            else:
                raise ValueError(f"{child.path}: not a regular file, directory or symlink")

    @staticmethod
    def _settled(entry: dict[str, object], st: os.stat_result) -> bool:
        hashed_at = entry.get("hashed_at", 0)
        whole_seconds = st.st_mtime_ns % 1_000_000_000 == 0 and st.st_ctime_ns % 1_000_000_000 == 0
        window = RACY_NS if whole_seconds else min(RACY_NS, FINE_RACY_NS)
        return isinstance(hashed_at, int) and max(st.st_mtime_ns, st.st_ctime_ns) + window < hashed_at

    def save(self) -> None:
        if self.path is None or not self._dirty:
            return
        with self._lock:
            live = {k: v for k, v in self._entries.items() if os.path.exists(k)}
            text = json.dumps(live, sort_keys=True, separators=(",", ":"))
            self._dirty = False
        self.path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_text(self.path, text)
