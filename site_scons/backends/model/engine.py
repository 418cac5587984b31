"""Engine data: pins, sources and patch metadata from `engines/<engine>/engine.toml`."""
from __future__ import annotations

import re
import tomllib
import urllib.parse
from dataclasses import dataclass, field, replace
from pathlib import Path
from types import MappingProxyType
from typing import Any, Mapping

from .vocab import CONDITIONS, VocabularyError, canonical_platform


class DataError(ValueError):
    """The project's own data files are inconsistent."""


DEFAULT_VERSION_PATTERN = r"\d+\.\d+\.\d+"
SOURCE_KINDS = ("archive", "git")
_SHA256 = re.compile(r"[0-9a-f]{64}")
_COMMIT = re.compile(r"[0-9a-f]{40}")
# Names that end up in file names (versions, library names, package dirs): one path component.
_FILE_NAME_PART = re.compile(r"[A-Za-z0-9][A-Za-z0-9._+-]*")
_MISSING = object()
_TYPE_NAMES = {str: "string", bool: "boolean (true or false)", list: "list", dict: "table"}


def typed(raw: Mapping[str, object], key: str, kind: type, where: str, default: object = _MISSING) -> Any:
    """`raw[key]`, refused unless it is a `kind` (TOML's true/false, never "false" or 1)."""
    if key not in raw:
        if default is _MISSING:
            raise DataError(f"{where}: the required field {key!r} is missing")
        return default
    value = raw[key]
    if not isinstance(value, kind) or (kind is not bool and isinstance(value, bool)):
        raise DataError(f"{where}: {key} must be a {_TYPE_NAMES.get(kind, kind.__name__)}, not {value!r}")
    return value


def file_name_part(value: str, field: str, where: str) -> str:
    """`value`, refused unless it can be one path component (no separators, no `..`)."""
    if not _FILE_NAME_PART.fullmatch(value) or ".." in value:
        raise DataError(f"{where}: {field} {value!r} must be one plain file name "
                        "(letters, digits, . _ + -; no separators, no '..')")
    return value


def strings(raw: Mapping[str, object], key: str, where: str) -> dict[str, str]:
    table = typed(raw, key, dict, where, {})
    for name, value in table.items():
        if not isinstance(value, str):
            raise DataError(f"{where}: {key}.{name} must be a string, not {value!r}")
    return dict(table)


PATCH_FIELDS = ("file", "reason", "upstream", "until", "when")
_VERSION = re.compile(r"\d+(\.\d+)*")


def when_matches(when: Mapping[str, tuple[str, ...]], facts: Mapping[str, str | tuple[str, ...]]) -> bool:
    """A `when` table (key -> accepted values) against a leg's facts (recipe_kit.facts): every
    key must accept one of the leg's values (a leg has several accelerators, say)."""
    for key, accepted in when.items():
        have = facts[key]
        values = have if isinstance(have, tuple) else (have,)
        if not set(values) & set(accepted):
            return False
    return True


def version_key(version: str, width: int = 0) -> tuple[int, ...] | None:
    """The leading dotted numbers of a version (`1.27.0rc1` -> (1, 27, 0)), padded with zeros
    to `width` parts (`17.0` -> (17, 0, 0) at 3); None when it has none."""
    match = _VERSION.match(version)
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
    submodules: bool = False

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
    when: Mapping[str, tuple[str, ...]]  # every key must match; a key matches any of its values

    def applies_to(self, facts: Mapping[str, str | tuple[str, ...]]) -> bool:
        return when_matches(self.when, facts)

    def outdated_at(self, version: str) -> bool:
        """Whether `version` is past the last upstream version known to need the patch."""
        pinned, until = version_key(version), version_key(self.until)
        return pinned is not None and until is not None and pinned > until


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
    # What a pinned file names (Download.names), by that file's name: recorded by `scons lock`.
    nested: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))
    # The engine's own version scheme: version= overrides and the pin must match it.
    version_pattern: re.Pattern[str] = re.compile(DEFAULT_VERSION_PATTERN)

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


def url_filename(url: str) -> str:
    """The file name a URL downloads to (`%2B` decoded, as upstream's release assets are named)."""
    return urllib.parse.unquote(url.rstrip("/").rsplit("/", 1)[-1])


