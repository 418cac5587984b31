"""Probe: can the ambient glslc compile ExecuTorch's int8 Vulkan shaders? (docs/history.md#fix-glslc)

    python -m backends.probes.glslc [--glslc PATH] [--install]

Compiles a compute shader that requires GL_EXT_integer_dot_product, the extension
Ubuntu 24.04's shaderc 2023.8 rejects ("#extension : extension not supported"), with
the flags ExecuTorch's gen_vulkan_spv.py uses. When it fails it names the remedy:

- glslc missing on Debian/Ubuntu: `apt-get install glslc`, then probe again;
- glslc too old on Debian/Ubuntu amd64: the glslc of LunarG's Linux Vulkan SDK, a pinned
  release tarball checked against its sha256, installed as /usr/local/bin/glslc (ahead of
  /usr/bin on PATH), then probe again. The SDK is LunarG's maintained channel; its Ubuntu apt
  repository, which this probe used before, has had no update since May 2025, and Ubuntu's
  own glslc (shaderc 2023.8 on 24.04) is the one that fails the probe;
- anything else: what to install by hand.

It changes the system only with `--install` (CI's setup step passes it; a build never
does): it then runs the remedy as root, or through `sudo -n` (GitHub's runners are not
root but may use sudo without a password). Without `--install` it prints the exact
commands and exits 1. `--glslc PATH` probes that compiler and never installs anything.
"""
from __future__ import annotations

import argparse
import hashlib
import os
import platform
import shlex
import shutil
import subprocess
import sys
import tarfile
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from backends.model.platforms import platform_table
from backends.util import http
from backends.util.errors import BackendsError
from backends.util.files import atomic_write_bytes

EXTENSION = "GL_EXT_integer_dot_product"
# Valid GLSL 450: the extension applies to #version 450 and up, and dotPacked4x8EXT(uint,
# uint) is one of its built-ins. Using the result keeps the call from being optimised out.
PROBE_SHADER = f"""#version 450
#extension {EXTENSION} : require

layout(local_size_x = 1, local_size_y = 1, local_size_z = 1) in;

layout(set = 0, binding = 0) buffer Data {{
    uint values[];
}};

void main() {{
    values[0] = dotPacked4x8EXT(values[1], values[2]);
}}
"""
# As ExecuTorch's gen_vulkan_spv.py calls it (minus its -Werror and -I options).
GLSLC_FLAGS = ("-fshader-stage=compute", "--target-env=vulkan1.1")
SPIRV_MAGIC = (0x07230203).to_bytes(4, "little")

APT_FAMILIES = ("debian", "ubuntu")
# LunarG's Linux Vulkan SDK (x86_64 only): its glslc, from the tarball's <version>/x86_64/bin.
VULKAN_SDK_VERSION = "1.4.304.1"
VULKAN_SDK_SHA256 = "92d698f12a968b024e2b593037830262785b2b734553683457719d4da7c5b0d6"
VULKAN_SDK_TARBALL = f"https://sdk.lunarg.com/sdk/download/{VULKAN_SDK_VERSION}/linux/" \
                     f"vulkansdk-linux-x86_64-{VULKAN_SDK_VERSION}.tar.xz"
VULKAN_SDK_GLSLC = f"{VULKAN_SDK_VERSION}/x86_64/bin/glslc"
VULKAN_SDK_ARCHITECTURES = ("amd64",)
INSTALLED_GLSLC = Path("/usr/local/bin/glslc")
VULKAN_SDK_URL = "https://vulkan.lunarg.com/sdk/home"
TIMEOUT_S = 120
SUDO = ("sudo", "-n")  # never prompts: fails when a password would be needed
APT_GET = ("env", "DEBIAN_FRONTEND=noninteractive", "apt-get")

MANUAL_MISSING = (
    "install glslc, then re-run: `apt-get install glslc` (Debian/Ubuntu), `brew install shaderc` "
    f"(macOS) or the Vulkan SDK ({VULKAN_SDK_URL}), with glslc on PATH"
)
MANUAL_TOO_OLD = (
    "install a newer shaderc and put its glslc first on PATH, then re-run: the Vulkan SDK "
    f"({VULKAN_SDK_URL}; on Debian/Ubuntu amd64 `python -m backends.probes.glslc --install` installs its "
    "glslc), shaderc built from source, or `brew install shaderc`"
)


class ProbeError(BackendsError, RuntimeError):
    """A remedy step failed; the message names the command."""


