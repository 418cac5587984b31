"""An origin judged against the prebuilt leg that takes it, at extract, before anything is
staged: a CUDA wheel given to a CPU leg, a CPU build to a `-cuda` leg, or binaries of another
OS or architecture would otherwise be staged and archived under the leg's name, and fail only
in verify or in the smoke's CMake configure ("uses CUDA but I cannot find the CUDA libraries").

Judged is every binary under the download's root that the extraction holds (found by its
bytes, never by its name; a zip's extraction holds what the stage's rules take, steps/takes.py:
what would be staged), by what it is: its format and machine (ELF e_machine, Mach-O cputype, PE machine), and,
against the evidence engines/contracts.toml names for the accelerators upstream ships as builds
of their own (`[origins] builds`), its own name (`libraries`: SONAME, install name, DLL name),
what it loads (`links`: DT_NEEDED, LC_LOAD_*DYLIB, PE imports) and defines (`symbols`). The
leg's own such accelerators must show some of their evidence, the engine's others none. The
judgement reads no stage rule itself; a zip's extraction is keyed by them, so editing one that
reads it re-extracts (and judges again). Refused, the message names what was found and the leg
it would fit.
"""
from __future__ import annotations

import posixpath
from collections import Counter
from dataclasses import dataclass
from fnmatch import fnmatchcase
from pathlib import Path

from backends.binfmt.elf import is_shared_object
from backends.binfmt.inspect import pe_is_dll
from backends.model.contract_data import contracts_file, load_contract_data
from backends.model.leg import Leg
from backends.model.matrix import Matrix
from backends.model.plan import Download, Evidence, Plan
from backends.model.vocab import VocabularyError, canonical_platform
from backends.steps.checks.binaries import FORMAT_NAMES, expected_binary
from backends.steps.checks.view import BINARY_FORMATS, FILE, ArchiveView, directory_view, open_archive
from backends.util.files import FileEntry

_EXAMPLES = 2
_OS_OF_FORMAT = {"elf": ("linux", "android"), "macho": ("macos", "ios"), "pe": ("windows",), "coff": ("windows",)}
_BINARY_DIRS = ("lib", "bin")  # package directories a stage fills with binaries
ADVICE = "give this leg an origin that fits"


@dataclass(frozen=True)
class Expectation:
    """What the binaries of an origin a prebuilt leg takes must be."""

    leg: str
    platform: str
    present: tuple[Evidence, ...]  # the leg's own builds: each shows some of its evidence
    absent: tuple[Evidence, ...]  # the engine's other builds: none shows any


def expectation(plan: Plan, download: Download, engines_dir: Path) -> Expectation | None:
    """What an origin standing in for `download` must be (`engines_dir` holds contracts.toml);
    None where the leg builds its binaries (an origin of sources is judged by verify, on what
    the build made) or its stage takes none from the download."""
    builds = load_contract_data(contracts_file(engines_dir)).origin_builds
    symbol = f"{{extract:{download.name}}}"
    binaries_from_it = any(rule.pattern.startswith(symbol) and rule.dest.split("/", 1)[0] in _BINARY_DIRS
                           for rule in plan.collect)
    if plan.leg.source != "prebuilt" or not download.unpack or not binaries_from_it:
        return None
    contract = plan.contract
    return Expectation(plan.leg.id, plan.leg.platform, _judged(contract.accelerators, builds),
                       _judged(contract.foreign_accelerators, builds))


def _judged(evidence: tuple[Evidence, ...], builds: tuple[str, ...]) -> tuple[Evidence, ...]:
    """The evidence a binary shows by itself (no member names, no CMake text)."""
    return tuple(Evidence(e.accelerator, symbols=e.symbols, libraries=e.libraries, links=e.links)
                 for e in evidence if e.accelerator in builds and (e.symbols or e.libraries or e.links))


