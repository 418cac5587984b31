"""The contract facts every engine shares, from `engines/contracts.toml`: the binary
evidence of each accelerator, what static libraries may leave undefined per OS, the
floors (size, exported symbols) a real build of an engine's main libraries is above, the
license texts every package carries under share/licenses/<engine>/, and the accelerators
upstream ships as builds of their own (what an origin is judged by at extract).
Applied to every leg's contract by `recipes.plan_leg`; validated at load, naming the
file and the field."""
from __future__ import annotations

import re
import tomllib
from dataclasses import dataclass, field, replace
from functools import lru_cache
from pathlib import Path
from types import MappingProxyType
from typing import Mapping

from backends.model.engine import DataError, When, when_matches
from backends.model.leg import Leg
from backends.model.plan import Contract, Evidence, Floor
from backends.model.recipe_kit import facts, license_dir
from backends.model.vocab import ACCELERATORS, CONDITIONS, ENGINES, OSES

FILE_NAME = "contracts.toml"
EVIDENCE_KINDS = ("files", "symbols", "links", "targets", "libraries")
FLOOR_MINIMA = ("min_bytes", "min_symbols")
SECTIONS = ("evidence", "undefined", "floor", "licenses", "origins", "flavors", "accelerators")
# The leg facts an evidence row may depend on: those of a patch's `when` but the flavor and the
# accelerator, which the row is evidence of.
WHEN_KEYS = tuple(key for key in CONDITIONS if key not in ("flavor", "accelerator"))


@dataclass(frozen=True)
class EvidenceRow:
    evidence: Evidence
    when: When

    def applies_to(self, leg: Leg) -> bool:
        return when_matches(self.when, facts(leg))


@dataclass(frozen=True)
class FloorRow:
    floors: tuple[Floor, ...]  # one per library glob of the row
    when: When

    def applies_to(self, leg: Leg) -> bool:
        return when_matches(self.when, facts(leg))


@dataclass(frozen=True)
class LicenseRow:
    files: tuple[str, ...]  # names under share/licenses/<engine>/
    when: When

    def applies_to(self, leg: Leg) -> bool:
        return when_matches(self.when, facts(leg))


@dataclass(frozen=True)
class ContractData:
    evidence: Mapping[str, Mapping[str, tuple[EvidenceRow, ...]]]  # engine -> accelerator -> rows
    system_symbols: Mapping[str, tuple[str, ...]]  # os -> regexes
    internal_prefixes: Mapping[str, tuple[str, ...]]  # engine -> C name prefixes
    floors: Mapping[str, tuple[FloorRow, ...]]  # engine -> rows
    licenses: Mapping[str, tuple[LicenseRow, ...]] = field(default_factory=lambda: MappingProxyType({}))  # engine -> rows
    origin_builds: tuple[str, ...] = ()  # accelerators upstream ships as files of their own ([origins] builds)

    def license_texts(self, leg: Leg) -> tuple[str, ...]:
        """The license texts the leg's package carries: members under share/licenses/<engine>/."""
        names = dict.fromkeys(name for row in self.licenses.get(leg.engine, ()) if row.applies_to(leg)
                              for name in row.files)
        return tuple(f"{license_dir(leg.engine)}/{name}" for name in names)


def contracts_file(engines_dir: Path) -> Path:
    return engines_dir / FILE_NAME


@lru_cache(maxsize=None)
def load_contract_data(path: Path) -> ContractData:
    try:
        with path.open("rb") as handle:
            raw = tomllib.load(handle)
    except (OSError, tomllib.TOMLDecodeError) as error:
        raise DataError(f"{path}: {error}") from None
    _only(raw, SECTIONS, f"{path}")
    _vocabulary(raw, f"{path}")
    undefined = _table(raw.get("undefined", {}), f"{path}: undefined")
    _only(undefined, ("system", "sets", "internal"), f"{path}: undefined")
    evidence = _per_engine(raw.get("evidence", {}), path, "evidence")
    internal = _per_engine(undefined.get("internal", {}), path, "undefined.internal")
    floors = _per_engine(raw.get("floor", {}), path, "floor")
    licenses = _per_engine(raw.get("licenses", {}), path, "licenses")
    return ContractData(
        evidence=MappingProxyType({engine: _engine_evidence(rows, f"{path}: evidence.{engine}")
                                   for engine, rows in evidence.items()}),
        system_symbols=_system_symbols(undefined, f"{path}: undefined"),
        internal_prefixes=MappingProxyType({engine: _strings(value, f"{path}: undefined.internal.{engine}")
                                            for engine, value in internal.items()}),
        floors=MappingProxyType({engine: _engine_floors(rows, f"{path}: floor.{engine}") for engine, rows in floors.items()}),
        licenses=MappingProxyType({engine: _license_rows(rows, f"{path}: licenses.{engine}")
                                   for engine, rows in licenses.items()}),
        origin_builds=_origin_builds(raw.get("origins", {}), f"{path}: origins"),
    )


