"""The one error base (backends/util/errors.py): the machine's refusals are wrapped where they
happen into a named error naming the path, anything else passes as it is."""
from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest

from backends.util import files
from backends.util.errors import BackendsError, EnvironmentFailure, environment


def _refuse(code: int):
    def fail(*args: object, **kwargs: object) -> None:
        raise OSError(code, os.strerror(code), "/some/temp")
    return fail


@pytest.mark.parametrize("code, advice", [(errno.ENOSPC, "free some space"), (errno.EACCES, "write access"),
                                          (errno.EROFS, "writable file system")])
def test_a_refusal_of_the_machine_becomes_a_named_error_naming_the_path(tmp_path: Path, code: int,
                                                                         advice: str) -> None:
    with pytest.raises(EnvironmentFailure) as raised, environment(tmp_path / "out.json"):
        raise OSError(code, os.strerror(code))
    failure = raised.value
    assert isinstance(failure, BackendsError) and isinstance(failure, OSError)
    assert (failure.errno, failure.filename, failure.status) == (code, str(tmp_path / "out.json"), 2)
    assert str(failure).startswith(f"{os.strerror(code)} writing {tmp_path / 'out.json'}; ") and advice in str(failure)
    assert "\n" not in str(failure) and isinstance(failure.__cause__, OSError)


def test_a_missing_file_is_not_the_machines_refusal(tmp_path: Path) -> None:
    """A FileNotFoundError is a caller's concern or a bug: it passes unwrapped, its traceback whole."""
    with pytest.raises(FileNotFoundError) as raised, environment(tmp_path / "out.json"):
        (tmp_path / "missing" / "x").read_text()
    assert not isinstance(raised.value, BackendsError)


def test_the_innermost_path_is_kept(tmp_path: Path) -> None:
    with pytest.raises(EnvironmentFailure) as raised, environment(tmp_path / "outer"), environment(tmp_path / "inner"):
        raise OSError(errno.ENOSPC, "No space left on device")
    assert raised.value.filename == str(tmp_path / "inner")


def test_a_full_disk_under_an_atomic_write_names_the_file_written(tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    target = tmp_path / "build" / "record.json"
    target.parent.mkdir()
    monkeypatch.setattr(os, "replace", _refuse(errno.ENOSPC))
    with pytest.raises(EnvironmentFailure) as raised:
        files.write_json(target, {"a": 1})
    assert raised.value.filename == str(target) and "No space left on device writing" in str(raised.value)
    assert list(target.parent.iterdir()) == [], "the temp file is removed"


def test_a_real_full_disk_is_wrapped(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """/dev/full answers every write with ENOSPC, as a full file system does."""
    if not os.path.exists("/dev/full"):
        pytest.skip("no /dev/full here")
    target = tmp_path / "archive.bin"
    real_open = open

    def onto_dev_full(path: object, mode: str = "r", *args: object, **kwargs: object):
        return real_open("/dev/full", mode, *args, **kwargs) if str(path).startswith(str(target)) else \
            real_open(path, mode, *args, **kwargs)

    monkeypatch.setattr("builtins.open", onto_dev_full)
    with pytest.raises(EnvironmentFailure) as raised:
        files.atomic_write_bytes(target, b"x" * (1 << 20), fsync=True)
    assert (raised.value.errno, raised.value.filename) == (errno.ENOSPC, str(target))


def test_a_copy_refused_names_its_destination(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    source, dest = tmp_path / "a", tmp_path / "b"
    source.write_text("a")
    monkeypatch.setattr(os, "link", _refuse(errno.EACCES))
    with pytest.raises(EnvironmentFailure) as raised:
        files.hardlink_or_copy(source, dest)
    assert raised.value.filename == str(dest)