@dataclass(frozen=True)
class Binary:
    member: str  # as the archive names it
    path: str  # below the download's root
    fmt: str
    archs: frozenset[str]
    identity: str  # SONAME, install name or DLL name; "" for none
    needed: tuple[str, ...]
    defined: frozenset[str]  # its defined external symbols, when the evidence names any

    def describe(self) -> str:
        return f"{FORMAT_NAMES.get(self.fmt, self.fmt)} {'+'.join(sorted(self.archs)) or 'of no known machine'}"


def judge_tree(expected: Expectation, tree: Path, root: Path, matrix: Matrix, origin: str,
               listing: list[FileEntry] | None = None) -> str:
    """`refusal` for an extracted tree; `root` the directory in it the stage reads (`tree`
    itself or one of the download's roots), `listing` the tree's list_tree when known."""
    view = directory_view(tree, listing)
    try:
        return refusal(expected, view, "" if root == tree else root.relative_to(tree).as_posix(), matrix, origin)
    finally:
        view.close()


def judge_archive(expected: Expectation, archive: Path, roots: tuple[str, ...], matrix: Matrix) -> str:
    """`refusal` for an archive not yet extracted (`roots`: the download's): its members are
    read in memory, those named like libraries at once on every core."""
    view = open_archive(archive)
    try:
        tops = {e.name.split("/", 1)[0] for e in view.entries if "/" in e.name}
        root = next((r for r in roots if r in tops), "")
        view.scan(hashing=False, libraries=[name for name in view.libraries if name.startswith(_below(root))])
        return refusal(expected, view, root, matrix, archive.name)
    finally:
        view.close()


def refusal(expected: Expectation, view: ArchiveView, root: str, matrix: Matrix, origin: str) -> str:
    """Why the archive `origin` does not fit the leg, with the leg it would fit; "" when it fits."""
    judged = (*expected.present, *expected.absent)
    found = binaries(view, root, symbols=any(e.symbols for e in judged))
    leg = matrix.leg(expected.leg)
    foreign = [b for b in found if not _fits_platform(b, expected.platform)]
    shown = {e.accelerator: _evidence_lines(e, found) for e in judged}
    missing = [e for e in expected.present if not shown[e.accelerator]]
    extra = [e for e in expected.absent if shown[e.accelerator]]
    if not (foreign or missing or extra):
        return ""
    problems = []
    if foreign:
        kinds = Counter(b.describe() for b in foreign)
        wanted = expected_binary(expected.platform, foreign[0].path)
        want = f"; {expected.platform} needs {_describe(wanted)}" if wanted else ""
        problems.append(f"its binaries are {', '.join(kinds)} ({_examples([b.member for b in foreign])}){want}")
    for evidence in extra:
        problems.append(f"it is a {evidence.accelerator} build ({_examples(shown[evidence.accelerator])})")
    for evidence in missing:
        problems.append(f"it is no {evidence.accelerator} build: {_absence(evidence)}")
    platform = _platform_of(foreign, leg) if foreign else leg.platform
    accelerators = {*leg.accelerator, *(e.accelerator for e in extra)} - {e.accelerator for e in missing}
    return (f"origin {origin} does not fit {leg.id}: {'; '.join(problems)}; "
            f"{_fitting(matrix, leg, platform, accelerators)}; {ADVICE}")


def binaries(view: ArchiveView, root: str, symbols: bool) -> list[Binary]:
    """Every binary below `root`, read from its headers and dynamic tables (with `symbols`,
    its defined symbols too)."""
    below = _below(root)
    found = []
    for entry in view.entries:
        name = entry.name
        if entry.kind != FILE or not name.startswith(below) or view.format(name) not in BINARY_FORMATS:
            continue
        fmt, archs = view.archs(name)
        library = _loads_as_library(view, name, fmt)
        identity = view.readable(name, lambda: view.identity(name), "") if library else ""
        needed = tuple(view.needed(name)) if library else ()
        defined = frozenset(view.symbols(name)[0]) if library and symbols else frozenset()
        found.append(Binary(name, name[len(below):], fmt, frozenset(archs), identity, needed, defined))
    return found


