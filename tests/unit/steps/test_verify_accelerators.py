"""Every variant class in `scons list` told apart from its CPU sibling at the binary level,
in both directions, on binaries of the leg's own format (ELF, Mach-O, PE, iOS slices).

The legs come from variants/*.toml and the evidence from engines/contracts.toml, so a new
variant row is covered the day it is added. Real upstream binaries of the classes the
registries carry are checked in tests/e2e/test_contracts_on_real_binaries.py.
"""
from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from backends.model.contract_data import load_contract_data
from backends.model.matrix import load_matrix
from backends.model.plan import Contract, Plan
from backends.model.recipes import plan_all
from backends.steps.verify import check
from binaries import evidence_members, zip_members

ROOT = Path(__file__).resolve().parents[3]
MATRIX = load_matrix(ROOT)
PLANS = {plan.leg.id: plan for plan in plan_all(MATRIX)}
VARIANTS = sorted(i for i, p in PLANS.items() if p.leg.flavor != "cpu")


def cpu_sibling(plan: Plan) -> Plan:
    leg = plan.leg
    (sibling,) = [p for p in PLANS.values() if p.leg.flavor == "cpu" and
                  (p.leg.engine, p.leg.platform, p.leg.kind, p.leg.config) == (leg.engine, leg.platform, leg.kind, leg.config)]
    return sibling


def evidence_only(plan: Plan) -> Contract:
    """The leg's contract reduced to what tells accelerators apart (the evidence files are
    placeholders: no binary format check)."""
    contract = plan.contract
    return replace(Contract(), accelerators=contract.accelerators, foreign_accelerators=contract.foreign_accelerators,
                   relocatable=False)


@pytest.mark.parametrize("leg_id", VARIANTS)
def test_every_accelerator_of_a_variant_has_binary_evidence(leg_id):
    plan = PLANS[leg_id]
    shown = {e.accelerator: e for e in plan.contract.accelerators}
    assert set(shown) == set(plan.leg.accelerator)
    for accelerator, evidence in shown.items():
        assert evidence.symbols or evidence.links or evidence.targets, f"{leg_id}: {accelerator} has no binary evidence"


@pytest.mark.parametrize("engine", sorted(MATRIX.engines))
def test_every_cpu_package_forbids_every_accelerator_of_its_engine(engine):
    """LiteRT, Android, WASM and the rest: CPU packages everywhere, checked in their binaries."""
    table = load_contract_data(ROOT / "engines" / "contracts.toml").evidence[engine]
    for plan in PLANS.values():
        if plan.leg.engine == engine and plan.leg.flavor == "cpu":
            foreign = {e.accelerator: e for e in plan.contract.foreign_accelerators}
            assert set(foreign) == set(table), plan.leg.id
            assert all(e.symbols or e.links or e.targets for e in foreign.values()), plan.leg.id


@pytest.mark.parametrize("leg_id", VARIANTS)
def test_cpu_siblings_forbid_the_variants_accelerators(leg_id):
    cpu = cpu_sibling(PLANS[leg_id])
    assert cpu.contract.accelerators == ()
    assert set(PLANS[leg_id].leg.accelerator) <= {e.accelerator for e in cpu.contract.foreign_accelerators}


@pytest.fixture(scope="module")
def packages(tmp_path_factory):
    """(variant package, variant package without its files) per variant leg, made once."""
    made: dict[str, tuple[Path, Path]] = {}

    def make(leg_id: str) -> tuple[Path, Path]:
        if leg_id not in made:
            plan = PLANS[leg_id]
            work = tmp_path_factory.mktemp(leg_id)
            full = evidence_members(work / "full", plan.contract.platform, plan.contract.accelerators)
            binary_only = evidence_members(work / "binary", plan.contract.platform, plan.contract.accelerators,
                                           files=False)
            made[leg_id] = (zip_members(work / "variant.zip", full), zip_members(work / "binary-only.zip", binary_only))
        return made[leg_id]
    return make


@pytest.mark.parametrize("leg_id", VARIANTS)
def test_the_variant_package_passes_its_own_contract(packages, leg_id):
    variant, _ = packages(leg_id)
    assert check(variant, evidence_only(PLANS[leg_id]), "1.0.0") == []


@pytest.mark.parametrize("leg_id", VARIANTS)
def test_a_variant_binary_under_the_cpu_name_fails(packages, leg_id):
    variant, _ = packages(leg_id)
    problems = check(variant, evidence_only(cpu_sibling(PLANS[leg_id])), "1.0.0")
    for accelerator in PLANS[leg_id].leg.accelerator:
        assert any(f"{accelerator} evidence" in p or f"{accelerator} is compiled in" in p or
                   f"{accelerator} is linked in" in p for p in problems), (accelerator, problems)


@pytest.mark.parametrize("leg_id", VARIANTS)
def test_header_removed_but_binary_kept_still_fails(packages, leg_id):
    _, binary_only = packages(leg_id)
    problems = check(binary_only, evidence_only(cpu_sibling(PLANS[leg_id])), "1.0.0")
    for accelerator in PLANS[leg_id].leg.accelerator:
        assert any(accelerator in p for p in problems), (accelerator, problems)
    assert not any(p.startswith("include/") for p in problems)


@pytest.mark.parametrize("leg_id", VARIANTS)
def test_a_cpu_binary_under_the_variant_name_fails(tmp_path, leg_id):
    plan = PLANS[leg_id]
    cpu = zip_members(tmp_path / "cpu.zip", evidence_members(tmp_path, plan.contract.platform, ()) or {"README": b""})
    problems = check(cpu, evidence_only(plan), "1.0.0")
    for evidence in plan.contract.accelerators:
        missing = [p for p in problems if p.startswith(f"{evidence.accelerator} evidence missing")]
        assert len(missing) == len(evidence.files) + len(evidence.symbols) + len(evidence.links) + \
            len(evidence.targets) + len(evidence.libraries)
