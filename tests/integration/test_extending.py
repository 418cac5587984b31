"""docs/extending.md followed on a copy of the project: a made-up platform for one engine
(linux-riscv64 for ExecuTorch) and a made-up accelerator variant for another (OpenVINO as
ONNX Runtime's Linux x86_64 -npu), each planned by `scons plan=1` and set up by CI's
`backends.ci setup`, touching data and engine files only: no file under site_scons/.

Each exercise edits exactly the files its checklist names, and the leg it adds is unknown to
the copy before the edit, so what plans it is the edit."""
from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Callable

import pytest

REPO = Path(__file__).resolve().parents[2]
COPIED = ("SConstruct", "site_scons", "engines", "variants", "smoke")
GUIDE = REPO / "docs" / "extending.md"
PLATFORM_LEG = "executorch-linux-riscv64-static"
VARIANT_LEG = "onnxruntime-linux-x86_64-npu-static"

PLATFORM_ROW = '''
[platform.linux-riscv64]
os = "linux"
arch = "riscv64"
aliases = ["linux-rv64"]
machines = ["riscv64"]
debian_arch = "riscv64"
cross_triple = "riscv64-linux-gnu"
sysroot_packages = ["g++-riscv64-linux-gnu"]

[platform.linux-riscv64.emulated]
mode = "qemu"
hosts = ["linux-x86_64"]
tools = ["riscv64-linux-gnu-gcc", "riscv64-linux-gnu-g++", "qemu-riscv64"]
needs = ["qemu-riscv64", "riscv64-linux-gnu-g++"]
toolchain_file = "riscv64-linux-gnu.toolchain.cmake"
hint = "or qemu-user and g++-riscv64-linux-gnu"
'''
PLATFORM_LEG_ROW = '''
[[leg]]
platform = "linux-riscv64"
runner = "ubuntu-24.04"      # no hosted RISC-V runner: cross-built on x86_64, smoke under qemu
'''
VARIANT_LEG_ROW = '''
[[leg]]
platform = "linux-x86_64"
flavor = "npu"
accelerator = "openvino"
kind = "static"
runner = "ubuntu-24.04"
requires = { runtime = "the OpenVINO runtime and an Intel NPU driver" }
'''
OPENVINO_EVIDENCE = '''
[[evidence.onnxruntime.openvino]]
files = ["lib/libonnxruntime_providers_openvino.so"]
'''

Edit = Callable[[Path], None]


def _append(relative: str, text: str) -> Edit:
    def edit(root: Path) -> None:
        path = root / relative
        path.write_text(path.read_text(encoding="utf-8") + text, encoding="utf-8")
    return edit


def _replace(relative: str, old: str, new: str) -> Edit:
    def edit(root: Path) -> None:
        path = root / relative
        text = path.read_text(encoding="utf-8")
        assert old in text, f"{relative} no longer has {old!r}: update this test and docs/extending.md"
        path.write_text(text.replace(old, new, 1), encoding="utf-8")
    return edit


def _riscv_toolchain(root: Path) -> None:
    source = (root / "smoke" / "aarch64-linux-gnu.toolchain.cmake").read_text(encoding="utf-8")
    (root / "smoke" / "riscv64-linux-gnu.toolchain.cmake").write_text(
        source.replace("aarch64", "riscv64").replace("Linux riscv64", "Linux RISC-V"), encoding="utf-8")


# Exercise -> the files it touches (docs/extending.md's checklist) and how.
PLATFORM_EDITS: dict[str, Edit] = {
    "engines/platforms.toml": _append("engines/platforms.toml", PLATFORM_ROW),
    "variants/executorch.toml": _append("variants/executorch.toml", PLATFORM_LEG_ROW),
    "smoke/riscv64-linux-gnu.toolchain.cmake": _riscv_toolchain,
}
VARIANT_EDITS: dict[str, Edit] = {
    "engines/contracts.toml": lambda root: (
        _replace("engines/contracts.toml", 'cuda = "NVIDIA\'s CUDA (accelerator cuda only)"\n',
                 'cuda = "NVIDIA\'s CUDA (accelerator cuda only)"\nnpu = "a neural processing unit"\n')(root),
        _replace("engines/contracts.toml", 'cuda = "NVIDIA CUDA"\n',
                 'cuda = "NVIDIA CUDA"\nopenvino = "Intel OpenVINO"\n')(root),
        _append("engines/contracts.toml", OPENVINO_EVIDENCE)(root)),
    "engines/onnxruntime/recipe.py": lambda root: (
        _replace("engines/onnxruntime/recipe.py", 'if acc in ("coreml", "dml")]',
                 'if acc in ("coreml", "dml")] + (["--use_openvino", "NPU"] if "openvino" in leg.accelerator else [])')(root),
        _replace("engines/onnxruntime/recipe.py", '    "dml": kit.Support(("windows",)),\n',
                 '    "dml": kit.Support(("windows",)),\n    "openvino": kit.Support(("linux-x86_64",)),\n')(root)),
    "variants/onnxruntime.toml": _append("variants/onnxruntime.toml", VARIANT_LEG_ROW),
}


