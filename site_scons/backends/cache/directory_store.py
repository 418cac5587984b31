"""A binary cache in a directory: `<dir>/<key>/<archive>[.sha256|.json|.sig]`, written into a
temp beside the entry and renamed, so concurrent writers and readers are safe; a writer sweeps
the temps killed writers left, a reader evicts an entry that is not exactly its regular files."""
from __future__ import annotations

import errno
import os
import re
import shutil
import stat
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Mapping, Sequence

from backends.cache.store import (
    CacheError,
    ReadOnly,
    SignedEntryKept,
    entry_cap,
    entry_files,
    entry_names,
    is_signed,
    signed_entry_kept,
    warn,
)
from backends.cache.trust import SIGNATURE_SUFFIX
from backends.util import http
from backends.util.files import CHUNK_SIZE, remove_path, sha256_file
from backends.util.locks import FileLock


def _copy_within(source: Path, target: Path, cap: http.Cap) -> None:
    """Copy `source`, refused (http.TooLarge) past `cap`: its size before, and the bytes as they
    are copied (a file that grows meanwhile)."""
    size = source.stat().st_size
    if size > cap.size:
        raise http.TooLarge(f"is {size:,} bytes, more than {cap.what} ({cap.size:,})")
    copied = 0
    with open(source, "rb") as reader, open(target, "wb") as writer:
        while chunk := reader.read(CHUNK_SIZE):
            copied += len(chunk)
            if copied > cap.size:
                raise http.TooLarge(f"grew past {cap.what} ({cap.size:,} bytes) while it was read")
            writer.write(chunk)



# A writer's temps, `.<key>.tmp-<pid>-<thread>` (the entry being written) and
# `.<key>.old-<pid>-<thread>` (the one it replaces), exist only while it holds `.<key>.lock`.
_STORE_TEMP = re.compile(r"\.(?P<key>.+)\.(?:tmp|old)-\d+(?:-\d+)?")
STALE_TEMP_SECONDS = 3600.0  # a temp this old whose key lock is free was left by a killed writer


def _key_lock(root: Path, key: str) -> FileLock:
    return FileLock(root / f".{key}.lock", record_holder=False)


def _aside(root: Path, key: str, kind: str) -> Path:
    return root / f".{key}.{kind}-{os.getpid()}-{threading.get_ident()}"


@dataclass
class DirectoryStore:
    root: Path
    _swept: bool = field(default=False, repr=False)

    @property
    def location(self) -> str:
        return str(self.root)

    def fetch(self, key: str, archive: str, dest: Path) -> bool:
        """Copy the entry into `dest`, each file within its cap (entry_cap). An entry that is not
        exactly its files, each a regular file, is evicted (when the store may be written) and
        reported as a CacheError."""
        entry = self.root / key
        try:
            problem = _entry_problem(entry, archive)
        except FileNotFoundError:
            return False  # none, or a writer is swapping it this instant
        if problem:
            raise CacheError(f"{self.location}: the entry {key} {self._evict(key, archive, problem)}; not used")
        dest.mkdir(parents=True, exist_ok=True)
        name = archive
        try:
            # Copies, the manifest first: nothing downstream may share an inode with the cache.
            for name in _present(entry, archive):
                _copy_within(entry / name, dest / name, entry_cap(name, archive, dest / (archive + ".json")))
        except http.TooLarge as error:
            raise CacheError(f"{self.location}: the entry {key}: {name} {error}; not used") from None
        except OSError as error:
            raise CacheError(f"{self.location}: cannot read the entry {key}: {error.strerror or error}; "
                             "not used") from None
        return True

    def _evict(self, key: str, archive: str, problem: str) -> str:
        """Remove the entry of `key` (under its lock, judged again there); says what was done.
        It is renamed aside first, so a reader sees the whole entry or none."""
        lock = _key_lock(self.root, key)
        try:
            if not lock.try_acquire():
                return f"{problem}; a writer is replacing it now"
        except OSError as error:
            return f"{problem} (not evicted: the lock cannot be taken: {error.strerror or error})"
        try:
            if _entry_problem(self.root / key, archive) is None:
                return "was replaced while it was read"
            aside = _aside(self.root, key, "old")
            os.rename(self.root / key, aside)
            remove_path(aside)
            return f"{problem}: evicted"
        except FileNotFoundError:
            return f"{problem}: evicted meanwhile"
        except OSError as error:
            return f"{problem} (not evicted: {error.strerror or error})"
        finally:
            lock.release()

    def put(self, key: str, files: Sequence[Path]) -> None:
        """Write the entry into a temp beside it, then rename it into place: readers see the
        whole entry or none. Writers of one key take turns (a lock file); an entry already
        there with the same files and bytes stays, any other (a corrupt entry, rejected when
        read) is swapped for this one. The first write of a run sweeps what killed writers left."""
        entry = self.root / key
        temp, old = _aside(self.root, key, "tmp"), _aside(self.root, key, "old")
        try:
            self.root.mkdir(parents=True, exist_ok=True)
            self._sweep_once()
            with _key_lock(self.root, key):
                try:
                    if _holds(entry, files):
                        return
                    if not is_signed(files) and any(name.endswith(SIGNATURE_SUFFIX) for name in _names_in(entry)):
                        raise SignedEntryKept(signed_entry_kept(str(self.root), key))
                    temp.mkdir()
                    for path in files:
                        shutil.copyfile(path, temp / path.name)
                    if os.path.lexists(entry):
                        os.rename(entry, old)
                    os.rename(temp, entry)
                finally:  # under the lock: a sweeper never races this writer's own cleanup
                    remove_path(temp)
                    remove_path(old)
        except OSError as error:
            kind = ReadOnly if error.errno in (errno.EACCES, errno.EPERM, errno.EROFS) else CacheError
            raise kind(f"cannot write {entry}: {error.strerror or error}") from None

    def holds(self, key: str, archive: str, sizes: Mapping[str, int]) -> bool | None:
        try:
            found = [os.stat(self.root / key / name, follow_symlinks=False) for name in sizes]
        except FileNotFoundError:
            return False
        except OSError:
            return None
        return all(stat.S_ISREG(st.st_mode) and st.st_size == size for st, size in zip(found, sizes.values()))

    def _sweep_once(self) -> None:
        if self._swept:
            return
        self._swept = True
        removed = sweep_store(self.root)
        if removed:
            warn(f"{self.location}: removed {len(removed)} temp(s) older than {STALE_TEMP_SECONDS / 3600:g} h "
                 f"left by interrupted writers: {', '.join(path.name for path in removed)}")


