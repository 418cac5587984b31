"""The ONNX Runtime Linux legs end to end on a real ONNX Runtime library.

The release archive is assembled from what the registries carry (PyPI's library at the pin,
Debian's released headers no newer than it) in upstream's release layout, pinned in a
copy of engine.toml, and fed through the normal fetch path from a mirror, offline.
"""
from __future__ import annotations

import json
import shutil
import zipfile

import pytest

import inputs
from backends.model.matrix import load_matrix
from backends.model.recipes import plan_leg
from backends.pins.engine_toml import record_pin
from backends.steps import sbom
from backends.util.files import sha256_file
from scratch import Scons, scratch_project

pytestmark = [pytest.mark.e2e]


def _project_with_pin(tmp_path_factory, release):
    project = scratch_project(tmp_path_factory.mktemp("ort"), copied=("engines/onnxruntime",))
    record_pin(project / "engines/onnxruntime/engine.toml", release.name, sha256_file(release))
    mirror = tmp_path_factory.mktemp("mirror")
    (mirror / release.name).symlink_to(release)
    return project, mirror


@pytest.fixture(scope="module")
def cpu(tmp_path_factory, e2e_cache):
    release = inputs.ort_linux_x64_release(e2e_cache)
    project, mirror = _project_with_pin(tmp_path_factory, release)
    scons = Scons(project, tmp_path_factory.mktemp("cache"))
    args = ("onnxruntime-linux-x86_64-shared", f"mirror={mirror}", "offline=1")
    return scons, args, scons(*args)


V = inputs.ORT_VERSION
ARCHIVE = f"onnxruntime-{V}-Linux-x86_64-shared.zip"
EM_AARCH64 = 183  # ELF e_machine


def test_verified_and_smoke_tested(cpu):
    scons, _, result = cpu
    assert "[verify] onnxruntime-linux-x86_64-shared done" in result.stdout
    smoke = json.loads((scons.project / "build/legs/onnxruntime-linux-x86_64-shared/steps/smoke.json").read_text())
    assert smoke["status"] == "passed", smoke
    assert any("PASS" in line for line in smoke["output"])


def test_archive_layout_and_curation(cpu):
    scons, *_ = cpu
    with zipfile.ZipFile(scons.project / "dist" / ARCHIVE) as archive:
        infos = {i.filename: i for i in archive.infolist()}
    assert f"lib/libonnxruntime.so.{V}" in infos
    for link, target in (("lib/libonnxruntime.so.1", f"libonnxruntime.so.{V}".encode()),
                         ("lib/libonnxruntime.so", b"libonnxruntime.so.1")):
        assert (infos[link].external_attr >> 16) & 0o170000 == 0o120000
        with zipfile.ZipFile(scons.project / "dist" / ARCHIVE) as archive:
            assert archive.read(link) == target
    assert "include/onnxruntime_cxx_api.h" in infos
    assert "lib/libonnxruntime_providers_shared.so" not in infos  # CPU legs ship no bridge
    assert not [n for n in infos if n.endswith(("coreml_provider_factory.h", "dml_provider_factory.h"))]


def test_manifest_records_the_pinned_source(cpu):
    scons, *_ = cpu
    manifest = json.loads((scons.project / "dist" / (ARCHIVE + ".json")).read_text())
    source = manifest["sources"][0]
    assert source["filename"] == f"onnxruntime-linux-x64-{V}.tgz"
    assert source["url"].startswith(f"https://github.com/microsoft/onnxruntime/releases/download/v{V}/")
    pin = (scons.project / "engines/onnxruntime/engine.toml").read_text()
    assert f'"onnxruntime-linux-x64-{V}.tgz" = "{source["sha256"]}"' in pin
    assert "path" not in source and "origin" not in source  # a mirror is transport: the bytes are pinned


def test_rerun_is_a_no_op(cpu):
    scons, args, _ = cpu
    assert scons("-q", *args, check=False).returncode == 0


def test_another_releases_tarball_under_a_version_override_is_not_published(tmp_path_factory, e2e_cache):
    """`version=1.27.0` with the 1.26.0 tarball as origin: the archive would be named
    onnxruntime-1.27.0-... and hold libonnxruntime.so.1.26.0."""
    release = inputs.ort_linux_x64_release(e2e_cache)
    project = scratch_project(tmp_path_factory.mktemp("override"))
    scons = Scons(project, tmp_path_factory.mktemp("cache"))
    # Its file name says 1.26.0: refused before anything is extracted, suggesting version=.
    named = scons("onnxruntime-linux-x86_64-shared", "version=1.27.0", f"origin=release={release}", check=False)
    assert named.returncode == 2 and "names version 1.26.0, but onnxruntime-linux-x86_64-shared is version " \
        "1.27.0: add version=1.26.0" in named.stderr, named.stderr[-3000:]
    assert not (project / "build").exists()
    # Renamed, only its binaries can tell: verify does.
    renamed = tmp_path_factory.mktemp("renamed") / "onnxruntime-linux-x64.tgz"
    renamed.symlink_to(release)
    result = scons("onnxruntime-linux-x86_64-shared", "version=1.27.0", f"origin=release={renamed}", check=False)
    assert result.returncode != 0
    assert ("lib/libonnxruntime.so.1.26.0 says version 1.26.0, but the leg is version 1.27.0" in result.stderr), \
        result.stderr[-3000:]
    assert not (project / "dist").exists() or not list((project / "dist").iterdir())


