"""The one HTTP client (backends/util/http.py) against servers on 127.0.0.1 that misbehave on
purpose (tests/hostile_http.py): every deadline, the minimum rate, caps, compressed answers,
redirects, retries and pauses, each able to fail both ways. The callers' own cases (fetch, the
HTTP store, the GitHub client) are in test_hostile_remotes.py."""
from __future__ import annotations

import socket
import threading
import zlib
from dataclasses import replace
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Iterator

import pytest

from backends.util import http
from hostile_http import Clock, Exchange, Hostile, Trickle, announcing, body, gzip_bomb, gzip_bomb_answer

# Small numbers with wide margins: each case trips one of them by far, never by a hair.
LIMITS = http.Limits(connect_s=5.0, answer_s=0.5, read_s=5.0, rate_window_s=0.3, deadline_s=20.0, attempts=1,
                     backoff_s=0.01)
CAP = http.Cap(1 << 20, "the test's cap")


@pytest.fixture
def server() -> Iterator[Hostile]:
    with Hostile() as hostile:
        yield hostile


def _client(notices: list[str] | None = None, **limits: object) -> http.Client:
    said = notices if notices is not None else []
    return http.Client(replace(LIMITS, **limits), notice=said.append, sleep=lambda s: None)


def _get(client: http.Client, url: str, cap: http.Cap = CAP) -> bytes:
    with client.open("GET", url, what="GET test") as answer:
        return answer.read(cap)


def test_a_complete_answer_is_read_as_sent(server: Hostile) -> None:
    url = server.route("/ok", body(b"hello"))
    assert _get(_client(), url) == b"hello"
    assert server.requests[0][2]["accept-encoding"] == "identity"


def test_headers_trickled_a_byte_at_a_time_are_cut_at_the_answer_deadline(server: Hostile) -> None:
    """Each byte comes well within the read timeout (5 s): only the deadline can end it."""
    trickle = Trickle(every_s=0.05)
    url = server.route("/slow", trickle)
    clock = Clock()
    with pytest.raises(http.Transient, match=r"^no complete answer in 0\.5 s$"):
        _get(_client(), url)
    assert clock() < 5.0  # the trickle alone goes on for 30 s
    assert trickle.sent >= 3  # it was trickling, not silent


def test_the_answer_deadline_counts_from_an_uploads_last_byte(server: Hostile, tmp_path: Path) -> None:
    """An upload slower than answer_s but at the minimum rate is no late answer."""
    upload = tmp_path / "body"
    upload.write_bytes(b"x" * (256 << 10))
    server.route("/put", body(b"stored", status=201))
    with _client(answer_s=2.0, rate_window_s=5.0).open("PUT", server.base + "/put", what="PUT test",
                                                       upload=upload) as answer:
        assert answer.status == 201 and answer.read(CAP) == b"stored"
    assert int(server.requests[0][2]["content-length"]) == 256 << 10


def test_a_stalled_body_is_given_up_after_the_read_timeout(server: Hostile) -> None:
    url = server.route("/stall", announcing(1 << 20, b"x" * 1000))
    clock = Clock()
    with pytest.raises(http.Transient, match=r"^nothing received for 0\.3 s$"):
        _get(_client(read_s=0.3, rate_window_s=10.0), url)
    assert clock() < 5.0


def test_a_trickled_body_is_given_up_below_the_minimum_rate(server: Hostile) -> None:
    def trickle(exchange: Exchange) -> None:
        exchange.head(200, 1 << 20)
        while not exchange.stop.wait(0.02) and exchange.send(b"x" * 16):  # 0.8 KiB/s, a read every 20 ms
            pass

    url = server.route("/trickle", trickle)
    with pytest.raises(http.Transient, match=r"^slower than 64 KiB per 0\.3 s \("):
        _get(_client(), url)


