"""What a leg needs from a host, decided from its plan, and what a faked host lacks.

Hosts here are made, not detected: `Facts` with a PATH of fake programs, a `run` that answers
as xcode-select, xcodebuild, vswhere, brew, dpkg-query or a probe would, and a set of Python
modules. Expected needs are derived from the plans and host_packages.txt, so a new leg or
package is covered without editing this file."""
from __future__ import annotations

import json
import re
from pathlib import Path, PureWindowsPath
from typing import Callable, Sequence

import pytest

from backends.model.matrix import load_matrix
from backends.model.recipes import plan_all
from backends.model.runner_needs import leg_setup
from backends.probes import host_checks, host_needs, visual_studio
from backends.probes.host import Host
from backends.probes.host_checks import Facts, check
from backends.probes.host_needs import Need, leg_needs, load_packages, needs_here, packages_in

ROOT = Path(__file__).resolve().parents[3]
PACKAGES = load_packages()


@pytest.fixture(scope="module")
def matrix():  # type: ignore[no-untyped-def]
    return load_matrix(ROOT)


@pytest.fixture(scope="module")
def plans(matrix):  # type: ignore[no-untyped-def]
    return {plan.leg.id: plan for plan in plan_all(matrix)}


def _runner_host(leg) -> Host:  # type: ignore[no-untyped-def]
    return Host(*leg.runner_host)


def _kinds(needs: Sequence[Need], kind: str) -> list[Need]:
    return [need for need in needs if need.kind == kind]


class FakeHost:
    """A host of `os`/`arch`: `programs` on a PATH of its own, answers for `run` by program."""

    def __init__(self, tmp_path: Path, os_name: str, arch: str, programs: Sequence[str] = (),
                 answers: dict[str, Callable[[Sequence[str]], tuple[int, str]]] | None = None,
                 modules: Sequence[str] = (), environ: dict[str, str] | None = None) -> None:
        self.bin = tmp_path / "bin"
        self.bin.mkdir(parents=True, exist_ok=True)
        for program in programs:
            self.add(program)
        self.answers = answers or {}
        self.calls: list[list[str]] = []
        self.facts = Facts(os_name, arch, {"PATH": str(self.bin), **(environ or {})}, run=self.run,
                           module_found=lambda name: name in modules)

    def add(self, program: str, where: Path | None = None) -> Path:
        path = (where or self.bin) / program
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("#!/bin/sh\n")
        path.chmod(0o755)
        return path

    def run(self, argv: Sequence[str]) -> tuple[int, str]:
        self.calls.append(list(argv))
        answer = self.answers.get(Path(argv[0]).name)
        return answer(argv) if answer else (127, f"{argv[0]}: not found")


# -- the needs, from the plans ---------------------------------------------------------------

def test_every_leg_on_its_runner_needs_what_its_plan_runs(matrix, plans) -> None:  # type: ignore[no-untyped-def]
    for leg_id, plan in plans.items():
        host = _runner_host(plan.leg)
        needs = needs_here(plan, matrix, host)
        kinds = {need.kind for need in needs}
        programs = {command.argv[0] for command in (*plan.build, *plan.fixups) if command.argv}
        assert ("xcode" in kinds) == ("xcodebuild" in programs or host.run_mode(plan.leg, plan.smoke) == "simulator"), \
            leg_id
        git = ("xcode-tools", "") if host.os == "macos" else ("program", "git")  # a Mac's git is Xcode's
        assert (git in {n.key for n in needs}) >= any(d.kind == "git" for d in plan.downloads), leg_id
        assert ("ndk" in kinds) == (plan.leg.toolchain == "android"), leg_id
        if host.os == "windows" and plan.leg.source == "build":
            assert ("msvc", plan.leg.msvc_arch) in {n.key for n in needs}, leg_id
            sdk = {n.subject: n.files for n in _kinds(needs, "windows-sdk")}
            assert "kernel32.lib" in sdk[plan.leg.msvc_arch], leg_id
        if host.os == "macos" and (plan.leg.source == "build" or plan.smoke):
            assert "xcode-tools" in kinds, leg_id
        if host.os == "linux" and plan.leg.source == "build":
            assert ("program", "c++") in {n.key for n in needs}, leg_id


