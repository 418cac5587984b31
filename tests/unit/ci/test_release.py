"""The release command against a local server on 127.0.0.1 that plays the GitHub REST API."""
from __future__ import annotations

import hashlib
import json
import os
import sys
from functools import partial
from pathlib import Path
from typing import Any, Iterator

import pytest

from backends.ci import release
from backends.steps import sbom
from backends.util import github as github_api
from fake_github import HOURLY_LIMIT, REPO, TOKEN, FakeGitHub, serve

TAG = "v9.9.9"


@pytest.fixture
def github() -> Iterator[FakeGitHub]:
    with serve() as state:
        yield state


LEGS = [
    {"id": "onnxruntime-linux-x86_64-static", "platform": "linux-x86_64", "kind": "static", "publish": True,
     "needs": [], "requires": {}},
    {"id": "onnxruntime-windows-x86_64-cuda-shared", "platform": "windows-x86_64", "kind": "shared",
     "publish": True, "needs": [], "flavor": "cuda", "accelerator": ["cuda"],
     "requires": {"cuda": "13.x", "driver": "r580+"}},
    {"id": "onnxruntime-android-arm64-v8a-static", "platform": "android-arm64-v8a", "kind": "static",
     "publish": False, "needs": [], "requires": {}},
    {"id": "onnxruntime-android-static", "platform": "android", "kind": "static", "publish": True,
     "needs": ["onnxruntime-android-arm64-v8a-static"], "requires": {"min_os": "Android API 27"}},
]


def _archive(leg: dict[str, Any]) -> str:
    label = {"linux-x86_64": "Linux-x86_64", "windows-x86_64": "Windows-x86_64",
             "android-arm64-v8a": "Android-arm64-v8a", "android": "Android"}[leg["platform"]]
    flavor = f"-{leg['flavor']}" if leg.get("flavor", "cpu") != "cpu" else ""
    return f"onnxruntime-1.26.0-{label}{flavor}-{leg['kind']}.zip"


def _matrix(tmp_path: Path) -> Path:
    entries = [{"id": leg["id"], "engine": "onnxruntime", "platform": leg["platform"], "kind": leg["kind"],
                "config": "release", "flavor": leg.get("flavor", "cpu"), "publish": leg["publish"],
                "needs": leg["needs"], "archive": _archive(leg), "experimental": leg.get("experimental", False)}
               for leg in LEGS]
    path = tmp_path / "ci-matrix.json"
    path.write_text(json.dumps({"include": entries}))
    return path


def _build(dist: Path, leg: dict[str, Any], payload: bytes | None = None) -> Path:
    """What a leg job leaves in dist: the archive, its .sha256 and manifest."""
    dist.mkdir(exist_ok=True)
    archive = dist / _archive(leg)
    archive.write_bytes(payload if payload is not None else f"zip bytes of {leg['id']}".encode() * 100)
    digest = hashlib.sha256(archive.read_bytes()).hexdigest()
    (dist / f"{archive.name}.sha256").write_text(f"{digest}  {archive.name}\n")
    document = {"spdxVersion": "SPDX-2.3", "name": archive.stem}  # the release only carries it (steps/sbom.py checks it)
    member = f"share/sbom/{archive.stem}.spdx.json"
    manifest = {"archive": archive.name, "sha256": digest, "size": archive.stat().st_size,
                "sbom": {"path": member, "document": document},
                "files": [{"path": member, "sha256": hashlib.sha256(sbom.serialize(document)).hexdigest()}],
                "engine": {"name": "onnxruntime", "libname": "onnxruntime", "version": "1.26.0", "license": "MIT",
                           "homepage": "https://onnxruntime.ai"},
                "leg": {"id": leg["id"], "engine": "onnxruntime", "platform": leg["platform"], "kind": leg["kind"],
                        "config": "release", "flavor": leg.get("flavor", "cpu"),
                        "accelerator": leg.get("accelerator", []), "experimental": False,
                        "requires": leg["requires"]}}
    (dist / f"{archive.name}.json").write_text(json.dumps(manifest))
    return archive


def _run(github: FakeGitHub, tmp_path: Path, capsys: pytest.CaptureFixture[str],
         token: str = TOKEN) -> tuple[int, str]:
    code = release.main(["--repo", REPO, "--tag", TAG, "--dist", str(tmp_path / "dist"),
                         "--matrix", str(_matrix(tmp_path)), "--api", github.base],
                        environ={"GITHUB_TOKEN": token} if token else {})
    out, err = capsys.readouterr()
    assert TOKEN not in out + err
    return code, out + err


