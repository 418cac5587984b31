"""An archive as verify sees it: its entries (with their kinds and link targets), member
bytes on demand, and the libraries in it. One pass (binfmt/scan.py) reads every member once: an
ELF shared object's facts come from its own tables, any other library is extracted once
into a scratch directory for the tools that read it."""
from __future__ import annotations

import hashlib
import os
import posixpath
import re
import shutil
import stat
import tarfile
import tempfile
import threading
import zipfile
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from functools import cached_property, partial
from pathlib import Path
from typing import BinaryIO, Callable, TypeVar, cast

from backends.binfmt.elf import Behind, DynamicFacts, ElfError, Sequential, dynamic_facts, is_shared_object
from backends.binfmt.inflate import open_member
from backends.binfmt.inspect import (
    ELF_MACHINES,
    InspectError,
    binary_archs,
    elf_version_definitions,
    library_identity,
    needed_libraries,
    symbol_sets,
)
from backends.binfmt.objects import AR_MAGIC, format_of_bytes, object_format
from backends.binfmt.scan import CHUNK, HEAD, Member, Scanned, scan
from backends.steps.extract import ExtractError, _name_problem, archive_format, canonical_name
from backends.util.errors import BackendsError
from backends.util.files import FileEntry, list_tree
from backends.util.globs import matches

T = TypeVar("T")

# Entry kinds.
FILE, DIR, SYMLINK, HARDLINK, SPECIAL = "file", "dir", "symlink", "hardlink", "special"

BINARY_FORMATS = ("elf", "macho", "pe", "coff", "wasm")
LIBRARY_NAME = re.compile(r"\.(so(\.\d+)*|dylib|dll|a|lib)$")
SHARED_NAME = re.compile(r"\.(so(\.\d+)*|dylib|dll)$")
_SLICE = re.compile(r"^([^/]+\.xcframework)/([^/]+)/")
_ABI_DIR = re.compile(r"^lib/([^/]+)/[^/]+$")


class ArchiveError(BackendsError, ValueError):
    """The archive cannot be read at all."""


@dataclass(frozen=True)
class Entry:
    """One member. Every check sees `name`, the canonical form extraction writes
    (`./lib//a` is `lib/a`), so no spelling of a name judges differently from the file
    it becomes; `stored` is how the archive spells it."""

    name: str  # canonical; as stored when the name is unsafe ("" for the root itself)
    kind: str
    target: str = ""  # symlink or hard-link target
    stored: str = ""
    mode: int = 0  # permission bits as stored, setuid, setgid and sticky included


def entry(stored: str, kind: str, target: str = "", mode: int = 0) -> Entry:
    """An entry named in its canonical form, where the name enters the view."""
    name = stored if _name_problem(stored) else canonical_name(stored) or ""
    return Entry(name, kind, target, stored, mode & 0o7777)