def test_a_body_within_the_minimum_rate_but_past_the_deadline_is_cut_and_not_retried(server: Hostile) -> None:
    def steady(exchange: Exchange) -> None:
        exchange.head(200, 100 << 20)
        while not exchange.stop.wait(0.01) and exchange.send(b"x" * (64 << 10)):  # ~6 MB/s: passes the rate
            pass

    url = server.route("/long", steady)
    client = _client(deadline_s=1.0, attempts=3)
    clock = Clock()
    with pytest.raises(http.Overdue, match=r"^not complete in 1 s$") as raised:
        client.retrying("GET test", lambda: _get(client, url, http.Cap(1 << 30, "a GiB")))
    assert raised.value.attempts == 1 and len(server.requests) == 1  # starting over would be cut again
    assert clock() < 10.0


def test_an_overdue_attempt_that_kept_what_it_got_is_tried_again(server: Hostile) -> None:
    url = server.route("/long", announcing(1 << 20, b"x" * 100))
    client = _client(deadline_s=0.3, read_s=5.0, rate_window_s=10.0, attempts=3)
    kept = iter([True, False])  # the first attempt kept its bytes, the second did not
    with pytest.raises(http.Overdue):
        client.retrying("GET test", lambda: _get(client, url), kept=lambda: next(kept))
    assert len(server.requests) == 2


def test_a_content_length_past_the_cap_is_refused_before_the_body_is_read(server: Hostile) -> None:
    url = server.route("/huge", announcing(10**12))
    clock = Clock()
    with pytest.raises(http.TooLarge, match=r"it announces 1,000,000,000,000 bytes, more than the test's cap "
                                            r"\(1,048,576\)"):
        _get(_client(), url)
    assert clock() < 5.0  # refused at the headers, not after a read timeout


def test_a_body_without_a_length_is_refused_once_it_passes_the_cap(server: Hostile) -> None:
    data = b"y" * (CAP.size + 300_000)
    url = server.route("/big", body(data, length=None))
    received: list[int] = []
    with pytest.raises(http.TooLarge, match=r"it sent more than the test's cap \(1,048,576 bytes\)"):
        with _client().open("GET", url, what="GET test") as answer:
            for chunk in answer.chunks(CAP):
                received.append(len(chunk))
    assert sum(received) <= CAP.size
    exact = b"z" * CAP.size  # the other direction: exactly the cap passes
    assert _get(_client(), server.route("/exact", body(exact, length=None))) == exact


def test_a_resumed_body_counts_what_is_held_against_the_cap(server: Hostile) -> None:
    url = server.route("/rest", body(b"r" * 1000))
    with _client().open("GET", url, what="GET test") as answer:
        with pytest.raises(http.TooLarge, match="announces 1,048,577 bytes"):
            list(answer.chunks(CAP, offset=CAP.size - 999))
    with _client().open("GET", url, what="GET test") as answer:
        assert len(b"".join(answer.chunks(CAP, offset=CAP.size - 1000))) == 1000


def test_a_gzip_bomb_is_refused_unread(server: Hostile) -> None:
    bomb = gzip_bomb()
    assert len(bomb) < 1100 << 10  # about 1 MiB...
    assert zlib.decompressobj(31).decompress(bomb[:4096], 65536) == bytes(65536)  # ...of gzip'd zeros
    assert int.from_bytes(bomb[-4:], "little") == 1 << 30  # ...that says it inflates to 1 GiB
    url = server.route("/bomb", gzip_bomb_answer())
    with pytest.raises(http.Encoded, match="Content-Encoding: gzip though identity was asked"):
        with _client().open("GET", url, what="GET test") as answer:
            pytest.fail(f"a compressed answer was handed on ({answer.status})")


def test_identity_spelled_out_is_no_encoding(server: Hostile) -> None:
    url = server.route("/id", body(b"plain", Content_Encoding="Identity"))
    assert _get(_client(), url) == b"plain"


