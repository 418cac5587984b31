"""Binary caches of verified archives, keyed by leg keys (key.py).

An entry is three files under its key: the archive, its `.sha256` and its `.json` manifest
(which names the key), and `<archive>.sig` when its writer signed it (trust.py).
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
                         whole matrix with it, backends/ci/cache_hits.py).

A store that refuses writes (a read-only directory, HTTP 401/403/405, no token) is read
only: lookups still work, storing says so once. Stores only move bytes: whatever comes out
of one is judged before it is used (entry.py: the signature, the manifest, every
member, the contract); a bad entry is reported and the leg rebuilt.

A store is waited on with the tree locked, so no wait is silent or unbounded: HTTP goes
through the project's one client (util/http.py: timeouts, deadlines, a minimum rate, bounded
retries, progress lines). No store fills the reader's disk: each file of an entry is read
within its cap, the archive within the size its manifest declares (entry_cap), compressed
answers are refused. A directory store heals itself: a writer sweeps the temps killed writers
left, a reader evicts an entry that is not exactly its regular files.
"""
from __future__ import annotations

from pathlib import Path
from typing import Mapping, Sequence

from backends.cache.directory_store import DirectoryStore
from backends.cache.http_store import HttpStore
from backends.cache.release_store import GitHubReleaseStore, github_release
from backends.cache.store import Store, warn
from backends.util.github import DEFAULT_API
from backends.util.locations import is_url


def store_for(location: str, environ: Mapping[str, str]) -> Store:
    if location.startswith("github:"):
        repo, tag, keep = github_release(location)
        return GitHubReleaseStore(repo, tag, environ.get("GITHUB_TOKEN", ""),
                                  environ.get("GITHUB_API_URL", DEFAULT_API), keep)
    if is_url(location):
        return HttpStore(location)
    return DirectoryStore(Path(location))


def is_remote(location: str) -> bool:
    return location.startswith("github:") or is_url(location)


def stores_for(locations: Sequence[str], environ: Mapping[str, str], offline: bool) -> list[Store]:
    """The stores a run asks, in order; with `offline`, the directories only (a remote store is
    the network, which offline=1 never touches), each left out said once."""
    stores = []
    for location in locations:
        if offline and is_remote(location):
            warn(f"{location}: not asked (offline=1 never touches the network; a directory store still is)")
            continue
        stores.append(store_for(location, environ))
    return stores
