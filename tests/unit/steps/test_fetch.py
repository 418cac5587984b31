"""fetch.py against a local HTTP server on 127.0.0.1 (no other network)."""
from __future__ import annotations

import hashlib
import os
import re
import socket
import threading
from dataclasses import dataclass, field, replace
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Iterator

import pytest

from backends.steps import fetch as fetch_module
from backends.steps.fetch import Download, FetchError, FetchSettings, fetch


@dataclass
class Origin:
    """What the test server serves, and the log of what it was asked."""

    files: dict[str, bytes] = field(default_factory=dict)
    failures_left: dict[str, int] = field(default_factory=dict)  # name -> 500s still to send
    drop_after: dict[str, int] = field(default_factory=dict)  # name -> bytes sent before closing (once)
    requests: list[tuple[str, str | None]] = field(default_factory=list)  # (path, Range header)
    base: str = ""

    def url(self, route: str, name: str) -> str:
        return f"{self.base}/{route}/{name}"

    def paths(self) -> list[str]:
        return [path for path, _ in self.requests]


def _handler(origin: Origin) -> type[BaseHTTPRequestHandler]:
    lock = threading.Lock()

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.0"  # one request per connection: a drop is a clean EOF

        def log_message(self, *args: object) -> None:
            pass

        def do_GET(self) -> None:
            with lock:
                origin.requests.append((self.path, self.headers.get("Range")))
            match = re.fullmatch(r"/(\w+)/([^/]+)", self.path)
            route, name = match.groups() if match else ("", "")
            data = origin.files.get(name)
            if data is None or route not in ("files", "fail", "drop", "norange", "mirror"):
                self.send_error(404)
                return
            if route == "fail":
                with lock:
                    left = origin.failures_left.get(name, 0)
                    origin.failures_left[name] = left - 1
                if left > 0:
                    self.send_error(500)
                    return
            ranged = route in ("files", "fail", "drop", "mirror")
            start = 0
            wanted = self.headers.get("Range")
            if ranged and wanted and (found := re.fullmatch(r"bytes=(\d+)-", wanted)):
                start = int(found.group(1))
            if start:
                self.send_response(206)
                self.send_header("Content-Range", f"bytes {start}-{len(data) - 1}/{len(data)}")
            else:
                self.send_response(200)
            body = data[start:]
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            with lock:
                cut = origin.drop_after.pop(name, None) if route == "drop" else None
            self.wfile.write(body if cut is None else body[:cut])
            self.wfile.flush()

    return Handler


@pytest.fixture
def origin() -> Iterator[Origin]:
    served = Origin()
    server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(served))
    server.daemon_threads = True
    served.base = f"http://127.0.0.1:{server.server_address[1]}"
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    yield served
    server.shutdown()
    server.server_close()
    thread.join(timeout=5)


def settings(tmp_path: Path, attempts: int = 4, backoff_s: float = 0.01, **overrides: object) -> FetchSettings:
    limits = replace(fetch_module.LIMITS, attempts=attempts, backoff_s=backoff_s, answer_s=5, read_s=5)
    values: dict[str, object] = dict(cache_dir=tmp_path / "cache", limits=limits)
    values.update(overrides)
    return FetchSettings(**values)  # type: ignore[arg-type]


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def cached_files(cache: Path) -> list[str]:
    root = cache / "sha256"
    return sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file()) if root.exists() else []


def test_download_then_cache_hit_makes_no_request(origin: Origin, tmp_path: Path) -> None:
    data = os.urandom(200_000)
    origin.files["pkg.zip"] = data
    download = Download(origin.url("files", "pkg.zip"), "pkg.zip", sha(data))

    first = fetch(download, settings(tmp_path))
    assert first.path == tmp_path / "cache" / "sha256" / sha(data) / "pkg.zip"
    assert first.path.read_bytes() == data
    assert (first.sha256, first.origin) == (sha(data), download.url)
    assert len(origin.requests) == 1

    second = fetch(download, settings(tmp_path))
    assert second.path == first.path and second.sha256 == sha(data)
    assert len(origin.requests) == 1
    assert not list((tmp_path / "cache" / "partial").glob("*.part"))