def _copy_project(target: Path) -> Path:
    target.mkdir()
    for name in COPIED:
        source = REPO / name
        if source.is_dir():
            shutil.copytree(source, target / name, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy2(source, target / name)
    return target


def _snapshot(root: Path) -> dict[str, bytes]:
    return {path.relative_to(root).as_posix(): path.read_bytes()
            for path in root.rglob("*") if path.is_file() and "__pycache__" not in path.parts}


def _run(root: Path, *argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, *argv], cwd=root, capture_output=True, text=True, timeout=300,
                          env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(root / "site_scons"), "HOME": str(root)})


def _plan(root: Path, leg: str) -> subprocess.CompletedProcess[str]:
    return _run(root, "-m", "SCons", "-Q", "plan=1", leg)


def _setup(root: Path, leg: str) -> dict[str, str]:
    done = _run(root, "-m", "backends.ci", "setup", "--leg", leg)
    assert done.returncode == 0, done.stdout + done.stderr
    return dict(line.split("=", 1) for line in done.stdout.splitlines() if "=" in line)


def _checklist(heading: str) -> list[re.Pattern[str]]:
    """The files the guide's section `heading` names: backquoted paths, `<...>` standing for
    any name (`variants/<engine>.toml`)."""
    text = GUIDE.read_text(encoding="utf-8")
    section = text.split(f"## {heading}", 1)[1].split("\n## ", 1)[0]
    names = [name for name in re.findall(r"`([^`\s]+)`", section) if "/" in name]
    return [re.compile("".join("[^/]+" if part.startswith("<") else re.escape(part)
                               for part in re.split(r"(<[^>]+>)", name)) + "$") for name in names]


def _follow(tmp_path: Path, edits: dict[str, Edit], leg: str) -> tuple[Path, subprocess.CompletedProcess[str]]:
    root = _copy_project(tmp_path / "project")
    before = _plan(root, leg)
    assert before.returncode != 0 and "unknown leg" in before.stdout + before.stderr, before.stdout + before.stderr
    untouched = _snapshot(root)
    for edit in edits.values():
        edit(root)
    after = _snapshot(root)
    changed = {name for name in after if untouched.get(name) != after[name]}
    assert changed == set(edits), changed
    assert not any(name.startswith("site_scons/") for name in changed)
    return root, _plan(root, leg)


def test_a_new_platform_is_data_only(tmp_path: Path) -> None:
    root, planned = _follow(tmp_path, PLATFORM_EDITS, PLATFORM_LEG)
    output = planned.stdout + planned.stderr
    assert planned.returncode == 0, output
    assert "dist/executorch-1.3.1-Linux-riscv64-static.zip" in output
    assert "-DCMAKE_C_COMPILER=riscv64-linux-gnu-gcc" in output and "-DCMAKE_SYSTEM_PROCESSOR=riscv64" in output
    assert "g++-riscv64-linux-gnu" in _setup(root, PLATFORM_LEG)["apt"].split()
    assert len(PLATFORM_EDITS) <= 4


def test_a_new_accelerator_variant_is_data_and_recipe_only(tmp_path: Path) -> None:
    root, planned = _follow(tmp_path, VARIANT_EDITS, VARIANT_LEG)
    output = planned.stdout + planned.stderr
    assert planned.returncode == 0, output
    assert "dist/onnxruntime-1.26.0-Linux-x86_64-npu-static.zip" in output
    assert "--use_openvino NPU" in output
    assert len(VARIANT_EDITS) <= 5


@pytest.mark.parametrize("heading, edits", [("A new platform", PLATFORM_EDITS),
                                             ("A new accelerator variant", VARIANT_EDITS)])
def test_the_guide_names_every_file_the_exercise_touches(heading: str, edits: dict[str, Edit]) -> None:
    named = _checklist(heading)
    missing = [path for path in edits if not any(pattern.match(path) for pattern in named)]
    assert not missing, f"docs/extending.md's {heading!r} does not name {missing}"


def test_without_its_table_row_the_platform_is_refused(tmp_path: Path) -> None:
    """The mutation: the leg row alone, no [platform.linux-riscv64]: variants/ refuses it."""
    root = _copy_project(tmp_path / "project")
    PLATFORM_EDITS["variants/executorch.toml"](root)
    planned = _plan(root, PLATFORM_LEG)
    assert planned.returncode != 0
    assert "unknown platform 'linux-riscv64'" in planned.stdout + planned.stderr
