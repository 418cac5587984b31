"""What each declared step does when SCons runs it (declare.py declares them).

SCons hands an action only its target and source nodes; `STEPS` maps each step's record
to the step: its name, its leg and the call that does the work. `dispatch` runs one:
it withdraws the leg's old archive from dist/ (its inputs changed), runs the step, and
writes the step's record last (records.py). Any error becomes one SCons failure that
names the leg, the step and a log; it is remembered for the end-of-run summary.
"""
from __future__ import annotations

import dataclasses
import json
import os
import shutil
import signal
import sys
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping

from SCons.Errors import BuildError
from SCons.Node.Python import Value

from backends.cache.entry import check_entry, restored_record
from backends.cache.key import LegKey
from backends.cache.store import CacheError, Store, warn
from backends.cache.trust import key_id, signer_label
from backends.graph.records import TREES, Inputs, Records, public, read_record
from backends.graph.settings import Settings
from backends.graph.summary import Summary
from backends.model.engine import Engine
from backends.model.matrix import Matrix
from backends.model.platforms import platform_table
from backends.model.plan import Download, Plan
from backends.model.recipe_kit import LICENSE_ROOT
from backends.model.submodules import advice
from backends.pins.engine_toml import record_commit, record_pin
from backends.probes.host import Host
from backends.runner.run import Console, RunError, heartbeat
from backends.steps import archive as archive_step
from backends.steps import fetch as fetch_step
from backends.steps import git as git_step
from backends.steps import manifest as manifest_step
from backends.steps import publish as publish_step
from backends.steps import sign, submodule_check
from backends.steps import smoke as smoke_step
from backends.steps import source as source_step
from backends.steps import stage as stage_step
from backends.steps import upstream as upstream_step
from backends.steps import verify as verify_step
from backends.steps.checks import origin as origin_check
from backends.steps.checks.described import tree_problems
from backends.steps.context import LegDirs
from backends.steps.extract import extract, extract_counted
from backends.steps.takes import Takes
from backends.steps.universal import universal_tree
from backends.util.errors import EXIT_ERROR, BackendsError
from backends.util.files import hardlink_or_copy, list_tree, sha256_file, write_json
from backends.util.locations import is_url, origin_filename, url_filename

# Steps that run after a leg's archive is published (they take it as it is).
AFTER_PUBLISH = frozenset({"store"})
# Fault injection for the crash tests: `kill-after:<step>[:<leg>]` SIGKILLs the run right
# after that step's record is written, as a power cut or `kill -9` would.
FAULT_VARIABLE = "ANIRA_FAULT"


class StepFailure(BackendsError, RuntimeError):
    """A step that cannot do its work; the message says why and what to do."""


@dataclass(frozen=True)
class StepResult:
    body: dict[str, Any]
    outputs: tuple[Path, ...] = ()  # files the step wrote besides its declared targets
    trees: tuple[Path, ...] = ()  # directories it filled, whose every file its record signs


@dataclass
class LegNodes:
    plan: Plan
    engine: Engine
    dirs: LegDirs
    source_manifest: Path | None = None  # names the tree the leg builds from (patched, checked out, extracted)
    archive: Path | None = None  # in the leg's build dir
    published: Path | None = None  # in dist/
    publish_node: Any = None  # the SCons node of the publish step's record (aggregates depend on it)
    key: LegKey | None = None  # with binary_cache=: what a cache files the archive under
    restored_from: str = ""  # the binary cache the leg is restored from, "" when built
    signer: str = ""  # restored: the public key its entry's signature names ("" unsigned)


@dataclass(frozen=True)
class Step:
    name: str
    leg: str  # the leg that declared it, named in messages
    work: Callable[[], StepResult]
    legs: list[str] = field(default_factory=list)  # every leg built from it (downloads are shared)


