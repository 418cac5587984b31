"""Filling a leg's stage: collect by rules, drop by flavor curation, bundle, fix up."""
from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Mapping

from backends.binfmt.objects import object_format
from backends.model.plan import Bundle, CopyRule, Plan
from backends.steps.bundle import listed_archives, merge_static, tree_archives
from backends.steps.context import ExpandError, LegDirs, expand
from backends.util.errors import BackendsError
from backends.util.files import hardlink_or_copy
from backends.util.globs import find, matches_any


class StageError(BackendsError, RuntimeError):
    """A staging rule that cannot be satisfied."""


def _destination(rule: CopyRule, pattern: str, found: Path) -> str:
    if rule.rename:
        rel = rule.rename
    elif "**" in pattern:
        below = pattern.split("**", 1)[0].rstrip("/")
        anchor = _matched_prefix(found, below)
        rel = found.relative_to(anchor).as_posix()
    else:
        rel = found.name
    return f"{rule.dest.rstrip('/')}/{rel}" if rule.dest else rel


def _matched_prefix(found: Path, prefix_pattern: str) -> Path:
    """The ancestor of `found` that the part of the pattern before `**` matched."""
    depth = len(Path(prefix_pattern).parts)
    return Path(*found.parts[:depth])


def collect(rules: tuple[CopyRule, ...], excludes: tuple[str, ...], dirs: LegDirs,
            environ: Mapping[str, str], *, link: bool) -> list[str]:
    """Wipe the stage, then copy every rule's matches into it; returns the dropped paths."""
    shutil.rmtree(dirs.stage, ignore_errors=True)
    dirs.stage.mkdir(parents=True)
    dropped: list[str] = []
    for rule in rules:
        try:
            pattern = expand(rule.pattern, dirs, environ) or ""
        except ExpandError:
            if rule.required:
                raise
            continue  # an optional download that was not fetched (unpinned)
        found = find(pattern)
        if not found and rule.required:
            raise StageError(f"stage: {rule.pattern} ({pattern}) matched nothing; the upstream layout changed "
                             f"or the build did not produce it")
        for path in found:
            rel = _destination(rule, pattern, path)
            if matches_any(rel, excludes):
                dropped.append(rel)
                continue
            target = dirs.stage / rel
            target.parent.mkdir(parents=True, exist_ok=True)
            if target.exists() or target.is_symlink():
                target.unlink()
            if rule.dereference:
                shutil.copy2(path.resolve(), target)
            elif link:
                hardlink_or_copy(path, target)
            elif path.is_symlink():
                os.symlink(os.readlink(path), target)
            else:
                shutil.copy2(path, target)
    return sorted(set(dropped))


def _libraries(spec: Bundle, source: Path, output: Path) -> list[Path]:
    """The archives to merge: those a list the build wrote names (e.g. a Bazel closure), or every
    static library under a tree minus `spec.exclude`, matched below the tree (where the tree
    itself lives, e.g. a checkout under `.../anira-src/`, never excludes anything)."""
    if source.is_file():
        if spec.exclude:
            raise StageError(f"bundle: exclude {spec.exclude!r} applies to a tree, {source} is a list")
        return [path for path in listed_archives(source) if path.resolve() != output.resolve()]
    suffix = ".lib" if spec.output.endswith(".lib") else ".a"
    return tree_archives(source, suffix, spec.exclude, skip=output)


def bundle(spec: Bundle, dirs: LegDirs, environ: Mapping[str, str]) -> list[str]:
    """Merge the static libraries the build produced (never a hand-kept list) into one."""
    source = Path(expand(spec.libraries_from, dirs, environ) or "")
    output = dirs.stage / spec.output
    libraries = _libraries(spec, source, output)
    if not libraries:
        excluding = f" (after excluding {spec.exclude} below it)" if spec.exclude else ""
        raise StageError(f"bundle: no static libraries under {source}{excluding}")
    fmt = spec.fmt or object_format(libraries[0])
    output.parent.mkdir(parents=True, exist_ok=True)
    merge_static(libraries, output, fmt, log=dirs.logs / "bundle.log",
                 tool=expand(spec.tool, dirs, environ) or "", machine=spec.machine)
    return [str(p) for p in libraries]


def stage(plan: Plan, dirs: LegDirs, environ: Mapping[str, str], *, copy: bool = False) -> dict[str, object]:
    """Collect and bundle. Copies, not hard links, when files will be edited in place
    (fixups, signing): an edit must never reach the shared extraction or build tree."""
    dropped = collect(plan.collect, plan.exclude, dirs, environ, link=not (plan.fixups or copy))
    bundled = bundle(plan.bundle, dirs, environ) if plan.bundle else []
    return {"dropped": dropped, "bundled": bundled}



