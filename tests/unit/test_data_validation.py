"""Data errors are caught when the data is read, naming the file and row: variant rows with a
mistyped platform, patches whose `when` is misspelled or matches no leg, legs a recipe cannot
build (its validate(leg)), and pins past a patch's `until`."""
from __future__ import annotations

import shutil
from dataclasses import replace
from pathlib import Path

import pytest

from backends.explain import render_plan
from backends.model.engine import DataError
from backends.model.matrix import load_matrix
from backends.model.recipe_kit import facts, patches_for
from backends.model.recipes import leg_engine, plan_leg
from backends.model.vocab import CONDITIONS

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """A copy of the project's data (variants/, engines/) to edit."""
    for name in ("variants", "engines"):
        shutil.copytree(ROOT / name, tmp_path / name)
    return tmp_path


def append(path: Path, text: str) -> None:
    path.write_text(path.read_text() + "\n" + text)


def replace_text(path: Path, old: str, new: str) -> None:
    text = path.read_text()
    assert old in text, f"{path} has no {old!r}"
    path.write_text(text.replace(old, new))


def plan_by_id(root: Path, leg_id: str):  # type: ignore[no-untyped-def]
    matrix = load_matrix(root)
    leg = matrix.leg(leg_id)
    return plan_leg(leg, leg_engine(matrix, leg), matrix)


ORT_PATCH = 'when = { accelerator = "coreml", linkage = "static" }'


# -- variant rows -------------------------------------------------------------------------------

def test_a_mistyped_platform_names_the_file_and_row(project: Path) -> None:
    path = project / "variants" / "tflite.toml"
    rows = path.read_text().split("[[leg]]")  # rows[0] precedes the first row
    index = next(i for i, row in enumerate(rows) if 'platform = "linux-x86_64"' in row)
    path.write_text("[[leg]]".join([*rows[:index], rows[index].replace('"linux-x86_64"', '"linux-x68_64"'),
                                    *rows[index + 1:]]))
    with pytest.raises(DataError, match=rf"tflite.toml leg #{index}: unknown platform 'linux-x68_64'; platforms are"):
        load_matrix(project)


def test_an_xcframework_is_the_ios_package_only(project: Path) -> None:
    append(project / "variants" / "tflite.toml",
           '[[leg]]\nplatform = "macos-arm64"\nkind = "xcframework"\nrunner = "macos-15"\n')
    with pytest.raises(DataError, match="kind xcframework is the iOS package"):
        load_matrix(project)


# -- recipes refuse what they cannot build ------------------------------------------------------

def test_an_onnxruntime_vulkan_row_is_refused_not_planned_as_cpu(project: Path) -> None:
    append(project / "variants" / "onnxruntime.toml",
           '[[leg]]\nplatform = "linux-x86_64"\nkind = "static"\nflavor = "gpu"\naccelerator = "vulkan"\n'
           'runner = "ubuntu-24.04"\n')
    with pytest.raises(DataError, match=r"onnxruntime-linux-x86_64-gpu-static \(variants/onnxruntime.toml\): "
                                        r"onnxruntime cannot build accelerator vulkan on linux-x86_64"):
        plan_by_id(project, "onnxruntime-linux-x86_64-gpu-static")


def test_a_libtorch_android_row_is_refused(project: Path) -> None:
    append(project / "variants" / "libtorch.toml",
           '[[leg]]\nplatform = "android-arm64-v8a"\nkind = "shared"\nrunner = "ubuntu-24.04"\ncan_run = false\n')
    with pytest.raises(DataError, match="libtorch-android-arm64-v8a-shared .*builds for macos, linux and windows"):
        plan_by_id(project, "libtorch-android-arm64-v8a-shared")


