"""Downloads into a content-addressed cache shared by every leg.

Layout under `FetchSettings.cache_dir`:

    sha256/<hex>/<filename>              the verified file, a private copy (never a link
                                         to a mirror's or an origin's file)
    sha256/<hex>/.<filename>.meta.json   its size and where it came from
    partial/<sha256 of url>.part         an interrupted download, resumed with Range
    partial/<sha256 of origin>.lock      serialises threads/processes fetching one origin

Origins are tried in order: each mirror (a directory, or an http(s)/file URL prefix, as
`<mirror>/<filename>`), then the upstream URL. A pinned sha256 that is already in the
cache never touches the network; `offline=True` never touches it at all. HTTP goes through
the project's one client (util/http.py): resumed with Range, bounded in time, read as sent
(never decoded), and refused past `max_bytes`.

A cache entry is re-hashed whenever it is looked up (a fetch step runs only when something
changed, so null builds never pay for it): an entry altered in place, even to other bytes
of the same size, is evicted with a message and fetched anew.
"""
from __future__ import annotations

import hashlib
import os
import re
import sys
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

from backends.util import http
from backends.util.errors import BackendsError
from backends.util.files import CHUNK_SIZE, sha256_file, write_json
from backends.util.locations import UnsupportedLocation, locate
from backends.util.locks import FileLock

USER_AGENT = "anira-backends-fetch"
# Each download is tried 5 times, a resumed one as long as it advances (the HTTP client's
# other limits: util/http.py).
LIMITS = http.Limits(attempts=5)
# No upstream input is near this size (the largest, LibTorch's CUDA zips, are a few GB): a
# server announcing or sending more is refused before it fills the disk.
MAX_DOWNLOAD_BYTES = 16 * 1024**3
_SHA256_HEX = re.compile(r"[0-9a-f]{64}")


class FetchError(BackendsError):
    """A file could not be fetched or did not verify; the message says what to do."""


class PinMismatch(FetchError):
    """The bytes fetched are not the ones the pin names (they were discarded)."""


class _OriginUnavailable(FetchError):
    """This origin does not have the file (HTTP 4xx) or kept failing: try the next one."""


@dataclass(frozen=True)
class Download:
    url: str
    filename: str
    sha256: str | None


@dataclass(frozen=True)
class FetchSettings:
    cache_dir: Path
    mirrors: tuple[str, ...] = ()
    offline: bool = False
    lock: bool = False
    limits: http.Limits = LIMITS
    max_bytes: int = MAX_DOWNLOAD_BYTES


@dataclass(frozen=True)
class Fetched:
    path: Path
    sha256: str
    origin: str  # the URL or local path the bytes came from (the cache file on a hit)


def fetch(download: Download, settings: FetchSettings) -> Fetched:
    """Return `download` from the cache, fetching and verifying it first if needed."""
    _check_filename(download.filename)
    pin = _normalised_pin(download)
    if pin is None and not settings.lock:
        raise FetchError(
            f"{download.filename} has no sha256 pin: `scons lock` records it from any host (or build "
            f"with lock=1 to record it here; trust on first use)"
        )
    cache = _Cache(Path(settings.cache_dir))
    if pin is not None and (hit := cache.lookup(pin, download.filename)) is not None:
        return Fetched(hit, pin, str(hit))

    for origin, is_mirror in _origins(download, settings):
        if isinstance(origin, Path):
            fetched = _ingest_local(origin, download, pin, cache)
        elif settings.offline:
            continue
        elif is_mirror:
            try:
                fetched = _download(origin, download, pin, cache, settings)
            except _OriginUnavailable as error:
                print(f"fetch {download.filename}: mirror skipped: {error}", file=sys.stderr)
                continue
        else:
            fetched = _download(origin, download, pin, cache, settings)
        if fetched is not None:
            return fetched

    if settings.offline:
        raise FetchError(
            f"offline: {download.filename} is not in the cache {settings.cache_dir} or the "
            f"mirrors; run once without offline=1 or put it in a mirror"
        )
    raise FetchError(
        f"{download.filename}: the local origin {download.url} does not exist and no mirror "
        f"has the file; check the path or add a mirror holding {download.filename}"
    )


# --- origins ---------------------------------------------------------------------------


def _origins(download: Download, settings: FetchSettings) -> Iterator[tuple[str | Path, bool]]:
    """(origin, is_mirror) in the order to try; a Path is local, a str an http(s) URL."""
    for mirror in settings.mirrors:
        yield _locate(mirror.rstrip("/\\") + "/" + download.filename, download.filename), True
    yield _locate(download.url, download.filename), False


