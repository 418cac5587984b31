"""The step graph: every step of every selected leg as an SCons target with a precise signature.

Each step's target is a JSON manifest written last and atomically; its sources are the
previous step's manifest plus one `Value` holding the canonical JSON of every setting that
changes its output (flags, environment additions, pins, patch hashes, tool versions).
Upstream trees are never SCons sources (DESIGN §5). This module is the only one, with
SConstruct, that imports SCons.
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import re
import shutil
import sys
import time
import traceback
from pathlib import Path
from typing import Any, Callable, Mapping

import SCons.Script as scons
from SCons.Errors import BuildError
from SCons.Node.FS import File as FSFile

from . import sign, toolchain
from .frontend import Invocation, Settings
from .host import Host
from .model.engine import Engine
from .model.leg import Leg
from .model.matrix import Matrix
from .model.plan import Download, Plan
from .model.recipes import leg_engine, plan_leg
from .pins import record_commit, record_pin
from .steps import archive as archive_step
from .steps import fetch as fetch_step
from .steps import git as git_step
from .steps import manifest as manifest_step
from .steps import smoke as smoke_step
from .steps import source as source_step
from .steps import stage as stage_step
from .steps import upstream as upstream_step
from .steps import verify as verify_step
from .steps.context import LegDirs
from .steps.extract import extract
from .steps.files import hardlink_or_copy, list_tree, write_json
from .steps.universal import universal_tree

# Bump when a step's implementation changes what it produces, so outputs are rebuilt.
STEP_VERSION = 1


def canonical(obj: object) -> str:
    return json.dumps(_plain(obj), sort_keys=True, separators=(",", ":"))


def _plain(obj: object) -> object:
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return {f.name: _plain(getattr(obj, f.name)) for f in dataclasses.fields(obj)}
    if isinstance(obj, Mapping):
        return {str(k): _plain(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_plain(v) for v in obj]
    if isinstance(obj, Path):
        return str(obj)
    return obj


def short_hash(*parts: object) -> str:
    return hashlib.sha256(canonical(parts).encode()).hexdigest()[:16]


def _read(path: str | Path) -> dict[str, Any]:
    return json.loads(Path(path).read_text())


def _tool_versions(*names: str) -> dict[str, str]:
    versions = {}
    for name in names:
        path = toolchain.find_tool(name)
        versions[name] = toolchain.tool_version(path) if path else "absent"
    return versions


class GraphError(ValueError):
    """A leg that cannot be declared on this host as asked (e.g. a missing aggregate input)."""


@dataclasses.dataclass
class LegNodes:
    plan: Plan
    engine: Engine
    dirs: LegDirs
    source_manifest: Path | None = None  # names the tree the leg builds from (patched, checked out, extracted)
    archive: Any = None  # in the leg's build dir
    smoke: Any = None
    published: Any = None  # in dist/


class Graph:
    """Declares the nodes of the selected legs into one SCons environment."""

    def __init__(self, env: Any, root: Path, invocation: Invocation, matrix: Matrix, host: Host) -> None:
        self.env = env
        self.root = root
        self.build_root = root / "build"
        self.dist = root / "dist"
        self.settings: Settings = invocation.settings
        self.matrix = matrix
        self.host = host
        self.environ = {**os.environ, **settings_environment(invocation.settings)}
        self.legs: dict[str, LegNodes] = {}
        self._action = env.Action(_dispatch, strfunction=_describe)
        # Downloads, extractions and patched trees are shared by the legs that use them.
        self._shared: dict[Path, Any] = {}

    # -- helpers ---------------------------------------------------------------------
    def _value(self, name: str, payload: object) -> Any:
        return self.env.Value(canonical({"step": name, "step_version": STEP_VERSION, **_as_dict(payload)}))

    def _command(self, target: Any, sources: list[Any], step: str, leg_id: str, describe: str) -> Any:
        # One shared action: its signature is the dispatcher's, the step's settings are in its Value.
        nodes = self.env.Command(target, sources, self._action, GRAPH_STEP=step, GRAPH_LEG=leg_id,
                                 GRAPH_DESCRIBE=describe)
        self.env.NoCache(nodes)
        return nodes

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
        origins = self.settings.origins
        if download.name in origins:
            return origins[download.name]
        if "" in origins and plan.downloads and download is plan.downloads[0]:
            return origins[""]
        return ""

    def fetch(self, plan: Plan, download: Download) -> tuple[Any, Path]:
        origin = self._origin(plan, download)
        # Keyed without the pins: recording one (lock=1) must not move the download's files.
        key = short_hash(download.name, download.kind, download.url, download.filename, download.ref, origin)
        kind = "git" if download.kind == "git" else "downloads"
        target = self.build_root / kind / f"{plan.leg.engine}-{download.name}-{key}.json"
        if target in self._shared:
            return self._shared[target], target
        sources = [self._value("fetch", {"download": download, "origin": origin})]
        if origin and Path(origin).is_file():
            sources.append(self.env.File(str(Path(origin).resolve())))
        REGISTRY.fetches[str(target)] = (self, plan.leg.engine, download, origin)
        node = self._command(str(target), sources, "fetch", plan.leg.id, f"{download.name}: {origin or download.url}")
        self._shared[target] = node
        return node, target

    def extract(self, plan: Plan, download: Download, fetch_node: Any, fetch_manifest: Path) -> tuple[Any, Path]:
        target = self.build_root / "extract" / f"{fetch_manifest.stem}.json"
        if target in self._shared:
            return self._shared[target], target
        REGISTRY.extracts[str(target)] = (download, fetch_manifest, target.with_suffix(""))
        origin = self._origin(plan, download)
        node = self._command(str(target), [fetch_node, self._value("extract", {"roots": download.roots})],
                             "extract", plan.leg.id, Path(origin).name if origin else download.filename)
        self.env.Clean(node, str(target.with_suffix("")))
        self._shared[target] = node
        return node, target

    def source_tree(self, plan: Plan, engine: Engine, origin_node: Any, origin_manifest: Path) -> tuple[Any, Path]:
        scripts = [engine.root / p.file for p in plan.patches]
        key = short_hash(origin_manifest.name, [source_step.patch_key(s) for s in scripts])
        target = self.build_root / "src" / f"{engine.name}-{engine.version}-{key}.json"
        if target in self._shared:
            return self._shared[target], target
        sources = [origin_node, *(self.env.File(str(s)) for s in scripts),
                   self._value("patch", {"patches": plan.patches})]
        node = self._command(str(target), sources, "patch", plan.leg.id,
                             f"{engine.name} {engine.version}: " + ", ".join(p.name for p in plan.patches))
        REGISTRY.trees[str(target)] = (origin_manifest, scripts, target.with_suffix(""))
        self.env.Clean(node, str(target.with_suffix("")))
        self._shared[target] = node
        return node, target

    # -- one leg ---------------------------------------------------------------------------
    def add_leg(self, leg: Leg) -> LegNodes:
        if leg.id in self.legs:
            return self.legs[leg.id]
        engine = self._engine(leg)
        plan = plan_leg(leg, engine, self.matrix)
        if leg.aggregate:
            return self._add_aggregate(leg, plan, engine)
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
                sources[download.name] = fetch_manifest.with_suffix("") / _leaf(download)
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
        nodes = LegNodes(plan=plan, engine=engine, dirs=dirs, source_manifest=source_manifest)
        self.legs[leg.id] = nodes
        REGISTRY.legs[leg.id] = nodes
        steps_dir = dirs.logs.parent / "steps"
        previous = inputs
        if plan.build:
            build = self._command(str(steps_dir / "build.json"),
                                  [*inputs, self._value("build", {"commands": plan.build, "env": plan.env,
                                                                  "private": plan.private_source,
                                                                  "tools": self._build_tools(),
                                                                  "environment": self._build_environment(plan)})],
                                  "build", leg.id, leg.id)
            self.env.Clean(build, [str(dirs.build), str(dirs.install), str(dirs.venv)])
            previous = [build]
        stage_payload = {"collect": plan.collect, "exclude": plan.exclude, "bundle": plan.bundle,
                         "fixups": plan.fixups, "sign": self._signs(leg)}
        stage = self._command(str(steps_dir / "stage.json"), [*previous, self._value("stage", stage_payload)],
                              "stage", leg.id, leg.id)
        self.env.Clean(stage, str(dirs.stage))
        self._finish(nodes, stage)
        return nodes

    def _signs(self, leg: Leg) -> bool:
        """Signed and unsigned stages differ: a yes/no in the signature, never the identity."""
        return sign.applies_to(leg) and sign.will_sign(self.environ)

    def _build_tools(self) -> dict[str, str]:
        return _tool_versions("cmake", "ninja", "cc", "c++", "cl", "clang")

    def _build_environment(self, plan: Plan) -> dict[str, str]:
        """What the runner hands the build that changes its output: the toolchain's variables,
        every `{env:X}` the commands read, and the interpreter `{python}` stands for."""
        names = set(TOOLCHAIN_ENV)
        for command in plan.build:
            for text in (*command.argv, *command.env.values(), command.cwd):
                names.update(ENV_SYMBOL.findall(text))
        values = {name: self.environ.get(name, "") for name in sorted(names)}
        values["{python}"] = f"{sys.executable} {sys.version.split()[0]}"
        return values

    def _add_aggregate(self, leg: Leg, plan: Plan, engine: Engine) -> LegNodes:
        dirs = self._leg_dirs(leg, {}, {}, {})  # src/ receives the unpacked input archives
        nodes = LegNodes(plan=plan, engine=engine, dirs=dirs)
        self.legs[leg.id] = nodes
        REGISTRY.legs[leg.id] = nodes
        input_archives = []
        for input_id in leg.inputs:
            input_leg = self.matrix.leg(input_id)
            if self.settings.inputs == "build" and self.host.can_build(input_leg):
                input_archives.append(self.add_leg(input_leg).published)
                continue
            archive = self.dist / published_name(plan_leg(input_leg, self._engine(input_leg), self.matrix),
                                                 self.settings.format)
            if not archive.is_file():
                raise GraphError(f"{leg.id} needs {archive.relative_to(self.root)}: build {input_id} on "
                                 f"{input_leg.runner} (or download its CI artifact) into dist/")
            input_archives.append(self.env.File(str(archive)))
        merge = self._command(str(dirs.logs.parent / "steps" / "merge.json"),
                              [*input_archives, self._value("merge", {"aggregate": leg.aggregate,
                                                                      "inputs": leg.inputs,
                                                                      "sign": self._signs(leg)})],
                              "merge", leg.id, f"{leg.aggregate} of {', '.join(leg.inputs)}")
        self.env.Clean(merge, str(dirs.stage))
        self._finish(nodes, merge)
        return nodes

    def _finish(self, nodes: LegNodes, staged: Any) -> None:
        """archive -> verify -> smoke in the leg's build dir, then publish into dist/: an
        archive reaches dist/ only once it is verified and smoke-tested (or recorded not run)."""
        plan, leg, dirs = nodes.plan, nodes.plan.leg, nodes.dirs
        steps_dir = dirs.logs.parent / "steps"
        name = published_name(plan, self.settings.format)
        built = dirs.logs.parent / "archive" / name
        archive_nodes = self._command(
            [str(built), str(built) + ".sha256", str(built) + ".json"],
            [staged, self._value("archive", {"format": self.settings.format, "leg": leg,
                                             "engine": _engine_record(nodes.engine), "patches": plan.patches,
                                             "source_date_epoch": os.environ.get("SOURCE_DATE_EPOCH", "")})],
            "archive", leg.id, name)
        nodes.archive = archive_nodes[0]
        verify = self._command(str(steps_dir / "verify.json"),
                               [nodes.archive, self._value("verify", {"contract": plan.contract})],
                               "verify", leg.id, name)
        smoke_sources = [nodes.archive, verify, self._value("smoke", {
            "smoke": plan.smoke, "run_mode": self.host.run_mode(leg), "tools": _tool_versions("cmake", "c++")})]
        if plan.smoke:
            project = self.root / plan.smoke.project
            shared = sorted(project.parent.glob("*.cmake"))  # smoke/common.cmake
            smoke_sources += [self.env.File(str(p)) for p in [*sorted(project.rglob("*")), *shared] if p.is_file()]
        nodes.smoke = self._command(str(steps_dir / "smoke.json"), smoke_sources, "smoke", leg.id, name)
        published = self.dist / name
        publish = self._command([str(published), str(published) + ".sha256", str(published) + ".json"],
                                [*archive_nodes, verify, nodes.smoke], "publish", leg.id, f"dist/{name}")
        nodes.published = publish[0]
        self.env.Alias(leg.id, publish)


# Variables whose values change what an upstream build produces (the allow-listed toolchain).
TOOLCHAIN_ENV = ("DEVELOPER_DIR", "SDKROOT", "CUDA_HOME", "CUDA_PATH", "EMSDK", "ANDROID_NDK_HOME", "INCLUDE", "LIB",
                 "VCToolsInstallDir", "WindowsSDKVersion", "CMAKE_C_COMPILER_LAUNCHER", "CMAKE_CXX_COMPILER_LAUNCHER")
ENV_SYMBOL = re.compile(r"\{env\??;?:([A-Za-z0-9_]+)\}")


def published_name(plan: Plan, fmt: str) -> str:
    """The archive's file name in the chosen format (plans name the zip)."""
    return plan.archive if fmt == "zip" else plan.archive.removesuffix(".zip") + "." + fmt


