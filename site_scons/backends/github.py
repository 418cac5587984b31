"""The few GitHub REST endpoints the project calls: releases (release.py) and pull requests
(pin_refresh.py). The token travels only in a header; 5xx answers are retried."""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Mapping, TextIO

# requests takes ~0.1 s to import: it is imported where a transfer happens, so a null build,
# plan=1 or list never pays for it.
if TYPE_CHECKING:
    import requests

DEFAULT_API = "https://api.github.com"
PER_PAGE = 100
RETRY_STATUSES = (500, 502, 503, 504)
ATTEMPTS = 3
TIMEOUT = (30, 600)  # connect, read: uploads of large archives take minutes


class GitHubError(RuntimeError):
    """A GitHub API call that failed; the message names the call and GitHub's answer."""

    def __init__(self, message: str, status: int = 0) -> None:
        super().__init__(message)
        self.status = status  # the HTTP status GitHub answered with; 0 when there was none


class GitHub:
    def __init__(self, api: str, repo: str, token: str, session: requests.Session | None = None,
                 sleep: Callable[[float], None] = time.sleep) -> None:
        import requests

        self.api = api.rstrip("/")
        self.repo = repo
        self.session = session or requests.Session()
        self.session.headers.update({"Authorization": f"Bearer {token}", "Accept": "application/vnd.github+json",
                                     "X-GitHub-Api-Version": "2022-11-28", "User-Agent": "anira-backends"})
        self.sleep = sleep

    def _send(self, method: str, url: str, expect: tuple[int, ...] = (200,), upload: Path | None = None,
              **kwargs: Any) -> requests.Response:
        import requests

        what = f"{method} {url.split('?')[0]}"
        for attempt in range(1, ATTEMPTS + 1):
            try:
                if upload is not None:
                    with upload.open("rb") as body:
                        response = self.session.request(method, url, data=body, timeout=TIMEOUT, **kwargs)
                else:
                    response = self.session.request(method, url, timeout=TIMEOUT, **kwargs)
            except requests.ConnectionError as error:
                if attempt == ATTEMPTS:
                    raise GitHubError(f"GitHub API {what}: {type(error).__name__}") from None
            else:
                if response.status_code in expect:
                    return response
                if response.status_code not in RETRY_STATUSES or attempt == ATTEMPTS:
                    raise GitHubError(f"GitHub API {what}: HTTP {response.status_code} {_api_message(response)}",
                                      response.status_code)
            self.sleep(2 ** attempt)
        raise AssertionError("unreachable")

    def _pages(self, path: str) -> list[dict[str, Any]]:
        items: list[dict[str, Any]] = []
        for page in range(1, 1000):
            batch = self._send("GET", f"{self.api}{path}", params={"per_page": PER_PAGE, "page": page}).json()
            items += batch
            if len(batch) < PER_PAGE:
                return items
        raise GitHubError(f"{path}: more than 1000 pages")

    # -- releases ---------------------------------------------------------------------------

    def find_release(self, tag: str) -> dict[str, Any] | None:
        """By listing: /releases/tags/{tag} does not return drafts."""
        return next((r for r in self._pages(f"/repos/{self.repo}/releases") if r.get("tag_name") == tag), None)

    def create_draft(self, tag: str, body: str) -> dict[str, Any]:
        return self._send("POST", f"{self.api}/repos/{self.repo}/releases", expect=(201,),
                          json={"tag_name": tag, "name": tag, "body": body, "draft": True}).json()

    def create_prerelease(self, tag: str, body: str) -> dict[str, Any]:
        """A published pre-release (the binary cache's store: never a draft, which only
        the token's owner could read)."""
        return self._send("POST", f"{self.api}/repos/{self.repo}/releases", expect=(201,),
                          json={"tag_name": tag, "name": tag, "body": body, "prerelease": True}).json()

    def update(self, release: Mapping[str, Any], **fields: Any) -> dict[str, Any]:
        return self._send("PATCH", f"{self.api}/repos/{self.repo}/releases/{release['id']}", json=fields).json()

    def assets(self, release: Mapping[str, Any]) -> list[dict[str, Any]]:
        return self._pages(f"/repos/{self.repo}/releases/{release['id']}/assets")

    def delete_asset(self, asset: Mapping[str, Any]) -> None:
        self._send("DELETE", f"{self.api}/repos/{self.repo}/releases/assets/{asset['id']}", expect=(204,))

    def download(self, asset: Mapping[str, Any], target: Path) -> None:
        """An asset's bytes into `target` (through a temp beside it)."""
        url = f"{self.api}/repos/{self.repo}/releases/assets/{asset['id']}"
        response = self._send("GET", url, headers={"Accept": "application/octet-stream"}, stream=True)
        temp = target.with_name(f".{target.name}.tmp-{os.getpid()}")
        with response, open(temp, "wb") as out:
            for chunk in response.iter_content(1 << 20):
                out.write(chunk)
        os.replace(temp, target)

    def upload(self, release: Mapping[str, Any], path: Path, name: str) -> dict[str, Any]:
        url = str(release["upload_url"]).split("{", 1)[0]
        return self._send("POST", url, expect=(201,), upload=path, params={"name": name},
                          headers={"Content-Type": "application/octet-stream",
                                   "Content-Length": str(path.stat().st_size)}).json()

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


def _api_message(response: requests.Response) -> str:
    try:
        payload = response.json()
    except ValueError:
        return response.text[:200]
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
