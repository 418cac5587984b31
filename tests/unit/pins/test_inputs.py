"""The inputs `scons pins` reports and `scons lock` records, taken from the real data: every
download of every plan, once per pin, unpinned git sources marked; an `origin=` with other
bytes than its pin marked; and what a version bump drops, per engine."""
from __future__ import annotations

import hashlib
from dataclasses import replace
from pathlib import Path
from types import MappingProxyType

import pytest

from backends.commands.lock import bump_version
from backends.commands.report import render_plan
from backends.model.engine import DataError
from backends.model.matrix import Matrix, load_matrix
from backends.model.plan import Download
from backends.model.recipes import plan_all
from backends.pins.inputs import FILE, GIT, collect, origin_of, override, report, unpinned

ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture(scope="module")
def matrix() -> Matrix:
    return load_matrix(ROOT)


def _legs(matrix: Matrix, engine: str) -> list:
    return [leg for leg in matrix.legs if leg.engine == engine]


def test_every_download_of_every_leg_is_an_input_with_its_legs(matrix: Matrix) -> None:
    plans = plan_all(matrix)
    inputs = {item.identity: item for item in collect(plans, matrix)}
    for plan in plans:
        for download in plan.downloads:
            kind, key = (GIT, download.name) if download.kind == "git" else (FILE, download.filename)
            item = inputs[(plan.leg.engine, kind, key)]
            assert plan.leg.id in item.legs and item.url == download.url
            assert item.pin == (download.commit if kind == GIT else download.sha256)


def test_unpinned_git_sources_are_inputs_too(matrix: Matrix) -> None:
    found = collect(plan_all(matrix, _legs(matrix, "litert")), matrix)
    cpuinfo = next(item for item in found if item.source == "cpuinfo")
    assert (cpuinfo.kind, cpuinfo.ref, cpuinfo.pin) == (GIT, "main", "")  # a branch: recorded by lock, never followed
    assert cpuinfo in unpinned(found)
    source = next(item for item in found if item.kind == GIT and item.source == "source")
    assert source.pin == matrix.engines["litert"].pins["commit"]  # the ref is the commit


def test_plan_marks_unpinned_git_sources(matrix: Matrix) -> None:
    [plan] = plan_all(matrix, [matrix.leg("litert-windows-arm64-shared")])
    text = render_plan(plan)
    assert "fetch cpuinfo: https://github.com/pytorch/cpuinfo (ref main, commit unpinned: `scons lock` records it)" in text


def test_one_pin_stands_for_one_upstream_file(matrix: Matrix) -> None:
    plans = plan_all(matrix, _legs(matrix, "onnxruntime"))[:2]
    first, second = (replace(plan, downloads=(Download("release", f"https://example.invalid/{n}/a.zip", "a.zip"),))
                     for n, plan in enumerate(plans))
    with pytest.raises(DataError, match="share the pin of onnxruntime a.zip"):
        collect([first, second], matrix)


def test_the_podspec_names_a_further_input(matrix: Matrix) -> None:
    found = collect(plan_all(matrix, [matrix.leg("tflite-ios-xcframework")]), matrix)
    [podspec] = [item for item in found if item.names]
    [named] = [item for item in found if item.parent]
    assert podspec.key == f"TensorFlowLiteC-{matrix.engines['tflite'].version}.podspec.json"
    assert named.parent == podspec.key and not named.pin


def test_a_version_override_drops_the_commit_of_a_moving_ref(matrix: Matrix) -> None:
    executorch = matrix.engines["executorch"]
    assert executorch.sources["source"].recorded_commit
    assert executorch.with_version(executorch.version).sources["source"].commit == executorch.sources["source"].commit
    assert executorch.with_version("9.9.9").sources["source"].commit == ""
    litert = matrix.engines["litert"]  # its commit follows [pins], not the version
    assert litert.with_version("9.9.9").sources["source"].commit == litert.sources["source"].commit


def _all_pinned(matrix: Matrix, engine: str) -> Matrix:
    """The data with a stand-in pin for every file input of `engine` (and what the podspec names)."""
    data = matrix.engines[engine]
    files = [item for item in collect(plan_all(matrix, _legs(matrix, engine)), matrix) if item.kind == FILE]
    sha256 = {item.key: "0" * 64 for item in files if item.key}
    nested = {item.key: f"https://example.invalid/{item.key}.tar.gz" for item in files if item.names}
    sha256.update({f"{key}.tar.gz": "1" * 64 for key in nested})
    pinned = replace(data, sha256=MappingProxyType(sha256), nested=MappingProxyType(nested))
    return replace(matrix, engines=MappingProxyType({**matrix.engines, engine: pinned}))


