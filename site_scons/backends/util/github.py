"""The few GitHub REST endpoints the project calls: releases (ci/release.py, the binary cache's
release store) and pull requests (ci/pin_refresh.py), through the project's one HTTP client
(util/http.py: every answer bounded in time and size, never decoded). The token travels only
in a header, and never to another host a download is redirected to; 5xx answers and broken
connections are retried. A rate limit (403/429 with GitHub's rate-limit headers,
docs.github.com "Rate limits for the REST API") is waited out when it lifts within
RATE_LIMIT_WAIT, said while waiting, and otherwise a RateLimited error saying when it lifts:
never a quiet failure. Each client counts the requests it makes (`requests`) and the quota
GitHub reports left."""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Callable, Mapping, TextIO, TypeVar

from backends.util import http
from backends.util.errors import BackendsError

T = TypeVar("T")

DEFAULT_API = "https://api.github.com"
PER_PAGE = 100
RETRY_STATUSES = (500, 502, 503, 504)
# 30 s to connect; failures tried 3 times, 2 s and 4 s apart. GitHub answers an upload once it
# has stored it: up to 10 minutes after the last byte of a large archive.
LIMITS = http.Limits(connect_s=30.0, backoff_s=2.0)
UPLOAD_LIMITS = replace(LIMITS, answer_s=600.0)
# An API answer (a page of releases with their assets is the largest) is JSON of a few MB at most.
API_ANSWER = http.Cap(64 * http.MIB, "the limit for a GitHub API answer")
# Rate limits: the whole wait one client may spend on them (a primary limit resets within the
# hour; a leg job has hours, a lookup that could not be made fails its run instead).
RATE_LIMIT_WAIT = 900.0
SECONDARY_WAIT = 60.0  # GitHub: "otherwise, wait for at least one minute", doubled on each repeat


class GitHubError(BackendsError, RuntimeError):
    """A GitHub API call that failed; the message names the call and GitHub's answer."""

    def __init__(self, message: str, status: int = 0, unanswered: bool = False) -> None:
        super().__init__(message)
        self.status = status  # the HTTP status GitHub answered with; 0 when there was none
        self.unanswered = unanswered  # no answer at all after the client's retries (connection, deadlines)


class RateLimited(GitHubError):
    """GitHub's rate limit refused a call for longer than the client may wait; the message
    says which limit, when it lifts and how long was waited."""


def _stderr(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


@dataclass(frozen=True)
class Reply:
    """An answer of the API: its status, headers and (JSON) body."""

    status: int
    headers: Mapping[str, str]
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body)


