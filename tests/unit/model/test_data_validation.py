"""Data errors are caught when the data is read, naming the file and row: every field typed
and checked by one schema (model/schema.py), versions by one grammar, variant rows with a
mistyped platform, patches whose `when` is misspelled or matches no leg, legs a recipe cannot
build (its validate(leg)), and pins past a patch's `until`."""
from __future__ import annotations

import re
import shutil
from dataclasses import replace
from pathlib import Path

import pytest

from backends.commands.report import render_plan
from backends.model.engine import DataError
from backends.model.matrix import load_matrix
from backends.model.recipe_kit import facts, linkage, patches_for
from backends.model.recipes import leg_engine, plan_leg
from backends.model.schema import VersionPattern, check_version
from backends.model.vocab import CONDITIONS

ROOT = Path(__file__).resolve().parents[3]


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
    ('when = []', "when must be a table such as .*, or a list of them"),
    ('when = [{ os = "linux" }, "macos"]', "when must be a table such as .*, or a list of them"),
    ('when = [{ os = "linux" }, { os = "win" }]', r"when.os 'win' is not one of macos, linux, windows"),
    ('whn = { accelerator = "coreml" }', r"unknown fields whn \(did you mean when\?\); fields: file, reason"),
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


def test_a_list_of_tables_matches_a_leg_any_of_them_matches(project: Path) -> None:
    replace_text(project / "engines" / "onnxruntime" / "engine.toml", ORT_PATCH,
                 'when = [{ accelerator = "coreml", linkage = "static" }, { platform = "windows-arm64" }]')
    matrix = load_matrix(project)
    engine = matrix.engines["onnxruntime"]
    with_patch = {leg.id for leg in matrix.legs if leg.engine == "onnxruntime" and patches_for(engine, leg)}
    assert {"onnxruntime-macos-x86_64-gpu-static", "onnxruntime-windows-arm64-shared",
            "onnxruntime-windows-arm64-gpu-shared"} <= with_patch
    expected = {leg.id for leg in matrix.legs if leg.engine == "onnxruntime"
                and (("coreml" in leg.accelerator and linkage(leg) == "static") or leg.platform == "windows-arm64")}
    assert with_patch == expected


def test_a_patch_that_applies_to_no_leg_is_an_error_naming_each_table(project: Path) -> None:
    replace_text(project / "engines" / "onnxruntime" / "engine.toml", ORT_PATCH,
                 'when = [{ accelerator = "coreml", os = "linux" }, { os = "wasm", accelerator = "dml" }]')
    with pytest.raises(DataError, match=r"applies to no leg of variants/onnxruntime.toml \(when accelerator = "
                                        r"coreml, os = linux or os = wasm, accelerator = dml\)"):
        load_matrix(project)


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

ORT = "engines/onnxruntime/engine.toml"
ET = "engines/executorch/engine.toml"
ET_ROW_VERSION = 'version = "1.5.1"'  # an executorch wheel row's own version
NOT_A_VERSION = r"is not a version such as 1.26.0"

