"""Smoke test: unpack the archive and build + run the engine's consumer project against it."""
from __future__ import annotations

import shutil
import time
from pathlib import Path
from typing import Mapping

from ..model.plan import Smoke
from ..run import limited_env, run
from .extract import extract


def _program_output(log: Path, lines: int = 40) -> list[str]:
    """The child's output from a runner log (after its `output:` header), last lines only."""
    text = log.read_text(errors="replace").splitlines() if log.is_file() else []
    if "output:" in text:  # the log is appended to: the last run's output only
        text = text[len(text) - text[::-1].index("output:"):]
    return [line for line in text if not line.startswith("====")][-lines:]


def not_run(reason: str, label: str) -> dict[str, object]:
    print(f"[{label}] smoke not run: {reason}", flush=True)
    return {"status": "not run", "reason": reason}


# Cross-building the consumer and running it under an emulator, through ctest's
# emulator hook: the CMake toolchain file (under smoke/) per run mode.
TOOLCHAIN_FILES = {
    "qemu": "aarch64-linux-gnu.toolchain.cmake",
    "wine": "mingw-w64-x86_64.toolchain.cmake",
}


def emulator_env(mode: str, environ: Mapping[str, str], leg_dir: Path) -> dict[str, str]:
    """What the emulator reads from the environment. Wine keeps its Windows tree in a
    prefix made on first use (~10 s): `$WINEPREFIX`, else `wineprefix/` in the leg's
    build directory, kept across runs; no debug chatter, no Mono/Gecko installers."""
    if mode != "wine":
        return {}
    return {"WINEPREFIX": environ.get("WINEPREFIX") or str(leg_dir / "wineprefix"),
            "WINEDEBUG": "-all", "WINEDLLOVERRIDES": "mscoree,mshtml="}


def smoke(archive: Path, spec: Smoke, project_root: Path, work: Path, logs: Path, label: str,
          environ: Mapping[str, str], verbose: bool, mode: str = "native") -> dict[str, object]:
    """Configure, build and ctest `spec.project` against the unpacked archive; raises on failure."""
    started = time.monotonic()
    shutil.rmtree(work, ignore_errors=True)
    package = work / "package"
    extract(archive, package)
    build_dir = work / "build"
    project = project_root / spec.project
    env = limited_env(emulator_env(mode, environ, work.parent))
    defines = [f"-D{key}={value}" for key, value in spec.defines.items()]
    if mode in TOOLCHAIN_FILES:
        defines.append(f"-DCMAKE_TOOLCHAIN_FILE={project.parent / TOOLCHAIN_FILES[mode]}")
    steps = [
        ("configure", ["cmake", "-S", str(project), "-B", str(build_dir), "-G", "Ninja",
                       f"-DCMAKE_PREFIX_PATH={package}", *defines]),
        ("compile", ["cmake", "--build", str(build_dir)]),
        ("run", ["ctest", "--test-dir", str(build_dir), "--output-on-failure", "--verbose"]),
    ]
    for name, argv in steps:
        run(argv, env=env, cwd=work, log=logs / f"smoke-{name}.log", label=f"{label} smoke {name}", echo=verbose)
    output = _program_output(logs / "smoke-run.log")
    shutil.rmtree(work, ignore_errors=True)
    return {"status": "passed", "mode": mode, "seconds": round(time.monotonic() - started, 2), "output": output}
