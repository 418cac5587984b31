"""The quick start's origin: a CPU build of torch, found and judged before anything is extracted.

    python tools/quickstart_wheel.py <torch version> <wheel directory>

prints the path of a wheel that fits the LibTorch Linux x86_64 CPU leg, or says in one line
(on stderr, exit 1) what it found and what to do. Sources, in order:

1. PyTorch's CPU index (`torch==<version>+cpu`), when it answers within PROBE_SECONDS;
2. else pip's own configuration (pip.conf, PIP_* variables: PyPI, a mirror, a local wheel).

`TORCH_INDEX_URL` replaces both with one index (no fallback: an explicit choice). Every wheel
pip brings is judged by its binaries (steps/checks/origin.py, as the build's extract step
judges an origin) before it enters the wheel directory; one that fits is recorded there
(`<wheel>.fits`), so a later run takes it without a network or a second judgement.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping, Sequence

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "site_scons"))

LEG = "libtorch-linux-x86_64-shared"
CPU_INDEX = "https://download.pytorch.org/whl/cpu"
PROBE_SECONDS = 10.0  # the whole answer to one request for the index's torch page
PIP_TIMEOUT = "15"  # pip's socket timeout: a stalled transfer is given up, then retried
PIP_RETRIES = "2"
# One wheel whatever Python runs this: its libraries are what the leg packages, so every host
# gets the same file (the same origin sha256, the same leg key: a binary cache serves them all).
WHEEL_TAGS = ("--platform", "manylinux_2_28_x86_64", "--python-version", "3.11", "--implementation", "cp",
              "--abi", "cp311")
SAY = "tools/quickstart.sh"


class NoWheel(Exception):
    """No source yields a CPU wheel; the message is the one line to print."""


@dataclass(frozen=True)
class Source:
    label: str  # how the messages name it
    index: str  # an index URL; "" for pip's own configuration
    probe: bool  # asked first whether it answers (the default index, which may be out of reach)


def sources(environ: Mapping[str, str], cpu_index: str = CPU_INDEX) -> list[Source]:
    explicit = environ.get("TORCH_INDEX_URL", "")
    if explicit:
        return [Source(f"TORCH_INDEX_URL ({explicit})", explicit, probe=False)]
    return [Source(f"PyTorch's CPU index ({cpu_index})", cpu_index, probe=True),
            Source("pip's own configuration", "", probe=False)]


def unreachable(index: str, seconds: float = PROBE_SECONDS) -> str:
    """Why `index` does not answer for torch within `seconds` (the whole exchange); "" when it does."""
    from backends.util import http

    limits = http.Limits(connect_s=seconds, answer_s=seconds, read_s=seconds, deadline_s=seconds, attempts=1)
    try:
        with http.Client(limits, notice=lambda _: None) as client, \
                client.open("GET", f"{index.rstrip('/')}/torch/", what="probe") as answer:
            status = answer.status
    except http.HttpError as error:
        return _reason(error, seconds)
    return f"it answers HTTP {status}" if status >= 500 else ""  # a 404: pip says what it lacks


def _reason(error: Exception, seconds: float) -> str:
    from backends.util import http

    if isinstance(error, http.Transient) and not isinstance(error, http.Unreachable):
        return f"no answer in {seconds:g} s"  # timed out, stalled or broke: no answer within the probe
    return str(error)  # its name does not resolve or it refuses connections; TLS; an invalid URL


def download(source: Source, requirement: str, dest: Path, python: str = sys.executable) -> Path:
    """The wheel pip brings from `source` into the empty directory `dest`; NoWheel with pip's
    own words when it brings none."""
    index = ("--index-url", source.index) if source.index else ()
    argv = [python, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "--no-cache-dir",
            "--disable-pip-version-check", "--progress-bar", "off", "--timeout", PIP_TIMEOUT,
            "--retries", PIP_RETRIES, *WHEEL_TAGS, *index, "-d", str(dest), requirement]
    done = subprocess.run(argv, capture_output=True, text=True, check=False)
    wheels = sorted(dest.glob("*.whl"))
    if done.returncode != 0 or len(wheels) != 1:
        errors = [line.strip() for line in (done.stderr + done.stdout).splitlines() if line.startswith("ERROR:")]
        raise NoWheel(_shorten(errors[0].removeprefix("ERROR: ") if errors else f"pip exited {done.returncode}"))
    return wheels[0]


def _shorten(text: str, width: int = 200) -> str:
    return text if len(text) <= width else f"{text[:width - 40]} ... {text[-35:]}"


def misfit(wheel: Path, version: str) -> str:
    """Why `wheel` is no origin of the quick start's leg, judged by its binaries ("<leg>: it is
    ...; it fits <leg>"); "" when it fits."""
    from backends.model.matrix import load_matrix
    from backends.model.recipes import leg_engine, plan_leg
    from backends.steps.checks import origin

    matrix = load_matrix(ROOT)
    leg = matrix.leg(LEG)
    plan = plan_leg(leg, leg_engine(matrix, leg, version), matrix)
    release = plan.downloads[0]
    fits = origin.expectation(plan, release, ROOT / "engines")
    assert fits is not None, f"{LEG} takes no origin for {release.name}"
    why = origin.judge_archive(fits, wheel, release.roots, matrix)
    return why.split(" does not fit ", 1)[-1].removesuffix(f"; {origin.ADVICE}") if why else ""


