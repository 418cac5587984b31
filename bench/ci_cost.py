#!/usr/bin/env python3
"""Benchmark: what a push to `main` costs in runner jobs and GitHub API requests, now that the
plan job resolves binary cache hits. Prints numbers; asserts nothing (tests/unit/ci/test_ci_cost.py
holds them to the targets).

    python3 bench/ci_cost.py

The real matrix (every leg of variants/), in a temporary copy of this tree whose unpinned
inputs get made-up sha256 and commit pins (a key needs every pin; nothing is fetched) and
whose keys/binary-cache.pub trusts a key made here. A fake GitHub API on 127.0.0.1
(tests/fake_github.py) holds the binary cache as an earlier push to `main` left it: every
leg's entry, signed with that key, stored through the real store (its labels say signer and
build time; the build times are simulated). Then, per scenario, from that cache:

- `no-change`: the same tree;
- `one-patch`: one patch file edited (a comment appended);
- `one-engine`: one engine's version bumped (the pins of the new version made up too).

The workflow's own plan script (the `run:` of _legs.yml's plan step, with bash, as a runner
runs it) is run against the fake API, and what the run then does is replayed against it: each
runner job's lookup and store (the real store code), each aggregate's restore of its hit
inputs (the real fetches), and the aggregates' `gh run download` of their built inputs
(modelled: a listing page per 100 artifacts and a download per input, as
tests/unit/ci/test_api_budget.py counts them). Runner jobs are counted per OS, the `changes`
and `plan` jobs among the Linux ones. Each scenario ends with exactly one line:

    ci-cost <scenario>: jobs macos=<n> windows=<n> linux=<n> api_requests=<n>
"""
from __future__ import annotations

import argparse
import contextlib
import hashlib
import io
import json
import math
import shutil
import stat
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))
sys.path.insert(0, str(REPO / "site_scons"))

import gha  # noqa: E402
from backends.util import github as github_api
from binaries import stand_in_sbom  # noqa: E402
from backends.cache.release_store import GitHubReleaseStore
from backends.cache.stores import store_for
from backends.cache.trust import Signer, keygen, load_signer
from backends.ci.cache_hits import runner_os
from backends.commands.lock import bump_version
from backends.model.matrix import load_matrix
from backends.model.recipes import plan_all
from backends.pins.engine_toml import Changes, apply
from backends.pins.inputs import GIT, collect, unpinned
from scratch import project_copy  # noqa: E402
from fake_github import REPO as GITHUB_REPO, TOKEN, FakeGitHub, serve  # noqa: E402

TREE = ("SConstruct", "requirements.txt", "site_scons", "variants", "engines", "smoke")
CACHE = f"github:{GITHUB_REPO}@binary-cache"
SCENARIOS = ("no-change", "one-patch", "one-engine")
PATCH = "engines/onnxruntime/patches/coreml_proto_export.py"  # applied by the static CoreML legs only
BUMP = ("onnxruntime", "1.26.1")
FIXED_JOBS = {"changes": "linux", "plan": "linux"}  # ci.yml's changes job, _legs.yml's plan job
SIMULATED_BUILD_MINUTES = {"build": 45, "prebuilt": 2, "aggregate": 3}


@dataclass
class Cost:
    """One push: the runner jobs it starts per OS, the API requests per part, and the legs
    that ran and that hit."""

    scenario: str
    jobs: dict[str, int] = field(default_factory=lambda: {"macos": 0, "windows": 0, "linux": 0})
    requests: dict[str, int] = field(default_factory=dict)
    ran: set[str] = field(default_factory=set)
    hits: set[str] = field(default_factory=set)
    summary: str = ""

    @property
    def api_requests(self) -> int:
        return sum(self.requests.values())

    def line(self) -> str:
        return (f"ci-cost {self.scenario}: jobs macos={self.jobs['macos']} windows={self.jobs['windows']} "
                f"linux={self.jobs['linux']} api_requests={self.api_requests}")


# -- the tree ---------------------------------------------------------------------------------

