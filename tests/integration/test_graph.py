"""The step graph on fixture upstreams: full build, no-op rerun, precise incremental reruns,
reproducibility, and a kill in the middle (docs/decisions.md)."""
from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import threading
import time
import zipfile
from pathlib import Path

import pytest

import fixtures
import survivors
from fixtures import FIXBIN_LEG_IDS, FIXSRC_LEG_IDS, LegRow, fixbin_archive, fixsrc_archive, scons

ALL = ("engine=fixsrc,fixbin", "flavor=all")
GPU_LEG = "fixsrc-linux-x86_64-gpu-shared"
PROVIDER_HEADER = "include/coreml_provider_factory.h"
# Three legs (two cpu, one patched gpu) for the tests that edit a project.
SMALL_ROWS = fixtures.FIXSRC_LEGS[:3]
SMALL_IDS = FIXSRC_LEG_IDS[:3]


def _ok(run: fixtures.Run) -> fixtures.Run:
    assert run.returncode == 0, str(run)
    return run


def _archives(project: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted((project / "dist").iterdir())}


def _leg_steps(changed: set[str], leg: str) -> set[str]:
    return {Path(p).stem for p in changed if p.startswith(f"build/legs/{leg}/steps/")}


def _dist_changes(changed: set[str]) -> set[str]:
    return {Path(p).name for p in changed if p.startswith("dist/")}


# --------------------------------------------------------------------------- one built project


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory, upstreams: fixtures.Upstreams):
    """Every fixture leg built once; the read-only tests below share it (-j1: its step lines
    are counted, and -j2 threads may interleave the steps' own prints mid-line)."""
    project = fixtures.make_project(tmp_path_factory.mktemp("built") / "project", upstreams)
    run = _ok(scons(project, *ALL))
    return project, run


def test_whole_graph_publishes_verified_smoke_tested_archives(built, tmp_path):
    project, run = built
    legs = {leg: fixsrc_archive(leg) for leg in FIXSRC_LEG_IDS} | {leg: fixbin_archive(leg) for leg in FIXBIN_LEG_IDS}
    expected = {name + suffix for name in legs.values() for suffix in ("", ".sha256", ".json")}
    assert {p.name for p in (project / "dist").iterdir()} == expected
    for leg, name in legs.items():
        archive = project / "dist" / name
        digest = hashlib.sha256(archive.read_bytes()).hexdigest()
        assert (project / "dist" / (name + ".sha256")).read_text().split() == [digest, name]
        manifest = json.loads((project / "dist" / (name + ".json")).read_text())
        assert manifest["archive"] == name and manifest["sha256"] == digest and manifest["leg"]["id"] == leg
        with zipfile.ZipFile(archive) as zipped:
            assert zipped.testzip() is None
            members = {i.filename for i in zipped.infolist() if not i.is_dir()}
        listed = {f["path"]: f for f in manifest["files"]}
        assert set(listed) == members
        assert all(len(f["sha256"]) == 64 for f in listed.values() if "link" not in f)
        assert manifest["sources"] and all(len(s["sha256"]) == 64 for s in manifest["sources"])
        verify = json.loads((project / f"build/legs/{leg}/steps/verify.json").read_text())
        assert verify["archive"] == name
        smoke = json.loads((project / f"build/legs/{leg}/steps/smoke.json").read_text())
        assert smoke["status"] == "passed", smoke
        assert any("PASS" in line for line in smoke["output"])
        if leg.startswith("fixsrc"):
            gpu = leg == GPU_LEG
            assert (PROVIDER_HEADER in members) is gpu, leg
            assert [p["name"] for p in manifest["patches"]] == (["register_coreml"] if gpu else [])
            assert any("coreml provider: registered" in line for line in smoke["output"]) is gpu
        if "static" in leg:
            # and the archive's SBOM (backends/steps/sbom.py), the same document as the manifest's
            assert members == {"include/fixsrc.h", "lib/libfixsrc.a", manifest["sbom"]["path"]}
            stage = json.loads((project / f"build/legs/{leg}/steps/stage.json").read_text())
            bundled = sorted(Path(p).name for p in stage["bundled"])
            assert bundled == ["libfixsrc.a", "libfixsrc_util.a"], "bundled the build's own libraries only"
    # CPU legs build from the pristine extraction, the gpu leg from its own patched copy: the
    # patch broke the hard link instead of editing the shared extraction.
    cwd = {leg: json.loads((project / f"build/legs/{leg}/steps/build.json").read_text())["commands"][0]["cwd"]
           for leg in FIXSRC_LEG_IDS}
    assert all("/build/extract/" in cwd[leg] for leg in FIXSRC_LEG_IDS if leg != GPU_LEG)
    assert "/build/src/" in cwd[GPU_LEG]
    assert "REGISTERED 0" in (Path(cwd[FIXSRC_LEG_IDS[0]]) / "src/coreml_provider.c").read_text()
    assert "REGISTERED 1" in (Path(cwd[GPU_LEG]) / "src/coreml_provider.c").read_text()
    # The static bundle merged the core and util libraries into one archive.
    with zipfile.ZipFile(project / "dist" / fixsrc_archive("fixsrc-linux-x86_64-static")) as zipped:
        zipped.extract("lib/libfixsrc.a", tmp_path)
    objects = subprocess.run(["ar", "t", str(tmp_path / "lib/libfixsrc.a")], capture_output=True, check=True).stdout
    assert set(objects.decode().split()) >= {"fixsrc.c.o", "util.c.o"}
    # Each leg's chain ran exactly once.
    lines = run.step_lines()
    assert len(lines) == len(set(lines))
    for step in ("build", "stage", "verify", "smoke"):
        assert sum(line.startswith(f"[{step}] ") for line in lines) == (4 if step == "build" else 5), step
    assert sum(line.startswith("[patch] ") for line in lines) == 1
    assert sum(line.startswith("[fetch] ") for line in lines) == 2


