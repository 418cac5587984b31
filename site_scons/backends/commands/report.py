"""Explaining legs without building: `scons list`, `scons ci-matrix`, `scons plan=1`."""
from __future__ import annotations

import json
import os
from pathlib import Path
from typing import TYPE_CHECKING, Iterable, Mapping, Sequence

from backends.cache.key import LegKey, leg_keys
from backends.model.leg import Leg
from backends.model.matrix import Matrix
from backends.model.plan import Bundle, Command, Download, Plan
from backends.model.recipes import plan_all
from backends.model.runner_needs import BUILD_STEP_MINUTES, LAUNCHER_VARIABLES, compiler_launcher, probes
from backends.probes.host import Host
from backends.runner.run import DEFAULT_ALLOW, POLICY_FLOOR_KEY, POLICY_FLOOR_VALUE
from backends.steps.upstream import SETTINGS_PREFIX, SITE_SCONS
from backends.steps.verify import summary
from backends.util.textfit import format_table, wrap

if TYPE_CHECKING:
    from backends.graph.settings import Invocation


def _yes_no(flag: bool) -> str:
    return "yes" if flag else "no"


def cold_build(leg: Leg) -> str:
    """A cold build's estimated time on the leg's runner (`cold_hours`), and what happens when
    it is longer than CI's build step may run: the step stops, the compiler cache is saved,
    and a re-run continues from it. "-": well within a CI job."""
    if not leg.cold_hours:
        return "-"
    text = f"~{leg.cold_hours:g} h"
    if leg.cold_hours * 60 > BUILD_STEP_MINUTES:
        text += f" > {BUILD_STEP_MINUTES / 60:g} h: 2 CI runs"  # the re-run starts from the saved compiler cache
    return text


def list_rows(plans: Sequence[Plan], host: Host, keys: Mapping[str, LegKey] | None = None,
              archive: bool = False) -> list[dict[str, str]]:
    """`scons list`'s rows; the archive's name (long, and derived from the id) only when asked."""
    rows = []
    for plan in plans:
        leg = plan.leg
        run_mode = host.run_mode(leg, plan.smoke)
        rows.append({
            "leg": leg.id,
            **({"archive": plan.archive} if archive else {}),
            "source": leg.source,
            "accelerator": ",".join(leg.accelerator) or "-",
            "runner": leg.runner,
            "build": _yes_no(host.can_build(leg)),  # here, on this host
            "run": run_mode if run_mode else ("no" if leg.can_run else "never"),
            **({"key": keys[leg.id].short} if keys else {}),
            "cold build": cold_build(leg),  # last: it may hold spaces
        })
    return rows


def unpinned_inputs(plans: Sequence[Plan], matrix: Matrix, version: str = "") -> dict[str, list[str]]:
    """Each leg's inputs that have no pin (an aggregate's: its input legs' too), as `scons pins`
    counts them: a build of such a leg refuses them until `scons lock` records their pins."""
    from backends.pins.inputs import collect, unpinned
    missing: dict[str, list[str]] = {}
    for item in unpinned(collect(plans, matrix)):
        for leg in item.legs:
            missing.setdefault(leg, []).append(item.label)
    for plan in plans:
        if plan.leg.inputs:
            inputs = unpinned_inputs(plan_all(matrix, [matrix.leg(i) for i in plan.leg.inputs], version or None),
                                     matrix, version)
            missing[plan.leg.id] = [*missing.get(plan.leg.id, []), *(x for found in inputs.values() for x in found)]
    return {leg: found for leg, found in missing.items() if found}


def choose_text(plans: Sequence[Plan], host: Host, unpinned: Mapping[str, Sequence[str]]) -> str:
    """What bare `scons` says: the legs this host would build, those whose inputs are all
    pinned apart from those that need `scons lock` (or origin=) first, and a leg to try that
    can succeed here and now: a build never starts on an unpinned input."""
    buildable = [plan for plan in plans if host.can_build(plan.leg)]
    ready = [plan for plan in buildable if not unpinned.get(plan.leg.id)]
    waiting = [plan for plan in buildable if unpinned.get(plan.leg.id)]
    lines = [f"scons: nothing selected. The default packages this host ({host.platform}) builds:"]
    if ready:
        lines += ["", "Every input pinned: these build now.", format_table(list_rows(ready, host))]
    if waiting:
        lines += ["", "Unpinned inputs (`scons pins` lists them): these build once `scons lock <leg id>` has recorded",
                  "their pins (it fetches from upstream), or with lock=1 (records what this build fetches), or",
                  "with origin=<local file> standing in for each unpinned file.",
                  format_table(list_rows(waiting, host))]
    lines.append("")
    if ready:
        quick = [plan.leg.id for plan in ready if plan.leg.source == "prebuilt"]  # minutes, not hours
        example = f"scons {(quick or [plan.leg.id for plan in ready])[0]}" + (" (prebuilt: quick)" if quick
                                                                             else " (from source: long)")
        lines.append(f"Build one:        scons <leg id>            e.g. {example}")
    elif waiting:
        quick = [plan.leg.id for plan in waiting if plan.leg.source == "prebuilt"]
        leg = (quick or [plan.leg.id for plan in waiting])[0]
        lines.append(f"Build one:        no leg here has every input pinned: first scons lock {leg}, "
                     f"then scons {leg}")
    lines += ["Or a selection:   scons engine=<engine> [platform=... flavor=... kind=...]",
              "Every leg:        scons list               (scons -h for all options)"]
    return "\n".join(lines)


