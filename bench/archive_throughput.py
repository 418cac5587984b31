#!/usr/bin/env python3
"""Time our parallel zip writer against `zip -r -q` and `cmake -E tar --format=zip`.

    python bench/archive_throughput.py                # generate a ~500 MB tree in a temp dir
    python bench/archive_throughput.py --tree DIR     # archive an existing staged tree

Each tool runs once, as its own process (so wall time includes interpreter start-up and
peak RSS is per tool), with its output under a temp dir. Prints numbers, asserts nothing.
MB/s is input MB per wall second. On a shared machine wall time moves with other load;
cpu s (user + sys) is the steadier figure.
"""
from __future__ import annotations

import argparse
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
MB = 1_000_000


@dataclass(frozen=True)
class Result:
    tool: str
    wall_s: float
    cpu_s: float
    peak_rss_mb: float
    output_bytes: int


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tree", type=Path, help="archive this tree instead of a generated one")
    parser.add_argument("--size-mb", type=int, default=500, help="size of the generated tree")
    parser.add_argument("--work", type=Path, default=None, help="scratch dir (default: a temp dir)")
    parser.add_argument("--threads", type=int, default=None, help="our deflate threads (default: all cores)")
    parser.add_argument("--generate-only", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.generate_only:
        generate_tree(args.generate_only, args.size_mb * MB)
        return

    scratch = Path(tempfile.mkdtemp(prefix="archive-bench-", dir=args.work))
    try:
        if args.tree:
            tree = args.tree.resolve()
        else:
            # In a child process, so the generator's memory is not in the tools' peak RSS
            # (a fork copies the parent's pages before exec).
            tree = scratch / "tree"
            subprocess.run([sys.executable, __file__, "--generate-only", str(tree),
                            "--size-mb", str(args.size_mb)], check=True)
        input_bytes, file_count = tree_size(tree)
        print(f"tree {tree}: {file_count} files, {input_bytes / MB:.1f} MB, cores {os.cpu_count()}")
        results = [
            run_ours(tree, scratch / "ours.zip", args.threads),
            run_tool("zip -r -q -y", ["zip", "-r", "-q", "-y", str(scratch / "zip.zip"), "."], tree,
                     scratch / "zip.zip"),
            run_tool("cmake -E tar --format=zip",
                     ["cmake", "-E", "tar", "cf", str(scratch / "cmake.zip"), "--format=zip",
                      *sorted(os.listdir(tree))], tree, scratch / "cmake.zip"),
        ]
        report(results, input_bytes)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def run_ours(tree: Path, out: Path, threads: int | None) -> Result:
    code = ("import sys; sys.path.insert(0, sys.argv[1]);"
            "from backends.steps.archive import write_archive;"
            "write_archive(sys.argv[2], sys.argv[3], 'zip', threads=int(sys.argv[4]) or None)")
    command = [sys.executable, "-c", code, str(REPO / "site_scons"), str(tree), str(out), str(threads or 0)]
    label = f"write_archive zip (threads={threads or os.cpu_count()})"
    return run_tool(label, command, tree, out)


def run_tool(label: str, command: list[str], cwd: Path, out: Path) -> Result:
    if shutil.which(command[0]) is None:
        print(f"{label}: {command[0]} not found, skipped")
        return Result(label, float("nan"), float("nan"), float("nan"), 0)
    start = time.perf_counter()
    process = subprocess.Popen(command, cwd=cwd)
    _, status, usage = os.wait4(process.pid, 0)
    wall = time.perf_counter() - start
    process.returncode = os.waitstatus_to_exitcode(status)
    if process.returncode != 0:
        print(f"{label}: exit status {process.returncode}")
    return Result(label, wall, usage.ru_utime + usage.ru_stime, usage.ru_maxrss / 1024,
                  out.stat().st_size if out.exists() else 0)


def report(results: list[Result], input_bytes: int) -> None:
    ours = results[0]
    print(f"{'tool':38} {'wall s':>8} {'cpu s':>7} {'MB/s':>7} {'peak MB':>8} {'output bytes':>14} "
          f"{'wall/ours':>10} {'bytes/ours':>10}")
    for result in results:
        print(f"{result.tool:38} {result.wall_s:8.2f} {result.cpu_s:7.2f} {input_bytes / MB / result.wall_s:7.1f} "
              f"{result.peak_rss_mb:8.1f} {result.output_bytes:14,} "
              f"{result.wall_s / ours.wall_s:10.3f} "
              f"{result.output_bytes / ours.output_bytes if ours.output_bytes else float('nan'):10.4f}")


def tree_size(tree: Path) -> tuple[int, int]:
    total = count = 0
    for directory, _, files in os.walk(tree):
        for name in files:
            path = os.path.join(directory, name)
            if not os.path.islink(path):
                total += os.path.getsize(path)
                count += 1
    return total, count


# --- a libtorch-shaped tree: thousands of small headers, one huge library ------------------
# libtorch 2.13 CPU: include 62 MB in ~9k headers, lib 447 MB (libtorch_cpu.so ~430 MB),
# bin 50 MB; deflate -6 keeps 27 % at ~33 MB/s. The synthetic data below keeps ~37 % at a
# similar speed; the shape is scaled to --size-mb.


def generate_tree(root: Path, target_bytes: int) -> Path:
    started = time.perf_counter()
    rng = random.Random(20260101)
    source = semi_compressible_block(rng, 16 << 20)
    scale = target_bytes / 560e6
    plan: list[tuple[str, str, int]] = []
    for index in range(max(1, int(9000 * scale))):
        plan.append((f"include/torch/d{index % 97:02}", f"h{index:05}.h", rng.randint(300, 13_000)))
    for index in range(max(1, int(30 * scale))):
        plan.append(("share/cmake/Torch", f"c{index:03}.cmake", rng.randint(1_000, 20_000)))
    for index in range(4):
        plan.append(("bin", f"tool{index}", int(12e6 * scale)))
    for index in range(12):
        plan.append(("lib", f"libdep{index:02}.so", int(rng.randint(500_000, 3_000_000) * scale)))
    rest = target_bytes - sum(size for _, _, size in plan)
    plan.append(("lib", "libtorch_cpu.so", max(rest, 0)))
    for folder, name, size in plan:
        (root / folder).mkdir(parents=True, exist_ok=True)
        path = root / folder / name
        with open(path, "wb") as out:
            remaining = size
            while remaining:
                offset = rng.randrange(len(source) - (1 << 20))
                piece = source[offset:offset + min(remaining, 1 << 20)]
                out.write(piece)
                remaining -= len(piece)
        if folder in ("bin", "lib"):
            path.chmod(0o755)
    os.symlink("libtorch_cpu.so", root / "lib" / "libtorch_cpu.so.2")
    print(f"generated {root} in {time.perf_counter() - started:.1f} s")
    return root


def semi_compressible_block(rng: random.Random, size: int) -> bytes:
    """Identifier text, opcode-like runs, a little noise and zero padding (~37 % after -6)."""
    words = [bytes(rng.choices(b"abcdefghijklmnopqrstuvwxyz_", k=rng.randint(2, 12))) for _ in range(3000)]
    opcodes = [rng.randbytes(rng.choice((2, 3, 4, 5, 6))) for _ in range(60)]
    parts: list[bytes] = []
    length = 0
    while length < size:
        kind = rng.random()
        if kind < 0.25:
            part = b" ".join(rng.choices(words, k=400)) + b";\n"
        elif kind < 0.75:
            part = b"".join(rng.choices(opcodes, k=rng.randint(128, 1024)))
        elif kind < 0.78:
            part = rng.randbytes(rng.randint(512, 4096))
        else:
            part = bytes(rng.randint(256, 4096))
        parts.append(part)
        length += len(part)
    return b"".join(parts)[:size]


if __name__ == "__main__":
    main()
