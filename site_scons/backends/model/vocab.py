"""The project's vocabulary: one spelling per concept (the README's Vocabulary table).

Every option value, data-file field, manifest key and CI job name uses these tokens.
Aliases are accepted on input and never written back.
"""
from __future__ import annotations

from backends.util.errors import BackendsError

ENGINES = ("onnxruntime", "libtorch", "tflite", "litert", "executorch")
OSES = ("macos", "linux", "windows", "android", "ios", "wasm")
KINDS = ("shared", "static", "xcframework")
CONFIGS = ("release", "debug")
FLAVORS = ("cpu", "gpu", "cuda")
SOURCES = ("build", "prebuilt", "aggregate")
ACCELERATORS = ("coreml", "mps", "mlx", "metal", "dml", "vulkan", "cuda")
TOOLCHAINS = ("none", "android", "emscripten")
AGGREGATES = ("universal", "android-bundle")
ARCHES = ("x86_64", "arm64", "aarch64", "arm64-v8a", "universal")
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

# How each OS is spelled inside upstream archive names.
OS_LABELS = {
    "macos": "macOS",
    "linux": "Linux",
    "windows": "Windows",
    "android": "Android",
    "ios": "iOS",
    "wasm": "WASM",
}

# The ARM token differs per OS in upstream archive names.
ARM64_TOKEN = {
    "macos": "arm64",
    "windows": "arm64",
    "linux": "aarch64",
    "android": "arm64-v8a",
}

ARCH_ALIASES = {
    "x64": "x86_64",
    "amd64": "x86_64",
    "x86-64": "x86_64",
    "arm64": "arm64",
    "aarch64": "arm64",
    "arm64-v8a": "arm64",
}

# Platforms without an arch segment: aggregates and single-arch targets.
BARE_PLATFORMS = {
    "android": "android",  # the multi-ABI bundle / AAR
    "ios": "ios",  # the xcframework (device + simulator slices)
    "wasm": "wasm",
    "wasm32": "wasm",
    "wasm-wasm32": "wasm",
}

# GitHub-hosted runner label -> (os, arch) of the machine it provides.
RUNNERS = {
    "macos-15": ("macos", "arm64"),
    "macos-15-intel": ("macos", "x86_64"),
    "ubuntu-24.04": ("linux", "x86_64"),
    "ubuntu-24.04-arm": ("linux", "aarch64"),
    "windows-2025": ("windows", "x86_64"),
    "windows-11-arm": ("windows", "arm64"),
}

# MSVC developer-environment arch per Windows arch token.
MSVC_ARCH = {"x86_64": "x64", "arm64": "arm64"}


class VocabularyError(BackendsError, ValueError):
    """An input token that is not part of the vocabulary."""


def canonical_platform(token: str) -> str:
    """Map a user-typed platform (with aliases) to its canonical `<os>-<arch>` token."""
    raw = token.strip().lower()
    if raw in BARE_PLATFORMS:
        return BARE_PLATFORMS[raw]
    os_name, sep, arch = raw.partition("-")
    if os_name not in OSES or not sep or not arch:
        raise VocabularyError(f"unknown platform {token!r}")
    if arch == "universal" and os_name == "macos":
        return "macos-universal"
    normalized = ARCH_ALIASES.get(arch, arch)
    if normalized == "arm64":
        if os_name not in ARM64_TOKEN:
            raise VocabularyError(f"unknown platform {token!r}")
        return f"{os_name}-{ARM64_TOKEN[os_name]}"
    if normalized == "x86_64":
        return f"{os_name}-x86_64"
    raise VocabularyError(f"unknown platform {token!r}")


def split_platform(platform: str) -> tuple[str, str]:
    """`macos-arm64` -> ("macos", "arm64"); bare platforms have an empty arch."""
    os_name, _, arch = platform.partition("-")
    return os_name, arch


def platform_label(platform: str) -> str:
    """The upstream spelling of a platform inside archive names (`macOS-arm64`, `WASM`)."""
    os_name, arch = split_platform(platform)
    label = OS_LABELS[os_name]
    return f"{label}-{arch}" if arch else label
