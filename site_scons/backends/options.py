"""The command-line options: names, defaults and help, independent of SCons."""
from __future__ import annotations

from dataclasses import dataclass

from .model.vocab import CONFIGS, ENGINES, FLAVORS, KINDS, SOURCES

BOOL_TRUE = ("1", "yes", "true", "on")
BOOL_FALSE = ("0", "no", "false", "off", "")


@dataclass(frozen=True)
class Option:
    name: str
    help: str
    default: str = ""
    allowed: tuple[str, ...] = ()
    boolean: bool = False


OPTIONS: tuple[Option, ...] = (
    Option("engine", "engine(s) to select, comma-separated", "", ("all", *ENGINES)),
    Option("platform", "platform(s) <os>-<arch>: linux-x86_64, linux-aarch64 (alias linux-arm64), macos-x86_64, "
           "macos-arm64, macos-universal, windows-x86_64 (alias windows-x64), windows-arm64, android-arm64-v8a, "
           "android-x86_64, android, ios, wasm; building defaults to this host, list/plan/ci-matrix to all", ""),
    Option("flavor", "cpu is the default package, gpu and cuda the accelerator variants; building defaults to "
           "cpu, list/plan/ci-matrix to all", "", ("all", *FLAVORS)),
    Option("kind", "package form (xcframework: iOS only)", "", ("all", *KINDS)),
    Option("config", "build configuration", "", ("all", *CONFIGS)),
    Option("source", "how the leg gets its binaries", "", ("all", *SOURCES)),
    Option("version", "override the engine's pinned version (names and URLs follow it); one engine only", ""),
    Option("origin", "take upstream files from elsewhere without editing the data: "
           "[<source>=]<path-or-url>[,...] (e.g. origin=release=/tmp/torch.whl)", ""),
    Option("cache", "download cache directory (content-addressed, shared by every leg)", ".cache/downloads"),
    Option("mirror", "directory or URL prefix(es) tried before upstream, comma-separated", ""),
    Option("offline", "never touch the network: cache and directory mirrors only", "0", boolean=True),
    Option("lock", "accept downloads without a sha256 pin and record them into engine.toml", "0", boolean=True),
    Option("format", "archive format", "zip", ("zip", "tar.gz", "7z")),
    Option("inputs", "where aggregates (universal, Android bundle) take their input archives: build the ones "
           "this host can build, or use those already in dist/ (CI's aggregate jobs download them)", "build",
           ("build", "dist")),
    Option("heavy_jobs", "upstream builds allowed to run at once, whatever -j says", "1"),
    Option("wait", "when another run holds this tree's build/: wait for it (1) or refuse at once (0)", "1",
           boolean=True),
    Option("verbose", "print full command lines and stream upstream build output", "0", boolean=True),
    Option("gc", "remove build trees, source trees and cache entries no leg references any more "
           "(with a size report) instead of building", "0", boolean=True),
    Option("plan", "print each selected leg's steps and exact commands instead of building", "0", boolean=True),
)

OPTION_NAMES = tuple(option.name for option in OPTIONS)


def parse_bool(name: str, value: str) -> bool:
    lowered = value.strip().lower()
    if lowered in BOOL_TRUE:
        return True
    if lowered in BOOL_FALSE:
        return False
    raise ValueError(f"{name}={value!r} is not a boolean; use 1 or 0")


def help_text() -> str:
    lines = ["anira-backends: scons [list|ci-matrix|<leg id>...] [option=value ...]", "", "Options:"]
    for option in OPTIONS:
        values = f" ({'|'.join(option.allowed)})" if option.allowed else (" (0|1)" if option.boolean else "")
        default = f" [default: {option.default}]" if option.default else ""
        lines.append(f"  {option.name}={values}{default}")
        lines.append(f"      {option.help}")
    lines += ["", "Targets:",
              "  list         table of the selected legs (id, archive, source, accelerator, runner, builds/runs here)",
              "  ci-matrix    the selected legs as a GitHub Actions matrix (JSON)",
              "  <leg id>     build one leg, e.g. onnxruntime-linux-x86_64-shared",
              "  (none)       build every selected leg this host can build"]
    return "\n".join(lines)
