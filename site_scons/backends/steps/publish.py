"""Publishing a verified archive into dist/, and withdrawing one whose inputs changed.

dist/ holds, per leg, exactly the bytes a build of the current inputs produced, proven by
verify and smoke, or nothing. Publishing therefore:

- checks that the `.sha256` and `.json` sidecars describe the archive being published;
- stages the three files outside dist/'s listing, each fsynced: in a hidden directory
  beside the built archive in build/ (a hard link, and the manifest with the publish's
  fields); when dist/ is on another filesystem, where no rename from build/ can reach it
  (EXDEV), as copies in a hidden directory of dist/ itself (`dist/.<archive>.tmp-<pid>/`):
  a temp never shows in dist/ under a name that looks final;
- withdraws an old set still in dist/ into `dist/.stale/`, its archive first;
- renames the staged sidecars into dist/, then the archive: the archive is the commit point.

An archive in dist/ therefore always sits beside the sidecars that describe it: a kill at
any point leaves the old set, the new set, or no archive (the old one withdrawn) with at
most some sidecars, which mean "not published". A run's start (`sweep_dist`) removes such
lone sidecars and withdraws a set whose sidecars do not describe its archive (left by an
older version, or by hand); `scons gc=1` removes both kinds after hashing every archive.
Hidden staging directories match the temp pattern that a run's start sweeps
(util/buildtree.py).

What dist/ holds has fixed modes whatever the umask (FILE_MODE, DIR_MODE): a umask of 000
must not make a published archive or its checksum writable by every local user.

When a leg's inputs change, its old archive is moved to `dist/.stale/` before anything is
rebuilt, so a rebuild that fails (or is killed) never leaves the old bytes posing as the
current ones; the end-of-run summary names what was withdrawn.
"""
from __future__ import annotations

import errno
import json
import os
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator, Mapping

from backends.steps.archive import FORMATS
from backends.util.errors import BackendsError, environment_failure
from backends.util.files import (
    atomic_write_bytes,
    canonical_json,
    hardlink_or_copy,
    make_dirs,
    remove_path,
    sha256_file,
    temp_path_for,
)

SIDECARS = (".json", ".sha256")
FILE_MODE = 0o644  # every file published into dist/ (archives, sidecars, release assets)
DIR_MODE = 0o755  # every directory the project creates there


class PublishError(BackendsError, RuntimeError):
    """The archive and its sidecars disagree, or dist/ could not be written."""


@dataclass(frozen=True)
class Published:
    sha256: str
    size: int
    files: int


@dataclass(frozen=True)
class DistDebris:
    """What interrupted publishes (or hands) left in dist/: sidecars without their archive,
    and archives beside sidecars that do not describe them (each with why)."""

    lone_sidecars: tuple[Path, ...]
    mismatched: tuple[tuple[Path, str], ...]


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
    withdrawn into `stale_dir` earlier is dropped once the current one is in place.
    An OSError names the file of dist/ that could not be written."""
    published = check_sidecars(built)
    make_dirs(dest.parent, DIR_MODE)
    sources, fields = published_files(built), dict(manifest_fields or {})
    in_dist = temp_path_for(dest.with_name(f".{dest.name}"))
    if not _same_filesystem(built.parent, dest.parent):
        _publish_via(in_dist, sources, dest, stale_dir, fields)
    else:
        try:
            _publish_via(temp_path_for(built.parent / ".publish"), sources, dest, stale_dir, fields)
        except OSError as error:  # one filesystem, two mounts (a bind mount): no rename between them
            if error.errno != errno.EXDEV:
                raise
            _publish_via(in_dist, sources, dest, stale_dir, fields)
    _fsync_dir(dest.parent)
    for stale in published_files(stale_dir / dest.name):
        stale.unlink(missing_ok=True)
    if stale_dir.is_dir() and not any(stale_dir.iterdir()):
        stale_dir.rmdir()
    return published


def _same_filesystem(one: Path, other: Path) -> bool:
    return os.stat(one).st_dev == os.stat(other).st_dev


def _publish_via(staging: Path, sources: tuple[Path, ...], dest: Path, stale_dir: Path,
                 fields: Mapping[str, object]) -> None:
    """Stage the set in `staging`, withdraw the old set, rename the new one in, the archive
    last. Only the first rename can fail with EXDEV (all come from one directory): dist/
    then holds no set for `dest`, and `publish` stages again inside dist/. Staging only
    happens on dist/'s filesystem, so an error there names the file of dist/."""
    targets = published_files(dest)
    remove_path(staging)
    try:
        make_dirs(staging, DIR_MODE)
        staged = [_stage(source, staging / target.name, target, fields) for source, target in zip(sources, targets)]
        withdraw(dest, stale_dir)
        for temp, target in zip(staged, targets):
            with _writing(target):
                os.replace(temp, target)
    finally:
        remove_path(staging)


