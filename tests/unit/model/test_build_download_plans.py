"""Recorded `[[build_downloads]]` are inputs of the legs that use them: fetched downloads
with their pins, handed to upstream through its override, counted by `scons pins`, covered by
the leg key, and named in plan=1; with none recorded, plan=1 still says where they come from."""
from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from types import MappingProxyType

from backends.cache.key import leg_key
from backends.commands.report import render_plan
from backends.model.engine import BuildDownload
from backends.model.matrix import load_matrix
from backends.model.recipes import plan_leg
from backends.pins.inputs import collect

ROOT = Path(__file__).resolve().parents[3]
MATRIX = load_matrix(ROOT)
PIN = "ab" * 32
ABSEIL = BuildDownload("abseil_cpp", "https://github.com/abseil/abseil-cpp/archive/refs/tags/20240722.0.zip",
                       "sha1:" + "1" * 40, reader="ort-deps", where="cmake/deps.txt:4")
EIGEN = BuildDownload("eigen", "https://gitlab.com/libeigen/eigen/-/archive/abc/eigen-abc.tar.gz",
                      git="https://gitlab.com/libeigen/eigen.git", ref="abc", reader="tflite-cmake")
KLEIDIAI = BuildDownload("kleidiai", "https://gitlab.arm.com/kleidi/kleidiai/-/archive/c0/kleidiai-c0.zip",
                         "sha256:" + "2" * 64, reader="xnnpack-kleidiai",
                         when=(MappingProxyType({"arch": ("arm64",)}),))


def _engine(name: str, *entries: BuildDownload, pinned: bool = True):
    engine = MATRIX.engines[name]
    sha = {**engine.sha256, **({e.filename: PIN for e in entries} if pinned else {})}
    return replace(engine, build_downloads=entries, sha256=MappingProxyType(sha))


def _source_leg(engine: str, os: str = "linux", arch: str = ""):
    return next(leg for leg in MATRIX.legs if leg.engine == engine and leg.source == "build" and leg.os == os
                and (not arch or leg.arch == arch) and not leg.accelerator)


def test_ort_serves_deps_txt_from_its_mirror_directory() -> None:
    leg = _source_leg("onnxruntime")
    plan = plan_leg(leg, _engine("onnxruntime", ABSEIL), MATRIX)
    [dep] = [d for d in plan.downloads if d.upstream]
    assert (dep.name, dep.filename, dep.sha256, dep.unpack) == ("dep-abseil_cpp", "abseil_cpp-20240722.0.zip", PIN, False)
    check, mirror = plan.build[0], plan.build[1]
    assert check.argv[-1] == ABSEIL.url and "check" in check.argv
    assert f"--file={ABSEIL.url}={{download:dep-abseil_cpp}}" in mirror.argv and "{src}/mirror" in mirror.argv
    assert plan.build[2].label == "build.py"
    text = render_plan(plan)
    assert (f"fetch dep-abseil_cpp: {ABSEIL.url} (abseil_cpp-20240722.0.zip sha256 {PIN}; "
            f"upstream sha1:{'1' * 40}, cmake/deps.txt:4)") in text
    assert "1 read by ort-deps" in text


def test_without_entries_plan_says_where_from_and_builds_as_before() -> None:
    plan = plan_leg(_source_leg("onnxruntime"), MATRIX.engines["onnxruntime"], MATRIX)
    assert plan.build[0].label == "build.py" and not any(d.upstream for d in plan.downloads)
    assert "read by ort-deps from the pinned tree, none recorded yet" in render_plan(plan)


def test_tflite_hands_modules_over_by_overridable_fetch_content() -> None:
    plan = plan_leg(_source_leg("tflite"), _engine("tflite", EIGEN), MATRIX)
    configure = next(c for c in plan.build if c.label == "configure")
    assert "-DOVERRIDABLE_FETCH_CONTENT_eigen_URL={download:dep-eigen}" in configure.argv
    assert f"-DOVERRIDABLE_FETCH_CONTENT_eigen_URL_HASH=SHA256={PIN}" in configure.argv
    assert plan.build[0].argv[-1] == EIGEN.url  # checked against the tree first


