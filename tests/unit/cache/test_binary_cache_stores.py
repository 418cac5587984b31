"""Binary cache stores: a directory (atomic, concurrent writers, swept and self-healing), a
GitHub release (against the local fake of the API) and HTTP transport (timeouts, a minimum
rate, retries, progress) against a small server in a thread; the HTTP store also runs against
nginx in tests/integration."""
from __future__ import annotations

import json
import os
import threading
import time
from dataclasses import replace
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Callable, Iterator

import pytest

from backends.cache import http_store
from backends.cache.directory_store import DirectoryStore, sweep_store
from backends.cache.http_store import HttpStore
from backends.cache.release_store import GitHubReleaseStore
from backends.cache.store import CacheError, LookupFailed, ReadOnly
from backends.cache.stores import store_for, stores_for
from backends.steps.archive import sha256_sidecar
from backends.util import github as github_api
from backends.util.buildtree import sweep_stale_temps, temp_places
from backends.util.locks import FileLock
from fake_github import REPO, TOKEN, FakeGitHub, serve

KEY = "ab" * 32


@pytest.fixture
def github() -> Iterator[FakeGitHub]:
    with serve() as state:
        yield state


ARCHIVE = "pkg-1.0-Linux-x86_64-shared.zip"


def _entry(where: Path, data: bytes = b"PK archive") -> list[Path]:
    where.mkdir(parents=True, exist_ok=True)
    archive = where / ARCHIVE
    archive.write_bytes(data)
    sha256_sidecar(archive)
    (where / (ARCHIVE + ".json")).write_text(f'{{"leg_key": "{KEY}"}}\n')
    return [where / (ARCHIVE + ".json"), where / (ARCHIVE + ".sha256"), archive]