def test_mismatch_names_both_hashes_and_caches_nothing(origin: Origin, tmp_path: Path) -> None:
    data = b"the real bytes"
    origin.files["pkg.zip"] = data
    wrong = "0" * 64
    url = origin.url("files", "pkg.zip")
    with pytest.raises(FetchError) as error:
        fetch(Download(url, "pkg.zip", wrong), settings(tmp_path))
    message = str(error.value)
    assert url in message and wrong in message and sha(data) in message
    assert cached_files(tmp_path / "cache") == []
    assert not list((tmp_path / "cache" / "partial").glob("*.part"))


def test_404_fails_at_once_naming_the_url(origin: Origin, tmp_path: Path) -> None:
    url = origin.url("files", "missing.zip")
    with pytest.raises(FetchError, match=re.escape(url)) as error:
        fetch(Download(url, "missing.zip", "a" * 64), settings(tmp_path, backoff_s=10))
    assert "404" in str(error.value)
    assert len(origin.requests) == 1


def test_a_refused_connection_fails_at_once_naming_the_ways_around(tmp_path: Path,
                                                                   capsys: pytest.CaptureFixture[str]) -> None:
    with socket.socket() as closed:  # a port nothing listens on: the kernel refuses at once
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]
    url = f"http://127.0.0.1:{port}/x.tgz"
    with pytest.raises(FetchError) as error:
        fetch(Download(url, "x.tgz", "a" * 64), settings(tmp_path, backoff_s=10))
    message = str(error.value)
    assert "its host refuses connections" in message and url in message
    assert all(hint in message for hint in ("offline=1", "origin=", "mirror=", "cache="))
    assert "trying again" not in capsys.readouterr().err


def test_a_name_that_does_not_resolve_fails_at_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    import requests
    import urllib3.exceptions

    def unresolvable(self, url, **_):  # what requests raises when getaddrinfo fails
        reason = urllib3.exceptions.NameResolutionError("nowhere.invalid", None, socket.gaierror(-2, "unknown"))
        raise requests.ConnectionError(urllib3.exceptions.MaxRetryError(None, url, reason))

    monkeypatch.setattr(requests.Session, "get", unresolvable)
    with pytest.raises(FetchError, match="its host name does not resolve; without network"):
        fetch(Download("https://nowhere.invalid/x.tgz", "x.tgz", "a" * 64), settings(tmp_path, backoff_s=10))
    assert "trying again" not in capsys.readouterr().err


def test_5xx_is_retried_then_succeeds(origin: Origin, tmp_path: Path) -> None:
    data = b"flaky" * 1000
    origin.files["flaky.tgz"] = data
    origin.failures_left["flaky.tgz"] = 2
    got = fetch(Download(origin.url("fail", "flaky.tgz"), "flaky.tgz", sha(data)), settings(tmp_path))
    assert got.path.read_bytes() == data
    assert len(origin.requests) == 3


def test_retries_are_bounded(origin: Origin, tmp_path: Path) -> None:
    origin.files["down.tgz"] = b"never"
    origin.failures_left["down.tgz"] = 100
    with pytest.raises(FetchError, match="giving up after 3 failed attempts"):
        fetch(Download(origin.url("fail", "down.tgz"), "down.tgz", sha(b"never")),
              settings(tmp_path, attempts=3))
    assert len(origin.requests) == 3


def test_dropped_connection_resumes_with_range(origin: Origin, tmp_path: Path) -> None:
    chunk = fetch_module.CHUNK_SIZE
    data = os.urandom(3 * chunk)
    origin.files["big.bin"] = data
    origin.drop_after["big.bin"] = chunk + chunk // 2
    got = fetch(Download(origin.url("drop", "big.bin"), "big.bin", sha(data)), settings(tmp_path))
    assert got.path.read_bytes() == data
    assert len(origin.requests) == 2
    first_range, resumed_range = origin.requests[0][1], origin.requests[1][1]
    assert first_range is None
    assert resumed_range is not None
    resumed_at = int(re.fullmatch(r"bytes=(\d+)-", resumed_range).group(1))  # type: ignore[union-attr]
    assert 0 < resumed_at <= chunk + chunk // 2