def test_a_bump_drops_the_pins_only_the_old_version_used(matrix: Matrix) -> None:
    onnxruntime = _all_pinned(matrix, "onnxruntime")
    bump = bump_version(onnxruntime, _legs(onnxruntime, "onnxruntime"), "9.9.9")
    assert bump.changes.version == "9.9.9"
    assert bump.changes.drop_sha256 == set(onnxruntime.engines["onnxruntime"].sha256)  # every name has the version

    tflite = _all_pinned(matrix, "tflite")
    bump = bump_version(tflite, _legs(tflite, "tflite"), "9.9.9")
    assert bump.changes.drop_nested == set(tflite.engines["tflite"].nested)  # with the podspec goes what it names
    assert bump.changes.drop_sha256 == set(tflite.engines["tflite"].sha256)

    executorch = _all_pinned(matrix, "executorch")
    bump = bump_version(executorch, _legs(executorch, "executorch"), "9.9.9")
    assert bump.changes.commits == {"source": ""}  # v1.3.1's commit is not v9.9.9's
    wheels = {key for key in executorch.engines["executorch"].sha256 if key.endswith(".whl")}
    assert wheels and not wheels & bump.changes.drop_sha256  # the wheel legs keep their own version

    litert = _all_pinned(matrix, "litert")
    bump = bump_version(litert, _legs(litert, "litert"), "9.9.9")
    assert not bump.changes.drop_sha256  # its URLs follow the commit pin, not the version label


ORT_LEG = "onnxruntime-linux-x86_64-shared"


def _pinned_to(matrix: Matrix, sha256: str) -> tuple[Matrix, list]:
    """The data with ORT_LEG's release pinned to `sha256`, and its plans."""
    data = _all_pinned(matrix, "onnxruntime")
    [plan] = plan_all(data, [data.leg(ORT_LEG)])
    engine = data.engines["onnxruntime"]
    engine = replace(engine, sha256=MappingProxyType({**engine.sha256, plan.downloads[0].filename: sha256}))
    data = replace(data, engines=MappingProxyType({**data.engines, "onnxruntime": engine}))
    return data, plan_all(data, [data.leg(ORT_LEG)])


def test_pins_marks_an_origin_with_other_bytes_than_its_pin(matrix: Matrix, tmp_path: Path) -> None:
    copy = tmp_path / "copy.tgz"
    copy.write_bytes(b"the pinned bytes")
    data, plans = _pinned_to(matrix, hashlib.sha256(b"the pinned bytes").hexdigest())
    table, message = report(plans, data, {"": str(copy)})
    assert message == "" and "origin differs" not in table
    other = tmp_path / "other.tgz"
    other.write_bytes(b"a local build")
    actual = hashlib.sha256(b"a local build").hexdigest()
    table, message = report(plans, data, {"release": str(other)})
    [row] = [line for line in table.splitlines() if plans[0].downloads[0].filename in line]
    assert f"origin differs: sha256 {actual[:12]}" in row
    assert "1 input not pinned for this run" in message and str(other) in message and actual in message


def test_an_origin_is_judged_by_what_a_build_would_check(matrix: Matrix) -> None:
    data, plans = _pinned_to(matrix, "0" * 64)
    [release] = [item for item in collect(plans, data) if item.source == "release"]
    assert origin_of(release, plans, {"": "/some/file"}) == "/some/file"
    assert origin_of(release, plans, {"other": "/some/file"}) == ""
    unread = lambda path: pytest.fail(f"{path} was hashed")  # noqa: E731
    # A URL of the pinned name is held to the pin by the build; one of another name is not this pin.
    assert override(release, f"https://mirror.invalid/{release.key}", unread) is None
    differs = override(release, "https://mirror.invalid/torch.whl", unread)
    assert differs is not None and differs.short == "a URL of torch.whl"
    assert override(replace(release, pin=""), "/some/file", unread) is None  # unpinned is said already
    assert override(replace(release, kind=GIT), "/some/clone", unread) is None  # a clone yields the pinned commit