def sweep_store(root: Path, older_than: float | None = None) -> list[Path]:
    """Remove the temps killed writers left in a shared directory store: `.<key>.tmp-*` and
    `.<key>.old-*` older than `older_than` (STALE_TEMP_SECONDS) whose key lock is free. Safe
    while other writers run: a live writer holds its key's lock as long as its temps exist,
    and a young temp is left alone even where locks do not reach (another host's writer on a
    file system without shared locks). Returns what was removed."""
    limit = time.time() - (STALE_TEMP_SECONDS if older_than is None else older_than)
    try:
        items = list(os.scandir(root))
    except OSError:
        return []
    removed = []
    for item in items:
        match = _STORE_TEMP.fullmatch(item.name)
        try:
            if not match or item.stat(follow_symlinks=False).st_mtime > limit:
                continue
            lock = _key_lock(root, match["key"])
            if not lock.try_acquire():
                continue
        except OSError:  # gone meanwhile, or a read-only store: nothing to sweep
            continue
        try:
            remove_path(Path(item.path))
        finally:
            lock.release()
        if not os.path.lexists(item.path):
            removed.append(Path(item.path))
    return removed


def _present(entry: Path, archive: str) -> list[str]:
    required = entry_names(archive)
    return [name for name in entry_files(archive) if name in required or (entry / name).is_file()]


def _entry_problem(entry: Path, archive: str) -> str | None:
    """Why the directory entry `entry` is not exactly its files, each a regular file (None: it
    is). FileNotFoundError when there is none."""
    mode = os.lstat(entry).st_mode
    if not stat.S_ISDIR(mode):
        return f"is {_kind(mode)}, not a directory"
    try:
        items = {item.name: item.stat(follow_symlinks=False).st_mode for item in os.scandir(entry)}
    except OSError as error:
        if error.errno == errno.ENOENT:
            raise
        return f"cannot be listed ({error.strerror or error})"
    allowed = entry_files(archive)
    problems = [f"{name} is {_kind(mode)}" for name, mode in sorted(items.items())
                if name in allowed and not stat.S_ISREG(mode)]
    problems += [f"holds {name} ({_kind(mode)}), none of its files" for name, mode in sorted(items.items())
                 if name not in allowed]
    problems += [f"lacks {name}" for name in entry_names(archive) if name not in items]
    return "; ".join(problems) or None


def _kind(mode: int) -> str:
    kinds = ((stat.S_ISREG, "a regular file"), (stat.S_ISDIR, "a directory"), (stat.S_ISLNK, "a symlink"),
             (stat.S_ISFIFO, "a fifo"), (stat.S_ISSOCK, "a socket"))
    return next((name for test, name in kinds if test(mode)), "a device")


def _names_in(entry: Path) -> list[str]:
    try:
        return os.listdir(entry)
    except OSError:
        return []


def _holds(entry: Path, files: Sequence[Path]) -> bool:
    """Whether the entry is exactly `files`, regular files with the same bytes."""
    try:
        items = {item.name: item.is_file(follow_symlinks=False) for item in os.scandir(entry)}
    except OSError:  # none, or not a directory
        return False
    if items != {path.name: True for path in files}:
        return False
    return all(_same(path, entry / path.name) for path in files)


def _same(ours: Path, theirs: Path) -> bool:
    if theirs.stat().st_size != ours.stat().st_size:
        return False
    return sha256_file(theirs) == sha256_file(ours)
