"""The binary cache on fixture legs: a clean tree restores every leg whose key is in the
cache (verified, nothing fetched or built), rebuilds exactly the legs whose key changed,
never trusts a corrupt or contract-breaking entry, and takes a read-only cache in stride.
The HTTP store runs against a real nginx (Debian's) on 127.0.0.1 with `dav_methods PUT`."""
from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import time
from pathlib import Path

import pytest

import fixtures
from fixtures import fixbin_archive, scons

FIXBIN_LEG = fixtures.FIXBIN_LEG_IDS[0]
LEGS = (*fixtures.FIXSRC_LEG_IDS[:3], FIXBIN_LEG)
SMALL_ROWS = fixtures.FIXSRC_LEGS[:3]
ARGS = ("engine=fixsrc,fixbin", "flavor=all", "config=release")


_KEYS: list[tuple[Path, Path]] = []


@pytest.fixture(scope="module", autouse=True)
def signing_keys(tmp_path_factory) -> None:
    """One key pair for the module's stores: a writer signs, a reader trusts the .pub."""
    from backends.cache.trust import keygen

    _KEYS[:] = [keygen(tmp_path_factory.mktemp("keys") / "cache-key")]


def _signed(location: str) -> tuple[str, str, str]:
    """`binary_cache=` with this module's key: entries are signed when stored, trusted when read."""
    secret, public = _KEYS[0]
    return f"binary_cache={location}", f"binary_cache_key={secret}", f"binary_cache_trust={public}"


def _ok(run: fixtures.Run) -> fixtures.Run:
    assert run.returncode == 0, str(run)
    return run


def _clean(project: Path) -> None:
    shutil.rmtree(project / "build", ignore_errors=True)
    shutil.rmtree(project / "dist", ignore_errors=True)


def _archives(project: Path) -> dict[str, bytes]:
    """Each archive and its .sha256 (the manifests differ by `restored`)."""
    return {p.name: p.read_bytes() for p in sorted((project / "dist").glob("*")) if not p.name.endswith(".json")}


def _summary(run: fixtures.Run, state: str) -> set[str]:
    return {line.split()[1] for line in run.stdout.splitlines() if line.strip().startswith(f"{state} ")}


@pytest.fixture
def project(project_factory) -> Path:
    return project_factory(fixsrc_rows=SMALL_ROWS)


def test_a_clean_tree_restores_every_leg_from_a_directory_cache(project, upstreams, tmp_path):
    cache = tmp_path / "binary-cache"
    first = _ok(scons(project, *ARGS, *_signed(f"{cache}")))
    assert _summary(first, "published") == set(LEGS), first.stdout
    assert len([e for e in cache.iterdir() if not e.name.startswith(".")]) == len(LEGS)
    built = _archives(project)

    _clean(project)
    requests = len(upstreams.server.requests)
    again = _ok(scons(project, *ARGS, *_signed(f"{cache}")))
    assert _summary(again, "restored") == set(LEGS), again.stdout
    assert {line.split()[0] for line in again.step_lines()} == {"[restore]", "[publish]"}, again.stdout
    assert len(upstreams.server.requests) == requests, "a restored leg fetched something"
    assert _archives(project) == built
    manifest = json.loads((project / "dist" / (fixbin_archive(FIXBIN_LEG) + ".json")).read_text())
    assert manifest["restored"]["from binary cache"] == str(cache)
    assert manifest["leg_key"] == manifest["restored"]["key"]
    assert manifest["steps"]["stage"], "the original build's provenance is kept"
    assert _ok(scons(project, "-q", *ARGS, *_signed(f"{cache}"))).returncode == 0


def test_after_a_patch_edit_exactly_the_patched_legs_are_rebuilt(project, tmp_path):
    cache = tmp_path / "binary-cache"
    _ok(scons(project, *ARGS, *_signed(f"{cache}")))
    keys = json.loads(scons(project, "ci-matrix", *ARGS).stdout)["include"]
    patch = project / "engines/fixsrc/patches/register_coreml.py"
    patch.write_text(patch.read_text().replace(fixtures.PATCH_NOTE, "register_coreml v2"))
    changed = {entry["id"] for entry, now in zip(keys, json.loads(scons(project, "ci-matrix", *ARGS).stdout)["include"])
               if entry["key"] != now["key"]}
    assert changed == {"fixsrc-linux-x86_64-gpu-shared"}

    _clean(project)
    run = _ok(scons(project, *ARGS, *_signed(f"{cache}")))
    assert _summary(run, "published") == changed, run.stdout
    assert _summary(run, "restored") == set(LEGS) - changed, run.stdout


DAMAGE = {  # what the reader says, signed store / a store read with binary_cache_trust=unsigned
    "flipped byte": ("archive_sha256 differ", "has sha256"),
    "other key": ("manifest_sha256 differ", "names the key"),
    "broken contract": ("archive_sha256, manifest_sha256 differ",
                        "its manifest lists include/fixbin.h, which the archive lacks"),
}