def test_server_ignoring_range_restarts_from_zero(origin: Origin, tmp_path: Path) -> None:
    data = os.urandom(50_000)
    origin.files["plain.bin"] = data
    url = origin.url("norange", "plain.bin")
    part = fetch_module._Cache(tmp_path / "cache").partial_path(url)
    part.parent.mkdir(parents=True)
    part.write_bytes(b"stale bytes from an older attempt")
    got = fetch(Download(url, "plain.bin", sha(data)), settings(tmp_path))
    assert got.path.read_bytes() == data
    assert origin.requests[0][1] == "bytes=33-"


def test_offline_with_empty_cache_fails_without_requests(origin: Origin, tmp_path: Path) -> None:
    origin.files["pkg.zip"] = b"x"
    with pytest.raises(FetchError, match=r"^offline: pkg.zip is not in the cache .* run once without offline=1"):
        fetch(Download(origin.url("files", "pkg.zip"), "pkg.zip", sha(b"x")),
              settings(tmp_path, offline=True, mirrors=(origin.base + "/mirror",)))
    assert origin.requests == []


def test_offline_uses_a_directory_mirror(origin: Origin, tmp_path: Path) -> None:
    mirror = tmp_path / "mirror"
    mirror.mkdir()
    (mirror / "pkg.zip").write_bytes(b"mirrored")
    got = fetch(Download(origin.url("files", "pkg.zip"), "pkg.zip", sha(b"mirrored")),
                settings(tmp_path, offline=True, mirrors=(str(mirror),)))
    assert got.path.read_bytes() == b"mirrored"
    assert got.origin == str(mirror / "pkg.zip")
    assert origin.requests == []


def test_mirrors_are_tried_in_order_before_upstream(origin: Origin, tmp_path: Path) -> None:
    data = b"from the url mirror"
    origin.files["pkg.zip"] = data
    empty_dir_mirror = tmp_path / "empty-mirror"
    empty_dir_mirror.mkdir()
    got = fetch(Download(origin.url("files", "pkg.zip"), "pkg.zip", sha(data)),
                settings(tmp_path, mirrors=(str(empty_dir_mirror), origin.base + "/nothing/",
                                            origin.base + "/mirror")))
    assert got.origin == origin.url("mirror", "pkg.zip")
    assert origin.paths() == ["/nothing/pkg.zip", "/mirror/pkg.zip"]  # upstream never asked


def test_mirror_miss_falls_through_to_upstream(origin: Origin, tmp_path: Path) -> None:
    data = b"upstream only"
    origin.files["pkg.zip"] = data
    got = fetch(Download(origin.url("files", "pkg.zip"), "pkg.zip", sha(data)),
                settings(tmp_path, mirrors=(origin.base + "/nothing", (tmp_path / "nodir").as_uri())))
    assert got.origin == origin.url("files", "pkg.zip")
    assert origin.paths() == ["/nothing/pkg.zip", "/files/pkg.zip"]


def test_unpinned_is_refused_without_lock(origin: Origin, tmp_path: Path) -> None:
    origin.files["new.zip"] = b"new"
    with pytest.raises(FetchError, match="new.zip has no sha256 pin: `scons lock` records it"):
        fetch(Download(origin.url("files", "new.zip"), "new.zip", None), settings(tmp_path))
    assert origin.requests == []


def test_lock_downloads_and_returns_the_hash(origin: Origin, tmp_path: Path) -> None:
    origin.files["new.zip"] = b"trust on first use"
    got = fetch(Download(origin.url("files", "new.zip"), "new.zip", None), settings(tmp_path, lock=True))
    assert got.sha256 == sha(b"trust on first use")
    assert got.path == tmp_path / "cache" / "sha256" / got.sha256 / "new.zip"
    # the recorded pin then hits the cache
    again = fetch(Download(origin.url("files", "new.zip"), "new.zip", got.sha256), settings(tmp_path))
    assert again.path == got.path and len(origin.requests) == 1


def test_malformed_pin_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(FetchError, match="not 64 hex digits"):
        fetch(Download("http://127.0.0.1:9/x", "x", "abc"), settings(tmp_path))


