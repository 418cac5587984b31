"""License texts (docs/licenses-and-provenance.md): every package carries its engine's texts at
share/licenses/<engine>/, engines/contracts.toml [licenses] makes the contract require them,
each recipe collects them from the tree a leg is built from or, where a prebuilt origin lacks
them, from pinned source files that `scons lock` records."""
from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from backends.graph import actions
from backends.model.contract_data import load_contract_data
from backends.model.engine import DataError
from backends.model.matrix import load_matrix
from backends.model.plan import CopyRule
from backends.model.recipes import plan_all
from backends.steps import stage as stage_step
from backends.steps.context import LegDirs
from backends.steps.verify import check
from binaries import license_texts, zip_members

ROOT = Path(__file__).resolve().parents[3]
MATRIX = load_matrix(ROOT)
PLANS = {plan.leg.id: plan for plan in plan_all(MATRIX)}
TEXTS = {"onnxruntime": ("LICENSE", "ThirdPartyNotices.txt"), "libtorch": ("LICENSE", "NOTICE"),
         "tflite": ("LICENSE",), "litert": ("LICENSE",), "executorch": ("LICENSE",)}
# LibTorch's prebuilt legs: LICENSE always; NOTICE once its pin is recorded (a wheel origin,
# the quick start's, brings LICENSE and the third-party texts but no NOTICE).
PREBUILT_TEXTS = {"libtorch": ("LICENSE",)}


def _required(plan) -> tuple[str, ...]:  # type: ignore[no-untyped-def]
    if plan.leg.source == "prebuilt" and plan.leg.engine in PREBUILT_TEXTS:
        return PREBUILT_TEXTS[plan.leg.engine]
    return TEXTS[plan.leg.engine]


def _texts(plan) -> list[str]:  # type: ignore[no-untyped-def]
    return [r for r in plan.contract.required if r.startswith("share/licenses/")]


@pytest.mark.parametrize("leg_id", sorted(PLANS))
def test_every_contract_requires_the_engines_license_texts(leg_id: str) -> None:
    plan = PLANS[leg_id]
    assert _texts(plan) == [f"share/licenses/{plan.leg.engine}/{name}" for name in _required(plan)]


@pytest.mark.parametrize("leg_id", sorted(i for i, p in PLANS.items() if not p.leg.aggregate))
def test_every_built_leg_collects_each_required_text(leg_id: str) -> None:
    """Each text the contract requires is the destination of one of the plan's copy rules (an
    aggregate takes its slices'); a plan that named no source for one would fail verify. A
    rule may be optional (a text from a download that is not pinned yet, or from a wheel
    origin): verify is what requires the text."""
    plan = PLANS[leg_id]
    landed = {f"{rule.dest}/{rule.rename or Path(rule.pattern).name}" for rule in plan.collect}
    assert set(_texts(plan)) <= landed


# Where a prebuilt origin carries no texts: the LibTorch release zips, the ORT AAR, Google's
# TFLite xcframeworks. The texts come from the tag's files, each a download pinned by its own name.
PINNED_TEXTS = {
    "libtorch-linux-x86_64-shared": {"license": "LICENSE", "notice": "NOTICE"},
    "libtorch-windows-x86_64-cuda-shared": {"license": "LICENSE", "notice": "NOTICE"},
    "onnxruntime-android-shared": {"license": "LICENSE", "notices": "ThirdPartyNotices.txt"},
    "tflite-ios-xcframework": {"license": "LICENSE"},
}


