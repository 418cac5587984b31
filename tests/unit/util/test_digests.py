"""Content digests with an identity cache: reused only for the very same, untouched file."""
from __future__ import annotations

import hashlib
import os
import re
from pathlib import Path

import pytest

from backends.util import digests as digests_module
from backends.util.digests import DigestCache, FileVanished


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


@pytest.fixture
def settled(monkeypatch: pytest.MonkeyPatch) -> None:
    """Entries count as settled at once (the real rule waits RACY_NS after a change)."""
    monkeypatch.setattr(digests_module, "RACY_NS", -10**12)


def _counting(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    hashed: list[str] = []
    real = digests_module.sha256_file
    monkeypatch.setattr(digests_module, "sha256_file", lambda path: hashed.append(str(path)) or real(path))
    return hashed


def test_a_settled_file_is_hashed_once_across_runs(tmp_path: Path, settled: None,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    hashed = _counting(monkeypatch)
    store = tmp_path / "digests.json"
    data = tmp_path / "big.whl"
    data.write_bytes(b"wheel" * 1000)
    first = DigestCache(store)
    assert first.digest(data) == sha(b"wheel" * 1000)
    first.save()
    second = DigestCache(store)
    assert second.digest(data) == sha(b"wheel" * 1000)
    assert len(hashed) == 1


@pytest.mark.parametrize("same_size", [True, False])
def test_a_file_replaced_under_the_same_mtime_is_hashed_again(tmp_path: Path, settled: None, same_size: bool) -> None:
    cache = DigestCache(tmp_path / "digests.json")
    data = tmp_path / "origin.tgz"
    data.write_bytes(b"A" * 4096)
    before = data.stat()
    assert cache.digest(data) == sha(b"A" * 4096)
    new = b"B" * 4096 if same_size else b"B" * 5000
    data.write_bytes(new)
    os.utime(data, ns=(before.st_atime_ns, before.st_mtime_ns))  # touch -r
    assert data.stat().st_mtime_ns == before.st_mtime_ns
    assert cache.digest(data) == sha(new)


def test_a_fresh_entry_is_not_trusted(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Hashed right after a change, a later same-tick write could keep every timestamp."""
    hashed = _counting(monkeypatch)
    cache = DigestCache(None)
    data = tmp_path / "x"
    data.write_bytes(b"x")
    cache.digest(data)
    cache.digest(data)
    assert len(hashed) == 2


def test_missing_and_non_files_have_no_digest(tmp_path: Path) -> None:
    cache = DigestCache(None)
    assert cache.digest(tmp_path / "absent") is None
    assert cache.digest(tmp_path) is None


def test_a_file_that_must_be_there_is_an_error_naming_it_when_it_is_gone(tmp_path: Path) -> None:
    cache = DigestCache(None)
    data = tmp_path / "origin.tgz"
    data.write_bytes(b"x")
    assert cache.require(data) == sha(b"x")
    data.unlink()
    with pytest.raises(FileVanished, match=re.escape(str(data))):
        cache.require(data)
    with pytest.raises(FileVanished):
        cache.require(tmp_path)


def test_a_hard_link_of_a_hashed_file_is_not_read_again(tmp_path: Path, settled: None,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    hashed = _counting(monkeypatch)
    cache = DigestCache(tmp_path / "digests.json")
    original = tmp_path / "tree" / "lib.so"
    original.parent.mkdir()
    original.write_bytes(b"library")
    link = tmp_path / "stage" / "lib.so"
    link.parent.mkdir()
    os.link(original, link)  # changes the inode's ctime: the original's entry must follow
    assert cache.digest(link) == sha(b"library")
    assert cache.digest(original) == sha(b"library")
    assert hashed == [str(link)]


def _tree(root: Path) -> Path:
    (root / "include").mkdir(parents=True)
    (root / "include" / "api.h").write_text("int api(void);\n")
    (root / "lib").mkdir()
    (root / "lib" / "libx.so.1").write_bytes(b"\x7fELF")
    (root / "lib" / "libx.so").symlink_to("libx.so.1")
    return root


@pytest.mark.parametrize("edit", ["content, same size", "symlink target", "mode", "new file", "removed file"])
def test_a_tree_digest_changes_with_any_edit(tmp_path: Path, edit: str) -> None:
    tree = _tree(tmp_path / "tree")
    before = DigestCache(None).tree_digest(tree)
    assert before == DigestCache(None).tree_digest(_tree(tmp_path / "copy"))
    if edit == "content, same size":
        (tree / "include" / "api.h").write_text("int apj(void);\n")
    elif edit == "symlink target":
        (tree / "lib" / "libx.so").unlink()
        (tree / "lib" / "libx.so").symlink_to("libx.so.2")
    elif edit == "mode":
        (tree / "lib" / "libx.so.1").chmod(0o755)
    elif edit == "new file":
        (tree / "include" / "extra.h").write_text("")
    else:
        (tree / "include" / "api.h").unlink()
    assert DigestCache(None).tree_digest(tree) != before


def test_a_missing_tree_has_no_digest(tmp_path: Path) -> None:
    assert DigestCache(None).tree_digest(tmp_path / "absent") is None


def test_a_tree_digest_keeps_its_format(tmp_path: Path) -> None:
    """Records of trees built before stay valid: the digest is this hash of these lines (kind,
    path, executable bits, content or target), sorted by path, whatever way the tree is read."""
    tree = _tree(tmp_path / "tree")
    (tree / "lib" / "libx.so.1").chmod(0o755)
    header, library = sha((tree / "include" / "api.h").read_bytes()), sha(b"\x7fELF")
    lines = ["dir\x00include\x00111\x00\n",
             f"file\x00include/api.h\x000\x00{header}\n",
             "dir\x00lib\x00111\x00\n",
             "symlink\x00lib/libx.so\x00111\x00libx.so.1\n",
             f"file\x00lib/libx.so.1\x00111\x00{library}\n"]
    assert DigestCache(None).tree_digest(tree) == sha("".join(lines).encode())


def test_a_tree_with_a_fifo_has_no_digest(tmp_path: Path) -> None:
    tree = _tree(tmp_path / "tree")
    os.mkfifo(tree / "lib" / "pipe")
    assert DigestCache(None).tree_digest(tree) is None


def test_an_entry_past_the_clock_tick_of_a_fine_grained_filesystem_is_trusted(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Hashed 150 ms after a change (sub-second timestamps): the next run reads it no more."""
    data = tmp_path / "x"
    data.write_bytes(b"x")
    real = digests_module.time.time_ns
    monkeypatch.setattr(digests_module.time, "time_ns", lambda: real() + 150_000_000)
    cache = DigestCache(None)
    cache.digest(data)  # hashed "150 ms later"
    hashed = _counting(monkeypatch)
    assert cache.digest(data) == sha(b"x")
    assert hashed == []


@pytest.mark.parametrize(("change_ns", "hashed_after_ns", "trusted"), [
    (1_700_000_000_123_456_789, 150_000_000, True),     # sub-second times: past a 100 ms window
    (1_700_000_000_123_456_789, 50_000_000, False),     # within it
    (1_700_000_000_000_000_000, 150_000_000, False),    # whole seconds (FAT, ext3): 2 s
    (1_700_000_000_000_000_000, 2_500_000_000, True),
])
def test_the_racy_window_follows_the_timestamps_resolution(change_ns: int, hashed_after_ns: int,
                                                            trusted: bool) -> None:
    class Stat:
        st_mtime_ns = st_ctime_ns = change_ns

    entry = {"hashed_at": change_ns + hashed_after_ns}
    assert DigestCache._settled(entry, Stat()) is trusted  # type: ignore[arg-type]
