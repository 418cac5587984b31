#!/usr/bin/env python3
"""Benchmark: the binary cache as CI uses it. Prints numbers; asserts nothing.

    python3 bench/binary_cache.py [--skip-libtorch | --libtorch-only] [--jobs 2]

(a) A simulated two-run CI on the fixture engines (tests/integration/fixtures.py, served
    from 127.0.0.1): run 1 builds every leg into an empty directory cache; one patch is
    edited; run 2 starts from an empty build/ and dist/ with the cache. It reports the legs
    whose key changed, the legs rebuilt (the two sets must be equal) and the restore time of
    every restored leg (from its `[restore] ... done in` line).
(b) The real LibTorch Linux x86_64 leg (PyTorch's CPU wheel as its origin, as in the quick
    start, with -j2 as the quick start and CI run it): a cold build into a directory cache,
    then a restore into a clean tree (the entry's signature, manifest, every member and the
    contract checked, in one pass over the archive); restore time against cold time
    (target: at most 3 %).

Both sign what they store and trust only that key, as CI does (docs/binary-cache.md).
"""
from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests" / "integration"))
sys.path.insert(0, str(REPO / "tests" / "e2e"))
sys.path.insert(0, str(REPO / "tests"))
sys.path.insert(0, str(REPO / "site_scons"))

import fixtures  # noqa: E402
from backends.cache.trust import keygen

DONE = re.compile(r"^\[(\w+)\] (\S+) done in ([0-9.]+) s$")
ARGS = ("engine=fixsrc,fixbin", "flavor=all")


def _signed_cache(cache: Path, keys: Path) -> tuple[str, str, str]:
    secret, public = keygen(keys / "cache-key")
    return f"binary_cache={cache}", f"binary_cache_key={secret}", f"binary_cache_trust={public}"


def _clean(project: Path) -> None:
    shutil.rmtree(project / "build", ignore_errors=True)
    shutil.rmtree(project / "dist", ignore_errors=True)


def _keys(project: Path) -> dict[str, str]:
    run = fixtures.scons(project, "ci-matrix", *ARGS)
    return {entry["id"]: entry["key"] for entry in json.loads(run.stdout)["include"]}


def _states(stdout: str, state: str) -> set[str]:
    return {line.split()[1] for line in stdout.splitlines() if line.strip().startswith(f"{state} ")}


def _restore_times(stdout: str) -> dict[str, float]:
    return {m.group(2): float(m.group(3)) for m in map(DONE.match, stdout.splitlines()) if m and m.group(1) == "restore"}


def simulated_ci(work: Path) -> None:
    served = work / "served"
    with fixtures.Server(served) as server:
        upstreams = fixtures.make_upstreams(served, server)
        project = fixtures.make_project(work / "project", upstreams)
        cache = _signed_cache(work / "binary-cache", work / "keys")
        started = time.monotonic()
        first = fixtures.scons(project, *ARGS, *cache)
        cold = time.monotonic() - started
        assert first.returncode == 0, str(first)
        before = _keys(project)
        patch = project / "engines/fixsrc/patches/register_coreml.py"
        patch.write_text(patch.read_text().replace(fixtures.PATCH_NOTE, "register_coreml v2"))
        after = _keys(project)
        changed = {leg for leg in before if before[leg] != after[leg]}
        _clean(project)
        started = time.monotonic()
        second = fixtures.scons(project, *ARGS, *cache)
        warm = time.monotonic() - started
        assert second.returncode == 0, str(second)
    rebuilt = _states(second.stdout, "published")
    restored = _states(second.stdout, "restored")
    print(f"(a) simulated CI on {len(before)} fixture legs, one patch edited between the runs")
    print(f"    run 1 (empty cache): {cold:.1f} s; run 2 (clean tree, cache): {warm:.1f} s")
    print(f"    legs whose key changed: {len(changed)} {sorted(changed)}")
    print(f"    legs rebuilt:           {len(rebuilt)} {sorted(rebuilt)}  (equal: {rebuilt == changed})")
    print(f"    legs restored:          {len(restored)}")
    for leg, seconds in sorted(_restore_times(second.stdout).items()):
        print(f"      restore {leg:40s} {seconds:6.2f} s")


def libtorch(work: Path, jobs: int) -> None:
    import inputs
    from scratch import Scons, scratch_project

    wheel = inputs.torch_cpu_wheel(REPO / ".cache" / "e2e")
    leg = "libtorch-linux-x86_64-shared"
    scons = Scons(scratch_project(work / "project"), work / "downloads")
    args = (leg, "version=2.13.0", f"origin={wheel}", f"-j{jobs}",
            *_signed_cache(work / "binary-cache", work / "keys"))
    load = os.getloadavg()[0]
    started = time.monotonic()
    scons(*args)
    cold = time.monotonic() - started
    _clean(scons.project)
    started = time.monotonic()
    restored = scons(*args)
    warm = time.monotonic() - started
    times = _restore_times(restored.stdout)
    print(f"(b) {leg} from {wheel.name}, scons -j{jobs}, load average {load:.2f} at the start "
          f"on {os.cpu_count()} cores")
    print(f"    cold build into the cache: {cold:.1f} s")
    print(f"    restore into a clean tree: {warm:.2f} s (the restore step {times.get(leg, float('nan')):.2f} s, the "
          "rest SCons start-up, key, lookup, the entry's check and publish)")
    print(f"    restore / cold: {100 * warm / cold:.1f} % (target <= 3 %)")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    only = parser.add_mutually_exclusive_group()
    only.add_argument("--skip-libtorch", action="store_true", help="only the fixture simulation (a)")
    only.add_argument("--libtorch-only", action="store_true", help="only the LibTorch leg (b)")
    parser.add_argument("--jobs", type=int, default=2, help="scons -j of (b) (the quick start and CI pass 2)")
    options = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-binary-cache-") as tmp:
        if not options.libtorch_only:
            simulated_ci(Path(tmp) / "ci")
        if not options.skip_libtorch:
            libtorch(Path(tmp) / "libtorch", options.jobs)
    return 0


if __name__ == "__main__":
    sys.exit(main())
