"""Benchmark: the real LibTorch Linux x86_64 leg (from PyTorch's CPU wheel), step by step.

Prints the wall time of every step of a cold run (with -j2, as the quick start and CI run
it: the smoke of the stage beside archive and verify), the critical path through the step
graph, the smoke chain (the consumer's configure + compile + run, from its logs) and how
far the cold run is above it, the null-rebuild time (median of 5), the archive and
unpacked sizes, and the reference implementation's numbers measured on this machine
(docs/history.md#baseline) beside them. Prints; asserts nothing.

    python3 bench/libtorch_leg.py [--runs 5] [--jobs 2]
"""
from __future__ import annotations

import argparse
import os
import re
import statistics
import sys
import tempfile
import time
import zipfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "e2e"))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

import inputs  # noqa: E402
from scratch import REPO, Scons, scratch_project  # noqa: E402

LEG = "libtorch-linux-x86_64-shared"
ARCHIVE = "libtorch-2.13.0-Linux-x86_64-shared.zip"
# Reference implementation, same machine and input (docs/history.md#baseline, medians).
BASELINE = {"build+install (extract, copy, stage)": 17.78, "package (cmake -E tar zip)": 16.91,
            "smoke (configure+build+test)": 18.71, "null rebuild": 8.58}
STEP_LINE = re.compile(r"^\[(\w+)\] \S+ done in ([0-9.]+) s$")
COMMAND_TIME = re.compile(r"^==== \[\S+ smoke (\w+)\] exit code 0 after ([0-9.]+) s$", re.M)
# The leg's step graph (backends/graph/declare.py): the smoke consumes the stage, publish waits for all three.
PATHS = (("fetch", "extract", "stage", "archive", "verify", "publish"),
         ("fetch", "extract", "stage", "smoke", "publish"))
SMOKE_CHAIN = ("configure", "compile", "run")


def step_times(output: str) -> dict[str, float]:
    return {m.group(1): float(m.group(2)) for m in map(STEP_LINE.match, output.splitlines()) if m}


def critical_path(times: dict[str, float]) -> tuple[tuple[str, ...], float]:
    """The longest chain of dependent steps, and its length."""
    return max(((path, sum(times.get(step, 0.0) for step in path)) for path in PATHS), key=lambda found: found[1])


def smoke_commands(logs: Path) -> dict[str, float]:
    """Seconds of the smoke's configure, compile and run, from the runner's logs."""
    found = {}
    for name in SMOKE_CHAIN:
        log = logs / f"smoke-{name}.log"
        matches = COMMAND_TIME.findall(log.read_text()) if log.is_file() else []
        if matches:
            found[name] = float(matches[-1][1])
    return found


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--jobs", type=int, default=2, help="scons -j (the quick start and CI pass 2)")
    options = parser.parse_args()
    runs = options.runs
    wheel = inputs.torch_cpu_wheel(REPO / ".cache" / "e2e")
    with tempfile.TemporaryDirectory(prefix="bench-libtorch-") as tmp:
        scons = Scons(scratch_project(Path(tmp) / "project"), Path(tmp) / "cache")
        args = (LEG, "version=2.13.0", f"origin={wheel}", f"-j{options.jobs}")
        load = os.getloadavg()[0]
        started = time.monotonic()
        cold = scons(*args)
        total = time.monotonic() - started
        commands = smoke_commands(scons.project / "build" / "legs" / LEG / "logs")
        nulls = []
        for _ in range(runs):
            started = time.monotonic()
            scons(*args)
            nulls.append(time.monotonic() - started)
        archive = scons.project / "dist" / ARCHIVE
        size = archive.stat().st_size
        with zipfile.ZipFile(archive) as handle:
            unpacked = sum(i.file_size for i in handle.infolist())
            entries = len(handle.infolist())
    print(f"leg {LEG} from {wheel.name}, scons -j{options.jobs}, load average {load:.2f} at the start "
          f"on {os.cpu_count()} cores")
    print("cold run, per step (s):")
    times = step_times(cold.stdout)
    for step, seconds in times.items():
        print(f"  {step:8s} {seconds:7.2f}")
    print(f"  total    {total:7.2f} (including SCons start-up and graph declaration)")
    path, length = critical_path(times)
    print(f"critical path: {' -> '.join(path)} = {length:.2f} s; the rest of the total "
          f"({total - length:.2f} s) is SCons start-up, graph declaration and step bookkeeping")
    if all(name in commands for name in SMOKE_CHAIN):
        chain = sum(commands[name] for name in SMOKE_CHAIN)
        print(f"smoke chain: {' + '.join(f'{name} {commands[name]:.2f}' for name in SMOKE_CHAIN)} = {chain:.2f} s; "
              f"cold total - smoke chain = {total - chain:.2f} s (target <= 10 s)")
    print(f"null rebuild: median {statistics.median(nulls):.3f} s [{min(nulls):.3f}-{max(nulls):.3f}] over {runs} runs")
    print(f"archive: {size:,} B, {entries} entries, {unpacked:,} B unpacked")
    print("reference implementation on this machine (docs/history.md#baseline):")
    for what, seconds in BASELINE.items():
        print(f"  {what:38s} {seconds:6.2f} s")
    ours = times.get("extract", 0) + times.get("stage", 0)
    print(f"ratios (reference / ours): extract+stage {BASELINE['build+install (extract, copy, stage)'] / ours:.1f}x, "
          f"archive {BASELINE['package (cmake -E tar zip)'] / times['archive']:.1f}x, "
          f"null rebuild {BASELINE['null rebuild'] / statistics.median(nulls):.1f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
