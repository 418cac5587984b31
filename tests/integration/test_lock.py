"""`scons lock` and `scons pins` on fixture upstreams: pins recorded from this Linux host for
legs that build elsewhere, git refs resolved from a local bare mirror, recorded pins checked
and never overwritten, a given `origin=` always hashed, one lock at a time per tree, and
nothing written under build/ (but its lock file) or dist/."""
from __future__ import annotations

import os
import subprocess
import tomllib
from pathlib import Path

import pytest

import fixtures
from backends.util.locks import FileLock
from fixtures import LegRow, scons

# Legs that build from source on their runners only (the fixture recipe's download is their input).
WINDOWS = LegRow(platform="windows-x86_64", runner="windows-2025", params={"asset": "fixbin-win-x64", "ext": "tgz"})
MACOS = LegRow(platform="macos-arm64", runner="macos-15", params={"asset": "fixbin-osx-arm64", "ext": "tgz"})
LINUX = fixtures.FIXBIN_LEGS[0]
ROWS = (LINUX, WINDOWS, MACOS)
ELSEWHERE = ("fixbin-windows-x86_64-shared", "fixbin-macos-arm64-shared")  # legs this host cannot build
MIRROR_URL = "https://example.invalid/anira/fixgit"  # never reached: offline, from the mirror= directory


@pytest.fixture
def served(tmp_path: Path, tools: None):
    """A private upstream (tests here change its files): one fixbin release per row's asset."""
    with fixtures.Server(tmp_path / "served") as server:
        pins = fixtures.make_fixbin_release(server.root, assets=[row.params["asset"] for row in ROWS])
        yield server, pins


def _fixbin_project(tmp_path: Path, server: fixtures.Server, name: str = "project") -> Path:
    project = fixtures.new_project(tmp_path / name)
    fixtures.write_fixbin(project, f"{server.base_url}/{{asset}}-{{version}}.{{ext}}", {}, rows=ROWS)
    return project


def _sha256_table(project: Path, engine: str) -> dict[str, str]:
    return tomllib.loads((project / f"engines/{engine}/engine.toml").read_text()).get("sha256", {})


def _nothing_built(project: Path) -> bool:
    """Nothing under dist/, and under build/ only the tree's lock file (lock holds the tree)."""
    return not (project / "dist").exists() and {p.name for p in (project / "build").glob("*")} <= {".lock"}


def _origin_file(directory: Path, name: str, data: bytes) -> Path:
    directory.mkdir(parents=True)
    (directory / name).write_bytes(data)
    return directory / name


def test_lock_pins_windows_and_macos_legs_from_this_linux_host(tmp_path: Path, served) -> None:
    server, pins = served
    project = _fixbin_project(tmp_path, server)
    refused = scons(project, ELSEWHERE[0])
    assert refused.returncode != 0 and "builds on windows-2025" in refused.stderr

    locked = scons(project, "lock", *ELSEWHERE)
    assert locked.returncode == 0, str(locked)
    wanted = {fixtures.fixbin_asset(row.params["asset"]) for row in (WINDOWS, MACOS)}
    assert _sha256_table(project, "fixbin") == {name: pins[name] for name in wanted}
    for name in wanted:
        assert f"unpinned -> {pins[name]}" in locked.stdout
    assert "recorded 2 new pins" in locked.stdout
    assert _nothing_built(project)

    partly = scons(project, "pins")  # the Linux leg's release is still unpinned
    assert partly.returncode == 1
    linux = fixtures.fixbin_asset(LINUX.params["asset"])
    assert f"1 input unpinned: fixbin {linux}" in partly.stderr and "scons lock engine=fixbin" in partly.stderr
    assert scons(project, "pins", *ELSEWHERE).returncode == 0
    assert _nothing_built(project)


def test_a_second_lock_changes_nothing(tmp_path: Path, served) -> None:
    server, _ = served
    project = _fixbin_project(tmp_path, server)
    assert scons(project, "lock").returncode == 0
    toml = project / "engines/fixbin/engine.toml"
    before = (toml.read_bytes(), toml.stat().st_mtime_ns)
    again = scons(project, "lock")
    assert again.returncode == 0, str(again)
    assert (toml.read_bytes(), toml.stat().st_mtime_ns) == before
    assert again.stdout.count("(verified)") == len(ROWS) and "nothing written" in again.stdout
    assert scons(project, "pins").returncode == 0


