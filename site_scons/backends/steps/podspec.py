"""Repackaging prebuilt xcframeworks named by a CocoaPods podspec (docs/upstream.md#tflite-ios).

    python -m backends.steps.podspec PODSPEC_JSON --field source.http \\
        --pins engines/tflite/engine.toml --xcframeworks TensorFlowLiteC [NAME...] --out DIR

The podspec's `--field` names the release archive. It is fetched through the download
cache (settings from ANIRA_CACHE, ANIRA_MIRRORS, ANIRA_OFFLINE, ANIRA_LOCK) and verified
against the sha256 pinned under the archive's file name in the `--pins` file's `[sha256]`
table. Each `<NAME>.xcframework` found in the archive goes to DIR, which is replaced as a
whole; the first NAME must have a device (ios-arm64) and a simulator slice.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import tomllib
import urllib.parse
from collections.abc import Mapping, Sequence
from pathlib import Path

from backends.model.platforms import platform_table
from backends.pins.engine_toml import record_pin
from backends.steps.extract import ExtractError, extract
from backends.steps.fetch import Download, Fetched, FetchError, FetchSettings, fetch
from backends.util.errors import BackendsError

DEFAULT_CACHE = ".cache/downloads"  # the `cache` option's default, relative to the repository
DEVICE_SLICE = platform_table().oses["ios"].device_slice


class PodspecError(BackendsError, RuntimeError):
    """The podspec, the pin or the archive is not what the step needs; the message says why."""


def settings_from_env(environ: Mapping[str, str]) -> FetchSettings:
    """The step graph's fetch settings, as it passes them to child commands."""
    mirrors = tuple(m.strip() for m in environ.get("ANIRA_MIRRORS", "").split(",") if m.strip())
    return FetchSettings(
        cache_dir=Path(environ.get("ANIRA_CACHE") or DEFAULT_CACHE),
        mirrors=mirrors,
        offline=_flag(environ.get("ANIRA_OFFLINE", "0")),
        lock=_flag(environ.get("ANIRA_LOCK", "0")),
    )


def _flag(value: str) -> bool:
    return value.strip().lower() in ("1", "true", "yes", "on")


def podspec_field(podspec: Path, dotted: str) -> str:
    """The string at `dotted` (e.g. "source.http") in the podspec JSON."""
    try:
        value: object = json.loads(podspec.read_text(encoding="utf-8"))
    except (OSError, ValueError) as error:
        raise PodspecError(f"cannot read the podspec {podspec}: {error}") from None
    walked: list[str] = []
    for key in dotted.split("."):
        if not isinstance(value, dict) or key not in value:
            keys = ", ".join(sorted(value)) if isinstance(value, dict) else type(value).__name__
            raise PodspecError(f"{podspec}: no field {dotted!r} ({'.'.join(walked) or 'top level'} "
                               f"has: {keys})")
        value = value[key]
        walked.append(key)
    if not isinstance(value, str) or not value:
        raise PodspecError(f"{podspec}: field {dotted!r} is {value!r}, not a URL")
    return value


def url_filename(url: str) -> str:
    name = urllib.parse.unquote(urllib.parse.urlsplit(url).path.rsplit("/", 1)[-1])
    if not name:
        raise PodspecError(f"cannot take a file name from the URL {url}")
    return name


def pinned_sha256(pins: Path, filename: str) -> str | None:
    """The `[sha256]` entry for `filename` in the engine.toml `pins`; None when absent or empty."""
    try:
        table = tomllib.loads(pins.read_text(encoding="utf-8")).get("sha256", {})
    except (OSError, tomllib.TOMLDecodeError) as error:
        raise PodspecError(f"cannot read the pins file {pins}: {error}") from None
    value = table.get(filename) if isinstance(table, dict) else None
    return value or None


def fetch_release(url: str, filename: str, pins: Path, settings: FetchSettings) -> Fetched:
    pin = pinned_sha256(pins, filename)
    if pin is None and not settings.lock:
        raise PodspecError(
            f"{filename} (from the podspec) has no sha256 pin: add \"{filename}\" = \"<sha256>\" "
            f"to [sha256] in {pins}: `scons lock` records it from any host (or build with lock=1)")
    try:
        fetched = fetch(Download(url=url, filename=filename, sha256=pin), settings)
    except FetchError as error:
        raise PodspecError(f"{error} (pin: \"{filename}\" in [sha256] of {pins})") from None
    if pin is None:
        record_pin(pins, filename, fetched.sha256)  # lock=1: trust on first use, like every other download
    return fetched