@pytest.mark.slow
def test_the_cuda_leg_end_to_end_without_a_gpu(tmp_path_factory, e2e_cache):
    """onnxruntime-gpu 1.26.0's real library in the gpu_cuda13 layout: curated, verified
    on its binaries (CUDA entry point, the provider linking cudart, version 1.26.0) and
    smoke-tested here: the CPU pass and CUDAExecutionProvider in the provider list."""
    release = inputs.ort_linux_x64_cuda_release(e2e_cache)
    project, mirror = _project_with_pin(tmp_path_factory, release)
    scons = Scons(project, tmp_path_factory.mktemp("cache"))
    leg = "onnxruntime-linux-x86_64-cuda-shared"
    scons(leg, f"mirror={mirror}", "offline=1")
    archive = project / "dist" / f"onnxruntime-{V}-Linux-x86_64-cuda-shared.zip"
    with zipfile.ZipFile(archive) as handle:
        names = set(handle.namelist())
    assert {"lib/libonnxruntime_providers_cuda.so", "lib/libonnxruntime_providers_shared.so"} <= names
    assert not [n for n in names if "tensorrt" in n or n.endswith("dml_provider_factory.h")]
    verified = json.loads((project / f"build/legs/{leg}/steps/verify.json").read_text())
    assert any(line.startswith("shows cuda evidence (") for line in verified["checked"])
    smoke = json.loads((project / f"build/legs/{leg}/steps/smoke.json").read_text())
    assert smoke["status"] == "passed", smoke
    output = "\n".join(smoke["output"])
    assert "CUDAExecutionProvider" in output and "cpu: y = {2, 4, 6}" in output


@pytest.mark.skipif(not (shutil.which("qemu-aarch64") and shutil.which("aarch64-linux-gnu-g++")),
                    reason="needs qemu-user and g++-aarch64-linux-gnu (tools/setup.sh installs them)")
def test_linux_aarch64_leg_runs_under_qemu(tmp_path_factory, e2e_cache):
    """Stands in for upstream's `onnxruntime-linux-aarch64-1.26.0.tgz`: PyPI's aarch64 wheel
    library (upstream's release build) with Debian's headers, as for x86_64. The smoke is
    cross-compiled and run under qemu-user, as an x86_64 host runs every aarch64 leg."""
    leg = "onnxruntime-linux-aarch64-shared"
    release = inputs.ort_linux_aarch64_release(e2e_cache)
    project, mirror = _project_with_pin(tmp_path_factory, release)
    scons = Scons(project, tmp_path_factory.mktemp("cache"))
    result = scons(leg, f"mirror={mirror}", "offline=1")
    assert f"[verify] {leg} done" in result.stdout
    with zipfile.ZipFile(project / "dist" / f"onnxruntime-{V}-Linux-aarch64-shared.zip") as archive:
        library = archive.read(f"lib/libonnxruntime.so.{V}")
    assert library[:4] == b"\x7fELF" and int.from_bytes(library[18:20], "little") == EM_AARCH64
    smoke = json.loads((project / "build/legs" / leg / "steps/smoke.json").read_text())
    assert smoke["status"] == "passed" and smoke["mode"] == "qemu", smoke
    assert "cpu: y = {2, 4, 6}" in "\n".join(smoke["output"]) and any("PASS" in line for line in smoke["output"])


def test_license_texts_come_from_the_release(cpu):
    """Upstream's release carries LICENSE and ThirdPartyNotices.txt (the stand-in the wheel's
    copies of them): the archive has them at share/licenses/onnxruntime/."""
    scons, *_ = cpu
    with zipfile.ZipFile(scons.project / "dist" / ARCHIVE) as archive:
        license_text = archive.read("share/licenses/onnxruntime/LICENSE")
        notices = archive.read("share/licenses/onnxruntime/ThirdPartyNotices.txt")
    assert license_text.startswith(b"MIT License") and b"Microsoft" in license_text
    assert len(notices) > 100_000  # every bundled third-party library's notice


def test_the_sbom_is_valid_and_lists_every_input_of_the_plan(cpu):
    scons, *_ = cpu
    manifest = json.loads((scons.project / "dist" / (ARCHIVE + ".json")).read_text())
    with zipfile.ZipFile(scons.project / "dist" / ARCHIVE) as archive:
        assert json.loads(archive.read(f"share/sbom/onnxruntime-{V}-Linux-x86_64-shared.spdx.json")) == \
            manifest["sbom"]["document"]
    document = manifest["sbom"]["document"]
    assert sbom.problems(document) == []
    matrix = load_matrix(scons.project)
    plan = plan_leg(matrix.leg("onnxruntime-linux-x86_64-shared"), matrix.engines["onnxruntime"], matrix)
    inputs_ = {p["name"]: p for p in document["packages"] if p["SPDXID"].startswith("SPDXRef-Input-")}
    assert set(inputs_) == {f"onnxruntime-{d.name}" for d in plan.downloads}
    for download in plan.downloads:
        package = inputs_[f"onnxruntime-{download.name}"]
        assert package["downloadLocation"] == download.url and package["packageFileName"] == download.filename
        assert package["checksums"] == [{"algorithm": "SHA256", "checksumValue": download.sha256}]
    archive_package = next(p for p in document["packages"] if p["SPDXID"] == "SPDXRef-Package-archive")
    assert archive_package["licenseDeclared"] == "MIT" and archive_package["versionInfo"] == V
    assert "share/licenses/onnxruntime/ThirdPartyNotices.txt" in archive_package["licenseComments"]


def test_the_archive_has_the_shape_anira_relies_on(cpu):
    scons, *_ = cpu
    with zipfile.ZipFile(scons.project / "dist" / ARCHIVE) as archive:
        tops = {name.split("/", 1)[0] for name in archive.namelist()}
    assert tops == {"include", "lib", "share"}