def test_directml_legs_need_the_sdk_libraries_their_smoke_links(matrix, plans) -> None:  # type: ignore[no-untyped-def]
    dml = [plan for plan in plans.values() if "dml" in plan.leg.accelerator]
    assert dml
    for plan in dml:
        sdk = _kinds(needs_here(plan, matrix, _runner_host(plan.leg)), "windows-sdk")
        assert {"d3d12.lib", "dxgi.lib"} <= set(sdk[0].files), plan.leg.id
    cpu = plans["onnxruntime-windows-arm64-static"]
    assert "d3d12.lib" not in _kinds(needs_here(cpu, matrix, _runner_host(cpu.leg)), "windows-sdk")[0].files


def test_ci_setup_answers_become_needs(matrix, plans) -> None:  # type: ignore[no-untyped-def]
    for plan in plans.values():
        setup = leg_setup(plan, matrix.engines[plan.leg.engine].pins)
        needs = {n.key for n in needs_here(plan, matrix, _runner_host(plan.leg))}
        assert {("probe", probe) for probe in setup.probes} <= needs, plan.leg.id
        if setup.python_build_deps:
            assert {("python", name) for name in packages_in("pip", "build", PACKAGES)} <= needs
        for package in setup.apt:  # a package that brings a program is checked by the program
            programs = [p.programs for p in PACKAGES if p.manager == "apt" and p.name == package]
            assert (("program", programs[0][0]) if programs and programs[0] else ("apt", package)) in needs


def test_a_prebuilt_windows_leg_on_linux_needs_no_msvc(matrix, plans) -> None:  # type: ignore[no-untyped-def]
    plan = plans["onnxruntime-windows-x86_64-shared"]
    needs = leg_needs(plan, leg_setup(plan, {}), "linux", "x64", "wine")
    assert not _kinds(needs, "msvc") and not _kinds(needs, "windows-sdk")
    assert {"llvm-readobj", "llvm-objdump"} <= {n.subject for n in _kinds(needs, "program")}  # verify reads PE


def test_verify_tools_cover_what_inspect_runs() -> None:
    source = (ROOT / "site_scons/backends/binfmt/inspect.py").read_text()
    ran = set(re.findall(r'_tool_output\("([^"]+)"', source))
    assert ran and ran <= {tool for tools in host_needs.INSPECT_TOOLS.values() for tool in tools}


# -- the data -------------------------------------------------------------------------------

def test_the_build_packages_are_what_ci_installs() -> None:
    workflow = (ROOT / ".github/workflows/_legs.yml").read_text()
    line = re.search(r"python -m pip install --upgrade ([a-z ]+)\n", workflow)
    assert line and tuple(line.group(1).split()) == packages_in("pip", "build", PACKAGES)


@pytest.mark.parametrize(("row", "error"), [
    ("apt main cmake", "3 columns; a row is: manager sets package programs"),
    ("yum main cmake cmake", "unknown yum; managers: apt, brew"),
    ("apt always cmake cmake", "unknown always"),
])
def test_a_bad_row_is_refused_naming_its_line(tmp_path: Path, row: str, error: str) -> None:
    data = tmp_path / "host_packages.txt"
    data.write_text(f"# comment\n\n{row}\n")
    with pytest.raises(host_needs.PackagesError, match=f"host_packages.txt:3: {re.escape(error)}"):
        load_packages(data)


# -- checks on a faked host ------------------------------------------------------------------

@pytest.mark.parametrize(("os_name", "remedy"), [
    ("linux", "sudo apt-get install ninja-build"),
    ("macos", "brew install ninja"),
    ("windows", "winget install --id Ninja-build.Ninja -e"),
])
def test_a_missing_program_names_its_hosts_package(tmp_path: Path, os_name: str, remedy: str) -> None:
    host = FakeHost(tmp_path, os_name, "arm64")
    missing = check(Need("program", "ninja", "the smoke"), host.facts)
    assert missing.missing and missing.remedy == remedy
    assert missing.installable == (os_name != "windows")  # winget is a person's to run
    host.add("ninja")
    assert check(Need("program", "ninja", "the smoke"), host.facts).found == str(host.bin / "ninja")


def test_llvm_tools_are_found_under_debian_and_xcode_names(tmp_path: Path) -> None:
    linux = FakeHost(tmp_path / "linux", "linux", "x86_64", ["llvm-otool-14"])
    assert check(Need("program", "llvm-otool", "verify"), linux.facts).found == str(linux.bin / "llvm-otool-14")
    mac = FakeHost(tmp_path / "mac", "macos", "arm64", ["otool"])
    assert check(Need("program", "llvm-otool", "verify"), mac.facts).found == str(mac.bin / "otool")
    assert check(Need("program", "llvm-readobj", "verify"), mac.facts).missing  # Xcode has none


