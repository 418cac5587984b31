"""The release's order in .github/workflows/ci.yml: draft -> attest -> anira tests -> publish,
each job needing the ones before it, with the token scopes each needs and no more; and the
release command's two steps (backends/release.py --step draft|publish) behind that order."""
from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[2]
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
    assert not [n for n, job in jobs.items() if "backends.release " in _runs(job) and "--step" not in _runs(job)]


def test_the_gates_run_only_when_the_job_before_succeeded() -> None:
    """A job without `if:` runs only when every job it needs succeeded: a failed draft (a
    missing leg), attestation or anira test leaves the release a draft."""
    jobs = _jobs()
    for name in ORDER[1:]:
        assert "if" not in jobs[name], name


def test_the_attest_job_attests_every_archive_with_only_its_scopes() -> None:
    jobs = _jobs()
    attest = jobs["attest"]
    assert attest["permissions"] == {"contents": "read", "id-token": "write", "attestations": "write"}
    (step,) = [s for s in attest["steps"] if s.get("uses", "").startswith("actions/attest-build-provenance@")]
    assert step["uses"] == "actions/attest-build-provenance@v2"
    assert step["with"]["subject-path"] == "release/dist/*.zip"
    assert "sha256sum -c SHA256SUMS" in _runs(attest)
    others = {n for n, job in jobs.items() if n != "attest"
              and {"id-token", "attestations"} & set(job.get("permissions") or {})}
    assert others == set()


def test_the_anira_job_runs_anira_at_a_pinned_commit_against_the_drafts_archives() -> None:
    anira = _jobs()["anira"]
    assert re.fullmatch(r"[0-9a-f]{40}", anira["env"]["ANIRA_COMMIT"])
    assert anira["env"]["ANIRA_REPOSITORY"] == "anira-project/anira"
    assert anira["strategy"]["matrix"] == "${{ fromJSON(needs.release.outputs.anira) }}"
    assert anira["permissions"] == {"contents": "read"}
    (checkout,) = [s for s in anira["steps"] if s.get("with", {}).get("repository")]
    assert checkout["with"]["ref"] == "${{ env.ANIRA_COMMIT }}" and checkout["with"]["persist-credentials"] is False
    runs = _runs(anira)
    assert "python -m backends.downstream cmake-args" in runs
    assert "cmake -S anira" in runs and "ctest --test-dir anira-build" in runs
    assert "python -m backends.downstream matrix" in _runs(_jobs()["release"])


def test_the_later_jobs_take_the_drafts_own_files() -> None:
    jobs = _jobs()
    (upload,) = [s for s in jobs["release"]["steps"] if s.get("uses", "").startswith("actions/upload-artifact@")]
    assert upload["with"]["name"] == "release-draft"
    for pattern in ("dist/*.zip", "dist/*.zip.json", "dist/*.zip.spdx.json", "dist/SHA256SUMS", "ci-matrix.json"):
        assert pattern in upload["with"]["path"]
    for name in ORDER[1:]:
        downloads = [s for s in jobs[name]["steps"] if s.get("uses", "").startswith("actions/download-artifact@")]
        assert [s["with"]["name"] for s in downloads] == ["release-draft"], name
