"""The step graph: every step of every selected leg as an SCons target with a precise signature.

Each step's target is a JSON record written last and atomically (records.py); its sources
are the previous steps' records plus one settings file holding the canonical JSON of
everything that changes its output (flags, environment, pins, patch hashes, tool
identities). Upstream trees are never SCons sources: a no-op run stays a fraction of a
second whatever their size. Whether a step is up to date is decided from its record, not
from .sconsign (`decide`). This module declares; actions.py does the work. They are the only
modules, with SConstruct and the SConscript, that import SCons.
"""
from __future__ import annotations

import os
import shutil
import sys
from functools import partial
from pathlib import Path
from typing import Any, Callable

import SCons.Node.FS
import SCons.Script as scons

from backends.cache.entry import check_entry
from backends.cache.key import LegKey, leg_keys
from backends.cache.store import CacheError, warn
from backends.cache.trust import signer_label, signer_of
from backends.graph import actions
from backends.graph.actions import LegNodes, RunContext, Step, StepResult, leaf
from backends.graph.records import read_record
from backends.graph.settings import Invocation, Settings
from backends.model.engine import Engine
from backends.model.leg import Leg
from backends.model.platforms import platform_table
from backends.model.plan import Download, Plan, origin_for
from backends.model.recipes import leg_engine, plan_leg
from backends.runner.run import passed_environment
from backends.steps import STEP_VERSION
from backends.steps import publish as publish_step
from backends.steps import source as source_step
from backends.steps import upstream as upstream_step
from backends.steps.checks import origin as origin_check
from backends.steps.context import LegDirs
from backends.steps.smoke import OWN_VARIABLES
from backends.steps.takes import takes
from backends.util.canonical import canonical, digest, plain
from backends.util.errors import BackendsError
from backends.util.files import remember_run_digests, sha256_file
from backends.util.locations import origin_filename
from backends.util.toolchain import identity

# SCons' index of the decider that asks the environment (`env.Decider`) about a source.
DECIDE_SOURCE = 4


class StepOutput(SCons.Node.FS.File):
    """A step's target. SCons content-signs every target it built, for .sconsign, by reading
    it whole (the 130 MB archive too); here that signature is the sha256 this run took for
    the step's record (files.sha256_file: by identity, no second read). No decision rests on
    it: `decide` judges every step by its record (docs/decisions.md)."""

    __slots__ = ()

    def get_csig(self) -> str:
        ninfo = self.get_ninfo()
        try:
            return str(ninfo.csig)
        except AttributeError:
            pass
        try:
            csig = sha256_file(self.get_abspath())
        except OSError:
            csig = ""
        ninfo.csig = csig
        return csig


def step_output(fs: SCons.Node.FS.FS, name: str) -> StepOutput:
    """The File node `name` as a step's target."""
    node = fs.File(name)
    node.__class__ = StepOutput  # a File of the same layout: only its content signature differs
    return node


def short_hash(*parts: object) -> str:
    return digest(parts)[:16]


class GraphError(BackendsError, ValueError):
    """A leg that cannot be declared on this host as asked (e.g. a missing aggregate input)."""


