"""Engine data: pins, sources and patch metadata from `engines/<engine>/engine.toml`."""
from __future__ import annotations

import re
import tomllib
from dataclasses import dataclass, field, replace
from pathlib import Path
from types import MappingProxyType
from typing import Mapping, Sequence

from backends.model.schema import (
    DEFAULT_VERSION_PATTERN,
    DataError,
    Field,
    VersionPattern,
    line,
    list_of,
    matching,
    one_of,
    optional,
    path_component,
    read,
    table,
    table_of,
    template,
    template_name,
    text,
    url,
    version,
    version_pattern,
)
from backends.model.platforms import platform_table
from backends.model.vocab import CONDITIONS, VocabularyError, canonical_platform
from backends.util.locations import url_filename

SOURCE_KINDS = ("archive", "git")
# The readers of upstream's build-time downloads (pins/build_downloads.py), by their name in
# `[[build_downloads]]` reader = ...
BUILD_DOWNLOAD_READERS = ("ort-deps", "tflite-cmake", "xnnpack-kleidiai", "bazel", "emsdk", "nuget")
# The leading dotted numbers of any version-like text (a pin, a Mach-O minos): parsing, not the grammar.
_NUMBERS = re.compile(r"[0-9]+(\.[0-9]+)*")


# A `when`: the tables of leg facts (key -> accepted values) any one of which selects a leg;
# none selects every leg. The data writes one table, or a list of them.
When = tuple[Mapping[str, tuple[str, ...]], ...]
ALWAYS: When = ()


def when_matches(when: When, facts: Mapping[str, str | tuple[str, ...]]) -> bool:
    """A `when` against a leg's facts (recipe_kit.facts): some table, or none given, matches."""
    return not when or any(_table_matches(table, facts) for table in when)


def _table_matches(table: Mapping[str, tuple[str, ...]], facts: Mapping[str, str | tuple[str, ...]]) -> bool:
    """Every key accepts one of the leg's values (a leg has several accelerators, say)."""
    for key, accepted in table.items():
        have = facts[key]
        values = have if isinstance(have, tuple) else (have,)
        if not set(values) & set(accepted):
            return False
    return True


def describe_when(when: When, equals: str = " = ") -> str:
    """`arch = arm64|aarch64 or platform = ios`, for messages; `always` for none."""
    tables = [", ".join(f"{key}{equals}{'|'.join(values)}" for key, values in table.items()) for table in when]
    return " or ".join(tables) or "always"


def version_key(version: str, width: int = 0) -> tuple[int, ...] | None:
    """The leading dotted numbers of a version (`1.27.0rc1` -> (1, 27, 0)), padded with zeros
    to `width` parts (`17.0` -> (17, 0, 0) at 3); None when it has none."""
    match = _NUMBERS.match(version)
    if not match:
        return None
    parts = tuple(int(part) for part in match.group(0).split("."))
    return parts + (0,) * (width - len(parts))


@dataclass(frozen=True)
class SourceSpec:
    """An upstream origin: an archive URL template, or a git repository at a ref."""

    name: str
    url: str
    kind: str = "archive"  # archive | git
    ref: str = ""
    commit: str = ""
    submodules: bool = False  # checked out with its submodules (recursively)
    # Only the submodules the engine's [[submodules]] entries select for a leg
    # (`submodules = "selected"`); else every one.
    select_submodules: bool = False

    @property
    def recorded_commit(self) -> bool:
        """A commit `scons lock` recorded, as opposed to one a `[pins]` value fills in."""
        return bool(self.commit) and "{" not in self.commit


@dataclass(frozen=True)
class PatchSpec:
    """A patch file and the metadata that says why, where from and when it applies."""

    name: str
    file: str
    reason: str
    upstream: str
    until: str
    when: When  # some table must match: every key of it, a key matching any of its values

    def applies_to(self, facts: Mapping[str, str | tuple[str, ...]]) -> bool:
        return when_matches(self.when, facts)

    def outdated_at(self, version: str) -> bool:
        """Whether `version` is past the last upstream version known to need the patch."""
        pinned, until = version_key(version), version_key(self.until)
        return pinned is not None and until is not None and pinned > until