def _stamp(wheel: Path) -> Path:
    return wheel.with_name(wheel.name + ".fits")


def _identity(wheel: Path) -> dict[str, object]:
    st = wheel.stat()
    return {"leg": LEG, "size": st.st_size, "mtime_ns": st.st_mtime_ns}


def record(wheel: Path, source: Source) -> None:
    _stamp(wheel).write_text(json.dumps({**_identity(wheel), "source": source.label}) + "\n")


def cached(directory: Path, version: str) -> tuple[Path, str] | None:
    """A wheel judged to fit before (unchanged since), with the source it came from. A wheel
    there without that record (an earlier quick start's) is judged now, and removed when it
    does not fit."""
    for wheel in sorted(directory.glob(f"torch-{version}*.whl")):
        try:
            stamp = json.loads(_stamp(wheel).read_text())
        except (OSError, ValueError):
            stamp = {}
        if stamp and {key: stamp.get(key) for key in ("leg", "size", "mtime_ns")} == _identity(wheel):
            return wheel, str(stamp.get("source", "an earlier run"))
        why = misfit(wheel, version)
        if not why:
            record(wheel, Source("an earlier run", "", probe=False))
            return wheel, "an earlier run"
        print(f"{SAY}: removing {wheel}, which does not fit {why}", file=sys.stderr)
        wheel.unlink()
        _stamp(wheel).unlink(missing_ok=True)
    return None


def obtain(version: str, directory: Path, environ: Mapping[str, str], *, cpu_index: str = CPU_INDEX,
           probe_seconds: float = PROBE_SECONDS) -> Path:
    """The CPU wheel in `directory`, from the first source that yields one that fits."""
    found = cached(directory, version)
    if found is not None:
        print(f"{SAY}: torch {version}+cpu: {found[0]} (from {found[1]})", file=sys.stderr)
        return found[0]
    requirement = f"torch=={version}+cpu"
    failures = []
    for source in sources(environ, cpu_index):
        why = unreachable(source.index, probe_seconds) if source.probe else ""
        if why:
            failures.append(f"{source.label} cannot be reached: {why}")
            print(f"{SAY}: {failures[-1]}; trying the next source", file=sys.stderr)
            continue
        print(f"{SAY}: {requirement} from {source.label}", file=sys.stderr)
        directory.mkdir(parents=True, exist_ok=True)
        incoming = Path(tempfile.mkdtemp(prefix=".incoming-", dir=directory))
        try:
            wheel = download(source, requirement, incoming)
            why = misfit(wheel, version)
            if not why:
                final = directory / wheel.name
                os.replace(wheel, final)
                record(final, source)
                return final
            failures.append(f"{source.label} gave {wheel.name}, which does not fit {why}")
        except NoWheel as error:
            failures.append(f"{source.label} has none: {error}")
        finally:
            shutil.rmtree(incoming, ignore_errors=True)
    where = "" if environ.get("TORCH_INDEX_URL") else f"run it where {cpu_index} answers, or "
    raise NoWheel(f"found no CPU build of torch {version}: {'; '.join(failures)}. To go on, {where}name an index "
                  f"that has {requirement}: TORCH_INDEX_URL=<index> bash tools/quickstart.sh")


def main(argv: Sequence[str]) -> int:
    if len(argv) != 2:
        print("usage: quickstart_wheel.py <torch version> <wheel directory>", file=sys.stderr)
        return 2
    try:
        print(obtain(argv[0], Path(argv[1]).resolve(), os.environ, cpu_index=CPU_INDEX, probe_seconds=PROBE_SECONDS))
    except NoWheel as error:
        print(f"{SAY}: {error}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