def _locate(location: str, filename: str) -> str | Path:
    try:
        return locate(location)
    except UnsupportedLocation as error:
        raise FetchError(f"{filename}: {error}") from None


def _check_filename(filename: str) -> None:
    if not filename or filename in (".", "..") or re.search(r"[/\\\x00]", filename):
        raise FetchError(
            f"download filename {filename!r} must be a plain file name (no directories); "
            f"fix the filename in the pin file"
        )


def _normalised_pin(download: Download) -> str | None:
    if download.sha256 is None:
        return None
    pin = download.sha256.strip().lower()
    if not _SHA256_HEX.fullmatch(pin):
        raise FetchError(
            f"{download.filename}: sha256 pin {download.sha256!r} is not 64 hex digits; "
            f"fix it in the pin file (or remove it and run with lock=1)"
        )
    return pin


def _mismatch(origin: str, expected: str, actual: str) -> PinMismatch:
    return PinMismatch(
        f"sha256 mismatch for {origin}: expected {expected}, got {actual}; the file was "
        f"discarded. If upstream re-published it, verify the new file and update the pin"
    )


# --- local origins ---------------------------------------------------------------------


def _ingest_local(source: Path, download: Download, pin: str | None, cache: _Cache) -> Fetched | None:
    if not source.is_file():
        return None
    path = cache.admit_copy(source, pin, download.filename, str(source))
    return Fetched(path, path.parent.name, str(source))


# --- HTTP origins ----------------------------------------------------------------------


def _download(url: str, download: Download, pin: str | None, cache: _Cache,
              settings: FetchSettings) -> Fetched:
    part = cache.partial_path(url)
    with _exclusive(cache.lock_path(url)):
        # Another thread or process may have finished the same file while we waited.
        if pin is not None and (hit := cache.lookup(pin, download.filename)) is not None:
            return Fetched(hit, pin, str(hit))
        actual = _transfer(url, part, download.filename, settings)
        if pin is not None and actual != pin:
            part.unlink(missing_ok=True)
            raise _mismatch(url, pin, actual)
        path = cache.admit_move(part, actual, download.filename, url)
    return Fetched(path, actual, url)


def _transfer(url: str, part: Path, label: str, settings: FetchSettings) -> str:
    """Download `url` into `part` (resuming what is there); return the sha256 of the whole.
    An attempt that made progress starts a fresh count of attempts: resuming a big file over a
    flaky link should not give up while it advances."""
    held = [0]

    def attempt() -> str:
        held[0] = _size_or_zero(part)
        return _transfer_once(client, url, part, label, settings)

    with http.Client(settings.limits, headers={"User-Agent": USER_AGENT}) as client:
        try:
            return client.retrying(f"fetch {label}", attempt, kept=lambda: _size_or_zero(part) > held[0])
        except http.Transient as error:
            raise _OriginUnavailable(f"{url}: giving up after {error.attempts} failed attempts: {error}; "
                                     "check the network or the URL, or use a mirror") from None


def _transfer_once(client: http.Client, url: str, part: Path, label: str, settings: FetchSettings) -> str:
    offset = _size_or_zero(part)
    try:
        with client.open("GET", url, what=f"fetch {label}",
                         headers={"Range": f"bytes={offset}-"} if offset else {}) as answer:
            mode = _body_mode(answer, part, offset, url)
            return _stream_body(answer, part, mode, offset if mode == "ab" else 0, settings.max_bytes)
    except http.Unreachable as error:  # no retry can help: say so at once, with the ways around the network
        raise _OriginUnavailable(f"{url}: {error}; {NO_NETWORK_HINT}") from None
    except http.Transient:
        raise
    except http.HttpError as error:  # too large, compressed, ...: what it sent is not kept to resume from
        part.unlink(missing_ok=True)
        raise _OriginUnavailable(f"{url}: {error}") from None


NO_NETWORK_HINT = ("without network, build from what is here: offline=1 (the cache= directory only), origin=<file> "
                   "(a copy of the file), or mirror=<directory or URL> (a place that has it)")


def _body_mode(answer: http.Answer, part: Path, offset: int, url: str) -> str:
    """How the body is written into `part`: appended to what is there ("ab"), or from the start."""
    status = answer.status
    if status == 416 and offset:
        part.unlink()
        raise http.Transient("the server refused to resume (HTTP 416); restarting")
    if status >= 500 or status == 429:
        raise http.Transient(f"HTTP {status}")
    if status >= 400:
        raise _OriginUnavailable(f"HTTP {status} for {url}")
    if status == 206 and offset and _content_range_start(answer) == offset:
        return "ab"
    if status == 200:
        return "wb"  # the server ignored Range: start over
    part.unlink(missing_ok=True)
    raise http.Transient(f"unexpected HTTP {status}; restarting")


