"""A tag whose leg the binary cache holds: the plan job gives that leg no runner job, and the
release job restores it, checked, into the release. Driven through the workflows' own `run:`
scripts (the plan step of _legs.yml, the restore and release steps of ci.yml) with GitHub's shell,
against the fake GitHub API, on a fixture project: an earlier push built the prebuilt fixbin
leg and stored it, signed with the key the project trusts; the fixsrc leg misses and is built
as its runner job would. A forged entry (consistent sidecars, no key to sign them) is refused
by the restore and the release stays a draft without it."""
from __future__ import annotations

import base64
import hashlib
import json
import shutil
from pathlib import Path

import pytest

import fixtures
import gha
from fixtures import FIXBIN_LEG_IDS, LegRow, fixbin_archive, scons
from fake_github import REPO, TOKEN, FakeGitHub, serve
from scratch import bench_module

from backends.cache.trust import key_id

ROOT = Path(__file__).resolve().parents[2]
CACHE = f"github:{REPO}@binary-cache"
TAG = "v1.0.0"
HIT = FIXBIN_LEG_IDS[0]
MISSES = ("fixsrc-linux-x86_64-static", "fixsrc-linux-x86_64-gpu-shared")  # the patch needs its coreml leg


bench = bench_module("ci_cost")


def _release_step(starts: str) -> gha.Step:
    return gha.step("ci.yml", "release", starts)


def _archives(legs: tuple[str, ...]) -> list[str]:
    return [fixtures.archive_name("fixsrc", fixtures.FIXSRC_VERSION, leg) for leg in legs]


def _forge(github: FakeGitHub, key: str, archive: str) -> None:
    """Replace the entry's archive with other bytes and make its .sha256, manifest and GitHub's
    digest agree with them, as a writer without the signing key could."""
    assets = {a["name"]: a for a in github.assets[github.release("binary-cache")["id"]]}
    body, entry = assets[f"{key}-{archive}"], assets[f"{key}-{archive}.entry"]
    forged = github.blobs[body["id"]] + b"\0"
    digest = hashlib.sha256(forged).hexdigest()
    github.blobs[body["id"]] = forged
    body.update(digest=f"sha256:{digest}", size=len(forged))
    payload = json.loads(github.blobs[entry["id"]])
    manifest = json.loads(base64.b64decode(payload["files"][archive + ".json"]))
    manifest.update(sha256=digest, size=len(forged))
    payload["files"][archive + ".json"] = base64.b64encode(json.dumps(manifest).encode()).decode()
    payload["files"][archive + ".sha256"] = base64.b64encode(f"{digest}  {archive}\n".encode()).decode()
    github.blobs[entry["id"]] = json.dumps(payload).encode()
    entry.update(digest="sha256:" + hashlib.sha256(github.blobs[entry["id"]]).hexdigest(),
                 size=len(github.blobs[entry["id"]]))


@pytest.mark.parametrize("forged", [False, True], ids=["signed entry", "forged entry"])
def test_a_hit_leg_gets_no_runner_job_and_is_released_checked(project_factory, tmp_path: Path, forged: bool) -> None:
    project = project_factory(fixsrc_rows=(LegRow(kind="static"),
                                           LegRow(kind="shared", flavor="gpu", accelerator="coreml")))
    secret, public = bench.keygen(tmp_path / "keys" / "ci")
    (project / "keys").mkdir()
    shutil.copy(public, project / "keys" / "binary-cache.pub")  # what the project trusts
    with serve() as github:
        api = {"GITHUB_TOKEN": TOKEN, "GITHUB_API_URL": github.base}
        # An earlier push to main: the leg built, published, stored signed.
        stored = scons(project, HIT, f"binary_cache={CACHE}", "binary_cache_write=1",
                       env={**api, "ANIRA_BINARY_CACHE_KEY": secret.read_text()})
        assert stored.returncode == 0, str(stored)
        archive = fixbin_archive(HIT)
        built = (project / "dist" / archive).read_bytes()
        manifest = json.loads((project / "dist" / f"{archive}.json").read_text())
        assert "durations" not in manifest  # dist/'s bytes are a clean build's: no clock in them
        key = manifest["leg_key"]
        label = github.labels("binary-cache")[f"{key}-{archive}.entry"]
        assert " signed=" in label and " build=" in label  # the entry's manifest times the build
        if forged:
            _forge(github, key, archive)
        for directory in ("build", "dist"):  # the tag's jobs start from a checkout
            shutil.rmtree(project / directory)

        # The tag's plan job: the hit gets no runner job.
        done, outputs, summary = bench.run_plan(project, github, tmp_path / "plan", release="true")
        assert done.returncode == 0, done.stdout + done.stderr
        assert sorted(e["id"] for e in json.loads(outputs["legs"])["include"]) == sorted(MISSES)
        assert [(hit["id"], hit["key"]) for hit in json.loads(outputs["hits"])] == [(HIT, key)]
        assert outputs["binary_cache"] == CACHE and "1 of 3 legs hit" in summary

        # The misses' runner jobs build them; the release job downloads them as artifacts into dist/.
        assert scons(project, *MISSES).returncode == 0

        # The release job: the restore step, then the release step, as ci.yml runs them.
        restore = bench.run_step(_release_step("restore the published legs"),
                                 {**api, "HITS": outputs["hits"], "BINARY_CACHE": outputs["binary_cache"]},
                                 project, tmp_path / "restore")
        release = bench.run_step(_release_step("draft and upload"),
                                 {**api, "MATRIX": outputs["matrix"], "GITHUB_REPOSITORY": REPO,
                                  "GITHUB_REF_NAME": TAG}, project, tmp_path / "release")
        names = github.asset_names(TAG)
        if forged:
            assert restore.returncode != 0
            assert f"{HIT}: refused: its signature vouches for other content" in restore.stdout
            assert "::error title=binary cache hits refused::1 binary cache hit(s) refused" in restore.stdout
            assert release.returncode != 0 and github.release(TAG)["draft"]
            assert archive not in names and set(_archives(MISSES)) <= set(names)
            return
        assert restore.returncode == 0, restore.stdout + restore.stderr
        assert f"[restore] {HIT}: restored from {CACHE}" in restore.stdout
        assert release.returncode == 0, release.stdout + release.stderr
        assert github.release(TAG)["draft"]  # published by the publish job, after attest and anira's tests
        assert {archive, f"{archive}.json", "SHA256SUMS", *_archives(MISSES)} <= set(names)
        assert github.asset_bytes(TAG, archive) == built
        released = json.loads(github.asset_bytes(TAG, f"{archive}.json"))
        assert released["restored"] == {"from binary cache": CACHE, "key": key,
                                        "signed by": f"key {key_id(public.read_text().strip())}"}
        assert released["leg_key"] == key
