"""Every slice an xcframework's Info.plist declares is there and is what it claims, by
its Mach-O load commands: architectures, platform (device or simulator) and, on device
slices, a minimum OS no newer than the package promises."""
from __future__ import annotations

import plistlib
import posixpath
import re

from backends.binfmt.inspect import binary_archs, macho_min_os, macho_platforms
from backends.model.engine import version_key
from backends.steps.checks.view import ArchiveView

_PLIST = re.compile(r"^([^/]+\.xcframework)/Info\.plist$")
PLATFORMS = {("ios", ""): "ios", ("ios", "simulator"): "iossimulator", ("ios", "maccatalyst"): "maccatalyst",
             ("macos", ""): "macos"}


def check_xcframeworks(view: ArchiveView, min_os: str) -> list[str]:
    problems = []
    for name in view.names:
        match = _PLIST.match(name)
        if match:
            problems += _check_xcframework(view, match.group(1), name, min_os)
    return problems


def _check_xcframework(view: ArchiveView, root: str, plist: str, min_os: str) -> list[str]:
    try:
        libraries = plistlib.loads(view.read(plist)).get("AvailableLibraries", [])
    except (plistlib.InvalidFileException, ValueError) as error:
        return [f"{plist} is not a property list: {error}"]
    if not libraries:
        return [f"{plist} declares no libraries"]
    problems = []
    for library in libraries:
        problems += _check_slice(view, root, library, min_os)
    return problems


def _binary(root: str, library: dict) -> str:
    path = f"{root}/{library.get('LibraryIdentifier', '')}/{library.get('LibraryPath', '')}"
    if path.endswith(".framework"):
        path += "/" + posixpath.basename(path)[:-len(".framework")]
    return path


def _check_slice(view: ArchiveView, root: str, library: dict, min_os: str) -> list[str]:
    binary = _binary(root, library)
    member = view.follow(binary)
    if member is None:
        return [f"{root}: the slice {library.get('LibraryIdentifier')} has no binary {binary}"]
    fmt, archs = binary_archs(view.file(member))
    if fmt != "macho":
        return [f"{member} is no Mach-O binary"]
    problems = []
    declared = set(library.get("SupportedArchitectures", []))
    if archs != declared:
        problems.append(f"{member} has architectures {sorted(archs)}; Info.plist declares {sorted(declared)}")
    platform = PLATFORMS.get((library.get("SupportedPlatform", ""), library.get("SupportedPlatformVariant", "")))
    found = macho_platforms(view.file(member))
    if platform and found != {platform}:
        problems.append(f"{member} is built for {', '.join(sorted(found)) or 'no platform'}; "
                        f"its slice is {platform}")
    if platform == "ios":  # arm64 simulators exist only since iOS 14: their slices say 14.0
        problems += _check_min_os(member, macho_min_os(view.file(member)), min_os)
    return problems


def _check_min_os(member: str, per_arch: dict[str, str], promised: str) -> list[str]:
    if not promised:
        return []
    newer = {arch: version for arch, version in per_arch.items() if (version_key(version, 3) or ()) > (version_key(promised, 3) or ())}
    return [f"{member} requires {arch} OS {version}, newer than the {promised} the package promises"
            for arch, version in sorted(newer.items())]

