"""Leg keys: one stable hash of everything that determines a leg's archive.

A key is known without building anything, so a binary cache (stores.py) can be asked
for a leg's archive before its graph is declared. It covers, each as a named part:

- `engine`    the engine and the version the leg builds;
- `inputs`    every download with its pin (sha256 or git commit), or the sha256 of the file
              an `origin=` stands in with; a git source's selected submodule paths with it
              (their commits are the gitlinks of the pinned commit's tree: the pin implies them);
              an optional download that is neither pinned nor given is "absent" (the build
              skips it, so the archive lacks its file: its pin, once recorded, changes the key);
- `patches`   the content of every patch the leg applies;
- `plan`      the plan: commands, flags, environment additions, copy rules, bundle, fixups,
              contract (its notes and warnings aside: they change no byte);
- `smoke`     the consumer project's files (and the shared smoke/*.cmake, the model);
- `steps`     the step implementations' version (STEP_VERSION);
- `runner`    the runner label (it stands for the toolchain the leg is built with);
- `format`    the archive format;
- `legs`      for an aggregate, the keys of its inputs.

Repository files (patches, smoke files) are hashed with their line endings normalised
(util/line_endings.py), so a CRLF checkout on Windows computes the keys an LF one does.

A leg with an unpinned input it fetches has no key (`uncacheable` says which input): its bytes
could change under the same name. With `lock=1` an unpinned optional download is fetched, so
it counts as unpinned too. Nothing outside these parts (the README, another engine's recipe,
another leg's row) changes a key.
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Callable, Mapping

from backends.model.engine import Engine
from backends.model.leg import Leg
from backends.model.matrix import Matrix
from backends.model.plan import Download, Plan, origin_for
from backends.model.recipes import leg_engine, plan_leg
from backends.steps import STEP_VERSION
from backends.util.canonical import canonical, digest
from backends.util.files import sha256_file
from backends.util.line_endings import checkout_sha256

SHORT = 12


@dataclass(frozen=True)
class LegKey:
    leg: str
    digest: str  # "" when uncacheable
    parts: Mapping[str, str] = field(default_factory=dict)  # part -> its hash (what the key is made of)
    uncacheable: str = ""  # why the leg has no key

    @property
    def short(self) -> str:
        return self.digest[:SHORT] if self.digest else "-"

    def describe(self) -> str:
        """`scons key=1`: the key and each part's hash, so "why did it change" has an answer."""
        head = f"{self.leg}: " + (self.digest if self.digest else f"uncacheable: {self.uncacheable}")
        return "\n".join([head, *(f"  {name:<8} {value}" for name, value in self.parts.items())])


def _input(download: Download, origin: str, hash_file: Callable[[Path], str], lock: bool) -> tuple[str, str]:
    """(what pins the download, "" or why it is unpinned)."""
    if download.optional and not download.sha256 and not origin and not lock:
        return f"{download.name} absent (optional, not pinned: not fetched)", ""
    if origin:
        path = Path(origin)
        if path.is_file():
            return f"{download.name} origin sha256:{hash_file(path)}", ""
        if path.is_dir():
            return "", f"{download.name} comes from the directory {origin}"
        return "", f"{download.name} comes from {origin}, which has no pin"
    if download.kind == "git":
        selection = f" submodules:{','.join(download.submodule_paths)}" if download.submodule_paths else ""
        return (f"{download.name} {download.url} commit:{download.commit}{selection}", "") if download.commit else \
            ("", f"{download.name} ({download.url} at {download.ref}) has no commit pin")
    return (f"{download.name} {download.url} sha256:{download.sha256}", "") if download.sha256 else \
        ("", f"{download.filename} has no sha256 pin")


def _smoke_files(plan: Plan, root: Path) -> list[Path]:
    if plan.smoke is None:
        return []
    project = root / plan.smoke.project
    files = [*sorted(project.rglob("*")), *sorted(project.parent.glob("*.cmake"))]
    if plan.smoke.model:
        files.append(root / plan.smoke.model_path)
    return [path for path in dict.fromkeys(files) if path.is_file()]


def _files_digest(paths: list[Path], root: Path, hash_file: Callable[[Path], str]) -> str:
    return digest([(path.relative_to(root).as_posix(), hash_file(path)) for path in paths])


def leg_key(plan: Plan, engine: Engine, root: Path, *, fmt: str = "zip", origins: Mapping[str, str] | None = None,
            input_keys: Mapping[str, LegKey] | None = None,
            hash_file: Callable[[Path], str] = sha256_file, lock: bool = False) -> LegKey:
    """The key of `plan`'s leg; `origins` as the command line gives them (`""` for the main
    download; hashed with `hash_file`), `input_keys` the keys of an aggregate's input legs, `lock`
    whether the build fetches unpinned downloads (lock=1)."""
    leg = plan.leg
    origins = origins or {}
    pins, unpinned = [], []
    for download in plan.downloads:
        pin, why = _input(download, origin_for(origins, plan, download), hash_file, lock)
        pins.append(pin)
        if why:
            unpinned.append(why)
    for input_id in leg.inputs:
        key = (input_keys or {}).get(input_id)
        if key is None or not key.digest:
            unpinned.append(f"its input {input_id} " + (f"is uncacheable ({key.uncacheable})" if key else "has no key"))
    parts = {
        "engine": f"{engine.name} {engine.version}",
        "inputs": digest(pins),
        "patches": digest([(p.file, checkout_sha256(engine.root / p.file)) for p in plan.patches]),
        "plan": digest(canonical(replace(plan, notes=(), warnings=()))),
        "smoke": _files_digest(_smoke_files(plan, root), root, checkout_sha256),
        "steps": str(STEP_VERSION),
        "runner": leg.runner,
        "format": fmt,
    }
    if leg.inputs:
        parts["legs"] = digest([(i, (input_keys or {})[i].digest) for i in leg.inputs if i in (input_keys or {})])
    if unpinned:
        return LegKey(leg.id, "", parts, "; ".join(unpinned))
    return LegKey(leg.id, digest(parts), parts)


def leg_keys(plans: list[Plan], matrix: Matrix, root: Path, *, version: str = "", fmt: str = "zip",
             origins: Mapping[str, str] | None = None,
             hash_file: Callable[[Path], str] = sha256_file, lock: bool = False) -> dict[str, LegKey]:
    """Keys of `plans`, and of the aggregates' inputs they need (planned here)."""
    keys: dict[str, LegKey] = {}
    plans_by_id = {plan.leg.id: plan for plan in plans}

    def engine_of(leg: Leg) -> Engine:
        return leg_engine(matrix, leg, version or None)

    def key_of(leg_id: str) -> LegKey:
        if leg_id not in keys:
            leg = matrix.leg(leg_id)
            plan = plans_by_id.get(leg_id) or plan_leg(leg, engine_of(leg), matrix)
            inputs = {i: key_of(i) for i in leg.inputs}
            keys[leg_id] = leg_key(plan, engine_of(leg), root, fmt=fmt, origins=origins if leg_id in plans_by_id
                                   else None, input_keys=inputs, hash_file=hash_file, lock=lock)
        return keys[leg_id]

    return {plan.leg.id: key_of(plan.leg.id) for plan in plans}
