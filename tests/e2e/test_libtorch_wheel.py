"""The LibTorch Linux x86_64 CPU leg end to end, from PyTorch's CPU wheel (issue: LibTorch).

The wheel is this leg's upstream origin: its `torch/{include,lib,share,bin}` layout is an
accepted root of the release zip's `libtorch/`, so the normal fetch → extract → stage →
archive → verify → smoke path runs unchanged, with the version overridden to the wheel's.

PyTorch's LICENSE and NOTICE come from the tag's files, whose pins are not recorded yet
(docs/licenses-and-provenance.md): here they are origins too, the wheel's own LICENSE (its
dist-info holds PyTorch's) and, for NOTICE, which only PyTorch's repository holds, a
stand-in text this test writes.
"""
from __future__ import annotations

import json
import stat
import zipfile

import pytest

import inputs
from backends import sbom
from backends.model.matrix import load_matrix
from backends.model.recipes import leg_engine, plan_leg
from scratch import Scons, scratch_project

pytestmark = [pytest.mark.e2e, pytest.mark.slow]
LEG = "libtorch-linux-x86_64-shared"
ARCHIVE = "libtorch-2.13.0-Linux-x86_64-shared.zip"
NOTICE_STAND_IN = "Stand-in for PyTorch's NOTICE at v2.13.0 (tests/e2e/test_libtorch_wheel.py)\n"


@pytest.fixture(scope="module")
def built(tmp_path_factory, e2e_cache):
    wheel = inputs.torch_cpu_wheel(e2e_cache)
    project = scratch_project(tmp_path_factory.mktemp("libtorch"), copied=("engines/libtorch",))
    scons = Scons(project, tmp_path_factory.mktemp("cache"))
    texts = tmp_path_factory.mktemp("texts")
    with zipfile.ZipFile(wheel) as handle:
        (texts / "LICENSE").write_bytes(handle.read("torch-2.13.0+cpu.dist-info/licenses/LICENSE"))
    (texts / "NOTICE").write_text(NOTICE_STAND_IN)
    args = (LEG, "version=2.13.0", f"origin={wheel},license={texts / 'LICENSE'},notice={texts / 'NOTICE'}")
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


def test_license_texts_are_in_the_archive(built):
    scons, _, _, wheel = built
    with zipfile.ZipFile(scons.project / "dist" / ARCHIVE) as archive, zipfile.ZipFile(wheel) as origin:
        names = set(archive.namelist())
        assert archive.read("share/licenses/libtorch/LICENSE") == origin.read(
            "torch-2.13.0+cpu.dist-info/licenses/LICENSE")
        assert archive.read("share/licenses/libtorch/NOTICE").decode() == NOTICE_STAND_IN
        # The wheel's third-party license texts come along.
        assert "share/licenses/libtorch/third_party/XNNPACK/LICENSE" in names


def test_the_sbom_is_valid_and_lists_every_input_of_the_plan(built):
    scons, *_ = built
    manifest = json.loads((scons.project / "dist" / (ARCHIVE + ".json")).read_text())
    with zipfile.ZipFile(scons.project / "dist" / ARCHIVE) as archive:
        member = json.loads(archive.read(manifest["sbom"]["path"]))
    document = manifest["sbom"]["document"]
    assert member == document and sbom.problems(document) == []
    matrix = load_matrix(scons.project)
    plan = plan_leg(matrix.leg(LEG), leg_engine(matrix, matrix.leg(LEG), "2.13.0"), matrix)
    inputs_ = {p["name"]: p for p in document["packages"] if p["SPDXID"].startswith("SPDXRef-Input-")}
    assert set(inputs_) == {f"libtorch-{d.name}" for d in plan.downloads} == \
        {"libtorch-release", "libtorch-license", "libtorch-notice"}
    recorded = {s["name"]: s["sha256"] for s in manifest["sources"]}
    for download in plan.downloads:
        package = inputs_[f"libtorch-{download.name}"]
        assert package["downloadLocation"] == download.url
        assert package["checksums"] == [{"algorithm": "SHA256", "checksumValue": recorded[download.name]}]
        assert package["comment"].startswith("built from origin=")  # by name: no local path in the archive
    archive_package = next(p for p in document["packages"] if p["SPDXID"] == "SPDXRef-Package-archive")
    assert archive_package["versionInfo"] == "2.13.0" and archive_package["licenseDeclared"] == "BSD-3-Clause"
    assert {"referenceCategory": "OTHER", "referenceLocator": "none", "referenceType": "anira-accelerator"} in \
        archive_package["externalRefs"]
    assert str(scons.project) not in json.dumps(document)


def test_the_archive_has_the_shape_anira_relies_on(built):
    scons, *_ = built
    with zipfile.ZipFile(scons.project / "dist" / ARCHIVE) as archive:
        tops = {name.split("/", 1)[0] for name in archive.namelist()}
    assert tops <= {"include", "lib", "share", "bin"} and {"include", "lib", "share"} <= tops
