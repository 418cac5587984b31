"""A step's error, as graph/actions.py's dispatch gives it to SCons: a named error (a
BackendsError) is one clean line and its exit status; anything else is a bug and shows its
traceback."""
from __future__ import annotations

from pathlib import Path
from typing import Callable

import pytest
from SCons.Errors import BuildError

from backends.graph import actions
from backends.graph.records import Records
from backends.graph.summary import Summary
from backends.util.digests import DigestCache
from backends.util.errors import BackendsError, environment


class _Node:
    def __init__(self, path: Path) -> None:
        self.abspath = str(path)

    def children(self) -> list[object]:
        return []


class Odd(BackendsError):
    """A named error whose run ends with a status of its own."""

    status = 3


def _dispatch(tmp_path: Path, work: Callable[[], actions.StepResult]) -> BuildError:
    records = Records(tmp_path, DigestCache(tmp_path / "digests.json"))
    run = actions.RunContext(root=tmp_path, settings=None, matrix=None, host=None, environ={},  # type: ignore[arg-type]
                             records=records, summary=Summary(tmp_path))
    record = tmp_path / "build" / "legs" / "leg" / "steps" / "build.json"
    records.register([str(record)], str(record))
    run.steps[str(record)] = actions.Step("build", "leg", work, legs=["leg"])
    with pytest.raises(BuildError) as raised:
        actions.dispatch([_Node(record)], [], {"GRAPH_STEP": "build", "GRAPH_DESCRIBE": "leg", "GRAPH_RUN": run})
    return raised.value


def _raise(error: BaseException) -> Callable[[], actions.StepResult]:
    def work() -> actions.StepResult:
        raise error
    return work


@pytest.mark.parametrize("error, status", [(actions.StepFailure("the tool is missing; install it"), 2),
                                           (Odd("the tool is missing; install it"), 3)])
def test_a_named_error_is_one_line_and_its_exit_status(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                       error: BackendsError, status: int) -> None:
    failure = _dispatch(tmp_path, _raise(error))
    assert failure.errstr == "leg: build failed: the tool is missing; install it"
    assert failure.exitstatus == status
    assert "Traceback" not in capsys.readouterr().err


def test_a_full_disk_wrapped_where_it_happened_is_named(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    def work() -> actions.StepResult:
        with environment(tmp_path / "build" / "out.tar"):
            raise OSError(28, "No space left on device")
    failure = _dispatch(tmp_path, work)
    written = tmp_path / "build" / "out.tar"
    assert failure.errstr.startswith(f"leg: build failed: No space left on device writing {written}; ")
    assert "Traceback" not in capsys.readouterr().err


@pytest.mark.parametrize("error", [FileNotFoundError(2, "No such file or directory", "/nowhere/x"),
                                   KeyError("platform"), OSError(28, "No space left on device")])
def test_an_unexpected_exception_shows_its_traceback(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                     error: Exception) -> None:
    """An OSError nobody wrapped is a bug as much as a KeyError: its traceback says where it came from."""
    failure = _dispatch(tmp_path, _raise(error))
    assert failure.exitstatus == 2 and failure.errstr.startswith("leg: build failed: ")
    err = capsys.readouterr().err
    assert "Traceback (most recent call last)" in err and type(error).__name__ in err
    assert (tmp_path / "build" / "logs" / "build.log").is_file()  # the failure still names a log
