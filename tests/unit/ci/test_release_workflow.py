"""The release's order in .github/workflows/ci.yml: draft -> attest -> anira tests -> publish,
each job needing the ones before it, with the token scopes each needs and no more; and the
release command's two steps (backends/ci/release.py --step draft|publish) behind that order."""
from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

import gha
from backends.ci import downstream

ROOT = Path(__file__).resolve().parents[3]
ORDER = ("release", "attest", "anira", "publish")


def _jobs() -> dict[str, Any]:
    return yaml.safe_load((ROOT / ".github/workflows/ci.yml").read_text())["jobs"]


def _needs(job: dict[str, Any]) -> set[str]:
    needs = job.get("needs", [])
    return {needs} if isinstance(needs, str) else set(needs)


def _runs(job: dict[str, Any]) -> str:
    return "\n".join(step.get("run", "") for step in job.get("steps", []))


def test_each_release_job_needs_every_one_before_it() -> None:
    jobs = _jobs()
    for index, name in enumerate(ORDER[1:], start=1):
        assert set(ORDER[:index]) <= _needs(jobs[name]), name
    # Nothing publishes the release but the last job: neither the draft nor the gates.
    assert [n for n, job in jobs.items() if "--step publish" in _runs(job)] == ["publish"]
    assert "--step draft" in _runs(jobs["release"])
    assert not [n for n, job in jobs.items() if "backends.ci.release " in _runs(job) and "--step" not in _runs(job)]


def test_the_gates_run_only_when_the_job_before_succeeded() -> None:
    """A job without `if:` runs only when every job it needs succeeded: a failed draft (a
    missing leg), attestation or anira test leaves the release a draft."""
    jobs = _jobs()
    for name in ORDER[1:]:
        assert "if" not in jobs[name], name


def test_the_attest_job_attests_every_archive_with_only_its_scopes() -> None:
    jobs = _jobs()
    attest = jobs["attest"]
    assert attest["permissions"] == {"contents": "read", "actions": "read", "id-token": "write",
                                     "attestations": "write"}
    (step,) = [s for s in attest["steps"] if s.get("uses", "").startswith("actions/attest-build-provenance@")]
    # Over the digests SHA256SUMS lists: the job downloads that one file, not the archives.
    assert step["with"] == {"subject-checksums": "release/SHA256SUMS"}
    others = {n for n, job in jobs.items() if n != "attest"
              and {"id-token", "attestations"} & set(job.get("permissions") or {})}
    assert others == set()


def _attest(visibility: str, enterprise: str, tmp_path: Path) -> tuple[int, dict[str, str], str, list[bool]]:
    """The attest job on a repository of `visibility`, run as GitHub runs it: the check
    step's exit, outputs and summary, and whether each later step runs."""
    check = gha.step("ci.yml", "attest", "available")
    outputs, summary = tmp_path / "output", tmp_path / "summary"
    done = gha.run(check, {"VISIBILITY": visibility, "ENTERPRISE": enterprise, "GITHUB_OUTPUT": str(outputs),
                           "GITHUB_STEP_SUMMARY": str(summary)}, tmp_path, tmp_path / "step")
    written = dict(line.split("=", 1) for line in outputs.read_text().splitlines())
    context = {"steps": {"available": {"outputs": written}}}
    later = [gha.condition(step.body.get("if", "success()"), context) for step in gha.steps("ci.yml", "attest")[1:]]
    return done.returncode, written, summary.read_text() if summary.exists() else "", later


def test_attestations_are_skipped_with_a_summary_line_where_github_offers_none(tmp_path: Path) -> None:
    """A private repository (no GitHub Enterprise Cloud): the job stays green, says why in its
    summary, and neither downloads nor attests; publish still runs after it."""
    status, outputs, summary, later = _attest("private", "", tmp_path / "private")
    assert status == 0 and outputs == {"attest": "false"} and later == [False, False]
    assert summary.startswith("attestations skipped: this repository is private") and "public" in summary
    assert _attest("public", "", tmp_path / "public")[3] == [True, True]
    assert _attest("private", "true", tmp_path / "enterprise")[3] == [True, True]
    step = gha.step("ci.yml", "attest", "available")
    assert step.body["env"]["VISIBILITY"] == "${{ github.event.repository.visibility }}"


def test_the_anira_job_runs_anira_at_a_pinned_commit_against_the_drafts_archives() -> None:
    anira = _jobs()["anira"]
    assert anira["strategy"]["matrix"] == "${{ fromJSON(needs.release.outputs.anira) }}"
    assert anira["permissions"] == {"contents": "read", "actions": "read"}
    (checkout,) = [s for s in anira["steps"] if s.get("with", {}).get("repository")]
    assert checkout["with"]["persist-credentials"] is False
    runs = _runs(anira)
    assert "python -m backends.ci.downstream cmake-args" in runs
    assert "cmake -S anira" in runs and "ctest --test-dir anira-build" in runs
    assert "python -m backends.ci.downstream stage" in _runs(_jobs()["release"])


def _downloads(job: dict[str, Any]) -> list[str]:
    return [s["with"]["name"] for s in job["steps"] if s.get("uses", "").startswith("actions/download-artifact@")]


def test_each_later_job_downloads_only_what_it_reads() -> None:
    jobs = _jobs()
    uploads = {s["with"]["name"]: s["with"] for s in jobs["release"]["steps"]
               if s.get("uses", "").startswith("actions/upload-artifact@")}
    assert uploads["release-sums"]["path"] == "dist/SHA256SUMS"
    for pattern in ("dist/*.zip", "dist/*.zip.json", "dist/*.zip.spdx.json", "dist/SHA256SUMS", "ci-matrix.json"):
        assert pattern in uploads["release-draft"]["path"]
    # One artifact per gated platform, named as the gate matrix names them; an unused slot
    # makes none.
    slots = [name for name in uploads if name.startswith("anira-gate-")]
    assert slots == [downstream.GATE_ARTIFACT.format(n) for n in range(1, len(downstream.GATED_PLATFORMS) + 1)]
    for n, name in enumerate(slots, start=1):
        assert uploads[name]["path"] == f"gate/{n}/" and uploads[name]["if-no-files-found"] == "ignore"
    assert _downloads(jobs["attest"]) == ["release-sums"]
    assert _downloads(jobs["anira"]) == ["${{ matrix.artifact }}"]
    assert _downloads(jobs["publish"]) == ["release-draft"]