@pytest.mark.parametrize("leg_id", sorted(PINNED_TEXTS))
def test_texts_a_prebuilt_origin_lacks_are_pinned_source_files(leg_id: str) -> None:
    plan = PLANS[leg_id]
    engine = MATRIX.engines[plan.leg.engine]
    downloads = {d.name: d for d in plan.downloads}
    for source, name in PINNED_TEXTS[leg_id].items():
        download = downloads[source]
        # Every version's file is called LICENSE: pinned under a versioned name, so `scons lock`
        # records one pin per version (none is recorded yet: docs/licenses-and-provenance.md).
        assert download.filename == f"{engine.name}-{engine.version}-{name}" and not download.unpack
        assert download.optional  # fetched once pinned; unpinned, verify says which text is missing
        assert f"/v{engine.version}/{name}" in download.url
        assert CopyRule(f"{{download:{source}}}", f"share/licenses/{engine.name}", rename=name,
                        required=False) in plan.collect


def test_a_recorded_pin_is_what_the_text_download_is_held_to() -> None:
    engine = MATRIX.engines["libtorch"]
    pinned = replace(engine, sha256={**engine.sha256, f"libtorch-{engine.version}-NOTICE": "a" * 64})
    from backends.model.recipes import plan_leg

    plan = plan_leg(MATRIX.leg("libtorch-linux-x86_64-shared"), pinned, MATRIX)
    assert {d.name: d.sha256 for d in plan.downloads}["notice"] == "a" * 64


def test_origins_with_the_texts_take_them_from_their_own_tree() -> None:
    """The ORT release archives and source trees, the ExecuTorch wheel's dist-info and
    LiteRT's repository tarball hold the texts: no further download."""
    for leg_id in ("onnxruntime-linux-x86_64-shared", "onnxruntime-macos-arm64-shared", "executorch-linux-x86_64-shared",
                   "litert-linux-x86_64-shared", "libtorch-macos-arm64-shared", "tflite-linux-x86_64-shared"):
        plan = PLANS[leg_id]
        assert not [d for d in plan.downloads if d.name in ("license", "notice", "notices")], leg_id


# -- verify: both directions -------------------------------------------------------------------

LEG = "onnxruntime-linux-x86_64-shared"


def _licenses_only(leg_id: str):  # type: ignore[no-untyped-def]
    contract = PLANS[leg_id].contract
    return replace(contract, required=tuple(_texts(PLANS[leg_id])), symbols=(), header_api=None, versions=(),
                   floors=(), accelerators=(), foreign_accelerators=(), system_symbols=(), internal_prefixes=())


def test_an_archive_with_its_texts_passes_and_one_without_fails(tmp_path: Path) -> None:
    contract = _licenses_only(LEG)
    good = zip_members(tmp_path / "good.zip", {"include/onnxruntime_c_api.h": b"", **license_texts("onnxruntime")})
    assert check(good, contract, "1.26.0") == []
    texts = license_texts("onnxruntime")
    del texts["share/licenses/onnxruntime/ThirdPartyNotices.txt"]
    bad = zip_members(tmp_path / "bad.zip", {"include/onnxruntime_c_api.h": b"", **texts})
    assert check(bad, contract, "1.26.0") == ["missing required share/licenses/onnxruntime/ThirdPartyNotices.txt"]
    elsewhere = zip_members(tmp_path / "elsewhere.zip", {"LICENSE": b"", "ThirdPartyNotices.txt": b""})
    assert len(check(elsewhere, contract, "1.26.0")) == 2  # at the archive's root is not where they live


EMPTY_TEXTS = {
    "empty": b"",
    "blank lines": b"\n\r\n \t\n",
    "a byte-order mark and spaces": b"\xef\xbb\xbf   \n",
    "UTF-16 spaces": "\ufeff  \n".encode("utf-16-le"),
    "NULs": b"\0" * 64,
    "a zero-width space": "\u200b\n".encode(),
}
WORDED_TEXTS = {
    "a word": b"MIT License\n",
    "one character after a megabyte of blanks": b" " * (1 << 20) + b"x",
    "UTF-16 text": "\ufeffApache License".encode("utf-16-le"),
    "Latin-1 text": "Copyright \xa9 2024".encode("latin-1"),
}