def ci_entry(plan: Plan, key: LegKey | None = None) -> dict[str, object]:
    leg = plan.leg
    return {
        "id": leg.id,
        "engine": leg.engine,
        "platform": leg.platform,
        "kind": leg.kind,
        "config": leg.config,
        "flavor": leg.flavor,
        "accelerator": ",".join(leg.accelerator),
        "source": leg.source,
        "runner": leg.runner,
        "toolchain": leg.toolchain,
        "msvc_arch": leg.msvc_arch,
        "can_run": leg.can_run,
        "experimental": leg.experimental,
        "publish": leg.publish,
        "needs": list(leg.inputs),
        "archive": plan.archive,
        "key": key.digest if key else "",
    }


def ci_matrix(plans: Iterable[Plan], keys: Mapping[str, LegKey] | None = None) -> str:
    return json.dumps({"include": [ci_entry(p, (keys or {}).get(p.leg.id)) for p in plans]}, indent=None,
                      separators=(",", ":"))


def explain(invocation: Invocation, matrix: Matrix, root: Path, host: Host) -> str | None:
    """What a mode other than building prints (None: build)."""
    plans, settings = invocation.plans, invocation.settings
    if invocation.mode == "plan":
        return "\n\n".join("\n".join(_wrapped(render_plan(plan))) for plan in plans)
    if invocation.mode == "choose":
        return choose_text(plans, host, unpinned_inputs(plans, matrix, settings.version))
    if invocation.mode not in ("list", "ci-matrix", "key"):
        return None
    keys = leg_keys(list(plans), matrix, root, version=settings.version, fmt=settings.format,
                    origins=settings.origins, lock=settings.lock)
    if invocation.mode == "list":  # verbose=1: with each archive's name, nothing shortened
        table = list_rows(plans, host, keys, archive=settings.verbose)
        return format_table(table, fit=not settings.verbose)
    if invocation.mode == "ci-matrix":
        return ci_matrix(plans, keys)
    return "\n".join(keys[plan.leg.id].describe() for plan in plans)


def _wrapped(text: str) -> list[str]:
    """A plan's lines within WIDTH columns; a command line continues with ` \\`."""
    return [part for line in text.splitlines()
            for part in wrap(line, command=line.startswith("      ") and not line.lstrip().startswith("env "))]


def _command_text(command: Command) -> list[str]:
    network = "" if command.network else ", network off"
    lines = [f"    [{command.label}] (cwd {command.cwd}{network})"]
    if command.env:
        lines.append("      env " + " ".join(f"{key}={_quote(value)}" for key, value in command.env.items()))
    lines.append("      " + " ".join(_quote(arg) for arg in command.argv))
    return lines


def _quote(arg: str) -> str:
    return f"'{arg}'" if (not arg or any(c in arg for c in " ;'\"$")) else arg


def _leg_facts(leg: Leg) -> str:
    facts = [f"source={leg.source}", f"runner={leg.runner}", f"toolchain={leg.toolchain}",
             f"can_run={_yes_no(leg.can_run)}"]
    if leg.accelerator:
        facts.append(f"accelerator={','.join(leg.accelerator)}")
    if leg.experimental:
        facts.append("experimental")
    if not leg.publish:
        facts.append("feeds aggregates only")
    if leg.cold_hours:
        facts.append(f"cold build {cold_build(leg)}")
    if leg.free_disk:
        facts.append("CI frees disk first")
    return " ".join(facts)


