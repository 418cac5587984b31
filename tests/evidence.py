"""Reading a plan's accelerator evidence in tests: what its contract requires and forbids."""
from __future__ import annotations

from backends.model.plan import Evidence, Plan


def shown(plan: Plan, accelerator: str) -> Evidence:
    """The evidence of `accelerator` the leg's archive must show."""
    return next(e for e in plan.contract.accelerators if e.accelerator == accelerator)


def foreign(plan: Plan, accelerator: str) -> Evidence:
    """The evidence of `accelerator` the leg's archive must not show."""
    return next(e for e in plan.contract.foreign_accelerators if e.accelerator == accelerator)