@pytest.mark.parametrize("leg_id, change, refusal", [
    ("onnxruntime-linux-x86_64-static", {"kind": "shared"}, "builds shared libraries from source on macos"),
    ("onnxruntime-macos-arm64-gpu-static", {"accelerator": ("dml",)}, "cannot build accelerator dml"),
    ("onnxruntime-linux-x86_64-cuda-shared", {"source": "build"}, "cannot build accelerator cuda"),
    ("onnxruntime-linux-x86_64-shared", {"params": {}}, "needs params asset, ext"),
    ("libtorch-macos-x86_64-shared", {"flavor": "gpu", "accelerator": ("mps",)}, "cannot build accelerator mps"),
    ("libtorch-linux-x86_64-shared", {"kind": "static"}, "ships shared libraries only"),
    ("libtorch-linux-aarch64-shared", {"config": "debug"}, "builds Release only"),
    ("executorch-linux-x86_64-static", {"kind": "shared"}, "builds static libraries from source"),
    ("executorch-linux-x86_64-gpu-static", {"accelerator": ("cuda",)}, "cannot build accelerator cuda"),
    ("executorch-linux-x86_64-shared", {"platform": "windows-x86_64"}, "linux and macos wheels"),
    ("tflite-linux-x86_64-static", {"platform": "wasm"}, "has no WASM toolchain wiring"),
    ("tflite-macos-arm64-gpu-static", {"accelerator": ("coreml",)}, "cannot build accelerator coreml"),
    ("tflite-ios-xcframework", {"source": "build"}, "repackages Google's xcframeworks on ios"),
    ("litert-linux-x86_64-static", {"flavor": "gpu", "accelerator": ("vulkan",)}, "it offers: none"),
    ("litert-linux-x86_64-static", {"kind": "shared"}, "builds shared libraries from source on macos, windows"),
])
def test_recipes_refuse_legs_they_cannot_build(leg_id: str, change: dict[str, object], refusal: str) -> None:
    matrix = load_matrix(ROOT)
    leg = matrix.leg(leg_id)
    plan_leg(leg, leg_engine(matrix, leg), matrix)  # the leg as the data has it is fine
    with pytest.raises(DataError, match=refusal):
        changed = replace(leg, **change)  # type: ignore[arg-type]
        plan_leg(changed, leg_engine(matrix, changed), matrix)


def test_every_engine_recipe_has_a_validate() -> None:
    for recipe in sorted(ROOT.glob("engines/*/recipe.py")):
        assert "\ndef validate(leg: Leg) -> None:" in recipe.read_text(), recipe


# -- patch metadata -----------------------------------------------------------------------------

def test_the_when_keys_are_the_leg_facts() -> None:
    leg = load_matrix(ROOT).legs[0]
    assert set(facts(leg)) == set(CONDITIONS)


@pytest.mark.parametrize("when, error", [
    ('when = { acelerator = "coreml" }', r"when.acelerator is not a leg fact; keys: platform"),
    ('when = { os = "win" }', r"when.os 'win' is not one of macos, linux, windows"),
    ('when = { platform = "macos-aarch64" }', r"when.platform 'macos-aarch64' is not a canonical platform"),
    ('when = { os = 3 }', "when.os must be a string or a list of strings"),
    ('when = { os = [] }', "when.os must be a string or a list of strings"),
    ('when = "coreml"', "when must be a table"),
    ('whn = { accelerator = "coreml" }', r"unknown fields whn; fields: file, reason"),
])
def test_a_misspelled_when_is_an_error_not_a_patch_for_every_leg(project: Path, when: str, error: str) -> None:
    replace_text(project / "engines" / "onnxruntime" / "engine.toml", ORT_PATCH, when)
    with pytest.raises(DataError, match=rf"engines/onnxruntime/engine.toml \[\[patches\]\] #1: {error}"):
        load_matrix(project)


def test_a_list_value_matches_any_of_its_values(project: Path) -> None:
    replace_text(project / "engines" / "onnxruntime" / "engine.toml", ORT_PATCH,
                 'when = { accelerator = ["coreml", "dml"], linkage = ["static", "shared"] }')
    matrix = load_matrix(project)
    engine = matrix.engines["onnxruntime"]
    with_patch = {leg.id for leg in matrix.legs if leg.engine == "onnxruntime" and patches_for(engine, leg)}
    assert {"onnxruntime-windows-arm64-gpu-shared", "onnxruntime-macos-arm64-gpu-shared",
            "onnxruntime-macos-x86_64-gpu-static", "onnxruntime-ios-gpu-xcframework"} <= with_patch
    assert not {leg_id for leg_id in with_patch if "-gpu-" not in leg_id}


def test_a_patch_that_applies_to_no_leg_is_an_error(project: Path) -> None:
    replace_text(project / "engines" / "onnxruntime" / "engine.toml", ORT_PATCH,
                 'when = { accelerator = "coreml", os = "linux" }')
    with pytest.raises(DataError, match=r"patch patches/coreml_proto_export.py applies to no leg of "
                                        r"variants/onnxruntime.toml \(when accelerator = coreml, os = linux\)"):
        load_matrix(project)


