"""The project's vocabulary: one spelling per concept (the README's Vocabulary table).

Every option value, data-file field, manifest key and CI job name uses these tokens.
Aliases are accepted on input and never written back.
"""
from __future__ import annotations

import tomllib
from pathlib import Path

from backends.model.platforms import platform_table
from backends.util.errors import BackendsError

# The project's own data: engines/ beside site_scons/.
ENGINES_DIR = Path(__file__).resolve().parents[3] / "engines"
# How lists order the engines; any other engine with an engines/<name>/engine.toml follows by name.
LISTING_ORDER = ("onnxruntime", "libtorch", "tflite", "litert", "executorch")


def _engines(engines_dir: Path) -> tuple[str, ...]:
    found = {path.parent.name for path in engines_dir.glob("*/engine.toml")}
    return tuple(name for name in LISTING_ORDER if name in found) + tuple(sorted(found - set(LISTING_ORDER)))


def _declared(section: str) -> tuple[str, ...]:
    """The names a section of engines/contracts.toml declares ([flavors], [accelerators]);
    model.contract_data validates the rest of that file."""
    with (ENGINES_DIR / "contracts.toml").open("rb") as handle:
        return tuple(tomllib.load(handle).get(section, {}))


ENGINES = _engines(ENGINES_DIR)
OSES = tuple(platform_table().oses)
KINDS = ("shared", "static", "xcframework")
CONFIGS = ("release", "debug")
FLAVORS = _declared("flavors")
SOURCES = ("build", "prebuilt", "aggregate")
ACCELERATORS = _declared("accelerators")
TOOLCHAINS = ("none", "android", "emscripten")
AGGREGATES = tuple(platform_table().aggregate_slices)
ARCHES = platform_table().arches
LINKAGES = ("shared", "static")  # an xcframework links statically

# What a patch's `when` table can test (recipe_kit.facts gives a leg's values), and the values
# each key takes; the platform is checked by canonical_platform.
CONDITIONS: dict[str, tuple[str, ...] | None] = {
    "platform": None,
    "os": OSES,
    "arch": ARCHES,
    "kind": KINDS,
    "linkage": LINKAGES,
    "config": CONFIGS,
    "flavor": FLAVORS,
    "source": SOURCES,
    "accelerator": ACCELERATORS,
}

# GitHub-hosted runner label -> (os, arch) of the machine it provides (engines/platforms.toml).
RUNNERS = platform_table().runners


class VocabularyError(BackendsError, ValueError):
    """An input token that is not part of the vocabulary."""


def canonical_platform(token: str) -> str:
    """Map a user-typed platform (with aliases) to its canonical token (engines/platforms.toml)."""
    canonical = platform_table().aliases.get(token.strip().lower())
    if canonical is None:
        raise VocabularyError(f"unknown platform {token!r}")
    return canonical


def split_platform(platform: str) -> tuple[str, str]:
    """`macos-arm64` -> ("macos", "arm64"); bare platforms have an empty arch."""
    os_name, _, arch = platform.partition("-")
    return os_name, arch


def platform_label(platform: str) -> str:
    """The upstream spelling of a platform inside archive names (`macOS-arm64`, `WASM`)."""
    os_name, arch = split_platform(platform)
    label = platform_table().oses[os_name].label
    return f"{label}-{arch}" if arch else label
