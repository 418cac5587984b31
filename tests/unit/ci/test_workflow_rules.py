"""The workflows under GitHub's own rules (tests/gha.py): the shell each `run:` step really
gets, `${{ }}` expressions with GitHub's truthiness, and a pull request's checkout deep
enough for `git diff base...head`."""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

import gha

ROOT = Path(__file__).resolve().parents[3]
PIPEFAIL = gha.SHELLS["bash"]


def _workflows() -> dict[str, dict[Any, Any]]:
    return {path.name: gha.load(path.name) for path in sorted(gha.WORKFLOWS.glob("*.yml"))}


# -- shells -------------------------------------------------------------------------------------

def test_every_workflow_runs_its_steps_with_pipefail_bash() -> None:
    workflows = _workflows()
    for name, workflow in workflows.items():
        assert workflow.get("defaults") == {"run": {"shell": "bash"}}, name
    shells = {step.where(): step.shell for step in gha.all_steps(workflows) if "run" in step.body}
    assert shells and set(shells.values()) == {PIPEFAIL}, shells


@pytest.mark.parametrize(("yaml_text", "expected"), [
    ("jobs: {a: {runs-on: ubuntu-latest, steps: [{run: x}]}}", "bash -e {0}"),
    ("jobs: {a: {runs-on: windows-2025, steps: [{run: x}]}}", gha.SHELLS["pwsh"]),
    ("jobs: {a: {runs-on: ubuntu-latest, steps: [{run: x, shell: bash}]}}", PIPEFAIL),
    ("jobs: {a: {runs-on: ubuntu-latest, defaults: {run: {shell: sh}}, steps: [{run: x}]}}", "sh -e {0}"),
    ("defaults: {run: {shell: bash}}\njobs: {a: {runs-on: '${{ matrix.runner }}', steps: [{run: x}]}}", PIPEFAIL),
    ("jobs: {a: {runs-on: ubuntu-latest, steps: [{run: x, shell: 'bash -x {0}'}]}}", "bash -x {0}"),
    ("jobs: {a: {runs-on: '${{ matrix.runner }}', steps: [{run: x}]}}", None),
])
def test_the_shell_github_gives_a_step(yaml_text: str, expected: str | None) -> None:
    [step] = gha.steps("w.yml", "a", gha.load("w.yml", yaml_text))
    assert step.shell == expected


def test_an_unnamed_shell_hides_a_failure_before_a_pipe(tmp_path: Path) -> None:
    workflow = gha.load("w.yml", "jobs: {a: {runs-on: ubuntu-latest, steps: [{run: 'false | cat'}]}}")
    [unnamed] = gha.steps("w.yml", "a", workflow)
    assert gha.run(unnamed, {}, tmp_path, tmp_path / "a").returncode == 0
    workflow["defaults"] = {"run": {"shell": "bash"}}
    [named] = gha.steps("w.yml", "a", workflow)
    assert gha.run(named, {}, tmp_path, tmp_path / "b").returncode == 1


# -- expressions ---------------------------------------------------------------------------------

CONTEXT = {"github": {"event_name": "pull_request", "ref": "refs/tags/v1.2.0", "event": {"number": 7}},
           "inputs": {"flag": True, "empty": ""}, "secrets": {}, "steps": {"a": {"outputs": {"n": "0"}}}}


@pytest.mark.parametrize(("expression", "expected"), [
    ("github.event_name == 'pull_request' && 0 || 1", 1.0),  # 0 is falsy: the finding
    ("github.event_name == 'pull_request' && '0' || '1'", "0"),  # a non-empty string is truthy
    ("inputs.flag && '1' || '0'", "1"),
    ("inputs.empty || 'all'", "all"),
    ("inputs.missing || 'all'", "all"),
    ("secrets.PINS_TOKEN != '' && 'PINS_TOKEN' || ''", ""),
    ("github.event_name == 'PULL_REQUEST'", True),  # strings compare ignoring case
    ("steps.a.outputs.n == 0", True),  # other types compare as numbers
    ("null == 0 && '' == 0 && false == 0", True),
    ("startsWith(github.ref, 'refs/tags/v')", True),
    ("format('{0}-{1}', github.event_name, github.event.number)", "pull_request-7"),
    ("fromJSON('{\"include\": [1]}').include[0]", 1.0),
    ("!cancelled() && github.event['number'] > 6", True),
    ("github.no.such.property", None),
])
def test_expressions_follow_githubs_rules(expression: str, expected: object) -> None:
    assert gha.evaluate(gha.parse(expression), CONTEXT) == expected


