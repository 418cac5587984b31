"""A fixture upstream whose CMake downloads a dependency with FetchContent (ONNX Runtime's
way: a deps.txt of `name;URL;SHA1`, a local `mirror/` preferred for each URL) built with the
network off: from the project's fetched and pinned file it builds; with no override it fails
naming the URL it tried; a mirror serving other bytes under the pinned file's name is refused."""
from __future__ import annotations

import hashlib
import io
import tarfile
from pathlib import Path

import pytest

from backends.model.plan import Command
from backends.pins import build_downloads as readers
from backends.runner.network import isolation_prefix
from backends.runner.run import Console
from backends.steps import build_downloads as serve
from backends.steps import fetch
from backends.steps.context import LegDirs
from backends.steps.upstream import NetworkOffError, run_commands
from fixtures import fetchcontent_of_deps_txt

URL = "https://deps.example.invalid/dep/archive/v1.0.tar.gz"  # never reachable: the mirror must serve it
UPSTREAM_CMAKE = ("""\
cmake_minimum_required(VERSION 3.24)
project(fixture_upstream C)
""" + fetchcontent_of_deps_txt("deps.txt") + """\
# What TFLite's OverridableFetchContent_Populate does for a dependency without a license file.
if(DEFINED LICENSE_URL)
  file(DOWNLOAD "${LICENSE_URL}" "${CMAKE_BINARY_DIR}/LICENSE.txt" STATUS RESULT)
  list(GET RESULT 0 RESULT)
  if(NOT RESULT EQUAL 0)
    message(FATAL_ERROR "Failed to download ${LICENSE_URL}")
  endif()
endif()
add_library(upstream STATIC upstream.c)
target_link_libraries(upstream PRIVATE dep)
""")


def _dep_archive() -> bytes:
    members = {"dep-1.0/CMakeLists.txt": b"add_library(dep STATIC dep.c)\n",
               "dep-1.0/dep.c": b"int dep(void) { return 1; }\n"}
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w:gz") as tar:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size, info.mtime = len(data), 0
            tar.addfile(info, io.BytesIO(data))
    return out.getvalue()


@pytest.fixture
def upstream(tmp_path: Path) -> tuple[Path, bytes]:
    archive = _dep_archive()
    tree = tmp_path / "upstream"
    (tree / "cmake").mkdir(parents=True)
    (tree / "CMakeLists.txt").write_text(UPSTREAM_CMAKE)
    (tree / "upstream.c").write_text("int dep(void);\nint upstream(void) { return dep(); }\n")
    deps = f"# name;URL;SHA1\ndep;{URL};{hashlib.sha1(archive).hexdigest()}\n"
    (tree / "deps.txt").write_text(deps)
    (tree / "cmake" / "deps.txt").write_text(deps)  # where the ort-deps reader looks
    return tree, archive


def _dirs(tmp_path: Path, tree: Path, downloads: dict[str, Path] | None = None) -> LegDirs:
    return LegDirs(src=tree, build=tmp_path / "build", install=tmp_path / "install", stage=tmp_path / "stage",
                   logs=tmp_path / "logs", downloads=downloads or {})


def _build(network: bool, *defines: str) -> list[Command]:
    return [Command("configure", ("cmake", "-S", "{src}", "-B", "{build}", "-G", "Ninja", *defines),
                    network=network),
            Command("build", ("cmake", "--build", "{build}"), network=network)]


def _fetched(tmp_path: Path, archive: bytes) -> fetch.Fetched:
    """The dependency through the project's fetch: from a mirror= directory, pinned by sha256."""
    [entry] = readers.read_ort_deps(f"dep;{URL};{hashlib.sha1(archive).hexdigest()}\n")
    mirror = tmp_path / "mirror-in"
    mirror.mkdir(exist_ok=True)
    (mirror / entry.filename).write_bytes(archive)
    download = fetch.Download(URL, entry.filename, hashlib.sha256(archive).hexdigest())
    return fetch.fetch(download, fetch.FetchSettings(cache_dir=tmp_path / "cache", mirrors=(str(mirror),), offline=True))


needs_isolation = pytest.mark.skipif(not isolation_prefix(), reason="this host cannot make a network namespace")


