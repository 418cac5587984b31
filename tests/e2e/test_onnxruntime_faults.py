"""kill -9 at every step boundary of the real ONNX Runtime Linux x86_64 leg.

Each killed run starts from an empty build/ and dist/ with another SOURCE_DATE_EPOCH (other
archive bytes from the archive step on) and is killed right after one step; the plain run
that follows must publish exactly the bytes of a clean build and then be up to date. The
input is the release tarball tests/e2e/inputs.py assembles (PyPI's 1.26.0 library, Debian's
headers), fed offline from a mirror as in test_onnxruntime_release.py.
"""
from __future__ import annotations

import shutil
import signal

import pytest

import inputs
from backends.pins.engine_toml import record_pin
from backends.util.files import sha256_file
from scratch import Scons, scratch_project

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

LEG = "onnxruntime-linux-x86_64-shared"
ARCHIVE = "onnxruntime-1.26.0-Linux-x86_64-shared.zip"
STEPS = ("fetch", "extract", "stage", "archive", "verify", "smoke", "publish")


def _dist(project) -> dict[str, bytes]:
    return {name: (project / "dist" / name).read_bytes() for name in (ARCHIVE, ARCHIVE + ".sha256", ARCHIVE + ".json")}


def _leg(tmp_path_factory, e2e_cache):
    release = inputs.ort_linux_x64_release(e2e_cache)
    project = scratch_project(tmp_path_factory.mktemp("ort-faults"), copied=("engines/onnxruntime",))
    record_pin(project / "engines/onnxruntime/engine.toml", release.name, sha256_file(release))
    mirror = tmp_path_factory.mktemp("mirror")
    (mirror / release.name).symlink_to(release)
    scons = Scons(project, tmp_path_factory.mktemp("cache"))
    return release, project, scons, (LEG, f"mirror={mirror}", "offline=1")


def test_kill_9_after_every_step_then_a_plain_run_publishes_the_clean_bytes(tmp_path_factory, e2e_cache):
    _, project, scons, args = _leg(tmp_path_factory, e2e_cache)
    scons(*args)
    clean = _dist(project)
    for step in STEPS:
        shutil.rmtree(project / "build")
        shutil.rmtree(project / "dist")
        killed = scons.run(*args, env={"ANIRA_FAULT": f"kill-after:{step}", "SOURCE_DATE_EPOCH": "1700000000"})
        assert killed.returncode == -signal.SIGKILL, f"not killed after {step}:\n{killed.stdout}\n{killed.stderr}"
        scons(*args)
        assert _dist(project) == clean, f"after a kill -9 after {step}, dist/ differs from a clean build"
        assert scons.run("-q", *args).returncode == 0, f"not up to date after the run that followed {step}"


def test_a_cached_input_altered_in_place_is_fetched_anew(tmp_path_factory, e2e_cache):
    release, project, scons, args = _leg(tmp_path_factory, e2e_cache)
    scons(*args)
    clean = _dist(project)
    cached = scons.cache / "sha256" / sha256_file(release) / release.name
    with open(cached, "r+b") as handle:  # one flipped bit, same size, in place
        handle.seek(cached.stat().st_size // 2)
        byte = handle.read(1)
        handle.seek(-1, 1)
        handle.write(bytes([byte[0] ^ 1]))
    result = scons(*args)
    assert "the cached copy was altered" in result.stderr
    assert sha256_file(cached) == sha256_file(release)
    assert _dist(project) == clean
