"""What machine a library must be, by the kind of platform it ships on: a plain platform
says its own, an Android bundle each lib/<abi>/ directory's, a universal binary every
slice's, an xcframework each slice directory's (a bundle is not a universal binary)."""
from __future__ import annotations

import pytest

from backends.model.platforms import platform_table
from backends.steps.checks.binaries import expected_binary


def _machines(platform: str, member: str) -> set[str] | None:
    wanted = expected_binary(platform, member)
    return None if wanted is None else wanted[1]


def test_a_plain_platform_names_its_own_machines() -> None:
    table = platform_table()
    for token, facts in table.platforms.items():
        if facts.machines:
            assert _machines(token, "lib/libx.so") == set(facts.machines), token


def test_each_abi_directory_of_the_android_bundle_names_its_machine() -> None:
    abi_machines = platform_table().oses["android"].abi_machines
    for abi, machine in abi_machines.items():
        assert _machines("android", f"lib/{abi}/libx.so") == {machine}
    assert _machines("android", "lib/unknown-abi/libx.so") is None


@pytest.mark.parametrize("token", [t for t, p in platform_table().platforms.items()
                                   if p.slices and not platform_table().oses[p.os].abi_machines
                                   and not platform_table().oses[p.os].slice_machines])
def test_a_universal_binary_holds_every_slices_machine(token: str) -> None:
    table = platform_table()
    every = {m for s in table.platforms[token].slices for m in table[s].machines}
    assert len(every) > 1
    assert _machines(token, "lib/libx.dylib") == every
