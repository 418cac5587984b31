"""A local stand-in for the GitHub REST API on 127.0.0.1: the release endpoints
(backends.release, the binary cache's release store) and pull requests
(backends.pin_refresh), state in memory.

`with serve() as github:` runs it; `github.base` is the API root to pass as `--api`."""
from __future__ import annotations

import contextlib
import hashlib
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Callable, Iterator
from urllib.parse import parse_qs, urlparse

TOKEN = "ghs_unit-test-token-0123456789"
REPO = "anira/backends"


class FakeGitHub:
    """Releases and assets in memory; drafts are invisible to /releases/tags/{tag}, as on GitHub."""

    def __init__(self) -> None:
        self.releases: list[dict[str, Any]] = []
        self.assets: dict[int, list[dict[str, Any]]] = {}
        self.blobs: dict[int, bytes] = {}
        self.calls: list[tuple[str, str]] = []
        self.next_id = 1000
        self.base = ""
        self.fail_with: tuple[int, str] | None = None  # (status, message) for every request
        self.pulls: list[dict[str, Any]] = []
        # GitHub refuses a pull request whose head branch the repository lacks: tests say which exist.
        self.branch_exists: Callable[[str], bool] = lambda branch: True

    def new_id(self) -> int:
        self.next_id += 1
        return self.next_id

    def add_release(self, tag: str, draft: bool) -> dict[str, Any]:
        rid = self.new_id()
        record = {"id": rid, "tag_name": tag, "name": tag, "draft": draft, "body": "",
                  "upload_url": f"{self.base}/uploads/repos/{REPO}/releases/{rid}/assets{{?name,label}}",
                  "html_url": f"https://github.com/{REPO}/releases/tag/{tag}"}
        self.releases.insert(0, record)
        self.assets[rid] = []
        return record

    def release(self, tag: str) -> dict[str, Any]:
        [match] = [r for r in self.releases if r["tag_name"] == tag]
        return match

    def asset_names(self, tag: str) -> list[str]:
        return [a["name"] for a in self.assets[self.release(tag)["id"]]]

    def asset_bytes(self, tag: str, name: str) -> bytes:
        [asset] = [a for a in self.assets[self.release(tag)["id"]] if a["name"] == name]
        return self.blobs[asset["id"]]

    def uploads(self) -> list[str]:
        return [path for method, path in self.calls if method == "POST" and path.startswith("/uploads/")]


