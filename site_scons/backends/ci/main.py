"""CI helpers the workflows call, so their decisions live in tested Python, not YAML.

    python -m backends.ci changed-engines --base REF --head REF
        the `engine=` value a pull request builds: a comma list, `all`, or `none`
    python -m backends.ci plan-outputs --release true|false [--matrix FILE] [--binary-cache LOC]
        split `scons -Q ci-matrix` JSON into the job outputs of the plan job: the legs whose
        inputs are all pinned run; the others are listed (job summary, one warning) and left
        out, or, for a release (`--release true`), fail the job before anything is built.
        With a binary cache, the legs whose key it holds (signed by a trusted key) get no
        runner job: they are the `hits` (cache_hits.py)
    python -m backends.ci restore --hits FILE --binary-cache LOC [--dist DIR] [--published]
        download the hits' entries, check each as a restore does (signature, manifest,
        members, contract) and publish them into dist/, building nothing: what an aggregate
        does with its hit inputs, and a tag's release job with every published hit
    python -m backends.ci setup --leg ID
        what a leg's runner must install, derived from the leg's plan

Outputs go to `$GITHUB_OUTPUT` when it is set, else to stdout (`key=value` lines); the
job summary to `$GITHUB_STEP_SUMMARY`, else to stderr.
Run with `PYTHONPATH=site_scons` from the project root.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING, Iterable, Mapping, Sequence, TextIO

from backends.model.matrix import Matrix, engine_names, load_matrix
from backends.model.plan import Plan
from backends.model.recipes import plan_all
from backends.model.runner_needs import Setup, compiler_cache_max, leg_setup
from backends.util.errors import BackendsError

if TYPE_CHECKING:
    from backends.ci import cache_hits as ci_cache
    from backends.pins.inputs import Input

# A change under any of these can alter every leg: build everything.
SHARED_PREFIXES: tuple[str, ...] = ("site_scons/", ".github/", "tools/")
SHARED_FILES: tuple[str, ...] = ("SConstruct", "requirements.txt")
# Per-engine trees: `<dir>/<engine>/...`; `variants/<engine>.toml` is handled apart.
ENGINE_DIRS: tuple[str, ...] = ("engines", "smoke")

# GitHub-hosted runner labels GitHub currently offers (docs: "GitHub-hosted runners",
# standard and arm64 images).
GITHUB_HOSTED_LABELS: frozenset[str] = frozenset({
    "ubuntu-latest", "ubuntu-24.04", "ubuntu-24.04-arm",
    "macos-latest", "macos-26", "macos-15", "macos-14", "macos-15-intel",
    "windows-latest", "windows-2025", "windows-2022", "windows-11-arm",
})
# Labels GitHub has retired or deprecated (Ubuntu 22.04 since September 2026), with the current
# image that replaces each: a job on a retired label waits for a runner that never comes, or
# fails at once, and a deprecated one is about to.
RETIRED_LABELS: Mapping[str, str] = {
    "ubuntu-18.04": "ubuntu-24.04", "ubuntu-20.04": "ubuntu-24.04",
    "ubuntu-22.04": "ubuntu-24.04", "ubuntu-22.04-arm": "ubuntu-24.04-arm",
    "macos-10.15": "macos-15-intel", "macos-11": "macos-15-intel", "macos-12": "macos-15-intel",
    "macos-13": "macos-15-intel",
    "windows-2016": "windows-2025", "windows-2019": "windows-2025",
}

ALL = "all"
NONE = "none"


class CiError(BackendsError, RuntimeError):
    """A CI decision that cannot be made; the message says why and what to do."""


class UnpinnedRelease(CiError):
    """A release whose selection has legs with unpinned inputs: nothing may be built."""


# -- changed-engines ------------------------------------------------------------------------

def engines_for_paths(paths: Iterable[str], engines: Sequence[str],
                      readers: Mapping[str, Iterable[str]] | None = None) -> str:
    """The `engine=` filter for a set of changed paths: `all`, `none`, or a comma list
    in the matrix's engine order. `readers` names, per repository file, further engines
    whose legs read it (`shared_files`): the LiteRT smoke runs the TFLite smoke's model."""
    touched: set[str] = set()
    for raw in paths:
        path = PurePosixPath(raw)
        parts = path.parts
        if not parts:
            continue
        touched.update((readers or {}).get(raw, ()))
        if raw in SHARED_FILES or any(raw.startswith(prefix) for prefix in SHARED_PREFIXES):
            return ALL
        if parts[0] == "variants" and len(parts) == 2 and path.suffix == ".toml":
            if path.stem not in engines:
                return ALL  # a new engine's data: its legs are not known to the base
            touched.add(path.stem)
        elif parts[0] in ENGINE_DIRS and len(parts) >= 2:
            # A file beside the engine dirs (engines/README.md, smoke/common/) is shared.
            if len(parts) == 2 or parts[1] not in engines:
                return ALL
            touched.add(parts[1])
    if not touched:
        return NONE
    if touched >= set(engines):
        return ALL
    return ",".join(engine for engine in engines if engine in touched)