def test_second_run_executes_no_step(built):
    project, _ = built
    before = fixtures.step_manifests(project)
    question = scons(project, "-q", *ALL)
    assert question.returncode == 0, str(question)
    rerun = _ok(scons(project, *ALL))
    assert rerun.step_lines() == [], str(rerun)
    one_leg = _ok(scons(project, "-q", GPU_LEG))
    assert one_leg.step_lines() == []
    assert fixtures.step_manifests(project) == before


def test_another_home_reruns_nothing_for_the_smoke_builds_in_a_home_of_its_own(built, tmp_path):
    """The user's HOME is no input of the smoke: the consumer build gets a home of its own, so
    nothing of ~/.cmake or a tool's configuration there can change what it finds. (An upstream
    build's HOME stays an input: pip's and bazelisk's caches live there.)"""
    project, _ = built
    logs = sorted(project.glob("build/legs/*/logs/smoke*.log"))
    assert logs
    for log in logs:
        homes = [line.strip() for line in log.read_text().splitlines() if line.strip().startswith("HOME=")]
        assert homes and all(home.endswith("/home") and str(project) in home for home in homes), log
    other = tmp_path / "another-home"
    other.mkdir()
    question = scons(project, "-q", "engine=fixbin", "flavor=all", env={"HOME": str(other)})  # prebuilt: no build step
    assert question.returncode == 0, str(question)


def test_manifests_record_sources_and_patches(built, upstreams):
    project, _ = built
    manifest = json.loads((project / "dist" / (fixsrc_archive(GPU_LEG) + ".json")).read_text())
    (source,) = manifest["sources"]
    assert source["filename"] == f"fixsrc-{fixtures.FIXSRC_VERSION}.tar.gz"
    assert source["sha256"] == upstreams.fixsrc_sha
    assert manifest["patches"][0]["file"] == "patches/register_coreml.py"
    assert manifest["patches"][0]["reason"]
    build = manifest["steps"]["build"]["commands"][0]["argv"]
    assert "--use_coreml" in build and "--build_shared_lib" in build


