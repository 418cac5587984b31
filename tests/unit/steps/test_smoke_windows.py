"""The smoke projects as the Windows runners configure them: CMake for Windows with clang-cl
(MSVC's command line) on this host, against a package laid out like the leg's archive. Only
configure runs: what is checked is the build the project generates (build.ninja)."""
from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from backends.model.matrix import load_matrix
from backends.model.plan import Plan
from backends.model.recipes import plan_all
from backends.util.toolchain import find_tool

ROOT = Path(__file__).resolve().parents[3]
CLANG_TARGETS = {"x86_64": ("x86_64-pc-windows-msvc", "AMD64", "x64"), "arm64": ("aarch64-pc-windows-msvc", "ARM64", "arm64")}
# Visual Studio's debug CRT (not redistributable) and the Windows SDK's debug UCRT, per architecture.
DEBUG_CRT = ("vcruntime140d.dll", "vcruntime140_1d.dll", "msvcp140d.dll")
SDK_VERSION = "10.0.22621.0"

pytestmark = pytest.mark.skipif(
    not (shutil.which("cmake") and shutil.which("ninja") and find_tool("clang") and shutil.which("lld-link")
         and find_tool("llvm-lib")), reason="needs cmake, ninja, clang, lld-link and llvm-lib")


def windows_plans(config: str) -> list[Plan]:
    matrix = load_matrix(ROOT)
    legs = [leg for leg in matrix.legs if leg.os == "windows" and leg.config == config and not leg.aggregate]
    return [plan for plan in plan_all(matrix, legs) if plan.smoke is not None]


def toolchain_file(tmp: Path, arch: str) -> Path:
    target, processor, _ = CLANG_TARGETS[arch]
    clang_cl = tmp / "bin" / "clang-cl"  # the name selects clang's MSVC driver
    clang_cl.parent.mkdir(parents=True, exist_ok=True)
    if not clang_cl.exists():
        clang_cl.symlink_to(find_tool("clang"))
    path = tmp / f"windows-{arch}.cmake"
    path.write_text(f"""set(CMAKE_SYSTEM_NAME Windows)
set(CMAKE_SYSTEM_PROCESSOR {processor})
set(CMAKE_C_COMPILER {clang_cl})
set(CMAKE_CXX_COMPILER {clang_cl})
set(CMAKE_C_COMPILER_TARGET {target})
set(CMAKE_CXX_COMPILER_TARGET {target})
set(CMAKE_LINKER lld-link)
set(CMAKE_AR {find_tool("llvm-lib")})
set(CMAKE_MT llvm-mt)
set(CMAKE_RC_COMPILER llvm-rc)
set(CMAKE_TRY_COMPILE_TARGET_TYPE STATIC_LIBRARY)  # no Windows SDK libraries to link against here
""")
    return path


def msvc_environment(tmp: Path) -> dict[str, str]:
    """VCToolsRedistDir / WindowsSdkDir / WindowsSDKVersion as vcvarsall sets them (trailing
    separators included), over trees laid out like Visual Studio's and the Windows SDK's."""
    redist, sdk = tmp / "VC" / "Redist" / "MSVC" / "14.42.34433", tmp / "Windows Kits" / "10"
    for arch in ("x64", "arm64"):
        crt = redist / "debug_nonredist" / arch / "Microsoft.VC143.DebugCRT"
        crt.mkdir(parents=True)
        for name in DEBUG_CRT:
            (crt / name).write_text(arch)
        ucrt = sdk / "bin" / SDK_VERSION / arch / "ucrt"
        ucrt.mkdir(parents=True)
        (ucrt / "ucrtbased.dll").write_text(arch)
    return {"VCToolsRedistDir": f"{redist}/", "WindowsSdkDir": f"{sdk}/", "WindowsSDKVersion": f"{SDK_VERSION}/"}


def package(tmp: Path, plan: Plan) -> Path:
    """Every file the leg's contract requires, empty: enough for the project's find_* calls."""
    root = tmp / "package"
    for relative in plan.contract.required:
        (root / relative).parent.mkdir(parents=True, exist_ok=True)
        (root / relative).touch()
    return root


def configure(tmp: Path, plan: Plan, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    assert plan.smoke is not None
    defines = [f"-D{key}={value}" for key, value in plan.smoke.defines.items()]
    argv = ["cmake", "-S", str(ROOT / plan.smoke.project), "-B", str(tmp / "build"), "-G", "Ninja",
            f"-DCMAKE_TOOLCHAIN_FILE={toolchain_file(tmp, plan.leg.arch)}",
            f"-DCMAKE_PREFIX_PATH={package(tmp, plan)}", *defines]
    clean = {key: value for key, value in os.environ.items() if key not in ("VCToolsRedistDir", "WindowsSdkDir")}
    return subprocess.run(argv, env={**clean, **env}, capture_output=True, text=True)


def post_build_copies(build: Path) -> str:
    return "\n".join(line for line in (build / "build.ninja").read_text().splitlines() if "copy_if_different" in line)


@pytest.mark.parametrize("plan", windows_plans("debug"), ids=lambda plan: plan.leg.id)
def test_debug_smokes_get_the_debug_crt_of_their_architecture(tmp_path: Path, plan: Plan) -> None:
    env = msvc_environment(tmp_path)
    done = configure(tmp_path, plan, env)
    assert done.returncode == 0, done.stdout + done.stderr
    copies = post_build_copies(tmp_path / "build")
    arch = CLANG_TARGETS[plan.leg.arch][2]
    redist, sdk = env["VCToolsRedistDir"], env["WindowsSdkDir"]
    for name in DEBUG_CRT:
        assert f"{redist}debug_nonredist/{arch}/Microsoft.VC143.DebugCRT/{name}" in copies
    assert f"{sdk}bin/{SDK_VERSION}/{arch}/ucrt/ucrtbased.dll" in copies
    other = "arm64" if arch == "x64" else "x64"
    assert f"/{other}/" not in copies


@pytest.mark.parametrize("plan", windows_plans("debug")[:1], ids=lambda plan: plan.leg.id)
def test_a_debug_smoke_outside_the_msvc_environment_says_what_is_missing(tmp_path: Path, plan: Plan) -> None:
    done = configure(tmp_path, plan, {})
    assert done.returncode != 0
    assert "FAIL: a Windows Debug smoke needs the debug CRT" in done.stdout + done.stderr


@pytest.mark.parametrize("plan", [p for p in windows_plans("release") if p.leg.kind == "static"][:2],
                         ids=lambda plan: plan.leg.id)
def test_release_smokes_copy_no_crt(tmp_path: Path, plan: Plan) -> None:
    done = configure(tmp_path, plan, msvc_environment(tmp_path))
    assert done.returncode == 0, done.stdout + done.stderr
    assert "DebugCRT" not in post_build_copies(tmp_path / "build")
