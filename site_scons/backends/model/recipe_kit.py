"""Small helpers that engine recipes share: downloads, patch facts, CMake arguments."""
from __future__ import annotations

import re
from dataclasses import dataclass, replace
from typing import Iterable, Mapping

from backends.model.engine import DataError, Engine, PatchSpec
from backends.model.leg import Leg
from backends.model.plan import Command, CopyRule, Download
from backends.model.platforms import platform_table
from backends.util.locations import url_filename

# Where every package carries its engine's license texts (engines/contracts.toml [licenses]).
LICENSE_ROOT = "share/licenses"

# Default exclusion when bundling a build tree: fetched sources (malformed test `.a` files
# live there, e.g. TFLite's ios/testdata) and test data.
DEFAULT_BUNDLE_EXCLUDE = r"(/testdata/|-src/)"


def linkage(leg: Leg) -> str:
    return "shared" if leg.kind == "shared" else "static"


def facts(leg: Leg) -> dict[str, str | tuple[str, ...]]:
    """The values a patch's `when` table can test (its keys are vocab.CONDITIONS)."""
    return {
        "platform": leg.platform,
        "os": leg.os,
        "arch": leg.arch,
        "kind": leg.kind,
        "linkage": linkage(leg),
        "config": leg.config,
        "flavor": leg.flavor,
        "source": leg.source,
        "accelerator": leg.accelerator,
    }


def patches_for(engine: Engine, leg: Leg) -> tuple[PatchSpec, ...]:
    leg_facts = facts(leg)
    return tuple(p for p in engine.patches if p.applies_to(leg_facts))


@dataclass(frozen=True)
class Support:
    """Where a recipe can build an accelerator: platforms or OSes, and the leg sources."""

    where: tuple[str, ...]
    sources: tuple[str, ...] = ("build",)

    def covers(self, leg: Leg) -> bool:
        return (leg.platform in self.where or leg.os in self.where) and leg.source in self.sources

    def describe(self) -> str:
        return f"{'/'.join(self.where)} ({'/'.join(self.sources)})"


def refuse_unless(leg: Leg, possible: bool, why: str) -> None:
    """What a recipe's validate(leg) calls: refuse a leg it cannot build, before any plan."""
    if not possible:
        raise DataError(f"{leg.id} (variants/{leg.engine}.toml): {leg.engine} {why}")


def check_accelerators(leg: Leg, supported: Mapping[str, Support]) -> None:
    """Every accelerator of the leg is one the recipe builds there, so a `-gpu` leg can never
    plan a CPU build."""
    offered = "; ".join(f"{acc} on {support.describe()}" for acc, support in supported.items()) or "none"
    for acc in leg.accelerator:
        support = supported.get(acc)
        refuse_unless(leg, support is not None and support.covers(leg),
                      f"cannot build accelerator {acc} on {leg.platform} ({leg.source}); it offers: {offered}")


def git_source(engine: Engine, name: str = "source") -> Download:
    spec = engine.sources[name]
    values = engine.template_vars()
    return Download(
        name=name,
        url=spec.url.format(**values),
        filename=spec.url.rstrip("/").rsplit("/", 1)[-1].removesuffix(".git"),
        kind="git",
        ref=spec.ref.format(**values),
        commit=spec.commit.format(**values),
        submodules=spec.submodules,
        unpack=False,
    )


def url_source(engine: Engine, name: str, params: Mapping[str, str] | None = None, *, unpack: bool = True,
               filename: str = "", names: str = "") -> Download:
    """A file download, pinned under `filename` (default: the URL's file name; give one when
    the URL's name is the same for every version, so a new version is a new pin)."""
    url = engine.render_url(name, params)
    filename = filename or url_filename(url)
    return Download(name=name, url=url, filename=filename, sha256=engine.pinned_sha256(filename) or "",
                    unpack=unpack, names=names)


def defines(values: Mapping[str, str]) -> tuple[str, ...]:
    """`-DKEY=VALUE` arguments in the given order."""
    return tuple(f"-D{key}={value}" for key, value in values.items())


def android_toolchain_defines(leg: Leg, api: str) -> dict[str, str]:
    """The NDK's CMake toolchain for one ABI (ANDROID_NDK_HOME is set by the CI setup)."""
    return {
        "CMAKE_TOOLCHAIN_FILE": "{env:ANDROID_NDK_HOME}/build/cmake/android.toolchain.cmake",
        "ANDROID_ABI": leg.arch,
        "ANDROID_PLATFORM": f"android-{api}",
    }


def cross_defines(leg: Leg) -> dict[str, str]:
    """CMake's cross-compiling defines for a leg its runner builds for another arch of the same
    OS, with the platform's cross compiler (engines/platforms.toml cross_triple); none for a
    native build."""
    triple = leg.cross_triple
    if not triple:
        return {}
    return {"CMAKE_SYSTEM_NAME": platform_table().oses[leg.os].system, "CMAKE_SYSTEM_PROCESSOR": leg.arch,
            "CMAKE_C_COMPILER": f"{triple}-gcc", "CMAKE_CXX_COMPILER": f"{triple}-g++"}


def on_off(flag: bool) -> str:
    return "ON" if flag else "OFF"


def build_type(leg: Leg) -> str:
    return "Debug" if leg.config == "debug" else "Release"


