"""CI and pins: the plan job gates on `scons pins` before anything else runs, its step fails
the way the runner would (run here with bash, as GitHub runs `run:` scripts), and the
pin-refresh workflow runs `scons lock` on one Linux runner and opens the pull request.
(tests/unit/test_ci.py lints every workflow, this one included.)"""
from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
WORKFLOWS = ROOT / ".github" / "workflows"
yaml = pytest.importorskip("yaml", reason="PyYAML reads the workflow structure")


def _workflow(name: str) -> dict[Any, Any]:
    return yaml.safe_load((WORKFLOWS / name).read_text())


def _step(steps: list[dict[str, Any]], starts: str) -> tuple[int, dict[str, Any]]:
    return next((index, step) for index, step in enumerate(steps) if step.get("name", "").startswith(starts))


def _plan_steps() -> list[dict[str, Any]]:
    return _workflow("_legs.yml")["jobs"]["plan"]["steps"]


def test_the_plan_job_checks_pins_before_the_matrix() -> None:
    steps = _plan_steps()
    pins_at, pins = _step(steps, "scons pins")
    matrix_at, _ = _step(steps, "scons ci-matrix")
    assert pins_at < matrix_at
    assert 'scons -Q pins "engine=$ENGINES" $FILTERS' in pins["run"]
    assert pins["env"] == {"ENGINES": "${{ inputs.engines }}", "FILTERS": "${{ inputs.filters }}"}


def _run_step(script: str, env: dict[str, str], tmp_path: Path) -> subprocess.CompletedProcess[str]:
    """`run:` as a GitHub runner runs it (bash -e -o pipefail), with `scons` on PATH."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    shim = bin_dir / "scons"
    shim.write_text(f'#!/bin/sh\nexec "{sys.executable}" -m SCons -C "{ROOT}" "$@"\n')  # files the step writes stay here
    shim.chmod(shim.stat().st_mode | stat.S_IXUSR)
    script_file = tmp_path / "step.sh"
    script_file.write_text(script)
    environ = {**os.environ, **env, "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}"}
    return subprocess.run(["bash", "--noprofile", "--norc", "-eo", "pipefail", str(script_file)], cwd=tmp_path,
                          env=environ, capture_output=True, text=True)


def test_an_unpinned_selection_fails_the_plan_job_with_one_annotation(tmp_path: Path) -> None:
    _, pins = _step(_plan_steps(), "scons pins")
    # cpuinfo tracks main: unpinned until `scons lock` records a commit.
    done = _run_step(pins["run"], {"ENGINES": "litert", "FILTERS": "platform=windows-arm64 kind=shared"}, tmp_path)
    assert done.returncode == 1
    [annotation] = [line for line in done.stdout.splitlines() if line.startswith("::error")]
    assert annotation.startswith("::error title=unpinned inputs::")
    assert "litert cpuinfo @ main" in annotation
    assert "the pins workflow" in annotation and "scons lock engine=litert" in annotation


def test_a_selection_without_inputs_passes_the_gate(tmp_path: Path) -> None:
    _, pins = _step(_plan_steps(), "scons pins")
    done = _run_step(pins["run"], {"ENGINES": "onnxruntime", "FILTERS": "platform=macos-universal"}, tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr  # aggregates fetch nothing


def test_the_pins_workflow_locks_on_one_linux_runner_and_opens_a_pull_request() -> None:
    workflow = _workflow("pins.yml")
    trigger = workflow[True]["workflow_dispatch"]["inputs"]  # YAML 1.1 reads `on` as true
    assert set(trigger) == {"engine", "version"}
    assert workflow["permissions"] == {"contents": "write", "pull-requests": "write"}
    [job] = workflow["jobs"].values()
    assert job["runs-on"] == "ubuntu-latest" and "strategy" not in job
    steps = job["steps"]
    lock_at, lock = _step(steps, "scons lock")
    pins_at, _ = _step(steps, "scons pins")
    pull_at, pull = _step(steps, "pull request")
    assert lock_at < pins_at < pull_at
    assert 'scons -Q lock "${args[@]}"' in lock["run"] and 'args+=("version=$VERSION")' in lock["run"]
    assert pull["run"].startswith("python -m backends.pin_refresh --repo \"$GITHUB_REPOSITORY\"")
