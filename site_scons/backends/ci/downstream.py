"""The downstream gate: anira's own test suite against a draft release's archives
(docs/ci-and-release.md#cutting-a-release, docs/licenses-and-provenance.md).

anira's `cmake/AniraBackends.cmake` downloads one archive per engine, named by the engine's
libname and version, from `ANIRA_<ENGINE>_URL` (checked against `ANIRA_<ENGINE>_SHA256`,
named with `ANIRA_<ENGINE>_VERSION`), unpacks it without flattening a top-level folder and
reads `include/` and `lib/` at its root (LibTorch: `find_package(Torch)` through
`share/cmake/Torch`; iOS: `<libname>.xcframework/`, TFLite's `TensorFlowLiteC.xcframework/`).
`layout` says what that asks of a leg's archive; the release's anira job passes the
arguments `cmake_args` makes: one shared CPU archive per engine anira knows, as a file://
URL of the archive the draft holds.

The release job stages, per gated platform, only what that platform's anira job reads (its
archives and manifests, SHA256SUMS, the matrix) as one artifact each (`anira-gate-<n>`), so an
anira job downloads three or four archives, not the release. The anira job checks anira and
its model repositories out at the commits `.github/anira.toml` pins (anira_pins.py).

    python -m backends.ci.downstream matrix --matrix ci-matrix.json --dist DIR
    python -m backends.ci.downstream stage --matrix ci-matrix.json --dist DIR --out DIR
    python -m backends.ci.downstream cmake-args --platform PLATFORM --matrix ci-matrix.json --dist DIR
    python -m backends.ci.downstream pins                     (repository=, commit= lines: anira's pin)
    python -m backends.ci.downstream models --anira DIR       (its model repositories, at their pins)
"""
from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any, Mapping, Sequence

from backends.ci import anira_pins
from backends.ci.release import SUMS_NAME
from backends.model.plan import Plan
from backends.model.platforms import platform_table
from backends.model.vocab import split_platform
from backends.util.errors import BackendsError
from backends.util.files import sha256_file

# The engines anira's AniraBackends.cmake knows, by the <ENGINE> of its variables.
ANIRA_ENGINES = {"libtorch": "LIBTORCH", "onnxruntime": "ONNXRUNTIME", "litert": "LITERT", "tflite": "TFLITE"}
# LiteRT and TFLite export the same TfLite* symbols: anira builds with one of them, LiteRT first.
EXCLUSIVE = ("litert", "tflite")
# Where the gate runs anira's tests (engines/platforms.toml's anira_gate): the first always, the
# others when the release has archives.
GATED_PLATFORMS = platform_table().gated()
REQUIRED_PLATFORM = GATED_PLATFORMS[0]
# What anira's configure is given besides the engines.
BASE_ARGS = ("-DBUILD_SHARED_LIBS=ON", "-DANIRA_WITH_TESTS=ON", "-DANIRA_BACKENDS_SKIP_REMOTE_CHECK=ON")
# The top-level entries an archive may have: anira never flattens a folder around them.
TOP_LEVEL = ("include", "lib", "share", "bin")
# The artifact one anira job downloads; ci.yml's release job uploads one per gated platform.
GATE_ARTIFACT = "anira-gate-{}"


class GateError(BackendsError, RuntimeError):
    """The release cannot be put through anira's tests as asked; the message says why."""


# -- the layout anira relies on ------------------------------------------------------------------

def layout(plan: Plan, libname: str) -> tuple[str, ...]:
    """The member prefixes anira reads from a leg's archive (each must be a prefix of one of
    the contract's required members)."""
    leg = plan.leg
    if leg.platform == "ios":
        return (f"{'TensorFlowLiteC' if leg.engine == 'tflite' else libname}.xcframework/",)
    prefixes = ["include/", "lib/"]
    if leg.platform == "android":
        prefixes = ["include/", *(f"lib/{split_platform(abi)[1]}/" for abi in platform_table()["android"].slices)]
    if leg.engine == "libtorch":
        prefixes.append("share/cmake/Torch/")
    return tuple(prefixes)


