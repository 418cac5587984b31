"""The `<archive>.json` manifest: what went into an archive and what is in it.

How long the leg's own build took (`durations`: seconds per step) goes only into the copy a
binary cache entry holds (actions.store), never into dist/'s manifest, whose bytes a clean
build must reproduce: a hit then says what it saved, and CI's plan job estimates the runner
minutes it spares (backends/ci/cache_hits.py).
"""
from __future__ import annotations

from pathlib import Path
from typing import Iterable, Mapping, Sequence

from backends.model.engine import Engine
from backends.model.plan import Plan
from backends.util.files import atomic_write_text, list_tree, sha256_file

# The steps whose time is the leg's build, the part a binary cache hit spares (downloads are
# shared, and verify and smoke run after the manifest is written).
DURATION_STEPS = ("build", "stage", "merge")
SECONDS_SUFFIX = ".seconds"


def leg_record(plan: Plan) -> dict[str, object]:
    leg = plan.leg
    return {
        "id": leg.id, "engine": leg.engine, "platform": leg.platform, "kind": leg.kind, "config": leg.config,
        "flavor": leg.flavor, "accelerator": list(leg.accelerator), "source": leg.source, "runner": leg.runner,
        "experimental": leg.experimental, "requires": dict(leg.requires),
    }


def archive_manifest(plan: Plan, engine: Engine, archive: Path, stage: Path,
                     sources: Sequence[Mapping[str, object]], steps: Mapping[str, object],
                     tools: Mapping[str, str]) -> dict[str, object]:
    from backends.steps import sbom

    files = [
        {"path": e.path, "size": e.size, "mode": oct(e.mode), **({"sha256": e.sha256} if e.sha256 else {}),
         **({"link": e.target} if e.target else {})}
        for e in list_tree(stage) if e.kind != "dir"
    ]
    return {
        "archive": archive.name,
        "sha256": sha256_file(archive),
        "size": archive.stat().st_size,
        "leg": leg_record(plan),
        "engine": {"name": engine.name, "libname": engine.libname, "version": engine.version,
                   "license": engine.license, "homepage": engine.homepage},
        "pins": dict(engine.pins),
        "sources": list(sources),
        "patches": [{"name": p.name, "file": p.file, "reason": p.reason, "upstream": p.upstream, "until": p.until}
                    for p in plan.patches],
        "steps": dict(steps),
        "tools": dict(tools),
        "licenses": [engine.license],
        **({"sbom": document} if (document := sbom.read(stage, plan)) else {}),  # the archive's SBOM (sbom.py)
        "files": files,
    }


# -- durations ------------------------------------------------------------------------------
# Kept beside the step's record, not in it: a record's bytes are what the next step depends
# on, and a time that differs on every run would rerun everything after a step that reran.

def note_seconds(step: str, record: Path, seconds: float) -> None:
    """Remember how long `step` took (DURATION_STEPS only), beside its record."""
    if step not in DURATION_STEPS:
        return
    try:
        atomic_write_text(record.with_suffix(SECONDS_SUFFIX), f"{seconds:.1f}\n")
    except OSError:
        pass  # a time is information, never a reason to fail the step


def step_seconds(steps_dir: Path, names: Iterable[str]) -> dict[str, float]:
    """The recorded seconds of each of `names` (a step without a readable time is left out)."""
    found: dict[str, float] = {}
    for name in names:
        try:
            found[name] = round(float((steps_dir / f"{name}{SECONDS_SUFFIX}").read_text().strip()), 1)
        except (OSError, ValueError):
            continue
    return found


def build_seconds(manifest: Mapping[str, object]) -> float | None:
    """The leg's build time in seconds as its manifest records it; None when it does not."""
    durations = manifest.get("durations")
    if not isinstance(durations, dict) or not durations:
        return None
    values = [value for value in durations.values() if isinstance(value, (int, float)) and not isinstance(value, bool)]
    return float(sum(values)) if values else None
