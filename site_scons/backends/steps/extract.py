"""Safe extraction of upstream archives (tar family, zip family, 7z).

Nothing from an archive may land outside the destination: absolute names, drive
letters, `..` components, device and fifo members, and links whose target resolves
outside the tree are rejected, and on any rejection nothing is left behind.

How the checks stay sound without trusting order: regular files and directories are
written during one pass while *no* link exists on disk yet; symlinks and hard links are
collected and created only at the end, after every link target has been resolved
against the archive's own symlinks (so a chain like `a/b -> ..`, `c -> a/b/..` is
caught) and after checking that no member lives beneath a symlink.
"""
from __future__ import annotations

import bz2
import gzip
import hashlib
import io
import lzma
import os
import re
import shutil
import stat
import tarfile
import zipfile
import zlib
from collections import deque
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, BinaryIO, Callable, Literal, NoReturn

from backends.binfmt.inflate import open_member
from backends.util.errors import BackendsError, EnvironmentFailure, environment_failure
from backends.util.files import CHUNK_SIZE, FileEntry, list_tree, remember_digest

_FORMAT_SUFFIXES = (
    (".tar.gz", "tar.gz"), (".tgz", "tar.gz"),
    (".tar.xz", "tar.xz"), (".txz", "tar.xz"),
    (".tar.bz2", "tar.bz2"), (".tbz2", "tar.bz2"),
    (".tar", "tar"),
    (".zip", "zip"), (".whl", "zip"), (".aar", "zip"), (".nupkg", "zip"), (".jar", "zip"),
    (".7z", "7z"),
)
FORMATS = frozenset(fmt for _, fmt in _FORMAT_SUFFIXES)
_MAX_SYMLINK_HOPS = 40
_DRIVE_LETTER = re.compile(r"^[A-Za-z]:")


class _SevenZipFailure(Exception):
    """py7zr could not read the archive (its errors, re-raised so py7zr loads lazily)."""


# What the readers raise on a truncated, corrupt or unreadable archive.
_UNREADABLE = (OSError, EOFError, tarfile.TarError, zipfile.BadZipFile, zlib.error, lzma.LZMAError,
               _SevenZipFailure)


class ExtractError(BackendsError):
    """An archive could not be extracted safely; nothing was left at the destination."""


def archive_format(name: str | os.PathLike[str]) -> str:
    """The format of an archive, from its file name."""
    lowered = os.fspath(name).lower()
    for suffix, fmt in _FORMAT_SUFFIXES:
        if lowered.endswith(suffix):
            return fmt
    known = ", ".join(suffix for suffix, _ in _FORMAT_SUFFIXES)
    raise ExtractError(f"{name}: unknown archive type; expected one of {known}, or pass fmt=")


# Given a zip's members (canonical name -> file|dir|symlink), the names to write.
Select = Callable[[dict[str, str]], set[str]]


def extract(archive: Path, dest: Path, fmt: str | None = None, select: Select | None = None) -> list[FileEntry]:
    """Extract `archive` into `dest` (replacing it) and return the listing of `dest`.

    The archive is unpacked into `<dest>.tmp-<pid>` first and renamed into place, so
    `dest` is either the old tree or the complete new one. With `select`, a zip's members
    it does not name are left out (with what the kept symlinks resolve to kept); the listing
    is then checked against the kept members. Tar and 7z archives are always whole: their
    listing comes only with their bytes.
    """
    return extract_counted(archive, dest, fmt, select)[0]


