"""Re-runs and restores as the workflows do them: every artifact upload overwrites (a re-run
of a leg, or of the aggregates after a failed leg, would otherwise meet 409), and the leg
jobs restore only entries signed by a trusted key: no workflow overrides the trust, so a
tagged run's restores use keys/binary-cache.pub and refuse unsigned entries."""
from __future__ import annotations

import shlex
from pathlib import Path
from typing import Any, Iterator

import pytest

from backends.cache.trust import load_trust
from backends.commands.invocation import resolve
from backends.model.matrix import load_matrix
from backends.probes.host import detect_host

yaml = pytest.importorskip("yaml", reason="PyYAML reads the workflow structure")

ROOT = Path(__file__).resolve().parents[3]
WORKFLOWS = sorted((ROOT / ".github" / "workflows").glob("*.yml"))


def _steps() -> Iterator[tuple[str, str, dict[str, Any]]]:
    for path in WORKFLOWS:
        for job_name, job in yaml.safe_load(path.read_text())["jobs"].items():
            for step in job.get("steps", []):
                yield path.name, job_name, step


def _scons_commands() -> list[tuple[str, str, str]]:
    """(workflow, job, command line) of every `scons` run by a step."""
    return [(workflow, job, line.strip()) for workflow, job, step in _steps()
            for line in str(step.get("run", "")).splitlines() if line.strip().startswith("scons ")]


def test_every_artifact_upload_overwrites() -> None:
    uploads = [(workflow, job, step) for workflow, job, step in _steps()
               if str(step.get("uses", "")).startswith("actions/upload-artifact@")]
    assert len(uploads) >= 3  # the legs' archives, their logs, the aggregates' archives
    for workflow, job, step in uploads:
        assert step["with"].get("overwrite") is True, f"{workflow} {job}: {step.get('name')}"


def test_no_workflow_overrides_the_binary_cache_trust() -> None:
    for path in WORKFLOWS:
        text = path.read_text()
        assert "binary_cache_trust" not in text and "unsigned" not in text, path.name
    assert any("binary_cache=" in command for _, _, command in _scons_commands())


@pytest.mark.parametrize("job", ["build", "aggregate"])
def test_a_tagged_runs_legs_restore_only_signed_entries(job: str, tmp_path: Path) -> None:
    """The leg job's own scons command, as CI expands it on a tag (the cache written), gives
    the project's trust: keys, never `unsigned`; an entry without a signature is refused."""
    [command] = [command for _, name, command in _scons_commands() if name == job]
    matrix = load_matrix(ROOT)
    leg = next(leg for leg in matrix.legs if bool(leg.inputs) == (job == "aggregate"))
    variables = {"LEG": leg.id, "BINARY_CACHE": "github:anira/backends@binary-cache", "WRITE": "1"}
    expanded = [_expand(word, variables) for word in shlex.split(command)[1:]
                if not word.startswith("-j")]  # quotes off, as bash does; -j2 is SCons' own
    arguments = dict(word.split("=", 1) for word in expanded if "=" in word)
    assert "binary_cache_trust" not in arguments
    invocation = resolve({**arguments, "plan": "1"}, [w for w in expanded if "=" not in w], matrix, ROOT,
                         detect_host(), environ={}, launch_dir=ROOT)
    trust = invocation.settings.trust
    assert invocation.settings.binary_caches == (variables["BINARY_CACHE"],)
    assert trust == load_trust("", ROOT) and not trust.unsigned
    archive = tmp_path / "entry" / "pkg.zip"
    archive.parent.mkdir()
    archive.write_bytes(b"PK")
    (archive.parent / "pkg.zip.json").write_text("{}")
    assert trust.problems("ab" * 32, archive) == ["it is not signed (no .sig)"]


def _expand(word: str, variables: dict[str, str]) -> str:
    for name, value in variables.items():
        word = word.replace(f"${name}", value)
    assert "$" not in word, f"{word}: a variable this test does not know"
    return word
