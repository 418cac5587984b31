"""What a selection takes from upstream: every file and git source of its legs, with its pin.

One `Input` per pin: a file by its name in `[sha256]`, a git source by its
`[sources.<name>]` table, and the file a pinned download names (the podspec's tarball,
from `[nested]`). A git source's commit also pins its submodules (the gitlinks of its
tree); what is counted of them is what the legs check out: the paths they select, or every
one. `scons pins` prints them and fails while one is unpinned, or while an
`origin=` stands in for a pinned file with other bytes (a build takes a local origin as it
is, so that run would not use the pinned file); `scons lock` records the missing ones
(commands/lock.py); the pin-refresh pull request lists them with their URLs.
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import Callable, Iterable, Mapping, Sequence

from backends.model.engine import DataError, Engine
from backends.model.matrix import Matrix
from backends.model.plan import Download, Plan, origin_for
from backends.util.files import sha256_file
from backends.util.locations import is_url, local_path, url_filename
from backends.util.textfit import format_table

FILE, GIT = "file", "git"
UNPINNED = "unpinned"


@dataclass(frozen=True)
class Input:
    engine: str
    source: str  # the [sources.<name>] table it comes from
    kind: str  # FILE | GIT
    key: str  # FILE: its file name in [sha256] ("" while its parent's [nested] entry is missing); GIT: the source
    url: str
    ref: str = ""  # GIT: the tag, branch or commit it names
    pin: str = ""  # the sha256 or commit; "" is unpinned
    legs: tuple[str, ...] = ()
    names: str = ""  # FILE: a JSON field of it naming a further download (Download.names)
    parent: str = ""  # FILE: the file that names this one
    submodules: tuple[str, ...] = ()  # GIT: the submodule paths its legs select
    every_submodule: bool = False  # GIT: a leg checks out every submodule

    @property
    def shown(self) -> str:
        """Its name with what of its submodules the legs use (`scons pins`, `scons lock`)."""
        if self.every_submodule:
            return f"{self.name} + every submodule"
        if self.submodules:
            return f"{self.name} + {len(self.submodules)} submodule{'s' if len(self.submodules) > 1 else ''}"
        return self.name

    @property
    def name(self) -> str:
        """What it is within its engine: a file name, or `<source> @ <ref>` for git."""
        if self.kind == GIT:
            return f"{self.source} @ {self.ref}"
        return self.key or f"the file {self.parent} names"

    @property
    def label(self) -> str:
        return f"{self.engine} {self.name}"

    @property
    def identity(self) -> tuple[str, str, str]:
        return self.engine, self.kind, self.key if self.key else f"<named by {self.parent}>"


def collect(plans: Iterable[Plan], matrix: Matrix) -> list[Input]:
    """Every input of `plans`, once, with the legs that use it, in first-use order."""
    found: dict[tuple[str, str, str], Input] = {}
    for plan in plans:
        for download in plan.downloads:
            for item in _inputs_of(plan, download, matrix):
                known = found.get(item.identity)
                if known is None:
                    found[item.identity] = item
                    continue
                _check_same(known, item)
                if plan.leg.id not in known.legs:
                    found[item.identity] = replace(known, legs=known.legs + (plan.leg.id,),
                                                   submodules=tuple(sorted({*known.submodules, *item.submodules})),
                                                   every_submodule=known.every_submodule or item.every_submodule)
    return list(found.values())


def _inputs_of(plan: Plan, download: Download, matrix: Matrix) -> list[Input]:
    engine = plan.leg.engine
    legs = (plan.leg.id,)
    if download.kind == "git":
        every = download.submodules and not download.submodule_paths
        return [Input(engine, download.name, GIT, download.name, download.url, download.ref, download.commit, legs,
                      submodules=download.submodule_paths, every_submodule=every)]
    item = Input(engine, download.name, FILE, download.filename, download.url, pin=download.sha256, legs=legs,
                 names=download.names)
    if not download.names:
        return [item]
    return [item, named_input(item, matrix.engines[engine].nested.get(download.filename, ""), matrix.engines[engine])]


def named_input(parent: Input, url: str, engine: Engine) -> Input:
    """The file `parent` names (a podspec's tarball), pinned under its own file name; an
    unknown one ("" url) until `scons lock` reads the parent."""
    filename = url_filename(url) if url else ""
    return Input(parent.engine, parent.source, FILE, filename, url, pin=engine.sha256.get(filename, "") if url else "",
                 legs=parent.legs, parent=parent.key)


def _check_same(known: Input, other: Input) -> None:
    """One pin can only stand for one upstream thing."""
    if (known.url, known.ref) != (other.url, other.ref):
        what = f"{known.url} {known.ref}".strip(), f"{other.url} {other.ref}".strip()
        raise DataError(f"{known.engine}: {known.legs[0]} and {other.legs[0]} share the pin of {known.label} "
                        f"but fetch {what[0]} and {what[1]}: give one its own file name in the recipe")


def unpinned(inputs: Sequence[Input]) -> list[Input]:
    return [item for item in inputs if not item.pin]


# -- origins --------------------------------------------------------------------------------

@dataclass(frozen=True)
class Override:
    """An `origin=` standing in for a pinned file with other bytes than its pin."""

    input: Input
    origin: str
    sha256: str  # the origin's; "" for a URL of another file name (not fetched here)

    @property
    def short(self) -> str:
        return f"sha256 {self.sha256[:12]}" if self.sha256 else f"a URL of {url_filename(self.origin)}"


def origin_of(item: Input, plans: Iterable[Plan], origins: Mapping[str, str]) -> str:
    """The `origin=` standing in for `item`: by source name, or as its legs' main download ("" if none)."""
    given = (origin_for(origins, plan, download) for plan in plans if plan.leg.id in item.legs
             for download in plan.downloads if download.name == item.source)
    return next((origin for origin in given if origin), "")


def override(item: Input, origin: str, hash_file: Callable[[Path], str] = sha256_file) -> Override | None:
    """`origin` when it is not the bytes `item` pins; None when it is, or there is nothing to
    compare (no origin, no pin, a git source: a clone given as origin still yields the pinned
    commit). A URL origin is judged by its file name: a build holds it to that name's pin."""
    if not origin or not item.pin or item.kind != FILE or item.parent:
        return None
    if is_url(origin):
        return None if url_filename(origin) == item.key else Override(item, origin, "")
    actual = hash_file(Path(local_path(origin)).expanduser())
    return None if actual == item.pin else Override(item, origin, actual)


def overrides(inputs: Iterable[Input], plans: Sequence[Plan], origins: Mapping[str, str]) -> list[Override]:
    found = (override(item, origin_of(item, plans, origins)) for item in inputs)
    return [differs for differs in found if differs]


def override_message(differing: Sequence[Override]) -> str:
    """What `scons pins` says when an origin= is not the pinned bytes: which, and both hashes."""
    described = "; ".join(f"{o.input.label} from origin={o.origin} "
                          f"({'sha256 ' + o.sha256 if o.sha256 else 'another file'}, pinned {o.input.pin})"
                          for o in differing)
    return (f"{len(differing)} input{'s' if len(differing) > 1 else ''} not pinned for this run: the origin= "
            f"given is not the file engine.toml pins: {described}. A build takes a local origin as it is, so its "
            "archive would not be the pinned release; drop origin= (or give a copy of the pinned file) to "
            "build what is pinned")


# -- `scons pins` ---------------------------------------------------------------------------

def _pin_cell(item: Input, differs: Override | None) -> str:
    return (item.pin or UNPINNED) + (f"; origin differs: {differs.short}" if differs else "")


def rows(inputs: Sequence[Input], differing: Sequence[Override] = ()) -> list[dict[str, str]]:
    """`scons pins`: one table row per input."""
    by_input = {o.input.identity: o for o in differing}
    return [{"engine": item.engine, "input": item.shown, "legs": str(len(item.legs)),
             "pin": _pin_cell(item, by_input.get(item.identity)),
             "url": item.url or f"(named in {item.parent}: `scons lock` reads it)"} for item in inputs]


def unpinned_message(missing: Sequence[Input]) -> str:
    """What `scons pins` says when something is unpinned: which inputs, and what pins them."""
    engines = ",".join(dict.fromkeys(item.engine for item in missing))
    names = ", ".join(item.label for item in missing)
    return (f"{len(missing)} input{'s' if len(missing) > 1 else ''} unpinned: {names}. Pin them from any host "
            f"that reaches upstream: the pins workflow (GitHub Actions > pins, engine={engines}) opens a pull "
            f"request, or run `scons lock engine={engines}` and commit engines/*/engine.toml")


def report(plans: Sequence[Plan], matrix: Matrix, origins: Mapping[str, str] | None = None) -> tuple[str, str]:
    """`scons pins`: the table of every input, and what to say when some are unpinned or an
    `origin=` differs from its pin ("" if none)."""
    found = collect(plans, matrix)
    missing = unpinned(found)
    differing = overrides(found, plans, origins or {})
    said = ([unpinned_message(missing)] if missing else []) + ([override_message(differing)] if differing else [])
    return format_table(rows(found, differing), fit=False), "\n".join(said)
