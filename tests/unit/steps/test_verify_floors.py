"""No stubs: a leg's main libraries are held to floors (size, exported symbols) far under
the real upstream binaries (engines/contracts.toml, docs/contracts.md#no-stubs), and a
library no tool can read is a violation naming it, never a crash of verify."""
from __future__ import annotations

import subprocess
from dataclasses import replace
from pathlib import Path

import pytest

from backends.model.contract_data import load_contract_data
from backends.model.engine import DataError
from backends.model.matrix import load_matrix
from backends.model.plan import Contract, Floor
from backends.model.recipe_kit import linkage
from backends.model.recipes import plan_leg
from backends.steps.verify import check, summary
from backends.util import toolchain
from backends.util.globs import matches
from binaries import elf_shared, license_texts, macho_dylib, pe_dll, zip_members

ROOT = Path(__file__).resolve().parents[3]
MATRIX = load_matrix(ROOT)
ORT_LINUX = "onnxruntime-linux-x86_64-shared"
HEADERS = {f"include/{name}": b"#define ORT_API_VERSION 21\n" for name in ("onnxruntime_c_api.h", "onnxruntime_cxx_api.h")}
LINKS = {"lib/libonnxruntime.so.1": "libonnxruntime.so.1.26.0", "lib/libonnxruntime.so": "libonnxruntime.so.1"}
REAL = "lib/libonnxruntime.so.1.26.0"
STUB_VERDICT = "a stub, not the engine"


def contract(leg_id: str) -> Contract:
    leg = MATRIX.leg(leg_id)
    return plan_leg(leg, MATRIX.engines[leg.engine], MATRIX).contract


def with_ballast(library: Path, size: int) -> Path:
    """`library` grown by a section of `size` bytes, to the size of a real one."""
    ballast = library.with_name(library.name + ".ballast")
    ballast.write_bytes(bytes(size))
    subprocess.run([toolchain.require_tool("llvm-objcopy", "test"), "--add-section", f".ballast={ballast}", library],
                   check=True)
    ballast.unlink()
    return library


def ort_package(path: Path, library: Path | bytes) -> Path:
    return zip_members(path, {**HEADERS, **license_texts("onnxruntime"), REAL: library}, LINKS)


# --- the stub of the finding: real ELF, OrtGetApiBase@VERS_1.26.0, nothing else -------------

@pytest.fixture
def stub(tmp_path) -> Path:
    return elf_shared(tmp_path / "libonnxruntime.so.1.26.0", ("OrtGetApiBase",), soname="libonnxruntime.so.1",
                      version_node="VERS_1.26.0")


def test_a_stub_exporting_the_entry_point_fails_the_floor(tmp_path, stub):
    archive = ort_package(tmp_path / "stub.zip", stub)
    size = stub.stat().st_size
    assert check(archive, contract(ORT_LINUX), "1.26.0") == [
        f"{REAL} is {size:,} bytes, under the 5,000,000 bytes of its engine's real builds' floor: {STUB_VERDICT}",
        f"{REAL} exports 1 symbols, under the 2 of its engine's real builds' floor: {STUB_VERDICT}"]
    # Nothing else tells it from the engine: without the floor it passes.
    assert check(archive, replace(contract(ORT_LINUX), floors=()), "1.26.0") == []


def test_a_stub_as_large_as_the_engine_still_fails_on_its_exports(tmp_path, stub):
    archive = ort_package(tmp_path / "stub.zip", with_ballast(stub, 6_000_000))
    assert check(archive, contract(ORT_LINUX), "1.26.0") == [
        f"{REAL} exports 1 symbols, under the 2 of its engine's real builds' floor: {STUB_VERDICT}"]


def test_a_library_above_the_floor_passes(tmp_path):
    library = elf_shared(tmp_path / "libonnxruntime.so.1.26.0", ("OrtGetApiBase", "OrtSessionOptionsAppendExecutionProvider_CPU"),
                         soname="libonnxruntime.so.1", version_node="VERS_1.26.0")
    assert check(ort_package(tmp_path / "good.zip", with_ballast(library, 6_000_000)), contract(ORT_LINUX), "1.26.0") == []


