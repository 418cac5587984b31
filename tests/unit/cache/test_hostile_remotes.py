"""Every remote the project reads is bounded, tried against servers on 127.0.0.1 that attack
the reader (tests/hostile_http.py), through each of the three callers of the one HTTP client:
a download of an input (steps/fetch.py), the HTTP binary cache, and the GitHub client (the
release store's archive asset, and the API's own answers); and a directory store's entries,
held to the same limits. Each case:

- a 10^12 Content-Length: refused at the headers, nothing read;
- a body larger than the reader's limit (the size the entry's manifest declares; a download's
  limit), without a Content-Length: refused once it passes, nothing kept;
- a gzip Content-Encoding bomb (1 MiB that inflates to 1 GiB): refused unread, never inflated;
- headers trickled a byte at a time, each well within the read timeout: cut at the answer's
  deadline;
- a body that stalls: given up after the read timeout.

Each run is held to a bound far below what the attack alone would take, and no file on disk is
larger than the limit ("a store cannot fill your disk")."""
from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Callable, Iterator

import pytest

from backends.cache import http_store
from backends.cache.directory_store import DirectoryStore
from backends.cache.http_store import HttpStore
from backends.cache.release_store import GitHubReleaseStore
from backends.cache.store import CacheError
from backends.cache.stores import store_for
from backends.model.plan import RELEASE_ASSET_MAX_BYTES
from backends.steps import fetch as fetch_module
from backends.steps.archive import sha256_sidecar
from backends.steps.fetch import Download, FetchError, FetchSettings, fetch
from backends.util import github as github_api
from backends.util import http
from fake_github import REPO, TOKEN, FakeGitHub, serve
from hostile_http import Answer, Clock, Hostile, Trickle, announcing, body, gzip_bomb_answer

KEY = "ab" * 32
ARCHIVE = "pkg-1.0-Linux-x86_64-shared.zip"
LEG = "pkg-linux-x86_64-shared"
CACHE_TAG = "binary-cache"
LIMIT = 256 << 10  # the download limit, and the size each entry's manifest declares
ARCHIVE_BYTES = b"PK" + b"a" * (LIMIT - 2)
# Small limits, tripped by far: 2 attempts, half a second for an answer and for any read.
SMALL = dict(answer_s=0.5, read_s=0.5, rate_window_s=10.0, attempts=2, backoff_s=0.01)
BOUND_S = 8.0  # what any case may take; each attack alone holds a reader for 30 s or more


@dataclass(frozen=True)
class Case:
    answer: Callable[[], Answer]
    expected: str  # a regex of the refusal; {limit} is the reader's limit, as it names it


CASES = {
    "a 10^12 Content-Length": Case(lambda: announcing(10**12),
                                   r"it announces 1,000,000,000,000 bytes, more than {limit}"),
    "a body past the limit": Case(lambda: body(b"y" * (LIMIT + (1 << 20)), length=None), r"it sent more than {limit}"),
    "a gzip bomb": Case(gzip_bomb_answer, r"Content-Encoding: gzip though identity was asked; refused unread"),
    "headers trickled": Case(lambda: Trickle(every_s=0.05), r"no complete answer in 0\.5 s"),
    "a stalled body": Case(lambda: announcing(LIMIT, b"PK" + b"s" * 1000), r"nothing received for 0\.5 s"),
}


def _largest_file(root: Path) -> int:
    return max((path.stat().st_size for path in root.rglob("*") if path.is_file()), default=0)


def _refused(run: Callable[[], object], error: type[Exception], case: Case, limit: str, root: Path) -> str:
    clock = Clock()
    with pytest.raises(error) as raised:
        run()
    message = str(raised.value)
    assert re.search(case.expected.format(limit=re.escape(limit)), message), message
    assert clock() < BOUND_S
    assert _largest_file(root) <= LIMIT, "a file on disk passed the limit"
    return message


@pytest.fixture
def server() -> Iterator[Hostile]:
    with Hostile() as hostile:
        yield hostile


# -- a download of an input -----------------------------------------------------------------------

@pytest.mark.parametrize("case", CASES.values(), ids=CASES.keys())
def test_a_hostile_download_is_refused_in_bounded_time(server: Hostile, tmp_path: Path, case: Case) -> None:
    url = server.route("/pkg.tgz", case.answer())
    settings = FetchSettings(cache_dir=tmp_path / "cache", max_bytes=LIMIT,
                             limits=replace(fetch_module.LIMITS, **SMALL))  # type: ignore[arg-type]
    download = Download(url, "pkg.tgz", "0" * 64)
    message = _refused(lambda: fetch(download, settings), FetchError, case,
                       f"the limit for one download ({LIMIT:,}", tmp_path)
    assert url in message
    assert not (tmp_path / "cache" / "sha256").exists()


def test_a_download_within_its_limit_is_fetched(server: Hostile, tmp_path: Path) -> None:
    """The other direction: exactly the limit passes."""
    url = server.route("/pkg.tgz", body(ARCHIVE_BYTES, length=None))
    got = fetch(Download(url, "pkg.tgz", hashlib.sha256(ARCHIVE_BYTES).hexdigest()),
                FetchSettings(cache_dir=tmp_path / "cache", max_bytes=LIMIT))
    assert got.path.read_bytes() == ARCHIVE_BYTES


