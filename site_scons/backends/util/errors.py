"""The project's one error base. Every failure the project names derives from `BackendsError`:
its message says what is wrong and what to do, and `status` is the exit status of a run that
stops on it. The SCons layer catches it in one place each (SConstruct while the graph is
read, graph/actions.py while a step runs) and prints the message in one line; any other
exception is a bug and shows its traceback.

The machine's refusals (a full disk, a missing permission, a read-only file system) are
wrapped where they happen, by `environment(path)`, into an `EnvironmentFailure` that names
the path; it stays an OSError (errno, filename) for the callers that answer one.
"""
from __future__ import annotations

import contextlib
import errno
import os
from typing import Iterator

EXIT_ERROR = 2  # SCons's own status for a failed run


class BackendsError(Exception):
    """A failure the project names; the message is the one line to print."""

    status: int = EXIT_ERROR


# What each refusal of the machine asks of the user.
ADVICE = {
    errno.ENOSPC: "free some space (`scons gc=1` removes what no leg uses) and run again",
    errno.EDQUOT: "free some space within the quota (`scons gc=1` removes what no leg uses) and run again",
    errno.EACCES: "give this user write access to it, or build in a tree of its own",
    errno.EPERM: "give this user write access to it, or build in a tree of its own",
    errno.EROFS: "build in a tree on a writable file system",
}


class EnvironmentFailure(BackendsError, OSError):
    """The machine refused to write `filename` (ADVICE's errors); errno and filename as an
    OSError's."""

    def __str__(self) -> str:
        advice = ADVICE.get(self.errno or 0, "")
        return f"{self.strerror} writing {self.filename}" + (f"; {advice}" if advice else "")


def environment_failure(error: OSError, path: str | os.PathLike[str]) -> OSError:
    """`error` as the EnvironmentFailure naming `path` when it is one of the machine's
    refusals; else `error` itself (a missing file is a caller's concern, or a bug)."""
    if error.errno not in ADVICE:
        return error
    failure = EnvironmentFailure(error.errno, error.strerror or os.strerror(error.errno), os.fspath(path))
    failure.__cause__ = error
    return failure


@contextlib.contextmanager
def environment(path: str | os.PathLike[str]) -> Iterator[None]:
    """Within the block, a refusal of the machine becomes an EnvironmentFailure naming `path`."""
    try:
        yield
    except EnvironmentFailure:
        raise  # named already, where it happened
    except OSError as error:
        failure = environment_failure(error, path)
        if failure is error:
            raise
        raise failure from error