def test_executorch_kleidiai_on_arm64_legs_only() -> None:
    engine = _engine("executorch", KLEIDIAI)
    arm = plan_leg(_source_leg("executorch", "macos", "arm64"), engine, MATRIX)
    [kleidiai] = [d for d in arm.downloads if d.upstream]
    assert kleidiai.unpack and kleidiai.roots == ("kleidiai-c0",)
    configure = next(c for c in arm.build if c.label == "configure")
    assert "-DKLEIDIAI_SOURCE_DIR={extract:dep-kleidiai}" in configure.argv
    x86 = plan_leg(_source_leg("executorch", "linux", "x86_64"), engine, MATRIX)
    assert not any(d.upstream for d in x86.downloads)
    assert not any("KLEIDIAI_SOURCE_DIR" in arg for c in x86.build for arg in c.argv)


def test_pins_count_them_and_the_leg_key_covers_their_pin(tmp_path: Path) -> None:
    leg = _source_leg("onnxruntime")
    unpinned_engine = _engine("onnxruntime", ABSEIL, pinned=False)
    matrix = replace(MATRIX, engines=MappingProxyType({**MATRIX.engines, "onnxruntime": unpinned_engine}))
    unpinned = plan_leg(leg, unpinned_engine, matrix)
    item = next(i for i in collect([unpinned], matrix) if i.key == ABSEIL.filename)
    assert (item.pin, item.url) == ("", ABSEIL.url)
    engine = _engine("onnxruntime", ABSEIL)
    pinned = plan_leg(leg, engine, MATRIX)
    other = plan_leg(leg, replace(engine, sha256=MappingProxyType({**engine.sha256, ABSEIL.filename: "cd" * 32})),
                     MATRIX)
    first, second = leg_key(pinned, engine, ROOT), leg_key(other, engine, ROOT)
    assert first.parts["inputs"] != second.parts["inputs"]  # the source's commit is unpinned here: no digest


def test_litert_serves_recorded_http_archives_from_bazels_repository_cache() -> None:
    cpuinfo = BuildDownload("cpuinfo", "https://github.com/pytorch/cpuinfo/archive/ea6b.zip", "sha256:" + "3" * 64,
                            reader="bazel", where="WORKSPACE")
    bazel = BuildDownload("bazel", "https://github.com/bazelbuild/bazel/releases/download/7.4.1/bazel-7.4.1-linux-x86_64",
                          reader="bazel", where=".bazelversion")
    plan = plan_leg(_source_leg("litert"), _engine("litert", cpuinfo, bazel), MATRIX)
    assert [d.name for d in plan.downloads if d.upstream] == ["dep-cpuinfo"]  # bazelisk's Bazel: not served yet
    cache = next(c for c in plan.build if c.label == "repository cache")
    assert f"--file={'3' * 64}={{download:dep-cpuinfo}}" in cache.argv
    bazel_build = next(c for c in plan.build if c.label.startswith("bazel build"))
    assert "--repository_cache={build}/repository_cache" in bazel_build.argv
    told = [note for note in plan.notes if note.startswith("upstream's build-time downloads")]
    assert len(told) == 1 and "the 1 recorded http_archives" in told[0] and "not yet served" not in told[0]
    unrecorded = plan_leg(_source_leg("litert"), _engine("litert"), MATRIX)
    assert any("not yet served" in note for note in unrecorded.notes)


def test_every_from_source_leg_says_where_its_build_time_downloads_come_from() -> None:
    from backends.model.recipes import plan_all
    silent = [plan.leg.id for plan in plan_all(MATRIX) if plan.leg.source == "build" and not plan.leg.aggregate
              and not any(note.startswith("upstream's build-time downloads") for note in plan.notes)]
    assert not silent, silent


def test_the_tree_check_counts_entries_a_when_keeps_from_the_leg() -> None:
    protoc = BuildDownload("protoc_win64", "https://github.com/protocolbuffers/protobuf/releases/download/v21.12/"
                           "protoc-21.12-win64.zip", "sha1:" + "4" * 40, reader="ort-deps",
                           when=(MappingProxyType({"os": ("windows",)}),))
    plan = plan_leg(_source_leg("onnxruntime"), _engine("onnxruntime", ABSEIL, protoc), MATRIX)
    assert [d.name for d in plan.downloads if d.upstream] == ["dep-abseil_cpp"]  # not fetched for linux
    check = next(c for c in plan.build if c.label == "check ort-deps downloads")
    assert protoc.url in check.argv and ABSEIL.url in check.argv  # but recorded: the tree may declare it


