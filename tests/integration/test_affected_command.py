"""`scons affected since=HEAD` on a fixture project in a git repository: after a patch edit it
lists exactly the legs the patch applies to, though the patched engine's inputs are unpinned,
and says which legs have unpinned inputs."""
from __future__ import annotations

import subprocess
from pathlib import Path

import fixtures

SRC_URL = "http://127.0.0.1:9/fixsrc-{version}.tar.gz"  # never fetched: `affected` builds nothing
BIN_URL = "http://127.0.0.1:9/{asset}-{version}.{ext}"


def git(root: Path, *args: str) -> None:
    subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@example.invalid", *args], cwd=root,
                   check=True, capture_output=True)


def listed_legs(stdout: str) -> list[str]:
    """The leg ids of the table `scons affected` prints (the rows under its dashes)."""
    lines = stdout.splitlines()
    if not any(line.startswith("---") for line in lines):
        return []
    start = next(i for i, line in enumerate(lines) if line.startswith("---")) + 1
    rows = lines[start:lines.index("", start)] if "" in lines[start:] else lines[start:]
    return [row.split()[0] for row in rows]


def test_a_patch_edit_lists_exactly_the_patched_legs(tmp_path: Path) -> None:
    project = fixtures.new_project(tmp_path / "project")
    fixtures.write_fixsrc(project, SRC_URL, None)  # unpinned: no leg key exists
    fixtures.write_fixbin(project, BIN_URL, {fixtures.fixbin_asset(): "1" * 64})
    (project / ".gitignore").write_text("/build/\n/dist/\n.sconsign*\n")
    git(project, "init", "-q")
    git(project, "add", "-A")
    git(project, "commit", "-q", "-m", "fixture")

    unchanged = fixtures.scons(project, "affected", "since=HEAD")
    assert unchanged.returncode == 0, unchanged
    assert listed_legs(unchanged.stdout) == [] and "0 of 5 legs rebuild" in unchanged.stdout

    patch = project / "engines/fixsrc/patches/register_coreml.py"
    patch.write_text(patch.read_text().replace("def apply(", "# applies to CoreML legs only\ndef apply(", 1))
    run = fixtures.scons(project, "affected", "since=HEAD")
    assert run.returncode == 0, run
    assert listed_legs(run.stdout) == ["fixsrc-linux-x86_64-gpu-shared"]
    assert "fixsrc-linux-x86_64-gpu-shared  unpinned  patches" in run.stdout
    assert "fixsrc: every one of its 4 legs" in run.stdout  # the unpinned ones, named
    assert not (project / "build").exists() and not (project / "dist").exists()  # compared, never built
