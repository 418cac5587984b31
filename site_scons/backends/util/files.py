"""File helpers shared by the steps: hashing, atomic writes, tree listings, linking.

Every step writes its outputs through `atomic_write_*` (or its own temp-then-rename),
so an interrupted build never leaves a half-written file under its final name.
"""
from __future__ import annotations

import errno
import hashlib
import json
import ntpath
import os
import shutil
import stat
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Literal

from backends.util.errors import environment

CHUNK_SIZE = 1 << 20

EntryKind = Literal["file", "dir", "symlink"]

# os.link fails with these when hard links are impossible here (another device, a
# filesystem without hard links, a sandbox, too many links): copying is then correct.
_LINK_FALLBACK_ERRNOS = frozenset(
    code
    for code in (
        errno.EXDEV,
        errno.EPERM,
        errno.EMLINK,
        getattr(errno, "ENOTSUP", None),
        getattr(errno, "EOPNOTSUPP", None),
    )
    if code is not None
)


@dataclass(frozen=True)
class FileEntry:
    """One entry of a directory tree, as listed by `list_tree`."""

    path: str  # posix, relative to the listed root
    kind: EntryKind
    size: int  # bytes for files, length of the target for symlinks, 0 for dirs
    mode: int  # normalised: 0o755 / 0o644 files, 0o755 dirs, 0o777 symlinks
    sha256: str | None = None  # files only
    target: str | None = None  # symlinks only


# The digests a build run has taken, by file identity (remember_run_digests); None: not kept.
_RUN_DIGESTS: dict[tuple[int, ...], str] | None = None


def remember_run_digests(enabled: bool = True) -> None:
    """From now on, in this process, a file whose identity (device, inode, size, mtime and
    ctime in ns) is unchanged since this process hashed it is not read again: a build run
    reads each byte of its 130 MB archive once, not once per check (docs/decisions.md, "Each
    byte hashed once per run"). Its own outputs are written under temporary names and renamed,
    so a file it rewrites is a new identity. Off by default: a long-lived process (a test
    that edits a file and checks it again within a clock tick) keeps the plain reading."""
    global _RUN_DIGESTS
    _RUN_DIGESTS = {} if enabled else None


def _identity(st: os.stat_result) -> tuple[int, ...]:
    return st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns


def sha256_file(path: str | os.PathLike[str]) -> str:
    """The hex sha256 of a file, read in 1 MiB chunks (once per run, remember_run_digests)."""
    memo = _RUN_DIGESTS
    with open(path, "rb") as stream:
        before = _identity(os.fstat(stream.fileno())) if memo is not None else ()
        if before in (memo or {}):
            return memo[before]  # type: ignore[index]
        digest = hashlib.sha256()
        while chunk := stream.read(CHUNK_SIZE):
            digest.update(chunk)
        if memo is not None and _identity(os.fstat(stream.fileno())) == before:
            memo[before] = digest.hexdigest()
    return digest.hexdigest()


def _run_digest_of(path: str | os.PathLike[str]) -> str | None:
    if not _RUN_DIGESTS:
        return None
    try:
        return _RUN_DIGESTS.get(_identity(os.stat(path)))
    except OSError:
        return None


def remember_digest(path: str | os.PathLike[str], sha256: str) -> None:
    """`path`'s sha256, taken by the pass that wrote or read all of its bytes: a later
    sha256_file of the same, unchanged file in this run returns it without reading."""
    if _RUN_DIGESTS is not None:
        _RUN_DIGESTS[_identity(os.stat(path))] = sha256


WINDOWS = os.name == "nt"
_EXTENDED = "\\\\?\\"  # the extended-length prefix, backslash backslash ? backslash


def extended_length(path: str | os.PathLike[str], windows: bool = WINDOWS) -> str:
    r"""`path` as Windows' file APIs take it past MAX_PATH (260 characters): absolute, with
    the `\\?\` prefix (`\\?\UNC\server\share\...` for a network path), which also turns off
    their own normalisation, so it is normalised here. Elsewhere, or already so prefixed,
    the path as it is. Python reaches long paths without it only where the registry's
    LongPathsEnabled is set, which a runner need not have."""
    text = os.fspath(path)
    if not windows or text.startswith(_EXTENDED):
        return text
    text = ntpath.normpath(ntpath.abspath(text))
    if text.startswith("\\\\"):
        return _EXTENDED + "UNC\\" + text[2:]
    return _EXTENDED + text


def temp_path_for(path: str | os.PathLike[str]) -> Path:
    """The sibling temp name an atomic writer uses before renaming onto `path`."""
    return Path(f"{os.fspath(path)}.tmp-{os.getpid()}")


def atomic_write_bytes(path: str | os.PathLike[str], data: bytes, fsync: bool = False,
                       mode: int | None = None) -> None:
    """Write `data` to a temp file next to `path`, then rename it onto `path`; with `mode`,
    the file has it whatever the umask.

    No fsync unless asked: the guarantee build/ needs is against killed builds, not power
    loss; dist/ asks for it.
    """
    final = Path(path)
    temp = temp_path_for(final)
    try:
        with environment(final), open(temp, "wb") as stream:
            if mode is not None:
                os.chmod(temp, mode)
            stream.write(data)
            if fsync:
                stream.flush()
                os.fsync(stream.fileno())
        with environment(final):
            os.replace(temp, final)
    except BaseException:
        temp.unlink(missing_ok=True)
        raise


def atomic_write_text(path: str | os.PathLike[str], text: str) -> None:
    """`atomic_write_bytes` for UTF-8 text, newlines written as given."""
    atomic_write_bytes(path, text.encode("utf-8"))


