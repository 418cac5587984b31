"""One HTTP client for every remote the project reads or writes: upstream downloads
(steps/fetch.py), the GitHub API (github.py) and the HTTP binary cache (cache/stores.py).

An exchange is bounded in bytes and in time, whatever the server does:

- bytes: a body is read as it was sent, never decoded. `Accept-Encoding: identity` is asked,
  and an answer with another Content-Encoding is refused before its body is read, so a gzip
  bomb is never inflated. A body is refused once it passes its reader's `Cap`, at once when
  its Content-Length announces more;
- time: `connect_s` to connect; `answer_s` for the status line and every header, from the
  start (after an upload, from its last byte); `read_s` for any one read of the body; at
  least `rate_minimum` bytes in every `rate_window_s` (a trickle passes any read timeout);
  `deadline_s` for the whole exchange. A socket timeout starts again with every byte, so a
  server sending one header byte a second would pass it: the two deadlines are kept by a
  watchdog thread per exchange, which shuts the connection's socket down, and the read
  blocked on it returns at once;
- retries (`Client.retrying`, the one retry loop): `attempts` in all for a failure another
  attempt may get past (`Transient`), `backoff_s` apart and doubled each time, each one said;
  a wait the server asks for (`Pause`, a rate limit) is not counted;
- redirects are followed here, at most MAX_REDIRECTS, their bodies unread; one that leads to
  another host drops the Authorization header.

The retries are not urllib3's `Retry` (mounted through requests' adapters): it stops at the
answer's headers, while a body that breaks midway must be retried too, a download resumed from
where it broke (which changes the request), and every retry said where the run waits.
"""
from __future__ import annotations

import contextlib
import functools
import http.client
import json as jsonlib
import socket
import sys
import threading
import time
import urllib.parse
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterator, Mapping, NamedTuple, TypeVar, cast

from backends.util.errors import BackendsError

# requests takes ~0.1 s to import: it is imported when the first request is made, so a null
# build, plan=1 or list never pays for it.
if TYPE_CHECKING:
    import requests

KIB = 1024
MIB = 1024 * KIB
MAX_REDIRECTS = 5
CHUNK = 1 << 20

T = TypeVar("T")


@dataclass(frozen=True)
class Limits:
    """How long an exchange may take and how often it is tried (module docstring)."""

    connect_s: float = 10.0
    answer_s: float = 30.0
    read_s: float = 30.0
    rate_window_s: float = 30.0
    rate_minimum: int = 64 * KIB
    deadline_s: float = 3600.0
    notice_s: float = 5.0  # no answer for this long: the wait is said (the run holds its tree meanwhile)
    attempts: int = 3
    backoff_s: float = 1.0
    progress_bytes: int = 8 * 1000 * 1000  # a larger body says how far it got...
    progress_every_s: float = 5.0  # ...this often


class Cap(NamedTuple):
    """The most bytes a body may have, and what that limit is, for the refusal."""

    size: int
    what: str  # "the size its manifest declares", "the limit for a manifest", ...


class HttpError(BackendsError):
    """An exchange that gave no usable answer; the message says why (the caller says what it
    asked). `attempts`: how many attempts ended in it."""

    attempts = 1


class Transient(HttpError):
    """A failure another attempt may get past: a timeout, a broken connection, a transfer too
    slow, a busy server."""


class Unreachable(Transient):
    """The host name does not resolve, or the host refuses connections."""


class Busy(Transient):
    """The server answered, busy or failing (HTTP 5xx, 429): another attempt may pass."""

    def __init__(self, why: str, status: int) -> None:
        super().__init__(why)
        self.status = status


class Overdue(Transient):
    """Cut at a deadline; tried again only after an attempt that kept what it got (a resumed
    download): starting over would be cut again."""


class TooLarge(HttpError):
    """The body passed its Cap, or announced that it would."""


class Encoded(HttpError):
    """The answer is compressed (a Content-Encoding other than identity)."""


class Pause(Exception):
    """Wait `seconds`, then try again without counting a failure: what a server asked for (a
    rate limit). The message says why and until when."""

    def __init__(self, seconds: float, why: str) -> None:
        super().__init__(why)
        self.seconds = seconds