@dataclass
class ArchiveView:
    """Entries, lazy member bytes and symlink targets of a zip / tar.gz / 7z archive."""

    path: Path
    entries: list[Entry]
    _open: Callable[[str], BinaryIO]
    keep: object = None  # resources that must live as long as the view
    concurrent: bool = False  # members may be read from several threads at once (zip)
    declared: dict[str, int] = field(default_factory=dict)  # stored name -> size the archive declares
    scratch: Path = field(default_factory=lambda: Path(tempfile.mkdtemp(prefix="verify-")))
    _extracted: dict[str, Path] = field(default_factory=dict)
    _scanned: dict[str, Scanned] = field(default_factory=dict)
    _facts: dict[str, DynamicFacts | None] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _symbols: dict[tuple[str, str], tuple[set[str], set[str]]] = field(default_factory=dict)
    _needed: dict[str, list[str]] = field(default_factory=dict)
    unreadable: dict[str, str] = field(default_factory=dict)  # member -> why a tool could not read it

    @cached_property
    def names(self) -> list[str]:
        """Members that are files or symlinks (not directories)."""
        return [e.name for e in self.entries if e.kind in (FILE, SYMLINK)]

    @cached_property
    def symlinks(self) -> dict[str, str]:
        return {e.name: e.target for e in self.entries if e.kind == SYMLINK}

    @cached_property
    def _stored(self) -> dict[str, str]:
        return {e.name: e.stored or e.name for e in self.entries}

    def read(self, name: str) -> bytes:
        with self._open(self._stored.get(name, name)) as stream:
            return stream.read()

    def first(self, pattern: str) -> str | None:
        """The first member matching `pattern`, with symlinks inside the archive followed."""
        for name in sorted(self.names):
            if matches(name, pattern):
                return self.follow(name)
        return None

    def follow(self, name: str) -> str | None:
        for _ in range(16):
            if name not in self.symlinks:
                return name if name in self.names else None
            name = posixpath.normpath(posixpath.join(posixpath.dirname(name), self.symlinks[name]))
        return None

    def open(self, name: str) -> BinaryIO:
        """A reader of the member's bytes."""
        return self._open(self._stored.get(name, name))

    def file(self, name: str) -> Path:
        """The member as a file in the scratch directory (extracted once)."""
        if name not in self._extracted:
            self._extract_to(name, self._slot(name))
        return self._extracted[name]

    def scan(self, hashing: bool, libraries: list[str] | None = None) -> None:
        """The one pass (binfmt/scan.py): every library (or those of `libraries`), and with `hashing`
        every file member, read once on every core; what a check asks of a member afterwards
        is answered from it."""
        chosen = set(self.libraries if libraries is None else libraries)
        members = {e.name: Member(e.name, self.declared.get(e.stored or e.name, 0), e.name in chosen,
                                  partial(self._slot, e.name))
                   for e in self.entries if e.kind == FILE and e.name not in self._scanned}
        self._scanned.update(scan(members.values(), self.open, hashing=hashing, concurrent=self.concurrent))

    def prefetch(self, names: list[str], symbols: bool) -> None:
        """Extract `names` that a tool must read (and read their symbol tables) on every core
        at once: inflating and `llvm-nm` dominate the time of a large package's checks."""
        pending = [name for name in names if name not in self._extracted and self.facts(name) is None]
        workers = min(len(names), os.cpu_count() or 1)
        if workers < 2:
            return
        with ThreadPoolExecutor(max_workers=workers) as pool:
            if self.concurrent and pending:
                # Distinct scratch slots first, then the parallel copies.
                slots = {name: self._slot(name) for name in pending}
                list(pool.map(lambda name: self._extract_to(name, slots[name]), pending))
            if symbols:
                binaries = [n for n in names if self.is_binary(n)]
                list(pool.map(lambda name: self.symbols(name), binaries))
                list(pool.map(self.needed, [n for n in binaries if is_shared_library_name(n)]))

    def _slot(self, name: str) -> Path:
        with self._lock:  # binfmt.scan asks from its threads
            target = self.scratch / f"{len(self._extracted)}" / posixpath.basename(name)
            target.parent.mkdir(parents=True)
            self._extracted[name] = target
        return target

    def _extract_to(self, name: str, target: Path) -> None:
        with self._open(self._stored.get(name, name)) as stream, open(target, "wb") as out:
            shutil.copyfileobj(stream, out, 1 << 20)  # libraries reach a GB: never whole in memory

    def symbols(self, library: str, arch: str = "") -> tuple[set[str], set[str]]:
        """(defined, undefined) external symbols of a library member (of its `arch` slice
        when given), read once; none for a member that is no binary (the format check
        reports it). An ELF shared object's are its dynamic table's, as llvm-nm lists them."""
        key = (library, arch)
        if key not in self._symbols:
            self._symbols[key] = (set(), set())
            if (facts := self.facts(library)) is not None:
                self._symbols[key] = (set(facts.defined), set())
            elif self.is_binary(library):
                self._symbols[key] = self.readable(library, lambda: symbol_sets(self.file(library), arch),
                                                   (set[str](), set[str]()))
        return self._symbols[key]

    def needed(self, library: str) -> list[str]:
        """The libraries a shared library member needs at load time, read once."""
        if library not in self._needed:
            facts = self.facts(library)
            self._needed[library] = list(facts.needed) if facts is not None else \
                self.readable(library, lambda: needed_libraries(self.file(library)), [])
        return self._needed[library]

    def identity(self, library: str) -> str:
        """The name a loader knows a shared library member by (inspect.library_identity)."""
        facts = self.facts(library)
        return facts.soname if facts is not None else library_identity(self.file(library))

    def version_definitions(self, library: str) -> list[str]:
        """The symbol versions an ELF shared object member defines, without its base version."""
        facts = self.facts(library)
        return list(facts.version_definitions) if facts is not None else elf_version_definitions(self.file(library))

    def archs(self, library: str) -> tuple[str, set[str]]:
        """(format, architectures) of a library member (inspect.binary_archs)."""
        facts = self.facts(library)
        if facts is not None:
            return "elf", {ELF_MACHINES.get(facts.machine, "unknown")}
        return binary_archs(self.file(library))

    def facts(self, name: str) -> DynamicFacts | None:
        """An ELF shared object member's dynamic facts from its own tables, streamed only as far
        as they lie (the scan's, when it read the member); None for any other member, or one
        whose tables cannot be read so (a tool reads the whole file)."""
        if name in self._scanned:
            return self._scanned[name].facts
        if name not in self._facts:
            self._facts[name] = None
            if is_shared_object(self.head(name)):
                with self.open(name) as stream:
                    try:
                        self._facts[name] = dynamic_facts(Sequential(stream).read)
                    except (ElfError, Behind):
                        pass
        return self._facts[name]

    def head(self, name: str) -> bytes:
        """The member's first bytes, which tell its format."""
        if name in self._scanned:
            return self._scanned[name].head
        if name in self._extracted:
            with open(self._extracted[name], "rb") as stream:
                return stream.read(HEAD)
        with self.open(name) as stream:
            return stream.read(HEAD)

    def size(self, name: str) -> int:
        """The member's size, as read to its end."""
        scanned = self._scanned.get(name)
        if scanned is not None and scanned.size is not None:
            return scanned.size
        return self.file(name).stat().st_size

    def digest(self, name: str) -> tuple[int, str]:
        """(size, sha256) of the member's bytes, from the scan when it hashed them."""
        scanned = self._scanned.get(name)
        if scanned is not None and scanned.sha256:
            return scanned.size or 0, scanned.sha256
        digest, size = hashlib.sha256(), 0
        with self.open(name) as stream:
            while chunk := stream.read(CHUNK):
                digest.update(chunk)
                size += len(chunk)
        return size, digest.hexdigest()

    def is_static(self, name: str) -> bool:
        """A static library (an `ar` archive) of any object format."""
        return self.head(name).startswith(AR_MAGIC)

    def readable(self, library: str, read: Callable[[], T], unread: T) -> T:
        """`read()`, or `unread` with the reason recorded when a tool cannot read the member
        (a truncated or corrupt binary is a violation, not a crash of verify)."""
        try:
            return read()
        except InspectError as error:
            self.note_unreadable(error, library)
            return unread

    def note_unreadable(self, error: InspectError, library: str = "") -> None:
        """Record a tool's failure on a member's scratch copy, told by the member's name."""
        member = library or next((name for name, path in self._extracted.items() if path == error.path), "")
        text = " ".join(str(error).split())
        if not member:
            self.unreadable.setdefault(text, f"a library cannot be read: {text}")
            return
        text = text.replace(str(self._extracted[member]), member) if member in self._extracted else text
        size = self._extracted[member].stat().st_size if member in self._extracted else 0
        self.unreadable.setdefault(member, f"{member} ({size} bytes) cannot be read as a library: {text}")

    def is_binary(self, name: str) -> bool:
        return self.format(name) in BINARY_FORMATS

    def format(self, name: str) -> str:
        """binfmt.objects.object_format of the member: by its first bytes, a static library's by its
        members (from the scratch copy)."""
        head = self.head(name)
        return object_format(self.file(name)) if head.startswith(AR_MAGIC) else format_of_bytes(head)

    def close(self) -> None:
        shutil.rmtree(self.scratch, ignore_errors=True)
        if isinstance(self.keep, tempfile.TemporaryDirectory):
            self.keep.cleanup()
        elif isinstance(self.keep, (zipfile.ZipFile, tarfile.TarFile)):
            self.keep.close()

    @cached_property
    def libraries(self) -> list[str]:
        """Regular members that are libraries: by suffix, or a framework's binary
        (`X.framework/X`, `X.framework/Versions/A/X`)."""
        return [e.name for e in self.entries if e.kind == FILE and is_library_name(e.name)]

    @cached_property
    def binaries(self) -> list[str]:
        """The libraries that are object files of a known format (a stub is not)."""
        return [name for name in self.libraries if self.is_binary(name)]


