"""The LibTorch -cuda curation rule on a cu130-like tree, through the real recipe and graph.

The fixture zip has the layout of `libtorch-shared-with-deps-<ver>+cu130.zip` with tiny
real ELF libraries (SONAMEs, libtorch_cuda needing libcudart, c10::cuda defined): torch's
own CUDA libraries must stay, every NVIDIA redistributable must go, the smoke must say why
it did not run, and the archive must pass its contract. An NVIDIA library the strip rule
does not know by name fails verify by its SONAME.
"""
from __future__ import annotations

import json
import subprocess
import zipfile
from pathlib import Path

import pytest

from backends.util import toolchain
from binaries import elf_shared
from backends.model.matrix import load_matrix
from scratch import REPO, Scons, scratch_project

LEG = "libtorch-linux-x86_64-cuda-shared"
VERSION = load_matrix(REPO).engines["libtorch"].version
ARCHIVE = f"libtorch-{VERSION}-Linux-x86_64-cuda-shared.zip"
LIBRARIES = ["libtorch.so", "libtorch_cpu.so", "libtorch_cuda.so", "libc10.so", "libc10_cuda.so",
             "libcaffe2_nvrtc.so", "libgomp-a34b3233.so.1"]
FILES = ["share/cmake/Torch/TorchConfig.cmake", "include/torch/csrc/api/include/torch/torch.h", "include/ATen/ATen.h"]
KEPT = [f"lib/{name}" for name in LIBRARIES] + FILES
CPU_LIBRARIES = [name for name in LIBRARIES if "cuda" not in name and "nvrtc" not in name]
CPU_LEG = "libtorch-linux-x86_64-shared"
NVIDIA = ["libcudnn.so.9", "libcudnn_ops.so.9", "libcublas.so.13", "libcublasLt.so.13", "libcudart.so.13",
          "libnccl.so.2", "libnvrtc.so.13", "libnvrtc-builtins.so.13.0", "libnvToolsExt.so.1", "libcusparseLt.so.0",
          "libcufft.so.12", "libcurand.so.10", "libcusolver.so.12", "libcupti.so.13", "libnvJitLink.so.13",
          "libcufile.so.0"]
TORCH_CPU_SYMBOLS, TORCH_CPU_BYTES = 10_000, 50_000_000  # the floor of libtorch_cpu


def cu130_zip(root: Path, extra: tuple[str, ...] = (), cuda: bool = True) -> Path:
    """`libtorch-shared-with-deps-<version>+cu130.zip` with tiny real libraries; `extra`
    NVIDIA libraries are shipped under a file name the strip rule does not know. Without
    `cuda`, the same layout of a CPU build (no CUDA library, nothing loading one)."""
    libs = root / "libs"
    libs.mkdir(parents=True)
    nvidia = {name: elf_shared(libs / name, (f"{name.split('.')[0]}_entry",), soname=name)
              for name in (NVIDIA + list(extra) if cuda else ["libcudart.so.13"])}
    # libtorch_cpu is held to the floor of the real one (engines/contracts.toml): its exports and bulk.
    cpu_symbols = ("_ZN2at6detail12getMPSHooksEv", *(f"_ZN2at7fixture{i}Ev" for i in range(TORCH_CPU_SYMBOLS)))
    symbols = {"libc10_cuda.so": ("_ZN3c104cuda6deviceEv",), "libtorch_cpu.so": cpu_symbols}
    torch = {name: elf_shared(libs / name, symbols.get(name, (f"{name.split('.')[0]}_entry",)), soname=name,
                              needed=[nvidia["libcudart.so.13"]] if name == "libtorch_cuda.so" else ())
             for name in LIBRARIES if cuda or name in CPU_LIBRARIES}
    (libs / "ballast").write_bytes(bytes(TORCH_CPU_BYTES))
    subprocess.run([toolchain.require_tool("llvm-objcopy", "test"), "--add-section", f".ballast={libs / 'ballast'}",
                    torch["libtorch_cpu.so"]], check=True)
    (libs / "ballast").unlink()
    release = root / f"libtorch-shared-with-deps-{VERSION}+cu130.zip"
    with zipfile.ZipFile(release, "w") as archive:
        for name, path in {**torch, **(nvidia if cuda else {})}.items():
            shipped = f"libextra{list(extra).index(name)}.so" if name in extra else name
            archive.write(path, f"libtorch/lib/{shipped}")
        for name in FILES:
            archive.writestr(f"libtorch/{name}", f"# fixture {name}\n")
        archive.writestr("libtorch/share/cmake/Torch/TorchConfigVersion.cmake", f'set(PACKAGE_VERSION "{VERSION}")\n')
        archive.writestr("libtorch/share/cmake/ATen/ATenConfig.cmake",
                         'set(ATEN_INCLUDE_DIR "/pytorch/torch/include")\n')  # upstream's stale config
    return release


def origins(release: Path) -> tuple[str]:
    """The fixture zip, and LibTorch's LICENSE and NOTICE (files of PyTorch's tag, unpinned
    here: docs/licenses-and-provenance.md) as fixture texts beside it."""
    texts = {name: release.with_name(name) for name in ("LICENSE", "NOTICE")}
    for name, path in texts.items():
        path.write_text(f"fixture {name}\n")
    return (f"origin={release},license={texts['LICENSE']},notice={texts['NOTICE']}",)


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    root = tmp_path_factory.mktemp("cu130")
    release = cu130_zip(root)
    scons = Scons(scratch_project(root / "project"), root / "cache")
    return scons, scons(LEG, *origins(release))


