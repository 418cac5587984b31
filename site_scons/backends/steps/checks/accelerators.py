"""Accelerators, told apart by binary evidence (engines/contracts.toml): a variant package
shows every piece of its accelerators' evidence, every package shows none of another
accelerator's. A header dropped from a CoreML build does not make it a CPU package: its
library still exports the EP entry point and links CoreML.framework."""
from __future__ import annotations

import fnmatch
import posixpath
import re
from collections import defaultdict
from functools import lru_cache

from backends.model.plan import Evidence
from backends.steps.checks.binaries import shared_libraries, slices
from backends.steps.checks.cmake import exported_targets
from backends.steps.checks.view import ArchiveView, group_of
from backends.util.globs import matches


def check_accelerators(view: ArchiveView, platform: str, present: tuple[Evidence, ...],
                       absent: tuple[Evidence, ...]) -> list[str]:
    if not (present or absent):
        return []
    found = _Found(view, platform)
    problems = []
    for evidence in present:
        problems += _missing(found, evidence)
    for evidence in absent:
        problems += _foreign(found, evidence)
    return problems


class _Found:
    """What the archive shows, read once per check run. Libraries a consumer links together
    form a group (an xcframework slice, an Android ABI, one architecture of a universal
    macOS package): a variant's symbols must be in every group."""

    def __init__(self, view: ArchiveView, platform: str) -> None:
        self.view = view
        self.groups: dict[str, list[tuple[str, str]]] = defaultdict(list)
        for name in view.binaries:
            for arch in slices(view, name, platform):
                group = group_of(name, platform) or arch
                self.groups[group].append((name, arch))
        self._targets: dict[str, str] | None = None

    def defined(self, library: str, arch: str) -> set[str]:
        return self.view.symbols(library, arch)[0]

    def defining(self, pattern: str, libraries: list[tuple[str, str]]) -> list[tuple[str, str]]:
        """(library, symbol) pairs of the symbols matching `pattern` (a name, or a glob)."""
        if not any(c in pattern for c in "*?["):  # a plain name: a lookup, not a scan of every symbol
            return sorted({(lib, pattern) for lib, arch in libraries if pattern in self.defined(lib, arch)})
        regex = _symbol_regex(pattern)
        return sorted({(lib, sym) for lib, arch in libraries for sym in self.defined(lib, arch) if regex.match(sym)})

    def named(self, pattern: str) -> list[tuple[str, str]]:
        """(library, its own name) of the shipped shared libraries whose SONAME, install name or
        DLL name matches `pattern` (any case): a renamed file keeps it."""
        found = []
        for lib in shared_libraries(self.view):
            name = posixpath.basename(self.view.readable(lib, lambda: self.view.identity(lib), ""))
            if name and fnmatch.fnmatchcase(name.lower(), pattern.lower()):
                found.append((lib, name))
        return found

    def linking(self, needed: str) -> list[tuple[str, str]]:
        found = []
        for lib in shared_libraries(self.view):
            found += [(lib, dep) for dep in self.view.needed(lib) if needed.lower() in dep.lower()]
        return found

    @property
    def targets(self) -> dict[str, str]:
        if self._targets is None:
            self._targets = exported_targets(self.view)
        return self._targets


def _missing(found: _Found, evidence: Evidence) -> list[str]:
    acc, problems = evidence.accelerator, []
    for pattern in evidence.files:
        if not any(matches(name, pattern) for name in found.view.names):
            problems.append(f"{acc} evidence missing: no member matches {pattern}")
    for pattern in evidence.symbols:
        groups = found.groups or {"": []}
        for group, libraries in sorted(groups.items()):
            if not found.defining(pattern, libraries):
                where = f" in slice {group}" if group else ""
                problems.append(f"{acc} evidence missing: no library{where} defines {pattern}")
    for needed in evidence.links:
        if not found.linking(needed):
            problems.append(f"{acc} evidence missing: no shared library links {needed}")
    for pattern in evidence.libraries:
        if not found.named(pattern):
            problems.append(f"{acc} evidence missing: no shared library is named {pattern} (SONAME, install name, DLL)")
    for target in evidence.targets:
        if target not in found.targets:
            problems.append(f"{acc} evidence missing: no CMake export set exports the target {target}")
    return problems


def _foreign(found: _Found, evidence: Evidence) -> list[str]:
    acc, problems = evidence.accelerator, []
    for pattern in evidence.files:
        problems += [f"{name} is {acc} evidence ({pattern}), which this package must not ship"
                     for name in found.view.names if matches(name, pattern)]
    libraries = [lib for group in found.groups.values() for lib in group]
    for pattern in evidence.symbols:
        hits = found.defining(pattern, libraries)
        problems += [f"{lib} defines {sym}: {acc} is compiled in, which this package must not ship"
                     for lib, sym in hits[:3]]
    for needed in evidence.links:
        problems += [f"{lib} links {dep}: {acc} is linked in, which this package must not ship"
                     for lib, dep in found.linking(needed)]
    for pattern in evidence.libraries:
        problems += [f"{lib} is {name} ({acc} evidence), which this package must not ship"
                     for lib, name in found.named(pattern)]
    for target in evidence.targets:
        if target in found.targets:
            problems.append(f"{found.targets[target]} exports the target {target} ({acc} evidence), "
                            "which this package must not ship")
    return problems


@lru_cache(maxsize=256)
def _symbol_regex(pattern: str) -> re.Pattern[str]:
    return re.compile(fnmatch.translate(pattern))
