"""The archive against the file list of its own manifest: the same members, each of the same
kind, size, mode and content (or link target). A binary cache entry's manifest is what a
reader is promised; an archive that differs from it is not the entry its writer made."""
from __future__ import annotations

import hashlib
from typing import Any, Mapping

from ..extract import _name_problem, canonical_name
from .view import FILE, SYMLINK, ArchiveView, Entry


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
    size, digest = _size_and_sha256(view, entry)
    if size != record["size"] or digest != record["sha256"]:
        return [f"member {name} ({size} bytes, sha256 {digest[:12]}) is not what its manifest lists "
                f"({record['size']} bytes, sha256 {record['sha256'][:12]})"]
    return []


def _size_and_sha256(view: ArchiveView, entry: Entry) -> tuple[int, str]:
    digest, size = hashlib.sha256(), 0
    with view._open(entry.stored or entry.name) as stream:
        while chunk := stream.read(1 << 20):
            digest.update(chunk)
            size += len(chunk)
    return size, digest.hexdigest()
