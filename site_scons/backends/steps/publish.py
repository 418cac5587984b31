"""Publishing a verified archive into dist/, and withdrawing one whose inputs changed.

dist/ holds, per leg, exactly the bytes a build of the current inputs produced, proven by
verify and smoke, or nothing. Publishing therefore:

- checks that the `.sha256` and `.json` sidecars describe the archive being published;
- writes each file as a temp inside dist/ (a copy, or a hard link on the same
  filesystem), fsyncs it and renames it into place — `build/` and `dist/` may live on
  different filesystems, where a rename across them fails (EXDEV);
- renames the archive last: it is the commit point.

When a leg's inputs change, its old archive is moved to `dist/.stale/` before anything is
rebuilt, so a rebuild that fails (or is killed) never leaves the old bytes posing as the
current ones; the end-of-run summary names what was withdrawn.
"""
from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping

from .files import atomic_write_bytes, canonical_json, hardlink_or_copy, sha256_file, temp_path_for

SIDECARS = (".json", ".sha256")


class PublishError(RuntimeError):
    """The archive and its sidecars disagree, or dist/ could not be written."""


@dataclass(frozen=True)
class Published:
    sha256: str
    size: int
    files: int


def published_files(archive: Path) -> tuple[Path, ...]:
    """The archive and its sidecars, the archive last."""
    return tuple(archive.with_name(archive.name + suffix) for suffix in SIDECARS) + (archive,)


def check_sidecars(archive: Path) -> Published:
    """The archive's sha256, size and file count, once its sidecars are shown to describe it."""
    digest = sha256_file(archive)
    size = archive.stat().st_size
    sidecar = archive.with_name(archive.name + ".sha256").read_text(encoding="utf-8").split()
    if sidecar != [digest, archive.name]:
        raise PublishError(f"{archive.name}.sha256 says {' '.join(sidecar)!r}, but {archive.name} has sha256 {digest}")
    manifest = json.loads(archive.with_name(archive.name + ".json").read_text(encoding="utf-8"))
    described = (manifest.get("archive"), manifest.get("sha256"), manifest.get("size"))
    if described != (archive.name, digest, size):
        raise PublishError(f"{archive.name}.json describes {described}, not this archive "
                           f"({archive.name}, {digest}, {size} bytes)")
    return Published(digest, size, len(manifest.get("files", ())))


def publish(built: Path, dest: Path, stale_dir: Path, manifest_fields: Mapping[str, object] | None = None) -> Published:
    """Put `built` and its sidecars at `dest` (see the module docstring), the manifest with
    `manifest_fields` added (the leg key, a binary cache's provenance); a copy of the leg
    withdrawn into `stale_dir` earlier is dropped once the current one is in place."""
    published = check_sidecars(built)
    dest.parent.mkdir(parents=True, exist_ok=True)
    for source, target in zip(published_files(built), published_files(dest)):
        if manifest_fields and target.name.endswith(".json"):
            manifest = {**json.loads(source.read_text(encoding="utf-8")), **manifest_fields}
            atomic_write_bytes(target, canonical_json(manifest).encode("utf-8"), fsync=True)
        else:
            _place(source, target)
    _fsync_dir(dest.parent)
    for stale in published_files(stale_dir / dest.name):
        stale.unlink(missing_ok=True)
    if stale_dir.is_dir() and not any(stale_dir.iterdir()):
        stale_dir.rmdir()
    return published


def _place(source: Path, target: Path) -> None:
    temp = temp_path_for(target)
    temp.unlink(missing_ok=True)
    try:
        hardlink_or_copy(source, temp)
        with open(temp, "rb+") as handle:
            os.fsync(handle.fileno())
        os.replace(temp, target)
    except BaseException:
        temp.unlink(missing_ok=True)
        raise


def _fsync_dir(directory: Path) -> None:
    if os.name == "nt":
        return
    descriptor = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(descriptor)
    finally:
        os.close(descriptor)


def withdraw(archive: Path, stale_dir: Path) -> list[str]:
    """Move `archive` and its sidecars (those present) into `stale_dir`; their names."""
    moved = []
    for path in published_files(archive):
        if not os.path.lexists(path):
            continue
        stale_dir.mkdir(parents=True, exist_ok=True)
        os.replace(path, stale_dir / path.name)
        moved.append(path.name)
    return moved
