"""Trust that follows the key's lifecycle, on a fixture leg (docs/binary-cache.md).

- Revocation: a real restore, then the signer removed from `binary_cache_trust=`, then runs
  with and without `dist/`, with and without a cache: the next run rebuilds, says
  `published`, and dist/'s manifest no longer says restored. A trusted set that keeps the
  signer re-checks the entry; a run without a cache under the same trust re-publishes it as
  `restored`, from the original store and key.
- The store step's record covers the store: a changed writer key re-signs the entry (nothing
  is rebuilt), an entry deleted or truncated in the store is put back, and a run that finds
  the entry in place costs one look per store (stats, or HEADs on nginx), never a re-upload.
- Key files on the command line: cache-keygen under umask 000, a secret key others can read,
  a fifo as the trust file.
"""
from __future__ import annotations

import json
import os
import shutil
import stat
from pathlib import Path

import pytest

import fixtures
from fixtures import fixbin_archive, scons
from test_binary_cache import nginx  # noqa: F401  (the real WebDAV store, a fixture)

from backends.cache.trust import key_id, keygen

LEG = fixtures.FIXBIN_LEG_IDS[0]
ARCHIVE = fixbin_archive(LEG)


class Keys:
    def __init__(self, root: Path) -> None:
        self.writer, self.writer_pub = keygen(root / "writer")
        self.other, self.other_pub = keygen(root / "other")

    def public(self, path: Path) -> str:
        return path.read_text().strip()


@pytest.fixture(scope="module")
def keys(tmp_path_factory: pytest.TempPathFactory) -> Keys:
    return Keys(tmp_path_factory.mktemp("keys"))


@pytest.fixture
def project(project_factory) -> Path:
    return project_factory(fixsrc=False)


def _ok(run: fixtures.Run) -> fixtures.Run:
    assert run.returncode == 0, str(run)
    return run


def _steps(run: fixtures.Run) -> list[str]:
    return [line.split()[0] for line in run.step_lines()]


def _summary(run: fixtures.Run, state: str) -> set[str]:
    return {line.split()[1] for line in run.stdout.splitlines() if line.strip().startswith(f"{state} ")}


def _published(project: Path) -> dict[str, bytes]:
    """dist/'s archive and .sha256 (a restored manifest differs by `restored`)."""
    return {name: (project / "dist" / name).read_bytes() for name in (ARCHIVE, ARCHIVE + ".sha256")}


def _manifest(project: Path) -> dict:
    return json.loads((project / "dist" / (ARCHIVE + ".json")).read_text())


def _clean(project: Path) -> None:
    shutil.rmtree(project / "build", ignore_errors=True)
    shutil.rmtree(project / "dist", ignore_errors=True)


def _restore(project: Path, store: Path, keys: Keys) -> dict[str, bytes]:
    """A real restore: built and stored signed by the writer's key, then a clean tree that
    trusts it restores the entry. The built bytes."""
    _ok(scons(project, LEG, f"binary_cache={store}", f"binary_cache_key={keys.writer}",
              f"binary_cache_trust={keys.writer_pub}"))
    built = _published(project)
    _clean(project)
    restored = _ok(scons(project, LEG, f"binary_cache={store}", f"binary_cache_trust={keys.writer_pub}"))
    assert _summary(restored, "restored") == {LEG}, str(restored)
    assert _manifest(project)["restored"]["signed by"] == f"key {key_id(keys.public(keys.writer_pub))}"
    return built


# --------------------------------------------------------------------------- revocation

