"""Which submodules a leg checks out of a git source whose `submodules` is "selected".

The engine's `[[submodules]]` entries say which paths a build needs and when: an entry
applies to a leg that matches its `when` (the leg facts patches test) and whose build turns
its `switch` on. The switches are read from the plan's own commands, so the selection
follows the configure flags: a switch is on when a command sets it to one of CMake's true
constants, `-DNAME=ON` in its argv or `NAME=1` in its environment (PyTorch's build reads
USE_* variables). A recipe whose arguments turn switches on indirectly (ExecuTorch's
`--preset ios`) declares that as `IMPLIED_SWITCHES`; a later `-DNAME=OFF` turns one off
again, as on CMake's command line.

The commits checked out are the gitlinks the superproject's tree records at its pinned
commit: the commit pin implies them, and the selected paths are part of the plan (so of
the leg key).
"""
from __future__ import annotations

from dataclasses import replace
from typing import Mapping, Sequence

from backends.model.engine import Engine, SubmoduleSpec
from backends.model.leg import Leg
from backends.model.plan import Command, Download, Plan
from backends.model.recipe_kit import facts

# CMake's true constants (compared upper-case), and the 1 an environment switch is set to.
TRUE = frozenset({"ON", "1", "TRUE", "YES", "Y"})
# An argument sequence (`("--preset", "ios")`) -> the switches it turns on.
Implied = Mapping[tuple[str, ...], Sequence[str]]


def _define(arg: str) -> tuple[str, str] | None:
    """`-DNAME=VALUE` or `-DNAME:TYPE=VALUE` -> (NAME, VALUE)."""
    if not arg.startswith("-D"):
        return None
    name, sep, value = arg[2:].partition("=")
    return (name.split(":", 1)[0], value) if sep else None


def command_switches(command: Command, plan_env: Mapping[str, str], implied: Implied) -> frozenset[str]:
    """The switches one command turns on, in argument order (a later -D wins), plus its environment's."""
    on = {name for name, value in {**plan_env, **command.env}.items() if value.upper() in TRUE}
    argv = command.argv
    for index, arg in enumerate(argv):
        for sequence, names in implied.items():
            if tuple(argv[index:index + len(sequence)]) == sequence:
                on.update(names)
        define = _define(arg)
        if define is not None:
            name, value = define
            if value.upper() in TRUE:
                on.add(name)
            else:
                on.discard(name)
    return frozenset(on)


def build_switches(plan: Plan, implied: Implied | None = None) -> frozenset[str]:
    """Every switch some build command of `plan` turns on."""
    found: frozenset[str] = frozenset()
    for command in plan.build:
        found |= command_switches(command, plan.env, implied or {})
    return found


def applying(engine: Engine, source: str, leg: Leg, switches: frozenset[str]) -> tuple[SubmoduleSpec, ...]:
    """The entries of `source` that select paths for `leg`."""
    leg_facts = facts(leg)
    return tuple(entry for entry in engine.submodules
                 if entry.source == source and entry.applies_to(leg_facts, switches))


def _narrowed(download: Download, engine: Engine, leg: Leg, switches: frozenset[str]) -> Download:
    paths = tuple(sorted({path for entry in applying(engine, download.name, leg, switches) for path in entry.paths}))
    return replace(download, submodules=bool(paths), submodule_paths=paths)


def with_selected_submodules(plan: Plan, engine: Engine, implied: Implied | None = None) -> Plan:
    """`plan` with each git download of a "selected" source narrowed to the paths its leg needs."""
    def selects(download: Download) -> bool:
        spec = engine.sources.get(download.name)
        return download.kind == "git" and spec is not None and spec.select_submodules

    if not any(selects(download) for download in plan.downloads):
        return plan
    switches = build_switches(plan, implied)
    return replace(plan, downloads=tuple(_narrowed(d, engine, plan.leg, switches) if selects(d) else d
                                         for d in plan.downloads))


def advice(engine: Engine, source: str, path: str) -> str:
    """What to edit when a build needs the unselected submodule `path` of `source`."""
    where = f"engines/{engine.name}/engine.toml"
    listing = [entry.label for entry in engine.submodules if entry.source == source and path in entry.paths]
    if listing:
        return (f"{where} lists it in {', '.join(listing)}, which this leg does not meet: widen that entry's "
                f"condition, or add \"{path}\" to the paths of an entry of source {source!r} that applies to this leg")
    return (f"add \"{path}\" to the paths of the [[submodules]] entry of source {source!r} in {where} whose "
            "switch (or when) is what makes the build read it, or add an entry with that switch")
