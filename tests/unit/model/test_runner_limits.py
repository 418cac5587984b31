"""Disk and time on GitHub's runners: legs whose inputs run to several GB free the disk
first (and print what is free), the compiler cache is saved however the build ended, and a
leg whose cold build outlasts CI's build step says so in `scons list`.

The hours are estimates (variants `cold_hours`): no upstream build log is at hand here; the
review that set them found cold PyTorch builds on `macos-15-intel` approaching the 6 h cap
(docs/ci-and-release.md "On the runners").
"""
from __future__ import annotations

import shutil
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from backends.ci import main as ci
from backends.commands.report import cold_build, list_rows
from backends.model import runner_needs
from backends.model.engine import DataError
from backends.model.matrix import load_matrix
from backends.model.recipes import plan_all
from backends.probes.host import Host

ROOT = Path(__file__).resolve().parents[3]
LEGS_WORKFLOW = ROOT / ".github/workflows/_legs.yml"
GITHUB_JOB_CAP = 360  # minutes: GitHub stops a hosted runner's job there


@pytest.fixture(scope="module")
def matrix():  # type: ignore[no-untyped-def]
    return load_matrix(ROOT)


# -- the data -----------------------------------------------------------------------------------

def test_the_long_cold_builds_and_the_disk_heavy_leg_are_flagged(matrix) -> None:  # type: ignore[no-untyped-def]
    hours = {leg.id: leg.cold_hours for leg in matrix.legs if leg.cold_hours}
    assert hours == {"libtorch-macos-x86_64-shared": 6.0, "executorch-macos-x86_64-static": 6.0,
                     "executorch-macos-x86_64-gpu-static": 6.0}
    assert [leg.id for leg in matrix.legs if leg.free_disk] == ["libtorch-linux-x86_64-cuda-shared"]


@pytest.fixture
def project(tmp_path: Path) -> Path:
    for name in ("variants", "engines"):
        shutil.copytree(ROOT / name, tmp_path / name)
    return tmp_path


def _edit_first_row(project: Path, line: str) -> None:
    path = project / "variants/libtorch.toml"
    text = path.read_text()
    path.write_text(text.replace('platform = "macos-x86_64"\n', f'platform = "macos-x86_64"\n{line}\n', 1))


@pytest.mark.parametrize("value", ['"6"', "0", "25", "true", "-1"])
def test_cold_hours_is_a_number_of_hours(project: Path, value: str) -> None:
    path = project / "variants/libtorch.toml"
    path.write_text(path.read_text().replace("cold_hours = 6 ", f"cold_hours = {value} ", 1))
    with pytest.raises(DataError, match=r"libtorch.toml leg #1: cold_hours must be a number of hours above 0"):
        load_matrix(project)


def test_free_disk_is_for_linux_runners(project: Path) -> None:
    _edit_first_row(project, "free_disk = true")
    with pytest.raises(DataError, match="free_disk removes a Linux runner's preinstalled SDKs; runner macos-15-intel"):
        load_matrix(project)


# -- scons list --------------------------------------------------------------------------------

def test_scons_list_says_which_cold_builds_outlast_the_ci_build_step(matrix) -> None:  # type: ignore[no-untyped-def]
    plans = plan_all(matrix)
    rows = {row["leg"]: row for row in list_rows(plans, Host("linux", "x86_64"))}
    assert list(rows["libtorch-macos-x86_64-shared"])[-1] == "cold build"  # last: its text has spaces
    assert rows["libtorch-macos-x86_64-shared"]["cold build"] == (
        "~6 h > 5 h: 2 CI runs")
    assert rows["libtorch-macos-arm64-shared"]["cold build"] == "-"
    shorter = replace(matrix.leg("libtorch-macos-x86_64-shared"), cold_hours=4.5)
    assert cold_build(shorter) == "~4.5 h"  # within the step's limit: no warning


# -- the runner's setup ----------------------------------------------------------------------------

def test_setup_frees_the_disk_only_for_flagged_legs(matrix) -> None:  # type: ignore[no-untyped-def]
    assert ci.setup_for("libtorch-linux-x86_64-cuda-shared", matrix).outputs()["free_disk"] == "true"
    assert ci.setup_for("libtorch-linux-x86_64-shared", matrix).outputs()["free_disk"] == "false"


def _build_steps() -> tuple[dict[str, Any], list[dict[str, Any]]]:
    yaml = pytest.importorskip("yaml", reason="PyYAML reads the workflow structure")
    job = yaml.safe_load(LEGS_WORKFLOW.read_text())["jobs"]["build"]
    return job, job["steps"]


def _step(steps: list[dict[str, Any]], name_start: str) -> tuple[int, dict[str, Any]]:
    found = [(i, step) for i, step in enumerate(steps) if step.get("name", "").startswith(name_start)]
    assert len(found) == 1, f"{len(found)} steps named {name_start!r}"
    return found[0]


def test_the_free_disk_step_prints_free_space_before_and_after() -> None:
    _, steps = _build_steps()
    index, step = _step(steps, "free disk space")
    assert step["if"] == "steps.setup.outputs.free_disk == 'true'"
    lines = step["run"].splitlines()
    assert lines[0].startswith("df -h") and lines[-1].startswith("df -h") and "sudo rm -rf" in lines[1]
    assert index < _step(steps, "download cache")[0]  # before any input arrives


def test_time_limits_leave_room_to_save_the_compiler_cache() -> None:
    job, steps = _build_steps()
    _, scons = _step(steps, "scons (")
    assert scons["timeout-minutes"] == runner_needs.BUILD_STEP_MINUTES
    assert job["timeout-minutes"] == runner_needs.JOB_MINUTES < GITHUB_JOB_CAP
    assert runner_needs.JOB_MINUTES - runner_needs.BUILD_STEP_MINUTES >= 30  # setup before it, the cache save and uploads after


def test_the_compiler_cache_is_saved_however_the_build_ended() -> None:
    _, steps = _build_steps()
    restore_at, restore = _step(steps, "compiler cache, restore")
    tool_at, tool = _step(steps, "compiler cache, install and configure")
    scons_at, _ = _step(steps, "scons (")
    save_at, save = _step(steps, "compiler cache, save")
    assert restore_at < tool_at < scons_at < save_at
    assert restore["uses"].startswith("actions/cache/restore@") and save["uses"].startswith("actions/cache/save@")
    assert "always()" in save["if"] and "steps.setup.outputs.launcher != ''" in save["if"]
    assert save["with"]["path"] == restore["with"]["path"]  # one path spelling: one cache version
    assert save["with"]["key"] == f"${{{{ steps.{restore['id']}.outputs.cache-primary-key }}}}"
    assert "github.run_id" in restore["with"]["key"]  # every run saves its own entry
    assert tool["with"]["restore"] is False and tool["with"]["save"] is False
    # the action's own post step is not what saves: a cancelled job's post steps may never run
    assert not any(s.get("uses", "").startswith("hendrikmuhs/ccache-action") and s["with"].get("save", True)
                   for s in steps)
