"""Whether a binary cache entry may become a leg's archive: trusted first, then checked.

In order, each step only on what the previous one accepted:

1. *Trusted* (trust.py): the entry's signature verifies under a key the reader trusts
   and vouches for this leg key, this archive and this manifest.
2. *Well-formed*: the manifest has the shape the project writes (its schema below) and
   names this leg key and this archive; the `.sha256` sidecar and the manifest describe the
   archive's bytes.
3. *Described*: every member of the archive is in the manifest's file list with the same
   kind, size, mode and sha256 (or link target), and nothing is missing or added.
4. *Within contract*: the leg's contract holds on the archive (verify), exactly as for a
   build.

A signature says who wrote an entry; 2-4 catch what a trusted writer's bug or a store that
was never signed would let through. Every problem is a sentence; none is an exception.
"""
from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Mapping

from backends.cache.trust import Trust, signer_label
from backends.model.plan import Contract
from backends.steps.publish import PublishError, check_sidecars
from backends.steps.verify import check

_SHA256 = re.compile(r"[0-9a-f]{64}")
_MODE = re.compile(r"0o[0-7]{1,6}")


def check_entry(entry: Path, archive: str, key: str, contract: Contract, version: str, build_root: str,
                trust: Trust) -> list[str]:
    """Why the entry in `entry` is not to be restored (empty: it may be)."""
    path = entry / archive
    untrusted = trust.problems(key, path)
    if untrusted:
        return untrusted
    try:
        manifest = json.loads(path.with_name(archive + ".json").read_text(encoding="utf-8"))
    except (OSError, ValueError) as error:
        return [f"its manifest cannot be read: {error}"]
    malformed = manifest_problems(manifest, archive, key)
    if malformed:
        return malformed
    try:
        check_sidecars(path)
    except (PublishError, OSError, ValueError) as error:
        return [str(error)]
    return check(path, contract, version, build_root, described=manifest["files"])


def restored_record(store: str, key: str, signer: str) -> dict[str, str]:
    """A restored archive's manifest says where it came from and whose signature it rests on."""
    return {"from binary cache": store, "key": key, "signed by": signer_label(signer)}


def manifest_problems(manifest: object, archive: str, key: str) -> list[str]:
    """The manifest's schema: the fields a restore relies on, each of its type."""
    if not isinstance(manifest, dict):
        return [f"its manifest is a JSON {type(manifest).__name__}, not an object"]
    problems = []
    expect: Mapping[str, type] = {"archive": str, "sha256": str, "size": int, "leg_key": str, "files": list,
                                  "leg": dict}
    for field, kind in expect.items():
        value = manifest.get(field)
        if not isinstance(value, kind) or isinstance(value, bool):
            problems.append(f"its manifest's {field} is {type(value).__name__ if field in manifest else 'missing'}, "
                            f"not {kind.__name__}")
    if problems:
        return problems
    if manifest["leg_key"] != key:
        return [f"its manifest names the key {manifest['leg_key']!r}, not {key}"]
    if manifest["archive"] != archive:
        return [f"its manifest describes {manifest['archive']!r}, not {archive}"]
    if not _SHA256.fullmatch(manifest["sha256"]):
        return [f"its manifest's sha256 {manifest['sha256']!r} is not 64 lowercase hex digits"]
    return [f"its manifest's files[{index}] {problem}" for index, record in enumerate(manifest["files"])
            for problem in _file_record_problems(record)][:5]


def _file_record_problems(record: object) -> list[str]:
    if not isinstance(record, dict):
        return [f"is a {type(record).__name__}, not an object"]
    path, size, mode = record.get("path"), record.get("size"), record.get("mode")
    if not isinstance(path, str) or not path:
        return ["has no path"]
    if not isinstance(size, int) or isinstance(size, bool) or size < 0:
        return [f"({path}) has no size"]
    if not isinstance(mode, str) or not _MODE.fullmatch(mode):
        return [f"({path}) has no mode such as 0o644"]
    link, digest = record.get("link"), record.get("sha256")
    if (link is None) == (digest is None):
        return [f"({path}) names neither a sha256 nor a link target, or both"]
    if digest is not None and not (isinstance(digest, str) and _SHA256.fullmatch(digest)):
        return [f"({path}) has a sha256 that is not 64 lowercase hex digits"]
    if link is not None and not isinstance(link, str):
        return [f"({path}) has a link target that is not text"]
    return []
