"""Writing pins into an engine's engine.toml, keeping its formatting and comments.

`scons lock` records what a selection is missing (and, bumping a version, drops what the
old version needed); `lock=1` builds record one pin at a time. Every write is one
read-edit-write of the file under its lock, so parallel writers each add their lines.
Values are replaced in place (a comment after one stays); new keys are appended to their
table, which is created (before `[sha256]`) when missing.
"""
from __future__ import annotations

import re
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

from backends.util.errors import BackendsError
from backends.util.files import atomic_write_text
from backends.util.locks import FileLock

SHA256_TABLE = "[sha256]"
NESTED_TABLE = "[nested]"
NESTED_COMMENT = "# What a pinned file names (a podspec's source.http), by that file's name: recorded by `scons lock`."


@dataclass
class Changes:
    """Edits of one engine.toml, applied together."""

    version: str = ""
    sha256: dict[str, str] = field(default_factory=dict)  # file name -> sha256 to record
    drop_sha256: set[str] = field(default_factory=set)
    commits: dict[str, str] = field(default_factory=dict)  # source name -> commit ("" clears it)
    nested: dict[str, str] = field(default_factory=dict)  # file name -> the URL it names
    drop_nested: set[str] = field(default_factory=set)

    def __bool__(self) -> bool:
        return any((self.version, self.sha256, self.drop_sha256, self.commits, self.nested, self.drop_nested))


def apply(engine_toml: Path, changes: Changes) -> None:
    """Write `changes` into `engine_toml` (one locked edit)."""
    with _locked(engine_toml):
        atomic_write_text(engine_toml, edited(engine_toml.read_text(), changes, engine_toml))


def edited(text: str, changes: Changes, where: Path) -> str:
    if changes.version:
        text = _set_value(text, None, "version", changes.version, where)
    for source, commit in changes.commits.items():
        text = _set_value(text, f"[sources.{source}]", "commit", commit, where)
    for name in changes.drop_sha256:
        text = _drop_key(text, SHA256_TABLE, name)
    for name in changes.drop_nested:
        text = _drop_key(text, NESTED_TABLE, name)
    for name, url in changes.nested.items():
        text = _set_key(_with_table(text, NESTED_TABLE, NESTED_COMMENT), NESTED_TABLE, name, url)
    for name, sha256 in changes.sha256.items():
        text = _set_key(_with_table(text, SHA256_TABLE), SHA256_TABLE, name, sha256)
    return text


class PinConflict(BackendsError, RuntimeError):
    """A `lock=1` build would replace a pin recorded meanwhile (by `scons lock`, say)."""


def record_pin(engine_toml: Path, filename: str, sha256: str) -> None:
    """`lock=1`: fill `"<filename>" = "<sha256>"` in `[sha256]`."""
    if _record_missing(engine_toml, ("sha256", filename), Changes(sha256={filename: sha256}), sha256):
        print(f"[lock] recorded {filename} sha256 {sha256} in {engine_toml}; commit it", flush=True)


def record_commit(engine_toml: Path, source: str, commit: str) -> None:
    """`lock=1` on a git source: set `commit = "<sha>"` in `[sources.<source>]`."""
    if _record_missing(engine_toml, ("sources", source, "commit"), Changes(commits={source: commit}), commit):
        print(f"[lock] recorded {source} commit {commit} in {engine_toml}; commit it", flush=True)


def _record_missing(engine_toml: Path, where: tuple[str, ...], changes: Changes, value: str) -> bool:
    """Write `changes` when the pin at `where` is still missing (read again under the lock:
    the run loaded its data before it waited for the tree); False when it holds `value`
    already; another recorded value is never replaced."""
    with _locked(engine_toml):
        text = engine_toml.read_text()
        recorded: object = tomllib.loads(text)
        for part in where:
            recorded = recorded.get(part, "") if isinstance(recorded, dict) else ""
        if recorded == value:
            return False
        if recorded:
            raise PinConflict(f"{engine_toml}: {'.'.join(where)} was recorded as {recorded} meanwhile, and this run "
                              f"got {value}; nothing was replaced: check which is upstream's (`scons lock` verifies "
                              "recorded pins) and run again")
        atomic_write_text(engine_toml, edited(text, changes, engine_toml))
        return True


def _locked(path: Path) -> FileLock:
    """The lock file stays (removing it would let a third writer lock a new inode); git ignores it."""
    return FileLock(path.with_name(path.name + ".lock"))


# -- TOML text, edited by line ----------------------------------------------------------------

_HEADER = re.compile(r"^\[", re.MULTILINE)


def _span(text: str, header: str | None) -> tuple[int, int] | None:
    """Where a table's body is: after its header line up to the next header (None: the
    top-level keys before the first table); None when the table is missing."""
    if header is None:
        first = _HEADER.search(text)
        return 0, first.start() if first else len(text)
    match = re.search(rf"^{re.escape(header)}[ \t]*(#[^\n]*)?$", text, re.MULTILINE)
    if match is None:
        return None
    following = _HEADER.search(text, match.end())
    return match.end(), following.start() if following else len(text)


def _quoted(value: str) -> str:
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _key_line(key: str) -> str:
    return rf'^(?:"{re.escape(key)}"|{re.escape(key)})[ \t]*=[ \t]*'


def _set_value(text: str, header: str | None, key: str, value: str, where: Path) -> str:
    """Replace the string value of `key` in a table, keeping what follows it on the line."""
    span = _span(text, header)
    if span is None:
        raise ValueError(f"{where} has no {header} table")
    start, end = span
    pattern = re.compile(_key_line(key) + r'"[^"\n]*"', re.MULTILINE)
    match = pattern.search(text, start, end)
    if match is None:
        return _insert(text, start, end, f"{key} = {_quoted(value)}")
    head = text[match.start():match.end()].rsplit('"', 2)[0]
    return text[:match.start()] + head + _quoted(value) + text[match.end():]


def _set_key(text: str, header: str, key: str, value: str) -> str:
    span = _span(text, header)
    assert span is not None
    start, end = span
    match = re.compile(_key_line(key) + r'"[^"\n]*"[^\n]*$', re.MULTILINE).search(text, start, end)
    line = f"{_quoted(key)} = {_quoted(value)}"
    if match is None:
        return _insert(text, start, end, line)
    return text[:match.start()] + line + text[match.end():]


def _drop_key(text: str, header: str, key: str) -> str:
    span = _span(text, header)
    if span is None:
        return text
    start, end = span
    match = re.compile(_key_line(key) + r'[^\n]*\n?', re.MULTILINE).search(text, start, end)
    return text if match is None else text[:match.start()] + text[match.end():]


def _insert(text: str, start: int, end: int, line: str) -> str:
    """Append `line` after the last line of a table's body, keeping the blank lines after it."""
    body = text[start:end]
    kept = body.rstrip()
    trailing = body[len(kept):]
    return text[:start] + kept + "\n" + line + (trailing if "\n" in trailing else "\n") + text[end:]


def _with_table(text: str, header: str, comment: str = "") -> str:
    """`text` with the table `header` (created before `[sha256]` and its comment lines, or at the end)."""
    if _span(text, header) is not None:
        return text
    block = (f"{comment}\n" if comment else "") + f"{header}\n"
    anchor = re.search(rf"^(#[^\n]*\n)*{re.escape(SHA256_TABLE)}", text, re.MULTILINE)
    if header == SHA256_TABLE or anchor is None:
        return text.rstrip("\n") + "\n\n" + block
    return text[:anchor.start()] + block + "\n" + text[anchor.start():]
