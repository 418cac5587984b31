"""What a leg's steps will do, as data: downloads, patches, commands, staging, contract.

Recipes return a `Plan`; the step graph executes it; `scons plan=1` prints it. Paths are
symbolic (`{src}`, `{build}`, `{install}`, `{stage}`, `{short}`, `{download:<name>}`, `{python}`)
so plans are host-independent and their goldens stable.
"""
from __future__ import annotations

import posixpath
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Mapping

from backends.model.engine import BuildDownload, PatchSpec
from backends.model.leg import Leg


def frozen(mapping: Mapping[str, str] | None = None) -> Mapping[str, str]:
    return MappingProxyType(dict(mapping or {}))


@dataclass(frozen=True)
class Download:
    name: str
    url: str
    filename: str
    sha256: str = ""
    kind: str = "archive"  # archive | git | file
    ref: str = ""
    commit: str = ""
    submodules: bool = False
    # With `submodules`: only these submodule paths, each with its own submodules (empty:
    # every one). Their commits are the gitlinks the superproject's tree records at `commit`.
    submodule_paths: tuple[str, ...] = ()
    unpack: bool = True
    # Top-level directories the download may come in, first existing wins; `{extract:<name>}`
    # resolves to it. Lets an origin of another layout (a wheel's `torch/` for a release
    # zip's `libtorch/`) feed the same stage rules. Empty: the extraction root itself.
    roots: tuple[str, ...] = ()
    # A JSON field of this file that names a further download (a podspec's `source.http`):
    # `scons lock` records that URL in engine.toml's `[nested]` and pins the file it names
    # under its own file name; the build step that reads the field fetches it.
    names: str = ""
    # Fetched when pinned (or given by origin=, or under lock); an unpinned one is skipped, its
    # copy rules not required: license texts the origin may carry itself (a wheel does).
    optional: bool = False
    # What upstream's build would download by itself, when this is that file (engine.toml
    # [[build_downloads]]): the SBOM and `scons fetch` tell it from the project's own inputs.
    upstream: BuildDownload | None = None


@dataclass(frozen=True)
class Command:
    label: str
    argv: tuple[str, ...]
    env: Mapping[str, str] = field(default_factory=frozen)
    cwd: str = "{src}"
    # False: the project served every download it needs, so it runs with the network off
    # where the host allows (runner/network.py); a download it still tries fails, named.
    network: bool = True


@dataclass(frozen=True)
class CopyRule:
    """Copy files matching `pattern` (rooted at a symbol such as `{extract:release}`) into `dest`.

    A `**` keeps the path below it (`{x}/*/include/**` -> `include/a/b.h`); without one the
    file lands under its own name, or `rename` when given. Symlinks stay symlinks.
    """

    pattern: str
    dest: str
    rename: str = ""
    required: bool = True
    dereference: bool = False  # copy what a symlink points to, not the link


@dataclass(frozen=True)
class Bundle:
    """Merge the leg's own static libraries into one archive in the stage."""

    output: str  # stage-relative, e.g. lib/libonnxruntime.a
    libraries_from: str  # a symbolic dir whose static libraries the build produced, or a list file of them
    exclude: str = ""  # regex over paths below `libraries_from` (fetched sources, test fixtures, host tools)
    fmt: str = ""  # elf | macho | coff; empty = detected from the libraries
    # COFF only: the librarian (a program or symbolic path; empty = lib.exe in an MSVC
    # environment, else llvm-lib) and the /MACHINE every member must have.
    tool: str = ""
    machine: str = ""


@dataclass(frozen=True)
class Evidence:
    """What proves that one accelerator is compiled into a package (engines/contracts.toml)."""

    accelerator: str
    files: tuple[str, ...] = ()  # member globs
    symbols: tuple[str, ...] = ()  # names (or `*` globs) a library of the package defines
    links: tuple[str, ...] = ()  # substrings of a library a shipped shared library loads
    targets: tuple[str, ...] = ()  # CMake targets of the export sets CMake generated
    libraries: tuple[str, ...] = ()  # globs over a shipped shared library's own name (SONAME, install name, DLL)

    def __bool__(self) -> bool:
        return bool(self.files or self.symbols or self.links or self.targets or self.libraries)


@dataclass(frozen=True)
class Floor:
    """The least a real build of one of a package's main libraries is (engines/contracts.toml):
    a stub under the engine's name is less."""

    library: str  # member glob, symlinks followed; each library it reaches is held to the floor
    min_bytes: int = 0
    min_symbols: int = 0  # exported (defined external) symbols, ELF version names not counted


@dataclass(frozen=True)
class VersionProbe:
    """Where an archive states its own version: `kind` says how to read it.

    text        the first group of regex `pattern` in member `member`
    file-name   the x.y.z suffix of the library file name(s) matching `member`
    elf-version the x.y.z of an ELF version definition `<pattern>x.y.z` (VERS_1.26.0)
    dylib       the Mach-O LC_ID_DYLIB current version
    dll         major.minor of the PE VERSIONINFO file version
    """

    kind: str
    member: str
    pattern: str = ""


# The largest file GitHub takes as a release asset: its documented limit is 2 GiB per file, but
# uploads fail from about 2.0e9 bytes. One limit for verify, the release's uploads and the
# binary cache's (its entries are release assets too), so an archive verify passes always
# uploads.
RELEASE_ASSET_MAX_BYTES = 2_000_000_000


