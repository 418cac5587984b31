"""Binary caches of verified archives, keyed by leg keys (legkey.py).

An entry is three files under its key: the archive, its `.sha256` and its `.json` manifest
(which names the key), and `<archive>.sig` when its writer signed it (cache_trust.py).
Stores, named by `binary_cache=` (comma-separated, looked up in order, all written to):

- a directory:          `<dir>/<key>/<archive>[.sha256|.json|.sig]`; written into a temp beside
                         the entry and renamed, so concurrent writers and readers are safe;
- HTTP(S):              `GET`/`HEAD`/`PUT <base>/<key>/<file>` — e.g. nginx with
                         `dav_methods PUT`, or an object store behind presigned URLs; the
                         manifest is PUT last and fetched first: an entry without it is none;
- a GitHub release:     `github:<owner>/<repo>@<tag>[?keep=N]` — assets `<key>-<archive>` and
                         `<key>-<archive>.entry` (the sidecars) of a draft release made on first
                         use, the newest N keys per leg kept; the token comes from GITHUB_TOKEN.
                         One request lists every entry (`listing`: CI's plan job resolves the
                         whole matrix with it, backends/ci_cache.py).

A store that refuses writes (a read-only directory, HTTP 401/403/405, no token) is read
only: lookups still work, storing says so once. Stores only move bytes: whatever comes out
of one is judged before it is used (cache_entry.py: the signature, the manifest, every
member, the contract); a bad entry is reported and the leg rebuilt.

A store is waited on with the tree locked, so no wait is silent or unbounded: HTTP goes
through the project's one client (util/http.py: timeouts, deadlines, a minimum rate, bounded
retries, progress lines). No store fills the reader's disk: each file of an entry is read
within its cap, the archive within the size its manifest declares (entry_cap), compressed
answers are refused. A directory store heals itself: a writer sweeps the temps killed writers
left, a reader evicts an entry that is not exactly its regular files.
"""
from __future__ import annotations

import base64
import errno
import json
import os
import re
import shutil
import stat
import sys
import tempfile
import threading
import time
import urllib.parse
from dataclasses import dataclass, field
from functools import cached_property, partial
from pathlib import Path
from typing import Callable, Mapping, NamedTuple, Protocol, Sequence, TypeVar

from .cache_trust import SIGNATURE_SUFFIX, key_id
from .locations import is_url
from .locks import FileLock
from .model.plan import RELEASE_ASSET_MAX_BYTES
from .github import DEFAULT_API, GitHub, GitHubError, RateLimited, choose_release, holds
from .steps.files import CHUNK_SIZE, remove_path, sha256_file
from .steps.manifest import build_seconds
from .steps.publish import published_files
from .util import http


class CacheError(RuntimeError):
    """A binary cache could not be used; the message names it and why."""


class ReadOnly(CacheError):
    """The store may be read but not written."""


class Store(Protocol):
    @property
    def location(self) -> str:
        """Where the store is, as `binary_cache=` names it."""

    def fetch(self, key: str, archive: str, dest: Path) -> bool:
        """Download the entry of `key` into `dest` (archive and sidecars); False on a miss."""

    def put(self, key: str, files: Sequence[Path]) -> None:
        """Store `files` (archive and sidecars, the manifest last) under `key`."""

    def holds(self, key: str, archive: str, sizes: Mapping[str, int]) -> bool | None:
        """Whether the entry of `key` is still there as it was stored (its files by name and
        size, `sizes`; a store shows what it can cheaply): a few stats or requests, never a
        download. None when the store cannot be asked now."""


def entry_names(archive: str) -> list[str]:
    """The entry's files as published: the manifest first, the archive last."""
    return [path.name for path in published_files(Path(archive))]


# What an entry's files may weigh, checked before and while they are read, so that no store
# fills the reader's disk. A manifest lists every member (LibTorch's 12,248 take 2 MB); a
# sidecar is one line, or a signature.
MANIFEST_CAP = http.Cap(64 * http.MIB, "the limit for a manifest")
SIDECAR_CAP = http.Cap(64 * http.KIB, "the limit for a sidecar")


