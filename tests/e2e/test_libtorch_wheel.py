"""The LibTorch Linux x86_64 CPU leg end to end, from PyTorch's CPU wheel, exactly as the quick
start builds it and as docs/binary-cache.md's example stores and restores it.

The wheel is this leg's upstream origin: its `torch/{include,lib,share,bin}` layout is an
accepted root of the release zip's `libtorch/`, so the normal fetch → extract → stage →
archive → verify → smoke path runs unchanged, with the version overridden to the wheel's.
tools/quickstart.sh passes `version=2.13.0 origin=<wheel>` and nothing else: PyTorch's LICENSE
and NOTICE at the tag are optional downloads, skipped while unpinned (the wheel brings
LICENSE; NOTICE is absent), and in the leg key as absent, so the leg has a key. The build
stores the archive with docs/binary-cache.md's writer command; a clean tree restores it with the
reader's (`scons cache-keygen key=~/.anira/cache-key`, then `binary_cache_key=` /
`binary_cache_trust=`).
"""
from __future__ import annotations

import json
import re
import stat
import subprocess
import sys
import zipfile

import pytest

import inputs
from backends.model.matrix import load_matrix
from backends.model.recipes import leg_engine, plan_leg
from backends.steps import sbom
from backends.util.files import sha256_file
from scratch import Scons, scratch_project

pytestmark = [pytest.mark.e2e, pytest.mark.slow]
LEG = "libtorch-linux-x86_64-shared"
ARCHIVE = "libtorch-2.13.0-Linux-x86_64-shared.zip"
KEY = "~/.anira/cache-key"  # docs/binary-cache.md's


@pytest.fixture(scope="module")
def built(tmp_path_factory, e2e_cache):
    """The quick start's build, stored by docs/binary-cache.md's writer. $HOME (for `~/.anira/...`) is a
    scratch one for every scons run of this module: the smoke's environment names it."""
    wheel = inputs.torch_cpu_wheel(e2e_cache)
    project = scratch_project(tmp_path_factory.mktemp("libtorch"), copied=("engines/libtorch",))
    scons = Scons(project, tmp_path_factory.mktemp("cache"))
    store = tmp_path_factory.mktemp("stores") / "anira-cache"
    args = (LEG, "version=2.13.0", f"origin={wheel}")  # what tools/quickstart.sh passes
    with pytest.MonkeyPatch.context() as environment:
        environment.setenv("HOME", str(tmp_path_factory.mktemp("home")))
        subprocess.run([sys.executable, "-m", "SCons", "-Q", "cache-keygen", f"key={KEY}"], cwd=project,
                       check=True, capture_output=True)
        first = scons(*args, f"binary_cache={store}", f"binary_cache_key={KEY}")
        stored = json.loads((project / "dist" / f"{ARCHIVE}.json").read_text())["leg_key"], \
            sha256_file(project / "dist" / ARCHIVE)
        yield scons, args, first, wheel, store, stored


def test_archive_is_verified_and_smoke_tested(built):
    scons, _, first, *_ = built
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


def test_strip_rule_change_reextracts_what_the_stage_takes_and_reruns_to_publish(built):
    """The wheel's extraction holds what the stage's rules take (steps/takes.py), keyed by them:
    a strip rule edit extracts again, then stages, archives, verifies, smokes and publishes."""
    scons, args, *_ = built
    recipe = scons.project / "engines/libtorch/recipe.py"
    original = recipe.read_text()
    recipe.write_text(original.replace('"bin/upgrader_models/**",', '"bin/upgrader_models/**", "bin/protoc*",'))
    try:
        rerun = scons(*args)
    finally:
        recipe.write_text(original)
    assert scons.steps_run(rerun) == ["extract", "stage", "archive", "verify", "smoke", "publish"]
    with zipfile.ZipFile(scons.project / "dist" / ARCHIVE) as archive:
        assert not [n for n in archive.namelist() if n.startswith("bin/protoc")]