@pytest.mark.parametrize("text", [*EMPTY_TEXTS, *WORDED_TEXTS])
def test_a_license_text_without_content_fails_naming_the_file(tmp_path: Path, text: str) -> None:
    contract = _licenses_only(LEG)
    texts = license_texts("onnxruntime")
    texts["share/licenses/onnxruntime/LICENSE"] = {**EMPTY_TEXTS, **WORDED_TEXTS}[text]
    problems = check(zip_members(tmp_path / "pkg.zip", {"include/onnxruntime_c_api.h": b"", **texts}), contract,
                     "1.26.0")
    if text in WORDED_TEXTS:
        assert problems == []
    else:
        assert problems == ["license text share/licenses/onnxruntime/LICENSE is empty or only whitespace: a "
                            "package carries the text itself (docs/licenses-and-provenance.md)"]


def test_a_symlinked_license_text_is_judged_by_its_target(tmp_path: Path) -> None:
    contract = _licenses_only(LEG)
    texts = license_texts("onnxruntime")
    del texts["share/licenses/onnxruntime/LICENSE"]
    texts["share/licenses/onnxruntime/COPYING"] = b"\n"
    archive = zip_members(tmp_path / "pkg.zip", {"include/onnxruntime_c_api.h": b"", **texts},
                          symlinks={"share/licenses/onnxruntime/LICENSE": "COPYING"})
    problems = check(archive, contract, "1.26.0")
    assert [p.split(" is empty")[0] for p in problems] == ["license text share/licenses/onnxruntime/COPYING",
                                                           "license text share/licenses/onnxruntime/LICENSE"]


def test_the_full_contract_fails_a_real_layout_without_texts(tmp_path: Path) -> None:
    problems = check(zip_members(tmp_path / "pkg.zip", {"include/onnxruntime_c_api.h": b""}), PLANS[LEG].contract,
                     "1.26.0")
    assert "missing required share/licenses/onnxruntime/LICENSE" in problems


# -- staging: the rules over an upstream-layout tree ---------------------------------------------

def _dirs(tmp_path: Path, extracts: dict[str, Path] | None = None, downloads: dict[str, Path] | None = None) -> LegDirs:
    return LegDirs(src=tmp_path / "src", build=tmp_path / "work", install=tmp_path / "install",
                   stage=tmp_path / "stage", logs=tmp_path / "logs", extracts=extracts or {},
                   downloads=downloads or {})


def test_the_release_archives_texts_land_in_share_licenses(tmp_path: Path) -> None:
    release = tmp_path / "tree" / "onnxruntime-linux-x64-1.26.0"
    (release / "lib").mkdir(parents=True)
    (release / "include").mkdir()
    (release / "include" / "onnxruntime_c_api.h").write_text("")
    (release / "lib" / "libonnxruntime.so.1.26.0").write_bytes(b"\x7fELF")
    (release / "LICENSE").write_text("MIT License\n")
    (release / "ThirdPartyNotices.txt").write_text("notices\n")
    plan = PLANS[LEG]
    stage_step.collect(plan.collect, plan.exclude, _dirs(tmp_path, {"release": tmp_path / "tree"}), {}, link=False)
    assert (tmp_path / "stage/share/licenses/onnxruntime/LICENSE").read_text() == "MIT License\n"
    assert (tmp_path / "stage/share/licenses/onnxruntime/ThirdPartyNotices.txt").is_file()
    (release / "LICENSE").unlink()
    with pytest.raises(stage_step.StageError, match="LICENSE"):
        stage_step.collect(plan.collect, plan.exclude, _dirs(tmp_path, {"release": tmp_path / "tree"}), {}, link=False)


