"""A local stand-in for the GitHub REST API on 127.0.0.1: the release endpoints
(backends.ci.release, the binary cache's release store) and pull requests
(backends.ci.pin_refresh), state in memory.

`with serve() as github:` runs it; `github.base` is the API root to pass as `--api`.

What it models of GitHub, because the code relies on it:
- drafts are listed by /releases only (never by /releases/tags/{tag}), and only to a token
  with push access (`push_access`); drafts do not reserve their tag, so two drafts of one
  tag can exist, while a published release's tag is taken (422); a published release is
  seen by every token (`publish` makes one, as a maintainer does by hand);
- each release object carries its assets; an asset has a `state` (`starter` while an upload
  is unfinished: `break_upload` leaves one behind, answering 502), a `digest`, a `label`
  and `created_at`; a taken asset name is refused (422);
- Immutable Releases (`immutable`): a published release's assets cannot be added or deleted;
- rate limits: every answer carries the x-ratelimit-* headers of a job token's 1,000
  requests per hour; past them, or when `exhaust`/`throttle` say so, a 403/429 with GitHub's
  headers; `calls` records every request (the request counter);
- a hostile GitHub: `hostile[path]` answers every request for that path with an answer of
  tests/hostile_http.py (10^12 bytes announced, a gzip bomb, trickled headers, ...), outside
  the lock, so the fake goes on answering everything else.
"""
from __future__ import annotations

import contextlib
import datetime
import hashlib
import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Callable, Iterator
from urllib.parse import parse_qs, urlparse

from hostile_http import Answer, Exchange

TOKEN = "ghs_unit-test-token-0123456789"
REPO = "anira/backends"
# GitHub's answer to POST /pulls with the workflow's token while the repository setting "Allow
# GitHub Actions to create and approve pull requests" is off (its default).
ACTIONS_MAY_NOT_OPEN_PULLS = "GitHub Actions is not permitted to create or approve pull requests."
HOURLY_LIMIT = 1000  # GITHUB_TOKEN: requests per hour per repository
EPOCH = datetime.datetime(2025, 1, 1, tzinfo=datetime.timezone.utc)