def changed_paths(base: str, head: str, cwd: Path) -> list[str]:
    """Paths changed on `head` since it forked from `base` (what a pull request shows);
    a rename lists both its old and new path."""
    argv = ["git", "diff", "--name-only", "--no-renames", f"{base}...{head}"]
    result = subprocess.run(argv, cwd=cwd, capture_output=True, text=True)
    if result.returncode != 0:
        raise CiError(f"`{' '.join(argv)}` failed: {result.stderr.strip()}; the checkout needs both commits and "
                      "their merge base (actions/checkout with fetch-depth: 0)")
    return [line for line in result.stdout.splitlines() if line]


def shared_files(plans: Iterable[Plan]) -> dict[str, frozenset[str]]:
    """Repository files each engine's legs read outside its own directories, from the plans:
    the smoke models (path -> engines)."""
    readers: dict[str, set[str]] = {}
    for plan in plans:
        if plan.smoke is not None and plan.smoke.model:
            readers.setdefault(plan.smoke.model_path, set()).add(plan.leg.engine)
    return {path: frozenset(engines) for path, engines in readers.items()}


def changed_engines(base: str, head: str, root: Path) -> str:
    paths = changed_paths(base, head, root)
    try:
        readers = shared_files(plan_all(load_matrix(root)))
    except Exception as error:  # noqa: BLE001 -- broken data or recipe at head: the plan job reports it
        print(f"warning: cannot plan the legs at {head} ({type(error).__name__}: {error}); selecting every engine",
              file=sys.stderr)
        return ALL
    return engines_for_paths(paths, engine_names(root), readers)


# -- plan-outputs ---------------------------------------------------------------------------

def matrix_entries(payload: object) -> list[dict[str, object]]:
    """The entries of `scons ci-matrix` output ({"include": [...]}, or a bare list)."""
    entries = payload.get("include") if isinstance(payload, dict) else payload
    if not isinstance(entries, list) or not all(isinstance(e, dict) for e in entries):
        raise CiError('expected the JSON of `scons -Q ci-matrix`: {"include": [{...}, ...]}')
    return entries


def _needs(entry: Mapping[str, object]) -> list[str]:
    """An aggregate entry's input legs (`needs`); none for a leg that builds."""
    needs = entry.get("needs", [])
    return [str(need) for need in needs] if isinstance(needs, (list, tuple)) else []


def check_entries(entries: Sequence[Mapping[str, object]]) -> None:
    """Every runner is a GitHub-hosted label; every aggregate's inputs are in the selection."""
    ids = {str(entry["id"]) for entry in entries}
    for entry in entries:
        if entry["runner"] in RETIRED_LABELS:
            raise CiError(f"{entry['id']}: runner {entry['runner']!r} is retired or deprecated by GitHub; "
                          f"use {RETIRED_LABELS[str(entry['runner'])]!r} in its variants/*.toml entry")
        if entry["runner"] not in GITHUB_HOSTED_LABELS:
            raise CiError(f"{entry['id']}: runner {entry['runner']!r} is not a GitHub-hosted label "
                          f"({', '.join(sorted(GITHUB_HOSTED_LABELS))})")
        missing = [need for need in _needs(entry) if need not in ids]
        if missing:
            raise CiError(f"aggregate {entry['id']} needs {', '.join(missing)}, which the selection leaves out; "
                          "widen the filters (e.g. drop platform=) so its inputs are built too")