def _runner_env_text(plan: Plan) -> list[str]:
    """What the runner adds to every build and fixup command's environment beyond the plan's
    own (`command_env`), and what CI adds through it: printed so `plan=1` is the whole truth."""
    if not (plan.build or plan.fixups):
        return []
    lines = [f"  runner env: {POLICY_FLOOR_KEY}={POLICY_FLOOR_VALUE} (unless set above); "
             f"PYTHONPATH={SITE_SCONS}[{os.pathsep}the command's own] (this project's helpers); "
             f"{SETTINGS_PREFIX}* (the cache, mirror, offline and lock settings)",
             "  runner passes from the host, when set: " + " ".join(DEFAULT_ALLOW)]
    launcher = compiler_launcher(plan)
    if launcher:
        lines.append("  in CI also: " + " ".join(f"{name}={launcher}" for name in LAUNCHER_VARIABLES)
                     + " (backends.ci setup: the compiler cache, through the host variables above)")
    lines += [f"  in CI first: python -m backends.probes.{probe} --install (backends.ci setup; the build only probes)"
              for probe in probes(plan)]
    return lines


def _bundle_text(bundle: Bundle) -> str:
    text = f"  bundle static libraries under {bundle.libraries_from} -> {bundle.output}"
    if bundle.exclude:
        text += f" (excluding paths below it that match {bundle.exclude})"
    if bundle.tool or bundle.machine:
        text += f" with {bundle.tool or 'lib.exe (MSVC environment) or llvm-lib'}"
        text += f" /MACHINE:{bundle.machine}" if bundle.machine else ""
    return text


def _pin_text(download: Download) -> str:
    unpinned = "unpinned: `scons lock` records it"
    if download.kind == "git":
        return f"ref {download.ref}, commit {download.commit or unpinned}"
    text = f"{download.filename} sha256 {download.sha256 or unpinned}"
    if download.names:
        text += f"; its {download.names} names a further download, pinned under its own file name"
    return text


def _submodules_text(download: Download, engine: str) -> list[str]:
    """The submodules a git source is checked out with: every one, or the selected paths."""
    if not download.submodules:
        return []
    if not download.submodule_paths:
        return ["    submodules: every one, recursively"]
    return [f"    submodules: {len(download.submodule_paths)} selected by engines/{engine}/engine.toml [[submodules]], "
            "each at the commit the pinned commit records, with its own submodules; no other is fetched",
            *(f"      {path}" for path in download.submodule_paths)]


def render_plan(plan: Plan) -> str:
    leg = plan.leg
    lines = [f"{leg.id} -> dist/{plan.archive}", f"  {_leg_facts(leg)}"]
    if leg.requires:
        lines.append("  requires: " + "; ".join(f"{k} {v}" for k, v in leg.requires.items()))
    lines.append("  steps: " + " -> ".join(plan.steps))
    if leg.inputs:
        lines.append("  inputs: " + ", ".join(leg.inputs))
    for download in plan.downloads:
        upstream = download.upstream
        said = f"; upstream {upstream.upstream_hash or 'gives no hash'}, {upstream.where or upstream.reader}" \
            if upstream else ""
        lines.append(f"  fetch {download.name}: {download.url} ({_pin_text(download)}{said})")
        lines += _submodules_text(download, leg.engine)
    for patch in plan.patches:
        until = f" (needed up to {patch.until}; skipped when upstream has it)" if patch.until else ""
        lines.append(f"  patch {patch.name}: {patch.reason}{until}")
    if plan.env:
        lines += [f"  env {key}={value}" for key, value in plan.env.items()]
    lines += _runner_env_text(plan)
    if plan.build:
        lines.append("  build:")
        for command in plan.build:
            lines += _command_text(command)
    for rule in plan.collect:
        target = f"{rule.dest}/{rule.rename}" if rule.rename else rule.dest
        lines.append(f"  stage {rule.pattern} -> {target}" + ("" if rule.required else " (optional)"))
    if plan.exclude:
        lines.append("  stage drops " + ", ".join(plan.exclude))
    if plan.bundle:
        lines.append(_bundle_text(plan.bundle))
    if plan.fixups:
        lines.append("  fixup:")
        for command in plan.fixups:
            lines += _command_text(command)
    lines.append("  verify: " + "; ".join(summary(plan.contract)))
    if plan.smoke:
        defines = " ".join(f"-D{k}={v}" for k, v in plan.smoke.defines.items())
        lines.append(f"  smoke: {plan.smoke.project} {defines}".rstrip()
                     + f" (env: the host's allow-listed variables and {POLICY_FLOOR_KEY}={POLICY_FLOOR_VALUE})")
        if plan.smoke.probes:
            lines.append(f"  smoke probes {', '.join(plan.smoke.probes)} at run time: a runtime this runner lacks "
                         "is recorded, not failed")
    else:
        lines.append("  smoke: not run: " + ("the leg cannot run on any CI host" if not leg.can_run
                                              else "no consumer program for this package form"))
    lines += [f"  note: {note}" for note in plan.notes]
    lines += [f"  warning: {warning}" for warning in plan.warnings]
    return "\n".join(lines)