def test_a_redirect_to_another_host_drops_the_authorization(server: Hostile) -> None:
    with Hostile() as storage:
        target = storage.route("/blob", body(b"the asset"))
        server.route("/asset", body(b"", status=302, Location=target))
        server.route("/here", body(b"", status=302, Location="/same-host"))
        server.route("/same-host", body(b"same"))
        client = http.Client(LIMITS, headers={"Authorization": "Bearer secret"})
        assert _get(client, server.base + "/asset") == b"the asset"
        assert _get(client, server.base + "/here") == b"same"
    assert "authorization" not in storage.requests[0][2]
    assert server.requests[-1][2]["authorization"] == "Bearer secret"  # the same host keeps it


def test_redirects_are_bounded(server: Hostile) -> None:
    server.route("/loop", body(b"", status=302, Location="/loop"))
    with pytest.raises(http.HttpError, match=f"more than {http.MAX_REDIRECTS} redirects"):
        _get(_client(), server.base + "/loop")
    assert len(server.requests) == http.MAX_REDIRECTS + 1


def test_retries_are_said_bounded_and_pauses_uncounted() -> None:
    notices: list[str] = []
    waits: list[float] = []
    client = http.Client(http.Limits(attempts=3, backoff_s=1.0), notice=notices.append, sleep=waits.append)
    outcomes: list[Exception] = [http.Pause(7.0, "a rate limit; waiting 7 s"), http.Transient("HTTP 502"),
                                 http.Pause(3.0, "again; waiting 3 s"), http.Transient("broke"),
                                 http.Transient("broke again")]

    def attempt() -> str:
        raise outcomes.pop(0)

    with pytest.raises(http.Transient, match="broke again") as raised:
        client.retrying("GET x", attempt)
    assert raised.value.attempts == 3 and outcomes == []
    assert waits == [7.0, 1.0, 3.0, 2.0]
    assert notices == ["GET x: a rate limit; waiting 7 s", "GET x: HTTP 502; trying again in 1 s",
                       "GET x: again; waiting 3 s", "GET x: broke; trying again in 2 s"]


def test_a_refused_connection_is_unreachable_at_once() -> None:
    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]
    with pytest.raises(http.Unreachable, match="^its host refuses connections$"):
        _get(_client(), f"http://127.0.0.1:{port}/x")


def test_a_wait_for_an_answer_is_said_once(server: Hostile) -> None:
    answered = threading.Event()

    def late(exchange: Exchange) -> None:
        answered.wait(10)
        body(b"late")(exchange)

    notices: list[str] = []

    def notice(message: str) -> None:
        notices.append(message)
        answered.set()

    client = http.Client(http.Limits(notice_s=0.0, answer_s=10.0), notice=notice)
    assert _get(client, server.route("/late", late)) == b"late"
    assert notices == ["GET test: waiting, no answer for 0 s (given up after 10 s)"]


def test_a_large_body_says_how_far_it_got(server: Hostile) -> None:
    notices: list[str] = []
    data = b"p" * 300_000
    _get(_client(notices, progress_bytes=100_000, progress_every_s=0.0), server.route("/big", body(data)))
    assert notices and notices[-1].startswith("GET test: 0.3 MB of 0.3 MB (100 %), ")
    quiet: list[str] = []
    _get(_client(quiet, progress_bytes=400_000, progress_every_s=0.0), server.route("/small", body(data)))
    assert quiet == []


def test_a_body_read_to_its_end_leaves_the_connection_for_the_next_request() -> None:
    """Hundreds of GitHub API calls per run: each must not cost a new connection."""
    ports: set[int] = set()

    class KeepAlive(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args: object) -> None:
            pass

        def do_GET(self) -> None:
            ports.add(self.client_address[1])
            self.send_response(200)
            self.send_header("Content-Length", "2")
            self.end_headers()
            self.wfile.write(b"ok")

    with ThreadingHTTPServer(("127.0.0.1", 0), KeepAlive) as keep_alive:
        threading.Thread(target=keep_alive.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
        client = _client()
        url = f"http://127.0.0.1:{keep_alive.server_port}/x"
        assert [_get(client, url) for _ in range(3)] == [b"ok"] * 3
        keep_alive.shutdown()
    assert len(ports) == 1