@dataclass
class RunContext:
    """What every action may need about this run."""

    root: Path
    settings: Settings
    matrix: Matrix
    host: Host
    environ: dict[str, str]
    records: Records
    summary: Summary
    legs: dict[str, LegNodes] = field(default_factory=dict)
    steps: dict[str, Step] = field(default_factory=dict)  # record path -> step
    stores: list[Store] = field(default_factory=list)  # the binary caches, in lookup order
    # dist/ did not exist when the run started: SCons makes it for the publish targets with
    # the umask's mode, so the first publish gives it the mode dist/ has (publish.DIR_MODE).
    makes_dist: bool = False
    console: Console = field(default_factory=Console)  # the terminal every step of the run shows on

    @property
    def build_root(self) -> Path:
        return self.root / "build"

    @property
    def dist(self) -> Path:
        return self.root / "dist"


def _read(path: str | Path) -> dict[str, Any]:
    return json.loads(Path(path).read_text())


# -- dispatch --------------------------------------------------------------------------------

def describe(target: list[Any], source: list[Any], env: Any) -> str:
    return f"[{env['GRAPH_STEP']}] {env['GRAPH_DESCRIBE']}"


def dispatch(target: list[Any], source: list[Any], env: Any) -> int | None:
    run: RunContext = env["GRAPH_RUN"]
    record = run.records.record_of(target[0].abspath)
    step = run.steps[record]
    inputs = inputs_of(target[0])
    reason = run.records.reason(record)
    if reason:
        print(f"[{step.name}] {step.leg} reruns: {reason}", flush=True)
    started = time.monotonic()
    try:
        for leg in step.legs if step.name not in AFTER_PUBLISH else ():
            _withdraw(run, leg)  # a step that reruns means their archives no longer match their inputs
        with heartbeat(f"[{step.name}] {step.leg}", run.console):
            result = step.work()
        outputs = [Path(t.abspath) for t in target if t.abspath != record] + list(result.outputs)
        run.records.write(Path(record), result.body, inputs, outputs, result.trees)
        elapsed = time.monotonic() - started
        manifest_step.note_seconds(step.name, Path(record), elapsed)  # the manifest's `durations`
        run.summary.step_done(step.leg, step.name)
        _inject_fault(step)
        print(f"[{step.name}] {step.leg} done in {elapsed:.1f} s", flush=True)
    except Exception as error:  # every step error becomes one clear SCons failure, with its exit status
        message = str(error)
        log = _failure_log(run, step, message)
        for leg in step.legs:
            run.summary.step_failed(leg, step.name, log)
        if os.environ.get("ANIRA_TRACEBACK") or not _named(error):
            traceback.print_exc()
        raise BuildError(errstr=f"{step.leg}: {step.name} failed: {message}",
                         exitstatus=error.status if isinstance(error, BackendsError) else EXIT_ERROR) from error
    return None


def inputs_of(node: Any) -> Inputs:
    """What `node`'s step is built from: its file dependencies and its settings Value."""
    files, settings = [], []
    for child in node.children():
        if isinstance(child, Value):
            settings.append(str(child.value))
        else:
            files.append(child.abspath)
    return Inputs(tuple(files), tuple(settings))


def _named(error: Exception) -> bool:
    """The project's own errors say what is wrong; anything else is a bug and shows its traceback."""
    return isinstance(error, BackendsError)


def _failure_log(run: RunContext, step: Step, message: str) -> Path:
    """The log a failure points to: the step's own log when a command failed, else one
    written here with the message (so every failure names a file to read)."""
    nodes = run.legs.get(step.leg)
    logs = nodes.dirs.logs if nodes else run.build_root / "logs"
    log = logs / f"{step.name}.log"
    try:
        log.parent.mkdir(parents=True, exist_ok=True)
        with open(log, "a", encoding="utf-8") as handle:
            handle.write(f"==== [{step.leg}] {step.name} failed {time.strftime('%Y-%m-%d %H:%M:%S')}\n{message}\n")
    except OSError:
        pass
    cause = sys.exc_info()[1]
    if isinstance(cause, RunError):
        return cause.log
    return log


