"""Recording sha256 pins into an engine's `[sha256]` table (`lock=1`, trust on first use)."""
from __future__ import annotations

import re
from pathlib import Path
from typing import Callable

from .locks import FileLock
from .steps.files import atomic_write_text


def _locked(path: Path) -> FileLock:
    """One writer at a time: parallel lock=1 fetches (scons -j) each add a line. The lock
    file stays (removing it would let a third writer lock a new inode); git ignores it."""
    return FileLock(path.with_name(path.name + ".lock"))


def _update(engine_toml: Path, edit: Callable[[str], str], what: str) -> None:
    with _locked(engine_toml):
        atomic_write_text(engine_toml, edit(engine_toml.read_text()))
    print(f"[lock] recorded {what} in {engine_toml}; commit it", flush=True)


def _set_line(table: str, pattern: re.Pattern[str], line: str) -> str:
    """Replace the first line matching `pattern` in a TOML table's text, or append `line`."""
    if pattern.search(table):
        return pattern.sub(line, table, count=1)
    return table.rstrip("\n") + f"\n{line}\n"


def record_pin(engine_toml: Path, filename: str, sha256: str) -> None:
    """Add or fill `"<filename>" = "<sha256>"` in the `[sha256]` table (the file's last table)."""
    def edit(text: str) -> str:
        if "\n[sha256]" not in text and not text.startswith("[sha256]"):
            text = text.rstrip("\n") + "\n\n[sha256]\n"
        head, _, table = text.partition("[sha256]")
        pattern = re.compile(rf'^"{re.escape(filename)}"\s*=\s*"[0-9a-f]*"\s*$', re.MULTILINE)
        return head + "[sha256]" + _set_line(table, pattern, f'"{filename}" = "{sha256}"')

    _update(engine_toml, edit, f"{filename} sha256 {sha256}")


def record_commit(engine_toml: Path, source: str, commit: str) -> None:
    """Set `commit = "<sha>"` in the `[sources.<source>]` table (`lock=1` on a git source)."""
    header = f"[sources.{source}]"

    def edit(text: str) -> str:
        start = text.find(header)
        if start < 0:
            raise ValueError(f"{engine_toml} has no {header} table")
        end = text.find("\n[", start + len(header))
        end = len(text) if end < 0 else end
        pattern = re.compile(r'^commit\s*=\s*"[^"]*"[^\n]*$', re.MULTILINE)
        return text[:start] + _set_line(text[start:end], pattern, f'commit = "{commit}"') + text[end:]

    _update(engine_toml, edit, f"{source} commit {commit}")
