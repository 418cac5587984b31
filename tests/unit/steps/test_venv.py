"""Upstream builds' Python packages go into the leg's own venv under build/, never into the
Python that runs SCons (or the user's): a real venv, a real `pip install`, a real console
script found on PATH."""
from __future__ import annotations

import base64
import hashlib
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from backends.model.matrix import load_matrix
from backends.model.plan import Command
from backends.model.recipes import plan_all
from backends.runner.run import Console
from backends.steps import venv
from backends.steps.context import LegDirs, expand
from backends.steps.upstream import run_commands

ROOT = Path(__file__).resolve().parents[3]
PACKAGE = "anira_venv_probe"


def leg_dirs(base: Path) -> LegDirs:
    return LegDirs(src=base / "src", build=base / "work", install=base / "install", stage=base / "stage",
                   logs=base / "logs")


def probe_wheel(directory: Path) -> Path:
    """A minimal wheel with a module and a console script (pip needs no index to install it)."""
    files = {
        f"{PACKAGE}.py": "def main():\n    print('probe from the leg venv')\n",
        f"{PACKAGE}-1.0.dist-info/METADATA": f"Metadata-Version: 2.1\nName: {PACKAGE}\nVersion: 1.0\n",
        f"{PACKAGE}-1.0.dist-info/WHEEL": "Wheel-Version: 1.0\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
        f"{PACKAGE}-1.0.dist-info/entry_points.txt": f"[console_scripts]\nanira-venv-probe = {PACKAGE}:main\n",
    }
    record = [f"{name},sha256={_digest(text)},{len(text.encode())}" for name, text in files.items()]
    files[f"{PACKAGE}-1.0.dist-info/RECORD"] = "\n".join([*record, f"{PACKAGE}-1.0.dist-info/RECORD,,"]) + "\n"
    wheel = directory / f"{PACKAGE}-1.0-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as archive:
        for name, text in files.items():
            archive.writestr(name, text)
    return wheel


def _digest(text: str) -> str:
    return base64.urlsafe_b64encode(hashlib.sha256(text.encode()).digest()).rstrip(b"=").decode()


def test_the_symbol_names_the_legs_own_interpreter(tmp_path: Path) -> None:
    dirs = leg_dirs(tmp_path / "legs" / "x")
    assert dirs.venv == tmp_path / "legs" / "x" / "venv"
    assert expand("{venv_python}", dirs, {}) == str(venv.interpreter(dirs.venv))
    assert venv.uses_venv([Command("pip", ("{venv_python}", "-m", "pip", "install", "x"))])
    assert not venv.uses_venv([Command("fixup", ("{python}", "-m", "backends.steps.fixups"))])


def test_pip_install_lands_in_the_leg_venv_and_its_scripts_come_first(tmp_path: Path) -> None:
    dirs = leg_dirs(tmp_path / "legs" / "x")
    wheel = probe_wheel(tmp_path)
    commands = [
        Command("install", ("{venv_python}", "-m", "pip", "install", "--no-index", "--no-deps", str(wheel))),
        Command("script on PATH", ("anira-venv-probe",)),  # found the way `scons` is after `pip install scons`
        Command("import", ("{venv_python}", "-c", f"import {PACKAGE}, sys; print(sys.prefix)")),
    ]
    ran = run_commands(commands, {}, dirs, "x", {}, verbose=False, console=Console())
    assert [r["label"] for r in ran] == ["install", "script on PATH", "import"]
    assert "probe from the leg venv" in Path(str(ran[1]["log"])).read_text()
    assert str(dirs.venv) in Path(str(ran[2]["log"])).read_text()
    assert list(dirs.venv.rglob(f"{PACKAGE}.py")), "the module is installed inside the leg's venv"
    outside = subprocess.run([sys.executable, "-c", f"import {PACKAGE}"], capture_output=True)
    assert outside.returncode != 0, "the interpreter running the build must not see the package"

    marker = (dirs.venv / venv.MARKER).read_text()
    run_commands(commands[2:], {}, dirs, "x", {}, verbose=False, console=Console())  # reused, not made anew
    assert (dirs.venv / venv.MARKER).read_text() == marker and list(dirs.venv.rglob(f"{PACKAGE}.py"))


def test_a_venv_from_another_interpreter_is_made_anew(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    made: list[list[str]] = []

    def fake_venv(argv: list[str], **_: object) -> None:
        made.append(argv)
        venv.interpreter(Path(argv[-1])).parent.mkdir(parents=True)
        venv.interpreter(Path(argv[-1])).write_text("")

    monkeypatch.setattr(venv, "run", fake_venv)
    where = tmp_path / "legs" / "x" / "venv"
    venv.ensure(where, tmp_path / "venv.log", "x", console=Console())
    venv.ensure(where, tmp_path / "venv.log", "x", console=Console())
    assert made == [[sys.executable, "-m", "venv", str(where)]]
    (where / "stale-file").write_text("left by a venv of another Python")
    (where / venv.MARKER).write_text("/usr/bin/python3.9 3.9.2")
    venv.ensure(where, tmp_path / "venv.log", "x", console=Console())
    assert len(made) == 2 and not (where / "stale-file").exists()
    assert (where / venv.MARKER).read_text() == venv.base_python()


@pytest.fixture(scope="module")
def all_commands() -> list[tuple[str, Command]]:
    matrix = load_matrix(ROOT)
    return [(plan.leg.id, command) for plan in plan_all(matrix) for command in (*plan.build, *plan.fixups)]


def test_every_pip_install_of_every_plan_runs_in_the_leg_venv(all_commands: list[tuple[str, Command]]) -> None:
    installs = [(leg_id, c) for leg_id, c in all_commands if ("-m", "pip", "install") == c.argv[1:4]]
    assert installs, "the matrix has legs whose upstream build installs Python packages"
    wrong = [f"{leg_id}: {' '.join(c.argv)}" for leg_id, c in installs if c.argv[0] != venv.SYMBOL]
    assert not wrong, "pip would install into the user's Python:\n" + "\n".join(wrong)
