"""Poisoned binary cache entries, each rejected and the leg rebuilt: dist/ ends with exactly
the bytes of a clean build, against a directory store and a real nginx WebDAV store.

The store was filled by a signed build. Then, per row, the entry under the leg's key is
replaced by a poisoned one, as someone with write access to the store could:

- *signature* rows tamper with the signature only (none, a stranger's key, flipped bytes,
  a replay of another key's or another version's entry);
- each *content* row changes the archive or its manifest and then re-seals the entry (the
  `.sha256` sidecar and the manifest's sha256, size and file list rewritten to agree), once
  without the writer's key (the signature must catch it) and once re-signed with the
  trusted key itself (a writer's bug or a stolen key: the manifest check and the contract
  must catch it).
"""
from __future__ import annotations

import copy
import hashlib
import io
import json
import shutil
import stat
import subprocess
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import pytest

import fixtures
from fixtures import fixbin_archive, scons
from test_binary_cache import nginx  # noqa: F401  (the real WebDAV store, a fixture)

from backends.cache.trust import Signer, keygen

LEG = fixtures.FIXBIN_LEG_IDS[0]
ARCHIVE = fixbin_archive(LEG)
SYMLINK_ATTR = (stat.S_IFLNK | 0o777) << 16


@dataclass
class Entry:
    """A cache entry in memory: the archive's members and the manifest."""

    members: list[tuple[zipfile.ZipInfo, bytes]]
    manifest: object
    signature: bytes = b""

    @classmethod
    def read(cls, directory: Path) -> "Entry":
        with zipfile.ZipFile(directory / ARCHIVE) as archive:
            members = [(info, archive.read(info)) for info in archive.infolist()]
        return cls(members, json.loads((directory / f"{ARCHIVE}.json").read_text()),
                   (directory / f"{ARCHIVE}.sig").read_bytes())

    def zip_bytes(self) -> bytes:
        out = io.BytesIO()
        with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as archive:
            for info, data in self.members:
                archive.writestr(info, data)
        return out.getvalue()


def _info(name: str, mode: int = 0o644, link: bool = False) -> zipfile.ZipInfo:
    info = zipfile.ZipInfo(name, date_time=(1980, 1, 1, 0, 0, 0))
    info.external_attr = SYMLINK_ATTR if link else (stat.S_IFREG | mode) << 16
    info.create_system = 3
    return info


def _listing(members: list[tuple[zipfile.ZipInfo, bytes]]) -> list[dict[str, object]]:
    """The manifest's file list, as the project writes it, for these members."""
    files = []
    for info, data in members:
        mode = (info.external_attr >> 16) & 0o7777
        if stat.S_ISLNK(info.external_attr >> 16):
            files.append({"path": info.filename, "size": len(data), "mode": oct(0o777), "link": data.decode()})
        elif not info.is_dir():
            files.append({"path": info.filename, "size": len(data), "mode": oct(mode),
                          "sha256": hashlib.sha256(data).hexdigest()})
    return files


# -- what an attacker does to the entry ----------------------------------------------------------

def _add(entry: Entry, info: zipfile.ZipInfo, data: bytes) -> None:
    entry.members.append((info, data))


def _replace(entry: Entry, name: str, data: bytes, mode: int | None = None) -> None:
    for index, (info, _) in enumerate(entry.members):
        if info.filename == name:
            if mode is not None:
                info = copy.copy(info)
                info.external_attr = (stat.S_IFREG | mode) << 16
            entry.members[index] = (info, data)
            return
    raise AssertionError(f"no member {name}")


def _chmod(entry: Entry, name: str, mode: int) -> None:
    _replace(entry, name, dict((info.filename, data) for info, data in entry.members)[name], mode)


def _drop(entry: Entry, name: str) -> None:
    entry.members = [(info, data) for info, data in entry.members if info.filename != name]


def _library(source: str, tmp: Path) -> bytes:
    (tmp / "stub.c").write_text(source)
    subprocess.run(["cc", "-shared", "-fPIC", "-o", tmp / "stub.so", tmp / "stub.c"], check=True)
    return (tmp / "stub.so").read_bytes()