def is_shared_library_name(name: str) -> bool:
    return bool(SHARED_NAME.search(name))


def is_library_name(name: str) -> bool:
    parts = name.split("/")
    framework = next((p[:-len(".framework")] for p in reversed(parts[:-1]) if p.endswith(".framework")), None)
    return bool(LIBRARY_NAME.search(parts[-1])) or parts[-1] == framework


def slice_of(name: str) -> str:
    """The xcframework slice a member lies in (`ios-arm64`), or "" outside one."""
    match = _SLICE.match(name)
    return match.group(2) if match else ""


def group_of(name: str, platform: str) -> str:
    """Libraries that a consumer links together: one xcframework slice, one ABI directory
    of an Android bundle, else the whole package."""
    if slice_of(name):
        return slice_of(name)
    if platform == "android":
        match = _ABI_DIR.match(name)
        return match.group(1) if match else ""
    return ""


def open_archive(path: Path) -> ArchiveView:
    """A view of an archive of any type extraction knows (a wheel is a zip, a .tar.xz a tar)."""
    try:
        fmt = archive_format(path.name)
    except ExtractError:
        fmt = ""
    if fmt == "zip":
        return _zip_view(path)
    if fmt.startswith("tar"):
        return _tar_view(path)
    if fmt == "7z":
        return _7z_view(path)
    raise ArchiveError(f"{path}: unknown archive format (zip, tar.gz, 7z)")