class FakeGitHub:
    """Releases and assets in memory."""

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
        # (method, path under /repos/{REPO}, e.g. ("POST", "pulls")) -> (status, message): one route refused.
        self.refuse: dict[tuple[str, str], tuple[int, str]] = {}
        self.push_access = True  # False: a contents: read token (drafts unseen, writes refused)
        self.immutable = False  # the repository's Immutable Releases setting
        self.break_upload: set[str] = set()  # asset names whose next upload is left half done (502)
        self.limit = HOURLY_LIMIT
        self.clock: Callable[[], float] = time.time
        self.refusals: list[tuple[int, dict[str, str], str]] = []  # the next answers, before anything else
        self.hostile: dict[str, Answer] = {}
        self.stop = threading.Event()  # ends the hostile answers that hold their connection
        self.lock = threading.Lock()

    # -- state --------------------------------------------------------------------------------

    def new_id(self) -> int:
        self.next_id += 1
        return self.next_id

    def add_release(self, tag: str, draft: bool, prerelease: bool = False) -> dict[str, Any]:
        rid = self.new_id()
        record = {"id": rid, "tag_name": tag, "name": tag, "draft": draft, "prerelease": prerelease, "body": "",
                  "immutable": self.immutable and not draft,
                  "upload_url": f"{self.base}/uploads/repos/{REPO}/releases/{rid}/assets{{?name,label}}",
                  "html_url": f"https://github.com/{REPO}/releases/tag/{tag}"}
        self.releases.insert(0, record)
        self.assets[rid] = []
        return record

    def release(self, tag: str) -> dict[str, Any]:
        [match] = [r for r in self.releases if r["tag_name"] == tag]
        return match

    def publish(self, tag: str, prerelease: bool = True) -> dict[str, Any]:
        """Publish the draft of `tag` as a maintainer does by hand (a pre-release by default):
        from then on every token sees it; with `immutable` on, its assets are locked."""
        record = self.release(tag)
        record.update(draft=False, prerelease=prerelease, immutable=self.immutable)
        return record

    def labels(self, tag: str) -> dict[str, str]:
        """Each asset's label by asset name."""
        return {a["name"]: a["label"] or "" for a in self.assets[self.release(tag)["id"]]}

    def asset_names(self, tag: str) -> list[str]:
        return [a["name"] for a in self.assets[self.release(tag)["id"]]]

    def asset_path(self, tag: str, name: str) -> str:
        """The API path an asset is downloaded from."""
        [asset] = [a for a in self.assets[self.release(tag)["id"]] if a["name"] == name]
        return f"/repos/{REPO}/releases/assets/{asset['id']}"

    def asset_bytes(self, tag: str, name: str) -> bytes:
        [asset] = [a for a in self.assets[self.release(tag)["id"]] if a["name"] == name]
        return self.blobs[asset["id"]]

    def add_asset(self, release: dict[str, Any], name: str, data: bytes, label: str = "",
                  state: str = "uploaded") -> dict[str, Any]:
        aid = self.new_id()
        self.blobs[aid] = data
        created = (EPOCH + datetime.timedelta(seconds=aid)).strftime("%Y-%m-%dT%H:%M:%SZ")
        asset = {"id": aid, "name": name, "label": label or None, "size": len(data) if state == "uploaded" else 0,
                 "state": state, "content_type": "application/octet-stream", "created_at": created,
                 "updated_at": created, "digest": "sha256:" + hashlib.sha256(data).hexdigest(),
                 "browser_download_url": f"https://github.com/{REPO}/releases/download/{release['tag_name']}/{name}"}
        self.assets[release["id"]].append(asset)
        return asset

    def uploads(self) -> list[str]:
        return [path for method, path in self.calls if method == "POST" and path.startswith("/uploads/")]

    def requests(self, method: str = "", prefix: str = "") -> int:
        """How many requests were made (of a method, under a path prefix)."""
        return sum(1 for m, path in self.calls if (not method or m == method) and path.startswith(prefix))

    # -- rate limits ------------------------------------------------------------------------------

    def reset_at(self) -> int:
        return int(self.clock()) + 1800

    def rate_headers(self) -> dict[str, str]:
        used = min(len(self.calls), self.limit)
        return {"x-ratelimit-limit": str(self.limit), "x-ratelimit-remaining": str(self.limit - used),
                "x-ratelimit-used": str(used), "x-ratelimit-reset": str(self.reset_at()),
                "x-ratelimit-resource": "core"}

    def exhaust(self, reset_in: int, times: int = 1) -> None:
        """The next `times` requests find the primary limit used up, lifting in `reset_in` s."""
        headers = {**self.rate_headers(), "x-ratelimit-remaining": "0", "x-ratelimit-used": str(self.limit),
                   "x-ratelimit-reset": str(int(self.clock()) + reset_in)}
        self.refusals += [(403, headers, "API rate limit exceeded for installation.")] * times

    def throttle(self, retry_after: int | None, status: int = 403, times: int = 1) -> None:
        """The next `times` requests hit a secondary rate limit (with retry-after, or none)."""
        headers = {**self.rate_headers(), **({"retry-after": str(retry_after)} if retry_after is not None else {})}
        self.refusals += [(status, headers, "You have exceeded a secondary rate limit.")] * times

    # -- what GitHub answers ------------------------------------------------------------------------

    def release_json(self, record: dict[str, Any]) -> dict[str, Any]:
        return {**record, "assets": [dict(a) for a in self.assets[record["id"]]]}

    def visible(self, record: dict[str, Any]) -> bool:
        return self.push_access or not record["draft"]


