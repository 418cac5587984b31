"""One limit for every GitHub release asset (model/plan.py RELEASE_ASSET_MAX_BYTES), below the
size GitHub's uploads really stop at: verify refuses a larger archive, and the release and the
binary cache refuse to upload one before sending (or hashing) a byte. Sparse files stand in for
2 GB archives."""
from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

from backends.cache.store import CacheError
from backends.cache.stores import store_for
from backends.ci import release
from backends.model.plan import RELEASE_ASSET_MAX_BYTES, Contract
from backends.steps import verify
from fake_github import REPO, TOKEN, serve

LIMIT = RELEASE_ASSET_MAX_BYTES


def _sparse(path: Path, size: int) -> Path:
    with path.open("wb") as handle:
        handle.truncate(size)
    return path


def test_the_limit_is_below_what_github_takes_and_is_every_contracts() -> None:
    assert LIMIT <= 2_000_000_000 < 2 * 1024**3 - 1
    assert Contract().max_bytes == LIMIT


@pytest.mark.parametrize(("size", "refused"), [(LIMIT, False), (LIMIT + 1, True), (2 * 1024**3 - 1, True)])
def test_verify_refuses_an_archive_over_the_limit(tmp_path: Path, size: int, refused: bool) -> None:
    view = SimpleNamespace(path=_sparse(tmp_path / "big.zip", size))
    problems = verify._check_size(view, Contract())  # type: ignore[arg-type]
    assert bool(problems) is refused
    if refused:
        assert f"{size:,} bytes, over the {LIMIT:,}-byte release-asset limit" in problems[0]


def test_the_release_refuses_an_asset_over_the_limit_before_hashing_it(tmp_path: Path) -> None:
    big = _sparse(tmp_path / "onnxruntime-1.26.0-Linux-x86_64-cuda-shared.zip", LIMIT + 1)
    with pytest.raises(release.ReleaseError, match="over the 2,000,000,000-byte release-asset limit"):
        release.Asset.of(big)
    assert release.Asset.of(_sparse(tmp_path / "small.zip", 10)).size == 10


def test_the_binary_cache_does_not_store_an_archive_over_the_limit(tmp_path: Path) -> None:
    archive = _sparse(tmp_path / "big.zip", LIMIT + 1)
    (tmp_path / "big.zip.json").write_text('{"leg": {"id": "x"}}')
    (tmp_path / "big.zip.sha256").write_text("0" * 64 + "  big.zip\n")
    with serve() as github:
        store = store_for(f"github:{REPO}@binary-cache", {"GITHUB_TOKEN": TOKEN, "GITHUB_API_URL": github.base})
        with pytest.raises(CacheError, match="not stored: big.zip is 2,000,000,001 bytes"):
            store.put("ab" * 32, [archive, tmp_path / "big.zip.json", tmp_path / "big.zip.sha256"])
        assert github.calls == []