def test_nvidia_redistributables_are_stripped_and_torch_cuda_kept(built):
    scons, _ = built
    with zipfile.ZipFile(scons.project / "dist" / ARCHIVE) as archive:
        names = set(archive.namelist())
    assert set(KEPT) <= names
    assert {"share/licenses/libtorch/LICENSE", "share/licenses/libtorch/NOTICE"} <= names
    assert not names & {f"lib/{name}" for name in NVIDIA}
    assert not [n for n in names if n.startswith("share/cmake/ATen/")]


def test_an_nvidia_library_under_another_name_fails_verify(tmp_path):
    release = cu130_zip(tmp_path, extra=("libcutensor.so.2",))
    scons = Scons(scratch_project(tmp_path / "project"), tmp_path / "cache")
    result = scons(LEG, *origins(release), check=False)
    assert result.returncode != 0
    assert "lib/libextra0.so is libcutensor.so.2, not a library this package ships" in result.stderr
    assert not (scons.project / "dist" / ARCHIVE).exists()


def test_smoke_not_run_and_requirements_recorded(built):
    scons, result = built
    assert "smoke not run: the leg cannot run on any CI host (can_run=0)" in result.stdout
    manifest = json.loads((scons.project / "dist" / f"{ARCHIVE}.json").read_text())
    assert manifest["leg"]["requires"] == {"cuda": "13.x", "cudnn": "9", "driver": "r580+",
                                           "gpu": "Turing (sm_75) or newer"}
    assert manifest["sources"][0]["origin"].endswith("+cu130.zip")


def _extracted(project: Path) -> set[str]:
    """The files below the root of the latest extraction (another leg's rules key another one)."""
    record = max((project / "build/extract").glob("*.json"), key=lambda path: path.stat().st_mtime_ns)
    root = record.with_suffix("") / "tree" / "libtorch"
    return {p.relative_to(root).as_posix() for p in root.rglob("*") if not p.is_dir()}


def test_the_extraction_leaves_out_what_the_stage_does_not_take(built):
    """The NVIDIA redistributables and the stale ATen config are excluded: never written."""
    scons, _ = built
    files = _extracted(scons.project)
    assert set(KEPT) <= files
    assert not files & {f"lib/{name}" for name in NVIDIA}
    assert not [name for name in files if name.startswith("share/cmake/ATen/")]


def test_changing_the_strip_rule_reextracts_and_restages(tmp_path, built):
    scons, _ = built
    release = next(scons.project.parent.glob("*+cu130.zip"))
    edited = Scons(scratch_project(tmp_path / "project", copied=("engines/libtorch",)), tmp_path / "cache")
    edited(LEG, *origins(release))
    assert "lib/libgomp-a34b3233.so.1" in _extracted(edited.project)
    recipe = edited.project / "engines/libtorch/recipe.py"
    recipe.write_text(recipe.read_text().replace('"cudss")', '"cudss", "gomp-")'))
    rerun = edited(LEG, *origins(release))
    assert edited.steps_run(rerun) == ["extract", "stage", "archive", "verify", "smoke", "publish"]
    assert "lib/libgomp-a34b3233.so.1" not in _extracted(edited.project)
    with zipfile.ZipFile(edited.project / "dist" / ARCHIVE) as archive:
        assert "lib/libgomp-a34b3233.so.1" not in archive.namelist()


def test_the_cu130_release_given_to_the_cpu_leg_is_refused_at_extract(tmp_path):
    """By the libraries' SONAMEs and DT_NEEDED, before anything is staged; the extracted tree
    does not stay behind."""
    release = cu130_zip(tmp_path)
    scons = Scons(scratch_project(tmp_path / "project"), tmp_path / "cache")
    result = scons(CPU_LEG, *origins(release), check=False)
    assert result.returncode != 0
    assert f"{CPU_LEG}: extract failed: origin {release.name} does not fit {CPU_LEG}: it is a cuda build (" in \
        result.stderr, result.stderr
    assert "lib/libtorch_cuda.so is libtorch_cuda.so" in result.stderr
    assert f"it fits {LEG}" in result.stderr
    assert "stage" not in scons.steps_run(result) and not (scons.project / "build/legs" / CPU_LEG / "stage").exists()
    assert not list((scons.project / "build/extract").glob("*/tree"))
    assert not list((scons.project / "dist").glob("*.zip"))


def test_a_cpu_release_given_to_the_cuda_leg_is_refused_at_extract(tmp_path):
    release = cu130_zip(tmp_path, cuda=False)
    scons = Scons(scratch_project(tmp_path / "project"), tmp_path / "cache")
    result = scons(LEG, *origins(release), check=False)
    assert result.returncode != 0
    assert f"{LEG}: extract failed: origin {release.name} does not fit {LEG}: it is no cuda build: " in result.stderr
    assert f"it fits {CPU_LEG}" in result.stderr
    assert "stage" not in scons.steps_run(result)