def _inject_fault(step: Step) -> None:
    wanted = os.environ.get(FAULT_VARIABLE, "")
    if not wanted.startswith("kill-after:"):
        return
    name, _, leg = wanted[len("kill-after:"):].partition(":")
    if name == step.name and leg in ("", step.leg):
        sys.stdout.flush()
        os.kill(os.getpid(), signal.SIGKILL)


def _withdraw(run: RunContext, leg_id: str) -> None:
    nodes = run.legs.get(leg_id)
    if nodes is None or nodes.published is None:
        return
    moved = publish_step.withdraw(nodes.published, run.dist / ".stale")
    if moved:
        run.summary.withdrawn(leg_id, moved)
        print(f"[withdraw] {leg_id}: its inputs changed; dist/{nodes.published.name} moved to dist/.stale/ "
              "until it is rebuilt", flush=True)


# -- fetch / extract / patch ------------------------------------------------------------------

def fetch(run: RunContext, engine_name: str, download: Download, origin: str, record: Path) -> StepResult:
    if download.kind == "git":
        return _git_checkout(run, engine_name, download, origin, record)
    settings = run.settings
    if download.optional and not download.sha256 and not origin and not settings.lock:
        print(f"[fetch] {download.filename}: not pinned, not fetched (`scons lock` records it; the texts may come "
              "from the origin itself)", flush=True)
        return StepResult({"name": download.name, "url": download.url, "filename": download.filename,
                           "skipped": "not pinned"})
    fetched = fetch_step.fetch(
        fetch_step.Download(url=origin or download.url, filename=origin_filename(origin) if origin else download.filename,
                            sha256=_origin_pin(run, engine_name, origin) if origin else (download.sha256 or None)),
        fetch_step.FetchSettings(cache_dir=settings.cache, mirrors=settings.mirrors, offline=settings.offline,
                                 lock=settings.lock or bool(origin)))
    if settings.lock and not origin and not download.sha256:
        record_pin(run.matrix.engines[engine_name].root / "engine.toml", download.filename, fetched.sha256)
    body = {"name": download.name, "url": download.url, "override": origin, "filename": download.filename,
            "sha256": fetched.sha256, "path": str(fetched.path)}
    return StepResult(body, outputs=(fetched.path,))


def _origin_pin(run: RunContext, engine_name: str, origin: str) -> str | None:
    """A URL origin is held to any pin recorded for its file name; a local file is the user's own."""
    if not is_url(origin):
        return None
    return run.matrix.engines[engine_name].pinned_sha256(url_filename(origin))


def _git_checkout(run: RunContext, engine_name: str, download: Download, origin: str, record: Path) -> StepResult:
    """The source at its pinned commit, from the cache's mirror (fetched into it once)."""
    if not download.commit and not run.settings.lock:
        raise StepFailure(f"{download.url} at {download.ref} has no commit pin: `scons lock engine={engine_name}` "
                          "records it from any host (git ls-remote), or build with lock=1 to record it here")
    remotes = git_step.Remotes(run.settings.cache, run.settings.mirrors, run.settings.offline)
    log, label = record.with_suffix(".log"), f"git {download.filename}"
    # A recorded commit is all the build follows: a tag that moved, or a branch, never is.
    commit = git_step.fetch(download.url, download.commit or download.ref, remotes, origin=origin, log=log,
                            label=label)
    if not download.commit and not origin:
        record_commit(run.matrix.engines[engine_name].root / "engine.toml", download.name, commit)
    dest = record.with_suffix("") / leaf(download)
    git_step.checkout(download.url, commit, dest, remotes, submodules=download.submodules, log=log, label=label,
                      only=download.submodule_paths)
    body: dict[str, object] = {"name": download.name, "url": download.url, "override": origin, "ref": download.ref,
                               "commit": commit, "path": str(dest)}
    if download.submodule_paths:  # the selected ones, at the commits the superproject's tree records
        body["submodules"] = git_step.gitlinks(dest, commit, download.submodule_paths)
    return StepResult(body)


def leaf(download: Download) -> str:
    return download.filename.removesuffix(".git") or download.name


