"""Windows' MAX_PATH on the runners: the longest path each Windows leg's plan creates.

Assumptions, each a number a runner cannot change:

- GitHub checks a repository out to `D:\\a\\<repository>\\<repository>`; the repository is
  `anira-backends` (its README's title), so the workspace is 34 characters.
- The tree layout is the step graph's: `build\\git\\<engine>-<name>-<16 hex>\\<leaf>` for a
  checkout, `build\\src\\<engine>-<version>-<16 hex>\\<leaf>` for a patched tree,
  `build\\legs\\<leg>\\src\\<leaf>` for a leg's private copy, and the plan's own symbols
  (`{build}`, `{short}`) for what the tools write.
- The deepest path a tool or tree holds below its directory, measured where a copy of the
  upstream tree was at hand and named where not (`DEEPEST_TOOL_PATHS`, `DEEPEST_SOURCE_PATHS`).

What compilers, Bazel and NSIS write (an output base, an install) must fit in 260
characters. A source tree may go past it: then everything that writes it must reach long
paths (git with core.longpaths, copies through the extended-length `\\\\?\\` form).
CMake build trees (`{build}` of the ONNX Runtime, TFLite and ExecuTorch builds) are not
estimated: their depth follows upstream's targets, and no build log here shows it.
"""
from __future__ import annotations

import ntpath
import os
from pathlib import Path, PureWindowsPath

import pytest

from backends.model.matrix import load_matrix
from backends.model.plan import Plan
from backends.model.recipes import plan_all
from backends.steps import git, source, upstream
from backends.steps.context import LegDirs, expand
from backends.util import files
from backends.util.files import extended_length, mirror_tree

ROOT = Path(__file__).resolve().parents[3]
MAX_PATH = 260  # including the drive: the longest path Win32 takes without `\\?\`
WORKSPACE = PureWindowsPath(r"D:\a\anira-backends\anira-backends")
HASH = "0123456789abcdef"  # graph.short_hash: 16 hex digits

# The deepest relative path known below what a plan names as a tool's directory.
DEEPEST_TOOL_PATHS = {
    # Bazel extracts TensorFlow (LiteRT's org_tensorflow) whole under external/; its deepest
    # file, in TensorFlow's repository listing (and at 163 characters in LiteRT's own tflite/
    # copy at the pinned commit), outranks XNNPACK's (100), abseil's (74) and flatbuffers' (102).
    "--output_base=": "external/org_tensorflow/tensorflow/lite/tools/benchmark/experimental/delegate_performance/"
                      "android/src/main/java/org/tensorflow/lite/benchmark/delegateperformance/"
                      "ModelBenchmarkReportInterface.java",
    # LLVM's installer: clang's resource headers (llvm-project clang/lib/Headers) under lib\clang\20\include.
    "/D=": "lib/clang/20/include/openmp_wrappers/__clang_openmp_device_functions.h",
}

# The deepest path of an upstream tree (with its submodules), by (engine, download name).
DEEPEST_SOURCE_PATHS = {
    # measured at the pinned commit 89c838788bba
    ("litert", "source"): 163,
    # measured at v1.3.1 and its submodules' commits: third-party/ao/third_party/cutlass/examples/68_hopper_...
    ("executorch", "source"): 199,
    # upstream's own Windows checkout failed without core.longpaths at a ~40-character workspace
    # (pytorch/pytorch#138411, third_party/composable_kernel): deeper than 220
    ("libtorch", "source"): 221,
    # TensorFlow 2.17: the delegate_performance path above, below the repository root
    ("tflite", "source"): 172,
    ("litert", "cpuinfo"): 52,  # measured: pytorch/cpuinfo
}


def windows_plans() -> list[Plan]:
    matrix = load_matrix(ROOT)
    return [plan for plan in plan_all(matrix, [leg for leg in matrix.legs if leg.os == "windows"])
            if not plan.leg.aggregate]


def runner_dirs(leg_id: str) -> LegDirs:
    base = WORKSPACE / "build" / "legs" / leg_id
    return LegDirs(src=base / "src", build=base / "work", install=base / "install", stage=base / "stage",  # type: ignore[arg-type]
                   logs=base / "logs")


def tool_directories(plan: Plan) -> list[tuple[str, str]]:
    """(flag, directory on the runner) of every tool directory the plan's commands name."""
    dirs = runner_dirs(plan.leg.id)
    found = []
    for command in (*plan.build, *plan.fixups):
        for arg in command.argv:
            for flag in DEEPEST_TOOL_PATHS:
                if arg.startswith(flag):
                    found.append((flag, expand(arg.removeprefix(flag), dirs, {}) or ""))
    return found


def deepest(directory: str, relative: str) -> str:
    return ntpath.join(ntpath.normpath(directory), ntpath.normpath(relative))


def test_the_workspace_assumption() -> None:
    assert len(str(WORKSPACE)) == 34


