"""From the command line to an invocation: what to do and for which legs (no SCons import)."""
from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping, Sequence

from .host import Host
from .model.leg import Leg
from .model.matrix import Matrix
from .model.plan import Plan
from .model.recipes import plan_all
from .model.selection import Filters, SelectionError, select, select_ids
from .options import OPTION_NAMES, OPTIONS, parse_bool

COMMANDS = ("list", "ci-matrix")


@dataclass(frozen=True)
class Settings:
    cache: Path
    mirrors: tuple[str, ...]
    offline: bool
    lock: bool
    verbose: bool
    wait: bool
    format: str
    inputs: str
    heavy_jobs: int
    version: str
    origins: Mapping[str, str]


@dataclass(frozen=True)
class Invocation:
    mode: str  # build | list | ci-matrix | plan | gc
    plans: tuple[Plan, ...]
    settings: Settings

    @property
    def legs(self) -> tuple[Leg, ...]:
        return tuple(plan.leg for plan in self.plans)


def _check_option_names(arguments: Mapping[str, str]) -> None:
    unknown = sorted(set(arguments) - set(OPTION_NAMES))
    if unknown:
        raise SelectionError(f"unknown option{'s' if len(unknown) > 1 else ''} {', '.join(unknown)}; "
                             f"options: {', '.join(OPTION_NAMES)} (scons -h explains each)")


def _check_enum_options(arguments: Mapping[str, str]) -> None:
    for option in OPTIONS:
        value = arguments.get(option.name)
        if value is None:
            continue
        if option.boolean:
            try:
                parse_bool(option.name, value)
            except ValueError as error:
                raise SelectionError(str(error)) from None
        elif option.name in ("format", "inputs") and value not in option.allowed:
            raise SelectionError(f"unknown {option.name} {value!r}; valid: {', '.join(option.allowed)}")


def parse_origins(text: str) -> dict[str, str]:
    """`[<source>=]<path-or-url>,...`; an unnamed origin replaces the leg's main download."""
    origins: dict[str, str] = {}
    for item in filter(None, (part.strip() for part in text.split(","))):
        name, sep, location = item.partition("=")
        if sep and "/" not in name and ":" not in name:
            origins[name] = location
        else:
            origins[""] = item
    return origins


def _settings(arguments: Mapping[str, str], root: Path) -> Settings:
    def value(name: str) -> str:
        return arguments.get(name, next(o.default for o in OPTIONS if o.name == name))

    heavy = value("heavy_jobs")
    if not heavy.isdigit() or int(heavy) < 1:
        raise SelectionError(f"heavy_jobs={heavy!r} must be a positive integer")
    cache = Path(value("cache"))
    return Settings(
        cache=cache if cache.is_absolute() else root / cache,
        mirrors=tuple(m for m in value("mirror").split(",") if m),
        offline=parse_bool("offline", value("offline")),
        lock=parse_bool("lock", value("lock")),
        verbose=parse_bool("verbose", value("verbose")),
        wait=parse_bool("wait", value("wait")),
        format=value("format"),
        inputs=value("inputs"),
        heavy_jobs=int(heavy),
        version=value("version"),
        origins=parse_origins(value("origin")),
    )


def _is_leg_like(target: str, engines: Sequence[str]) -> bool:
    return any(target.startswith(f"{engine}-") for engine in engines)


def _select(matrix: Matrix, arguments: Mapping[str, str], leg_targets: Sequence[str], host: Host,
            building: bool) -> list[Leg]:
    if leg_targets:
        return select_ids(matrix.legs, leg_targets)
    raw = dict(arguments)
    if building:
        # Building means this host's default packages unless told otherwise.
        raw.setdefault("platform", host.platform)
        raw.setdefault("flavor", "cpu")
    return select(matrix.legs, Filters.parse(raw, tuple(matrix.engines)))


def _check_version_override(legs: Sequence[Leg], version: str) -> None:
    engines = sorted({leg.engine for leg in legs})
    if version and len(engines) != 1:
        raise SelectionError(f"version={version} overrides one engine's pin; the selection has {', '.join(engines)}: "
                             "add engine=<name>")


def check_buildable(legs: Sequence[Leg], host: Host, environ: Mapping[str, str]) -> None:
    """Fail fast, naming the runner, for legs this host cannot build."""
    for leg in legs:
        if not host.can_build(leg):
            runner_os, runner_arch = leg.runner_host
            raise SelectionError(
                f"{leg.id} builds on {leg.runner} ({runner_os}-{runner_arch}); this host is {host.platform}. "
                f"`scons plan=1 {leg.id}` shows its commands, `scons list` what builds here")
        if leg.toolchain == "android" and not environ.get("ANDROID_NDK_HOME"):
            raise SelectionError(f"{leg.id} needs the Android NDK (toolchain android): set ANDROID_NDK_HOME (NDK r27b)")


def resolve(arguments: Mapping[str, str], targets: Sequence[str], matrix: Matrix, root: Path, host: Host,
            environ: Mapping[str, str] | None = None) -> Invocation:
    environ = os.environ if environ is None else environ
    _check_option_names(arguments)
    _check_enum_options(arguments)
    settings = _settings(arguments, root)
    commands = [t for t in targets if t in COMMANDS]
    if len(commands) > 1:
        raise SelectionError(f"choose one of {', '.join(COMMANDS)}")
    plan_only = parse_bool("plan", arguments.get("plan", "0"))
    collect = parse_bool("gc", arguments.get("gc", "0"))
    mode = commands[0] if commands else ("plan" if plan_only else "gc" if collect else "build")
    leg_targets = [t for t in targets if _is_leg_like(t, tuple(matrix.engines))]
    legs = _select(matrix, arguments, leg_targets, host, building=(mode == "build"))
    _check_version_override(legs, settings.version)
    if mode == "build":
        check_buildable(legs, host, environ)
        if settings.inputs == "build":
            inputs = [matrix.leg(i) for leg in legs for i in leg.inputs]
            check_buildable([leg for leg in inputs if host.can_build(leg)], host, environ)
    plans = plan_all(matrix, legs, settings.version or None)
    return Invocation(mode=mode, plans=tuple(plans), settings=settings)
