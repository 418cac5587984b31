"""`scons affected since=<git ref>`: which legs a change rebuilds, from their key parts.

A leg's key (cache/key.py) hashes named parts: the engine and version, the inputs' pins, the
patches, the plan, the smoke project, the step implementations' version, the runner and the
format. The parts are computed for the working tree and for <ref>'s data (its engines/,
variants/ and smoke/, read with `git archive` into a temporary directory), both with the code
that runs now, so what differs is what the change to the data does. A leg whose parts differ
reruns from the first step they feed; an aggregate also when one of its input legs does.

This works without pins: a pin present on one side only (recorded since <ref>, or dropped) is
left out of both sides, since recording a pin changes no byte; except an optional download's,
whose pin decides whether the build fetches it (unpinned, its file is absent from the
archive). What stays unseen is a file that changed behind the same URL while it is unpinned;
the report names the legs with an unpinned input, and `scons pins` lists the inputs.
"""
from __future__ import annotations

import io
import subprocess
import tarfile
import tempfile
import textwrap
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Mapping, Sequence

from backends.cache.key import leg_key
from backends.model.engine import DataError
from backends.model.matrix import Matrix, load_matrix
from backends.model.plan import Download, Plan
from backends.model.recipes import leg_engine, plan_leg
from backends.util.errors import BackendsError
from backends.util.textfit import format_table

# What a leg's key reads from the tree; the rest of <ref> (its code, docs, tests) is not used.
DATA_DIRS = ("engines", "variants", "smoke")
CODE = ("site_scons", "SConstruct")
AGGREGATE_PART = "legs"  # an aggregate's input keys: compared through the input legs themselves
WIDTH = 110


class AffectedError(BackendsError, RuntimeError):
    """`since=` names nothing git can read here, or <ref>'s data does not load."""


@dataclass(frozen=True)
class Side:
    """One tree's plans of the compared legs, and the root they were read from."""

    root: Path
    matrix: Matrix
    plans: Mapping[str, Plan]
    failed: Mapping[str, str]  # leg id -> why it has no plan (only <ref>'s side: today's code may refuse it)


@dataclass(frozen=True)
class Change:
    leg: str
    parts: tuple[str, ...]  # the key parts that differ; empty when only `inputs_changed` did
    inputs_changed: tuple[str, ...] = ()  # an aggregate's input legs that rebuild
    new: bool = False  # no such leg at <ref> (or none its data plans with today's code)

    @property
    def why(self) -> str:
        if self.new:
            return "new since the ref" if not self.parts else self.parts[0]
        count = len(self.inputs_changed)
        return ", ".join([*self.parts, *([f"{count} input leg{'s' if count > 1 else ''}"] if count else [])])


@dataclass(frozen=True)
class Affected:
    ref: str
    commit: str
    compared: tuple[str, ...]  # the selected legs
    changes: tuple[Change, ...]
    unpinned: tuple[str, ...]  # selected legs with an input unpinned at <ref> or now
    gone: tuple[str, ...]  # legs of the selected engines that <ref> has and the working tree not
    code_changed: bool


# -- git ----------------------------------------------------------------------------------------

def _git(root: Path, *args: str) -> subprocess.CompletedProcess[bytes]:
    try:
        return subprocess.run(["git", "-C", str(root), *args], capture_output=True, timeout=120)
    except FileNotFoundError:
        raise AffectedError("`scons affected` needs git, which is not on PATH") from None


def resolve_ref(root: Path, ref: str) -> str:
    """The commit `ref` names in the repository at `root`."""
    if _git(root, "rev-parse", "--git-dir").returncode != 0:
        raise AffectedError(f"since={ref}: {root} is not a git checkout; `scons affected` compares the working tree "
                            "with a commit of its repository")
    found = _git(root, "rev-parse", "--verify", "--quiet", f"{ref}^{{commit}}")
    if found.returncode != 0:
        raise AffectedError(f"since={ref}: git knows no commit {ref!r} here; give a commit, branch or tag, e.g. "
                            "since=HEAD, since=HEAD~3 or since=origin/main (`git log --oneline` lists commits)")
    return found.stdout.decode().strip()


