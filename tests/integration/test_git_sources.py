"""Git sources are cached like downloads: one bare mirror per repository URL in the download
cache, checkouts made from it by the recorded commit, submodules included; so nothing is
cloned again once the cache holds a commit. A source whose `submodules` is "selected" gets
only the submodules its leg selects: the others are never fetched, and a build that needs
one fails naming it and the data entry to add it to."""
from __future__ import annotations

import json
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


API_ONLY = '[[submodules]]\npaths = ["api"]\nreason = "the header"\n'
EXTRA_ENTRY = ('[[submodules]]\nswitch = "FIXGIT_EXTRA"\npaths = ["extra"]\n'
               'reason = "CMakeLists.txt includes extra.cmake"\n')


def _mirrors(project: Path) -> list[str]:
    return sorted(p.name.rsplit("-", 1)[0] for p in (project / ".cache/downloads/git").glob("*.git"))


def test_unselected_submodules_are_never_fetched(tmp_path: Path, tools: None) -> None:
    upstream = fixtures.make_git_upstream(tmp_path / "git-upstream", extra=True)
    project = fixtures.new_project(tmp_path / "project")
    fixtures.write_fixgit(project, upstream.url, submodules='"selected"', entries=API_ONLY)
    leg = fixtures.FIXGIT_LEG_ID
    upstream.take_offline("fixgit-extra")  # fetching it would fail
    planned = scons(project, leg, "plan=1")
    assert planned.returncode == 0, str(planned)
    assert "    submodules: 1 selected by engines/fixgit/engine.toml [[submodules]]" in planned.output
    assert "\n      api\n" in planned.output and "extra" not in planned.output
    built = scons(project, leg, "lock=1")
    assert built.returncode == 0, str(built)
    assert _mirrors(project) == ["fixgit", "fixgit-api"]  # no mirror, no clone of fixgit-extra
    [record] = (project / "build/git").glob("fixgit-source-*.json")
    body = json.loads(record.read_text())
    checkout = Path(body["path"])
    assert (checkout / "api/fixgit.h").is_file() and not any((checkout / "extra").iterdir())
    api = upstream.git("fixgit", "rev-parse", "HEAD:api")
    assert body["submodules"] == {"api": api}  # the gitlink of the pinned commit's tree


def test_a_build_that_needs_an_unselected_submodule_names_it(tmp_path: Path, tools: None) -> None:
    upstream = fixtures.make_git_upstream(tmp_path / "git-upstream", extra=True)
    project = fixtures.new_project(tmp_path / "project")
    fixtures.write_fixgit(project, upstream.url, submodules='"selected"', entries=API_ONLY,
                          recipe=fixtures.FIXGIT_CMAKE_RECIPE)
    leg = fixtures.FIXGIT_LEG_ID
    failed = scons(project, leg, "lock=1")
    assert failed.returncode != 0
    assert (f"the build reads the submodule extra of source (file://{upstream.root}/fixgit-extra.git), which this "
            "leg does not check out") in failed.output, str(failed)
    assert ('add "extra" to the paths of the [[submodules]] entry of source \'source\' in engines/fixgit/engine.toml '
            "whose switch (or when) is what makes the build read it") in failed.output
    assert "extra/extra.cmake" in failed.output  # CMake's own line, quoted
    assert _mirrors(project) == ["fixgit", "fixgit-api"]
    # The entry the error asks for: the configure's FIXGIT_EXTRA=ON selects it, and the leg builds.
    fixtures.write_fixgit(project, upstream.url, commit=_commit_of(project), submodules='"selected"',
                          entries=API_ONLY + "\n" + EXTRA_ENTRY, recipe=fixtures.FIXGIT_CMAKE_RECIPE)
    built = scons(project, leg)
    assert built.returncode == 0, str(built)
    assert _mirrors(project) == ["fixgit", "fixgit-api", "fixgit-extra"]
