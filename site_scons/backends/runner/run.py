"""The command runner every heavy step goes through (docs/decisions.md).

- argv lists only, never shell strings;
- the child sees exactly the environment it is given (plus the CMake policy floor);
- output is appended to a per-step log; the terminal gets one status line per step,
  with Ninja's `[n/m]` counter surfaced as progress;
- a failure raises `RunError` carrying the log path and the last lines of output.

How many heavy builds run at once is SCons's to schedule (graph/declare.py, `heavy_jobs=`).

Also a CLI for SCons command actions:

    python -m backends.runner.run --label L --log F --cwd D [--env K=V ...]
        [--env-file F.json] [--verbose] -- argv...
"""
from __future__ import annotations

import argparse
import collections
import json
import os
import re
import shutil
import sys
import threading
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, TextIO

from backends.runner import containment
from backends.util.errors import BackendsError, environment

POLICY_FLOOR_KEY = "CMAKE_POLICY_VERSION_MINIMUM"
POLICY_FLOOR_VALUE = "3.5"

DEFAULT_ALLOW: tuple[str, ...] = (
    # basics
    "PATH", "HOME", "TMPDIR", "LANG", "LC_ALL",
    # Windows basics, spelled as Windows does (lookups there ignore case): the system and user
    # directories that bazelisk (%LOCALAPPDATA% cache), Bazel's JVM and vcvarsall/vswhere read
    "SystemRoot", "windir", "COMSPEC", "PATHEXT", "TEMP", "TMP", "USERPROFILE", "LOCALAPPDATA", "APPDATA",
    "ProgramData", "ProgramFiles", "ProgramFiles(x86)", "PROCESSOR_ARCHITECTURE", "NUMBER_OF_PROCESSORS",
    "BAZELISK_HOME",
    # MSVC developer environment
    "INCLUDE", "LIB", "LIBPATH", "VCINSTALLDIR", "VCToolsInstallDir", "VCToolsRedistDir",
    "WindowsSdkDir", "WindowsSDKVersion", "UCRTVersion",
    # Xcode
    "DEVELOPER_DIR", "SDKROOT",
    # cross toolchains
    "ANDROID_NDK_HOME", "ANDROID_SDK_ROOT", "EMSDK",
    # CUDA
    "CUDA_HOME", "CUDA_PATH",
    # compiler caches, reaching inside the upstream CMake builds (docs/ci-and-release.md)
    "CCACHE_DIR", "SCCACHE_DIR", "SCCACHE_GHA_ENABLED", "ACTIONS_CACHE_URL", "ACTIONS_RUNTIME_TOKEN",
    "CMAKE_C_COMPILER_LAUNCHER", "CMAKE_CXX_COMPILER_LAUNCHER",
    "PYTHON",
)

NINJA_PROGRESS = re.compile(r"^\[(\d+)/(\d+)\]")
PROGRESS_STEP_PERCENT = 10
# Exit status of the CLI when the program cannot be started (as in POSIX shells).
EXIT_NOT_FOUND = 127


class RunError(BackendsError, RuntimeError):
    """A command failed; the message names the step, exit code, log and output tail."""

    def __init__(self, label: str, returncode: int, log: Path, tail: Sequence[str],
                 reason: str | None = None) -> None:
        self.label = label
        self.returncode = returncode
        self.log = log
        self.tail = list(tail)
        what = reason or f"failed with exit code {returncode}"
        lines = [f"[{label}] {what}; full log: {log}"]
        if self.tail:
            lines.append(f"[{label}] last {len(self.tail)} lines of output:")
            lines.extend(self.tail)
        super().__init__("\n".join(lines))


def limited_env(extra: Mapping[str, str],
                allow: Iterable[str] = DEFAULT_ALLOW) -> dict[str, str]:
    """A child environment: the allow-listed host variables, then `extra`, then the
    CMake policy floor (unless `extra` sets it)."""
    env = {key: os.environ[key] for key in allow if key in os.environ}
    env.update(extra)
    env.setdefault(POLICY_FLOOR_KEY, POLICY_FLOOR_VALUE)
    return env