def archive_cap(manifest: bytes) -> http.Cap:
    """The size the entry's manifest declares for its archive. Where it declares none, the
    largest archive a leg may have: the manifest check refuses the entry afterwards."""
    try:
        size = json.loads(manifest).get("size")
    except (ValueError, AttributeError):
        size = None
    if isinstance(size, int) and not isinstance(size, bool) and 0 <= size <= RELEASE_ASSET_MAX_BYTES:
        return http.Cap(size, "the size its manifest declares")
    return http.Cap(RELEASE_ASSET_MAX_BYTES, "the largest archive a leg may have")


def sidecar_cap(name: str, archive: str) -> http.Cap:
    return MANIFEST_CAP if name == archive + ".json" else SIDECAR_CAP


def entry_cap(name: str, archive: str, manifest: Path) -> http.Cap:
    """The most bytes the entry's file `name` may have; for the archive, what its manifest
    (read first, into `manifest`) declares."""
    if name != archive:
        return sidecar_cap(name, archive)
    try:
        return archive_cap(manifest.read_bytes())
    except OSError:
        return archive_cap(b"")


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


# -- a directory --------------------------------------------------------------------------

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


def _allowed(archive: str) -> list[str]:
    """The files an entry may hold: its own and the optional signature (cache_trust.py)."""
    return [*entry_names(archive), archive + SIGNATURE_SUFFIX]


def _present(entry: Path, archive: str) -> list[str]:
    required = entry_names(archive)
    return [name for name in _allowed(archive) if name in required or (entry / name).is_file()]


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
    allowed = _allowed(archive)
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


# -- HTTP(S) --------------------------------------------------------------------------------
# The HTTP client's limits (util/http.py): 10 s to connect, 30 s for an answer, at least 64 KiB
# per 30 s, an hour for all of a response, 3 attempts 1 s and 2 s apart. Tests make them small.
LIMITS = http.Limits()
sleep = time.sleep

T = TypeVar("T")


def _http_client() -> http.Client:
    return http.Client(LIMITS, notice=warn, sleep=sleep)