def test_license_texts_are_in_the_archive(built):
    """The wheel's LICENSE (PyTorch's) and third-party texts; NOTICE only once it is pinned."""
    scons, _, _, wheel, *_ = built
    with zipfile.ZipFile(scons.project / "dist" / ARCHIVE) as archive, zipfile.ZipFile(wheel) as origin:
        names = set(archive.namelist())
        assert archive.read("share/licenses/libtorch/LICENSE") == origin.read(
            "torch-2.13.0+cpu.dist-info/licenses/LICENSE")
        assert "share/licenses/libtorch/NOTICE" not in names
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
    fetched = [d for d in plan.downloads if not d.optional]  # the texts are unpinned: not fetched
    assert set(inputs_) == {f"libtorch-{d.name}" for d in fetched} == {"libtorch-release"}
    recorded = {s["name"]: s["sha256"] for s in manifest["sources"] if "sha256" in s}
    assert set(recorded) == {d.name for d in fetched}
    for download in fetched:
        package = inputs_[f"libtorch-{download.name}"]
        assert package["downloadLocation"] == download.url
        assert package["checksums"] == [{"algorithm": "SHA256", "checksumValue": recorded[download.name]}]
        assert package["comment"].startswith("built from origin=")  # by name: no local path in the archive
    archive_package = next(p for p in document["packages"] if p["SPDXID"] == "SPDXRef-Package-archive")
    assert archive_package["versionInfo"] == "2.13.0" and archive_package["licenseDeclared"] == "BSD-3-Clause"
    assert {"referenceCategory": "OTHER", "referenceLocator": "none", "referenceType": "anira-accelerator"} in \
        archive_package["externalRefs"]
    assert str(scons.project) not in json.dumps(document)


def test_every_shipped_shared_library_is_the_engines_own_or_a_listed_runtime(built):
    """LibTorch ships GCC's libgomp: the SBOM names it, with its license, as not the engine's own."""
    import fnmatch
    from pathlib import PurePosixPath
    scons, *_ = built
    document = json.loads((scons.project / "dist" / (ARCHIVE + ".json")).read_text())["sbom"]["document"]
    runtimes = {p["packageFileName"] for p in document["packages"] if p["SPDXID"].startswith("SPDXRef-Runtime-")}
    own = ("libtorch*", "libc10*", "libcaffe2*", "libshm.*")
    with zipfile.ZipFile(scons.project / "dist" / ARCHIVE) as archive:
        shared = [n for n in archive.namelist() if re.search(r"\.so(\.|$)", n)]
    uncovered = [n for n in shared if n not in runtimes
                 and not any(fnmatch.fnmatchcase(PurePosixPath(n).name, g) for g in own)]
    assert not uncovered and any("libgomp" in n for n in runtimes)


def test_the_archive_has_the_shape_anira_relies_on(built):
    scons, *_ = built
    with zipfile.ZipFile(scons.project / "dist" / ARCHIVE) as archive:
        tops = {name.split("/", 1)[0] for name in archive.namelist()}
    assert tops <= {"include", "lib", "share", "bin"} and {"include", "lib", "share"} <= tops


def test_the_quick_start_leg_has_a_key_and_the_writer_stored_it(built):
    scons, args, _, _, store, (key, digest) = built
    shown = scons("key=1", *args).stdout.splitlines()[0]
    assert shown == f"{LEG}: {key}" and re.fullmatch("[0-9a-f]{64}", key)
    assert sha256_file(store / key / ARCHIVE) == digest and (store / key / f"{ARCHIVE}.sig").is_file()


def test_a_clean_tree_restores_it_with_the_readers_command(built, tmp_path):
    _, args, _, _, store, (_, digest) = built
    clean = Scons(scratch_project(tmp_path / "clean"), tmp_path / "downloads")
    restored = clean(*args, f"binary_cache={store}", f"binary_cache_trust={KEY}.pub")
    assert clean.steps_run(restored) == ["restore", "publish"], restored.stdout  # nothing fetched or built
    assert re.search(rf"^\s*restored\s+{LEG}\s", restored.stdout, re.M), restored.stdout
    assert sha256_file(clean.project / "dist" / ARCHIVE) == digest