def _stage(source: Path, temp: Path, target: Path, fields: Mapping[str, object]) -> Path:
    with _writing(target):
        if fields and target.name.endswith(".json"):
            manifest = {**json.loads(source.read_text(encoding="utf-8")), **fields}
            atomic_write_bytes(temp, canonical_json(manifest).encode("utf-8"), fsync=True, mode=FILE_MODE)
        else:
            hardlink_or_copy(source, temp)  # a hard link shares the mode: the built copy gets FILE_MODE too
            os.chmod(temp, FILE_MODE)
            with open(temp, "rb+") as handle:
                os.fsync(handle.fileno())
    return temp


def write_published(path: Path, data: bytes) -> None:
    """A file dist/ publishes beside the archives (a release's SBOM, SHA256SUMS): atomically,
    fsynced, with FILE_MODE."""
    make_dirs(path.parent, DIR_MODE)
    atomic_write_bytes(path, data, fsync=True, mode=FILE_MODE)



@contextmanager
def _writing(target: Path) -> Iterator[None]:
    """An OSError names the dist/ file being written, not a temp or the source (a copy's
    error names its source): "no space left" must point at dist/'s filesystem. EXDEV is
    passed on as it is: `publish` answers it by staging in dist/."""
    try:
        yield
    except OSError as error:
        if error.errno is None or error.errno == errno.EXDEV:
            raise
        failure = environment_failure(error, target)
        raise (OSError(error.errno, error.strerror, os.fspath(target)) if failure is error else failure) from error


def _fsync_dir(directory: Path) -> None:
    if os.name == "nt":
        return
    descriptor = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(descriptor)
    finally:
        os.close(descriptor)


def withdraw(archive: Path, stale_dir: Path) -> list[str]:
    """Move `archive` and its sidecars (those present) into `stale_dir`, the archive first
    (what stays behind after a kill is lone sidecars, never an undescribed archive); their names."""
    moved = []
    for path in reversed(published_files(archive)):
        if not os.path.lexists(path):
            continue
        make_dirs(stale_dir, DIR_MODE)
        os.replace(path, stale_dir / path.name)
        moved.append(path.name)
    return moved


def dist_debris(dist: Path, *, hash_archives: bool = False) -> DistDebris:
    """Lone sidecars and mismatched sets among dist/'s archives (see the module docstring).
    Without `hash_archives` (a run's start: no archive is read) a set is judged by its
    sidecars agreeing with each other and with the archive's name and size."""
    try:
        names = set(os.listdir(dist))
    except FileNotFoundError:
        return DistDebris((), ())
    lone: list[Path] = []
    mismatched: list[tuple[Path, str]] = []
    for archive_name in sorted({found for name in names if (found := _archive_of(name))}):
        archive = dist / archive_name
        present = [path for path in published_files(archive)[:-1] if path.name in names]
        if archive_name not in names:
            lone += present
            continue
        problem = _set_problem(archive, hash_archives)
        if problem:
            mismatched.append((archive, problem))
    return DistDebris(tuple(lone), tuple(mismatched))


def _archive_of(name: str) -> str | None:
    """The archive a sidecar's name belongs to; None for any other name (hidden ones too)."""
    if name.startswith("."):
        return None
    for suffix in SIDECARS:
        archive = name.removesuffix(suffix)
        if archive != name and archive.endswith(tuple(f".{fmt}" for fmt in FORMATS)):
            return archive
    return None


def _set_problem(archive: Path, hash_archives: bool) -> str | None:
    """Why `archive`'s sidecars do not describe it, or None."""
    try:
        if hash_archives:
            check_sidecars(archive)
            return None
        sidecar = archive.with_name(archive.name + ".sha256").read_text(encoding="utf-8").split()
        manifest = json.loads(archive.with_name(archive.name + ".json").read_text(encoding="utf-8"))
    except FileNotFoundError as missing:
        return f"{Path(missing.filename or '').name} is missing"
    except (PublishError, OSError, ValueError) as error:
        return str(error)
    size = archive.stat().st_size
    if not isinstance(manifest, dict):
        return f"{archive.name}.json is not a manifest"
    json_says = (manifest.get("archive"), manifest.get("sha256"), manifest.get("size"))
    if len(sidecar) != 2 or sidecar[1] != archive.name or json_says != (archive.name, sidecar[0], size):
        return f"its sidecars do not describe its {size} bytes"
    return None


def sweep_dist(dist: Path, stale_dir: Path) -> list[str]:
    """At a run's start (the run holds the tree): remove lone sidecars, withdraw mismatched
    sets into `stale_dir`. One line saying what was done, or none."""
    debris = dist_debris(dist)
    for path in debris.lone_sidecars:
        path.unlink(missing_ok=True)
    for archive, _ in debris.mismatched:
        withdraw(archive, stale_dir)
    said = []
    if debris.lone_sidecars:
        said.append(f"removed {', '.join(p.name for p in debris.lone_sidecars)} (their archive is missing)")
    if debris.mismatched:
        said.append(f"withdrew {', '.join(f'{a.name} ({why})' for a, why in debris.mismatched)} into "
                    f"{stale_dir.name}/")
    return [f"{dist.name}/: {'; '.join(said)}: left by an interrupted publish"] if said else []