def test_homebrews_unlinked_llvm_is_named_by_its_path(tmp_path: Path) -> None:
    cellar = tmp_path / "opt" / "llvm"
    host = FakeHost(tmp_path, "macos", "arm64", answers={"brew": lambda argv: (0, f"{cellar}\n")})
    before = check(Need("program", "llvm-readobj", "verify"), host.facts)
    assert before.remedy == "brew install llvm" and before.installable
    host.add("llvm-readobj", cellar / "bin")
    after = check(Need("program", "llvm-readobj", "verify"), host.facts)
    assert after.missing and after.remedy.startswith(f"put {cellar / 'bin'} on PATH") and not after.installable


def _xcode_select(path: str | None) -> Callable[[Sequence[str]], tuple[int, str]]:
    return lambda argv: (0, f"{path}\n") if path else (2, "xcode-select: error: unable to get active developer dir")


def test_xcode_command_line_tools(tmp_path: Path) -> None:
    need = Need("xcode-tools", "", "the build compiles")
    without = FakeHost(tmp_path / "a", "macos", "arm64", answers={"xcode-select": _xcode_select(None)})
    assert check(need, without.facts).missing and "xcode-select --install" in check(need, without.facts).remedy
    with_tools = FakeHost(tmp_path / "b", "macos", "arm64",
                          answers={"xcode-select": _xcode_select("/Library/Developer/CommandLineTools")})
    assert check(need, with_tools.facts).found == "/Library/Developer/CommandLineTools"


def test_xcodebuild_needs_xcode_selected_not_the_command_line_tools(tmp_path: Path) -> None:
    need = Need("xcode", "", "the build runs it")
    tools_only = FakeHost(tmp_path / "a", "macos", "arm64",
                          answers={"xcode-select": _xcode_select("/Library/Developer/CommandLineTools"),
                                   "xcodebuild": lambda argv: (0, "Xcode 16.4\n")})
    finding = check(need, tools_only.facts)
    assert finding.missing and "sudo xcode-select -s /Applications/Xcode.app/Contents/Developer" in finding.remedy
    assert "the command-line tools are selected" in finding.remedy
    xcode = FakeHost(tmp_path / "b", "macos", "arm64",
                     answers={"xcode-select": _xcode_select("/Applications/Xcode.app/Contents/Developer"),
                              "xcodebuild": lambda argv: (0, "Xcode 16.4\nBuild version 16F6\n")})
    assert check(need, xcode.facts).found == "Xcode 16.4 (/Applications/Xcode.app/Contents/Developer)"
    broken = FakeHost(tmp_path / "c", "macos", "arm64",
                      answers={"xcode-select": _xcode_select("/Applications/Xcode.app/Contents/Developer"),
                               "xcodebuild": lambda argv: (1, "run xcodebuild -license")})
    assert check(need, broken.facts).missing


# -- Visual Studio, through vswhere ----------------------------------------------------------

BUILD_TOOLS = r"C:\Program Files (x86)\Microsoft Visual Studio\2022\BuildTools"


def _vswhere(*instances: dict[str, object]) -> Callable[[Sequence[str]], tuple[int, str]]:
    def answer(argv: Sequence[str]) -> tuple[int, str]:
        assert list(argv[1:]) == list(visual_studio.VSWHERE_ARGS)
        return 0, json.dumps(list(instances))
    return answer


def _instance(*components: str, version: str = "17.14.36301.6") -> dict[str, object]:
    return {"instanceId": "b5e1", "installationPath": BUILD_TOOLS, "installationVersion": version,
            "displayName": "Visual Studio Build Tools 2022", "isComplete": True,
            "packages": [{"id": c, "version": "17.14", "type": "Component"} for c in components]}


ARM64_TOOLS = visual_studio.TOOLS_COMPONENTS["arm64"]
X64_TOOLS = visual_studio.TOOLS_COMPONENTS["x64"]
SDK = "Microsoft.VisualStudio.Component.Windows11SDK.22621"


