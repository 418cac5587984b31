"""The static-library closure of a Bazel target, for merging into one archive (docs/upstream.md#litert-closure).

    python -m backends.steps.bazel_closure labels --query Q --out FILE \\
        --bazel EXE --output-base DIR -- <build flags...>
    python -m backends.steps.bazel_closure collect --target T --out FILE \\
        --bazel EXE --output-base DIR -- <build flags...>

`labels` writes the unique labels `cquery Q` matches, without their configuration hash:
the `--target_pattern_file` of the build that materialises every library archive (the
top-level build leaves dependencies as objects). `collect` lists the archives of T's
link closure (CcInfo linker inputs) that exist under the execution root, as absolute
paths one a line: what `backends.steps.bundle --from-list` merges.

Every command gets the same flags as the build, so the Bazel server keeps its analysis
cache, and the same `--output_base` (a startup option: another one is another server).
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

from backends.runner.run import resolve_program
from backends.util.errors import BackendsError
from backends.util.files import atomic_write_text

# The LiteRT recipe also writes this collector into the Android container's build script,
# where this package is not available.
COLLECT_STAR = """def format(target):
    ps = providers(target)
    cc = ps.get("CcInfo") if ps else None
    if cc == None:
        return ""
    out = []
    for li in cc.linking_context.linker_inputs.to_list():
        for lib in li.libraries:
            for f in [lib.pic_static_library, lib.static_library]:
                if f != None:
                    out.append(f.path)
    return "\\n".join(out)
"""


class ClosureError(BackendsError, RuntimeError):
    """A Bazel query failed or found nothing; the message says which and what to check."""


def bazel_output(bazel: str, output_base: str, arguments: Sequence[str]) -> str:
    """stdout of `bazel --output_base=<dir> <arguments>`; Bazel's progress (stderr) goes to
    ours, for the step log."""
    program = resolve_program(bazel, os.environ.get("PATH"))
    if program is None:
        raise ClosureError(f"{bazel} not found on PATH; install bazelisk (npm i -g @bazel/bazelisk) or pass --bazel")
    argv = [program, f"--output_base={output_base}", *arguments]
    try:
        completed = subprocess.run(argv, stdout=subprocess.PIPE, text=True, check=False)
    except OSError as error:
        raise ClosureError(f"cannot run {bazel}: {error}; install bazelisk or pass --bazel") from None
    if completed.returncode != 0:
        raise ClosureError(f"`{' '.join(argv)}` failed with exit code {completed.returncode} "
                           "(Bazel's messages are above)")
    return completed.stdout


def parse_labels(output: str) -> list[str]:
    """`cquery --output=label` lines ("//a:b (3f2c1e)") to sorted unique labels."""
    return sorted({line.split()[0] for line in output.splitlines() if line.strip()})


def labels(bazel: str, output_base: str, query: str, flags: Sequence[str]) -> list[str]:
    found = parse_labels(bazel_output(bazel, output_base, ["cquery", *flags, query, "--output=label"]))
    if not found:
        raise ClosureError(f"cquery {query!r} matched no targets; check the query and the flags")
    return found


def existing_archives(printed: str, execution_root: Path) -> tuple[list[Path], list[str]]:
    """(archives that exist, printed paths that do not), the printed paths being relative
    to the execution root, deduplicated and sorted."""
    kept: list[Path] = []
    dropped: list[str] = []
    for relative in sorted({line.strip() for line in printed.splitlines() if line.strip()}):
        path = execution_root / relative
        if path.is_file():
            kept.append(path)
        else:
            dropped.append(relative)
    return kept, dropped


def collect(bazel: str, output_base: str, target: str, flags: Sequence[str]) -> list[Path]:
    """The absolute paths of the materialised static archives of `target`'s closure."""
    with tempfile.TemporaryDirectory(prefix="anira-closure-") as scratch:
        star = Path(scratch) / "collect_static_libs.star"
        star.write_text(COLLECT_STAR, encoding="utf-8")
        printed = bazel_output(bazel, output_base, ["cquery", *flags, target, "--output=starlark",
                                                    f"--starlark:file={star}"])
    root_text = bazel_output(bazel, output_base, ["info", *flags, "execution_root"]).strip()
    if not root_text:
        raise ClosureError(f"`{bazel} info execution_root` printed nothing")
    execution_root = Path(root_text.splitlines()[-1].strip())
    kept, dropped = existing_archives(printed, execution_root)
    for relative in dropped:
        print(f"WARNING: closure archive not built, dropping from merge: {relative}", file=sys.stderr)
    if not kept:
        raise ClosureError(f"no static archives materialised for {target} (under {execution_root}); "
                           "did `closure build` over the labels file run with the same flags?")
    return kept


def _split_flags(argv: Sequence[str]) -> tuple[list[str], list[str]]:
    """(our options, Bazel flags): everything after the first `--` goes to Bazel verbatim."""
    argv = list(argv)
    if "--" in argv:
        cut = argv.index("--")
        return argv[:cut], argv[cut + 1:]
    return argv, []


def _argument_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m backends.steps.bazel_closure",
                                     description=__doc__.split("\n\n")[0],
                                     epilog="Bazel flags follow a `--`.")
    sub = parser.add_subparsers(dest="command", required=True)
    for name, key, what in (("labels", "--query", "the cquery expression, e.g. kind('cc_library rule', deps(//t))"),
                            ("collect", "--target", "the top-level target whose closure to list")):
        command = sub.add_parser(name)
        command.add_argument(key, required=True, help=what)
        command.add_argument("--out", type=Path, required=True, help="the file to write")
        command.add_argument("--bazel", required=True, help="the bazel/bazelisk executable")
        command.add_argument("--output-base", required=True, help="Bazel's --output_base")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    ours, flags = _split_flags(sys.argv[1:] if argv is None else argv)
    args = _argument_parser().parse_args(ours)
    try:
        if args.command == "labels":
            lines = labels(args.bazel, args.output_base, args.query, flags)
        else:
            lines = [str(path) for path in collect(args.bazel, args.output_base, args.target, flags)]
    except ClosureError as error:
        print(f"ERROR: {error}", file=sys.stderr)
        return 1
    args.out.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(args.out, "".join(f"{line}\n" for line in lines))
    print(f"{args.command}: wrote {len(lines)} entries to {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