@dataclass(frozen=True)
class SubmoduleSpec:
    """An `[[submodules]]` entry: submodule paths of a git source that a leg checks out when
    it matches `when` and its build turns `switch` on (model/submodules.py); both optional."""

    index: int  # its place among the engine's entries, from 1: how messages name it
    source: str
    paths: tuple[str, ...]
    reason: str
    switch: str = ""  # a build switch (CMake option, environment variable) that needs them
    when: When = ALWAYS

    def applies_to(self, facts: Mapping[str, str | tuple[str, ...]], switches: frozenset[str]) -> bool:
        return when_matches(self.when, facts) and (not self.switch or self.switch in switches)

    @property
    def condition(self) -> str:
        """What selects it, for messages: `switch X`, `when os=ios`, or `always`."""
        parts = [f"switch {self.switch}"] if self.switch else []
        parts += [f"when {describe_when(self.when, '=')}"] if self.when else []
        return ", ".join(parts) or "always"

    @property
    def label(self) -> str:
        return f"[[submodules]] #{self.index} ({self.condition})"


@dataclass(frozen=True)
class BuildDownload:
    """A file upstream's build downloads by itself (pins/build_downloads.py reads them from the
    pinned tree; `[[build_downloads]]` records them): upstream's name for it, the URL, and the
    hash upstream gives (`sha1:<hex>`, `sha256:<hex>`; "" when it gives none, as for a git tag)."""

    name: str
    url: str
    upstream_hash: str = ""
    git: str = ""  # the repository upstream declared, when it declared one (the url is its tag's archive)
    ref: str = ""  # the tag or commit of `git`
    where: str = ""  # the file of upstream's tree that declares it
    reader: str = ""  # which reader found it (pins/build_downloads.py READERS)
    when: When = ALWAYS
    license: str = ""  # as upstream states it, where it does

    @property
    def filename(self) -> str:
        """Its file name in the project's cache and `[sha256]`: upstream's name first, since
        many archives are called `v1.0.tar.gz`."""
        return f"{self.name}-{url_filename(self.url)}"

    @property
    def version(self) -> str:
        """The tag or commit, else what the archive's name says."""
        if self.ref:
            return self.ref
        stem = re.sub(r"\.(tar\.gz|tgz|tar\.xz|zip|tar\.bz2)$", "", url_filename(self.url))
        return stem.removeprefix("v") if re.match(r"v?\d", stem) else stem.rsplit("-", 1)[-1]

    def applies_to(self, facts: Mapping[str, str | tuple[str, ...]]) -> bool:
        return when_matches(self.when, facts)


@dataclass(frozen=True)
class Engine:
    name: str
    libname: str
    version: str
    license: str
    homepage: str
    root: Path
    package_dirs: tuple[str, ...]
    pins: Mapping[str, str]
    sources: Mapping[str, SourceSpec]
    patches: tuple[PatchSpec, ...]
    sha256: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))
    submodules: tuple[SubmoduleSpec, ...] = ()  # what the `submodules = "selected"` sources check out
    # What a pinned file names (Download.names), by that file's name: recorded by `scons lock`.
    nested: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))
    # The engine's own version scheme within the grammar: the pin, rows' versions and
    # version= overrides match it.
    version_pattern: VersionPattern = VersionPattern(DEFAULT_VERSION_PATTERN)
    # What upstream's build downloads by itself, recorded from the pinned tree.
    build_downloads: tuple[BuildDownload, ...] = ()

    def with_version(self, version: str) -> "Engine":
        """A version override of the pin (not a second pin): names and URLs follow it, and a
        recorded commit whose ref moves with the version (`v{version}`) no longer applies."""
        moved = replace(self, version=version)
        sources = {name: replace(spec, commit="") if spec.recorded_commit and moved.ref(name) != self.ref(name)
                   else spec for name, spec in self.sources.items()}
        return replace(moved, sources=MappingProxyType(sources))

    def ref(self, source: str) -> str:
        """The git ref a source names, rendered (`v{version}` -> `v1.26.0`)."""
        try:
            return self.sources[source].ref.format(**self.template_vars())
        except KeyError as missing:
            raise DataError(f"{self.name}: source {source!r} needs the value {missing} for its ref") from None

    def template_vars(self, extra: Mapping[str, str] | None = None) -> dict[str, str]:
        values = {"version": self.version, **self.pins}
        values.update(extra or {})
        return values

    def render_url(self, source: str, extra: Mapping[str, str] | None = None) -> str:
        spec = self.sources.get(source)
        if spec is None:
            raise DataError(f"{self.name}: no source named {source!r}; sources: {', '.join(self.sources)}")
        try:
            return spec.url.format(**self.template_vars(extra))
        except KeyError as missing:
            raise DataError(f"{self.name}: source {source!r} needs the value {missing} for {spec.url}") from None

    def pinned_sha256(self, filename: str) -> str | None:
        return self.sha256.get(filename) or None