@pytest.mark.parametrize("signed", [True, False], ids=["signed", "unsigned"])
@pytest.mark.parametrize("damage", DAMAGE)
def test_an_entry_that_does_not_check_out_is_reported_and_rebuilt(project, tmp_path, damage, signed):
    cache = tmp_path / "binary-cache"
    store = _signed(f"{cache}") if signed else (f"binary_cache={cache}", "binary_cache_trust=unsigned")
    _ok(scons(project, FIXBIN_LEG, *store))
    built = _archives(project)
    (entry,) = [e for e in cache.iterdir() if (e / fixbin_archive(FIXBIN_LEG)).exists()]
    archive = entry / fixbin_archive(FIXBIN_LEG)
    if damage == "flipped byte":
        data = bytearray(archive.read_bytes())
        data[len(data) // 2] ^= 1
        archive.write_bytes(bytes(data))
    elif damage == "other key":
        manifest = json.loads((entry / (archive.name + ".json")).read_text())
        manifest["leg_key"] = "0" * 64
        (entry / (archive.name + ".json")).write_text(json.dumps(manifest))
    else:  # a well-formed entry whose archive lacks what the contract requires
        import zipfile

        with zipfile.ZipFile(archive) as old, zipfile.ZipFile(tmp_path / "new.zip", "w") as new:
            for info in old.infolist():
                if info.filename != "include/fixbin.h":
                    new.writestr(info, old.read(info))
        shutil.copyfile(tmp_path / "new.zip", archive)
        from backends.steps.archive import sha256_sidecar

        sha256_sidecar(archive)
        manifest = json.loads((entry / (archive.name + ".json")).read_text())
        manifest["sha256"], manifest["size"] = fixtures.sha256_of(archive), archive.stat().st_size
        (entry / (archive.name + ".json")).write_text(json.dumps(manifest))
    expected = DAMAGE[damage][0 if signed else 1]
    _clean(project)
    run = _ok(scons(project, FIXBIN_LEG, *store))
    assert "is not trusted, the leg is rebuilt" in run.stderr and expected in run.stderr, str(run)
    assert _summary(run, "published") == {FIXBIN_LEG}, run.stdout
    assert _archives(project) == built
    # The rebuild replaced the bad entry: the next clean tree restores it.
    _clean(project)
    assert _summary(_ok(scons(project, FIXBIN_LEG, *store)), "restored") == {FIXBIN_LEG}


def test_an_unpinned_leg_is_built_and_said_uncacheable(project_factory, upstreams, tmp_path):
    project = project_factory(fixsrc=False, fixbin=False)
    fixtures.write_fixbin(project, upstreams.fixbin_url, {})
    run = _ok(scons(project, FIXBIN_LEG, "lock=1", *_signed(f"{tmp_path / 'cache'}")))
    assert f"{FIXBIN_LEG} has no key, so it is built: {fixtures.fixbin_asset()} has no sha256 pin" in run.stderr
    assert not (tmp_path / "cache").exists()


def test_an_aggregate_restores_without_building_its_inputs(project_factory, upstreams, tmp_path):
    from test_pins_and_mirrors import BUNDLE, _android_project

    project = _android_project(project_factory, upstreams, "bundle")
    cache = tmp_path / "binary-cache"
    _ok(scons(project, BUNDLE, *_signed(f"{cache}")))
    _clean(project)
    run = _ok(scons(project, BUNDLE, *_signed(f"{cache}")))
    assert [line.split()[0] for line in run.step_lines()] == ["[restore]", "[publish]"], run.stdout


# --------------------------------------------------------------------------- HTTP: a real nginx


NGINX_CONF = """\
{user}daemon off;
pid {root}/nginx.pid;
error_log {root}/error.log;
events {{ worker_connections 64; }}
http {{
    access_log {root}/access.log;
    client_body_temp_path {root}/body;
    proxy_temp_path {root}/proxy;
    fastcgi_temp_path {root}/fastcgi;
    uwsgi_temp_path {root}/uwsgi;
    scgi_temp_path {root}/scgi;
    client_max_body_size 0;
    server {{
        listen 127.0.0.1:{port};
        location /cache/ {{
            root {root}/www;
            dav_methods PUT;
            create_full_put_path on;
        }}
        location /readonly/ {{
            root {root}/www;
            limit_except GET HEAD {{ deny all; }}
        }}
    }}
}}
"""


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@pytest.fixture
def nginx(tmp_path: Path):
    binary = shutil.which("nginx") or ("/usr/sbin/nginx" if Path("/usr/sbin/nginx").exists() else None)
    if binary is None:
        pytest.skip("nginx is not installed (apt-get install nginx-light; .ci/run does)")
    root, port = tmp_path / "nginx", _free_port()
    (root / "www/cache").mkdir(parents=True)
    (root / "www/readonly").mkdir(parents=True)
    # As root, nginx's workers would run as www-data, which may not write the test's directories.
    user = "user root;\n" if os.geteuid() == 0 else ""
    (root / "nginx.conf").write_text(NGINX_CONF.format(root=root, port=port, user=user))
    server = subprocess.Popen([binary, "-c", str(root / "nginx.conf"), "-p", str(root)],
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 120  # a busy 2-core machine may be slow to start it
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            break
        except OSError:
            assert server.poll() is None, server.stderr.read().decode()
            assert time.monotonic() < deadline, "nginx did not start"
            time.sleep(0.05)
    yield f"http://127.0.0.1:{port}", root / "www"
    server.terminate()
    server.wait(timeout=10)


def test_an_http_cache_on_nginx(project, nginx):
    base, www = nginx
    url = f"{base}/cache"
    _ok(scons(project, *ARGS, *_signed(f"{url}")))
    assert len(list((www / "cache").iterdir())) == len(LEGS)
    built = _archives(project)
    _clean(project)
    run = _ok(scons(project, *ARGS, *_signed(f"{url}")))
    assert _summary(run, "restored") == set(LEGS), run.stdout
    assert _archives(project) == built


def test_a_read_only_cache_is_read_and_never_fails_a_leg(project, nginx):
    base, www = nginx
    _ok(scons(project, FIXBIN_LEG, *_signed(f"{base}/cache")))
    shutil.copytree(www / "cache", www / "readonly", dirs_exist_ok=True)  # what the team published
    _clean(project)
    run = _ok(scons(project, *ARGS, *_signed(f"{base}/readonly")))
    assert _summary(run, "restored") == {FIXBIN_LEG}, run.stdout
    assert "refuses writes (HTTP 403)" in run.stderr, str(run)
    assert _summary(run, "published") == set(LEGS) - {FIXBIN_LEG}
    # binary_cache_write=0 (pull requests): not even tried
    _clean(project)
    quiet = _ok(scons(project, *ARGS, *_signed(f"{base}/readonly"), "binary_cache_write=0"))
    assert "refuses writes" not in quiet.stderr and "[store]" not in quiet.stdout


def test_an_entry_kept_from_an_earlier_run_is_checked_again_before_reuse(project, tmp_path):
    cache = tmp_path / "binary-cache"
    _ok(scons(project, FIXBIN_LEG, *_signed(f"{cache}")))
    _clean(project)
    _ok(scons(project, FIXBIN_LEG, *_signed(f"{cache}")))  # restored: the entry is kept under build/
    (kept,) = (project / "build/binary-cache").iterdir()
    archive = kept / fixbin_archive(FIXBIN_LEG)
    data = bytearray(archive.read_bytes())
    data[len(data) // 2] ^= 1
    archive.write_bytes(bytes(data))
    (project / "build/legs" / FIXBIN_LEG / "archive" / fixbin_archive(FIXBIN_LEG)).unlink()
    failed = scons(project, FIXBIN_LEG, *_signed(f"{cache}"))
    assert failed.returncode != 0 and "is not trusted any more" in failed.stderr, str(failed)
    assert _summary(_ok(scons(project, FIXBIN_LEG, *_signed(f"{cache}"))), "restored") == {FIXBIN_LEG}


def test_switching_the_cache_on_or_off_reruns_nothing(project, tmp_path):
    """A restored archive and a built one with the same key are the same result. (A restored
    one rests on its signer: a run without binary_cache= keeps it under the same trust;
    test_binary_cache_trust.py revokes it.)"""
    cache = _signed(f"{tmp_path / 'binary-cache'}")
    trust = cache[2]
    _ok(scons(project, FIXBIN_LEG))
    stored = _ok(scons(project, FIXBIN_LEG, *cache))  # the built archive is stored, nothing else runs
    assert [line.split()[0] for line in stored.step_lines()] == ["[store]"], str(stored)
    again = _ok(scons(project, FIXBIN_LEG, *cache))
    assert again.step_lines() == [] and "withdraw" not in again.stdout, str(again)
    assert _ok(scons(project, FIXBIN_LEG)).step_lines() == []
    _clean(project)
    assert _summary(_ok(scons(project, FIXBIN_LEG, *cache)), "restored") == {FIXBIN_LEG}
    off = _ok(scons(project, FIXBIN_LEG, trust))
    assert off.step_lines() == [] and "withdraw" not in off.stdout, str(off)
    assert f"up to date  {FIXBIN_LEG}" in off.stdout and "restored from" in off.stdout, str(off)
    assert _ok(scons(project, FIXBIN_LEG, *cache)).step_lines() == []