def extract_counted(archive: Path, dest: Path, fmt: str | None = None,
                    select: Select | None = None) -> tuple[list[FileEntry], int]:
    """`extract`, and how many members it left out."""
    archive, dest = Path(archive), Path(dest)
    fmt = fmt or archive_format(archive)
    if fmt not in FORMATS:
        raise ExtractError(f"{archive}: unknown format {fmt!r}; expected one of {sorted(FORMATS)}")
    temp = Path(f"{dest}.tmp-{os.getpid()}")
    _remove(temp)
    try:
        temp.mkdir(parents=True)
        writer = _TreeWriter(temp, archive)
        if fmt == "zip":
            _extract_zip(archive, writer, select)
        elif fmt == "7z":
            _extract_7z(archive, writer)
        else:
            _extract_tar(archive, writer, fmt)
        writer.finish()
    except BaseException as error:
        _remove(temp)
        if isinstance(error, EnvironmentFailure):
            raise
        if isinstance(error, OSError) and (failure := environment_failure(error, dest.parent)) is not error:
            raise failure from error  # the machine's refusal (space, quota, permission), not a bad archive
        if isinstance(error, _UNREADABLE):
            raise ExtractError(f"{archive}: cannot extract ({error}); is the file complete "
                               f"and of the format {fmt}?") from error
        raise
    _replace_tree(temp, dest)
    entries = list_tree(dest)
    _check_listing(archive, dest, writer.expected(), entries)
    return entries, writer.left_out


def _check_listing(archive: Path, dest: Path, expected: dict[str, str], entries: list[FileEntry]) -> None:
    """The tree on disk is exactly what the archive lists (plus the directories above its
    members): nothing missing, nothing extra, nothing of another kind."""
    found = {entry.path: entry.kind for entry in entries}
    parents = {"/".join(name.split("/")[:depth]) for name in expected for depth in range(1, name.count("/") + 1)}
    missing = sorted(name for name, kind in expected.items() if found.get(name) != kind)
    extra = sorted(name for name in found if name not in expected and name not in parents)
    if missing or extra:
        raise ExtractError(f"{dest} does not hold what {archive.name} lists: "
                           f"{len(missing)} missing or changed (e.g. {missing[:3]}), "
                           f"{len(extra)} unexpected (e.g. {extra[:3]}); did something else write there?")


def _replace_tree(new: Path, dest: Path) -> None:
    """Swap `new` into `dest`, keeping the window without a `dest` to two renames."""
    old = Path(f"{dest}.old-{os.getpid()}")
    _remove(old)
    if os.path.lexists(dest):
        os.replace(dest, old)
    os.replace(new, dest)
    _remove(old)


def _remove(path: Path) -> None:
    if os.path.isdir(path) and not os.path.islink(path):
        shutil.rmtree(path)
    elif os.path.lexists(path):
        os.unlink(path)


# --- the format readers ------------------------------------------------------------------


_DECOMPRESSORS: dict[str, Callable[[Path, Literal["rb"]], io.BufferedIOBase]] = {
    "tar.gz": gzip.open, "tar.bz2": bz2.open, "tar.xz": lzma.open}


def _extract_tar(archive: Path, writer: _TreeWriter, fmt: str) -> None:
    # Stream mode: one decompression pass even for .tar.gz (random access would rewind).
    # tarfile stops at the end-of-archive blocks, before the compressed stream's trailer:
    # reading on to EOF makes gzip check its CRC-32 and length (bz2 and xz their own checks).
    opener = _DECOMPRESSORS.get(fmt)
    with (opener(archive, "rb") if opener else open(archive, "rb")) as stream:
        with tarfile.open(fileobj=stream, mode="r|") as tar:
            for member in tar:
                _tar_member(tar, member, writer)
        while stream.read(CHUNK_SIZE):
            pass


def _tar_member(tar: tarfile.TarFile, member: tarfile.TarInfo, writer: _TreeWriter) -> None:
    if member.isdir():
        writer.add_dir(member.name)
    elif member.isreg():
        source = tar.extractfile(member)
        assert source is not None
        writer.add_file(member.name, source, executable=bool(member.mode & 0o111))
    elif member.issym():
        writer.add_symlink(member.name, member.linkname)
    elif member.islnk():
        writer.add_hardlink(member.name, member.linkname)
    else:
        writer.reject(member.name, "is a device, fifo or other special file")