def plan_outputs(entries: Sequence[Mapping[str, object]],
                 hits: Mapping[str, ci_cache.Hit] | None = None) -> dict[str, str]:
    """Job outputs: the whole selection (`matrix`, what the release requires), the per-leg
    matrix and the aggregate matrix of the legs that get a runner job (the misses), and the
    `hits`, which get none. An aggregate's entry also carries `inputs`, the archives of its
    missed inputs (artifact names), and `restore`, its hit inputs, when it has any."""
    check_entries(entries)
    hits = hits or {}
    archives = {str(entry["id"]): str(entry["archive"]) for entry in entries}
    legs = [dict(entry) for entry in entries if not entry.get("needs") and str(entry["id"]) not in hits]
    aggregates = [_aggregate(entry, archives, hits) for entry in entries
                  if entry.get("needs") and str(entry["id"]) not in hits]
    return {
        "matrix": _compact({"include": list(entries)}),
        "legs": _compact({"include": legs}),
        "aggregates": _compact({"include": aggregates}),
        "has_legs": _flag(bool(legs)),
        "has_aggregates": _flag(bool(aggregates)),
        "count": str(len(entries)),
        "hits": _compact([hit.record() for hit in hits.values()]),
    }


def _aggregate(entry: Mapping[str, object], archives: Mapping[str, str],
               hits: Mapping[str, ci_cache.Hit]) -> dict[str, object]:
    needs = _needs(entry)
    restore = [hits[need].record() for need in needs if need in hits]
    return {**entry, "inputs": [archives[need] for need in needs if need not in hits],
            **({"restore": restore} if restore else {})}


# -- the pin gate: which legs can run --------------------------------------------------------

@dataclass(frozen=True)
class PinGate:
    """A selection split by its pins: the entries that run, and the legs that cannot."""

    runnable: list[dict[str, object]]
    blocked: dict[str, tuple[str, ...]]  # leg id -> its unpinned inputs, or the input legs it waits for
    missing: list["Input"]  # every unpinned input of the selection, once
    selected: int


def pin_gate(entries: Sequence[Mapping[str, object]], matrix: Matrix) -> PinGate:
    """Which entries have every input pinned. An aggregate runs only when every leg it
    needs does (its inputs are their archives)."""
    from backends.pins.inputs import collect, unpinned

    try:
        legs = [matrix.leg(str(entry["id"])) for entry in entries]
    except KeyError as unknown:
        raise CiError(f"the matrix names leg {unknown.args[0]!r}, which variants/ does not define: pass the "
                      "`scons -Q ci-matrix` output of this checkout") from None
    missing = unpinned(collect(plan_all(matrix, legs), matrix))
    blocked: dict[str, list[str]] = {}
    for item in missing:
        for leg_id in item.legs:
            blocked.setdefault(leg_id, []).append(item.label)
    needs = {str(entry["id"]): _needs(entry) for entry in entries}
    for leg_id in needs:
        _block_aggregate(leg_id, needs, blocked, set())
    return PinGate(runnable=[dict(entry) for entry in entries if str(entry["id"]) not in blocked],
                   blocked={leg_id: tuple(blocked[leg_id]) for leg_id in needs if leg_id in blocked},
                   missing=missing, selected=len(entries))


def _block_aggregate(leg_id: str, needs: Mapping[str, list[str]], blocked: dict[str, list[str]],
                     seen: set[str]) -> bool:
    """Whether `leg_id` cannot run, marking an aggregate blocked by the legs it needs."""
    if leg_id in blocked:
        return True
    if leg_id in seen:
        return False
    seen.add(leg_id)
    waits = [need for need in needs.get(leg_id, []) if _block_aggregate(need, needs, blocked, seen)]
    if waits:
        blocked[leg_id] = [f"its input leg {need}" for need in waits]
    return bool(waits)


def gate_report(gate: PinGate) -> str:
    """The job summary's list of the legs that do not run, and what pins them."""
    from backends.pins.inputs import unpinned_message
    lines = [f"### {len(gate.blocked)} of {gate.selected} selected legs not run: unpinned inputs", "",
             "| leg | unpinned |", "|---|---|"]
    lines += [f"| `{leg_id}` | {', '.join(why)} |" for leg_id, why in gate.blocked.items()]
    return "\n".join([*lines, "", unpinned_message(gate.missing), ""])