def _windows(tmp_path: Path, *instances: dict[str, object], cl_target: str = "") -> FakeHost:
    host = FakeHost(tmp_path, "windows", "arm64", ["vswhere"], answers={"vswhere": _vswhere(*instances)},
                    environ={"ProgramFiles(x86)": str(tmp_path / "pf86")})
    if cl_target:
        (host.bin / "cl").unlink(missing_ok=True)
        host.facts.environ = {**host.facts.environ,  # type: ignore[misc]
                              "PATH": f"{host.add('cl', tmp_path / 'msvc' / 'bin' / 'Hostarm64' / cl_target).parent}:"
                                      f"{host.bin}"}
    return host


def test_msvc_entered_for_the_legs_target(tmp_path: Path) -> None:
    need = Need("msvc", "arm64", "the build compiles")
    entered = _windows(tmp_path / "a", cl_target="arm64")
    assert check(need, entered.facts).found.endswith("Hostarm64/arm64/cl")  # type: ignore[union-attr]
    wrong = _windows(tmp_path / "b", _instance(ARM64_TOOLS, SDK), cl_target="x64")
    finding = check(need, wrong.facts)
    assert finding.missing and finding.remedy.startswith("the MSVC environment entered is for x64; enter the arm64 one")
    assert '-DevCmdArguments "-arch=arm64 -host_arch=arm64"' in finding.remedy


def test_setting_up_finds_build_tools_with_vswhere_and_says_how_to_enter_them(tmp_path: Path) -> None:
    need = Need("msvc", "arm64", "the build compiles")
    host = _windows(tmp_path, _instance(X64_TOOLS, SDK, version="17.9.1"), _instance(ARM64_TOOLS, SDK))
    finding = check(need, host.facts, setting_up=True)
    assert finding.found == f"Visual Studio Build Tools 2022 17.14.36301.6 ({BUILD_TOOLS})"
    assert finding.next == (f'Import-Module "{BUILD_TOOLS}\\Common7\\Tools\\Microsoft.VisualStudio.DevShell.dll"; '
                            f'Enter-VsDevShell -VsInstallPath "{BUILD_TOOLS}" -SkipAutomaticLocation '
                            '-DevCmdArguments "-arch=arm64 -host_arch=arm64"')
    assert check(need, host.facts).missing  # a build needs the environment entered, not just installed


def test_an_instance_without_the_arm64_compiler_is_told_the_component_to_add(tmp_path: Path) -> None:
    host = _windows(tmp_path, _instance(X64_TOOLS, SDK))
    finding = check(Need("msvc", "arm64", "the build compiles"), host.facts, setting_up=True)
    assert finding.missing
    assert finding.remedy == (f'& "{PureWindowsPath(host.bin, "setup.exe")}" modify --installPath "{BUILD_TOOLS}" '
                              f"--add {ARM64_TOOLS} --passive")


def test_no_visual_studio_is_told_the_build_tools_install(tmp_path: Path) -> None:
    host = _windows(tmp_path)
    finding = check(Need("msvc", "x64", "the build compiles"), host.facts, setting_up=True)
    assert finding.missing and finding.remedy.startswith("winget install --id Microsoft.VisualStudio.2022.BuildTools")
    for component in (visual_studio.WORKLOAD, X64_TOOLS, visual_studio.SDK_RECOMMENDED,
                      visual_studio.CMAKE_COMPONENT):
        assert f"--add {component}" in finding.remedy


def test_the_windows_sdk_libraries_for_the_target(tmp_path: Path) -> None:
    need = Need("windows-sdk", "arm64", "the smoke links d3d12.lib", ("kernel32.lib", "d3d12.lib"))
    host = _windows(tmp_path)
    lib = tmp_path / "pf86" / "Windows Kits" / "10" / "Lib"
    host.add("kernel32.lib", lib / "10.0.26100.0" / "um" / "arm64")
    host.add("d3d12.lib", lib / "10.0.26100.0" / "um" / "x64")  # another target's
    assert check(need, host.facts).missing
    host.add("d3d12.lib", lib / "10.0.26100.0" / "um" / "arm64")
    assert check(need, host.facts).found == str(lib / "10.0.26100.0" / "um" / "arm64")
    entered = FakeHost(tmp_path / "entered", "windows", "arm64",
                       environ={"WindowsSdkDir": str(tmp_path / "sdk") + "\\", "WindowsSDKVersion": "10.0.22621.0\\"})
    assert check(need, entered.facts).missing  # the environment's SDK is the one a build uses
    for name in need.files:
        entered.add(name, tmp_path / "sdk" / "Lib" / "10.0.22621.0" / "um" / "arm64")
    assert not check(need, entered.facts).missing