def _extract_zip(archive: Path, writer: _TreeWriter, select: Select | None = None) -> None:
    """Directories and symlinks in order; the files (each read by its own handle) on every
    core, when no member name repeats (a repeated name keeps the archive's order: the later
    member replaces the earlier one)."""
    with zipfile.ZipFile(archive) as zipped:
        infos = zipped.infolist()
        names = [canonical_name(info.filename) for info in infos]
        files: list[tuple[zipfile.ZipInfo, bool]] = []
        parallel = len(set(names)) == len(names)
        if select is not None:
            kept = _selected(zipped, infos, names, select)
            writer.left_out = sum(1 for name in names if name is not None and name not in kept)
            infos = [info for info, name in zip(infos, names) if name is None or name in kept]
        for info in infos:
            unix_mode = info.external_attr >> 16
            file_type = stat.S_IFMT(unix_mode)
            if info.is_dir() or file_type == stat.S_IFDIR:
                writer.add_dir(info.filename)
            elif file_type == stat.S_IFLNK:
                target = zipped.read(info).decode("utf-8")
                writer.add_symlink(info.filename, target)
            elif file_type in (0, stat.S_IFREG):
                if parallel:
                    writer.claim_file(info.filename)
                    files.append((info, bool(unix_mode & 0o111)))
                else:
                    with open_member(zipped, info) as stream:
                        writer.add_file(info.filename, stream, executable=bool(unix_mode & 0o111))
            else:
                writer.reject(info.filename, "is a device, fifo or other special file")
        _write_files(zipped, files, writer)


def _zip_kind(info: zipfile.ZipInfo) -> str:
    file_type = stat.S_IFMT(info.external_attr >> 16)
    if info.is_dir() or file_type == stat.S_IFDIR:
        return "dir"
    return "symlink" if file_type == stat.S_IFLNK else "file"


def _selected(zipped: zipfile.ZipFile, infos: list[zipfile.ZipInfo], names: list[str | None],
              select: Select) -> set[str]:
    """What `select` keeps of the members, plus what every kept symlink resolves to (and all
    below it, were it a directory): a kept link never dangles where the whole tree's would not.
    Unsafe names are kept, so the writer refuses the archive as it would whole."""
    members: dict[str, str] = {}
    unsafe: set[str] = set()
    for info, name in zip(infos, names):
        if name is None:
            continue
        members[name] = _zip_kind(info)
        if _name_problem(info.filename):
            unsafe.add(name)
    symlinks = {name: zipped.read(info).decode("utf-8", "replace")
                for info, name in zip(infos, names) if name is not None and members[name] == "symlink"}
    kept = select(members) | unsafe
    pending = [name for name in kept if name in symlinks]
    while pending:
        link = pending.pop()
        passed: list[str] = []
        resolved = _resolve(link, symlinks[link], symlinks, passed)
        target = "/".join(resolved or [])
        reached = set(passed)
        if target:  # else outside the tree, or the tree itself: the writer judges the link
            reached |= {name for name in members if name == target or name.startswith(f"{target}/")}
        reached -= kept
        kept |= reached
        pending += [name for name in reached if name in symlinks]
    return kept


def _write_files(zipped: zipfile.ZipFile, files: list[tuple[zipfile.ZipInfo, bool]], writer: _TreeWriter) -> None:
    """The claimed file members, largest first, on every core (inflating, hashing and writing
    release the GIL); the first error stops the rest and is raised."""
    def write(member: tuple[zipfile.ZipInfo, bool]) -> None:
        info, executable = member
        with open_member(zipped, info) as stream:
            writer.write_file(canonical_name(info.filename) or "", stream, executable)

    # Only a deflated member has a handle of its own (binfmt/inflate.py); ZipFile's shared
    # one is read here, in order.
    for member in files:
        if member[0].compress_type != zipfile.ZIP_DEFLATED:
            write(member)
    ordered = sorted((m for m in files if m[0].compress_type == zipfile.ZIP_DEFLATED),
                     key=lambda member: -member[0].file_size)
    workers = min(len(ordered), os.cpu_count() or 1)
    if workers < 2:
        for member in ordered:
            write(member)
        return
    with ThreadPoolExecutor(max_workers=workers) as pool:
        futures = [pool.submit(write, member) for member in ordered]
        try:
            for future in futures:
                future.result()
        except BaseException:
            for future in futures:
                future.cancel()
            raise


