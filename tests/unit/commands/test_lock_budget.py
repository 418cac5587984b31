"""`scons lock lock_minutes=N` starts no fetch after N minutes: what was fetched is recorded and
the rest is listed as not tried, so the pins workflow's lock ends inside its job's time and its
pull-request step still carries every hash fetched (a job timeout would skip that step)."""
from __future__ import annotations

import shutil
from pathlib import Path

import pytest

import gha
from backends.commands import lock as lock_module
from backends.commands.options import OptionError, option
from backends.graph.settings import Settings
from backends.model.matrix import load_matrix
from backends.pins.inputs import Input

ROOT = Path(__file__).resolve().parents[3]


def _settings(minutes: int, tmp_path: Path) -> Settings:
    return Settings(cache=tmp_path / "cache", mirrors=(), offline=True, lock=False, verbose=False, wait=False,
                    format="zip", inputs="build", heavy_jobs=1, version="", origins={}, lock_minutes=minutes)


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    for name in ("variants", "engines", "smoke"):
        shutil.copytree(ROOT / name, tmp_path / "tree" / name, ignore=shutil.ignore_patterns("__pycache__"))
    return tmp_path / "tree"


def test_no_fetch_starts_after_the_budget(tree: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    matrix = load_matrix(tree)
    legs = [leg for leg in matrix.legs if leg.engine == "onnxruntime"]
    now = [0.0]
    tried: list[str] = []

    def resolve(item: Input, *_: object) -> list[object]:
        tried.append(item.label)
        now[0] += 90  # each fetch takes a minute and a half
        return []

    monkeypatch.setattr(lock_module, "_resolve", resolve)
    with pytest.raises(lock_module.LockIncomplete) as incomplete:
        lock_module.lock(matrix, legs, _settings(2, tmp_path), clock=lambda: now[0])
    assert len(tried) == 2  # started at 0 and 1.5 minutes; none after 2
    message = str(incomplete.value)
    assert "not tried: lock_minutes=2 ran out; lock again for the rest" in message
    # Without a budget every input is tried.
    tried.clear()
    lock_module.lock(matrix, legs, _settings(0, tmp_path), clock=lambda: now[0])
    assert len(tried) > 2


def test_the_option_takes_whole_minutes() -> None:
    check = option("lock_minutes").check
    assert check is not None
    check("lock_minutes", "140")
    with pytest.raises(OptionError, match="whole number"):
        check("lock_minutes", "2h")


def test_the_pins_job_bounds_its_lock_inside_the_job_and_then_opens_the_pull_request() -> None:
    """The lock's own budget, then the step's timeout as a backstop, then the pull request's
    step: all inside the job's timeout, and the pull request's step runs after a failed lock."""
    [job] = gha.load("pins.yml")["jobs"].values()
    steps = gha.steps("pins.yml", "lock")
    lock = gha.step("pins.yml", "lock", "scons lock")
    pull = gha.step("pins.yml", "lock", "pull request")
    budget = int(lock.run.split("lock_minutes=")[1].split()[0].strip('"'))
    assert budget < lock.body["timeout-minutes"]
    assert all("timeout-minutes" in step.body for step in steps), [s.name for s in steps]
    assert sum(step.body["timeout-minutes"] for step in steps) <= job["timeout-minutes"]
    assert lock.body["continue-on-error"] is True and "if" not in pull.body
    assert gha.condition(pull.body.get("if", "success()"), {"job": {"status": "success"}})
