"""Key files guarded as ssh guards its own: what decides whose cache entries a run trusts, and
what it signs them with, must be files only their owner controls.

- A secret key file is refused when it is not a regular file, not owned by the user running,
  or readable or writable by group or others (the message gives the `chmod 600` to run).
- A file of trusted public keys is refused when it is not a regular file, or when it or its
  directory (without the sticky bit) is writable by others: anyone could swap the trusted key.
- Every key file is read with a size cap, opened without blocking: a fifo or `/dev/zero`
  given as a key file is refused at once instead of hanging the run or filling memory.
- `cache-keygen` creates both files with O_EXCL|O_NOFOLLOW (a file, or a symlink dangling or
  not, at either path is refused, never followed or overwritten), the secret 0600 and the
  public key 0644, in a directory it makes 0755 and that others may not write, whatever the
  umask; a failure leaves neither file behind.

Modes and owners are POSIX facts: on Windows only the file type and size are checked.
"""
from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import Callable

from backends.util.errors import BackendsError
from backends.util.files import make_dirs

SECRET_MODE = 0o600
PUBLIC_MODE = 0o644
DIRECTORY_MODE = 0o755
SECRET_CAP = 4 * 1024  # a key line is under 100 bytes
TRUST_CAP = 64 * 1024  # a list of about a thousand keys
POSIX = os.name == "posix"


class KeyFileError(BackendsError, ValueError):
    """A key file that may not be used; the message names it, why, and what to do."""


def read_secret_key(path: Path, what: str) -> str:
    """The text of a secret key file, once it is shown to be its user's alone."""
    return _read(path, what, SECRET_CAP, _secret_problem)


def read_trusted_keys(path: Path, what: str) -> str:
    """The text of a file of trusted public keys, once nobody else can replace it."""
    return _read(path, what, TRUST_CAP, _trust_problem)


def _read(path: Path, what: str, cap: int, problem_of: Callable[[Path, os.stat_result], str]) -> str:
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_BINARY", 0) | getattr(os, "O_CLOEXEC", 0)
    try:
        descriptor = os.open(path, flags)  # a fifo opens at once (no writer needed), and is refused below
    except OSError as error:
        raise KeyFileError(f"{what} cannot be read: {error.strerror or error}") from None
    try:
        status = os.fstat(descriptor)
        if not stat.S_ISREG(status.st_mode):
            raise KeyFileError(f"{what} is {_kind(status.st_mode)}, not a regular file; give the key file itself")
        problem = problem_of(path, status)
        if problem:
            raise KeyFileError(f"{what} {problem}")
        data = _read_capped(descriptor, cap)
    except OSError as error:
        raise KeyFileError(f"{what} cannot be read: {error.strerror or error}") from None
    finally:
        os.close(descriptor)
    if data is None:
        raise KeyFileError(f"{what} is larger than {cap // 1024} KiB, which no key file is; give the key file itself")
    try:
        return data.decode("ascii")
    except UnicodeDecodeError:
        raise KeyFileError(f"{what} is not ASCII text, which key files are") from None


def _read_capped(descriptor: int, cap: int) -> bytes | None:
    """Up to `cap` bytes to the end; None when there are more."""
    chunks, size = [], 0
    while chunk := os.read(descriptor, cap + 1 - size):
        chunks.append(chunk)
        size += len(chunk)
        if size > cap:
            return None
    return b"".join(chunks)


def _secret_problem(path: Path, status: os.stat_result) -> str:
    if not POSIX:
        return ""
    if status.st_uid != os.geteuid():
        return (f"is owned by uid {status.st_uid}, not by the user running (uid {os.geteuid()}): its owner could "
                f"replace it; copy it into a file of your own and `chmod 600` that")
    mode = stat.S_IMODE(status.st_mode)
    if mode & 0o077:
        return (f"is {_who(mode)} (mode {mode:04o}): a secret key must be yours alone; run `chmod 600 {path}` "
                "(and treat the key as exposed if others could read it)")
    return ""


def _trust_problem(path: Path, status: os.stat_result) -> str:
    if not POSIX:
        return ""
    mode = stat.S_IMODE(status.st_mode)
    if mode & stat.S_IWOTH:
        return f"is writable by every user (mode {mode:04o}), who could swap the trusted key; run `chmod o-w {path}`"
    directory = path.absolute().parent
    problem = _open_directory_problem(directory)
    return f"lies in {directory}, {problem}, so any user could swap the trusted key" if problem else ""


def _open_directory_problem(directory: Path) -> str:
    """Why others could replace files in `directory` ("" when they cannot): writable by every
    user without the sticky bit (/tmp's keeps each user's files their own)."""
    if not POSIX:
        return ""
    mode = os.stat(directory).st_mode
    if mode & stat.S_IWOTH and not mode & stat.S_ISVTX:
        return f"which every user may write (mode {stat.S_IMODE(mode):04o}; `chmod o-w {directory}`)"
    return ""


def _who(mode: int) -> str:
    readers = [name for name, bits in (("group", 0o070), ("others", 0o007)) if mode & bits]
    return f"open to {' and '.join(readers)}"


def _kind(mode: int) -> str:
    kinds = ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a fifo"), (stat.S_ISSOCK, "a socket"),
             (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"))
    return next((name for test, name in kinds if test(mode)), "not a regular file")


def create_key_pair(secret: Path, secret_text: str, public: Path, public_text: str) -> None:
    """Write the key pair (see the module docstring): both files or neither."""
    make_dirs(secret.parent, DIRECTORY_MODE)
    problem = _open_directory_problem(secret.parent)
    if problem:
        raise KeyFileError(f"{secret.parent} is where the key pair would go, {problem}: anyone could replace "
                           "the public key readers trust; choose a directory only you can write")
    made: list[Path] = []
    try:
        for path, text, mode in ((secret, secret_text, SECRET_MODE), (public, public_text, PUBLIC_MODE)):
            _create(path, text, mode)
            made.append(path)
    except BaseException:
        for path in made:
            path.unlink(missing_ok=True)
        raise


def _create(path: Path, text: str, mode: int) -> None:
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
    try:
        descriptor = os.open(path, flags, mode)
    except FileExistsError:
        kind = "a symlink" if path.is_symlink() else "a file"
        raise KeyFileError(f"{path} exists already ({kind}); choose another name (a key is never overwritten, "
                           "a symlink never followed)") from None
    except OSError as error:
        raise KeyFileError(f"cannot create {path}: {error.strerror or error}") from None
    try:
        with os.fdopen(descriptor, "wb") as handle:
            if POSIX:
                os.fchmod(handle.fileno(), mode)  # exactly `mode`: the umask may have narrowed it at open
            handle.write(text.encode("ascii"))
    except OSError as error:
        path.unlink(missing_ok=True)
        raise KeyFileError(f"cannot write {path}: {error.strerror or error}") from None
