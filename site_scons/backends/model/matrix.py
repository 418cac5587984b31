"""The leg matrix: `variants/<engine>.toml` rows expanded into validated `Leg`s."""
from __future__ import annotations

import itertools
import tomllib
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import Iterable, Mapping

from .engine import DataError, Engine, load_engine, strings, typed
from .leg import Leg, leg_id
from .recipe_kit import facts
from .vocab import (
    ACCELERATORS,
    AGGREGATES,
    CONFIGS,
    ENGINES,
    FLAVORS,
    KINDS,
    RUNNERS,
    SOURCES,
    TOOLCHAINS,
    VocabularyError,
    canonical_platform,
)

ROW_FIELDS = {
    "platform", "kind", "config", "flavor", "source", "runner", "can_run", "toolchain",
    "accelerator", "experimental", "publish", "aggregate", "requires", "params", "version",
}

# The per-arch platforms an aggregate fuses, in slice order.
AGGREGATE_SLICES = {
    "universal": ("macos-x86_64", "macos-arm64"),
    "android-bundle": ("android-arm64-v8a", "android-x86_64"),
}


@dataclass(frozen=True)
class Matrix:
    engines: Mapping[str, Engine]
    legs: tuple[Leg, ...]

    def leg(self, leg_id_: str) -> Leg:
        for leg in self.legs:
            if leg.id == leg_id_:
                return leg
        raise KeyError(leg_id_)

    @property
    def ids(self) -> tuple[str, ...]:
        return tuple(leg.id for leg in self.legs)


def _as_tuple(value: object) -> tuple[str, ...]:
    if isinstance(value, (list, tuple)):
        return tuple(str(v) for v in value)
    return (str(value),)


def _check(value: str, allowed: Iterable[str], what: str, where: str) -> str:
    allowed = tuple(allowed)
    if value not in allowed:
        raise DataError(f"{where}: {what} {value!r} is not one of {', '.join(allowed)}")
    return value


def _platform(token: str, where: str) -> str:
    try:
        platform = canonical_platform(token)
    except VocabularyError:
        raise DataError(f"{where}: unknown platform {token!r}; platforms are <os>-<arch> (e.g. linux-x86_64, "
                        "macos-arm64, windows-arm64, android-arm64-v8a) or android, ios, wasm") from None
    if platform != token:
        raise DataError(f"{where}: write the canonical platform {platform!r}, not {token!r}")
    return platform


def _aggregate_inputs(engine: str, aggregate: str, flavor: str, kind: str, config: str) -> tuple[str, ...]:
    return tuple(leg_id(engine, p, flavor, kind, config) for p in AGGREGATE_SLICES[aggregate])


def _expand_row(engine: str, row: Mapping[str, object], defaults: Mapping[str, object], where: str) -> list[Leg]:
    unknown = set(row) - ROW_FIELDS
    if unknown:
        raise DataError(f"{where}: unknown fields {', '.join(sorted(unknown))}; fields: {', '.join(sorted(ROW_FIELDS))}")
    merged = {**defaults, **row}
    platform = _platform(str(merged["platform"]), where)
    flavor = _check(str(merged.get("flavor", "cpu")), FLAVORS, "flavor", where)
    accelerator = _as_tuple(merged.get("accelerator", ())) if merged.get("accelerator") else ()
    for acc in accelerator:
        _check(acc, ACCELERATORS, "accelerator", where)
    if (flavor == "cpu") != (not accelerator):
        raise DataError(f"{where}: flavor {flavor} {'must not' if flavor == 'cpu' else 'must'} name an accelerator")
    if flavor == "cuda" and accelerator != ("cuda",):
        raise DataError(f"{where}: flavor cuda means accelerator cuda")
    aggregate = str(merged.get("aggregate", ""))
    if aggregate:
        _check(aggregate, AGGREGATES, "aggregate", where)
    source = _check(str(merged.get("source", "aggregate" if aggregate else "build")), SOURCES, "source", where)
    if (source == "aggregate") != bool(aggregate):
        raise DataError(f"{where}: source aggregate goes with an aggregate field, and only with it")
    runner = _check(str(merged["runner"]), RUNNERS, "runner", where)
    toolchain = _check(str(merged.get("toolchain", "none")), TOOLCHAINS, "toolchain", where)
    legs = []
    for kind, config in itertools.product(_as_tuple(merged["kind"]), _as_tuple(merged.get("config", "release"))):
        _check(kind, KINDS, "kind", where)
        _check(config, CONFIGS, "config", where)
        if (kind == "xcframework") != (platform == "ios"):
            raise DataError(f"{where}: kind xcframework is the iOS package, and iOS legs are xcframeworks "
                            f"(platform {platform}, kind {kind})")
        legs.append(Leg(
            engine=engine,
            platform=platform,
            kind=kind,
            config=config,
            flavor=flavor,
            source=source,
            runner=runner,
            can_run=typed(merged, "can_run", bool, where, True),
            toolchain=toolchain,
            accelerator=accelerator,
            experimental=typed(merged, "experimental", bool, where, False),
            publish=typed(merged, "publish", bool, where, True),
            aggregate=aggregate,
            inputs=_aggregate_inputs(engine, aggregate, flavor, kind, config) if aggregate else (),
            requires=MappingProxyType(strings(merged, "requires", where)),
            params=MappingProxyType(strings(merged, "params", where)),
            version=typed(merged, "version", str, where, ""),
        ))
    return legs