@pytest.mark.parametrize("cache", ["with the cache", "without a cache"])
@pytest.mark.parametrize("dist", ["dist/ kept", "dist/ removed"])
def test_a_revoked_signer_is_not_trusted_on_the_next_run(project, tmp_path, keys, dist, cache):
    store = tmp_path / "store"
    built = _restore(project, store, keys)
    if dist == "dist/ removed":
        shutil.rmtree(project / "dist")
    revoked = (f"binary_cache_trust={keys.other_pub}", *((f"binary_cache={store}",) if cache == "with the cache" else ()))
    run = _ok(scons(project, LEG, *revoked))
    writer = key_id(keys.public(keys.writer_pub))
    assert f"rests on key {writer}, which this run does not trust" in run.stderr, str(run)
    if cache == "with the cache":  # looked up again: the store's entry is the revoked key's too
        assert f"it is signed by key {writer}, which is not trusted" in run.stderr, str(run)
    assert _summary(run, "published") == {LEG} and not _summary(run, "restored"), str(run)
    assert "[restore]" not in _steps(run) and {"[fetch]", "[stage]", "[smoke]"} <= set(_steps(run)), str(run)
    assert "restored" not in _manifest(project)
    assert _published(project) == built, "a clean build's bytes"
    again = _ok(scons(project, LEG, *revoked))
    assert _steps(again) == [] and f"up to date  {LEG}" in again.stdout and "restored from" not in again.stdout


def test_unsigned_trust_withdrawn_rebuilds(project, tmp_path):
    store = tmp_path / "store"
    _ok(scons(project, LEG, f"binary_cache={store}"))  # no key: stored unsigned
    _clean(project)
    assert _summary(_ok(scons(project, LEG, f"binary_cache={store}", "binary_cache_trust=unsigned")),
                    "restored") == {LEG}
    run = _ok(scons(project, LEG))  # no cache, nothing trusted
    assert "rests on unsigned, which this run does not trust (trusted keys: none)" in run.stderr, str(run)
    assert _summary(run, "published") == {LEG} and "restored" not in _manifest(project)


def test_without_a_cache_a_restored_archive_is_republished_as_restored(project, tmp_path, keys):
    """Same trust, no binary_cache=, dist/ removed: published again as what it is, from the
    original store and key, nothing rebuilt."""
    store = tmp_path / "store"
    _restore(project, store, keys)
    restored = _published(project), _manifest(project)
    shutil.rmtree(project / "dist")
    run = _ok(scons(project, LEG, f"binary_cache_trust={keys.writer_pub}"))
    assert _steps(run) == ["[publish]"], str(run)
    key = restored[1]["leg_key"]
    assert f"restored    {LEG}" in run.stdout and f"from {store} (key {key[:12]})" in run.stdout, str(run)
    assert (_published(project), _manifest(project)) == restored
    assert _manifest(project)["restored"] == {"from binary cache": str(store), "key": key,
                                             "signed by": f"key {key_id(keys.public(keys.writer_pub))}"}


def test_a_trusted_set_that_keeps_the_signer_rechecks_the_entry(project, tmp_path, keys):
    store = tmp_path / "store"
    _restore(project, store, keys)
    restored = _published(project), _manifest(project)
    both = f"binary_cache_trust={keys.writer_pub},{keys.other_pub}"
    run = _ok(scons(project, LEG, both))
    assert _steps(run) == ["[restore]", "[publish]"] and "[restore] fixbin" in run.stdout, str(run)
    assert f"{LEG} reruns: trust.trusted" in run.stdout, str(run)
    assert _summary(run, "restored") == {LEG} and (_published(project), _manifest(project)) == restored
    assert _steps(_ok(scons(project, LEG, both))) == []


# --------------------------------------------------------------------------- the store's state

def _entry(store: Path) -> Path:
    (entry,) = [path for path in store.iterdir() if (path / ARCHIVE).is_file()]
    return entry


def test_a_changed_writer_key_re_signs_the_entry_without_rebuilding(project, tmp_path, keys):
    store = tmp_path / "store"
    _ok(scons(project, LEG, f"binary_cache={store}", f"binary_cache_key={keys.writer}"))
    signature = _entry(store) / (ARCHIVE + ".sig")
    assert json.loads(signature.read_text())["public_key"] == keys.public(keys.writer_pub)
    rotated = (f"binary_cache={store}", f"binary_cache_key={keys.other}", f"binary_cache_trust={keys.other_pub}")
    run = _ok(scons(project, LEG, *rotated))
    assert _steps(run) == ["[store]"] and f"{LEG} reruns: signer" in run.stdout, str(run)
    assert json.loads(signature.read_text())["public_key"] == keys.public(keys.other_pub)
    assert _steps(_ok(scons(project, LEG, *rotated))) == []
    _clean(project)
    assert _summary(_ok(scons(project, LEG, *rotated)), "restored") == {LEG}