class GitHub:
    def __init__(self, api: str, repo: str, token: str, sleep: Callable[[float], None] = time.sleep,
                 clock: Callable[[], float] = time.time, notice: Callable[[str], None] = _stderr) -> None:
        self.api = api.rstrip("/")
        self.repo = repo
        self.sleep = sleep
        self.http = http.Client(LIMITS, notice=notice, sleep=lambda seconds: self.sleep(seconds), headers={
            "Authorization": f"Bearer {token}", "Accept": "application/vnd.github+json",
            "X-GitHub-Api-Version": "2022-11-28", "User-Agent": "anira-backends"})
        self.clock = clock
        self.requests = 0  # requests sent, each counting against the token's hourly quota
        self.remaining: int | None = None  # x-ratelimit-remaining of the last answer
        self.rate_waited = 0.0

    def _exchange(self, method: str, url: str, expect: tuple[int, ...], upload: Path | None,
                  read: Callable[[http.Answer], T], **kwargs: Any) -> T:
        """One call, `read(answer)` on an expected answer; any other is waited out (a rate
        limit), tried again (5xx, a broken connection) or a GitHubError."""
        what = f"GitHub API {method} {url.split('?')[0]}"
        secondary = [0]

        def attempt() -> T:
            self.requests += 1
            with self.http.open(method, url, what=what, upload=upload,
                                limits=UPLOAD_LIMITS if upload is not None else None, **kwargs) as answer:
                remaining = answer.headers.get("x-ratelimit-remaining", "")
                if remaining.isdigit():
                    self.remaining = int(remaining)
                if answer.status in expect:
                    return read(answer)
                reply = Reply(answer.status, answer.headers, answer.read(API_ANSWER))
            limit = rate_limit(reply, self.clock(), SECONDARY_WAIT * 2 ** secondary[0])
            if limit is not None:
                secondary[0] += limit.secondary
                raise self._pause(what, limit)
            failure = f"HTTP {reply.status} {_api_message(reply)}"
            if reply.status in RETRY_STATUSES:
                raise http.Busy(failure, reply.status)
            raise GitHubError(f"{what}: {failure}", reply.status)

        try:
            return self.http.retrying(what, attempt)
        except http.Busy as error:
            raise GitHubError(f"{what}: {error}", error.status) from None
        except http.Transient as error:
            raise GitHubError(f"{what}: {error}", unanswered=True) from None
        except http.HttpError as error:
            raise GitHubError(f"{what}: {error}") from None

    def _send(self, method: str, url: str, expect: tuple[int, ...] = (200,), upload: Path | None = None,
              **kwargs: Any) -> Reply:
        return self._exchange(method, url, expect, upload,
                              lambda answer: Reply(answer.status, answer.headers, answer.read(API_ANSWER)), **kwargs)

    def _pause(self, what: str, limit: Limit) -> http.Pause:
        """The wait until `limit` lifts, or RateLimited when that is beyond what is left of
        RATE_LIMIT_WAIT."""
        lifts = time.strftime("%H:%M:%S UTC", time.gmtime(self.clock() + limit.wait))
        if self.rate_waited + limit.wait > RATE_LIMIT_WAIT:
            raise RateLimited(f"{what}: {limit.why}; it lifts at {lifts}, in {limit.wait:.0f} s, beyond "
                              f"what this run waits for rate limits ({RATE_LIMIT_WAIT:.0f} s, {self.rate_waited:.0f} s "
                              f"of it spent; {self.requests} requests made here). A job token has 1,000 requests per "
                              "hour per repository: run again after that time", limit.status)
        self.rate_waited += limit.wait
        return http.Pause(limit.wait, f"{limit.why}; waiting {limit.wait:.0f} s, until {lifts}")

    def _pages(self, path: str, stop: Callable[[list[dict[str, Any]]], bool] = lambda batch: False
               ) -> list[dict[str, Any]]:
        """Every item of a listing, page by page; `stop(batch)` true ends it early."""
        items: list[dict[str, Any]] = []
        for page in range(1, 1000):
            batch = self._send("GET", f"{self.api}{path}", params={"per_page": PER_PAGE, "page": page}).json()
            items += batch
            if len(batch) < PER_PAGE or stop(batch):
                return items
        raise GitHubError(f"{path}: more than 1000 pages")

    # -- releases ---------------------------------------------------------------------------

    def releases_named(self, tag: str) -> list[dict[str, Any]]:
        """The releases of `tag`, by listing (/releases/tags/{tag} does not return drafts; the
        listing shows drafts only to a token with push access, i.e. contents: write). The
        listing is read until the page holding the first match: newest first, so drafts made
        at once sit side by side. Each release carries its assets."""
        def named(batch: list[dict[str, Any]]) -> list[dict[str, Any]]:
            return [r for r in batch if r.get("tag_name") == tag]

        return named(self._pages(f"/repos/{self.repo}/releases", stop=lambda batch: bool(named(batch))))

    def find_release(self, tag: str) -> dict[str, Any] | None:
        """The release of `tag`: the published one, else the oldest draft. Drafts do not
        reserve their tag, so two made at once are two; every reader and writer picks the
        same one."""
        return choose_release(self.releases_named(tag))

    def ensure_draft(self, tag: str, body: str) -> tuple[dict[str, Any], bool]:
        """The release of `tag` (found), else a new draft; True when this call made it. After
        making one the listing is read again, and a surplus draft made by a concurrent writer's
        race is deleted when it is this call's own. A 422 (a published release took the tag
        meanwhile) is answered the same way: the listing is read again."""
        found = self.find_release(tag)
        if found is not None:
            return found, False
        try:
            mine = self.create_draft(tag, body)
        except GitHubError as error:
            if error.status != 422:
                raise
            found = self.find_release(tag)
            if found is None:
                raise
            return found, False
        chosen = self.find_release(tag) or mine
        if chosen["id"] != mine["id"]:
            self.delete_release(mine)
        return chosen, chosen["id"] == mine["id"]

    def create_draft(self, tag: str, body: str) -> dict[str, Any]:
        return self._send("POST", f"{self.api}/repos/{self.repo}/releases", expect=(201,),
                          json={"tag_name": tag, "name": tag, "body": body, "draft": True}).json()

    def update(self, release: Mapping[str, Any], **fields: Any) -> dict[str, Any]:
        return self._send("PATCH", f"{self.api}/repos/{self.repo}/releases/{release['id']}", json=fields).json()

    def delete_release(self, release: Mapping[str, Any]) -> None:
        self._send("DELETE", f"{self.api}/repos/{self.repo}/releases/{release['id']}", expect=(204, 404))

    def assets(self, release: Mapping[str, Any], fresh: bool = False) -> list[dict[str, Any]]:
        """The release's assets: those it was listed with, unless `fresh` (or it came without
        them), then read again page by page."""
        listed = release.get("assets")
        if isinstance(listed, list) and not fresh:
            return list(listed)
        return self._pages(f"/repos/{self.repo}/releases/{release['id']}/assets")

    def delete_asset(self, asset: Mapping[str, Any]) -> None:
        """Gone already (a concurrent writer's delete) is as good as deleted."""
        self._send("DELETE", f"{self.api}/repos/{self.repo}/releases/assets/{asset['id']}", expect=(204, 404))

    def download(self, asset: Mapping[str, Any], target: Path, cap: http.Cap) -> None:
        """An asset's bytes into `target` (through a temp beside it), refused past `cap`: one API
        request, as a draft's assets have no public URL. GitHub may redirect to its storage
        host; the token is not sent there."""
        url = f"{self.api}/repos/{self.repo}/releases/assets/{asset['id']}"
        temp = target.with_name(f".{target.name}.tmp-{os.getpid()}")

        def save(answer: http.Answer) -> None:
            with open(temp, "wb") as out:
                for chunk in answer.chunks(cap):
                    out.write(chunk)

        try:
            self._exchange("GET", url, (200,), None, save, headers={"Accept": "application/octet-stream"})
            os.replace(temp, target)
        finally:
            temp.unlink(missing_ok=True)

    def upload(self, release: Mapping[str, Any], path: Path, name: str, label: str = "") -> dict[str, Any]:
        url = str(release["upload_url"]).split("{", 1)[0]
        params = {"name": name, **({"label": label} if label else {})}
        return self._send("POST", url, expect=(201,), upload=path, params=params,
                          headers={"Content-Type": "application/octet-stream",
                                   "Content-Length": str(path.stat().st_size)}).json()

    def upload_replacing(self, release: Mapping[str, Any], path: Path, name: str, sha256: str,
                         label: str = "") -> dict[str, Any]:
        """Upload `path` as `name`. GitHub answers 422 when the name is taken: by a concurrent
        writer, or by a half-finished upload (state `starter`, left by a 502). Then the assets
        are read again: the same bytes, uploaded, are kept; anything else is deleted and the
        upload made once more."""
        try:
            return self.upload(release, path, name, label)
        except GitHubError as error:
            if error.status != 422:
                raise
        there = next((a for a in self.assets(release, fresh=True) if a.get("name") == name), None)
        if there is not None and holds(there, path.stat().st_size, sha256):
            return there
        if there is not None:
            self.delete_asset(there)
        return self.upload(release, path, name, label)

    # -- pull requests ----------------------------------------------------------------------

    def find_pull(self, branch: str, base: str) -> dict[str, Any] | None:
        """The open pull request from this repository's `branch` into `base`, if any."""
        owner = self.repo.split("/", 1)[0]
        found = self._send("GET", f"{self.api}/repos/{self.repo}/pulls",
                           params={"state": "open", "head": f"{owner}:{branch}", "base": base}).json()
        return found[0] if found else None

    def open_pull(self, branch: str, base: str, title: str, body: str) -> dict[str, Any]:
        return self._send("POST", f"{self.api}/repos/{self.repo}/pulls", expect=(201,),
                          json={"head": branch, "base": base, "title": title, "body": body}).json()

    def update_pull(self, pull: Mapping[str, Any], **fields: Any) -> dict[str, Any]:
        return self._send("PATCH", f"{self.api}/repos/{self.repo}/pulls/{pull['number']}", json=fields).json()

    def usage(self) -> str:
        """What this client spent, for a job's log."""
        left = f", {self.remaining} left this hour" if self.remaining is not None else ""
        return f"GitHub API: {self.requests} requests{left}"


