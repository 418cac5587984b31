"""Who may write a binary cache: writers sign entries with ed25519, readers list the public
keys they trust (Nix's `secret-key-files` / `trusted-public-keys`).

What is *trusted* is one statement per entry, signed by its writer: the entry format, the
leg key, the archive's file name and sha256, and the sha256 of the entry's manifest. It
lives beside the entry as `<archive>.sig` (the statement, the signer's public key and the
signature). A reader takes an entry only when the signature verifies under a key it trusts
and the statement names exactly this leg key and the bytes it downloaded, so a re-sealed,
replayed (another leg's, another version's) or re-signed entry is refused.

What is *checked* afterwards (entry.py), because a signature says who wrote an entry,
not that the writer made no mistake: the manifest's schema, every member against the
manifest's file list, and the leg's contract.

Key files are one line of text: `ed25519-secret:<base64 seed>` (mode 0600) and
`ed25519:<base64 public key>` (`.pub`); `ANIRA_BINARY_CACHE_KEY` may hold the secret line
itself (a CI secret). `binary_cache_trust=` lists public keys, inline or as files; the
default is the project's committed list, TRUSTED_KEYS_FILE.
"""
from __future__ import annotations

import base64
import binascii
import hashlib
import json
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any, Mapping

from backends.cache.key_files import (
    KeyFileError,
    create_key_pair,
    read_secret_key,
    read_trusted_keys,
)
from backends.util.errors import BackendsError

FORMAT = 1
SIGNATURE_SUFFIX = ".sig"
SECRET_PREFIX = "ed25519-secret:"
PUBLIC_PREFIX = "ed25519:"
KEY_VARIABLE = "ANIRA_BINARY_CACHE_KEY"
UNSIGNED = "unsigned"
# The public keys of the project's own CI, one per line; a key rotation adds the new line
# first and removes the old one once the entries it signed have aged out of the stores.
TRUSTED_KEYS_FILE = Path("keys/binary-cache.pub")


class TrustError(BackendsError, ValueError):
    """A key that cannot be read or written; the message names it and why."""


def _raw(text: str, prefix: str, what: str) -> bytes:
    text = text.strip()
    if not text.startswith(prefix):
        raise TrustError(f"{what} does not start with {prefix!r}")
    try:
        raw = base64.b64decode(text[len(prefix):], validate=True)
    except (binascii.Error, ValueError):
        raise TrustError(f"{what} is not base64 after {prefix!r}") from None
    if len(raw) != 32:
        raise TrustError(f"{what} holds {len(raw)} bytes, not an ed25519 key's 32")
    return raw


def public_text(raw: bytes) -> str:
    return PUBLIC_PREFIX + base64.b64encode(raw).decode("ascii")


def key_id(public: str) -> str:
    """A short name for a public key in messages."""
    return hashlib.sha256(public.encode("ascii")).hexdigest()[:12]


def keygen(path: Path) -> tuple[Path, Path]:
    """Write a new key pair: `path` (the secret, 0600) and `path.pub` (0644), neither ever
    overwritten (key_files.create_key_pair)."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    public_path = path.with_name(path.name + ".pub")
    secret = Ed25519PrivateKey.generate()
    seed = secret.private_bytes(serialization.Encoding.Raw, serialization.PrivateFormat.Raw,
                                serialization.NoEncryption())
    public = secret.public_key().public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    try:
        create_key_pair(path, SECRET_PREFIX + base64.b64encode(seed).decode("ascii") + "\n", public_path,
                        public_text(public) + "\n")
    except KeyFileError as error:
        raise TrustError(str(error)) from None
    return path, public_path


def statement(leg_key: str, archive: Path) -> dict[str, Any]:
    """What a signature vouches for, computed from the entry's files."""
    manifest = archive.with_name(archive.name + ".json")
    return {"format": FORMAT, "leg_key": leg_key, "archive": archive.name,
            "archive_sha256": _sha256(archive), "manifest_sha256": _sha256(manifest)}


def _sha256(path: Path) -> str:
    from backends.util.files import sha256_file

    return sha256_file(path)


def _message(body: Mapping[str, Any]) -> bytes:
    return json.dumps(body, sort_keys=True, separators=(",", ":")).encode("utf-8")


@dataclass(frozen=True)
class Signer:
    seed: bytes

    @classmethod
    def from_text(cls, text: str, what: str) -> "Signer":
        return cls(_raw(text, SECRET_PREFIX, what))

    @cached_property
    def public(self) -> str:
        return public_text(self._key().public_key().public_bytes_raw())

    def _key(self) -> Any:
        from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

        return Ed25519PrivateKey.from_private_bytes(self.seed)

    def sign(self, leg_key: str, archive: Path, dest: Path | None = None) -> Path:
        """Write `<archive>.sig` (into `dest`, or beside it) for the entry `archive` and its
        manifest form; returns its path."""
        body = statement(leg_key, archive)
        signature = base64.b64encode(self._key().sign(_message(body))).decode("ascii")
        path = (dest or archive.parent) / (archive.name + SIGNATURE_SUFFIX)
        text = json.dumps({"statement": body, "public_key": self.public, "signature": signature}, indent=2)
        path.write_text(text + "\n", encoding="utf-8")
        return path


def load_signer(path: str, environ: Mapping[str, str]) -> Signer | None:
    """The writer's key: `binary_cache_key=PATH`, else ANIRA_BINARY_CACHE_KEY; None for neither."""
    if path:
        try:
            text = read_secret_key(Path(path), f"binary_cache_key={path}")
        except KeyFileError as error:
            raise TrustError(str(error)) from None
        return Signer.from_text(text, f"binary_cache_key={path}")
    if environ.get(KEY_VARIABLE, "").strip():
        return Signer.from_text(environ[KEY_VARIABLE], KEY_VARIABLE)
    return None


