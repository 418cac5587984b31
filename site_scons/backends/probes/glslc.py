"""Probe: can the ambient glslc compile ExecuTorch's int8 Vulkan shaders? (spec §6.5 item 5)

    python -m backends.probes.glslc [--glslc PATH]

Compiles a compute shader that requires GL_EXT_integer_dot_product, the extension
Ubuntu 24.04's shaderc 2023.8 rejects ("#extension : extension not supported"), with
the flags ExecuTorch's gen_vulkan_spv.py uses. When it fails, and only then:

- glslc missing, root on Debian/Ubuntu: `apt-get install -y glslc`, then probe again;
- glslc too old, root on Ubuntu 24.04 (noble): add LunarG's apt repository and install
  its current `shaderc`, then probe again;
- anything else: print what to install and exit 1.

`--glslc PATH` probes that compiler and never installs anything.
"""
from __future__ import annotations

import argparse
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import requests

from backends.steps.files import atomic_write_bytes

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
LUNARG_DISTRO = "ubuntu:noble"
LUNARG_KEY_URL = "https://packages.lunarg.com/lunarg-signing-key-pub.asc"
LUNARG_LIST_URL = "https://packages.lunarg.com/vulkan/lunarg-vulkan-noble.list"
LUNARG_KEY_PATH = Path("/etc/apt/trusted.gpg.d/lunarg.asc")
LUNARG_LIST_PATH = Path("/etc/apt/sources.list.d/lunarg-vulkan-noble.list")
VULKAN_SDK_URL = "https://vulkan.lunarg.com/sdk/home"
TIMEOUT_S = 120

MANUAL_MISSING = (
    "install glslc, then re-run: `apt-get install glslc` (Debian/Ubuntu), `brew install shaderc` "
    f"(macOS) or the Vulkan SDK ({VULKAN_SDK_URL}), with glslc on PATH"
)
MANUAL_TOO_OLD = (
    "install a newer shaderc and put its glslc first on PATH, then re-run: LunarG's apt repository "
    f"(this probe adds it itself as root on Ubuntu 24.04), the Vulkan SDK ({VULKAN_SDK_URL}) or "
    "`brew install shaderc`"
)


class ProbeError(RuntimeError):
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
    url: str
    dest: Path

    def __str__(self) -> str:
        return f"download {self.url} -> {self.dest}"


Step = Run | Fetch


# --- deciding --------------------------------------------------------------------------

def decide(glslc_path: str | None, probe_ok: bool, distro: str, is_root: bool) -> str:
    """"ok", "apt-glslc" (install the distribution's glslc), "lunarg" (install LunarG's
    shaderc) or "manual". `distro` is "<family>:<codename>" as `host_distro` gives it."""
    if glslc_path is not None and probe_ok:
        return "ok"
    if not is_root:
        return "manual"
    if glslc_path is None:
        return "apt-glslc" if distro.split(":")[0] in APT_FAMILIES else "manual"
    return "lunarg" if distro == LUNARG_DISTRO else "manual"


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


def running_as_root() -> bool:
    return hasattr(os, "geteuid") and os.geteuid() == 0


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

def remedy_steps(action: str, apt_glslc_installed: bool) -> list[Step]:
    if action == "apt-glslc":
        return [Run(("apt-get", "update")), Run(("apt-get", "install", "-y", "glslc"))]
    if action == "lunarg":
        steps: list[Step] = [Fetch(LUNARG_KEY_URL, LUNARG_KEY_PATH), Fetch(LUNARG_LIST_URL, LUNARG_LIST_PATH)]
        if apt_glslc_installed:
            # Ubuntu's glslc package and LunarG's shaderc both ship /usr/bin/glslc.
            steps.append(Run(("apt-get", "remove", "-y", "glslc")))
        return steps + [Run(("apt-get", "update")), Run(("apt-get", "install", "-y", "shaderc"))]
    raise ValueError(f"no remedy steps for {action!r}")


def package_installed(package: str) -> bool:
    try:
        completed = subprocess.run(["dpkg-query", "-W", "-f=${Status}", package],
                                   capture_output=True, text=True, check=False)
    except OSError:
        return False
    return completed.returncode == 0 and completed.stdout.strip().endswith(" installed")


def execute(step: Step) -> None:
    """Run one remedy step (printed first, for the step log)."""
    print(f"+ {step}", flush=True)
    if isinstance(step, Fetch):
        try:
            response = requests.get(step.url, timeout=60)
            response.raise_for_status()
        except requests.RequestException as error:
            raise ProbeError(f"{step} failed: {error}") from None
        step.dest.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_bytes(step.dest, response.content)
        return
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    completed = subprocess.run(list(step.argv), env=env, check=False)
    if completed.returncode != 0:
        raise ProbeError(f"`{step}` failed with exit code {completed.returncode}")


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


def run_probe(explicit: str | None, distro: str, is_root: bool,
              run_step: Callable[[Step], None] = execute,
              apt_glslc_installed: Callable[[], bool] = lambda: package_installed("glslc")) -> int:
    """Probe, remedy (each remedy at most once), probe again; 0 when glslc passes."""
    done: list[str] = []
    while True:
        path = _locate(explicit)
        result = probe(path) if path is not None else None
        # An explicit --glslc is never "fixed" by installing into the system.
        action = decide(path, bool(result and result.ok), distro, is_root and explicit is None)
        if action == "ok":
            assert result is not None
            print(f"glslc OK: {result.version}")
            return 0
        _report_failure(path, explicit, result)
        if action == "manual" or action in done:
            if done:
                print(f"ERROR: glslc still fails the probe after: {', '.join(done)}", file=sys.stderr)
            print(f"ERROR: {MANUAL_MISSING if path is None else MANUAL_TOO_OLD}", file=sys.stderr)
            return 1
        print(f"glslc probe: remedy {action!r} ({distro}, root)", flush=True)
        try:
            for step in remedy_steps(action, action == "lunarg" and apt_glslc_installed()):
                run_step(step)
        except ProbeError as error:
            print(f"ERROR: {error}", file=sys.stderr)
            return 1
        done.append(action)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m backends.probes.glslc", description=__doc__.split("\n\n")[0])
    parser.add_argument("--glslc", metavar="PATH", help="probe this compiler (never installs anything)")
    args = parser.parse_args(argv)
    return run_probe(args.glslc, host_distro(), running_as_root())


if __name__ == "__main__":
    sys.exit(main())
