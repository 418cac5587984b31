"""`Store.holds`: whether a store still holds an entry as it was stored, the cheap look the
store step's record rests on (graph/declare.py `_still_stored`): stats in a directory, one HEAD per
file over HTTP, the run's one listing of a GitHub release. Each answers True, False (gone,
or not as stored) and None (cannot be told now: the step is left as it is)."""
from __future__ import annotations

import threading
from dataclasses import replace
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Iterator

import pytest

from backends.cache import http_store
from backends.cache.directory_store import DirectoryStore
from backends.cache.http_store import HttpStore
from fake_github import FakeGitHub
from test_binary_cache_stores import ARCHIVE, CACHE_TAG, KEY, _entry, _github_store, _signed_entry, github  # noqa: F401


def _sizes(files: list[Path]) -> dict[str, int]:
    return {path.name: path.stat().st_size for path in files}


def test_a_directory_store_is_looked_at_by_stat(tmp_path: Path) -> None:
    store = DirectoryStore(tmp_path / "cache")
    files = _entry(tmp_path / "dist")
    sizes = _sizes(files)
    assert store.holds(KEY, ARCHIVE, sizes) is False  # never stored
    store.put(KEY, files)
    assert store.holds(KEY, ARCHIVE, sizes) is True
    stored = tmp_path / "cache" / KEY / ARCHIVE
    stored.write_bytes(b"PK")
    assert store.holds(KEY, ARCHIVE, sizes) is False  # truncated
    stored.unlink()
    stored.symlink_to(files[-1])
    assert store.holds(KEY, ARCHIVE, sizes) is False  # a symlink is not the entry's file
    stored.unlink()
    assert store.holds(KEY, ARCHIVE, sizes) is False


class Heads:
    """Answers HEAD requests: `status` and a Content-Length of `length` bytes (None: none sent)."""

    def __init__(self) -> None:
        self.status, self.length = 200, 10
        self.heads: list[str] = []
        self.base = ""


@pytest.fixture
def heads(monkeypatch: pytest.MonkeyPatch) -> Iterator[Heads]:
    state = Heads()

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args: object) -> None:
            pass

        def do_HEAD(self) -> None:  # noqa: N802
            state.heads.append(self.path)
            self.send_response(state.status)
            if state.length is not None:
                self.send_header("Content-Length", str(state.length))
            self.end_headers()

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    state.base = f"http://127.0.0.1:{server.server_port}/cache"
    monkeypatch.setattr(http_store, "LIMITS", replace(http_store.LIMITS, backoff_s=0.01))
    yield state
    server.shutdown()
    server.server_close()


def test_an_http_store_is_looked_at_with_one_head_per_file(heads: Heads, capsys: pytest.CaptureFixture[str]) -> None:
    store = HttpStore(heads.base)
    sizes = {ARCHIVE + ".json": 10, ARCHIVE: 10}
    assert store.holds(KEY, ARCHIVE, sizes) is True
    assert heads.heads == [f"/cache/{KEY}/{name}" for name in sizes]
    heads.length = 11
    assert store.holds(KEY, ARCHIVE, sizes) is False  # not the size stored
    heads.length = None
    assert store.holds(KEY, ARCHIVE, sizes) is True  # a server that sends no length is taken at its word
    heads.status = 404
    assert store.holds(KEY, ARCHIVE, sizes) is False
    heads.status = 503
    assert store.holds(KEY, ARCHIVE, sizes) is None  # retried, then cannot be told
    assert f"cannot tell whether {heads.base} still holds {KEY}" in capsys.readouterr().err


def test_a_github_store_is_looked_at_in_its_one_listing(github: FakeGitHub, tmp_path: Path) -> None:  # noqa: F811
    files = _signed_entry(tmp_path / "dist")
    _github_store(github).put(KEY, files)
    store = _github_store(github)
    before = len(github.calls)
    assert store.holds(KEY, ARCHIVE, _sizes(files)) is True
    assert store.holds(KEY, ARCHIVE, _sizes(files)) is True
    assert len(github.calls) - before <= 2, "more than the one listing (and its release lookup)"
    assert store.holds(KEY, ARCHIVE, {**_sizes(files), ARCHIVE: 1}) is False
    release = github.release(CACHE_TAG)
    github.assets[release["id"]] = [a for a in github.assets[release["id"]] if not a["name"].endswith(".entry")]
    assert _github_store(github).holds(KEY, ARCHIVE, _sizes(files)) is False
