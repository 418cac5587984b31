"""A binary cache over HTTP(S): `GET`/`HEAD`/`PUT <base>/<key>/<file>` (e.g. nginx with
`dav_methods PUT`, or an object store behind presigned URLs), through the project's one HTTP
client. The manifest is PUT last and fetched first: an entry without it is none."""
from __future__ import annotations

import os
import time
import urllib.parse
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Callable, Mapping, Sequence, TypeVar

from backends.cache.store import (
    CacheError,
    ReadOnly,
    SignedEntryKept,
    archive_of,
    entry_cap,
    entry_names,
    is_signed,
    signed_entry_kept,
    warn,
)
from backends.cache.trust import SIGNATURE_SUFFIX
from backends.util import http

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
        """PUT every file, the manifest last. An unsigned writer first asks (one HEAD) whether the
        entry is signed: a signature left beside other bytes would make readers refuse it."""
        if not is_signed(files):
            signature = archive_of(files).name + SIGNATURE_SUFFIX
            if self._attempts(f"HEAD {key}/{signature}", partial(self._exists, key, signature)):
                raise SignedEntryKept(signed_entry_kept(self.base, key))
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

    def _exists(self, key: str, name: str) -> bool:
        return self._head(key, name, -1)

    def _head(self, key: str, name: str, size: int) -> bool:
        what = f"HEAD {key}/{name}"
        with self.client.open("HEAD", self._url(key, name), what=f"{self.base}: {what}") as answer:
            if answer.status == 404:
                return False
            if answer.status != 200:
                raise _status_failure(self.base, what, answer.status)
            return size < 0 or answer.length is None or answer.length == size

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