LIB = "lib/libfixbin.so.1.0.0"
CONTENT: dict[str, tuple[Callable[[Entry, Path], None], str]] = {
    "symlink lib//evil -> ../../outside": (
        lambda e, _: _add(e, _info("lib//evil", link=True), b"../../outside"), "resolves outside the package root"),
    "symlink ./evil -> ../outside": (
        lambda e, _: _add(e, _info("./evil", link=True), b"../outside"), "resolves outside the package root"),
    "symlink lib/./evil -> ../../outside": (
        lambda e, _: _add(e, _info("lib/./evil", link=True), b"../../outside"), "resolves outside the package root"),
    "absolute symlink": (
        lambda e, _: _add(e, _info("lib/abs", link=True), b"/etc/passwd"), "is absolute"),
    "member named ../escape": (
        lambda e, _: _add(e, _info("../escape"), b"x"), "has a '..' component"),
    "absolute member name": (
        lambda e, _: _add(e, _info("/tmp/evil"), b"x"), "has an absolute path"),
    "duplicate member": (
        lambda e, _: _add(e, _info("include/fixbin.h"), b"int evil;\n"), "is stored 2 times"),
    "setuid library": (lambda e, _: _chmod(e, LIB, 0o4755), "setuid"),
    "required header dropped": (
        lambda e, _: _drop(e, "include/fixbin.h"), "missing required include/fixbin.h"),
    "4-byte ELF stub": (
        lambda e, _: _replace(e, LIB, b"\x7fELF"), LIB),
    "ELF stub without the API": (
        lambda e, tmp: _replace(e, LIB, _library("int not_fixbin(void) { return 0; }\n", tmp)),
        "does not export fixbin_mul"),
    "foreign path in a .pc flag": (
        lambda e, _: _add(e, _info("lib/pkgconfig/fixbin.pc"),
                          b"Cflags: -isystem/home/runner/work/include\nLibs: -L${libdir} -lfixbin\n"),
        "refers to a path outside the package"),
    "foreign path in a .cmake path list": (
        lambda e, _: _add(e, _info("lib/cmake/fixbin/fixbin-config.cmake"),
                          b'set(FIXBIN_RPATH "/usr/lib:/home/runner/work/lib")\n'),
        "refers to a path outside the package"),
}
# Manifest-only poison (always re-signed: unsigned, the signature catches them like the rest).
MANIFEST: dict[str, tuple[Callable[[Entry], None], str]] = {
    "manifest is a JSON list": (lambda e: setattr(e, "manifest", [e.manifest]), "manifest is a JSON list"),
    "manifest names another key": (lambda e: e.manifest.update(leg_key="0" * 64), "names the key"),
    "manifest without files": (lambda e: e.manifest.pop("files"), "files is missing"),
    "manifest file record malformed": (lambda e: e.manifest["files"].__setitem__(0, {"size": 1}), "has no path"),
    "header edited, manifest lists its old hash": (
        lambda e: (_replace(e, "include/fixbin.h", b"int fixbin_mul(int, int); /* edited */\n"),
                   e.manifest.update(files=e.stale_files)), "is not what its manifest lists"),
    "member missing from the manifest": (lambda e: e.manifest.update(files=e.stale_files[1:]), "is not in its manifest"),
}


@dataclass(frozen=True)
class Poison:
    name: str
    expected: str  # what the rejection says
    content: Callable[[Entry, Path], None] | None = None
    manifest: Callable[[Entry], None] | None = None
    signer: str = "trusted"  # trusted | stranger | none | keep (the clean entry's signature stays)
    flip: bool = False  # one byte of the archive flipped, nothing re-sealed
    signature: Callable[[bytes], bytes] | None = None  # edits the signature file last
    key: str = ""  # sign for another leg key (a replay)
    archive_name: str = ""  # sign for another archive name (another version's entry)


def _flip(signature: bytes) -> bytes:
    body = json.loads(signature)
    raw = bytearray(body["signature"].encode())
    raw[5] = ord("A") if raw[5] != ord("A") else ord("B")
    body["signature"] = raw.decode()
    return json.dumps(body).encode()