def _loads_as_library(view: ArchiveView, name: str, fmt: str) -> bool:
    """A shared library by its header (ELF ET_DYN, a PE DLL, a Mach-O file that is no static
    library): what the evidence is read from. Executables and static libraries (a wheel's
    tests and tools) are judged by their format and machine only."""
    if fmt == "elf":
        return is_shared_object(view.head(name))
    if fmt == "pe":
        return pe_is_dll(view.file(name))
    return fmt == "macho" and not view.is_static(name)


def _below(root: str) -> str:
    return f"{root}/" if root else ""


def _fits_platform(binary: Binary, platform: str) -> bool:
    wanted = expected_binary(platform, binary.path)
    if wanted is None:
        return True
    formats, archs = wanted
    return binary.fmt in formats and (not archs or binary.archs == archs)


def _describe(wanted: tuple[tuple[str, ...], set[str]]) -> str:
    formats, archs = wanted
    return f"{'/'.join(FORMAT_NAMES[f] for f in formats)} {'+'.join(sorted(archs))}".strip()


def _evidence_lines(evidence: Evidence, found: list[Binary]) -> list[str]:
    """What shows the accelerator: the libraries named as its own, what links it, what defines it."""
    named = [f"{b.member} is {name}" for b in found if (name := posixpath.basename(b.identity))
             and any(fnmatchcase(name.lower(), pattern.lower()) for pattern in evidence.libraries)]
    linking = [f"{b.member} links {dep}" for b in found for dep in b.needed
               if any(link.lower() in dep.lower() for link in evidence.links)]
    defining = [f"{b.member} defines {symbol}" for b in found for pattern in evidence.symbols
                for symbol in sorted(s for s in b.defined if fnmatchcase(s, pattern))[:1]]
    return named + linking + defining


def _absence(evidence: Evidence) -> str:
    said = [f"no library defines {' or '.join(evidence.symbols)}"] if evidence.symbols else []
    if evidence.libraries:
        said.append(f"none is named {' or '.join(evidence.libraries)}")
    if evidence.links:
        said.append(f"none links {' or '.join(evidence.links)}")
    return ", ".join(said)


def _examples(items: list[str]) -> str:
    more = len(items) - _EXAMPLES
    return ", ".join(items[:_EXAMPLES]) + (f" and {more} more" if more > 0 else "")


def _platform_of(foreign: list[Binary], leg: Leg) -> str:
    """The platform most of the foreign binaries are of, in the vocabulary's spelling."""
    (fmt, archs), _ = Counter((b.fmt, b.archs) for b in foreign).most_common(1)[0]
    systems = _OS_OF_FORMAT.get(fmt, (fmt,))
    os_name = leg.os if leg.os in systems else systems[0]
    arch = "universal" if len(archs) > 1 and fmt == "macho" else "+".join(sorted(archs))
    try:
        return canonical_platform(os_name if fmt == "wasm" else f"{os_name}-{arch}")
    except VocabularyError:
        return f"{os_name}-{arch}"


def _fitting(matrix: Matrix, leg: Leg, platform: str, accelerators: set[str]) -> str:
    """The leg of the same engine, kind and config that the binaries would fit."""
    same = (leg.engine, platform, leg.kind, leg.config)
    candidates = [other for other in matrix.legs if (other.engine, other.platform, other.kind, other.config) == same
                  and set(other.accelerator) == accelerators]
    prebuilt = [other for other in candidates if other.source == "prebuilt"]
    if prebuilt:
        return f"it fits {prebuilt[0].id}"
    if candidates:
        return f"it would fit {candidates[0].id}, which builds from source (it takes no such origin)"
    return f"no {leg.engine} leg is a {platform} build with {', '.join(sorted(accelerators)) or 'no accelerator'}"