# --------------------------------------------------------------------------- incremental reruns


def test_patch_edit_reruns_only_the_patched_leg_from_patch_on(project_factory):
    project = project_factory(fixsrc_rows=SMALL_ROWS, fixbin=False)
    _ok(scons(project, "engine=fixsrc", "flavor=all"))
    before = fixtures.step_manifests(project)
    untouched = {leg: (project / "dist" / fixsrc_archive(leg)).stat().st_mtime_ns for leg in SMALL_IDS[:2]}
    cpu_manifests = {leg: (project / "dist" / (fixsrc_archive(leg) + ".json")).read_bytes() for leg in SMALL_IDS[:2]}

    patch = project / "engines/fixsrc/patches/register_coreml.py"
    patch.write_text(patch.read_text().replace(fixtures.PATCH_NOTE, "register_coreml v2"))
    assert scons(project, "-q", "engine=fixsrc", "flavor=all").returncode != 0, "-q must see the edit"
    run = _ok(scons(project, "engine=fixsrc", "flavor=all"))

    assert [line.split()[0] for line in run.step_lines()] == \
        ["[patch]", "[build]", "[stage]", "[archive]", "[verify]", "[smoke]", "[publish]"], str(run)
    assert all(GPU_LEG in line or fixsrc_archive(GPU_LEG) in line or line.startswith("[patch]")
               for line in run.step_lines())
    changed = fixtures.changed(before, fixtures.step_manifests(project))
    assert _leg_steps(changed, GPU_LEG) == {"build", "stage", "archive", "verify", "smoke", "publish"}
    assert {p for p in changed if p.startswith("build/legs/")} == \
        {p for p in changed if p.startswith(f"build/legs/{GPU_LEG}/")}
    assert _dist_changes(changed) == {fixsrc_archive(GPU_LEG) + s for s in ("", ".sha256", ".json")}
    assert not any(p.startswith(("build/downloads/", "build/extract/")) for p in changed)
    for leg, mtime in untouched.items():
        assert (project / "dist" / fixsrc_archive(leg)).stat().st_mtime_ns == mtime
        assert (project / "dist" / (fixsrc_archive(leg) + ".json")).read_bytes() == cpu_manifests[leg]
    # The edit reached the binary (the build dir followed the new source tree).
    with zipfile.ZipFile(project / "dist" / fixsrc_archive(GPU_LEG)) as zipped:
        library = zipped.read(f"lib/libfixsrc.so.{fixtures.FIXSRC_VERSION}")
    assert b"register_coreml v2" in library and fixtures.PATCH_NOTE.encode() not in library
    assert _ok(scons(project, "-q", "engine=fixsrc", "flavor=all")).returncode == 0


def test_a_patch_past_its_until_is_a_warning_when_building(project_factory):
    project = project_factory(fixsrc_rows=SMALL_ROWS, fixbin=False)
    toml = project / "engines/fixsrc/engine.toml"
    toml.write_text(toml.read_text().replace(f'until = "{fixtures.FIXSRC_VERSION}"', 'until = "1.0.0"'))
    run = _ok(scons(project, GPU_LEG))
    warnings = [line for line in run.stdout.splitlines() if line.startswith("scons: warning: ")]
    assert len(warnings) == 1 and "patch register_coreml" in warnings[0] and "`until` 1.0.0" in warnings[0], str(run)
    assert "scons: warning" not in _ok(scons(project, SMALL_IDS[0])).stdout  # a leg the patch does not touch


def test_a_step_record_as_target_runs_up_to_that_step(project_factory):
    project = project_factory(fixsrc_rows=SMALL_ROWS, fixbin=False)
    leg = SMALL_IDS[0]
    run = _ok(scons(project, f"build/legs/{leg}/steps/build.json"))
    assert [line.split()[0] for line in run.step_lines()][-1] == "[build]", str(run)
    steps = {p.stem for p in (project / f"build/legs/{leg}/steps").glob("*.json")}
    assert steps == {"build"} and not (project / "dist").exists()
    refused = scons(project, f"build/legs/{leg}/steps/bild.json")
    assert refused.returncode == 2 and "unknown step 'bild'" in refused.stderr, str(refused)