def test_a_changed_upstream_file_fails_with_both_hashes_and_nothing_written(tmp_path: Path, served) -> None:
    server, pins = served
    project = _fixbin_project(tmp_path, server)
    assert scons(project, "lock", ELSEWHERE[0]).returncode == 0
    toml = project / "engines/fixbin/engine.toml"
    recorded = toml.read_bytes()
    windows = fixtures.fixbin_asset(WINDOWS.params["asset"])
    (server.root / windows).write_bytes(b"re-published with other bytes")
    changed = fixtures.sha256_of(server.root / windows)
    # A fresh cache: the pinned copy is not at hand, so upstream's bytes are checked.
    failed = scons(project, "lock", "cache=fresh-cache")
    assert failed.returncode != 0
    assert pins[windows] in failed.stderr and changed in failed.stderr
    assert "nothing was written to engine.toml" in failed.stderr
    assert toml.read_bytes() == recorded  # not even the other legs' new pins
    assert _nothing_built(project)


def test_an_origin_of_another_file_cannot_pin(tmp_path: Path, served) -> None:
    server, _ = served
    project = _fixbin_project(tmp_path, server)
    other = tmp_path / "some-other-layout.whl"
    other.write_bytes(b"not the release")
    refused = scons(project, "lock", ELSEWHERE[0], f"origin={other}")
    assert refused.returncode != 0 and "lock pins upstream's own file" in refused.stderr
    assert _sha256_table(project, "fixbin") == {}


def test_a_given_origin_is_read_and_hashed_every_time(tmp_path: Path, served) -> None:
    server, pins = served
    project = _fixbin_project(tmp_path, server)
    assert scons(project, "lock", ELSEWHERE[0]).returncode == 0  # pinned from upstream, and now in the cache
    windows = fixtures.fixbin_asset(WINDOWS.params["asset"])
    toml = project / "engines/fixbin/engine.toml"
    recorded = toml.read_bytes()
    copy = _origin_file(tmp_path / "copy", windows, (server.root / windows).read_bytes())
    same = scons(project, "lock", ELSEWHERE[0], f"origin={copy}")
    assert same.returncode == 0 and f"{pins[windows]} (verified)" in same.stdout, str(same)
    # The same name, other bytes: no cache hit by the pinned name stands in for the given file.
    other = _origin_file(tmp_path / "other", windows, b"other bytes under the pinned name")
    refused = scons(project, "lock", ELSEWHERE[0], f"origin={other}")
    assert refused.returncode != 0 and "(verified)" not in refused.stdout
    assert pins[windows] in refused.stderr and fixtures.sha256_of(other) in refused.stderr
    assert "nothing was written to engine.toml" in refused.stderr
    assert toml.read_bytes() == recorded and _nothing_built(project)


def test_pins_marks_an_input_whose_origin_differs_from_its_pin(tmp_path: Path, served) -> None:
    server, pins = served
    project = _fixbin_project(tmp_path, server)
    assert scons(project, "lock", ELSEWHERE[0]).returncode == 0
    windows = fixtures.fixbin_asset(WINDOWS.params["asset"])
    copy = _origin_file(tmp_path / "copy", windows, (server.root / windows).read_bytes())
    same = scons(project, "pins", ELSEWHERE[0], f"origin={copy}")
    assert same.returncode == 0 and "origin differs" not in same.stdout, str(same)
    for origin in (_origin_file(tmp_path / "other", windows, b"a local build of it"),
                   _origin_file(tmp_path / "layout", "another-layout.whl", b"another layout of it")):
        differs = scons(project, "pins", ELSEWHERE[0], f"origin={origin}")
        assert differs.returncode == 1, str(differs)
        [row] = [line for line in differs.stdout.splitlines() if windows in line]
        actual = fixtures.sha256_of(origin)
        assert f"origin differs: sha256 {actual[:12]}" in row
        assert f"fixbin {windows}" in differs.stderr and str(origin) in differs.stderr
        assert actual in differs.stderr and pins[windows] in differs.stderr
    assert _nothing_built(project)


