"""No secret is ever printed, even in the error about it (CI logs are public).

A secret key belongs in a file only its owner can read (`binary_cache_key=PATH`) or in
ANIRA_BINARY_CACHE_KEY; no option takes key material itself. So an option value that holds
what looks like a secret key is refused before any other check, and the refusal shows the
value redacted: its length and the key's kind, never its bytes. Looks like one:

- anywhere: the project's secret prefix (`ed25519-secret:`) or a PEM/OpenSSH private key;
- in an option that takes a key file or public keys (`binary_cache_key=`, `binary_cache_trust=`,
  cache-keygen's `key=`): an item (between commas or colons) that is the base64 or hex of 32
  or 64 bytes, the size of an ed25519 seed or key pair (a raw seed pasted, Nix's
  `name:<base64>`); a public key (`ed25519:...`) is not secret.

A URL that carries credentials (`https://user:token@host/...`, in `origin=`, `mirror=` or
`binary_cache=`) is refused the same way: a location is printed in progress lines and
recorded in manifests, so credentials go into ~/.netrc, which the HTTP client reads.
"""
from __future__ import annotations

import base64
import binascii
import re
import urllib.parse

from backends.cache.trust import KEY_VARIABLE, PUBLIC_PREFIX, SECRET_PREFIX

KEY_OPTIONS = ("binary_cache_key", "binary_cache_trust", "key")
_MARKED = re.compile(re.escape(SECRET_PREFIX) + r"|-----BEGIN [A-Z0-9 ]*PRIVATE KEY-----")
_KEY_SIZES = (32, 64)


def looks_secret(name: str, value: str) -> bool:
    if _MARKED.search(value):
        return True
    if name not in KEY_OPTIONS:
        return False
    items = (part.strip() for item in value.split(",") if not item.strip().startswith(PUBLIC_PREFIX)
             for part in item.split(":"))
    return any(_is_key_material(item) for item in items)


def has_url_credentials(value: str) -> bool:
    """Whether an item of `value` (between commas, after a `<source>=`) is a URL with a user or password."""
    for item in value.split(","):
        location = item.strip().partition("=")[2] if "=" in item.split("://")[0] else item.strip()
        try:
            parts = urllib.parse.urlsplit(location)
        except ValueError:
            continue
        if parts.scheme and parts.netloc and "@" in parts.netloc:
            return True
    return False


def _is_key_material(text: str) -> bool:
    if re.fullmatch(r"[0-9a-fA-F]+", text):
        return len(text) // 2 in _KEY_SIZES and len(text) % 2 == 0
    for alphabet in (None, b"-_"):
        try:
            if len(base64.b64decode(text, altchars=alphabet, validate=True)) in _KEY_SIZES:
                return True
        except (binascii.Error, ValueError):
            pass
    return False


def redacted(value: str) -> str:
    """How a secret-looking value is shown: what kind it is, never its bytes."""
    kind = f"{SECRET_PREFIX}..." if SECRET_PREFIX in value else "key material"
    return f"<redacted: {kind}, {len(value)} characters>"


def refusal(name: str, value: str) -> str:
    """Why the option's value is refused, the value redacted ("" when it holds no secret)."""
    if has_url_credentials(value) and not looks_secret(name, value):
        return (f"{name}=<redacted: a URL with credentials, {len(value)} characters>: a location is printed and "
                "recorded in manifests, so it must not carry a user or password; put them in ~/.netrc "
                "(`machine <host> login <user> password <token>`, mode 0600), which the HTTP client reads")
    if not looks_secret(name, value):
        return ""
    shown = f"{name}={redacted(value)}"
    exposed = ("a key typed on a command line is in the shell's history and any CI log: if it was shared, make a "
               "new pair (`scons cache-keygen key=PATH`) and stop trusting the old one")
    if name == "binary_cache_key":
        return (f"{shown} holds key material, not the path of a key file: write the key into a file only you can "
                f"read (`chmod 600`) and pass its path, or put it in {KEY_VARIABLE}; {exposed}")
    if name == "binary_cache_trust":
        return (f"{shown} holds a secret key: it takes public keys ({PUBLIC_PREFIX}...) or files of them (the .pub "
                f"cache-keygen writes beside the secret), and `unsigned`; {exposed}")
    return f"{shown} holds what looks like a secret key, which no option takes; {exposed}"
