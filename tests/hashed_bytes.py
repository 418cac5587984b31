"""Counting what sha256 reads: tests of "each byte hashed once per run" (util/files.py)."""
from __future__ import annotations

import hashlib

import pytest


def count_hashed_bytes(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """From now on (until the test ends), the length of every chunk any sha256 is fed, in order.
    It replaces hashlib's own sha256, which SCons's nodes use too: take expected digests, and
    make nodes, before calling it."""
    fed: list[int] = []
    real = hashlib.sha256

    class Counting:
        def __init__(self) -> None:
            self.inner = real()

        def update(self, chunk: bytes) -> None:
            fed.append(len(chunk))
            self.inner.update(chunk)

        def hexdigest(self) -> str:
            return self.inner.hexdigest()

    monkeypatch.setattr(hashlib, "sha256", Counting)
    return fed
