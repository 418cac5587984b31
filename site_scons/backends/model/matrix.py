"""The leg matrix: `variants/<engine>.toml` rows expanded into validated `Leg`s."""
from __future__ import annotations

import itertools
import tomllib
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import Mapping

from backends.model.engine import DataError, Engine, describe_when, load_engine, when_matches
from backends.model.leg import Leg, leg_id
from backends.model.platforms import platform_table
from backends.model.recipe_kit import facts
from backends.model.schema import (
    PATH_COMPONENT,
    Field,
    boolean,
    hours,
    identifier,
    line,
    list_of,
    matching,
    one_of,
    one_or_more,
    path_component,
    read,
    table,
    table_of,
    template_name,
    text,
    version,
)
from backends.model.vocab import (
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


def _platform(value: object, label: str, where: str) -> str:
    token = text(value, label, where)
    try:
        platform = canonical_platform(token)
    except VocabularyError:
        raise DataError(f"{where}: unknown platform {token!r}; platforms are those of engines/platforms.toml: "
                        f"{', '.join(platform_table().tokens)}") from None
    if platform != token:
        raise DataError(f"{where}: write the canonical platform {platform!r}, not {token!r}")
    return platform


# Params fill URL templates and name files, so each is one path component; a param a recipe
# reads otherwise declares its own check here.
_DEFINE = r"[A-Za-z_][A-Za-z0-9_]*=[!-~]*"
PARAM_CHECKS = {
    "abis": matching(rf"{PATH_COMPONENT}( {PATH_COMPONENT})*",
                     "must be ABI names separated by single spaces (each one plain file name)"),
    "defines": matching(rf"{_DEFINE}( {_DEFINE})*", "must be CMake defines NAME=VALUE separated by single spaces"),
}

# What a `[[leg]]` row (merged over [defaults]) holds: a field is validated by being declared here.
ROW_FIELDS = (
    Field("platform", _platform),
    Field("kind", one_or_more(one_of(KINDS))),
    Field("config", one_or_more(one_of(CONFIGS)), ("release",)),
    Field("flavor", one_of(FLAVORS), "cpu"),
    Field("source", one_of(SOURCES), ""),  # "": aggregate for an aggregate, else build
    Field("runner", one_of(RUNNERS)),
    Field("can_run", boolean, True),
    Field("toolchain", one_of(TOOLCHAINS), "none"),
    Field("accelerator", one_or_more(one_of(ACCELERATORS)), ()),
    Field("experimental", boolean, False),
    Field("publish", boolean, True),
    Field("aggregate", one_of(AGGREGATES), ""),
    Field("requires", table_of(line, key_check=identifier), MappingProxyType({})),
    Field("params", table_of(path_component, key_check=template_name, by_key=PARAM_CHECKS), MappingProxyType({})),
    Field("version", version, ""),
    # Runner limits (docs/ci-and-release.md "On the runners"): the hours a cold build (no compiler
    # cache) is estimated to take on its runner, 0 when well within a CI job; and whether CI
    # frees the Linux runner's preinstalled SDKs first (inputs of several GB).
    Field("cold_hours", hours, 0.0),
    Field("free_disk", boolean, False),
)
VARIANTS_FIELDS = (
    Field("defaults", table, {}),
    Field("leg", list_of(table), ()),
)

# The per-arch platforms an aggregate fuses, in slice order (engines/platforms.toml).
AGGREGATE_SLICES = platform_table().aggregate_slices


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


def _aggregate_inputs(engine: str, aggregate: str, flavor: str, kind: str, config: str) -> tuple[str, ...]:
    return tuple(leg_id(engine, p, flavor, kind, config) for p in AGGREGATE_SLICES[aggregate])


def _expand_row(engine: Engine, row: Mapping[str, object], defaults: Mapping[str, object], where: str) -> list[Leg]:
    values = read({**defaults, **row}, ROW_FIELDS, where)
    platform, flavor, accelerator = values["platform"], values["flavor"], values["accelerator"]
    if (flavor == "cpu") != (not accelerator):
        raise DataError(f"{where}: flavor {flavor} {'must not' if flavor == 'cpu' else 'must'} name an accelerator")
    if flavor == "cuda" and accelerator != ("cuda",):
        raise DataError(f"{where}: flavor cuda means accelerator cuda")
    if values["free_disk"] and RUNNERS[values["runner"]][0] != "linux":
        raise DataError(f"{where}: free_disk removes a Linux runner's preinstalled SDKs; runner {values['runner']} "
                        "is not a Linux runner")
    aggregate = values["aggregate"]
    source = values["source"] or ("aggregate" if aggregate else "build")
    if (source == "aggregate") != bool(aggregate):
        raise DataError(f"{where}: source aggregate goes with an aggregate field, and only with it")
    if values["version"] and not engine.version_pattern.fullmatch(values["version"]):
        raise DataError(f"{where}: version {values['version']!r} does not match the version_pattern "
                        f"{engine.version_pattern.pattern!r} of engines/{engine.name}/engine.toml")
    legs = []
    for kind, config in itertools.product(values["kind"], values["config"]):
        if (kind == "xcframework") != (platform == "ios"):
            raise DataError(f"{where}: kind xcframework is the iOS package, and iOS legs are xcframeworks "
                            f"(platform {platform}, kind {kind})")
        legs.append(Leg(
            engine=engine.name,
            platform=platform,
            kind=kind,
            config=config,
            flavor=flavor,
            source=source,
            runner=values["runner"],
            can_run=values["can_run"],
            toolchain=values["toolchain"],
            accelerator=accelerator,
            experimental=values["experimental"],
            publish=values["publish"],
            aggregate=aggregate,
            inputs=_aggregate_inputs(engine.name, aggregate, flavor, kind, config) if aggregate else (),
            requires=values["requires"],
            params=values["params"],
            version=values["version"],
            cold_hours=values["cold_hours"],
            free_disk=values["free_disk"],
        ))
    return legs


def load_variants(path: Path, engine: Engine) -> list[Leg]:
    try:
        with path.open("rb") as handle:
            raw = tomllib.load(handle)
    except (OSError, tomllib.TOMLDecodeError) as error:
        raise DataError(f"{path}: {error}") from None
    tables = read(raw, VARIANTS_FIELDS, path.name)
    defaults = tables["defaults"]
    read(defaults, ROW_FIELDS, f"{path.name} [defaults]", partial=True)
    legs: list[Leg] = []
    for index, row in enumerate(tables["leg"], start=1):
        legs.extend(_expand_row(engine, row, defaults, f"{path.name} leg #{index}"))
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
    """A patch (or a [[submodules]] entry) whose `when` matches no leg is a typo or a leftover:
    it would silently never apply."""
    for engine in engines.values():
        leg_facts = [facts(leg) for leg in legs if leg.engine == engine.name and not leg.aggregate]
        for patch in engine.patches:
            if not any(patch.applies_to(one) for one in leg_facts):
                raise DataError(f"engines/{engine.name}/engine.toml: patch {patch.file} applies to no leg of "
                                f"variants/{engine.name}.toml (when {describe_when(patch.when)})")
        for entry in engine.submodules:
            if not any(when_matches(entry.when, one) for one in leg_facts):
                raise DataError(f"engines/{engine.name}/engine.toml: {entry.label} matches no leg of "
                                f"variants/{engine.name}.toml: its paths would never be checked out")


def engine_names(project_root: Path) -> list[str]:
    """Engines that have data, the known five first (vocab.ENGINES' order), then any others."""
    found = {path.stem for path in (project_root / "variants").glob("*.toml")}
    return [name for name in ENGINES if name in found] + sorted(found - set(ENGINES))


def load_matrix(project_root: Path) -> Matrix:
    names = engine_names(project_root)
    engines = {name: load_engine(project_root / "engines" / name) for name in names}
    legs: list[Leg] = []
    for name in names:
        legs.extend(load_variants(project_root / "variants" / f"{name}.toml", engines[name]))
    _validate(legs)
    _check_patches(engines, legs)
    return Matrix(engines=MappingProxyType(engines), legs=tuple(legs))