_GIT_REF = matching(r"(?!.*\.\.)(?!.*//)[A-Za-z0-9_][A-Za-z0-9._/+-]*",
                    "is not a git tag, branch or commit (letters, digits, . _ / + -; not starting with - or .)")
_COMMIT = matching(r"[0-9a-f]{40}|\{[A-Za-z_][A-Za-z0-9_]*\}",
                   "is not a 40-digit hex commit id (or a [pins] placeholder such as {commit})")
_SHA256 = matching(r"[0-9a-f]{64}", "is not 64 lowercase hex digits (remove it and run `scons lock` to record it)")
# Pins fill URL templates (so file names) and build paths, so each is one path component; a pin
# that holds something else declares its check here.
PIN_CHECKS = {
    "torch_index": url(),  # a pip index
    "build_image": matching(r"(?!.*\.\.)[a-z0-9][a-z0-9._/-]*(:[A-Za-z0-9_][A-Za-z0-9_.-]*)?(@sha256:[0-9a-f]{64})?",
                            "must be a container image reference such as registry/name:tag"),
}
_PATCH_FILE = matching(r"patches/(?!.*\.\.)[A-Za-z0-9_][A-Za-z0-9_.+-]*\.py",
                       "must be a script in the engine's patches/ directory (patches/<name>.py)")
_SUBMODULE_PATH = matching(r"(?!.*\.\.)(?!.*//)[A-Za-z0-9_][A-Za-z0-9_.+/-]*(?<!/)",
                           "is not a submodule path relative to the source's root, such as third-party/json "
                           "(letters, digits, . _ + - and /; no leading or trailing /, no '..')")
_SWITCH = matching(r"[A-Za-z_][A-Za-z0-9_]*", "is not a build switch name such as EXECUTORCH_BUILD_XNNPACK "
                                              "(a CMake option or environment variable: letters, digits, _)")
SELECTED = "selected"


def _submodules_mode(value: object, label: str, where: str) -> bool | str:
    """A git source's `submodules`: true (every one), false (none) or "selected"."""
    if value is True or value is False or value == SELECTED:
        return value
    raise DataError(f"{where}: {label} must be true (every submodule, recursively), false (none) or "
                    f"\"{SELECTED}\" (only those the [[submodules]] entries select for the leg), not {value!r}")


def parse_when(raw: object, label: str, where: str) -> When:
    """A `when`: a table of known keys, each a value or a list of values (any of), or a
    non-empty list of such tables (any of)."""
    tables = raw if isinstance(raw, list) else [raw]
    if not tables or not all(isinstance(table, Mapping) for table in tables):
        raise DataError(f"{where}: when must be a table such as {{ os = \"windows\" }}, or a list of them "
                        f"(any of), not {raw!r}")
    return tuple(_conditions(table, where) for table in tables if isinstance(table, Mapping))


