"""tools/setup.sh asks dpkg before apt: nothing present is installed again and `apt-get update`
runs only when a package is missing; the tests' packages come only with --dev; a held apt lock
is waited for (DPkg::Lock::Timeout) and, when it still fails, reported with what to do.

The script runs for real against fake dpkg-query, apt-get, sudo and id on a PATH of their
own, and a fake virtual environment (VIRTUAL_ENV), so nothing is installed anywhere."""
from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
SCRIPT = ROOT / "tools" / "setup.sh"
BASH = shutil.which("bash")
# What the script runs besides the fakes.
REAL_TOOLS = ("dirname", "grep", "mktemp", "cat", "rm", "head")
MAIN = ("ca-certificates", "git", "cmake", "ninja-build", "g++", "llvm", "python3-venv", "python3-pip")
DEV_ONLY = ("clang", "lld", "patchelf", "zip", "unzip", "qemu-user", "g++-aarch64-linux-gnu",
            "g++-mingw-w64-x86-64-posix", "wine64", "wine", "nginx-light", "shellcheck")
LOCK_ERROR = "E: Could not get lock /var/lib/dpkg/lock-frontend. It is held by process 4242 (apt-get)"

pytestmark = pytest.mark.skipif(BASH is None or any(shutil.which(t) is None for t in REAL_TOOLS),
                                reason="needs bash and coreutils")


def fake(bin_dir: Path, name: str, body: str) -> None:
    path = bin_dir / name
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(0o755)


class Machine:
    """A PATH holding fake package tools: `installed` packages are known to dpkg, apt-get logs
    its arguments and fails with `apt_error` when one is given."""

    def __init__(self, tmp_path: Path, installed: tuple[str, ...], *, uid: int = 1000, npm: bool = True,
                 apt_error: str = "") -> None:
        self.bin = tmp_path / "bin"
        self.bin.mkdir(parents=True)
        self.apt_log = tmp_path / "apt.log"
        self.pip_log = tmp_path / "pip.log"
        self.venv = tmp_path / "venv"
        for tool in REAL_TOOLS:
            (self.bin / tool).symlink_to(shutil.which(tool))  # type: ignore[arg-type]
        listed = " ".join(installed)
        fake(self.bin, "dpkg-query", f'for p in {listed}; do [ "$p" = "$3" ] && printf "install ok installed" '
                                     '&& exit 0; done\nexit 1\n')
        fake(self.bin, "id", f"echo {uid}\n")
        fake(self.bin, "sudo", 'exec "$@"\n')
        if npm:
            fake(self.bin, "npm", "exit 0\n")
        failure = f"echo '{apt_error}' >&2\nexit 100\n" if apt_error else "exit 0\n"
        fake(self.bin, "apt-get", f'echo "$*" >> {self.apt_log}\n{failure}')
        (self.venv / "bin").mkdir(parents=True)
        fake(self.venv / "bin", "python", f'echo "$*" >> {self.pip_log}\nexit 0\n')

    def run(self, *args: str) -> subprocess.CompletedProcess[str]:
        env = {"PATH": str(self.bin), "VIRTUAL_ENV": str(self.venv), "HOME": str(self.venv)}
        return subprocess.run([BASH, str(SCRIPT), *args], env=env, capture_output=True, text=True, timeout=60)

    def apt_calls(self) -> list[str]:
        return self.apt_log.read_text().splitlines() if self.apt_log.exists() else []


def test_nothing_missing_runs_no_apt_at_all(tmp_path: Path) -> None:
    machine = Machine(tmp_path, MAIN)
    done = machine.run()
    assert done.returncode == 0, done.stderr
    assert machine.apt_calls() == []  # no `apt-get update` either
    assert "-m pip install -q --disable-pip-version-check -r requirements.txt" in machine.pip_log.read_text()


def test_only_the_missing_package_is_installed_after_one_update(tmp_path: Path) -> None:
    machine = Machine(tmp_path, tuple(p for p in MAIN if p != "llvm"), uid=0)
    done = machine.run()
    assert done.returncode == 0, done.stderr
    assert machine.apt_calls() == ["-o DPkg::Lock::Timeout=300 update -qq",
                                   "-o DPkg::Lock::Timeout=300 install -y -qq --no-install-recommends llvm"]
    assert "setup: installing with apt: llvm" in done.stdout


def test_check_names_what_would_be_installed_and_changes_nothing(tmp_path: Path) -> None:
    machine = Machine(tmp_path, tuple(p for p in MAIN if p not in ("cmake", "g++")))
    done = machine.run("--check")
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [
        "setup --check: missing apt packages: cmake g++",
        "setup --check: would run: sudo apt-get update, then sudo apt-get install cmake g++"]
    assert machine.apt_calls() == [] and not machine.pip_log.exists()


def test_the_main_job_needs_none_of_the_tests_packages(tmp_path: Path) -> None:
    main = Machine(tmp_path / "main", MAIN, npm=False)
    assert main.run("--check").stdout == "setup --check: every apt package is installed; apt-get would not run\n"
    dev = Machine(tmp_path / "dev", MAIN, npm=False).run("--check", "--dev").stdout
    assert f"missing apt packages: {' '.join(DEV_ONLY)} nodejs npm\n" in dev
    with_npm = Machine(tmp_path / "npm", (*MAIN, *DEV_ONLY), npm=True).run("--dev", "--check").stdout
    assert "every apt package is installed" in with_npm  # a Node.js already there is kept


def test_a_held_lock_is_waited_for_then_reported(tmp_path: Path) -> None:
    machine = Machine(tmp_path, (), uid=0, apt_error=LOCK_ERROR)
    done = machine.run()
    assert done.returncode == 1
    assert machine.apt_calls() == ["-o DPkg::Lock::Timeout=300 update -qq"]
    assert "could not get the package manager's lock within 300 s" in done.stderr
    assert LOCK_ERROR in done.stderr and "run tools/setup.sh again" in done.stderr
    assert f"install these packages yourself: {' '.join(MAIN)}" in done.stderr
    assert not machine.pip_log.exists()


def test_without_sudo_a_user_is_told_to_install_as_root(tmp_path: Path) -> None:
    machine = Machine(tmp_path, tuple(p for p in MAIN if p != "git"))
    os.remove(machine.bin / "sudo")
    done = machine.run()
    assert done.returncode == 1 and machine.apt_calls() == []
    assert "these apt packages are missing: git; install them as root (there is no sudo)" in done.stderr