def _waiting_lock(project: Path, log: Path, *args: str) -> subprocess.Popen[str]:
    """`scons lock *args`, started while the tree is held: returned once it says it waits."""
    child = subprocess.Popen(fixtures.scons_argv("lock", *args), cwd=project, env=fixtures.child_env(),
                             stdout=log.open("w"), stderr=subprocess.PIPE, text=True)
    assert child.stderr is not None
    said = []
    for line in iter(child.stderr.readline, ""):
        said.append(line)
        if "waiting for it to finish" in line:
            return child
    child.wait()
    pytest.fail(f"scons lock did not wait for the held tree (exit {child.returncode}):\n{''.join(said)}"
                f"{log.read_text()}")


def _finished(child: subprocess.Popen[str], log: Path) -> fixtures.Run:
    child.wait(timeout=600)
    assert child.stderr is not None
    return fixtures.Run(list(map(str, child.args)), child.returncode, log.read_text(), child.stderr.read(), 0.0)


def test_locks_at_once_take_turns_and_the_later_one_sees_the_pin(tmp_path: Path, served) -> None:
    server, _ = served
    project = _fixbin_project(tmp_path, server)
    windows = fixtures.fixbin_asset(WINDOWS.params["asset"])
    origins = [_origin_file(tmp_path / f"copy{n}", windows, f"copy {n}".encode()) for n in (1, 2)]
    logs = [tmp_path / f"lock{n}.out" for n in (1, 2)]
    tree = FileLock(project / "build" / ".lock")
    tree.acquire()
    try:
        refused = scons(project, "lock", ELSEWHERE[0], f"origin={origins[0]}", "wait=0")
        assert refused.returncode == 2 and f"pid {os.getpid()}" in refused.stderr, str(refused)
        children = [_waiting_lock(project, log, ELSEWHERE[0], f"origin={origin}")
                    for origin, log in zip(origins, logs)]
        assert _sha256_table(project, "fixbin") == {}
    finally:
        tree.release()
    runs = [_finished(child, log) for child, log in zip(children, logs)]
    [winner] = [n for n, run in enumerate(runs) if run.returncode == 0]
    loser = runs[1 - winner]
    assert "recorded 1 new pin" in runs[winner].stdout
    assert _sha256_table(project, "fixbin") == {windows: fixtures.sha256_of(origins[winner])}
    assert loser.returncode != 0 and "nothing was written to engine.toml" in loser.stderr
    assert all(fixtures.sha256_of(origin) in loser.stderr for origin in origins)
    assert _nothing_built(project)


# -- git sources ----------------------------------------------------------------------------------

@pytest.fixture
def git_upstream(tmp_path: Path) -> fixtures.GitUpstream:
    return fixtures.make_git_upstream(tmp_path / "git-upstream")


def _bare_mirror(git_upstream: fixtures.GitUpstream, tmp_path: Path) -> Path:
    """A mirror= directory holding bare clones named like the repositories."""
    mirror = tmp_path / "mirror"
    for name in ("fixgit", "fixgit-api"):
        subprocess.run(["git", "clone", "-q", "--mirror", str(git_upstream.root / f"{name}.git"),
                        str(mirror / f"{name}.git")], check=True)
    return mirror


def _commit_of(project: Path, source: str = "source") -> str:
    data = tomllib.loads((project / "engines/fixgit/engine.toml").read_text())
    return data["sources"][source]["commit"]


TOOLS_SOURCE = '\n[sources.tools]             # a branch, like LiteRT\'s cpuinfo main\nkind = "git"\n' \
               f'url = "{MIRROR_URL}"\nref = "main"\ncommit = ""\n'