def snapshot(root: Path, commit: str, dest: Path) -> Path:
    """<commit>'s data directories, extracted under `dest` (git archive: the repository is only read)."""
    listed = _git(root, "ls-tree", "--name-only", commit, "--", *DATA_DIRS)
    present = [name for name in listed.stdout.decode().split("\n") if name]
    if listed.returncode != 0 or "variants" not in present:
        raise AffectedError(f"commit {commit[:12]} has no variants/ directory: nothing to compare with")
    archive = _git(root, "archive", "--format=tar", commit, "--", *present)
    if archive.returncode != 0:
        raise AffectedError(f"git archive {commit[:12]} failed: {archive.stderr.decode(errors='replace').strip()}")
    with tarfile.open(fileobj=io.BytesIO(archive.stdout)) as tar:
        # The "tar" filter keeps names inside dest; symlinks are kept as they are (a fixture
        # project links engines/contracts.toml).
        if hasattr(tarfile, "tar_filter"):
            tar.extractall(dest, filter="tar")
        else:  # Python before 3.11.4: git archive of the repository's own commit is trusted
            tar.extractall(dest)
    return dest


def code_changed(root: Path, commit: str) -> bool:
    """Whether the build system's own code differs between `commit` and the working tree
    (a tracked file edited, or a new file git does not ignore)."""
    edited = _git(root, "diff", "--quiet", commit, "--", *CODE).returncode == 1
    added = _git(root, "ls-files", "--others", "--exclude-standard", "--", *CODE).stdout.strip()
    return edited or bool(added)


# -- the comparison -----------------------------------------------------------------------------

def _with_inputs(matrix: Matrix, leg_ids: Sequence[str]) -> list[str]:
    """The legs and, for aggregates, their input legs (an aggregate rebuilds when one does)."""
    found: dict[str, None] = {}
    for leg_id in leg_ids:
        if leg_id in matrix.ids:
            found.update(dict.fromkeys(matrix.leg(leg_id).inputs))
        found[leg_id] = None
    return list(found)


def side(root: Path, matrix: Matrix, leg_ids: Sequence[str], version: str = "") -> Side:
    """The plans of `leg_ids` that `matrix` has; a leg its recipe refuses is recorded, not raised."""
    plans: dict[str, Plan] = {}
    failed: dict[str, str] = {}
    for leg_id in _with_inputs(matrix, leg_ids):
        if leg_id not in matrix.ids:
            continue
        leg = matrix.leg(leg_id)
        try:
            plans[leg_id] = plan_leg(leg, leg_engine(matrix, leg, version or None), matrix)
        except (DataError, ImportError) as error:
            failed[leg_id] = str(error)
    return Side(root, matrix, plans, failed)


def _unpinned(download: Download) -> bool:
    return not (download.commit if download.kind == "git" else download.sha256)


def _unknown(download: Download) -> bool:
    """Unpinned, so its bytes cannot be compared: an optional download unpinned is known absent."""
    return _unpinned(download) and not download.optional


def _aligned(plan: Plan, other: Plan | None) -> Plan:
    """`plan` with the pin of every download blanked that is unpinned on either side (or that
    the other side lacks): a pin recorded since <ref> is no change to the bytes."""
    theirs = {download.name: download for download in (other.downloads if other else ())}

    def align(download: Download) -> Download:
        counterpart = theirs.get(download.name)
        if counterpart is not None and download.optional and counterpart.optional:
            return download  # its pin decides whether the archive holds its file: a change either way
        if counterpart is None or _unpinned(download) or _unpinned(counterpart):
            return replace(download, sha256="", commit="")
        return download

    return replace(plan, downloads=tuple(align(download) for download in plan.downloads))


def leg_parts(plan: Plan, other: Plan | None, current: Side, fmt: str, version: str = "") -> dict[str, str]:
    """The key parts of `plan` (read from `current`), pins aligned with `other`'s."""
    engine = leg_engine(current.matrix, plan.leg, version or None)
    key = leg_key(_aligned(plan, other), engine, current.root, fmt=fmt)
    return {name: value for name, value in key.parts.items() if name != AGGREGATE_PART}


def _has_unpinned(plan: Plan, other: Plan | None) -> bool:
    return any(_unknown(d) for d in plan.downloads) or any(_unknown(d) for d in (other.downloads if other else ()))


def compare(now: Side, then: Side, leg_ids: Sequence[str], *, fmt: str = "zip",
            version: str = "") -> tuple[list[Change], list[str]]:
    """(the legs of `leg_ids` that rebuild, in order, the legs with an input unpinned on either side)."""
    own: dict[str, Change | None] = {}
    unpinned: set[str] = set()
    for leg_id, plan in now.plans.items():
        before = then.plans.get(leg_id)
        if _has_unpinned(plan, before):
            unpinned.add(leg_id)
        if before is None:
            why = then.failed.get(leg_id)
            own[leg_id] = Change(leg_id, (f"no plan at the ref: {why}",) if why else (), new=True)
            continue
        parts_now = leg_parts(plan, before, now, fmt, version)
        parts_then = leg_parts(before, plan, then, fmt, version)
        differ = tuple(name for name in parts_now if parts_now[name] != parts_then.get(name))
        own[leg_id] = Change(leg_id, differ) if differ else None
    changes = []
    for leg_id in leg_ids:
        inputs = now.matrix.leg(leg_id).inputs
        unpinned.update([leg_id] if unpinned & set(inputs) else [])
        rebuilt_inputs = tuple(i for i in inputs if own.get(i))
        change = own.get(leg_id)
        if change or rebuilt_inputs:
            changes.append(replace(change or Change(leg_id, ()), inputs_changed=rebuilt_inputs))
    return changes, [leg_id for leg_id in leg_ids if leg_id in unpinned]