def with_contract_data(contract: Contract, leg: Leg, data: ContractData) -> Contract:
    """The leg's contract with its accelerators' evidence, the others' absence, the
    static-library rules of its OS and the engine's license texts."""
    rows = data.evidence.get(leg.engine, {})
    present = tuple(_merge(acc, [r for r in rows.get(acc, ()) if r.applies_to(leg)]) for acc in leg.accelerator)
    shipped = _merge("", [r for acc in leg.accelerator for r in rows.get(acc, ())])
    absent = tuple(_without(_merge(acc, list(acc_rows)), shipped)
                   for acc, acc_rows in rows.items() if acc not in leg.accelerator)
    required = tuple(dict.fromkeys((*contract.required, *data.license_texts(leg))))  # an aggregate's are its slice's
    return replace(
        contract,
        required=required,
        accelerators=tuple(e for e in present if e),
        foreign_accelerators=tuple(e for e in absent if e),
        system_symbols=data.system_symbols.get(leg.os, ()),
        internal_prefixes=data.internal_prefixes.get(leg.engine, ()),
        floors=tuple(floor for row in data.floors.get(leg.engine, ()) if row.applies_to(leg) for floor in row.floors),
    )


def _merge(accelerator: str, rows: list[EvidenceRow]) -> Evidence:
    values = {kind: tuple(dict.fromkeys(v for r in rows for v in getattr(r.evidence, kind))) for kind in EVIDENCE_KINDS}
    return Evidence(accelerator, **values)


def _without(evidence: Evidence, shared: Evidence) -> Evidence:
    """Evidence minus the items the leg's own accelerators show too (MLX and MPS both
    link Metal.framework)."""
    return Evidence(evidence.accelerator, **{kind: tuple(v for v in getattr(evidence, kind)
                                                         if v not in getattr(shared, kind))
                                             for kind in EVIDENCE_KINDS})


# --- validation -----------------------------------------------------------------------------

def _per_engine(raw: object, path: Path, field: str) -> dict:
    table = _table(raw, f"{path}: {field}")
    for engine in table:
        if engine not in ENGINES and not (path.parent / engine / "engine.toml").is_file():
            raise DataError(f"{path}: {field}.{engine}: no engine {engine}; engines: {', '.join(ENGINES)} "
                            f"and those with an engines/<name>/engine.toml")
    return table


def _engine_evidence(raw: object, where: str) -> Mapping[str, tuple[EvidenceRow, ...]]:
    table = _table(raw, where)
    for accelerator in table:
        if accelerator not in ACCELERATORS:
            raise DataError(f"{where}.{accelerator}: unknown accelerator; accelerators: {', '.join(ACCELERATORS)}")
    return MappingProxyType({acc: tuple(_row(acc, row, f"{where}.{acc}[{i}]") for i, row in enumerate(_list(rows, f"{where}.{acc}")))
                             for acc, rows in table.items()})


def _row(accelerator: str, raw: object, where: str) -> EvidenceRow:
    row = _table(raw, where)
    _only(row, ("when", *EVIDENCE_KINDS), where)
    when = _when(row, where)
    evidence = Evidence(accelerator, **{kind: _strings(row.get(kind, []), f"{where}.{kind}") for kind in EVIDENCE_KINDS})
    if not evidence:
        raise DataError(f"{where}: names no evidence; give one of {', '.join(EVIDENCE_KINDS)}")
    return EvidenceRow(evidence, when)


def _when(row: dict, where: str) -> When:
    """A row's `when`: a table of leg facts and the values each accepts, or a list of such
    tables (any of), as in engine.toml."""
    raw = row.get("when", {})
    if not isinstance(raw, list):
        return (_when_table(raw, f"{where}.when"),)
    if not raw:
        raise DataError(f"{where}.when: expected a table or a non-empty list of tables, got []")
    return tuple(_when_table(table, f"{where}.when[{i}]") for i, table in enumerate(raw))


def _when_table(raw: object, where: str) -> Mapping[str, tuple[str, ...]]:
    when = _table(raw, where)
    _only(when, WHEN_KEYS, where)
    return MappingProxyType({key: _strings(value, f"{where}.{key}") for key, value in when.items()})


def _engine_floors(raw: object, where: str) -> tuple[FloorRow, ...]:
    return tuple(_floor_row(row, f"{where}[{i}]") for i, row in enumerate(_list(raw, where)))