def test_a_leg_id_typed_with_a_platform_alias_builds_that_leg(project_factory):
    """`-h` promises aliases in leg ids (`x64` for `x86_64`): SCons gets an alias of that spelling."""
    project = project_factory(fixsrc=False)
    leg = FIXBIN_LEG_IDS[0]
    typed = leg.replace("x86_64", "x64")
    run = _ok(scons(project, typed))
    assert (project / "dist" / fixbin_archive(leg)).is_file(), str(run)
    assert _ok(scons(project, "-q", typed)).returncode == 0


def test_flag_edits_rerun_only_that_leg(project_factory):
    project = project_factory(fixsrc_rows=SMALL_ROWS, fixbin=False)
    args = ("engine=fixsrc", "flavor=all")
    _ok(scons(project, *args))
    shared, gpu = SMALL_IDS[1], SMALL_IDS[2]

    # variants/: one row gets an extra CMake define.
    rows = (SMALL_ROWS[0], LegRow(kind="shared", params={"defines": "FIXSRC_GREETING=tuned"}), SMALL_ROWS[2])
    (project / "variants/fixsrc.toml").write_text(fixtures.variants_toml(rows, "edited"))
    before = fixtures.step_manifests(project)
    run = _ok(scons(project, *args))
    changed = fixtures.changed(before, fixtures.step_manifests(project))
    assert {p.split("/")[2] for p in changed if p.startswith("build/legs/")} == {shared}, str(run)
    assert _leg_steps(changed, shared) == {"build", "stage", "archive", "verify", "smoke", "publish"}
    assert _dist_changes(changed) == {fixsrc_archive(shared) + s for s in ("", ".sha256", ".json")}
    assert not any(p.startswith(("build/downloads/", "build/extract/", "build/src/")) for p in changed)
    smoke = json.loads((project / f"build/legs/{shared}/steps/smoke.json").read_text())
    assert any("tuned 1.4.2: PASS" in line for line in smoke["output"]), smoke
    assert not any("fixsrc 1.4.2: PASS" in line for line in smoke["output"]), "stale output of the first run"

    # recipe.py: a flag only the gpu leg's build command gets.
    recipe = project / "engines/fixsrc/recipe.py"
    text = recipe.read_text()
    edited = text.replace('argv.append("--use_coreml")',
                          'argv += ["--use_coreml", "--cmake_extra_defines", "FIXSRC_GREETING=accelerated"]')
    assert edited != text
    recipe.write_text(edited)
    before = fixtures.step_manifests(project)
    run = _ok(scons(project, *args))
    changed = fixtures.changed(before, fixtures.step_manifests(project))
    assert {p.split("/")[2] for p in changed if p.startswith("build/legs/")} == {gpu}, str(run)
    assert _dist_changes(changed) == {fixsrc_archive(gpu) + s for s in ("", ".sha256", ".json")}
    assert not any("[patch]" in line or "[fetch]" in line for line in run.step_lines())


def test_two_clean_builds_give_identical_archives(project_factory):
    project = project_factory()
    _ok(scons(project, "-j2", *ALL))
    first = _archives(project)
    cache = sorted(p.relative_to(project) for p in (project / ".cache").rglob("*"))
    for name in ("build", "dist"):
        subprocess.run(["rm", "-rf", str(project / name)], check=True)
    _ok(scons(project, "-j2", *ALL))
    second = _archives(project)
    assert sorted(first) == sorted(second)
    for name in first:
        if not name.endswith(".json"):
            assert first[name] == second[name], f"{name} differs between two clean builds"
    assert sorted(p.relative_to(project) for p in (project / ".cache").rglob("*")) == cache


