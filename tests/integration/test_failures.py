"""Failures end-to-end: bad downloads, unsafe archives, a mislabelled gpu build, bad input.

Each must fail with a message that names the problem, a non-zero exit, nothing bad in
the download cache and nothing in dist/.
"""
from __future__ import annotations

import base64
import hashlib
import json
import os
from pathlib import Path

import pytest

import fixtures
from fixtures import LegRow, fixsrc_archive, scons

FIXBIN_LEG = fixtures.FIXBIN_LEG_IDS[0]
GPU_LEG = "fixsrc-linux-x86_64-gpu-shared"
# Secrets as they could be pasted, and the CI one in the environment of every refused run:
# none of their bytes may reach the output (tests/unit/commands/test_selection.py holds the full table).
PASTED_SEED = base64.b64encode(hashlib.sha256(b"pasted on the command line").digest()).decode()
PASTED = f"ed25519-secret:{PASTED_SEED}"
ENV_SEED = base64.b64encode(hashlib.sha256(b"the CI secret").digest()).decode()


def _failed(run: fixtures.Run) -> fixtures.Run:
    assert run.returncode != 0, str(run)
    return run


def _cache_files(project: Path) -> list[str]:
    """Files in the download cache other than lock files."""
    cache = project / ".cache/downloads"
    if not cache.is_dir():
        return []
    return sorted(p.relative_to(cache).as_posix() for p in cache.rglob("*")
                  if p.is_file() and not p.name.endswith(".lock"))


def _listing(root: Path) -> list[str]:
    """Every path under root (symlinked dirs such as site_scons are not entered), but Python's
    bytecode caches: planning imports the recipes, and Python may cache them beside their source."""
    return sorted(os.path.relpath(os.path.join(d, n), root) for d, dirs, files in os.walk(root) for n in dirs + files
                  if "__pycache__" not in os.path.relpath(os.path.join(d, n), root).split(os.sep))


def _nothing_published(project: Path) -> None:
    dist = project / "dist"
    assert not dist.exists() or not any(dist.iterdir()), sorted(p.name for p in dist.iterdir())


def _fixbin_project(project_factory, upstreams: fixtures.Upstreams, *, pins: dict[str, str] | None = None,
                    params: dict[str, str] | None = None) -> Path:
    project = project_factory(fixsrc=False, fixbin=False)
    row = LegRow(kind="shared", source="prebuilt", params=params or {"asset": "fixbin-linux-x64", "ext": "tgz"})
    fixtures.write_fixbin(project, upstreams.fixbin_url, upstreams.fixbin_pins if pins is None else pins, rows=(row,))
    return project


def test_checksum_mismatch(project_factory, upstreams):
    (name, good), = upstreams.fixbin_pins.items()
    bad = ("0" if good[0] != "0" else "1") + good[1:]
    project = _fixbin_project(project_factory, upstreams, pins={name: bad})
    run = _failed(scons(project, FIXBIN_LEG))
    assert "sha256 mismatch" in run.stderr and bad in run.stderr and good in run.stderr, str(run)
    assert _cache_files(project) == [], "a file that failed its pin must stay out of the cache"
    _nothing_published(project)


def test_a_url_origin_is_held_to_the_pin_of_its_file_name(project_factory, upstreams, tmp_path):
    """origin=<URL> lock=1 fetches what the URL serves, but a pin recorded for that file name still
    decides: modified bytes under the pinned name fail, and nothing is cached or published."""
    (name, good), = upstreams.fixbin_pins.items()
    served = tmp_path / "elsewhere"
    served.mkdir()
    (served / name).write_bytes((upstreams.root / name).read_bytes() + b"tampered")
    project = _fixbin_project(project_factory, upstreams)
    with fixtures.Server(served) as server:
        run = _failed(scons(project, FIXBIN_LEG, f"origin={server.base_url}/{name}", "lock=1"))
    assert "sha256 mismatch" in run.stderr and good in run.stderr, str(run)
    assert _cache_files(project) == []
    _nothing_published(project)
    assert good in (project / "engines/fixbin/engine.toml").read_text(), "the pin was overwritten"


def test_http_404(project_factory, upstreams):
    params = {"asset": "fixbin-linux-x64-withdrawn", "ext": "tgz"}
    project = _fixbin_project(project_factory, upstreams, params=params,
                              pins={fixtures.fixbin_asset("fixbin-linux-x64-withdrawn"): "a" * 64})
    run = _failed(scons(project, FIXBIN_LEG))
    assert "HTTP 404" in run.stderr and "fixbin-linux-x64-withdrawn-2.0.1.tgz" in run.stderr, str(run)
    assert _cache_files(project) == []
    _nothing_published(project)


