"""Smokes on virtual runners: what a consumer program's accelerator report becomes.

A program whose smoke probes an accelerator (`Smoke.probes`: MPS, Metal, CUDA) prints
`accelerator <name>: passed` or `accelerator <name>: absent: <why>` after its CPU pass.
An absent runtime is recorded, "accelerator runtime not available on this runner", in the
smoke record, the published manifest and the run's summary; anything else that is not a
clean pass through the accelerator fails. The programs themselves need macOS (or a GPU),
so the outputs below are the lines they print (through `ctest --verbose`, which puts the
test's number before each line); one test runs the real step on a CMake project that
prints such a line.
"""
from __future__ import annotations

import shutil
import zipfile
from pathlib import Path

import pytest

from backends.graph.summary import Summary
from backends.model.matrix import load_matrix
from backends.model.plan import Smoke
from backends.model.recipes import plan_all
from backends.probes.host import known_accelerators
from backends.runner.run import Console
from backends.steps import smoke as smoke_step
from backends.steps.smoke import ABSENT, Outcome, SmokeReportError, judge, manifest_record, record

ROOT = Path(__file__).resolve().parents[3]
VM = "this Mac is a virtual machine (kern.hv_vmm_present=1): Apple's Virtualization framework offers no MPS"
PHYSICAL_MAC = known_accelerators("macos", virtual_machine="0", macos_version="15.5")

LIBTORCH_CPU = ["1: libtorch 2.12.0 (flavor gpu, accelerator mps)", "1: cpu: a + b = {3, 5, 7}, dot = 20",
                "1: mps available: 1"]
PRESENT_PASS = [*LIBTORCH_CPU, "1: mps: a + b = {3, 5, 7}", "1: accelerator mps: passed", "1: PASS"]
PRESENT_FAIL = [*LIBTORCH_CPU, "1: FAIL: MPS a + b != {3, 5, 7}"]
ABSENT_LINES = [*LIBTORCH_CPU, f"1: accelerator mps: absent: {VM}", "1: PASS"]
CPU_FAIL = ["1: libtorch 2.12.0 (flavor gpu, accelerator mps)", "1: FAIL: a + b != {3, 5, 7}"]


# -- the parser -----------------------------------------------------------------------------

def test_present_and_passing_is_recorded_as_passed() -> None:
    outcome = judge(PRESENT_PASS, ("mps",), PHYSICAL_MAC)
    assert outcome.passed, outcome.problems
    assert outcome.accelerators == {"mps": "passed"} and outcome.notes == ()
    assert record(outcome) == {"accelerators": {"mps": "passed"}}


def test_present_and_failing_fails() -> None:
    outcome = judge(PRESENT_FAIL, ("mps",), PHYSICAL_MAC)
    assert not outcome.passed
    assert "the program failed: FAIL: MPS a + b != {3, 5, 7}" in outcome.problems
    assert any("reported nothing for accelerator mps" in problem for problem in outcome.problems)


def test_absent_on_a_virtual_machine_is_a_note_not_a_failure() -> None:
    outcome = judge(ABSENT_LINES, ("mps",), known_accelerators("macos", virtual_machine="1", macos_version="15.5"))
    assert outcome.passed, outcome.problems
    assert outcome.accelerators == {"mps": f"{ABSENT}: {VM}"}
    assert outcome.notes == (f"accelerator runtime not available on this runner: mps ({VM})",)


def test_absent_on_a_machine_known_to_have_it_fails() -> None:
    outcome = judge(ABSENT_LINES, ("mps",), PHYSICAL_MAC)
    assert not outcome.passed and not outcome.notes
    assert outcome.problems == (f"the program reports accelerator mps absent ({VM}), but this machine is known to "
                                "have it: this Mac is not a virtual machine (kern.hv_vmm_present=0) and runs "
                                "macOS 15.5",)