# --------------------------------------------------------------------------- heavy builds


def _wait_for(what: str, ready, child: subprocess.Popen, output: Path, hang_guard: float,
              holds=lambda: True) -> None:
    while not ready():
        assert holds(), f"while waiting until {what}:\n{output.read_text()}"
        assert child.poll() is None, f"scons ended before {what}:\n{output.read_text()}"
        assert time.monotonic() < hang_guard, f"scons hangs before {what}:\n{output.read_text()}"
        time.sleep(0.05)


def test_a_heavy_build_waiting_its_turn_holds_no_job(project_factory, tmp_path, leftovers):
    """-j2 heavy_jobs=1, two upstream builds and a prebuilt leg: while the first build runs (it
    sleeps until the test releases it), SCons does not start the second (they share a
    SideEffect stream), so the other job builds and publishes the prebuilt leg meanwhile. A
    build that waited for a slot inside its job would hold that job: the prebuilt leg would
    wait for the first build and the test would reach its hang guard. No timing assumption:
    each wait ends on a file or scons's exit."""
    project = project_factory(fixsrc_rows=SMALL_ROWS)
    heavy = SMALL_IDS[:2]
    work = {leg: project / f"build/legs/{leg}/work" for leg in heavy}
    prebuilt = project / "dist" / fixbin_archive(FIXBIN_LEG_IDS[0])
    output = tmp_path / "run.log"
    with open(output, "w") as log:
        child = subprocess.Popen(fixtures.scons_argv("-j2", "heavy_jobs=1", *heavy, FIXBIN_LEG_IDS[0]), cwd=project,
                                 start_new_session=True, env=fixtures.child_env({"FIXSRC_BUILD_SLEEP": "86400:"}),
                                 stdout=log, stderr=subprocess.STDOUT)
    hang_guard = time.monotonic() + 600  # far beyond any slow machine: only a hang reaches it

    def sleeping() -> list[str]:
        return [leg for leg in heavy if list(work[leg].glob("*/SLEEPING"))]

    try:
        _wait_for("a build slept", sleeping, child, output, hang_guard)
        first = sleeping()
        _wait_for("the prebuilt leg was published", prebuilt.is_file, child, output, hang_guard,
                  holds=lambda: sleeping() == first)  # else the second build runs beside the first
        assert sleeping() == first, "the second build ran beside the first"
        (next(work[first[0]].glob("*/SLEEPING")).parent / "RELEASE").write_text("")
        _wait_for("the second build slept", lambda: len(sleeping()) == 2, child, output, hang_guard)
        assert (project / f"build/legs/{first[0]}/steps/build.json").is_file(), "the builds overlapped"
        second = next(leg for leg in heavy if leg not in first)
        (next(work[second].glob("*/SLEEPING")).parent / "RELEASE").write_text("")
        child.wait(timeout=max(hang_guard - time.monotonic(), 1))
    finally:
        if child.poll() is None:
            os.killpg(child.pid, signal.SIGKILL)
            child.wait()
    assert child.returncode == 0, output.read_text()
    assert "waiting for a heavy-build slot" not in output.read_text()
    assert {fixsrc_archive(leg) for leg in heavy} <= set(os.listdir(project / "dist"))


# --------------------------------------------------------------------------- a kill in the middle