@dataclass
class HttpStore:
    base: str
    client: http.Client = field(default_factory=_http_client)
    # Why the store was given up on this run: its connection failed, attempts over.
    _given_up: str = field(default="", repr=False)

    @property
    def location(self) -> str:
        return self.base

    def _url(self, key: str, name: str) -> str:
        return f"{self.base.rstrip('/')}/{key}/{urllib.parse.quote(name)}"

    def fetch(self, key: str, archive: str, dest: Path) -> bool:
        """The entry's files into `dest`, the manifest first (without it, a miss): each within
        its cap, the archive within the size the manifest declares."""
        dest.mkdir(parents=True, exist_ok=True)
        try:
            found = all(self._attempts(f"GET {key}/{name}", partial(self._get, key, name, dest, archive))
                        for name in entry_names(archive))
            signature = archive + SIGNATURE_SUFFIX
            if found and not self._attempts(f"GET {key}/{signature}", partial(self._get, key, signature, dest,
                                                                               archive)):
                (dest / signature).unlink(missing_ok=True)  # unsigned: the reader's trust decides
            return found
        except CacheError as error:
            raise CacheError(f"{error}; not used") from None

    def put(self, key: str, files: Sequence[Path]) -> None:
        for path in sorted(files, key=lambda p: p.name.endswith(".json")):  # the manifest last
            self._attempts(f"PUT {key}/{path.name}", partial(self._put, key, path))

    def holds(self, key: str, archive: str, sizes: Mapping[str, int]) -> bool | None:
        """One HEAD per file (no body moves): 404 is gone, a Content-Length must be the size."""
        try:
            return all(self._attempts(f"HEAD {key}/{name}", partial(self._head, key, name, size))
                       for name, size in sizes.items())
        except CacheError as error:
            warn(f"cannot tell whether {self.base} still holds {key}: {error}")
            return None

    def _head(self, key: str, name: str, size: int) -> bool:
        what = f"HEAD {key}/{name}"
        with self.client.open("HEAD", self._url(key, name), what=f"{self.base}: {what}") as answer:
            if answer.status == 404:
                return False
            if answer.status != 200:
                raise _status_failure(self.base, what, answer.status)
            return answer.length is None or answer.length == size

    def _attempts(self, what: str, attempt: Callable[[], T]) -> T:
        """`attempt()` as the HTTP client retries it. A failure that outlasts the attempts is a
        CacheError naming the store, the file and why; after one of the connection (not an
        answer of the server's), the store is not tried again this run."""
        if self._given_up:
            raise CacheError(f"{self.base}: {what} not tried: {self._given_up} earlier in this run")
        try:
            return self.client.retrying(f"{self.base}: {what}", attempt)
        except http.Transient as failure:
            if not isinstance(failure, http.Busy):
                self._given_up = str(failure)
            tries = f"{failure.attempts} attempt{'s' if failure.attempts != 1 else ''}"
            raise CacheError(f"{self.base}: {what}: {failure} ({tries})") from None
        except http.HttpError as error:
            raise CacheError(f"{self.base}: {what}: {error}") from None

    def _get(self, key: str, name: str, dest: Path, archive: str) -> bool:
        what = f"GET {key}/{name}"
        temp = dest / f".{name}.tmp-{os.getpid()}"
        try:
            with self.client.open("GET", self._url(key, name), what=f"{self.base}: {what}") as answer:
                if answer.status == 404:
                    return False
                if answer.status != 200:
                    raise _status_failure(self.base, what, answer.status)
                cap = entry_cap(name, archive, dest / (archive + ".json"))
                with open(temp, "wb") as out:
                    for chunk in answer.chunks(cap):
                        out.write(chunk)
            os.replace(temp, dest / name)
            return True
        except OSError as error:  # writing it
            raise CacheError(f"{self.base}: {what}: cannot write {dest}: {error.strerror or error}") from None
        finally:
            temp.unlink(missing_ok=True)

    def _put(self, key: str, path: Path) -> None:
        what = f"PUT {key}/{path.name}"
        with self.client.open("PUT", self._url(key, path.name), what=f"{self.base}: {what}", upload=path) as answer:
            status = answer.status
        if status in (401, 403, 405):
            raise ReadOnly(f"{self.base} refuses writes (HTTP {status})")
        if status not in (200, 201, 204):
            raise _status_failure(self.base, what, status)


def _status_failure(base: str, what: str, status: int) -> Exception:
    if status >= 500 or status == 429:
        return http.Busy(f"HTTP {status}", status)
    return CacheError(f"{base}: {what} answered HTTP {status}")


# -- a GitHub release -------------------------------------------------------------------------

KEEP_DEFAULT = 2  # keys kept per leg: the current one and the one before (a revert restores)
ENTRY_SUFFIX = ".entry"
ENTRY_FORMAT = 1
# The `.entry` asset: its files in base64 (4 bytes for 3) with their names, in a little JSON.
ENTRY_CAP = http.Cap((MANIFEST_CAP.size + 2 * SIDECAR_CAP.size) * 4 // 3 + 64 * http.KIB,
                     "the limit for an .entry asset")
RELEASE_BODY = ("Binary cache of verified archives, keyed by leg key (anira-backends; docs/ci-and-release.md). "
                "A draft on purpose: Immutable Releases lock a published release's assets.")
_ASSET_NAME = re.compile(r"(?P<key>[0-9a-f]{64})-(?P<file>.+)")
# The `.entry` asset's label: `<leg id>[ signed=<key id>][ build=<seconds>s]`, what a listing
# tells about an entry without downloading it (the archive asset's label is the leg id).
_ENTRY_LABEL = re.compile(r"(?P<leg>\S+)(?: signed=(?P<signer>[0-9a-f]{12}))?(?: build=(?P<seconds>[0-9]+)s)?")


class LookupFailed(RuntimeError):
    """A store could not be asked at all: GitHub's rate limit outlasted the bounded wait. Not a
    CacheError on purpose: a CacheError is reported and the leg rebuilt, while a lookup that
    could not be made fails the run (in CI: the leg's job), never a silent miss."""