def _extract_7z(archive: Path, writer: _TreeWriter) -> None:
    import py7zr

    root = writer.root.resolve()
    try:
        sevenzip = py7zr.SevenZipFile(archive, mode="r")
    except (py7zr.exceptions.ArchiveError, py7zr.exceptions.PasswordRequired) as error:
        raise _SevenZipFailure(f"{type(error).__name__}: {error}") from error
    with sevenzip:
        members: dict[str, Any] = {}
        for member in sevenzip.files:
            name = writer.check_name(member.filename)
            if name is None:
                continue
            special = member.st_fmt not in (None, stat.S_IFREG, stat.S_IFDIR, stat.S_IFLNK)
            if special or member.is_socket or member.is_junction:
                writer.reject(member.filename, "is a device, fifo, socket or junction")
            if member.is_directory:
                writer.add_dir(member.filename)
            else:
                members[name] = member
        sinks = _SevenZipSinks(writer, root, members)
        try:
            sevenzip.extractall(path=root, factory=sinks)  # type: ignore[arg-type]  # duck-typed: py7zr loads lazily
        except (py7zr.exceptions.ArchiveError, py7zr.exceptions.PasswordRequired) as error:
            raise _SevenZipFailure(f"{type(error).__name__}: {error}") from error
        finally:
            sinks.close_all()
    for name, target in sinks.symlink_targets().items():
        writer.add_symlink(name, target)


class _Sink:
    """Receives one 7z member's bytes (duck-types py7zr.io.Py7zIO)."""

    def __init__(self, stream: BinaryIO) -> None:
        self.stream = stream
        self.written = 0

    def write(self, data: bytes | bytearray) -> int:
        self.written += len(data)
        return self.stream.write(data)

    def read(self, size: int | None = None) -> bytes:
        return b""

    def seek(self, offset: int, whence: int = 0) -> int:
        return 0

    def seekable(self) -> bool:
        return False  # stops py7zr rewinding a sink after the member is written

    def flush(self) -> None:
        self.stream.flush()

    def size(self) -> int:
        return self.written

    def close(self) -> None:
        if not isinstance(self.stream, io.BytesIO):
            self.stream.close()


class _SevenZipSinks:
    """A py7zr WriterFactory: py7zr hands us each member's bytes and never touches the
    disk itself, so files go through the checked writer and links are created by it."""

    def __init__(self, writer: _TreeWriter, root: Path, members: dict[str, Any]) -> None:
        self.writer = writer
        self.root = root
        self.members = members
        self.sinks: dict[str, _Sink] = {}

    def create(self, filename: str) -> _Sink:
        name = Path(filename).relative_to(self.root).as_posix()
        member = self.members.get(name)
        if member is None:
            self.writer.reject(name, "was not in the archive listing (a duplicate name?)")
        if member.is_symlink:
            sink = _Sink(io.BytesIO())
        else:
            executable = bool((member.posix_mode or 0) & 0o111)
            sink = _Sink(self.writer.open_file(name, executable))
        self.sinks[name] = sink
        return sink

    def symlink_targets(self) -> dict[str, str]:
        return {name: sink.stream.getvalue().decode("utf-8")
                for name, sink in self.sinks.items() if isinstance(sink.stream, io.BytesIO)}

    def close_all(self) -> None:
        for sink in self.sinks.values():
            sink.close()


# --- the checked writer ------------------------------------------------------------------


@dataclass(frozen=True)
class _Link:
    name: str
    target: str
    hard: bool


class _Hashing:
    """A writer that hashes what it passes on."""

    def __init__(self, out: BinaryIO) -> None:
        self.out = out
        self.digest = hashlib.sha256()

    def write(self, data: bytes) -> int:
        self.digest.update(data)
        return self.out.write(data)


