"""The archive against the file list of its own manifest: the same members, each of the same
kind, size, mode and content (or link target). A binary cache entry's manifest is what a
reader is promised; an archive that differs from it is not the entry its writer made. A
built archive's manifest lists its stage: verify holds the archive to the stage it was
written from, which the smoke consumed. The hashes come from the view's one pass."""
from __future__ import annotations

from pathlib import Path
from typing import Any, Callable, Mapping

from backends.steps.checks.view import FILE, SYMLINK, ArchiveView, Entry
from backends.steps.extract import _name_problem, canonical_name
from backends.util.files import list_tree


def described_problems(view: ArchiveView, files: list[dict[str, Any]]) -> list[str]:
    """Members against the manifest's file list: the same set, each with the same kind,
    size, mode and content."""
    listed = {_canonical(record["path"]): record for record in files}
    members = {entry.name: entry for entry in view.entries if entry.kind in (FILE, SYMLINK)}
    problems = [f"member {name} is not in its manifest" for name in sorted(members.keys() - listed.keys())]
    problems += [f"its manifest lists {name}, which the archive lacks" for name in sorted(listed.keys() - members.keys())]
    for name in sorted(members.keys() & listed.keys()):
        problems += _member_problems(view, members[name], listed[name])
    return problems


def tree_problems(root: Path, files: list[dict[str, Any]], digest: Callable[[Path], str | None]) -> list[str]:
    """The tree at `root` (a stage) against a manifest's file list: the same files and
    symlinks, each with the size, mode and content (`digest`, a sha256) or target listed."""
    listed = {_canonical(record["path"]): record for record in files}
    found = {entry.path: entry for entry in list_tree(root, with_hashes=False) if entry.kind != "dir"}
    problems = [f"{name} is in {root} but not in the manifest" for name in sorted(found.keys() - listed.keys())]
    problems += [f"the manifest lists {name}, which {root} lacks" for name in sorted(listed.keys() - found.keys())]
    for name in sorted(found.keys() & listed.keys()):
        entry, record = found[name], listed[name]
        actual = {"size": entry.size, "mode": oct(entry.mode), "link": entry.target,
                  "sha256": digest(root / name) if entry.kind == "file" else None}
        differ = sorted(key for key, value in actual.items() if record.get(key) != value)
        if differ:
            problems.append(f"{name} in {root} is not what the manifest lists ({', '.join(differ)} differ)")
    return problems


def _canonical(name: str) -> str:
    """Names compare in the one form extraction writes (an unsafe name as it is)."""
    return name if _name_problem(name) else canonical_name(name) or ""


def _member_problems(view: ArchiveView, entry: Entry, record: Mapping[str, Any]) -> list[str]:
    name = entry.name
    if entry.kind == SYMLINK:
        if record.get("link") != entry.target:
            return [f"symlink {name} -> {entry.target} is listed as {record.get('link') or 'a file'}"]
        return []
    if record.get("sha256") is None:
        return [f"member {name} is a file, listed as a symlink"]
    if entry.mode and oct(entry.mode) != record["mode"]:
        return [f"member {name} has mode {oct(entry.mode)}, listed as {record['mode']}"]
    size, digest = view.digest(name)
    if size != record["size"] or digest != record["sha256"]:
        return [f"member {name} ({size} bytes, sha256 {digest[:12]}) is not what its manifest lists "
                f"({record['size']} bytes, sha256 {record['sha256'][:12]})"]
    return []