def directory_view(root: Path, listing: list[FileEntry] | None = None) -> ArchiveView:
    """A tree on disk (an extraction, `listing` its list_tree when known) as a view: members
    are read in place, never copied into the scratch directory."""
    listing = list_tree(root, with_hashes=False) if listing is None else listing
    kinds = {"file": FILE, "dir": DIR, "symlink": SYMLINK}
    view = ArchiveView(root, [entry(e.path, kinds[e.kind], e.target or "") for e in listing],
                       lambda name: open(root / name, "rb"),
                       declared={e.path: e.size for e in listing if e.kind == "file"})
    view._extracted.update({e.path: root / e.path for e in listing if e.kind == "file"})
    return view


def _zip_view(path: Path) -> ArchiveView:
    handle = zipfile.ZipFile(path)
    entries = []
    for info in handle.infolist():
        mode = info.external_attr >> 16
        file_type = stat.S_IFMT(mode)
        if file_type == stat.S_IFLNK:  # by its mode even when named like a directory (`lib/`)
            entries.append(entry(info.filename, SYMLINK, handle.read(info).decode("utf-8", "replace"), mode))
        elif info.is_dir() or file_type == stat.S_IFDIR:
            entries.append(entry(info.filename, DIR, mode=mode))
        elif file_type in (0, stat.S_IFREG):
            entries.append(entry(info.filename, FILE, mode=mode))
        else:
            entries.append(entry(info.filename, SPECIAL, mode=mode))
    return ArchiveView(path, entries, lambda name: open_member(handle, handle.getinfo(name)), keep=handle,
                       concurrent=True, declared={info.filename: info.file_size for info in handle.infolist()})


def _tar_view(path: Path) -> ArchiveView:
    tar = tarfile.open(path)
    members = tar.getmembers()
    entries = [entry(m.name, _tar_kind(m), m.linkname, m.mode) for m in members]
    by_name = {m.name: m for m in members}

    def open_member(name: str) -> BinaryIO:
        stream = tar.extractfile(by_name[name])
        if stream is None:
            raise ArchiveError(f"{path.name}: {name} has no content")
        return cast(BinaryIO, stream)  # typeshed's IO[bytes], read as every member reader is

    return ArchiveView(path, entries, open_member, keep=tar, declared={m.name: m.size for m in members})


def _tar_kind(member: tarfile.TarInfo) -> str:
    if member.isdir():
        return DIR
    if member.isreg():
        return FILE
    if member.issym():
        return SYMLINK
    if member.islnk():
        return HARDLINK
    return SPECIAL


def _7z_view(path: Path) -> ArchiveView:
    """py7zr reads by extracting: names are checked first, and an archive with an unsafe
    name, or a member beneath a symlink (written through it), is never extracted (its view
    lists the entries, and reading fails)."""
    import py7zr

    try:
        with py7zr.SevenZipFile(path) as seven:
            listed = [(m.filename, _7z_kind(m), getattr(m, "posix_mode", None) or 0) for m in seven.files]
    except py7zr.exceptions.ArchiveError as error:
        raise ArchiveError(f"{path.name}: {error}") from None
    listing = [entry(n, k, mode=m) for n, k, m in listed]
    if any(_name_problem(e.stored) for e in listing) or _beneath_a_symlink(listing):
        return ArchiveView(path, listing, _unreadable(path))
    unpacked = tempfile.TemporaryDirectory(prefix="verify-7z-")
    root = Path(unpacked.name)
    with py7zr.SevenZipFile(path) as seven:
        seven.extractall(path=root)
    entries = [entry(name, kind, os.readlink(root / name) if kind == SYMLINK else "", mode)
               for name, kind, mode in listed]
    return ArchiveView(path, entries, lambda n: open(root / n, "rb"), keep=unpacked)


def _beneath_a_symlink(listing: list[Entry]) -> bool:
    links = {e.name.casefold() for e in listing if e.kind == SYMLINK}
    return any(parent.casefold() in links for e in listing for parent in _parents(e.name))


def _parents(name: str) -> list[str]:
    parts = name.split("/")
    return ["/".join(parts[:depth]) for depth in range(1, len(parts))]


def _7z_kind(member: object) -> str:
    if getattr(member, "is_directory", False):
        return DIR
    if getattr(member, "is_symlink", False):
        return SYMLINK
    if getattr(member, "st_fmt", None) not in (None, stat.S_IFREG) or getattr(member, "is_socket", False):
        return SPECIAL
    return FILE


def _unreadable(path: Path) -> Callable[[str], BinaryIO]:
    def open_member(name: str) -> BinaryIO:
        raise ArchiveError(f"{path.name}: not extracted, it has unsafe member names")
    return open_member