def top_level_ok(member: str) -> bool:
    """Whether an archive member sits where anira looks: under include/, lib/, share/, bin/
    or an xcframework, never inside a folder wrapping the whole archive."""
    first = member.split("/", 1)[0]
    return first in TOP_LEVEL or first.endswith(".xcframework")


# -- the gate's matrix and arguments -------------------------------------------------------------

def consumable(entry: Mapping[str, Any]) -> bool:
    """A leg whose archive anira can take: a published shared CPU release build of an engine it knows."""
    return (entry.get("engine") in ANIRA_ENGINES and entry.get("publish") is True and entry.get("kind") == "shared"
            and entry.get("flavor") == "cpu" and entry.get("config") == "release"
            and not entry.get("experimental"))


def present(entries: Sequence[Mapping[str, Any]], dist: Path, platform: str) -> dict[str, Mapping[str, Any]]:
    """The consumable legs of `platform` whose archive is in `dist`, by engine (LiteRT or TFLite)."""
    found = {str(e["engine"]): e for e in entries
             if consumable(e) and e.get("platform") == platform and (dist / str(e["archive"])).is_file()}
    if all(engine in found for engine in EXCLUSIVE):
        del found[EXCLUSIVE[1]]
    return found


def gate_matrix(entries: Sequence[Mapping[str, Any]], dist: Path) -> list[dict[str, str]]:
    """One job per gated platform with at least one archive anira can take (the one gated
    "always" in engines/platforms.toml: without one the release has nothing anira's tests can
    check)."""
    jobs: list[dict[str, str]] = []
    for platform in GATED_PLATFORMS:
        legs = present(entries, dist, platform)
        if legs:
            jobs.append({"platform": platform, "runner": str(next(iter(legs.values()))["runner"]),
                         "artifact": GATE_ARTIFACT.format(len(jobs) + 1)})
    if not any(job["platform"] == REQUIRED_PLATFORM for job in jobs):
        raise GateError(f"no shared CPU archive of {', '.join(ANIRA_ENGINES)} for {REQUIRED_PLATFORM} in {dist}: "
                        "anira's tests cannot gate this release (were those legs built?)")
    return jobs


def stage(entries: Sequence[Mapping[str, Any]], dist: Path, matrix_file: Path, out: Path) -> list[dict[str, str]]:
    """The gate matrix, and per job `out/<n>/` holding exactly what its anira job reads: its
    platform's archives with their manifests, SHA256SUMS and the matrix (hard links where
    the file system allows: no second copy of a gigabyte archive)."""
    jobs = gate_matrix(entries, dist)
    for index, job in enumerate(jobs, start=1):
        where = out / str(index)
        if where.exists():
            raise GateError(f"{where} exists already: stage into an empty directory")
        names = [name for entry in present(entries, dist, job["platform"]).values()
                 for name in (str(entry["archive"]), f"{entry['archive']}.json")]
        for name in [*names, SUMS_NAME]:
            _link(dist / name, where / "dist" / name)
        _link(matrix_file, where / "ci-matrix.json")
    return jobs


def _link(source: Path, dest: Path) -> None:
    if not source.is_file():
        raise GateError(f"{source} is missing: the gate takes the draft's files")
    dest.parent.mkdir(parents=True, exist_ok=True)
    try:
        os.link(source, dest)
    except OSError:
        dest.write_bytes(source.read_bytes())


def cmake_args(entries: Sequence[Mapping[str, Any]], dist: Path, platform: str) -> list[str]:
    """anira's configure arguments for `platform`: each engine it knows either taken from its
    archive in `dist` (URL, sha256, version, shared linkage) or turned off."""
    legs = present(entries, dist, platform)
    if not legs:
        raise GateError(f"no shared CPU archive of {', '.join(ANIRA_ENGINES)} for {platform} in {dist}")
    sums = _sums(dist)
    args = list(BASE_ARGS)
    for engine, name in ANIRA_ENGINES.items():
        entry = legs.get(engine)
        if entry is None:
            args.append(f"-DANIRA_WITH_{name}=OFF")
            continue
        archive = (dist / str(entry["archive"])).resolve()
        digest = _listed_digest(archive, sums)
        args += [f"-DANIRA_WITH_{name}=ON", f"-DANIRA_{name}_LINKAGE=shared", f"-DANIRA_{name}_URL={archive.as_uri()}",
                 f"-DANIRA_{name}_SHA256={digest}", f"-DANIRA_{name}_VERSION={_version(archive)}"]
    return args


