"""Atomic GitHub release of the archives in a dist directory (docs/history.md#release-fragility).

    python -m backends.ci.release --repo owner/name --tag vX.Y.Z --dist DIR --matrix FILE.json
                               [--step draft|publish] [--api URL] [--token-env GITHUB_TOKEN]

The matrix is `scons -Q ci-matrix` JSON for the release's selection; every entry with
`publish: true` is a required leg. The command finds the tag's draft release (or creates
one), uploads each present archive with its `.json` manifest, its SBOM as
`<archive>.spdx.json` (the document the manifest and the archive hold, steps/sbom.py) and a
`SHA256SUMS` covering every uploaded archive, and publishes the draft only when every
required leg is present. Otherwise the draft stays, the missing legs are named and the exit
status is 1.

CI runs it in two steps with the gates between them (docs/ci-and-release.md#cutting-a-release):
`--step draft` fills the draft and never publishes (exit 1 while legs are missing); the
attestation and anira's tests then run on the draft's archives; `--step publish` publishes
the draft once it holds every required leg with exactly the bytes of DIR, and changes no
asset. Without `--step` both run at once (no gate between them).

Re-running is safe ("Re-run failed jobs" runs this again): the tag's draft is found and
reused, an asset whose size and sha256 match is skipped, a different or half-uploaded one
(state other than `uploaded`) is deleted and uploaded again, and a name GitHub reports taken
(422) is read again and replaced, so a release never holds duplicates or stale bytes. A
published release is never changed (Immutable Releases would refuse it anyway). GitHub's
rate limit is waited out within a bound, else the command fails naming when it lifts.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping, Sequence

from backends.model.plan import RELEASE_ASSET_MAX_BYTES
from backends.steps import sbom
from backends.steps.publish import write_published
from backends.util.errors import BackendsError
from backends.util.files import sha256_file
from backends.util.github import GitHub, GitHubError, add_api_arguments, holds, redacting_printer

SUMS_NAME = "SHA256SUMS"
SBOM_SUFFIX = ".spdx.json"
STEPS = ("draft", "publish")


class ReleaseError(BackendsError, RuntimeError):
    """The release cannot proceed; the message says what to do."""


@dataclass(frozen=True)
class Asset:
    name: str
    path: Path
    size: int
    sha256: str

    @classmethod
    def of(cls, path: Path) -> "Asset":
        """The file as an asset; one GitHub would refuse is an error before it is hashed."""
        size = path.stat().st_size
        if size > RELEASE_ASSET_MAX_BYTES:
            raise ReleaseError(f"{path.name} is {size:,} bytes, over the {RELEASE_ASSET_MAX_BYTES:,}-byte release-asset "
                               "limit: GitHub would refuse the upload (verify refuses such an archive; was it built "
                               "by an older verify?)")
        return cls(name=path.name, path=path, size=size, sha256=sha256_file(path))


@dataclass(frozen=True)
class RequiredLeg:
    """A required (published) leg of the selection and its files in dist, if present."""

    id: str
    archive: str
    manifest: Mapping[str, Any] | None  # None: the leg's archive or manifest is missing
    experimental: bool = False  # uploaded when built, never holds the release back

    @property
    def missing(self) -> bool:
        return self.manifest is None and not self.experimental


# -- what to release ----------------------------------------------------------------------

def load_matrix(path: Path) -> list[dict[str, Any]]:
    text = path.read_text().strip()
    if not text:
        raise ReleaseError(f"{path} is empty: the plan job produced no matrix (did it fail?)")
    try:
        payload = json.loads(text)
    except json.JSONDecodeError as error:
        raise ReleaseError(f"{path}: not JSON ({error}); pass the output of `scons -Q ci-matrix`") from None
    entries = payload.get("include") if isinstance(payload, dict) else payload
    if not isinstance(entries, list) or not entries:
        raise ReleaseError(f"{path}: expected {{\"include\": [...]}} with at least one leg")
    return entries


def _check_sidecar(archive: Path, digest: str) -> None:
    """The build job's `.sha256` must still describe the bytes that reached this job."""
    sidecar = archive.with_name(archive.name + ".sha256")
    if not sidecar.is_file():
        return
    recorded = sidecar.read_text().split()[:1]
    if recorded != [digest]:
        raise ReleaseError(f"{archive.name}: sha256 {digest} but its .sha256 says {' '.join(recorded) or 'nothing'}; "
                           "the artifact changed after it was built: re-run the leg")