class ReleaseLocation(NamedTuple):
    repo: str
    tag: str
    keep: int


@dataclass(frozen=True)
class Listed:
    """A complete entry as the release's listing shows it (both assets uploaded), with what its
    `.entry` label says: the key id that signed it ("" unsigned, or an entry stored before
    labels said) and its build's seconds (None: not recorded). The label vouches for nothing:
    a restore checks the signature itself."""

    key: str
    archive: str
    leg: str
    signer: str = ""
    seconds: int | None = None


@dataclass
class GitHubReleaseStore:
    """Entries as assets of one draft release (drafts stay mutable under Immutable Releases;
    GitHub lists them only to tokens with push access): `<key>-<archive>`, the archive, and
    `<key>-<archive>.entry`, its manifest, `.sha256` and `.sig` in one JSON (one download, not
    three). Both are labelled with the leg id, the `.entry` also with its signer and build time
    (`entry_label`: what `listing` reports); the `.entry` goes up last, so an entry lacking it,
    or with an asset not in state `uploaded`, is none. The release is listed once per run (its
    listing carries the assets); a store keeps the newest `keep` keys of its leg."""

    repo: str
    tag: str
    token: str
    api: str = DEFAULT_API
    keep: int = KEEP_DEFAULT
    _release: dict | None = field(default=None, repr=False)
    _listed: bool = field(default=False, repr=False)
    _assets: dict[str, dict] | None = field(default=None, repr=False)

    @property
    def location(self) -> str:
        return f"github:{self.repo}@{self.tag}"

    @cached_property
    def client(self) -> GitHub:
        return GitHub(self.api, self.repo, self.token, notice=warn)  # one session: its connections are reused

    def _find(self) -> dict | None:
        if not self._listed:
            releases = self.client.releases_named(self.tag)
            self._release, self._listed = choose_release(releases), True
            if self._release is None:
                warn(f"{self.location}: no release {self.tag} can be seen: none was made yet, or this token cannot "
                     "list drafts (GitHub lists them only to tokens with contents: write); no entry is restored "
                     "from it")
            elif len(releases) > 1:
                warn(f"{self.location}: {len(releases)} releases are named {self.tag} (drafts made at once); using "
                     f"id {self._release['id']}: delete the others")
        return self._release

    def _asset_map(self) -> dict[str, dict]:
        if self._assets is None:
            release = self._find()
            self._assets = {a["name"]: a for a in self.client.assets(release)} if release else {}
        return self._assets

    def listing(self) -> dict[tuple[str, str], Listed] | None:
        """Every complete entry, by (key, archive), from the one listing of the release; None
        when no release can be seen (none yet, or a token that cannot list drafts). A rate
        limit that outlasts the wait is a LookupFailed, any other failure a CacheError."""
        try:
            if self._find() is None:
                return None
            assets = self._asset_map()
        except RateLimited as error:
            raise LookupFailed(f"{self.location}: the listing could not be made: {error}") from None
        except GitHubError as error:
            raise CacheError(f"{self.location}: {error}") from None
        found: dict[tuple[str, str], Listed] = {}
        for name, entry in assets.items():
            match = _ASSET_NAME.fullmatch(name.removesuffix(ENTRY_SUFFIX))
            body = assets.get(name.removesuffix(ENTRY_SUFFIX))
            if not name.endswith(ENTRY_SUFFIX) or match is None or body is None \
                    or not (_uploaded(body) and _uploaded(entry)):
                continue
            found[match["key"], match["file"]] = _listed(match["key"], match["file"], body, entry)
        return found

    def fetch(self, key: str, archive: str, dest: Path) -> bool:
        try:
            assets = self._asset_map()
            body, entry = assets.get(f"{key}-{archive}"), assets.get(f"{key}-{archive}{ENTRY_SUFFIX}")
            if body is None or entry is None or not (_uploaded(body) and _uploaded(entry)):
                return False
            dest.mkdir(parents=True, exist_ok=True)
            sidecars = self._entry_files(entry, archive, dest)
            mixed = _mixed(body, sidecars[archive + ".sha256"])
            if mixed:
                raise CacheError(f"{self.location}: the entry {key} {mixed}")
            for name in _allowed(archive):
                (dest / name).unlink(missing_ok=True)
            for name, data in sidecars.items():
                (dest / name).write_bytes(data)
            self.client.download(body, dest / archive, archive_cap(sidecars[archive + ".json"]))
        except RateLimited as error:
            raise LookupFailed(f"{self.location}: the lookup of {key} could not be made: {error}") from None
        except GitHubError as error:
            raise CacheError(f"{self.location}: {error}") from None
        except OSError as error:
            raise CacheError(f"{self.location}: cannot write {dest}: {error.strerror or error}") from None
        return True

    def holds(self, key: str, archive: str, sizes: Mapping[str, int]) -> bool | None:
        """From the run's one listing: both assets uploaded, the archive's of its size (the
        sidecars travel inside the `.entry` asset)."""
        try:
            assets = self._asset_map()
        except GitHubError as error:
            warn(f"cannot tell whether {self.location} still holds {key}: {error}")
            return None
        body, entry = assets.get(f"{key}-{archive}"), assets.get(f"{key}-{archive}{ENTRY_SUFFIX}")
        return body is not None and entry is not None and _uploaded(body) and _uploaded(entry) \
            and body.get("size") in (None, sizes.get(archive))

    def _entry_files(self, asset: dict, archive: str, dest: Path) -> dict[str, bytes]:
        """The small files of an entry, read from its `.entry` asset and checked for shape: only
        the entry's own file names (never a path), the manifest and `.sha256` present."""
        temp = dest / f".{archive}{ENTRY_SUFFIX}.tmp-{os.getpid()}"
        try:
            self.client.download(asset, temp, ENTRY_CAP)
            payload = json.loads(temp.read_bytes())
        except ValueError as error:
            raise CacheError(f"{self.location}: {asset['name']} is not JSON ({error})") from None
        finally:
            temp.unlink(missing_ok=True)
        payload = payload if isinstance(payload, dict) else {}
        files = payload.get("files")
        allowed = [name for name in _allowed(archive) if name != archive]
        required = [name for name in entry_names(archive) if name != archive]
        if payload.get("format") != ENTRY_FORMAT or not isinstance(files, dict) \
                or not set(files) <= set(allowed) or not set(required) <= set(files) \
                or not all(isinstance(text, str) for text in files.values()):
            raise CacheError(f"{self.location}: {asset['name']} is not an entry of format {ENTRY_FORMAT} holding "
                             f"{' and '.join(required)} (and at most {', '.join(allowed)})")
        try:
            decoded = {name: base64.b64decode(text, validate=True) for name, text in files.items()}
        except ValueError:
            raise CacheError(f"{self.location}: {asset['name']} holds a file that is not base64") from None
        for name, data in decoded.items():
            cap = sidecar_cap(name, archive)
            if len(data) > cap.size:
                raise CacheError(f"{self.location}: {asset['name']} holds {name} of {len(data):,} bytes, more than "
                                 f"{cap.what} ({cap.size:,})")
        return decoded

    def put(self, key: str, files: Sequence[Path]) -> None:
        """Store the entry: an existing one with these exact bytes stays; any other is replaced,
        its `.entry` deleted first (no reader takes a mix of two). Then the leg's older keys
        beyond `keep` are deleted. A rate limit is a CacheError: the entry is not stored, said."""
        if not self.token:
            raise ReadOnly(f"{self.location}: no GITHUB_TOKEN to upload with")
        archive = _archive_of(files)
        size = archive.stat().st_size
        if size > RELEASE_ASSET_MAX_BYTES:
            raise CacheError(f"{self.location}: not stored: {archive.name} is {size:,} bytes, over the "
                             f"{RELEASE_ASSET_MAX_BYTES:,}-byte release-asset limit GitHub uploads stop at")
        leg = _leg_of(files, archive)
        names = f"{key}-{archive.name}", f"{key}-{archive.name}{ENTRY_SUFFIX}"
        labels = leg, entry_label(leg, files, archive)
        try:
            release = self._writable()
            assets = self._asset_map()
            with tempfile.TemporaryDirectory(prefix="anira-entry-") as scratch:
                entry = Path(scratch) / names[1]
                entry.write_bytes(_entry_bytes(files, archive))
                digests = _sidecar_digest(files, archive), sha256_file(entry)
                paths = archive, entry
                same = [_asset_is(assets.get(name), path, digest) and assets[name].get("label") == label
                        for name, path, digest, label in zip(names, paths, digests, labels)]
                if all(same):
                    return self._prune(leg, key)
                for name, kept in ((names[1], False), (names[0], same[0])):  # the .entry first
                    if name in assets and not kept:
                        self.client.delete_asset(assets.pop(name))
                for name, path, digest, label in zip(names, paths, digests, labels):  # the .entry last
                    if name not in assets:
                        assets[name] = self.client.upload_replacing(release, path, name, digest, label)
            self._prune(leg, key)
        except RateLimited as error:
            raise CacheError(f"{self.location}: not stored: {error}") from None
        except GitHubError as error:
            if error.status in (401, 403):
                raise ReadOnly(f"{self.location}: {error}") from None
            raise CacheError(f"{self.location}: {error}") from None

    def _writable(self) -> dict:
        """The release to write into: the one found, or a new draft."""
        release = self._find()
        if release is None:
            release, made = self.client.ensure_draft(self.tag, RELEASE_BODY)
            self._release, self._assets = release, None
            if made:
                warn(f"{self.location}: made the draft release {self.tag} to hold the binary cache")
        if release.get("immutable"):
            raise ReadOnly(f"{self.location}: the release {self.tag} is published and immutable (Immutable "
                           "Releases), so no asset can be added to it: delete it, and the next store makes the "
                           "binary cache a draft, which stays mutable")
        return release

    def _prune(self, leg: str, newest: str) -> None:
        """Delete the entries of `leg` (its label) but the newest `keep` keys, `newest` first."""
        assets = self._asset_map()
        entries: dict[str, list[dict]] = {}
        for name, asset in assets.items():
            match = _ASSET_NAME.fullmatch(name)
            if match and _label_leg(asset) == leg:
                entries.setdefault(match["key"], []).append(asset)
        order = sorted(entries, reverse=True, key=lambda k: (k == newest, max(
            (str(a.get("created_at") or ""), int(a["id"])) for a in entries[k])))
        for old in order[self.keep:]:
            for asset in entries[old]:
                self.client.delete_asset(asset)
                assets.pop(asset["name"], None)
        if order[self.keep:]:
            warn(f"{self.location}: removed {len(order) - self.keep} older key(s) of {leg} (the newest {self.keep} "
                 "are kept)")


