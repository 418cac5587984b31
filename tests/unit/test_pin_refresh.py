"""The pin-refresh workflow's pull-request step against the fake GitHub API on 127.0.0.1 and a
local bare repository as the remote: the engine.toml diff committed and pushed, a pull request
whose body names every new pin with its URL, refreshed (not duplicated) by a re-run."""
from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Iterator

import pytest

from backends import pin_refresh
from backends.inputs import FILE, GIT, collect
from backends.model.matrix import load_matrix
from backends.model.recipes import plan_all
from backends.pins import Changes, apply
from fake_github import REPO, TOKEN, FakeGitHub, serve

ROOT = Path(__file__).resolve().parents[2]
ENGINE = "onnxruntime"
VERSION = load_matrix(ROOT).engines[ENGINE].version
MAJOR, MINOR, *_ = VERSION.split(".")
NEXT_VERSION = f"{MAJOR}.{int(MINOR) + 1}.0"
IDENTITY = ("-c", "user.name=t", "-c", "user.email=t@t")


def _git(cwd: Path, *args: str) -> str:
    return subprocess.run(["git", *IDENTITY, *args], cwd=cwd, check=True, capture_output=True, text=True).stdout


@pytest.fixture
def checkout(tmp_path: Path) -> Path:
    """A clone of a one-engine project (the real onnxruntime data), its remote a bare repository."""
    work = tmp_path / "work"
    (work / "variants").mkdir(parents=True)
    shutil.copytree(ROOT / "engines" / ENGINE, work / "engines" / ENGINE)
    shutil.copy(ROOT / "engines" / "contracts.toml", work / "engines")  # every engine's evidence table
    shutil.copy(ROOT / "variants" / f"{ENGINE}.toml", work / "variants")
    shutil.copy(ROOT / ".gitignore", work)  # engine.toml.lock, the pin writers' lock file
    _git(tmp_path, "init", "-q", "-b", "main", str(work))
    _git(work, "add", ".")
    _git(work, "commit", "-q", "-m", "data")
    _git(tmp_path, "clone", "-q", "--bare", str(work), str(tmp_path / "remote.git"))
    _git(work, "remote", "add", "origin", str(tmp_path / "remote.git"))
    return work


@pytest.fixture
def github(checkout: Path) -> Iterator[FakeGitHub]:
    with serve() as state:
        remote = checkout.parent / "remote.git"
        state.branch_exists = lambda branch: bool(_git(remote, "branch", "--list", branch).strip())
        yield state


def _refresh(github: FakeGitHub, checkout: Path, capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    code = pin_refresh.main(["--repo", REPO, "--base", "main", "--root", str(checkout), "--api", github.base],
                            environ={"GITHUB_TOKEN": TOKEN})
    out, err = capsys.readouterr()
    assert TOKEN not in out + err
    return code, out + err


def _lock_stand_in(checkout: Path) -> dict[str, tuple[str, str]]:
    """What `scons lock` records, written the same way: a pin per input; {pin text: its URL}."""
    matrix = load_matrix(checkout)
    inputs = collect(plan_all(matrix), matrix)
    changes = Changes()
    expected = {}
    for number, item in enumerate(inputs):
        if item.kind == FILE:
            changes.sha256[item.key] = f"{number:064x}"
            expected[item.key] = (f"sha256 `{number:064x}`", item.url)
        elif item.kind == GIT:
            changes.commits[item.source] = f"{number:040x}"
            expected[item.source] = (f"commit `{number:040x}`", item.url)
    apply(checkout / "engines" / ENGINE / "engine.toml", changes)
    return expected


def test_nothing_to_pin_opens_nothing(github: FakeGitHub, checkout: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out = _refresh(github, checkout, capsys)
    assert code == 0 and "no pull request" in out
    assert github.pulls == [] and github.calls == []


def test_the_pull_request_lists_every_new_pin_with_its_url(github: FakeGitHub, checkout: Path,
                                                           capsys: pytest.CaptureFixture[str]) -> None:
    expected = _lock_stand_in(checkout)
    code, out = _refresh(github, checkout, capsys)
    assert code == 0, out
    [pull] = github.pulls
    assert pull["_head"] == f"{REPO.split('/')[0]}:pins/{ENGINE}" and pull["_base"] == "main"
    assert pull["title"] == f"pins: {ENGINE}"
    for name, (pin, url) in expected.items():
        row = next(line for line in pull["body"].splitlines() if line.startswith(f"| `{name}` |"))
        assert pin in row and url in row
    # The branch on the remote holds exactly the engine.toml change, on top of main.
    remote = checkout.parent / "remote.git"
    assert _git(remote, "rev-parse", f"pins/{ENGINE}").strip() == _git(checkout, "rev-parse", "HEAD").strip()
    assert _git(checkout, "diff", "--name-only", "main", "HEAD").split() == [f"engines/{ENGINE}/engine.toml"]
    assert _git(checkout, "status", "--porcelain") == ""


def test_a_rerun_refreshes_its_pull_request(github: FakeGitHub, checkout: Path,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    _lock_stand_in(checkout)
    assert _refresh(github, checkout, capsys)[0] == 0
    _git(checkout, "checkout", "-q", "main")  # the next workflow run starts from main again
    apply(checkout / "engines" / ENGINE / "engine.toml", Changes(version=NEXT_VERSION))
    _lock_stand_in(checkout)
    code, out = _refresh(github, checkout, capsys)
    assert code == 0 and "updated pull request #1" in out
    [pull] = github.pulls
    assert pull["title"] == f"pins: {ENGINE} {NEXT_VERSION}"
    assert f"## {ENGINE} {VERSION} → {NEXT_VERSION}" in pull["body"]


def test_api_errors_are_clear_and_keep_the_token_secret(github: FakeGitHub, checkout: Path,
                                                        capsys: pytest.CaptureFixture[str]) -> None:
    _lock_stand_in(checkout)
    github.fail_with = (403, f"token {TOKEN} lacks pull-requests: write")
    code, out = _refresh(github, checkout, capsys)
    assert code == 2 and "HTTP 403" in out and "***" in out
