"""Choosing legs from command-line filters, with errors that say what does exist."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Iterable, Sequence

from backends.model.leg import Leg
from backends.model.platforms import platform_table
from backends.model.vocab import CONFIGS, ENGINES, FLAVORS, KINDS, SOURCES, VocabularyError, canonical_platform
from backends.util.errors import BackendsError
from backends.util.spelling import suggest


class SelectionError(BackendsError, ValueError):
    """A command-line selection that is invalid or matches no leg."""


# Filter dimensions, in the order a selection narrows: name, plural, leg attribute, vocabulary.
DIMENSIONS: tuple[tuple[str, str, Callable[[Leg], str], tuple[str, ...] | None], ...] = (
    ("engine", "engines", lambda leg: leg.engine, ENGINES),
    ("platform", "platforms", lambda leg: leg.platform, None),
    ("flavor", "flavors", lambda leg: leg.flavor, FLAVORS),
    ("kind", "kinds", lambda leg: leg.kind, KINDS),
    ("config", "configs", lambda leg: leg.config, CONFIGS),
    ("source", "sources", lambda leg: leg.source, SOURCES),
)


@dataclass(frozen=True)
class Filters:
    """Each dimension holds the accepted values; empty means every value."""

    values: dict[str, tuple[str, ...]] = field(default_factory=dict)

    @classmethod
    def parse(cls, raw: dict[str, str], engines: Sequence[str] = ENGINES) -> "Filters":
        values: dict[str, tuple[str, ...]] = {}
        for name, _plural, _attr, vocabulary in DIMENSIONS:
            if name == "engine":
                vocabulary = tuple(engines)
            text = (raw.get(name) or "").strip()
            if not text or text == "all":
                continue
            values[name] = tuple(_canonical(name, token.strip(), vocabulary) for token in text.split(",") if token.strip())
        return cls(values)

    def describe(self, upto: str | None = None) -> str:
        parts = []
        for name, *_ in DIMENSIONS:
            if name == upto:
                break
            if name in self.values:
                parts.append(f"{name}={','.join(self.values[name])}")
        return " ".join(parts)


def _canonical(name: str, token: str, vocabulary: tuple[str, ...] | None) -> str:
    lowered = token.lower()
    if name == "platform":
        try:
            return canonical_platform(lowered)
        except VocabularyError:
            raise SelectionError(f"unknown platform {token!r}{suggest(lowered, platform_table().tokens)}: "
                                 f"platforms are {platform_table().examples()}") from None
    assert vocabulary is not None
    if lowered not in vocabulary:
        raise SelectionError(f"unknown {name} {token!r}{suggest(lowered, vocabulary)}; valid: {', '.join(vocabulary)}")
    return lowered


def _values(legs: Iterable[Leg], attr: Callable[[Leg], str]) -> list[str]:
    return sorted({attr(leg) for leg in legs})


def _engines_phrase(filters: Filters) -> str:
    return ", ".join(filters.values.get("engine", ())) or "the matrix"


def _empty_message(all_legs: Sequence[Leg], engine_legs: Sequence[Leg], current: Sequence[Leg], filters: Filters,
                   name: str, plural: str, attr: Callable[[Leg], str]) -> str:
    wanted = filters.values[name]
    shown = "/".join(wanted)
    if not any(attr(leg) in wanted for leg in engine_legs):
        return f"{_engines_phrase(filters)} ships no {shown} legs; {plural}: {', '.join(_values(engine_legs, attr))}"
    elsewhere = [leg for leg in engine_legs if attr(leg) in wanted]
    for other, *_ in DIMENSIONS:
        if other in (name, "engine", "platform") or other not in filters.values:
            continue
        elsewhere = [leg for leg in elsewhere if getattr(leg, other) in filters.values[other]] or elsewhere
    where = ", ".join(_values(elsewhere, lambda leg: leg.platform))
    narrowed = filters.describe(upto=name)
    return (f"{name}={shown} exists for {_engines_phrase(filters)} on {where}; "
            f"with {narrowed} the {plural} are: {', '.join(_values(current, attr)) or 'none'}")


def select(legs: Sequence[Leg], filters: Filters) -> list[Leg]:
    """Legs matching every filter, or a SelectionError naming what exists instead."""
    current = list(legs)
    engine_legs = current
    for name, plural, attr, _vocabulary in DIMENSIONS:
        if name not in filters.values:
            continue
        narrowed = [leg for leg in current if attr(leg) in filters.values[name]]
        if not narrowed:
            raise SelectionError(_empty_message(legs, engine_legs, current, filters, name, plural, attr))
        current = narrowed
        if name == "engine":
            engine_legs = current
    return current


def select_ids(legs: Sequence[Leg], ids: Sequence[str]) -> list[Leg]:
    by_id = {leg.id: leg for leg in legs}
    chosen = []
    for wanted in ids:
        if wanted not in by_id:
            raise SelectionError(f"unknown leg {wanted!r}{suggest(wanted, by_id)}; `scons list` shows every leg id")
        chosen.append(by_id[wanted])
    return chosen