def _conditions(raw: Mapping, where: str) -> Mapping[str, tuple[str, ...]]:
    """One table of a `when`: every key must match."""
    conditions = {}
    for key, value in raw.items():
        if key not in CONDITIONS:
            raise DataError(f"{where}: when.{key} is not a leg fact; keys: {', '.join(CONDITIONS)}")
        values = tuple(value) if isinstance(value, list) else (value,)
        if not values or not all(isinstance(v, str) for v in values):
            raise DataError(f"{where}: when.{key} must be a string or a list of strings, not {value!r}")
        for one in values:
            _check_condition(key, one, where)
        conditions[key] = values
    return MappingProxyType(conditions)


def _check_condition(key: str, value: str, where: str) -> None:
    allowed = CONDITIONS[key]
    if allowed is None:  # the platform
        try:
            valid = canonical_platform(value) == value
        except VocabularyError:
            valid = False
        if not valid:
            raise DataError(f"{where}: when.platform {value!r} is not a canonical platform "
                            f"(one of engines/platforms.toml: {', '.join(platform_table().tokens)})")
    elif value not in allowed:
        raise DataError(f"{where}: when.{key} {value!r} is not one of {', '.join(allowed)}")


# What `engines/<engine>/engine.toml` holds: a field is validated by being declared here.
ENGINE_FIELDS = (
    Field("name", path_component),
    Field("libname", path_component),
    Field("version", version),
    Field("version_pattern", version_pattern, VersionPattern(DEFAULT_VERSION_PATTERN)),
    Field("license", line),
    Field("homepage", optional(url()), ""),
    Field("package_dirs", list_of(path_component), ("include", "lib")),
    Field("pins", table_of(path_component, key_check=template_name, by_key=PIN_CHECKS), MappingProxyType({})),
    Field("sources", table_of(table, key_check=path_component), MappingProxyType({})),
    Field("patches", list_of(table), ()),
    Field("submodules", list_of(table), ()),
    Field("sha256", table_of(optional(_SHA256), key_check=path_component), MappingProxyType({})),
    Field("nested", table_of(url(), key_check=path_component), MappingProxyType({})),
    Field("build_downloads", list_of(table), ()),
)
SOURCE_FIELDS = (
    Field("url", text),  # checked with the kind: git sources may be file:// repositories
    Field("kind", one_of(SOURCE_KINDS), "archive"),
    Field("ref", optional(template(_GIT_REF)), ""),
    Field("commit", optional(_COMMIT), ""),
    Field("submodules", _submodules_mode, False),
)
PATCH_FIELDS = (
    Field("file", _PATCH_FILE),
    Field("reason", line),
    Field("upstream", optional(url()), ""),
    Field("until", optional(version), ""),
    Field("when", parse_when, ALWAYS),
)
SUBMODULE_FIELDS = (
    Field("source", path_component, "source"),
    Field("paths", list_of(_SUBMODULE_PATH)),
    Field("reason", line),
    Field("switch", optional(_SWITCH), ""),
    Field("when", parse_when, ALWAYS),
)
_UPSTREAM_HASH = matching(r"(sha1:[0-9a-f]{40}|sha256:[0-9a-f]{64}|md5:[0-9a-f]{32})",
                          "is not <algorithm>:<hex> (sha1:, sha256: or md5:)")
BUILD_DOWNLOAD_FIELDS = (
    Field("name", path_component),
    Field("url", url(("https",))),
    Field("upstream_hash", optional(_UPSTREAM_HASH), ""),
    Field("git", optional(url(("https",))), ""),
    Field("ref", optional(_GIT_REF), ""),
    Field("where", optional(line), ""),
    Field("reader", one_of(BUILD_DOWNLOAD_READERS)),
    Field("when", parse_when, ALWAYS),
    Field("license", optional(line), ""),
)
_URL_SCHEMES = {"archive": ("http", "https"), "git": ("http", "https", "file")}


def _source(name: str, raw: object, where: str) -> SourceSpec:
    where = f"{where} [sources.{name}]"
    values = read(raw, SOURCE_FIELDS, where)
    template(url(_URL_SCHEMES[values["kind"]]))(values["url"], "url", where)
    if values["kind"] == "git" and not values["ref"]:
        raise DataError(f"{where}: a git source needs a ref (a tag, branch or commit)")
    if values["kind"] != "git" and values["submodules"] is not False:
        raise DataError(f"{where}: submodules applies to git sources only (kind = \"git\")")
    mode = values.pop("submodules")
    return SourceSpec(name=name, submodules=mode is not False, select_submodules=mode == SELECTED, **values)