@dataclass(frozen=True)
class Trust:
    """The public keys a reader takes entries from; `unsigned` takes entries without a
    signature too (only for a store nobody else writes)."""

    keys: frozenset[str]
    unsigned: bool = False
    source: str = ""

    @property
    def empty(self) -> bool:
        return not self.keys and not self.unsigned

    def describe(self) -> str:
        ids = ", ".join(sorted(key_id(k) for k in self.keys)) or "none"
        return f"trusted keys: {ids}{' (and unsigned entries)' if self.unsigned else ''}"

    def admits(self, signer: str) -> bool:
        """Whether an entry whose signature names `signer` ("" for none) may be taken, as
        `problems` judges one whose signature verifies: so a restore kept from an earlier run
        is held to this run's trust without reading the archive."""
        return signer in self.keys or (self.unsigned and (not signer or not self.keys))

    def judged(self, signer: str) -> dict[str, Any]:
        """What a restore rests on, for its step's signature and record: the entry's signer and
        the trusted set it is judged under. A change re-checks the entry; a set without the
        signer does not take it at all (graph/declare.py)."""
        return {"signer": signer, "trusted": sorted(self.keys), "unsigned": self.unsigned}

    def problems(self, leg_key: str, archive: Path) -> list[str]:
        """Why the entry of `archive` is not vouched for (empty: it is)."""
        signature = archive.with_name(archive.name + SIGNATURE_SUFFIX)
        if not signature.is_file():
            return [] if self.unsigned else ["it is not signed (no .sig)"]
        problem = self._check(signature, leg_key, archive)
        if problem and self.unsigned and not self.keys:
            return []  # an unsigned store's reader takes signatures as no more than absent
        return [problem] if problem else []

    def _check(self, signature: Path, leg_key: str, archive: Path) -> str:
        try:
            body = json.loads(signature.read_text(encoding="utf-8"))
        except (OSError, ValueError) as error:
            return f"its signature file cannot be read: {error}"
        if not isinstance(body, dict) or not isinstance(body.get("statement"), dict) \
                or not all(isinstance(body.get(k), str) for k in ("public_key", "signature")):
            return "its signature file is malformed (statement, public_key, signature)"
        public = body["public_key"]
        if public not in self.keys:
            return f"it is signed by key {key_id(public)}, which is not trusted ({self.describe()})"
        if not _verifies(public, body["signature"], body["statement"]):
            return f"its signature does not verify under key {key_id(public)}"
        expected = statement(leg_key, archive)
        wrong = sorted(k for k in expected.keys() | body["statement"].keys()
                       if body["statement"].get(k) != expected.get(k))
        if wrong:
            return (f"its signature vouches for other content ({', '.join(wrong)} differ): a replayed or "
                    "re-sealed entry")
        return ""


def signer_of(archive: Path) -> str:
    """The public key the signature beside `archive` names ("" when there is none it can be
    read from). Not verified: a restore verifies the signature before it takes the entry;
    this tells a later run whom it rested on."""
    try:
        body = json.loads(archive.with_name(archive.name + SIGNATURE_SUFFIX).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return ""
    public = body.get("public_key") if isinstance(body, dict) else None
    return public if isinstance(public, str) and public.isascii() else ""


def signer_label(signer: str) -> str:
    """A signer in messages and manifests: its key id, or `unsigned`."""
    return f"key {key_id(signer)}" if signer else "unsigned"


def _verifies(public: str, signature: str, body: Mapping[str, Any]) -> bool:
    from cryptography.exceptions import InvalidSignature
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

    try:
        key = Ed25519PublicKey.from_public_bytes(_raw(public, PUBLIC_PREFIX, "the public key"))
        key.verify(base64.b64decode(signature, validate=True), _message(body))
    except (InvalidSignature, TrustError, binascii.Error, ValueError):
        return False
    return True


def load_trust(spec: str, root: Path) -> Trust:
    """`binary_cache_trust=`: `unsigned`, public keys (`ed25519:...`) or files of them, comma-
    separated; empty: the project's TRUSTED_KEYS_FILE when it exists."""
    items = [item.strip() for item in spec.split(",") if item.strip()]
    if not items:
        default = root / TRUSTED_KEYS_FILE
        return Trust(frozenset(_key_file(default)), source=str(TRUSTED_KEYS_FILE)) if default.is_file() else Trust(
            frozenset())
    keys: set[str] = set()
    unsigned = False
    for item in items:
        if item == UNSIGNED:
            unsigned = True
        elif item.startswith(PUBLIC_PREFIX):
            _raw(item, PUBLIC_PREFIX, f"binary_cache_trust key {item[:20]}...")
            keys.add(item)
        else:
            keys.update(_key_file(Path(item)))
    return Trust(frozenset(keys), unsigned, source=spec)


def _key_file(path: Path) -> list[str]:
    """The public keys of a file, one per line, `#` comments and blank lines skipped."""
    try:
        lines = read_trusted_keys(path, f"the trusted keys file {path}").splitlines()
    except KeyFileError as error:
        raise TrustError(str(error)) from None
    keys = [line.split("#", 1)[0].strip() for line in lines]
    for number, key in enumerate(keys, start=1):
        if key.startswith(SECRET_PREFIX):
            raise TrustError(f"{path}:{number} is a secret key ({SECRET_PREFIX}..., not shown), not a public one: "
                             "pass the .pub file cache-keygen wrote beside it; treat the key as exposed if this file "
                             "was shared")
        if key:
            _raw(key, PUBLIC_PREFIX, f"{path}:{number}")
    return [key for key in keys if key]
