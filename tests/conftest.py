"""Shared test setup: make the project's importable package visible to pytest."""
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "site_scons"))
sys.path.insert(0, str(ROOT / "tests"))  # shared helpers: scratch.py

import survivors  # noqa: E402


@pytest.fixture
def run_digests():
    """sha256_file as a build run has it (util/files.remember_run_digests): an unchanged file is
    read once."""
    from backends.util import files
    files.remember_run_digests()
    yield
    files.remember_run_digests(False)


@pytest.fixture
def leftovers(tmp_path: Path):
    """After the test, SIGKILL whatever of its processes still runs (tests/survivors.py) and
    fail naming them: a test that kills a run leaves nothing running behind it."""
    yield
    left = survivors.end(tmp_path)
    if left:
        pytest.fail("left running after the test (now killed):\n  " + "\n  ".join(map(str, left)))