class Graph:
    """Declares the steps of the selected legs into one SCons environment."""

    def __init__(self, env: Any, run: RunContext) -> None:
        self.env = env
        self.run = run
        self.root = run.root
        self.build_root = run.build_root
        self.dist = run.dist
        self.settings: Settings = run.settings
        self.matrix = run.matrix
        self.host = run.host
        self._action = env.Action(actions.dispatch, strfunction=actions.describe)
        # Downloads, extractions and patched trees are shared by the legs that use them.
        self._shared: dict[Path, Any] = {}
        self._keys: dict[str, LegKey] = {}
        self._said_untrusting = False
        self._heavy_steps = 0  # declared so far: the next one's stream (`_heavy`)

    @property
    def legs(self) -> dict[str, LegNodes]:
        return self.run.legs

    # -- helpers ---------------------------------------------------------------------
    def _settings(self, step: str, payload: object) -> Any:
        """The step's settings as a Value. Value nodes normally bypass the environment's
        decider (SCons compares them with .sconsign, which a kill -9 leaves stale); routed
        through it, the step records decide for every input (`decide`)."""
        value = self.env.Value(canonical({"step": step, "step_version": STEP_VERSION, **_as_dict(payload)}))
        value.changed_since_last_build = DECIDE_SOURCE
        return value

    def _step(self, targets: list[Path], sources: list[Any], step: str, leg_id: str, describe: str,
              work: Callable[[], StepResult], payload: object) -> Any:
        """One step: `targets` (the record last), its settings and `sources`, and the work."""
        record = targets[-1]
        inputs = [self._settings(step, payload), *sources]
        nodes = self.env.Command([str(t) for t in targets], inputs, self._action, GRAPH_STEP=step,
                                 GRAPH_LEG=leg_id, GRAPH_DESCRIBE=describe, target_factory=self._output)
        self.env.NoCache(nodes)
        self.run.records.register([str(t) for t in targets], str(record))
        self.run.steps[os.path.abspath(record)] = Step(step, leg_id, work, [leg_id])
        return nodes

    def _heavy(self, nodes: Any) -> None:
        """An upstream build joins one of `heavy_jobs` streams, in turn: SCons runs no two steps
        of a stream at once (they share a SideEffect), so at most heavy_jobs builds run whatever
        -j says, and one waiting its turn is not started, holding no job. (The build tree's lock
        makes this run the only one in the tree.)"""
        stream = self.build_root / "locks" / f"heavy-stream-{self._heavy_steps % self.settings.heavy_jobs}"
        self.env.SideEffect(str(stream), nodes)
        self._heavy_steps += 1

    def _output(self, name: str) -> StepOutput:
        return step_output(self.env.fs, name)

    def _reuse(self, target: Path, leg: Leg) -> Any:
        """A shared step's node, now also a step of `leg`."""
        legs = self.run.steps[os.path.abspath(target)].legs
        if leg.id not in legs:
            legs.append(leg.id)
        return self._shared[target]

    def _engine(self, leg: Leg) -> Engine:
        return leg_engine(self.matrix, leg, self.settings.version or None)

    def _leg_dirs(self, leg: Leg, extracts: dict[str, Path], downloads: dict[str, Path],
                  sources: dict[str, Path]) -> LegDirs:
        """The leg's directories; `src` and the manifest-named tables resolve at run time."""
        base = self.build_root / "legs" / leg.id
        return LegDirs(src=base / "src", build=base / "work", install=base / "install", stage=base / "stage",
                       logs=base / "logs", sources=sources, extracts=extracts, downloads=downloads)

    # -- fetch / extract / source -------------------------------------------------------
    def _origin(self, plan: Plan, download: Download) -> str:
        return origin_for(self.settings.origins, plan, download)

    def fetch(self, plan: Plan, download: Download) -> tuple[Any, Path]:
        origin = self._origin(plan, download)
        # Keyed without the pins: recording one (lock=1) must not move the download's files. Legs
        # that select other submodules of a git source get checkouts of their own.
        selection = [download.submodule_paths] if download.submodule_paths else []
        key = short_hash(download.name, download.kind, download.url, download.filename, download.ref, origin,
                         *selection)
        kind = "git" if download.kind == "git" else "downloads"
        target = self.build_root / kind / f"{plan.leg.engine}-{download.name}-{key}.json"
        if target in self._shared:
            return self._reuse(target, plan.leg), target
        sources = []
        if origin and Path(origin).is_file():
            sources.append(self.env.File(str(Path(origin).resolve())))
        node = self._step([target], sources, "fetch", plan.leg.id, f"{download.name}: {origin or download.url}",
                          partial(actions.fetch, self.run, plan.leg.engine, download, origin, target),
                          {"download": download, "origin": origin})
        self._shared[target] = node
        return node, target

    def extract(self, plan: Plan, download: Download, fetch_node: Any, fetch_manifest: Path) -> tuple[Any, Path]:
        origin = self._origin(plan, download)
        # An origin is judged against the leg that takes it (steps/checks/origin.py): its tree is that leg's.
        fits = origin_check.expectation(plan, download, self._engine(plan.leg).root.parent) if origin else None
        # Keyed by what the stage takes too: legs share an extraction only when they take the
        # same members, and a leg whose rules change gets the extraction of its new rules.
        label = origin_filename(origin) if origin else download.filename
        selection = takes(plan, download, label)
        keyed = {**({"fits": fits} if fits else {}), **({"takes": selection} if selection else {})}
        name = f"{fetch_manifest.stem}-{short_hash(*keyed.values())}" if keyed else fetch_manifest.stem
        target = self.build_root / "extract" / f"{name}.json"
        if target in self._shared:
            return self._reuse(target, plan.leg), target
        node = self._step([target], [fetch_node], "extract", plan.leg.id, label,
                          partial(actions.extract_download, self.run, download, fetch_manifest, target.with_suffix(""),
                                  fits, label, selection),
                          {"roots": download.roots, **keyed})
        self.env.Clean(node, str(target.with_suffix("")))
        self._shared[target] = node
        return node, target

    def source_tree(self, plan: Plan, engine: Engine, origin_node: Any, origin_manifest: Path) -> tuple[Any, Path]:
        scripts = [engine.root / p.file for p in plan.patches]
        key = short_hash(origin_manifest.name, [source_step.patch_key(s) for s in scripts])
        target = self.build_root / "src" / f"{engine.name}-{engine.version}-{key}.json"
        if target in self._shared:
            return self._reuse(target, plan.leg), target
        node = self._step([target], [origin_node, *(self.env.File(str(s)) for s in scripts)], "patch",
                          plan.leg.id, f"{engine.name} {engine.version}: " + ", ".join(p.name for p in plan.patches),
                          partial(actions.patch, origin_manifest, scripts, target.with_suffix("")),
                          {"patches": plan.patches})
        self.env.Clean(node, str(target.with_suffix("")))
        self._shared[target] = node
        return node, target

    # -- one leg ---------------------------------------------------------------------------
    def add_leg(self, leg: Leg) -> LegNodes:
        if leg.id in self.legs:
            return self.legs[leg.id]
        engine = self._engine(leg)
        plan = plan_leg(leg, engine, self.matrix)
        key = self._key(plan)
        if key.digest and (restored := self._restored(plan, engine, key)) is not None:
            return restored
        if leg.aggregate:
            return self._add_aggregate(leg, plan, engine, key)
        inputs: list[Any] = []
        extracts: dict[str, Path] = {}
        downloads: dict[str, Path] = {}
        sources: dict[str, Path] = {}
        main_tree: tuple[Any, Path] | None = None
        for download in plan.downloads:
            fetch_node, fetch_manifest = self.fetch(plan, download)
            downloads[download.name] = fetch_manifest  # resolved to the cached file at run time
            if download.kind == "git":
                tree = (fetch_node, fetch_manifest)
                sources[download.name] = fetch_manifest.with_suffix("") / leaf(download)
            elif download.unpack:
                tree = self.extract(plan, download, fetch_node, fetch_manifest)
                extracts[download.name] = tree[1]
            else:
                tree = (fetch_node, fetch_manifest)
            if download.name == "source":
                main_tree = tree
            inputs.append(tree[0])
        source_manifest = None
        if main_tree is not None:
            source_manifest = main_tree[1]
            if plan.patches:
                node, source_manifest = self.source_tree(plan, engine, *main_tree)
                inputs.append(node)
        dirs = self._leg_dirs(leg, extracts, downloads, sources)
        nodes = LegNodes(plan=plan, engine=engine, dirs=dirs, source_manifest=source_manifest, key=key)
        self.legs[leg.id] = nodes
        steps_dir = dirs.steps
        previous = inputs
        if plan.build:
            build = self._step([steps_dir / "build.json"], inputs, "build", leg.id, leg.id,
                               partial(actions.build, self.run, leg.id),
                               {"commands": plan.build, "env": plan.env, "private": plan.private_source,
                                **self._environment(plan)})
            self.env.Clean(build, [str(dirs.build), str(dirs.install), str(dirs.venv), str(dirs.short)])
            self._heavy(build)
            previous = [build]
        # The stage holds the SBOM, dated by SOURCE_DATE_EPOCH like the archive.
        stage_payload: dict[str, object] = {"collect": plan.collect, "exclude": plan.exclude, "bundle": plan.bundle,
                                            "fixups": plan.fixups, "sign": actions.signs_here(self.run, leg),
                                            "source_date_epoch": os.environ.get("SOURCE_DATE_EPOCH", "")}
        if plan.fixups:
            stage_payload.update(self._environment(plan))
        stage = self._step([steps_dir / "stage.json"], previous, "stage", leg.id, leg.id,
                           partial(actions.stage, self.run, leg.id), stage_payload)
        self.env.Clean(stage, str(dirs.stage))
        self._finish(nodes, stage)
        return nodes

    def _environment(self, plan: Plan) -> dict[str, object]:
        """What the runner hands the plan's commands that changes their output: every host
        variable they receive, the tools their PATH finds, and the interpreter `{python}` is."""
        return {"environment": upstream_step.environment_signature(plan, self.run.environ),
                "tools": upstream_step.toolchain_identity(plan, self.run.environ),
                "python": f"{sys.executable} {sys.version.split()[0]}"}

    def _add_aggregate(self, leg: Leg, plan: Plan, engine: Engine, key: LegKey | None) -> LegNodes:
        dirs = self._leg_dirs(leg, {}, {}, {})  # src/ receives the unpacked input archives
        nodes = LegNodes(plan=plan, engine=engine, dirs=dirs, key=key)
        self.legs[leg.id] = nodes
        input_nodes, input_archives = [], []
        for input_id in leg.inputs:
            input_leg = self.matrix.leg(input_id)
            if self.settings.inputs == "build" and self.host.can_build(input_leg):
                built = self.add_leg(input_leg)
                assert built.published is not None  # add_leg declares where the leg publishes
                input_nodes.append(built.publish_node)
                input_archives.append(built.published)
                continue
            archive = self.dist / published_name(plan_leg(input_leg, self._engine(input_leg), self.matrix),
                                                 self.settings.format)
            if not archive.is_file():
                raise GraphError(f"{leg.id} needs {archive.relative_to(self.root)}: build {input_id} on "
                                 f"{input_leg.runner} (or download its CI artifact) into dist/")
            input_nodes.append(self.env.File(str(archive)))
            input_archives.append(archive)
        merge = self._step([dirs.steps / "merge.json"], input_nodes, "merge", leg.id,
                           f"{leg.aggregate} of {', '.join(leg.inputs)}",
                           partial(actions.merge, self.run, leg.id, input_archives),
                           {"aggregate": leg.aggregate, "inputs": leg.inputs,
                            "sign": actions.signs_here(self.run, leg),
                            "source_date_epoch": os.environ.get("SOURCE_DATE_EPOCH", "")})
        self.env.Clean(merge, str(dirs.stage))
        self._finish(nodes, merge)
        return nodes

    def _finish(self, nodes: LegNodes, staged: Any) -> None:
        """archive -> verify, and beside them (with -j) the smoke of the stage the archive is
        written from, in the leg's build dir; then publish into dist/: an archive reaches
        dist/ only once it is verified, member by member the stage the smoke consumed, and
        smoke-tested (or recorded not run). docs/decisions.md: the smoke beside the archive."""
        plan, leg, dirs = nodes.plan, nodes.plan.leg, nodes.dirs
        steps_dir = dirs.steps
        name = published_name(plan, self.settings.format)
        nodes.archive = dirs.leg / "archive" / name
        nodes.published = self.dist / name
        built = nodes.archive
        archive = self._step(
            [*publish_step.published_files(built)[::-1], steps_dir / "archive.json"],
            [staged], "archive", leg.id, name, partial(actions.archive, self.run, leg.id),
            {"format": self.settings.format, "leg": leg, "engine": _engine_record(nodes.engine),
             "patches": plan.patches, "source_date_epoch": os.environ.get("SOURCE_DATE_EPOCH", "")})
        verify = self._step([steps_dir / "verify.json"], [archive[-1], staged], "verify", leg.id, name,
                            partial(actions.verify, self.run, leg.id), {"contract": plan.contract})
        smoke_sources = [staged]
        if plan.smoke:
            project = self.root / plan.smoke.project
            shared = sorted(project.parent.glob("*.cmake"))  # smoke/common.cmake
            model = [self.root / plan.smoke.model_path] if plan.smoke.model else []  # may live in another project
            files = dict.fromkeys(p for p in [*sorted(project.rglob("*")), *shared, *model] if p.is_file())
            smoke_sources += [self.env.File(str(p)) for p in files]
        smoke = self._step([steps_dir / "smoke.json"], smoke_sources, "smoke", leg.id, name,
                           partial(actions.smoke, self.run, leg.id), self._smoke_settings(plan))
        self._publish(nodes, [archive[-1], verify[0], smoke[0]])

    def _publish(self, nodes: LegNodes, sources: list[Any]) -> None:
        """publish into dist/, then (a built leg with a key) store into the binary caches."""
        leg, published = nodes.plan.leg, nodes.published
        assert published is not None
        steps_dir = nodes.dirs.steps
        key = nodes.key.digest if nodes.key else ""
        publish = self._step([*publish_step.published_files(published)[::-1], steps_dir / "publish.json"], sources,
                             "publish", leg.id, f"dist/{published.name}", partial(actions.publish, self.run, leg.id),
                             {"dist": str(self.dist), "leg_key": key})
        nodes.publish_node = publish[-1]
        # The alias names step manifests only: SCons content-hashes an alias's children on every
        # run, and the archive beside them can be a GB.
        targets = [publish[-1]]
        if nodes.key and key and not nodes.restored_from and self.run.stores and self.settings.binary_cache_write:
            targets.append(self._store(nodes, nodes.key, published, publish[-1]))
        self.env.Alias(leg.id, targets)

    def _store(self, nodes: LegNodes, key: LegKey, published: Path, publish: Any) -> Any:
        """The store step of a built leg: its signature holds the signer, and a store it wrote
        that no longer holds the entry reruns it (`_still_stored`)."""
        signer = self.settings.signer
        record = nodes.dirs.steps / "store.json"
        self._still_stored(key, published.name, record)
        return self._step([record], [publish], "store", nodes.plan.leg.id, f"{published.name} as {key.short}",
                          partial(actions.store, self.run, nodes.plan.leg.id),
                          {"key": key.digest, "stores": self.settings.binary_caches,
                           "signer": signer.public if signer else ""})[-1]

    def _still_stored(self, key: LegKey, archive: str, record: Path) -> None:
        """The store step's record covers the stores' state: when a store it wrote no longer
        holds the entry as stored (deleted, pruned, truncated), the step reruns and puts it
        back. One cheap look per store and run (a stat, a HEAD, the release's listing)."""
        previous = read_record(record) or {}
        sizes = previous.get("entry")
        if previous.get("key") != key.digest or not isinstance(sizes, dict):
            return  # never stored under this key: the step runs anyway
        stored = set(previous.get("stored") or ())
        for store in self.run.stores:
            if store.location in stored and store.holds(key.digest, archive, sizes) is False:
                self.run.records.invalidate(record, f"the entry {key.short} is missing from {store.location} (or not "
                                                    "as it was stored)")
                return

    # -- the binary cache ------------------------------------------------------------------------
    def _key(self, plan: Plan) -> LegKey:
        if plan.leg.id not in self._keys:
            self._keys.update(leg_keys([plan], self.matrix, self.root, version=self.settings.version,
                                       fmt=self.settings.format, origins=self.settings.origins,
                                       hash_file=self.run.records.digests.require, lock=self.settings.lock))
            key = self._keys[plan.leg.id]
            if not key.digest and self.run.stores:
                warn(f"{plan.leg.id} has no key, so it is built: {key.uncacheable}")
        return self._keys[plan.leg.id]

    def _restored(self, plan: Plan, engine: Engine, key: LegKey) -> LegNodes | None:
        """The leg declared as restore -> publish when its archive for this key came, or now
        comes, from a binary cache. A restored archive and a built one of the same key are
        the same result: whichever way dist/ got it last is kept, so switching binary_cache=
        on or off never rebuilds nor restores what is there. An entry kept from an earlier
        restore is used only while this run's trust admits its signer (`_kept`); otherwise a
        cache is looked up now (the key is known before anything is built)."""
        leg = plan.leg
        dirs = self._leg_dirs(leg, {}, {}, {})
        name = published_name(plan, self.settings.format)
        entry = self.build_root / "binary-cache" / key.digest
        published = read_record(dirs.steps / "publish.json") or {}
        if published.get("leg_key") == key.digest and not published.get("restored_from") \
                and (self.dist / name).is_file():
            return None  # built for this key: the build path, up to date
        store = self._kept(leg, key, name, entry, read_record(dirs.steps / "restore.json") or {})
        checked = store is None  # a fresh entry is checked now, contract included; restore needs not again
        store = store or (self._lookup(plan, engine, key, name, entry) if self.run.stores else None)
        if store is None:
            return None
        signer = signer_of(entry / name)
        nodes = LegNodes(plan=plan, engine=engine, dirs=dirs, key=key, restored_from=store, signer=signer)
        nodes.archive, nodes.published = dirs.leg / "archive" / name, self.dist / name
        self.legs[leg.id] = nodes
        self.run.summary.restored(leg.id, store, key.short)
        restore = self._step([*publish_step.published_files(nodes.archive)[::-1],
                              dirs.steps / "restore.json"], [], "restore", leg.id,
                             f"{name} from {store}", partial(actions.restore, self.run, leg.id, entry, store, checked),
                             {"key": key.digest, "contract": plan.contract,
                              "trust": self.settings.trust.judged(signer)})
        self._publish(nodes, [restore[-1]])
        return nodes

    def _kept(self, leg: Leg, key: LegKey, name: str, entry: Path, previous: dict[str, Any]) -> str | None:
        """The store an entry kept in build/binary-cache/ from an earlier restore of this key
        came from, while this run's trust admits the signer its signature names (the restore
        step re-checks it whole when the trusted set changed: its signature holds the set).
        An entry whose signer is no longer trusted is removed and said: revoking a key takes
        effect on the next run, with or without binary_cache= and dist/."""
        if previous.get("key") != key.digest or not (entry / name).is_file():
            return None
        signer, trust = signer_of(entry / name), self.settings.trust
        if trust.admits(signer):
            return str(previous.get("store") or "") or None
        warn(f"{leg.id}: the entry {key.short} restored from {previous.get('store')} rests on {signer_label(signer)}, "
             f"which this run does not trust ({trust.describe()}): it is not used, the leg is "
             f"{'looked up again' if self.run.stores else 'rebuilt'}")
        shutil.rmtree(entry, ignore_errors=True)
        return None

    def _lookup(self, plan: Plan, engine: Engine, key: LegKey, name: str, entry: Path) -> str | None:
        trust = self.settings.trust
        if trust.empty:
            if not self._said_untrusting:
                warn("no key is trusted, so nothing is restored (built legs are still stored): pass "
                     "binary_cache_trust=<key.pub> (the writers' public keys), or binary_cache_trust=unsigned for a "
                     "store nobody else writes; see docs/binary-cache.md#keys")
                self._said_untrusting = True
            return None
        for store in self.run.stores:
            try:
                if not store.fetch(key.digest, name, entry):
                    continue
            except CacheError as error:
                warn(str(error))
                continue
            problems = check_entry(entry, name, key.digest, plan.contract, engine.version, str(self.build_root),
                                   trust)
            if not problems:
                return store.location
            warn(f"{store.location}: the entry {key.short} of {plan.leg.id} is not trusted, the leg is rebuilt:\n  - "
                 + "\n  - ".join(problems))
            shutil.rmtree(entry, ignore_errors=True)
        return None

    def _smoke_settings(self, plan: Plan) -> dict[str, object]:
        """The consumer build's settings: the project, how it runs here, and the environment
        and compilers CMake will find (its PATH's, as the runner passes them on)."""
        mode = self.host.run_mode(plan.leg, plan.smoke)
        environ = self.run.environ
        emulated = platform_table().emulation(plan.leg.platform, mode)
        tools = ("cmake", "ninja", "ctest", "cc", "c++", *(emulated.tools if emulated else ()))
        passed = {name: value for name, value in passed_environment(environ).items() if name not in OWN_VARIABLES}
        return {"smoke": plan.smoke, "run_mode": mode, "environment": passed,
                "tools": identity(tools, environ.get("PATH", os.defpath)) if plan.smoke and mode else {}}


