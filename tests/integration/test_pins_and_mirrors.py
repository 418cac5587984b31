"""Pins, lock=1 and mirrors through the whole graph on the prebuilt fixture engine."""
from __future__ import annotations

import shutil

import fixtures
from fixtures import LegRow, fixbin_archive, scons

LEG = fixtures.FIXBIN_LEG_IDS[0]


def _project(project_factory, upstreams, pins):
    project = project_factory(fixsrc=False, fixbin=False)
    row = LegRow(kind="shared", source="prebuilt", params={"asset": "fixbin-linux-x64", "ext": "tgz"})
    fixtures.write_fixbin(project, upstreams.fixbin_url, pins, rows=(row,))
    return project


def test_unpinned_download_is_refused_then_recorded_by_lock(project_factory, upstreams):
    (name, digest), = upstreams.fixbin_pins.items()
    project = _project(project_factory, upstreams, pins={})
    refused = scons(project, LEG)
    assert refused.returncode != 0
    assert f"{name} has no sha256 pin: `scons lock` records it" in refused.output
    assert not (project / "dist").exists() or not any((project / "dist").iterdir())
    locked = scons(project, LEG, "lock=1")
    assert locked.returncode == 0, str(locked)
    assert f'"{name}" = "{digest}"' in (project / "engines/fixbin/engine.toml").read_text()
    assert "[lock] recorded" in locked.stdout
    assert (project / "dist" / fixbin_archive(LEG)).is_file()


def test_a_directory_mirror_serves_offline_and_the_manifest_names_no_local_path(project_factory, upstreams,
                                                                               tmp_path):
    (name, _), = upstreams.fixbin_pins.items()
    mirror = tmp_path / "mirror"
    mirror.mkdir()
    shutil.copy2(upstreams.root / name, mirror / name)
    project = _project(project_factory, upstreams, pins=upstreams.fixbin_pins)
    before = len(upstreams.server.requests)
    run = scons(project, LEG, f"mirror={mirror}", "offline=1")
    assert run.returncode == 0, str(run)
    assert len(upstreams.server.requests) == before  # the upstream URL was never asked
    manifest = (project / "dist" / (fixbin_archive(LEG) + ".json")).read_text()
    assert str(mirror) not in manifest and ".cache" not in manifest


ANDROID_ROWS = """\
[defaults]
config = "release"
flavor = "cpu"
kind = "shared"
source = "prebuilt"
runner = "ubuntu-24.04"
can_run = false

[[leg]]
platform = "android-arm64-v8a"
publish = false
params = { asset = "fixbin-android-arm64", ext = "tgz" }

[[leg]]
platform = "android-x86_64"
publish = false
params = { asset = "fixbin-linux-x64", ext = "tgz" }

[[leg]]
platform = "android"
aggregate = "android-bundle"
source = "aggregate"
"""
BUNDLE = "fixbin-android-shared"
ABI_ARCHIVES = ("fixbin-2.0.1-Android-arm64-v8a-shared.zip", "fixbin-2.0.1-Android-x86_64-shared.zip")


def _android_project(project_factory, upstreams, name):
    """Each ABI leg repackages a library of its own architecture (verify checks it)."""
    project = project_factory(name, fixsrc=False, fixbin=False)
    work = project.parent / f"{name}-arm64"
    arm64 = fixtures.make_fixbin_release(upstreams.root, assets=("fixbin-android-arm64",),
                                         tree=fixtures.fixbin_tree(work / "tree", arch="aarch64"))
    fixtures.write_fixbin(project, upstreams.fixbin_url, {**upstreams.fixbin_pins, **arm64})
    (project / "variants/fixbin.toml").write_text(ANDROID_ROWS)
    return project


def test_android_bundle_builds_its_inputs_and_depends_only_on_them(project_factory, upstreams):
    import zipfile

    project = _android_project(project_factory, upstreams, "bundle")
    run = scons(project, BUNDLE)
    assert run.returncode == 0, str(run)
    archive = project / "dist" / fixbin_archive(BUNDLE)
    with zipfile.ZipFile(archive) as handle:
        names = set(handle.namelist())
    assert {"include/fixbin.h", "lib/arm64-v8a/libfixbin.so", "lib/x86_64/libfixbin.so"} <= names
    assert "smoke not run" in run.stdout

    # CI's aggregate job: a fresh project with only the downloaded inputs in dist/.
    ci = _android_project(project_factory, upstreams, "ci")
    (ci / "dist").mkdir()
    for name in ABI_ARCHIVES:
        shutil.copy2(project / "build/legs" / name.replace("fixbin-2.0.1-Android-", "fixbin-android-")
                     .replace("-shared.zip", "-shared").lower() / "archive" / name, ci / "dist" / name)
    before = len(upstreams.server.requests)
    again = scons(ci, BUNDLE, "inputs=dist")
    assert again.returncode == 0, str(again)
    assert len(upstreams.server.requests) == before  # no input was fetched or rebuilt
    assert [line.split()[0] for line in again.step_lines()] == ["[merge]", "[archive]", "[verify]", "[smoke]",
                                                                "[publish]"]


def test_aggregate_with_a_missing_input_names_it(project_factory, upstreams):
    project = _android_project(project_factory, upstreams, "missing")
    run = scons(project, BUNDLE, "inputs=dist")
    assert run.returncode != 0
    assert f"fixbin-android-shared needs dist/{ABI_ARCHIVES[0]}" in run.stderr


def test_every_archive_format_verifies_with_its_symlinks(project_factory, upstreams):
    import tarfile

    project = _project(project_factory, upstreams, pins=upstreams.fixbin_pins)
    for fmt in ("tar.gz", "7z"):
        run = scons(project, LEG, f"format={fmt}")
        assert run.returncode == 0, str(run)
        assert (project / "dist" / fixbin_archive(LEG).replace(".zip", f".{fmt}")).is_file()
    with tarfile.open(project / "dist" / fixbin_archive(LEG).replace(".zip", ".tar.gz")) as archive:
        assert archive.getmember("lib/libfixbin.so").issym()