# (file, text, its replacement, the DataError that names the file and the row or field)
BAD_DATA = [
    # -- variants/*.toml rows and [defaults]
    ("variants/tflite.toml", "[defaults]\n", "[defaults]\nexperimantal = true\n",
     r"tflite.toml \[defaults\]: unknown fields experimantal \(did you mean experimental\?\); fields: platform, "),
    ("variants/tflite.toml", "[defaults]\n", "[default]\n",
     r"tflite.toml: unknown fields default \(did you mean defaults\?\)"),
    ("variants/tflite.toml", "[defaults]\n", "[defaults]\nkind = []\n",
     r"tflite.toml \[defaults\]: kind is an empty list"),
    ("variants/tflite.toml", 'runner = "', 'runer = "',
     r"tflite.toml leg #1: unknown fields runer \(did you mean runner\?\)"),
    ("variants/executorch.toml", "can_run = false", 'can_run = "false"',
     r"executorch.toml leg #\d+: can_run must be a boolean \(true or false\), not 'false'"),
    ("variants/executorch.toml", "publish = false", 'publish = "no"',
     r"executorch.toml leg #\d+: publish must be a boolean \(true or false\), not 'no'"),
    ("variants/tflite.toml", 'kind = "static"', "kind = []", r"tflite.toml leg #\d+: kind is an empty list"),
    ("variants/tflite.toml", 'kind = "static"', "kind = 3", r"tflite.toml leg #\d+: kind must be a string, not 3"),
    ("variants/onnxruntime.toml", 'config = ["release", "debug"]', "config = []",
     r"onnxruntime.toml leg #\d+: config is an empty list"),
    ("variants/executorch.toml", 'accelerator = ["coreml", "mlx"]', "accelerator = []",
     r"executorch.toml leg #\d+: accelerator is an empty list"),
    ("variants/executorch.toml", 'toolchain = "android"', 'toolchain = ["android"]',
     r"executorch.toml leg #\d+: toolchain must be a string, not \['android'\]"),
    ("variants/tflite.toml", 'runner = "ubuntu-24.04"', 'runner = "../ubuntu-24.04"',
     r"tflite.toml leg #\d+: runner '../ubuntu-24.04' is not one of macos-15, "),
    ("variants/executorch.toml", ET_ROW_VERSION, 'version = "1.26.0/../../../advpub/x"',
     rf"executorch.toml leg #\d+: version '1.26.0/../../../advpub/x' {NOT_A_VERSION}"),
    ("variants/executorch.toml", ET_ROW_VERSION, 'version = "../../../../../../advpwn/1.0.0"',
     rf"executorch.toml leg #\d+: version '../../../../../../advpwn/1.0.0' {NOT_A_VERSION}"),
    ("variants/executorch.toml", ET_ROW_VERSION, 'version = "\u0661.\u0665.\u0661"',
     r"executorch.toml leg #\d+: version '\u0661.\u0665.\u0661' has non-ASCII characters"),
    ("variants/executorch.toml", ET_ROW_VERSION, 'version = "01.05.01"',
     r"executorch.toml leg #\d+: version '01.05.01' has a leading zero: write '1.5.1', its canonical spelling"),
    ("variants/executorch.toml", ET_ROW_VERSION, 'version = ""',
     rf"executorch.toml leg #\d+: version '' {NOT_A_VERSION}"),
    ("variants/executorch.toml", ET_ROW_VERSION, 'version = "1.5.1rc1"',  # the grammar's suffix, not executorch's
     r"executorch.toml leg #\d+: version '1.5.1rc1' does not match the version_pattern .* of "
     r"engines/executorch/engine.toml"),
    ("variants/executorch.toml", 'params = { wheel = "', 'params = { wheel = "../../',
     r"executorch.toml leg #\d+: params.wheel '../../manylinux_2_28_x86_64' must be one plain file name"),
    ("variants/executorch.toml", 'params = { wheel = "', 'params = { version = "1.5.1", wheel = "',
     r"executorch.toml leg #\d+: params key 'version' would replace the version in every template"),
    ("variants/litert.toml", 'file = "libLiteRt.dylib"', 'file = "/tmp/libLiteRt.dylib"',
     r"litert.toml leg #\d+: params.file '/tmp/libLiteRt.dylib' must be one plain file name"),
    ("variants/onnxruntime.toml", 'asset = "onnxruntime-linux-x64"', 'asset = "..%2F..%2Fonnxruntime-linux-x64"',
     r"onnxruntime.toml leg #\d+: params.asset '..%2F..%2Fonnxruntime-linux-x64' must be one plain file name"),
    ("variants/onnxruntime.toml", 'abis = "arm64-v8a x86_64"', 'abis = "arm64-v8a ../x86_64"',
     r"onnxruntime.toml leg #\d+: params.abis 'arm64-v8a ../x86_64' must be ABI names separated by single spaces"),
    ("variants/onnxruntime.toml", 'requires = { min_os = "macOS 11.0" }', 'requires = { min_os = "macOS\\n11.0" }',
     r"onnxruntime.toml leg #\d+: requires.min_os 'macOS\\n11.0' must be one line of text"),
    ("variants/onnxruntime.toml", 'requires = { min_os = "macOS 11.0" }', "requires = { min_os = 11 }",
     r"onnxruntime.toml leg #\d+: requires.min_os must be a string, not 11"),
    # -- engines/<engine>/engine.toml
    (ORT, 'version = "', 'versoin = "', r"onnxruntime/engine.toml: unknown fields versoin \(did you mean version\?\)"),
    (ORT, "[sha256]\n", "[sha265]\n", r"onnxruntime/engine.toml: unknown fields sha265 \(did you mean sha256\?\)"),
    (ORT, 'commit = "', 'commmit = "',
     r"onnxruntime/engine.toml \[sources.source\]: unknown fields commmit \(did you mean commit\?\)"),
    (ORT, 'version = "', "version = 1.26 #", r"onnxruntime/engine.toml: version must be a string, not 1.26"),
    (ORT, 'version = "', 'version = "0', r"onnxruntime/engine.toml: version '0[\d.]+' has a leading zero: write '"),
    (ORT, 'version = "', 'version_pattern = ".*"\nversion = "1.26/../x" #',
     rf"onnxruntime/engine.toml: version '1.26/../x' {NOT_A_VERSION}"),
    (ORT, 'version = "', 'version_pattern = "("\nversion = "',
     r"onnxruntime/engine.toml: version_pattern '\(' is not a regular expression"),
    (ORT, 'version = "', 'version_pattern = "[0-9]+"\nversion = "',
     r"onnxruntime/engine.toml: version '[\d.]+' does not match version_pattern '\[0-9\]\+'"),
    (ORT, "[sources.aar]\n", '[sources.aar]\nkind = "ftp"\n',
     r"onnxruntime/engine.toml \[sources.aar\]: kind 'ftp' is not one of archive, git"),
    (ORT, "[sources.aar]\n", '[sources."../aar"]\n',
     r"onnxruntime/engine.toml: sources key '../aar' must be one plain"),
    (ORT, 'commit = "', 'commit = "abc" #',
     r"onnxruntime/engine.toml \[sources.source\]: commit 'abc' is not a 40-digit hex commit id"),
    (ORT, 'ref = "v{version}"', 'ref = "--upload-pack=touch /tmp/x"',
     r"onnxruntime/engine.toml \[sources.source\]: ref '--upload-pack=touch /tmp/x' is not a git tag, branch"),
    (ORT, 'url = "https://github.com/microsoft/onnxruntime/releases', 'url = "file:///tmp/releases',
     r"onnxruntime/engine.toml \[sources.release\]: url 'file:///tmp/releases.*' must be a http:// or https:// URL"),
    (ORT, "/download/v{version}/", "/download/v{version.__class__}/",
     r"onnxruntime/engine.toml \[sources.release\]: url .*: placeholder \{version.__class__\} must be a plain name"),
    (ORT, "/download/v{version}/", "/download/v{version/",
     r"onnxruntime/engine.toml \[sources.release\]: url .* is not a template such as v\{version\}"),
    (ORT, 'homepage = "https://onnxruntime.ai"', 'homepage = "javascript:alert(1)"',
     r"onnxruntime/engine.toml: homepage 'javascript:alert\(1\)' must be a http:// or https:// URL"),
    (ORT, 'license = "MIT"', 'license = "MIT\\nevil"',
     r"onnxruntime/engine.toml: license 'MIT\\nevil' must be one line"),
    (ORT, 'libname = "onnxruntime"', 'libname = "../../elsewhere"',
     r"onnxruntime/engine.toml: libname '../../elsewhere' must be one plain file name"),
    (ORT, 'libname = "onnxruntime"', "libname = 3", r"onnxruntime/engine.toml: libname must be a string, not 3"),
    (ORT, 'package_dirs = ["include", "lib"]', 'package_dirs = ["include", "../lib"]',
     r"onnxruntime/engine.toml: package_dirs entry '../lib' must be one plain file name"),
    (ORT, 'package_dirs = ["include", "lib"]', 'package_dirs = "lib"',
     r"onnxruntime/engine.toml: package_dirs must be a list, not 'lib'"),
    (ORT, 'package_dirs = ["include", "lib"]', "package_dirs = []",
     r"onnxruntime/engine.toml: package_dirs is an empty list"),
    (ORT, "[pins]\n", "[pins]\nthreads = 4\n", r"onnxruntime/engine.toml: pins.threads must be a string, not 4"),
    (ORT, "[pins]\n", '[pins]\nversion = "9.9.9"\n',
     r"onnxruntime/engine.toml: pins key 'version' would replace the version in every template"),
    (ORT, "[pins]\n", '[pins]\nllvm = "x%2F..%2F..%2Fy"\n',
     r"onnxruntime/engine.toml: pins.llvm 'x%2F..%2F..%2Fy' must be one plain file name"),
    ("engines/executorch/engine.toml", 'torch_index = "https://', 'torch_index = "--index-url=file:///',
     r"executorch/engine.toml: pins.torch_index '--index-url=file:///.*' must be a http:// or https:// URL"),
    ("engines/litert/engine.toml", 'build_image = "', 'build_image = "--privileged ',
     r"litert/engine.toml: pins.build_image '--privileged .*' must be a container image reference"),
    (ORT, 'file = "patches/coreml_proto_export.py"', 'file = "../libtorch/recipe.py"',
     r"\[\[patches\]\] #1: file '../libtorch/recipe.py' must be a script in the engine's patches/ directory"),
    (ORT, 'file = "patches/coreml_proto_export.py"', 'file = "patches/nosuch.py"',
     r"onnxruntime/engine.toml: patch files not found: patches/nosuch.py"),
    (ORT, 'upstream = "https://', 'upstream = "see ',
     r"\[\[patches\]\] #1: upstream 'see .*' must be a http:// or https:// URL"),
    (ORT, 'until = "', 'until = "\u0661', r"\[\[patches\]\] #1: until '\u0661[\d.]+' has non-ASCII characters"),
    (ORT, "[sha256]\n", '[sha256]\n"extra.tgz" = "abc"\n',
     r"onnxruntime/engine.toml: sha256.\"extra.tgz\" 'abc' is not 64 lowercase hex digits"),
    (ORT, "[sha256]\n", '[sha256]\n"../extra.tgz" = ""\n',
     r"onnxruntime/engine.toml: sha256 key '../extra.tgz' must be one plain file name"),
    (ORT, "[sha256]\n", '[nested]\n"podspec.json" = "see the podspec"\n\n[sha256]\n',
     r"onnxruntime/engine.toml: nested.\"podspec.json\" 'see the podspec' must be a http:// or https:// URL"),
    # -- the submodules a git source checks out (model/submodules.py)
    (ET, 'submodules = "selected"', 'submodules = "some"',
     r"executorch/engine.toml \[sources.source\]: submodules must be true \(every submodule, recursively\), "
     r"false \(none\) or \"selected\".*not 'some'"),
    (ET, 'submodules = "selected"', "submodules = true",
     r"executorch/engine.toml \[\[submodules\]\] #1: source 'source' is not a git source with "
     r"submodules = \"selected\"; such sources: none"),
    (ET, "[[submodules]]\npaths", '[[submodules]]\nsource = "pytorch"\npaths',
     r"\[\[submodules\]\] #1: source 'pytorch' is not a git source with submodules = \"selected\"; such sources: "
     r"source$"),
    ("engines/libtorch/engine.toml", "submodules = true", 'submodules = "selected"',
     r"libtorch/engine.toml \[sources.source\]: submodules = \"selected\" but no \[\[submodules\]\] entry "
     r"names source 'source'"),
    (ORT, "[sources.aar]\n", "[sources.aar]\nsubmodules = true\n",
     r"onnxruntime/engine.toml \[sources.aar\]: submodules applies to git sources only"),
    (ET, 'paths = ["third-party/json"', 'paths = ["../json"',
     r"\[\[submodules\]\] #1: paths entry '../json' is not a submodule path relative to the source's root"),
    (ET, 'paths = ["third-party/json"', 'paths = ["/third-party/json"',
     r"\[\[submodules\]\] #1: paths entry '/third-party/json' is not a submodule path"),
    (ET, 'paths = ["backends/mlx/third-party/mlx"]', "paths = []", r"\[\[submodules\]\] #5: paths is an empty list"),
    (ET, 'switch = "EXECUTORCH_BUILD_XNNPACK"', 'switch = "-DEXECUTORCH_BUILD_XNNPACK=ON"',
     r"\[\[submodules\]\] #2: switch '-DEXECUTORCH_BUILD_XNNPACK=ON' is not a build switch name"),
    (ET, 'switch = "EXECUTORCH_BUILD_XNNPACK"', 'swich = "EXECUTORCH_BUILD_XNNPACK"',
     r"\[\[submodules\]\] #2: unknown fields swich \(did you mean switch\?\)"),
    (ET, 'when = { platform = "ios" }', 'when = { platform = "iphone" }',
     r"\[\[submodules\]\] #6: when.platform 'iphone' is not a canonical platform"),
    (ET, 'when = { platform = "ios" }', 'when = { os = "wasm" }',
     r"executorch/engine.toml: \[\[submodules\]\] #6 \(when os=wasm\) matches no leg of "
     r"variants/executorch.toml"),
]