@dataclass(frozen=True)
class ProbeResult:
    ok: bool
    version: str
    output: str  # the compiler's messages


@dataclass(frozen=True)
class Run:
    argv: tuple[str, ...]

    def __str__(self) -> str:
        return shlex.join(self.argv)


@dataclass(frozen=True)
class Fetch:
    """Download `url` into `dest`, a file of our own (installed into place by a Run after it),
    refused unless its sha256 is `sha256`."""

    url: str
    dest: Path
    sha256: str

    def __str__(self) -> str:
        return f"download {self.url} -> {self.dest} (sha256 {self.sha256})"


@dataclass(frozen=True)
class Unpack:
    """One regular file of the tar archive `archive`, written to `dest` (executable)."""

    archive: Path
    member: str
    dest: Path

    def __str__(self) -> str:
        return f"unpack {self.member} from {self.archive} -> {self.dest}"


Step = Run | Fetch | Unpack


@dataclass(frozen=True)
class Host:
    distro: str  # "<family>:<codename>" as `host_distro` gives it
    architecture: str  # Debian's name: amd64, arm64, ...
    privilege: tuple[str, ...] | None  # () as root, `sudo -n` when that works, None: no way to install


# --- deciding --------------------------------------------------------------------------

def decide(glslc_path: str | None, probe_ok: bool, distro: str, architecture: str) -> str:
    """"ok", "apt-glslc" (install the distribution's glslc), "vulkan-sdk" (install the Vulkan
    SDK's glslc) or "manual": which remedy exists for this host, whoever may run it."""
    if glslc_path is not None and probe_ok:
        return "ok"
    if distro.split(":")[0] not in APT_FAMILIES:
        return "manual"
    if glslc_path is None:
        return "apt-glslc"
    return "vulkan-sdk" if architecture in VULKAN_SDK_ARCHITECTURES else "manual"


def host_distro(os_release: Path = Path("/etc/os-release")) -> str:
    """"ubuntu:noble", "debian:bookworm", ...; the platform name off Linux. Derivatives
    count as the family they are based on (Mint 22 is "ubuntu:noble")."""
    if not sys.platform.startswith("linux"):
        return sys.platform
    try:
        text = os_release.read_text(encoding="utf-8")
    except OSError:
        return "linux"
    fields = {}
    for line in text.splitlines():
        key, sep, value = line.partition("=")
        if sep:
            fields[key.strip()] = value.strip().strip("\"'")
    ids = [fields.get("ID", "linux"), *fields.get("ID_LIKE", "").split()]
    family = next((name for name in ("ubuntu", "debian") if name in ids), ids[0])
    codename = (fields.get("UBUNTU_CODENAME") if family == "ubuntu" else None) or fields.get("VERSION_CODENAME", "")
    return f"{family}:{codename}" if codename else family


def host_architecture() -> str:
    """Debian's name for this machine's architecture (`dpkg --print-architecture`)."""
    try:
        completed = subprocess.run(["dpkg", "--print-architecture"], capture_output=True, text=True, check=False)
        if completed.returncode == 0 and completed.stdout.strip():
            return completed.stdout.strip()
    except OSError:
        pass
    machine = platform.machine().lower()
    known = platform_table().platforms.get(platform_table().of_host("linux", machine))
    return known.debian_arch if known and known.debian_arch else machine


