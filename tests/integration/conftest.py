"""Integration fixtures: fixture upstreams served on 127.0.0.1 and fixture projects.

`upstreams` (session): the generated fixsrc source tarball and fixbin release archive in
a served directory. `project_factory`: a fresh project per call under the test's tmp dir.
Every test here runs scons in a subprocess; all are marked `integration`.
"""
from __future__ import annotations

import shutil
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

import fixtures  # noqa: E402

REQUIRED_TOOLS = ("cmake", "ninja", "cc", "ar", "llvm-nm")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    here = Path(__file__).resolve().parent
    for item in items:
        if here in Path(str(item.fspath)).resolve().parents:
            item.add_marker(pytest.mark.integration)


@pytest.fixture(scope="session")
def tools() -> None:
    missing = [t for t in REQUIRED_TOOLS if shutil.which(t) is None]
    if missing:
        pytest.skip(f"integration tests need {', '.join(missing)}")


@pytest.fixture(scope="session")
def upstreams(tmp_path_factory: pytest.TempPathFactory, tools: None) -> fixtures.Upstreams:
    served = tmp_path_factory.mktemp("served")
    with fixtures.Server(served) as server:
        yield fixtures.make_upstreams(served, server)


@pytest.fixture
def project_factory(tmp_path: Path, upstreams: fixtures.Upstreams):
    """`make(name="p", **make_project kwargs)` -> a new project dir under tmp_path."""
    def make(name: str = "project", **kwargs: object) -> Path:
        return fixtures.make_project(tmp_path / name, upstreams, **kwargs)

    return make
