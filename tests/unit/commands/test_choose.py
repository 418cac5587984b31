"""Bare `scons` (nothing selected) suggests only what can succeed here and now: a leg whose
inputs are all pinned; a leg with an unpinned input only together with `scons lock` (or
origin=), since its build would refuse the unpinned download."""
from __future__ import annotations

import sys
from pathlib import Path

from backends.commands.report import choose_text, unpinned_inputs
from backends.model.matrix import load_matrix
from backends.model.recipes import plan_all
from backends.probes.host import Host

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT / "tests" / "integration"))

import fixtures  # noqa: E402  (the fixture engines' data writers)

LINUX = Host("linux", "x86_64")
URL = "http://127.0.0.1:9/{asset}-{version}.{ext}"  # never fetched: nothing here builds
RELEASE = fixtures.fixbin_asset()
# Two repackaging engines: `fixa` comes first in the matrix, so an unpinned `fixa` leg is the
# one a suggestion that ignores pins would name.
FIXA, FIXB = "fixa-linux-x86_64-shared", "fixb-linux-x86_64-shared"


def choose(tmp_path: Path, pinned: tuple[str, ...]) -> tuple[str, dict[str, list[str]]]:
    root = fixtures.new_project(tmp_path / "project")
    for name in ("fixa", "fixb"):
        fixtures.write_fixbin(root, URL, {RELEASE: "1" * 64} if name in pinned else {}, name=name)
    matrix = load_matrix(root)
    plans = plan_all(matrix)
    unpinned = unpinned_inputs(plans, matrix)
    return choose_text(plans, LINUX, unpinned), unpinned


def section(text: str, heading: str) -> str:
    """The lines from `heading` to the next blank line."""
    start = text.index(heading)
    end = text.find("\n\n", start)
    return text[start:] if end < 0 else text[start:end]


def test_unpinned_inputs_name_each_legs_files(tmp_path: Path) -> None:
    _, unpinned = choose(tmp_path, pinned=("fixb",))
    assert unpinned == {FIXA: [f"fixa {RELEASE}"]}


def test_the_suggestion_is_a_leg_whose_inputs_are_pinned(tmp_path: Path) -> None:
    text, _ = choose(tmp_path, pinned=("fixb",))
    suggestion = next(line for line in text.splitlines() if line.startswith("Build one:"))
    assert suggestion.endswith(f"e.g. scons {FIXB} (prebuilt: quick)")
    assert FIXB in section(text, "Every input pinned: these build now.")
    waiting = section(text, "Unpinned inputs")
    assert "`scons lock <leg id>`" in waiting and "origin=" in waiting
    assert FIXA in waiting and FIXB not in waiting


def test_with_nothing_pinned_the_suggestion_starts_with_scons_lock(tmp_path: Path) -> None:
    text, _ = choose(tmp_path, pinned=())
    assert "Every input pinned" not in text
    assert f"Build one:        no leg here has every input pinned: first scons lock {FIXA}, then scons {FIXA}" in text
    assert f"e.g. scons {FIXA}" not in text and f"e.g. scons {FIXB}" not in text
