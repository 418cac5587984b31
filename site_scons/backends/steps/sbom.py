"""Each archive's SBOM: an SPDX 2.3 JSON document written with spdx-tools, validated before it
is written (docs/licenses-and-provenance.md).

It lives inside the archive at `share/sbom/<archive stem>.spdx.json` (written into the stage,
so the stage's record, the manifest's file list and verify cover it like any member) and,
the same document, in the `.json` manifest's `sbom` field; the release uploads it as the
`<archive>.spdx.json` asset (ci/release.py). It names:

- the archive (a package): the engine, its version, its license as an SPDX expression and
  the leg it is, the accelerator variant among them (external references `anira-leg`,
  `anira-platform`, `anira-kind`, `anira-config`, `anira-flavor`, `anira-accelerator`);
- the engine, which the archive contains;
- every input the leg's plan names (GENERATED_FROM): its URL and sha256, or a git source's
  commit and the submodule commits checked out with it; an `origin=` stand-in by file name;
- every download upstream's own build makes and the project serves (BUILD_DEPENDENCY_OF the
  archive: engine.toml [[build_downloads]]): upstream's name, its version, URL, the sha256 it
  was fetched with, upstream's own hash and its license where upstream states it;
- the patches applied to the engine (PATCH_APPLIED), each by its script's sha256;
- the static libraries the bundle step merged in (CONTAINS);
- each shipped runtime library that is not the engine's own (CONTAINS; Plan.runtimes: LibTorch's
  libgomp), by its member path and sha256, with its license and the texts carried for it;
- the license texts the archive carries (the archive package's license comment).

The document is a function of the plan, the fetched inputs and the stage: no clock (its time
is the archive's SOURCE_DATE_EPOCH) and no local path, so the same inputs give its same bytes.
"""
from __future__ import annotations

import fnmatch
import hashlib
import json
import os
import re
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path, PurePosixPath
from typing import Any, Mapping, Sequence

from spdx_tools.common.spdx_licensing import spdx_licensing
from spdx_tools.spdx.jsonschema.document_converter import DocumentConverter
from spdx_tools.spdx.model import (
    Actor,
    ActorType,
    Checksum,
    ChecksumAlgorithm,
    CreationInfo,
    Document,
    ExternalPackageRef,
    ExternalPackageRefCategory,
    Package,
    PackagePurpose,
    Relationship,
    RelationshipType,
    SpdxNoAssertion,
)
from spdx_tools.spdx.parser.jsonlikedict.json_like_dict_parser import JsonLikeDictParser
from spdx_tools.spdx.validation.document_validator import validate_full_spdx_document
from spdx_tools.spdx.validation.uri_validators import validate_download_location, validate_url

from backends.model.engine import BuildDownload, Engine
from backends.model.plan import Plan, RuntimeLibrary
from backends.model.recipe_kit import LICENSE_ROOT
from backends.steps.archive import archive_epoch
from backends.util.errors import BackendsError
from backends.util.files import atomic_write_bytes, canonical_json, sha256_file

SPDX_VERSION = "SPDX-2.3"
SBOM_DIR = "share/sbom"
SUFFIX = ".spdx.json"
TOOL = "anira-backends"
NAMESPACE = "https://spdx.org/spdxdocs/anira-backends"
# What the leg facts are called among the archive package's external references.
LEG_REFERENCES = ("leg", "platform", "kind", "config", "flavor", "accelerator")
_ID_CHARACTERS = re.compile(r"[^A-Za-z0-9.-]+")


class SbomError(BackendsError, RuntimeError):
    """The SBOM could not be made, or a document is no valid SPDX 2.3; the message says why."""


@dataclass(frozen=True)
class InputArchive:
    """An aggregate's input: another leg's published archive."""

    leg: str
    path: Path


def member_path(plan: Plan) -> str:
    """Where the archive holds its SBOM: named by the archive's stem, whatever the format."""
    return f"{SBOM_DIR}/{archive_stem(plan)}{SUFFIX}"