def lib_file(leg: Leg, name: str) -> str:
    """The file name of library `name` for the leg's OS and linkage."""
    if leg.os == "windows":
        return f"{name}.dll" if leg.kind == "shared" else f"{name}.lib"
    if leg.kind == "shared":
        return f"lib{name}.dylib" if leg.os in ("macos", "ios") else f"lib{name}.so"
    return f"lib{name}.a"


def static_lib_name(leg: Leg, name: str) -> str:
    return f"{name}.lib" if leg.os == "windows" else f"lib{name}.a"


def join_args(*groups: Iterable[str]) -> tuple[str, ...]:
    return tuple(arg for group in groups for arg in group)


# -- license texts (docs/licenses-and-provenance.md) -------------------------------------------

def license_dir(engine_name: str) -> str:
    return f"{LICENSE_ROOT}/{engine_name}"


def license_texts(engine: Engine, root: str, names: Iterable[str]) -> tuple[CopyRule, ...]:
    """Each license text `name` from the tree `root` (a symbolic path: `{src}`,
    `{extract:release}/*`) into share/licenses/<engine>/."""
    return tuple(CopyRule(f"{root}/{name}", license_dir(engine.name), rename=name) for name in names)


def license_downloads(engine: Engine, texts: Mapping[str, str]) -> tuple[tuple[Download, ...], tuple[CopyRule, ...]]:
    """The texts a prebuilt origin lacks, from the pinned source: `texts` maps a text's file
    name to the engine.toml source whose URL names it. Each is pinned under
    `<engine>-<version>-<name>` (every version's is called LICENSE), so `scons lock` records
    a new pin for a new version."""
    downloads = tuple(replace(url_source(engine, source, unpack=False, filename=f"{engine.name}-{engine.version}-{name}"),
                              optional=True) for name, source in texts.items())
    rules = tuple(CopyRule(f"{{download:{source}}}", license_dir(engine.name), rename=name, required=False)
                  for name, source in texts.items())
    return downloads, rules


# -- upstream's own build-time downloads (docs/hermetic-sources.md) --------------------------

BUILD_DOWNLOAD_PREFIX = "dep-"


def build_download_name(name: str) -> str:
    """The plan's download name (`{download:dep-<name>}`) for upstream's dependency `name`."""
    return BUILD_DOWNLOAD_PREFIX + name


def build_downloads(engine: Engine, leg: Leg, reader: str, *, unpack: bool = False) -> tuple[Download, ...]:
    """The leg's `[[build_downloads]]` of one reader, as downloads the project fetches and pins
    (by sha256 under `<name>-<file>`) before upstream's build could."""
    leg_facts = facts(leg)
    return tuple(Download(name=build_download_name(item.name), url=item.url, filename=item.filename,
                          sha256=engine.pinned_sha256(item.filename) or "", unpack=unpack, upstream=item)
                 for item in engine.build_downloads if item.reader == reader and item.applies_to(leg_facts))


_ARCHIVE_SUFFIX = re.compile(r"\.(tar\.gz|tgz|tar\.xz|tar\.bz2|zip)$")
_GITHUB_ARCHIVE = re.compile(r"https://github\.com/[^/]+/([^/]+)/archive/(?:refs/(?:tags|heads)/)?(.+)$")


def archive_roots(url: str) -> tuple[str, ...]:
    """The top directory a forge's archive of a tag or commit unpacks to: GitHub's is
    `<repository>-<ref>` (a tag's leading `v` dropped) whatever the file is called; others'
    (GitLab's `<name>-<ref>.zip`) the file name without its suffix."""
    stem = _ARCHIVE_SUFFIX.sub("", url_filename(url))
    github = _GITHUB_ARCHIVE.fullmatch(_ARCHIVE_SUFFIX.sub("", url))
    if not github:
        return (stem,)
    repository, ref = github.groups()
    return tuple(dict.fromkeys((f"{repository}-{ref}", f"{repository}-{ref.removeprefix('v')}")))


def where_from(engine: Engine, reader: str, entries: int, override: str) -> str:
    """plan=1's note on a leg's build-time downloads: where they are read, and how upstream gets them."""
    if entries:
        return f"upstream's build-time downloads: {entries} read by {reader}, fetched and pinned here; {override}"
    if any(item.reader == reader for item in engine.build_downloads):
        return (f"upstream's build-time downloads: read by {reader}, recorded, but no entry's `when` takes this leg: "
                f"whatever its build still downloads, upstream downloads itself (network on); {override}")
    return (f"upstream's build-time downloads: read by {reader} from the pinned tree, none recorded yet "
            f"(`python -m backends.steps.build_downloads record` fills [[build_downloads]]); {override}")


def check_build_downloads(engine: Engine, reader: str, tree: str = "{src}") -> Command:
    """A build command that fails, naming each URL, when the pinned tree declares a download
    the engine's `[[build_downloads]]` do not record (backends.steps.build_downloads check).
    Every recorded one counts, also those a `when` keeps from this leg: that is a maintainer's
    call that the leg never downloads it, and the network-off build holds it to that."""
    urls = [item.url for item in engine.build_downloads if item.reader == reader]
    return Command(f"check {reader} downloads", ("{python}", "-m", "backends.steps.build_downloads", "check",
                                                 "--reader", reader, "--tree", tree, "--given", *urls))