def test_offline_with_an_empty_cache(project_factory, upstreams):
    project = _fixbin_project(project_factory, upstreams)
    requests = len(upstreams.server.requests)
    run = _failed(scons(project, FIXBIN_LEG, "offline=1"))
    assert "offline" in run.stderr and "not in the cache" in run.stderr, str(run)
    assert fixtures.fixbin_asset() in run.stderr
    assert len(upstreams.server.requests) == requests, "offline=1 touched the network"
    assert _cache_files(project) == []
    _nothing_published(project)


def test_zip_slip_release_archive(project_factory, upstreams, tmp_path):
    served = tmp_path / "served-slip"
    with fixtures.Server(served) as server:
        name, sha = fixtures.make_zip_slip_release(served)
        project = project_factory(fixsrc=False, fixbin=False)
        row = LegRow(kind="shared", source="prebuilt", params={"asset": "fixbin-linux-x64", "ext": "zip"})
        fixtures.write_fixbin(project, f"{server.base_url}/{{asset}}-{{version}}.{{ext}}", {name: sha}, rows=(row,))
        run = _failed(scons(project, FIXBIN_LEG))
    assert "refusing" in run.stderr and "zip-slip-escaped.txt" in run.stderr, str(run)
    assert not [p for p in tmp_path.rglob("zip-slip-escaped.txt")], "a member escaped the extraction dir"
    # The cache holds the verified download only; no extracted tree was left anywhere.
    assert _cache_files(project) == sorted([f"sha256/{sha}/{name}", f"sha256/{sha}/.{name}.meta.json"])
    leftovers = [os.path.join(d, f) for d, _, files in os.walk(project / "build/extract") for f in files]
    assert leftovers == [], "the refused extraction left files behind"
    assert not (project / f"build/legs/{FIXBIN_LEG}/stage").exists()
    _nothing_published(project)


def test_cpu_build_mislabelled_gpu_is_caught_by_verify(project_factory):
    """Upstream's lost flavor (docs/history.md#fix-flavor-argument): the gpu leg's build forgot --use_coreml."""
    rows = (LegRow(kind="shared", flavor="gpu", accelerator="coreml"),)
    project = project_factory(fixbin=False, fixsrc_rows=rows, forget_coreml=True)
    run = _failed(scons(project, GPU_LEG))
    assert f"{GPU_LEG}: verify failed" in run.stderr, str(run)
    assert "missing required include/coreml_provider_factory.h" in run.stderr
    assert "does not export FixsrcSessionOptionsAppendExecutionProvider_CoreML" in run.stderr
    build = json.loads((project / f"build/legs/{GPU_LEG}/steps/build.json").read_text())
    assert "--use_coreml" not in build["commands"][0]["argv"]
    steps = project / f"build/legs/{GPU_LEG}/steps"
    assert not (steps / "verify.json").exists() and not (steps / "smoke.json").exists()
    # A failed verify is not remembered as done: the next run fails the same way.
    again = _failed(scons(project, GPU_LEG))
    assert [line.split()[0] for line in again.step_lines()] == ["[verify]"], str(again)
    assert "missing required include/coreml_provider_factory.h" in again.stderr
    # Publishing comes after verify and smoke: the mislabelled archive never reaches dist/.
    assert not (project / "dist" / fixsrc_archive(GPU_LEG)).exists()