def _handler(state: FakeGitHub) -> type[BaseHTTPRequestHandler]:
    prefix = f"/repos/{REPO}"

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: object) -> None:
            pass

        def _reply(self, status: int, payload: object = None, headers: dict[str, str] | None = None) -> None:
            body = b"" if payload is None else json.dumps(payload).encode()
            self.send_response(status)
            for name, value in (headers or state.rate_headers()).items():
                self.send_header(name, value)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def _body(self) -> bytes:
            return self.rfile.read(int(self.headers.get("Content-Length", "0")))

        def _route(self, method: str) -> None:
            url = urlparse(self.path)
            hostile = state.hostile.get(url.path)
            if hostile is not None:
                state.calls.append((method, url.path))
                self.close_connection = True
                return hostile(Exchange(self.connection, method, url.path, dict(self.headers), state.stop))
            data = self._body() if method in ("POST", "PATCH") else b""
            with state.lock:
                state.calls.append((method, url.path))
                self._answer(method, url.path, parse_qs(url.query), data)

        def _answer(self, method: str, path: str, query: dict[str, list[str]], data: bytes) -> None:
            if self.headers.get("Authorization") != f"Bearer {TOKEN}":
                return self._reply(401, {"message": "Bad credentials"})
            if state.refusals:
                status, headers, message = state.refusals.pop(0)
                return self._reply(status, {"message": message}, headers)
            if len(state.calls) > state.limit:
                return self._reply(403, {"message": "API rate limit exceeded for installation."},
                                   {**state.rate_headers(), "x-ratelimit-remaining": "0"})
            if state.fail_with:
                status, message = state.fail_with
                return self._reply(status, {"message": message})
            refused = state.refuse.get((method, path.removeprefix(prefix).strip("/")))
            if refused:
                return self._reply(refused[0], {"message": refused[1],
                                                "documentation_url": "https://docs.github.com/rest"})
            page = int(query.get("page", ["1"])[0])
            per_page = int(query.get("per_page", ["30"])[0])
            window = slice((page - 1) * per_page, page * per_page)
            parts = path.removeprefix(prefix).strip("/").split("/")
            if method == "POST" and path.startswith(f"/uploads{prefix}/releases/"):
                return self._upload(int(path.split("/")[-2]), query, data)
            if parts[0] == "pulls":
                return self._pulls(method, parts, query, data)
            if parts[0] != "releases":
                return self._reply(404, {"message": f"no route {method} {path}"})
            if method in ("POST", "PATCH", "DELETE") and not state.push_access:
                return self._reply(403, {"message": "Resource not accessible by integration"})
            if method == "GET" and len(parts) == 1:
                listed = [state.release_json(r) for r in state.releases if state.visible(r)]
                return self._reply(200, listed[window])
            if method == "GET" and parts[1] == "tags":
                found = [r for r in state.releases if r["tag_name"] == parts[2] and not r["draft"]]
                return self._reply(200, state.release_json(found[0])) if found else self._not_found()
            if method == "POST" and len(parts) == 1:
                return self._create(json.loads(data))
            if len(parts) == 1:
                return self._reply(404, {"message": f"no route {method} {path}"})
            if parts[1] == "assets":
                return self._asset(method, int(parts[2]))
            record = next((r for r in state.releases if r["id"] == int(parts[1]) and state.visible(r)), None)
            if record is None:
                return self._not_found()
            if method == "GET" and len(parts) == 2:
                return self._reply(200, state.release_json(record))
            if method == "PATCH" and len(parts) == 2:
                record.update(json.loads(data))
                record["immutable"] = record.get("immutable", False) or (state.immutable and not record["draft"])
                return self._reply(200, state.release_json(record))
            if method == "DELETE" and len(parts) == 2:
                state.releases.remove(record)
                return self._reply(204)
            if method == "GET" and parts[2:] == ["assets"]:
                return self._reply(200, [dict(a) for a in state.assets[record["id"]]][window])
            return self._reply(404, {"message": f"no route {method} {path}"})

        def _not_found(self) -> None:
            self._reply(404, {"message": "Not Found"})

        def _create(self, payload: dict[str, Any]) -> None:
            taken = any(r["tag_name"] == payload["tag_name"] and not r["draft"] for r in state.releases)
            if taken:  # a published release holds the tag; drafts do not
                return self._reply(422, {"message": "Validation Failed",
                                         "errors": [{"resource": "Release", "code": "already_exists",
                                                     "field": "tag_name"}]})
            record = state.add_release(payload["tag_name"], payload.get("draft", False),
                                       payload.get("prerelease", False))
            record["body"] = payload.get("body", "")
            return self._reply(201, state.release_json(record))

        def _asset(self, method: str, aid: int) -> None:
            owner = next((rid for rid, assets in state.assets.items() if any(a["id"] == aid for a in assets)), None)
            record = next((r for r in state.releases if r["id"] == owner and state.visible(r)), None)
            if record is None:
                return self._not_found()
            if method == "DELETE":
                if record.get("immutable"):
                    return self._reply(422, {"message": "Cannot delete assets of an immutable release"})
                state.assets[owner] = [a for a in state.assets[owner] if a["id"] != aid]
                return self._reply(204)
            if self.headers.get("Accept") != "application/octet-stream":
                return self._reply(200, next(a for a in state.assets[owner] if a["id"] == aid))
            blob = state.blobs[aid]
            self.send_response(200)
            self.send_header("Content-Type", "application/octet-stream")
            self.send_header("Content-Length", str(len(blob)))
            self.end_headers()
            self.wfile.write(blob)
            return None

        def _upload(self, rid: int, query: dict[str, list[str]], data: bytes) -> None:
            record = next((r for r in state.releases if r["id"] == rid), None)
            if record is None or not state.push_access:
                return self._reply(404 if record is None else 403, {"message": "Not Found"})
            if record.get("immutable"):
                return self._reply(422, {"message": "Cannot upload assets to an immutable release."})
            name = query["name"][0]
            if any(a["name"] == name for a in state.assets[rid]):
                return self._reply(422, {"message": "Validation Failed",
                                         "errors": [{"resource": "ReleaseAsset", "code": "already_exists",
                                                     "field": "name"}]})
            label = query.get("label", [""])[0]
            if name in state.break_upload:
                state.break_upload.discard(name)
                state.add_asset(record, name, data, label, state="starter")
                return self._reply(502, {"message": "Bad Gateway"})
            return self._reply(201, state.add_asset(record, name, data, label))

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
    server.daemon_threads = True
    state.base = f"http://127.0.0.1:{server.server_address[1]}"
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.01}, daemon=True)
    thread.start()
    try:
        yield state
    finally:
        state.stop.set()
        server.shutdown()
        server.server_close()
