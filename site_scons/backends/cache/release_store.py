"""A binary cache in a GitHub release: `github:<owner>/<repo>@<tag>[?keep=N]`, assets
`<key>-<archive>` and `<key>-<archive>.entry` (the sidecars) of a draft release made on first
use, the newest N keys per leg kept; one request lists every entry (CI's plan job resolves the
whole matrix with it)."""
from __future__ import annotations

import base64
import json
import os
import re
import tempfile
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Iterator, Mapping, NamedTuple, Sequence

from backends.cache.store import (
    MANIFEST_CAP,
    SIDECAR_CAP,
    CacheError,
    LookupFailed,
    ReadOnly,
    SignedEntryKept,
    archive_cap,
    archive_of,
    entry_files,
    entry_names,
    is_signed,
    sidecar_cap,
    signed_entry_kept,
    warn,
)
from backends.cache.trust import SIGNATURE_SUFFIX, key_id
from backends.model.plan import RELEASE_ASSET_MAX_BYTES
from backends.steps.manifest import build_seconds
from backends.util import http
from backends.util.files import sha256_file
from backends.util.github import (
    DEFAULT_API,
    GitHub,
    GitHubError,
    RateLimited,
    choose_release,
    holds,
)

KEEP_DEFAULT = 2  # keys kept per leg: the current one and the one before (a revert restores)
ENTRY_SUFFIX = ".entry"
ENTRY_FORMAT = 1
# The `.entry` asset: its files in base64 (4 bytes for 3) with their names, in a little JSON.
ENTRY_CAP = http.Cap((MANIFEST_CAP.size + 2 * SIDECAR_CAP.size) * 4 // 3 + 64 * http.KIB,
                     "the limit for an .entry asset")
RELEASE_BODY = ("Binary cache of verified archives, keyed by leg key (anira-backends; docs/ci-and-release.md). "
                "A draft on purpose: Immutable Releases lock a published release's assets.")
_ASSET_NAME = re.compile(r"(?P<key>[0-9a-f]{64})-(?P<file>.+)")
# The `.entry` asset's label: `<leg id>[ signed=<key id>][ build=<seconds>s]`, what a listing
# tells about an entry without downloading it (the archive asset's label is the leg id).
_ENTRY_LABEL = re.compile(r"(?P<leg>\S+)(?: signed=(?P<signer>[0-9a-f]{12}))?(?: build=(?P<seconds>[0-9]+)s)?")



class ReleaseLocation(NamedTuple):
    repo: str
    tag: str
    keep: int


@dataclass(frozen=True)
class Listed:
    """A complete entry as the release's listing shows it (both assets uploaded), with what its
    `.entry` label says: the key id that signed it ("" unsigned, or an entry stored before
    labels said) and its build's seconds (None: not recorded). The label vouches for nothing:
    a restore checks the signature itself."""

    key: str
    archive: str
    leg: str
    signer: str = ""
    seconds: int | None = None