@pytest.mark.parametrize("damage", ["entry deleted", "archive truncated", "signature deleted"])
def test_an_entry_gone_from_a_directory_store_is_put_back(project, tmp_path, keys, damage):
    store = tmp_path / "store"
    args = (f"binary_cache={store}", f"binary_cache_key={keys.writer}")
    _ok(scons(project, LEG, *args))
    entry = _entry(store)
    stored = {path.name: path.read_bytes() for path in entry.iterdir()}
    if damage == "entry deleted":
        shutil.rmtree(entry)
    elif damage == "archive truncated":
        (entry / ARCHIVE).write_bytes(stored[ARCHIVE][:100])
    else:
        (entry / (ARCHIVE + ".sig")).unlink()
    run = _ok(scons(project, LEG, *args))
    assert _steps(run) == ["[store]"] and f"is missing from {store}" in run.stdout, str(run)
    assert f"up to date  {LEG}  dist/{ARCHIVE}; stored in {store}" in run.stdout, str(run)
    assert {path.name: path.read_bytes() for path in entry.iterdir()} == stored
    assert _steps(_ok(scons(project, LEG, *args))) == []


def test_an_entry_gone_from_an_http_store_is_put_back_and_looked_at_with_heads(project, nginx, keys):
    base, www = nginx
    args = (f"binary_cache={base}/cache", f"binary_cache_key={keys.writer}")
    _ok(scons(project, LEG, *args))
    log = www.parent / "access.log"
    (entry,) = list((www / "cache").iterdir())
    stored = {path.name: path.read_bytes() for path in entry.iterdir()}
    before = len(log.read_text().splitlines())
    assert _steps(_ok(scons(project, LEG, *args))) == []
    looked = [line.split('"')[1].split()[0] for line in log.read_text().splitlines()[before:]]
    assert looked == ["HEAD"] * len(stored), looked  # one per file, no body moved
    shutil.rmtree(entry)
    run = _ok(scons(project, LEG, *args))
    assert _steps(run) == ["[store]"] and f"is missing from {base}/cache" in run.stdout, str(run)
    assert {path.name: path.read_bytes() for path in entry.iterdir()} == stored


# --------------------------------------------------------------------------- key files on the command line

def test_cache_keygen_under_umask_000(project, tmp_path):
    key = tmp_path / "made" / "cache-key"
    run = _ok(scons(project, "cache-keygen", f"key={key}", umask=0))
    modes = {path: stat.S_IMODE(os.lstat(path).st_mode) for path in (key, key.with_name("cache-key.pub"), key.parent)}
    assert list(modes.values()) == [0o600, 0o644, 0o755], (modes, str(run))


def test_cache_keygen_refuses_a_dangling_symlink_at_the_public_key(project, tmp_path):
    planted = tmp_path / "elsewhere" / "trusted.pub"
    planted.parent.mkdir()
    (tmp_path / "cache-key.pub").symlink_to(planted)
    run = scons(project, "cache-keygen", f"key={tmp_path / 'cache-key'}")
    assert run.returncode == 2 and "cache-key.pub exists already (a symlink)" in run.stderr, str(run)
    assert not planted.exists() and not (tmp_path / "cache-key").exists()


def test_a_secret_key_others_can_read_is_refused_before_anything_runs(project, tmp_path, keys):
    secret = tmp_path / "copied-key"
    shutil.copyfile(keys.writer, secret)
    secret.chmod(0o644)
    run = scons(project, LEG, f"binary_cache={tmp_path / 'store'}", f"binary_cache_key={secret}")
    assert run.returncode == 2 and f"run `chmod 600 {secret}`" in run.stderr, str(run)
    assert not (project / "build").exists() and not (tmp_path / "store").exists()
    assert keys.writer.read_text().split(":")[1][:8] not in run.output


def test_a_fifo_as_the_trust_file_is_refused_at_once(project, tmp_path):
    fifo = tmp_path / "trusted.pub"
    os.mkfifo(fifo)
    run = scons(project, LEG, f"binary_cache_trust={fifo}", timeout=120)  # a blocking open would hang here
    assert run.returncode == 2 and f"the trusted keys file {fifo} is a fifo, not a regular file" in run.stderr, str(run)
