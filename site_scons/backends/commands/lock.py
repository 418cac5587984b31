"""`scons lock`: record the pins a selection is missing, from any host, without building.

For every input of the selected legs (pins/inputs.py): a file is fetched through the download
cache (`mirror=`, `offline=`) and hashed; an `origin=` of the same file name is read and
hashed every time instead (the bytes given are what is judged, never a cache entry found
by the pinned name); a git ref is resolved with `git ls-remote` (no clone); a file that
names another one (TFLite's podspec) is read, and the file it names fetched too. What is
missing is recorded into engine.toml (trust on first use). A branch (`ref = "main"`) is
recorded as the commit it names now; later locks keep that commit and say where the branch
moved.

An input that cannot be fetched or resolved (an HTTP error, no network, offline without a
mirror) is listed, and every other input is still recorded: a lock makes what progress it
can, and exits non-zero while something is left. What is recorded is checked and never
overwritten: another file, a moved tag or another named URL is a conflict naming both
values, and then nothing at all is written for that engine (neither new pins, nor dropped
ones, nor a version bump): upstream contradicting one pin casts doubt on the engine's
others. The other engines' pins are recorded.

A lock holds the tree as a build does (build/.lock, util/buildtree.py: it waits for the holder,
or refuses with `wait=0`) from before it reads engine.toml until it has written it: one
lock at a time edits a tree's pins, and one that waited judges what the other recorded.
That lock file is all it writes under build/; nothing under dist/.

Pins the data no longer asks for are edited data, not conflicts: a recorded commit that
upstream names by another tag (the version line was edited) is replaced by the new tag's,
and when every leg of an engine is selected, the pins none of them uses are dropped.
`version=V` first bumps the one selected engine: its `version` line, and the pins only the
old version used (a file whose URL changes, a commit whose ref follows the version), judged
over all of the engine's legs however narrow the selection.
"""
from __future__ import annotations

import sys
import time
from dataclasses import dataclass, replace
from pathlib import Path
from types import MappingProxyType
from typing import Callable, Sequence

from backends.graph.settings import Settings
from backends.model.engine import Engine
from backends.model.leg import Leg
from backends.model.matrix import Matrix, load_matrix
from backends.model.plan import Plan
from backends.model.recipes import plan_all
from backends.pins.engine_toml import Changes, apply
from backends.pins.inputs import FILE, GIT, UNPINNED, Input, collect, named_input, origin_of
from backends.steps import fetch as fetch_step
from backends.steps import git
from backends.steps.podspec import PodspecError, podspec_field
from backends.util.buildtree import TreeBusy, lock_tree
from backends.util.errors import BackendsError
from backends.util.locations import url_filename
from backends.util.textfit import format_table


class LockError(BackendsError, RuntimeError):
    """An input that cannot be pinned, or a recorded pin upstream contradicts."""


class PinConflict(LockError):
    """A recorded pin that upstream (or the `origin=` given) contradicts: nothing is written
    for its engine."""


class LockIncomplete(LockError):
    """Some inputs were not pinned; what could be was recorded. The message lists the
    failures, then what was done."""


@dataclass(frozen=True)
class Failure:
    """An input this lock could not pin, and why."""

    input: Input
    reason: str
    conflict: bool  # a recorded pin contradicted (nothing written for the engine), not a fetch that failed

    def line(self) -> str:
        return f"  {self.input.label}: {'conflict: ' if self.conflict else ''}{self.reason}"


@dataclass(frozen=True)
class Outcome:
    input: Input
    old: str
    new: str
    note: str = ""

    def row(self) -> dict[str, str]:
        if self.old != self.new:
            pin = f"{self.old or UNPINNED} -> {self.new}"
        else:
            pin = self.old + ("" if self.note else " (verified)")
        return {"engine": self.input.engine, "input": self.input.shown, "legs": str(len(self.input.legs)),
                "pin": pin + (f"; {self.note}" if self.note else "")}


@dataclass(frozen=True)
class Bump:
    """A version bump of one engine: the data it builds with, and the pins it drops."""

    engine: str
    version: str
    matrix: Matrix  # with the engine at its new version, minus the dropped pins
    changes: Changes  # the version line and the dropped pins, to write


