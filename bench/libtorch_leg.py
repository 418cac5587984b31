"""Benchmark: the real LibTorch Linux x86_64 leg (from PyTorch's CPU wheel), step by step.

Prints the wall time of every step of a cold run, the null-rebuild time (median of 5),
the archive and unpacked sizes, and the reference implementation's numbers measured on
this machine (docs/upstream.md#baseline) beside them. Prints; asserts nothing.

    python3 bench/libtorch_leg.py [--runs 5]
"""
from __future__ import annotations

import argparse
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
# Reference implementation, same machine and input (docs/upstream.md#baseline, medians).
BASELINE = {"build+install (extract, copy, stage)": 17.78, "package (cmake -E tar zip)": 16.91,
            "smoke (configure+build+test)": 18.71, "null rebuild": 8.58}
STEP_LINE = re.compile(r"^\[(\w+)\] \S+ done in ([0-9.]+) s$")


def step_times(output: str) -> dict[str, float]:
    return {m.group(1): float(m.group(2)) for m in map(STEP_LINE.match, output.splitlines()) if m}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=5)
    runs = parser.parse_args().runs
    wheel = inputs.torch_cpu_wheel(REPO / ".cache" / "e2e")
    with tempfile.TemporaryDirectory(prefix="bench-libtorch-") as tmp:
        scons = Scons(scratch_project(Path(tmp) / "project"), Path(tmp) / "cache")
        args = (LEG, "version=2.13.0", f"origin={wheel}")
        started = time.monotonic()
        cold = scons(*args)
        total = time.monotonic() - started
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
    print(f"leg {LEG} from {wheel.name}")
    print("cold run, per step (s):")
    for step, seconds in step_times(cold.stdout).items():
        print(f"  {step:8s} {seconds:7.2f}")
    print(f"  total    {total:7.2f} (including SCons start-up and graph declaration)")
    print(f"null rebuild: median {statistics.median(nulls):.3f} s [{min(nulls):.3f}-{max(nulls):.3f}] over {runs} runs")
    print(f"archive: {size:,} B, {entries} entries, {unpacked:,} B unpacked")
    print("reference implementation on this machine (docs/upstream.md#baseline):")
    for what, seconds in BASELINE.items():
        print(f"  {what:38s} {seconds:6.2f} s")
    times = step_times(cold.stdout)
    ours = times.get("extract", 0) + times.get("stage", 0)
    print(f"ratios (reference / ours): extract+stage {BASELINE['build+install (extract, copy, stage)'] / ours:.1f}x, "
          f"archive {BASELINE['package (cmake -E tar zip)'] / times['archive']:.1f}x, "
          f"null rebuild {BASELINE['null rebuild'] / statistics.median(nulls):.1f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
