"""takes.py: what a stage takes from an extraction, and the extraction that writes only that."""
from __future__ import annotations

import os
from dataclasses import replace
from pathlib import Path

import pytest

from backends.model.leg import Leg
from backends.model.plan import Bundle, Command, CopyRule, Download, Plan
from backends.steps import stage as stage_step
from backends.steps.context import LegDirs
from backends.steps.extract import ExtractError, extract, extract_counted
from backends.steps.takes import Take, Takes, takes
from backends.util.files import list_tree

from test_extract import make_tar, make_zip

WHEEL = "torch-2.13.0-cp311-cp311-manylinux_2_28_x86_64.whl"
RELEASE = Download("release", "https://example.invalid/torch.whl", WHEEL, roots=("libtorch", "torch"))
RULES = (
    CopyRule("{extract:release}/include/**", "include"),
    CopyRule("{extract:release}/lib/**", "lib"),
    CopyRule("{extract:release}/bin/**", "bin", required=False),
    CopyRule("{extract:release}/../torch-*.dist-info/licenses/LICENSE", "share/licenses/libtorch"),
)
EXCLUDE = ("lib/libtorch_python.*", "bin/test_*")
WHEEL_MEMBERS = [
    ("torch/__init__.py", "file", b"import torch\n"),
    ("torch/_inductor/codegen.py", "file", b"pass\n"),
    ("torch/include/torch/torch.h", "file", b"// torch\n"),
    ("torch/lib/libtorch_cpu.so", "file", b"\x7fELF cpu"),
    ("torch/lib/libtorch.so", "symlink", "libtorch_cpu.so"),
    ("torch/lib/libtorch_python.so", "file", b"\x7fELF python"),
    ("torch/bin/torch_shm_manager", "exec", b"\x7fELF shm"),
    ("torch/bin/test_api", "exec", b"\x7fELF test"),
    ("torch-2.13.0.dist-info/licenses/LICENSE", "file", b"BSD\n"),
    ("torch-2.13.0.dist-info/RECORD", "file", b"record\n"),
]
TAKEN = {"torch/include/torch/torch.h", "torch/lib/libtorch_cpu.so", "torch/lib/libtorch.so",
         "torch/bin/torch_shm_manager", "torch-2.13.0.dist-info/licenses/LICENSE"}


def _plan(**fields: object) -> Plan:
    leg = Leg(engine="libtorch", platform="linux-x86_64", kind="shared", config="release", flavor="cpu",
              source="prebuilt", runner="ubuntu-24.04", can_run=True)
    return replace(Plan(leg=leg, version="2.13.0", archive="a.zip", downloads=(RELEASE,), collect=RULES,
                        exclude=EXCLUDE), **fields)


def _files(tree: Path) -> set[str]:
    return {entry.path for entry in list_tree(tree) if entry.kind != "dir"}


def test_the_extraction_holds_what_the_rules_take_and_the_excludes_keep(tmp_path):
    wheel = make_zip(tmp_path / WHEEL, WHEEL_MEMBERS)
    selection = takes(_plan(), RELEASE, WHEEL)
    assert selection is not None
    entries, left_out = extract_counted(wheel, tmp_path / "tree", select=selection.select)
    assert _files(tmp_path / "tree") == TAKEN
    assert {entry.path for entry in entries if entry.kind != "dir"} == TAKEN
    assert left_out == len(WHEEL_MEMBERS) - len(TAKEN)
    assert os.readlink(tmp_path / "tree/torch/lib/libtorch.so") == "libtorch_cpu.so"


def test_the_stage_of_a_selected_extraction_is_that_of_the_whole_one(tmp_path):
    wheel = make_zip(tmp_path / WHEEL, WHEEL_MEMBERS)
    selection = takes(_plan(), RELEASE, WHEEL)
    assert selection is not None
    stages = {}
    for label, select in (("whole", None), ("selected", selection.select)):
        tree = tmp_path / label / "tree"
        extract(wheel, tree, select=select)
        dirs = LegDirs(src=tmp_path / "src", build=tmp_path / "b", install=tmp_path / "i",
                       stage=tmp_path / label / "stage", logs=tmp_path / "logs", extracts={"release": tree / "torch"})
        stage_step.collect(RULES, EXCLUDE, dirs, {}, link=False)
        stages[label] = {entry.path: (entry.kind, entry.size) for entry in list_tree(dirs.stage)}
    assert stages["selected"] == stages["whole"]
    assert "lib/libtorch_python.so" not in stages["whole"] and "bin/torch_shm_manager" in stages["whole"]


