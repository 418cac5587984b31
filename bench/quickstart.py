#!/usr/bin/env python3
"""Benchmark: the quick start leg cold, null and restored. Prints numbers; asserts nothing.

    python3 bench/quickstart.py [--runs 3] [--jobs 2] [--wheel PATH]

The leg is tools/quickstart.sh's: LibTorch Linux x86_64 from the torch 2.13.0 CPU wheel, with
-j2. Every repetition takes a fresh scratch project and a fresh signed directory binary cache,
then times three fresh `python -m SCons` processes:

* cold:    an empty tree and an empty cache (the build stores its entry);
* null:    the same command again (no step runs), three times: the first after the build
           re-hashes what the build wrote (a digest taken within 100 ms of a file's change,
           2 s where the filesystem keeps whole seconds, is not trusted: util/digests.py),
           the next ones are the settled null build;
* restore: build/ and dist/ removed, the same command again (the entry is checked and
           restored: signature, manifest, members, contract).

It prints the median and range of each, restore/cold and null/cold, the load average (the
figures of a busy machine are not a quiet machine's) and the archive's sha256 (the same
inputs must give the same bytes).
"""
from __future__ import annotations

import argparse
import hashlib
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests" / "e2e"))
sys.path.insert(0, str(REPO / "tests"))
sys.path.insert(0, str(REPO / "site_scons"))

from scratch import Scons, scratch_project  # noqa: E402

LEG = "libtorch-linux-x86_64-shared"
VERSION = "2.13.0"
ARCHIVE = f"libtorch-{VERSION}-Linux-x86_64-shared.zip"


@dataclass
class Figures:
    cold: list[float] = field(default_factory=list)
    first_null: list[float] = field(default_factory=list)
    null: list[float] = field(default_factory=list)
    restore: list[float] = field(default_factory=list)
    digests: set[str] = field(default_factory=set)
    loads: list[float] = field(default_factory=list)


def quickstart_wheel(given: Path | None) -> Path:
    """The wheel the quick start would take: the given one, else found as the quick start finds it."""
    if given:
        return given
    import inputs
    return inputs.torch_cpu_wheel(REPO / ".cache" / "e2e")


def signed_cache(work: Path) -> tuple[str, ...]:
    from backends.cache.trust import keygen
    secret, public = keygen(work / "keys" / "cache-key")
    return f"binary_cache={work / 'binary-cache'}", f"binary_cache_key={secret}", f"binary_cache_trust={public}"


def timed(scons: Scons, args: tuple[str, ...]) -> tuple[float, subprocess.CompletedProcess[str]]:
    started = time.monotonic()
    result = scons(*args)
    return time.monotonic() - started, result


def sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        while chunk := handle.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()


def cold_build(work: Path, wheel: Path, jobs: int) -> tuple[Scons, tuple[str, ...], float]:
    """A fresh project built once into a fresh signed cache: the runner, its arguments, the time."""
    work.mkdir(parents=True)
    (work / "keys").mkdir()
    scons = Scons(scratch_project(work / "project"), work / "downloads")
    args = (LEG, f"version={VERSION}", f"origin={wheel}", f"-j{jobs}", *signed_cache(work))
    seconds, _ = timed(scons, args)
    return scons, args, seconds


def null_build(scons: Scons, args: tuple[str, ...]) -> float:
    seconds, result = timed(scons, args)
    if ran := scons.steps_run(result):
        raise SystemExit(f"not a null build: {ran} ran\n{result.stdout[-2000:]}")
    return seconds


def restore(scons: Scons, args: tuple[str, ...]) -> float:
    for name in ("build", "dist"):
        shutil.rmtree(scons.project / name, ignore_errors=True)
    seconds, result = timed(scons, args)
    if f"[restore] {LEG} done in" not in result.stdout:
        raise SystemExit("not restored from the binary cache:\n" + result.stdout[-2000:])
    return seconds


def repetition(work: Path, wheel: Path, jobs: int, figures: Figures) -> None:
    figures.loads.append(os.getloadavg()[0])
    scons, args, cold = cold_build(work, wheel, jobs)
    figures.cold.append(cold)
    figures.digests.add(sha256(scons.project / "dist" / ARCHIVE))
    figures.first_null.append(null_build(scons, args))
    figures.null.append(statistics.median(null_build(scons, args) for _ in range(2)))
    figures.restore.append(restore(scons, args))
    figures.digests.add(sha256(scons.project / "dist" / ARCHIVE))


def spread(times: list[float], digits: int = 2) -> str:
    return (f"median {statistics.median(times):.{digits}f} s "
            f"[{', '.join(f'{t:.{digits}f}' for t in times)}]")


def report(figures: Figures, wheel: Path, jobs: int) -> None:
    cold = statistics.median(figures.cold)
    print(f"quick start leg {LEG} from {wheel.name}, scons -j{jobs}, {len(figures.cold)} repetitions, "
          f"{os.cpu_count()} cores, load average at each start: {', '.join(f'{x:.2f}' for x in figures.loads)}")
    print(f"  cold    {spread(figures.cold, 1)}")
    print(f"  first null after the build {spread(figures.first_null)}")
    print(f"  null    {spread(figures.null)}  ({100 * statistics.median(figures.null) / cold:.1f} % of cold; "
          "each run's value the median of two)")
    print(f"  restore {spread(figures.restore)}")
    print(f"  restore / cold: {100 * statistics.median(figures.restore) / cold:.1f} % (target <= 3 %)")
    print(f"  archive sha256: {', '.join(sorted(figures.digests))}"
          + ("" if len(figures.digests) == 1 else "  (NOT byte-identical across runs)"))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--jobs", type=int, default=2, help="scons -j (the quick start passes 2)")
    parser.add_argument("--wheel", type=Path, help="the torch CPU wheel (default: found as the quick start finds it)")
    options = parser.parse_args()
    wheel = quickstart_wheel(options.wheel)
    figures = Figures()
    with tempfile.TemporaryDirectory(prefix="bench-quickstart-") as tmp:
        for run in range(options.runs):
            repetition(Path(tmp) / f"run-{run}", wheel, options.jobs, figures)
    report(figures, wheel, options.jobs)
    return 0


if __name__ == "__main__":
    sys.exit(main())
