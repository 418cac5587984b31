"""What list and plan=1 print fits 120 columns: long values shortened in the list (verbose=1
shows them whole), long plan lines wrapped (a URL keeps a line of its own). The pins and lock
tables stay whole: a pin or an "origin differs" note is what a reader compares."""
from __future__ import annotations

from pathlib import Path

import pytest

from backends.commands.invocation import resolve
from backends.commands.report import explain
from backends.model.matrix import load_matrix
from backends.probes.host import Host
from backends.util.textfit import WIDTH, fit_table, shorten, wrap

ROOT = Path(__file__).resolve().parents[3]
LINUX = Host("linux", "x86_64")


@pytest.fixture(scope="module")
def matrix():
    return load_matrix(ROOT)


def _widest(text: str) -> int:
    return max(len(line) for line in text.splitlines())


def _text(matrix, *targets: str, **arguments: str) -> str:
    invocation = resolve(arguments, list(targets), matrix, ROOT, LINUX, {})
    return explain(invocation, matrix, ROOT, LINUX) or ""


def test_list_fits_and_verbose_shows_archives_whole(matrix):
    assert _widest(_text(matrix, "list")) <= WIDTH
    full = _text(matrix, "list", verbose="1")
    assert all(plan.archive in full for plan in resolve({}, ["list"], matrix, ROOT, LINUX, {}).plans)


def test_plan_lines_fit_but_for_whole_urls(matrix):
    text = _text(matrix, plan="1")
    over = [line for line in text.splitlines() if len(line) > WIDTH]
    assert over and all(line.strip().startswith("https://") and " " not in line.strip() for line in over), over[:3]
    assert "steps: " in text and "-> publish" in text


def test_a_wrapped_command_still_pastes_into_a_shell():
    line = "      cmake -S {src} -B {build} " + " ".join(f"-DOPTION_{i}=ON" for i in range(40))
    lines = wrap(line, command=True)
    assert len(lines) > 1 and all(len(part) <= WIDTH for part in lines)
    assert all(part.endswith(" \\") for part in lines[:-1])
    assert " ".join(part.removesuffix(" \\").strip() for part in lines) == line.strip()


def test_a_table_keeps_its_first_column_whole():
    rows = [{"leg": "x" * 60, "url": "https://example.com/" + "y" * 200, "pin": "z" * 64}]
    fitted = fit_table(rows)
    assert fitted[0]["leg"] == "x" * 60 and sum(len(v) for v in fitted[0].values()) + 4 <= WIDTH
    assert shorten("abcdefghij", 7) == "ab...ij"
