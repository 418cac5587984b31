"""Setting up a Mac, a Windows or a Linux machine for chosen legs, on faked hosts.

`python -m backends.commands.host_setup` runs with `--host` naming the platform to decide for and a PATH
of fake programs (xcode-select, brew, vswhere, cmake, ...); tools/setup.sh runs for real with a
fake `uname` saying Darwin or Linux, fake package managers that log what they are asked, and a
virtual environment whose python logs pip and runs the rest with this interpreter. There is no
PowerShell here (no registry this project reaches serves one), so tools/setup.ps1 is held to the
command line it passes and to balanced blocks; its messages are the Python's, tested above it."""
from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from backends.commands import host_setup
from backends.probes import visual_studio
from backends.probes.host_needs import load_packages, packages_in
from test_setup_script import BASH, DEV_ONLY, MAIN, REAL_TOOLS, fake

ROOT = Path(__file__).resolve().parents[3]
PACKAGES = load_packages()
SETUP_PS1 = ROOT / "tools" / "setup.ps1"
PREBUILT_MAC = "executorch-macos-arm64-shared"  # repackaged: no upstream build, signed
XCFRAMEWORK = "onnxruntime-ios-gpu-xcframework"  # xcodebuild -create-xcframework
WINDOWS_PREBUILT = "onnxruntime-windows-arm64-shared"
BUILD_TOOLS = r"C:\BuildTools"
SDK = "Microsoft.VisualStudio.Component.Windows11SDK.26100"
needs_bash = pytest.mark.skipif(BASH is None, reason="needs bash")


def _bin(tmp_path: Path, *programs: str) -> Path:
    directory = tmp_path / "bin"
    directory.mkdir(parents=True, exist_ok=True)
    for program in programs:
        fake(directory, program, "exit 0\n")
    return directory


def _main(monkeypatch: pytest.MonkeyPatch, path: Path, *argv: str, **environ: str) -> int:
    monkeypatch.setenv("PATH", str(path))
    for name, value in environ.items():
        monkeypatch.setenv(name, value)
    return host_setup.main(["--root", str(ROOT), *argv])


MAC_TOOLS = ("cmake", "ninja", "nm", "otool", "objdump", "libtool")


def _mac(tmp_path: Path, developer_dir: str = "/Library/Developer/CommandLineTools") -> Path:
    path = _bin(tmp_path, *MAC_TOOLS)
    fake(path, "xcode-select", f'[ "$1" = -p ] && echo {developer_dir}\n' if developer_dir else "exit 2\n")
    fake(path, "xcodebuild", "echo 'Xcode 16.4'\n" if "Xcode.app" in developer_dir else "exit 1\n")
    return path