# -- the other kinds ---------------------------------------------------------------------------

def test_ndk_emsdk_apt_python_and_probe(tmp_path: Path) -> None:
    ndk = tmp_path / "ndk"
    host = FakeHost(tmp_path, "linux", "x86_64", modules=("numpy",), environ={"ANDROID_NDK_HOME": str(ndk)},
                    answers={"dpkg-query": lambda argv: (0, "install ok installed") if argv[-1] == "libopenblas-dev"
                             else (1, ""),
                             "python": lambda argv: (1, "glslc not found on PATH\nERROR: ...")})
    assert check(Need("ndk", "", "toolchain android"), host.facts).missing  # set, but no directory
    ndk.mkdir()
    assert check(Need("ndk", "", "toolchain android"), host.facts).found == f"$ANDROID_NDK_HOME={ndk}"
    emsdk = check(Need("emsdk", "4.0.23", "toolchain emscripten"), host.facts)
    assert emsdk.missing and "./emsdk install 4.0.23" in emsdk.remedy
    host.add("emcc")
    assert not check(Need("emsdk", "4.0.23", "toolchain emscripten"), host.facts).missing
    assert not check(Need("apt", "libopenblas-dev", "a fixup"), host.facts).missing
    zlib = check(Need("apt", "zlib1g-dev", "a fixup"), host.facts)
    assert zlib.missing and (zlib.manager, zlib.package, zlib.installable) == ("apt", "zlib1g-dev", True)
    assert not check(Need("python", "numpy", "the build"), host.facts).missing
    wheel = check(Need("python", "wheel", "the build"), host.facts, python="/venv/bin/python")
    assert wheel.remedy == "/venv/bin/python -m pip install wheel" and wheel.installable
    probe = check(Need("probe", "glslc", "the build"), host.facts, python="python")
    assert probe.missing and probe.remedy.startswith("glslc not found on PATH; `PYTHONPATH=site_scons python -m "
                                                     "backends.probes.glslc --install`")
    passing = FakeHost(tmp_path / "ok", "linux", "x86_64", answers={"python": lambda argv: (0, "glslc OK: shaderc")})
    assert check(Need("probe", "glslc", "the build"), passing.facts, python="python").found == "glslc OK: shaderc"


# -- the build's one line --------------------------------------------------------------------

def test_the_shortfall_is_one_line_with_one_command_per_manager(tmp_path: Path) -> None:
    host = FakeHost(tmp_path, "linux", "x86_64", ["cmake"])
    needs = {"a-leg": [Need("program", "cmake", "x"), Need("program", "ninja", "x"), Need("program", "llvm-nm", "x")],
             "b-leg": [Need("program", "llvm-readobj", "x"), Need("ndk", "", "toolchain android")],
             "c-leg": [Need("program", "cmake", "x")]}
    lacking = host_checks.shortfall(needs, host.facts)
    assert lacking is not None and lacking.legs == ("a-leg", "b-leg")
    message = lacking.message("linux")
    assert "\n" not in message
    assert message.startswith("a-leg, b-leg cannot be built on this host, which lacks ninja, llvm-nm, llvm-readobj "
                              "(`sudo apt-get install ninja-build llvm`); the Android NDK (install the Android NDK")
    assert message.endswith("`bash tools/setup.sh --leg a-leg` installs what it can and names the rest")
    assert "tools\\setup.ps1 -Leg a-leg" in lacking.message("windows")
    windows = FakeHost(tmp_path / "windows", "windows", "x86_64", environ={"ProgramFiles(x86)": str(tmp_path)})
    sdk = Need("windows-sdk", "x64", "x", ("kernel32.lib",))
    both = host_checks.shortfall({"w-leg": [Need("msvc", "x64", "x"), sdk]}, windows.facts)
    assert both is not None and both.message("windows").count("winget install") == 1  # one command for both
    for program in ("ninja", "llvm-nm", "llvm-readobj"):
        host.add(program)
    (tmp_path / "ndk").mkdir()
    host.facts.environ = {**host.facts.environ, "ANDROID_NDK_HOME": str(tmp_path / "ndk")}  # type: ignore[misc]
    assert host_checks.shortfall(needs, host.facts) is None