@dataclass
class GitHubReleaseStore:
    """Entries as assets of one draft release (drafts stay mutable under Immutable Releases;
    GitHub lists them only to tokens with push access): `<key>-<archive>`, the archive, and
    `<key>-<archive>.entry`, its manifest, `.sha256` and `.sig` in one JSON (one download, not
    three). Both are labelled with the leg id, the `.entry` also with its signer and build time
    (`entry_label`: what `listing` reports); the `.entry` goes up last, so an entry lacking it,
    or with an asset not in state `uploaded`, is none. The release is listed once per run (its
    listing carries the assets); a store keeps the newest `keep` keys of its leg."""

    repo: str
    tag: str
    token: str
    api: str = DEFAULT_API
    keep: int = KEEP_DEFAULT
    _release: dict | None = field(default=None, repr=False)
    _listed: bool = field(default=False, repr=False)
    _assets: dict[str, dict] | None = field(default=None, repr=False)
    _given_up: str = field(default="", repr=False)

    @property
    def location(self) -> str:
        return f"github:{self.repo}@{self.tag}"

    @contextmanager
    def _asking(self) -> Iterator[None]:
        """A call that got no answer at all (a transport failure, after the client's retries and
        deadlines) gives the store up for the rest of the run, as the HTTP store does: one
        trickling API costs a run its bounded wait once, not once per leg."""
        if self._given_up:
            raise GitHubError(f"not asked again: {self._given_up} earlier in this run")
        try:
            yield
        except RateLimited:
            raise
        except GitHubError as error:
            if error.unanswered:
                self._given_up = str(error)
            raise

    @cached_property
    def client(self) -> GitHub:
        return GitHub(self.api, self.repo, self.token, notice=warn)  # one session: its connections are reused

    def _find(self) -> dict | None:
        if not self._listed:
            releases = self.client.releases_named(self.tag)
            self._release, self._listed = choose_release(releases), True
            if self._release is None:
                warn(f"{self.location}: no release {self.tag} can be seen: none was made yet, or this token cannot "
                     "list drafts (GitHub lists them only to tokens with contents: write); no entry is restored "
                     "from it")
            elif len(releases) > 1:
                warn(f"{self.location}: {len(releases)} releases are named {self.tag} (drafts made at once); using "
                     f"id {self._release['id']}: delete the others")
        return self._release

    def _asset_map(self) -> dict[str, dict]:
        if self._assets is None:
            release = self._find()
            self._assets = {a["name"]: a for a in self.client.assets(release)} if release else {}
        return self._assets

    def listing(self) -> dict[tuple[str, str], Listed] | None:
        """Every complete entry, by (key, archive), from the one listing of the release; None
        when no release can be seen (none yet, or a token that cannot list drafts). A rate
        limit that outlasts the wait is a LookupFailed, any other failure a CacheError."""
        try:
            with self._asking():
                if self._find() is None:
                    return None
                assets = self._asset_map()
        except RateLimited as error:
            raise LookupFailed(f"{self.location}: the listing could not be made: {error}") from None
        except GitHubError as error:
            raise CacheError(f"{self.location}: {error}") from None
        found: dict[tuple[str, str], Listed] = {}
        for name, entry in assets.items():
            match = _ASSET_NAME.fullmatch(name.removesuffix(ENTRY_SUFFIX))
            body = assets.get(name.removesuffix(ENTRY_SUFFIX))
            if not name.endswith(ENTRY_SUFFIX) or match is None or body is None \
                    or not (_uploaded(body) and _uploaded(entry)):
                continue
            found[match["key"], match["file"]] = _listed(match["key"], match["file"], body, entry)
        return found

    def fetch(self, key: str, archive: str, dest: Path) -> bool:
        try:
            with self._asking():
                assets = self._asset_map()
                body, entry = assets.get(f"{key}-{archive}"), assets.get(f"{key}-{archive}{ENTRY_SUFFIX}")
                if body is None or entry is None or not (_uploaded(body) and _uploaded(entry)):
                    return False
                dest.mkdir(parents=True, exist_ok=True)
                sidecars = self._entry_files(entry, archive, dest)
                mixed = _mixed(body, sidecars[archive + ".sha256"])
                if mixed:
                    raise CacheError(f"{self.location}: the entry {key} {mixed}")
                for name in entry_files(archive):
                    (dest / name).unlink(missing_ok=True)
                for name, data in sidecars.items():
                    (dest / name).write_bytes(data)
                self.client.download(body, dest / archive, archive_cap(sidecars[archive + ".json"]))
        except RateLimited as error:
            raise LookupFailed(f"{self.location}: the lookup of {key} could not be made: {error}") from None
        except GitHubError as error:
            raise CacheError(f"{self.location}: {error}") from None
        except OSError as error:
            raise CacheError(f"{self.location}: cannot write {dest}: {error.strerror or error}") from None
        return True

    def holds(self, key: str, archive: str, sizes: Mapping[str, int]) -> bool | None:
        """From the run's one listing: both assets uploaded, the archive's of its size (the
        sidecars travel inside the `.entry` asset)."""
        try:
            with self._asking():
                assets = self._asset_map()
        except GitHubError as error:
            warn(f"cannot tell whether {self.location} still holds {key}: {error}")
            return None
        body, entry = assets.get(f"{key}-{archive}"), assets.get(f"{key}-{archive}{ENTRY_SUFFIX}")
        return body is not None and entry is not None and _uploaded(body) and _uploaded(entry) \
            and body.get("size") in (None, sizes.get(archive))

    def _entry_files(self, asset: dict, archive: str, dest: Path) -> dict[str, bytes]:
        """The small files of an entry, read from its `.entry` asset and checked for shape: only
        the entry's own file names (never a path), the manifest and `.sha256` present."""
        temp = dest / f".{archive}{ENTRY_SUFFIX}.tmp-{os.getpid()}"
        try:
            self.client.download(asset, temp, ENTRY_CAP)
            payload = json.loads(temp.read_bytes())
        except ValueError as error:
            raise CacheError(f"{self.location}: {asset['name']} is not JSON ({error})") from None
        finally:
            temp.unlink(missing_ok=True)
        payload = payload if isinstance(payload, dict) else {}
        files = payload.get("files")
        allowed = [name for name in entry_files(archive) if name != archive]
        required = [name for name in entry_names(archive) if name != archive]
        if payload.get("format") != ENTRY_FORMAT or not isinstance(files, dict) \
                or not set(files) <= set(allowed) or not set(required) <= set(files) \
                or not all(isinstance(text, str) for text in files.values()):
            raise CacheError(f"{self.location}: {asset['name']} is not an entry of format {ENTRY_FORMAT} holding "
                             f"{' and '.join(required)} (and at most {', '.join(allowed)})")
        try:
            decoded = {name: base64.b64decode(text, validate=True) for name, text in files.items()}
        except ValueError:
            raise CacheError(f"{self.location}: {asset['name']} holds a file that is not base64") from None
        for name, data in decoded.items():
            cap = sidecar_cap(name, archive)
            if len(data) > cap.size:
                raise CacheError(f"{self.location}: {asset['name']} holds {name} of {len(data):,} bytes, more than "
                                 f"{cap.what} ({cap.size:,})")
        return decoded

    def put(self, key: str, files: Sequence[Path]) -> None:
        """Store the entry: an existing one with these exact bytes stays; any other is replaced,
        its `.entry` deleted first (no reader takes a mix of two). Then the leg's older keys
        beyond `keep` are deleted. A rate limit is a CacheError: the entry is not stored, said."""
        if not self.token:
            raise ReadOnly(f"{self.location}: no GITHUB_TOKEN to upload with")
        archive = archive_of(files)
        size = archive.stat().st_size
        if size > RELEASE_ASSET_MAX_BYTES:
            raise CacheError(f"{self.location}: not stored: {archive.name} is {size:,} bytes, over the "
                             f"{RELEASE_ASSET_MAX_BYTES:,}-byte release-asset limit GitHub uploads stop at")
        leg = _leg_of(files, archive)
        names = f"{key}-{archive.name}", f"{key}-{archive.name}{ENTRY_SUFFIX}"
        labels = leg, entry_label(leg, files, archive)
        try:
            release = self._writable()
            assets = self._asset_map()
            with tempfile.TemporaryDirectory(prefix="anira-entry-") as scratch:
                entry = Path(scratch) / names[1]
                entry.write_bytes(_entry_bytes(files, archive))
                digests = _sidecar_digest(files, archive), sha256_file(entry)
                paths = archive, entry
                same = [_asset_is(assets.get(name), path, digest) and assets[name].get("label") == label
                        for name, path, digest, label in zip(names, paths, digests, labels)]
                if all(same):
                    return self._prune(leg, key)
                if not is_signed(files) and _signer_of_entry(assets.get(names[1])):
                    raise SignedEntryKept(signed_entry_kept(self.location, key))
                for name, kept in ((names[1], False), (names[0], same[0])):  # the .entry first
                    if name in assets and not kept:
                        self.client.delete_asset(assets.pop(name))
                for name, path, digest, label in zip(names, paths, digests, labels):  # the .entry last
                    if name not in assets:
                        assets[name] = self.client.upload_replacing(release, path, name, digest, label)
            self._prune(leg, key)
        except RateLimited as error:
            raise CacheError(f"{self.location}: not stored: {error}") from None
        except GitHubError as error:
            if error.status in (401, 403):
                raise ReadOnly(f"{self.location}: {error}") from None
            raise CacheError(f"{self.location}: {error}") from None

    def _writable(self) -> dict:
        """The release to write into: the one found, or a new draft."""
        release = self._find()
        if release is None:
            release, made = self.client.ensure_draft(self.tag, RELEASE_BODY)
            self._release, self._assets = release, None
            if made:
                warn(f"{self.location}: made the draft release {self.tag} to hold the binary cache")
        if release.get("immutable"):
            raise ReadOnly(f"{self.location}: the release {self.tag} is published and immutable (Immutable "
                           "Releases), so no asset can be added to it: delete it, and the next store makes the "
                           "binary cache a draft, which stays mutable")
        return release

    def _prune(self, leg: str, newest: str) -> None:
        """Delete the entries of `leg` (its label) but the newest `keep` keys, `newest` first."""
        assets = self._asset_map()
        entries: dict[str, list[dict]] = {}
        for name, asset in assets.items():
            match = _ASSET_NAME.fullmatch(name)
            if match and _label_leg(asset) == leg:
                entries.setdefault(match["key"], []).append(asset)
        order = sorted(entries, reverse=True, key=lambda k: (k == newest, max(
            (str(a.get("created_at") or ""), int(a["id"])) for a in entries[k])))
        for old in order[self.keep:]:
            for asset in entries[old]:
                self.client.delete_asset(asset)
                assets.pop(asset["name"], None)
        if order[self.keep:]:
            warn(f"{self.location}: removed {len(order) - self.keep} older key(s) of {leg} (the newest {self.keep} "
                 "are kept)")