def _edit_statement(signature: bytes) -> bytes:
    body = json.loads(signature)
    body["statement"]["archive_sha256"] = "0" * 64
    return json.dumps(body).encode()


POISONS = [
    Poison("unsigned", "it is not signed (no .sig)", signer="none"),
    Poison("signed by an untrusted key", "which is not trusted", signer="stranger"),
    Poison("signature bytes flipped", "does not verify", signature=_flip),
    Poison("signed statement edited", "does not verify", signature=_edit_statement),
    Poison("signature file is not JSON", "signature file cannot be read", signature=lambda _: b"\xff\x00"),
    Poison("signature file is a JSON list", "signature file is malformed", signature=lambda _: b"[]"),
    Poison("replayed from another leg key", "leg_key differ", key="f" * 64),
    Poison("replayed from another version", "archive differ", archive_name=ARCHIVE.replace("2.0.1", "2.0.0")),
    Poison("flipped byte, not re-sealed", "archive_sha256 differ", signer="keep", flip=True),
    *[Poison(f"{name}, re-sealed", "vouches for other content", content=change, signer="keep")
      for name, (change, _) in CONTENT.items()],
    *[Poison(f"{name}, re-sealed and re-signed", expected, content=change)
      for name, (change, expected) in CONTENT.items()],
    *[Poison(f"{name}, re-signed", expected, manifest=change) for name, (change, expected) in MANIFEST.items()],
]