def _uploaded(asset: dict) -> bool:
    return asset.get("state") == "uploaded"


def _listed(key: str, archive: str, body: dict, entry: dict) -> Listed:
    label = _ENTRY_LABEL.fullmatch(str(entry.get("label") or ""))
    if label is None:  # a label this code did not write: the leg from the archive's
        return Listed(key, archive, _label_leg(body))
    return Listed(key, archive, label["leg"], label["signer"] or "",
                  int(label["seconds"]) if label["seconds"] else None)


def _label_leg(asset: dict) -> str:
    """The leg an asset belongs to: its label's first word (labels carry more after it)."""
    return str(asset.get("label") or "").partition(" ")[0]


def entry_label(leg: str, files: Sequence[Path], archive: Path) -> str:
    """The `.entry` asset's label: the leg, the key id that signed the entry, the build's
    seconds its manifest records (each left out when unknown)."""
    by_name = {path.name: path for path in files}
    words = [leg]
    try:
        signature = json.loads(by_name[archive.name + SIGNATURE_SUFFIX].read_text(encoding="utf-8"))
        words.append(f"signed={key_id(str(signature['public_key']))}")
    except (KeyError, OSError, ValueError, TypeError):
        pass  # unsigned, or a signature a reader refuses anyway
    try:
        seconds = build_seconds(json.loads(by_name[archive.name + ".json"].read_text(encoding="utf-8")))
    except (KeyError, OSError, ValueError, AttributeError):
        seconds = None
    if seconds is not None:
        words.append(f"build={round(seconds)}s")
    return " ".join(words)


