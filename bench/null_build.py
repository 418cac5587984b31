#!/usr/bin/env python3
"""Null-build wall times of the step graph (prints numbers, asserts nothing).

    python bench/null_build.py [--runs 5] [--work DIR] [--keep] [--quickstart | --quickstart-only]

(a) one real-ish leg: the fixsrc fixture's gpu-shared leg (fetch, extract, patch, build,
    stage, archive, verify, smoke), built once, then `scons -Q <leg>` timed;
(b) a whole-matrix-sized graph: a generated fixture project of 112 prebuilt legs (14
    fixbin-style engines x 8 legs on linux-x86_64 and linux-aarch64, whose libraries are
    real ELF binaries of each architecture, as verify requires; 28 upstream archives),
    built once, then `scons -Q platform=all flavor=all` timed;
(c) `scons -Q plan=1` over the real project's whole matrix (read the matrix, plan every
    leg, print the plans; no graph is declared and nothing is written).
(d) with --quickstart: the quick start leg (LibTorch Linux x86_64 from the torch 2.13.0 CPU
    wheel, tools/quickstart.sh's command with a signed directory binary cache, as
    bench/quickstart.py runs it), built once, then its null build timed, and its share of
    that cold build (target: <= 0.6 s, <= 1 % of cold).

Each time is the median of --runs runs of a fresh `python -m SCons` process. The
fixture upstreams are served from 127.0.0.1 (tests/integration/fixtures.py).
"""
from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests" / "integration"))

import fixtures  # noqa: E402
from fixtures import LegRow  # noqa: E402

ARCHES = {"linux-x86_64": "x86_64", "linux-aarch64": "aarch64"}
MATRIX_ENGINES = tuple(f"fixbin{letter}" for letter in "abcdefghijklmn")


def timed(project: Path, *args: str, runs: int) -> tuple[float, list[float]]:
    times = []
    for _ in range(runs):
        run = fixtures.scons(project, *args)
        if run.returncode != 0 or run.step_lines():
            raise SystemExit(f"not a null build:\n{run}")
        times.append(run.seconds)
    return statistics.median(times), times


def build_once(project: Path, *args: str) -> float:
    run = fixtures.scons(project, "-j2", *args)
    if run.returncode != 0:
        raise SystemExit(f"build failed:\n{run}")
    return run.seconds


def matrix_rows(engine: str) -> list[LegRow]:
    """8 prebuilt legs: 2 platforms x shared/static, gpu (vulkan) x 2 kinds and cuda on x86_64,
    gpu shared on aarch64. Only linux-x86_64 legs run their smoke here."""
    def asset(platform: str) -> dict[str, str]:
        return {"asset": f"{engine}-{platform}", "ext": "tgz"}

    rows = [LegRow(platform=platform, kind=("shared", "static"), source="prebuilt", params=asset(platform),
                   can_run=platform == "linux-x86_64") for platform in ARCHES]
    rows.append(LegRow(platform="linux-x86_64", kind=("shared", "static"), flavor="gpu", accelerator="vulkan",
                       source="prebuilt", params=asset("linux-x86_64")))
    rows.append(LegRow(platform="linux-x86_64", kind="shared", flavor="cuda", accelerator="cuda",
                       source="prebuilt", params=asset("linux-x86_64")))
    rows.append(LegRow(platform="linux-aarch64", kind="shared", flavor="gpu", accelerator="vulkan",
                       source="prebuilt", params=asset("linux-aarch64"), can_run=False))
    return rows


def matrix_project(work: Path, server: fixtures.Server) -> tuple[Path, int]:
    trees = {platform: fixtures.fixbin_tree(work / f"fixbin-tree-{arch}", arch="" if arch == "x86_64" else arch)
             for platform, arch in ARCHES.items()}
    project = fixtures.new_project(work / "matrix")
    legs = 0
    for engine in MATRIX_ENGINES:
        pins: dict[str, str] = {}
        for platform, tree in trees.items():
            pins |= fixtures.make_fixbin_release(server.root, assets=[f"{engine}-{platform}"], tree=tree)
        rows = matrix_rows(engine)
        fixtures.write_fixbin(project, f"{server.base_url}/{{asset}}-{{version}}.{{ext}}", pins, rows=rows,
                              name=engine)
        for row in rows:
            kinds = row.kind if isinstance(row.kind, tuple) else (row.kind,)
            configs = row.config if isinstance(row.config, tuple) else (row.config,)
            legs += len(kinds) * len(configs)
    return project, legs


