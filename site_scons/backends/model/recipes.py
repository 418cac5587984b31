"""Loading engine recipes (`engines/<engine>/recipe.py`) and planning every leg."""
from __future__ import annotations

import importlib.util
import re
from dataclasses import replace
from functools import lru_cache
from pathlib import Path
from types import ModuleType

from backends.model.contract_data import contracts_file, load_contract_data, with_contract_data
from backends.model.engine import DataError, Engine
from backends.model.leg import Leg
from backends.model.matrix import AGGREGATE_SLICES, Matrix
from backends.model.plan import Contract, Plan, Smoke
from backends.model.submodules import with_selected_submodules
from backends.model.vocab import split_platform


@lru_cache(maxsize=None)
def _load_recipe(path: Path) -> ModuleType:
    spec = importlib.util.spec_from_file_location(f"anira_recipe_{path.parent.name}", path)
    if spec is None or spec.loader is None:
        raise DataError(f"cannot load recipe {path}")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    if not callable(getattr(module, "plan", None)):
        raise DataError(f"{path} defines no plan(leg, engine, archive) function")
    return module


DEBUG_CRT_NOTE = (
    "smoke: smoke/common.cmake copies the debug CRT next to the Debug program, from the MSVC developer "
    "environment: $VCToolsRedistDir/debug_nonredist/<arch>/Microsoft.VC*.DebugCRT/*.dll (vcruntime140d, "
    "msvcp140d, ...) and $WindowsSdkDir/bin/$WindowsSDKVersion/<arch>/ucrt/ucrtbased.dll"
)


def archive_name(leg: Leg, engine: Engine) -> str:
    """Plans name the zip; other formats swap the extension (graph.published_name)."""
    return f"{leg.archive_stem(engine.libname, engine.version)}.zip"


def _aggregate_plan(leg: Leg, engine: Engine, matrix: Matrix, archive: str) -> Plan:
    slice_plans = [plan_leg(matrix.leg(i), engine, matrix) for i in leg.inputs]
    first = slice_plans[0].contract
    if leg.aggregate == "universal":
        contract = first
        headers = split_platform(AGGREGATE_SLICES["universal"][-1])[1]  # the tree universal_tree copies from
        notes = (f"lipo every Mach-O file under lib/ of {' + '.join(leg.inputs)}; include/ from the {headers} slice",)
        smoke = slice_plans[-1].smoke
    else:
        abis = [p.split("-", 1)[1] for p in AGGREGATE_SLICES["android-bundle"]]
        # The bundle holds include/ and each ABI's libraries (docs/upstream.md#android-bundle),
        # not the slices' lib/cmake.
        libraries = [p for p in first.required if p.startswith("lib/") and p.count("/") == 1]
        required = tuple(p for p in first.required if not p.startswith("lib/"))
        required += tuple(f"lib/{abi}/{Path(p).name}" for abi in abis for p in libraries)
        contract = replace(first, required=required, symbols=())
        notes = (f"include/ from {leg.inputs[0]}; lib/<abi>/ from each of {', '.join(leg.inputs)}",)
        smoke = None
    return Plan(leg=leg, version=engine.version, archive=archive, contract=contract, smoke=smoke, notes=notes)


def plan_leg(leg: Leg, engine: Engine, matrix: Matrix) -> Plan:
    archive = archive_name(leg, engine)
    if leg.aggregate:
        plan = _aggregate_plan(leg, engine, matrix, archive)
    else:
        recipe = _load_recipe(engine.root / "recipe.py")
        validate = getattr(recipe, "validate", None)
        if validate is not None:
            validate(leg)  # refuses, with a DataError, a leg the recipe cannot build
        plan = recipe.plan(leg, engine, archive)
        # A recipe whose arguments turn build switches on indirectly declares them (model/submodules.py).
        plan = with_selected_submodules(plan, engine, getattr(recipe, "IMPLIED_SWITCHES", None))
        plan = replace(plan, warnings=plan.warnings + _outdated_patches(plan, engine))
        if plan.smoke is not None and not leg.can_run:
            plan = replace(plan, smoke=None)
        if plan.smoke is not None:
            plan = replace(plan, smoke=_with_variant_defines(plan.smoke, leg))
            if leg.os == "windows" and leg.config == "debug":
                plan = replace(plan, notes=(*plan.notes, DEBUG_CRT_NOTE))
    return replace(plan, contract=_with_platform_rules(plan.contract, leg, engine))


def _with_platform_rules(contract: Contract, leg: Leg, engine: Engine) -> Contract:
    """What every engine's contract checks alike: the binaries' platform, the OS the
    package promises, and the shared data of engines/contracts.toml."""
    contract = replace(contract, platform=leg.platform, min_os=_promised_min_os(leg))
    return with_contract_data(contract, leg, load_contract_data(contracts_file(engine.root.parent)))


def _promised_min_os(leg: Leg) -> str:
    """The minimum iOS an xcframework's slices may require (the leg's `requires.min_os`)."""
    match = re.search(r"\d+(?:\.\d+)+", leg.requires.get("min_os", "")) if leg.os == "ios" else None
    return match.group(0) if match else ""


def _outdated_patches(plan: Plan, engine: Engine) -> tuple[str, ...]:
    return tuple(
        f"patch {patch.name}: {engine.name} {engine.version} is past its `until` {patch.until}; check whether "
        f"upstream has the fix ({patch.upstream or patch.reason}), then remove the patch or raise `until` "
        f"in engines/{engine.name}/engine.toml"
        for patch in plan.patches if patch.outdated_at(engine.version))


def _with_variant_defines(smoke: Smoke, leg: Leg) -> Smoke:
    defines = {
        "CMAKE_BUILD_TYPE": "Debug" if leg.config == "debug" else "Release",
        "SMOKE_KIND": "static" if leg.kind != "shared" else "shared",
        "SMOKE_FLAVOR": leg.flavor,
        "SMOKE_ACCELERATOR": ",".join(leg.accelerator) or "none",
        **smoke.defines,
    }
    if leg.os == "macos":
        defines["CMAKE_OSX_ARCHITECTURES"] = leg.arch
    return replace(smoke, defines=defines)


def leg_engine(matrix: Matrix, leg: Leg, override: str | None = None) -> Engine:
    """The engine data a leg builds with: the command-line version, else the leg's, else the pin."""
    engine = matrix.engines[leg.engine]
    version = override or leg.version
    return engine.with_version(version) if version else engine


def plan_all(matrix: Matrix, legs: list[Leg] | None = None, version: str | None = None) -> list[Plan]:
    return [plan_leg(leg, leg_engine(matrix, leg, version), matrix)
            for leg in (legs if legs is not None else matrix.legs)]
