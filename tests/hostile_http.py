"""A hostile HTTP server on 127.0.0.1 for the transport tests, written on raw sockets so that
it can do what no well-behaved server does: announce 10^12 bytes, send more than it announced,
compress what was asked uncompressed, trickle its headers, stall mid-body.

`with Hostile() as server:` runs it in threads; `server.route(path, answer)` says how a path
is answered, `server.base` is its URL. Every answer that holds its connection open waits on
`server.stop`, set when the block ends: no test sleeps to synchronise, and none leaves a
thread behind.
"""
from __future__ import annotations

import socket
import socketserver
import struct
import threading
import time
import zlib
from functools import cache
from typing import Callable

Answer = Callable[["Exchange"], None]


class Exchange:
    """One request as the server saw it, and the socket to answer on."""

    def __init__(self, sock: socket.socket, method: str, path: str, headers: dict[str, str],
                 stop: threading.Event) -> None:
        self.sock, self.method, self.path, self.headers, self.stop = sock, method, path, headers, stop

    def send(self, data: bytes) -> bool:
        """Whether the client still took it."""
        try:
            self.sock.sendall(data)
            return True
        except OSError:
            return False

    def head(self, status: int = 200, length: int | None = None, **headers: str) -> bool:
        lines = [f"HTTP/1.1 {status} {'OK' if status < 400 else 'Error'}", "Connection: close"]
        lines += [f"Content-Length: {length}"] if length is not None else []
        lines += [f"{name.replace('_', '-')}: {value}" for name, value in headers.items()]
        return self.send(("\r\n".join(lines) + "\r\n\r\n").encode())


class Hostile:
    def __init__(self) -> None:
        self.routes: dict[str, Answer] = {}
        self.suffixes: dict[str, Answer] = {}
        self.requests: list[tuple[str, str, dict[str, str]]] = []
        self.stop = threading.Event()
        self.base = ""
        self._server: socketserver.ThreadingTCPServer | None = None

    def route(self, path: str, answer: Answer) -> str:
        """Answer `path` with `answer`; returns its URL."""
        self.routes[path] = answer
        return self.base + path

    def route_suffix(self, suffix: str, answer: Answer) -> None:
        """Answer every path ending in `suffix` (that no route names) with `answer`: the longest
        suffix that fits wins."""
        self.suffixes[suffix] = answer

    def answer_for(self, path: str) -> Answer:
        fitting = sorted((suffix for suffix in self.suffixes if path.endswith(suffix)), key=len, reverse=True)
        return self.routes.get(path) or (self.suffixes[fitting[0]] if fitting else not_found)

    def __enter__(self) -> Hostile:
        state = self

        class Handler(socketserver.BaseRequestHandler):
            def handle(self) -> None:
                request = _read_request(self.request)
                if request is None:
                    return
                method, target, headers = request
                path = target.split("?", 1)[0]
                state.requests.append((method, target, headers))
                state.answer_for(path)(Exchange(self.request, method, path, headers, state.stop))

        self._server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self.base = f"http://127.0.0.1:{self._server.server_address[1]}"
        threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop.set()
        assert self._server is not None
        self._server.shutdown()
        self._server.server_close()


def _read_request(sock: socket.socket) -> tuple[str, str, dict[str, str]] | None:
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        if not chunk:
            return None
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    first, *lines = head.decode("latin-1").split("\r\n")
    method, target, _ = first.split(" ", 2)
    headers = {name.strip().lower(): value.strip() for name, _, value in (line.partition(":") for line in lines)}
    length = int(headers.get("content-length", "0") or 0)
    while len(body) < length:  # an upload: taken whole, so the client may read the answer
        chunk = sock.recv(65536)
        if not chunk:
            break
        body += chunk
    return method, target, headers


# -- answers ------------------------------------------------------------------------------------

def not_found(exchange: Exchange) -> None:
    exchange.head(404, 0)


def body(data: bytes, length: int | None = -1, status: int = 200, **headers: str) -> Answer:
    """`data`, with a Content-Length of `length` (-1: its true length; None: none, the end of
    the body is the end of the connection)."""
    def answer(exchange: Exchange) -> None:
        if exchange.head(status, len(data) if length == -1 else length, **headers):
            exchange.send(data)
    return answer


def announcing(length: int, sent: bytes = b"x" * 1024, hold_s: float = 30.0) -> Answer:
    """Announces `length` bytes, sends `sent`, then holds the connection until the test ends (at
    most `hold_s`, a hang guard)."""
    def answer(exchange: Exchange) -> None:
        if exchange.head(200, length) and exchange.send(sent):
            exchange.stop.wait(hold_s)
    return answer


class Trickle:
    """The status line, then one header byte every `every_s` while the client listens, for at
    most `for_s` (a hang guard: a client without a deadline would wait that long, then fail
    otherwise than by its deadline). `sent` counts the bytes it took."""

    def __init__(self, every_s: float, for_s: float = 30.0) -> None:
        self.every_s, self.for_s, self.sent = every_s, for_s, 0

    def __call__(self, exchange: Exchange) -> None:
        until = time.monotonic() + self.for_s
        if not exchange.send(b"HTTP/1.1 200 OK\r\nX-Slow: "):
            return
        while time.monotonic() < until and not exchange.stop.wait(self.every_s):
            if not exchange.send(b"a"):
                return
            self.sent += 1


def gzip_bomb_answer() -> Answer:
    return body(gzip_bomb(), Content_Encoding="gzip")


@cache
def gzip_bomb() -> bytes:
    """About 1 MiB of gzip that inflates to 1 GiB of zeros (a valid stream, CRC and size
    included): one deflated MiB, its window reset (a full flush), repeated 1024 times."""
    zeros = bytes(1 << 20)
    deflater = zlib.compressobj(9, zlib.DEFLATED, -15)
    block = deflater.compress(zeros) + deflater.flush(zlib.Z_FULL_FLUSH)
    last = zlib.compressobj(9, zlib.DEFLATED, -15).flush()
    crc = 0
    for _ in range(1024):
        crc = zlib.crc32(zeros, crc)
    header = b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x02\xff"
    return header + block * 1024 + last + struct.pack("<II", crc, (1 << 30) & 0xFFFFFFFF)


class Clock:
    """Seconds since it was made."""

    def __init__(self) -> None:
        self.start = time.monotonic()

    def __call__(self) -> float:
        return time.monotonic() - self.start