@needs_isolation
def test_builds_with_the_network_off_from_the_projects_mirror(tmp_path: Path, upstream: tuple[Path, bytes]) -> None:
    tree, archive = upstream
    fetched = _fetched(tmp_path, archive)
    declared = readers.read_tree("ort-deps", tree)
    assert serve.missing(declared, [URL]) == []
    serve.lay_mirror(tree / "mirror", [(URL, fetched.path)])
    ran = run_commands(_build(network=False), {}, _dirs(tmp_path, tree), "fixture", {}, verbose=False, console=Console())
    assert [r.get("network") for r in ran] == ["off", "off"]
    assert list((tmp_path / "build").rglob("libupstream.a")) and list((tmp_path / "build").rglob("libdep.a"))


def test_a_missing_override_is_named_before_the_build(upstream: tuple[Path, bytes],
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    """The check a plan runs before upstream's build: the tree declares a URL the leg does not serve."""
    tree, _ = upstream
    assert serve.main(["check", "--reader", "ort-deps", "--tree", str(tree), "--given"]) == 1
    said = capsys.readouterr().err
    assert URL in said and "cmake/deps.txt:2" in said


@needs_isolation
def test_a_download_upstream_tries_fails_with_the_network_off_naming_its_url(
        tmp_path: Path, upstream: tuple[Path, bytes]) -> None:
    tree, archive = upstream
    serve.lay_mirror(tree / "mirror", [(URL, _fetched(tmp_path, archive).path)])
    license_url = "https://licenses.example.invalid/dep/LICENSE"
    with pytest.raises(NetworkOffError) as failed:
        run_commands(_build(False, f"-DLICENSE_URL={license_url}"), {}, _dirs(tmp_path, tree), "fixture", {},
                     verbose=False, console=Console())
    assert license_url in failed.value.urls and "with the network off" in str(failed.value)
    assert license_url in str(failed.value)


@pytest.mark.slow
@needs_isolation
def test_fetch_content_without_its_override_fails_naming_the_url(tmp_path: Path,
                                                                 upstream: tuple[Path, bytes]) -> None:
    """Slow: CMake's own download retries wait 5 + 5 + 15 + 60 s before FetchContent gives up."""
    tree, _ = upstream
    with pytest.raises(NetworkOffError) as failed:
        run_commands(_build(network=False), {}, _dirs(tmp_path, tree), "fixture", {}, verbose=False, console=Console())
    assert URL in failed.value.urls and URL in str(failed.value)


@needs_isolation
def test_the_network_is_really_off(tmp_path: Path, upstream: tuple[Path, bytes]) -> None:
    """The same configure with the network on is no proof: here it is a command that needs the
    loopback of the host (a server on 127.0.0.1 is unreachable from the new namespace)."""
    import http.server
    import threading
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), http.server.SimpleHTTPRequestHandler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    probe = ("python3", "-c", f"import urllib.request; urllib.request.urlopen('http://127.0.0.1:{server.server_port}/', timeout=5)")
    try:
        run_commands([Command("probe", probe, network=True)], {}, _dirs(tmp_path, upstream[0]), "fixture", {}, False, console=Console())
        with pytest.raises(NetworkOffError):
            run_commands([Command("probe", probe, network=False)], {}, _dirs(tmp_path, upstream[0]), "fixture", {},
                         False, console=Console())
    finally:
        server.shutdown()


def test_a_mirror_with_other_bytes_under_the_pinned_name_is_refused(tmp_path: Path,
                                                                      upstream: tuple[Path, bytes]) -> None:
    _, archive = upstream
    [entry] = readers.read_ort_deps(f"dep;{URL};{hashlib.sha1(archive).hexdigest()}\n")
    mirror = tmp_path / "hostile"
    mirror.mkdir()
    (mirror / entry.filename).write_bytes(archive + b"other bytes")
    download = fetch.Download(URL, entry.filename, hashlib.sha256(archive).hexdigest())
    with pytest.raises(fetch.FetchError):
        fetch.fetch(download, fetch.FetchSettings(cache_dir=tmp_path / "cache", mirrors=(str(mirror),), offline=True))
    assert not list((tmp_path / "cache").rglob(entry.filename))  # nothing of it entered the cache