def find_xcframework(tree: Path, name: str) -> Path:
    """The shallowest `<name>.xcframework` directory under `tree` (symlinks not followed)."""
    wanted = f"{name}.xcframework"
    found: list[Path] = []
    for directory, subdirs, _ in os.walk(tree):
        if wanted in subdirs and not os.path.islink(os.path.join(directory, wanted)):
            found.append(Path(directory) / wanted)
        subdirs[:] = [d for d in subdirs if d != wanted]  # never search inside one
    if not found:
        raise PodspecError(f"{wanted} not found in the release archive; check the podspec's "
                           "source field and the --xcframeworks names")
    return min(found, key=lambda path: (len(path.relative_to(tree).parts), str(path)))


def check_slices(xcframework: Path) -> list[str]:
    """The slice directories of `xcframework`; an error unless a device (ios-arm64) and a
    simulator slice are among them."""
    slices = sorted(entry.name for entry in xcframework.iterdir() if entry.is_dir())
    found = ", ".join(slices) or "none"
    if DEVICE_SLICE not in slices:
        raise PodspecError(f"{xcframework.name}: no device ({DEVICE_SLICE}) slice (slices: {found})")
    if not any("simulator" in name for name in slices):
        raise PodspecError(f"{xcframework.name}: no simulator slice (slices: {found})")
    return slices


def _replace_dir(new: Path, dest: Path) -> None:
    """Swap `new` into `dest`: readers see the old tree or the complete new one."""
    old = Path(f"{dest}.old-{os.getpid()}")
    shutil.rmtree(old, ignore_errors=True)
    if os.path.lexists(dest):
        os.replace(dest, old)
    os.replace(new, dest)
    shutil.rmtree(old, ignore_errors=True)


def repackage(archive: Path, names: Sequence[str], out: Path) -> dict[str, list[str]]:
    """Extract `archive`, put each `<name>.xcframework` into `out` (replacing it); returns
    each name's slices."""
    out = Path(os.path.abspath(out))
    out.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=f".{out.name}.", dir=out.parent) as scratch:
        unpacked, staged = Path(scratch) / "unpacked", Path(scratch) / "staged"
        try:
            extract(archive, unpacked)
        except ExtractError as error:
            raise PodspecError(str(error)) from None
        frameworks = {name: find_xcframework(unpacked, name) for name in names}
        check_slices(frameworks[names[0]])
        staged.mkdir()
        slices = {}
        for name, source in frameworks.items():
            # A move keeps symlinks as they are, like `cp -R`; extraction already made them safe.
            os.replace(source, staged / source.name)
            slices[name] = sorted(e.name for e in (staged / source.name).iterdir() if e.is_dir())
        _replace_dir(staged, out)
    return slices


def _argument_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m backends.steps.podspec",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("podspec", type=Path, metavar="PODSPEC_JSON")
    parser.add_argument("--field", default="source.http", help="dotted path of the archive URL")
    parser.add_argument("--pins", type=Path, required=True, metavar="ENGINE_TOML",
                        help="the file whose [sha256] table pins the archive")
    parser.add_argument("--xcframeworks", nargs="+", required=True, metavar="NAME",
                        help="xcframeworks to keep; the first must have device and simulator slices")
    parser.add_argument("--out", type=Path, required=True, metavar="DIR")
    return parser


def main(argv: Sequence[str] | None = None, environ: Mapping[str, str] | None = None) -> int:
    args = _argument_parser().parse_args(argv)
    settings = settings_from_env(os.environ if environ is None else environ)
    try:
        url = podspec_field(args.podspec, args.field)
        filename = url_filename(url)
        fetched = fetch_release(url, filename, args.pins, settings)
        slices = repackage(fetched.path, list(dict.fromkeys(args.xcframeworks)), args.out)
    except (PodspecError, OSError) as error:
        print(f"ERROR: {error}", file=sys.stderr)
        return 1
    for name, found in slices.items():
        print(f"podspec: {name}.xcframework ({', '.join(found)}) -> {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