def passed_environment(environ: Mapping[str, str], names: Iterable[str] = ()) -> dict[str, str]:
    """What of `environ` a child started with `limited_env` receives (the allow-list plus
    `names`), for step signatures: every variable a child gets can change what it makes.
    Credentials are recorded as set or not, never by value."""
    wanted = dict.fromkeys([*DEFAULT_ALLOW, *names])
    wanted.pop("PATH", None)  # stands in the signature as what it finds: the tools' paths and versions
    return {key: ("<set>" if _SECRET.search(key) else environ[key]) for key in wanted if key in environ}


def child_env(env: Mapping[str, str]) -> dict[str, str]:
    """Exactly `env`, plus the CMake policy floor when absent."""
    complete = dict(env)
    complete.setdefault(POLICY_FLOOR_KEY, POLICY_FLOOR_VALUE)
    return complete


def parse_ninja_progress(line: str) -> tuple[int, int] | None:
    """(done, total) from a Ninja status line like `[12/345] Building CXX ...`."""
    match = NINJA_PROGRESS.match(line)
    if not match:
        return None
    done, total = int(match.group(1)), int(match.group(2))
    return (done, total) if total > 0 else None


# A step that has shown nothing for this long says it is still running (heartbeat).
HEARTBEAT_SECONDS = 15.0


@dataclass
class Console:
    """The terminal one run's steps show on, passed to every command and heartbeat of the run.

    `parallel`: SCons runs several steps at once (-j N), so their status lines would overwrite
    each other's in place: each is printed as plain lines. `last_output`: when any of them last
    showed something, the clock every heartbeat of the run reads (the terminal is shared).
    """

    parallel: bool = False
    last_output: float = field(default_factory=time.monotonic)

    def note_output(self) -> None:
        """Something was shown: the next heartbeat waits a full period from now."""
        self.last_output = time.monotonic()


