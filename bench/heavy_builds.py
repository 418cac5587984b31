#!/usr/bin/env python3
"""Two heavy builds under `-j4 heavy_jobs=1` (prints numbers, asserts nothing).

    python bench/heavy_builds.py [--sleep S] [--jobs N] [--work DIR] [--keep]

Builds two fixsrc legs of tests/integration/fixtures.py (static and shared, from source)
with every build.py sleeping S seconds after configuring (FIXSRC_BUILD_SLEEP), so each
upstream build is a heavy step of known length. Prints the run's wall time, how long each
build step held its SCons job (its `done in` line), the sum of those (job-seconds), and how
long the two sleeps overlapped: with heavy_jobs=1 they must not, and no job should be held
by a build that only waits for another.
"""
from __future__ import annotations

import argparse
import re
import shutil
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests" / "integration"))

import fixtures  # noqa: E402

LEGS = fixtures.FIXSRC_LEG_IDS[:2]
ROWS = fixtures.FIXSRC_LEGS[:3]  # the gpu row too: the engine's patch must apply to a leg
DONE = re.compile(r"^\[build\] (\S+) done in ([0-9.]+) s$")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sleep", type=float, default=4.0, help="seconds each build.py sleeps (default 4)")
    parser.add_argument("--jobs", type=int, default=4, help="scons -j (default 4)")
    parser.add_argument("--work", type=Path, help="scratch dir (default: a temp dir)")
    parser.add_argument("--keep", action="store_true", help="keep the scratch dir")
    options = parser.parse_args()
    work = options.work or Path(tempfile.mkdtemp(prefix="anira-heavy-"))
    work.mkdir(parents=True, exist_ok=True)
    try:
        with fixtures.Server(work / "served") as server:
            upstreams = fixtures.make_upstreams(work / "served", server)
            project = fixtures.make_project(work / "project", upstreams, fixbin=False, fixsrc_rows=ROWS)
            run = fixtures.scons(project, f"-j{options.jobs}", "heavy_jobs=1", *LEGS,
                                 env={"FIXSRC_BUILD_SLEEP": f"{options.sleep:g}:"})
        if run.returncode != 0:
            raise SystemExit(f"the build failed:\n{run}")
        held = {m.group(1): float(m.group(2)) for m in map(DONE.match, run.stdout.splitlines()) if m}
        spans = [_sleep_span(project, leg) for leg in LEGS]
        overlap = max(0.0, min(end for _, end in spans) - max(start for start, _ in spans))
        waits = run.output.count("waiting for a heavy-build slot")
        print(f"two heavy legs, -j{options.jobs} heavy_jobs=1, each build.py sleeping {options.sleep:g} s:")
        print(f"  wall time: {run.seconds:.1f} s")
        for leg in LEGS:
            print(f"  [build] {leg}: held its job {held.get(leg, float('nan')):.1f} s")
        print(f"  job-seconds held by build steps: {sum(held.values()):.1f} s "
              f"(the builds' own work: about {2 * options.sleep:g} s plus two compiles)")
        print(f"  the two builds overlapped: {overlap:.1f} s; 'waiting for a heavy-build slot' said {waits} times")
    finally:
        if options.keep:
            print(f"scratch kept in {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)


def _sleep_span(project: Path, leg: str) -> tuple[float, float]:
    """When the leg's build.py began to sleep (its SLEEPING file) and when its build step ended
    (its record written)."""
    steps = project / "build" / "legs" / leg
    sleeping = next(steps.glob("work/*/SLEEPING"))
    return sleeping.stat().st_mtime, (steps / "steps" / "build.json").stat().st_mtime


if __name__ == "__main__":
    main()