def settings_environment(settings: Settings) -> dict[str, str]:
    """The settings child commands need (e.g. backends.steps.podspec fetching through the cache)."""
    return {"ANIRA_CACHE": str(settings.cache), "ANIRA_MIRRORS": ",".join(settings.mirrors),
            "ANIRA_OFFLINE": "1" if settings.offline else "0", "ANIRA_LOCK": "1" if settings.lock else "0"}


def _leaf(download: Download) -> str:
    return download.filename.removesuffix(".git") or download.name


def _engine_record(engine: Engine) -> dict[str, object]:
    return {"name": engine.name, "libname": engine.libname, "version": engine.version, "license": engine.license,
            "pins": dict(engine.pins)}


def _as_dict(payload: object) -> dict[str, object]:
    plain = _plain(payload)
    return plain if isinstance(plain, dict) else {"value": plain}


class _Registry:
    """What each declared target needs at run time (actions get only target/source/env)."""

    def __init__(self) -> None:
        self.legs: dict[str, LegNodes] = {}
        self.fetches: dict[str, tuple[Graph, str, Download, str]] = {}
        self.extracts: dict[str, tuple[Download, Path, Path]] = {}
        self.trees: dict[str, tuple[Path, list[Path], Path]] = {}
        # target path -> digest of the signatures of the sources it is being built from
        self.signatures: dict[str, str] = {}