def fetched_file(fetch_manifest: Path) -> Path:
    """The cached file a fetch manifest names, re-hashed: a cache entry altered since the
    fetch (in place, same size: only a hash can tell) is evicted and the step fails."""
    record = _read(fetch_manifest)
    path = Path(record["path"])
    if not path.is_file():
        raise StepFailure(f"{path} left the download cache; run again to fetch it anew")
    actual = sha256_file(path)
    if actual != record["sha256"]:
        fetch_step.evict(path)
        raise StepFailure(f"the cached {path.name} was altered after it was fetched (expected sha256 "
                          f"{record['sha256']}, found {actual}); it was evicted from the cache: run again to "
                          "fetch it anew")
    return path


def extract_download(run: RunContext, download: Download, fetch_manifest: Path, dest: Path,
                     fits: origin_check.Expectation | None = None, label: str = "",
                     selection: Takes | None = None) -> StepResult:
    """The download's tree, of what the stage takes (`selection`; None: all of it); an origin
    (`fits`: what the leg takes it for) is refused here, before anything is staged, when its
    binaries contradict the leg."""
    archive = fetched_file(fetch_manifest)
    tree = dest / "tree"
    entries, left_out = extract_counted(archive, tree, select=selection.select if selection else None)
    root = next((tree / r for r in download.roots if (tree / r).is_dir()), tree)
    if download.roots and root == tree:
        raise StepFailure(f"{archive.name} has none of the top-level directories {', '.join(download.roots)}")
    if fits is not None:
        refused = origin_check.judge_tree(fits, tree, root, run.matrix, label or archive.name, entries)
        if refused:
            shutil.rmtree(dest)  # no later run may take it: the step leaves no record
            raise StepFailure(refused)
    # The bytes' identity makes this manifest change whenever they do, so every later step reruns.
    return StepResult({"archive": archive.name, "sha256": _read(fetch_manifest)["sha256"], "root": str(root),
                       "entries": len(entries), "left_out": left_out}, trees=(tree,))


def patch(origin_manifest: Path, scripts: list[Path], dest: Path) -> StepResult:
    record = _read(origin_manifest)
    origin = _tree_of(record)
    # An extraction's (root) copy is tree/, a checkout's keeps its leaf name (see Graph.add_leg).
    tree = dest / "tree" if "root" in record else dest / origin.name
    outcomes = source_step.prepare_tree(origin, tree, scripts)
    for outcome in outcomes:
        print(f"[patch] {outcome.describe()}", flush=True)
    return StepResult({"origin": str(origin), "origin_id": record.get("sha256") or record.get("commit", ""),
                       "path": str(tree), "patches": [dataclasses.asdict(o) for o in outcomes]})


# -- build / stage / merge --------------------------------------------------------------------

def _shared_src(nodes: LegNodes) -> Path | None:
    """The tree the leg's source manifest names (patched, checked out or extracted)."""
    if nodes.source_manifest is None:
        return None
    return _tree_of(_read(nodes.source_manifest))


def _tree_of(record: Mapping[str, Any]) -> Path:
    """The tree a source record names: an extraction's root, or a checkout's path."""
    return Path(record["root"] if "root" in record else record["path"])


def resolved_dirs(nodes: LegNodes) -> LegDirs:
    """Manifest paths in the plan's tables become the real files and trees they describe;
    an in-source build gets its private copy of the tree (see Plan.private_source)."""
    dirs = nodes.dirs
    extracts = {n: Path(_read(p)["root"]) for n, p in dirs.extracts.items()}
    downloads = {n: Path(record["path"]) for n, p in dirs.downloads.items() if "path" in (record := _read(p))}
    shared = _shared_src(nodes)
    src = dirs.src
    if shared is not None:
        src = dirs.src / shared.name if nodes.plan.private_source else shared
    return dataclasses.replace(dirs, src=src, extracts=extracts, downloads=downloads)


def _source_key(nodes: LegNodes) -> str:
    """Changes whenever the leg's source tree does (new pin, new bytes, new patch set)."""
    if not nodes.source_manifest:
        return ""
    return json.dumps(public(_read(nodes.source_manifest)), sort_keys=True)


