"""`scons plan=1` shows the whole environment a leg's commands get: the plan's own variables,
what the runner adds to every command, and what CI adds (the compiler cache launcher)."""
from __future__ import annotations

import os
from pathlib import Path

import pytest

from backends.commands.report import render_plan
from backends.model import runner_needs
from backends.model.matrix import load_matrix
from backends.model.plan import Plan
from backends.model.recipes import plan_all
from backends.steps.context import LegDirs
from backends.steps.upstream import SITE_SCONS, command_env, environment_signature

ROOT = Path(__file__).resolve().parents[3]
MATRIX = load_matrix(ROOT)
RUNNING = [plan for plan in plan_all(MATRIX) if plan.build or plan.fixups]
# A CI job's environment as the runner sees it: the step graph's settings, the toolchain's
# variables the CI setup exports, and variables that must never pass (the binary cache's
# signing key is an ANIRA_* variable, but no setting: upstream's scripts never see it).
SIGNING_KEY = "ed25519-secret:" + "S3cr3tS33d" * 4 + "AAA="
CI_ENVIRON = {"PATH": "/usr/bin", "HOME": "/home/runner", "ANIRA_CACHE": "/c", "ANIRA_MIRRORS": "", "ANIRA_OFFLINE": "0",
              "ANIRA_LOCK": "0", "ANDROID_NDK_HOME": "/ndk", "GITHUB_TOKEN": "secret",
              "ANIRA_BINARY_CACHE_KEY": SIGNING_KEY}


def ci_environ(plan: Plan) -> dict[str, str]:
    launcher = runner_needs.compiler_launcher(plan)
    return {**CI_ENVIRON, **({name: launcher for name in runner_needs.LAUNCHER_VARIABLES} if launcher else {})}


@pytest.mark.parametrize("plan", RUNNING, ids=lambda plan: plan.leg.id)
def test_plan_prints_every_variable_the_runner_adds(plan: Plan, tmp_path: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    environ = ci_environ(plan)
    for key in list(os.environ):
        monkeypatch.delenv(key)
    for key, value in environ.items():
        monkeypatch.setenv(key, value)
    named = {download.name: tmp_path / download.name for download in plan.downloads}
    dirs = LegDirs(src=tmp_path / "src", build=tmp_path / "build", install=tmp_path / "install",
                   stage=tmp_path / "stage", logs=tmp_path / "logs", sources=named, extracts=named, downloads=named)
    text = render_plan(plan)
    for command in (*plan.build, *plan.fixups):
        own = {**plan.env, **command.env}
        child = command_env(command, plan.env, dirs, environ)
        assert "GITHUB_TOKEN" not in child and "ANIRA_BINARY_CACHE_KEY" not in child
        assert child["ANIRA_CACHE"] == "/c"
        for key, value in child.items():
            if key in own and key != "PYTHONPATH":
                continue  # printed with the plan or the command
            named = key in text or (key.startswith("ANIRA_") and "ANIRA_*" in text)
            assert named, f"{plan.leg.id} [{command.label}]: the runner adds {key}, plan=1 does not say so"
            if key in runner_needs.LAUNCHER_VARIABLES:
                assert f"{key}={value}" in text
        assert str(SITE_SCONS) in text and "CMAKE_POLICY_VERSION_MINIMUM=3.5" in text
    launched = "CMAKE_C_COMPILER_LAUNCHER=" in text
    assert launched == bool(runner_needs.compiler_launcher(plan)), plan.leg.id
    for probe in runner_needs.probes(plan):  # what CI's setup installs before the build
        assert f"python -m backends.probes.{probe} --install" in text


@pytest.mark.parametrize("plan", RUNNING[:3], ids=lambda plan: plan.leg.id)
def test_the_signing_key_is_no_input_of_a_build(plan: Plan) -> None:
    """Its value would otherwise sit in the build step's record and print in a "reruns:" line, and
    rotating it would rebuild every leg."""
    signature = environment_signature(plan, CI_ENVIRON)
    assert signature["ANIRA_CACHE"] == "/c" and "ANIRA_BINARY_CACHE_KEY" not in signature
    assert environment_signature(plan, {**CI_ENVIRON, "ANIRA_BINARY_CACHE_KEY": "another"}) == signature


def test_launcher_variables_are_what_the_build_job_exports() -> None:
    legs = (ROOT / ".github/workflows/_legs.yml").read_text()
    for name in runner_needs.LAUNCHER_VARIABLES:
        assert f'echo "{name}=$LAUNCHER" >> "$GITHUB_ENV"' in legs
