"""CI and pins: the plan job runs the legs whose inputs are all pinned and lists the others
once (job summary and one warning), staying green; a tag's release fails there, before any
build, and its release job makes no API call. The plan job's own `run:` script is run here with
the shell GitHub gives it (tests/gha.py), on a copy of this tree (where only some ExecuTorch legs are pinned).
The pin-refresh workflow runs `scons lock` on one Linux runner, keeps what it recorded when
some inputs fail, and opens the pull request. (tests/unit/ci/test_ci.py lints every workflow.)"""
from __future__ import annotations

import json
import stat
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from backends.ci import main as ci
import gha
from fake_github import REPO, TOKEN, serve
from scratch import project_copy

ROOT = Path(__file__).resolve().parents[3]
WORKFLOWS = ROOT / ".github" / "workflows"
yaml = pytest.importorskip("yaml", reason="PyYAML reads the workflow structure")
TREE = ("SConstruct", "requirements.txt", "site_scons", "variants", "engines", "smoke")
RELEASE_EVENT = "${{ github.event_name == 'push' && startsWith(github.ref, 'refs/tags/v') }}"


def _workflow(name: str) -> dict[Any, Any]:
    return yaml.safe_load((WORKFLOWS / name).read_text())


def _step(steps: list[dict[str, Any]], starts: str) -> tuple[int, dict[str, Any]]:
    return next((index, step) for index, step in enumerate(steps) if step.get("name", "").startswith(starts))


def _plan_step() -> gha.Step:
    return gha.step("_legs.yml", "plan", "scons ci-matrix")