def _floor_row(raw: object, where: str) -> FloorRow:
    row = _table(raw, where)
    _only(row, ("when", "libraries", *FLOOR_MINIMA), where)
    when = _when(row, where)
    if "libraries" not in row:
        raise DataError(f"{where}: names no libraries; give member globs of the main libraries")
    minima = {key: row.get(key, 0) for key in FLOOR_MINIMA}
    for key, value in minima.items():
        if not isinstance(value, int) or isinstance(value, bool) or value < 0:
            raise DataError(f"{where}.{key}: expected a whole number >= 0, got {value!r}")
    if not any(minima.values()):
        raise DataError(f"{where}: sets no floor; give min_bytes or min_symbols above 0")
    return FloorRow(tuple(Floor(glob, **minima) for glob in _strings(row["libraries"], f"{where}.libraries")), when)


def _license_rows(raw: object, where: str) -> tuple[LicenseRow, ...]:
    return tuple(_license_row(row, f"{where}[{i}]") for i, row in enumerate(_list(raw, where)))


def _license_row(raw: object, where: str) -> LicenseRow:
    row = _table(raw, where)
    _only(row, ("when", "files"), where)
    if "files" not in row:
        raise DataError(f"{where}: names no files; give the license texts' file names, e.g. [\"LICENSE\"]")
    files = _strings(row["files"], f"{where}.files")
    bad = [name for name in files if "/" in name or "\\" in name or name in (".", "..") or "*" in name]
    if bad:
        raise DataError(f"{where}.files: {', '.join(map(repr, bad))} is not a plain file name (no directories, no "
                        "wildcards): the texts live directly under share/licenses/<engine>/")
    return LicenseRow(files, _when(row, where))


def _origin_builds(raw: object, where: str) -> tuple[str, ...]:
    table = _table(raw, where)
    _only(table, ("builds",), where)
    builds = _strings(table.get("builds", []), f"{where}.builds")
    unknown = [name for name in builds if name not in ACCELERATORS]
    if unknown:
        raise DataError(f"{where}.builds: unknown accelerator {', '.join(unknown)}; accelerators: "
                        f"{', '.join(ACCELERATORS)}")
    return builds


def _system_symbols(undefined: dict, where: str) -> Mapping[str, tuple[str, ...]]:
    sets = {name: _regexes(value, f"{where}.sets.{name}") for name, value in _table(undefined.get("sets", {}), f"{where}.sets").items()}
    system = {}
    for os_name, names in _table(undefined.get("system", {}), f"{where}.system").items():
        if os_name not in OSES:
            raise DataError(f"{where}.system.{os_name}: unknown OS; OSes: {', '.join(OSES)}")
        missing = [n for n in _strings(names, f"{where}.system.{os_name}") if n not in sets]
        if missing:
            raise DataError(f"{where}.system.{os_name}: no set {', '.join(missing)}; sets: {', '.join(sets)}")
        system[os_name] = tuple(p for n in _strings(names, "") for p in sets[n])
    return MappingProxyType(system)


def _regexes(raw: object, where: str) -> tuple[str, ...]:
    patterns = _strings(raw, where)
    for pattern in patterns:
        try:
            re.compile(pattern)
        except re.error as error:
            raise DataError(f"{where}: {pattern!r} is not a regular expression ({error})") from None
    return patterns


def _vocabulary(raw: dict, where: str) -> None:
    """[flavors] and [accelerators]: names, each with a one-line description; cpu is a flavor
    (the default package)."""
    for section in ("flavors", "accelerators"):
        for name, description in _table(raw.get(section, {}), f"{where}: {section}").items():
            if not isinstance(description, str) or not description or "\n" in description:
                raise DataError(f"{where}: {section}.{name} must be a one-line description, not {description!r}")
    if "flavors" in raw and "cpu" not in raw["flavors"]:
        raise DataError(f"{where}: flavors: cpu, the default package, must be declared")


def _table(raw: object, where: str) -> dict:
    if not isinstance(raw, dict):
        raise DataError(f"{where}: expected a table, got {type(raw).__name__}")
    return raw


def _list(raw: object, where: str) -> list:
    if not isinstance(raw, list):
        raise DataError(f"{where}: expected an array of tables ([[...]]), got {type(raw).__name__}")
    return raw


def _strings(raw: object, where: str) -> tuple[str, ...]:
    values = [raw] if isinstance(raw, str) else raw
    if not isinstance(values, list) or not all(isinstance(v, str) and v for v in values):
        raise DataError(f"{where}: expected a string or a list of non-empty strings, got {raw!r}")
    return tuple(values)


def _only(table: dict, allowed: tuple[str, ...], where: str) -> None:
    unknown = sorted(set(table) - set(allowed))
    if unknown:
        raise DataError(f"{where}: unknown field {', '.join(unknown)}; fields: {', '.join(allowed)}")