def _asset_is(asset: dict | None, path: Path, sha256: str) -> bool:
    """The remote asset is exactly this file, as far as GitHub's digest shows (none: not known
    to be, so replaced)."""
    return asset is not None and bool(asset.get("digest")) and holds(asset, path.stat().st_size, sha256)


def _mixed(body: dict, sidecar: bytes) -> str:
    """Why the archive asset is not what the entry's `.sha256` names (empty: it may be, or GitHub
    reports no digest): two writers of one key at once. Found before the archive is downloaded."""
    digest, named = str(body.get("digest") or ""), sidecar.decode("ascii", "replace").split()[:1]
    if digest.startswith("sha256:") and named and digest != f"sha256:{named[0]}":
        return f"holds an archive ({digest}) other than its .sha256 names ({named[0]}); not used"
    return ""


def _archive_of(files: Sequence[Path]) -> Path:
    names = {path.name for path in files}
    found = [path for path in files if path.name + ".json" in names]
    if len(found) != 1:
        raise CacheError(f"an entry is an archive and its sidecars; got {', '.join(sorted(names))}")
    return found[0]


def _leg_of(files: Sequence[Path], archive: Path) -> str:
    """The leg id the manifest names (the entries' label, by which a leg's keys are pruned)."""
    manifest = next(path for path in files if path.name == archive.name + ".json")
    try:
        leg = json.loads(manifest.read_text(encoding="utf-8"))["leg"]["id"]
    except (OSError, ValueError, KeyError, TypeError):
        return archive.name
    return leg if isinstance(leg, str) and leg else archive.name