def archive_stem(plan: Plan) -> str:
    return plan.archive.removesuffix(".zip")


# -- the document --------------------------------------------------------------------------------

def leg_document(plan: Plan, engine: Engine, fetched: Sequence[Mapping[str, Any]], bundled: Sequence[str] = (),
                 license_texts: Sequence[str] = (), shipped: Mapping[str, str] | None = None) -> dict[str, Any]:
    """The SPDX document of a built leg: `fetched` are its fetch records (the fetch step's
    body: name, url, filename, sha256 or commit, submodules, override), `bundled` the static
    libraries the bundle step merged (any paths: only what lies below their common directory
    is kept), `license_texts` the archive's members under share/licenses/, `shipped` the
    stage's files matching the plan's runtime libraries (member path -> sha256)."""
    archive = _archive_package(plan, engine, license_texts)
    packages = [archive, _engine_package(engine)]
    relationships = [Relationship(archive.spdx_id, RelationshipType.CONTAINS, packages[1].spdx_id)]
    # An optional download left unpinned was not fetched: nothing of it is in the archive.
    upstream = {d.name: d.upstream for d in plan.downloads if d.upstream is not None}
    for record in sorted((r for r in fetched if not r.get("skipped")), key=lambda r: str(r.get("name", ""))):
        built_in = upstream.get(str(record.get("name", "")))
        if built_in is not None:
            package = _build_download_package(built_in, record)
            packages.append(package)
            relationships.append(Relationship(package.spdx_id, RelationshipType.BUILD_DEPENDENCY_OF, archive.spdx_id))
            continue
        for package in _input_packages(engine, record):
            packages.append(package)
            relationships.append(Relationship(archive.spdx_id, RelationshipType.GENERATED_FROM, package.spdx_id))
    for patch in plan.patches:
        package = Package(_spdx_id("Patch", patch.name), patch.name, SpdxNoAssertion(), files_analyzed=False,
                          file_name=patch.file, source_info=patch.upstream or None, comment=patch.reason,
                          checksums=[Checksum(ChecksumAlgorithm.SHA256, sha256_file(engine.root / patch.file))],
                          license_concluded=SpdxNoAssertion(), license_declared=SpdxNoAssertion(),
                          copyright_text=SpdxNoAssertion())
        packages.append(package)
        relationships.append(Relationship(package.spdx_id, RelationshipType.PATCH_APPLIED, packages[1].spdx_id))
    for index, name in enumerate(_relative(bundled), start=1):
        package = Package(_spdx_id("Bundled", f"{index}-{PurePosixPath(name).name}"), PurePosixPath(name).name,
                          SpdxNoAssertion(), files_analyzed=False, file_name=name,
                          comment=f"static library merged into the archive's library by the bundle step ({name})",
                          license_concluded=SpdxNoAssertion(), license_declared=SpdxNoAssertion(),
                          copyright_text=SpdxNoAssertion())
        packages.append(package)
        relationships.append(Relationship(archive.spdx_id, RelationshipType.CONTAINS, package.spdx_id))
    for member, digest in sorted((shipped or {}).items()):
        runtime = next(r for r in plan.runtimes if fnmatch.fnmatchcase(member, r.member))
        package = _runtime_package(runtime, member, digest, license_texts)
        packages.append(package)
        relationships.append(Relationship(archive.spdx_id, RelationshipType.CONTAINS, package.spdx_id))
    return _finish(archive_stem(plan), packages, relationships)


def runtime_members(plan: Plan, stage: Path) -> dict[str, str]:
    """The stage's files that are runtime libraries of the plan (not the engine's own), with their sha256."""
    found: dict[str, str] = {}
    for path in sorted(stage.rglob("*")):
        member = path.relative_to(stage).as_posix()
        if path.is_file() and not path.is_symlink() and any(fnmatch.fnmatchcase(member, r.member) for r in plan.runtimes):
            found[member] = sha256_file(path)
    return found


