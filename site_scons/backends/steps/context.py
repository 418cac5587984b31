"""Where a leg's steps work, and how plan symbols (`{src}`, `{env:X}`, ...) become real values."""
from __future__ import annotations

import hashlib
import os
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Mapping, Sequence

from backends.steps.venv import interpreter as venv_interpreter
from backends.util.errors import BackendsError

_SYMBOL = re.compile(r"\{([a-z_]+\??;?)(?::([^{}]*))?\}")
_ENV_SYMBOL = re.compile(r"\{env\??;?:([A-Za-z0-9_]+)\}")


class ExpandError(BackendsError, ValueError):
    """A plan symbol that has no value on this machine (e.g. an unset required variable)."""


def memory_gb() -> float:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 1024**3
    except (ValueError, OSError, AttributeError):
        pass
    try:
        import psutil  # py7zr's dependency; Windows has no sysconf

        return psutil.virtual_memory().total / 1024**3
    except ImportError:
        return 8.0  # upstream's assumption when unknown


def jobs_for(expression: str = "") -> int:
    """`{jobs}` is the core count; `{jobs:ram_gb/3}` is upstream ExecuTorch's RAM rule
    (RAM GB / 3, at least 2, at most the core count), which stopped OOM kills."""
    cores = os.cpu_count() or 2
    if expression.startswith("ram_gb/"):
        per_job = float(expression.split("/", 1)[1])
        return max(2, min(cores, int(memory_gb() / per_job)))
    return cores


@dataclass(frozen=True)
class LegDirs:
    """The directories one leg's steps read and write (all absolute)."""

    src: Path
    build: Path
    install: Path
    stage: Path
    logs: Path
    sources: Mapping[str, Path] = field(default_factory=dict)  # `{src:<name>}` for extra git sources
    extracts: Mapping[str, Path] = field(default_factory=dict)  # `{extract:<name>}`
    downloads: Mapping[str, Path] = field(default_factory=dict)  # `{download:<name>}`

    @property
    def venv(self) -> Path:
        """The leg's private Python environment (steps/venv.py), beside its build directory."""
        return self.build.with_name("venv")

    @property
    def leg(self) -> Path:
        """build/legs/<leg id>/: beside the logs, the step records (steps/), archive/ and smoke/."""
        return self.logs.parent

    @property
    def steps(self) -> Path:
        return self.leg / "steps"

    @property
    def short(self) -> Path:
        """`{short}`: build/s/<8 hex digits of the leg id>, the leg's own short directory for
        tools whose trees nest deep (Bazel's output base, an LLVM install), so their paths
        stay within Windows' MAX_PATH (260 characters)."""
        return self.leg.parent.parent / "s" / hashlib.sha256(self.leg.name.encode()).hexdigest()[:8]


def env_names(texts: Sequence[str]) -> list[str]:
    """The host variables `{env:X}` symbols in `texts` read, sorted."""
    return sorted({name for text in texts for name in _ENV_SYMBOL.findall(text)})


def expand(text: str, dirs: LegDirs, environ: Mapping[str, str]) -> str | None:
    """Replace every symbol in one argument; None means "drop this argument" (`{env?:X}` unset)."""
    def replace(match: re.Match[str]) -> str:
        name, arg = match.group(1), match.group(2)
        if name == "env":
            if arg is None or arg not in environ:
                raise ExpandError(f"the environment variable {arg} is not set")
            return environ[arg]
        if name == "env?":
            return environ.get(arg or "", "")
        if name == "env?;":  # `;value` when set: an optional element of a CMake list
            value = environ.get(arg or "", "")
            return f";{value}" if value else ""
        if name == "jobs":
            return str(jobs_for(arg or ""))
        if name == "python":
            return sys.executable
        if name == "venv_python":
            return str(venv_interpreter(dirs.venv))
        if name == "src":
            return str(dirs.sources[arg] if arg else dirs.src)
        if name in ("build", "install", "stage", "short"):
            return str(getattr(dirs, name))
        if name in ("extract", "download"):
            table = dirs.extracts if name == "extract" else dirs.downloads
            if arg not in table:
                raise ExpandError(f"no {name} named {arg!r} in this leg")
            return str(table[arg])
        return match.group(0)

    # `{env?:X}` marks an optional value: when X is unset, the flag before it goes too.
    if text.startswith("{env?:") and text.endswith("}"):
        key = text[6:-1]
        if key not in environ or not environ[key]:
            return None
        return environ[key]
    return _SYMBOL.sub(replace, text)


def expand_argv(argv: Sequence[str], dirs: LegDirs, environ: Mapping[str, str]) -> list[str]:
    out: list[str] = []
    for arg in argv:
        value = expand(arg, dirs, environ)
        if value is None:
            if out and out[-1].startswith("-"):
                out.pop()
            continue
        out.append(value)
    return out