def required_legs(entries: Iterable[Mapping[str, Any]], dist: Path) -> list[RequiredLeg]:
    legs = []
    for entry in entries:
        if not entry.get("publish"):
            continue
        archive = dist / str(entry["archive"])
        manifest_path = archive.with_name(archive.name + ".json")
        manifest = json.loads(manifest_path.read_text()) if archive.is_file() and manifest_path.is_file() else None
        legs.append(RequiredLeg(id=str(entry["id"]), archive=archive.name, manifest=manifest,
                                experimental=bool(entry.get("experimental"))))
    return legs


def release_assets(legs: Sequence[RequiredLeg], dist: Path) -> list[Asset]:
    """Each present archive, its manifest and its SBOM, then SHA256SUMS (written into dist)
    over the archives."""
    archives = []
    sboms = []
    for leg in legs:
        if leg.manifest is None:
            continue
        archive = Asset.of(dist / leg.archive)
        _check_sidecar(archive.path, archive.sha256)
        archives.append(archive)
        sboms.append(Asset.of(write_sbom(archive.path, leg.manifest)))
    archives.sort(key=lambda a: a.name)
    sums = dist / SUMS_NAME
    write_published(sums, "".join(f"{a.sha256}  {a.name}\n" for a in archives).encode("ascii"))
    manifests = [Asset.of(dist / (a.name + ".json")) for a in archives]
    return [*archives, *manifests, *sorted(sboms, key=lambda a: a.name), Asset.of(sums)]


def write_sbom(archive: Path, manifest: Mapping[str, Any]) -> Path:
    """`<archive>.spdx.json` beside the archive: the SBOM its manifest carries, in the bytes the
    archive holds it in (its member's sha256 in the manifest's file list proves it)."""
    record = manifest.get("sbom")
    if not isinstance(record, dict) or not isinstance(record.get("document"), dict):
        raise ReleaseError(f"{archive.name}.json carries no SBOM (its `sbom` field): the archive was built before "
                           "SBOMs were written; re-run its leg")
    data = sbom.serialize(record["document"])
    listed = {f.get("path"): f.get("sha256") for f in manifest.get("files", ()) if isinstance(f, dict)}
    digest = sha256_file_bytes(data)
    if listed.get(record.get("path")) != digest:
        raise ReleaseError(f"{archive.name}.json: its SBOM (sha256 {digest}) is not the archive's member "
                           f"{record.get('path')} (sha256 {listed.get(record.get('path')) or 'not listed'}); "
                           "the manifest was altered after the build: re-run the leg")
    path = archive.with_name(archive.name + SBOM_SUFFIX)
    write_published(path, data)
    return path