@pytest.mark.parametrize(("args", "message"), [
    (("bogus=1",), "unknown option bogus"),
    (("engine=fixsrc", "kind=xcframework"), "fixsrc ships no xcframework legs"),
    (("fixsrc-linux-x86_64-shard",), "unknown leg 'fixsrc-linux-x86_64-shard' (did you mean fixsrc-linux-x86_64-shared?)"),
    (("engine=fixsrc", "format=rar"), "unknown format 'rar'"),
    (("nonsense",), "unknown target 'nonsense'"),
    (("engine=",), "engine= is empty"),
    (("engine=fixsrc", "cache="), "cache= is empty"),
    (("engine=fixsrc", "version=1/../../../../../elsewhere/x"), "no separators, spaces or '..'"),
    (("engine=fixsrc", "version=\u0661.\u0662.\u0660"), "has non-ASCII characters"),
    (("engine=fixsrc", "version=01.00.00"), "has a leading zero: write '1.0.0'"),
    (("fixsrc-linux-x86_64-shared", "kind=static"), "kind=static would be ignored"),
    (("fixsrc-linux-x86_64-shared", "origin=relase=/etc/hostname"), "no source named 'relase'"),
    (("fixsrc-linux-x86_64-shared", "origin=/nonexistent/fixsrc.tar.gz"), "does not exist"),
    (("fixsrc-linux-x86_64-shared", "origin=http://127.0.0.1:9/fixsrc.tar.gz"), "is a URL: add lock=1"),
    # Round 2: odd values, long or undecodable paths, other schemes, places the build owns.
    (("engine=fixsrc", "version=1.0.0", "version=0.9.0"), "version= is given 2 times"),
    (("engine=fixsrc", "heavy_jobs=\u00b2"), "must be a positive integer"),
    (("fixsrc-linux-x86_64-shared", "origin=/tmp/" + "x" * 300), "File name too long"),
    (("engine=fixsrc", "cache=/tmp/" + "x" * 300), "File name too long"),
    (("engine=fixsrc", "mirror=/tmp/" + "x" * 300), "File name too long"),
    (("engine=fixsrc", "binary_cache=/tmp/" + "x" * 300), "File name too long"),
    (("fixsrc-linux-x86_64-shared", "origin=/tmp/in\udcff.tar.gz"), "is not valid UTF-8"),
    (("engine=fixsrc", "binary_cache=ftp://127.0.0.1/x"), "unsupported URL scheme 'ftp'"),
    (("engine=fixsrc", "binary_cache=s3://bucket/x"), "unsupported URL scheme 's3'"),
    (("engine=fixsrc", "cache=dist"), "lies inside dist/"),
    (("fixsrc-linux-x86_64-shared", "origin=/etc/hostname"), "unknown archive type"),
    (("build/legs/fixbin-linux-x86_64-shared/steps/build.json",), "fixbin-linux-x86_64-shared has no build step"),
    # Secrets pasted where a path or public key belongs: refused, shown redacted.
    (("engine=fixsrc", f"binary_cache_key={PASTED}"), "binary_cache_key=<redacted: ed25519-secret:..., 59 characters>"),
    (("engine=fixsrc", f"binary_cache_key={PASTED_SEED}"), "binary_cache_key=<redacted: key material, 44 characters>"),
    (("engine=fixsrc", f"binary_cache_trust={PASTED}"), "binary_cache_trust=<redacted: ed25519-secret:"),
    (("engine=fixsrc", f"binary_cache_key={PASTED}", f"binary_cache_key={PASTED_SEED}"), "holds key material"),
    (("cache-keygen", f"key={PASTED}"), "key=<redacted: ed25519-secret:"),
])
def test_bad_command_line_writes_nothing(project_factory, args, message):
    project = project_factory()
    before, around = _listing(project), _listing(project.parent)
    env = {"PYTHONDONTWRITEBYTECODE": "1", "ANIRA_BINARY_CACHE_KEY": f"ed25519-secret:{ENV_SEED}"}
    run = scons(project, *args, env=env)
    assert run.returncode == 2, str(run)
    assert message in run.stderr, str(run)
    assert "Traceback" not in run.stderr, str(run)
    shown = run.stdout + run.stderr
    assert not [seed[i:i + 8] for seed in (PASTED_SEED, ENV_SEED) for i in range(len(seed) - 7)
                if seed[i:i + 8] in shown], "a secret's bytes were printed"
    assert not (project / "build").exists() and not (project / "dist").exists()
    assert _listing(project) == before
    assert _listing(project.parent) == around, "a refused command wrote beside the project"


def _recipe_raising(project: Path, raised: str) -> None:
    """The fixsrc recipe's plan raises `raised` (Python source) when the graph is read."""
    recipe = project / "engines/fixsrc/recipe.py"
    recipe.write_text(recipe.read_text() + f"""

from backends.util.errors import BackendsError


class Odd(BackendsError):
    status = 3


def plan(leg, engine, archive):
    raise {raised}
""")


def test_a_named_error_while_reading_the_graph_is_one_line_and_its_exit_status(project_factory):
    project = project_factory(fixbin=False)
    _recipe_raising(project, 'Odd("fixsrc cannot be planned here: do this instead")')
    run = scons(project, "fixsrc-linux-x86_64-shared")
    assert run.returncode == 3, str(run)
    assert run.stderr.strip().splitlines()[-1] == "scons: *** fixsrc cannot be planned here: do this instead", str(run)
    assert "Traceback" not in run.stderr, str(run)


def test_an_unexpected_exception_while_reading_the_graph_shows_its_traceback(project_factory):
    """A FileNotFoundError from a programming error is not swallowed into a message."""
    project = project_factory(fixbin=False)
    _recipe_raising(project, 'FileNotFoundError(2, "No such file or directory", "/nowhere/recipe-data")')
    run = _failed(scons(project, "fixsrc-linux-x86_64-shared"))
    # SCons's own form of a traceback: every frame, down to the recipe's line.
    assert run.stderr.startswith("FileNotFoundError: [Errno 2] No such file or directory: '/nowhere/recipe-data'"), str(run)
    assert 'engines/fixsrc/recipe.py", line' in run.stderr and 'raise FileNotFoundError' in run.stderr, str(run)