REGISTRY = _Registry()


# -- actions ------------------------------------------------------------------------------

def _describe(target: list[Any], source: list[Any], env: Any) -> str:
    return f"[{env['GRAPH_STEP']}] {env['GRAPH_DESCRIBE']}"


def _dispatch(target: list[Any], source: list[Any], env: Any) -> int | None:
    step, leg_id = env["GRAPH_STEP"], env["GRAPH_LEG"]
    started = time.monotonic()
    try:
        REGISTRY.signatures[target[0].abspath] = _signature(source)
        ACTIONS[step](Path(target[0].abspath), leg_id)
        print(f"[{step}] {leg_id} done in {time.monotonic() - started:.1f} s", flush=True)
    except Exception as error:  # every step error becomes one clear SCons failure
        if os.environ.get("ANIRA_TRACEBACK"):
            traceback.print_exc()
        raise BuildError(errstr=f"{leg_id}: {step} failed: {error}") from error
    return None


def _signature(source: list[Any]) -> str:
    """What a step ran from. Build and stage manifests record it: their other content (argv,
    file counts) can stay identical when the step reran for a change it does not show (an
    env addition, a tool version, a patch's effect on the code), and the next step must
    rerun then too."""
    return hashlib.sha256("\0".join(str(node.get_csig()) for node in source).encode()).hexdigest()