def _sidecar_digest(files: Sequence[Path], archive: Path) -> str:
    """The archive's sha256 as its `.sha256` records it (published: checked against the bytes)."""
    sidecar = next((path for path in files if path.name == archive.name + ".sha256"), None)
    words = sidecar.read_text(encoding="ascii").split()[:1] if sidecar else []
    return words[0] if words and re.fullmatch(r"[0-9a-f]{64}", words[0]) else sha256_file(archive)


def _entry_bytes(files: Sequence[Path], archive: Path) -> bytes:
    small = {path.name: base64.b64encode(path.read_bytes()).decode("ascii") for path in files if path != archive}
    return json.dumps({"format": ENTRY_FORMAT, "archive": archive.name, "files": small}, sort_keys=True,
                      indent=1).encode("utf-8")


def github_release(location: str) -> ReleaseLocation:
    """Owner/repo, tag and keys kept per leg of `github:<owner>/<repo>@<tag>[?keep=N]`."""
    rest, _, query = location[len("github:"):].partition("?")
    repo, _, tag = rest.partition("@")
    keep = query.removeprefix("keep=") if query.startswith("keep=") else ("" if not query else "bad")
    if repo.count("/") != 1 or not tag or (query and not (keep.isascii() and keep.isdigit() and int(keep) > 0)):
        raise CacheError(f"binary_cache={location}: write github:<owner>/<repo>@<release tag>, optionally with "
                         "?keep=N, the keys kept per leg (a positive integer; default 2)")
    return ReleaseLocation(repo, tag, int(keep) if query else KEEP_DEFAULT)


def store_for(location: str, environ: Mapping[str, str]) -> Store:
    if location.startswith("github:"):
        repo, tag, keep = github_release(location)
        return GitHubReleaseStore(repo, tag, environ.get("GITHUB_TOKEN", ""),
                                  environ.get("GITHUB_API_URL", DEFAULT_API), keep)
    if is_url(location):
        return HttpStore(location)
    return DirectoryStore(Path(location))


def warn(message: str) -> None:
    print(f"binary cache: {message}", file=sys.stderr, flush=True)