def lock_tree_pins(root: Path, legs: Sequence[Leg], settings: Settings) -> str:
    """`scons lock` in the tree at `root`: `lock`, holding the tree from reading the data to
    writing it (the data read before the lock was taken may be stale by then)."""
    try:
        tree = lock_tree(root / "build", wait=settings.wait)
    except TreeBusy as busy:
        raise LockError(str(busy)) from None
    try:
        matrix = load_matrix(root)
        return lock(matrix, _legs_in(matrix, legs), settings)
    finally:
        tree.release()


def _legs_in(matrix: Matrix, legs: Sequence[Leg]) -> list[Leg]:
    try:
        return [matrix.leg(leg.id) for leg in legs]
    except KeyError as gone:
        raise LockError(f"{gone.args[0]} is no longer in variants/ (edited while this lock waited for the tree): "
                        "run `scons lock` again") from None


def lock(matrix: Matrix, legs: Sequence[Leg], settings: Settings,
         clock: Callable[[], float] = time.monotonic) -> str:
    """Resolve every input of `legs`, record what is missing; the table of what was done.
    Raises LockIncomplete, after recording the rest, when an input could not be pinned, or
    was not tried because `settings.lock_minutes` ran out (a job's time limit would lose
    every hash fetched; the budget keeps them)."""
    deadline = clock() + 60 * settings.lock_minutes if settings.lock_minutes else None
    bump = bump_version(matrix, legs, settings.version) if settings.version else None
    data = bump.matrix if bump else matrix
    plans = plan_all(data, list(legs))
    inputs = collect(plans, data)
    outcomes: list[Outcome] = []
    failures: list[Failure] = []
    for item in inputs:
        if item.parent:
            continue  # resolved with the file that names it
        if deadline is not None and clock() >= deadline:
            failures.append(Failure(item, f"not tried: lock_minutes={settings.lock_minutes} ran out; lock again "
                                          "for the rest", conflict=False))
            continue
        try:
            outcomes += _resolve(item, origin_of(item, plans, settings.origins), settings, data.engines[item.engine])
        except LockError as error:
            failures.append(Failure(item, str(error), isinstance(error, PinConflict)))
    conflicted = {failure.input.engine for failure in failures if failure.conflict}
    recorded = [outcome for outcome in outcomes if outcome.input.engine not in conflicted]
    changes = _unused_pins(data, [leg for leg in legs if leg.engine not in conflicted],
                           [o.input for o in recorded] + _unresolved(inputs, failures))
    if bump and bump.engine not in conflicted:
        changes[bump.engine] = _merged(bump.changes, changes.get(bump.engine, Changes()))
    written = _write(recorded, changes, data)
    text = _summary(recorded, changes, written, bump if bump and bump.engine not in conflicted else None, matrix)
    if failures:
        raise LockIncomplete(_failure_text(failures, conflicted, recorded) + ("\n\n" + text if recorded else ""))
    return text


def _unresolved(inputs: Sequence[Input], failures: Sequence[Failure]) -> list[Input]:
    """The inputs a failure left unjudged (the file a failed one names, too): their recorded
    pins are still in use, never dropped as unused."""
    failed = {(failure.input.engine, failure.input.key) for failure in failures}
    return [item for item in inputs if (item.engine, item.key) in failed or (item.engine, item.parent) in failed]


def _failure_text(failures: Sequence[Failure], conflicted: set[str], recorded: Sequence[Outcome]) -> str:
    """What a lock that left inputs unpinned says: each failure, and what was (not) written."""
    count = f"{len(failures)} input{'' if len(failures) == 1 else 's'}"
    lines = [f"{count} not pinned:", *(failure.line() for failure in failures)]
    for engine in sorted(conflicted):
        lines.append(f"{engine}: nothing was written to engine.toml: a recorded pin conflicts with upstream (above). "
                     "Check upstream; if it really re-published, verify the new file or commit, delete the old pin "
                     "and lock again")
    others = list(dict.fromkeys(outcome.input.engine for outcome in recorded))
    if others:
        lines.append(f"the other inputs of {', '.join(others)} were recorded or verified (below); fix the failures "
                     "above and lock again to record the rest")
    return "\n".join(lines)


def _summary(recorded: Sequence[Outcome], changes: dict[str, Changes], written: int, bump: Bump | None,
             matrix: Matrix) -> str:
    lines = [format_table([o.row() for o in recorded], fit=False)]
    if bump:
        lines.append(f"{bump.engine}: version {matrix.engines[bump.engine].version} -> {bump.version}")
    for engine, edit in changes.items():
        if _dropped(edit):
            lines.append(f"{engine}: dropped the pins no leg uses any more: {', '.join(_dropped(edit))}")
    lines.append(f"recorded {written} new pin{'' if written == 1 else 's'}: review `git diff engines/` and commit it"
                 if written or any(changes.values()) else
                 "every input was already pinned and matches upstream: nothing written")
    return "\n".join(lines)


