"""End-to-end legs: the real recipes on real engine binaries from the package registries,
run by `scons` in a scratch copy of the project (see tests/scratch.py)."""
from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from scratch import REPO  # noqa: E402


@pytest.fixture(scope="session")
def e2e_cache() -> Path:
    cache = Path(os.environ.get("ANIRA_E2E_CACHE", REPO / ".cache" / "e2e"))
    cache.mkdir(parents=True, exist_ok=True)
    return cache