def say(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def _size_text(count: float) -> str:
    return f"{count / KIB:.3g} KiB" if count < MIB else f"{count / MIB:.3g} MiB"


# -- deadlines ----------------------------------------------------------------------------------

# The exchange the calling thread is sending: the connections it opens report their sockets to it.
_current = threading.local()


class _Exchange:
    """The deadlines of one request, kept by a watchdog thread. A deadline passed shuts down
    every socket the exchange used and records the failure it makes (`cut`): a late answer is
    Transient (a busy server may answer the next attempt in time), a response past its whole
    deadline Overdue."""

    def __init__(self, limits: Limits, what: str, notice: Callable[[str], None]) -> None:
        self.limits, self.what, self.notice = limits, what, notice
        self.start = time.monotonic()
        self.sent, self.answered, self.done = threading.Event(), threading.Event(), threading.Event()
        self.cut: Transient | None = None
        self._sockets: list[socket.socket] = []
        self._lock = threading.Lock()
        self._watchdog = threading.Thread(target=self._watch, name=f"deadlines of {what}", daemon=True)

    def __enter__(self) -> _Exchange:
        self._watchdog.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        with self._lock:
            self.done.set()
        self.sent.set()
        self.answered.set()
        self._watchdog.join()

    def watch(self, sock: socket.socket) -> None:
        with self._lock:
            if sock not in self._sockets:
                self._sockets.append(sock)
            if self.cut is not None:
                _shut(sock)

    def _watch(self) -> None:
        limits, end = self.limits, self.start + self.limits.deadline_s
        if not _until(self.sent, end):
            return self._cut(Overdue(f"not complete in {limits.deadline_s:g} s"))
        sent = time.monotonic()
        answer_by = min(sent + limits.answer_s, end)
        if limits.notice_s < limits.answer_s and not _until(self.answered, min(sent + limits.notice_s, answer_by)):
            self.notice(f"{self.what}: waiting, no answer for {limits.notice_s:g} s "
                        f"(given up after {limits.answer_s:g} s)")
        if not _until(self.answered, answer_by):
            return self._cut(Transient(f"no complete answer in {limits.answer_s:g} s"))
        if not _until(self.done, end):
            self._cut(Overdue(f"not complete in {limits.deadline_s:g} s"))

    def _cut(self, failure: Transient) -> None:
        with self._lock:
            if self.done.is_set():
                return
            self.cut = failure
            for sock in self._sockets:
                _shut(sock)


def _until(event: threading.Event, moment: float) -> bool:
    return event.wait(max(moment - time.monotonic(), 0.0))


def _shut(sock: socket.socket) -> None:
    """End every read and write on `sock` now, from another thread. The plain socket's shutdown,
    also under TLS: the TLS object's would change its state under the reading thread."""
    try:
        socket.socket.shutdown(sock, socket.SHUT_RDWR)
    except OSError:
        pass  # closed already


def _register(sock: object) -> None:
    exchange = getattr(_current, "exchange", None)
    if exchange is not None and isinstance(sock, socket.socket):
        exchange.watch(sock)


@functools.cache
def _watched_pools() -> dict[str, Any]:
    """urllib3's connection pools, with connections that report each socket to the exchange of
    the thread using them: when it is made (before any TLS handshake) and when it is reused."""
    from urllib3.connection import HTTPConnection, HTTPSConnection
    from urllib3.connectionpool import HTTPConnectionPool, HTTPSConnectionPool

    class Reporting:
        sock: Any

        def _new_conn(self) -> socket.socket:
            sock: socket.socket = super()._new_conn()  # type: ignore[misc]
            _register(sock)
            return sock

        def request(self, *args: Any, **kwargs: Any) -> None:
            _register(self.sock)
            super().request(*args, **kwargs)  # type: ignore[misc]

    class ReportingHTTP(Reporting, HTTPConnection):
        pass

    class ReportingHTTPS(Reporting, HTTPSConnection):
        pass

    class Pool(HTTPConnectionPool):
        ConnectionCls = ReportingHTTP

    class TLSPool(HTTPSConnectionPool):
        ConnectionCls = ReportingHTTPS

    return {"http": Pool, "https": TLSPool}


def _session(headers: Mapping[str, str]) -> requests.Session:
    import requests
    from requests.adapters import HTTPAdapter

    pools = _watched_pools()

    class Adapter(HTTPAdapter):
        def init_poolmanager(self, *args: Any, **kwargs: Any) -> None:
            super().init_poolmanager(*args, **kwargs)
            self.poolmanager.pool_classes_by_scheme = pools

        def proxy_manager_for(self, proxy: str, **kwargs: Any) -> Any:
            manager = super().proxy_manager_for(proxy, **kwargs)
            if not proxy.lower().startswith("socks"):  # SOCKS proxies have connections of their own
                manager.pool_classes_by_scheme = pools
            return manager

    session = requests.Session()
    session.headers.update(headers)
    for scheme in ("http://", "https://"):
        session.mount(scheme, Adapter())
    return session


# -- failures -----------------------------------------------------------------------------------

def _transport_errors() -> tuple[type[BaseException], ...]:
    import requests
    import urllib3.exceptions

    return (OSError, http.client.HTTPException, urllib3.exceptions.HTTPError, requests.RequestException)


def _causes(error: BaseException) -> Iterator[object]:
    """`error` and everything it wraps (requests wraps urllib3's errors, which wrap the OS's)."""
    seen: set[int] = set()
    pending: list[object] = [error]
    while pending:
        cause = pending.pop()
        if cause is None or id(cause) in seen:
            continue
        seen.add(id(cause))
        yield cause
        pending += [getattr(cause, "reason", None), getattr(cause, "__cause__", None),
                    getattr(cause, "__context__", None),
                    *[arg for arg in getattr(cause, "args", ()) if isinstance(arg, BaseException)]]


def _unreachable(error: BaseException) -> str:
    """Why the host cannot be reached at all (its name does not resolve, or it refuses the
    connection), or "" for a failure a retry may get past."""
    import urllib3.exceptions

    for cause in _causes(error):
        if isinstance(cause, urllib3.exceptions.NameResolutionError) or (
                isinstance(cause, OSError) and cause.errno in (socket.EAI_NONAME, socket.EAI_AGAIN, -2, -3)):
            return "its host name does not resolve"
        if isinstance(cause, ConnectionRefusedError):
            return "its host refuses connections"
    return ""


def _failure(error: BaseException, exchange: _Exchange) -> HttpError:
    """A transport error as the HttpError saying why, in words."""
    import requests
    import urllib3.exceptions

    limits = exchange.limits
    if exchange.cut is not None:
        return exchange.cut
    if isinstance(error, requests.ConnectTimeout):
        return Transient(f"timed out connecting ({limits.connect_s:g} s)")
    if isinstance(error, (requests.ReadTimeout, urllib3.exceptions.ReadTimeoutError, TimeoutError)):
        return Transient(f"nothing received for {limits.read_s:g} s")
    unreachable = _unreachable(error)
    if unreachable:
        return Unreachable(unreachable)
    if isinstance(error, requests.exceptions.SSLError):
        return HttpError(f"TLS failed: {error}")  # a certificate that does not verify will not on a second try
    if isinstance(error, requests.RequestException) and not isinstance(
            error, (requests.ConnectionError, requests.exceptions.ChunkedEncodingError)):
        return HttpError(f"{type(error).__name__}: {error}")  # an invalid URL, ...
    unconnected = next((cause for cause in _causes(error)
                        if isinstance(cause, urllib3.exceptions.NewConnectionError)), None)
    if isinstance(unconnected, BaseException):
        return Transient(f"cannot connect ({_os_reason(unconnected)})")
    return Transient(f"the connection broke ({type(error).__name__})")


def _os_reason(error: BaseException) -> str:
    found = next((cause for cause in _causes(error) if isinstance(cause, OSError) and cause.strerror), None)
    return found.strerror if isinstance(found, OSError) and found.strerror else "no connection"


def _origin(url: str) -> tuple[str, str]:
    parts = urllib.parse.urlsplit(url)
    return parts.scheme.lower(), parts.netloc.lower()


def _check_encoding(response: requests.Response) -> None:
    coding = response.headers.get("Content-Encoding", "").strip().lower()
    if coding not in ("", "identity"):
        raise Encoded(f"it answered with Content-Encoding: {coding} though identity was asked; refused unread "
                      "(a compressed body is never inflated)")


# -- bodies -------------------------------------------------------------------------------------

class _Meter:
    """The minimum rate of a body moving (`rate_minimum` per `rate_window_s`), and a progress
    line every `progress_every_s` for one over `progress_bytes`."""

    def __init__(self, exchange: _Exchange, total: int | None, start: int) -> None:
        self.limits, self.what, self.notice = exchange.limits, exchange.what, exchange.notice
        self.total, self.start = total, start
        self.began = self.window_began = self.said = time.monotonic()
        self.window_done = start

    def add(self, done: int) -> None:
        """`done` bytes of the whole have moved."""
        limits, now = self.limits, time.monotonic()
        if now - self.window_began >= limits.rate_window_s:
            if done - self.window_done < limits.rate_minimum and done != self.total:
                raise Transient(f"slower than {_size_text(limits.rate_minimum)} per {limits.rate_window_s:g} s "
                                f"({_size_text(done - self.window_done)} in {now - self.window_began:.1f} s)")
            self.window_began, self.window_done = now, done
        if max(done, self.total or 0) > limits.progress_bytes and now - self.said >= limits.progress_every_s:
            self.said = now
            self.notice(self.line(done, now))

    def line(self, done: int, now: float) -> str:
        of = f" of {self.total / 1e6:.1f} MB ({100 * done // self.total} %)" if self.total else ""
        rate = (done - self.start) / 1e6 / max(now - self.began, 1e-3)
        return f"{self.what}: {done / 1e6:.1f} MB{of}, {rate:.1f} MB/s"


class _Upload:
    """A file as a request body: its reads metered; its end marks the request sent."""

    def __init__(self, path: Path, exchange: _Exchange) -> None:
        self.exchange, self.size = exchange, path.stat().st_size
        self.file = path.open("rb")
        self.meter, self.done = _Meter(exchange, self.size, 0), 0

    def __len__(self) -> int:
        return self.size

    def read(self, count: int = -1) -> bytes:
        data = self.file.read(count)
        if not data:
            self.exchange.sent.set()
            return data
        self.done += len(data)
        self.meter.add(self.done)
        return data

    def close(self) -> None:
        self.file.close()


class Answer:
    """An answer whose status line and headers are in. Its body is read with `chunks`, `read`
    or `json`, inside the block of `Client.open`."""

    def __init__(self, response: requests.Response, exchange: _Exchange) -> None:
        self._response, self._exchange = response, exchange
        self.complete = False  # the whole body was read: the connection may serve the next request

    @property
    def status(self) -> int:
        return self._response.status_code

    @property
    def headers(self) -> Mapping[str, str]:
        return self._response.headers

    @property
    def length(self) -> int | None:
        value = self.headers.get("Content-Length", "").strip()
        return int(value) if value.isascii() and value.isdigit() else None

    def chunks(self, cap: Cap, offset: int = 0) -> Iterator[bytes]:
        """The body as it arrives, as it was sent: each piece what one read of the socket got
        (read(n) would wait for n bytes, and a trickle would go unmeasured). `offset`: bytes of
        the whole held already (a resumed download), counted against `cap`."""
        length = self.length
        if length is not None and offset + length > cap.size:
            raise TooLarge(f"it announces {offset + length:,} bytes, more than {cap.what} ({cap.size:,})")
        meter = _Meter(self._exchange, offset + length if length is not None else None, offset)
        received, errors = offset, _transport_errors()
        while True:
            try:
                chunk = self._response.raw.read1(CHUNK, decode_content=False)
            except errors as error:
                raise _failure(error, self._exchange) from None
            if not chunk:
                break
            received += len(chunk)
            if received > cap.size:
                raise TooLarge(f"it sent more than {cap.what} ({cap.size:,} bytes)")
            meter.add(received)
            yield chunk
        short = length is not None and received - offset < length
        if self._exchange.cut is not None and (short or length is None):  # a body without a length looks whole
            raise self._exchange.cut
        if short:
            raise Transient(f"the connection closed after {received - offset:,} of {length:,} bytes")
        self.complete = True

    def read(self, cap: Cap) -> bytes:
        return b"".join(self.chunks(cap))

    def json(self, cap: Cap) -> Any:
        """The body as JSON; ValueError when it is none."""
        return jsonlib.loads(self.read(cap))


# -- the client ---------------------------------------------------------------------------------

class Client:
    """Requests to any host under `limits`; `headers` go with every request (Accept-Encoding is
    always identity). `notice` says waits, retries and progress; `sleep` waits between attempts."""

    def __init__(self, limits: Limits = Limits(), *, headers: Mapping[str, str] | None = None,
                 notice: Callable[[str], None] = say, sleep: Callable[[float], None] = time.sleep) -> None:
        self.limits, self.notice, self.sleep = limits, notice, sleep
        self._headers = {**(headers or {}), "Accept-Encoding": "identity"}
        self._session: requests.Session | None = None
        self._session_lock = threading.Lock()

    @property
    def session(self) -> requests.Session:
        with self._session_lock:
            if self._session is None:
                self._session = _session(self._headers)
            return self._session

    def close(self) -> None:
        if self._session is not None:
            self._session.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    @contextlib.contextmanager
    def open(self, method: str, url: str, *, what: str, headers: Mapping[str, str | None] | None = None,
             params: Mapping[str, Any] | None = None, json: Any = None, upload: Path | None = None,
             limits: Limits | None = None) -> Iterator[Answer]:
        """Send one request (`upload`: a file as its body) and yield its answer, status line and
        headers in and not compressed. The exchange's deadlines (`limits`, the client's unless
        given) hold until the block ends; the body is read inside it. `what` names the request
        in notices ("<store>: GET <key>/<file>")."""
        with _Exchange(limits or self.limits, what, self.notice) as exchange, contextlib.ExitStack() as stack:
            body = _Upload(upload, exchange) if upload is not None else None
            if body is None:
                exchange.sent.set()
            else:
                stack.callback(body.close)
            response = self._send(method, url, exchange, dict(headers or {}), params=params, json=json, data=body)
            exchange.answered.set()
            answer = Answer(response, exchange)
            stack.callback(_release, response, answer)
            _check_encoding(response)
            yield answer

    def _send(self, method: str, url: str, exchange: _Exchange, headers: dict[str, str | None],
              **kwargs: Any) -> requests.Response:
        """The answer to `method url`, following redirects of a GET or HEAD (unread)."""
        origin, errors, limits = _origin(url), _transport_errors(), exchange.limits
        for _ in range(MAX_REDIRECTS + 1):
            outer, _current.exchange = getattr(_current, "exchange", None), exchange
            try:
                # A header whose value is None is left out (requests' documented way to drop a session header).
                response = self.session.request(method, url, headers=cast(Any, headers), stream=True,
                                                allow_redirects=False, timeout=(limits.connect_s, limits.read_s),
                                                **kwargs)
            except errors as error:
                raise _failure(error, exchange) from None
            finally:
                _current.exchange = outer
            if not (response.is_redirect and method in ("GET", "HEAD")):
                return response
            url = urllib.parse.urljoin(response.url, response.headers["location"])
            response.close()
            kwargs.pop("params", None)  # the new URL is complete
            if _origin(url) != origin:
                headers["Authorization"] = None
        raise HttpError(f"more than {MAX_REDIRECTS} redirects")

    def retrying(self, what: str, attempt: Callable[[], T], kept: Callable[[], bool] = lambda: False) -> T:
        """`attempt()` until it returns. A Transient failure is tried again, `attempts` times in
        all, each retry said; an attempt that `kept` what it got (a resumed download grew) starts
        a new count. An Overdue one is tried again only then. A Pause is waited out, uncounted.
        The last failure is raised, its `attempts` set."""
        failures = 0
        while True:
            try:
                return attempt()
            except Pause as pause:
                self.notice(f"{what}: {pause}")
                self.sleep(pause.seconds)
            except Transient as failure:
                advanced = kept()
                failures = 1 if advanced else failures + 1
                if failures >= self.limits.attempts or (isinstance(failure, Overdue) and not advanced):
                    failure.attempts = failures
                    raise
                delay = self.limits.backoff_s * 2 ** (failures - 1)
                self.notice(f"{what}: {failure}; trying again in {delay:g} s")
                self.sleep(delay)


def _release(response: requests.Response, answer: Answer) -> None:
    """A connection whose answer was read to its end goes back to the pool; any other is closed."""
    if answer.complete:
        response.raw.release_conn()
    response.close()