def _source(name: str, raw: Mapping[str, object], where: str) -> SourceSpec:
    where = f"{where} [sources.{name}]"
    if not isinstance(raw, dict):
        raise DataError(f"{where}: must be a table")
    kind = typed(raw, "kind", str, where, "archive")
    if kind not in SOURCE_KINDS:
        raise DataError(f"{where}: kind {kind!r} is not one of {', '.join(SOURCE_KINDS)}")
    commit = typed(raw, "commit", str, where, "")
    if commit and "{" not in commit and not _COMMIT.fullmatch(commit):
        raise DataError(f"{where}: commit {commit!r} is not a 40-digit hex commit id")
    if kind == "git" and not typed(raw, "ref", str, where, ""):
        raise DataError(f"{where}: a git source needs a ref (a tag, branch or commit)")
    return SourceSpec(
        name=name,
        url=typed(raw, "url", str, where),
        kind=kind,
        ref=typed(raw, "ref", str, where, ""),
        commit=commit,
        submodules=typed(raw, "submodules", bool, where, False),
    )


def _patch(raw: Mapping[str, object], where: str) -> PatchSpec:
    unknown = sorted(set(raw) - set(PATCH_FIELDS))
    if unknown:
        raise DataError(f"{where}: unknown fields {', '.join(unknown)}; fields: {', '.join(PATCH_FIELDS)}")
    file = str(raw["file"])
    if Path(file).parent != Path("patches") or Path(file).suffix != ".py":
        raise DataError(f"{where}: file {file!r} must be a script in the engine's patches/ directory "
                        "(patches/<name>.py)")
    until = str(raw.get("until", ""))
    if until and not _VERSION.fullmatch(until):
        raise DataError(f"{where}: until {until!r} is not a version such as 1.26.0")
    return PatchSpec(
        name=Path(file).stem,
        file=file,
        reason=str(raw["reason"]),
        upstream=str(raw.get("upstream", "")),
        until=until,
        when=_conditions(raw.get("when", {}), where),
    )


def _conditions(raw: object, where: str) -> Mapping[str, tuple[str, ...]]:
    """A patch's `when` table: known keys only, each a value or a list of values (any of)."""
    if not isinstance(raw, Mapping):
        raise DataError(f"{where}: when must be a table such as {{ os = \"windows\" }}, not {raw!r}")
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
                            "(<os>-<arch> as in variants/, e.g. linux-x86_64, windows-arm64, android, ios)")
    elif value not in allowed:
        raise DataError(f"{where}: when.{key} {value!r} is not one of {', '.join(allowed)}")


def load_engine(root: Path) -> Engine:
    path = root / "engine.toml"
    try:
        with path.open("rb") as handle:
            raw = tomllib.load(handle)
        engine = _engine(root, path, raw)
    except DataError:
        raise
    except (OSError, tomllib.TOMLDecodeError) as error:
        raise DataError(f"{path}: {error}") from None
    except (KeyError, TypeError, ValueError) as error:
        raise DataError(f"{path}: missing or malformed field {error}") from None
    missing = [p.file for p in engine.patches if not (root / p.file).is_file()]
    if missing:
        raise DataError(f"{path}: patch files not found: {', '.join(missing)}")
    return engine


def _engine(root: Path, path: Path, raw: dict[str, object]) -> Engine:
    where = str(path)
    if raw.get("name") != root.name:
        raise DataError(f"{path}: name {raw.get('name')!r} does not match its directory {root.name!r}")
    version = typed(raw, "version", str, where)
    pattern = re.compile(typed(raw, "version_pattern", str, where, DEFAULT_VERSION_PATTERN))
    if not pattern.fullmatch(version):
        raise DataError(f"{where}: version {version!r} does not match version_pattern {pattern.pattern!r}")
    file_name_part(version, "version", where)
    sha256 = strings(raw, "sha256", where)
    bad = [name for name, pin in sha256.items() if pin and not _SHA256.fullmatch(pin)]
    if bad:
        raise DataError(f"{where}: [sha256] {bad[0]!r} = {sha256[bad[0]]!r} is not 64 lowercase hex digits "
                        "(remove it and run `scons lock` to record it)")
    nested = strings(raw, "nested", where)
    package_dirs = typed(raw, "package_dirs", list, where, ["include", "lib"])
    if not all(isinstance(d, str) for d in package_dirs):
        raise DataError(f"{where}: package_dirs must list strings")
    for directory in package_dirs:
        file_name_part(directory, "package_dirs entry", where)
    return Engine(
        name=str(raw["name"]),
        libname=file_name_part(typed(raw, "libname", str, where), "libname", where),
        version=version,
        license=typed(raw, "license", str, where),
        homepage=typed(raw, "homepage", str, where, ""),
        root=root,
        package_dirs=tuple(package_dirs),
        pins=MappingProxyType(strings(raw, "pins", where)),
        sources=MappingProxyType({name: _source(name, spec, where)
                                  for name, spec in typed(raw, "sources", dict, where, {}).items()}),
        patches=tuple(_patch(patch, f"{path} [[patches]] #{index}")
                      for index, patch in enumerate(typed(raw, "patches", list, where, []), start=1)),
        sha256=MappingProxyType(sha256),
        nested=MappingProxyType(nested),
        version_pattern=pattern,
    )