def choose_release(releases: list[dict[str, Any]]) -> dict[str, Any] | None:
    """Of the releases of one tag: the published one, else the oldest draft (lowest id)."""
    published = [r for r in releases if not r.get("draft")]
    ordered = published or sorted(releases, key=lambda r: int(r["id"]))
    return ordered[0] if ordered else None


def holds(asset: Mapping[str, Any], size: int, sha256: str) -> bool:
    """Whether a remote asset is these bytes: completely uploaded (a 502 can leave one in state
    `starter`), the same size, and the same sha256 where GitHub reports a digest."""
    if asset.get("state", "uploaded") != "uploaded" or asset.get("size") != size:
        return False
    digest = asset.get("digest")
    return not digest or digest == f"sha256:{sha256}"


@dataclass(frozen=True)
class Limit:
    """A rate limit GitHub answered with: why (for messages), seconds to wait, the status, and
    whether it is a secondary limit (whose waits grow when it repeats)."""

    why: str
    wait: float
    status: int
    secondary: bool


def rate_limit(response: Reply, now: float, fallback: float) -> Limit | None:
    """The rate limit a 403/429 answer reports (None: it is no rate limit, e.g. a missing
    permission). GitHub's rules: `retry-after` seconds when given; a primary limit
    (`x-ratelimit-remaining: 0`) lifts at `x-ratelimit-reset` (epoch seconds); any other
    secondary limit after at least a minute (`fallback`)."""
    status = response.status
    if status not in (403, 429):
        return None
    headers = response.headers
    retry_after = headers.get("retry-after", "").strip()
    remaining, reset = headers.get("x-ratelimit-remaining", "").strip(), headers.get("x-ratelimit-reset", "").strip()
    if retry_after.isdigit():
        return Limit(f"HTTP {status}, a secondary rate limit (retry-after: {retry_after} s)",
                     max(float(retry_after), 1.0), status, True)
    if remaining == "0" and reset.isdigit():
        used = f"{headers.get('x-ratelimit-used', '?')} of {headers.get('x-ratelimit-limit', '?')}"
        return Limit(f"HTTP {status}, the primary rate limit ({used} requests this hour used, "
                     f"resource {headers.get('x-ratelimit-resource', 'core')})", max(int(reset) - now, 0.0) + 1.0,
                     status, False)
    message = _api_message(response)
    if status == 429 or "rate limit" in message.lower():
        return Limit(f"HTTP {status}, a secondary rate limit ({message.strip() or 'no reset given'})", fallback,
                     status, True)
    return None


def _api_message(response: Reply) -> str:
    try:
        payload = response.json()
    except ValueError:
        return response.body[:200].decode("utf-8", "replace")
    message = str(payload.get("message", "")) if isinstance(payload, dict) else ""
    errors = payload.get("errors") if isinstance(payload, dict) else None
    return message + (f" {json.dumps(errors)}" if errors else "")


def add_api_arguments(parser: argparse.ArgumentParser) -> None:
    """--api and --token-env, as every command that calls GitHub takes them."""
    parser.add_argument("--api", default=DEFAULT_API, help=f"GitHub REST API root (default {DEFAULT_API})")
    parser.add_argument("--token-env", default="GITHUB_TOKEN", help="environment variable holding the token")


def redacting_printer(token: str) -> Callable[..., None]:
    """print() that never shows `token` (a CI log is public)."""
    def say(message: str, stream: TextIO = sys.stdout) -> None:
        print(message.replace(token, "***") if token else message, file=stream, flush=True)
    return say
