"""A hostile HTTP binary cache in front of a real run: whatever it sends, the run ends soon,
the leg is built instead, dist/ holds the bytes of a clean build, and the refusal says why.
(Each attack, through each caller, with small limits: tests/unit/cache/test_hostile_remotes.py.)"""
from __future__ import annotations

import json

import pytest

import fixtures
from fixtures import fixbin_archive, scons
from hostile_http import Hostile, announcing, body, gzip_bomb_answer

LEG = fixtures.FIXBIN_LEG_IDS[0]
ARCHIVE = fixbin_archive(LEG)
BOUND_S = 120.0  # the build alone takes a few seconds; a hostile store once held a run for ever

ATTACKS = {
    "a 10^12 Content-Length": (lambda: announcing(10**12),
                               "it announces 1,000,000,000,000 bytes, more than the size its manifest declares"),
    "a gzip bomb": (gzip_bomb_answer, "Content-Encoding: gzip though identity was asked; refused unread"),
}


@pytest.mark.parametrize("attack", ATTACKS)
def test_a_hostile_store_costs_a_run_nothing_but_the_build(project_factory, tmp_path, attack):
    answer, refusal = ATTACKS[attack]
    clean = project_factory("clean")
    assert scons(clean, LEG).returncode == 0
    project = project_factory("project")
    with Hostile() as store:
        store.route_suffix(".json", body(json.dumps({"size": 4096}).encode()))
        store.route_suffix(".sha256", body(f"{'0' * 64}  {ARCHIVE}\n".encode()))
        store.route_suffix(".zip", answer())
        run = scons(project, LEG, f"binary_cache={store.base}/cache", "binary_cache_trust=unsigned",
                    "binary_cache_write=0")
    assert run.returncode == 0, str(run)
    assert refusal in run.stderr and "; not used" in run.stderr, run.stderr
    assert any(line.split()[:2] == ["published", LEG] for line in run.stdout.splitlines()), run.stdout
    assert run.seconds < BOUND_S
    for name in (ARCHIVE, ARCHIVE + ".sha256"):
        assert (project / "dist" / name).read_bytes() == (clean / "dist" / name).read_bytes()