def _sums(text: str) -> dict[str, str]:
    return {name: digest for digest, name in (line.split("  ", 1) for line in text.splitlines())}


def test_all_required_legs_present_publishes(github: FakeGitHub, tmp_path: Path,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    for leg in LEGS:
        _build(tmp_path / "dist", leg)
    code, out = _run(github, tmp_path, capsys)
    assert code == 0, out
    record = github.release(TAG)
    assert record["draft"] is False
    published = [_archive(leg) for leg in LEGS if leg["publish"]]
    assert sorted(github.asset_names(TAG)) == sorted([*published, *(a + ".json" for a in published),
                                                      *(a + ".spdx.json" for a in published), "SHA256SUMS"])
    assert "onnxruntime-1.26.0-Android-arm64-v8a-static.zip" not in github.asset_names(TAG)  # publish: false
    # Created as a draft, filled, and published only after the last upload.
    assert github.calls[1] == ("POST", f"/repos/{REPO}/releases")
    assert github.calls[-1] == ("PATCH", f"/repos/{REPO}/releases/{record['id']}")
    assert github.calls[-2][1].startswith("/uploads/")
    assert "## onnxruntime 1.26.0" in record["body"]
    assert "cuda: 13.x; driver: r580+" in record["body"] and "min_os: Android API 27" in record["body"]
    assert "Not built yet" not in record["body"]


def test_sha256sums_match_the_uploaded_bytes(github: FakeGitHub, tmp_path: Path,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    for leg in LEGS:
        _build(tmp_path / "dist", leg)
    assert _run(github, tmp_path, capsys)[0] == 0
    sums = _sums(github.asset_bytes(TAG, "SHA256SUMS").decode())
    archives = [n for n in github.asset_names(TAG) if n.endswith(".zip")]
    assert sorted(sums) == sorted(archives)
    for name in archives:
        assert sums[name] == hashlib.sha256(github.asset_bytes(TAG, name)).hexdigest()


def test_the_assets_the_release_writes_into_dist_have_fixed_modes(github: FakeGitHub, tmp_path: Path,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    """Under umask 000 the SBOMs and SHA256SUMS are 0644 all the same (what dist/ publishes)."""
    for leg in LEGS:
        _build(tmp_path / "dist", leg)
    before = os.umask(0)
    try:
        assert _run(github, tmp_path, capsys)[0] == 0
    finally:
        os.umask(before)
    written = sorted((tmp_path / "dist").glob("*.spdx.json")) + [tmp_path / "dist" / "SHA256SUMS"]
    assert len(written) == len([leg for leg in LEGS if leg["publish"]]) + 1
    assert {p.name: p.stat().st_mode & 0o777 for p in written} == {p.name: 0o644 for p in written}


def test_missing_leg_leaves_a_draft_and_names_it(github: FakeGitHub, tmp_path: Path,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    for leg in LEGS:
        if leg["id"] != "onnxruntime-windows-x86_64-cuda-shared":
            _build(tmp_path / "dist", leg)
    code, out = _run(github, tmp_path, capsys)
    assert code == 1
    assert "stays a draft" in out and "onnxruntime-windows-x86_64-cuda-shared" in out
    record = github.release(TAG)
    assert record["draft"] is True
    assert "onnxruntime-windows-x86_64-cuda-shared" in record["body"]
    assert "onnxruntime-1.26.0-Windows-x86_64-cuda-shared.zip" not in github.asset_names(TAG)


def test_missing_experimental_leg_does_not_hold_the_release(github: FakeGitHub, tmp_path: Path,
                                                             capsys: pytest.CaptureFixture[str],
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    experimental = "onnxruntime-windows-x86_64-cuda-shared"
    monkeypatch.setattr(sys.modules[__name__], "LEGS",
                        [{**leg, "experimental": leg["id"] == experimental} for leg in LEGS])
    for leg in LEGS:
        if leg["id"] != experimental:
            _build(tmp_path / "dist", leg)
    code, out = _run(github, tmp_path, capsys)
    assert code == 0, out
    assert github.release(TAG)["draft"] is False


def test_rerun_after_failure_publishes_without_duplicates(github: FakeGitHub, tmp_path: Path,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    dist = tmp_path / "dist"
    for leg in LEGS[:1] + LEGS[2:]:
        _build(dist, leg)
    assert _run(github, tmp_path, capsys)[0] == 1
    first_uploads = len(github.uploads())
    _build(dist, LEGS[1])  # the failed leg, re-run
    code, out = _run(github, tmp_path, capsys)
    assert code == 0, out
    names = github.asset_names(TAG)
    assert len(names) == len(set(names)) == 10
    assert len(github.releases) == 1 and github.release(TAG)["draft"] is False
    # Only the new leg's three files and the grown SHA256SUMS went up again.
    assert len(github.uploads()) - first_uploads == 4
    assert "replaced SHA256SUMS" in out and "unchanged onnxruntime-1.26.0-Linux-x86_64-static.zip" in out
    sums = _sums(github.asset_bytes(TAG, "SHA256SUMS").decode())
    assert "onnxruntime-1.26.0-Windows-x86_64-cuda-shared.zip" in sums


def test_changed_asset_is_deleted_then_uploaded(github: FakeGitHub, tmp_path: Path,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    dist = tmp_path / "dist"
    _build(dist, LEGS[0])
    assert _run(github, tmp_path, capsys)[0] == 1
    _build(dist, LEGS[0], payload=b"rebuilt with other bytes")
    assert _run(github, tmp_path, capsys)[0] == 1
    name = "onnxruntime-1.26.0-Linux-x86_64-static.zip"
    assert github.asset_names(TAG).count(name) == 1
    assert github.asset_bytes(TAG, name) == b"rebuilt with other bytes"
    assert any(m == "DELETE" for m, _ in github.calls)


def test_draft_is_found_by_listing_across_pages(github: FakeGitHub, tmp_path: Path,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    github.add_release(TAG, draft=True)
    for index in range(github_api.PER_PAGE + 5):
        github.add_release(f"v0.0.{index}", draft=False)
    for leg in LEGS:
        _build(tmp_path / "dist", leg)
    assert _run(github, tmp_path, capsys)[0] == 0
    assert [r["tag_name"] for r in github.releases].count(TAG) == 1
    assert github.release(TAG)["draft"] is False


def test_published_release_is_never_changed(github: FakeGitHub, tmp_path: Path,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    for leg in LEGS:
        _build(tmp_path / "dist", leg)
    assert _run(github, tmp_path, capsys)[0] == 0
    code, out = _run(github, tmp_path, capsys)
    assert code == 0 and "already published" in out
    _build(tmp_path / "dist", LEGS[0], payload=b"different")
    uploads = len(github.uploads())
    code, out = _run(github, tmp_path, capsys)
    assert code == 2 and "already published" in out
    assert len(github.uploads()) == uploads


def test_token_is_never_printed(github: FakeGitHub, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _build(tmp_path / "dist", LEGS[0])
    github.fail_with = (403, f"token {TOKEN} lacks contents: write")  # a server that echoes it back
    code, out = _run(github, tmp_path, capsys)
    assert code == 2
    assert "HTTP 403" in out and "***" in out


def test_missing_token_and_bad_sidecar_are_clear_errors(github: FakeGitHub, tmp_path: Path,
                                                        capsys: pytest.CaptureFixture[str]) -> None:
    archive = _build(tmp_path / "dist", LEGS[0])
    code, out = _run(github, tmp_path, capsys, token="")
    assert code == 2 and "$GITHUB_TOKEN is empty" in out
    archive.write_bytes(b"corrupted in transfer")
    code, out = _run(github, tmp_path, capsys)
    assert code == 2 and "its .sha256 says" in out
    assert github.uploads() == []


def test_notes_come_from_the_manifests(tmp_path: Path) -> None:
    dist = tmp_path / "dist"
    _build(dist, LEGS[1])
    legs = release.required_legs(json.loads(_matrix(tmp_path).read_text())["include"], dist)
    notes = release.release_notes(TAG, legs)
    assert "anira backends v9.9.9" in notes
    assert "| `onnxruntime-1.26.0-Windows-x86_64-cuda-shared.zip` | windows-x86_64 | shared | cuda |" in notes
    assert "- `onnxruntime-linux-x86_64-static` (onnxruntime-1.26.0-Linux-x86_64-static.zip)" in notes


# -- re-runs, Immutable Releases, GitHub's rate limit ------------------------------------------

def test_rerun_replaces_a_half_uploaded_asset(github: FakeGitHub, tmp_path: Path,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    dist = tmp_path / "dist"
    _build(dist, LEGS[0])
    assert _run(github, tmp_path, capsys)[0] == 1
    name = "onnxruntime-1.26.0-Linux-x86_64-static.zip"
    [asset] = [a for a in github.assets[github.release(TAG)["id"]] if a["name"] == name]
    asset["state"] = "starter"  # the first attempt's upload was cut off
    code, out = _run(github, tmp_path, capsys)
    assert code == 1 and f"replaced {name}" in out
    assert [a["state"] for a in github.assets[github.release(TAG)["id"]] if a["name"] == name] == ["uploaded"]
    assert len(github.releases) == 1  # the draft of the first attempt, reused


def test_an_upload_cut_off_by_a_502_is_read_again_and_replaced(github: FakeGitHub, tmp_path: Path,
                                                               capsys: pytest.CaptureFixture[str],
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(release, "GitHub", partial(github_api.GitHub, sleep=lambda seconds: None))
    for leg in LEGS:
        _build(tmp_path / "dist", leg)
    name = "onnxruntime-1.26.0-Linux-x86_64-static.zip"
    github.break_upload = {name}  # 502, leaving an asset in state `starter`; the retry meets 422
    code, out = _run(github, tmp_path, capsys)
    assert code == 0, out
    assert github.asset_names(TAG).count(name) == 1
    assert github.asset_bytes(TAG, name) == (tmp_path / "dist" / name).read_bytes()


def test_immutable_releases_draft_upload_publish_then_never_change(github: FakeGitHub, tmp_path: Path,
                                                                   capsys: pytest.CaptureFixture[str]) -> None:
    github.immutable = True
    dist = tmp_path / "dist"
    for leg in LEGS[:1] + LEGS[2:]:
        _build(dist, leg)
    assert _run(github, tmp_path, capsys)[0] == 1  # a draft stays mutable...
    _build(dist, LEGS[1])
    assert _run(github, tmp_path, capsys)[0] == 0  # ...so the re-run completes it, then publishes
    assert github.release(TAG)["immutable"] and len(github.asset_names(TAG)) == 10
    code, out = _run(github, tmp_path, capsys)
    assert code == 0 and "already published" in out


def test_of_two_drafts_of_the_tag_the_oldest_is_used(github: FakeGitHub, tmp_path: Path,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    oldest = github.add_release(TAG, draft=True)
    newer = github.add_release(TAG, draft=True)  # drafts do not reserve their tag
    _build(tmp_path / "dist", LEGS[0])
    assert _run(github, tmp_path, capsys)[0] == 1
    assert len(github.assets[oldest["id"]]) == 4 and github.assets[newer["id"]] == []


def test_a_rate_limit_past_the_bounded_wait_fails_the_release(github: FakeGitHub, tmp_path: Path,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    _build(tmp_path / "dist", LEGS[0])
    github.exhaust(reset_in=3000)
    code, out = _run(github, tmp_path, capsys)
    assert code == 2
    assert "error: GitHub API GET" in out and "the primary rate limit" in out and "run again after that time" in out
    assert github.uploads() == []


def test_a_secondary_rate_limit_is_waited_out_and_said(github: FakeGitHub, tmp_path: Path,
                                                       capsys: pytest.CaptureFixture[str],
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    waits: list[float] = []
    monkeypatch.setattr(release, "GitHub", partial(github_api.GitHub, sleep=waits.append))
    for leg in LEGS:
        _build(tmp_path / "dist", leg)
    github.throttle(retry_after=7)
    github.throttle(retry_after=None, status=429)
    code, out = _run(github, tmp_path, capsys)
    assert code == 0, out
    assert waits == [7.0, 2 * github_api.SECONDARY_WAIT]  # a secondary limit again: twice the minute
    assert "a secondary rate limit (retry-after: 7 s); waiting 7 s" in out
    requests = len(github.calls)
    assert f"GitHub API: {requests} requests, {HOURLY_LIMIT - requests} left this hour" in out


def test_a_refusal_without_rate_limit_headers_is_no_rate_limit(github: FakeGitHub) -> None:
    client = github_api.GitHub(github.base, REPO, TOKEN, sleep=lambda seconds: pytest.fail("waited"))
    github.fail_with = (403, "Resource not accessible by integration")
    with pytest.raises(github_api.GitHubError, match="HTTP 403") as raised:
        client.find_release(TAG)
    assert not isinstance(raised.value, github_api.RateLimited) and client.requests == 1