def test_directory_store_round_trip_and_concurrent_writers(tmp_path: Path) -> None:
    store = DirectoryStore(tmp_path / "cache")
    assert not store.fetch(KEY, ARCHIVE, tmp_path / "got")
    files = _entry(tmp_path / "dist")
    threads = [threading.Thread(target=store.put, args=(KEY, files)) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    left = sorted(p.name for p in (tmp_path / "cache").iterdir() if not p.name.endswith(".lock"))
    assert left == [KEY]  # no temp left behind
    assert store.fetch(KEY, ARCHIVE, tmp_path / "got")
    assert (tmp_path / "got" / ARCHIVE).read_bytes() == b"PK archive"


def test_directory_store_replaces_an_entry_with_other_bytes(tmp_path: Path) -> None:
    store = DirectoryStore(tmp_path / "cache")
    store.put(KEY, _entry(tmp_path / "bad", b"PK corrupt!"))
    store.put(KEY, _entry(tmp_path / "good"))
    assert (tmp_path / "cache" / KEY / ARCHIVE).read_bytes() == b"PK archive"


# -- a directory store: housekeeping --------------------------------------------------------

def _aged(path: Path, seconds: float) -> Path:
    past = time.time() - seconds
    os.utime(path, (past, past), follow_symlinks=False)
    return path


def test_stale_temps_in_a_directory_store_are_swept_by_its_next_writer(tmp_path: Path) -> None:
    root = tmp_path / "cache"
    root.mkdir()
    other = "cd" * 32
    dead_temp = _aged(_dir(root / f".{other}.tmp-4242-1"), 2 * 3600)
    dead_old = _aged(_dir(root / f".{other}.old-4242-1"), 2 * 3600)
    young = _dir(root / f".{'ef' * 32}.tmp-4243-1")  # a live writer on a host locks do not reach
    held = "01" * 32
    locked = _aged(_dir(root / f".{held}.tmp-4244-1"), 2 * 3600)
    lock = FileLock(root / f".{held}.lock", record_holder=False)
    lock.acquire()  # its writer is at work, however old the temp looks
    try:
        DirectoryStore(root).put(KEY, _entry(tmp_path / "dist"))
    finally:
        lock.release()
    assert not dead_temp.exists() and not dead_old.exists()
    assert young.exists() and locked.exists()
    assert sweep_store(root, older_than=3600) == [locked]  # its key free now


def _dir(path: Path) -> Path:
    path.mkdir()
    (path / ARCHIVE).write_bytes(b"half")
    return path


def _damage(entry: Path, how: str) -> None:
    if how == "a file instead of the entry":
        remove = [entry / name for name in os.listdir(entry)]
        for path in remove:
            path.unlink()
        entry.rmdir()
        entry.write_bytes(b"not an entry")
    elif how == "the archive is a directory":
        (entry / ARCHIVE).unlink()
        (entry / ARCHIVE).mkdir()
    elif how == "the archive is a symlink":
        (entry / ARCHIVE).rename(entry.parent.parent / "elsewhere.zip")
        (entry / ARCHIVE).symlink_to(entry.parent.parent / "elsewhere.zip")
    elif how == "a subdirectory":
        (entry / "sub").mkdir()
    elif how == "an extra file":
        (entry / "notes.txt").write_text("x")
    elif how == "a fifo":
        os.mkfifo(entry / (ARCHIVE + ".sig"))
    else:
        assert how == "the manifest missing"
        (entry / (ARCHIVE + ".json")).unlink()


@pytest.mark.parametrize("how", ["a file instead of the entry", "the archive is a directory",
                                 "the archive is a symlink", "a subdirectory", "an extra file", "a fifo",
                                 "the manifest missing"])
def test_an_entry_that_is_not_its_regular_files_is_evicted_and_a_miss(tmp_path: Path, how: str) -> None:
    store = DirectoryStore(tmp_path / "cache")
    store.put(KEY, _entry(tmp_path / "dist"))
    entry = tmp_path / "cache" / KEY
    _damage(entry, how)
    with pytest.raises(CacheError, match=f"the entry {KEY} .*: evicted; not used"):
        store.fetch(KEY, ARCHIVE, tmp_path / "got")
    assert not os.path.lexists(entry)
    assert [p.name for p in (tmp_path / "cache").iterdir() if not p.name.endswith(".lock")] == []
    assert not store.fetch(KEY, ARCHIVE, tmp_path / "got")  # a miss: the leg is built...
    store.put(KEY, _entry(tmp_path / "dist"))  # ...and stored again
    assert store.fetch(KEY, ARCHIVE, tmp_path / "again")
    assert sorted(os.listdir(tmp_path / "again")) == sorted(p.name for p in _entry(tmp_path / "dist"))


def test_an_entry_with_extra_files_is_replaced_by_the_next_writer(tmp_path: Path) -> None:
    store = DirectoryStore(tmp_path / "cache")
    store.put(KEY, _entry(tmp_path / "dist"))
    (tmp_path / "cache" / KEY / "notes.txt").write_text("x")
    store.put(KEY, _entry(tmp_path / "dist"))
    assert not (tmp_path / "cache" / KEY / "notes.txt").exists()


def test_a_signature_beside_the_entry_is_kept_and_fetched(tmp_path: Path) -> None:
    store = DirectoryStore(tmp_path / "cache")
    store.put(KEY, _entry(tmp_path / "dist"))
    (tmp_path / "cache" / KEY / (ARCHIVE + ".sig")).write_text("signed")
    assert store.fetch(KEY, ARCHIVE, tmp_path / "got")
    assert (tmp_path / "got" / (ARCHIVE + ".sig")).read_text() == "signed"


def test_a_run_start_sweeps_download_temps_under_build_binary_cache(tmp_path: Path) -> None:
    build = tmp_path / "build"
    temp = build / "binary-cache" / KEY / f".{ARCHIVE}.tmp-{os.getpid() + 1}"
    temp.parent.mkdir(parents=True)
    temp.write_bytes(b"cut short")
    (temp.parent / ARCHIVE).write_bytes(b"kept")
    assert sweep_stale_temps(*temp_places(build, tmp_path / "dist", tmp_path / "cache")) == [temp]
    assert (temp.parent / ARCHIVE).exists()


# -- a GitHub release -------------------------------------------------------------------------

LEG = "pkg-linux-x86_64-shared"
CACHE_TAG = "binary-cache"


def _github_store(github: FakeGitHub, keep: str = "", token: str = TOKEN) -> GitHubReleaseStore:
    store = store_for(f"github:{REPO}@{CACHE_TAG}{keep}", {"GITHUB_TOKEN": token, "GITHUB_API_URL": github.base})
    assert isinstance(store, GitHubReleaseStore)
    return store


def _signed_entry(where: Path, data: bytes = b"PK archive", leg: str = LEG) -> list[Path]:
    """An entry as a signing writer stores it: the signature, the manifest (naming its leg), the
    .sha256 and the archive."""
    files = _entry(where, data)
    files[0].write_text(json.dumps({"leg_key": KEY, "leg": {"id": leg}}))
    signature = where / (ARCHIVE + ".sig")
    signature.write_text('{"signature": "by the CI key"}\n')
    return [signature, *files]


def _names(github: FakeGitHub) -> list[str]:
    return github.asset_names(CACHE_TAG)


def test_github_release_store_round_trip_in_a_draft(github: FakeGitHub, tmp_path: Path,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    store = _github_store(github)
    assert not store.fetch(KEY, ARCHIVE, tmp_path / "got")  # no release yet: a miss, and said
    assert f"no release {CACHE_TAG} can be seen" in capsys.readouterr().err
    files = _signed_entry(tmp_path / "dist")
    store.put(KEY, files)
    release = github.release(CACHE_TAG)
    # A draft: Immutable Releases lock a published (pre-)release's assets, never a draft's.
    assert release["draft"] and not release["prerelease"]
    assert _names(github) == [f"{KEY}-{ARCHIVE}", f"{KEY}-{ARCHIVE}.entry"]  # the .entry last
    assert {a["label"] for a in github.assets[release["id"]]} == {LEG}
    fresh = _github_store(github)
    before = len(github.calls)
    assert fresh.fetch(KEY, ARCHIVE, tmp_path / "got")
    assert len(github.calls) - before == 3  # one listing (it carries the assets), two downloads
    for path in files:
        assert (tmp_path / "got" / path.name).read_bytes() == path.read_bytes()
    assert not fresh.fetch("cd" * 32, ARCHIVE, tmp_path / "other")
    assert len(github.calls) - before == 3  # the listing is read once per run


def test_github_release_store_with_a_read_only_token(github: FakeGitHub, tmp_path: Path,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    _github_store(github).put(KEY, _signed_entry(tmp_path / "dist"))
    github.push_access = False  # contents: read: GitHub lists no drafts
    assert not _github_store(github).fetch(KEY, ARCHIVE, tmp_path / "got")
    assert "GitHub lists them only to tokens with contents: write" in capsys.readouterr().err
    with pytest.raises(ReadOnly, match="Resource not accessible by integration"):
        _github_store(github).put("cd" * 32, _signed_entry(tmp_path / "dist"))
    with pytest.raises(ReadOnly, match="no GITHUB_TOKEN"):
        _github_store(github, token="").put(KEY, _signed_entry(tmp_path / "dist"))


def test_immutable_releases_do_not_stop_the_store(github: FakeGitHub, tmp_path: Path) -> None:
    github.immutable = True
    for number, data in enumerate([b"PK first", b"PK second"]):
        _github_store(github).put(f"{number:02d}" * 32, _signed_entry(tmp_path / f"dist{number}", data))
    assert len(_names(github)) == 4 and not github.release(CACHE_TAG)["immutable"]


def test_a_published_immutable_cache_release_is_read_only_and_says_what_to_do(github: FakeGitHub,
                                                                               tmp_path: Path) -> None:
    github.immutable = True
    github.add_release(CACHE_TAG, draft=False, prerelease=True)  # as an earlier version made it
    with pytest.raises(ReadOnly, match="published and immutable .* delete it, and the next store makes the "
                                       "binary cache a draft"):
        _github_store(github).put(KEY, _signed_entry(tmp_path / "dist"))
    assert _names(github) == []


def test_a_leg_keeps_its_newest_keys(github: FakeGitHub, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    keys = [f"{n}{n}" * 32 for n in range(1, 5)]
    for number, key in enumerate(keys[:3]):
        _github_store(github).put(key, _signed_entry(tmp_path / f"d{number}", f"PK {number}".encode()))
    _github_store(github).put(keys[3], _signed_entry(tmp_path / "other", leg="another-leg"))
    assert sorted({name[:64] for name in _names(github)}) == sorted(keys[1:])  # the default: 2 per leg
    assert f"removed 1 older key(s) of {LEG} (the newest 2 are kept)" in capsys.readouterr().err
    _github_store(github, keep="?keep=1").put(keys[1], _signed_entry(tmp_path / "d1", b"PK 1"))  # stored again
    assert sorted({name[:64] for name in _names(github)}) == sorted(keys[1::2])  # re-stored counts as newest


@pytest.mark.parametrize("location", [f"github:{REPO}@{CACHE_TAG}?keep=0", f"github:{REPO}@{CACHE_TAG}?keep=x",
                                      f"github:{REPO}@{CACHE_TAG}?kept=2", f"github:{REPO}"])
def test_a_bad_release_location_names_the_syntax(location: str) -> None:
    with pytest.raises(CacheError, match=r"github:<owner>/<repo>@<release tag>, optionally with \?keep=N"):
        store_for(location, {})


def test_a_half_uploaded_asset_is_deleted_and_uploaded_again(github: FakeGitHub, tmp_path: Path,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(github_api, "LIMITS", replace(github_api.LIMITS, attempts=2))
    store = _github_store(github)
    store.client.sleep = lambda seconds: None
    github.break_upload = {f"{KEY}-{ARCHIVE}"}  # GitHub answers 502 and keeps an asset in state `starter`
    store.put(KEY, _signed_entry(tmp_path / "dist"))
    assets = github.assets[github.release(CACHE_TAG)["id"]]
    assert [(a["name"], a["state"]) for a in assets] == [(f"{KEY}-{ARCHIVE}", "uploaded"),
                                                          (f"{KEY}-{ARCHIVE}.entry", "uploaded")]
    assert github.asset_bytes(CACHE_TAG, f"{KEY}-{ARCHIVE}") == b"PK archive"
    assert _github_store(github).fetch(KEY, ARCHIVE, tmp_path / "got")


def test_an_entry_with_an_unfinished_asset_is_a_miss_and_replaced(github: FakeGitHub, tmp_path: Path) -> None:
    _github_store(github).put(KEY, _signed_entry(tmp_path / "dist"))
    release = github.release(CACHE_TAG)
    github.assets[release["id"]][0]["state"] = "starter"
    assert not _github_store(github).fetch(KEY, ARCHIVE, tmp_path / "got")
    _github_store(github).put(KEY, _signed_entry(tmp_path / "dist"))
    assert [a["state"] for a in github.assets[release["id"]]] == ["uploaded", "uploaded"]
    assert _github_store(github).fetch(KEY, ARCHIVE, tmp_path / "got")


def test_concurrent_first_stores_share_one_draft(github: FakeGitHub, tmp_path: Path) -> None:
    """Drafts do not reserve their tag: two jobs creating the cache release at once make two
    drafts; both then keep the oldest and the surplus one is deleted."""
    first, second = _github_store(github), _github_store(github)
    assert not first.fetch(KEY, ARCHIVE, tmp_path / "a") and not second.fetch(KEY, ARCHIVE, tmp_path / "b")
    github.add_release(CACHE_TAG, draft=True)  # the other job's draft, made after this one listed
    second.put("cd" * 32, _signed_entry(tmp_path / "second"))
    first.put(KEY, _signed_entry(tmp_path / "first"))
    [release] = github.releases
    assert sorted(name[:64] for name in github.asset_names(CACHE_TAG)) == sorted([KEY] * 2 + ["cd" * 32] * 2)
    assert release["draft"]


def test_a_published_release_taking_the_tag_meanwhile_is_read_again(github: FakeGitHub, tmp_path: Path) -> None:
    store = _github_store(github)
    assert not store.fetch(KEY, ARCHIVE, tmp_path / "got")
    github.add_release(CACHE_TAG, draft=False, prerelease=True)  # create answers 422 now
    store.put(KEY, _signed_entry(tmp_path / "dist"))
    assert len(github.releases) == 1 and len(_names(github)) == 2


def test_a_name_taken_by_a_concurrent_writer_is_read_again(github: FakeGitHub, tmp_path: Path) -> None:
    late = _github_store(github)
    assert not late.fetch(KEY, ARCHIVE, tmp_path / "got")
    _github_store(github).put(KEY, _signed_entry(tmp_path / "a", b"PK other build"))
    _github_store(github).put("cd" * 32, _signed_entry(tmp_path / "c"))
    late.put(KEY, _signed_entry(tmp_path / "b"))  # its listing is stale: the upload meets 422
    assert github.asset_bytes(CACHE_TAG, f"{KEY}-{ARCHIVE}") == b"PK archive"
    assert _names(github).count(f"{KEY}-{ARCHIVE}") == 1
    assert _github_store(github).fetch(KEY, ARCHIVE, tmp_path / "again")
    assert (tmp_path / "again" / ARCHIVE).read_bytes() == b"PK archive"


def test_an_entry_mixed_by_two_writers_is_refused_before_its_archive_is_downloaded(
        github: FakeGitHub, tmp_path: Path) -> None:
    _github_store(github).put(KEY, _signed_entry(tmp_path / "dist"))
    release = github.release(CACHE_TAG)
    [body] = [a for a in github.assets[release["id"]] if a["name"] == f"{KEY}-{ARCHIVE}"]
    body["digest"] = "sha256:" + "0" * 64  # another writer's archive under this key
    with pytest.raises(CacheError, match=f"the entry {KEY} holds an archive .* other than its .sha256 names"):
        _github_store(github).fetch(KEY, ARCHIVE, tmp_path / "got")
    assert github.requests("GET", f"/repos/{REPO}/releases/assets/{body['id']}") == 0


@pytest.mark.parametrize("files", [{"../../escape": "eA=="}, {f"{ARCHIVE}.json": "e30="}, {}])
def test_a_malformed_entry_asset_is_refused(github: FakeGitHub, tmp_path: Path, files: dict[str, str]) -> None:
    _github_store(github).put(KEY, _signed_entry(tmp_path / "dist"))
    release = github.release(CACHE_TAG)
    [entry] = [a for a in github.assets[release["id"]] if a["name"].endswith(".entry")]
    github.blobs[entry["id"]] = json.dumps({"format": 1, "files": files}).encode()
    with pytest.raises(CacheError, match=r"is not an entry of format 1 holding"):
        _github_store(github).fetch(KEY, ARCHIVE, tmp_path / "got")
    assert not (tmp_path / "escape").exists()


def test_a_rate_limited_lookup_waits_for_the_reset_then_hits(github: FakeGitHub, tmp_path: Path,
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    _github_store(github).put(KEY, _signed_entry(tmp_path / "dist"))
    now = 1_700_000_000.0
    github.clock = lambda: now
    github.exhaust(reset_in=30)
    store, waits = _github_store(github), []
    store.client.clock, store.client.sleep = (lambda: now), waits.append
    assert store.fetch(KEY, ARCHIVE, tmp_path / "got")
    assert waits == [31.0]
    assert "the primary rate limit (1000 of 1000 requests this hour used" in capsys.readouterr().err


def test_a_lookup_the_rate_limit_prevents_fails_loudly_never_a_miss(github: FakeGitHub, tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    _github_store(github).put(KEY, _signed_entry(tmp_path / "dist"))
    now = 1_700_000_000.0
    github.clock = lambda: now
    github.exhaust(reset_in=3000)  # beyond the bounded wait
    store, waits = _github_store(github), []
    store.client.clock, store.client.sleep = (lambda: now), waits.append
    with pytest.raises(LookupFailed, match=rf"github:{REPO}@{CACHE_TAG}: the lookup of {KEY} could not be made: "
                                           r".*it lifts at \d\d:\d\d:\d\d UTC, in 3001 s, beyond what this run waits"):
        store.fetch(KEY, ARCHIVE, tmp_path / "got")
    assert waits == []
    assert not issubclass(LookupFailed, CacheError)  # the lookup's `except CacheError` (a rebuild) lets it pass
    # A store the rate limit stops is not stored, and says so (a leg never fails for its store).
    github.exhaust(reset_in=3000)
    with pytest.raises(CacheError, match="not stored: .*primary rate limit"):
        store.put("cd" * 32, _signed_entry(tmp_path / "more"))


# -- HTTP transport ---------------------------------------------------------------------------

Respond = Callable[[BaseHTTPRequestHandler], None]


class Server:
    """Answers each request with `respond(handler)`; records (method, path) of each."""

    def __init__(self) -> None:
        self.requests: list[tuple[str, str]] = []
        self.stored: dict[str, bytes] = {}
        self.respond: Respond = self.webdav
        self.stop = threading.Event()
        self.base = ""

    def webdav(self, handler: BaseHTTPRequestHandler) -> None:
        if handler.command == "PUT":
            self.stored[handler.path] = handler.rfile.read(int(handler.headers["Content-Length"]))
            _send(handler, 201)
        elif handler.path in self.stored:
            _send(handler, 200, self.stored[handler.path])
        else:
            _send(handler, 404)


def _send(handler: BaseHTTPRequestHandler, status: int, body: bytes = b"", length: int | None = None) -> None:
    handler.send_response(status)
    handler.send_header("Content-Length", str(len(body) if length is None else length))
    handler.end_headers()
    if handler.command != "HEAD":
        handler.wfile.write(body)


@pytest.fixture
def http(monkeypatch: pytest.MonkeyPatch) -> Iterator[Server]:
    state = Server()

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args: object) -> None:
            pass

        def do_GET(self) -> None:
            state.requests.append((self.command, self.path))
            try:
                state.respond(self)
            except OSError:  # the client gave up
                self.close_connection = True

        do_PUT = do_HEAD = do_GET

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    state.base = f"http://127.0.0.1:{server.server_port}/cache"
    # Small numbers, with wide margins: what trips them is 100 times below or above them.
    _limits(monkeypatch, connect_s=5.0, answer_s=5.0, read_s=5.0, rate_window_s=0.2, backoff_s=0.01)
    yield state
    state.stop.set()
    server.shutdown()
    server.server_close()


def _limits(monkeypatch: pytest.MonkeyPatch, **changes: object) -> None:
    """The HTTP store's limits, changed for the stores made next."""
    monkeypatch.setattr(http_store, "LIMITS", replace(http_store.LIMITS, **changes))


def _temps(where: Path) -> list[str]:
    return [p.name for p in where.rglob("*") if ".tmp-" in p.name] if where.exists() else []


def test_http_store_round_trip(http: Server, tmp_path: Path) -> None:
    store = HttpStore(http.base)
    assert not store.fetch(KEY, ARCHIVE, tmp_path / "got")
    store.put(KEY, _entry(tmp_path / "dist"))
    assert [path for method, path in http.requests if method == "PUT"][-1].endswith(".json")  # the manifest last
    assert store.fetch(KEY, ARCHIVE, tmp_path / "got")
    assert (tmp_path / "got" / ARCHIVE).read_bytes() == b"PK archive"


def test_a_slow_trickle_is_given_up_in_bounded_time(http: Server, tmp_path: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    def trickle(handler: BaseHTTPRequestHandler) -> None:
        _send(handler, 200, length=1 << 20)
        for _ in range(500):  # 16 bytes every 20 ms: 0.8 KiB/s, far below 64 KiB per 0.2 s
            handler.wfile.write(b"x" * 16)
            handler.wfile.flush()
            if http.stop.wait(0.02):
                return

    http.respond = trickle
    _limits(monkeypatch, attempts=2)
    store, started = HttpStore(http.base), time.monotonic()
    with pytest.raises(CacheError, match=rf"{http.base}: GET {KEY}/{ARCHIVE}\.json: slower than 64 KiB per "
                                         r"0\.2 s .*\(2 attempts\)"):
        store.fetch(KEY, ARCHIVE, tmp_path / "got")
    assert time.monotonic() - started < 8  # 2 windows of 0.2 s; the trickle alone would take 20 min
    assert len(http.requests) == 2
    assert _temps(tmp_path / "got") == []
    with pytest.raises(CacheError, match="not tried: slower than"):  # given up on for the run
        store.fetch("cd" * 32, ARCHIVE, tmp_path / "other")
    assert len(http.requests) == 2


def test_a_server_error_is_retried(http: Server, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    store = HttpStore(http.base)
    store.put(KEY, _entry(tmp_path / "dist"))
    answers = iter([500])

    def flaky(handler: BaseHTTPRequestHandler) -> None:
        status = next(answers, None)
        _send(handler, status) if status else http.webdav(handler)

    http.respond, http.requests[:] = flaky, []
    assert store.fetch(KEY, ARCHIVE, tmp_path / "got")
    assert (tmp_path / "got" / ARCHIVE).read_bytes() == b"PK archive"
    assert [path.rsplit("/", 1)[1] for _, path in http.requests] == [f"{ARCHIVE}.json", f"{ARCHIVE}.json",
                                                                       f"{ARCHIVE}.sha256", ARCHIVE,
                                                                       f"{ARCHIVE}.sig"]  # optional: 404 is none
    assert f"GET {KEY}/{ARCHIVE}.json: HTTP 500; trying again in 0.01 s" in capsys.readouterr().err


@pytest.mark.parametrize("status", [404, 403])
def test_a_miss_or_a_refusal_is_not_retried(http: Server, tmp_path: Path, status: int) -> None:
    http.respond = lambda handler: _send(handler, status)
    store = HttpStore(http.base)
    if status == 404:
        assert not store.fetch(KEY, ARCHIVE, tmp_path / "got")
    else:
        with pytest.raises(CacheError, match=f"answered HTTP {status}"):
            store.fetch(KEY, ARCHIVE, tmp_path / "got")
    assert len(http.requests) == 1


def test_a_refused_connection_is_retried_with_backoff_then_a_cache_error(tmp_path: Path,
                                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    with ThreadingHTTPServer(("127.0.0.1", 0), BaseHTTPRequestHandler) as closed:
        port = closed.server_port  # nothing listens there once closed
    pauses: list[float] = []
    monkeypatch.setattr(http_store, "sleep", pauses.append)
    store = HttpStore(f"http://127.0.0.1:{port}/cache")
    with pytest.raises(CacheError, match=r"its host refuses connections \(3 attempts\); not used"):
        store.fetch(KEY, ARCHIVE, tmp_path / "got")
    assert pauses == [1.0, 2.0]
    with pytest.raises(CacheError, match="not tried"):
        store.put(KEY, _entry(tmp_path / "dist"))


def test_a_body_cut_short_leaves_no_temp(http: Server, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def short(handler: BaseHTTPRequestHandler) -> None:
        _send(handler, 200, b"0123456789", length=1000)
        handler.close_connection = True

    http.respond = short
    _limits(monkeypatch, attempts=1)
    with pytest.raises(CacheError, match=r"the connection broke .*\(1 attempt\)"):
        HttpStore(http.base).fetch(KEY, ARCHIVE, tmp_path / "got")
    assert (tmp_path / "got").is_dir() and _temps(tmp_path / "got") == []


def test_a_large_body_prints_progress(http: Server, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                      capsys: pytest.CaptureFixture[str]) -> None:
    _limits(monkeypatch, progress_bytes=100_000, progress_every_s=0.0)
    store = HttpStore(http.base)
    files = _entry(tmp_path / "dist", b"PK" + b"x" * 300_000)
    store.put(KEY, files)
    assert store.fetch(KEY, ARCHIVE, tmp_path / "got")
    lines = capsys.readouterr().err.splitlines()
    assert any(f"PUT {KEY}/{ARCHIVE}: " in line and " of 0.3 MB (" in line for line in lines), lines
    assert any(f"GET {KEY}/{ARCHIVE}: " in line and "MB of 0.3 MB (100 %)" in line and "MB/s" in line
               for line in lines), lines
    assert not any(f"{ARCHIVE}.json: " in line for line in lines)  # small bodies stay quiet


def test_a_wait_for_the_store_is_said(http: Server, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    said, notice = [], threading.Event()

    def record(message: str) -> None:
        said.append(message)
        notice.set()

    def after_the_notice(handler: BaseHTTPRequestHandler) -> None:
        assert notice.wait(10)
        _send(handler, 404)

    monkeypatch.setattr(http_store, "warn", record)
    _limits(monkeypatch, notice_s=0.0)
    http.respond = after_the_notice
    assert not HttpStore(http.base).fetch(KEY, ARCHIVE, tmp_path / "got")
    assert said == [f"{http.base}: GET {KEY}/{ARCHIVE}.json: waiting, no answer for 0 s (given up after 5 s)"]


def test_a_store_refusing_writes_is_read_only(http: Server, tmp_path: Path) -> None:
    def refuse(handler: BaseHTTPRequestHandler) -> None:
        if handler.command == "HEAD":  # reads are allowed: no signed entry there
            return _send(handler, 404)
        handler.rfile.read(int(handler.headers["Content-Length"]))
        _send(handler, 403)

    http.respond = refuse
    with pytest.raises(ReadOnly, match=r"refuses writes \(HTTP 403\)"):
        HttpStore(http.base).put(KEY, _entry(tmp_path / "dist"))
    assert [method for method, _ in http.requests] == ["HEAD", "PUT"]  # the unsigned writer's one look first


def test_an_unsigned_writer_never_replaces_a_signed_entry(http: Server, github: FakeGitHub, tmp_path: Path) -> None:
    """A writer without a key meets an entry a signing writer stored: in a directory, over HTTP
    and in a release, the signed entry stays (said, not a failure of the leg); a signing
    writer still replaces an unsigned entry, and an unsigned one still writes where none is."""
    signed, unsigned = _signed_entry(tmp_path / "signed"), _entry(tmp_path / "unsigned", b"PK other bytes")
    signed[0].write_text('{"public_key": "ed25519:the CI key", "signature": "by the CI key"}\n')
    for store in (DirectoryStore(tmp_path / "cache"), HttpStore(http.base), _github_store(github)):
        store.put(KEY, signed)
        with pytest.raises(CacheError, match="holds a signed entry for .*, which a writer without a key"):
            store.put(KEY, unsigned)
        assert store.fetch(KEY, ARCHIVE, tmp_path / "got" / type(store).__name__)
        got = tmp_path / "got" / type(store).__name__
        assert (got / ARCHIVE).read_bytes() == b"PK archive" and (got / (ARCHIVE + ".sig")).is_file()
    fresh = DirectoryStore(tmp_path / "fresh")
    fresh.put(KEY, unsigned)
    fresh.put(KEY, signed)
    assert (tmp_path / "fresh" / KEY / (ARCHIVE + ".sig")).is_file()


def test_offline_asks_no_remote_store_and_says_so(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """offline=1 never touches the network: HTTP and GitHub release stores are left out, each
    said once; a directory store is still asked. Without offline, all three are."""
    locations = [str(tmp_path / "dir"), "https://cache.example.org/anira", "github:owner/repo@cache"]
    online = stores_for(locations, {}, offline=False)
    assert [type(store) for store in online] == [DirectoryStore, HttpStore, GitHubReleaseStore]
    assert capsys.readouterr().err == ""
    offline = stores_for(locations, {}, offline=True)
    assert [type(store) for store in offline] == [DirectoryStore]
    said = capsys.readouterr().err.splitlines()
    assert said == [f"binary cache: {location}: not asked (offline=1 never touches the network; a directory store "
                    "still is)" for location in locations[1:]]
