"""What a selection takes from upstream: every file and git source of its legs, with its pin.

One `Input` per pin: a file by its name in `[sha256]`, a git source by its
`[sources.<name>]` table, and the file a pinned download names (the podspec's tarball,
from `[nested]`). `scons pins` prints them and fails while one is unpinned; `scons lock`
records the missing ones (lock.py); the pin-refresh pull request lists them with their URLs.
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Iterable, Sequence

from .explain import format_table
from .model.engine import DataError, Engine, url_filename
from .model.matrix import Matrix
from .model.plan import Download, Plan

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
                    found[item.identity] = replace(known, legs=known.legs + (plan.leg.id,))
    return list(found.values())


def _inputs_of(plan: Plan, download: Download, matrix: Matrix) -> list[Input]:
    engine = plan.leg.engine
    legs = (plan.leg.id,)
    if download.kind == "git":
        return [Input(engine, download.name, GIT, download.name, download.url, download.ref, download.commit, legs)]
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


def rows(inputs: Sequence[Input]) -> list[dict[str, str]]:
    """`scons pins`: one table row per input."""
    return [{"engine": item.engine, "input": item.name, "legs": str(len(item.legs)), "pin": item.pin or UNPINNED,
             "url": item.url or f"(named in {item.parent}: `scons lock` reads it)"} for item in inputs]


def unpinned_message(missing: Sequence[Input]) -> str:
    """What `scons pins` says when something is unpinned: which inputs, and what pins them."""
    engines = ",".join(dict.fromkeys(item.engine for item in missing))
    names = ", ".join(item.label for item in missing)
    return (f"{len(missing)} input{'s' if len(missing) > 1 else ''} unpinned: {names}. Pin them from any host "
            f"that reaches upstream: the pins workflow (GitHub Actions > pins, engine={engines}) opens a pull "
            f"request, or run `scons lock engine={engines}` and commit engines/*/engine.toml")


def report(plans: Iterable[Plan], matrix: Matrix) -> tuple[str, str]:
    """`scons pins`: the table of every input, and what to say when some are unpinned ("" if none)."""
    found = collect(plans, matrix)
    missing = unpinned(found)
    return format_table(rows(found)), unpinned_message(missing) if missing else ""