def _handler(state: FakeGitHub) -> type[BaseHTTPRequestHandler]:
    prefix = f"/repos/{REPO}"

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: object) -> None:
            pass

        def _reply(self, status: int, payload: object = None) -> None:
            body = b"" if payload is None else json.dumps(payload).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def _body(self) -> bytes:
            return self.rfile.read(int(self.headers.get("Content-Length", "0")))

        def _route(self, method: str) -> None:
            url = urlparse(self.path)
            query = parse_qs(url.query)
            path = url.path
            state.calls.append((method, path))
            data = self._body() if method in ("POST", "PATCH") else b""
            if self.headers.get("Authorization") != f"Bearer {TOKEN}":
                return self._reply(401, {"message": "Bad credentials"})
            if state.fail_with:
                status, message = state.fail_with
                return self._reply(status, {"message": message})
            page = int(query.get("page", ["1"])[0])
            per_page = int(query.get("per_page", ["30"])[0])
            window = slice((page - 1) * per_page, page * per_page)
            parts = path.removeprefix(prefix).strip("/").split("/")
            if method == "GET" and path == f"{prefix}/releases":
                return self._reply(200, state.releases[window])
            if method == "GET" and parts[:2] == ["releases", "tags"]:
                found = [r for r in state.releases if r["tag_name"] == parts[2] and not r["draft"]]
                return self._reply(200, found[0]) if found else self._reply(404, {"message": "Not Found"})
            if method == "POST" and path == f"{prefix}/releases":
                payload = json.loads(data)
                if any(r["tag_name"] == payload["tag_name"] for r in state.releases):
                    return self._reply(422, {"message": "Validation Failed", "errors": [{"code": "already_exists"}]})
                record = state.add_release(payload["tag_name"], payload.get("draft", False))
                record["body"] = payload.get("body", "")
                record["prerelease"] = payload.get("prerelease", False)
                return self._reply(201, record)
            if method == "PATCH" and parts[0] == "releases" and len(parts) == 2:
                record = next(r for r in state.releases if r["id"] == int(parts[1]))
                record.update(json.loads(data))
                return self._reply(200, record)
            if method == "GET" and parts[:2] == ["releases", "assets"] and len(parts) == 3:  # an asset's bytes
                blob = state.blobs.get(int(parts[2]))
                if blob is None:
                    return self._reply(404, {"message": "Not Found"})
                self.send_response(200)
                self.send_header("Content-Type", "application/octet-stream")
                self.send_header("Content-Length", str(len(blob)))
                self.end_headers()
                self.wfile.write(blob)
                return None
            if method == "GET" and parts[0] == "releases" and parts[2:] == ["assets"]:
                return self._reply(200, state.assets[int(parts[1])][window])
            if method == "DELETE" and parts[:2] == ["releases", "assets"]:
                aid = int(parts[2])
                for assets in state.assets.values():
                    assets[:] = [a for a in assets if a["id"] != aid]
                return self._reply(204)
            if method == "POST" and path.startswith(f"/uploads{prefix}/releases/"):
                rid = int(path.split("/")[-2])
                name = query["name"][0]
                if any(a["name"] == name for a in state.assets[rid]):
                    return self._reply(422, {"message": "Validation Failed", "errors": [{"code": "already_exists"}]})
                aid = state.new_id()
                state.blobs[aid] = data
                asset = {"id": aid, "name": name, "size": len(data), "state": "uploaded",
                         "digest": "sha256:" + hashlib.sha256(data).hexdigest()}
                state.assets[rid].append(asset)
                return self._reply(201, asset)
            if parts[0] == "pulls":
                return self._pulls(method, parts, query, data)
            return self._reply(404, {"message": f"no route {method} {path}"})

        def _pulls(self, method: str, parts: list[str], query: dict[str, list[str]], data: bytes) -> None:
            if method == "GET" and len(parts) == 1:
                wanted = {key: query[key][0] for key in ("state", "head", "base") if key in query}
                found = [p for p in state.pulls if all(p["_" + key] == value for key, value in wanted.items())]
                return self._reply(200, found)
            if method == "POST" and len(parts) == 1:
                payload = json.loads(data)
                head = f"{REPO.split('/')[0]}:{payload['head']}"
                if not state.branch_exists(payload["head"]):
                    return self._reply(422, {"message": "Validation Failed", "errors": [{"field": "head"}]})
                if any(p["_head"] == head and p["_state"] == "open" for p in state.pulls):
                    return self._reply(422, {"message": f"A pull request already exists for {head}."})
                number = len(state.pulls) + 1
                record = {"number": number, "title": payload["title"], "body": payload["body"],
                          "html_url": f"https://github.com/{REPO}/pull/{number}",
                          "_head": head, "_base": payload["base"], "_state": "open"}
                state.pulls.append(record)
                return self._reply(201, record)
            if method == "PATCH" and len(parts) == 2:
                record = next(p for p in state.pulls if p["number"] == int(parts[1]))
                record.update(json.loads(data))
                return self._reply(200, record)
            return self._reply(404, {"message": "no such pulls route"})

        def do_GET(self) -> None:
            self._route("GET")

        def do_POST(self) -> None:
            self._route("POST")

        def do_PATCH(self) -> None:
            self._route("PATCH")

        def do_DELETE(self) -> None:
            self._route("DELETE")

    return Handler


@contextlib.contextmanager
def serve() -> Iterator[FakeGitHub]:
    state = FakeGitHub()
    server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(state))
    state.base = f"http://127.0.0.1:{server.server_address[1]}"
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.01}, daemon=True)
    thread.start()
    try:
        yield state
    finally:
        server.shutdown()
        server.server_close()
