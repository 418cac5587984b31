"""`scons fetch [filters | leg ids]`: download and verify every input the selected legs need,
build nothing.

Every pinned file (upstream's build-time downloads included) goes through the download
cache as a build would fetch it (`mirror=`, `offline=1`, the same limits); every git source
at its pinned commit into the cache's git mirror. Nothing is recorded: an unpinned input is
listed (`scons lock` pins it) and the command exits non-zero while one is left. With
`mirror_out=DIR` each input is also written in the layout `mirror=` reads: a file as
`DIR/<its pinned file name>`, a git source as a bare clone `DIR/<repository name>` (its
submodules are fetched by the checkout that needs them, not here).
"""
from __future__ import annotations

import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

from backends.graph.settings import Settings
from backends.model.matrix import Matrix
from backends.model.plan import Plan
from backends.pins.inputs import GIT, Input, collect
from backends.steps import fetch as fetch_step
from backends.steps import git as git_step
from backends.util.files import link_into_place
from backends.util.textfit import format_table


@dataclass
class Fetched:
    rows: list[dict[str, str]] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)

    def summary(self) -> str:
        done = sum(1 for row in self.rows if row["state"] != "failed")
        text = f"{done} of {len(self.rows)} inputs fetched and verified"
        return text + (f"; {len(self.failures)} not: " + "; ".join(self.failures) if self.failures else "")


def _fetch_file(item: Input, settings: Settings) -> Path:
    if not item.pin:
        raise fetch_step.FetchError(f"{item.name} has no sha256 pin: `scons lock` records it")
    return fetch_step.fetch(fetch_step.Download(item.url, item.key, item.pin),
                            fetch_step.FetchSettings(cache_dir=settings.cache, mirrors=settings.mirrors,
                                                     offline=settings.offline)).path


def _fetch_git(item: Input, settings: Settings, logs: Path) -> Path:
    if not item.pin:
        raise git_step.GitError(f"{item.url} at {item.ref} has no commit pin: `scons lock` records it")
    remotes = git_step.Remotes(settings.cache, settings.mirrors, settings.offline)
    git_step.fetch(item.url, item.pin, remotes, log=logs / f"fetch-{item.source}.log", label=f"git {item.source}")
    return remotes.mirror(item.url)


def _write_out(path: Path, item: Input, out: Path) -> None:
    if item.kind == GIT:
        shutil.copytree(path, out / git_step.repository_name(item.url), dirs_exist_ok=True)
        return
    link_into_place(path, out / item.key)


def fetch_inputs(plans: Sequence[Plan], matrix: Matrix, settings: Settings, logs: Path) -> Fetched:
    """Fetch (and verify) each input of `plans` once, the files other files name included
    (pins.inputs.collect, as `scons pins` counts them); with `settings.mirror_out`, lay it out there too."""
    done = Fetched()
    logs.mkdir(parents=True, exist_ok=True)
    upstreams = {(plan.leg.engine, d.name) for plan in plans for d in plan.downloads if d.upstream}
    for item in collect(plans, matrix):
        try:
            path = _fetch_git(item, settings, logs) if item.kind == GIT else _fetch_file(item, settings)
            if settings.mirror_out is not None:
                _write_out(path, item, settings.mirror_out)
        except (fetch_step.FetchError, git_step.GitError, OSError) as error:
            done.failures.append(f"{item.label}: {error}")
            done.rows.append({"engine": item.engine, "input": item.name, "state": "failed", "pin": "", "url": item.url})
            continue
        state = "upstream's build" if (item.engine, item.source) in upstreams else "fetched"
        done.rows.append({"engine": item.engine, "input": item.name, "state": state, "pin": item.pin[:12],
                          "url": item.url})
    return done


def report(done: Fetched) -> str:
    return format_table(done.rows, fit=False) + "\n" + done.summary() if done.rows else done.summary()
