"""A step's target signs itself for .sconsign with the sha256 this run took for its record
(graph/declare.StepOutput), never by reading the file again: the 130 MB archive is hashed
once per run (docs/decisions.md)."""
from __future__ import annotations

import hashlib
from pathlib import Path

import pytest
import SCons.Environment

from backends.graph.declare import StepOutput, step_output
from backends.util import files
from hashed_bytes import count_hashed_bytes


def _output(path: Path) -> StepOutput:
    return step_output(SCons.Environment.Environment(tools=[]).fs, str(path))


def test_a_step_output_signs_with_the_digest_its_step_took(tmp_path: Path, run_digests: None,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    archive = tmp_path / "a.zip"
    archive.write_bytes(b"archive bytes")
    taken = files.sha256_file(archive)  # what the step's record holds
    assert taken == hashlib.sha256(b"archive bytes").hexdigest()
    node = _output(archive)
    read = count_hashed_bytes(monkeypatch)
    assert node.get_csig() == taken
    assert read == []  # not read again


def test_a_step_output_replaced_in_the_run_signs_its_new_bytes(tmp_path: Path, run_digests: None) -> None:
    archive = tmp_path / "a.zip"
    archive.write_bytes(b"first")
    files.sha256_file(archive)
    files.atomic_write_bytes(archive, b"other")  # another inode, as every step writes
    assert _output(archive).get_csig() == hashlib.sha256(b"other").hexdigest()


def test_a_missing_step_output_signs_as_empty_not_as_an_error(tmp_path: Path, run_digests: None) -> None:
    assert _output(tmp_path / "gone.zip").get_csig() == ""