def _do_fetch(target: Path, leg_id: str) -> None:
    graph, engine_name, download, origin = REGISTRY.fetches[str(target)]
    if download.kind == "git":
        _git_checkout(graph, engine_name, download, origin, target)
        return
    settings = graph.settings
    fetched = fetch_step.fetch(
        fetch_step.Download(url=origin or download.url, filename=Path(origin).name if origin else download.filename,
                            sha256=None if origin else (download.sha256 or None)),
        fetch_step.FetchSettings(cache_dir=settings.cache, mirrors=settings.mirrors, offline=settings.offline,
                                 lock=settings.lock or bool(origin)))
    if settings.lock and not origin and not download.sha256:
        record_pin(graph.matrix.engines[engine_name].root / "engine.toml", download.filename, fetched.sha256)
    write_json(target, {"name": download.name, "url": download.url, "override": origin,
                        "filename": download.filename, "sha256": fetched.sha256, "path": str(fetched.path)})


def _git_checkout(graph: Graph, engine_name: str, download: Download, origin: str, target: Path) -> None:
    url = origin or _git_mirror(graph.settings.mirrors, download) or download.url
    if graph.settings.offline and not Path(url).exists():
        raise RuntimeError(f"offline: no mirror holds {download.filename}; put a clone at <mirror>/{download.filename}")
    if not download.commit and not graph.settings.lock:
        raise RuntimeError(f"{download.url} at {download.ref} has no commit pin; run with lock=1 to record one")
    dest = target.with_suffix("") / _leaf(download)
    commit = git_step.checkout(url, download.ref, dest, submodules=download.submodules,
                               log=target.with_suffix(".log"), label=f"git {download.filename}")
    if download.commit and commit != download.commit:
        raise RuntimeError(f"{download.url} {download.ref} is {commit}, but the pin says {download.commit}")
    if not download.commit and not origin:
        record_commit(graph.matrix.engines[engine_name].root / "engine.toml", download.name, commit)
    write_json(target, {"name": download.name, "url": download.url, "origin": url, "override": origin,
                        "ref": download.ref, "commit": commit, "path": str(dest)})