def test_cpu_failure_fails_whatever_the_accelerator() -> None:
    for known in ({}, PHYSICAL_MAC):
        outcome = judge(CPU_FAIL, ("mps",), known)
        assert not outcome.passed
        assert outcome.problems[0] == "the program failed: FAIL: a + b != {3, 5, 7}"


def test_a_probed_accelerator_without_a_line_fails() -> None:
    outcome = judge([*LIBTORCH_CPU, "1: PASS"], ("mps",), {})
    assert outcome.problems == ("the program reported nothing for accelerator mps: a probed accelerator needs the "
                                "line 'accelerator mps: passed' or 'accelerator mps: absent: <why>'",)


@pytest.mark.parametrize("lines, problem", [
    (["accelerator mps: passed", "accelerator metal: passed"],
     "reports accelerator metal, which this smoke does not probe (it probes: mps)"),
    (["accelerator mps: absent"], "reports accelerator mps absent without saying why"),
    (["1: accelerator mps: absent:   "], "reports accelerator mps absent without saying why"),
])
def test_malformed_reports_fail(lines: list[str], problem: str) -> None:
    outcome = judge(lines, ("mps",), {})
    assert any(problem in found for found in outcome.problems), outcome.problems


def test_a_report_given_twice_fails() -> None:
    outcome = judge(["accelerator mps: absent: no device", "accelerator mps: passed"], ("mps",), {})
    assert outcome.problems == ("the program reports accelerator mps twice",)


def test_the_ios_simulator_reports_each_delegate_behind_the_boot_fixture() -> None:
    lines = ["1: Test command: cmake -P boot_simulator.cmake", "2: tensorflowlite_c 2.17.0 (flavor gpu, ...)",
             "2: cpu: {1, 3} -> {3, 9}", "2: accelerator metal: absent: this Mac is a virtual machine",
             "2: coreml: {1, 3} -> {3, 9}", "2: accelerator coreml: passed", "2: PASS"]
    outcome = judge(lines, ("metal", "coreml"), {})
    assert outcome.passed, outcome.problems
    assert outcome.accelerators == {"metal": f"{ABSENT}: this Mac is a virtual machine", "coreml": "passed"}


def test_a_smoke_without_probes_records_nothing() -> None:
    outcome = judge(["1: PASS", "1: accelerator-less program"], (), {})
    assert outcome == Outcome() and record(outcome) == {}


# -- what is known of this machine ----------------------------------------------------------

@pytest.mark.parametrize("system, vm, version, nvidia, expected", [
    ("macos", "1", "15.5", False, set()),  # GitHub's hosted Macs: virtual machines
    ("macos", None, "15.5", False, set()),  # unknown: a Mac that may be one
    ("macos", "0", "15.5", False, {"metal", "mps"}),
    ("macos", "0", "12.2", False, {"metal"}),  # MPS needs macOS 12.3
    ("linux", None, "", True, {"cuda"}),
    ("linux", None, "", False, set()),
])
def test_known_accelerators(system: str, vm: str | None, version: str, nvidia: bool, expected: set[str]) -> None:
    known = known_accelerators(system, virtual_machine=vm, macos_version=version, nvidia_device=nvidia)
    assert set(known) == expected


# -- where the outcome goes ----------------------------------------------------------------

def test_the_manifest_carries_the_outcome_without_timings_or_output() -> None:
    smoke_record = {"leg": "x", "status": "passed", "mode": "native", "seconds": 12.5, "output": ["PASS"],
                    "accelerators": {"mps": f"{ABSENT}: {VM}"}, "notes": ["n"], "inputs_signature": "s"}
    assert manifest_record(smoke_record) == {"status": "passed", "mode": "native",
                                             "accelerators": {"mps": f"{ABSENT}: {VM}"}, "notes": ["n"]}
    assert manifest_record({"status": "not run", "reason": "why"}) == {"status": "not run", "reason": "why"}


