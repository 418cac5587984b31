"""Binary caches of verified archives, keyed by leg keys (legkey.py).

An entry is three files under its key: the archive, its `.sha256` and its `.json` manifest
(which names the key). Stores, named by `binary_cache=` (comma-separated, looked up in
order, all written to):

- a directory:          `<dir>/<key>/<archive>[.sha256|.json]`; written into a temp beside
                         the entry and renamed, so concurrent writers and readers are safe;
- HTTP(S):              `GET`/`HEAD`/`PUT <base>/<key>/<file>` — e.g. nginx with
                         `dav_methods PUT`, or an object store behind presigned URLs; the
                         manifest is PUT last and fetched first: an entry without it is none;
- a GitHub release:     `github:<owner>/<repo>@<tag>` — assets `<key>-<archive>[...]` of a
                         (pre-)release made on first use; the token comes from GITHUB_TOKEN.

A store that refuses writes (a read-only directory, HTTP 401/403/405, no token) is read
only: lookups still work, storing says so once. Whatever comes out of a store is checked
before anything trusts it (`Graph` does: sha256, manifest, the contract); a bad entry is
reported and the leg rebuilt.
"""
from __future__ import annotations

import errno
import json
import os
import shutil
import sys
import threading
import urllib.parse
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Mapping, Protocol, Sequence

# requests takes ~0.1 s to import: it is imported where a transfer happens, so a null build,
# plan=1 or list never pays for it.
if TYPE_CHECKING:
    import requests

from .locations import is_url
from .locks import FileLock
from .model.plan import Contract
from .github import DEFAULT_API, GitHub, GitHubError
from .steps.files import sha256_file
from .steps.publish import PublishError, check_sidecars, published_files
from .steps.verify import check

TIMEOUT = (15, 600)


class CacheError(RuntimeError):
    """A binary cache could not be used; the message names it and why."""


class ReadOnly(CacheError):
    """The store may be read but not written."""


class Store(Protocol):
    location: str

    def fetch(self, key: str, archive: str, dest: Path) -> bool:
        """Download the entry of `key` into `dest` (archive and sidecars); False on a miss."""

    def put(self, key: str, files: Sequence[Path]) -> None:
        """Store `files` (archive and sidecars, the manifest last) under `key`."""


def entry_names(archive: str) -> list[str]:
    """The entry's files as published: the manifest first, the archive last."""
    return [path.name for path in published_files(Path(archive))]


# -- a directory --------------------------------------------------------------------------

@dataclass
class DirectoryStore:
    root: Path

    @property
    def location(self) -> str:
        return str(self.root)

    def fetch(self, key: str, archive: str, dest: Path) -> bool:
        entry = self.root / key
        if not all((entry / name).is_file() for name in entry_names(archive)):
            return False
        dest.mkdir(parents=True, exist_ok=True)
        for name in entry_names(archive):  # copies: nothing downstream may share an inode with the cache
            shutil.copyfile(entry / name, dest / name)
        return True

    def put(self, key: str, files: Sequence[Path]) -> None:
        """Write the entry into a temp beside it, then rename it into place: readers see the
        whole entry or none. Writers of one key take turns (a lock file); an entry already
        there with the same bytes stays, one with other bytes (a corrupt entry, rejected when
        read) is swapped for this one."""
        entry = self.root / key
        suffix = f"{os.getpid()}-{threading.get_ident()}"
        temp, old = self.root / f".{key}.tmp-{suffix}", self.root / f".{key}.old-{suffix}"
        try:
            self.root.mkdir(parents=True, exist_ok=True)
            with FileLock(self.root / f".{key}.lock", record_holder=False):
                if all(_same(path, entry / path.name) for path in files):
                    return
                temp.mkdir()
                for path in files:
                    shutil.copyfile(path, temp / path.name)
                if entry.exists():
                    os.rename(entry, old)
                os.rename(temp, entry)
        except OSError as error:
            kind = ReadOnly if error.errno in (errno.EACCES, errno.EPERM, errno.EROFS) else CacheError
            raise kind(f"cannot write {entry}: {error.strerror or error}") from None
        finally:
            shutil.rmtree(temp, ignore_errors=True)
            shutil.rmtree(old, ignore_errors=True)


def _same(ours: Path, theirs: Path) -> bool:
    if not theirs.is_file() or theirs.stat().st_size != ours.stat().st_size:
        return False
    return sha256_file(theirs) == sha256_file(ours)


# -- HTTP(S) --------------------------------------------------------------------------------

def _new_session() -> requests.Session:
    import requests

    return requests.Session()