def test_lock_records_git_commits_from_a_local_bare_mirror(tmp_path: Path, git_upstream) -> None:
    mirror = _bare_mirror(git_upstream, tmp_path)
    project = fixtures.new_project(tmp_path / "project")
    fixtures.write_fixgit(project, MIRROR_URL, extra_sources=TOOLS_SOURCE)
    offline = (f"mirror={mirror}", "offline=1")
    assert scons(project, "pins").returncode == 1
    locked = scons(project, "lock", *offline)
    assert locked.returncode == 0, str(locked)
    assert _commit_of(project) == git_upstream.tags["1.0.0"]  # the annotated tag's commit
    assert _commit_of(project, "tools") == git_upstream.tags["1.0.0"]  # main, resolved here
    assert "# recorded by scons lock" in (project / "engines/fixgit/engine.toml").read_text()
    assert not (project / ".cache").exists() and _nothing_built(project)  # ls-remote: nothing cloned
    assert scons(project, "pins").returncode == 0

    # main moves on: the recorded commit stays the pin, and lock says where main is now.
    toml = (project / "engines/fixgit/engine.toml").read_bytes()
    newer = git_upstream.release("1.1.0", 43)
    subprocess.run(["git", "-C", str(mirror / "fixgit.git"), "fetch", "-q", "origin", "+refs/*:refs/*"],
                   check=True)
    kept = scons(project, "lock", *offline)
    assert kept.returncode == 0, str(kept)
    assert f"branch main is now at {newer}" in kept.stdout
    assert (project / "engines/fixgit/engine.toml").read_bytes() == toml

    # A tag that moved is refused, naming both commits; nothing is written.
    subprocess.run(["git", "-C", str(mirror / "fixgit.git"), "tag", "-f", "v1.0.0", newer], check=True,
                   capture_output=True)
    moved = scons(project, "lock", *offline)
    assert moved.returncode != 0
    assert git_upstream.tags["1.0.0"] in moved.stderr and newer in moved.stderr and "tag that moved" in moved.stderr
    assert (project / "engines/fixgit/engine.toml").read_bytes() == toml


def test_a_version_bump_records_the_new_tag(tmp_path: Path, git_upstream) -> None:
    mirror = _bare_mirror(git_upstream, tmp_path)
    project = fixtures.new_project(tmp_path / "project")
    fixtures.write_fixgit(project, MIRROR_URL, commit=git_upstream.tags["1.0.0"])
    newer = git_upstream.release("1.1.0", 43)
    subprocess.run(["git", "-C", str(mirror / "fixgit.git"), "fetch", "-q", "origin", "+refs/*:refs/*"],
                   check=True)
    bumped = scons(project, "lock", "engine=fixgit", "version=1.1.0", f"mirror={mirror}", "offline=1")
    assert bumped.returncode == 0, str(bumped)
    data = tomllib.loads((project / "engines/fixgit/engine.toml").read_text())
    assert data["version"] == "1.1.0" and data["sources"]["source"]["commit"] == newer
    assert "fixgit: version 1.0.0 -> 1.1.0" in bumped.stdout and f"unpinned -> {newer}" in bumped.stdout


def test_a_hand_edited_version_moves_the_commit_to_the_new_tag(tmp_path: Path, git_upstream) -> None:
    """`edit one line, run the workflow`: the recorded commit is the old tag's, not a moved tag."""
    mirror = _bare_mirror(git_upstream, tmp_path)
    project = fixtures.new_project(tmp_path / "project")
    fixtures.write_fixgit(project, MIRROR_URL, commit=git_upstream.tags["1.0.0"], version="1.1.0")
    newer = git_upstream.release("1.1.0", 43)
    subprocess.run(["git", "-C", str(mirror / "fixgit.git"), "fetch", "-q", "origin", "+refs/*:refs/*"],
                   check=True)
    locked = scons(project, "lock", f"mirror={mirror}", "offline=1")
    assert locked.returncode == 0, str(locked)
    assert _commit_of(project) == newer
    assert f"{git_upstream.tags['1.0.0']} -> {newer}; the recorded commit is v1.0.0's" in locked.stdout


