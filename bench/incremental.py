#!/usr/bin/env python3
"""How much of the graph one patch edit reruns (prints numbers, asserts nothing).

    python bench/incremental.py [--work DIR] [--keep]

Builds the fixture project of tests/integration/fixtures.py (fixsrc: static, shared,
gpu-shared, static-debug legs from source, the gpu one patched; fixbin: one prebuilt
leg), edits the gpu-only patch script so the built binary changes, and reruns. A clean
build runs every step once, so its step lines count the steps in the graph (M); the
rerun's step lines are the steps the edit reran (N). SCons's `--debug=explain` reasons
for the rerun are printed too.
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

ARGS = ("engine=fixsrc,fixbin", "flavor=all")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--work", type=Path, help="scratch dir (default: a temp dir)")
    parser.add_argument("--keep", action="store_true", help="keep the scratch dir")
    options = parser.parse_args()
    work = options.work or Path(tempfile.mkdtemp(prefix="anira-incremental-"))
    work.mkdir(parents=True, exist_ok=True)
    try:
        with fixtures.Server(work / "served") as server:
            upstreams = fixtures.make_upstreams(work / "served", server)
            project = fixtures.make_project(work / "project", upstreams)
            clean = fixtures.scons(project, *ARGS)
            if clean.returncode != 0:
                raise SystemExit(f"clean build failed:\n{clean}")
            total = clean.step_lines()

            patch = project / "engines/fixsrc/patches/register_coreml.py"
            patch.write_text(patch.read_text().replace(fixtures.PATCH_NOTE, "register_coreml v2"))
            rerun = fixtures.scons(project, "--debug=explain", *ARGS)
            if rerun.returncode != 0:
                raise SystemExit(f"rerun failed:\n{rerun}")
            reran = rerun.step_lines()
            null = fixtures.scons(project, *ARGS)

        print(f"clean build: {len(total)} steps in {clean.seconds:.1f} s "
              f"({len(fixtures.FIXSRC_LEG_IDS) + len(fixtures.FIXBIN_LEG_IDS)} legs)")
        print("rerun after the edit:")
        for line in reran:
            print(f"  {line}")
        reasons = [line for line in rerun.stdout.splitlines() if line.startswith("scons: rebuilding")]
        print(f"--debug=explain: {len(reasons)} targets rebuilt, e.g.")
        for line in reasons[:3]:
            print("  " + re.sub(r"\s+", " ", line)[:160])
        print(f"steps rerun after a one-patch edit: {len(reran)} of {len(total)} steps in the graph "
              f"({rerun.seconds:.1f} s; then a null build: {len(null.step_lines())} steps, {null.seconds:.2f} s)")
    finally:
        if options.keep:
            print(f"scratch kept in {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
