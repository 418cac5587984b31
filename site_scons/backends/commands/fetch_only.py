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
from typing import Iterable, Sequence

from backends.graph.settings import Settings
from backends.model.plan import Download, Plan
from backends.steps import fetch as fetch_step
from backends.steps import git as git_step
from backends.util.textfit import format_table


@dataclass
class Fetched:
    rows: list[dict[str, str]] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)

    def summary(self) -> str:
        done = sum(1 for row in self.rows if row["state"] != "failed")
        text = f"{done} of {len(self.rows)} inputs fetched and verified"
        return text + (f"; {len(self.failures)} not: " + "; ".join(self.failures) if self.failures else "")


def unique_downloads(plans: Iterable[Plan]) -> list[tuple[str, Download]]:
    """(engine, download) once per pinned file name or git source, in first-use order."""
    seen: dict[tuple[str, str, str], tuple[str, Download]] = {}
    for plan in plans:
        for download in plan.downloads:
            key = (plan.leg.engine, download.kind, download.url if download.kind == "git" else download.filename)
            seen.setdefault(key, (plan.leg.engine, download))
    return list(seen.values())


def _fetch_file(download: Download, settings: Settings) -> Path:
    if not download.sha256:
        raise fetch_step.FetchError(f"{download.filename} has no sha256 pin: `scons lock` records it")
    return fetch_step.fetch(fetch_step.Download(download.url, download.filename, download.sha256),
                            fetch_step.FetchSettings(cache_dir=settings.cache, mirrors=settings.mirrors,
                                                     offline=settings.offline)).path


def _fetch_git(download: Download, settings: Settings, logs: Path) -> Path:
    if not download.commit:
        raise git_step.GitError(f"{download.url} at {download.ref} has no commit pin: `scons lock` records it")
    remotes = git_step.Remotes(settings.cache, settings.mirrors, settings.offline)
    git_step.fetch(download.url, download.commit, remotes, log=logs / f"fetch-{download.name}.log",
                   label=f"git {download.filename}")
    return remotes.mirror(download.url)


def _write_out(path: Path, download: Download, out: Path) -> None:
    if download.kind == "git":
        dest = out / git_step.repository_name(download.url)
        shutil.copytree(path, dest, dirs_exist_ok=True)
    else:
        out.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(path, out / download.filename)


def fetch_inputs(plans: Sequence[Plan], settings: Settings, logs: Path, mirror_out: Path | None = None) -> Fetched:
    """Fetch (and verify) each input of `plans` once; with `mirror_out`, lay it out there too."""
    done = Fetched()
    logs.mkdir(parents=True, exist_ok=True)
    for engine, download in unique_downloads(plans):
        what = f"{engine} {download.name}"
        try:
            path = _fetch_git(download, settings, logs) if download.kind == "git" else _fetch_file(download, settings)
            if mirror_out is not None:
                _write_out(path, download, mirror_out)
        except (fetch_step.FetchError, git_step.GitError, OSError) as error:
            done.failures.append(f"{what}: {error}")
            done.rows.append({"engine": engine, "input": download.name, "state": "failed", "pin": "",
                              "url": download.url})
            continue
        pin = download.commit if download.kind == "git" else download.sha256
        state = "upstream's build" if download.upstream else "fetched"
        done.rows.append({"engine": engine, "input": download.name, "state": state, "pin": pin[:12],
                          "url": download.url})
    return done


def report(done: Fetched) -> str:
    return format_table(done.rows, fit=False) + "\n" + done.summary() if done.rows else done.summary()