def test_pins_no_leg_uses_any_more_are_dropped(tmp_path: Path, served) -> None:
    server, pins = served
    project = _fixbin_project(tmp_path, server)
    assert scons(project, "lock").returncode == 0
    # Upstream renames the Windows asset; the row is edited by hand to follow it.
    old = fixtures.fixbin_asset(WINDOWS.params["asset"])
    renamed = fixtures.make_fixbin_release(server.root, assets=["fixbin-windows-x64"])
    variants = project / "variants/fixbin.toml"
    variants.write_text(variants.read_text().replace('"fixbin-win-x64"', '"fixbin-windows-x64"'))
    partial = scons(project, "lock", ELSEWHERE[0])  # a partial selection never judges other legs' pins
    assert partial.returncode == 0 and old in _sha256_table(project, "fixbin")
    whole = scons(project, "lock", "engine=fixbin")
    assert whole.returncode == 0, str(whole)
    assert _sha256_table(project, "fixbin") == {name: digest for name, digest in {**pins, **renamed}.items()
                                                if name != old}
    assert f"fixbin: dropped the pins no leg uses any more: {old}" in whole.stdout


# -- a lock that cannot pin everything ------------------------------------------------------------

def test_an_input_upstream_lacks_is_listed_and_every_other_one_recorded(tmp_path: Path, served) -> None:
    server, pins = served
    project = _fixbin_project(tmp_path, server)
    linux = fixtures.fixbin_asset(LINUX.params["asset"])
    hidden = (server.root / linux).rename(tmp_path / linux)  # upstream answers 404
    partial = scons(project, "lock")
    assert partial.returncode != 0
    assert "1 input not pinned:" in partial.stderr and f"fixbin {linux}: " in partial.stderr
    assert "the other inputs of fixbin were recorded" in partial.stderr and "recorded 2 new pins" in partial.stderr
    assert _sha256_table(project, "fixbin") == {name: digest for name, digest in pins.items() if name != linux}
    assert "nothing was written" not in partial.stderr
    assert _nothing_built(project)

    hidden.rename(server.root / linux)  # upstream is back: the next lock records the rest
    rest = scons(project, "lock")
    assert rest.returncode == 0, str(rest)
    assert f"unpinned -> {pins[linux]}" in rest.stdout and "recorded 1 new pin:" in rest.stdout
    assert _sha256_table(project, "fixbin") == pins


def test_an_input_that_failed_keeps_its_recorded_pin(tmp_path: Path, served) -> None:
    """A whole-engine lock drops the pins no input uses; one it could not fetch is still used."""
    server, pins = served
    project = _fixbin_project(tmp_path, server)
    assert scons(project, "lock").returncode == 0
    linux = fixtures.fixbin_asset(LINUX.params["asset"])
    (server.root / linux).unlink()
    failed = scons(project, "lock", "engine=fixbin", "cache=fresh-cache")  # no pinned copy at hand
    assert failed.returncode != 0 and f"fixbin {linux}: " in failed.stderr
    assert "dropped" not in failed.stderr
    assert _sha256_table(project, "fixbin") == pins


def test_a_conflict_writes_nothing_for_its_engine_and_the_other_engines_are_recorded(
        tmp_path: Path, served, git_upstream) -> None:
    server, pins = served
    project = _fixbin_project(tmp_path, server)
    fixtures.write_fixgit(project, MIRROR_URL)
    mirror = _bare_mirror(git_upstream, tmp_path)
    windows = fixtures.fixbin_asset(WINDOWS.params["asset"])
    assert scons(project, "lock", ELSEWHERE[0]).returncode == 0
    recorded = (project / "engines/fixbin/engine.toml").read_bytes()
    (server.root / windows).write_bytes(b"re-published with other bytes")
    failed = scons(project, "lock", "cache=fresh-cache", f"mirror={mirror}")
    assert failed.returncode != 0
    assert f"fixbin {windows}: conflict: sha256 mismatch" in failed.stderr
    assert pins[windows] in failed.stderr and fixtures.sha256_of(server.root / windows) in failed.stderr
    assert "fixbin: nothing was written to engine.toml" in failed.stderr
    # Not even the other fixbin legs' new pins; fixgit's commit is recorded all the same.
    assert (project / "engines/fixbin/engine.toml").read_bytes() == recorded
    assert _commit_of(project) == git_upstream.tags["1.0.0"]
    assert "the other inputs of fixgit were recorded" in failed.stderr and "recorded 1 new pin:" in failed.stderr