def _unused_pins(data: Matrix, legs: Sequence[Leg], in_use: Sequence[Input]) -> dict[str, Changes]:
    """For each engine whose every leg is selected: the recorded pins no input uses (left by a
    hand-edited version or `[pins]` value). `in_use`: the inputs resolved, and those a failure
    left unjudged."""
    selected = {leg.id for leg in legs}
    changes = {}
    for name in dict.fromkeys(leg.engine for leg in legs):
        if not all(leg.id in selected for leg in data.legs if leg.engine == name):
            continue
        engine = data.engines[name]
        used = [item for item in in_use if item.engine == name and item.kind == FILE]
        unused = Changes(drop_sha256=set(engine.sha256) - {item.key for item in used},
                         drop_nested=set(engine.nested) - {item.key for item in used if item.names})
        if unused:
            changes[name] = unused
    return changes


def _merged(first: Changes, second: Changes) -> Changes:
    return replace(first, drop_sha256=first.drop_sha256 | second.drop_sha256,
                   drop_nested=first.drop_nested | second.drop_nested)


# -- a version bump ---------------------------------------------------------------------------

def bump_version(matrix: Matrix, legs: Sequence[Leg], version: str) -> Bump:
    """The selected engine at `version`, without the pins only its old version used."""
    name = legs[0].engine  # the frontend allows version= with one engine only
    engine = matrix.engines[name]
    every = [leg for leg in matrix.legs if leg.engine == name]
    moved = engine.with_version(version)
    old_files = _file_urls(plan_all(matrix, every), matrix)
    new_files = _file_urls(plan_all(_with_engine(matrix, moved), every), matrix)
    dropped = {key for key, url in old_files.items() if new_files.get(key) != url and key in engine.sha256}
    nested = {key for key in dropped if key in engine.nested}
    dropped |= {url_filename(engine.nested[key]) for key in nested} & set(engine.sha256)
    cleared = {source for source, spec in engine.sources.items()
               if spec.recorded_commit and not moved.sources[source].commit}
    cleaned = replace(moved, sha256=MappingProxyType({k: v for k, v in engine.sha256.items() if k not in dropped}),
                      nested=MappingProxyType({k: v for k, v in engine.nested.items() if k not in nested}))
    changes = Changes(version=version, drop_sha256=dropped, drop_nested=nested,
                      commits={source: "" for source in cleared})
    return Bump(name, version, _with_engine(matrix, cleaned), changes)


def _file_urls(plans: Sequence[Plan], matrix: Matrix) -> dict[str, str]:
    return {item.key: item.url for item in collect(plans, matrix) if item.kind == FILE and not item.parent}


def _with_engine(matrix: Matrix, engine: Engine) -> Matrix:
    return replace(matrix, engines=MappingProxyType({**matrix.engines, engine.name: engine}))


def _dropped(changes: Changes) -> list[str]:
    cleared = (f"{source} commit" for source, commit in sorted(changes.commits.items()) if not commit)
    return [*sorted(changes.drop_sha256), *(f"[nested] {name}" for name in sorted(changes.drop_nested)), *cleared]


# -- resolving one input ----------------------------------------------------------------------

def _resolve(item: Input, origin: str, settings: Settings, engine: Engine) -> list[Outcome]:
    if item.kind == GIT:
        return [_resolve_git(item, origin, settings)]
    fetched = _fetch(item, origin, settings)
    outcomes = [Outcome(item, item.pin, fetched.sha256)]
    if item.names:
        outcomes.append(_resolve_named(item, fetched.path, settings, engine))
    return outcomes


def _fetch(item: Input, origin: str, settings: Settings) -> fetch_step.Fetched:
    if origin and url_filename(origin.replace("\\", "/")) != item.key:
        raise LockError(f"origin={origin} is not {item.key}: lock pins upstream's own file, so an origin must be "
                        "a copy of it under the same name (use it for builds, not for locking)")
    print(f"lock: {item.label} <- {origin or item.url}", file=sys.stderr, flush=True)
    if origin:
        return _fetch_origin(item, origin, settings)
    return _fetched(fetch_step.Download(url=item.url, filename=item.key, sha256=item.pin or None),
                    settings, settings.mirrors)