def simulation_tree(dest: Path) -> tuple[Path, Signer]:
    """A copy of this project whose every input is pinned (made-up pins) and whose trusted
    key is one made here; returns it and that key's signer (CI's ANIRA_BINARY_CACHE_KEY)."""
    tree = dest / "tree"
    tree.mkdir(parents=True)
    project_copy(tree, TREE)
    fill_pins(tree)
    secret, public = keygen(dest / "keys" / "ci-key")
    (tree / "keys").mkdir()
    shutil.copy(public, tree / "keys" / "binary-cache.pub")
    signer = load_signer(str(secret), {})
    assert signer is not None
    return tree, signer


def fill_pins(tree: Path) -> None:
    """Made-up pins for every unpinned input (a file a pinned one names comes a round later)."""
    for _ in range(4):
        matrix = load_matrix(tree)
        missing = unpinned(collect(plan_all(matrix), matrix))
        if not missing:
            return
        changes: dict[str, Changes] = {}
        for item in missing:
            edit = changes.setdefault(item.engine, Changes())
            made_up = hashlib.sha256(f"simulated {item.label}".encode()).hexdigest()
            if item.kind == GIT:
                edit.commits[item.source] = made_up[:40]
            elif item.key:
                edit.sha256[item.key] = made_up
            else:  # the file a podspec names, unknown until it is read: a made-up URL names it
                edit.nested[item.parent] = f"https://example.invalid/{item.engine}/{made_up[:12]}.tar.gz"
        for engine, edit in changes.items():
            apply(tree / "engines" / engine / "engine.toml", edit)
    raise RuntimeError(f"{tree}: inputs still unpinned after filling pins")


def ci_matrix(tree: Path) -> list[dict[str, Any]]:
    done = subprocess.run([sys.executable, "-m", "SCons", "-Q", "ci-matrix"], cwd=tree, capture_output=True,
                          text=True, check=True)
    return json.loads(done.stdout)["include"]


def edit_patch(tree: Path) -> set[str]:
    """Append a comment to PATCH; the legs whose keys this changes: those applying it, and the
    aggregates over them."""
    path = tree / PATCH
    path.write_text(path.read_text() + "# edited\n")
    matrix = load_matrix(tree)
    patched = {plan.leg.id for plan in plan_all(matrix) if any(p.file == PATCH.split("/", 2)[2] for p in plan.patches)}
    return patched | {leg.id for leg in matrix.legs if set(leg.inputs) & patched}


def bump_engine(tree: Path) -> set[str]:
    """Bump BUMP's engine as `scons lock version=` would (made-up pins for the new version);
    its legs."""
    engine, version = BUMP
    matrix = load_matrix(tree)
    bump = bump_version(matrix, [leg for leg in matrix.legs if leg.engine == engine], version)
    apply(tree / "engines" / engine / "engine.toml", bump.changes)
    fill_pins(tree)
    return {leg.id for leg in load_matrix(tree).legs if leg.engine == engine}


# -- the cache as an earlier push left it ---------------------------------------------------------

def fill_cache(github: FakeGitHub, entries: list[dict[str, Any]], signer: Signer, scratch: Path) -> None:
    """Every leg's entry, stored as a leg job stores it (signed; the manifest with a simulated
    build time). The requests are not counted, nor what the store says (it makes the draft)."""
    with contextlib.redirect_stderr(io.StringIO()):
        for entry in entries:
            store_entry(github, entry, signer, scratch)
    github.calls.clear()


def store_entry(github: FakeGitHub, entry: dict[str, Any], signer: Signer, scratch: Path) -> None:
    job_store(github).put(entry["key"], entry_files(entry, signer, scratch / entry["id"]))