def _git_mirror(mirrors: tuple[str, ...], download: Download) -> str:
    for mirror in mirrors:
        candidate = Path(mirror) / download.filename
        if candidate.exists():
            return str(candidate)
    return ""


def _fetched_file(fetch_manifest: Path) -> Path:
    record = _read(fetch_manifest)
    path = Path(record["path"])
    if not path.is_file():
        raise RuntimeError(f"{path} left the download cache; run `scons -c` for this leg or delete {fetch_manifest}")
    return path


def _do_extract(target: Path, leg_id: str) -> None:
    download, fetch_manifest, dest = REGISTRY.extracts[str(target)]
    archive = _fetched_file(fetch_manifest)
    tree = dest / "tree"
    for stale in dest.glob("tree.tmp-*"):  # left by a killed run
        shutil.rmtree(stale, ignore_errors=True)
    entries = extract(archive, tree, fmt=_format_of(archive.name))
    root = next((tree / r for r in download.roots if (tree / r).is_dir()), tree)
    if download.roots and root == tree:
        raise RuntimeError(f"{archive.name} has none of the top-level directories {', '.join(download.roots)}")
    # The bytes' identity makes this manifest change whenever they do, so every later step reruns.
    write_json(target, {"archive": archive.name, "sha256": _read(fetch_manifest)["sha256"], "root": str(root),
                        "entries": len(entries)})


def _format_of(name: str) -> str | None:
    return "zip" if name.endswith((".whl", ".aar", ".nupkg")) else None


def _do_patch(target: Path, leg_id: str) -> None:
    origin_manifest, scripts, dest = REGISTRY.trees[str(target)]
    record = _read(origin_manifest)
    origin = Path(record["root"] if "root" in record else record["path"])
    # An extraction's (root) copy is tree/, a checkout's keeps its leaf name (see add_leg).
    tree = dest / "tree" if "root" in record else dest / origin.name
    outcomes = source_step.prepare_tree(origin, tree, scripts)
    for outcome in outcomes:
        print(f"[patch] {outcome.describe()}", flush=True)
    write_json(target, {"origin": str(origin), "origin_id": record.get("sha256") or record.get("commit", ""),
                        "path": str(tree), "patches": [dataclasses.asdict(o) for o in outcomes]})


def _shared_src(nodes: LegNodes) -> Path | None:
    """The tree the leg's source manifest names (patched, checked out or extracted)."""
    if nodes.source_manifest is None:
        return None
    record = _read(nodes.source_manifest)
    return Path(record["root"] if "root" in record else record["path"])


def _resolved_dirs(nodes: LegNodes) -> LegDirs:
    """Manifest paths in the plan's tables become the real files and trees they describe;
    an in-source build gets its private copy of the tree (see Plan.private_source)."""
    dirs = nodes.dirs
    extracts = {n: Path(_read(p)["root"]) for n, p in dirs.extracts.items()}
    downloads = {n: Path(_read(p)["path"]) for n, p in dirs.downloads.items()}
    shared = _shared_src(nodes)
    src = dirs.src
    if shared is not None:
        src = dirs.src / shared.name if nodes.plan.private_source else shared
    return dataclasses.replace(dirs, src=src, extracts=extracts, downloads=downloads)


def _source_key(nodes: LegNodes) -> str:
    """Changes whenever the leg's source tree does (new pin, new bytes, new patch set)."""
    return short_hash(_read(nodes.source_manifest)) if nodes.source_manifest else ""