def gate_annotation(gate: PinGate, release: bool) -> str:
    """The one annotation a gated selection gets: a warning, or for a release the error."""
    from backends.pins.inputs import unpinned_message
    count = f"{len(gate.blocked)} of {gate.selected} selected legs"
    if release:
        return annotation("error", "unpinned inputs", f"a release builds pinned inputs only: {count} have unpinned "
                          "inputs, so nothing is built (the job summary lists them). "
                          + unpinned_message(gate.missing))
    return annotation("warning", "legs not run: unpinned inputs",
                      f"{count} not run, their inputs are unpinned (the job summary lists them); the other "
                      f"{len(gate.runnable)} run. " + unpinned_message(gate.missing))


def annotation(level: str, title: str, message: str) -> str:
    """A workflow command (`::warning title=...::...`), escaped as the runner reads it."""
    def data(text: str) -> str:
        return text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")
    return f"::{level} title={data(title).replace(':', '%3A').replace(',', '%2C')}::{data(message)}"


def gated_outputs(entries: Sequence[Mapping[str, object]], matrix: Matrix, release: bool,
                  environ: Mapping[str, str] | None = None,
                  listing: ci_cache.Listing | None = None) -> dict[str, str]:
    """The plan job's outputs for the entries whose inputs are all pinned; the others are
    listed once (summary and one annotation), or fail a release before anything is built.
    With a `listing` of the binary cache, the runnable legs it holds are hits: no runner job."""
    gate = pin_gate(entries, matrix)
    if gate.blocked:
        write_summary(gate_report(gate), environ)
        print(gate_annotation(gate, release), flush=True)
        if release:
            raise UnpinnedRelease(f"{len(gate.blocked)} of {gate.selected} selected legs have unpinned inputs: "
                                  "a release needs every input pinned")
    from backends.ci import cache_hits as ci_cache

    resolution = ci_cache.resolve(gate.runnable, listing) if listing else ci_cache.no_resolution(gate.runnable)
    if listing:
        write_summary(ci_cache.report(resolution), environ)
        print(annotation("notice", "binary cache", _cache_notice(resolution)), flush=True)
    return {**plan_outputs(gate.runnable, resolution.hits), "binary_cache": listing.location if listing else ""}


def _cache_notice(resolution: ci_cache.Resolution) -> str:
    from backends.ci import cache_hits as ci_cache

    if resolution.unavailable:
        return f"not used at plan time, every leg runs: {resolution.unavailable}"
    jobs = {name: count.jobs for name, count in ci_cache.per_os(resolution).items() if count.legs}
    return (f"{len(resolution.hits)} of {len(resolution.runners)} legs hit {resolution.location}: no runner job for "
            "them; runner jobs " + ", ".join(f"{name} {count}" for name, count in jobs.items()))


def _compact(payload: object) -> str:
    return json.dumps(payload, separators=(",", ":"))


def _flag(value: bool) -> str:
    return "true" if value else "false"


# -- setup ----------------------------------------------------------------------------------

def setup_for(leg_id: str, matrix: Matrix) -> Setup:
    try:
        leg = matrix.leg(leg_id)
    except KeyError:
        raise CiError(f"unknown leg {leg_id!r}; `scons -Q list` shows every leg id") from None
    return leg_setup(plan_all(matrix, [leg])[0], matrix.engines[leg.engine].pins, compiler_cache_max(plan_all(matrix)))


# -- output ---------------------------------------------------------------------------------

def write_outputs(outputs: Mapping[str, str], environ: Mapping[str, str] | None = None) -> None:
    """Append `key=value` lines to $GITHUB_OUTPUT (values are single-line JSON or words)."""
    append_to_runner_file("GITHUB_OUTPUT", "".join(f"{key}={value}\n" for key, value in outputs.items()),
                          sys.stdout, environ)


def write_summary(markdown: str, environ: Mapping[str, str] | None = None) -> None:
    """Append to the job summary ($GITHUB_STEP_SUMMARY), or to stderr outside CI."""
    append_to_runner_file("GITHUB_STEP_SUMMARY", markdown + "\n", sys.stderr, environ)


def append_to_runner_file(variable: str, text: str, fallback: TextIO,
                          environ: Mapping[str, str] | None = None) -> None:
    """Append to the file the runner names in `variable` ($GITHUB_OUTPUT, $GITHUB_ENV, ...);
    outside CI, write to `fallback`."""
    target = (os.environ if environ is None else environ).get(variable)
    if target:
        with open(target, "a", encoding="utf-8") as handle:
            handle.write(text)
    else:
        fallback.write(text)