def test_rendering_and_conditions() -> None:
    assert gha.render("${{ inputs.flag }}", CONTEXT) is True
    assert gha.render("x-${{ inputs.flag }}-${{ inputs.missing }}", CONTEXT) == "x-true-"
    assert gha.condition("inputs.flag", CONTEXT) and not gha.condition("inputs.empty", CONTEXT)
    failed = {**CONTEXT, "job": {"status": "failure"}}
    assert not gha.condition("inputs.flag", failed)  # success() && (...), as GitHub adds it
    assert gha.condition("always() && inputs.flag", failed) and gha.condition("${{ failure() }}", failed)
    with pytest.raises(gha.ExpressionError, match="fromJSON"):
        gha.render("${{ fromJSON('') }}", CONTEXT)  # what a job whose matrix output is empty dies on


def test_every_expression_reads_and_none_chooses_a_constant() -> None:
    """`a && <falsy> || b` is always b in GitHub's expressions (`&& 0 ||` gave every pull
    request a depth-1 checkout); the check finds it."""
    found = [(name, source) for name, workflow in _workflows().items() for source in gha.expressions(workflow)
             if list(gha.constant_choices(gha.parse(source)))]
    assert found == []
    for bad in ("x == 'y' && 0 || 1", "a && '' || b", "format('{0}', a && false || b)", "!(a && null || b)"):
        assert list(gha.constant_choices(gha.parse(bad))), bad
    assert not list(gha.constant_choices(gha.parse("a && '0' || '1'")))


# -- a pull request's checkout ---------------------------------------------------------------------

def _git(cwd: Path, *args: str) -> str:
    env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.invalid", "GIT_COMMITTER_NAME": "t",
           "GIT_COMMITTER_EMAIL": "t@example.invalid", "GIT_CONFIG_GLOBAL": os.devnull}
    return subprocess.run(["git", *args], cwd=cwd, env=env, check=True, capture_output=True, text=True).stdout.strip()


@pytest.fixture(scope="module")
def pull_request(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str, str]:
    """An origin with main and a pull request branch (main moved on after the fork)."""
    origin = tmp_path_factory.mktemp("origin")
    _git(origin, "init", "-q", "-b", "main")
    for data in ("variants", "engines", "smoke"):
        subprocess.run(["cp", "-r", str(ROOT / data), str(origin / data)], check=True)
    _git(origin, "add", "-A")
    _git(origin, "commit", "-q", "-m", "base")
    base = _git(origin, "rev-parse", "HEAD")
    _git(origin, "checkout", "-q", "-b", "pr")
    (origin / "smoke" / "libtorch" / "smoke.cpp").write_text("// changed\n")
    _git(origin, "commit", "-qam", "pr")
    head = _git(origin, "rev-parse", "HEAD")
    _git(origin, "checkout", "-q", "main")
    (origin / "README.md").write_text("main moves on\n")
    _git(origin, "add", "-A")
    _git(origin, "commit", "-q", "-m", "main")
    return origin, base, head


def _checkout(origin: Path, depth: int, dest: Path) -> None:
    """actions/checkout of a pull request: its head, with `fetch-depth` commits (0: all, with
    every branch)."""
    _git(dest.parent, "init", "-q", dest.name)
    refs = ["+refs/heads/*:refs/remotes/origin/*"] if depth == 0 else ["refs/heads/pr"]
    _git(dest, "fetch", "-q", *([f"--depth={depth}"] if depth else []), origin.as_uri(), *refs)
    _git(dest, "checkout", "-q", "origin/pr" if depth == 0 else "FETCH_HEAD")


