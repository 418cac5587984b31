"""The pin-refresh workflow's pull-request step against the fake GitHub API on 127.0.0.1 and a
local bare repository as the remote: the engine.toml diff committed and pushed, a pull request
whose body names every new pin with its URL, refreshed (not duplicated) by a re-run; the inputs
a partial lock left unpinned listed; and, where GitHub refuses the workflow a pull request (the
default), the branch, a link that opens it and the diff in the job summary, and a warning
naming the setting and the PINS_TOKEN secret."""
from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path
from typing import Iterator

import pytest

import gha
from backends.ci import pin_refresh
from backends.model.matrix import load_matrix
from backends.model.recipes import plan_all
from backends.pins.engine_toml import Changes, apply
from backends.pins.inputs import FILE, GIT, collect
from fake_github import ACTIONS_MAY_NOT_OPEN_PULLS, REPO, TOKEN, FakeGitHub, serve

ROOT = Path(__file__).resolve().parents[3]
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


def _refresh(github: FakeGitHub, checkout: Path, capsys: pytest.CaptureFixture[str], *args: str,
             summary: Path | None = None) -> tuple[int, str]:
    environ = {"GITHUB_TOKEN": TOKEN, **({"GITHUB_STEP_SUMMARY": str(summary)} if summary else {})}
    code = pin_refresh.main(["--repo", REPO, "--base", "main", "--root", str(checkout), "--api", github.base, *args],
                            environ=environ)
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
    assert _git(checkout.parent / "remote.git", "branch", "--list", "pins/*") == ""


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


def _partial_lock_stand_in(checkout: Path) -> tuple[dict[str, tuple[str, str]], list[str]]:
    """What a lock that could not fetch two of the files records: every other pin."""
    expected = _lock_stand_in(checkout)
    failed = [name for name in expected if name.endswith(".tgz")][:2]
    toml = checkout / "engines" / ENGINE / "engine.toml"
    toml.write_text("".join(line for line in toml.read_text().splitlines(keepends=True)
                            if not any(line.startswith(f'"{name}"') for name in failed)))
    assert len(failed) == 2 and all(name not in toml.read_text() for name in failed)
    return {name: pin for name, pin in expected.items() if name not in failed}, failed


def test_a_partial_lock_opens_the_pull_request_and_lists_what_is_not_pinned(
        github: FakeGitHub, checkout: Path, capsys: pytest.CaptureFixture[str]) -> None:
    recorded, failed = _partial_lock_stand_in(checkout)
    code, out = _refresh(github, checkout, capsys, "--engine", ENGINE)
    assert code == 0, out
    [pull] = github.pulls
    recorded_part, missing_part = pull["body"].split("## Not pinned yet")
    for name, (pin, url) in recorded.items():
        assert pin in recorded_part and url in recorded_part
    rows = [line for line in missing_part.splitlines() if line.startswith(f"| {ENGINE} ")]
    assert [row.split(" | ")[0] for row in rows] == [f"| {ENGINE} {name}" for name in failed]


def _forbid_pulls(github: FakeGitHub) -> None:
    github.refuse[("POST", "pulls")] = (403, ACTIONS_MAY_NOT_OPEN_PULLS)