@pytest.mark.parametrize("relative, old, new, error", BAD_DATA)
def test_bad_data_is_refused_at_load(project: Path, relative: str, old: str, new: str, error: str) -> None:
    path = project / relative
    text = path.read_text()
    assert old in text, f"{relative} has no {old!r}"
    path.write_text(text.replace(old, new, 1))
    with pytest.raises(DataError, match=error):
        load_matrix(project)


# -- versions: one grammar, narrowed by an engine's version_pattern -----------------------------

@pytest.mark.parametrize("version", ["1.26.0", "0.1", "10.0.22621.0", "1.27.0rc1", "2.13.0+cpu", "1.0.0.post1",
                                     "1.0.0-rc.1"])
def test_the_version_grammar_accepts(version: str) -> None:
    assert check_version(version, "here") == version


@pytest.mark.parametrize("version, problem", [
    ("01.26.0", "has a leading zero: write '1.26.0'"),
    ("1.26.00", "has a leading zero: write '1.26.0'"),
    ("1.026.0rc1", "has a leading zero: write '1.26.0rc1'"),
    ("\u0661.\u0662\u0666.\u0660", "has non-ASCII characters"),
    ("1.26.0\uff0f..", "has non-ASCII characters"),
    ("1.26.0/x", "is not a version"),
    ("1.26.0..x", "is not a version"),
    ("1..26", "is not a version"),
    ("1.26.0-", "is not a version"),
    ("v1.26.0", "is not a version"),
    (" 1.26.0", "is not a version"),
    ("1.26.0\n", "is not a version"),
    ("", "is not a version"),
])
def test_the_version_grammar_refuses(version: str, problem: str) -> None:
    with pytest.raises(DataError, match=rf"^here: version {re.escape(repr(version))} {problem}"):
        check_version(version, "here")


@pytest.mark.parametrize("pattern, version", [(".*", "1.26.0/../x"), (r"\d+(\.\d+)*", "\u0661.\u0662"),
                                              (r"[0-9.]+", "01.26.0"), (r"[^/]*", "1.26.0 x")])
def test_a_version_pattern_narrows_the_grammar_and_never_widens_it(pattern: str, version: str) -> None:
    assert re.fullmatch(pattern, version) and not VersionPattern(pattern).fullmatch(version)


def test_an_engine_declares_its_version_suffixes(project: Path) -> None:
    replace_text(project / "variants" / "executorch.toml", ET_ROW_VERSION, 'version = "1.5.1rc1"')
    with pytest.raises(DataError, match="does not match the version_pattern"):
        load_matrix(project)
    replace_text(project / "engines" / "executorch" / "engine.toml", 'version = "',
                 'version_pattern = "[0-9]+\\\\.[0-9]+\\\\.[0-9]+(rc[0-9]+)?"\nversion = "')
    assert {leg.version for leg in load_matrix(project).legs if leg.engine == "executorch"} == {"", "1.5.1rc1"}
