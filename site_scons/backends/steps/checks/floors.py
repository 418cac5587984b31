"""No stubs: each main library is at least as large, and exports at least as many symbols,
as the floor its engine's real builds are far above (engines/contracts.toml `[floor]`). A
real binary that exports the contract's entry point is not enough: a 4 KB library that
exports only `OrtGetApiBase` is one."""
from __future__ import annotations

from backends.model.plan import Floor
from backends.steps.checks.view import ArchiveView, is_shared_library_name
from backends.util.globs import matches


def check_floors(view: ArchiveView, floors: tuple[Floor, ...]) -> list[str]:
    problems = []
    for floor in floors:
        libraries = reached(view, floor.library)
        if not libraries:
            problems.append(f"no library {floor.library} to hold to its floor ({describe(floor)})")
        for name in libraries:
            problems += _below(view, name, floor)
    return problems


def reached(view: ArchiveView, pattern: str) -> list[str]:
    """The files the members matching `pattern` are, symlinks followed, each once."""
    found = (view.follow(name) for name in sorted(view.names) if matches(name, pattern))
    return list(dict.fromkeys(name for name in found if name is not None))


def exported_count(view: ArchiveView, name: str) -> int:
    """Defined external symbols of a library member; an ELF shared object's version names
    (`VERS_1.26.0`, listed as absolute symbols) are no symbols it exports."""
    defined = view.symbols(name)[0]
    if defined and is_shared_library_name(name) and view.format(name) == "elf":
        defined = defined - set(view.readable(name, lambda: view.version_definitions(name), list[str]()))
    return len(defined)


def _below(view: ArchiveView, name: str, floor: Floor) -> list[str]:
    problems = []
    size = view.size(name)
    if size < floor.min_bytes:
        problems.append(f"{name} is {size:,} bytes, under the {floor.min_bytes:,} bytes of its engine's real "
                        "builds' floor: a stub, not the engine")
    if floor.min_symbols:
        count = exported_count(view, name)
        if count < floor.min_symbols:
            problems.append(f"{name} exports {count:,} symbols, under the {floor.min_symbols:,} of its engine's "
                            "real builds' floor: a stub, not the engine")
    return problems


def describe(floor: Floor) -> str:
    parts = [f">= {floor.min_bytes:,} bytes" if floor.min_bytes else "",
             f">= {floor.min_symbols:,} exported symbols" if floor.min_symbols else ""]
    return ", ".join(p for p in parts if p)