def build(run: RunContext, leg_id: str) -> StepResult:
    nodes = run.legs[leg_id]
    dirs = resolved_dirs(nodes)
    plan = nodes.plan
    key = _source_key(nodes)
    if plan.private_source and (shared := _shared_src(nodes)) is not None:
        upstream_step.private_copy(shared, dirs.src, key)
    try:
        ran = upstream_step.build(plan.build, plan.env, dirs, leg_id, run.environ, run.settings.verbose,
                                  source_key=key, console=run.console)
    except RunError as error:
        missing = _missing_submodule(nodes, error)
        if missing is None:
            raise
        raise missing from error
    return StepResult({"leg": leg_id, "commands": ran,
                       "tools": upstream_step.toolchain_identity(plan, run.environ)})


def _missing_submodule(nodes: LegNodes, error: RunError) -> RunError | None:
    """The failure as one naming the submodule it needed, when the leg's checkout left that
    submodule out (steps/submodule_check.py); None when it did not."""
    sources = nodes.dirs.sources
    checkouts = {d.name: submodule_check.Checkout(sources[d.name], d.url, d.submodule_paths)
                 for d in nodes.plan.downloads if d.kind == "git" and d.submodule_paths and d.name in sources}
    if not checkouts:
        return None
    return submodule_check.check(error, checkouts, lambda source, path: advice(nodes.engine, source, path))


def stage(run: RunContext, leg_id: str) -> StepResult:
    nodes = run.legs[leg_id]
    dirs = resolved_dirs(nodes)
    signs = signs_here(run, nodes.plan.leg)
    result = stage_step.stage(nodes.plan, dirs, run.environ, copy=signs)
    if nodes.plan.fixups:
        result["fixups"] = upstream_step.run_commands(nodes.plan.fixups, nodes.plan.env, dirs, leg_id, run.environ,
                                                      run.settings.verbose, log_prefix="fixup",
                                                      console=run.console)
    if nodes.plan.leg.code_signed:
        result["signing"] = sign.sign_stage(dirs.stage, run.environ).record()
    bundled = result["bundled"]
    assert isinstance(bundled, list)  # the libraries steps/stage.py bundled
    result["sbom"] = _write_sbom(nodes, dirs.stage, bundled)
    result["files"] = len([e for e in list_tree(dirs.stage, with_hashes=False) if e.kind != "dir"])
    return StepResult(result, trees=(dirs.stage,))


def _write_sbom(nodes: LegNodes, stage_dir: Path, bundled: list[str]) -> str:
    """The archive's SBOM into the stage (steps/sbom.py): the plan's inputs as fetched, the patches,
    the bundled libraries and the license texts staged."""
    from backends.steps import sbom  # only a stage writes one (_sbom_error)

    fetched = [_read(p) for p in nodes.dirs.downloads.values() if Path(p).is_file()]
    document = sbom.leg_document(nodes.plan, nodes.engine, fetched, bundled, sbom.license_members(stage_dir),
                                 sbom.runtime_members(nodes.plan, stage_dir))
    return sbom.write(stage_dir, nodes.plan, document)


def signs_here(run: RunContext, leg: Any) -> bool:
    """Signed and unsigned stages differ: a yes/no in the signature, never the identity."""
    return leg.code_signed and sign.will_sign(run.environ)


