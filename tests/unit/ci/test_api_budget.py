"""GitHub REST requests of one whole-matrix run, counted against the fake API: the job token
has 1,000 requests per hour per repository, shared by every job of the run. A tagged run
after a green `main` restores every leg (one listing of the cache release and two downloads
per leg job), the aggregates download their inputs, and the release job uploads the
archives. The count is printed (`pytest -s`) and held well under the limit."""
from __future__ import annotations

import base64
import hashlib
import json
import math
import subprocess
import sys
from pathlib import Path
from typing import Any, Iterator

import pytest
import yaml

from backends.cache.release_store import ENTRY_SUFFIX, GitHubReleaseStore
from backends.cache.stores import store_for
from backends.ci import release
from backends.util import github as github_api
from binaries import stand_in_sbom
from fake_github import HOURLY_LIMIT, REPO, TOKEN, FakeGitHub, serve

ROOT = Path(__file__).resolve().parents[3]
CACHE_TAG = "binary-cache"
TAG = "v9.9.9"
# A tagged run's budget: room to spare for re-runs ("Re-run failed jobs" repeats lookups and
# the release job) within the hour.
TAGGED_BUDGET = 800  # with each archive's SBOM uploaded beside it (issue 26): well under 1,000


@pytest.fixture(scope="module")
def matrix() -> list[dict[str, Any]]:
    result = subprocess.run([sys.executable, "-m", "SCons", "-Q", "ci-matrix"], cwd=ROOT, capture_output=True,
                            text=True, check=True)
    return json.loads(result.stdout)["include"]


@pytest.fixture
def github(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeGitHub]:
    monkeypatch.setattr(github_api, "RATE_LIMIT_WAIT", 0.0)  # past the budget: a failure here, never a wait
    with serve() as state:
        yield state


def _key(entry: dict[str, Any], generation: str) -> str:
    return hashlib.sha256(f"{entry['id']} {generation}".encode()).hexdigest()


def _store(github: FakeGitHub) -> GitHubReleaseStore:
    """A leg job's store: a new process, so a new client and a new listing."""
    store = store_for(f"github:{REPO}@{CACHE_TAG}", {"GITHUB_TOKEN": TOKEN, "GITHUB_API_URL": github.base})
    assert isinstance(store, GitHubReleaseStore)
    return store


def _entry_files(where: Path, entry: dict[str, Any], key: str) -> list[Path]:
    """What a leg job publishes and stores: archive, .sha256, manifest, signature."""
    where.mkdir(parents=True, exist_ok=True)
    archive = where / entry["archive"]
    archive.write_bytes(f"PK {entry['id']} {key}".encode())
    digest = hashlib.sha256(archive.read_bytes()).hexdigest()
    (where / f"{archive.name}.sha256").write_text(f"{digest}  {archive.name}\n")
    manifest = {"archive": archive.name, "sha256": digest, "size": archive.stat().st_size, "leg_key": key,
                "engine": {"name": entry["engine"], "libname": entry["engine"], "version": "1.0", "license": "MIT"},
                "leg": {"id": entry["id"], "platform": entry["platform"], "kind": entry["kind"],
                        "config": entry["config"], "accelerator": entry["accelerator"], "requires": {}}}
    manifest.update(stand_in_sbom(archive.name))  # the release uploads each archive's SBOM beside it
    (where / f"{archive.name}.json").write_text(json.dumps(manifest))
    (where / f"{archive.name}.sig").write_text("{}")
    return [where / f"{archive.name}.sig", where / f"{archive.name}.json", where / f"{archive.name}.sha256",
            archive]


def _prefill(github: FakeGitHub, matrix: list[dict[str, Any]], tmp_path: Path, generation: str) -> None:
    """The cache release as earlier runs left it: one entry per leg under `generation`'s keys,
    written straight into the fake (not counted)."""
    record = github.releases[0] if github.releases else github.add_release(CACHE_TAG, draft=True)
    for entry in matrix:
        key = _key(entry, generation)
        files = _entry_files(tmp_path / "prefill" / entry["id"], entry, key)
        small = {path.name: base64.b64encode(path.read_bytes()).decode() for path in files[:3]}
        github.add_asset(record, f"{key}-{entry['archive']}", files[3].read_bytes(), entry["id"])
        github.add_asset(record, f"{key}-{entry['archive']}{ENTRY_SUFFIX}",
                         json.dumps({"format": 1, "files": small}).encode(), entry["id"])


