"""Explaining legs without building: `scons list`, `scons ci-matrix`, `scons plan=1`."""
from __future__ import annotations

import json
from typing import Iterable, Sequence

from .host import Host
from .model.leg import Leg
from .model.plan import Command, Plan
from .steps.verify import summary


def _yes_no(flag: bool) -> str:
    return "yes" if flag else "no"


def list_rows(plans: Sequence[Plan], host: Host) -> list[dict[str, str]]:
    rows = []
    for plan in plans:
        leg = plan.leg
        run_mode = host.run_mode(leg)
        rows.append({
            "leg": leg.id,
            "archive": plan.archive,
            "source": leg.source,
            "accelerator": ",".join(leg.accelerator) or "-",
            "runner": leg.runner,
            "builds here": _yes_no(host.can_build(leg)),
            "runs here": run_mode if run_mode else ("no" if leg.can_run else "never"),
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


def ci_entry(plan: Plan) -> dict[str, object]:
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
    }


def ci_matrix(plans: Iterable[Plan]) -> str:
    return json.dumps({"include": [ci_entry(p) for p in plans]}, indent=None, separators=(",", ":"))


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


def render_plan(plan: Plan) -> str:
    leg = plan.leg
    lines = [f"{leg.id} -> dist/{plan.archive}", f"  {_leg_facts(leg)}"]
    if leg.requires:
        lines.append("  requires: " + "; ".join(f"{k} {v}" for k, v in leg.requires.items()))
    lines.append("  steps: " + " -> ".join(plan.steps))
    if leg.inputs:
        lines.append("  inputs: " + ", ".join(leg.inputs))
    for download in plan.downloads:
        pin = f"sha256 {download.sha256}" if download.sha256 else "sha256 unpinned (lock=1 records it)"
        if download.kind == "git":
            pin = f"ref {download.ref}" + (f" commit {download.commit}" if download.commit else "")
        lines.append(f"  fetch {download.name}: {download.url} ({pin})")
    for patch in plan.patches:
        until = f" (needed up to {patch.until}; skipped when upstream has it)" if patch.until else ""
        lines.append(f"  patch {patch.name}: {patch.reason}{until}")
    if plan.env:
        lines += [f"  env {key}={value}" for key, value in plan.env.items()]
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
        lines.append(f"  bundle static libraries under {plan.bundle.libraries_from} -> {plan.bundle.output}"
                     + (f" (excluding /{plan.bundle.exclude}/)" if plan.bundle.exclude else ""))
    if plan.fixups:
        lines.append("  fixup:")
        for command in plan.fixups:
            lines += _command_text(command)
    lines.append("  verify: " + "; ".join(summary(plan.contract)))
    if plan.smoke:
        defines = " ".join(f"-D{k}={v}" for k, v in plan.smoke.defines.items())
        lines.append(f"  smoke: {plan.smoke.project} {defines}".rstrip())
    else:
        lines.append("  smoke: not run: " + ("the leg cannot run on any CI host" if not leg.can_run
                                              else "no consumer program for this package form"))
    lines += [f"  note: {note}" for note in plan.notes]
    return "\n".join(lines)