def _do_build(target: Path, leg_id: str) -> None:
    nodes = REGISTRY.legs[leg_id]
    graph = _graph()
    dirs = _resolved_dirs(nodes)
    plan = nodes.plan
    key = _source_key(nodes)
    if plan.private_source and (shared := _shared_src(nodes)) is not None:
        upstream_step.private_copy(shared, dirs.src, key)
    ran = upstream_step.build(plan.build, plan.env, dirs, leg_id, graph.environ, graph.settings.verbose,
                              graph.settings.heavy_jobs, graph.build_root / "locks", source_key=key)
    write_json(target, {"leg": leg_id, "commands": ran, "tools": graph._build_tools(),
                        "signature": REGISTRY.signatures.get(str(target), "")})


def _graph() -> Graph:
    return GRAPH[0]


def _do_stage(target: Path, leg_id: str) -> None:
    nodes = REGISTRY.legs[leg_id]
    graph = _graph()
    dirs = _resolved_dirs(nodes)
    signs = graph._signs(nodes.plan.leg)
    result = stage_step.stage(nodes.plan, dirs, graph.environ, copy=signs)
    if nodes.plan.fixups:
        result["fixups"] = upstream_step.run_commands(nodes.plan.fixups, nodes.plan.env, dirs, leg_id, graph.environ,
                                                      graph.settings.verbose, log_prefix="fixup")
    if sign.applies_to(nodes.plan.leg):
        result["signing"] = sign.sign_stage(dirs.stage, graph.environ).record()
    result["files"] = len([e for e in list_tree(dirs.stage, with_hashes=False) if e.kind != "dir"])
    result["signature"] = REGISTRY.signatures.get(str(target), "")
    write_json(target, result)


def _do_merge(target: Path, leg_id: str) -> None:
    nodes = REGISTRY.legs[leg_id]
    graph = _graph()
    leg, dirs = nodes.plan.leg, nodes.dirs
    inputs = [graph.matrix.leg(input_id) for input_id in leg.inputs]
    unpacked = []
    for input_leg in inputs:
        input_plan = plan_leg(input_leg, graph._engine(input_leg), graph.matrix)
        where = dirs.src / input_leg.id
        extract(graph.dist / published_name(input_plan, graph.settings.format), where)
        unpacked.append(where)
    shutil.rmtree(dirs.stage, ignore_errors=True)
    if leg.aggregate == "universal":
        report = universal_tree(unpacked[0], unpacked[1], dirs.stage)
    else:
        report = _android_bundle([leg.arch for leg in inputs], unpacked, dirs.stage)
    record: dict[str, object] = {"inputs": list(leg.inputs), "report": report,
                                 "signature": REGISTRY.signatures.get(str(target), "")}
    if sign.applies_to(leg):  # lipo invalidates the slices' signatures
        record["signing"] = sign.sign_stage(dirs.stage, graph.environ).record()
    write_json(target, record)


def _android_bundle(abis: list[str], unpacked: list[Path], stage: Path) -> list[str]:
    """include/ from the first ABI, each ABI's libraries under lib/<abi>/ (spec §3)."""
    stage.mkdir(parents=True)
    shutil.copytree(unpacked[0] / "include", stage / "include", symlinks=True)
    report = []
    for abi, tree in zip(abis, unpacked):
        for lib in sorted((tree / "lib").glob("*")):
            if lib.is_file():
                (stage / "lib" / abi).mkdir(parents=True, exist_ok=True)
                shutil.copy2(lib, stage / "lib" / abi / lib.name)
                report.append(f"lib/{abi}/{lib.name}")
    return report


def _do_archive(target: Path, leg_id: str) -> None:
    nodes = REGISTRY.legs[leg_id]
    graph = _graph()
    dirs = nodes.dirs
    archive_step.write_archive(dirs.stage, target, graph.settings.format)
    archive_step.sha256_sidecar(target)
    sources = [_source_record(_read(p)) for p in dirs.downloads.values() if Path(p).is_file()]
    steps_dir = dirs.logs.parent / "steps"
    names = ["merge"] if nodes.plan.leg.aggregate else (["build"] if nodes.plan.build else []) + ["stage"]
    steps = {name: _read(steps_dir / f"{name}.json") for name in names}
    tools = steps.get("build", {}).get("tools", {})  # what built it, not what is installed now
    record = manifest_step.archive_manifest(nodes.plan, nodes.engine, target, dirs.stage, sources, steps, tools)
    write_json(target.with_name(target.name + ".json"), record)