def canonical_json(obj: Any) -> str:
    """The project's one JSON spelling: sorted keys, indent 2, trailing newline."""
    return json.dumps(obj, sort_keys=True, indent=2, ensure_ascii=False) + "\n"


def write_json(path: str | os.PathLike[str], obj: Any) -> None:
    """Write `obj` as canonical JSON, atomically."""
    atomic_write_text(path, canonical_json(obj))


def normalised_mode(st_mode: int) -> int:
    """0o755 for directories and files with any exec bit, 0o644 for other files."""
    if stat.S_ISDIR(st_mode) or st_mode & 0o111:
        return 0o755
    return 0o644


def list_tree(root: str | os.PathLike[str], *, with_hashes: bool = True) -> list[FileEntry]:
    """Every entry below `root` (not `root` itself), sorted by path, symlinks not followed.

    `with_hashes=False` skips the sha256 of files, for callers that only need the shape.
    Raises ValueError on sockets, fifos and devices: nothing we package should hold one.
    """
    root_path = Path(root)
    entries: list[FileEntry] = []
    _collect_entries(root_path, "", with_hashes, entries)
    entries.sort(key=lambda entry: entry.path)
    return entries


def _collect_entries(directory: Path, prefix: str, with_hashes: bool, out: list[FileEntry]) -> None:
    with os.scandir(directory) as scan:
        children = list(scan)
    for child in children:
        relative = prefix + child.name
        st = child.stat(follow_symlinks=False)
        if stat.S_ISLNK(st.st_mode):
            target = os.readlink(child.path)
            out.append(FileEntry(relative, "symlink", len(os.fsencode(target)), 0o777, None, target))
        elif stat.S_ISDIR(st.st_mode):
            out.append(FileEntry(relative, "dir", 0, 0o755))
            _collect_entries(Path(child.path), relative + "/", with_hashes, out)
        elif stat.S_ISREG(st.st_mode):
            digest = sha256_file(child.path) if with_hashes else None
            out.append(FileEntry(relative, "file", st.st_size, normalised_mode(st.st_mode), digest))
        else:
            raise ValueError(
                f"{child.path}: unsupported file type (not a regular file, directory or "
                f"symlink); remove it from the tree before listing or packaging it"
            )


def hardlink_or_copy(src: str | os.PathLike[str], dst: str | os.PathLike[str]) -> None:
    """Make `dst` (which must not exist) a hard link to `src`, or a copy where linking fails.

    A symlink `src` is recreated as a symlink with the same target, never followed.
    """
    with environment(dst):
        if os.path.islink(src):
            os.symlink(os.readlink(src), dst)
            return
        known = _run_digest_of(src)
        try:
            os.link(src, dst)
        except OSError as error:
            if error.errno not in _LINK_FALLBACK_ERRNOS:
                raise
            shutil.copy2(src, dst, follow_symlinks=False)
            return
    if known:  # linking moved the inode's ctime, not its bytes
        remember_digest(dst, known)


def link_into_place(src: str | os.PathLike[str], dst: str | os.PathLike[str]) -> None:
    """`dst` replaced in one step by a hard link to `src` (a copy where linking fails): a reader
    never sees it missing or partly written, and two writers at once (threads of one run
    included) each use a temp name of their own."""
    temp = Path(f"{os.fspath(dst)}.tmp-{os.getpid()}-{threading.get_ident()}")
    with environment(dst):
        Path(dst).parent.mkdir(parents=True, exist_ok=True)
        temp.unlink(missing_ok=True)
        hardlink_or_copy(src, temp)
        os.replace(temp, dst)


def mirror_tree(origin: str | os.PathLike[str], dest: str | os.PathLike[str],
                copy: Callable[[str, str], None], windows: bool = WINDOWS) -> None:
    """Recreate `origin`'s directories under `dest` and hand every file and symlink (one to a
    directory too: never followed) to `copy(src, dst)`. On Windows in extended-length form:
    PyTorch's tree has paths past MAX_PATH."""
    source, target = extended_length(origin, windows), extended_length(dest, windows)
    for root, dirs, files in os.walk(source):
        here = target + root[len(source):]
        with environment(here):
            os.makedirs(here, exist_ok=True)
        for name in sorted(dirs):
            if os.path.islink(os.path.join(root, name)):
                copy(os.path.join(root, name), os.path.join(here, name))
        for name in sorted(files):
            copy(os.path.join(root, name), os.path.join(here, name))


def relative_label(path: str | os.PathLike[str], root: Path) -> str:
    """`path` relative to `root` (posix) where it lies below it; as given elsewhere."""
    try:
        return Path(path).relative_to(root).as_posix()
    except ValueError:
        return os.fspath(path)


def make_dirs(directory: Path, mode: int) -> None:
    """`directory` and its missing parents, each made with `mode` whatever the umask (those
    that exist keep theirs)."""
    missing = []
    while not directory.is_dir():
        missing.append(directory)
        directory = directory.parent
    for path in reversed(missing):
        try:
            with environment(path):
                path.mkdir()
        except FileExistsError:
            if not path.is_dir():
                raise
            continue  # made meanwhile, by whoever chose its mode
        os.chmod(path, mode)


def remove_path(path: Path) -> None:
    """Remove a file, symlink or whole directory; nothing when it is gone already."""
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path, ignore_errors=True)
    else:
        path.unlink(missing_ok=True)


def human_size(size: float) -> str:
    """`size` bytes for people: 512 B, 12.3 kB, 4.5 MB, 1.2 GB (powers of 1000)."""
    for unit in ("B", "kB", "MB", "GB"):
        if size < 1000 or unit == "GB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1000
    return f"{size:.1f} GB"
