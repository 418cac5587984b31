"""Faults: kill -9 at every step boundary, two runs in one tree, an altered cache, inputs
replaced under the same mtime, publishing across filesystems, environment changes, a
failed rebuild. After each, the next plain run publishes exactly the bytes of a clean
build, or fails naming the cause; never "up to date" on wrong bytes.
"""
from __future__ import annotations

import errno
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

import fixtures
import survivors
from fixtures import LegRow, fixbin_archive, fixsrc_archive, scons

FIXBIN_LEG = fixtures.FIXBIN_LEG_IDS[0]
GPU_LEG = "fixsrc-linux-x86_64-gpu-shared"
GPU_ROWS = (LegRow(kind="shared", flavor="gpu", accelerator="coreml"),)
OTHER_EPOCH = {"SOURCE_DATE_EPOCH": "1700000000"}


def _ok(run: fixtures.Run) -> fixtures.Run:
    assert run.returncode == 0, str(run)
    return run


def _dist(project: Path, archive: str) -> dict[str, bytes]:
    return {name: (project / "dist" / name).read_bytes() for name in (archive, archive + ".sha256", archive + ".json")}


def _up_to_date(project: Path, leg: str) -> None:
    question = scons(project, "-q", leg)
    assert question.returncode == 0, f"not up to date after a plain run:\n{question}"


class Upstream:
    """A private upstream for one test: the fixbin release served from its own directory,
    so the test can publish other bytes under the same name."""

    def __init__(self, tmp_path: Path) -> None:
        self.served = tmp_path / "served"
        self.server = fixtures.Server(self.served).start()
        self.pins = fixtures.make_fixbin_release(self.served)
        (self.name, self.sha), = self.pins.items()
        self.original = (self.served / self.name).read_bytes()
        # Other bytes under the same name: one more header in the release's include/.
        tree = fixtures.fixbin_tree(tmp_path / "other-tree")
        (tree / "include" / "other.h").write_text("#define FIXBIN_OTHER 1\n")
        other = tmp_path / "other" / self.name
        self.other_sha = fixtures.write_tgz(other, tree, self.name.removesuffix(".tgz"))
        self.other = other.read_bytes()

    @property
    def url(self) -> str:
        return f"{self.server.base_url}/{{asset}}-{{version}}.{{ext}}"

    def serve(self, data: bytes) -> None:
        (self.served / self.name).write_bytes(data)

    def stop(self) -> None:
        self.server.stop()


@pytest.fixture
def upstream(tmp_path: Path):
    served = Upstream(tmp_path)
    yield served
    served.stop()


def _fixbin_project(project_factory, upstream: Upstream, name: str = "project") -> Path:
    project = project_factory(name, fixsrc=False, fixbin=False)
    fixtures.write_fixbin(project, upstream.url, upstream.pins)
    return project


def _pin(project: Path, upstream: Upstream, sha: str) -> None:
    engine = project / "engines/fixbin/engine.toml"
    engine.write_text(re.sub(r'"[0-9a-f]{64}"', f'"{sha}"', engine.read_text()))


def _killed(project: Path, step: str, *args: str, env: dict[str, str] | None = None) -> fixtures.Run:
    run = scons(project, *args, env={"ANIRA_FAULT": f"kill-after:{step}", **(env or {})})
    assert run.returncode == -signal.SIGKILL, f"the run was not killed after {step}:\n{run}"
    _nothing_runs(project)
    return run


def _nothing_runs(root: Path) -> None:
    left = survivors.wait_gone(root, hang_guard_s=60)  # a hang guard: each exit is an event
    assert left == [], "the killed run goes on:\n" + "\n".join(map(str, left))


# --------------------------------------------------------------------------- kill -9


FIXBIN_STEPS = ("fetch", "extract", "stage", "archive", "verify", "smoke", "publish")


