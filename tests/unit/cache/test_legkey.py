"""Leg keys: every class of input changes a leg's key; unrelated edits do not."""
from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from backends.cache import key as legkey
from backends.cache.key import leg_keys
from backends.model import recipes
from backends.model.matrix import load_matrix
from backends.model.recipes import plan_all
from backends.pins.engine_toml import record_pin
from scratch import REPO, scratch_project

PREBUILT = "onnxruntime-linux-x86_64-shared"
UNIVERSAL = "onnxruntime-macos-universal-shared"
PIN = "1" * 64
VERSION = load_matrix(REPO).engines["onnxruntime"].version
MAJOR, MINOR, *_ = VERSION.split(".")
NEXT_VERSION = f"{MAJOR}.{int(MINOR) + 1}.0"


def release_file(version: str = VERSION) -> str:
    """The prebuilt leg's upstream file name at `version` (what its pin is recorded under)."""
    matrix = load_matrix(REPO)
    leg = matrix.leg(PREBUILT)
    plan = recipes.plan_leg(leg, recipes.leg_engine(matrix, leg, version), matrix)
    return plan.downloads[0].filename


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """A copy whose ORT data, smoke project and variants can be edited, with the prebuilt
    leg's release pinned (the committed data pins nothing yet)."""
    root = scratch_project(tmp_path / "p", copied=("engines", "smoke", "variants"))
    record_pin(root / "engines/onnxruntime/engine.toml", release_file(), PIN)
    (root / "README.md").write_text("readme\n")
    return root


def keys(root: Path) -> dict[str, legkey.LegKey]:
    recipes._load_recipe.cache_clear()  # a recipe edited since: as a fresh scons process reads it
    matrix = load_matrix(root)
    return leg_keys(plan_all(matrix), matrix, root)


def _edit(path: Path, old: str, new: str) -> None:
    text = path.read_text()
    assert old in text, (path, old)
    path.write_text(text.replace(old, new, 1))


def test_a_pinned_leg_has_a_key_and_an_unpinned_one_says_why(project: Path) -> None:
    found = keys(project)
    assert len(found[PREBUILT].digest) == 64 and found[PREBUILT].uncacheable == ""
    assert found[UNIVERSAL].digest == ""
    assert "has no commit pin" in found[UNIVERSAL].uncacheable
    assert f"engine   onnxruntime {VERSION}" in found[PREBUILT].describe()


@pytest.mark.parametrize("edit", ["pin", "version", "patch", "plan", "smoke", "steps", "runner"])
def test_each_class_of_input_changes_the_key(project: Path, monkeypatch: pytest.MonkeyPatch, edit: str) -> None:
    leg = PREBUILT if edit not in ("patch",) else "onnxruntime-macos-arm64-gpu-static"
    before = keys(project)
    ort = project / "engines/onnxruntime"
    if edit == "pin":
        _edit(ort / "engine.toml", PIN, "2" * 64)
    elif edit == "version":
        _edit(ort / "engine.toml", f'version = "{VERSION}"', f'version = "{NEXT_VERSION}"')
        record_pin(ort / "engine.toml", release_file(NEXT_VERSION), PIN)
    elif edit == "patch":
        patch = sorted((ort / "patches").glob("*.py"))[0]
        patch.write_text(patch.read_text() + "\n# edited\n")
    elif edit == "plan":
        _edit(ort / "recipe.py", '"onnxruntime_ENABLE_LTO=OFF"', '"onnxruntime_ENABLE_LTO=OFF", "X=1"')
        leg = "onnxruntime-linux-x86_64-static"
    elif edit == "smoke":
        (project / "smoke/onnxruntime/CMakeLists.txt").write_text(
            (project / "smoke/onnxruntime/CMakeLists.txt").read_text() + "\n# edited\n")
    elif edit == "steps":
        monkeypatch.setattr(legkey, "STEP_VERSION", legkey.STEP_VERSION + 1)
    else:
        variants = project / "variants/onnxruntime.toml"
        _edit(variants, 'params = { asset = "onnxruntime-linux-x64", ext = "tgz" }\n',
              'params = { asset = "onnxruntime-linux-x64", ext = "tgz" }\nrunner = "ubuntu-24.04-arm"\n')
        _edit(variants, 'source = "prebuilt"\nrunner = "ubuntu-24.04"\nparams = { asset = "onnxruntime-linux-x64"',
              'source = "prebuilt"\nparams = { asset = "onnxruntime-linux-x64"')
    after = keys(project)
    assert before[leg].parts != after[leg].parts or before[leg].uncacheable != after[leg].uncacheable
    if before[leg].digest and after[leg].digest:
        assert before[leg].digest != after[leg].digest


def test_an_aggregate_key_follows_its_inputs() -> None:
    root = Path(__file__).resolve().parents[3]
    matrix = load_matrix(root)
    plans = {p.leg.id: p for p in plan_all(matrix)}
    x86, arm = matrix.leg(UNIVERSAL).inputs
    inputs = {i: legkey.LegKey(i, "a" * 64) for i in (x86, arm)}
    engine = matrix.engines["onnxruntime"]
    first = legkey.leg_key(plans[UNIVERSAL], engine, root, input_keys=inputs)
    changed = legkey.leg_key(plans[UNIVERSAL], engine, root, input_keys={**inputs, arm: legkey.LegKey(arm, "b" * 64)})
    assert first.digest and changed.digest and first.digest != changed.digest
    missing = legkey.leg_key(plans[UNIVERSAL], engine, root, input_keys={**inputs, arm: legkey.LegKey(arm, "", {}, "x")})
    assert missing.digest == "" and "is uncacheable (x)" in missing.uncacheable


