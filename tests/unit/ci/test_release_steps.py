"""The release command's two steps against the local fake GitHub (tests/fake_github.py):
`--step draft` fills the draft and never publishes; `--step publish` publishes only a complete
draft holding exactly the bytes the gates checked; each archive's SBOM goes up as
`<archive>.spdx.json`, the bytes the archive holds."""
from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Iterator

import pytest

from backends.ci import release
from backends.steps import sbom
from fake_github import REPO, TOKEN, FakeGitHub, serve
from test_release import LEGS, TAG, _archive, _build, _matrix


@pytest.fixture
def github() -> Iterator[FakeGitHub]:
    with serve() as state:
        yield state


def _step(github: FakeGitHub, tmp_path: Path, capsys: pytest.CaptureFixture[str], step: str) -> tuple[int, str]:
    code = release.main(["--repo", REPO, "--tag", TAG, "--dist", str(tmp_path / "dist"), "--matrix",
                         str(_matrix(tmp_path)), "--api", github.base, "--step", step], environ={"GITHUB_TOKEN": TOKEN})
    out, err = capsys.readouterr()
    return code, out + err


def _all(tmp_path: Path) -> None:
    for leg in LEGS:
        _build(tmp_path / "dist", leg)


def test_the_draft_step_never_publishes_and_the_publish_step_does(github: FakeGitHub, tmp_path: Path,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    _all(tmp_path)
    code, out = _step(github, tmp_path, capsys, "draft")
    assert code == 0 and "published by the publish step" in out
    assert github.release(TAG)["draft"] is True
    uploads = len(github.uploads())
    code, out = _step(github, tmp_path, capsys, "publish")
    assert code == 0, out
    assert github.release(TAG)["draft"] is False
    assert len(github.uploads()) == uploads  # publishing changes no asset


def test_publish_without_a_draft_is_a_clear_error(github: FakeGitHub, tmp_path: Path,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    _all(tmp_path)
    code, out = _step(github, tmp_path, capsys, "publish")
    assert code == 2 and "has no draft to publish: run `--step draft` first" in out


def test_a_missing_leg_fails_the_draft_step_and_keeps_the_draft(github: FakeGitHub, tmp_path: Path,
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    for leg in LEGS[1:]:
        _build(tmp_path / "dist", leg)
    assert _step(github, tmp_path, capsys, "draft")[0] == 1
    code, out = _step(github, tmp_path, capsys, "publish")
    assert code == 1 and "stays a draft" in out and LEGS[0]["id"] in out
    assert github.release(TAG)["draft"] is True


def test_bytes_other_than_the_drafts_are_never_published(github: FakeGitHub, tmp_path: Path,
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    _all(tmp_path)
    assert _step(github, tmp_path, capsys, "draft")[0] == 0
    _build(tmp_path / "dist", LEGS[0], payload=b"rebuilt after the gates checked the draft")
    code, out = _step(github, tmp_path, capsys, "publish")
    assert code == 2 and "does not hold exactly these assets" in out and _archive(LEGS[0]) in out
    assert github.release(TAG)["draft"] is True


def test_each_archives_sbom_is_an_asset_in_the_archives_bytes(github: FakeGitHub, tmp_path: Path,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    _all(tmp_path)
    assert _step(github, tmp_path, capsys, "draft")[0] == 0
    name = _archive(LEGS[0])
    manifest = json.loads((tmp_path / "dist" / f"{name}.json").read_text())
    uploaded = github.asset_bytes(TAG, f"{name}.spdx.json")
    assert uploaded == sbom.serialize(manifest["sbom"]["document"])
    assert hashlib.sha256(uploaded).hexdigest() == manifest["files"][0]["sha256"]


def test_a_manifest_whose_sbom_is_not_the_archives_is_refused(github: FakeGitHub, tmp_path: Path,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    _all(tmp_path)
    path = tmp_path / "dist" / f"{_archive(LEGS[0])}.json"
    manifest = json.loads(path.read_text())
    manifest["sbom"]["document"]["name"] = "edited after the build"
    path.write_text(json.dumps(manifest))
    code, out = _step(github, tmp_path, capsys, "draft")
    assert code == 2 and "is not the archive's member" in out
    del manifest["sbom"]
    path.write_text(json.dumps(manifest))
    code, out = _step(github, tmp_path, capsys, "draft")
    assert code == 2 and "carries no SBOM" in out
    assert github.uploads() == []