def published_name(plan: Plan, fmt: str) -> str:
    """The archive's file name in the chosen format (plans name the zip)."""
    return plan.archive if fmt == "zip" else plan.archive.removesuffix(".zip") + "." + fmt


def settings_environment(settings: Settings) -> dict[str, str]:
    """The settings child commands need (e.g. backends.steps.podspec fetching through the cache)."""
    return {"ANIRA_CACHE": str(settings.cache), "ANIRA_MIRRORS": ",".join(settings.mirrors),
            "ANIRA_OFFLINE": "1" if settings.offline else "0", "ANIRA_LOCK": "1" if settings.lock else "0"}


def _engine_record(engine: Engine) -> dict[str, object]:
    return {"name": engine.name, "libname": engine.libname, "version": engine.version, "license": engine.license,
            "pins": dict(engine.pins)}


def _as_dict(payload: object) -> dict[str, object]:
    plain_payload = plain(payload)
    return plain_payload if isinstance(plain_payload, dict) else {"value": plain_payload}


def decide(run: RunContext, dependency: Any, target: Any, prev_ni: Any, repo_node: Any = None) -> bool:
    """Rebuild `target` unless its step's record says it was built from exactly the current
    inputs and its outputs are intact (records.py). The answer is the same for every
    dependency of a target; SCons asks once per dependency, the records remember it."""
    return run.records.is_stale(target.abspath, partial(actions.inputs_of, target))


def declare(env: Any, run: RunContext, invocation: Invocation) -> Graph:
    env.Decider(partial(decide, run))
    env["GRAPH_RUN"] = run  # what dispatch reads the run from: no module holds it
    remember_run_digests()
    graph = Graph(env, run)
    for plan in invocation.plans:
        graph.add_leg(plan.leg)
    scons.Default([plan.leg.id for plan in invocation.plans])  # the legs' aliases
    for typed, canonical in invocation.spellings.items():  # `scons libtorch-linux-x64-shared`
        env.Alias(typed, canonical)
    return graph