def _runtime_package(runtime: RuntimeLibrary, member: str, digest: str, license_texts: Sequence[str]) -> Package:
    texts = [t for t in license_texts if t.startswith(f"{LICENSE_ROOT}/{runtime.name}/")]
    return Package(_spdx_id("Runtime", PurePosixPath(member).name), runtime.name, SpdxNoAssertion(),
                   file_name=member, files_analyzed=False, checksums=[Checksum(ChecksumAlgorithm.SHA256, digest)],
                   source_info=runtime.origin, license_concluded=SpdxNoAssertion(),
                   license_declared=_declared_license(runtime.license), copyright_text=SpdxNoAssertion(),
                   license_comment=f"license texts in the archive: {', '.join(texts) or 'none'}",
                   comment="a runtime library the archive ships that is not the engine's own")


def aggregate_document(plan: Plan, engine: Engine, inputs: Sequence[InputArchive],
                       license_texts: Sequence[str] = ()) -> dict[str, Any]:
    """The SPDX document of an aggregate (universal, Android bundle): its inputs are the
    archives of its slice legs, each by file name and sha256 (their own SBOMs are inside them)."""
    archive = _archive_package(plan, engine, license_texts)
    packages = [archive, _engine_package(engine)]
    relationships = [Relationship(archive.spdx_id, RelationshipType.CONTAINS, packages[1].spdx_id)]
    for one in inputs:
        package = Package(_spdx_id("Input", one.leg), one.leg, SpdxNoAssertion(), version=engine.version,
                          file_name=one.path.name, files_analyzed=False,
                          checksums=[Checksum(ChecksumAlgorithm.SHA256, sha256_file(one.path))],
                          comment=f"the archive of leg {one.leg}, with its own SBOM inside",
                          license_concluded=SpdxNoAssertion(), license_declared=_license(engine),
                          copyright_text=SpdxNoAssertion())
        packages.append(package)
        relationships.append(Relationship(archive.spdx_id, RelationshipType.GENERATED_FROM, package.spdx_id))
    return _finish(archive_stem(plan), packages, relationships)


def _archive_package(plan: Plan, engine: Engine, license_texts: Sequence[str]) -> Package:
    leg = plan.leg
    facts = {"leg": leg.id, "platform": leg.platform, "kind": leg.kind, "config": leg.config, "flavor": leg.flavor,
             "accelerator": ",".join(leg.accelerator) or "none"}
    texts = ", ".join(sorted(license_texts)) or "none"
    return Package(
        _spdx_id("Package", "archive"), archive_stem(plan), SpdxNoAssertion(), version=engine.version,
        files_analyzed=False, supplier=Actor(ActorType.ORGANIZATION, TOOL),
        homepage=_homepage(engine), primary_package_purpose=PackagePurpose.LIBRARY,
        license_concluded=_license(engine), license_declared=_license(engine), copyright_text=SpdxNoAssertion(),
        license_comment=f"license texts in the archive: {texts}",
        summary=f"{engine.name} {engine.version} packaged for anira: {leg.platform}, {leg.kind}, {leg.config}, "
                f"accelerator {facts['accelerator']}",
        external_references=[ExternalPackageRef(ExternalPackageRefCategory.OTHER, f"anira-{key}", facts[key])
                             for key in LEG_REFERENCES],
    )


def _engine_package(engine: Engine) -> Package:
    return Package(_spdx_id("Engine", engine.name), engine.name, SpdxNoAssertion(), version=engine.version,
                   files_analyzed=False, homepage=_homepage(engine), license_concluded=_license(engine),
                   license_declared=_license(engine), copyright_text=SpdxNoAssertion(),
                   comment=f"upstream library {engine.libname}")