def test_tool_directories_fit_max_path() -> None:
    checked = {}
    for plan in windows_plans():
        for flag, directory in tool_directories(plan):
            path = deepest(directory, DEEPEST_TOOL_PATHS[flag])
            checked[(plan.leg.id, flag)] = len(path)
            assert len(path) < MAX_PATH, f"{plan.leg.id}: {len(path)} characters: {path}"
    # every Bazel leg on Windows, and LLVM on arm64
    assert {leg for leg, flag in checked if flag == "--output_base="} >= {
        "litert-windows-x86_64-static", "litert-windows-arm64-static-debug", "litert-windows-arm64-shared"}
    assert {leg for leg, flag in checked if flag == "/D="} == {
        "litert-windows-arm64-static", "litert-windows-arm64-static-debug", "litert-windows-arm64-shared"}
    print(f"\nlongest tool path: {max(checked.values())} characters (limit {MAX_PATH})")


def test_the_per_leg_build_directory_would_not_fit() -> None:
    """Why the short directory: Bazel's output base in the leg's {build}, where it was."""
    dirs = runner_dirs("litert-windows-arm64-static-debug")
    old = deepest(expand("{build}/bazel-base", dirs, {}) or "", DEEPEST_TOOL_PATHS["--output_base="])
    assert len(old) >= MAX_PATH


def source_trees(plan: Plan) -> list[tuple[str, str, str]]:
    """(download name, who writes it, tree on the runner) of every checkout the leg builds from."""
    leg = plan.leg
    build = WORKSPACE / "build"
    trees = []
    for download in plan.downloads:
        if download.kind != "git":
            continue
        leaf = download.filename.removesuffix(".git") or download.name
        trees.append((download.name, "git", str(build / "git" / f"{leg.engine}-{download.name}-{HASH}" / leaf)))
        if download.name == "source" and plan.patches:
            trees.append((download.name, "copy_tree", str(build / "src" / f"{leg.engine}-{plan.version}-{HASH}" / leaf)))
        if download.name == "source" and plan.private_source:
            trees.append((download.name, "private_copy", str(build / "legs" / leg.id / "src" / leaf)))
    return trees


def test_source_trees_past_max_path_are_written_long_path_aware() -> None:
    over = set()
    for plan in windows_plans():
        for name, writer, tree in source_trees(plan):
            depth = DEEPEST_SOURCE_PATHS.get((plan.leg.engine, name))
            if depth is None or len(tree) + 1 + depth < MAX_PATH:
                continue
            over.add((plan.leg.id, writer))
            if writer == "git":
                assert "core.longpaths=true" in git._CONFIG
    # the trees that do go past it, and are written by each kind of writer
    assert ("libtorch-windows-arm64-shared", "private_copy") in over
    assert ("libtorch-windows-arm64-shared", "copy_tree") in over  # the Windows arm64 patch
    assert ("executorch-windows-x86_64-static", "git") in over


def test_copies_go_through_the_long_path_walker(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    calls = []
    monkeypatch.setattr(upstream, "mirror_tree", lambda *args: calls.append(("private_copy", args[-1])))
    monkeypatch.setattr(source, "mirror_tree", lambda *args: calls.append(("copy_tree", None)))
    (tmp_path / "shared").mkdir()
    upstream.private_copy(tmp_path / "shared", tmp_path / "legs/x/src/pytorch", "k", windows=True)
    source.copy_tree(tmp_path / "shared", tmp_path / "patched")
    assert calls == [("private_copy", True), ("copy_tree", None)]


@pytest.mark.parametrize("given, expected", [
    (r"D:\a\repo\repo\build\legs\x\src", r"\\?\D:\a\repo\repo\build\legs\x\src"),
    (r"D:/a/repo/build\legs/..\git", r"\\?\D:\a\repo\build\git"),  # normalised: `\\?\` turns that off
    (r"\\server\share\tree", r"\\?\UNC\server\share\tree"),
    (r"\\?\D:\already", r"\\?\D:\already"),
])
def test_extended_length_paths(given: str, expected: str) -> None:
    assert extended_length(given, windows=True) == expected


def test_extended_length_leaves_other_systems_alone() -> None:
    assert extended_length("/srv/build/x", windows=False) == "/srv/build/x"
    assert files.extended_length(Path("rel/x"), windows=False) == "rel/x"


def test_mirror_tree_copies_files_dirs_and_symlinks_unfollowed(tmp_path: Path) -> None:
    origin = tmp_path / "origin"
    (origin / "a/b").mkdir(parents=True)
    (origin / "a/b/f.txt").write_text("x")
    (origin / "empty").mkdir()
    os.symlink("a", origin / "link-to-dir")
    os.symlink("missing", origin / "dangling")
    copied = []

    def copy(src: str, dst: str) -> None:
        copied.append(os.path.relpath(src, origin))
        if os.path.islink(src):
            os.symlink(os.readlink(src), dst)
        else:
            Path(dst).write_bytes(Path(src).read_bytes())

    mirror_tree(origin, tmp_path / "dest", copy, windows=False)
    assert sorted(copied) == ["a/b/f.txt", "dangling", "link-to-dir"]  # the linked dir is not walked
    assert (tmp_path / "dest/empty").is_dir() and os.readlink(tmp_path / "dest/link-to-dir") == "a"
    assert (tmp_path / "dest/a/b/f.txt").read_text() == "x"