def test_a_wheel_origin_brings_its_third_party_texts(tmp_path: Path) -> None:
    """LibTorch from PyTorch's wheel: LICENSE and NOTICE from the pinned files, and the
    third-party texts of the wheel's dist-info beside them."""
    tree = tmp_path / "tree"
    for name in ("include/torch/csrc/api/include/torch/torch.h", "lib/libtorch_cpu.so",
                 "share/cmake/Torch/TorchConfig.cmake"):
        (tree / "torch" / name).parent.mkdir(parents=True, exist_ok=True)
        (tree / "torch" / name).write_text("")
    fp16 = tree / "torch-2.13.0+cpu.dist-info/licenses/third_party/FP16/LICENSE"
    fp16.parent.mkdir(parents=True)
    fp16.write_text("FP16's license\n")
    texts = {name: tmp_path / f"libtorch-2.12.0-{name}" for name in ("LICENSE", "NOTICE")}
    for path in texts.values():
        path.write_text(path.name)
    plan = PLANS["libtorch-linux-x86_64-shared"]
    dirs = _dirs(tmp_path, {"release": tree / "torch"}, {"license": texts["LICENSE"], "notice": texts["NOTICE"]})
    stage_step.collect(plan.collect, plan.exclude, dirs, {}, link=False)
    licenses = tmp_path / "stage/share/licenses/libtorch"
    assert (licenses / "NOTICE").read_text() == "libtorch-2.12.0-NOTICE"
    assert (licenses / "third_party/FP16/LICENSE").read_text() == "FP16's license\n"


def test_the_android_bundle_keeps_the_texts_of_its_slices(tmp_path: Path) -> None:
    slices = []
    for abi in ("arm64-v8a", "x86_64"):
        tree = tmp_path / abi
        (tree / "include").mkdir(parents=True)
        (tree / "lib").mkdir()
        (tree / "lib" / "libonnxruntime.a").write_bytes(b"!<arch>\n")
        (tree / "share/licenses/onnxruntime").mkdir(parents=True)
        (tree / "share/licenses/onnxruntime/LICENSE").write_text("MIT\n")
        slices.append(tree)
    actions._android_bundle(["arm64-v8a", "x86_64"], slices, tmp_path / "stage")
    assert (tmp_path / "stage/share/licenses/onnxruntime/LICENSE").read_text() == "MIT\n"


# -- engines/contracts.toml [licenses] -----------------------------------------------------------

def _load(tmp_path: Path, text: str):  # type: ignore[no-untyped-def]
    path = tmp_path / "contracts.toml"
    path.write_text(text)
    load_contract_data.cache_clear()
    return load_contract_data(path)


def test_the_rows_may_depend_on_leg_facts(tmp_path: Path) -> None:
    data = _load(tmp_path, '[[licenses.onnxruntime]]\nfiles = ["LICENSE"]\n'
                           '[[licenses.onnxruntime]]\nwhen = { linkage = "static" }\nfiles = ["Bundled.txt"]\n')
    assert data.license_texts(MATRIX.leg("onnxruntime-linux-x86_64-static")) == (
        "share/licenses/onnxruntime/LICENSE", "share/licenses/onnxruntime/Bundled.txt")
    assert data.license_texts(MATRIX.leg(LEG)) == ("share/licenses/onnxruntime/LICENSE",)


@pytest.mark.parametrize("text, message", [
    ('[[licenses.onnxruntime]]\nfiles = ["third_party/LICENSE"]\n', "is not a plain file name"),
    ('[[licenses.onnxruntime]]\nfiles = ["*.txt"]\n', "is not a plain file name"),
    ('[[licenses.onnxruntime]]\nwhen = { os = "linux" }\n', "names no files"),
    ('[[licenses.onnxruntime]]\nfile = ["LICENSE"]\n', "unknown field file; fields: when, files"),
    ('[[licenses.onnxrutime]]\nfiles = ["LICENSE"]\n', "licenses.onnxrutime: no engine onnxrutime"),
    ('[licenses.onnxruntime]\nfiles = ["LICENSE"]\n', "expected an array of tables"),
])
def test_bad_rows_are_named(tmp_path: Path, text: str, message: str) -> None:
    with pytest.raises(DataError, match=message.replace("*", r"\*").replace(".", r"\.")):
        _load(tmp_path, text)
    load_contract_data.cache_clear()
