"""What a location given on the command line or in the data names: an http(s) URL, or a
local path (a plain path, a Windows drive path, or a `file://` URL). One reading for
origins, mirrors, binary caches and git remotes."""
from __future__ import annotations

import urllib.parse
import urllib.request
from pathlib import Path

from backends.util.errors import BackendsError


class UnsupportedLocation(BackendsError, ValueError):
    """A URL of a scheme the project cannot read."""


def is_url(location: str) -> bool:
    return urllib.parse.urlsplit(location).scheme.lower() in ("http", "https")


def local_path(location: str) -> str:
    """The path a `file://` URL names; any other location as it is."""
    parsed = urllib.parse.urlsplit(location)
    return urllib.request.url2pathname(parsed.path) if parsed.scheme.lower() == "file" else location


def locate(location: str) -> str | Path:
    """An http(s) URL as it is, or the local Path; any other scheme is refused."""
    scheme = urllib.parse.urlsplit(location).scheme.lower()
    if scheme in ("http", "https"):
        return location
    if scheme in ("", "file") or len(scheme) == 1:  # a plain path, file://, or a Windows drive letter
        return Path(local_path(location))
    raise UnsupportedLocation(f"unsupported URL scheme {scheme!r} in {location}; use http(s)://, file:// "
                              "or a local path")


def url_filename(url: str) -> str:
    """The file name a URL downloads to (`%2B` decoded, as upstream's release assets are named)."""
    return urllib.parse.unquote(url.rstrip("/").rsplit("/", 1)[-1])


def origin_filename(origin: str) -> str:
    """The file name an `origin=` override (a URL or a local path) stands for."""
    return url_filename(origin) if "://" in origin else Path(origin).name