def _patch(raw: object, where: str) -> PatchSpec:
    values = read(raw, PATCH_FIELDS, where)
    return PatchSpec(name=Path(values["file"]).stem, **values)


def _submodule_entries(raw: Sequence[object], sources: Mapping[str, SourceSpec],
                       where: str) -> tuple[SubmoduleSpec, ...]:
    """The [[submodules]] entries: each names a source whose `submodules` is "selected", and
    every such source has at least one (else it would check out none, silently)."""
    entries = tuple(SubmoduleSpec(index=index, **read(entry, SUBMODULE_FIELDS, f"{where} [[submodules]] #{index}"))
                    for index, entry in enumerate(raw, start=1))
    for entry in entries:
        spec = sources.get(entry.source)
        if spec is None or not spec.select_submodules:
            selecting = [name for name, s in sources.items() if s.select_submodules]
            raise DataError(f"{where} [[submodules]] #{entry.index}: source {entry.source!r} is not a git source "
                            f"with submodules = \"{SELECTED}\"; such sources: {', '.join(selecting) or 'none'}")
    for name, spec in sources.items():
        if spec.select_submodules and not any(entry.source == name for entry in entries):
            raise DataError(f"{where} [sources.{name}]: submodules = \"{SELECTED}\" but no [[submodules]] entry "
                            f"names source {name!r}: add one (paths, reason) or set submodules = true")
    return entries


def load_engine(root: Path) -> Engine:
    path = root / "engine.toml"
    try:
        with path.open("rb") as handle:
            raw = tomllib.load(handle)
    except (OSError, tomllib.TOMLDecodeError) as error:
        raise DataError(f"{path}: {error}") from None
    engine = _engine(root, path, raw)
    missing = [p.file for p in engine.patches if not (root / p.file).is_file()]
    if missing:
        raise DataError(f"{path}: patch files not found: {', '.join(missing)}")
    return engine


def _engine(root: Path, path: Path, raw: dict[str, object]) -> Engine:
    where = str(path)
    values = read(raw, ENGINE_FIELDS, where)
    if values["name"] != root.name:
        raise DataError(f"{where}: name {values['name']!r} does not match its directory {root.name!r}")
    pattern = values["version_pattern"]
    if not pattern.fullmatch(values["version"]):
        raise DataError(f"{where}: version {values['version']!r} does not match version_pattern {pattern.pattern!r}")
    sources = MappingProxyType({name: _source(name, spec, where) for name, spec in values["sources"].items()})
    return Engine(
        name=values["name"],
        libname=values["libname"],
        version=values["version"],
        license=values["license"],
        homepage=values["homepage"],
        root=root,
        package_dirs=values["package_dirs"],
        pins=values["pins"],
        sources=sources,
        patches=tuple(_patch(patch, f"{where} [[patches]] #{index}")
                      for index, patch in enumerate(values["patches"], start=1)),
        submodules=_submodule_entries(values["submodules"], sources, where),
        sha256=values["sha256"],
        nested=values["nested"],
        version_pattern=pattern,
        build_downloads=_build_downloads(values["build_downloads"], where),
    )


def _build_downloads(raw: Sequence[object], where: str) -> tuple[BuildDownload, ...]:
    """The `[[build_downloads]]` entries, each file name once (it is their pin's key)."""
    entries = tuple(BuildDownload(**read(entry, BUILD_DOWNLOAD_FIELDS, f"{where} [[build_downloads]] #{index}"))
                    for index, entry in enumerate(raw, start=1))
    seen: dict[str, BuildDownload] = {}
    for entry in entries:
        other = seen.setdefault(entry.filename, entry)
        if other is not entry and other.url != entry.url:
            raise DataError(f"{where} [[build_downloads]]: {entry.name} and {other.name} share the file name "
                            f"{entry.filename} with two URLs")
    return entries