def merge(run: RunContext, leg_id: str, input_archives: list[Path]) -> StepResult:
    nodes = run.legs[leg_id]
    leg, dirs = nodes.plan.leg, nodes.dirs
    unpacked = []
    for input_id, archive in zip(leg.inputs, input_archives):
        where = dirs.src / input_id
        extract(archive, where)
        unpacked.append(where)
    shutil.rmtree(dirs.stage, ignore_errors=True)
    if leg.aggregate == "universal":
        report = universal_tree(unpacked[0], unpacked[1], dirs.stage)
    else:
        report = _android_bundle([run.matrix.leg(i).arch for i in leg.inputs], unpacked, dirs.stage)
    record: dict[str, object] = {"inputs": list(leg.inputs), "report": report}
    from backends.steps import sbom  # only a stage writes one (_sbom_error)

    inputs = [sbom.InputArchive(i, archive) for i, archive in zip(leg.inputs, input_archives)]
    record["sbom"] = sbom.write(dirs.stage, nodes.plan, sbom.aggregate_document(
        nodes.plan, nodes.engine, inputs, sbom.license_members(dirs.stage)))
    if leg.code_signed:  # lipo invalidates the slices' signatures
        record["signing"] = sign.sign_stage(dirs.stage, run.environ).record()
    return StepResult(record, trees=(dirs.stage,))


def _android_bundle(abis: list[str], unpacked: list[Path], stage_dir: Path) -> list[str]:
    """include/ and the license texts from the first ABI, each ABI's libraries under lib/<abi>/."""
    stage_dir.mkdir(parents=True)
    shutil.copytree(unpacked[0] / "include", stage_dir / "include", symlinks=True)
    if (unpacked[0] / LICENSE_ROOT).is_dir():
        shutil.copytree(unpacked[0] / LICENSE_ROOT, stage_dir / LICENSE_ROOT, symlinks=True)
    report = []
    for abi, tree in zip(abis, unpacked):
        for lib in sorted((tree / "lib").glob("*")):
            if lib.is_file():
                (stage_dir / "lib" / abi).mkdir(parents=True, exist_ok=True)
                shutil.copy2(lib, stage_dir / "lib" / abi / lib.name)
                report.append(f"lib/{abi}/{lib.name}")
    return report


# -- archive / verify / smoke / publish ---------------------------------------------------------

def archive(run: RunContext, leg_id: str) -> StepResult:
    nodes = run.legs[leg_id]
    dirs = nodes.dirs
    assert nodes.archive is not None
    target = nodes.archive
    archive_step.write_archive(dirs.stage, target, run.settings.format)
    archive_step.sha256_sidecar(target)
    sources = [_source_record(_read(p)) for p in dirs.downloads.values() if Path(p).is_file()]
    steps_dir = dirs.steps
    names = ["merge"] if nodes.plan.leg.aggregate else (["build"] if nodes.plan.build else []) + ["stage"]
    steps = {name: public(_read(steps_dir / f"{name}.json")) for name in names}
    tools = steps.get("build", {}).get("tools", {})  # what built it, not what is installed now
    manifest = manifest_step.archive_manifest(nodes.plan, nodes.engine, target, dirs.stage, sources, steps, tools)
    write_json(target.with_name(target.name + ".json"), manifest)
    return StepResult({"archive": target.name, "sha256": manifest["sha256"], "size": manifest["size"]})


def _source_record(fetched: Mapping[str, Any]) -> dict[str, Any]:
    """What the manifest says about a download: where it is pinned, what bytes were used,
    and an origin only when the command line replaced the upstream one (no local paths
    of the cache or mirrors: the same bytes give the same manifest)."""
    keys = ("name", "url", "filename", "sha256", "ref", "commit")
    record = {k: fetched[k] for k in keys if fetched.get(k)}
    if fetched.get("override"):
        record["origin"] = fetched["override"]
    return record


def verify(run: RunContext, leg_id: str) -> StepResult:
    """The archive against its contract and, member by member, against its manifest's file
    list, which the archive step made from the stage: and that list against the stage, still
    as its step recorded it. So the archive holds what the smoke consumed (docs/decisions.md)."""
    nodes = run.legs[leg_id]
    assert nodes.archive is not None
    files = _read(nodes.archive.with_name(nodes.archive.name + ".json"))["files"]
    _stage_as_recorded(run, nodes, "before the archive was verified")
    listed = tree_problems(nodes.dirs.stage, files, run.records.digests.digest)
    if listed:
        raise StepFailure(f"{nodes.archive.name}'s manifest does not list its stage as it is now (nothing may write "
                          "to a stage during a run; run again):\n  - " + "\n  - ".join(listed[:10]))
    result = verify_step.verify(nodes.archive, nodes.plan.contract, nodes.engine.version, str(run.build_root),
                                described=files)
    return StepResult(result)


