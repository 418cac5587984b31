"""The end-of-run summary: what happened to every selected leg, the failure's log last.

Steps report into one `Summary` while SCons runs them; `render` turns it into the lines
printed when the run ends (also after a failure), one per leg:

    published   <leg>  dist/<archive> (<size>, <n> files)[; stored in <binary caches>]
    restored    <leg>  dist/<archive> (...) from <binary cache> (key <short key>)
    up to date  <leg>  dist/<archive>[ restored from <binary cache> (key <short key>)][; stored in <binary caches>]
    failed      <leg>  <step> failed; log: <path>
    withdrawn   <leg>  dist/<archive> moved to dist/.stale/ (its rebuild did not finish)
    not run     <leg>  smoke not run: <reason>   (in addition to published/up to date)
    note        <leg>  smoke: <note>             (e.g. an accelerator runtime this runner lacks)
"""
from __future__ import annotations

import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

from backends.util.files import relative_label


@dataclass
class _Leg:
    steps: list[str] = field(default_factory=list)
    failed: tuple[str, Path] | None = None
    published: str = ""
    withdrawn: list[str] = field(default_factory=list)
    smoke_not_run: str = ""
    smoke_notes: list[str] = field(default_factory=list)
    restored: str = ""  # the binary cache and the key it came from
    stored: list[str] = field(default_factory=list)


class Summary:
    def __init__(self, root: Path) -> None:
        self.root = root
        self._legs: dict[str, _Leg] = {}
        self._lock = threading.Lock()

    def _leg(self, leg_id: str) -> _Leg:
        return self._legs.setdefault(leg_id, _Leg())

    def step_done(self, leg_id: str, step: str) -> None:
        with self._lock:
            self._leg(leg_id).steps.append(step)

    def step_failed(self, leg_id: str, step: str, log: Path) -> None:
        with self._lock:
            self._leg(leg_id).failed = (step, log)

    def published(self, leg_id: str, archive: Path, files: int) -> None:
        size = archive.stat().st_size
        with self._lock:
            self._leg(leg_id).published = f"dist/{archive.name} ({size / 1e6:.1f} MB, {files} files)"

    def restored(self, leg_id: str, store: str, key: str) -> None:
        """The leg's archive is (or becomes) a binary cache entry's: said as it is published, and
        when it is up to date."""
        with self._lock:
            self._leg(leg_id).restored = f"from {store} (key {key})"

    def stored(self, leg_id: str, stores: list[str]) -> None:
        with self._lock:
            self._leg(leg_id).stored = list(stores)

    def withdrawn(self, leg_id: str, names: list[str]) -> None:
        with self._lock:
            self._leg(leg_id).withdrawn += names

    def smoke(self, leg_id: str, result: dict[str, object]) -> None:
        notes = result.get("notes")
        with self._lock:
            if result.get("status") == "not run":
                self._leg(leg_id).smoke_not_run = str(result.get("reason", ""))
            if isinstance(notes, list):
                self._leg(leg_id).smoke_notes = [str(note) for note in notes]

    def render(self, legs: dict[str, Path], failed_elsewhere: Sequence[str] = ()) -> list[str]:
        """Lines for the selected legs (leg id -> its dist/ archive path), failures last."""
        lines: list[tuple[int, str]] = []
        last_log = ""
        width = max((len(leg) for leg in legs), default=0)
        for leg_id, archive in legs.items():
            state = self._legs.get(leg_id, _Leg())
            name = leg_id.ljust(width)
            if state.failed:
                step, log = state.failed
                last_log = relative_label(log, self.root)
                lines.append((2, f"  failed      {name}  {step} failed; log: {last_log}"))
                if state.withdrawn:
                    lines.append((2, f"  withdrawn   {name}  dist/{archive.name} moved to dist/.stale/ "
                                     "(its rebuild did not finish)"))
                continue
            stored = f"; stored in {', '.join(state.stored)}" if state.stored else ""
            if state.published and state.restored:
                lines.append((0, f"  restored    {name}  {state.published} {state.restored}"))
            elif state.published:
                lines.append((0, f"  published   {name}  {state.published}{stored}"))
            elif archive.is_file():
                restored = f" restored {state.restored}" if state.restored else ""
                lines.append((0, f"  up to date  {name}  dist/{archive.name}{restored}{stored}"))
            else:
                lines.append((1, f"  not built   {name}  (a step it depends on failed)"))
            if state.smoke_not_run:
                lines.append((0, f"  not run     {name}  smoke: {state.smoke_not_run}"))
            lines += [(0, f"  note        {name}  smoke: {note}") for note in state.smoke_notes]
        ordered = [text for _, text in sorted(lines, key=lambda item: item[0])]
        ordered += [f"  failed      {text}" for text in failed_elsewhere]
        if last_log:
            ordered.append(f"the failure's log: {last_log}")
        return ["summary:", *ordered] if ordered else []