def affected(root: Path, ref: str, leg_ids: Sequence[str], *, fmt: str = "zip", version: str = "",
             matrix: Matrix | None = None) -> Affected:
    """Compare the working tree at `root` with `ref` for `leg_ids` (the selection)."""
    commit = resolve_ref(root, ref)
    matrix = matrix or load_matrix(root)
    with tempfile.TemporaryDirectory(prefix="anira-affected-") as scratch:
        then_root = snapshot(root, commit, Path(scratch))
        try:
            then_matrix = load_matrix(then_root)
        except DataError as error:
            raise AffectedError(f"since={ref}: its data does not load with today's code ({error}); compare with a "
                                "later commit") from None
        now = side(root, matrix, leg_ids, version)
        then = side(then_root, then_matrix, leg_ids, version)
        changes, unpinned = compare(now, then, leg_ids, fmt=fmt, version=version)
    engines = {matrix.leg(leg_id).engine for leg_id in leg_ids}
    gone = tuple(leg.id for leg in then_matrix.legs if leg.engine in engines and leg.id not in matrix.ids)
    return Affected(ref, commit, tuple(leg_ids), tuple(changes), tuple(unpinned), gone, code_changed(root, commit))


# -- the report ---------------------------------------------------------------------------------

def _wrapped(text: str) -> list[str]:
    return textwrap.wrap(text, WIDTH, subsequent_indent="  ", break_on_hyphens=False)


def _by_engine(legs: Sequence[str], compared: Sequence[str], matrix: Matrix) -> list[str]:
    """`legs` per engine, or "every one of its N legs" when that is all the engine's compared legs."""
    def per_engine(ids: Sequence[str]) -> dict[str, list[str]]:
        found: dict[str, list[str]] = {}
        for leg_id in ids:
            found.setdefault(matrix.leg(leg_id).engine, []).append(leg_id)
        return found

    total = per_engine(compared)
    lines = []
    for engine, ids in per_engine(legs).items():
        listed = f"every one of its {len(ids)} legs" if len(ids) == len(total[engine]) > 1 else ", ".join(ids)
        lines += _wrapped(f"  {engine}: {listed}")
    return lines


def render(result: Affected, matrix: Matrix) -> str:
    """What `scons affected` prints: the legs that rebuild with the key parts that differ, then
    what the comparison cannot see."""
    head = (f"affected since {result.ref} ({result.commit[:12]}): {len(result.changes)} of {len(result.compared)} "
            f"legs rebuild (key parts of the ref's engines/, variants/ and smoke/ against the working tree's)")
    lines = _wrapped(head)
    if result.changes:
        unpinned = set(result.unpinned)
        rows = [{"leg": change.leg, "inputs": "unpinned" if change.leg in unpinned else "pinned",
                 "differs in": change.why} for change in result.changes]
        lines += ["", format_table(rows)]
    if result.gone:
        lines += ["", *_wrapped(f"Gone since the ref (not rebuilt, no longer built): {', '.join(result.gone)}")]
    if result.unpinned:
        lines += ["", *_wrapped(f"{len(result.unpinned)} of these legs have an input unpinned at the ref or now "
                                "(`scons pins` lists the inputs): their pins are left out of the comparison, so a "
                                "file that changed behind the same URL is not seen. Recording pins (`scons lock`) "
                                "makes it visible:"), *_by_engine(result.unpinned, result.compared, matrix)]
    if result.code_changed:
        lines += ["", *_wrapped("The build system's code (site_scons/, SConstruct) changed too: both sides were "
                                "read with today's code, so this lists what the data change rebuilds; a code change "
                                "reruns the steps whose implementation version (STEP_VERSION) or commands it "
                                "changes.")]
    return "\n".join(lines)


def report(root: Path, ref: str, leg_ids: Sequence[str], matrix: Matrix, *, fmt: str = "zip",
           version: str = "") -> str:
    return render(affected(root, ref, leg_ids, fmt=fmt, version=version, matrix=matrix), matrix)