class DistWatcher(threading.Thread):
    """Polls dist/ while scons runs: only final names (besides hidden entries, which no
    consumer takes for an archive), every archive complete."""

    def __init__(self, dist: Path, allowed: set[str]) -> None:
        super().__init__(daemon=True)
        self.dist, self.allowed = dist, allowed
        self.problems: list[str] = []
        self.seen: set[str] = set()
        self.polls = 0
        self.stop = threading.Event()

    def run(self) -> None:
        while not self.stop.is_set():
            self.poll()
            time.sleep(0.01)
        self.poll()

    def poll(self) -> None:
        self.polls += 1
        try:
            names = os.listdir(self.dist)
        except FileNotFoundError:
            return
        for name in names:
            if name.startswith("."):  # publish's temps and dist/.stale/: never a final archive name
                continue
            self.seen.add(name)
            if name not in self.allowed:
                self.problems.append(f"unexpected {name} in dist/")
                continue
            path = self.dist / name
            try:
                if name.endswith(".zip"):
                    with zipfile.ZipFile(path) as zipped:
                        if zipped.testzip() is not None:
                            self.problems.append(f"corrupt member in {name}")
                elif name.endswith(".json"):
                    json.loads(path.read_text())
                elif name.endswith(".sha256"):
                    if len(path.read_text().split()) != 2:
                        self.problems.append(f"partial {name}")
            except FileNotFoundError:
                continue
            except (zipfile.BadZipFile, ValueError, OSError) as error:
                self.problems.append(f"{name}: {error}")


def test_kill_during_build_then_rerun(project_factory, tmp_path, leftovers):
    """No timing assumption: the gpu build sleeps until it is killed, the wait for it ends
    when it sleeps or scons exits (or hangs), and scons's output goes to a file (a pipe
    nobody reads can fill and stop it). Nothing of the killed run may go on running: the
    sleeping build.py (a day long) once did, for as long as the machine ran."""
    project = project_factory(fixsrc_rows=SMALL_ROWS, fixbin=False)
    args = ("engine=fixsrc", "flavor=all")
    allowed = {fixsrc_archive(leg) + s for leg in SMALL_IDS for s in ("", ".sha256", ".json")}
    dist = project / "dist"
    sleeping = project / f"build/legs/{GPU_LEG}/work/Release/SLEEPING"
    output = tmp_path / "killed-run.log"

    # The gpu leg builds last; its build.py sleeps after configuring, and we kill scons there.
    watcher = DistWatcher(dist, allowed)
    watcher.start()
    with open(output, "w") as log:
        child = subprocess.Popen(fixtures.scons_argv(*args), cwd=project, start_new_session=True,
                                 env=fixtures.child_env({"FIXSRC_BUILD_SLEEP": "86400:gpu-shared"}),
                                 stdout=log, stderr=subprocess.STDOUT)
    hang_guard = time.monotonic() + 1800  # far beyond any slow machine: only a hang reaches it
    try:
        while not sleeping.is_file():
            assert child.poll() is None, f"scons ended before the gpu build slept:\n{output.read_text()}"
            assert time.monotonic() < hang_guard, f"scons hangs before the gpu build:\n{output.read_text()}"
            time.sleep(0.05)
        os.killpg(child.pid, signal.SIGKILL)
        child.wait()
        left = survivors.wait_gone(tmp_path, hang_guard_s=60)
    finally:
        if child.poll() is None:
            os.killpg(child.pid, signal.SIGKILL)
            child.wait()
        watcher.stop.set()
        watcher.join()
    assert child.returncode == -signal.SIGKILL
    assert left == [], "the killed run goes on:\n" + "\n".join(map(str, left))
    assert watcher.problems == []
    assert set(os.listdir(dist)) <= allowed
    assert fixsrc_archive(GPU_LEG) not in os.listdir(dist), "the killed leg published nothing"
    assert not (project / f"build/legs/{GPU_LEG}/steps/build.json").exists()

    watcher = DistWatcher(dist, allowed)
    watcher.start()
    try:
        run = scons(project, *args)
    finally:
        watcher.stop.set()
        watcher.join()
    _ok(run)
    assert watcher.problems == []  # a sampler: tests/unit/steps/test_publish.py lists dist/ at every write
    assert set(os.listdir(dist)) == allowed
    for leg in SMALL_IDS:
        smoke = json.loads((project / f"build/legs/{leg}/steps/smoke.json").read_text())
        assert smoke["status"] == "passed"
        name = fixsrc_archive(leg)
        assert (dist / (name + ".sha256")).read_text().split()[0] == fixtures.sha256_of(dist / name)
    assert _ok(scons(project, "-q", *args)).returncode == 0
