"""The smoke consumer projects (smoke/<engine>) against real upstream binaries.

Each project is driven exactly like the build system's generic smoke step:

    cmake -S smoke/<engine> -B <tmp>/build -G Ninja -DCMAKE_BUILD_TYPE=<cfg>
          -DCMAKE_PREFIX_PATH=<prefix> -DSMOKE_KIND=.. -DSMOKE_FLAVOR=.. -DSMOKE_ACCELERATOR=..
    cmake --build <tmp>/build
    ctest --test-dir <tmp>/build --output-on-failure

against prefixes assembled by ``inputs.py`` from registry artifacts (ONNX Runtime: the
release tarball's tree, and the Windows zip's, cross-compiled with MinGW-w64 through
smoke/mingw-w64-x86_64.toolchain.cmake and run under wine; LibTorch: the CPU wheel's
torch/{include,lib,share}; ExecuTorch: the wheel's executorch/{include,lib,share}).
Negative tests prove the variant guards
fire (false-green protection). Tests without the ``e2e`` marker are fast and need no
downloads: the smoke models' generators reproduce the committed files byte for byte,
and the projects that cannot run here (tflite, litert) fail cleanly without a package.
"""
from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
import inputs  # noqa: E402
from backends.steps.smoke import emulator_env

REPO = Path(__file__).resolve().parents[2]
SMOKE = REPO / "smoke"

_TOOLS = all(shutil.which(t) for t in ("cmake", "ninja", "ctest"))
needs_tools = pytest.mark.skipif(not _TOOLS, reason="cmake, ninja and ctest are required")


# --------------------------------------------------------------------------- driver


@dataclass
class SmokeRun:
    stage: str  # "configure" | "build" | "test" | "ok"
    output: str
    times: dict[str, float] = field(default_factory=dict)

    @property
    def passed(self) -> bool:
        return self.stage == "ok"

    def summary(self) -> str:
        times = ", ".join(f"{k} {v:.1f}s" for k, v in self.times.items())
        return f"stopped at {self.stage} ({times})\n{self.output[-6000:]}"


def run_smoke(
    engine: str,
    prefix: Path,
    build: Path,
    *,
    kind: str = "shared",
    flavor: str = "cpu",
    accelerator: str = "none",
    config: str = "Release",
    extra: tuple[str, ...] = (),
) -> SmokeRun:
    steps = [
        ("configure", ["cmake", "-S", str(SMOKE / engine), "-B", str(build), "-G", "Ninja",
                       f"-DCMAKE_BUILD_TYPE={config}", f"-DCMAKE_PREFIX_PATH={prefix}",
                       f"-DSMOKE_KIND={kind}", f"-DSMOKE_FLAVOR={flavor}",
                       f"-DSMOKE_ACCELERATOR={accelerator}", *extra]),
        ("build", ["cmake", "--build", str(build)]),
        ("test", ["ctest", "--test-dir", str(build), "--output-on-failure", "-V"]),
    ]
    log = []
    times = {}
    for stage, cmd in steps:
        start = time.monotonic()
        proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        times[stage] = time.monotonic() - start
        log.append(f"$ {' '.join(cmd)}\n{proc.stdout}")
        if proc.returncode != 0:
            return SmokeRun(stage, "\n".join(log), times)
    result = SmokeRun("ok", "\n".join(log), times)
    print(f"\n[smoke {engine} {kind}/{flavor}/{accelerator} {config}] "
          + ", ".join(f"{k} {v:.2f}s" for k, v in times.items()))
    return result


def assert_pass(run: SmokeRun) -> None:
    assert run.passed, run.summary()
    assert "PASS" in run.output, run.summary()


def assert_fails(run: SmokeRun, stage: str, message: str) -> None:
    assert run.stage == stage, f"expected a {stage} failure mentioning {message!r}; {run.summary()}"
    assert message in run.output, f"expected {message!r}; {run.summary()}"


# --------------------------------------------------------------------------- prefixes


@pytest.fixture(scope="session")
def cache() -> Path:
    return inputs.default_cache()


@pytest.fixture(scope="session")
def ort_prefix(cache: Path) -> Path:
    return inputs.release_prefix(inputs.ort_linux_x64_release(cache), cache / "prefixes" / "onnxruntime-linux-x64")


