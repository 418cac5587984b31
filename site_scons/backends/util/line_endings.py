"""The sha256 of a repository file, the same in every checkout of one commit.

Git may check text out with CRLF line endings (`core.autocrlf` on Windows, or attributes that
ask for it) and binaries as they are. A leg key hashes repository files (patches, smoke
projects, toolchain files): hashed as checked out, a Windows runner would compute other keys
than the Linux plan job and never hit the binary cache. `.gitattributes` keeps text LF in
every checkout; this hash does not rely on it. Git converts only what it takes for text (no
NUL byte, no CR outside a CRLF pair), so such a file is hashed with CRLF read as LF, and
anything else as its bytes. No text file of the repository holds a CR
(tests/unit/util/test_line_endings.py), so the normalisation merges no two files the project has.
"""
from __future__ import annotations

import hashlib
from pathlib import Path

CRLF, LF, CR, NUL = b"\r\n", b"\n", b"\r", b"\0"


def is_text(data: bytes) -> bool:
    """Whether git's `text=auto` would convert these bytes' line endings."""
    return NUL not in data and CR not in data.replace(CRLF, b"")


def normalised(data: bytes) -> bytes:
    return data.replace(CRLF, LF) if is_text(data) else data


def checkout_sha256(path: Path) -> str:
    return hashlib.sha256(normalised(path.read_bytes())).hexdigest()