@pytest.mark.parametrize("step", FIXBIN_STEPS)
def test_kill_9_after_a_step_of_a_run_with_other_inputs(project_factory, upstream, step):
    """The killed run fetched other upstream bytes (a re-published file and its new pin)
    with another SOURCE_DATE_EPOCH; the plain run after it must publish the clean bytes."""
    project = _fixbin_project(project_factory, upstream)
    archive = fixbin_archive(FIXBIN_LEG)
    _ok(scons(project, FIXBIN_LEG))
    clean = _dist(project, archive)

    upstream.serve(upstream.other)
    _pin(project, upstream, upstream.other_sha)
    _killed(project, step, FIXBIN_LEG, env=OTHER_EPOCH)

    upstream.serve(upstream.original)
    _pin(project, upstream, upstream.sha)
    _ok(scons(project, FIXBIN_LEG))
    assert _dist(project, archive) == clean
    _up_to_date(project, FIXBIN_LEG)


@pytest.mark.parametrize("step", ["patch", "build", "stage"])
def test_kill_9_after_a_step_of_a_run_with_another_patch(project_factory, step):
    project = project_factory(fixsrc_rows=GPU_ROWS, fixbin=False)
    archive = fixsrc_archive(GPU_LEG)
    _ok(scons(project, GPU_LEG))
    clean = _dist(project, archive)

    patch = project / "engines/fixsrc/patches/register_coreml.py"
    original = patch.read_text()
    patch.write_text(original.replace(fixtures.PATCH_NOTE, "register_coreml v2"))
    _killed(project, step, GPU_LEG)
    patch.write_text(original)

    _ok(scons(project, GPU_LEG))
    assert _dist(project, archive) == clean
    _up_to_date(project, GPU_LEG)


