"""The LibTorch Linux x86_64 CPU leg end to end, from PyTorch's CPU wheel (issue: LibTorch).

The wheel is this leg's upstream origin: its `torch/{include,lib,share,bin}` layout is an
accepted root of the release zip's `libtorch/`, so the normal fetch → extract → stage →
archive → verify → smoke path runs unchanged, with the version overridden to the wheel's.
"""
from __future__ import annotations

import json
import stat
import zipfile

import pytest

import inputs
from scratch import Scons, scratch_project

pytestmark = [pytest.mark.e2e, pytest.mark.slow]
LEG = "libtorch-linux-x86_64-shared"
ARCHIVE = "libtorch-2.13.0-Linux-x86_64-shared.zip"


@pytest.fixture(scope="module")
def built(tmp_path_factory, e2e_cache):
    wheel = inputs.torch_cpu_wheel(e2e_cache)
    project = scratch_project(tmp_path_factory.mktemp("libtorch"), copied=("engines/libtorch",))
    scons = Scons(project, tmp_path_factory.mktemp("cache"))
    args = (LEG, "version=2.13.0", f"origin={wheel}")
    first = scons(*args)
    return scons, args, first, wheel


def test_archive_is_verified_and_smoke_tested(built):
    scons, _, first, _ = built
    dist = scons.project / "dist"
    assert (dist / ARCHIVE).is_file()
    smoke = json.loads((scons.project / "build/legs" / LEG / "steps/smoke.json").read_text())
    assert smoke["status"] == "passed"
    assert any("PASS" in line for line in smoke["output"])
    digest = (dist / (ARCHIVE + ".sha256")).read_text().split()[0]
    manifest = json.loads((dist / (ARCHIVE + ".json")).read_text())
    assert manifest["sha256"] == digest and manifest["leg"]["id"] == LEG
    assert manifest["sources"][0]["origin"].endswith(".whl")


def test_archive_layout(built):
    scons, *_ = built
    with zipfile.ZipFile(scons.project / "dist" / ARCHIVE) as archive:
        infos = {i.filename: i for i in archive.infolist()}
    names = set(infos)
    assert "share/cmake/Torch/TorchConfig.cmake" in names
    assert "lib/libtorch_cpu.so" in names and "include/torch/csrc/api/include/torch/torch.h" in names
    assert not any(n.startswith(("torch/", "libtorch/")) for n in names)  # no top-level directory
    assert "lib/libtorch_python.so" not in names and "bin/test_api" not in names
    assert stat.S_IMODE(infos["bin/torch_shm_manager"].external_attr >> 16) & 0o111  # exec bit kept


def test_second_run_does_nothing(built):
    scons, args, *_ = built
    assert scons("-q", *args, check=False).returncode == 0
    assert scons.steps_run(scons(*args)) == []


def test_strip_rule_change_reruns_stage_to_archive_only(built):
    scons, args, *_ = built
    recipe = scons.project / "engines/libtorch/recipe.py"
    original = recipe.read_text()
    recipe.write_text(original.replace('"bin/upgrader_models/**",', '"bin/upgrader_models/**", "bin/protoc*",'))
    try:
        rerun = scons(*args)
    finally:
        recipe.write_text(original)
    assert scons.steps_run(rerun) == ["stage", "archive", "verify", "smoke", "publish"]
    with zipfile.ZipFile(scons.project / "dist" / ARCHIVE) as archive:
        assert not [n for n in archive.namelist() if n.startswith("bin/protoc")]
