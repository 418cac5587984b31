"""The platform table (engines/platforms.toml through model/platforms.py): what it gives the
core, and the mistakes it refuses at load, naming the file and the field."""
from __future__ import annotations

import tomllib
from dataclasses import replace
from pathlib import Path

import pytest

from backends.binfmt import inspect
from backends.model.matrix import load_matrix
from backends.model.platforms import DEFAULT_FILE, load_platforms, platform_table
from backends.model.recipe_kit import cross_defines
from backends.model.schema import DataError
from backends.model.vocab import canonical_platform

REPO = Path(__file__).resolve().parents[3]
TABLE_TEXT = DEFAULT_FILE.read_text(encoding="utf-8")


def test_every_platform_token_is_its_own_canonical_spelling() -> None:
    for token in platform_table().tokens:
        assert canonical_platform(token) == token


def test_aliases_and_runner_labels() -> None:
    table = platform_table()
    assert table.aliases["linux-arm64"] == "linux-aarch64"
    assert table.aliases["wasm32"] == "wasm"
    assert table.runners["ubuntu-24.04-arm"] == ("linux", "aarch64")
    assert table.aggregate_slices["universal"] == ("macos-x86_64", "macos-arm64")


@pytest.mark.parametrize("system, machine, platform", [
    ("linux", "x86_64", "linux-x86_64"), ("linux", "aarch64", "linux-aarch64"), ("macos", "arm64", "macos-arm64"),
    ("windows", "amd64", "windows-x86_64"), ("windows", "arm64", "windows-arm64"), ("linux", "riscv64", "linux-riscv64"),
])
def test_a_host_is_the_platform_of_its_os_and_machine(system: str, machine: str, platform: str) -> None:
    assert platform_table().of_host(system, machine) == platform


def test_every_machine_a_platform_has_is_one_the_binary_readers_name() -> None:
    table = platform_table()
    named = {*inspect.ELF_MACHINES.values(), *inspect.COFF_MACHINES.values(), *table.wasm_machines,
             *table.macho_machines.values()}
    assert {m for p in table.platforms.values() for m in p.machines} <= named


def test_msvc_targets_of_the_windows_platforms() -> None:
    table = platform_table()
    assert table.msvc_arch("windows-x86_64") == "x64" and table.msvc_arch("linux-x86_64") == ""
    assert {m.processor for m in table.msvc_targets()} == {"AMD64", "ARM64"}


def _load(tmp_path: Path, text: str) -> None:
    path = tmp_path / "platforms.toml"
    path.write_text(text, encoding="utf-8")
    load_platforms(path)


@pytest.mark.parametrize("old, new, error", [
    ('[platform.linux-x86_64]\nos = "linux"', '[platform.linux-x86_64]\nos = "beos"',
     r"platform\.linux-x86_64\.os: no \[os\.beos\]"),
    ('[platform.linux-x86_64]\nos = "linux"\narch = "x86_64"', '[platform.linux-x86_64]\nos = "linux"\narch = "x64"',
     r"platform\.linux-x86_64: the token is <os>-<arch> \('linux-x64'\)"),
    ('aliases = ["linux-x64",', 'aliases = ["linux-aarch64",', r"'linux-aarch64' spells both"),
    ('runners = ["ubuntu-24.04"]', 'runners = ["ubuntu-24.04-arm"]', "a runner label names two platforms"),
    ('slices = ["macos-x86_64", "macos-arm64"]', 'slices = ["macos-x86_64", "macos-arm65"]',
     r"platform\.macos-universal names 'macos-arm65'"),
    ('machines = ["aarch64"]\ndebian_arch', 'machines = ["aarch65"]\ndebian_arch', r"has machine 'aarch65'"),
    ('mode = "qemu"', 'mode = "bochs"', r"emulated\.mode: 'bochs' is none of"),
    ('elf = 183', 'elf = -1', "must be a header's machine id"),
    ('anira_gate = "always"', 'anira_gate = "sometimes"', r"anira_gate 'sometimes' is not one of"),
    ('[platform.wasm]\nos = "wasm"', '[platform.wasm]\nos = "wasm"\nlegs = 1', r"unknown fields"),
])
def test_a_mistake_is_refused_naming_the_field(tmp_path: Path, old: str, new: str, error: str) -> None:
    assert old in TABLE_TEXT, f"the table no longer has {old!r}"
    tomllib.loads(TABLE_TEXT.replace(old, new, 1))  # still TOML: the loader is what refuses it
    with pytest.raises(DataError, match=error):
        _load(tmp_path, TABLE_TEXT.replace(old, new, 1))


def test_the_table_as_shipped_loads(tmp_path: Path) -> None:
    _load(tmp_path, TABLE_TEXT)


def test_a_leg_is_cross_built_only_on_a_runner_of_its_os_and_another_arch() -> None:
    matrix = load_matrix(REPO)
    assert all(leg.cross_triple == "" and leg.sysroot_packages == () for leg in matrix.legs)  # all native today
    leg = next(leg for leg in matrix.legs if leg.platform == "linux-aarch64" and leg.source == "build")
    cross = replace(leg, runner="ubuntu-24.04")
    assert cross.cross_triple == "aarch64-linux-gnu" and cross.sysroot_packages == ("g++-aarch64-linux-gnu",)
    assert cross_defines(cross) == {"CMAKE_SYSTEM_NAME": "Linux", "CMAKE_SYSTEM_PROCESSOR": "aarch64",
                                    "CMAKE_C_COMPILER": "aarch64-linux-gnu-gcc",
                                    "CMAKE_CXX_COMPILER": "aarch64-linux-gnu-g++"}
    assert cross_defines(leg) == {}
