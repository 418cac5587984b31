"""Smoke test: unpack the archive and build + run the engine's consumer project against it.

A consumer program whose smoke probes accelerators (`Smoke.probes`) reports each on a line
of its own, after its CPU pass:

    accelerator <name>: passed            the runtime is there and the pass through it passed
    accelerator <name>: absent: <why>     the runtime probe found none (a hosted Mac is a VM)

and fails (`FAIL: ...`, non-zero exit) when a present runtime's pass fails. An absent
runtime is recorded in the smoke record and the manifest, "accelerator runtime not
available on this runner": the contract's binary evidence already proves the accelerator
is compiled in. A probed accelerator without a line, a line for one the smoke does not
probe, or "absent" for one this machine is known to have (host.known_accelerators) fails
the smoke: never a silent pass.
"""
from __future__ import annotations

import re
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Mapping, Sequence

from backends.model.plan import Smoke
from backends.probes.host import detect_accelerators
from backends.runner.run import Console, RunError, limited_env, run
from backends.steps.extract import extract

ABSENT = "accelerator runtime not available on this runner"
PASSED = "passed"
# ctest --verbose puts the test's number before each line of its output ("2: PASS").
_CTEST_PREFIX = re.compile(r"^\d+: ")
_REPORT = re.compile(r"accelerator ([A-Za-z0-9_]+): (passed|absent)(?::\s*(.*))?")


class SmokeReportError(RunError):
    """The program exited 0, but its accelerator report does not hold up; the message names
    the line (or its absence) and what a report must say."""


@dataclass(frozen=True)
class Outcome:
    """What one run of a consumer program showed."""

    accelerators: Mapping[str, str] = field(default_factory=dict)  # probed name -> passed | why absent
    notes: tuple[str, ...] = ()
    problems: tuple[str, ...] = ()  # why the smoke fails; empty: it passed

    @property
    def passed(self) -> bool:
        return not self.problems


def _program_lines(log: Path) -> list[str]:
    """The child's whole output from a runner log (after its `output:` header)."""
    text = log.read_text(errors="replace").splitlines() if log.is_file() else []
    if "output:" in text:  # the log is appended to: the last run's output only
        text = text[len(text) - text[::-1].index("output:"):]
    return [line for line in text if not line.startswith("====")]


def _program_output(log: Path, lines: int = 40) -> list[str]:
    """The child's output from a runner log, last lines only."""
    return _program_lines(log)[-lines:]


def judge(lines: Sequence[str], probes: Sequence[str], known: Mapping[str, str]) -> Outcome:
    """The outcome of a program's output: `probes` are the accelerators it must report on,
    `known` those this machine is known to have (name -> how that is known)."""
    problems: list[str] = []
    reports: dict[str, tuple[str, str]] = {}
    for raw in lines:
        line = _CTEST_PREFIX.sub("", raw.rstrip())
        if line.startswith("FAIL:"):
            problems.append(f"the program failed: {line}")
        match = _REPORT.fullmatch(line)
        if match is None:
            continue
        name, status, why = match.group(1), match.group(2), (match.group(3) or "").strip()
        if name not in probes:
            problems.append(f"the program reports accelerator {name}, which this smoke does not probe "
                            f"(it probes: {', '.join(probes) or 'none'})")
        elif name in reports:
            problems.append(f"the program reports accelerator {name} twice")
        elif status == "absent" and not why:
            problems.append(f"the program reports accelerator {name} absent without saying why "
                            f"('accelerator {name}: absent: <why>')")
        else:
            reports[name] = (status, why)
    accelerators: dict[str, str] = {}
    notes: list[str] = []
    for name in probes:
        status, why = reports.get(name, ("", ""))
        if not status:
            problems.append(f"the program reported nothing for accelerator {name}: a probed accelerator needs the "
                            f"line 'accelerator {name}: passed' or 'accelerator {name}: absent: <why>'")
        elif status == PASSED:
            accelerators[name] = PASSED
        elif name in known:
            problems.append(f"the program reports accelerator {name} absent ({why}), but this machine is known to "
                            f"have it: {known[name]}")
        else:
            accelerators[name] = f"{ABSENT}: {why}"
            notes.append(f"{ABSENT}: {name} ({why})")
    return Outcome(accelerators=accelerators, notes=tuple(notes), problems=tuple(problems))