@pytest.fixture(scope="session")
def torch_prefix(cache: Path) -> Path:
    return inputs.wheel_prefix(inputs.torch_cpu_wheel(cache), "torch", cache / "prefixes" / "libtorch-cpu")


@pytest.fixture(scope="session")
def executorch_prefix(cache: Path) -> Path:
    return inputs.wheel_prefix(inputs.executorch_wheel(cache), "executorch", cache / "prefixes" / "executorch-wheel")


def _copy_prefix(src: Path, dest: Path) -> Path:
    shutil.copytree(src, dest, symlinks=True, ignore=shutil.ignore_patterns(".anira-e2e-source"))
    return dest


# --------------------------------------------------------------------------- ONNX Runtime


@pytest.mark.e2e
@needs_tools
@pytest.mark.parametrize("config", ["Release", "Debug"])
def test_onnxruntime_shared_cpu_passes(ort_prefix: Path, tmp_path: Path, config: str) -> None:
    run = run_smoke("onnxruntime", ort_prefix, tmp_path / "build", config=config)
    assert_pass(run)
    assert f"onnxruntime {inputs.ORT_VERSION}" in run.output
    assert "cpu: y = {2, 4, 6}" in run.output


@pytest.mark.e2e
@needs_tools
def test_onnxruntime_cpu_flavor_rejects_coreml_header(ort_prefix: Path, tmp_path: Path) -> None:
    prefix = _copy_prefix(ort_prefix, tmp_path / "prefix")
    (prefix / "include" / "coreml_provider_factory.h").write_text(
        "// dummy: a CPU package must not advertise the CoreML EP\n#pragma once\n"
    )
    run = run_smoke("onnxruntime", prefix, tmp_path / "build", flavor="cpu")
    assert_fails(run, "test", "FAIL: CPU package ships coreml_provider_factory.h")


@pytest.mark.e2e
@needs_tools
def test_onnxruntime_gpu_coreml_requires_header(ort_prefix: Path, tmp_path: Path) -> None:
    run = run_smoke("onnxruntime", ort_prefix, tmp_path / "build", flavor="gpu", accelerator="coreml")
    assert_fails(run, "test", "FAIL: flavor gpu/coreml but the package ships no coreml_provider_factory.h")


@pytest.mark.e2e
@needs_tools
def test_onnxruntime_cuda_requires_provider_library(ort_prefix: Path, tmp_path: Path) -> None:
    run = run_smoke("onnxruntime", ort_prefix, tmp_path / "build", flavor="cuda", accelerator="cuda")
    assert_fails(run, "configure", "FAIL: flavor cuda but the package ships no CUDA provider library")


@pytest.mark.e2e
@needs_tools
def test_onnxruntime_cuda_rejects_cpu_library_with_dummy_provider(ort_prefix: Path, tmp_path: Path) -> None:
    # A provider file alone is not enough: the core library must be a CUDA build.
    prefix = _copy_prefix(ort_prefix, tmp_path / "prefix")
    (prefix / "lib" / "libonnxruntime_providers_cuda.so").write_bytes(b"")
    run = run_smoke("onnxruntime", prefix, tmp_path / "build", flavor="cuda", accelerator="cuda")
    assert_fails(run, "test", "FAIL: flavor cuda but the library does not provide CUDAExecutionProvider")


@pytest.mark.e2e
@pytest.mark.slow
@needs_tools
def test_onnxruntime_cuda_package_passes(cache: Path, tmp_path: Path) -> None:
    """onnxruntime-gpu (CUDA 12 build standing in for the gpu_cuda13 layout): the CPU
    forward pass runs with the CUDA provider shipped but unloadable (no GPU here)."""
    prefix = inputs.release_prefix(inputs.ort_linux_x64_cuda_release(cache),
                               cache / "prefixes" / "onnxruntime-linux-x64-gpu_cuda13")
    run = run_smoke("onnxruntime", prefix, tmp_path / "build", flavor="cuda", accelerator="cuda")
    assert_pass(run)
    assert "CUDAExecutionProvider" in run.output
    # ...and the same package is refused under the CPU flavor.
    run = run_smoke("onnxruntime", prefix, tmp_path / "build-cpu", flavor="cpu")
    assert_fails(run, "configure", "FAIL: flavor cpu but the package ships a CUDA provider")


