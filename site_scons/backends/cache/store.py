"""What every binary-cache store is: the protocol the stores keep, their errors, the files of
an entry and what each may weigh (checked before and while it is read, so no store fills the
reader's disk). The stores themselves: directory_store, http_store, release_store; stores.py
picks one for a location."""
from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Mapping, Protocol, Sequence

from backends.cache.trust import SIGNATURE_SUFFIX
from backends.model.plan import RELEASE_ASSET_MAX_BYTES
from backends.steps.publish import published_files
from backends.util import http
from backends.util.errors import BackendsError


class CacheError(BackendsError, RuntimeError):
    """A binary cache could not be used; the message names it and why."""


class ReadOnly(CacheError):
    """The store may be read but not written."""


class SignedEntryKept(CacheError):
    """An unsigned write met an entry its writer signed: the signed entry stays."""


def signed_entry_kept(location: str, key: str) -> str:
    return (f"{location}: not stored: it holds a signed entry for {key[:12]}, which a writer without a key "
            "(binary_cache_key=) does not replace")


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


def archive_of(files: Sequence[Path]) -> Path:
    """The archive among an entry's files (the one its manifest, `<archive>.json`, sits beside)."""
    names = {path.name for path in files}
    found = [path for path in files if path.name + ".json" in names]
    if len(found) != 1:
        raise CacheError(f"an entry is an archive and its sidecars; got {', '.join(sorted(names))}")
    return found[0]


def is_signed(files: Sequence[Path]) -> bool:
    return any(path.name.endswith(SIGNATURE_SUFFIX) for path in files)


def entry_names(archive: str) -> list[str]:
    """The entry's files as published: the manifest first, the archive last."""
    return [path.name for path in published_files(Path(archive))]


def entry_files(archive: str) -> list[str]:
    """The files an entry may hold: its own and the optional signature (trust.py)."""
    return [*entry_names(archive), archive + SIGNATURE_SUFFIX]


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


class LookupFailed(BackendsError, RuntimeError):
    """A store could not be asked at all: GitHub's rate limit outlasted the bounded wait. Not a
    CacheError on purpose: a CacheError is reported and the leg rebuilt, while a lookup that
    could not be made fails the run (in CI: the leg's job), never a silent miss."""


def warn(message: str) -> None:
    print(f"binary cache: {message}", file=sys.stderr, flush=True)