@pytest.fixture(scope="module")
def tree(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A checkout of this project as the plan job has it: its data and code, the pins as they are."""
    return project_copy(tmp_path_factory.mktemp("checkout"), TREE)


@pytest.fixture(scope="module")
def selection(tree: Path) -> list[dict[str, Any]]:
    done = subprocess.run([sys.executable, "-m", "SCons", "-Q", "ci-matrix"], cwd=tree, capture_output=True,
                          text=True, check=True)
    return ci.matrix_entries(json.loads(done.stdout))


def _run_step(step: gha.Step, env: dict[str, str], cwd: Path, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    """`run:` as a GitHub runner runs it (the step's shell, derived from the workflow) in `cwd`,
    with `scons` and this `python` on PATH and the workflow's PYTHONPATH."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    shim = bin_dir / "scons"
    shim.write_text(f'#!/bin/sh\nexec "{sys.executable}" -m SCons "$@"\n')
    shim.chmod(shim.stat().st_mode | stat.S_IXUSR)
    return gha.run(step, {"PYTHONPATH": "site_scons", **env}, cwd, tmp_path, path=[bin_dir, Path(sys.executable).parent])


def _plan(tree: Path, tmp_path: Path, release: str, engines: str = "all", filters: str = ""
          ) -> tuple[subprocess.CompletedProcess[str], dict[str, str], str]:
    """The plan job's step: its exit, the job outputs it wrote, its job summary."""
    outputs, summary = tmp_path / "github_output", tmp_path / "summary.md"
    done = _run_step(_plan_step(), {"ENGINES": engines, "FILTERS": filters, "RELEASE": release,
                                           "GITHUB_OUTPUT": str(outputs), "GITHUB_STEP_SUMMARY": str(summary)},
                     tree, tmp_path)
    written = outputs.read_text() if outputs.exists() else ""
    page = summary.read_text() if summary.exists() else ""
    return done, dict(line.split("=", 1) for line in written.splitlines()), page


def _commands(stdout: str) -> list[str]:
    return [line for line in stdout.splitlines() if line.startswith("::")]


def test_the_plan_step_reads_the_release_input_that_ci_sets_for_tags_only() -> None:
    step = _plan_step().body
    assert step["env"] == {"ENGINES": "${{ inputs.engines }}", "FILTERS": "${{ inputs.filters }}",
                           "RELEASE": "${{ inputs.release }}", "GITHUB_TOKEN": "${{ github.token }}"}
    assert 'python -m backends.ci plan-outputs --matrix ci-matrix.json --release "$RELEASE"' in step["run"]
    legs = _workflow("_legs.yml")
    assert legs[True]["workflow_call"]["inputs"]["release"] == {  # YAML 1.1 reads `on` as true
        "description": legs[True]["workflow_call"]["inputs"]["release"]["description"], "type": "boolean",
        "default": False}
    assert not any("scons -Q pins" in step.get("run", "") for step in legs["jobs"]["plan"]["steps"])
    jobs = _workflow("ci.yml")["jobs"]
    callers = {name: job for name, job in jobs.items() if job.get("uses") == "./.github/workflows/_legs.yml"}
    assert callers and all(job["with"]["release"] == RELEASE_EVENT for job in callers.values())
    # The release job runs only for a pushed tag, and only when the plan job gave it a matrix.
    condition = jobs["release"]["if"]
    assert "github.event_name == 'push' && startsWith(github.ref, 'refs/tags/v')" in condition
    assert "needs.legs.outputs.matrix != ''" in condition


def test_unpinned_legs_are_listed_once_and_the_pinned_ones_run(tree: Path, selection: list[dict[str, Any]],
                                                               tmp_path: Path) -> None:
    """A pull request or a push: green, with every leg whose inputs are pinned."""
    done, outputs, summary = _plan(tree, tmp_path, release="false")
    assert done.returncode == 0, done.stdout + done.stderr
    # Pinned, by the leg key's own account (a leg with an unpinned input, or input leg, has none).
    pinned = {entry["id"] for entry in selection if entry["key"]}
    assert pinned and {entry["engine"] for entry in selection if entry["key"]} == {"executorch"}
    ran = [entry["id"] for kind in ("legs", "aggregates") for entry in json.loads(outputs[kind])["include"]]
    assert set(ran) == pinned and len(ran) == len(pinned)
    assert {entry["id"] for entry in json.loads(outputs["matrix"])["include"]} == pinned
    assert outputs["has_legs"] == outputs["has_aggregates"] == "true"
    [warning] = _commands(done.stdout)
    assert warning.startswith("::warning title=legs not run%3A unpinned inputs::")
    not_run = [entry["id"] for entry in selection if entry["id"] not in pinned]
    assert f"{len(not_run)} of {len(selection)} selected legs not run" in warning
    assert "the pins workflow" in warning and "scons lock engine=" in warning
    listed = [line for line in summary.splitlines() if line.startswith("| `")]
    assert sorted(line.split("`")[1] for line in listed) == sorted(not_run)  # each once
    universal = next(line for line in listed if "`executorch-macos-universal-static`" in line)
    assert "its input leg executorch-macos-x86_64-static" in universal  # an aggregate waits for its inputs


def test_a_release_with_unpinned_inputs_fails_before_any_build(tree: Path, tmp_path: Path) -> None:
    """A tag: red in the plan job, no job outputs (so no leg job runs), and the release job,
    were it to run, fails on the empty matrix without one API call (no draft is made)."""
    done, outputs, summary = _plan(tree, tmp_path, release="true")
    assert done.returncode != 0
    assert outputs == {}
    [error] = _commands(done.stdout)
    assert error.startswith("::error title=unpinned inputs::a release builds pinned inputs only")
    assert "selected legs not run: unpinned inputs" in summary
    release = gha.step("ci.yml", "release", "draft and upload")
    (tmp_path / "dist").mkdir()
    with serve() as github:
        step = _run_step(release, {"MATRIX": outputs.get("matrix", ""), "GITHUB_TOKEN": TOKEN,
                                          "PYTHONPATH": str(ROOT / "site_scons"),
                                          "GITHUB_REPOSITORY": REPO, "GITHUB_REF_NAME": "v1.0.0",
                                          "GITHUB_API_URL": github.base,
                                          # anything but the fake API is unreachable
                                          "HTTPS_PROXY": "http://127.0.0.1:9", "NO_PROXY": "127.0.0.1"},
                         tmp_path, tmp_path)
        assert step.returncode != 0 and "the plan job produced no matrix" in step.stdout + step.stderr
        assert github.calls == [] and github.releases == []


def test_a_release_whose_legs_are_all_pinned_passes_the_plan(tree: Path, tmp_path: Path) -> None:
    done, outputs, summary = _plan(tree, tmp_path, release="true", engines="executorch",
                                   filters="platform=android,android-arm64-v8a,android-x86_64")
    assert done.returncode == 0, done.stdout + done.stderr
    assert _commands(done.stdout) == [] and "not run" not in summary
    assert json.loads(outputs["aggregates"])["include"][0]["id"] == "executorch-android-static"
    assert outputs["count"] == "3"


def test_annotations_are_escaped_as_the_runner_reads_them() -> None:
    line = ci.annotation("warning", "a: b, c", "100% done\nnext line\r")
    assert line == "::warning title=a%3A b%2C c::100%25 done%0Anext line%0D"


def test_the_pins_workflow_locks_on_one_linux_runner_and_opens_a_pull_request() -> None:
    workflow = _workflow("pins.yml")
    trigger = workflow[True]["workflow_dispatch"]["inputs"]  # YAML 1.1 reads `on` as true
    assert set(trigger) == {"engine", "version"}
    assert workflow["permissions"] == {"contents": "read"}  # the job that writes says so itself
    [job] = workflow["jobs"].values()
    assert job["permissions"] == {"contents": "write", "pull-requests": "write"}
    assert job["runs-on"] == "ubuntu-latest" and "strategy" not in job
    steps = job["steps"]
    lock_at, lock = _step(steps, "scons lock")
    pull_at, pull = _step(steps, "pull request")
    last_at, last = _step(steps, "every input pinned")
    assert lock_at < pull_at < last_at == len(steps) - 1
    assert 'scons -Q lock "${args[@]}"' in lock["run"] and 'args+=("version=$VERSION")' in lock["run"]
    # A lock that could not pin everything still leads to the pull request; the job ends red.
    assert lock["id"] == "lock" and lock["continue-on-error"] is True and "if" not in pull
    assert last["if"] == "steps.lock.outcome == 'failure'" and "exit 1" in last["run"]
    assert pull["run"].startswith("python -m backends.ci.pin_refresh --repo \"$GITHUB_REPOSITORY\"")
    assert '--engine "$ENGINE"' in pull["run"] and '--token-secret "$TOKEN_SECRET"' in pull["run"]


FAILING_LOCK = (  # `scons lock` that pinned some inputs and failed on one
    "#!/bin/sh\n"
    "echo \"args: $*\"\n"
    "echo 'lock: onnxruntime x.tgz <- https://example.invalid/x.tgz' >&2\n"
    "printf 'scons: *** 1 input not pinned:\\n  onnxruntime x.tgz: HTTP 404\\nrecorded 3 new pins\\n' >&2\n"
    "exit 2\n")


def _run_lock(lock: gha.Step, tmp_path: Path) -> tuple[subprocess.CompletedProcess[str], str]:
    fake = tmp_path / "fake"
    fake.mkdir(exist_ok=True)
    (fake / "scons").write_text(FAILING_LOCK)
    (fake / "scons").chmod(0o755)
    summary = tmp_path / "summary.md"
    summary.unlink(missing_ok=True)
    env = {"ENGINE": "onnxruntime", "VERSION": "1.27.0", "GITHUB_STEP_SUMMARY": str(summary)}
    done = gha.run(lock, env, tmp_path, tmp_path, path=[fake])
    return done, summary.read_text() if summary.exists() else ""


def test_the_lock_step_keeps_its_exit_and_puts_the_failures_in_the_job_summary(tmp_path: Path) -> None:
    """`scons lock` that could pin only some inputs: the step exits as it did (run with the
    shell GitHub derives from pins.yml), and the job summary holds what it said from its error
    on (the failures and what was recorded)."""
    done, page = _run_lock(gha.step("pins.yml", "lock", "scons lock"), tmp_path)
    assert done.returncode == 2
    assert "args: -Q lock engine=onnxruntime version=1.27.0" in done.stdout and "HTTP 404" in done.stdout
    assert "scons: *** 1 input not pinned:" in page and "onnxruntime x.tgz: HTTP 404" in page
    assert "recorded 3 new pins" in page and "lock: onnxruntime" not in page


def test_without_the_workflows_default_shell_the_failed_lock_goes_green(tmp_path: Path) -> None:
    """The finding: a step without `shell:` runs as `bash -e {0}`, without pipefail, so
    `scons lock | tee` returns tee's 0. pins.yml's `defaults.run.shell: bash` is what fails it."""
    workflow = _workflow("pins.yml")
    assert workflow["defaults"] == {"run": {"shell": "bash"}}
    del workflow["defaults"]
    lock = gha.step("pins.yml", "lock", "scons lock", workflow)
    assert lock.shell == "bash -e {0}"
    done, page = _run_lock(lock, tmp_path)
    assert done.returncode == 0 and "HTTP 404" in done.stdout and page == ""