def entry_files(entry: dict[str, Any], signer: Signer, where: Path) -> list[Path]:
    where.mkdir(parents=True, exist_ok=True)
    archive = where / entry["archive"]
    archive.write_bytes(f"PK {entry['id']} {entry['key']}".encode())
    digest = hashlib.sha256(archive.read_bytes()).hexdigest()
    (where / f"{archive.name}.sha256").write_text(f"{digest}  {archive.name}\n")
    kind = "aggregate" if entry["needs"] else ("prebuilt" if entry["source"] != "build" else "build")
    manifest = {"archive": archive.name, "sha256": digest, "size": archive.stat().st_size, "leg_key": entry["key"],
                "engine": {"name": entry["engine"], "libname": entry["engine"], "version": "0", "license": "-"},
                "leg": {"id": entry["id"], "platform": entry["platform"], "kind": entry["kind"],
                        "config": entry["config"], "accelerator": [entry["accelerator"]] if entry["accelerator"] else [],
                        "requires": {}},
                "durations": {"build": 60.0 * SIMULATED_BUILD_MINUTES[kind]}}
    manifest.update(stand_in_sbom(archive.name))
    (where / f"{archive.name}.json").write_text(json.dumps(manifest))
    signature = signer.sign(entry["key"], archive)
    return [signature, where / f"{archive.name}.json", where / f"{archive.name}.sha256", archive]


def job_store(github: FakeGitHub) -> GitHubReleaseStore:
    """A job's store: its own process, so its own listing."""
    store = store_for(CACHE, {"GITHUB_TOKEN": TOKEN, "GITHUB_API_URL": github.base})
    assert isinstance(store, GitHubReleaseStore)
    return store


# -- the plan job -------------------------------------------------------------------------------

def plan_step() -> gha.Step:
    return gha.step("_legs.yml", "plan", "plan")


def run_plan(tree: Path, github: FakeGitHub, scratch: Path, release: str = "false",
             token: str = TOKEN) -> tuple[subprocess.CompletedProcess[str], dict[str, str], str]:
    """The plan step's `run:` as a runner runs it (its shell, as GitHub derives it) in `tree`,
    against the fake API: its exit, the job outputs it wrote, its job summary."""
    outputs, summary = scratch / "github_output", scratch / "summary.md"
    for path in (outputs, summary):
        path.unlink(missing_ok=True)
    env = {"ENGINES": "all", "FILTERS": "", "RELEASE": release, "GITHUB_TOKEN": token, "BINARY_CACHE": CACHE,
           "GITHUB_API_URL": github.base, "GITHUB_OUTPUT": str(outputs), "GITHUB_STEP_SUMMARY": str(summary)}
    done = run_step(plan_step(), env, tree, scratch)
    written = outputs.read_text() if outputs.exists() else ""
    return done, dict(line.split("=", 1) for line in written.splitlines()), \
        summary.read_text() if summary.exists() else ""


def run_step(step: gha.Step, env: dict[str, str], cwd: Path, scratch: Path) -> subprocess.CompletedProcess[str]:
    """The step's `run:` with the shell GitHub gives it, in `cwd`, `scons` and this `python`
    on PATH, the workflow's PYTHONPATH; every host but 127.0.0.1 unreachable."""
    bin_dir = scratch / "bin"
    bin_dir.mkdir(parents=True, exist_ok=True)
    shim = bin_dir / "scons"
    shim.write_text(f'#!/bin/sh\nexec "{sys.executable}" -m SCons "$@"\n')
    shim.chmod(shim.stat().st_mode | stat.S_IXUSR)
    # A script, not a symlink: a venv's interpreter reached through a link elsewhere loses the
    # venv (its pyvenv.cfg is looked up beside the link), and with it the packages CI installs.
    python = bin_dir / "python"
    python.unlink(missing_ok=True)
    python.write_text(f'#!/bin/sh\nexec "{sys.executable}" "$@"\n')
    python.chmod(python.stat().st_mode | stat.S_IXUSR)
    environ = {"PYTHONPATH": "site_scons", "HTTPS_PROXY": "http://127.0.0.1:9", "HTTP_PROXY": "http://127.0.0.1:9",
               "NO_PROXY": "127.0.0.1", **env}
    return gha.run(step, environ, cwd, scratch, path=[bin_dir])


# -- a push ---------------------------------------------------------------------------------------