def sha256_file_bytes(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def release_notes(tag: str, legs: Sequence[RequiredLeg]) -> str:
    """Markdown from the manifests: engine versions, the archives and what they need at run time."""
    lines = [f"anira backends {tag}: prebuilt inference engines, one archive per platform and package form.",
             f"Check downloads with `sha256sum -c {SUMS_NAME}` and their build provenance with `gh attestation "
             "verify <archive> --repo <owner>/<repo>`; each archive's `.json` manifest lists its upstream sources "
             "(with sha256), patches, tools and files, and its SPDX SBOM is `<archive>.spdx.json` (also inside the "
             "archive, under share/sbom/); the license texts are under share/licenses/.", ""]
    present = [leg for leg in legs if leg.manifest is not None]
    for engine in dict.fromkeys(str(leg.manifest["engine"]["name"]) for leg in present):  # type: ignore[index]
        rows = [leg.manifest for leg in present if leg.manifest["engine"]["name"] == engine]  # type: ignore[index]
        info = rows[0]["engine"]  # type: ignore[index]
        lines += [f"## {engine} {info['version']}", "",
                  f"Library `{info['libname']}`, license {info['license']}"
                  + (f", {info['homepage']}" if info.get("homepage") else "") + ".", "",
                  "| archive | platform | package | accelerator | runtime requirements |",
                  "|---|---|---|---|---|"]
        lines += [_note_row(row) for row in rows]  # type: ignore[arg-type]
        lines.append("")
    missing = [leg for leg in legs if leg.missing]
    if missing:
        lines += ["## Not built yet", "", "This draft is published once these legs have been uploaded:", ""]
        lines += [f"- `{leg.id}` ({leg.archive})" for leg in missing]
        lines.append("")
    return "\n".join(lines)


def _note_row(manifest: Mapping[str, Any]) -> str:
    leg = manifest["leg"]
    package = " ".join(filter(None, [leg["kind"], "debug" if leg["config"] == "debug" else "",
                                     "(experimental)" if leg.get("experimental") else ""]))
    accelerator = ", ".join(leg.get("accelerator") or []) or "CPU only"
    requires = "; ".join(f"{k}: {v}" for k, v in sorted(dict(leg.get("requires") or {}).items())) or "-"
    return f"| `{manifest['archive']}` | {leg['platform']} | {package} | {accelerator} | {requires} |"


# -- the release ------------------------------------------------------------------------------

def same_asset(remote: Mapping[str, Any], local: Asset) -> bool:
    """Same size, and same sha256 where GitHub reports a digest; a half-finished upload
    (state other than "uploaded") never counts."""
    return holds(remote, local.size, local.sha256)


def sync_assets(github: GitHub, release: Mapping[str, Any], assets: Sequence[Asset],
                say: Callable[[str], None]) -> None:
    remote = {a["name"]: a for a in github.assets(release)}  # as listed with the release: no request
    for asset in assets:
        existing = remote.pop(asset.name, None)
        if existing is not None and same_asset(existing, asset):
            say(f"unchanged {asset.name}")
            continue
        if existing is not None:
            github.delete_asset(existing)
        github.upload_replacing(release, asset.path, asset.name, asset.sha256)
        say(f"{'replaced' if existing is not None else 'uploaded'} {asset.name} ({asset.size} bytes)")
    for name in sorted(remote):
        say(f"warning: {name} is on the release but not in this selection; left as is")


def release(github: GitHub, tag: str, dist: Path, entries: Sequence[Mapping[str, Any]],
            say: Callable[[str], None], step: str = "") -> int:
    """`step` "draft" fills the draft, "publish" publishes the filled draft, "" does both."""
    legs = required_legs(entries, dist)
    if not legs:
        raise ReleaseError("the matrix has no leg with publish: true; nothing to release")
    assets = release_assets(legs, dist)
    missing = [leg for leg in legs if leg.missing]
    if step == "publish":
        return publish_draft(github, tag, legs, assets, missing, say)
    notes = release_notes(tag, legs)
    draft, made = github.ensure_draft(tag, notes)
    if not draft.get("draft"):
        return _already_published(github, draft, assets, missing, say)
    if made:
        say(f"created draft release {tag}")
    else:  # a re-run: the draft an earlier attempt made
        draft = github.update(draft, body=notes)
        say(f"updating draft release {tag}")
    sync_assets(github, draft, assets, say)
    if missing:
        return _stays_draft(tag, draft, legs, missing, say)
    if step == "draft":
        say(f"draft release {tag} holds every required leg; it is published by the publish step, once its "
            "archives are attested and anira's tests pass on them")
        return 0
    published = github.update(draft, draft=False)
    say(f"published {tag} with {len(legs)} legs: {published.get('html_url', '')}")
    return 0


def publish_draft(github: GitHub, tag: str, legs: Sequence[RequiredLeg], assets: Sequence[Asset],
                  missing: Sequence[RequiredLeg], say: Callable[[str], None]) -> int:
    """Publish the tag's draft, changing no asset: only when it holds every required leg and
    every asset is exactly the bytes in dist (what was attested and tested)."""
    draft = github.find_release(tag)
    if draft is None:
        raise ReleaseError(f"release {tag} has no draft to publish: run `--step draft` first")
    if not draft.get("draft"):
        return _already_published(github, draft, assets, missing, say)
    if missing:
        return _stays_draft(tag, draft, legs, missing, say)
    remote = {a["name"]: a for a in github.assets(draft, fresh=True)}
    differ = [a.name for a in assets if a.name not in remote or not same_asset(remote[a.name], a)]
    if differ:
        raise ReleaseError(f"the draft of {tag} does not hold exactly these assets ({', '.join(differ)}): it changed "
                           "after the draft step; run the release again from the draft step")
    published = github.update(draft, draft=False)
    say(f"published {tag} with {len(legs)} legs: {published.get('html_url', '')}")
    return 0


def _stays_draft(tag: str, draft: Mapping[str, Any], legs: Sequence[RequiredLeg], missing: Sequence[RequiredLeg],
                 say: Callable[[str], None]) -> int:
    say(f"::error::release {tag} stays a draft: {len(missing)} of {len(legs)} required legs are missing: "
        + ", ".join(leg.id for leg in missing))
    say(f"draft: {draft.get('html_url', '')}")
    return 1


def _already_published(github: GitHub, existing: Mapping[str, Any], assets: Sequence[Asset],
                       missing: Sequence[RequiredLeg], say: Callable[[str], None]) -> int:
    remote = {a["name"]: a for a in github.assets(existing)}
    if not missing and all(a.name in remote and same_asset(remote[a.name], a) for a in assets):
        say(f"{existing['tag_name']} is already published with these assets; nothing to do")
        return 0
    raise ReleaseError(f"release {existing['tag_name']} is already published and differs from {len(assets)} local "
                       "assets; a published release is never changed in place: turn it back into a draft (or delete "
                       "it) by hand, or tag a new version")


def main(argv: Sequence[str] | None = None, environ: Mapping[str, str] | None = None) -> int:
    environ = os.environ if environ is None else environ
    parser = argparse.ArgumentParser(prog="python -m backends.ci.release", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repo", required=True, help="owner/name")
    parser.add_argument("--tag", required=True, help="the release tag, e.g. v2.3.0")
    parser.add_argument("--dist", type=Path, required=True, help="directory holding the archives and manifests")
    parser.add_argument("--matrix", type=Path, required=True, help="`scons -Q ci-matrix` JSON of the selection")
    parser.add_argument("--step", choices=STEPS, default="",
                        help="draft: fill the draft, never publish; publish: publish the filled draft (default: both)")
    add_api_arguments(parser)
    args = parser.parse_args(argv)
    token = environ.get(args.token_env, "")
    say = redacting_printer(token)

    try:
        if not token:
            raise ReleaseError(f"${args.token_env} is empty; it must hold a token with contents: write")
        if "/" not in args.repo:
            raise ReleaseError(f"--repo {args.repo!r}: expected owner/name")
        if not args.dist.is_dir():
            raise ReleaseError(f"--dist {args.dist} is not a directory")
        github = GitHub(args.api, args.repo, token)
        try:
            return release(github, args.tag, args.dist, load_matrix(args.matrix), say, args.step)
        finally:
            say(github.usage())
    except (ReleaseError, GitHubError) as error:
        say(f"error: {error}", sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
