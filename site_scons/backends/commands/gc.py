"""`scons gc=1`: remove what no leg references any more, and say how much it was.

What is referenced is what the step graph would declare for every leg of the matrix at the
current data (pins, patches, versions), plus the command line's own selection with its
`version=` / `origin=` overrides, plus each leg as its last published run made it (the
options that run recorded): the graph is declared against a recorder instead of SCons,
so the answer comes from the same code that names the paths when building. Unreferenced:

- build/{downloads,git,extract,src}/<step>.json and the trees, logs and settings beside them;
- build/legs/<leg>/ of legs that no longer exist;
- cache entries (cache/sha256/<hex>/) that no pin names and no referenced fetch record
  uses, and interrupted downloads (cache/partial/*.part);
- in dist/, sidecars whose archive is missing, and every file of a set whose sidecars do
  not describe its archive (each archive is hashed), both left by interrupted publishes.

A cache shared by several checkouts is only judged by this one's data: point `cache=` at a
private directory before collecting, or do not collect it.
"""
from __future__ import annotations

import dataclasses
import os
from pathlib import Path
from typing import Any, Iterable

from backends.graph.actions import RunContext
from backends.graph.declare import Graph
from backends.graph.records import read_record
from backends.graph.settings import Settings
from backends.model.leg import Leg
from backends.probes.host import Host
from backends.steps.publish import dist_debris, published_files
from backends.util.buildtree import STEP_DIRS
from backends.util.files import human_size, relative_label, remove_path


class _Recorder:
    """Stands in for an SCons environment: keeps the targets the graph declares."""

    def __init__(self) -> None:
        self.targets: set[str] = set()

    def Action(self, *args: Any, **kwargs: Any) -> None:  # noqa: N802 (SCons' spelling)
        return None

    def Command(self, targets: list[str], sources: Any, action: Any, **kwargs: Any) -> list[str]:  # noqa: N802
        self.targets.update(os.path.abspath(t) for t in targets)
        return list(targets)

    def Value(self, text: str) -> Any:  # noqa: N802
        return _Settings(text)

    def File(self, path: str) -> str:  # noqa: N802
        return path

    def NoCache(self, *args: Any) -> None:  # noqa: N802
        return None

    def Clean(self, *args: Any) -> None:  # noqa: N802
        return None

    def Alias(self, *args: Any) -> None:  # noqa: N802
        return None


@dataclasses.dataclass
class _Settings:
    value: str
    changed_since_last_build: int = 0


class _EveryHost(Host):
    """Aggregates declare their inputs as built ones: their trees count too."""

    def can_build(self, leg: Any) -> bool:
        return True


def referenced_targets(run: RunContext, selections: Iterable[tuple[Settings, Iterable[Leg]]]) -> set[str]:
    """Every target the graph declares for each (settings, legs) selection."""
    recorder = _Recorder()
    for settings, legs in selections:
        context = dataclasses.replace(run, settings=settings, host=_EveryHost(run.host.os, run.host.arch),
                                      legs={}, steps={})
        graph = Graph(recorder, context)
        for leg in legs:
            graph.add_leg(leg)
    return recorder.targets


@dataclasses.dataclass(frozen=True)
class Garbage:
    path: Path
    size: int


def _size(path: Path) -> int:
    if path.is_symlink() or path.is_file():
        return path.lstat().st_size
    total = 0
    for directory, _, files in os.walk(path):
        for name in files:
            try:
                total += os.lstat(os.path.join(directory, name)).st_size
            except OSError:
                pass
    return total


def _step_garbage(build_root: Path, referenced: set[str]) -> list[Path]:
    """Step records (and what lies beside them under the same stem) no leg references."""
    garbage = []
    for kind in STEP_DIRS:
        directory = build_root / kind
        if not directory.is_dir():
            continue
        kept_stems = {Path(t).stem for t in referenced if Path(t).parent == directory}
        for entry in sorted(directory.iterdir()):
            stem = entry.name.split(".", 1)[0] if entry.is_file() else entry.name
            if stem not in kept_stems:
                garbage.append(entry)
    legs = build_root / "legs"
    kept_legs = {Path(t).relative_to(legs).parts[0] for t in referenced if Path(t).is_relative_to(legs)}
    if legs.is_dir():
        garbage += [entry for entry in sorted(legs.iterdir()) if entry.name not in kept_legs]
    return garbage


def _cache_garbage(cache: Path, kept_digests: set[str]) -> list[Path]:
    garbage = []
    entries = cache / "sha256"
    if entries.is_dir():
        garbage += [entry for entry in sorted(entries.iterdir()) if entry.name not in kept_digests]
    partial = cache / "partial"
    if partial.is_dir():
        garbage += sorted(partial.glob("*.part"))
    return garbage


def _dist_garbage(dist: Path) -> list[Path]:
    debris = dist_debris(dist, hash_archives=True)
    mismatched = [path for archive, _ in debris.mismatched for path in published_files(archive) if path.exists()]
    return [*debris.lone_sidecars, *mismatched]


def _kept_digests(run: RunContext, referenced: set[str]) -> set[str]:
    digests = {pin for engine in run.matrix.engines.values() for pin in engine.sha256.values() if pin}
    for target in referenced:
        if Path(target).parent.name == "downloads":
            record = read_record(Path(target))
            if record and record.get("sha256"):
                digests.add(str(record["sha256"]))
    return digests


def _last_runs(run: RunContext, as_built: Settings) -> list[tuple[Settings, Iterable[Leg]]]:
    """Each leg as its last published run made it (its `version=`, `origin=`, `format=`, from
    its publish record), so what a leg's last good build used is kept (the quick start's
    wheel, say), and typing that command again stays a no-op."""
    known = {leg.id: leg for leg in run.matrix.legs}
    selections: list[tuple[Settings, Iterable[Leg]]] = []
    for record_path in sorted((run.build_root / "legs").glob("*/steps/publish.json")):
        leg = known.get(record_path.parent.parent.name)
        last = (read_record(record_path) or {}).get("run")
        if leg is None or not isinstance(last, dict):
            continue
        origins = found if isinstance(found := last.get("origins"), dict) else {}
        selections.append((dataclasses.replace(as_built, version=str(last.get("version") or ""),
                                               origins={str(k): str(v) for k, v in origins.items()},
                                               format=str(last.get("format") or as_built.format)), [leg]))
    return selections


def collect(run: RunContext, selected: Iterable[Leg]) -> list[Garbage]:
    """Everything unreferenced, with its size (nothing is removed yet): referenced is the
    whole matrix at the current data, and the selection with the command line's overrides."""
    as_built = dataclasses.replace(run.settings, inputs="build")
    selections: list[tuple[Settings, Iterable[Leg]]] = [
        (dataclasses.replace(as_built, version="", origins={}), run.matrix.legs)]
    if run.settings.version or run.settings.origins:
        selections.append((as_built, selected))
    selections += _last_runs(run, as_built)
    referenced = referenced_targets(run, selections)
    found = _step_garbage(run.build_root, referenced)
    found += _cache_garbage(run.settings.cache, _kept_digests(run, referenced))
    found += _dist_garbage(run.dist)
    return [Garbage(path, _size(path)) for path in found]


def remove(garbage: list[Garbage], root: Path) -> list[str]:
    lines = []
    for item in garbage:
        remove_path(item.path)
        lines.append(f"  {human_size(item.size):>10}  {relative_label(item.path, root)}")
    total = sum(item.size for item in garbage)
    lines.append(f"gc: removed {len(garbage)} unreferenced entries, {human_size(total)}" if garbage
                 else "gc: nothing unreferenced")
    return lines