# -- the HTTP binary cache ------------------------------------------------------------------------

def _manifest(size: int = LIMIT) -> bytes:
    return json.dumps({"leg_key": KEY, "leg": {"id": LEG}, "size": size}).encode()


def _http_store(server: Hostile, archive: Answer, monkeypatch: pytest.MonkeyPatch,
                manifest: Answer | None = None) -> HttpStore:
    monkeypatch.setattr(http_store, "LIMITS", replace(http_store.LIMITS, **SMALL))
    server.route(f"/cache/{KEY}/{ARCHIVE}.json", manifest or body(_manifest()))
    server.route(f"/cache/{KEY}/{ARCHIVE}.sha256",
                 body(f"{hashlib.sha256(ARCHIVE_BYTES).hexdigest()}  {ARCHIVE}\n".encode()))
    server.route(f"/cache/{KEY}/{ARCHIVE}", archive)
    return HttpStore(server.base + "/cache")


@pytest.mark.parametrize("case", CASES.values(), ids=CASES.keys())
def test_a_hostile_http_store_is_refused_in_bounded_time(server: Hostile, tmp_path: Path, case: Case,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    store = _http_store(server, case.answer(), monkeypatch)
    message = _refused(lambda: store.fetch(KEY, ARCHIVE, tmp_path / "got"), CacheError, case,
                       f"the size its manifest declares ({LIMIT:,}", tmp_path)
    assert f"GET {KEY}/{ARCHIVE}: " in message and message.endswith("; not used")
    assert not (tmp_path / "got" / ARCHIVE).exists()


def test_an_http_entry_of_the_size_its_manifest_declares_is_fetched(server: Hostile, tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    store = _http_store(server, body(ARCHIVE_BYTES, length=None), monkeypatch)
    assert store.fetch(KEY, ARCHIVE, tmp_path / "got")
    assert (tmp_path / "got" / ARCHIVE).read_bytes() == ARCHIVE_BYTES


def test_one_byte_more_than_its_manifest_declares_is_refused(server: Hostile, tmp_path: Path,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    store = _http_store(server, body(ARCHIVE_BYTES + b"!"), monkeypatch)
    with pytest.raises(CacheError, match=f"announces {LIMIT + 1:,} bytes, more than the size its manifest declares"):
        store.fetch(KEY, ARCHIVE, tmp_path / "got")


def test_a_manifest_past_its_limit_is_refused_before_the_archive_is_asked(server: Hostile, tmp_path: Path,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    store = _http_store(server, body(ARCHIVE_BYTES), monkeypatch, manifest=announcing(10**12))
    with pytest.raises(CacheError, match=r"more than the limit for a manifest \(67,108,864\)"):
        store.fetch(KEY, ARCHIVE, tmp_path / "got")
    assert [path for _, path, _ in server.requests] == [f"/cache/{KEY}/{ARCHIVE}.json"]


def test_a_manifest_without_a_size_bounds_the_archive_by_the_largest_a_leg_may_have(
        server: Hostile, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    store = _http_store(server, announcing(10**12), monkeypatch, manifest=body(b'{"leg_key": "x"}'))
    with pytest.raises(CacheError, match=rf"more than the largest archive a leg may have \({RELEASE_ASSET_MAX_BYTES:,}\)"):
        store.fetch(KEY, ARCHIVE, tmp_path / "got")


# -- a directory store ----------------------------------------------------------------------------

def _directory_entry(root: Path, archive_size: int, manifest: bytes | None = None) -> DirectoryStore:
    entry = root / KEY
    entry.mkdir(parents=True)
    with open(entry / ARCHIVE, "wb") as archive:
        archive.truncate(archive_size)  # sparse: a shared store costs its writer nothing for it
    (entry / (ARCHIVE + ".json")).write_bytes(_manifest() if manifest is None else manifest)
    (entry / (ARCHIVE + ".sha256")).write_text(f"{'0' * 64}  {ARCHIVE}\n")
    return DirectoryStore(root)


@pytest.mark.parametrize("size", [10**12, LIMIT + 1], ids=["10^12 bytes", "one byte more"])
def test_a_directory_entry_larger_than_its_manifest_declares_is_refused_unread(tmp_path: Path, size: int) -> None:
    store = _directory_entry(tmp_path / "store", size)
    clock = Clock()
    with pytest.raises(CacheError, match=f"{ARCHIVE} is {size:,} bytes, more than the size its manifest declares "
                                         rf"\({LIMIT:,}\); not used"):
        store.fetch(KEY, ARCHIVE, tmp_path / "got")
    assert clock() < BOUND_S and _largest_file(tmp_path / "got") <= LIMIT


def test_a_directory_entry_of_the_size_its_manifest_declares_is_fetched(tmp_path: Path) -> None:
    assert _directory_entry(tmp_path / "store", LIMIT).fetch(KEY, ARCHIVE, tmp_path / "got")
    assert (tmp_path / "got" / ARCHIVE).stat().st_size == LIMIT


def test_a_directory_manifest_past_its_limit_is_refused(tmp_path: Path) -> None:
    store = _directory_entry(tmp_path / "store", LIMIT, manifest=b" " * (64 * http.MIB + 1))
    with pytest.raises(CacheError, match=r"is 67,108,865 bytes, more than the limit for a manifest"):
        store.fetch(KEY, ARCHIVE, tmp_path / "got")


# -- the GitHub client ----------------------------------------------------------------------------

@pytest.fixture
def github(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeGitHub]:
    monkeypatch.setattr(github_api, "LIMITS", replace(github_api.LIMITS, connect_s=5.0, **SMALL))
    with serve() as state:
        yield state


def _release_store(github: FakeGitHub) -> GitHubReleaseStore:
    store = store_for(f"github:{REPO}@{CACHE_TAG}", {"GITHUB_TOKEN": TOKEN, "GITHUB_API_URL": github.base})
    assert isinstance(store, GitHubReleaseStore)
    return store


def _stored_entry(github: FakeGitHub, where: Path) -> None:
    """A complete entry in the release, its manifest declaring the archive's size."""
    where.mkdir(parents=True)
    archive = where / ARCHIVE
    archive.write_bytes(ARCHIVE_BYTES)
    sha256_sidecar(archive)
    (where / (ARCHIVE + ".json")).write_bytes(_manifest())
    _release_store(github).put(KEY, [where / (ARCHIVE + ".json"), where / (ARCHIVE + ".sha256"), archive])


@pytest.mark.parametrize("case", CASES.values(), ids=CASES.keys())
def test_a_hostile_release_asset_is_refused_in_bounded_time(github: FakeGitHub, tmp_path: Path, case: Case) -> None:
    _stored_entry(github, tmp_path / "dist")
    github.hostile[github.asset_path(CACHE_TAG, f"{KEY}-{ARCHIVE}")] = case.answer()
    store = _release_store(github)
    message = _refused(lambda: store.fetch(KEY, ARCHIVE, tmp_path / "got"), CacheError, case,
                       f"the size its manifest declares ({LIMIT:,}", tmp_path / "got")
    assert "GitHub API GET " in message
    assert not (tmp_path / "got" / ARCHIVE).exists()


def test_a_release_asset_of_the_size_its_manifest_declares_is_fetched(github: FakeGitHub, tmp_path: Path) -> None:
    _stored_entry(github, tmp_path / "dist")
    assert _release_store(github).fetch(KEY, ARCHIVE, tmp_path / "got")
    assert (tmp_path / "got" / ARCHIVE).read_bytes() == ARCHIVE_BYTES


def test_an_api_that_never_answers_gives_the_release_store_up_for_the_run(github: FakeGitHub,
                                                                          tmp_path: Path) -> None:
    """One bounded wait per run, not one per leg: after a lookup got no answer at all, the
    store's later lookups and presence checks ask nothing (the HTTP store does the same)."""
    github.hostile[f"/repos/{REPO}/releases"] = CASES["headers trickled"].answer()
    store = _release_store(github)
    with pytest.raises(CacheError, match=r"no complete answer in 0\.5 s"):
        store.fetch(KEY, ARCHIVE, tmp_path / "first")
    asked = github.requests()
    with pytest.raises(CacheError, match=r"not asked again: .*no complete answer.* earlier in this run"):
        store.fetch(KEY, ARCHIVE, tmp_path / "second")
    assert store.holds(KEY, ARCHIVE, {ARCHIVE: LIMIT}) is None
    assert github.requests() == asked


def test_an_api_that_answers_an_error_is_asked_again(github: FakeGitHub, tmp_path: Path) -> None:
    """The other direction: an answer (here a 10^12-byte one, refused) is no reason to give up."""
    github.hostile[f"/repos/{REPO}/releases"] = CASES["a 10^12 Content-Length"].answer()
    store = _release_store(github)
    for attempt in ("first", "second"):
        with pytest.raises(CacheError, match="it announces 1,000,000,000,000 bytes"):
            store.fetch(KEY, ARCHIVE, tmp_path / attempt)


API_CASES = {name: CASES[name] for name in ("a 10^12 Content-Length", "a gzip bomb", "headers trickled")}


@pytest.mark.parametrize("case", API_CASES.values(), ids=API_CASES.keys())
def test_a_hostile_api_answer_is_refused_in_bounded_time(github: FakeGitHub, tmp_path: Path, case: Case) -> None:
    github.hostile[f"/repos/{REPO}/releases"] = case.answer()
    client = github_api.GitHub(github.base, REPO, TOKEN, sleep=lambda seconds: None)
    message = _refused(lambda: client.find_release(CACHE_TAG), github_api.GitHubError, case,
                       "the limit for a GitHub API answer (67,108,864", tmp_path)
    assert message.startswith(f"GitHub API GET {github.base}/repos/{REPO}/releases: ")
