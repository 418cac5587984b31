"""The graph keys a leg with its origin= file's content, read through the run's digest cache:
a file gone by the time it is hashed stops the run naming it, never keys the leg as "None"."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

from backends.cache.key import leg_keys
from backends.graph.actions import RunContext
from backends.graph.declare import Graph
from backends.graph.records import Records
from backends.graph.settings import Settings
from backends.graph.summary import Summary
from backends.model import recipes
from backends.model.matrix import Matrix, load_matrix
from backends.model.plan import Plan
from backends.probes.host import detect_host
from backends.util.digests import DigestCache, FileVanished
from scratch import REPO

PREBUILT = "onnxruntime-linux-x86_64-shared"


class _Environment:
    """The one SCons call a Graph makes before it declares anything."""

    def Action(self, *_: object, **__: object) -> None:
        return None


class _Vanishing(DigestCache):
    """A run's digest cache whose file is removed just before it is read (as another process
    removing the origin between the key's look at it and its hash would)."""

    def __init__(self, path: Path) -> None:
        super().__init__(None)
        self._path = path

    def digest(self, path: Path) -> str | None:
        self._path.unlink(missing_ok=True)
        return super().digest(path)


def _graph(root: Path, matrix: Matrix, origin: Path, digests: DigestCache) -> Graph:
    settings = Settings(cache=root / "cache", mirrors=(), offline=True, lock=False, verbose=False, wait=False,
                        format="zip", inputs="build", heavy_jobs=1, version="", origins={"": str(origin)})
    run = RunContext(root=REPO, settings=settings, matrix=matrix, host=detect_host(), environ={},
                     records=Records(REPO, digests), summary=Summary(REPO))
    return Graph(_Environment(), run)


def _prebuilt(tmp_path: Path) -> tuple[Matrix, Plan, Path]:
    matrix = load_matrix(REPO)
    leg = matrix.leg(PREBUILT)
    plan = recipes.plan_leg(leg, recipes.leg_engine(matrix, leg, None), matrix)
    origin = tmp_path / plan.downloads[0].filename
    origin.write_bytes(b"the release, given locally")
    return matrix, plan, origin


def test_an_origin_file_is_keyed_by_its_content(tmp_path: Path) -> None:
    matrix, plan, origin = _prebuilt(tmp_path)
    key = _graph(tmp_path, matrix, origin, DigestCache(None))._key(plan)
    assert key.digest == leg_keys([plan], matrix, REPO, origins={"": str(origin)})[PREBUILT].digest


def test_an_origin_file_gone_before_it_is_hashed_is_an_error_naming_it(tmp_path: Path) -> None:
    matrix, plan, origin = _prebuilt(tmp_path)
    graph = _graph(tmp_path, matrix, origin, _Vanishing(origin))
    with pytest.raises(FileVanished, match=re.escape(str(origin))):
        graph._key(plan)