def test_a_refused_pull_request_names_the_setting_and_leaves_the_change_reviewable(
        github: FakeGitHub, checkout: Path, capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """GitHub's default: the workflow's token may not open pull requests (403 on POST /pulls)."""
    expected = _lock_stand_in(checkout)
    _forbid_pulls(github)
    summary = tmp_path / "summary.md"
    code, out = _refresh(github, checkout, capsys, summary=summary)
    assert code == 0, out  # the change is there to review: on its branch, linked from the summary
    assert github.pulls == []
    # The lookup comes first, before anything is pushed; the refused POST last.
    assert [call for call in github.calls if call[1].endswith("/pulls")] == [
        ("GET", f"/repos/{REPO}/pulls"), ("POST", f"/repos/{REPO}/pulls")]
    [warning] = [line for line in out.splitlines() if line.startswith("::warning")]
    assert warning.startswith("::warning title=pull request not opened::")
    assert ACTIONS_MAY_NOT_OPEN_PULLS in warning
    assert ('Settings > Actions > General > Workflow permissions > "Allow GitHub Actions to create and approve '
            'pull requests"') in warning
    assert "the secret PINS_TOKEN" in warning and "Pull requests: Read and write" in warning
    branch = f"pins/{ENGINE}"
    remote = checkout.parent / "remote.git"
    assert _git(remote, "rev-parse", branch).strip() == _git(checkout, "rev-parse", "HEAD").strip()
    page = summary.read_text()
    compare = f"https://github.com/{REPO}/compare/main...{branch}?expand=1"
    assert f"`{branch}`" in page and compare in page and compare in warning
    diff = page.split("```diff\n", 1)[1].split("```", 1)[0]
    assert f"+++ b/engines/{ENGINE}/engine.toml" in diff
    added = [line for line in diff.splitlines() if line.startswith("+")]
    for name, (pin, _) in expected.items():
        assert any(pin.split("`")[1] in line for line in added), name  # every new sha256 and commit


def test_a_refused_pins_token_names_the_secret_to_fix(github: FakeGitHub, checkout: Path,
                                                      capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    _lock_stand_in(checkout)
    github.refuse[("POST", "pulls")] = (403, f"Resource not accessible by personal access token {TOKEN}")
    code, out = _refresh(github, checkout, capsys, "--token-secret", "PINS_TOKEN", summary=tmp_path / "s.md")
    assert code == 0 and github.pulls == []
    page = (tmp_path / "s.md").read_text()
    assert "made with the secret PINS_TOKEN" in page and TOKEN not in page and "***" in page  # a log is public
    [warning] = [line for line in out.splitlines() if line.startswith("::warning")]
    assert "made with the secret PINS_TOKEN" in warning and "Pull requests: Read and write" in warning
    assert "Allow GitHub Actions" not in warning  # the setting is not what stands in the way


def test_a_failing_lookup_pushes_nothing(github: FakeGitHub, checkout: Path,
                                         capsys: pytest.CaptureFixture[str]) -> None:
    _lock_stand_in(checkout)
    github.refuse[("GET", "pulls")] = (401, "Bad credentials")
    code, out = _refresh(github, checkout, capsys)
    assert code == 2 and "HTTP 401" in out
    assert _git(checkout.parent / "remote.git", "branch", "--list", "pins/*") == ""


def test_the_workflow_step_against_a_default_repository(github: FakeGitHub, checkout: Path, tmp_path: Path) -> None:
    """The pins workflow's own `run:` (with the shell GitHub gives it), no PINS_TOKEN, and
    GitHub's default answer to the workflow's token: 403 on POST /pulls."""
    step = gha.step("pins.yml", "lock", "pull request")
    assert gha.render(step.body["env"]["TOKEN_SECRET"], {"secrets": {}}) == ""
    _lock_stand_in(checkout)
    _forbid_pulls(github)
    summary = tmp_path / "summary.md"
    env = {"PYTHONPATH": str(ROOT / "site_scons"), "GITHUB_TOKEN": TOKEN, "TOKEN_SECRET": "",
           "BASE": "main", "ENGINE": "all", "GITHUB_REPOSITORY": REPO, "GITHUB_API_URL": github.base,
           "GITHUB_SERVER_URL": "https://github.com", "GITHUB_RUN_ID": "7", "GITHUB_STEP_SUMMARY": str(summary)}
    done = gha.run(step, env, checkout, tmp_path / "step", path=[Path(sys.executable).parent])  # its `python`: this one
    assert done.returncode == 0, done.stdout + done.stderr
    assert "::warning title=pull request not opened::" in done.stdout and "PINS_TOKEN" in done.stdout
    assert f"https://github.com/{REPO}/compare/main...pins/{ENGINE}?expand=1" in summary.read_text()
    assert TOKEN not in done.stdout + done.stderr + summary.read_text()
