"""The `<archive>.json` manifest: what went into an archive and what is in it."""
from __future__ import annotations

from pathlib import Path
from typing import Mapping

from ..model.engine import Engine
from ..model.plan import Plan
from .files import list_tree, sha256_file


def leg_record(plan: Plan) -> dict[str, object]:
    leg = plan.leg
    return {
        "id": leg.id, "engine": leg.engine, "platform": leg.platform, "kind": leg.kind, "config": leg.config,
        "flavor": leg.flavor, "accelerator": list(leg.accelerator), "source": leg.source, "runner": leg.runner,
        "experimental": leg.experimental, "requires": dict(leg.requires),
    }


def archive_manifest(plan: Plan, engine: Engine, archive: Path, stage: Path,
                     sources: list[Mapping[str, object]], steps: Mapping[str, object],
                     tools: Mapping[str, str]) -> dict[str, object]:
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
        "files": files,
    }