@pytest.mark.parametrize("as_uri", [False, True])
def test_local_path_origin_is_hashed_and_cached(tmp_path: Path, as_uri: bool) -> None:
    source = tmp_path / "upstream" / "lib.tgz"
    source.parent.mkdir()
    source.write_bytes(b"local bytes")
    url = source.as_uri() if as_uri else str(source)
    got = fetch(Download(url, "lib.tgz", sha(b"local bytes")), settings(tmp_path, offline=True))
    assert got.path.read_bytes() == b"local bytes"
    assert got.origin == str(source)
    assert got.path.parent.name == sha(b"local bytes")


def test_local_path_mismatch_and_missing(tmp_path: Path) -> None:
    source = tmp_path / "lib.tgz"
    source.write_bytes(b"local bytes")
    with pytest.raises(FetchError, match="sha256 mismatch"):
        fetch(Download(str(source), "lib.tgz", "1" * 64), settings(tmp_path))
    with pytest.raises(FetchError, match="does not exist"):
        fetch(Download(str(tmp_path / "gone.tgz"), "gone.tgz", "1" * 64), settings(tmp_path))
    assert cached_files(tmp_path / "cache") == []


@pytest.mark.parametrize("altered", [b"bad bytes!!!", b"gooD bytes"], ids=["other size", "same size"])
def test_an_altered_cache_entry_is_evicted_and_refetched(origin: Origin, tmp_path: Path, altered: bytes,
                                                        capsys: pytest.CaptureFixture[str]) -> None:
    data = b"good bytes"
    origin.files["pkg.zip"] = data
    download = Download(origin.url("files", "pkg.zip"), "pkg.zip", sha(data))
    path = fetch(download, settings(tmp_path)).path
    path.write_bytes(altered)  # in place: only a hash can tell the same-size case
    assert fetch(download, settings(tmp_path)).path.read_bytes() == data
    assert len(origin.requests) == 2
    assert "the cached copy was altered" in capsys.readouterr().err


@pytest.mark.parametrize("link", ["hard", "symbolic"])
def test_a_local_origin_enters_the_cache_as_a_private_copy(tmp_path: Path, link: str) -> None:
    """Editing the user's file (or a mirror's symlink target) must never edit the cache."""
    source = tmp_path / "upstream" / "lib.tgz"
    source.parent.mkdir()
    source.write_bytes(b"local bytes")
    mirror = tmp_path / "mirror"
    mirror.mkdir()
    (os.link if link == "hard" else os.symlink)(source, mirror / "lib.tgz")
    got = fetch(Download("http://127.0.0.1:9/lib.tgz", "lib.tgz", sha(b"local bytes")),
                settings(tmp_path, offline=True, mirrors=(str(mirror),)))
    assert not got.path.is_symlink() and got.path.stat().st_nlink == 1
    source.write_bytes(b"LOCAL BYTES")  # same size, in place
    assert got.path.read_bytes() == b"local bytes"


def test_concurrent_fetches_of_one_url_share_the_download(origin: Origin, tmp_path: Path) -> None:
    data = os.urandom(300_000)
    origin.files["shared.zip"] = data
    download = Download(origin.url("files", "shared.zip"), "shared.zip", sha(data))
    results: list[Path] = []
    threads = [threading.Thread(target=lambda: results.append(fetch(download, settings(tmp_path)).path))
               for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    assert len(results) == 4 and all(p.read_bytes() == data for p in results)
    assert len(origin.requests) == 1


def test_a_large_download_says_how_far_it_got(origin: Origin, tmp_path: Path,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    data = os.urandom(300_000)
    origin.files["big.bin"] = data
    limits = replace(fetch_module.LIMITS, progress_bytes=100_000, progress_every_s=0.0)
    fetch(Download(origin.url("files", "big.bin"), "big.bin", sha(data)), settings(tmp_path, limits=limits))
    lines = capsys.readouterr().err.splitlines()
    assert lines and all(re.fullmatch(r"fetch big\.bin: [0-9.]+ MB of 0\.3 MB \([0-9]+ %\), [0-9.]+ MB/s", line)
                         for line in lines), lines
    assert lines[-1].startswith("fetch big.bin: 0.3 MB of 0.3 MB (100 %)")
    origin.files["small.bin"] = b"small"
    fetch(Download(origin.url("files", "small.bin"), "small.bin", sha(b"small")), settings(tmp_path, limits=limits))
    assert capsys.readouterr().err == ""  # under progress_bytes: quiet