def test_unrelated_edits_leave_the_key_alone(project: Path) -> None:
    before = keys(project)[PREBUILT]
    (project / "README.md").write_text("another readme\n")
    _edit(project / "engines/libtorch/recipe.py", "PACKAGE_DIRS = ", "UNUSED = 1\nPACKAGE_DIRS = ")
    _edit(project / "variants/libtorch.toml", "[[leg]]", "[[leg]]\nexperimental = true", )
    _edit(project / "variants/onnxruntime.toml", 'platform = "wasm"', 'platform = "wasm"\nexperimental = true')
    (project / "engines/onnxruntime/recipe.py").write_text(
        (project / "engines/onnxruntime/recipe.py").read_text() + "\n# a comment\n")
    assert keys(project)[PREBUILT] == before


def test_an_origin_file_is_part_of_the_key(project: Path, tmp_path: Path) -> None:
    matrix = load_matrix(project)
    plan = next(p for p in plan_all(matrix) if p.leg.id == PREBUILT)
    origin = tmp_path / release_file()
    origin.write_bytes(b"one")
    first = legkey.leg_key(plan, matrix.engines["onnxruntime"], project, origins={"": str(origin)})
    origin.write_bytes(b"two")
    second = legkey.leg_key(plan, matrix.engines["onnxruntime"], project, origins={"": str(origin)})
    assert first.digest and second.digest and first.digest != second.digest
    unpinned = replace(plan, downloads=tuple(replace(d, sha256="") for d in plan.downloads))
    assert legkey.leg_key(unpinned, matrix.engines["onnxruntime"], project).uncacheable


def test_the_submodules_a_leg_checks_out_are_in_its_key(project: Path) -> None:
    """The selected paths are part of what pins the source; their commits are the gitlinks of
    the pinned commit's tree, so the commit pin covers them. An entry another leg's switch
    selects leaves this leg's key alone."""
    leg = "executorch-linux-x86_64-static"
    before = keys(project)[leg]
    assert before.digest, before.uncacheable
    engine_toml = project / "engines/executorch/engine.toml"
    _edit(engine_toml, 'paths = ["backends/mlx/third-party/mlx"]',
          'paths = ["backends/mlx/third-party/mlx", "third-party/googletest"]')
    assert keys(project)[leg] == before  # the MLX entry: a switch this leg does not turn on
    _edit(engine_toml, 'paths = ["third-party/json", ', 'paths = ["third-party/json", "third-party/pybind11", ')
    after = keys(project)[leg]
    assert after.parts["inputs"] != before.parts["inputs"] and after.digest != before.digest


QUICK_START = "libtorch-linux-x86_64-shared"  # its license texts are optional downloads


def _optional(plan) -> list:
    return [download for download in plan.downloads if download.optional]


def test_an_optional_input_not_fetched_is_absent_from_the_key_and_its_pin_changes_it(project: Path) -> None:
    """An unpinned optional download is skipped by the build (the archive lacks its file), so
    it is part of the key as absent; recording its pin makes the build fetch it, so the key
    moves; with lock=1 the build fetches it unpinned, so the leg has no key."""
    matrix = load_matrix(project)
    plan = next(p for p in plan_all(matrix) if p.leg.id == QUICK_START)
    texts = _optional(plan)
    assert texts and all(not d.sha256 for d in texts)
    engine_toml = project / "engines/libtorch/engine.toml"
    record_pin(engine_toml, plan.downloads[0].filename, PIN)
    before = keys(project)[QUICK_START]
    assert before.digest, before.uncacheable
    locked = leg_keys([p for p in plan_all(load_matrix(project)) if p.leg.id == QUICK_START], load_matrix(project),
                      project, lock=True)[QUICK_START]
    assert locked.digest == "" and texts[0].filename in locked.uncacheable
    record_pin(engine_toml, texts[0].filename, "3" * 64)
    after = keys(project)[QUICK_START]
    assert after.digest and after.digest != before.digest
    assert after.parts["inputs"] != before.parts["inputs"]


def test_the_quick_start_leg_has_a_key_with_the_wheel_as_its_only_origin(project: Path, tmp_path: Path) -> None:
    """What tools/quickstart.sh passes (version= and the wheel as origin=) is enough for a key."""
    matrix = load_matrix(project)
    leg = matrix.leg(QUICK_START)
    plan = recipes.plan_leg(leg, recipes.leg_engine(matrix, leg, "2.13.0"), matrix)
    wheel = tmp_path / "torch-2.13.0+cpu-cp311-cp311-manylinux_2_28_x86_64.whl"
    wheel.write_bytes(b"wheel")
    key = legkey.leg_key(plan, recipes.leg_engine(matrix, leg, "2.13.0"), project, origins={"": str(wheel)})
    assert key.digest, key.uncacheable
    wheel.write_bytes(b"another wheel")
    assert legkey.leg_key(plan, recipes.leg_engine(matrix, leg, "2.13.0"), project,
                          origins={"": str(wheel)}).digest != key.digest