class _TreeWriter:
    """Writes members under `root`, refusing anything that could escape it."""

    def __init__(self, root: Path, archive: Path) -> None:
        self.root = root
        self.archive = archive
        self.kinds: dict[str, str] = {}  # member name -> "file" | "dir" | "symlink" | "hardlink"
        self.links: list[_Link] = []
        self.left_out = 0  # members a selection did not take

    def reject(self, raw_name: str, reason: str) -> NoReturn:
        raise ExtractError(f"{self.archive}: member {raw_name!r} {reason}; refusing to extract it")

    def check_name(self, raw_name: str) -> str | None:
        """The member's safe relative posix name, or None for the archive root itself."""
        problem = _name_problem(raw_name)
        if problem:
            self.reject(raw_name, problem)
        return canonical_name(raw_name)

    def add_dir(self, raw_name: str) -> None:
        name = self.check_name(raw_name)
        if name is None:
            return
        self._claim(name, "dir")
        (self.root / name).mkdir(parents=True, exist_ok=True)

    def add_file(self, raw_name: str, stream: IO[bytes], executable: bool) -> None:
        self.write_file(self.claim_file(raw_name), stream, executable)

    def claim_file(self, raw_name: str) -> str:
        """The checked name of a file member, claimed (before write_file writes it)."""
        name = self.check_name(raw_name)
        if name is None:
            self.reject(raw_name, "is a file named like the archive root")
        self._claim(name, "file")
        return name

    def write_file(self, name: str, stream: IO[bytes], executable: bool) -> None:
        """Write a claimed file, hashing its bytes as they pass: the run does not read them
        again for the listing or the record (files.remember_digest)."""
        with self.create_file(name, executable) as out:
            hashing = _Hashing(out)
            shutil.copyfileobj(stream, hashing, CHUNK_SIZE)
        remember_digest(self.root / name, hashing.digest.hexdigest())

    def open_file(self, name: str, executable: bool) -> BinaryIO:
        """Create the (already checked) file `name` for writing, replacing an earlier one."""
        self._claim(name, "file")
        return self.create_file(name, executable)

    def create_file(self, name: str, executable: bool) -> BinaryIO:
        """Create the claimed file `name` for writing, replacing an earlier one."""
        path = self.root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        if os.path.lexists(path) and not path.is_dir():
            path.unlink()
        mode = 0o755 if executable else 0o644
        descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_BINARY", 0), mode)
        os.chmod(path, mode)  # the umask must not strip bits we were asked to keep
        return os.fdopen(descriptor, "wb")

    def add_symlink(self, raw_name: str, target: str) -> None:
        name = self.check_name(raw_name)
        if name is None:
            self.reject(raw_name, "is a symlink named like the archive root")
        if not target or target.startswith(("/", "\\")) or _DRIVE_LETTER.match(target):
            self.reject(raw_name, f"is a symlink to {target!r}, outside the tree")
        self._claim(name, "symlink")
        self.links.append(_Link(name, target, hard=False))

    def add_hardlink(self, raw_name: str, target: str) -> None:
        name = self.check_name(raw_name)
        target_name = None if _name_problem(target) else canonical_name(target)
        if name is None or target_name is None:
            self.reject(raw_name, f"is a hard link to {target!r}, outside the tree")
        self._claim(name, "hardlink")
        self.links.append(_Link(name, target_name, hard=True))

    def _claim(self, name: str, kind: str) -> None:
        self.kinds.pop(name, None)  # a later member of the same name replaces the earlier
        self.kinds[name] = kind

    def expected(self) -> dict[str, str]:
        """Every member name and the kind of entry it becomes on disk."""
        return {name: "file" if kind == "hardlink" else kind for name, kind in self.kinds.items()}

    def finish(self) -> None:
        """Check every link against the whole archive, create the links, normalise dirs."""
        symlinks = {link.name: link.target for link in self.links
                    if not link.hard and self.kinds.get(link.name) == "symlink"}
        self._check_nothing_beneath(symlinks)
        for link in self.links:
            if self.kinds.get(link.name) != ("hardlink" if link.hard else "symlink"):
                continue  # replaced by a later member of the same name
            if link.hard:
                self._create_hardlink(link)
            else:
                if _resolve(link.name, link.target, symlinks) is None:
                    self.reject(link.name, f"is a symlink to {link.target!r}, which resolves outside the tree")
                self._create_symlink(link)
        self._normalise_and_verify_tree()

    def _check_nothing_beneath(self, symlinks: dict[str, str]) -> None:
        for name in self.kinds:
            parts = name.split("/")
            for depth in range(1, len(parts)):
                parent = "/".join(parts[:depth])
                if parent in symlinks:
                    self.reject(name, f"lies beneath the symlink {parent!r}")

    def _create_hardlink(self, link: _Link) -> None:
        if self.kinds.get(link.target) not in ("file", "hardlink"):
            self.reject(link.name, f"is a hard link to {link.target!r}, which is not a file in the archive")
        path = self.root / link.name
        path.parent.mkdir(parents=True, exist_ok=True)
        if os.path.lexists(path):
            path.unlink()
        os.link(self.root / link.target, path)

    def _create_symlink(self, link: _Link) -> None:
        path = self.root / link.name
        path.parent.mkdir(parents=True, exist_ok=True)
        if os.path.lexists(path):
            if path.is_dir() and not path.is_symlink():
                self.reject(link.name, "is both a directory and a symlink")
            path.unlink()
        os.symlink(link.target, path)

    def _normalise_and_verify_tree(self) -> None:
        # Defence in depth: the lexical resolution above should make this unreachable.
        root = os.path.realpath(self.root)
        for directory, dirnames, filenames in os.walk(self.root):
            os.chmod(directory, 0o755)
            for name in dirnames + filenames:
                path = os.path.join(directory, name)
                if os.path.islink(path):
                    resolved = os.path.realpath(path)
                    if os.path.commonpath([root, resolved]) != root:
                        relative = os.path.relpath(path, self.root)
                        self.reject(relative, f"is a symlink resolving to {resolved}, outside the tree")