@pytest.mark.parametrize("leg_id, member, build", [
    ("onnxruntime-macos-arm64-shared", "lib/libonnxruntime.dylib",
     lambda out: macho_dylib(out, ("OrtGetApiBase",), install_name="@rpath/libonnxruntime.dylib")),
    ("onnxruntime-windows-x86_64-shared", "lib/onnxruntime.dll", lambda out: pe_dll(out, ("OrtGetApiBase",))),
    ("libtorch-linux-x86_64-shared", "lib/libtorch_cpu.so", lambda out: elf_shared(out, ("_ZN2at4zeroEv",))),
    ("executorch-linux-x86_64-shared", "lib/libexecutorch_backend_xnnpack.so",
     lambda out: elf_shared(out, ("_ZN10executorch8backends7xnnpack4initEv",))),
    ("litert-macos-arm64-shared", "lib/libLiteRt.dylib", lambda out: macho_dylib(out, ("LiteRtCreateEnvironment",))),
])
def test_stubs_fail_on_every_floored_platform(tmp_path, leg_id, member, build):
    library = build(tmp_path / Path(member).name)
    problems = check(zip_members(tmp_path / "stub.zip", {member: library}), contract(leg_id), "0")
    floors = [p for p in problems if p.startswith(member) and p.endswith(STUB_VERDICT)]
    assert [p.split(", under")[0] for p in floors] == [
        f"{member} is {library.stat().st_size:,} bytes", f"{member} exports 1 symbols"]


def test_elf_version_names_are_no_exports(tmp_path):
    library = elf_shared(tmp_path / "libx.so", ("x_init",), version_node="VERS_1.0")
    archive = zip_members(tmp_path / "pkg.zip", {"lib/libx.so": library})
    assert check(archive, Contract(floors=(Floor("lib/libx.so", min_symbols=1),)), "1.0") == []
    assert check(archive, Contract(floors=(Floor("lib/libx.so", min_symbols=2),)), "1.0") == [
        f"lib/libx.so exports 1 symbols, under the 2 of its engine's real builds' floor: {STUB_VERDICT}"]


def test_a_floor_with_no_library_to_hold_is_a_violation(tmp_path):
    archive = zip_members(tmp_path / "pkg.zip", {"lib/libother.so": b""})
    assert check(archive, Contract(floors=(Floor("lib/libx.so", min_bytes=10, min_symbols=2),)), "1.0") == [
        "no library lib/libx.so to hold to its floor (>= 10 bytes, >= 2 exported symbols)"]


def test_the_floor_is_in_the_summary():
    assert "lib/libonnxruntime.so is no stub (>= 5,000,000 bytes, >= 2 exported symbols)" in summary(contract(ORT_LINUX))


def test_real_shared_legs_hold_their_main_library_to_a_floor():
    """Every measured engine and OS (docs/contracts.md#no-stubs): the floor names a library
    the contract requires, so it cannot miss the main library by its name."""
    measured = {"onnxruntime": ("linux", "macos", "windows"), "libtorch": ("linux", "macos", "windows"),
                "executorch": ("linux", "macos"), "litert": ("macos",)}
    floored = 0
    for leg in MATRIX.legs:
        floors = contract(leg.id).floors
        if leg.os in measured.get(leg.engine, ()) and linkage(leg) == "shared":
            assert floors, f"{leg.id} has no floor"
            floored += 1
        for floor in floors:
            assert any(matches(floor.library, required) or floor.library == required
                       for required in contract(leg.id).required), f"{leg.id}: {floor.library} is not required"
    assert floored >= 25


# --- unreadable libraries ------------------------------------------------------------------

TRUNCATED_ELF = b"\x7fELF"