@dataclass
class HttpStore:
    base: str
    session: requests.Session = field(default_factory=_new_session)

    @property
    def location(self) -> str:
        return self.base

    def _url(self, key: str, name: str) -> str:
        return f"{self.base.rstrip('/')}/{key}/{urllib.parse.quote(name)}"

    def fetch(self, key: str, archive: str, dest: Path) -> bool:
        import requests

        dest.mkdir(parents=True, exist_ok=True)
        for name in entry_names(archive):
            try:
                with self.session.get(self._url(key, name), stream=True, timeout=TIMEOUT) as response:
                    if response.status_code == 404:
                        return False
                    if response.status_code != 200:
                        raise CacheError(f"{self.base}: GET {key}/{name} answered HTTP {response.status_code}")
                    temp = dest / f".{name}.tmp-{os.getpid()}"
                    with open(temp, "wb") as out:
                        for chunk in response.iter_content(1 << 20):
                            out.write(chunk)
                    os.replace(temp, dest / name)
            except requests.RequestException as error:
                raise CacheError(f"{self.base}: {type(error).__name__} fetching {key}/{name}") from None
        return True

    def put(self, key: str, files: Sequence[Path]) -> None:
        import requests

        for path in sorted(files, key=lambda p: p.name.endswith(".json")):  # the manifest last
            with open(path, "rb") as body:
                try:
                    response = self.session.put(self._url(key, path.name), data=body, timeout=TIMEOUT)
                except requests.RequestException as error:
                    raise CacheError(f"{self.base}: {type(error).__name__} storing {key}/{path.name}") from None
            if response.status_code in (401, 403, 405):
                raise ReadOnly(f"{self.base} refuses writes (HTTP {response.status_code})")
            if response.status_code not in (200, 201, 204):
                raise CacheError(f"{self.base}: PUT {key}/{path.name} answered HTTP {response.status_code}")


# -- a GitHub release -------------------------------------------------------------------------

@dataclass
class GitHubReleaseStore:
    repo: str
    tag: str
    token: str
    api: str = DEFAULT_API
    _release: dict | None = None
    _assets: dict[str, dict] | None = None

    @property
    def location(self) -> str:
        return f"github:{self.repo}@{self.tag}"

    @cached_property
    def client(self) -> GitHub:
        return GitHub(self.api, self.repo, self.token)  # one session: its connections are reused

    def _find(self) -> dict | None:
        if self._release is None:
            self._release = self.client.find_release(self.tag)
        return self._release

    def _asset_map(self) -> dict[str, dict]:
        if self._assets is None:
            release = self._find()
            self._assets = {a["name"]: a for a in self.client.assets(release)} if release else {}
        return self._assets

    def fetch(self, key: str, archive: str, dest: Path) -> bool:
        try:
            assets = self._asset_map()
            wanted = [assets.get(f"{key}-{name}") for name in entry_names(archive)]
            if not all(wanted):
                return False
            dest.mkdir(parents=True, exist_ok=True)
            for name, asset in zip(entry_names(archive), wanted):
                self.client.download(asset, dest / name)
        except GitHubError as error:
            raise CacheError(f"{self.location}: {error}") from None
        return True

    def put(self, key: str, files: Sequence[Path]) -> None:
        if not self.token:
            raise ReadOnly(f"{self.location}: no GITHUB_TOKEN to upload with")
        try:
            release = self._find() or self.client.create_prerelease(self.tag, "Binary cache of verified archives, "
                                                                             "keyed by leg key (anira-backends).")
            self._release = release
            assets = self._asset_map()
            for path in sorted(files, key=lambda p: p.name.endswith(".json")):  # the manifest last
                name = f"{key}-{path.name}"
                if name not in assets:
                    assets[name] = self.client.upload(release, path, name)
        except GitHubError as error:
            if error.status in (401, 403):
                raise ReadOnly(f"{self.location}: {error}") from None
            raise CacheError(f"{self.location}: {error}") from None


def check_entry(entry: Path, archive: str, key: str, contract: Contract, version: str,
                build_root: str) -> list[str]:
    """Why the entry in `entry` is not to be trusted (empty: it is): its sidecars must
    describe its archive, its manifest must name `key`, and the archive must keep the leg's
    contract, exactly as a freshly built one must."""
    path = entry / archive
    try:
        check_sidecars(path)
        manifest = json.loads(path.with_name(archive + ".json").read_text(encoding="utf-8"))
    except (PublishError, OSError, ValueError) as error:
        return [str(error)]
    if manifest.get("leg_key") != key:
        return [f"its manifest names the key {manifest.get('leg_key')!r}, not {key}"]
    return check(path, contract, version, build_root)


def github_release(location: str) -> tuple[str, str]:
    """(owner/repo, tag) of a `github:<owner>/<repo>@<tag>` location."""
    repo, _, tag = location[len("github:"):].partition("@")
    if repo.count("/") != 1 or not tag:
        raise CacheError(f"binary_cache={location}: write github:<owner>/<repo>@<release tag>")
    return repo, tag


def store_for(location: str, environ: Mapping[str, str]) -> Store:
    if location.startswith("github:"):
        repo, tag = github_release(location)
        return GitHubReleaseStore(repo, tag, environ.get("GITHUB_TOKEN", ""),
                                  environ.get("GITHUB_API_URL", DEFAULT_API))
    if is_url(location):
        return HttpStore(location)
    return DirectoryStore(Path(location))


def warn(message: str) -> None:
    print(f"binary cache: {message}", file=sys.stderr, flush=True)