def _uploaded(asset: dict) -> bool:
    return asset.get("state") == "uploaded"


def _listed(key: str, archive: str, body: dict, entry: dict) -> Listed:
    label = _ENTRY_LABEL.fullmatch(str(entry.get("label") or ""))
    if label is None:  # a label this code did not write: the leg from the archive's
        return Listed(key, archive, _label_leg(body))
    return Listed(key, archive, label["leg"], label["signer"] or "",
                  int(label["seconds"]) if label["seconds"] else None)


def _label_leg(asset: dict) -> str:
    """The leg an asset belongs to: its label's first word (labels carry more after it)."""
    return str(asset.get("label") or "").partition(" ")[0]


def entry_label(leg: str, files: Sequence[Path], archive: Path) -> str:
    """The `.entry` asset's label: the leg, the key id that signed the entry, the build's
    seconds its manifest records (each left out when unknown)."""
    by_name = {path.name: path for path in files}
    words = [leg]
    try:
        signature = json.loads(by_name[archive.name + SIGNATURE_SUFFIX].read_text(encoding="utf-8"))
        words.append(f"signed={key_id(str(signature['public_key']))}")
    except (KeyError, OSError, ValueError, TypeError):
        pass  # unsigned, or a signature a reader refuses anyway
    try:
        seconds = build_seconds(json.loads(by_name[archive.name + ".json"].read_text(encoding="utf-8")))
    except (KeyError, OSError, ValueError, AttributeError):
        seconds = None
    if seconds is not None:
        words.append(f"build={round(seconds)}s")
    return " ".join(words)