@pytest.mark.e2e
@pytest.mark.slow
@needs_tools
def test_onnxruntime_cpu_flavor_rejects_a_cuda_library_without_its_provider(cache: Path, tmp_path: Path) -> None:
    """The provider file removed, the CUDA build of the core library kept: the library
    itself still lists CUDAExecutionProvider."""
    prefix = inputs.release_prefix(inputs.ort_linux_x64_cuda_release(cache),
                               cache / "prefixes" / "onnxruntime-linux-x64-gpu_cuda13")
    copy = tmp_path / "prefix"
    shutil.copytree(prefix, copy, symlinks=True, ignore=shutil.ignore_patterns(
        ".anira-e2e-source", "libonnxruntime_providers_cuda.so", "libonnxruntime_providers_tensorrt.so"))
    run = run_smoke("onnxruntime", copy, tmp_path / "build", flavor="cpu")
    assert_fails(run, "test", "FAIL: CPU package's library provides CUDAExecutionProvider")


# --------------------------------------------------------------------------- ONNX Runtime for Windows, under wine

MINGW_TOOLCHAIN = SMOKE / "mingw-w64-x86_64.toolchain.cmake"
needs_wine = pytest.mark.skipif(not (shutil.which("x86_64-w64-mingw32-g++") and shutil.which("wine")),
                                reason="needs mingw-w64 and wine (tools/setup.sh installs them)")


