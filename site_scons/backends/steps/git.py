"""Shallow checkouts of pinned upstream git sources."""
from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

from ..run import limited_env, run

_SHA = re.compile(r"[0-9a-f]{40}")
# PyTorch's and ExecuTorch's test paths exceed Windows' MAX_PATH (docs/upstream.md#libtorch-build, #executorch-build).
_CONFIG = ("-c", "core.longpaths=true")


def checkout(url: str, ref: str, dest: Path, *, submodules: bool, log: Path, label: str) -> str:
    """Check `ref` (a tag, a branch or a commit SHA) out shallowly into `dest`; return the commit.

    A SHA cannot be cloned with `--branch`; it is fetched by itself (GitHub allows fetching
    any reachable commit), as upstream does for LiteRT."""
    shutil.rmtree(dest, ignore_errors=True)
    dest.parent.mkdir(parents=True, exist_ok=True)
    env = limited_env({})

    def git(*args: str, cwd: Path = dest.parent) -> None:
        run(["git", *_CONFIG, *args], env=env, cwd=cwd, log=log, label=label)

    if _SHA.fullmatch(ref):
        dest.mkdir()
        git("init", "-q", cwd=dest)
        git("remote", "add", "origin", url, cwd=dest)
        git("fetch", "--depth", "1", "origin", ref, cwd=dest)
        git("checkout", "--detach", "FETCH_HEAD", cwd=dest)
        if submodules:
            git("submodule", "update", "--init", "--recursive", "--depth", "1", cwd=dest)
    else:
        extra = ["--recurse-submodules", "--shallow-submodules"] if submodules else []
        git("clone", "--depth", "1", "--branch", ref, *extra, url, str(dest))
    return subprocess.run(["git", "-C", str(dest), "rev-parse", "HEAD"], check=True, capture_output=True,
                          text=True).stdout.strip()
