"""The MSVC developer environment the Windows leg jobs get (backends/ci/msvc_env.py), with vswhere
and cmd faked (no Windows here): what vcvarsall changes reaches $GITHUB_ENV, and a host
without the C++ tools fails naming what to install."""
from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Sequence

import pytest

import gha
from backends.ci import msvc_env


def _host(tmp_path: Path, *, tools: bool = True) -> tuple[dict[str, str], list[list[str]], msvc_env.Run]:
    programs = tmp_path / "Program Files (x86)"
    (programs / msvc_env.VSWHERE).parent.mkdir(parents=True)
    (programs / msvc_env.VSWHERE).write_text("")
    install = tmp_path / "BuildTools"
    (install / "VC" / "Auxiliary" / "Build").mkdir(parents=True)
    (install / "VC" / "Auxiliary" / "Build" / "vcvarsall.bat").write_text("")
    calls: list[list[str]] = []

    def run(argv: Sequence[str] | str) -> subprocess.CompletedProcess[str]:
        calls.append([argv] if isinstance(argv, str) else list(argv))
        if not isinstance(argv, str) and argv[0].endswith("vswhere.exe"):
            return subprocess.CompletedProcess(argv, 0, f"{install}\n" if tools else "", "")
        assert isinstance(argv, str)  # cmd.exe gets its own command line, quoted as cmd reads it
        marker = argv.split("echo ")[1].split(" &&")[0]
        listing = "Path=C:\\VS\\bin;C:\\Windows\nINCLUDE=C:\\VS\\include\nUNCHANGED=same\nVSCMD_VER=17.14\n"
        return subprocess.CompletedProcess(argv, 0, f"** Visual Studio 2022 Developer Command Prompt\n{marker}\n"
                                                    f"{listing}", "")

    environ = {"ProgramFiles(x86)": str(programs), "PROCESSOR_ARCHITECTURE": "AMD64", "PATH": "C:\\Windows",
               "UNCHANGED": "same", "GITHUB_ENV": str(tmp_path / "github_env")}
    return environ, calls, run


def _env_file(path: Path) -> dict[str, str]:
    lines, values = path.read_text().splitlines(), {}
    while lines:
        name, delimiter = lines.pop(0).split("<<")
        end = lines.index(delimiter)
        values[name], lines = "\n".join(lines[:end]), lines[end + 1:]
    return values


def test_what_vcvarsall_sets_reaches_the_later_steps(tmp_path: Path) -> None:
    environ, calls, run = _host(tmp_path)
    assert msvc_env.main(["--arch", "x64"], environ, run) == 0
    assert calls[0][1:] == ["-latest", "-products", "*", "-requires", msvc_env.COMPONENTS["x64"], "-property",
                            "installationPath"]
    vcvarsall = tmp_path / "BuildTools" / "VC" / "Auxiliary" / "Build" / "vcvarsall.bat"
    assert calls[1][0].startswith(f'cmd.exe /d /s /c "call "{vcvarsall}" x64 && echo --anira-env-')
    assert calls[1][0].endswith(' && set"')
    # Changed or new, whatever the case of the name; the banner and the unchanged one are not.
    assert _env_file(tmp_path / "github_env") == {"Path": "C:\\VS\\bin;C:\\Windows", "INCLUDE": "C:\\VS\\include",
                                                  "VSCMD_VER": "17.14"}


@pytest.mark.parametrize(("target", "host", "argument"), [
    ("x64", "AMD64", "x64"), ("arm64", "ARM64", "arm64"), ("arm64", "AMD64", "amd64_arm64"),
    ("x64", "ARM64", "arm64_amd64")])
def test_the_vcvarsall_argument_for_host_and_target(target: str, host: str, argument: str) -> None:
    assert msvc_env.vcvars_argument(target, host) == argument


def test_a_host_without_the_cpp_tools_names_what_to_install(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    environ, _, run = _host(tmp_path, tools=False)
    assert msvc_env.main(["--arch", "arm64"], environ, run) == 1
    error = capsys.readouterr().err
    assert msvc_env.COMPONENTS["arm64"] in error and "Desktop development with C++" in error
    assert not (tmp_path / "github_env").exists()


def test_the_leg_jobs_set_it_up_with_the_legs_arch() -> None:
    step = gha.step("_legs.yml", "build", "MSVC developer environment")
    assert step.body["if"] == "steps.setup.outputs.msvc_arch != ''"
    assert step.body["env"]["MSVC_ARCH"] == "${{ steps.setup.outputs.msvc_arch }}"
    assert step.run.strip() == 'python -m backends.ci.msvc_env --arch "$MSVC_ARCH"'