def quickstart_null(work: Path, runs: int) -> None:
    import quickstart  # bench/quickstart.py, beside this script

    wheel = quickstart.quickstart_wheel(None)
    scons, args, cold = quickstart.cold_build(work / "quickstart", wheel, jobs=2)
    first = quickstart.null_build(scons, args)  # re-hashes what the build wrote (bench/quickstart.py)
    times = [quickstart.null_build(scons, args) for _ in range(runs)]
    median = statistics.median(times)
    print(f"(d) null build, the quick start leg ({quickstart.LEG}): median {median:.2f} s of {runs} "
          f"[{', '.join(f'{t:.2f}' for t in times)}] = {100 * median / cold:.1f} % of its cold build {cold:.1f} s "
          f"(target <= 0.6 s, <= 1 %); the first, after the build: {first:.2f} s; load average "
          f"{os.getloadavg()[0]:.2f} on {os.cpu_count()} cores")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--work", type=Path, help="scratch dir (default: a temp dir)")
    parser.add_argument("--keep", action="store_true", help="keep the scratch dir")
    quick = parser.add_mutually_exclusive_group()
    quick.add_argument("--quickstart", action="store_true", help="also (d), the quick start leg (~1 min cold)")
    quick.add_argument("--quickstart-only", action="store_true", help="only (d)")
    options = parser.parse_args()
    if os.environ.get("PYTHONDONTWRITEBYTECODE"):
        print("note: PYTHONDONTWRITEBYTECODE is set, so every run compiles the project's modules again "
              "(about 0.1 s more per run than a user sees); unset it for representative numbers")
    work = options.work or Path(tempfile.mkdtemp(prefix="anira-null-build-"))
    work.mkdir(parents=True, exist_ok=True)
    try:
        if options.quickstart_only:
            quickstart_null(work, options.runs)
            return
        with fixtures.Server(work / "served") as server:
            upstreams = fixtures.make_upstreams(work / "served", server)

            leg = "fixsrc-linux-x86_64-gpu-shared"
            project = fixtures.make_project(work / "one-leg", upstreams, fixbin=False)
            first = build_once(project, leg)
            median, times = timed(project, leg, runs=options.runs)
            print(f"(a) null build, one leg ({leg}, 8 steps): median {median:.2f} s of {options.runs} "
                  f"[{', '.join(f'{t:.2f}' for t in times)}]; first build {first:.1f} s")

            project, legs = matrix_project(work, server)
            first = build_once(project, "platform=all", "flavor=all")
            steps = len(list(project.glob("build/legs/*/steps/*.json")))
            median, times = timed(project, "platform=all", "flavor=all", runs=options.runs)
            print(f"(b) null build, {legs} prebuilt legs ({len(MATRIX_ENGINES)} engines, {steps} leg step manifests): "
                  f"median {median:.2f} s of {options.runs} [{', '.join(f'{t:.2f}' for t in times)}]; "
                  f"first build {first:.1f} s")

        times = []
        for _ in range(options.runs):
            started = time.monotonic()
            done = subprocess.run(fixtures.scons_argv("plan=1"), cwd=REPO, capture_output=True, text=True)
            times.append(time.monotonic() - started)
            if done.returncode != 0:
                raise SystemExit(f"scons plan=1 failed in {REPO}:\n{done.stdout}\n{done.stderr}")
        planned = sum(1 for line in done.stdout.splitlines() if " -> dist/" in line and not line.startswith(" "))
        print(f"(c) scons -Q plan=1 over the real matrix ({planned} legs planned): median "
              f"{statistics.median(times):.2f} s of {options.runs} [{', '.join(f'{t:.2f}' for t in times)}]")
        if options.quickstart:
            quickstart_null(work, options.runs)
    finally:
        if options.keep:
            print(f"scratch kept in {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