def _changes_job(fetch_depth: object, pull_request: tuple[Path, str, str], tmp_path: Path
                 ) -> subprocess.CompletedProcess[str]:
    origin, base, head = pull_request
    context = {"github": {"event_name": "pull_request"}}
    depth = int(float(gha.text(gha.render(fetch_depth, context))))
    tmp_path.mkdir()
    checkout = tmp_path / "checkout"
    _checkout(origin, depth, checkout)
    decide = gha.step("ci.yml", "changes", "engines to build")
    env = {"EVENT": "pull_request", "BASE_SHA": base, "HEAD_SHA": head, "REQUESTED": "",
           "GITHUB_OUTPUT": str(tmp_path / "output"), "PYTHONPATH": str(ROOT / "site_scons")}
    return gha.run(decide, env, checkout, tmp_path / "step", path=[Path(sys.executable).parent])


def test_a_pull_request_gets_the_history_its_diff_needs(pull_request: tuple[Path, str, str], tmp_path: Path) -> None:
    [checkout] = [s for s in gha.steps("ci.yml", "changes") if str(s.body.get("uses", "")).startswith("actions/checkout")]
    done = _changes_job(checkout.body["with"]["fetch-depth"], pull_request, tmp_path / "now")
    assert done.returncode == 0, done.stdout + done.stderr
    assert (tmp_path / "now" / "output").read_text() == "engines=libtorch\n"
    # The expression the workflow had: GitHub gives a pull request depth 1, and the job exits 1.
    old = _changes_job("${{ github.event_name == 'pull_request' && 0 || 1 }}", pull_request, tmp_path / "old")
    assert old.returncode == 1 and "fetch-depth: 0" in old.stderr


# -- exit statuses that reach the step ---------------------------------------------------------------

# A command substitution inside another command's arguments (`echo "x=$(cmd)" >> "$GITHUB_OUTPUT"`,
# `export X=$(cmd)`, `local x=$(cmd)`): the outer command's status is the step's, so a failing
# `cmd` writes an empty output and the next job dies on something unrelated.
HIDDEN_EXIT = re.compile(r"^\s*(?:echo|printf|export|local|declare|readonly)\b[^#\n]*\$\(", re.MULTILINE)


def _hidden_exits(script: str) -> list[str]:
    return [match.group(0).strip() for match in HIDDEN_EXIT.finditer(script)]


def test_no_step_hides_a_commands_exit_status() -> None:
    found = {step.where(): _hidden_exits(step.run) for step in gha.all_steps() if _hidden_exits(step.run)}
    assert found == {}
    for bad in ('echo "anira=$(python -m x)" >> "$GITHUB_OUTPUT"', "export X=$(false)", "  printf '%s' \"$(x)\""):
        assert _hidden_exits(bad), bad
    assert not _hidden_exits('x=$(python -m x)\necho "x=$x" >> "$GITHUB_OUTPUT"  # not "$(...)"')