def test_a_mac_with_the_command_line_tools_is_ready_to_repackage(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    assert _main(monkeypatch, _mac(tmp_path), "--host", "macos-arm64", "--leg", PREBUILT_MAC) == 0
    out = capsys.readouterr().out
    assert f"{PREBUILT_MAC} on macos-arm64:" in out
    assert "ok       Xcode's command-line tools (" in out and "/Library/Developer/CommandLineTools" in out
    assert "optional signing: set DEV_ID_APP" in re.sub(" +", " ", out)
    assert out.rstrip().endswith(f"ready: scons {PREBUILT_MAC}")


def test_a_mac_without_ninja_is_told_brew_install(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    path = _mac(tmp_path)
    (path / "ninja").unlink()
    assert _main(monkeypatch, path, "--host", "macos-arm64", "--leg", PREBUILT_MAC) == 1
    assert re.search(r"missing +ninja \(the smoke builds its consumer\): brew install ninja", capsys.readouterr().out)
    assert _main(monkeypatch, path, "--host", "macos-arm64", "--leg", PREBUILT_MAC, "--missing", "brew") == 0
    assert capsys.readouterr().out.split() == ["ninja"]


def test_a_mac_without_them_is_told_xcode_select_install(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    assert _main(monkeypatch, _mac(tmp_path, developer_dir=""), "--host", "macos-arm64", "--leg", PREBUILT_MAC) == 1
    out = capsys.readouterr().out
    assert re.search(r"missing +Xcode's command-line tools .*: xcode-select --install", out)
    assert "1 missing: install it as shown, then run this again" in out


def test_an_xcframework_needs_xcode_itself(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    path = _mac(tmp_path)
    assert _main(monkeypatch, path, "--host", "macos-arm64", "--leg", XCFRAMEWORK) == 1
    out = capsys.readouterr().out
    assert re.search(r"missing +Xcode \(the build runs it\): install Xcode .*the command-line tools are selected", out)
    assert re.search(r"ok +Xcode's command-line tools \(the build compiles; its sources are git", out)  # git too
    assert _main(monkeypatch, path, "--host", "macos-arm64", "--leg", XCFRAMEWORK, "--missing", "brew") == 0
    assert capsys.readouterr().out.split() == []  # Xcode is no formula: a person installs it
    selected = _mac(tmp_path / "xcode", "/Applications/Xcode.app/Contents/Developer")
    _main(monkeypatch, selected, "--host", "macos-arm64", "--leg", XCFRAMEWORK)
    assert re.search(r"ok +Xcode \(.*\): Xcode 16.4 \(/Applications/Xcode.app", capsys.readouterr().out)


def _vswhere(path: Path, *components: str) -> None:
    instances = [{"installationPath": BUILD_TOOLS, "installationVersion": "17.14.3", "isComplete": True,
                  "displayName": "Visual Studio Build Tools 2022",
                  "packages": [{"id": component} for component in components]}] if components else []
    fake(path, "vswhere", f"printf '%s\\n' '{json.dumps(instances)}'\n")  # a builtin: PATH has no cat


def _windows(tmp_path: Path, *components: str) -> tuple[Path, dict[str, str]]:
    path = _bin(tmp_path, "cmake", "ninja", "llvm-nm", "llvm-readobj", "llvm-objdump")
    _vswhere(path, *components)
    kits = tmp_path / "pf86" / "Windows Kits" / "10" / "Lib" / "10.0.26100.0" / "um" / "arm64"
    kits.mkdir(parents=True)
    (kits / "kernel32.lib").write_bytes(b"")
    return path, {"ProgramFiles(x86)": str(tmp_path / "pf86")}


def test_windows_build_tools_found_with_vswhere_and_how_to_enter_them(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    path, environ = _windows(tmp_path, visual_studio.TOOLS_COMPONENTS["arm64"], SDK)
    assert _main(monkeypatch, path, "--host", "windows-arm64", "--leg", WINDOWS_PREBUILT, **environ) == 0
    out = capsys.readouterr().out
    assert re.search(r"to do +MSVC for arm64 \(the smoke builds its consumer\): Visual Studio Build Tools 2022 "
                     r"17\.14\.3 \(C:\\BuildTools\); then, in the shell you build from: Import-Module", out)
    assert '"-arch=arm64 -host_arch=arm64"' in out
    assert re.search(r"ok +the Windows SDK for arm64 \(kernel32\.lib\)", out)
    assert re.search(rf"ready: Import-Module .*; then scons {WINDOWS_PREBUILT}$", out.rstrip())


def test_windows_without_the_arm64_compiler_is_told_what_to_add(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    path, environ = _windows(tmp_path, visual_studio.TOOLS_COMPONENTS["x64"], SDK)
    assert _main(monkeypatch, path, "--host", "windows-arm64", "--leg", WINDOWS_PREBUILT, **environ) == 1
    out = capsys.readouterr().out
    assert re.search(r'missing +MSVC for arm64 .*: & ".*setup.exe" modify --installPath "C:\\BuildTools" '
                     rf"--add {visual_studio.TOOLS_COMPONENTS['arm64']} --passive", out)
    none, environ = _windows(tmp_path / "none")
    _main(monkeypatch, none, "--host", "windows-arm64", "--leg", WINDOWS_PREBUILT, **environ)
    assert "winget install --id Microsoft.VisualStudio.2022.BuildTools -e" in capsys.readouterr().out


def test_a_leg_of_another_host_and_bad_input(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    path = _bin(tmp_path)
    assert _main(monkeypatch, path, "--host", "linux-x86_64", "--leg", XCFRAMEWORK) == 1
    assert "it builds on macos-15 (macos-arm64), not on linux-x86_64" in capsys.readouterr().out
    assert _main(monkeypatch, path, "--leg", "onnxruntime-macos-arm64-sharde") == 2
    assert ("unknown leg 'onnxruntime-macos-arm64-sharde' (did you mean onnxruntime-macos-arm64-shared?)"
            in capsys.readouterr().err)
    assert _main(monkeypatch, path, "--host", "beos-x86_64", "--leg", XCFRAMEWORK) == 2
    assert "--host beos-x86_64: not a platform" in capsys.readouterr().err
    assert _main(monkeypatch, path, "--host", "macos-aarch64", "--leg", "onnxruntime-macos-arm64-shared") == 1
    assert "onnxruntime-macos-arm64-shared on macos-arm64:" in capsys.readouterr().out  # aliases as scons takes them


# -- tools/setup.sh on a faked Mac and a faked Linux -----------------------------------------

class Host:
    """A PATH of fakes for tools/setup.sh: `uname`, the package tools, a venv whose python logs
    pip and hands everything else to this interpreter (so the Python that decides is real)."""

    def __init__(self, tmp_path: Path, system: str, machine: str, *, clt: bool = True,
                 formulae: tuple[str, ...] = (), debs: tuple[str, ...] = MAIN) -> None:
        self.bin = tmp_path / "bin"
        self.bin.mkdir(parents=True)
        self.log = tmp_path / "calls.log"
        for tool in REAL_TOOLS:
            (self.bin / tool).symlink_to(shutil.which(tool))  # type: ignore[arg-type]
        fake(self.bin, "uname", f'[ "$1" = -m ] && echo {machine} || echo {system}\n')
        fake(self.bin, "id", "echo 0\n")
        for program in ("nm", "otool", "objdump", "libtool") if system == "Darwin" else ():
            fake(self.bin, program, "exit 0\n")  # Xcode's, which read Mach-O as LLVM's do
        fake(self.bin, "xcode-select", "echo /Library/Developer/CommandLineTools\n" if clt else "exit 2\n")
        listed = " ".join(formulae)
        fake(self.bin, "brew", f'echo "brew $*" >> {self.log}\n'
                               f'if [ "$1" = list ]; then for f in {listed}; do [ "$f" = "$3" ] && exit 0; done; '
                               'exit 1; fi\n'
                               'if [ "$1" = --prefix ]; then echo /opt/homebrew/opt/$2; fi\nexit 0\n')
        packages = " ".join(debs)
        fake(self.bin, "dpkg-query", f'for p in {packages}; do [ "$p" = "$3" ] && printf "install ok installed" '
                                     '&& exit 0; done\nexit 1\n')
        fake(self.bin, "apt-get", f'echo "apt-get $*" >> {self.log}\n')
        self.venv = tmp_path / "venv"
        (self.venv / "bin").mkdir(parents=True)
        fake(self.venv / "bin", "python", f'if [ "$1 $2" = "-m pip" ]; then echo "pip $*" >> {self.log}; exit 0; fi\n'
                                          f'exec {sys.executable} "$@"\n')

    def run(self, *args: str) -> subprocess.CompletedProcess[str]:
        env = {"PATH": str(self.bin), "VIRTUAL_ENV": str(self.venv), "HOME": str(self.venv)}
        assert BASH is not None
        return subprocess.run([BASH, str(ROOT / "tools" / "setup.sh"), *args], env=env, capture_output=True,
                              text=True, timeout=120)

    def calls(self, prefix: str) -> list[str]:
        lines = self.log.read_text().splitlines() if self.log.exists() else []
        return [line for line in lines if line.startswith(prefix)]


@needs_bash
def test_setup_sh_on_a_mac_without_the_command_line_tools_stops_first(tmp_path: Path) -> None:
    mac = Host(tmp_path, "Darwin", "arm64", clt=False)
    done = mac.run()
    assert done.returncode == 1
    assert "Xcode's command-line tools are missing" in done.stderr and "xcode-select --install" in done.stderr
    assert mac.calls("brew") == [] and mac.calls("pip") == []


@needs_bash
def test_setup_sh_on_a_mac_installs_the_missing_formulae_then_the_legs(tmp_path: Path) -> None:
    mac = Host(tmp_path, "Darwin", "arm64", formulae=("cmake",))
    done = mac.run("--leg", "litert-macos-arm64-static")
    assert "brew install ninja python@3.12" in mac.calls("brew")  # the main formulae brew does not list
    assert mac.calls("pip")[0] == "pip -m pip install -q --disable-pip-version-check -r requirements.txt"
    # then what the leg needs that Homebrew has (none of the fakes are on PATH), and its report
    leg_install = [call for call in mac.calls("brew install") if "bazelisk" in call]
    assert leg_install and "llvm" not in leg_install[0]  # a Mac's own nm and otool read Mach-O
    assert "litert-macos-arm64-static on macos-arm64:" in done.stdout
    assert done.returncode == 1  # the fakes install nothing: the report still names what is missing


@needs_bash
def test_setup_sh_check_on_a_mac_changes_nothing(tmp_path: Path) -> None:
    mac = Host(tmp_path, "Darwin", "arm64")
    done = mac.run("--check", "--leg", PREBUILT_MAC)
    assert "setup --check: missing Homebrew formulae: cmake ninja python@3.12" in done.stdout
    assert f"{PREBUILT_MAC} on macos-arm64:" in done.stdout
    assert mac.calls("brew install") == []
    assert mac.calls("pip") == []


@needs_bash
def test_setup_sh_on_linux_installs_a_legs_apt_packages_in_a_second_round(tmp_path: Path) -> None:
    linux = Host(tmp_path, "Linux", "aarch64")
    done = linux.run("--leg", "libtorch-linux-aarch64-shared")
    installs = linux.calls("apt-get -o DPkg::Lock::Timeout=300 install")
    assert len(installs) == 1, done.stderr  # the main packages are there: only the leg's
    assert {"libopenblas-dev", "patchelf"} <= set(installs[0].split())
    assert "libtorch-linux-aarch64-shared on linux-aarch64:" in done.stdout


@needs_bash
def test_setup_sh_refuses_an_unknown_leg_before_installing(tmp_path: Path) -> None:
    linux = Host(tmp_path, "Linux", "x86_64", debs=())
    done = linux.run("--leg", "libtorch-linux-x86_64-sharde")
    assert done.returncode == 2 and "unknown leg 'libtorch-linux-x86_64-sharde'" in done.stderr
    assert linux.calls("apt-get") == []


def test_the_main_apt_set_is_what_setup_sh_installs() -> None:
    assert packages_in("apt", "main", PACKAGES) == MAIN
    assert packages_in("apt", "dev", PACKAGES) == DEV_ONLY


def test_the_scripts_hold_no_package_lists() -> None:
    """tools/setup.sh and tools/setup.ps1 read host_packages.txt or ask Python: no line of
    theirs names two of its packages, and setup.ps1 names no Visual Studio component."""
    names = {p.name for p in PACKAGES if p.manager != "pip"}
    for script in ("tools/setup.sh", "tools/setup.ps1"):
        for number, line in enumerate((ROOT / script).read_text().splitlines(), 1):
            named = names & set(re.findall(r"[\w@.+-]+", line))
            assert len(named) < 2, f"{script}:{number} names {sorted(named)}"
    assert "Microsoft.VisualStudio.Component" not in (ROOT / "tools/setup.ps1").read_text()


# -- tools/setup.ps1, without PowerShell ----------------------------------------------------------

def _code(script: str) -> str:
    """The script without comments and string contents (here-strings are not used)."""
    script = re.sub(r"<#.*?#>", "", script, flags=re.S)
    script = re.sub(r"'[^']*'|\"(?:`.|[^\"`])*\"", "''", script)
    return re.sub(r"#.*", "", script)


def test_setup_ps1_passes_only_options_host_setup_has() -> None:
    calls = [line for line in SETUP_PS1.read_text().splitlines() if "hostSetup" in line]
    used = {option for line in calls for option in re.findall(r"(?<![\w-])--[a-z][a-z-]*", line)}
    parser_options = {option for action in host_setup.parser()._actions for option in action.option_strings}
    assert {"--leg", "--missing", "--vswhere"} <= used <= parser_options
    assert any("'backends.commands.host_setup'" in line for line in calls) and any("--missing pip" in line for line in calls)


def test_setup_ps1_blocks_balance() -> None:
    code = _code(SETUP_PS1.read_text())
    for opening, closing in ("{}", "()", "[]"):
        depth = 0
        for char in code:
            depth += (char == opening) - (char == closing)
            assert depth >= 0, f"{closing} before its {opening}"
        assert depth == 0, f"unbalanced {opening}{closing}"


@pytest.mark.skipif(shutil.which("pwsh") is None, reason="PowerShell (pwsh) is not installed")
def test_setup_ps1_parses() -> None:  # pragma: no cover - runs where pwsh exists
    command = ("$e = $null; [System.Management.Automation.Language.Parser]::ParseFile("
               f"'{SETUP_PS1}', [ref]$null, [ref]$e) | Out-Null; if ($e) {{ $e; exit 1 }}")
    assert subprocess.run(["pwsh", "-NoProfile", "-Command", command], timeout=60).returncode == 0


def test_the_platforms_uname_names_are_hosts_the_python_takes() -> None:
    for uname in ("macos-arm64", "macos-x86_64", "linux-x86_64", "linux-aarch64"):
        assert host_setup._host(uname).platform == uname
