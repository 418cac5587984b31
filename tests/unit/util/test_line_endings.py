"""Line endings: `.gitattributes` keeps text LF and binaries untouched in every checkout, and the
leg keys do not depend on it: a CRLF checkout (Windows' `core.autocrlf` with the attributes
overridden) computes the keys an LF one does."""
from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from backends.cache import key as legkey
from backends.cache.key import LegKey, leg_keys
from backends.model.matrix import load_matrix
from backends.model.recipes import plan_all
from backends.util.files import sha256_file
from backends.util.line_endings import checkout_sha256, is_text, normalised
from scratch import project_copy

ROOT = Path(__file__).resolve().parents[3]
# What a checkout needs to plan and key every leg.
TREE = (".gitattributes", "SConstruct", "site_scons", "variants", "engines", "smoke")
GIT_ENV = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.invalid", "GIT_COMMITTER_NAME": "t",
           "GIT_COMMITTER_EMAIL": "t@example.invalid", "GIT_CONFIG_GLOBAL": os.devnull,
           "GIT_CONFIG_NOSYSTEM": "1"}


def _git(cwd: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=cwd, env={**os.environ, **GIT_ENV}, check=True, capture_output=True,
                          text=True).stdout


@pytest.mark.parametrize(("data", "text", "expected"), [
    (b"a\r\nb\r\n", True, b"a\nb\n"),
    (b"a\nb\n", True, b"a\nb\n"),
    (b"a\r\n\0b\r\n", False, b"a\r\n\0b\r\n"),  # a NUL: binary, as git judges it
    (b"a\rb\r\n", False, b"a\rb\r\n"),  # a lone CR: git leaves it alone, and so does the hash
])
def test_normalised(data: bytes, text: bool, expected: bytes) -> None:
    assert is_text(data) is text and normalised(data) == expected


def test_checkout_sha256_reads_crlf_text_as_lf(tmp_path: Path) -> None:
    lf, crlf, binary = tmp_path / "lf", tmp_path / "crlf", tmp_path / "bin"
    lf.write_bytes(b"x\ny\n")
    crlf.write_bytes(b"x\r\ny\r\n")
    binary.write_bytes(b"\0x\r\ny\r\n")
    assert checkout_sha256(lf) == checkout_sha256(crlf) == sha256_file(lf)
    assert checkout_sha256(binary) == hashlib.sha256(binary.read_bytes()).hexdigest()


def _project_files() -> list[Path]:
    listed = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True)
    if listed.returncode != 0:  # not a git checkout: every file of the tree the keys read
        return [p for name in TREE[1:] for p in sorted((ROOT / name).rglob("*")) if p.is_file()
                and "__pycache__" not in p.parts]
    return [ROOT / name for name in listed.stdout.decode().split("\0") if name and (ROOT / name).is_file()]


def test_no_text_file_holds_a_cr_and_every_binary_is_marked() -> None:
    """So the normalisation merges no two files the project has, and git converts none of
    its binaries; the attributes are read by git itself."""
    files = _project_files()
    text = [path for path in files if is_text(path.read_bytes())]
    assert [p for p in text if b"\r" in p.read_bytes()] == []
    binaries = [p.relative_to(ROOT).as_posix() for p in files if p not in text]
    assert {"smoke/onnxruntime/add.onnx", "smoke/tflite/add.tflite"} <= set(binaries)
    if shutil.which("git") is None or not (ROOT / ".git").exists():
        pytest.skip("git reads the attributes")
    for line in _git(ROOT, "check-attr", "text", "--", *binaries).splitlines():
        assert line.endswith(": text: unset"), line  # `binary`: never converted, whatever eol says
    sample = [p.relative_to(ROOT).as_posix() for p in text[:20]]
    eols = [line for line in _git(ROOT, "check-attr", "eol", "--", *sample).splitlines()]
    assert eols and all(line.endswith(": eol: lf") for line in eols), eols


@pytest.fixture(scope="module")
def origin(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A repository holding this tree as it is now, committed with its attributes."""
    if shutil.which("git") is None:
        pytest.skip("needs git")
    repo = project_copy(tmp_path_factory.mktemp("origin"), TREE)
    _git(repo, "init", "-q", "-b", "main")
    _git(repo, "add", "-A")
    _git(repo, "commit", "-q", "-m", "tree")
    return repo


def _clone(origin: Path, dest: Path, attributes: str = "") -> Path:
    """`git -c core.autocrlf=true clone`, as on Windows; `attributes` (info/attributes, which
    outrank .gitattributes) stand for a checkout the project's attributes do not govern."""
    _git(origin.parent, "-c", "core.autocrlf=true", "clone", "-q", "--no-checkout", str(origin), str(dest))
    if attributes:
        (dest / ".git" / "info").mkdir(exist_ok=True)
        (dest / ".git" / "info" / "attributes").write_text(attributes)
    _git(dest, "-c", "core.autocrlf=true", "checkout", "-q", "main")
    return dest


def _keys(root: Path) -> dict[str, LegKey]:
    matrix = load_matrix(root)
    return leg_keys(plan_all(matrix), matrix, root)


def _crlf_files(root: Path) -> list[str]:
    return sorted(p.relative_to(root).as_posix() for name in ("engines", "smoke") for p in (root / name).rglob("*")
                  if p.is_file() and b"\r\n" in p.read_bytes() and is_text(p.read_bytes()))


def test_a_windows_checkout_keeps_lf(origin: Path, tmp_path: Path) -> None:
    clone = _clone(origin, tmp_path / "autocrlf")
    assert _crlf_files(clone) == []


def test_a_crlf_checkout_computes_the_keys_an_lf_one_does(origin: Path, tmp_path: Path,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    lf = _clone(origin, tmp_path / "lf", "* text=auto eol=lf\n")
    crlf = _clone(origin, tmp_path / "crlf", "* text=auto eol=crlf\n")
    converted = _crlf_files(crlf)
    assert any("/patches/" in name for name in converted) and any(name.startswith("smoke/") for name in converted)
    for model in ("smoke/onnxruntime/add.onnx", "smoke/tflite/add.tflite"):  # binaries stay as they are
        assert (crlf / model).read_bytes() == (ROOT / model).read_bytes()
    lf_keys, crlf_keys = _keys(lf), _keys(crlf)
    assert {leg: (k.digest, dict(k.parts)) for leg, k in crlf_keys.items()} == \
        {leg: (k.digest, dict(k.parts)) for leg, k in lf_keys.items()}
    assert any(k.digest for k in lf_keys.values())
    # Hashed as checked out, the CRLF checkout's keys differ: what every Windows leg met.
    monkeypatch.setattr(legkey, "checkout_sha256", sha256_file)
    raw = _keys(crlf)
    changed = {leg for leg, key in raw.items() if key.parts != lf_keys[leg].parts}
    patched = {plan.leg.id for plan in plan_all(load_matrix(crlf)) if plan.patches}
    assert "executorch-windows-x86_64-static" in changed and patched <= changed
