"""`scons affected since=<ref>`: the legs whose key parts differ between a commit's data and the
working tree, pinned or not. A fixture project in a git repository is edited after its commit:
each kind of edit names exactly the legs it rebuilds, and recording a pin rebuilds nothing (but an
optional download's, which the build then fetches)."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from backends.commands import affected
from backends.commands.affected import AffectedError
from backends.commands.invocation import resolve
from backends.model.matrix import load_matrix
from backends.model.recipes import plan_all
from backends.model.selection import SelectionError
from backends.probes.host import Host
from scratch import scratch_project

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT / "tests" / "integration"))

import fixtures  # noqa: E402  (the fixture engines' data writers)

SRC_URL = "http://127.0.0.1:9/fixsrc-{version}.tar.gz"  # never fetched: keys read the data only
BIN_URL = "http://127.0.0.1:9/{asset}-{version}.{ext}"
RELEASE = fixtures.fixbin_asset()
PIN, OTHER_PIN = "1" * 64, "2" * 64
CORE_ML = "fixsrc-linux-x86_64-gpu-shared"  # the one leg the register_coreml patch applies to
FIXBIN = fixtures.FIXBIN_LEG_IDS[0]
ALL = (*fixtures.FIXSRC_LEG_IDS, *fixtures.FIXBIN_LEG_IDS)


def git(root: Path, *args: str) -> str:
    done = subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@example.invalid", *args], cwd=root,
                          capture_output=True, text=True, check=True)
    return done.stdout


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """fixsrc unpinned, fixbin pinned, committed."""
    root = fixtures.new_project(tmp_path / "project")
    fixtures.write_fixsrc(root, SRC_URL, None)
    fixtures.write_fixbin(root, BIN_URL, {RELEASE: PIN})
    git(root, "init", "-q")
    git(root, "add", "-A")
    git(root, "commit", "-q", "-m", "fixture")
    return root


def changed(root: Path, ref: str = "HEAD") -> dict[str, tuple[str, ...]]:
    result = affected.affected(root, ref, ALL)
    return {change.leg: change.parts for change in result.changes}


def edit(path: Path, old: str, new: str) -> None:
    text = path.read_text()
    assert old in text, f"{path} has no {old!r}"
    path.write_text(text.replace(old, new, 1))


def test_an_unchanged_tree_rebuilds_nothing(project: Path) -> None:
    result = affected.affected(project, "HEAD", ALL)
    assert result.changes == () and result.compared == ALL
    assert result.unpinned == fixtures.FIXSRC_LEG_IDS  # said, not hidden
    assert not result.code_changed


def test_a_patch_edit_rebuilds_exactly_the_legs_it_applies_to_without_pins(project: Path) -> None:
    patch = project / "engines/fixsrc/patches/register_coreml.py"
    patch.write_text(patch.read_text() + "# reworded\n")
    assert changed(project) == {CORE_ML: ("patches",)}


def test_recording_a_pin_rebuilds_nothing_but_changing_one_does(project: Path) -> None:
    toml = project / "engines/fixsrc/engine.toml"
    edit(toml, "[sha256]\n", f'[sha256]\n"fixsrc-{fixtures.FIXSRC_VERSION}.tar.gz" = "{PIN}"\n')
    assert changed(project) == {}
    edit(project / "engines/fixbin/engine.toml", PIN, OTHER_PIN)
    assert set(changed(project)) == {FIXBIN} and "inputs" in changed(project)[FIXBIN]


def test_a_version_bump_smoke_edit_and_new_row_each_name_their_legs(project: Path) -> None:
    edit(project / "engines/fixbin/engine.toml", f'version = "{fixtures.FIXBIN_VERSION}"', 'version = "2.0.2"')
    assert changed(project)[FIXBIN][0] == "engine"
    git(project, "checkout", "-q", "--", "engines")
    (project / "smoke/fixsrc/smoke.c").write_text((project / "smoke/fixsrc/smoke.c").read_text() + "\n")
    assert changed(project) == dict.fromkeys(fixtures.FIXSRC_LEG_IDS, ("smoke",))
    git(project, "checkout", "-q", "--", "smoke")
    rows = project / "variants/fixsrc.toml"
    rows.write_text(rows.read_text() + fixtures.LegRow(kind="shared", config="debug").toml())
    result = affected.affected(project, "HEAD", (*ALL, "fixsrc-linux-x86_64-shared-debug"))
    assert [(c.leg, c.new) for c in result.changes] == [("fixsrc-linux-x86_64-shared-debug", True)]


def test_the_comparison_is_with_the_named_commit(project: Path) -> None:
    patch = project / "engines/fixsrc/patches/register_coreml.py"
    patch.write_text(patch.read_text() + "# reworded\n")
    git(project, "commit", "-q", "-am", "reword the patch")
    assert changed(project, "HEAD") == {}
    assert changed(project, "HEAD~1") == {CORE_ML: ("patches",)}


def test_the_report_names_the_parts_and_the_unpinned_legs(project: Path) -> None:
    patch = project / "engines/fixsrc/patches/register_coreml.py"
    patch.write_text(patch.read_text() + "# reworded\n")
    text = affected.report(project, "HEAD", ALL, load_matrix(project))
    assert f"1 of {len(ALL)} legs rebuild" in text
    assert any(line.split() == [CORE_ML, "unpinned", "patches"] for line in text.splitlines())
    assert "fixsrc: every one of its 4 legs" in text and "`scons lock`" in text


def test_a_ref_git_does_not_know_is_refused(project: Path, tmp_path: Path) -> None:
    with pytest.raises(AffectedError, match="since=nosuch: git knows no commit 'nosuch' here"):
        affected.affected(project, "nosuch", ALL)
    plain = tmp_path / "plain"
    plain.mkdir()
    with pytest.raises(AffectedError, match="is not a git checkout"):
        affected.affected(plain, "HEAD", ALL)


@pytest.mark.parametrize("arguments, targets, error", [
    ({}, ("affected",), "affected needs since=<git ref>"),
    ({"since": "HEAD"}, ("list",), "since=HEAD is for `scons affected`"),
    ({"since": "--upload-pack=touch x"}, ("affected",), "is not a git ref"),
])
def test_since_goes_with_affected(project: Path, arguments: dict[str, str], targets: tuple[str, ...],
                                  error: str) -> None:
    with pytest.raises(SelectionError, match=error):
        resolve(arguments, targets, load_matrix(project), project, Host("linux", "x86_64"))


def test_an_aggregate_rebuilds_with_its_input_legs(tmp_path: Path) -> None:
    """On the project's own data: an ONNX Runtime CoreML patch edit reaches the universal
    -gpu static archive through its two slices."""
    before = scratch_project(tmp_path / "before", copied=("engines", "smoke", "variants"))
    after = scratch_project(tmp_path / "after", copied=("engines", "smoke", "variants"))
    patch = after / "engines/onnxruntime/patches/coreml_proto_export.py"
    patch.write_text(patch.read_text() + "# reworded\n")
    universal = "onnxruntime-macos-universal-gpu-static"
    now, then = (affected.side(root, load_matrix(root), [universal]) for root in (after, before))
    changes, _ = affected.compare(now, then, [universal])
    assert [(c.leg, c.parts, sorted(c.inputs_changed)) for c in changes] == [
        (universal, (), ["onnxruntime-macos-arm64-gpu-static", "onnxruntime-macos-x86_64-gpu-static"])]
    assert changes[0].why == "2 input legs"


def test_recording_an_optional_pin_rebuilds_the_legs_that_now_fetch_it(tmp_path: Path) -> None:
    """An optional download unpinned is skipped (its file is absent from the archive): its pin,
    recorded since the ref, is a change to the archive of every leg that now fetches it."""
    root = scratch_project(tmp_path / "real", copied=("engines", "variants", "smoke"))
    git(root, "init", "-q")
    git(root, "add", "-A")
    git(root, "commit", "-q", "-m", "data")
    matrix = load_matrix(root)
    plans = [plan for plan in plan_all(matrix) if plan.leg.engine == "libtorch"]
    optional = {d.filename for plan in plans for d in plan.downloads if d.optional}
    text = sorted(optional)[0]
    fetching = tuple(plan.leg.id for plan in plans if any(d.filename == text for d in plan.downloads))
    toml = root / "engines/libtorch/engine.toml"
    edit(toml, "[sha256]\n", f'[sha256]\n"{text}" = "{PIN}"\n')
    result = affected.affected(root, "HEAD", tuple(plan.leg.id for plan in plans))
    assert fetching and {change.leg: "inputs" in change.parts for change in result.changes} == \
        dict.fromkeys(fetching, True)