def _sums(dist: Path) -> dict[str, str]:
    """SHA256SUMS of the draft (release.py wrote it over the archives it uploaded): name -> sha256."""
    path = dist / SUMS_NAME
    if not path.is_file():
        raise GateError(f"{path} is missing: the gate takes the draft's files, which the release step lists there")
    return {name.strip(): digest for digest, _, name in
            (line.partition("  ") for line in path.read_text(encoding="utf-8").splitlines() if line.strip())}


def _listed_digest(archive: Path, sums: Mapping[str, str]) -> str:
    """The archive's sha256, which must be the one the draft's SHA256SUMS lists."""
    digest = sha256_file(archive)
    if sums.get(archive.name) != digest:
        raise GateError(f"{archive.name} has sha256 {digest}, but SHA256SUMS lists "
                        f"{sums.get(archive.name) or 'no such archive'}: not the draft's bytes")
    return digest


def _version(archive: Path) -> str:
    """The engine version the archive's manifest states (what its name carries)."""
    manifest = archive.with_name(archive.name + ".json")
    try:
        return str(json.loads(manifest.read_text(encoding="utf-8"))["engine"]["version"])
    except (OSError, ValueError, KeyError, TypeError) as error:
        raise GateError(f"{manifest.name}: cannot read the engine version ({error})") from None


def _entries(path: Path) -> list[dict[str, Any]]:
    payload = json.loads(path.read_text(encoding="utf-8"))
    entries = payload.get("include") if isinstance(payload, dict) else payload
    if not isinstance(entries, list):
        raise GateError(f"{path}: expected `scons -Q ci-matrix` JSON ({{\"include\": [...]}})")
    return entries


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m backends.ci.downstream", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("command", choices=("matrix", "stage", "cmake-args", "pins", "models"))
    parser.add_argument("--matrix", type=Path, help="`scons -Q ci-matrix` JSON of the release")
    parser.add_argument("--dist", type=Path, help="the directory holding the draft's archives")
    parser.add_argument("--platform", choices=GATED_PLATFORMS, help="cmake-args: the platform anira builds on")
    parser.add_argument("--out", type=Path, help="stage: the directory that gets one folder per anira job")
    parser.add_argument("--anira", type=Path, help="models: anira's checkout")
    parser.add_argument("--root", type=Path, default=Path.cwd(), help="project root (default: .)")
    args = parser.parse_args(argv)
    try:
        if args.command in ("pins", "models"):
            return _pins_command(args.command, args.root, args.anira)
        if args.matrix is None or args.dist is None:
            raise GateError(f"{args.command} needs --matrix and --dist")
        entries = _entries(args.matrix)
        if args.command in ("matrix", "stage"):
            if args.command == "stage" and args.out is None:
                raise GateError("stage needs --out")
            jobs = stage(entries, args.dist, args.matrix, args.out) if args.command == "stage" \
                else gate_matrix(entries, args.dist)
            print(json.dumps({"include": jobs}, separators=(",", ":")))
        else:
            if not args.platform:
                raise GateError("cmake-args needs --platform")
            print("\n".join(cmake_args(entries, args.dist, args.platform)))
    except (GateError, anira_pins.PinError, OSError, ValueError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    return 0


def _pins_command(command: str, root: Path, anira: Path | None) -> int:
    pins = anira_pins.load(root)
    if command == "pins":
        print(f"repository={pins.repository}\ncommit={pins.commit}")
    elif anira is None:
        raise GateError("models needs --anira (anira's checkout)")
    else:
        anira_pins.checkout(pins, anira)
    return 0


if __name__ == "__main__":
    sys.exit(main())