@dataclass(frozen=True)
class Contract:
    """What the archive itself must (not) contain; checked by verify on the archive."""

    required: tuple[str, ...] = ()
    forbidden: tuple[str, ...] = ()
    symbols: tuple[tuple[str, str], ...] = ()  # (library glob, exported symbol)
    install_names: tuple[tuple[str, str], ...] = ()  # (dylib glob, its install name in every slice)
    header_api: tuple[str, str] | None = None  # (header path, library glob): header API <= library's
    relocatable: bool = True  # no build-tree or other foreign absolute paths in shipped build metadata
    max_bytes: int = RELEASE_ASSET_MAX_BYTES
    # The leg's platform: every library must be a binary of its OS and architecture(s)
    # (the Mach-O slices of a universal package).
    platform: str = ""
    accelerators: tuple[Evidence, ...] = ()  # present: the flavor's accelerators
    foreign_accelerators: tuple[Evidence, ...] = ()  # absent: every other accelerator of the engine
    # Globs over the identity (SONAME, install name, DLL name) of every shared library the
    # package ships; empty: any.
    allowed_libraries: tuple[str, ...] = ()
    versions: tuple[VersionProbe, ...] = ()  # each must state the leg's version
    min_os: str = ""  # iOS slices may not require a newer OS (Mach-O LC_BUILD_VERSION minos)
    # Static libraries: a C++ or Objective-C symbol they leave undefined must be defined in
    # the package or match `system_symbols` (what the OS's link line provides); a C symbol
    # only when it has one of the engine's own `internal_prefixes`.
    system_symbols: tuple[str, ...] = ()
    internal_prefixes: tuple[str, ...] = ()
    floors: tuple[Floor, ...] = ()  # the main libraries are no stubs


@dataclass(frozen=True)
class Smoke:
    project: str  # smoke/<engine>
    defines: Mapping[str, str] = field(default_factory=frozen)
    model: str = ""  # the model the program runs, relative to the project (`../tflite/add.tflite`: shared)

    @property
    def model_path(self) -> str:
        """The model as a repository path (`smoke/tflite/add.tflite`), "" without one."""
        return posixpath.normpath(posixpath.join(self.project, self.model)) if self.model else ""
    # The program reaches the library only through its C ABI (ORT's C++ API is inline over
    # it), so a MinGW build can consume an MSVC-built DLL: Windows smokes may run under wine.
    c_abi: bool = False
    # Accelerators whose runtime the program probes before its pass through them (the
    # runner may lack it: MPS on a hosted Mac); it reports each on a line of its own
    # (steps/smoke.py, "accelerator <name>: passed" or "accelerator <name>: absent: <why>").
    probes: tuple[str, ...] = ()


@dataclass(frozen=True)
class RuntimeLibrary:
    """A shared library the package ships that is not the engine's own (LibTorch's copy of
    GCC's libgomp): the SBOM lists each file matching `member` with `license`, and its
    license texts are carried under share/licenses/<name>/."""

    name: str
    member: str  # a glob over the stage's paths
    license: str  # an SPDX expression
    origin: str  # where it comes from, said in the SBOM


@dataclass(frozen=True)
class Plan:
    leg: Leg
    version: str
    archive: str  # archive file name (stem + .zip)
    downloads: tuple[Download, ...] = ()
    patches: tuple[PatchSpec, ...] = ()
    env: Mapping[str, str] = field(default_factory=frozen)
    build: tuple[Command, ...] = ()
    collect: tuple[CopyRule, ...] = ()
    exclude: tuple[str, ...] = ()
    bundle: Bundle | None = None
    fixups: tuple[Command, ...] = ()
    contract: Contract = Contract()
    smoke: Smoke | None = None
    notes: tuple[str, ...] = ()
    warnings: tuple[str, ...] = ()  # what a maintainer should act on (e.g. a patch past its `until`)
    # Upstream builds that write into their source tree (PyTorch's build_libtorch.py) get a
    # private per-leg copy of it, so two legs never share objects.
    private_source: bool = False
    # Whether CI may put a compiler cache launcher (ccache/sccache) into the upstream build.
    compiler_cache: bool = True
    runtimes: tuple[RuntimeLibrary, ...] = ()  # shipped libraries that are not the engine's own

    @property
    def steps(self) -> tuple[str, ...]:
        steps: list[str] = []
        if self.leg.aggregate:
            steps += ["inputs", "merge"]
        else:
            steps.append("fetch")
            if any(d.unpack for d in self.downloads):
                steps.append("extract")
            if self.patches:
                steps.append("patch")
            if self.build:
                steps.append("build")
            steps.append("stage")
            if self.bundle:
                steps.append("bundle")
            if self.fixups:
                steps.append("fixup")
        steps += ["archive", "verify", "smoke", "publish"]
        return tuple(steps)


def origin_for(origins: Mapping[str, str], plan: Plan, download: Download) -> str:
    """The `origin=` standing in for one download of a plan: the one given by its source name,
    else an unnamed one when it is the plan's main (first) download; "" when none."""
    if download.name in origins:
        return origins[download.name]
    if "" in origins and plan.downloads and download is plan.downloads[0]:
        return origins[""]
    return ""