def _write(poison: Poison, clean: Path, directory: Path, key: str, signers: dict[str, Signer], tmp: Path) -> None:
    """The poisoned entry in `directory`, made from the clean entry's files in `clean`."""
    shutil.rmtree(directory, ignore_errors=True)
    shutil.copytree(clean, directory)
    entry = Entry.read(clean)
    entry.stale_files = copy.deepcopy(entry.manifest["files"])  # type: ignore[attr-defined]
    if poison.flip:
        data = bytearray((clean / ARCHIVE).read_bytes())
        data[len(data) // 2] ^= 1
        (directory / ARCHIVE).write_bytes(bytes(data))
    elif poison.content or poison.manifest:
        if poison.content:
            poison.content(entry, tmp)
        entry.manifest["files"] = _listing(entry.members)  # re-sealed: the manifest agrees...
        if poison.manifest:  # ...unless the poison is in the manifest
            poison.manifest(entry)
        data = entry.zip_bytes()
        if isinstance(entry.manifest, dict):
            entry.manifest.update(sha256=hashlib.sha256(data).hexdigest(), size=len(data))
        elif isinstance(entry.manifest, list):
            entry.manifest[0].update(sha256=hashlib.sha256(data).hexdigest(), size=len(data))
        (directory / ARCHIVE).write_bytes(data)
        (directory / f"{ARCHIVE}.sha256").write_text(f"{hashlib.sha256(data).hexdigest()}  {ARCHIVE}\n")
        (directory / f"{ARCHIVE}.json").write_text(json.dumps(entry.manifest))
    _sign(poison, directory, key, signers, tmp)


def _sign(poison: Poison, directory: Path, key: str, signers: dict[str, Signer], tmp: Path) -> None:
    signature = directory / f"{ARCHIVE}.sig"
    if poison.signer == "keep":  # the attacker cannot sign: the clean entry's signature stays
        return
    signature.unlink()
    if poison.signer == "none":
        return
    signer = signers[poison.signer]
    if poison.archive_name:  # the writer's signature of another version's entry with these bytes
        other = tmp / "other"
        other.mkdir(exist_ok=True)
        shutil.copyfile(directory / ARCHIVE, other / poison.archive_name)
        shutil.copyfile(directory / f"{ARCHIVE}.json", other / f"{poison.archive_name}.json")
        signature.write_bytes(signer.sign(key, other / poison.archive_name).read_bytes())
    else:
        signer.sign(poison.key or key, directory / ARCHIVE)
    if poison.signature:
        signature.write_bytes(poison.signature(signature.read_bytes()))


# -- the runs ----------------------------------------------------------------------------------

@dataclass
class Store:
    root: Path  # where the store's entries lie on disk
    args: tuple[str, ...]
    clean: dict[str, bytes]  # dist/ after the clean, signed build
    project: Path
    key: str
    clean_entry: Path  # a copy of the entry that build stored
    signers: dict[str, Signer]


def _dist(project: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted((project / "dist").iterdir()) if p.is_file()}


def _store(project: Path, root: Path, location: str, tmp: Path) -> Store:
    trusted, trusted_pub = keygen(tmp / "keys" / "trusted")
    stranger, _ = keygen(tmp / "keys" / "stranger")
    args = (LEG, f"binary_cache={location}", f"binary_cache_key={trusted}", f"binary_cache_trust={trusted_pub}")
    first = scons(project, *args)
    assert first.returncode == 0, str(first)
    (key,) = [p.name for p in root.iterdir() if not p.name.startswith(".")]
    shutil.copytree(root / key, tmp / "clean-entry")
    return Store(root, args, _dist(project), project, key, tmp / "clean-entry",
                 {"trusted": Signer.from_text(trusted.read_text(), "trusted"),
                  "stranger": Signer.from_text(stranger.read_text(), "stranger")})


@pytest.fixture(scope="module")
def module_upstreams(tmp_path_factory):
    served = tmp_path_factory.mktemp("served")
    with fixtures.Server(served) as server:
        yield fixtures.make_upstreams(served, server)


@pytest.fixture(scope="module")
def directory_store(tmp_path_factory, module_upstreams) -> Store:
    tmp = tmp_path_factory.mktemp("poison-dir")
    project = fixtures.make_project(tmp / "project", module_upstreams, fixsrc=False)
    return _store(project, tmp / "store", str(tmp / "store"), tmp)


@pytest.fixture
def http_store(tmp_path, project_factory, nginx) -> Store:  # noqa: F811
    base, www = nginx
    project = project_factory("project", fixsrc=False)
    return _store(project, www / "cache", f"{base}/cache", tmp_path)


def _run(store: Store, poison: Poison, tmp: Path):
    _write(poison, store.clean_entry, store.root / store.key, store.key, store.signers, tmp)
    shutil.rmtree(store.project / "dist")
    shutil.rmtree(store.project / "build" / "binary-cache", ignore_errors=True)
    run = scons(store.project, *store.args)
    assert run.returncode == 0 and "Traceback" not in run.stderr, str(run)
    restored = _said(run, "restored")  # then the manifest also says where it came from
    assert {n: b for n, b in _dist(store.project).items() if not (restored and n.endswith(".json"))} == \
        {n: b for n, b in store.clean.items() if not (restored and n.endswith(".json"))}, \
        "dist/ does not hold the clean build's bytes"
    return run


def _said(run, state: str) -> bool:
    """The end-of-run summary has `state` for the leg."""
    return any(line.split()[:2] == [state, LEG] for line in run.stdout.splitlines())


def _rejected(store: Store, poison: Poison, tmp: Path) -> None:
    run = _run(store, poison, tmp)
    assert "is not trusted, the leg is rebuilt" in run.stderr and poison.expected in run.stderr, str(run)
    assert _said(run, "published"), run.stdout


def test_the_poison_table_is_large_enough():
    assert len(POISONS) >= 30


@pytest.mark.parametrize("poison", POISONS, ids=[p.name for p in POISONS])
def test_a_poisoned_directory_entry_is_rejected_and_rebuilt(directory_store, poison, tmp_path):
    _rejected(directory_store, poison, tmp_path)


def _restored(store: Store, tmp: Path) -> None:
    """The other direction: the entry as its trusted writer stored it is taken, and the
    archive restored is the clean build's (its manifest adds where it came from)."""
    run = _run(store, Poison("clean", "", signer="keep"), tmp)
    assert _said(run, "restored") and "not trusted" not in run.stderr, str(run)


def test_the_clean_signed_entry_is_restored(directory_store, tmp_path):
    _restored(directory_store, tmp_path)


def test_every_poisoned_http_entry_is_rejected_and_rebuilt(http_store, tmp_path):
    """The same table through HTTP GET from a real nginx (one server, the rows in turn)."""
    for poison in POISONS:
        _rejected(http_store, poison, tmp_path)
    _restored(http_store, tmp_path)