def load_variants(path: Path, engine: str) -> list[Leg]:
    try:
        with path.open("rb") as handle:
            raw = tomllib.load(handle)
    except (OSError, tomllib.TOMLDecodeError) as error:
        raise DataError(f"{path}: {error}") from None
    unknown = set(raw) - {"defaults", "leg"}
    if unknown:
        raise DataError(f"{path}: unknown tables {', '.join(sorted(unknown))}; expected [defaults] and [[leg]]")
    defaults = raw.get("defaults", {})
    if not isinstance(defaults, dict):
        raise DataError(f"{path.name} [defaults]: must be a table")
    unknown = set(defaults) - ROW_FIELDS
    if unknown:
        raise DataError(f"{path.name} [defaults]: unknown fields {', '.join(sorted(unknown))}; "
                        f"fields: {', '.join(sorted(ROW_FIELDS))}")
    legs: list[Leg] = []
    for index, row in enumerate(raw.get("leg", ()), start=1):
        where = f"{path.name} leg #{index}"
        try:
            legs.extend(_expand_row(engine, row, defaults, where))
        except KeyError as error:
            raise DataError(f"{where}: the required field {error} is missing") from None
    return legs


def _validate(legs: list[Leg]) -> None:
    seen: dict[str, Leg] = {}
    for leg in legs:
        if leg.id in seen:
            raise DataError(f"leg {leg.id} is declared twice")
        seen[leg.id] = leg
    for leg in legs:
        missing = [i for i in leg.inputs if i not in seen]
        if missing:
            raise DataError(f"aggregate {leg.id} needs legs that do not exist: {', '.join(missing)}")


def _check_patches(engines: Mapping[str, Engine], legs: list[Leg]) -> None:
    """A patch whose `when` matches no leg is a typo or a leftover: it would silently never apply."""
    for engine in engines.values():
        leg_facts = [facts(leg) for leg in legs if leg.engine == engine.name and not leg.aggregate]
        for patch in engine.patches:
            if not any(patch.applies_to(one) for one in leg_facts):
                when = ", ".join(f"{key} = {'|'.join(values)}" for key, values in patch.when.items())
                raise DataError(f"engines/{engine.name}/engine.toml: patch {patch.file} applies to no leg of "
                                f"variants/{engine.name}.toml (when {when or 'always'})")


def engine_names(project_root: Path) -> list[str]:
    """Engines that have data, the known five first (vocab.ENGINES' order), then any others."""
    found = {path.stem for path in (project_root / "variants").glob("*.toml")}
    return [name for name in ENGINES if name in found] + sorted(found - set(ENGINES))


def load_matrix(project_root: Path) -> Matrix:
    names = engine_names(project_root)
    engines = {name: load_engine(project_root / "engines" / name) for name in names}
    legs: list[Leg] = []
    for name in names:
        legs.extend(load_variants(project_root / "variants" / f"{name}.toml", name))
    _validate(legs)
    _check_patches(engines, legs)
    return Matrix(engines=MappingProxyType(engines), legs=tuple(legs))