def _name_problem(raw_name: str) -> str | None:
    """Why a member name is unsafe, or None if it stays inside the tree."""
    if not raw_name or "\x00" in raw_name:
        return "has an empty or NUL-containing name"
    if raw_name.startswith(("/", "\\")):
        return "has an absolute path"
    if _DRIVE_LETTER.match(raw_name):
        return "has a drive letter"
    if ".." in re.split(r"[/\\]", raw_name):
        return "has a '..' component"
    return None


def canonical_name(raw_name: str) -> str | None:
    """The one form a member name is judged and written in, by extraction and by verify
    alike: `./a//b/./c/` and `a\\b\\c` -> `a/b/c` (backslashes are separators wherever the
    archive may be unpacked); None for the root itself. Check `_name_problem` first: a
    `..` component is kept, not resolved."""
    parts = [part for part in re.split(r"[/\\]", raw_name) if part not in ("", ".")]
    return "/".join(parts) or None


def _resolve(name: str, target: str, symlinks: dict[str, str], passed: list[str] | None = None) -> list[str] | None:
    """Resolve symlink `name -> target` within the archive; None if it leaves the tree.
    The archive's symlinks it goes through are appended to `passed`.

    Works on names only, following the archive's own symlinks, so it gives the same
    answer whatever order the members came in and whatever is on disk.
    """
    stack = name.split("/")[:-1]
    pending = deque(re.split(r"[/\\]", target))
    hops = 0
    while pending:
        part = pending.popleft()
        if part in ("", "."):
            continue
        if part == "..":
            if not stack:
                return None
            stack.pop()
            continue
        stack.append(part)
        inner = symlinks.get("/".join(stack))
        if inner is not None:
            if passed is not None:
                passed.append("/".join(stack))
            hops += 1
            if hops > _MAX_SYMLINK_HOPS or inner.startswith(("/", "\\")) or _DRIVE_LETTER.match(inner):
                return None
            stack.pop()
            pending.extendleft(reversed(re.split(r"[/\\]", inner)))
    return stack