def _input_packages(engine: Engine, record: Mapping[str, Any]) -> list[Package]:
    """An input and, for a git source, the submodules checked out with it."""
    name = str(record["name"])
    url = str(record.get("url", ""))
    commit = str(record.get("commit", ""))
    origin = str(record.get("override") or record.get("origin") or "")
    comment = f"built from origin={_origin_name(origin)} in place of {url}" if origin else None
    common: dict[str, Any] = {"files_analyzed": False, "license_concluded": SpdxNoAssertion(),
                              "license_declared": SpdxNoAssertion(), "copyright_text": SpdxNoAssertion(),
                              "comment": comment}
    if commit:
        packages = [Package(_spdx_id("Input", name), f"{engine.name}-{name}", _location(f"git+{url}@{commit}"),
                            version=commit, source_info=f"git {url} at {record.get('ref') or commit}", **common)]
        for path, sub_commit in sorted(dict(record.get("submodules") or {}).items()):
            packages.append(Package(_spdx_id("Input", f"{name}-{path}"), f"{engine.name}-{name}:{path}",
                                    SpdxNoAssertion(), version=str(sub_commit),
                                    source_info=f"submodule {path} of {url} at {sub_commit}",
                                    **{**common, "comment": None}))
        return packages
    return [Package(_spdx_id("Input", name), f"{engine.name}-{name}", _location(url),
                    version=engine.version, file_name=str(record.get("filename") or "") or None,
                    source_info=f"downloaded from {url}" if url else None,
                    checksums=[Checksum(ChecksumAlgorithm.SHA256, str(record["sha256"]))], **common)]


_UPSTREAM_ALGORITHMS = {"sha1": ChecksumAlgorithm.SHA1, "sha256": ChecksumAlgorithm.SHA256, "md5": ChecksumAlgorithm.MD5}


def _build_download_package(item: BuildDownload, record: Mapping[str, Any]) -> Package:
    """A download upstream's build makes, served by the project: by upstream's name, version
    (tag, commit or the archive's), URL, the sha256 it was fetched with and upstream's own hash."""
    checksums = [Checksum(ChecksumAlgorithm.SHA256, str(record["sha256"]))]
    algorithm, _, digest = item.upstream_hash.partition(":")
    if digest and algorithm in _UPSTREAM_ALGORITHMS and algorithm != "sha256":
        checksums.append(Checksum(_UPSTREAM_ALGORITHMS[algorithm], digest))
    declared = _declared_license(item.license)
    origin = f" from git {item.git} at {item.ref}" if item.git else ""
    return Package(_spdx_id("BuildDownload", item.name), item.name, _location(item.url), version=item.version,
                   file_name=item.filename, files_analyzed=False, checksums=checksums,
                   source_info=f"downloaded by upstream's build{origin} ({item.where or item.reader}); fetched and "
                               f"pinned by the project, handed over by upstream's override",
                   license_concluded=SpdxNoAssertion(), license_declared=declared, copyright_text=SpdxNoAssertion(),
                   comment=f"upstream's hash {item.upstream_hash}" if item.upstream_hash else
                           "upstream gives no hash for it")


def _declared_license(expression: str) -> Any:
    if not expression:
        return SpdxNoAssertion()
    try:
        return spdx_licensing.parse(expression)
    except Exception:  # license_expression raises several types for a bad expression
        return SpdxNoAssertion()


def _finish(name: str, packages: list[Package], relationships: list[Relationship]) -> dict[str, Any]:
    """The document: described by its archive package, validated, as a JSON-like dict."""
    relationships = [Relationship("SPDXRef-DOCUMENT", RelationshipType.DESCRIBES, packages[0].spdx_id),
                     *relationships]
    creation = CreationInfo(SPDX_VERSION, "SPDXRef-DOCUMENT", name, f"{NAMESPACE}/{name}",
                            [Actor(ActorType.TOOL, TOOL)], datetime.fromtimestamp(archive_epoch(), timezone.utc))
    document = Document(creation, packages=packages, relationships=relationships)
    # The namespace must be unique per document: it names the content, hashed without it.
    digest = hashlib.sha256(serialize(_as_dict(document))).hexdigest()[:32]
    document.creation_info.document_namespace = f"{NAMESPACE}/{name}-{digest}"
    problems = validate_full_spdx_document(document, SPDX_VERSION)
    if problems:
        raise SbomError(f"the SBOM of {name} is not valid SPDX 2.3:\n  - "
                        + "\n  - ".join(p.validation_message for p in problems))
    return _as_dict(document)


