"""Engine data: pins, sources and patch metadata from `engines/<engine>/engine.toml`."""
from __future__ import annotations

import tomllib
import urllib.parse
from dataclasses import dataclass, field, replace
from pathlib import Path
from types import MappingProxyType
from typing import Mapping


class DataError(ValueError):
    """The project's own data files are inconsistent."""


@dataclass(frozen=True)
class SourceSpec:
    """An upstream origin: an archive URL template, or a git repository at a ref."""

    name: str
    url: str
    kind: str = "archive"  # archive | git
    ref: str = ""
    commit: str = ""
    submodules: bool = False


@dataclass(frozen=True)
class PatchSpec:
    """A patch file and the metadata that says why, where from and when it applies."""

    name: str
    file: str
    reason: str
    upstream: str
    until: str
    when: Mapping[str, str]

    def applies_to(self, facts: Mapping[str, str | tuple[str, ...]]) -> bool:
        for key, wanted in self.when.items():
            have = facts.get(key, "")
            values = have if isinstance(have, tuple) else (have,)
            if wanted not in values:
                return False
        return True


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

    def with_version(self, version: str) -> "Engine":
        """A version override of the pin (not a second pin): names and URLs follow it."""
        return replace(self, version=version)

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


def _source(name: str, raw: Mapping[str, object]) -> SourceSpec:
    return SourceSpec(
        name=name,
        url=str(raw["url"]),
        kind=str(raw.get("kind", "archive")),
        ref=str(raw.get("ref", "")),
        commit=str(raw.get("commit", "")),
        submodules=bool(raw.get("submodules", False)),
    )


def _patch(raw: Mapping[str, object]) -> PatchSpec:
    file = str(raw["file"])
    return PatchSpec(
        name=Path(file).stem,
        file=file,
        reason=str(raw["reason"]),
        upstream=str(raw.get("upstream", "")),
        until=str(raw.get("until", "")),
        when=MappingProxyType({str(k): str(v) for k, v in dict(raw.get("when", {})).items()}),
    )


def load_engine(root: Path) -> Engine:
    path = root / "engine.toml"
    try:
        with path.open("rb") as handle:
            raw = tomllib.load(handle)
        engine = _engine(root, path, raw)
    except (OSError, tomllib.TOMLDecodeError) as error:
        raise DataError(f"{path}: {error}") from None
    except (KeyError, TypeError, ValueError) as error:
        raise DataError(f"{path}: missing or malformed field {error}") from None
    missing = [p.file for p in engine.patches if not (root / p.file).is_file()]
    if missing:
        raise DataError(f"{path}: patch files not found: {', '.join(missing)}")
    return engine


def _engine(root: Path, path: Path, raw: dict[str, object]) -> Engine:
    if raw.get("name") != root.name:
        raise DataError(f"{path}: name {raw.get('name')!r} does not match its directory {root.name!r}")
    return Engine(
        name=str(raw["name"]),
        libname=raw["libname"],
        version=raw["version"],
        license=raw["license"],
        homepage=raw.get("homepage", ""),
        root=root,
        package_dirs=tuple(raw.get("package_dirs", ("include", "lib"))),
        pins=MappingProxyType({str(k): str(v) for k, v in raw.get("pins", {}).items()}),
        sources=MappingProxyType({name: _source(name, spec) for name, spec in raw.get("sources", {}).items()}),
        patches=tuple(_patch(p) for p in raw.get("patches", ())),
        sha256=MappingProxyType({str(k): str(v) for k, v in raw.get("sha256", {}).items()}),
    )