def test_kill_9_during_a_build_kills_its_children(project_factory, tmp_path, leftovers):
    """The upstream build (and whatever it started) dies with scons, even on kill -9."""
    project = project_factory(fixsrc_rows=GPU_ROWS, fixbin=False)
    sleeping = project / f"build/legs/{GPU_LEG}/work/Release/SLEEPING"
    child = subprocess.Popen(fixtures.scons_argv(GPU_LEG), cwd=project, start_new_session=True,
                             env=fixtures.child_env({"FIXSRC_BUILD_SLEEP": "120:gpu-shared"}),
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 1800  # a hang guard only: CI may be busy
        while not sleeping.is_file():
            assert child.poll() is None and time.monotonic() < deadline, "the build never reached its sleep"
            time.sleep(0.05)
        build_py = int(sleeping.read_text())
        assert build_py in [s.pid for s in survivors.survivors(tmp_path)]
        child.kill()  # SIGKILL to scons alone, not its process group
        child.wait(timeout=30)
        _nothing_runs(tmp_path)
    finally:
        if child.poll() is None:
            os.killpg(child.pid, signal.SIGKILL)
            child.wait()


def _open_for_writing_once_read(fifo: Path, process: subprocess.Popen, log: Path) -> int:
    """The FIFO's write end, once a reader has opened it (the compiler, blocked on it): a
    non-blocking open fails until then."""
    deadline = time.monotonic() + 1800  # a hang guard only: CI may be busy
    while True:
        try:
            return os.open(fifo, os.O_WRONLY | os.O_NONBLOCK)
        except OSError as error:
            if error.errno != errno.ENXIO:
                raise
        assert process.poll() is None and time.monotonic() < deadline, log.read_text()
        time.sleep(0.05)


def test_kill_9_of_the_process_group_during_a_compile_leaves_no_cmake_ninja_or_compiler(project_factory, tmp_path,
                                                                                       leftovers):
    """The real LibTorch leg's case on the fixture: `kill -9 -<pgid>` of scons while Ninja runs
    the compiler once left `cmake --build`, `ninja` and `cc1` running, re-parented to init, in
    the group the supervisor had made for them. The compiler here reads a FIFO (`-include`,
    through CMAKE_C_COMPILER_LAUNCHER), so the compile is in progress whatever the machine's
    speed, and would go on once the FIFO is closed. Only the build's own sources read it, not
    CMake's compiler checks: the compile is one of `cmake --build`."""
    project = project_factory(fixsrc_rows=GPU_ROWS, fixbin=False)
    fifo, launcher, log = tmp_path / "header.fifo", tmp_path / "cc-launcher", tmp_path / "scons.log"
    os.mkfifo(fifo)
    launcher.write_text(f'#!/bin/sh\ncase "$*" in */src/util.c*) exec "$@" -include {fifo};; esac\nexec "$@"\n')
    launcher.chmod(0o755)
    with open(log, "w") as output:
        child = subprocess.Popen(fixtures.scons_argv(GPU_LEG), cwd=project, start_new_session=True,
                                 env=fixtures.child_env({"CMAKE_C_COMPILER_LAUNCHER": str(launcher)}),
                                 stdout=output, stderr=subprocess.STDOUT)
    writer = -1
    try:
        writer = _open_for_writing_once_read(fifo, child, log)
        running = survivors.survivors(tmp_path)
        assert {"cmake", "ninja", "cc1"} <= {s.name for s in running}, running
        assert any(s.name == "cmake" and " --build " in s.argv for s in running), running
        os.killpg(child.pid, signal.SIGKILL)  # scons's whole group, as `kill -9 -<pgid>`
        child.wait(timeout=30)
        _nothing_runs(tmp_path)
    finally:
        if writer >= 0:
            os.close(writer)
        if child.poll() is None:
            os.killpg(child.pid, signal.SIGKILL)
            child.wait()


# --------------------------------------------------------------------------- one tree, two runs


def _wait_for(condition, process: subprocess.Popen, log: Path) -> None:
    """Poll `condition` while `process` runs (no deadline but a hang guard: CI may be busy)."""
    deadline = time.monotonic() + 1800
    while not condition():
        assert process.poll() is None and time.monotonic() < deadline, log.read_text()
        time.sleep(0.05)


def test_two_concurrent_runs_in_one_tree(project_factory, leftovers):
    project = project_factory(fixsrc_rows=GPU_ROWS, fixbin=False)
    reference = project_factory("reference", fixsrc_rows=GPU_ROWS, fixbin=False)
    _ok(scons(reference, GPU_LEG))
    archive = fixsrc_archive(GPU_LEG)

    sleeping = project / f"build/legs/{GPU_LEG}/work/Release/SLEEPING"
    # The build pauses until the test creates RELEASE (the build reads the variable: both runs
    # pass the same), so no step of the test depends on how fast this machine is.
    pause = {"FIXSRC_BUILD_SLEEP": "3600:gpu-shared"}
    logs = project.parent / "logs"
    logs.mkdir()
    with open(logs / "first", "w") as first_log, open(logs / "second", "w") as second_log:
        first = subprocess.Popen(fixtures.scons_argv(GPU_LEG), cwd=project, text=True, env=fixtures.child_env(pause),
                                 stdout=first_log, stderr=subprocess.STDOUT)
        _wait_for(lambda: sleeping.is_file(), first, logs / "first")
        refused = scons(project, GPU_LEG, "wait=0", env=pause)
        assert refused.returncode == 2 and f"pid {first.pid}" in refused.stderr and "in use by" in refused.stderr, \
            str(refused)
        second = subprocess.Popen(fixtures.scons_argv(GPU_LEG), cwd=project, text=True, env=fixtures.child_env(pause),
                                  stdout=second_log, stderr=subprocess.STDOUT)
        _wait_for(lambda: "waiting for it to finish" in (logs / "second").read_text(), second, logs / "second")
        (sleeping.parent / "RELEASE").touch()
        assert first.wait(timeout=1800) == 0, (logs / "first").read_text()
        assert second.wait(timeout=1800) == 0, (logs / "second").read_text()
    second_output = (logs / "second").read_text()
    assert f"pid {first.pid}" in second_output, second_output
    assert fixtures.step_lines(second_output) == [], "the second run redid what the first had finished:\n" + \
        second_output
    # The manifests name each project's own paths (the commands that ran); the bytes are the same.
    assert {name: data for name, data in _dist(project, archive).items() if not name.endswith(".json")} == \
        {name: data for name, data in _dist(reference, archive).items() if not name.endswith(".json")}


def test_temps_of_a_killed_run_are_swept(project_factory, upstream):
    project = _fixbin_project(project_factory, upstream)
    _ok(scons(project, FIXBIN_LEG))
    dead = 4194000 + os.getpid() % 1000  # above pid_max on this kind of machine: never alive
    left = [project / "build/extract" / f"fixbin-release-x.json.tmp-{dead}",
            project / "dist" / f".{fixbin_archive(FIXBIN_LEG)}.tmp-{dead}"]
    (project / "build/extract" / f"tree.tmp-{dead}").mkdir()
    for path in left:
        path.write_text("partial")
    run = _ok(scons(project, FIXBIN_LEG))
    assert not any(p.exists() for p in left) and not (project / "build/extract" / f"tree.tmp-{dead}").exists()
    assert "left by an interrupted run" in run.stdout


# --------------------------------------------------------------------------- inputs that change


def test_an_altered_cache_entry_is_evicted_and_fetched_anew(project_factory, upstream):
    project = _fixbin_project(project_factory, upstream)
    archive = fixbin_archive(FIXBIN_LEG)
    _ok(scons(project, FIXBIN_LEG))
    clean = _dist(project, archive)
    cached = project / ".cache/downloads/sha256" / upstream.sha / upstream.name
    data = bytearray(cached.read_bytes())
    data[len(data) // 2] ^= 0x01  # one flipped bit, same size, in place
    cached.write_bytes(bytes(data))
    requests = len(upstream.server.requests)

    run = _ok(scons(project, FIXBIN_LEG))
    assert "the cached copy was altered" in run.stderr, str(run)
    assert cached.read_bytes() == upstream.original
    assert len(upstream.server.requests) == requests + 1
    assert _dist(project, archive) == clean
    _up_to_date(project, FIXBIN_LEG)


@pytest.mark.parametrize("same_size", [False, True], ids=["other size", "same size"])
def test_an_origin_replaced_under_the_same_mtime_is_rebuilt(project_factory, upstream, tmp_path, same_size):
    project = _fixbin_project(project_factory, upstream)
    origin = tmp_path / "origin" / upstream.name
    origin.parent.mkdir()
    origin.write_bytes(upstream.original)
    _ok(scons(project, FIXBIN_LEG, f"origin={origin}"))
    stat = origin.stat()

    replacement = upstream.other
    if same_size:  # other bytes, same length: flip one byte of the gzip payload
        replacement = bytearray(upstream.original)
        replacement[len(replacement) // 2] ^= 0x01
        replacement = bytes(replacement)
    else:
        assert len(replacement) != len(upstream.original)
    origin.write_bytes(replacement)
    os.utime(origin, ns=(stat.st_atime_ns, stat.st_mtime_ns))  # touch -r the old file
    assert origin.stat().st_mtime_ns == stat.st_mtime_ns

    run = scons(project, FIXBIN_LEG, f"origin={origin}")
    assert run.step_lines(), "an origin with other bytes was taken for up to date"
    if same_size:  # a corrupt gzip stream: fails naming the cause, and the old archive is withdrawn
        assert run.returncode != 0 and "cannot extract" in run.stderr, str(run)
        assert not (project / "dist" / fixbin_archive(FIXBIN_LEG)).exists(), "the old archive stayed in dist/"
    else:
        _ok(run)
        with __import__("zipfile").ZipFile(project / "dist" / fixbin_archive(FIXBIN_LEG)) as zipped:
            assert "include/other.h" in zipped.namelist()


@pytest.mark.parametrize("tree", ["build/extract", "build/legs"], ids=["extraction", "stage"])
def test_an_edit_in_place_in_an_extracted_or_staged_tree_is_undone(project_factory, upstream, tree):
    """A same-size edit under the same mtime of a file the stage hard-links (so both trees
    see it), then a run with other settings and a plain run: dist/ holds the clean bytes."""
    project = _fixbin_project(project_factory, upstream)
    archive = fixbin_archive(FIXBIN_LEG)
    _ok(scons(project, FIXBIN_LEG))
    clean = _dist(project, archive)
    header = next(path for path in sorted((project / tree).rglob("*.h"))
                  if "/tree/" in str(path) or "/stage/" in str(path))
    stat = header.stat()
    text = header.read_bytes()
    edited = text.replace(b"fixbin", b"fixbIn", 1)
    assert edited != text and len(edited) == len(text)
    header.write_bytes(edited)
    os.utime(header, ns=(stat.st_atime_ns, stat.st_mtime_ns))

    assert scons(project, "-q", FIXBIN_LEG).returncode != 0, "an edited tree was taken for up to date"
    _ok(scons(project, FIXBIN_LEG, env=OTHER_EPOCH))
    _ok(scons(project, FIXBIN_LEG))
    assert _dist(project, archive) == clean
    _up_to_date(project, FIXBIN_LEG)


@pytest.mark.parametrize("start", ["in the project", "-C", "-u"])
def test_a_relative_origin_is_read_from_where_scons_started(project_factory, upstream, tmp_path, start):
    """Relative to the directory the user typed it in, and tracked like an absolute one:
    other bytes under the same relative name rebuild."""
    project = _fixbin_project(project_factory, upstream)
    where = {"in the project": project, "-C": tmp_path, "-u": project / "engines"}[start]
    flags = {"in the project": (), "-C": ("-C", str(project)), "-u": ("-u",)}[start]
    origin = where / "in" / upstream.name
    origin.parent.mkdir()
    origin.write_bytes(upstream.original)
    relative = f"origin=in/{upstream.name}"
    _ok(scons(project, *flags, FIXBIN_LEG, relative, cwd=where))
    assert _ok(scons(project, *flags, FIXBIN_LEG, relative, cwd=where)).step_lines() == []

    origin.write_bytes(upstream.other)
    run = _ok(scons(project, *flags, FIXBIN_LEG, relative, cwd=where))
    assert run.step_lines(), "an origin with other bytes was taken for up to date"
    with __import__("zipfile").ZipFile(project / "dist" / fixbin_archive(FIXBIN_LEG)) as zipped:
        assert "include/other.h" in zipped.namelist()


def test_a_relative_binary_cache_is_written_and_read_where_scons_started(project_factory, upstream, tmp_path):
    project = _fixbin_project(project_factory, upstream)
    _ok(scons(project, "-C", str(project), FIXBIN_LEG, "binary_cache=relcache", "binary_cache_trust=unsigned", cwd=tmp_path))
    assert [p.name for p in (tmp_path / "relcache").iterdir() if not p.name.startswith(".")], "nothing stored"
    assert not (project / "relcache").exists() and not (project / "site_scons/relcache").exists()
    for owned in ("build", "dist"):
        __import__("shutil").rmtree(project / owned)
    run = _ok(scons(project, "-C", str(project), FIXBIN_LEG, "binary_cache=relcache", "binary_cache_trust=unsigned", cwd=tmp_path))
    assert any(line.startswith("[restore]") for line in run.step_lines()), str(run)


def test_environment_the_steps_pass_on_is_in_their_signature(project_factory, upstream):
    project = project_factory(fixsrc_rows=(LegRow(kind="shared"), *GPU_ROWS), fixbin=False)
    leg = "fixsrc-linux-x86_64-shared"
    _ok(scons(project, leg))
    run = _ok(scons(project, leg, env={"CMAKE_C_COMPILER_LAUNCHER": "env"}))
    steps = {line.split()[0] for line in run.step_lines()}
    assert {"[build]", "[smoke]"} <= steps, str(run)
    assert _ok(scons(project, leg, env={"CMAKE_C_COMPILER_LAUNCHER": "env"})).step_lines() == []


def test_a_path_that_finds_the_same_tools_reruns_nothing(project_factory, tmp_path):
    """An activated virtual environment puts its bin/ first on PATH: the tools found are the
    same programs, so no step reruns. A PATH that finds another compiler reruns the build."""
    project = project_factory(fixsrc_rows=(LegRow(kind="shared"), *GPU_ROWS), fixbin=False)
    leg = "fixsrc-linux-x86_64-shared"
    _ok(scons(project, leg))
    venv_bin = tmp_path / "venv" / "bin"
    venv_bin.mkdir(parents=True)
    for name in ("python3", "python"):
        (venv_bin / name).symlink_to(sys.executable)
    path = f"{venv_bin}{os.pathsep}{os.environ['PATH']}"
    assert _ok(scons(project, leg, env={"PATH": path, "VIRTUAL_ENV": str(venv_bin.parent)})).step_lines() == []

    wrapper = tmp_path / "other-cc" / "cc"
    wrapper.parent.mkdir()
    wrapper.write_text(f"#!/bin/sh\nexec {shutil.which('cc')} \"$@\"\n")
    wrapper.chmod(0o755)
    run = _ok(scons(project, leg, env={"PATH": f"{wrapper.parent}{os.pathsep}{os.environ['PATH']}"}))
    assert "[build]" in {line.split()[0] for line in run.step_lines()}, str(run)
    # ...and says why, once per step that reruns: the compiler it finds is another program.
    assert f"[build] {leg} reruns: tools.cc: " in run.stdout and str(wrapper.parent)[:10] in run.stdout, run.stdout


# --------------------------------------------------------------------------- dist/


def test_a_failed_rebuild_withdraws_the_old_archive(project_factory, upstream):
    project = _fixbin_project(project_factory, upstream)
    archive = fixbin_archive(FIXBIN_LEG)
    _ok(scons(project, FIXBIN_LEG))
    smoke = project / "smoke/fixbin/smoke.c"
    original = smoke.read_text()
    smoke.write_text(original.replace("fixbin_mul(6, 7) != 42", "fixbin_mul(6, 7) != 43"))

    run = scons(project, FIXBIN_LEG)
    assert run.returncode != 0
    assert not (project / "dist" / archive).exists()
    assert (project / "dist/.stale" / archive).is_file()
    lines = run.stdout.strip().splitlines()
    assert any(line.split()[:2] == ["failed", FIXBIN_LEG] for line in lines), run.stdout
    assert any(line.split()[:2] == ["withdrawn", FIXBIN_LEG] for line in lines), run.stdout
    assert lines[-1].startswith("the failure's log: build/legs/") and lines[-1].endswith(".log"), run.stdout
    assert (project / lines[-1].split(": ", 1)[1]).is_file()

    smoke.write_text(original)
    _ok(scons(project, FIXBIN_LEG))
    assert (project / "dist" / archive).is_file() and not (project / "dist/.stale").exists()


def test_sidecars_a_killed_tar_gz_publish_left_are_removed_by_the_next_run(project_factory, upstream):
    """A kill between the sidecars' renames and the archive's leaves sidecars without their
    archive (format=tar.gz); the next plain run removes them before it builds anything."""
    project = _fixbin_project(project_factory, upstream)
    _ok(scons(project, FIXBIN_LEG, "format=tar.gz"))
    archive = project / "dist" / fixbin_archive(FIXBIN_LEG).replace(".zip", ".tar.gz")
    clean = archive.read_bytes()
    archive.unlink()  # what the kill leaves: the new sidecars, no archive
    run = _ok(scons(project, FIXBIN_LEG, "format=tar.gz"))
    assert f"removed {archive.name}.json, {archive.name}.sha256 (their archive is missing)" in run.stdout, str(run)
    assert archive.read_bytes() == clean
    assert sorted(p.name for p in (project / "dist").iterdir() if p.is_file()) == sorted(
        [archive.name, archive.name + ".json", archive.name + ".sha256"])


def test_publish_to_another_filesystem(project_factory, upstream):
    """dist/ on a tmpfs, build/ on the disk: a rename between them fails (EXDEV)."""
    project = _fixbin_project(project_factory, upstream)
    dist = project / "dist"
    dist.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64m", "tmpfs", str(dist)],
                             capture_output=True, text=True)
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here ({mounted.stderr.strip()}); "
                    "tests/unit/steps/test_publish.py covers EXDEV with a stand-in")
    try:
        run = _ok(scons(project, FIXBIN_LEG))
        archive = fixbin_archive(FIXBIN_LEG)
        assert os.stat(dist).st_dev != os.stat(project / "build").st_dev
        assert (dist / (archive + ".sha256")).read_text().split()[0] == fixtures.sha256_of(dist / archive)
        assert [name for name in os.listdir(dist) if ".tmp-" in name] == []
        assert "published" in run.stdout
        _up_to_date(project, FIXBIN_LEG)
    finally:
        subprocess.run(["umount", str(dist)], check=False)


def test_published_modes_and_bytes_do_not_follow_the_umask(project_factory, upstream):
    """Built under umask 000 and under umask 077: dist/ 0755, each published file 0644, and
    the same archive bytes as under 022 (members' modes are normalised)."""
    archive = fixbin_archive(FIXBIN_LEG)
    published: dict[int, dict[str, bytes]] = {}
    for mask in (0o022, 0o000, 0o077):
        project = _fixbin_project(project_factory, upstream, f"umask-{mask:03o}")
        _ok(scons(project, FIXBIN_LEG, umask=mask))
        dist = project / "dist"
        assert os.stat(dist).st_mode & 0o7777 == 0o755, mask
        assert {p.name: p.stat().st_mode & 0o7777 for p in dist.iterdir()} == dict.fromkeys(_dist(project, archive),
                                                                                         0o644), mask
        published[mask] = _dist(project, archive)
    assert published[0o000][archive] == published[0o077][archive] == published[0o022][archive]
    assert published[0o000][archive + ".sha256"] == published[0o022][archive + ".sha256"]


def test_gc_removes_what_no_leg_references(project_factory, upstream):
    project = _fixbin_project(project_factory, upstream)
    _ok(scons(project, FIXBIN_LEG))
    downloads = sorted((project / "build/downloads").glob("*.json"))
    upstream.serve(upstream.other)
    _pin(project, upstream, upstream.other_sha)
    _ok(scons(project, FIXBIN_LEG))  # the new pin's download and extraction; the old ones linger

    run = _ok(scons(project, "gc=1"))
    assert f"sha256/{upstream.sha}" in run.stdout and "gc: removed" in run.stdout, str(run)
    assert not (project / ".cache/downloads/sha256" / upstream.sha).exists()
    assert (project / ".cache/downloads/sha256" / upstream.other_sha).is_dir()
    assert all(path.exists() for path in downloads)  # keyed without the pin: still referenced
    assert _ok(scons(project, "gc=1")).stdout.strip().endswith("gc: nothing unreferenced")
    _up_to_date(project, FIXBIN_LEG)


def test_gc_keeps_what_the_last_published_run_of_a_leg_used(project_factory, upstream, tmp_path):
    """The quick start's way: a leg built from an origin= file no data names. gc=1 keeps its
    input, and the same command again does nothing."""
    project = _fixbin_project(project_factory, upstream)
    origin = tmp_path / "in" / upstream.name
    origin.parent.mkdir()
    origin.write_bytes(upstream.other)  # other bytes than the pin: only this run names them
    _ok(scons(project, FIXBIN_LEG, f"origin={origin}"))
    run = _ok(scons(project, "gc=1"))
    assert "gc: finding what no leg" in run.stdout, str(run)
    assert (project / ".cache/downloads/sha256" / upstream.other_sha).is_dir(), run.stdout
    assert _ok(scons(project, FIXBIN_LEG, f"origin={origin}")).step_lines() == []


@pytest.mark.parametrize("version", ["", "version=2.0.0"], ids=["as built", "another version= than the build's"])
def test_clean_removes_the_legs_places_whatever_version_built_them(project_factory, upstream, version):
    project = _fixbin_project(project_factory, upstream)
    _ok(scons(project, FIXBIN_LEG))
    archive = fixbin_archive(FIXBIN_LEG)
    dry = _ok(scons(project, "-c", "-n", FIXBIN_LEG, *filter(None, [version])))
    assert "scons -c: would remove 1 build tree and 3 files in dist/" in dry.stdout, str(dry)
    assert (project / "dist" / archive).is_file() and (project / f"build/legs/{FIXBIN_LEG}").is_dir()
    run = _ok(scons(project, "-c", FIXBIN_LEG, *filter(None, [version])))
    assert "scons -c: removed 1 build tree and 3 files in dist/" in run.stdout, str(run)
    assert "Removed" not in run.stdout and len(run.stdout.splitlines()) == 1, str(run)
    assert not (project / f"build/legs/{FIXBIN_LEG}").exists() and not list((project / "dist").glob("fixbin-*"))
    assert (project / "build/downloads").is_dir(), "shared downloads are gc's to remove"


def test_a_bare_clean_says_nothing_is_selected(project_factory, upstream):
    project = _fixbin_project(project_factory, upstream)
    _ok(scons(project, FIXBIN_LEG))
    run = _ok(scons(project, "-c"))
    assert "scons -c: nothing selected, nothing removed" in run.stdout, str(run)
    assert (project / "dist" / fixbin_archive(FIXBIN_LEG)).is_file()
