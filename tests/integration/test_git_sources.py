"""Git sources are cached like downloads: one bare mirror per repository URL in the download
cache, checkouts made from it by the recorded commit, submodules included; so nothing is
cloned again once the cache holds a commit."""
from __future__ import annotations

import shutil
import tomllib
import zipfile
from pathlib import Path

import pytest

import fixtures
from fixtures import scons


@pytest.fixture
def git_upstream(tmp_path: Path, tools: None) -> fixtures.GitUpstream:
    return fixtures.make_git_upstream(tmp_path / "git-upstream")


def _commit_of(project: Path) -> str:
    return tomllib.loads((project / "engines/fixgit/engine.toml").read_text())["sources"]["source"]["commit"]


def test_git_sources_are_cached_like_downloads(tmp_path: Path, git_upstream) -> None:
    """No clone again after the commit is recorded, after `scons -c`, after `rm -rf build`."""
    project = fixtures.new_project(tmp_path / "project")
    fixtures.write_fixgit(project, git_upstream.url)
    leg = fixtures.FIXGIT_LEG_ID
    refused = scons(project, leg)
    assert refused.returncode != 0 and "has no commit pin: `scons lock engine=fixgit`" in refused.output
    first = scons(project, leg, "lock=1")  # resolves v1.0.0 here and records its commit
    assert first.returncode == 0, str(first)
    assert _commit_of(project) == git_upstream.tags["1.0.0"]
    mirrors = sorted(p.name.rsplit("-", 1)[0] for p in (project / ".cache/downloads/git").glob("*.git"))
    assert mirrors == ["fixgit", "fixgit-api"]  # the submodule has its own mirror

    git_upstream.take_offline()  # from here on, a clone would fail
    pinned = scons(project, leg)  # the recorded commit changes the fetch step's settings: it reruns
    assert pinned.returncode == 0, str(pinned)
    assert any(line.startswith("[fetch]") for line in pinned.step_lines())
    assert scons(project, "-c", leg).returncode == 0
    assert scons(project, leg).returncode == 0
    shutil.rmtree(project / "build")
    shutil.rmtree(project / "dist")
    rebuilt = scons(project, leg)
    assert rebuilt.returncode == 0, str(rebuilt)
    archive = project / "dist" / fixtures.archive_name("fixgit", fixtures.FIXGIT_VERSION, leg)
    with zipfile.ZipFile(archive) as handle:
        assert "#define FIXGIT_ANSWER 42" in handle.read("include/fixgit.h").decode()  # from the submodule