def push(scenario: str, tree: Path, github: FakeGitHub, signer: Signer, scratch: Path) -> Cost:
    """A push to `main` of `tree`: the plan job, then what each runner job asks GitHub."""
    cost = Cost(scenario)
    done, outputs, cost.summary = run_plan(tree, github, scratch)
    if done.returncode != 0:
        raise RuntimeError(f"the plan step failed:\n{done.stdout}\n{done.stderr}")
    cost.requests["plan job"] = counted(github)
    for os_name in FIXED_JOBS.values():
        cost.jobs[os_name] += 1
    legs = json.loads(outputs["legs"])["include"]
    aggregates = json.loads(outputs["aggregates"])["include"]
    cost.hits = {hit["id"] for hit in json.loads(outputs["hits"])}
    for entry in [*legs, *aggregates]:
        cost.jobs[runner_os(entry["runner"])] += 1
        cost.ran.add(entry["id"])
    for entry in legs:  # scons looks its key up (a miss) and, after the build, stores it
        leg_job(github, entry, signer, scratch)
    cost.requests["leg jobs: lookup, store"] = counted(github)
    artifacts = len(legs)
    downloads = 0
    for entry in aggregates:
        if entry.get("restore"):  # backends.ci restore: one listing, two downloads per input
            store = job_store(github)
            for hit in entry["restore"]:
                assert store.fetch(hit["key"], hit["archive"], scratch / "restore" / entry["id"] / hit["id"])
        downloads += len(entry["inputs"]) * (max(1, math.ceil(artifacts / github_api.PER_PAGE)) + 1)
        leg_job(github, entry, signer, scratch)
    cost.requests["aggregate jobs: restore, lookup, store"] = counted(github)
    cost.requests["aggregate jobs: gh run download (modelled)"] = downloads
    return cost


def leg_job(github: FakeGitHub, entry: dict[str, Any], signer: Signer, scratch: Path) -> None:
    """What a runner job's `scons <leg>` asks GitHub: the lookup, then on a miss the store."""
    store = job_store(github)
    if not store.fetch(entry["key"], entry["archive"], scratch / "lookup" / entry["id"]):
        store.put(entry["key"], entry_files(entry, signer, scratch / "built" / entry["id"]))


def counted(github: FakeGitHub) -> int:
    count = len(github.calls)
    github.calls.clear()
    return count


# -- the scenarios ----------------------------------------------------------------------------------

@dataclass
class Scenario:
    name: str
    expected: set[str] | None  # the legs whose keys it changes (None: every leg keeps its key)


def scenarios(work: Path) -> Iterator[tuple[Scenario, Cost]]:
    """Each scenario on its own copy of the tree and its own fake API, the cache filled by the
    unchanged tree's push."""
    base, signer = simulation_tree(work / "base")
    baseline = ci_matrix(base)
    edits: dict[str, Callable[[Path], set[str]] | None] = {"no-change": None, "one-patch": edit_patch,
                                                           "one-engine": bump_engine}
    for name in SCENARIOS:
        scratch = work / name
        tree = scratch / "tree"
        shutil.copytree(base, tree)
        edit = edits[name]
        expected = edit(tree) if edit else None
        with fake_api() as github:
            fill_cache(github, baseline, signer, scratch / "cache")
            yield Scenario(name, expected), push(name, tree, github, signer, scratch)


def fake_api() -> Any:
    github_api.RATE_LIMIT_WAIT = 0.0  # past the budget: a failure here, never a wait
    return serve()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--work", type=Path, help="keep the trees here (default: a temporary directory)")
    args = parser.parse_args(argv)
    work = args.work or Path(tempfile.mkdtemp(prefix="ci-cost-"))
    try:
        for scenario, cost in scenarios(work):
            changed = "every key unchanged" if scenario.expected is None else \
                f"{len(scenario.expected)} legs' keys changed"
            parts = ", ".join(f"{part} {count}" for part, count in cost.requests.items())
            print(f"{scenario.name}: {changed}; {len(cost.hits)} hits (no runner job), {len(cost.ran)} runner jobs "
                  f"for legs; API requests: {parts}")
            saved = next((line.split("|") for line in cost.summary.splitlines() if line.startswith("| all |")), [])
            if saved:
                print(f"{scenario.name}: runner minutes saved by the hits, as the plan job's summary estimates them "
                      f"from simulated build times: {saved[5].strip()} ({saved[6].strip()} as Linux minutes)")
            print(cost.line(), flush=True)
    finally:
        if args.work is None:
            shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
