"""The project's vocabulary: one spelling per concept (the README's Vocabulary table).

Every option value, data-file field, manifest key and CI job name uses these tokens.
Aliases are accepted on input and never written back.
"""
from __future__ import annotations

from backends.model.platforms import platform_table

ENGINES = ("onnxruntime", "libtorch", "tflite", "litert", "executorch")
OSES = tuple(platform_table().oses)
KINDS = ("shared", "static", "xcframework")
CONFIGS = ("release", "debug")
FLAVORS = ("cpu", "gpu", "cuda")
SOURCES = ("build", "prebuilt", "aggregate")
ACCELERATORS = ("coreml", "mps", "mlx", "metal", "dml", "vulkan", "cuda")
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


class VocabularyError(ValueError):
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
