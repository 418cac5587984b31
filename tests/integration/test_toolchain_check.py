"""A build on a host that lacks a leg's toolchain stops before fetching: one line naming what
to install, exit 2, nothing written. Real scons in a scratch copy of the project, with a PATH
that holds every tool the leg needs but the one a test takes away."""
from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from backends.model.matrix import load_matrix
from backends.model.recipes import plan_all
from backends.probes.host import detect_host
from backends.probes.host_checks import host_facts
from backends.probes.host_needs import needs_here
from scratch import REPO, Scons, scratch_project

LEG = "onnxruntime-linux-x86_64-shared"  # repackaged: verify and the smoke need the host's tools

pytestmark = pytest.mark.skipif(detect_host().platform != "linux-x86_64", reason="the leg is this host's on Linux")


def _path_of(tmp_path: Path, leaving_out: str) -> str:
    """A PATH directory with each program the leg needs here (as this host finds it), but one."""
    matrix = load_matrix(REPO)
    host = detect_host()
    facts = host_facts(host)
    directory = tmp_path / "bin"
    directory.mkdir()
    plan = plan_all(matrix, [matrix.leg(LEG)])[0]
    for need in needs_here(plan, matrix, host):
        found = facts.which(need.subject) if need.kind == "program" else None
        if found and need.subject != leaving_out:
            (directory / Path(found).name).symlink_to(found)
    return str(directory)


def _written(project: Path) -> list[str]:
    return sorted(entry.name for entry in project.iterdir() if not entry.is_symlink())


def test_a_missing_tool_stops_the_build_before_fetching(tmp_path: Path) -> None:
    if shutil.which("cmake") is None:
        pytest.skip("needs cmake to take away")
    project = scratch_project(tmp_path / "project")
    cache = tmp_path / "cache"
    scons = Scons(project, cache)
    done = scons.run(LEG, env={"PATH": _path_of(tmp_path, leaving_out="cmake")})
    assert done.returncode == 2
    errors = [line for line in done.stderr.splitlines() if line.startswith("scons: ***")]
    assert errors == [f"scons: *** {LEG} cannot be built on this host, which lacks cmake (`sudo apt-get install "
                      f"cmake`); `bash tools/setup.sh --leg {LEG}` installs what it can and names the rest"]
    assert _written(project) == [] and not cache.exists()  # no build/, dist/, cache or .sconsign


def test_with_every_tool_the_check_lets_the_build_reach_its_fetch(tmp_path: Path) -> None:
    """The other direction: nothing missing, so the same command gets to its fetch step (which
    offline=1 and an empty cache then stop)."""
    project = scratch_project(tmp_path / "project")
    done = Scons(project, tmp_path / "cache").run(LEG, "offline=1", env={"PATH": _path_of(tmp_path, "")})
    assert done.returncode != 0
    assert "cannot be built on this host" not in done.stderr
    assert "[fetch] release:" in done.stdout


def test_a_binary_cache_turns_it_into_a_warning_and_dry_runs_skip_it(tmp_path: Path) -> None:
    project = scratch_project(tmp_path / "project")
    scons = Scons(project, tmp_path / "cache")
    path = {"PATH": _path_of(tmp_path, leaving_out="cmake")}
    store = tmp_path / "store"
    store.mkdir()
    cached = scons.run(LEG, f"binary_cache={store}", "offline=1", env=path)
    assert f"scons: warning: {LEG} cannot be built on this host, which lacks cmake" in cached.stdout
    assert "(a binary cache hit needs none of it)" in cached.stdout
    dry = scons.run(LEG, "-n", env=path)
    assert dry.returncode == 0 and "cannot be built on this host" not in dry.stdout + dry.stderr


def test_the_check_reads_the_path_it_is_given(tmp_path: Path) -> None:
    """`host_facts` looks programs up on the environment's PATH, not this process's."""
    facts = host_facts(detect_host(), {"PATH": str(tmp_path)})
    assert facts.which("cmake") is None and facts.which("llvm-nm") is None
    assert os.environ.get("PATH")  # this process still has its own