@contextmanager
def heartbeat(prefix: str, console: Console, stream: TextIO | None = None) -> Iterator[None]:
    """While the block runs, print `<prefix> still running, <elapsed> s` whenever nothing
    was shown on `console` for HEARTBEAT_SECONDS: a silent compile or a large archive never
    looks hung."""
    stop, started = threading.Event(), time.monotonic()
    console.note_output()

    def beat() -> None:
        while not stop.wait(HEARTBEAT_SECONDS / 3):
            if time.monotonic() - console.last_output >= HEARTBEAT_SECONDS:
                out = stream if stream is not None else sys.stdout
                out.write(f"{prefix} still running, {time.monotonic() - started:.0f} s\n")
                out.flush()
                console.note_output()

    thread = threading.Thread(target=beat, name=f"heartbeat {prefix}", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()


class StatusLine:
    """The one status line a step shows on the terminal.

    On a TTY progress rewrites the line in place; elsewhere (CI logs, SCons -j) it is
    printed as plain lines, at most once per 10 %, so logs stay short.
    """

    def __init__(self, label: str, stream: TextIO, echo: bool, console: Console) -> None:
        self.label = label
        self.stream = stream
        self.echo = echo
        self.console = console
        self.in_place = _is_tty(stream) and not echo and not console.parallel
        self._shown_width = 0
        self._last_bucket = -1

    def start(self, program: str) -> None:
        self._show(f"[{self.label}] running {program} …", final=not self.in_place)

    def output(self, line: str) -> None:
        if self.echo:
            self._show(f"[{self.label}] {line}", final=True)
        progress = parse_ninja_progress(line)
        if progress is not None:
            self.progress(*progress)

    def progress(self, done: int, total: int) -> None:
        percent = min(100, done * 100 // total)
        text = f"[{self.label}] {done}/{total} ({percent}%)"
        if self.in_place:
            self._show(text, final=False)
            return
        bucket = percent // PROGRESS_STEP_PERCENT
        if bucket > self._last_bucket:
            self._last_bucket = bucket
            self._show(text, final=True)

    def finish(self, text: str) -> None:
        self._show(f"[{self.label}] {text}", final=True)

    def _show(self, text: str, *, final: bool) -> None:
        if self.in_place:
            padding = " " * max(0, self._shown_width - len(text))
            self.stream.write(f"\r{text}{padding}")
            self._shown_width = 0 if final else len(text)
            if final:
                self.stream.write("\n")
        else:
            self.stream.write(text + "\n")
        self.stream.flush()
        self.console.note_output()


def _is_tty(stream: IO[str]) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False


# Logs are uploaded as CI artifacts: never write a credential's value into one.
_SECRET = re.compile(r"TOKEN|SECRET|PASSW|PWD|CREDENTIAL|_KEY$|^DEV_ID_APP", re.IGNORECASE)


def is_credential(name: str) -> bool:
    """Whether the variable `name` holds a credential, whose value no log or record may hold."""
    return bool(_SECRET.search(name))


# A command's log entry: a header (its argv, cwd and environment), then this line, then its output.
LOG_HEADER_START = "==== ["
LOG_OUTPUT_START = "output:"


def _log_header(argv: Sequence[str], cwd: Path, env: Mapping[str, str],
                label: str) -> str:
    lines = [
        f"{LOG_HEADER_START}{label}] started {time.strftime('%Y-%m-%d %H:%M:%S')}",
        f"argv: {json.dumps(list(argv))}",
        f"cwd: {cwd}",
        "env:",
    ]
    lines.extend(f"  {key}={'<redacted>' if _SECRET.search(key) else env[key]}" for key in sorted(env))
    lines.append(LOG_OUTPUT_START)
    return "\n".join(lines) + "\n"


def resolve_program(program: str, path: str | None) -> str | None:
    """The file `program` starts: a bare name looked up on `path` (the child's PATH, not ours)
    with `shutil.which` on every OS, so Windows finds `bazelisk.cmd` for `bazelisk` through
    PATHEXT (CreateProcess alone only appends .exe); an absolute path as it is, completed by
    PATHEXT on Windows. None when nothing matches."""
    if os.sep in program or (os.altsep and os.altsep in program):
        return (shutil.which(program) or program) if os.path.isabs(program) else program
    return shutil.which(program, path=path if path is not None else os.defpath)


def run(argv: Sequence[str], *, env: Mapping[str, str], cwd: Path, log: Path,
        label: str, tail_lines: int = 40, echo: bool = False,
        status_stream: TextIO | None = None, console: Console | None = None) -> None:
    """Run `argv` in `cwd` with exactly `env` (+ the policy floor), logging to `log`.

    Raises `RunError` on a non-zero exit or when the program cannot be started.
    `status_stream` defaults to stderr (tests pass a buffer); `console` is the run's terminal
    (a command run alone, or shown only in a buffer, has one of its own).
    """
    if not argv:
        raise ValueError(f"[{label}] empty command")
    stream = status_stream if status_stream is not None else sys.stderr
    full_env = child_env(env)
    log = Path(log)
    tail: collections.deque[str] = collections.deque(maxlen=max(tail_lines, 0))
    status = StatusLine(label, stream, echo, console if console is not None else Console())
    started = time.monotonic()

    with environment(log):
        log.parent.mkdir(parents=True, exist_ok=True)
        opened = open(log, "a", encoding="utf-8", errors="replace", newline="\n", buffering=1)
    with opened as log_file:
        log_file.write(_log_header(argv, cwd, full_env, label))
        log_file.flush()
        program = resolve_program(str(argv[0]), full_env.get("PATH"))
        if program is None:
            reason = f"cannot start {argv[0]!r}: not found on the child's PATH"
            log_file.write(reason + "\n")
            raise RunError(label, EXIT_NOT_FOUND, log, [], reason=reason)
        status.start(os.path.basename(str(argv[0])))
        returncode = _stream_child([program, *map(str, argv[1:])], full_env, cwd,
                                   log_file, tail, status, label)
        elapsed = time.monotonic() - started
        log_file.write(f"{LOG_HEADER_START}{label}] exit code {returncode} after {elapsed:.1f} s\n")

    if returncode != 0:
        status.finish(f"failed (exit code {returncode}) after {elapsed:.1f} s")
        raise RunError(label, returncode, log, tail)
    status.finish(f"done in {elapsed:.1f} s")


def _stream_child(argv: list[str], env: dict[str, str], cwd: Path, log_file: IO[str],
                  tail: collections.deque[str], status: StatusLine,
                  label: str) -> int:
    try:
        child = containment.spawn(argv, env=env, cwd=cwd)
    except OSError as error:
        reason = f"cannot start {argv[0]!r}: {error}"
        log_file.write(reason + "\n")
        raise RunError(label, EXIT_NOT_FOUND, Path(log_file.name), [], reason=reason)
    assert child.stdout is not None
    try:
        for raw in child.stdout:
            line = raw.decode("utf-8", "replace").rstrip("\r\n")
            log_file.write(line + "\n")
            tail.append(line)
            status.output(line)
        child.wait()
        containment.finished(child)
        return child.returncode
    except BaseException:
        # Ctrl-C or a failing status stream: never leave the build running behind us.
        containment.stop(child)
        raise
    finally:
        child.stdout.close()


# --- CLI -------------------------------------------------------------------------------

def _parse_env_pair(text: str) -> tuple[str, str]:
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"--env expects KEY=VALUE, got {text!r}")
    return key, value


def _cli_env(env_file: Path | None, pairs: Sequence[tuple[str, str]]) -> dict[str, str]:
    """`--env-file` is the complete environment when given; otherwise the allow-listed
    part of ours. `--env` pairs are applied on top."""
    if env_file is not None:
        loaded = json.loads(Path(env_file).read_text(encoding="utf-8"))
        if not isinstance(loaded, dict):
            raise SystemExit(f"{env_file}: expected a JSON object of strings")
        base = {str(key): str(value) for key, value in loaded.items()}
    else:
        base = limited_env({})
    base.update(pairs)
    return base


def _argument_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m backends.runner.run",
        description="Run one build command with a log, a status line and a failure tail.",
    )
    parser.add_argument("--label", required=True)
    parser.add_argument("--log", required=True, type=Path)
    parser.add_argument("--cwd", required=True, type=Path)
    parser.add_argument("--env", action="append", default=[], type=_parse_env_pair,
                        metavar="KEY=VALUE")
    parser.add_argument("--env-file", type=Path)
    parser.add_argument("--tail-lines", type=int, default=40)
    parser.add_argument("--verbose", action="store_true", help="echo every output line")
    parser.add_argument("argv", nargs=argparse.REMAINDER)
    return parser


def _exit_code(returncode: int) -> int:
    # A child killed by signal N reports -N; shells report 128+N.
    return 128 - returncode if returncode < 0 else returncode


def main(arguments: Sequence[str] | None = None) -> int:
    options = _argument_parser().parse_args(arguments)
    argv = list(options.argv)
    if argv and argv[0] == "--":
        argv = argv[1:]
    if not argv:
        _argument_parser().error("no command given after --")
    env = _cli_env(options.env_file, options.env)

    try:
        run(argv, env=env, cwd=options.cwd, log=options.log, label=options.label,
            tail_lines=options.tail_lines, echo=options.verbose)
    except RunError as error:
        sys.stderr.write(f"{error}\n")
        return _exit_code(error.returncode) or 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
