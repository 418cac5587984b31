"""The anira gate's pins (.github/anira.toml): anira and every model repository its CMake would
clone at a branch are put in place at a commit, so a push to those repositories changes nothing
the gate tests. Local repositories stand in for GitHub's."""
from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

import gha
from backends.ci import anira_pins, downstream

ROOT = Path(__file__).resolve().parents[3]
GIT_ENV = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.invalid", "GIT_COMMITTER_NAME": "t",
           "GIT_COMMITTER_EMAIL": "t@example.invalid", "GIT_CONFIG_GLOBAL": os.devnull, "GIT_CONFIG_NOSYSTEM": "1"}


@pytest.fixture(autouse=True)
def _git_identity(monkeypatch: pytest.MonkeyPatch) -> None:
    for name, value in GIT_ENV.items():
        monkeypatch.setenv(name, value)


def _git(cwd: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, text=True).stdout.strip()


def test_the_projects_pins_name_full_commits() -> None:
    pins = anira_pins.load(ROOT)
    assert pins.repository == "anira-project/anira" and anira_pins.COMMIT.fullmatch(pins.commit)
    paths = [item.path for item in pins.checkouts]
    assert len(paths) == len(set(paths))
    assert {"hybrid-nn/GuitarLSTM", "cnn/steerable-nafx", "stateful-rnn/stateful-lstm",
            "model-pool/example-models"} <= set(paths)
    assert any(item.member.endswith("rave_funk_drum.ts") for item in pins.checkouts)


def test_the_anira_job_takes_anira_and_its_models_from_the_pins() -> None:
    steps = gha.steps("ci.yml", "anira")
    names = [step.name for step in steps]
    pins = gha.step("ci.yml", "anira", "pins")
    assert "python -m backends.ci.downstream pins" in pins.run and "GITHUB_OUTPUT" in pins.run
    [checkout] = [s for s in steps if s.body.get("with", {}).get("path") == "anira"]
    assert checkout.body["with"]["repository"] == "${{ steps.pins.outputs.repository }}"
    assert checkout.body["with"]["ref"] == "${{ steps.pins.outputs.commit }}"
    models = gha.step("ci.yml", "anira", "anira's model repositories")
    assert "python -m backends.ci.downstream models --anira anira" in models.run
    configure = names.index(next(n for n in names if n.startswith("configure anira")))
    assert names.index(pins.name) < names.index(checkout.name) < names.index(models.name) < configure


@pytest.mark.parametrize(("text", "message"), [
    ('[anira]\nrepository = "a/b"\ncommit = "main"\n', "not a full commit id"),
    ('[anira]\nrepository = "a/b"\ncommit = "' + "a" * 40 + '"\n[[models]]\nurl = "u"\npath = "../x"\ncommit = "'
     + "b" * 40 + '"\n', "must stay under extras/models"),
    ('[anira]\nrepository = "a/b"\ncommit = "' + "a" * 40 + '"\n[[models]]\nurl = "u"\npath = "x"\nref = "main"\n',
     "needs exactly commit, path, url"),
    ('[anira]\nrepository = "https://github.com/a/b"\ncommit = "' + "a" * 40 + '"\n', "is not owner/name"),
])
def test_malformed_pins_are_refused(tmp_path: Path, text: str, message: str) -> None:
    (tmp_path / ".github").mkdir()
    (tmp_path / ".github" / "anira.toml").write_text(text)
    with pytest.raises(anira_pins.PinError, match=message):
        anira_pins.load(tmp_path)


def _repository(where: Path) -> tuple[str, str]:
    """A model repository whose main moved on after the commit the pins name: (pinned, head)."""
    where.mkdir()
    _git(where, "init", "-q", "-b", "main")
    (where / "model.json").write_text("pinned\n")
    (where / "big.ts").write_bytes(b"\0pinned model")
    _git(where, "add", "-A")
    _git(where, "commit", "-q", "-m", "pinned")
    pinned = _git(where, "rev-parse", "HEAD")
    (where / "model.json").write_text("moved on\n")
    (where / "big.ts").write_bytes(b"\0another model")
    _git(where, "commit", "-qam", "later")
    _git(where, "config", "uploadpack.allowAnySHA1InWant", "true")  # GitHub serves any commit by id
    return pinned, _git(where, "rev-parse", "HEAD")


def _project(tmp_path: Path, origin: Path, commit: str) -> Path:
    root = tmp_path / "project"
    (root / ".github").mkdir(parents=True)
    (root / ".github" / "anira.toml").write_text(
        f'[anira]\nrepository = "anira-project/anira"\ncommit = "{"a" * 40}"\n'
        f'[[models]]\nurl = "{origin.as_uri()}"\npath = "cnn/model"\ncommit = "{commit}"\n'
        f'[[files]]\nurl = "{origin.as_uri()}"\ncommit = "{commit}"\nmember = "big.ts"\npath = "third-party/big.ts"\n')
    return root


def test_models_are_checked_out_at_their_pins_not_at_the_branch(tmp_path: Path,
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    pinned, head = _repository(tmp_path / "origin")
    root = _project(tmp_path, tmp_path / "origin", pinned)
    anira = tmp_path / "anira"
    anira.mkdir()
    assert downstream.main(["models", "--root", str(root), "--anira", str(anira)]) == 0
    models = anira / "extras" / "models"
    assert _git(models / "cnn" / "model", "rev-parse", "HEAD") == pinned != head
    assert (models / "cnn" / "model" / "model.json").read_text() == "pinned\n"
    assert (models / "third-party" / "big.ts").read_bytes() == b"\0pinned model"
    assert f"cnn/model: {(tmp_path / 'origin').as_uri()} at {pinned}" in capsys.readouterr().out
    # A second run onto the same checkout would leave anira's CMake what is there: refused.
    assert downstream.main(["models", "--root", str(root), "--anira", str(anira)]) == 2
    assert "exists already" in capsys.readouterr().err


def test_a_commit_the_repository_lacks_fails_naming_it(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _repository(tmp_path / "origin")
    root = _project(tmp_path, tmp_path / "origin", "c" * 40)
    (tmp_path / "anira").mkdir()
    assert downstream.main(["models", "--root", str(root), "--anira", str(tmp_path / "anira")]) == 2
    assert f"fetch -q --depth 1 {(tmp_path / 'origin').as_uri()} {'c' * 40}" in capsys.readouterr().err


def test_the_pins_command_prints_the_checkouts_outputs(capsys: pytest.CaptureFixture[str]) -> None:
    assert downstream.main(["pins", "--root", str(ROOT)]) == 0
    pins = anira_pins.load(ROOT)
    assert capsys.readouterr().out.splitlines() == [f"repository={pins.repository}", f"commit={pins.commit}"]
