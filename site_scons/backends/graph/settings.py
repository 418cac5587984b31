"""What one run was asked to do: the settings every step of the run shares (resolved and checked
by commands.invocation before anything is written) and the plans of the selected legs."""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping

from backends.cache.trust import Signer, Trust
from backends.model.leg import Leg
from backends.model.plan import Plan


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
    binary_caches: tuple[str, ...] = ()
    binary_cache_write: bool = True
    lock_minutes: int = 0  # `scons lock`: no fetch starts after this long (0: no bound)
    signer: Signer | None = None  # signs what is stored
    trust: Trust = Trust(frozenset())  # whose entries are restored
    mirror_out: Path | None = None  # `scons fetch`: also lay every input out here, as mirror= reads it


@dataclass(frozen=True)
class Invocation:
    mode: str  # build | choose (bare `scons`) | list | ci-matrix | pins | lock | affected | plan | key | gc
    plans: tuple[Plan, ...]
    settings: Settings
    # Leg ids typed with aliases (`libtorch-linux-x64-shared`) -> the canonical id: SCons is
    # given an alias of that spelling, so it builds what the typed target means.
    spellings: Mapping[str, str] = dataclasses.field(default_factory=dict)

    @property
    def legs(self) -> tuple[Leg, ...]:
        return tuple(plan.leg for plan in self.plans)
