"""Binary cache stores: a directory (atomic, concurrent writers) and a GitHub release (against
the local fake of the API); the HTTP store runs against nginx in tests/integration."""
from __future__ import annotations

import threading
from pathlib import Path
from typing import Iterator

import pytest

from backends.binary_cache import DirectoryStore, GitHubReleaseStore, ReadOnly, store_for
from backends.steps.archive import sha256_sidecar
from fake_github import REPO, TOKEN, FakeGitHub, serve

KEY = "ab" * 32


@pytest.fixture
def github() -> Iterator[FakeGitHub]:
    with serve() as state:
        yield state
ARCHIVE = "pkg-1.0-Linux-x86_64-shared.zip"


def _entry(where: Path, data: bytes = b"PK archive") -> list[Path]:
    where.mkdir(parents=True, exist_ok=True)
    archive = where / ARCHIVE
    archive.write_bytes(data)
    sha256_sidecar(archive)
    (where / (ARCHIVE + ".json")).write_text(f'{{"leg_key": "{KEY}"}}\n')
    return [where / (ARCHIVE + ".json"), where / (ARCHIVE + ".sha256"), archive]


def test_directory_store_round_trip_and_concurrent_writers(tmp_path: Path) -> None:
    store = DirectoryStore(tmp_path / "cache")
    assert not store.fetch(KEY, ARCHIVE, tmp_path / "got")
    files = _entry(tmp_path / "dist")
    threads = [threading.Thread(target=store.put, args=(KEY, files)) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    left = sorted(p.name for p in (tmp_path / "cache").iterdir() if not p.name.endswith(".lock"))
    assert left == [KEY]  # no temp left behind
    assert store.fetch(KEY, ARCHIVE, tmp_path / "got")
    assert (tmp_path / "got" / ARCHIVE).read_bytes() == b"PK archive"


def test_directory_store_replaces_an_entry_with_other_bytes(tmp_path: Path) -> None:
    store = DirectoryStore(tmp_path / "cache")
    store.put(KEY, _entry(tmp_path / "bad", b"PK corrupt!"))
    store.put(KEY, _entry(tmp_path / "good"))
    assert (tmp_path / "cache" / KEY / ARCHIVE).read_bytes() == b"PK archive"


def test_github_release_store(github: FakeGitHub, tmp_path: Path) -> None:
    store = store_for(f"github:{REPO}@binary-cache", {"GITHUB_TOKEN": TOKEN, "GITHUB_API_URL": github.base})
    assert isinstance(store, GitHubReleaseStore)
    assert not store.fetch(KEY, ARCHIVE, tmp_path / "got")  # no release yet: a miss
    store.put(KEY, _entry(tmp_path / "dist"))
    release = github.release("binary-cache")
    assert release["prerelease"] and not release["draft"]
    assert github.asset_names("binary-cache") == [f"{KEY}-{ARCHIVE}.sha256", f"{KEY}-{ARCHIVE}",
                                                  f"{KEY}-{ARCHIVE}.json"]  # the manifest last
    fresh = store_for(f"github:{REPO}@binary-cache", {"GITHUB_TOKEN": TOKEN, "GITHUB_API_URL": github.base})
    assert fresh.fetch(KEY, ARCHIVE, tmp_path / "got")
    assert (tmp_path / "got" / ARCHIVE).read_bytes() == b"PK archive"
    assert not fresh.fetch("cd" * 32, ARCHIVE, tmp_path / "other")


def test_github_release_store_without_a_token_is_read_only(github: FakeGitHub, tmp_path: Path) -> None:
    store = store_for(f"github:{REPO}@binary-cache", {"GITHUB_API_URL": github.base})
    with pytest.raises(ReadOnly, match="no GITHUB_TOKEN"):
        store.put(KEY, _entry(tmp_path / "dist"))