def test_extract_adds_the_targets_of_kept_symlinks_even_through_directories(tmp_path):
    archive = make_zip(tmp_path / "a.zip", [
        ("torch/lib/libtorch.so", "symlink", "../versions/current/libtorch.so.2"),
        ("torch/versions/current", "symlink", "2.13"),
        ("torch/versions/2.13/libtorch.so.2", "file", b"lib"),
        ("torch/versions/2.12/libtorch.so.2", "file", b"old"),
    ])
    selection = Takes((Take("lib/**", "lib"),), (), ("torch",))
    extract(archive, tmp_path / "tree", select=selection.select)
    assert _files(tmp_path / "tree") == {"torch/lib/libtorch.so", "torch/versions/current",
                                         "torch/versions/2.13/libtorch.so.2"}
    assert (tmp_path / "tree/torch/lib/libtorch.so").read_bytes() == b"lib"


def test_an_unsafe_member_is_refused_even_where_no_rule_takes_it(tmp_path):
    archive = make_zip(tmp_path / "a.zip", [("torch/lib/a.so", "file", b"a"), ("../escape.py", "file", b"x")])
    selection = Takes((Take("lib/**", "lib"),), (), ("torch",))
    with pytest.raises(ExtractError, match="'..' component"):
        extract(archive, tmp_path / "tree", select=selection.select)
    assert not (tmp_path / "tree").exists()


def test_the_root_is_judged_like_the_stage_judges_it_on_disk():
    rules = Takes((Take("lib/*.so", "lib"),), (), ("libtorch", "torch"))
    assert rules.root({"torch/lib/a.so": "file", "libtorch/lib/b.so": "file"}) == "libtorch"
    assert rules.select({"torch/lib/a.so": "file", "x/lib/b.so": "file"}) == {"torch/lib/a.so", "torch"}
    assert rules.root({"lib/a.so": "file"}) == ""
    linked = {"torch": "symlink", "real/lib/a.so": "file", "real/x.py": "file"}
    assert rules.select(linked) == set(linked)  # a symlinked root: judged on disk, so all of it


def test_a_tar_is_extracted_whole_and_not_keyed_by_rules(tmp_path):
    tarball = make_tar(tmp_path / "a.tar.gz", [("torch/lib/a.so", "file", b"a"), ("torch/x.py", "file", b"x")])
    assert takes(_plan(), RELEASE, "torch.tar.gz") is None
    extract(tarball, tmp_path / "tree", select=Takes((Take("lib/**", "lib"),), (), ("torch",)).select)
    assert _files(tmp_path / "tree") == {"torch/lib/a.so", "torch/x.py"}


@pytest.mark.parametrize("fields", [
    {"build": (Command("cmake", ("cmake", "-DTORCH_DIR={extract:release}")),)},
    {"env": {"TORCH_DIR": "{extract:release}/share"}},
    {"fixups": (Command("rpath", ("patchelf", "{extract:release}/lib/a.so")),)},
    {"bundle": Bundle("lib/libtorch.a", "{extract:release}/lib")},
    {"collect": (*RULES, CopyRule("{extract:release}", "whole"))},
    {"collect": (*RULES, CopyRule("{extract:release}/{platform}/lib/*", "lib"))},
    {"private_source": True},
])
def test_what_reads_the_tree_otherwise_takes_all_of_it(fields):
    assert takes(_plan(), RELEASE, WHEEL) is not None
    assert takes(_plan(**fields), RELEASE, WHEEL) is None


def test_the_selection_changes_with_the_rules_and_excludes_only():
    base = takes(_plan(), RELEASE, WHEEL)
    assert takes(_plan(notes=("a note",)), RELEASE, WHEEL) == base
    assert takes(_plan(exclude=EXCLUDE + ("lib/libgomp*",)), RELEASE, WHEEL) != base
    assert takes(_plan(collect=RULES[:2]), RELEASE, WHEEL) != base
    other = Download("other", "https://example.invalid/o.zip", "o.zip")
    assert takes(_plan(downloads=(RELEASE, other)), other, "o.zip") == Takes((), EXCLUDE, ())