def test_the_summary_names_the_absent_runtime(tmp_path: Path) -> None:
    summary = Summary(tmp_path)
    summary.smoke("libtorch-macos-arm64-gpu-shared", {"status": "passed", "notes": [f"{ABSENT}: mps ({VM})"]})
    lines = summary.render({"libtorch-macos-arm64-gpu-shared": tmp_path / "a.zip"})
    assert f"  note        libtorch-macos-arm64-gpu-shared  smoke: {ABSENT}: mps ({VM})" in lines


# -- the plans and the programs -------------------------------------------------------------

def test_the_accelerator_smokes_that_may_lack_a_runtime_probe_it() -> None:
    plans = {plan.leg.id: plan for plan in plan_all(load_matrix(ROOT))}
    probes = {leg_id: plan.smoke.probes for leg_id, plan in plans.items() if plan.smoke and plan.smoke.probes}
    assert probes["libtorch-macos-arm64-gpu-shared"] == ("mps",)
    assert probes["tflite-ios-gpu-xcframework"] == ("metal", "coreml")
    assert probes["tflite-macos-arm64-gpu-shared"] == ("metal",)
    assert probes["onnxruntime-linux-x86_64-cuda-shared"] == ("cuda",)
    assert "libtorch-macos-arm64-shared" not in probes


def test_every_probed_accelerator_has_both_lines_in_its_program() -> None:
    """The programs cannot run here: their source must at least print the report for every
    accelerator their smoke probes (a literal name, or tflite's loop over the list)."""
    for plan in plan_all(load_matrix(ROOT)):
        if plan.smoke is None:
            continue
        source = "\n".join(p.read_text() for p in sorted((ROOT / plan.smoke.project).glob("*.cpp")))
        for name in plan.smoke.probes:
            assert f"accelerator {name}: passed" in source or "accelerator %s: passed" in source, plan.leg.id
            if name in ("mps", "metal", "cuda"):  # the runtimes a runner may lack
                assert f"accelerator {name}: absent: " in source, plan.leg.id


# -- the step, on a program that prints a report -----------------------------------------------

needs_cmake = pytest.mark.skipif(not all(shutil.which(t) for t in ("cmake", "ninja", "ctest")),
                                 reason="cmake, ninja and ctest are required")
PROJECT = """cmake_minimum_required(VERSION 3.16)
project(report NONE)
enable_testing()
add_test(NAME report COMMAND "${CMAKE_COMMAND}" -E echo "${SMOKE_LINE}")
"""


def _run_step(tmp_path: Path, line: str, known: dict[str, str]) -> dict[str, object]:
    (tmp_path / "smoke/report").mkdir(parents=True)
    (tmp_path / "smoke/report/CMakeLists.txt").write_text(PROJECT)
    archive = tmp_path / "package.zip"
    with zipfile.ZipFile(archive, "w") as zipped:
        zipped.writestr("include/x.h", "")
    spec = Smoke("smoke/report", defines={"SMOKE_LINE": line}, probes=("mps",))
    return smoke_step.smoke(archive, spec, tmp_path, tmp_path / "leg/smoke", tmp_path / "leg/logs", "leg", {},
                            False, known=known, console=Console())


@needs_cmake
def test_the_step_records_an_absent_runtime(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    result = _run_step(tmp_path, "accelerator mps: absent: no MPS here", {})
    assert result["status"] == "passed"
    assert result["accelerators"] == {"mps": f"{ABSENT}: no MPS here"}
    assert result["notes"] == [f"{ABSENT}: mps (no MPS here)"]
    assert f"[leg] smoke: {ABSENT}: mps (no MPS here)" in capsys.readouterr().out


@needs_cmake
def test_the_step_fails_an_absence_the_machine_contradicts(tmp_path: Path) -> None:
    with pytest.raises(SmokeReportError, match="known to have it: a real Mac"):
        _run_step(tmp_path, "accelerator mps: absent: no MPS here", {"mps": "a real Mac"})