def test_github_archives_unpack_to_repository_dash_ref() -> None:
    from backends.model.recipe_kit import archive_roots
    commit = "d41219d3db13758074a6440d7b55a87487334c8b"
    assert archive_roots(f"https://github.com/ARM-software/kleidiai/archive/{commit}.zip") == (f"kleidiai-{commit}",)
    assert archive_roots("https://github.com/o/ruy/archive/refs/tags/v1.2.tar.gz") == ("ruy-v1.2", "ruy-1.2")
    assert archive_roots(KLEIDIAI.url) == ("kleidiai-c0",)


def test_executorch_arm64_legs_fetch_the_recorded_kleidiai_by_upstreams_sha256() -> None:
    """engines/executorch/engine.toml as recorded from XNNPACK's DownloadKleidiAI.cmake at the
    submodule commit ExecuTorch v1.3.1 pins: its URL_HASH is the pin."""
    engine = MATRIX.engines["executorch"]
    [entry] = engine.build_downloads
    for os, arch in (("linux", "aarch64"), ("macos", "arm64"), ("android", "arm64-v8a")):
        arm = plan_leg(_source_leg("executorch", os, arch), engine, MATRIX)
        [kleidiai] = [d for d in arm.downloads if d.upstream]
        assert kleidiai.sha256 and entry.upstream_hash == f"sha256:{kleidiai.sha256}"
        assert kleidiai.roots == (f"kleidiai-{entry.version}",)
        assert f"fetch dep-kleidiai: {entry.url} ({entry.filename} sha256 {kleidiai.sha256}" in render_plan(arm)
    assert all(not c.network for c in arm.build if c.label in ("configure", "build"))
    x86 = plan_leg(_source_leg("executorch", "linux", "x86_64"), engine, MATRIX)
    assert not any(d.upstream for d in x86.downloads)


def test_a_leg_no_recorded_entry_takes_is_told_so_not_that_none_is_recorded() -> None:
    """ExecuTorch's x86_64 legs take no KleidiAI entry: plan=1 says the entries exist and that
    upstream still downloads what that leg's build needs."""
    text = render_plan(plan_leg(_source_leg("executorch", "linux", "x86_64"), MATRIX.engines["executorch"], MATRIX))
    assert "recorded, but no entry's `when` takes this leg" in text
    assert "none recorded yet" not in text


def test_executorch_xcframework_slices_are_handed_the_fetched_kleidiai_network_off() -> None:
    """The iOS legs have no single arch but their presets build XNNPACK with Kleidi on: the
    entry's second `when` table takes them, and each slice's configure gets the tree."""
    engine = MATRIX.engines["executorch"]
    for leg in (leg for leg in MATRIX.legs if leg.engine == "executorch" and leg.platform == "ios"):
        plan = plan_leg(leg, engine, MATRIX)
        [kleidiai] = [d for d in plan.downloads if d.upstream]
        slices = [c for c in plan.build if c.label.startswith(("configure ios", "build ios"))]
        assert len(slices) == 4, leg.id
        assert all(not c.network for c in slices), leg.id
        configures = [c for c in slices if c.label.startswith("configure")]
        assert all(f"-DKLEIDIAI_SOURCE_DIR={{extract:{kleidiai.name}}}" in c.argv for c in configures), leg.id
        assert "fetched and pinned here" in render_plan(plan)


def test_without_the_ios_table_the_xcframework_slices_download_kleidiai_themselves_network_on() -> None:
    engine = MATRIX.engines["executorch"]
    [entry] = engine.build_downloads
    arm_only = replace(engine, build_downloads=(replace(entry, when=entry.when[:1]),))
    plan = plan_leg(_source_leg("executorch", "ios"), arm_only, MATRIX)
    assert not any(d.upstream for d in plan.downloads)
    assert all(c.network and not any("KLEIDIAI" in a for a in c.argv)
               for c in plan.build if c.label.startswith(("configure ios", "build ios")))
    assert "recorded, but no entry's `when` takes this leg" in render_plan(plan)