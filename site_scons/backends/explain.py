"""Explaining legs without building: `scons list`, `scons ci-matrix`, `scons plan=1`."""
from __future__ import annotations

import json
import os
from pathlib import Path
from typing import TYPE_CHECKING, Iterable, Mapping, Sequence

from .ci import LAUNCHER_VARIABLES, compiler_launcher, probes
from .host import Host
from .legkey import LegKey, leg_keys
from .model.matrix import Matrix
from .model.leg import Leg
from .model.plan import Bundle, Command, Download, Plan
from .run import DEFAULT_ALLOW, POLICY_FLOOR_KEY, POLICY_FLOOR_VALUE
from .steps.upstream import SETTINGS_PREFIX, SITE_SCONS
from .steps.verify import summary

if TYPE_CHECKING:
    from .frontend import Invocation


def _yes_no(flag: bool) -> str:
    return "yes" if flag else "no"


def list_rows(plans: Sequence[Plan], host: Host, keys: Mapping[str, LegKey] | None = None) -> list[dict[str, str]]:
    rows = []
    for plan in plans:
        leg = plan.leg
        run_mode = host.run_mode(leg, plan.smoke)
        rows.append({
            "leg": leg.id,
            "archive": plan.archive,
            "source": leg.source,
            "accelerator": ",".join(leg.accelerator) or "-",
            "runner": leg.runner,
            "builds here": _yes_no(host.can_build(leg)),
            "runs here": run_mode if run_mode else ("no" if leg.can_run else "never"),
            **({"key": keys[leg.id].short} if keys else {}),
        })
    return rows


def format_table(rows: Sequence[dict[str, str]]) -> str:
    if not rows:
        return "(no legs)"
    headers = list(rows[0])
    widths = {h: max(len(h), *(len(r[h]) for r in rows)) for h in headers}
    lines = ["  ".join(h.ljust(widths[h]) for h in headers).rstrip()]
    lines.append("  ".join("-" * widths[h] for h in headers))
    lines += ["  ".join(r[h].ljust(widths[h]) for h in headers).rstrip() for r in rows]
    return "\n".join(lines)


def choose_text(plans: Sequence[Plan], host: Host) -> str:
    """What bare `scons` says: the legs this host would build, and how to pick some."""
    buildable = [plan for plan in plans if host.can_build(plan.leg)]
    quick = [plan.leg.id for plan in buildable if plan.leg.source == "prebuilt"]  # minutes, not hours
    example = (quick or [plan.leg.id for plan in buildable] or ["<leg id>"])[0]
    lines = [f"scons: nothing selected. The default packages this host ({host.platform}) builds:", "",
             format_table(list_rows(buildable, host)), "",
             f"Build one:        scons <leg id>            e.g. scons {example} (prebuilt: quick)",
             "Or a selection:   scons engine=<engine> [platform=... flavor=... kind=...]",
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
        return "\n\n".join(render_plan(plan) for plan in plans)
    if invocation.mode == "choose":
        return choose_text(plans, host)
    if invocation.mode not in ("list", "ci-matrix", "key"):
        return None
    keys = leg_keys(list(plans), matrix, root, version=settings.version, fmt=settings.format,
                    origins=settings.origins)
    if invocation.mode == "list":
        return format_table(list_rows(plans, host, keys))
    if invocation.mode == "ci-matrix":
        return ci_matrix(plans, keys)
    return "\n".join(keys[plan.leg.id].describe() for plan in plans)


def _command_text(command: Command) -> list[str]:
    lines = [f"    [{command.label}] (cwd {command.cwd})"]
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


def render_plan(plan: Plan) -> str:
    leg = plan.leg
    lines = [f"{leg.id} -> dist/{plan.archive}", f"  {_leg_facts(leg)}"]
    if leg.requires:
        lines.append("  requires: " + "; ".join(f"{k} {v}" for k, v in leg.requires.items()))
    lines.append("  steps: " + " -> ".join(plan.steps))
    if leg.inputs:
        lines.append("  inputs: " + ", ".join(leg.inputs))
    for download in plan.downloads:
        lines.append(f"  fetch {download.name}: {download.url} ({_pin_text(download)})")
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
    else:
        lines.append("  smoke: not run: " + ("the leg cannot run on any CI host" if not leg.can_run
                                              else "no consumer program for this package form"))
    lines += [f"  note: {note}" for note in plan.notes]
    lines += [f"  warning: {warning}" for warning in plan.warnings]
    return "\n".join(lines)