def test_a_pin_past_until_is_flagged_in_the_plan() -> None:
    matrix = load_matrix(ROOT)
    leg = matrix.leg("onnxruntime-macos-arm64-gpu-static")
    engine = matrix.engines["onnxruntime"]
    patch = next(p for p in engine.patches if p.name == "coreml_proto_export")
    at_until = plan_leg(leg, engine.with_version(patch.until), matrix)
    assert at_until.patches and not at_until.warnings
    major, minor, *_ = patch.until.split(".")
    later = f"{major}.{int(minor) + 1}.0"
    past = plan_leg(leg, engine.with_version(later), matrix)
    assert any(f"patch coreml_proto_export: onnxruntime {later} is past its `until` {patch.until}" in warning
               for warning in past.warnings)
    assert f"  warning: patch coreml_proto_export: onnxruntime {later}" in render_plan(past)


def test_until_must_be_a_version(project: Path) -> None:
    replace_text(project / "engines" / "onnxruntime" / "engine.toml", 'until = "', 'until = "v')
    with pytest.raises(DataError, match=r"until 'v[\d.]+' is not a version such as 1.26.0"):
        load_matrix(project)


# -- fields typed at load: a hostile or careless edit fails naming the file and field -----------

BAD_DATA = [
    ("variants/tflite.toml", "[defaults]\n", "[defaults]\nexperimantal = true\n",
     r"tflite.toml \[defaults\]: unknown fields experimantal; fields: "),
    ("variants/executorch.toml", "can_run = false", 'can_run = "false"',
     r"executorch.toml leg #\d+: can_run must be a boolean \(true or false\), not 'false'"),
    ("variants/executorch.toml", "publish = false", 'publish = "no"',
     r"executorch.toml leg #\d+: publish must be a boolean \(true or false\), not 'no'"),
    ("engines/onnxruntime/engine.toml", 'version = "', "version = 1.26 #",
     r"onnxruntime/engine.toml: version must be a string, not 1.26"),
    ("engines/onnxruntime/engine.toml", "[sources.aar]\n", '[sources.aar]\nkind = "ftp"\n',
     r"\[sources.aar\]: kind 'ftp' is not one of archive, git"),
    ("engines/onnxruntime/engine.toml", 'commit = "', 'commit = "abc" #',
     r"\[sources.source\]: commit 'abc' is not a 40-digit hex commit id"),
    ("engines/onnxruntime/engine.toml", 'libname = "onnxruntime"', 'libname = "../../elsewhere"',
     r"libname '../../elsewhere' must be one plain file name"),
    ("engines/onnxruntime/engine.toml", 'libname = "onnxruntime"', "libname = 3",
     r"libname must be a string, not 3"),
    ("engines/onnxruntime/engine.toml", 'package_dirs = ["include", "lib"]', 'package_dirs = ["include", "../lib"]',
     r"package_dirs entry '../lib' must be one plain file name"),
    ("engines/onnxruntime/engine.toml", 'package_dirs = ["include", "lib"]', 'package_dirs = "lib"',
     r"package_dirs must be a list, not 'lib'"),
    ("engines/onnxruntime/engine.toml", "[pins]\n", "[pins]\nthreads = 4\n",
     r"pins.threads must be a string, not 4"),
    ("engines/onnxruntime/engine.toml", 'file = "patches/coreml_proto_export.py"', 'file = "../libtorch/recipe.py"',
     r"file '../libtorch/recipe.py' must be a script in the engine's patches/ directory"),
    ("engines/onnxruntime/engine.toml", 'file = "patches/coreml_proto_export.py"', 'file = "patches/nosuch.py"',
     r"patch files not found: patches/nosuch.py"),
    ("engines/onnxruntime/engine.toml", 'version = "', 'version_pattern = ".*"\nversion = "1.26/../x" #',
     r"version '1.26/../x' must be one plain file name"),
    ("engines/onnxruntime/engine.toml", "[sha256]\n", '[sha256]\n"extra.tgz" = "abc"\n',
     r"\[sha256\] 'extra.tgz' = 'abc' is not 64 lowercase hex digits"),
]


@pytest.mark.parametrize("relative, old, new, error", BAD_DATA)
def test_bad_data_is_refused_at_load(project: Path, relative: str, old: str, new: str, error: str) -> None:
    path = project / relative
    text = path.read_text()
    assert old in text, f"{relative} has no {old!r}"
    path.write_text(text.replace(old, new, 1))
    with pytest.raises(DataError, match=error):
        load_matrix(project)