def _asset_is(asset: dict | None, path: Path, sha256: str) -> bool:
    """The remote asset is exactly this file, as far as GitHub's digest shows (none: not known
    to be, so replaced)."""
    return asset is not None and bool(asset.get("digest")) and holds(asset, path.stat().st_size, sha256)


def _mixed(body: dict, sidecar: bytes) -> str:
    """Why the archive asset is not what the entry's `.sha256` names (empty: it may be, or GitHub
    reports no digest): two writers of one key at once. Found before the archive is downloaded."""
    digest, named = str(body.get("digest") or ""), sidecar.decode("ascii", "replace").split()[:1]
    if digest.startswith("sha256:") and named and digest != f"sha256:{named[0]}":
        return f"holds an archive ({digest}) other than its .sha256 names ({named[0]}); not used"
    return ""


def _leg_of(files: Sequence[Path], archive: Path) -> str:
    """The leg id the manifest names (the entries' label, by which a leg's keys are pruned)."""
    manifest = next(path for path in files if path.name == archive.name + ".json")
    try:
        leg = json.loads(manifest.read_text(encoding="utf-8"))["leg"]["id"]
    except (OSError, ValueError, KeyError, TypeError):
        return archive.name
    return leg if isinstance(leg, str) and leg else archive.name


def _sidecar_digest(files: Sequence[Path], archive: Path) -> str:
    """The archive's sha256 as its `.sha256` records it (published: checked against the bytes)."""
    sidecar = next((path for path in files if path.name == archive.name + ".sha256"), None)
    words = sidecar.read_text(encoding="ascii").split()[:1] if sidecar else []
    return words[0] if words and re.fullmatch(r"[0-9a-f]{64}", words[0]) else sha256_file(archive)


def _entry_bytes(files: Sequence[Path], archive: Path) -> bytes:
    small = {path.name: base64.b64encode(path.read_bytes()).decode("ascii") for path in files if path != archive}
    return json.dumps({"format": ENTRY_FORMAT, "archive": archive.name, "files": small}, sort_keys=True,
                      indent=1).encode("utf-8")


def github_release(location: str) -> ReleaseLocation:
    """Owner/repo, tag and keys kept per leg of `github:<owner>/<repo>@<tag>[?keep=N]`."""
    rest, _, query = location[len("github:"):].partition("?")
    repo, _, tag = rest.partition("@")
    keep = query.removeprefix("keep=") if query.startswith("keep=") else ("" if not query else "bad")
    if repo.count("/") != 1 or not tag or (query and not (keep.isascii() and keep.isdigit() and int(keep) > 0)):
        raise CacheError(f"binary_cache={location}: write github:<owner>/<repo>@<release tag>, optionally with "
                         "?keep=N, the keys kept per leg (a positive integer; default 2)")
    return ReleaseLocation(repo, tag, int(keep) if query else KEEP_DEFAULT)


def _signer_of_entry(asset: dict | None) -> str:
    """The signer an entry's label names ("" when unsigned or absent)."""
    label = _ENTRY_LABEL.fullmatch(str((asset or {}).get("label") or ""))
    return (label.group("signer") or "") if label else ""