def _stream_body(answer: http.Answer, part: Path, mode: str, offset: int, max_bytes: int) -> str:
    digest = _sha256_prefix(part) if mode == "ab" else hashlib.sha256()
    part.parent.mkdir(parents=True, exist_ok=True)
    with open(part, mode) as out:
        for chunk in answer.chunks(http.Cap(max_bytes, "the limit for one download"), offset):
            out.write(chunk)
            digest.update(chunk)
    return digest.hexdigest()


def _content_range_start(answer: http.Answer) -> int | None:
    match = re.match(r"bytes (\d+)-", answer.headers.get("Content-Range", ""))
    return int(match.group(1)) if match else None


def _sha256_prefix(part: Path) -> "hashlib._Hash":
    digest = hashlib.sha256()
    with open(part, "rb") as stream:
        while chunk := stream.read(CHUNK_SIZE):
            digest.update(chunk)
    return digest


def _size_or_zero(path: Path) -> int:
    try:
        return path.stat().st_size
    except FileNotFoundError:
        return 0


# --- the cache -------------------------------------------------------------------------


class _Cache:
    def __init__(self, root: Path) -> None:
        self.root = root

    def final_path(self, digest: str, filename: str) -> Path:
        return self.root / "sha256" / digest / filename

    def _sidecar(self, digest: str, filename: str) -> Path:
        return self.root / "sha256" / digest / f".{filename}.meta.json"

    def partial_path(self, url: str) -> Path:
        return self.root / "partial" / f"{_key(url)}.part"

    def lock_path(self, origin: str) -> Path:
        return self.root / "partial" / f"{_key(origin)}.lock"

    def lookup(self, digest: str, filename: str) -> Path | None:
        """The cached file if present and intact (re-hashed); an altered entry is evicted."""
        final = self.final_path(digest, filename)
        if not final.is_file():
            return None
        actual = sha256_file(final)
        if actual == digest:
            return final
        print(f"fetch {filename}: the cached copy was altered (sha256 {actual}, expected {digest}); "
              "evicted, fetching it anew", file=sys.stderr)
        evict(final)
        return None

    def admit_move(self, source: Path, digest: str, filename: str, origin: str) -> Path:
        final = self.final_path(digest, filename)
        final.parent.mkdir(parents=True, exist_ok=True)
        os.replace(source, final)
        self._record(digest, filename, final.stat().st_size, origin)
        return final

    def admit_copy(self, source: Path, pin: str | None, filename: str, origin: str) -> Path:
        """Copy `source` into the cache, hashing the bytes copied (one pass: what is hashed is
        what is kept); a copy whose hash is not `pin` is discarded."""
        partial = self.root / "partial"
        partial.mkdir(parents=True, exist_ok=True)
        temp = partial / f"{filename}.tmp-{os.getpid()}-{threading.get_ident()}"
        try:
            actual = _copy_hashing(source, temp)
            if pin is not None and actual != pin:
                raise _mismatch(str(source), pin, actual)
            final = self.final_path(actual, filename)
            final.parent.mkdir(parents=True, exist_ok=True)
            os.replace(temp, final)
        finally:
            temp.unlink(missing_ok=True)
        self._record(actual, filename, final.stat().st_size, origin)
        return final

    def _record(self, digest: str, filename: str, size: int, origin: str) -> None:
        write_json(self._sidecar(digest, filename),
                   {"filename": filename, "origin": origin, "sha256": digest, "size": size})


def _copy_hashing(source: Path, dest: Path) -> str:
    digest = hashlib.sha256()
    with open(source, "rb") as reader, open(dest, "wb") as writer:
        while chunk := reader.read(CHUNK_SIZE):
            digest.update(chunk)
            writer.write(chunk)
    return digest.hexdigest()


def evict(path: Path) -> None:
    """Remove a cache entry and its sidecar (an entry whose bytes no longer match its name)."""
    path.unlink(missing_ok=True)
    path.with_name(f".{path.name}.meta.json").unlink(missing_ok=True)


def _key(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def _exclusive(lock_path: Path) -> FileLock:
    """Serialise fetches of one origin: SCons runs legs in threads, and users run several scons."""
    return FileLock(lock_path, record_holder=False)