def _source_record(fetched: Mapping[str, Any]) -> dict[str, Any]:
    """What the manifest says about a download: where it is pinned, what bytes were used,
    and an origin only when the command line replaced the upstream one (no local paths
    of the cache or mirrors: the same bytes give the same manifest)."""
    keys = ("name", "url", "filename", "sha256", "ref", "commit")
    record = {k: fetched[k] for k in keys if fetched.get(k)}
    if fetched.get("override"):
        record["origin"] = fetched["override"]
    return record


def _do_publish(target: Path, leg_id: str) -> None:
    """Link the verified archive and its sidecars into dist/, each by an atomic rename,
    the archive last: dist/ never holds a partial or unverified file, and the archive is
    the commit point (SCons removed the old files before this ran)."""
    nodes = REGISTRY.legs[leg_id]
    built = Path(nodes.archive.abspath)
    target.parent.mkdir(parents=True, exist_ok=True)
    for suffix in (".json", ".sha256", ""):
        source = built.with_name(built.name + suffix)
        temp = built.with_name(f".publish-{built.name}{suffix}")
        temp.unlink(missing_ok=True)
        hardlink_or_copy(source, temp)
        os.replace(temp, target.with_name(target.name + suffix))
    files = len(_read(built.with_name(built.name + ".json"))["files"])
    print(f"[publish] dist/{target.name}: {target.stat().st_size / 1e6:.1f} MB, {files} files", flush=True)


def _do_verify(target: Path, leg_id: str) -> None:
    nodes = REGISTRY.legs[leg_id]
    graph = _graph()
    archive = nodes.archive.abspath
    result = verify_step.verify(Path(archive), nodes.plan.contract, nodes.engine.version, str(graph.build_root))
    write_json(target, result)


def _do_smoke(target: Path, leg_id: str) -> None:
    nodes = REGISTRY.legs[leg_id]
    graph = _graph()
    plan, leg = nodes.plan, nodes.plan.leg
    mode = graph.host.run_mode(leg)
    if plan.smoke is None:
        result = smoke_step.not_run("no consumer program for this package form" if leg.can_run
                                    else graph.host.why_not_run(leg), leg_id)
    elif mode not in ("native", "rosetta", "simulator", "qemu"):
        result = smoke_step.not_run(graph.host.why_not_run(leg), leg_id)
    else:
        result = smoke_step.smoke(Path(nodes.archive.abspath), plan.smoke, graph.root,
                                  nodes.dirs.logs.parent / "smoke", nodes.dirs.logs, leg_id, graph.environ,
                                  graph.settings.verbose, mode)
    write_json(target, {"leg": leg_id, **result})


ACTIONS: dict[str, Callable[[Path, str], None]] = {
    "fetch": _do_fetch, "extract": _do_extract, "patch": _do_patch, "build": _do_build, "stage": _do_stage,
    "merge": _do_merge, "archive": _do_archive, "verify": _do_verify, "smoke": _do_smoke,
    "publish": _do_publish,
}

GRAPH: list[Graph] = []


# Files above this size are re-hashed only when their mtime changed; smaller ones always.
LARGE_FILE = 1 << 20


def decide(dependency: Any, target: Any, prev_ni: Any, repo_node: Any = None) -> bool:
    """SCons' content-timestamp decider compares whole-second mtimes (SCons#2980), so a
    manifest rewritten within the same second as its last build would look unchanged and
    the next step would not rerun. Manifests and settings are small: compare their content
    always; large inputs (archives, wheels) by mtime first, then content."""
    if isinstance(dependency, FSFile) and (dependency.getsize() or 0) > LARGE_FILE:
        return dependency.changed_timestamp_then_content(target, prev_ni, repo_node)
    return dependency.changed_content(target, prev_ni, repo_node)


def declare(env: Any, root: Path, invocation: Invocation, matrix: Matrix, host: Host) -> Graph:
    env.Decider(decide)
    graph = Graph(env, root, invocation, matrix, host)
    GRAPH[:] = [graph]
    for plan in invocation.plans:
        graph.add_leg(plan.leg)
    scons.Default([graph.legs[plan.leg.id].published for plan in invocation.plans])
    return graph


