"""The command-line options: names, defaults, help and validation, independent of SCons.

Each option declares how its value is checked (`check`), beside its help, so a bad value
is refused before anything is fetched or written, naming what is valid. An option given
with an empty value (`engine=`, `cache=`) is refused: leave it out to get its default.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from backends.model.schema import version_problem
from backends.model.platforms import platform_table
from backends.model.vocab import CONFIGS, ENGINES, FLAVORS, KINDS, SOURCES
from backends.util.errors import BackendsError

BOOL_TRUE = ("1", "yes", "true", "on")
BOOL_FALSE = ("0", "no", "false", "off")


class OptionError(BackendsError, ValueError):
    """An option value that is not valid; the message says what is."""


def parse_bool(name: str, value: str) -> bool:
    lowered = value.strip().lower()
    if lowered in BOOL_TRUE:
        return True
    if lowered in BOOL_FALSE:
        return False
    raise OptionError(f"{name}={value!r} is not a boolean; use 1 or 0")


def _positive_integer(name: str, value: str) -> None:
    if not (value.isascii() and value.isdigit()) or int(value) < 1:  # "²".isdigit() is True
        raise OptionError(f"{name}={value!r} must be a positive integer")


def _whole_number(name: str, value: str) -> None:
    if not (value.isascii() and value.isdigit()):
        raise OptionError(f"{name}={value!r} must be a whole number (0 or more)")


def _version(name: str, value: str) -> None:
    """A version names archives and directories: the data's grammar (model/schema.py), which
    each engine narrows further (engine.toml `version_pattern`, checked with the selection)."""
    problem = version_problem(value)
    if problem:
        raise OptionError(f"{name}={value!r} {problem}")


def _comma_list(name: str, value: str) -> None:
    items = value.split(",")
    if any(not item.strip() for item in items):
        raise OptionError(f"{name}={value!r} has an empty item; separate values with single commas")


def _git_ref(name: str, value: str) -> None:
    """A ref is handed to git: never an option (`--upload-pack=...`), never several words."""
    if value.startswith("-") or any(char.isspace() for char in value):
        raise OptionError(f"{name}={value!r} is not a git ref: a commit, branch or tag such as HEAD, HEAD~3 or "
                          "origin/main (no leading '-', no spaces)")


@dataclass(frozen=True)
class Option:
    name: str
    help: str
    default: str = ""
    allowed: tuple[str, ...] = ()
    boolean: bool = False
    exact: bool = False  # the value must be one of `allowed` (filters take lists and aliases instead)
    check: Callable[[str, str], None] | None = None

    def validate(self, value: str) -> None:
        if not value.strip():
            raise OptionError(f"{self.name}= is empty: give a value, or leave the option out"
                              + (f" for its default ({self.default})" if self.default else ""))
        if self.boolean:
            parse_bool(self.name, value)
        elif self.exact and value not in self.allowed:
            raise OptionError(f"unknown {self.name} {value!r}; valid: {', '.join(self.allowed)}")
        if self.check is not None:
            self.check(self.name, value)


OPTIONS: tuple[Option, ...] = (
    Option("engine", "engine(s) to select, comma-separated", "", ("all", *ENGINES), check=_comma_list),
    Option("platform", f"platform(s) <os>-<arch>: {platform_table().examples()}; building defaults to this host, "
           "list/plan/ci-matrix to all", "",
           check=_comma_list),
    Option("flavor", f"cpu is the default package, {', '.join(f for f in FLAVORS if f != 'cpu')} the accelerator variants (engines/"
           "contracts.toml [flavors]); building defaults to cpu, list/plan/ci-matrix to all", "", ("all", *FLAVORS),
           check=_comma_list),
    Option("kind", "package form (xcframework: iOS only)", "", ("all", *KINDS), check=_comma_list),
    Option("config", "build configuration", "", ("all", *CONFIGS), check=_comma_list),
    Option("source", "how the leg gets its binaries", "", ("all", *SOURCES), check=_comma_list),
    Option("version", "override the engine's pinned version (names and URLs follow it); one engine only. With "
           "lock: bump the engine's version in engine.toml, dropping the pins only the old version used", "",
           check=_version),
    Option("origin", "take upstream files from elsewhere without editing the data: "
           "[<source>=]<path-or-url>[,...] (e.g. origin=release=/tmp/torch.whl); a URL needs lock=1", "",
           check=_comma_list),
    Option("cache", "download cache directory (content-addressed, shared by every leg)", ".cache/downloads"),
    Option("mirror", "directory or URL prefix(es) tried before upstream, comma-separated", "", check=_comma_list),
    Option("mirror_out", "with `scons fetch`: also write every input into this directory, in the layout "
           "mirror= reads", ""),
    Option("offline", "never touch the network: cache and directory mirrors only", "0", boolean=True),
    Option("lock", "building: accept downloads without a pin and record them into engine.toml (`scons lock` "
           "records the pins of any selection from any host, without building)", "0", boolean=True),
    Option("lock_minutes", "with lock: start no fetch after this many minutes; what was pinned is recorded and "
           "the inputs not tried are listed (lock again for them). 0: no bound", "0", check=_whole_number),
    Option("format", "archive format", "zip", ("zip", "tar.gz", "7z"), exact=True),
    Option("inputs", "where aggregates (universal, Android bundle) take their input archives: build the ones "
           "this host can build, or use those already in dist/ (CI's aggregate jobs download them)", "build",
           ("build", "dist"), exact=True),
    Option("heavy_jobs", "upstream builds allowed to run at once, whatever -j says", "1", check=_positive_integer),
    Option("wait", "when another run holds this tree's build/: wait for it (1) or refuse at once (0)", "1",
           boolean=True),
    Option("verbose", "print full command lines and stream upstream build output", "0", boolean=True),
    Option("binary_cache", "binary caches of verified archives, looked up by leg key before building and "
           "written after a build: directories, http(s):// prefixes (GET/PUT), github:<owner>/<repo>@<tag>; "
           "comma-separated", "", check=_comma_list),
    Option("binary_cache_write", "store what this run builds into the binary caches (0: only read them, as "
           "pull requests do)", "1", boolean=True),
    Option("binary_cache_key", "the secret key that signs what this run stores (a file `scons cache-keygen` "
           "wrote; ANIRA_BINARY_CACHE_KEY may hold the key itself instead); without one, entries are stored "
           "unsigned", ""),
    Option("binary_cache_trust", "the public keys whose signed entries a restore takes: ed25519:... keys or "
           "files of them, comma-separated; `unsigned` also takes unsigned entries (only for a store nobody "
           "else writes). Default: keys/binary-cache.pub, the project's CI keys", "", check=_comma_list),
    Option("key", "print each selected leg's key and the parts it hashes, instead of building (with "
           "cache-keygen: the path of the new secret key)", "0", boolean=True),
    Option("gc", "remove build trees, source trees and cache entries no leg references any more "
           "(with a size report) instead of building", "0", boolean=True),
    Option("plan", "print each selected leg's steps and exact commands instead of building", "0", boolean=True),
    Option("since", "with `affected`: the git commit, branch or tag (HEAD, HEAD~3, origin/main) whose data the "
           "working tree is compared with", "", check=_git_ref),
)

OPTION_NAMES = tuple(option.name for option in OPTIONS)
FILTERS = ("engine", "platform", "flavor", "kind", "config", "source")


def option(name: str) -> Option:
    return next(o for o in OPTIONS if o.name == name)


def help_text() -> str:
    lines = ["anira-backends: scons [list|ci-matrix|pins|lock|affected|fetch|<leg id>...] [option=value ...]", "", "Options:"]
    for opt in OPTIONS:
        values = f" ({'|'.join(opt.allowed)})" if opt.allowed else (" (0|1)" if opt.boolean else "")
        default = f" [default: {opt.default}]" if opt.default else ""
        lines.append(f"  {opt.name}={values}{default}")
        lines.append(f"      {opt.help}")
    lines += ["", "Targets:",
              "  list         table of the selected legs (id, source, accelerator, runner, build/run here, key, cold "
              "build; verbose=1 adds the archive and shortens nothing)",
              "  ci-matrix    the selected legs as a GitHub Actions matrix (JSON)",
              "  pins         every upstream input of the selected legs (file or git source, URL, pin); exits 1 if "
              "one is unpinned",
              "  lock         fetch (files) and resolve (git refs, by ls-remote) every input of the selected legs "
              "and record the missing pins into engine.toml; any host, never builds",
              "  fetch        download and verify every pinned input of the selected legs (upstream's build-time "
              "downloads included) into the cache, building nothing; mirror_out=DIR also writes them in the layout "
              "mirror= reads",
              "  affected     with since=<git ref>: the selected legs whose key parts differ between that ref's "
              "data and the working tree (what a change rebuilds), pinned or not; never builds",
              "  cache-keygen key=PATH  write a binary cache signing key pair: PATH (secret, mode 0600) and "
              "PATH.pub",
              "  <leg id>     build one leg, <engine>-<platform>[-<flavor>]-<kind>[-debug] such as "
              f"onnxruntime-{platform_table().tokens[0]}-shared (platform aliases accepted)",
              "  (none)       with filters: build the selected legs this host can build; without: list them"]
    return "\n".join(lines)