def privilege() -> tuple[str, ...] | None:
    """How remedies may change the system: () as root, `sudo -n` when sudo works without a
    password (GitHub's runners), None otherwise."""
    if hasattr(os, "geteuid") and os.geteuid() == 0:
        return ()
    sudo = shutil.which("sudo")
    if sudo is None:
        return None
    try:
        completed = subprocess.run([sudo, "-n", "true"], capture_output=True, timeout=TIMEOUT_S, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return SUDO if completed.returncode == 0 else None


def detect_host(installing: bool) -> Host:
    """This host; sudo is only tried when the probe may install."""
    root = hasattr(os, "geteuid") and os.geteuid() == 0
    return Host(host_distro(), host_architecture(), privilege() if installing or root else None)


# --- probing ---------------------------------------------------------------------------

def glslc_version(glslc: str) -> str:
    try:
        completed = subprocess.run([glslc, "--version"], capture_output=True, text=True,
                                   timeout=TIMEOUT_S, check=False)
    except (OSError, subprocess.TimeoutExpired) as error:
        return f"unknown ({error})"
    lines = [line.strip() for line in (completed.stdout + completed.stderr).splitlines() if line.strip()]
    return lines[0] if lines else "unknown"


def probe(glslc: str) -> ProbeResult:
    """Compile PROBE_SHADER with `glslc`; ok when it writes a SPIR-V module."""
    with tempfile.TemporaryDirectory(prefix="anira-glslc-") as scratch:
        source, spirv = Path(scratch) / "probe.glsl", Path(scratch) / "probe.spv"
        source.write_text(PROBE_SHADER, encoding="utf-8")
        try:
            completed = subprocess.run([glslc, GLSLC_FLAGS[0], str(source), "-o", str(spirv), *GLSLC_FLAGS[1:]],
                                       capture_output=True, text=True, timeout=TIMEOUT_S, check=False)
        except (OSError, subprocess.TimeoutExpired) as error:
            return ProbeResult(False, "unknown", f"cannot run {glslc}: {error}")
        output = (completed.stdout + completed.stderr).strip()
        wrote_spirv = spirv.is_file() and spirv.read_bytes()[:4] == SPIRV_MAGIC
        if completed.returncode == 0 and not wrote_spirv:
            output += f"\n(exit 0, but {spirv.name} is not a SPIR-V module)"
        return ProbeResult(completed.returncode == 0 and wrote_spirv, glslc_version(glslc), output)


# --- remedies --------------------------------------------------------------------------

def remedy_steps(action: str, prefix: tuple[str, ...], scratch: Path) -> list[Step]:
    """The remedy's commands, privileged ones behind `prefix` (`sudo -n`, or nothing as root);
    downloads land in `scratch`, and a privileged command installs what is taken from them."""
    def apt(*args: str) -> Run:
        return Run((*prefix, *APT_GET, *args))

    if action == "apt-glslc":
        return [apt("update"), apt("install", "-y", "glslc")]
    if action == "vulkan-sdk":
        tarball, glslc = scratch / Path(VULKAN_SDK_TARBALL).name, scratch / "glslc"
        return [Fetch(VULKAN_SDK_TARBALL, tarball, VULKAN_SDK_SHA256), Unpack(tarball, VULKAN_SDK_GLSLC, glslc),
                Run((*prefix, "install", "-m", "0755", str(glslc), str(INSTALLED_GLSLC)))]
    raise ValueError(f"no remedy steps for {action!r}")


def execute(step: Step) -> None:
    """Run one remedy step (printed first, for the step log)."""
    print(f"+ {step}", flush=True)
    if isinstance(step, Fetch):
        _download(step)
    elif isinstance(step, Unpack):
        _unpack(step)
    else:
        completed = subprocess.run(list(step.argv), check=False)
        if completed.returncode != 0:
            raise ProbeError(f"`{step}` failed with exit code {completed.returncode}")


# The Vulkan SDK's tarball is about 300 MB; a server sending more is refused before it fills the disk.
FETCH_CAP = http.Cap(2 * 1024**3, "the limit for the Vulkan SDK's tarball")


def _download(step: Fetch) -> None:
    """Streamed to a temporary name through the project's HTTP client (bounded in time and size,
    never decoded), hashed on the way, renamed only when the sha256 matches."""
    partial = step.dest.with_name(step.dest.name + ".part")

    def attempt() -> str:
        digest = hashlib.sha256()
        with client.open("GET", step.url, what=str(step)) as answer:
            if answer.status != 200:
                raise ProbeError(f"{step} failed: HTTP {answer.status}")
            with partial.open("wb") as handle:
                for chunk in answer.chunks(FETCH_CAP):
                    digest.update(chunk)
                    handle.write(chunk)
        return digest.hexdigest()

    try:
        with http.Client() as client:
            actual = client.retrying(str(step), attempt)
    except ProbeError:
        partial.unlink(missing_ok=True)
        raise
    except (http.HttpError, OSError) as error:
        partial.unlink(missing_ok=True)
        raise ProbeError(f"{step} failed: {error}") from None
    if actual != step.sha256:
        partial.unlink()
        raise ProbeError(f"{step.url} has sha256 {actual}, not the pinned {step.sha256}: not installed")
    partial.replace(step.dest)


def _unpack(step: Unpack) -> None:
    try:
        with tarfile.open(step.archive) as archive:
            member = archive.getmember(step.member)
            source = archive.extractfile(member) if member.isfile() else None
            if source is None:
                raise ProbeError(f"{step.archive.name}: {step.member} is not a regular file")
            atomic_write_bytes(step.dest, source.read())
    except (KeyError, tarfile.TarError, OSError) as error:
        raise ProbeError(f"{step} failed: {error}") from None
    step.dest.chmod(0o755)


# --- the probe loop --------------------------------------------------------------------

def _locate(explicit: str | None) -> str | None:
    return shutil.which(explicit if explicit is not None else "glslc")


def _report_failure(path: str | None, explicit: str | None, result: ProbeResult | None) -> None:
    if path is None:
        print(f"glslc not found: {explicit}" if explicit else
              "glslc not found on PATH (ExecuTorch's Vulkan delegate compiles its shaders with it)", flush=True)
        return
    assert result is not None
    print(f"glslc {path} ({result.version}) cannot compile a shader that requires {EXTENSION} "
          f"(ExecuTorch's int8 Vulkan shaders need it):\n{result.output}", flush=True)


def _manual(path: str | None, host: Host) -> str:
    if path is not None and host.architecture not in VULKAN_SDK_ARCHITECTURES:
        return f"LunarG's Linux Vulkan SDK has no {host.architecture} build; {MANUAL_TOO_OLD}"
    return MANUAL_MISSING if path is None else MANUAL_TOO_OLD


def _refuse(action: str, steps: list[Step], why: str) -> int:
    print(f"ERROR: glslc remedy {action!r} not run: {why}. It would run:", file=sys.stderr)
    for step in steps:
        print(f"  {step}", file=sys.stderr)
    print("Run `PYTHONPATH=site_scons python -m backends.probes.glslc --install` to let the probe do it, or "
          "install a glslc that passes the probe yourself.", file=sys.stderr)
    return 1


def _give_up(path: str | None, host: Host, done: list[str]) -> int:
    if done:
        print(f"ERROR: glslc still fails the probe after: {', '.join(done)}", file=sys.stderr)
    print(f"ERROR: {_manual(path, host)}", file=sys.stderr)
    return 1


def _shown_prefix(host: Host, install: bool) -> tuple[str, ...]:
    """The privilege the commands run (or would run) with: the host's when installing, else
    what a person would type (`sudo`, nothing as root)."""
    if install and host.privilege is not None:
        return host.privilege
    return () if host.privilege == () else ("sudo",)


def _apply(action: str, steps: list[Step], host: Host, run_step: Callable[[Step], None]) -> bool:
    print(f"glslc probe: remedy {action!r} ({host.distro} {host.architecture}, "
          f"{'via ' + shlex.join(host.privilege) if host.privilege else 'as root'})", flush=True)
    try:
        for step in steps:
            run_step(step)
    except ProbeError as error:
        print(f"ERROR: {error}", file=sys.stderr)
        return False
    return True


def run_probe(explicit: str | None, host: Host, install: bool,
              run_step: Callable[[Step], None] = execute) -> int:
    """Probe; with `install`, remedy (each remedy at most once) and probe again; 0 when glslc
    passes. Without `install`, or without a way to become root, nothing on the system changes."""
    done: list[str] = []
    with tempfile.TemporaryDirectory(prefix="anira-glslc-remedy-") as scratch:
        while True:
            path = _locate(explicit)
            result = probe(path) if path is not None else None
            action = decide(path, bool(result and result.ok), host.distro, host.architecture)
            if action == "ok":
                assert result is not None
                print(f"glslc OK: {result.version}")
                return 0
            _report_failure(path, explicit, result)
            # An explicit --glslc is never "fixed" by installing into the system.
            if action == "manual" or action in done or explicit is not None:
                return _give_up(path, host, done)
            steps = remedy_steps(action, _shown_prefix(host, install), Path(scratch))
            if not install:
                return _refuse(action, steps, "this build does not change the system without --install")
            if host.privilege is None:
                return _refuse(action, steps, "it needs root, or sudo without a password")
            if not _apply(action, steps, host, run_step):
                return 1
            done.append(action)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m backends.probes.glslc", description=__doc__.split("\n\n")[0])
    parser.add_argument("--glslc", metavar="PATH", help="probe this compiler (never installs anything)")
    parser.add_argument("--install", action="store_true",
                        help="when the probe fails, change the system: apt-get install glslc, or install the "
                             "pinned Vulkan SDK's glslc as /usr/local/bin/glslc; as root or via sudo -n. CI's "
                             "setup passes it; builds never do")
    args = parser.parse_args(argv)
    return run_probe(args.glslc, detect_host(args.install), args.install)


if __name__ == "__main__":
    sys.exit(main())
