"""Step records: each step says, in its own output, what it was built from.

Every step writes, last and atomically, a record: its manifest, plus `inputs` (the
signature of everything the step was declared to depend on: its settings, the previous
steps' records, origin files), `outputs` (the sha256 of every other file it wrote: the
archive beside its manifest, a published copy in dist/, the download in the cache) and
`trees` (the digest of every directory it filled: an extraction, a stage), so an edit in
place anywhere below them reruns the step and what depends on it.

A step is up to date exactly when its record exists, names the current inputs signature,
and its outputs still have the recorded digests. That is decided from the files on disk,
never from .sconsign: SCons writes .sconsign only at exit, so after a kill -9 it can
describe older bytes than the disk holds, and trusting it published them (the graph's
decider asks `Records.is_stale`).
"""
from __future__ import annotations

import hashlib
import json
import os
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping

from backends.util.digests import DigestCache
from backends.util.files import relative_label, write_json

INPUTS = "inputs_signature"
OUTPUTS = "outputs"
TREES = "trees"
DETAIL = "inputs"  # what the signature was made of, to say what changed when a step reruns
_SHOWN = 48  # characters of a value in a "reruns:" line


@dataclass(frozen=True)
class Inputs:
    """What a step is built from: the files it depends on, and its settings (canonical JSON)."""

    files: tuple[str, ...]
    settings: tuple[str, ...]


class Records:
    def __init__(self, root: Path, digests: DigestCache) -> None:
        self.root = root
        self.digests = digests
        self._record_of: dict[str, str] = {}  # target path -> the record of its step
        self._stale: dict[str, bool] = {}
        self._why: dict[str, str] = {}
        self._lock = threading.Lock()

    def register(self, targets: Iterable[str], record: str) -> None:
        for target in targets:
            self._record_of[os.path.abspath(target)] = os.path.abspath(record)

    def knows(self, target: str) -> bool:
        return os.path.abspath(target) in self._record_of

    def record_of(self, target: str) -> str:
        return self._record_of[os.path.abspath(target)]

    def signature(self, inputs: Inputs) -> str:
        """One hash over the input files' names and contents and the settings, in order."""
        digest = hashlib.sha256()
        for path in inputs.files:
            digest.update(f"{relative_label(path, self.root)}\0{self.digests.digest(Path(path)) or 'missing'}\n".encode())
        for text in inputs.settings:
            digest.update(f"settings\0{text}\n".encode())
        return digest.hexdigest()

    def is_stale(self, target: str, inputs: Callable[[], Inputs]) -> bool:
        """True unless `target`'s step record matches the current inputs and outputs. SCons
        asks once per dependency; the answer is computed once per step (`inputs` lazily)."""
        record = self._record_of[target]
        with self._lock:
            known = self._stale.get(record)
        if known is not None:
            return known
        current = inputs()
        stale = self._check(record, current)
        # Said now: SCons removes a stale step's targets, its record among them, before it runs.
        why = self.why(Path(record), current) if stale else ""
        with self._lock:
            self._stale[record] = stale
            self._why[record] = why
        return stale

    def invalidate(self, record: str | Path, why: str) -> None:
        """Judge the step of `record` stale, for `why`: a fact of the world its record cannot
        show (an entry gone from a binary cache it was stored in). Before SCons asks."""
        with self._lock:
            self._stale[os.path.abspath(record)] = True
            self._why[os.path.abspath(record)] = why

    def reason(self, record: str) -> str:
        """Why the step of `record` reruns, as found when it was judged stale ("" if unknown)."""
        with self._lock:
            return self._why.get(os.path.abspath(record), "")

    def _check(self, record: str, inputs: Inputs) -> bool:
        body = read_record(Path(record))
        if body is None or body.get(INPUTS) != self.signature(inputs):
            return True
        outputs, trees = body.get(OUTPUTS), body.get(TREES, {})
        if not isinstance(outputs, dict) or not isinstance(trees, dict):
            return True
        return (any(self.digests.digest(Path(path)) != digest for path, digest in outputs.items())
                or any(self.digests.tree_digest(Path(path)) != digest for path, digest in trees.items()))

    def _detail(self, inputs: Inputs) -> dict[str, Any]:
        return {"files": {relative_label(path, self.root): self.digests.digest(Path(path)) or "missing"
                          for path in inputs.files},
                "settings": [json.loads(text) if text.startswith(("{", "[")) else text for text in inputs.settings]}

    def why(self, record: Path, inputs: Inputs) -> str:
        """What differs from the inputs and outputs the record was made with, in one line
        (old -> new, shortened); "" when there is no record to compare with."""
        body = read_record(record)
        if body is None:
            return ""
        old, new = body.get(DETAIL), self._detail(inputs)
        if not isinstance(old, dict):
            return "its record predates this explanation"
        changes = _changed_files(old.get("files"), new["files"])
        changes += _changed_values("", old.get("settings"), new["settings"])
        if not changes:
            outputs = {**(body.get(OUTPUTS) or {}), **(body.get(TREES) or {})}
            changes = [f"{relative_label(path, self.root)} was changed or removed" for path, digest in outputs.items()
                       if digest != (self.digests.tree_digest(Path(path)) if path in (body.get(TREES) or {})
                                     else self.digests.digest(Path(path)))]
        shown = "; ".join(changes[:3]) + (f"; and {len(changes) - 3} more" if len(changes) > 3 else "")
        return shown or "its record does not match"

    def write(self, record: Path, body: Mapping[str, Any], inputs: Inputs, outputs: Iterable[Path],
              trees: Iterable[Path] = ()) -> None:
        """Write the step's record (last: it is the commit point of the step)."""
        full = dict(body)
        full[INPUTS] = self.signature(inputs)
        full[DETAIL] = self._detail(inputs)
        full[OUTPUTS] = {os.path.abspath(p): self.digests.digest(Path(p)) for p in outputs}
        full[TREES] = {os.path.abspath(p): self.digests.tree_digest(Path(p)) for p in trees}
        write_json(record, full)
        with self._lock:
            self._stale[os.path.abspath(record)] = False


