"""Key files guarded like ssh's (backends/cache/key_files.py): a secret key others can read or
another user owns is refused with the `chmod 600` to run; cache-keygen makes both files
itself (O_EXCL|O_NOFOLLOW), 0600 and 0644 in a directory others cannot write, whatever the
umask; trust files are regular files read with a size cap, a fifo refused without blocking."""
from __future__ import annotations

import os
import stat
import threading
from pathlib import Path
from typing import Callable, Iterator

import pytest

from backends.cache import key_files
from backends.cache.trust import TrustError, keygen, load_signer, load_trust

pytestmark = pytest.mark.skipif(os.name != "posix", reason="modes and owners are POSIX facts")


@pytest.fixture
def umask() -> Iterator[Callable[[int], None]]:
    before = os.umask(0o022)
    yield lambda mask: os.umask(mask) and None
    os.umask(before)


def _mode(path: Path) -> int:
    return stat.S_IMODE(os.lstat(path).st_mode)


def _bounded(call: Callable[[], object]) -> BaseException | object:
    """`call()` in a thread, with a deadline only as a guard against a hang (a fifo opened
    for reading without O_NONBLOCK waits for a writer forever)."""
    outcome: list[BaseException | object] = []

    def run() -> None:
        try:
            outcome.append(call())
        except BaseException as error:  # noqa: BLE001 - handed to the test
            outcome.append(error)

    worker = threading.Thread(target=run, daemon=True)
    worker.start()
    worker.join(timeout=60)
    assert outcome, "the read blocked"
    return outcome[0]


# -- the secret key -------------------------------------------------------------------------------

@pytest.mark.parametrize("mode", [0o644, 0o640, 0o604, 0o666, 0o660, 0o610], ids=lambda mode: f"{mode:04o}")
def test_a_secret_key_others_can_reach_is_refused_with_the_chmod_to_run(tmp_path: Path, mode: int) -> None:
    secret, _ = keygen(tmp_path / "k")
    secret.chmod(mode)
    with pytest.raises(TrustError) as refused:
        load_signer(str(secret), {})
    assert f"(mode {mode:04o})" in str(refused.value) and f"run `chmod 600 {secret}`" in str(refused.value)
    secret.chmod(0o600)
    assert load_signer(str(secret), {}) is not None
    secret.chmod(0o400)
    assert load_signer(str(secret), {}) is not None


def test_a_secret_key_another_user_owns_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    secret, _ = keygen(tmp_path / "k")
    owner = os.stat(secret).st_uid
    monkeypatch.setattr(os, "geteuid", lambda: owner + 1)
    with pytest.raises(TrustError, match=f"is owned by uid {owner}, not by the user running \\(uid {owner + 1}\\)"):
        load_signer(str(secret), {})
    monkeypatch.setattr(os, "geteuid", lambda: owner)
    assert load_signer(str(secret), {}) is not None


# -- cache-keygen ----------------------------------------------------------------------------------

@pytest.mark.parametrize("mask", [0o000, 0o002, 0o022, 0o077, 0o277], ids=lambda mask: f"umask {mask:03o}")
def test_keygen_modes_do_not_follow_the_umask(tmp_path: Path, umask: Callable[[int], None], mask: int) -> None:
    umask(mask)
    secret, public = keygen(tmp_path / "new" / "dir" / "k")
    assert (_mode(secret), _mode(public)) == (0o600, 0o644)
    assert _mode(tmp_path / "new") == _mode(tmp_path / "new" / "dir") == 0o755
    assert load_signer(str(secret), {}) is not None and load_trust(str(public), tmp_path).keys


@pytest.mark.parametrize("where", ["public", "secret"])
def test_keygen_never_follows_a_dangling_symlink(tmp_path: Path, where: str) -> None:
    target = tmp_path / "elsewhere" / "planted"
    target.parent.mkdir()
    link = tmp_path / ("k.pub" if where == "public" else "k")
    link.symlink_to(target)
    with pytest.raises(TrustError, match=f"{link} exists already \\(a symlink\\)"):
        keygen(tmp_path / "k")
    assert not target.exists(), "the symlink was followed"
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(["elsewhere", link.name]), "a key was left behind"


@pytest.mark.parametrize("sticky", [False, True], ids=["world-writable", "world-writable and sticky (/tmp)"])
def test_keygen_refuses_a_directory_others_may_write(tmp_path: Path, sticky: bool) -> None:
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o777 | (stat.S_ISVTX if sticky else 0))
    if sticky:
        assert keygen(shared / "k")[1].is_file()
        return
    with pytest.raises(TrustError, match=f"{shared} is where the key pair would go, which every user may write"):
        keygen(shared / "k")
    assert list(shared.iterdir()) == []


# -- trust files ----------------------------------------------------------------------------------

def _fifo(path: Path) -> Path:
    os.mkfifo(path)
    return path


@pytest.mark.parametrize("reader", ["trust", "secret"])
@pytest.mark.parametrize("kind", ["fifo", "/dev/zero", "directory", "over the size cap"])
def test_a_key_file_that_is_no_small_regular_file_is_refused_at_once(tmp_path: Path, reader: str, kind: str) -> None:
    if kind == "fifo":
        path = _fifo(tmp_path / "keys.pub")
    elif kind == "/dev/zero":
        path = Path("/dev/zero")
    elif kind == "directory":
        path = tmp_path
    else:
        path = tmp_path / "big.pub"
        path.write_bytes(b"# padding\n" * (key_files.TRUST_CAP // 10 + 1))
        path.chmod(0o600)
    read: Callable[[], object] = (lambda: load_trust(str(path), tmp_path)) if reader == "trust" else \
        (lambda: load_signer(str(path), {}))
    outcome = _bounded(read)
    assert isinstance(outcome, TrustError), outcome
    expected = {"fifo": "is a fifo, not a regular file", "/dev/zero": "is a character device, not a regular file",
                "directory": "is a directory, not a regular file", "over the size cap": "KiB, which no key file is"}
    assert expected[kind] in str(outcome)


def test_a_trust_file_anyone_can_replace_is_refused(tmp_path: Path) -> None:
    _, public = keygen(tmp_path / "keys" / "k")
    public.chmod(0o666)
    with pytest.raises(TrustError, match=f"is writable by every user \\(mode 0666\\).*chmod o-w {public}"):
        load_trust(str(public), tmp_path)
    public.chmod(0o664)  # a group-writable checkout (umask 002) is still read
    assert load_trust(str(public), tmp_path).keys
    (tmp_path / "keys").chmod(0o777)
    with pytest.raises(TrustError, match=f"lies in {tmp_path / 'keys'}, which every user may write"):
        load_trust(str(public), tmp_path)
    (tmp_path / "keys").chmod(0o1777)
    assert load_trust(str(public), tmp_path).keys