def record(outcome: Outcome) -> dict[str, object]:
    """The smoke record's fields for the probed accelerators (none when nothing is probed)."""
    fields: dict[str, object] = {}
    if outcome.accelerators:
        fields["accelerators"] = dict(outcome.accelerators)
    if outcome.notes:
        fields["notes"] = list(outcome.notes)
    return fields


# What the published manifest says about the smoke: no timings or output (the same bytes
# give the same manifest).
MANIFEST_FIELDS = ("status", "mode", "reason", "accelerators", "notes")


def manifest_record(smoke_record: Mapping[str, object]) -> dict[str, object]:
    return {key: smoke_record[key] for key in MANIFEST_FIELDS if key in smoke_record}


def not_run(reason: str, label: str) -> dict[str, object]:
    print(f"[{label}] smoke not run: {reason}", flush=True)
    return {"status": "not run", "reason": reason}


# What the consumer build is given of its own, never the user's: a home of its own (no
# ~/.cmake package registry or tool configuration of this user's can change what it finds), so
# the user's HOME is no input of the step.
OWN_VARIABLES = ("HOME",)


def emulator_env(mode: str, environ: Mapping[str, str], leg_dir: Path) -> dict[str, str]:
    """What the emulator reads from the environment. Wine keeps its Windows tree in a
    prefix made on first use (~10 s): `$WINEPREFIX`, else `wineprefix/` in the leg's
    build directory, kept across runs; no debug chatter, no Mono/Gecko installers."""
    if mode != "wine":
        return {}
    return {"WINEPREFIX": environ.get("WINEPREFIX") or str(leg_dir / "wineprefix"),
            "WINEDEBUG": "-all", "WINEDLLOVERRIDES": "mscoree,mshtml="}


def smoke(archive: Path, spec: Smoke, project_root: Path, work: Path, logs: Path, label: str,
          environ: Mapping[str, str], verbose: bool, mode: str = "native",
          known: Mapping[str, str] | None = None, tree: Path | None = None,
          toolchain_file: str = "", *, console: Console) -> dict[str, object]:
    """Configure, build and ctest `spec.project` against the unpacked archive (or against
    `tree`, the stage it is written from, used in place); raises on failure.
    `known`: the accelerators this machine is known to have (default: detected here).
    `toolchain_file` (under smoke/): cross-builds the consumer and runs it under an emulator,
    through ctest's emulator hook (engines/platforms.toml names it per emulated platform)."""
    started = time.monotonic()
    shutil.rmtree(work, ignore_errors=True)
    package = tree if tree is not None else work / "package"
    if tree is None:
        extract(archive, package)
    work.mkdir(parents=True, exist_ok=True)
    build_dir = work / "build"
    project = project_root / spec.project
    home = work / "home"
    home.mkdir()
    env = limited_env({**emulator_env(mode, environ, work.parent), "HOME": str(home)})
    defines = [f"-D{key}={value}" for key, value in spec.defines.items()]
    if toolchain_file:
        defines.append(f"-DCMAKE_TOOLCHAIN_FILE={project.parent / toolchain_file}")
    steps = [
        ("configure", ["cmake", "-S", str(project), "-B", str(build_dir), "-G", "Ninja",
                       f"-DCMAKE_PREFIX_PATH={package}", *defines]),
        ("compile", ["cmake", "--build", str(build_dir)]),
        ("run", ["ctest", "--test-dir", str(build_dir), "--output-on-failure", "--verbose"]),
    ]
    for name, argv in steps:
        run(argv, env=env, cwd=work, log=logs / f"smoke-{name}.log", label=f"{label} smoke {name}", echo=verbose,
            console=console)
    run_log = logs / "smoke-run.log"
    outcome = Outcome()
    if spec.probes:
        outcome = judge(_program_lines(run_log), spec.probes, detect_accelerators() if known is None else known)
        if not outcome.passed:
            raise SmokeReportError(f"{label} smoke run", 0, run_log, _program_output(run_log, 20),
                                   reason="; ".join(outcome.problems))
        for note in outcome.notes:
            print(f"[{label}] smoke: {note}", flush=True)
    output = _program_output(run_log)
    shutil.rmtree(work, ignore_errors=True)
    return {"status": "passed", "mode": mode, "seconds": round(time.monotonic() - started, 2), "output": output,
            **record(outcome)}