def _stage_as_recorded(run: RunContext, nodes: LegNodes, when: str) -> None:
    """The stage's tree digest is the one its step (stage, or merge) recorded: the smoke
    and the archive see the same files. The digests are remembered, so this reads the
    stage's files again only when they changed."""
    stage = nodes.dirs.stage
    record = read_record(nodes.dirs.steps / ("merge.json" if nodes.plan.leg.aggregate else "stage.json")) or {}
    recorded = (record.get(TREES) or {}).get(os.path.abspath(stage))
    if recorded is None or run.records.digests.tree_digest(stage) != recorded:
        raise StepFailure(f"{stage} changed {when}, after its step recorded it: the smoke and the archive could "
                          "have seen different files. Nothing may write to a stage during a run; run again (the "
                          "stage step reruns)")


def _toolchain_file(platform: str, mode: str) -> str:
    """The CMake toolchain file (under smoke/) a smoke emulated in `mode` is cross-built with."""
    emulated = platform_table().emulation(platform, mode)
    return emulated.toolchain_file if emulated else ""


def smoke(run: RunContext, leg_id: str) -> StepResult:
    nodes = run.legs[leg_id]
    plan, leg = nodes.plan, nodes.plan.leg
    assert nodes.archive is not None
    mode = run.host.run_mode(leg, plan.smoke)
    if plan.smoke is None:
        result = smoke_step.not_run("no consumer program for this package form" if leg.can_run
                                    else run.host.why_not_run(leg), leg_id)
    elif not mode:
        result = smoke_step.not_run(run.host.why_not_run(leg), leg_id)
    else:  # on the stage the archive is written from, so it runs beside archive and verify
        result = smoke_step.smoke(nodes.archive, plan.smoke, run.root, nodes.dirs.leg / "smoke",
                                  nodes.dirs.logs, leg_id, run.environ, run.settings.verbose, mode,
                                  tree=nodes.dirs.stage, toolchain_file=_toolchain_file(leg.platform, mode),
                                  console=run.console)
        _stage_as_recorded(run, nodes, "while the smoke ran")
    run.summary.smoke(leg_id, result)
    return StepResult({"leg": leg_id, **result})


def publish(run: RunContext, leg_id: str) -> StepResult:
    """Copy the verified archive and its sidecars into dist/, the archive last; see publish.py.
    The manifest names the leg key (and, for a restored leg, the binary cache it came from)."""
    nodes = run.legs[leg_id]
    assert nodes.archive is not None and nodes.published is not None
    fields: dict[str, object] = {"leg_key": nodes.key.digest} if nodes.key and nodes.key.digest else {}
    if not nodes.restored_from:  # a restored manifest keeps its original build's smoke record
        fields["smoke"] = smoke_step.manifest_record(_read(nodes.dirs.steps / "smoke.json"))
    if run.makes_dist:
        os.chmod(run.dist, publish_step.DIR_MODE)
    published = publish_step.publish(nodes.archive, nodes.published, run.dist / ".stale", fields)
    run.summary.published(leg_id, nodes.published, published.files)
    print(f"[publish] dist/{nodes.published.name}: {published.size / 1e6:.1f} MB, {published.files} files",
          flush=True)
    return StepResult({"leg": leg_id, "archive": nodes.published.name, "sha256": published.sha256,
                       "leg_key": nodes.key.digest if nodes.key else "", "restored_from": nodes.restored_from,
                       # what gc=1 keeps for the leg: the inputs this run's options named
                       "run": {"version": run.settings.version, "origins": dict(run.settings.origins),
                               "format": run.settings.format}},
                      outputs=publish_step.published_files(nodes.published))


# -- the binary cache ---------------------------------------------------------------------------