def _read_matrix(path: str) -> object:
    text = sys.stdin.read() if path == "-" else Path(path).read_text()
    try:
        return json.loads(text)
    except json.JSONDecodeError as error:
        raise CiError(f"{path}: not JSON ({error}); pass the output of `scons -Q ci-matrix`") from None


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m backends.ci", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--root", type=Path, default=Path.cwd(), help="project root (default: .)")
    sub = parser.add_subparsers(dest="command", required=True)
    changed = sub.add_parser("changed-engines", help="the engine= filter for the changes between two commits")
    changed.add_argument("--base", required=True)
    changed.add_argument("--head", required=True)
    outputs = sub.add_parser("plan-outputs", help="job outputs from `scons -Q ci-matrix` JSON")
    outputs.add_argument("--matrix", default="-", help="file with the JSON, - for stdin (default)")
    outputs.add_argument("--release", required=True, choices=("true", "false"),
                         help="true: a release, which fails on any unpinned input; false: legs with unpinned "
                              "inputs are listed and left out (a boolean input as GitHub renders it)")
    outputs.add_argument("--binary-cache", default="",
                         help="the binary cache to resolve hits against (github:<owner>/<repo>@<tag>); empty: "
                              "every runnable leg gets its runner job")
    restore = sub.add_parser("restore", help="restore binary cache hits into dist/, checked, building nothing")
    restore.add_argument("--hits", required=True, help="file with the hits' JSON ({id, key, archive} each), - for "
                                                       "stdin")
    restore.add_argument("--binary-cache", required=True, help="the store the plan job listed")
    restore.add_argument("--dist", type=Path, default=Path("dist"), help="where they are published (default dist)")
    restore.add_argument("--published", action="store_true", help="only the hits with publish: true (a release)")
    setup = sub.add_parser("setup", help="what a leg's runner must install")
    setup.add_argument("--leg", required=True)
    args = parser.parse_args(argv)
    try:
        if args.command == "changed-engines":
            print(changed_engines(args.base, args.head, args.root))
        elif args.command == "plan-outputs":
            entries = matrix_entries(_read_matrix(args.matrix))
            listing = _listing(args.binary_cache, args.root)
            write_outputs(gated_outputs(entries, load_matrix(args.root), args.release == "true", listing=listing))
        elif args.command == "restore":
            return restore_command(args.hits, args.binary_cache, args.root, args.dist, args.published)
        else:
            write_outputs(setup_for(args.leg, load_matrix(args.root)).outputs())
    except CiError as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    return 0


def _listing(location: str, root: Path) -> ci_cache.Listing | None:
    """The binary cache's one listing (None without one); a lookup that cannot be made fails."""
    if not location:
        return None
    from backends.cache.store import LookupFailed
    from backends.ci import cache_hits as ci_cache

    try:
        return ci_cache.read_listing(location, os.environ, root)
    except LookupFailed as error:
        raise CiError(f"{error}: the plan job cannot tell hits from misses, so it stops here rather than start "
                      "a runner for every leg") from None


def restore_command(hits_file: str, location: str, root: Path, dist: Path, published: bool,
                    environ: Mapping[str, str] | None = None) -> int:
    """`restore`: 0 when every hit was restored and checked; 1 (an error annotation naming the
    refused legs and what to do) otherwise."""
    from backends.cache.store import CacheError, LookupFailed
    from backends.cache.stores import store_for
    from backends.cache.trust import TrustError, load_trust
    from backends.ci import cache_hits as ci_cache

    environ = os.environ if environ is None else environ
    try:
        text = sys.stdin.read() if hits_file == "-" else Path(hits_file).read_text()
        hits = [hit for hit in ci_cache.read_hits(text, hits_file) if hit.get("publish", True) or not published]
        if not hits:
            print("no binary cache hit to restore")
            return 0
        restored = ci_cache.restore_hits(hits, load_matrix(root), root, store_for(location, environ),
                                         load_trust("", root), root / dist, lambda line: print(line, flush=True))
    except (OSError, CacheError, LookupFailed, TrustError) as error:
        raise CiError(str(error)) from None
    write_summary(ci_cache.restore_report(restored, location), environ)
    refused = [r for r in restored if not r.ok]
    if refused:
        print(annotation("error", "binary cache hits refused", ci_cache.refusal_message(refused, location)),
              flush=True)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