def read_record(path: Path) -> dict[str, Any] | None:
    try:
        body = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return body if isinstance(body, dict) else None


def public(record: Mapping[str, Any]) -> dict[str, Any]:
    """A step record without its bookkeeping (local paths and digests of this machine)."""
    return {k: v for k, v in record.items() if k not in (INPUTS, OUTPUTS, TREES, DETAIL)}


def _short(value: object) -> str:
    text = value if isinstance(value, str) else json.dumps(value, sort_keys=True)
    return text if len(text) <= _SHOWN else f"{text[:_SHOWN // 2 - 2]}...{text[-(_SHOWN // 2 - 2):]}"


def _changed_files(old: object, new: Mapping[str, str]) -> list[str]:
    old = old if isinstance(old, dict) else {}
    return [f"{label} {'is new' if label not in old else 'changed'}" for label in new if old.get(label) != new[label]] \
        + [f"{label} is no input any more" for label in old if label not in new]


def _changed_values(where: str, old: object, new: object) -> list[str]:
    """Paths of the values that differ between two JSON values (`environment.CC: gcc -> clang`)."""
    if isinstance(old, dict) and isinstance(new, dict):
        return [change for key in sorted(old.keys() | new.keys(), key=str)
                for change in _changed_values(f"{where}.{key}" if where else str(key), old.get(key), new.get(key))]
    if isinstance(old, list) and isinstance(new, list) and len(old) == len(new) and where == "":
        return [change for index, (a, b) in enumerate(zip(old, new)) for change in _changed_values("", a, b)]
    if old == new:
        return []
    label = where or "settings"
    if old is None:
        return [f"{label} added: {_short(new)}"]
    if new is None:
        return [f"{label} removed (was {_short(old)})"]
    return [f"{label}: {_short(old)} -> {_short(new)}"]