def _as_dict(document: Document) -> dict[str, Any]:
    return DocumentConverter().convert(document)


def _license(engine: Engine) -> Any:
    try:
        return spdx_licensing.parse(engine.license)
    except Exception as error:  # license_expression raises several types for a bad expression
        raise SbomError(f"engines/{engine.name}/engine.toml: license {engine.license!r} is not an SPDX license "
                        f"expression (such as MIT, Apache-2.0, BSD-3-Clause): {error}") from None


def _spdx_id(kind: str, name: str) -> str:
    return f"SPDXRef-{kind}-{_ID_CHARACTERS.sub('-', name).strip('-') or 'unnamed'}"


def _homepage(engine: Engine) -> str | None:
    """The engine's homepage when SPDX takes it as a URL (engine.toml's check is wider)."""
    return engine.homepage if engine.homepage and not validate_url(engine.homepage) else None


def _location(location: str) -> Any:
    """A download location SPDX accepts, else NOASSERTION (a file:// git remote, a URL of a
    host by address and port: the URL stays in the package's source info)."""
    return location if location and not validate_download_location(location) else SpdxNoAssertion()


def _origin_name(origin: str) -> str:
    """An origin by its file name: no local path goes into the archive."""
    return PurePosixPath(origin.replace("\\", "/")).name or origin


def _relative(paths: Sequence[str]) -> list[str]:
    """`paths` below the directory they share, sorted: no build-tree path goes into the archive."""
    if not paths:
        return []
    posix = [PurePosixPath(p.replace("\\", "/")) for p in paths]
    root = os.path.commonpath([str(p.parent) for p in posix])
    return sorted(p.relative_to(root).as_posix() for p in posix)


# -- bytes, files ----------------------------------------------------------------------------------

def serialize(document: Mapping[str, Any]) -> bytes:
    """A document's bytes: the project's one JSON spelling (sorted keys, indent 2, newline)."""
    return canonical_json(document).encode("utf-8")


def parse(document: Mapping[str, Any]) -> Document:
    """A JSON document as spdx-tools' model (SbomError when it cannot be read as SPDX)."""
    try:
        return JsonLikeDictParser().parse(dict(document))
    except Exception as error:  # the parser raises its own SPDXParsingError, and others on odd input
        raise SbomError(f"not an SPDX JSON document: {error}") from None


def problems(document: Mapping[str, Any]) -> list[str]:
    """What makes a JSON document no valid SPDX 2.3 (empty when it is valid)."""
    try:
        parsed = parse(document)
    except SbomError as error:
        return [str(error)]
    return [p.validation_message for p in validate_full_spdx_document(parsed, SPDX_VERSION)]


def write(stage: Path, plan: Plan, document: Mapping[str, Any]) -> str:
    """Write `document` into the stage as the archive's SBOM (replacing any other SBOM a
    merged input brought along); its member path."""
    member = member_path(plan)
    sbom_dir = stage / SBOM_DIR
    if sbom_dir.is_dir():
        for old in sbom_dir.iterdir():
            if old.name.endswith(SUFFIX):
                old.unlink()
    target = stage / member
    target.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_bytes(target, serialize(document))
    return member


def license_members(stage: Path) -> list[str]:
    """The stage's files under share/licenses/, as archive member paths."""
    root = stage / LICENSE_ROOT
    if not root.is_dir():
        return []
    return sorted(path.relative_to(stage).as_posix() for path in root.rglob("*") if path.is_file())


def read(stage: Path, plan: Plan) -> dict[str, Any] | None:
    """The SBOM the stage holds for the manifest: its member path and document; None without one."""
    path = stage / member_path(plan)
    if not path.is_file():
        return None
    return {"path": member_path(plan), "document": json.loads(path.read_text(encoding="utf-8"))}