@pytest.mark.parametrize("member, data, gate, tool", [
    ("lib/libx.so", TRUNCATED_ELF, Contract(symbols=(("lib/libx.so", "x_init"),)), "llvm-nm"),
    ("lib/libx.so", TRUNCATED_ELF, Contract(allowed_libraries=("libx.so",)), "llvm-readobj"),
    ("lib/libx.a", TRUNCATED_ELF, Contract(symbols=(("lib/libx.a", "x_init"),)), "llvm-nm"),
    ("lib/libx.dylib", b"\xcf\xfa\xed\xfe", Contract(symbols=(("lib/libx.dylib", "x_init"),)), "llvm-nm"),
    ("lib/libx.dylib", TRUNCATED_ELF + bytes(60), Contract(install_names=(("lib/libx.dylib", "@rpath/libx.dylib"),)),
     "is not a Mach-O file"),
    ("lib/x.dll", b"MZ\x90\x00", Contract(symbols=(("lib/x.dll", "x_init"),)), "llvm-readobj"),
])
def test_an_unreadable_library_is_a_violation_naming_it(tmp_path, member, data, gate, tool):
    archive = zip_members(tmp_path / "pkg.zip", {member: data})
    problems = check(archive, gate, "1.0")
    unreadable = [p for p in problems if "cannot be read" in p]
    assert unreadable and unreadable[0].startswith(f"{member} ({len(data)} bytes) cannot be read as a library: ")
    assert tool in unreadable[0] and "/verify-" not in unreadable[0]  # the member's name, not the scratch copy's


def test_a_truncated_elf_under_a_real_contract_is_a_violation(tmp_path):
    problems = check(ort_package(tmp_path / "pkg.zip", TRUNCATED_ELF), contract(ORT_LINUX), "1.26.0")
    assert f"{REAL} is 4 bytes, under the 5,000,000 bytes of its engine's real builds' floor: {STUB_VERDICT}" in problems
    assert any(p.startswith(f"{REAL} (4 bytes) cannot be read as a library: llvm-nm failed on {REAL}") for p in problems)


# --- the floor table is validated when loaded ----------------------------------------------

ROW = "[[floor.onnxruntime]]\nlibraries = ['lib/libonnxruntime.so']\n"


@pytest.mark.parametrize("text, message", [
    (ROW + "min_bytes = -1\n", "floor.onnxruntime[0].min_bytes: expected a whole number >= 0, got -1"),
    (ROW + "min_bytes = '5 MB'\n", "floor.onnxruntime[0].min_bytes: expected a whole number >= 0, got '5 MB'"),
    (ROW + "min_symbols = true\n", "floor.onnxruntime[0].min_symbols: expected a whole number >= 0, got True"),
    (ROW, "floor.onnxruntime[0]: sets no floor; give min_bytes or min_symbols above 0"),
    ("[[floor.onnxruntime]]\nmin_bytes = 1\n", "floor.onnxruntime[0]: names no libraries"),
    (ROW + "min_byte = 1\n", "floor.onnxruntime[0]: unknown field min_byte; fields: when, libraries, min_bytes, "
                             "min_symbols"),
    (ROW + "min_bytes = 1\nwhen = { system = 'linux' }\n", "floor.onnxruntime[0].when: unknown field system"),
    ("[[floor.onnxrutime]]\nlibraries = ['x']\nmin_bytes = 1\n", "floor.onnxrutime: no engine onnxrutime"),
    ("[floor.onnxruntime]\nlibraries = ['x']\nmin_bytes = 1\n",
     "floor.onnxruntime: expected an array of tables ([[...]]), got dict"),
])
def test_a_mistake_in_the_floor_table_names_the_file_and_field(tmp_path, text, message):
    path = tmp_path / "contracts.toml"
    path.write_text(text)
    load_contract_data.cache_clear()
    with pytest.raises(DataError) as caught:
        load_contract_data(path)
    assert str(caught.value).startswith(f"{path}: ") and message in str(caught.value)


def test_the_projects_floor_table_loads():
    load_contract_data.cache_clear()
    floors = load_contract_data(ROOT / "engines" / "contracts.toml").floors
    assert set(floors) == {"onnxruntime", "libtorch", "executorch", "litert"}
