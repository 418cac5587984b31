"""The command runner: logs, exact child environment, failure tail, progress, CLI."""
from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from backends.runner import run as runner
from backends.runner.run import Console, RunError, StatusLine, limited_env, parse_ninja_progress, run

SITE_SCONS = Path(__file__).resolve().parents[3] / "site_scons"
# With LC_ALL set, Python does not coerce the C locale by exporting LC_CTYPE, so the
# child's os.environ is exactly what it was given.
BASE_ENV = {"LC_ALL": "C.UTF-8"}


def python(code: str) -> list[str]:
    return [sys.executable, "-c", code]


class TtyBuffer(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_log_has_argv_cwd_env_and_output(tmp_path: Path) -> None:
    log = tmp_path / "logs" / "nested" / "build.log"
    status = io.StringIO()
    run(python("print('hello from child')"), env={**BASE_ENV, "FOO": "bar"},
        cwd=tmp_path, log=log, label="ort-linux", status_stream=status)
    text = log.read_text()
    assert json.dumps(python("print('hello from child')")) in text
    assert f"cwd: {tmp_path}" in text
    assert "  FOO=bar" in text and "  CMAKE_POLICY_VERSION_MINIMUM=3.5" in text
    assert "hello from child" in text
    assert status.getvalue().startswith("[ort-linux] running ")
    assert "[ort-linux] done in " in status.getvalue()
    assert "hello from child" not in status.getvalue()  # not echoed unless verbose


def test_log_is_appended(tmp_path: Path) -> None:
    log = tmp_path / "step.log"
    for word in ("first", "second"):
        run(python(f"print('{word}')"), env=BASE_ENV, cwd=tmp_path, log=log,
            label="x", status_stream=io.StringIO())
    text = log.read_text()
    assert text.index("first") < text.index("second")


def test_child_env_is_exactly_given_plus_policy_floor(tmp_path: Path) -> None:
    out = tmp_path / "env.json"
    code = f"import json, os; json.dump(dict(os.environ), open({str(out)!r}, 'w'))"
    run(python(code), env={**BASE_ENV, "ONLY": "this"}, cwd=tmp_path,
        log=tmp_path / "l.log", label="env", status_stream=io.StringIO())
    assert json.loads(out.read_text()) == {
        **BASE_ENV, "ONLY": "this", "CMAKE_POLICY_VERSION_MINIMUM": "3.5"}


def test_policy_floor_given_by_caller_wins(tmp_path: Path) -> None:
    out = tmp_path / "env.json"
    code = f"import os; open({str(out)!r}, 'w').write(os.environ['CMAKE_POLICY_VERSION_MINIMUM'])"
    run(python(code), env={**BASE_ENV, "CMAKE_POLICY_VERSION_MINIMUM": "3.10"},
        cwd=tmp_path, log=tmp_path / "l.log", label="env", status_stream=io.StringIO())
    assert out.read_text() == "3.10"


def test_limited_env_keeps_only_allow_list(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", "/usr/bin")
    monkeypatch.setenv("CUDA_HOME", "/opt/cuda")
    monkeypatch.setenv("GITHUB_TOKEN", "secret")
    monkeypatch.delenv("SDKROOT", raising=False)
    env = limited_env({"EXTRA": "1"})
    assert env["PATH"] == "/usr/bin" and env["CUDA_HOME"] == "/opt/cuda"
    assert env["EXTRA"] == "1" and env["CMAKE_POLICY_VERSION_MINIMUM"] == "3.5"
    assert "GITHUB_TOKEN" not in env and "SDKROOT" not in env
    assert set(env) <= set(runner.DEFAULT_ALLOW) | {"EXTRA", "CMAKE_POLICY_VERSION_MINIMUM"}
    assert limited_env({}, allow=["CUDA_HOME"]) == {
        "CUDA_HOME": "/opt/cuda", "CMAKE_POLICY_VERSION_MINIMUM": "3.5"}


# What bazelisk (its cache under %LOCALAPPDATA%, or BAZELISK_HOME), Bazel's JVM and MSVC's
# vcvarsall/vswhere read on a Windows runner, spelled as Windows spells them.
WINDOWS_RUNNER_ENV = {
    "LOCALAPPDATA": r"C:\Users\runneradmin\AppData\Local", "APPDATA": r"C:\Users\runneradmin\AppData\Roaming",
    "USERPROFILE": r"C:\Users\runneradmin", "TEMP": r"D:\tmp", "TMP": r"D:\tmp", "ProgramData": r"C:\ProgramData",
    "SystemRoot": r"C:\Windows", "ProgramFiles(x86)": r"C:\Program Files (x86)", "BAZELISK_HOME": r"D:\bazelisk",
}


def test_the_child_keeps_what_bazelisk_and_msvc_need_on_windows(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for key, value in WINDOWS_RUNNER_ENV.items():
        monkeypatch.setenv(key, value)
    out = tmp_path / "env.json"
    run(python(f"import json, os; json.dump(dict(os.environ), open({str(out)!r}, 'w'))"),
        env={**BASE_ENV, **limited_env({})}, cwd=tmp_path, log=tmp_path / "env.log", label="env")
    seen = json.loads(out.read_text())
    assert {key: seen.get(key) for key in WINDOWS_RUNNER_ENV} == WINDOWS_RUNNER_ENV


def test_bare_program_names_resolve_on_the_childs_path(tmp_path: Path) -> None:
    """Bare names go through shutil.which on every OS: on Windows that applies PATHEXT (npm
    installs only bazelisk.cmd), which CreateProcess does not."""
    tool = tmp_path / "bin" / "sometool"
    tool.parent.mkdir()
    tool.write_text("#!/bin/sh\n")
    tool.chmod(0o755)
    assert runner.resolve_program("sometool", str(tool.parent)) == str(tool)
    assert runner.resolve_program("sometool", str(tmp_path)) is None
    assert runner.resolve_program(str(tool), None) == str(tool)
    assert runner.resolve_program("./relative/tool", None) == "./relative/tool"  # relative to the child's cwd


def test_failure_raises_with_label_code_log_and_tail(tmp_path: Path) -> None:
    log = tmp_path / "fail.log"
    code = "import sys\nfor i in range(100): print(f'line {i}')\nsys.exit(3)"
    status = io.StringIO()
    with pytest.raises(RunError) as caught:
        run(python(code), env=BASE_ENV, cwd=tmp_path, log=log, label="tflite-ios",
            status_stream=status)
    error = caught.value
    message = str(error)
    assert error.returncode == 3 and error.log == log
    assert "tflite-ios" in message and "exit code 3" in message and str(log) in message
    assert "line 99" in message and "line 60" in message and "line 59" not in message
    assert len(error.tail) == 40
    assert "line 0" in log.read_text()
    assert "failed (exit code 3)" in status.getvalue()


def test_missing_program_is_a_run_error(tmp_path: Path) -> None:
    with pytest.raises(RunError, match="not found on the child's PATH"):
        run(["no-such-program-xyz"], env={"PATH": str(tmp_path)}, cwd=tmp_path,
            log=tmp_path / "l.log", label="x", status_stream=io.StringIO())


def test_parse_ninja_progress() -> None:
    assert parse_ninja_progress("[12/345] Building CXX object a.o") == (12, 345)
    assert parse_ninja_progress("[1234/5678] Linking libx.so") == (1234, 5678)
    assert parse_ninja_progress("[ 10%] Building (make style)") is None
    assert parse_ninja_progress("[0/0] nothing") is None
    assert parse_ninja_progress("-- Configuring done") is None


def test_plain_progress_printed_at_most_every_ten_percent() -> None:
    stream = io.StringIO()
    status = StatusLine("ort", stream, echo=False, console=Console())
    for done in range(1, 1001):
        status.output(f"[{done}/1000] Building CXX object f{done}.o")
    lines = stream.getvalue().splitlines()
    assert lines[0] == "[ort] 1/1000 (0%)"
    assert lines[-1] == "[ort] 1000/1000 (100%)"
    assert len(lines) == 11
    assert "\r" not in stream.getvalue()


def test_tty_progress_updates_in_place(tmp_path: Path) -> None:
    stream = TtyBuffer()
    code = "for i in range(1, 5): print(f'[{i}/4] step {i}', flush=True)"
    run(python(code), env=BASE_ENV, cwd=tmp_path, log=tmp_path / "l.log",
        label="et", status_stream=stream)
    text = stream.getvalue()
    assert "\r[et] 1/4 (25%)" in text and "\r[et] 4/4 (100%)" in text
    assert text.count("\n") == 1 and text.endswith("s\n")
    assert "[et] done in" in text


def test_echo_streams_every_line(tmp_path: Path) -> None:
    stream = io.StringIO()
    run(python("print('a'); print('b')"), env=BASE_ENV, cwd=tmp_path,
        log=tmp_path / "l.log", label="v", echo=True, status_stream=stream)
    assert "[v] a\n[v] b\n" in stream.getvalue()


def _cli(*arguments: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    child_env = {**os.environ, "PYTHONPATH": str(SITE_SCONS), **(env or {})}
    return subprocess.run([sys.executable, "-m", "backends.runner.run", *arguments],
                          env=child_env, capture_output=True, text=True, check=False)


def test_cli_propagates_exit_code_and_prints_tail(tmp_path: Path) -> None:
    log = tmp_path / "cli.log"
    result = _cli("--label", "cli", "--log", str(log), "--cwd", str(tmp_path), "--",
                  *python("import sys; print('boom'); sys.exit(5)"))
    assert result.returncode == 5
    assert str(log) in result.stderr and "boom" in result.stderr
    ok = _cli("--label", "cli", "--log", str(log), "--cwd", str(tmp_path), "--",
              *python("print('fine')"))
    assert ok.returncode == 0 and "[cli] done in" in ok.stderr


def test_cli_env_file_is_the_complete_environment(tmp_path: Path) -> None:
    env_file = tmp_path / "env.json"
    env_file.write_text(json.dumps({**BASE_ENV, "A": "1"}))
    out = tmp_path / "env.json.out"
    code = f"import json, os; json.dump(dict(os.environ), open({str(out)!r}, 'w'))"
    result = _cli("--label", "e", "--log", str(tmp_path / "l.log"), "--cwd", str(tmp_path),
                  "--env-file", str(env_file), "--env", "B=2", "--", *python(code),
                  env={"LEAKED": "no"})
    assert result.returncode == 0, result.stderr
    assert json.loads(out.read_text()) == {
        **BASE_ENV, "A": "1", "B": "2", "CMAKE_POLICY_VERSION_MINIMUM": "3.5"}


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the parent-death signal is Linux's")
def test_a_killed_run_takes_its_command_and_everything_it_started_down(tmp_path: Path) -> None:
    """kill -9 of the process running a command (scons) leaves no child or grandchild behind."""
    pidfile = tmp_path / "grandchild.pid"
    script = (
        "import sys; from pathlib import Path; sys.path.insert(0, %r)\n"
        "from backends.runner.run import run\n"
        "run(['sh', '-c', 'sleep 300 & echo $! > %s; wait'], env={'PATH': '/usr/bin:/bin'}, cwd=Path(%r),"
        " log=Path(%r), label='t')\n" % (str(SITE_SCONS), pidfile, str(tmp_path), str(tmp_path / "log"))
    )
    parent = subprocess.Popen([sys.executable, "-c", script], stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 120  # generous: CI's 2 cores may be busy
    while not pidfile.is_file() or not pidfile.read_text().strip():
        assert time.monotonic() < deadline and parent.poll() is None
        time.sleep(0.05)
    grandchild = int(pidfile.read_text())
    parent.kill()
    parent.wait()
    deadline = time.monotonic() + 60
    while _running(grandchild):
        assert time.monotonic() < deadline, "the command's own child outlived the killed run"
        time.sleep(0.05)


def _running(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().split(") ", 1)[1][0] != "Z"
    except FileNotFoundError:
        return False


class _Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_status_lines_are_plain_when_steps_run_in_parallel() -> None:
    """Under `scons -j N` several steps print at once: no line may rewrite another in place."""
    assert StatusLine("a", _Tty(), echo=False, console=Console()).in_place
    stream = _Tty()
    status = StatusLine("a", stream, echo=False, console=Console(parallel=True))
    status.progress(5, 10)
    assert not status.in_place and "\r" not in stream.getvalue()


def test_a_run_shows_its_commands_on_the_console_it_is_given(tmp_path: Path) -> None:
    """The run's console, not one of the command's own: plain lines under -j, and its heartbeat
    clock moved by what the command showed."""
    console, stream = Console(parallel=True, last_output=0.0), _Tty()
    run([sys.executable, "-c", "print('[1/2] a'); print('[2/2] b')"], env={"PATH": os.environ["PATH"]},
        cwd=tmp_path, log=tmp_path / "log", label="x", status_stream=stream, console=console)
    assert "\r" not in stream.getvalue() and "[x] 2/2 (100%)" in stream.getvalue().splitlines()
    assert console.last_output > 0.0


def test_a_silent_step_says_it_is_still_running(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """No clock race: the command waits for a file the test writes once the heartbeat showed."""
    import backends.runner.run as run_module

    monkeypatch.setattr(run_module, "HEARTBEAT_SECONDS", 0.2)
    shown = io.StringIO()
    release = tmp_path / "release"
    code = f"import os, time\nwhile not os.path.exists({str(release)!r}): time.sleep(0.02)\n"
    worker = threading.Thread(target=_silent, args=(run_module, code, tmp_path, shown))
    worker.start()
    deadline = time.monotonic() + 120
    while "[smoke] leg still running, " not in shown.getvalue():
        assert time.monotonic() < deadline and worker.is_alive(), shown.getvalue()
        time.sleep(0.02)
    release.touch()
    worker.join(timeout=120)
    assert not worker.is_alive()


def _silent(run_module, code: str, tmp_path: Path, shown: io.StringIO) -> None:
    with run_module.heartbeat("[smoke] leg", run_module.Console(), stream=shown):
        run_module.run([sys.executable, "-c", code], env={"PATH": os.environ["PATH"]}, cwd=tmp_path,
                       log=tmp_path / "log", label="leg", status_stream=io.StringIO())
