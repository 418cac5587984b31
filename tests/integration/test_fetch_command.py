"""`scons fetch`: every pinned input of the selected legs into the cache, nothing built;
`mirror_out=DIR` writes them where `mirror=` finds them, and a later build runs offline from it."""
from __future__ import annotations

import fixtures
from fixtures import LegRow, fixbin_archive, scons

LEG = fixtures.FIXBIN_LEG_IDS[0]


def _project(project_factory, upstreams, pins, name="project"):
    project = project_factory(name, fixsrc=False, fixbin=False)
    row = LegRow(kind="shared", source="prebuilt", params={"asset": "fixbin-linux-x64", "ext": "tgz"})
    fixtures.write_fixbin(project, upstreams.fixbin_url, pins, rows=(row,))
    return project


def test_fetch_builds_nothing_and_its_mirror_serves_an_offline_build(project_factory, upstreams, tmp_path):
    (name, digest), = upstreams.fixbin_pins.items()
    project = _project(project_factory, upstreams, upstreams.fixbin_pins)
    out = tmp_path / "published-mirror"
    fetched = scons(project, "fetch", LEG, f"mirror_out={out}")
    assert fetched.returncode == 0, str(fetched)
    assert "1 of 1 inputs fetched and verified" in fetched.stdout and digest[:12] in fetched.stdout
    assert (out / name).is_file() and fixtures.sha256_of(out / name) == digest
    assert not (project / "dist").exists() or not any((project / "dist").iterdir())  # nothing built
    other = _project(project_factory, upstreams, upstreams.fixbin_pins, name="other")  # its own, empty cache
    before = len(upstreams.server.requests)
    built = scons(other, LEG, f"mirror={out}", "offline=1")
    assert built.returncode == 0, str(built)
    assert len(upstreams.server.requests) == before and (other / "dist" / fixbin_archive(LEG)).is_file()


def test_fetch_lists_an_unpinned_input_and_fails(project_factory, upstreams):
    (name, _), = upstreams.fixbin_pins.items()
    project = _project(project_factory, upstreams, pins={})
    run = scons(project, "fetch", LEG)
    assert run.returncode == 1
    assert f"{name} has no sha256 pin: `scons lock` records it" in run.stdout and "0 of 1" in run.stdout


def test_mirror_out_is_for_fetch_only(project_factory, upstreams, tmp_path):
    project = _project(project_factory, upstreams, upstreams.fixbin_pins)
    run = scons(project, LEG, f"mirror_out={tmp_path}")
    assert run.returncode == 2 and "mirror_out= is for `scons fetch`" in run.stderr
