"""macOS universal binaries: lipo two single-arch packages into one (docs/upstream.md#universal).

The architectures of each input come from binfmt.macho, which reads the headers itself.
"""
from __future__ import annotations

import filecmp
import os
import shutil
import subprocess
from collections.abc import Sequence
from pathlib import Path

from backends.binfmt.macho import macho_archs
from backends.binfmt.objects import object_format
from backends.model.platforms import platform_table
from backends.util import toolchain
from backends.util.errors import BackendsError
from backends.util.files import temp_path_for


class UniversalError(BackendsError, RuntimeError):
    """Lipo inputs or package trees that cannot be merged into a universal one."""


# --- lipo ---------------------------------------------------------------------------------

def _lipo() -> str:
    return toolchain.require_tool("llvm-lipo", "creating universal binaries",
                                  prefer_native=True)


def lipo_create(inputs: Sequence[Path], out: Path) -> None:
    """`lipo -create` thin `inputs` (one architecture each, all different) into `out`."""
    if len(inputs) < 2:
        raise UniversalError(f"lipo {out}: needs at least two thin inputs, got {len(inputs)}")
    seen: dict[str, Path] = {}
    for path in inputs:
        archs = macho_archs(Path(path))
        if len(archs) != 1:
            found = " ".join(archs) or "none"
            raise UniversalError(
                f"lipo {out}: {path} must be thin (one architecture), has {found}")
        if archs[0] in seen:
            raise UniversalError(
                f"lipo {out}: {path} and {seen[archs[0]]} are both {archs[0]}")
        seen[archs[0]] = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    temp = temp_path_for(out)
    tool = _lipo()
    completed = subprocess.run([tool, "-create", *map(str, inputs), "-output", str(temp)],
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                               text=True, check=False)
    if completed.returncode != 0:
        temp.unlink(missing_ok=True)
        raise UniversalError(f"{os.path.basename(tool)} -create failed for {out} "
                             f"(exit {completed.returncode}):\n{completed.stdout.strip()}")
    os.replace(temp, out)


# --- package trees ------------------------------------------------------------------------

# The two slices' arches, as reports name them (engines/platforms.toml, macos-universal's slices).
_X86, _ARM = (platform_table()[token].arch for token in platform_table().aggregate_slices["universal"])


def universal_tree(x86_dir: Path, arm_dir: Path, out_dir: Path) -> list[str]:
    """Merge two unpacked single-arch package trees into `out_dir` (wiped first).

    Everything comes from the arm64 tree; each regular file under `lib/` that both
    trees have and that is Mach-O (library or archive) is lipo'ed instead; symlinks
    stay symlinks; files present in only one tree are copied. Returns one report line
    per lipo'ed file, file from a single tree, and arm64 copy that differs from x86_64.
    """
    x86_dir, arm_dir, out_dir = Path(x86_dir), Path(arm_dir), Path(out_dir)
    for tree in (x86_dir, arm_dir):
        if not tree.is_dir():
            raise UniversalError(f"{tree}: package tree not found")
    if out_dir.exists():
        shutil.rmtree(out_dir)
    out_dir.mkdir(parents=True)
    arm_entries = _tree_entries(arm_dir)
    x86_entries = _tree_entries(x86_dir)
    report: list[str] = []
    for relative in sorted(arm_entries | x86_entries):
        report.extend(_merge_entry(relative, x86_dir, arm_dir, out_dir,
                                   relative in x86_entries, relative in arm_entries))
    return report


def _tree_entries(root: Path) -> set[str]:
    """Posix relative paths of files and symlinks (symlinked dirs included, not entered)."""
    entries = set()
    for directory, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            path = Path(directory) / name
            if path.is_symlink() or path.is_file():
                entries.add(path.relative_to(root).as_posix())
    return entries


def _merge_entry(relative: str, x86_dir: Path, arm_dir: Path, out_dir: Path,
                 in_x86: bool, in_arm: bool) -> list[str]:
    target = out_dir / relative
    target.parent.mkdir(parents=True, exist_ok=True)
    if not in_x86 or not in_arm:
        source = arm_dir / relative if in_arm else x86_dir / relative
        _copy_entry(source, target)
        return [f"only in {_ARM if in_arm else _X86}: {relative}"]
    arm, x86 = arm_dir / relative, x86_dir / relative
    if _lipo_candidate(relative, arm, x86):
        lipo_create([x86, arm], target)
        return [f"lipo {relative}"]
    _copy_entry(arm, target)
    if arm.is_symlink() or x86.is_symlink():
        same = arm.is_symlink() and x86.is_symlink() and os.readlink(arm) == os.readlink(x86)
    else:
        same = filecmp.cmp(arm, x86, shallow=False)
    return [] if same else [f"kept {_ARM} copy of {relative} (differs from {_X86})"]


def _lipo_candidate(relative: str, arm: Path, x86: Path) -> bool:
    if not relative.startswith("lib/"):
        return False
    if arm.is_symlink() or x86.is_symlink() or not (arm.is_file() and x86.is_file()):
        return False
    return object_format(arm) == "macho" and object_format(x86) == "macho"


def _copy_entry(source: Path, target: Path) -> None:
    if source.is_symlink():
        os.symlink(os.readlink(source), target)
    else:
        shutil.copy2(source, target)
