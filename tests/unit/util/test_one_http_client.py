"""One HTTP client: no module of the build (site_scons/, engines/, tools/, bench/, SConstruct)
but backends/util/http.py imports an HTTP client library, read from each module's syntax (local
imports included). urllib.request may be imported for its offline path helpers only."""
from __future__ import annotations

import ast
from pathlib import Path
from typing import Iterator

import pytest

from scratch import REPO

THE_CLIENT = REPO / "site_scons" / "backends" / "util" / "http.py"
CLIENT_LIBRARIES = ("requests", "urllib3", "http.client", "httpx", "aiohttp", "pycurl")
OFFLINE = frozenset({"url2pathname", "pathname2url"})  # urllib.request's file-name helpers
REQUEST = "urllib.request"


def _is(name: str, library: str) -> bool:
    return name == library or name.startswith(library + ".")


def _uses_of_request(tree: ast.AST) -> Iterator[ast.Attribute]:
    """Every `urllib.request.<name>` in `tree`."""
    for node in ast.walk(tree):
        if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Attribute)
                and isinstance(node.value.value, ast.Name) and node.value.value.id == "urllib"
                and node.value.attr == "request"):
            yield node


def violations(source: str) -> list[str]:
    """What in `source` reaches the network other than through util/http.py, each with its line."""
    tree = ast.parse(source)
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if any(_is(alias.name, library) for library in CLIENT_LIBRARIES):
                    found.append(f"{node.lineno}: import {alias.name}")
                elif _is(alias.name, REQUEST) and alias.asname:
                    found.append(f"{node.lineno}: import {alias.name} as {alias.asname} (its uses go unchecked)")
        elif isinstance(node, ast.ImportFrom) and not node.level:
            module = node.module or ""
            names = [alias.name for alias in node.names]
            if any(_is(module, library) for library in CLIENT_LIBRARIES) or (module == "http" and "client" in names):
                found.append(f"{node.lineno}: from {module} import {', '.join(names)}")
            elif module == "urllib" and "request" in names:
                found.append(f"{node.lineno}: from urllib import request (its uses go unchecked)")
            elif module == REQUEST and not OFFLINE.issuperset(names):
                found.append(f"{node.lineno}: from {module} import {', '.join(sorted(set(names) - OFFLINE))}")
    found += [f"{use.lineno}: urllib.request.{use.attr}" for use in _uses_of_request(tree) if use.attr not in OFFLINE]
    return found


def build_modules() -> list[Path]:
    roots = [REPO / "site_scons", REPO / "engines", REPO / "tools", REPO / "bench"]
    modules = [path for root in roots for path in root.rglob("*.py")]
    return sorted(modules + list((REPO / "site_scons").glob("*.SConscript")) + [REPO / "SConstruct"])


def test_only_util_http_imports_an_http_client() -> None:
    modules = build_modules()
    assert THE_CLIENT in modules and len(modules) > 100  # the walk found the tree
    found = {str(path.relative_to(REPO)): why for path in modules if path != THE_CLIENT
             for why in [violations(path.read_text())] if why}
    assert not found, f"modules reaching the network past backends/util/http.py: {found}"


def test_the_client_itself_is_what_the_check_would_refuse() -> None:
    assert violations(THE_CLIENT.read_text())  # the check sees requests and urllib3 where they are


@pytest.mark.parametrize("source", [
    "import requests",
    "def f():\n    import urllib3.util.retry",
    "import http.client",
    "from http import client",
    "from http.client import HTTPSConnection",
    "from requests.adapters import HTTPAdapter",
    "import urllib.request\nurllib.request.urlopen('https://example.org')",
    "from urllib.request import urlopen, url2pathname",
    "from urllib import request",
    "import urllib.request as fetcher",
])
def test_each_way_to_reach_the_network_is_refused(source: str) -> None:
    assert violations(source)


@pytest.mark.parametrize("source", [
    "import urllib.parse\nimport urllib.request\nurllib.request.url2pathname('/a')",
    "from urllib.request import pathname2url",
    "import http\nfrom http.server import ThreadingHTTPServer\nhttp.HTTPStatus.OK",
    "from backends.util import http",
])
def test_offline_uses_pass(source: str) -> None:
    assert not violations(source)