def _counted(github: FakeGitHub) -> int:
    count = len(github.calls)
    github.calls.clear()  # each phase is an hour of its own: the fake's limit counts from here
    return count


def _aggregate_downloads(matrix: list[dict[str, Any]]) -> int:
    """The aggregates fetch their inputs with `gh run download --name <archive>` per input: gh
    lists the run's artifacts page by page (100 a page), then downloads the one (1 request).
    Modelled here: gh is not run in the tests."""
    step = next(s for s in yaml.safe_load((ROOT / ".github/workflows/_legs.yml").read_text())["jobs"]["aggregate"]
                ["steps"] if s.get("name") == "download exactly this aggregate's inputs")
    assert "gh run download" in step["run"] and "for name in $INPUTS" in step["run"], \
        "the aggregates download their inputs another way now: count its requests here"
    pages = math.ceil(len(matrix) / github_api.PER_PAGE)  # one artifact per leg (logs only on failure)
    return sum(len(entry["needs"]) * (pages + 1) for entry in matrix)


def _release_job(github: FakeGitHub, matrix: list[dict[str, Any]], tmp_path: Path) -> int:
    dist = tmp_path / "dist"
    for entry in matrix:
        if entry["publish"]:
            _entry_files(dist, entry, _key(entry, "current"))[0].unlink()
    (tmp_path / "matrix.json").write_text(json.dumps({"include": matrix}))
    code = release.main(["--repo", REPO, "--tag", TAG, "--dist", str(dist), "--matrix", str(tmp_path / "matrix.json"),
                         "--api", github.base], environ={"GITHUB_TOKEN": TOKEN})
    assert code == 0 and not github.release(TAG)["draft"]
    return _counted(github)


def test_a_whole_matrix_tagged_run_stays_well_under_the_token_budget(
        github: FakeGitHub, matrix: list[dict[str, Any]], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert len(matrix) > 100  # the whole matrix, as a tag builds it
    _prefill(github, matrix, tmp_path, "older")
    _prefill(github, matrix, tmp_path, "previous")

    # A push to main that changed every key (a new STEP_VERSION): every leg misses, builds, stores.
    for entry in matrix:
        store = _store(github)
        key = _key(entry, "current")
        assert not store.fetch(key, entry["archive"], tmp_path / "restored" / entry["id"])
        store.put(key, _entry_files(tmp_path / "built" / entry["id"], entry, key))
    main_push = _counted(github)
    assets = github.assets[github.release(CACHE_TAG)["id"]]
    assert len(assets) == 2 * 2 * len(matrix) < 1000  # 2 keys per leg kept (GitHub allows 1,000 assets)

    # The tag on that commit: every leg job (aggregates too) restores its entry.
    for entry in matrix:
        target = tmp_path / "tagged" / entry["id"]
        assert _store(github).fetch(_key(entry, "current"), entry["archive"], target)
        assert (target / entry["archive"]).read_bytes() == f"PK {entry['id']} {_key(entry, 'current')}".encode()
    lookups = _counted(github)
    aggregates = _aggregate_downloads(matrix)
    releasing = _release_job(github, matrix, tmp_path)
    tagged = lookups + aggregates + releasing
    published = sum(1 for entry in matrix if entry["publish"])
    capsys.readouterr()
    with capsys.disabled():
        print(f"\nGitHub REST requests of one whole-matrix run ({len(matrix)} leg jobs, {published} published "
              f"archives; a job token has {HOURLY_LIMIT} per hour per repository):\n"
              f"  push to main, every key changed (lookup, store, prune): {main_push}\n"
              f"  tagged run, leg jobs' lookups (all restored):           {lookups}\n"
              f"  tagged run, aggregates' artifact downloads (gh, model):  {aggregates}\n"
              f"  tagged run, release job:                                 {releasing}\n"
              f"  tagged run, total:                                       {tagged}")
    assert lookups == 3 * len(matrix)  # one listing and two downloads per leg job
    assert releasing <= 3 * published + 10  # each archive, manifest and SBOM, SHA256SUMS, a few calls
    assert main_push <= 5 * len(matrix) < HOURLY_LIMIT
    assert tagged < TAGGED_BUDGET < HOURLY_LIMIT
