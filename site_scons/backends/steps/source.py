"""The source tree a leg builds from: a checkout or extracted archive plus its patch set.

A tree is keyed by (pin, patch hashes), so legs with different patches never share one,
and legs with the same set do. Patches are idempotent edit scripts with this protocol:

    FILES: tuple[str, ...]                      # globs relative to the source root
    def already_fixed(path, text) -> bool       # upstream (or an earlier run) has the change
    def apply(path, text) -> str | None         # the edited text; None: nothing to do here
"""
from __future__ import annotations

import importlib.util
import os
import shutil
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

from backends.util.errors import BackendsError
from backends.util.files import hardlink_or_copy, mirror_tree, sha256_file
from backends.util.globs import matches


class PatchError(BackendsError, RuntimeError):
    """A patch that no longer applies to the upstream text."""


@dataclass(frozen=True)
class PatchOutcome:
    name: str
    status: str  # applied | already upstream | nothing to change
    files: tuple[str, ...]

    def describe(self) -> str:
        where = f" ({', '.join(self.files)})" if self.files else ""
        return f"patch {self.name}: {self.status}{where}"


def patch_key(script: Path) -> str:
    return f"{script.name}:{sha256_file(script)}"


def _load(script: Path) -> ModuleType:
    spec = importlib.util.spec_from_file_location(f"anira_patch_{script.stem}", script)
    assert spec and spec.loader, script
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    for name in ("FILES", "already_fixed", "apply"):
        if not hasattr(module, name):
            raise PatchError(f"{script} lacks {name} (see the protocol in backends/steps/source.py)")
    return module


def _candidates(src: Path, patterns: tuple[str, ...]) -> list[Path]:
    found: set[Path] = set()
    for pattern in patterns:
        if any(c in pattern for c in "*?"):
            found.update(p for p in src.rglob(pattern.rsplit("/", 1)[-1])
                         if p.is_file() and matches(p.relative_to(src).as_posix(), pattern))
        elif (src / pattern).is_file():
            found.add(src / pattern)
    return sorted(found)


def apply_patch(src: Path, script: Path) -> PatchOutcome:
    """Apply one edit script; report "already upstream" when every target already has it."""
    module = _load(script)
    changed: list[str] = []
    fixed: list[str] = []
    candidates = _candidates(src, tuple(module.FILES))
    if not candidates:
        raise PatchError(f"patch {script.stem}: its FILES {', '.join(module.FILES)} match nothing in the "
                         "source tree: upstream moved or removed them; update or retire the patch "
                         "(see its `until` in engine.toml)")
    for path in candidates:
        rel = path.relative_to(src).as_posix()
        text = path.read_text(encoding="utf-8", errors="surrogateescape")
        if module.already_fixed(rel, text):
            fixed.append(rel)
            continue
        new = module.apply(rel, text)
        if new is None:
            continue
        if new == text:
            raise PatchError(f"patch {script.stem} no longer applies to {rel}: upstream text changed; "
                             "update or retire the patch (see its `until` in engine.toml)")
        if not module.already_fixed(rel, new):
            raise PatchError(f"patch {script.stem} is not idempotent on {rel}: after applying it, "
                             "already_fixed() still says no")
        _rewrite(path, new)
        changed.append(rel)
    if changed:
        return PatchOutcome(script.stem, "applied", tuple(changed))
    if fixed:
        return PatchOutcome(script.stem, "already upstream", tuple(fixed))
    return PatchOutcome(script.stem, "nothing to change", ())


def _rewrite(path: Path, text: str) -> None:
    # The tree may hard-link into a shared extraction: break the link before writing.
    temp = path.with_name(path.name + ".patch-tmp")
    temp.write_text(text, encoding="utf-8", errors="surrogateescape")
    shutil.copymode(path, temp)
    temp.replace(path)


def copy_tree(origin: Path, dest: Path) -> None:
    """A hard-linked copy of a tree (symlinks kept); patched files get their own inode.
    Paths past MAX_PATH are reached on Windows too (files.mirror_tree)."""
    mirror_tree(origin, dest, hardlink_or_copy)


def prepare_tree(origin: Path, dest: Path, scripts: list[Path]) -> list[PatchOutcome]:
    """Build `dest` = origin + patches, atomically (a half-patched tree never appears)."""
    temp = dest.with_name(f"{dest.name}.tmp-{os.getpid()}")
    shutil.rmtree(temp, ignore_errors=True)
    temp.mkdir(parents=True)
    try:
        copy_tree(origin, temp)
        outcomes = [apply_patch(temp, script) for script in scripts]
    except BaseException:
        shutil.rmtree(temp, ignore_errors=True)
        raise
    shutil.rmtree(dest, ignore_errors=True)
    temp.replace(dest)
    return outcomes