def _gate_step(script: str | None, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    """The release job's gate step with a `python` whose module fails, as GitHub runs it."""
    step = gha.step("ci.yml", "release", "gate")
    if script is not None:
        step = gha.Step(step.workflow_name, step.job_name, {**step.body, "run": script}, step.shell)
    fake = tmp_path / "bin"
    fake.mkdir(parents=True, exist_ok=True)
    (fake / "python").write_text("#!/bin/sh\necho 'error: no shared CPU archive' >&2\nexit 2\n")
    (fake / "python").chmod(0o755)
    return gha.run(step, {"GITHUB_OUTPUT": str(tmp_path / "output")}, tmp_path, tmp_path / "step", path=[fake])


def test_a_failing_gate_command_fails_its_step(tmp_path: Path) -> None:
    done = _gate_step(None, tmp_path / "now")
    assert done.returncode == 2 and "no shared CPU archive" in done.stderr
    old = 'echo "anira=$(python -m backends.ci.downstream matrix --matrix ci-matrix.json --dist dist)" >> "$GITHUB_OUTPUT"'
    assert _gate_step(old, tmp_path / "old").returncode == 0  # the finding: green, with `anira=` empty


# -- artifacts, checkouts, schedules ------------------------------------------------------------------

def _job_grants(workflow: dict[Any, Any], job: dict[Any, Any]) -> dict[str, str]:
    permissions = job.get("permissions", workflow.get("permissions")) or {}
    return {str(scope): str(level) for scope, level in permissions.items()}


def test_artifacts_are_downloaded_by_run_id_and_token() -> None:
    """download-artifact without run-id and github-token may miss an earlier attempt's
    artifacts on "Re-run failed jobs"; with them it reads the run's artifacts through the API,
    which needs actions: read."""
    workflows = _workflows()
    downloads = [step for step in gha.all_steps(workflows)
                 if str(step.body.get("uses", "")).startswith("actions/download-artifact@")]
    assert downloads
    for step in downloads:
        assert step.body["with"].get("run-id") == "${{ github.run_id }}", step.where()
        assert step.body["with"].get("github-token") == "${{ github.token }}", step.where()
        workflow = workflows[step.workflow_name]
        assert _job_grants(workflow, workflow["jobs"][step.job_name]).get("actions") in ("read", "write"), step.where()


def test_a_tags_artifacts_outlive_a_month() -> None:
    """A release re-run weeks after the tag still finds every archive the release needs."""
    tag = {"inputs": {"release": True}, "github": {"ref": "refs/tags/v1.0.0"}}
    push = {"inputs": {"release": False}, "github": {"ref": "refs/heads/main"}}
    archives = [step for step in gha.all_steps() if str(step.body.get("uses", "")).startswith("actions/upload-artifact@")
                and not str(step.body["with"]["name"]).startswith("logs-")]
    assert archives
    for step in archives:
        days = float(gha.text(gha.render(step.body["with"]["retention-days"], tag)))
        assert days >= 30, step.where()
    leg = next(step for step in archives if step.workflow_name == "_legs.yml")
    assert float(gha.text(gha.render(leg.body["with"]["retention-days"], push))) == 14  # a push's are not kept


def test_no_checkout_leaves_its_token_behind_but_the_one_that_pushes() -> None:
    """actions/checkout writes the token into .git/config unless persist-credentials is
    false, where the upstream build code (and anira's tests) that run after it can read it."""
    checkouts = [step for step in gha.all_steps() if str(step.body.get("uses", "")).startswith("actions/checkout@")]
    kept = [step.where() for step in checkouts if (step.body.get("with") or {}).get("persist-credentials") is not False]
    pushes = gha.steps("pins.yml", "lock")[0]  # pin_refresh.py pushes the pins branch with its token
    assert str(pushes.body["uses"]).startswith("actions/checkout@") and kept == [pushes.where()]


def test_the_pins_workflow_runs_weekly_on_every_engine() -> None:
    workflow = gha.load("pins.yml")
    [schedule] = gha.triggers(workflow)["schedule"]
    minute, hour, day, month, weekday = schedule["cron"].split()
    assert (day, month) == ("*", "*") and weekday.isdigit()  # once a week
    scheduled = {"inputs": {}, "github": {"event_name": "schedule"}}
    for name in ("scons lock", "pull request"):
        assert gha.render(gha.step("pins.yml", "lock", name).body["env"]["ENGINE"], scheduled) == "all"


# -- actions ---------------------------------------------------------------------------------------

USES = re.compile(r"^\s*(?:- )?uses: (?P<action>\S+?)@(?P<ref>\S+)(?P<comment>.*)$", re.MULTILINE)
PINNED = re.compile(r"[0-9a-f]{40}")
VERSION_COMMENT = re.compile(r"\s+# (v\d+(?:\.\d+){0,2})\s*")
DOCS = ROOT / "docs" / "ci-and-release.md"


def _uses(text: str) -> list[tuple[str, str, str]]:
    """(action, ref, version comment) of every `uses:` but the local workflow calls."""
    found = []
    for match in USES.finditer(text):
        if match.group("action").startswith("./"):
            continue
        version = VERSION_COMMENT.fullmatch(match.group("comment"))
        found.append((match.group("action"), match.group("ref"), version.group(1) if version else ""))
    return found


def _pin_problems(text: str, table: dict[str, tuple[str, str]]) -> list[str]:
    problems = []
    for action, ref, version in _uses(text):
        if not PINNED.fullmatch(ref) or not version:
            problems.append(f"{action}@{ref}: pin a full commit with `# vX.Y.Z` after it")
        elif table.get(action.split("/restore")[0].split("/save")[0]) != (version, ref):
            problems.append(f"{action}@{ref} # {version}: not what docs/ci-and-release.md lists")
    return problems


def _docs_table() -> dict[str, tuple[str, str]]:
    rows = re.findall(r"^\| `([\w./-]+)`[^|]*\| (v[\d.]+) \| `([0-9a-f]{40})` \|$", DOCS.read_text(), re.MULTILINE)
    return {action: (version, commit) for action, version, commit in rows}


def test_every_action_is_pinned_by_commit_as_the_docs_list() -> None:
    table = _docs_table()
    used = set()
    for path in sorted(gha.WORKFLOWS.glob("*.yml")):
        text = path.read_text()
        assert _pin_problems(text, table) == [], path.name
        used |= {action.split("/restore")[0].split("/save")[0] for action, _, _ in _uses(text)}
    assert used == set(table)  # no row for an action nothing uses
    for bad in ("      - uses: actions/checkout@v4\n", "      - uses: actions/checkout@" + "a" * 40 + "\n",
                "      - uses: actions/checkout@" + "a" * 40 + "  # v7.0.1\n"):
        assert _pin_problems(bad, table), bad


def test_the_import_script_keeps_the_certificate_in_its_own_keychain(tmp_path: Path) -> None:
    """tools/import-developer-id.sh with `security`, `openssl` and `base64` faked (no macOS here):
    the order of the commands, the .p12 removed afterwards, no secret printed."""
    fake, log = tmp_path / "bin", tmp_path / "calls"
    fake.mkdir()
    for name, body in (("security", 'if [ "$1 $2" = "list-keychains -d" ] && [ $# -eq 3 ]; then '
                                    'echo \'    "/Users/runner/Library/Keychains/login.keychain-db"\'; fi'),
                       ("openssl", "echo k3ychainpass"), ("base64", "cat")):
        (fake / name).write_text(f'#!/bin/sh\necho "{name} $*" >> "{log}"\n{body}\n')
        (fake / name).chmod(0o755)
    step = gha.step("_legs.yml", "build", "import the Developer ID certificate")
    assert step.run.strip() == "bash tools/import-developer-id.sh"
    env = {"DEV_ID_APP_CERT": "cert-bytes", "DEV_ID_APP_PWD": "p12-secret", "RUNNER_TEMP": str(tmp_path)}
    done = gha.run(step, env, ROOT, tmp_path / "step", path=[fake])
    assert done.returncode == 0, done.stderr
    calls = [line.split()[:2] for line in log.read_text().splitlines() if line.startswith("security")]
    assert [c[1] for c in calls] == ["create-keychain", "set-keychain-settings", "unlock-keychain", "import",
                                     "set-key-partition-list", "list-keychains", "list-keychains"]
    search = log.read_text().splitlines()[-1].split()
    assert search[-2:] == [str(tmp_path / "anira-signing.keychain-db"),
                           "/Users/runner/Library/Keychains/login.keychain-db"]
    assert not (tmp_path / "anira-signing.p12").exists()
    assert "p12-secret" not in done.stdout + done.stderr and "k3ychainpass" not in done.stdout + done.stderr
    shellcheck = shutil.which("shellcheck")
    if shellcheck:
        assert subprocess.run([shellcheck, str(ROOT / "tools" / "import-developer-id.sh")]).returncode == 0
