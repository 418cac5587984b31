"""The patch step on a fixture tree: applied once, idempotent, "already upstream" reported and
skipped, a patch that no longer applies fails naming the file, and the shared origin tree
(hard-linked) is never modified."""
from pathlib import Path

import pytest

from backends.steps.source import PatchError, apply_patch, prepare_tree
from test_patch_scripts import COREML

ROOT = Path(__file__).resolve().parents[3]
SCRIPTS = [ROOT / "engines/onnxruntime/patches/coreml_proto_export.py",
           ROOT / "engines/onnxruntime/patches/coreml_proto_build_interface.py"]
TARGET = "cmake/onnxruntime_providers_coreml.cmake"


def origin(tmp_path, text=COREML):
    tree = tmp_path / "origin"
    (tree / "cmake").mkdir(parents=True)
    (tree / TARGET).write_text(text)
    return tree


def test_applied_once_and_the_origin_stays_untouched(tmp_path):
    source = origin(tmp_path)
    outcomes = prepare_tree(source, tmp_path / "patched", SCRIPTS)
    assert [(o.name, o.status) for o in outcomes] == [("coreml_proto_export", "applied"),
                                                      ("coreml_proto_build_interface", "applied")]
    patched = (tmp_path / "patched" / TARGET).read_text()
    assert "install(TARGETS coreml_proto EXPORT ${PROJECT_NAME}Targets" in patched
    assert "$<BUILD_INTERFACE:${CMAKE_CURRENT_BINARY_DIR}>" in patched
    assert (source / TARGET).read_text() == COREML
    again = [apply_patch(tmp_path / "patched", script) for script in SCRIPTS]  # idempotent
    assert [o.status for o in again] == ["already upstream", "already upstream"]
    assert (tmp_path / "patched" / TARGET).read_text() == patched


def test_upstream_fix_is_detected_and_skipped(tmp_path):
    fixed = COREML.replace("install(TARGETS coreml_proto\n",
                           "install(TARGETS coreml_proto\n            EXPORT ${PROJECT_NAME}Targets\n")
    fixed = fixed.replace('"${CMAKE_CURRENT_BINARY_DIR}")', "$<BUILD_INTERFACE:${CMAKE_CURRENT_BINARY_DIR}>)")
    outcomes = prepare_tree(origin(tmp_path, fixed), tmp_path / "patched", SCRIPTS)
    assert [o.describe() for o in outcomes] == [f"patch coreml_proto_export: already upstream ({TARGET})",
                                                f"patch coreml_proto_build_interface: already upstream ({TARGET})"]


def test_a_patch_that_no_longer_applies_fails_and_leaves_no_half_tree(tmp_path):
    script = tmp_path / "stale.py"
    script.write_text("FILES = ('cmake/*.cmake',)\n"
                      "def already_fixed(path, text): return False\n"
                      "def apply(path, text): return text\n")
    with pytest.raises(PatchError, match=f"patch stale no longer applies to {TARGET}: upstream text changed"):
        prepare_tree(origin(tmp_path), tmp_path / "patched", [script])
    assert not (tmp_path / "patched").exists() and not (tmp_path / "patched.tmp").exists()


def test_a_patch_whose_files_match_nothing_fails(tmp_path):
    moved = tmp_path / "moved.py"
    moved.write_text("FILES = ('cmake/onnxruntime_providers_coreml_moved.cmake', 'tools/*.cmake')\n"
                     "def already_fixed(path, text): return False\n"
                     "def apply(path, text): return None\n")
    with pytest.raises(PatchError, match="patch moved: its FILES .* match nothing in the source tree"):
        prepare_tree(origin(tmp_path), tmp_path / "patched", [moved])
    assert not (tmp_path / "patched").exists()


def test_files_that_need_no_edit_are_reported_not_failed(tmp_path):
    idle = tmp_path / "idle.py"
    idle.write_text("FILES = ('cmake/*.cmake',)\n"
                    "def already_fixed(path, text): return False\n"
                    "def apply(path, text): return None\n")
    assert [o.status for o in prepare_tree(origin(tmp_path), tmp_path / "patched", [idle])] == ["nothing to change"]