def _fetch_origin(item: Input, origin: str, settings: Settings) -> fetch_step.Fetched:
    """The given file, read and hashed, then held to the pin."""
    # Fetched unpinned and without mirrors: a pin would be a cache hit by its name, and a
    # mirror's copy is not the file given.
    fetched = _fetched(fetch_step.Download(url=origin, filename=item.key, sha256=None), settings, ())
    if item.pin and fetched.sha256 != item.pin:
        raise PinConflict(f"sha256 mismatch: origin={origin} is {fetched.sha256}, but engine.toml pins {item.key} "
                          f"as {item.pin}. It is not the pinned file: give a copy of upstream's, or if upstream "
                          "really re-published it, verify the new one, delete its line and lock again")
    return fetched


def _fetched(download: fetch_step.Download, settings: Settings, mirrors: tuple[str, ...]) -> fetch_step.Fetched:
    try:
        return fetch_step.fetch(download, fetch_step.FetchSettings(
            cache_dir=settings.cache, mirrors=mirrors, offline=settings.offline, lock=True))
    except fetch_step.PinMismatch as error:
        raise PinConflict(str(error)) from None
    except fetch_step.FetchError as error:
        raise LockError(str(error)) from None


def _resolve_named(parent: Input, path: Path, settings: Settings, engine: Engine) -> Outcome:
    """The file `parent` names in its field: recorded in [nested] and pinned under its own name."""
    try:
        url = podspec_field(path, parent.names)
    except PodspecError as error:
        raise LockError(str(error)) from None
    recorded = engine.nested.get(parent.key, "")
    if recorded and recorded != url:
        raise PinConflict(f"{parent.key} names {url} in {parent.names}, but [nested] records {recorded}")
    named = named_input(parent, url, engine)
    fetched = _fetch(named, "", settings)
    return Outcome(named, named.pin, fetched.sha256, note="" if recorded else f"named in {parent.key}")


def _resolve_git(item: Input, origin: str, settings: Settings) -> Outcome:
    if git.is_commit(item.ref):
        if item.pin and item.pin != item.ref:
            raise PinConflict(f"the ref is the commit {item.ref}, but commit says {item.pin}: make them one")
        return Outcome(item, item.pin, item.ref, note="the ref is the commit")
    remotes = git.Remotes(settings.cache, settings.mirrors, settings.offline).of(item.url, origin)
    if not remotes:
        raise LockError(f"offline, and no mirror= directory holds a clone named {git.repository_name(item.url)}")
    failures = []
    for remote in remotes:
        print(f"lock: {item.label} <- git ls-remote {remote}", file=sys.stderr, flush=True)
        try:
            resolved = git.resolve(remote, item.ref)
        except git.GitError as error:
            failures.append(str(error))
            continue
        if not item.pin or resolved.commit == item.pin:
            return Outcome(item, item.pin, resolved.commit)
        if resolved.moving:
            return Outcome(item, item.pin, item.pin, note=f"branch {item.ref} is now at {resolved.commit}")
        earlier = git.tags_at(remote, item.pin)
        if earlier:  # the data moved to another tag (a hand-edited version or [pins] value)
            return Outcome(item, item.pin, resolved.commit, note=f"the recorded commit is {earlier[0]}'s")
        raise PinConflict(f"commit mismatch: engine.toml pins {item.pin}, which no tag of {remote} names, but "
                          f"{resolved.ref} is {resolved.commit}. A tag that moved is not the release that was "
                          "pinned: check upstream, and only then clear the commit and lock again")
    raise LockError("; ".join(failures))


# -- writing ------------------------------------------------------------------------------------

def _write(outcomes: Sequence[Outcome], changes: dict[str, Changes], data: Matrix) -> int:
    """Add what is new to `changes` and write them, one locked edit per engine.toml; returns
    how many pins were recorded."""
    written = 0
    for outcome in outcomes:
        item = outcome.input
        edit = changes.setdefault(item.engine, Changes())
        if item.parent and item.parent not in data.engines[item.engine].nested:
            edit.nested[item.parent] = item.url
        if outcome.old == outcome.new:
            continue
        if item.kind == GIT:
            edit.commits[item.source] = outcome.new
        else:
            edit.sha256[item.key] = outcome.new
        written += 1
    for engine, edit in changes.items():
        if edit:
            apply(data.engines[engine].root / "engine.toml", edit)
    return written
