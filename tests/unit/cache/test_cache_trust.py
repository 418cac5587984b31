"""Signed binary cache entries: a reader takes what a trusted key vouched for, exactly."""
from __future__ import annotations

import json
import stat
from pathlib import Path

import pytest

from backends.cache.trust import Signer, Trust, TrustError, key_id, keygen, load_signer, load_trust

KEY = "a" * 64
OTHER_KEY = "b" * 64


def _entry(directory: Path, archive: bytes = b"PK archive", manifest: str = '{"leg_key": "k"}') -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / "onnxruntime-1.26.0-Linux-x86_64-shared.zip"
    path.write_bytes(archive)
    path.with_name(path.name + ".json").write_text(manifest)
    return path


@pytest.fixture
def keys(tmp_path: Path) -> tuple[Signer, str, Signer, str]:
    secret, public = keygen(tmp_path / "keys" / "writer")
    other_secret, other_public = keygen(tmp_path / "keys" / "stranger")
    return (Signer.from_text(secret.read_text(), "writer"), public.read_text().strip(),
            Signer.from_text(other_secret.read_text(), "stranger"), other_public.read_text().strip())


def test_keygen_writes_a_private_secret_and_never_overwrites(tmp_path: Path) -> None:
    secret, public = keygen(tmp_path / "k")
    assert stat.S_IMODE(secret.stat().st_mode) == 0o600
    assert public.name == "k.pub" and public.read_text().startswith("ed25519:")
    before = secret.read_bytes(), public.read_bytes()
    with pytest.raises(TrustError, match="exists already"):
        keygen(tmp_path / "k")
    assert (secret.read_bytes(), public.read_bytes()) == before


def test_a_signed_entry_is_taken_under_its_key(tmp_path: Path, keys) -> None:
    signer, public, _, _ = keys
    archive = _entry(tmp_path / "entry")
    signer.sign(KEY, archive)
    assert Trust(frozenset({public})).problems(KEY, archive) == []


def _problems(trust: Trust, archive: Path, key: str = KEY) -> str:
    problems = trust.problems(key, archive)
    assert len(problems) == 1, problems
    return problems[0]


def test_unsigned_is_refused_unless_trusted_as_such(tmp_path: Path, keys) -> None:
    _, public, _, _ = keys
    archive = _entry(tmp_path / "entry")
    assert _problems(Trust(frozenset({public})), archive) == "it is not signed (no .sig)"
    assert Trust(frozenset(), unsigned=True).problems(KEY, archive) == []


def test_a_stranger_s_signature_is_refused(tmp_path: Path, keys) -> None:
    _, public, stranger, stranger_public = keys
    archive = _entry(tmp_path / "entry")
    stranger.sign(KEY, archive)
    assert f"signed by key {key_id(stranger_public)}, which is not trusted" in _problems(Trust(frozenset({public})),
                                                                                        archive)


@pytest.mark.parametrize("tamper", ["archive", "manifest"])
def test_a_resealed_entry_is_refused(tmp_path: Path, keys, tamper: str) -> None:
    signer, public, _, _ = keys
    archive = _entry(tmp_path / "entry")
    signer.sign(KEY, archive)
    if tamper == "archive":
        archive.write_bytes(b"PK other")
    else:
        archive.with_name(archive.name + ".json").write_text('{"leg_key": "k", "files": []}')
    assert f"{tamper}_sha256 differ" in _problems(Trust(frozenset({public})), archive)


def test_a_replayed_entry_of_another_leg_key_is_refused(tmp_path: Path, keys) -> None:
    signer, public, _, _ = keys
    archive = _entry(tmp_path / "entry")
    signer.sign(OTHER_KEY, archive)
    assert "leg_key differ" in _problems(Trust(frozenset({public})), archive)


def test_a_statement_edited_under_a_valid_key_does_not_verify(tmp_path: Path, keys) -> None:
    signer, public, _, _ = keys
    archive = _entry(tmp_path / "entry")
    signature = signer.sign(OTHER_KEY, archive)
    body = json.loads(signature.read_text())
    body["statement"]["leg_key"] = KEY  # the attacker rewrites what was signed
    signature.write_text(json.dumps(body))
    assert "does not verify" in _problems(Trust(frozenset({public})), archive)


@pytest.mark.parametrize("text", ["", "[]", '{"statement": [], "public_key": 1, "signature": "x"}', "\x00"])
def test_a_malformed_signature_file_is_a_problem_not_an_exception(tmp_path: Path, keys, text: str) -> None:
    _, public, _, _ = keys
    archive = _entry(tmp_path / "entry")
    archive.with_name(archive.name + ".sig").write_text(text)
    assert "signature file" in _problems(Trust(frozenset({public})), archive)


def test_trust_lists_keys_inline_and_in_files(tmp_path: Path, keys) -> None:
    _, public, _, stranger_public = keys
    listed = tmp_path / "trusted.pub"
    listed.write_text(f"# the project's CI key\n{stranger_public}\n\n")
    trust = load_trust(f"{public},{listed},unsigned", tmp_path)
    assert trust.keys == {public, stranger_public} and trust.unsigned
    assert load_trust("", tmp_path).empty  # no keys/binary-cache.pub in this root
    (tmp_path / "keys").mkdir(exist_ok=True)
    (tmp_path / "keys" / "binary-cache.pub").write_text(public + "\n")
    assert load_trust("", tmp_path).keys == {public}


@pytest.mark.parametrize("spec, message", [
    ("ed25519:abc", "not base64"),
    ("ed25519:" + "A" * 40, "not an ed25519 key's 32"),
    ("/nonexistent/keys.pub", "the trusted keys file /nonexistent/keys.pub cannot be read: No such file"),
])
def test_bad_trust_is_refused_by_name(tmp_path: Path, spec: str, message: str) -> None:
    with pytest.raises(TrustError, match=message):
        load_trust(spec, tmp_path)


def test_the_signing_key_comes_from_a_file_or_the_environment(tmp_path: Path) -> None:
    secret, _ = keygen(tmp_path / "k")
    from_file = load_signer(str(secret), {})
    from_env = load_signer("", {"ANIRA_BINARY_CACHE_KEY": secret.read_text()})
    assert from_file is not None and from_env is not None and from_file.public == from_env.public
    assert load_signer("", {}) is None
    with pytest.raises(TrustError, match="does not start with 'ed25519-secret:'"):
        load_signer("", {"ANIRA_BINARY_CACHE_KEY": "ed25519:" + "A" * 43 + "="})