def restore(run: RunContext, leg_id: str, entry: Path, store: str, checked: bool) -> StepResult:
    """Take a binary cache entry as the leg's archive: no fetch, build or smoke. An entry
    fetched by this run was checked when the graph was declared (sidecars, key, contract);
    one kept from an earlier run is checked here. Its manifest keeps the original build's
    provenance and says where it came from."""
    nodes = run.legs[leg_id]
    assert nodes.archive is not None and nodes.key is not None
    archive = nodes.archive
    archive.parent.mkdir(parents=True, exist_ok=True)
    for source, target in zip(publish_step.published_files(entry / archive.name), publish_step.published_files(archive)):
        if target.name.endswith(".json"):
            manifest = _read(source)
            manifest["restored"] = restored_record(store, nodes.key.digest, nodes.signer)
            write_json(target, manifest)
        else:
            target.unlink(missing_ok=True)
            hardlink_or_copy(source, target)
    if not checked:
        problems = check_entry(entry, archive.name, nodes.key.digest, nodes.plan.contract, nodes.engine.version,
                               str(run.build_root), run.settings.trust)
        if problems:
            shutil.rmtree(entry, ignore_errors=True)
            raise StepFailure(f"the binary cache entry {nodes.key.short} kept in {entry} is not trusted any more "
                              "(removed; run again to look it up or build the leg):\n  - " + "\n  - ".join(problems))
    verified = {"archive": archive.name, "checked": verify_step.summary(nodes.plan.contract)}
    trust = run.settings.trust
    print(f"[restore] {leg_id}: restored from the binary cache {store} (key {nodes.key.short}, signed by "
          f"{signer_label(nodes.signer)}), verified against its contract", flush=True)
    return StepResult({"key": nodes.key.digest, "store": store, "signed by": signer_label(nodes.signer),
                       "trusted": [key_id(k) for k in sorted(trust.keys)] + (["unsigned"] if trust.unsigned else []),
                       **verified})


def _entry_files(nodes: LegNodes) -> list[Path]:
    """What a binary cache entry holds: the published archive and .sha256, and its manifest
    with the build's step times added (`durations`: CI's summary of saved minutes reads them).
    dist/'s manifest has none: a time differs on every build, dist/'s bytes may not."""
    assert nodes.published is not None
    entry = nodes.dirs.leg / "archive" / "entry"
    shutil.rmtree(entry, ignore_errors=True)
    entry.mkdir(parents=True)
    names = ["merge"] if nodes.plan.leg.aggregate else (["build"] if nodes.plan.build else []) + ["stage"]
    manifest, sha256, archive = publish_step.published_files(nodes.published)
    body = _read(manifest)
    durations = manifest_step.step_seconds(nodes.dirs.steps, names)
    if durations:
        body["durations"] = durations
    write_json(entry / manifest.name, body)
    shutil.copyfile(sha256, entry / sha256.name)
    hardlink_or_copy(archive, entry / archive.name)
    return list(publish_step.published_files(entry / archive.name))


def store(run: RunContext, leg_id: str) -> StepResult:
    """Put the published archive and its sidecars into every binary cache under the leg's key.
    A cache that cannot take it is said so, never a failure of the leg."""
    nodes = run.legs[leg_id]
    assert nodes.published is not None and nodes.key is not None
    files = _entry_files(nodes)
    signer = run.settings.signer
    if signer is not None:  # the signature is made here, never in dist/
        files.insert(0, signer.sign(nodes.key.digest, files[-1]))
    stored, not_stored = [], []
    for cache in run.stores:
        try:
            cache.put(nodes.key.digest, files)
            stored.append(cache.location)
        except CacheError as error:
            not_stored.append(f"{cache.location}: {error}")
            warn(f"{leg_id} not stored: {error}")
    run.summary.stored(leg_id, stored)
    # `entry`: what a later run checks each store in `stored` still holds (declare.py `_still_stored`).
    return StepResult({"key": nodes.key.digest, "stored": stored, "not stored": not_stored,
                       "signed by": key_id(signer.public) if signer else "",
                       "entry": {path.name: path.stat().st_size for path in files}})