@pytest.fixture
def wine_env(cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The environment the smoke step gives wine, with the prefix kept in the cache."""
    for key, value in emulator_env("wine", {"WINEPREFIX": str(cache / "wineprefix")}, cache).items():
        monkeypatch.setenv(key, value)


@pytest.fixture(scope="session")
def ort_win_prefix(cache: Path) -> Path:
    return inputs.release_prefix(inputs.ort_win_x64_release(cache), cache / "prefixes" / "onnxruntime-win-x64")


@pytest.mark.e2e
@needs_tools
@needs_wine
def test_onnxruntime_windows_failure_exits_through_wine(ort_win_prefix: Path, tmp_path: Path, wine_env) -> None:
    """The Windows program's FAIL and exit status reach ctest through wine (no false green)."""
    run = run_smoke("onnxruntime", ort_win_prefix, tmp_path / "build", flavor="gpu", accelerator="dml",
                    extra=(f"-DCMAKE_TOOLCHAIN_FILE={MINGW_TOOLCHAIN}",))
    assert_fails(run, "test", "FAIL: flavor gpu/dml but the package ships no dml_provider_factory.h")
    assert "smoke.exe" in run.output


@pytest.mark.e2e
@needs_tools
@needs_wine
def test_onnxruntime_windows_shared_needs_the_dll(ort_win_prefix: Path, tmp_path: Path) -> None:
    prefix = _copy_prefix(ort_win_prefix, tmp_path / "prefix")
    (prefix / "lib" / "onnxruntime.dll").unlink()
    run = run_smoke("onnxruntime", prefix, tmp_path / "build", extra=(f"-DCMAKE_TOOLCHAIN_FILE={MINGW_TOOLCHAIN}",))
    assert_fails(run, "configure", "FAIL: shared package has no onnxruntime.dll")


# --------------------------------------------------------------------------- LibTorch


@pytest.mark.e2e
@needs_tools
def test_libtorch_shared_cpu_passes(torch_prefix: Path, tmp_path: Path) -> None:
    run = run_smoke("libtorch", torch_prefix, tmp_path / "build")
    assert_pass(run)
    assert "cpu: a + b = {3, 5, 7}, dot = 20" in run.output
    assert "mps available: 0" in run.output


# --------------------------------------------------------------------------- ExecuTorch


@pytest.mark.e2e
@needs_tools
def test_executorch_wheel_shared_cpu_passes(executorch_prefix: Path, tmp_path: Path) -> None:
    run = run_smoke("executorch", executorch_prefix, tmp_path / "build", kind="shared")
    assert_pass(run)
    assert "forward: {3, 5, 7}" in run.output
    assert "[smoke] forward done" in run.output


@pytest.mark.e2e
@needs_tools
def test_executorch_link_only_mode_fails_missing_pte_cleanly(executorch_prefix: Path, tmp_path: Path) -> None:
    run = run_smoke("executorch", executorch_prefix, tmp_path / "build", kind="shared",
                    extra=("-DSMOKE_PTE=",))
    assert_pass(run)
    assert "load of nonexistent .pte failed cleanly" in run.output


@pytest.mark.e2e
@needs_tools
def test_executorch_gpu_vulkan_requires_delegate(executorch_prefix: Path, tmp_path: Path) -> None:
    run = run_smoke("executorch", executorch_prefix, tmp_path / "build", kind="shared",
                    flavor="gpu", accelerator="vulkan")
    assert_fails(run, "configure", "FAIL: flavor gpu/vulkan but the package exports no vulkan delegate")


@pytest.mark.e2e
@needs_tools
def test_executorch_kind_must_match_package(executorch_prefix: Path, tmp_path: Path) -> None:
    run = run_smoke("executorch", executorch_prefix, tmp_path / "build", kind="static")
    assert_fails(run, "configure", "FAIL: SMOKE_KIND static but")


# --------------------------------------------------------------------------- not runnable here


@needs_tools
@pytest.mark.parametrize("engine", ["tflite", "litert", "onnxruntime", "executorch"])
def test_configure_fails_cleanly_without_package(engine: str, tmp_path: Path) -> None:
    empty = tmp_path / "empty-prefix"
    (empty / "include").mkdir(parents=True)
    (empty / "lib").mkdir()
    run = run_smoke(engine, empty, tmp_path / "build")
    assert run.stage == "configure", run.summary()
    assert "FAIL: no " in run.output, run.summary()


# --------------------------------------------------------------------------- models (unit-level)


def test_make_add_onnx_reproduces_committed_model(tmp_path: Path) -> None:
    out = tmp_path / "add.onnx"
    subprocess.run([sys.executable, str(SMOKE / "onnxruntime" / "make_add_onnx.py"), str(out)], check=True,
                   stdout=subprocess.DEVNULL)
    committed = (SMOKE / "onnxruntime" / "add.onnx").read_bytes()
    assert out.read_bytes() == committed
    assert len(committed) == 84
    assert b"anira-smoke" in committed and b"add_smoke" in committed


def test_make_add_tflite_reproduces_committed_model(tmp_path: Path) -> None:
    out = tmp_path / "add.tflite"
    subprocess.run([sys.executable, str(SMOKE / "tflite" / "make_add_tflite.py"), str(out)], check=True,
                   stdout=subprocess.DEVNULL)
    committed = (SMOKE / "tflite" / "add.tflite").read_bytes()
    assert out.read_bytes() == committed
    assert committed[4:8] == b"TFL3"


def test_add_pte_json_matches_add_pte() -> None:
    pte = (SMOKE / "executorch" / "add.pte").read_bytes()
    info = json.loads((SMOKE / "executorch" / "add.pte.json").read_text())
    assert info["sha256"] == hashlib.sha256(pte).hexdigest()
    assert set(info) >= {"executorch", "torch", "sha256"}
    assert pte[4:8] == b"ET12", "not an ExecuTorch program (flatbuffer identifier)"


def test_add_pte_was_exported_at_the_executorch_pin() -> None:
    """The .pte format follows ExecuTorch's version: re-run export_add.py when the pin moves."""
    import tomllib

    pin = tomllib.loads((SMOKE.parent / "engines" / "executorch" / "engine.toml").read_text())["version"]
    info = json.loads((SMOKE / "executorch" / "add.pte.json").read_text())
    assert info["executorch"] == pin, (f"smoke/executorch/add.pte was exported with executorch {info['executorch']}, "
                                       f"the pin is {pin}: run smoke/executorch/export_add.py")


# --------------------------------------------------------------------------- ExecuTorch static-install shape (fixture)


def _fake_static_executorch(root: Path, delegates: list[str]) -> Path:
    """A stand-in for the project's static ExecuTorch package: the bare target names a
    source build's install exports (configure-level only; nothing here links)."""
    (root / "include").mkdir(parents=True)
    (root / "lib" / "cmake" / "ExecuTorch").mkdir(parents=True)
    (root / "lib" / "libexecutorch.a").write_bytes(b"!<arch>\n")
    targets = ["executorch", "executorch_core", "portable_kernels", "portable_ops_lib",
               "optimized_native_cpu_ops_lib", "optimized_ops_lib", "xnnpack_backend", *delegates]
    (root / "lib" / "cmake" / "ExecuTorch" / "executorch-config.cmake").write_text(
        "# test fixture: the target names of a static ExecuTorch install\n"
        f"foreach(_t {' '.join(targets)})\n"
        "  if(NOT TARGET ${_t})\n    add_library(${_t} INTERFACE IMPORTED)\n  endif()\n"
        "endforeach()\n"
        f"set(EXECUTORCH_LIBRARIES {' '.join(targets)})\n"
        'set(EXECUTORCH_INCLUDE_DIRS "${CMAKE_CURRENT_LIST_DIR}/../../../include")\n'
        "set(EXECUTORCH_FOUND ON)\nset(executorch_FOUND TRUE)\n"
    )
    return root


def _configure(engine: str, prefix: Path, build: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["cmake", "-S", str(SMOKE / engine), "-B", str(build), "-G", "Ninja",
         f"-DCMAKE_PREFIX_PATH={prefix}", *args],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )


@needs_tools
def test_executorch_static_shape_keeps_one_op_registration_lib(tmp_path: Path) -> None:
    prefix = _fake_static_executorch(tmp_path / "pkg", [])
    proc = _configure("executorch", prefix, tmp_path / "build", "-DSMOKE_KIND=static", "-DSMOKE_FLAVOR=cpu")
    assert proc.returncode == 0, proc.stdout
    link_set = next(line for line in proc.stdout.splitlines() if "executorch link set:" in line)
    assert "optimized_native_cpu_ops_lib" in link_set
    assert "portable_ops_lib" not in link_set and "optimized_ops_lib" not in link_set.replace(
        "optimized_native_cpu_ops_lib", "")


@needs_tools
@pytest.mark.parametrize("flavor,accelerator,delegates,message", [
    ("cpu", "none", ["coremldelegate"], "FAIL: flavor cpu but the package exports accelerator delegates: coreml"),
    ("cpu", "none", ["vulkan_backend"], "FAIL: flavor cpu but the package exports accelerator delegates: vulkan"),
    ("gpu", "mps", ["coremldelegate"], "FAIL: flavor gpu/mps but the package exports no mps delegate"),
    ("gpu", "vulkan", [], "FAIL: flavor gpu/vulkan but the package exports no vulkan delegate"),
    ("gpu", "coreml,mps,mlx", ["coremldelegate", "mpsdelegate"],
     "FAIL: flavor gpu/mlx but the package exports no mlx delegate"),
    ("gpu", "cuda", ["aoti_cuda_backend"], "FAIL: flavor gpu with unsupported accelerator 'cuda'"),
])
def test_executorch_static_shape_guards(tmp_path: Path, flavor: str, accelerator: str,
                                        delegates: list[str], message: str) -> None:
    prefix = _fake_static_executorch(tmp_path / "pkg", delegates)
    proc = _configure("executorch", prefix, tmp_path / "build", "-DSMOKE_KIND=static",
                      f"-DSMOKE_FLAVOR={flavor}", f"-DSMOKE_ACCELERATOR={accelerator}")
    assert proc.returncode != 0 and message in " ".join(proc.stdout.split()), proc.stdout


@needs_tools
@pytest.mark.parametrize("accelerator,delegates", [
    ("coreml", ["coremldelegate", "mpsdelegate"]),
    ("coreml,mps", ["coremldelegate", "mpsdelegate"]),  # the macOS x86_64 -gpu leg's list
    ("coreml,mps,mlx", ["coremldelegate", "mpsdelegate", "mlxdelegate", "mlx"]),
    ("vulkan", ["vulkan_backend"]),
])
def test_executorch_static_shape_gpu_accepts_exported_delegate(tmp_path: Path, accelerator: str,
                                                               delegates: list[str]) -> None:
    prefix = _fake_static_executorch(tmp_path / "pkg", delegates)
    proc = _configure("executorch", prefix, tmp_path / "build", "-DSMOKE_KIND=static",
                      "-DSMOKE_FLAVOR=gpu", f"-DSMOKE_ACCELERATOR={accelerator}")
    assert proc.returncode == 0, proc.stdout
