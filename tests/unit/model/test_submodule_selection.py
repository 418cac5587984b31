"""Which submodules a leg checks out follows its build's switches (model/submodules.py), and a
build that fails on an unselected one is named as such (steps/submodule_check.py)."""
from __future__ import annotations

from pathlib import Path

from backends.model.matrix import load_matrix
from backends.model.plan import Command, Plan
from backends.model.recipes import plan_all
from backends.model.submodules import advice, build_switches, command_switches
from backends.pins.inputs import collect, rows
from backends.runner.run import RunError
from backends.steps.submodule_check import Checkout, absolute_url, check, named_in

ROOT = Path(__file__).resolve().parents[3]


def _plan(*commands: Command, env: dict[str, str] | None = None) -> Plan:
    leg = load_matrix(ROOT).leg("executorch-linux-x86_64-static")
    return Plan(leg=leg, version="1", archive="a.zip", build=commands, env=env or {})


def test_switches_are_read_from_defines_in_order_and_from_the_environment() -> None:
    configure = Command("configure", ("cmake", "-DA=ON", "-DB:BOOL=TRUE", "-DC=on", "-DA=OFF", "-DD=0", "-DE=x"))
    assert command_switches(configure, {}, {}) == {"B", "C"}  # the later -DA=OFF wins
    pytorch = Command("pytorch", ("python", "build.py"), env={"USE_FBGEMM": "1", "USE_CUDA": "0"})
    assert build_switches(_plan(configure, pytorch, env={"USE_MKLDNN": "1"})) == {"B", "C", "USE_FBGEMM", "USE_MKLDNN"}


def test_an_implied_switch_is_on_until_a_later_define_turns_it_off() -> None:
    implied = {("--preset", "ios"): ("LLM", "XNNPACK")}
    preset = Command("configure", ("cmake", "--preset", "ios", "-DLLM=OFF"))
    assert command_switches(preset, {}, implied) == {"XNNPACK"}
    assert command_switches(Command("other", ("cmake", "--preset", "macos")), {}, implied) == frozenset()


def test_the_advice_names_the_data_entry() -> None:
    engine = load_matrix(ROOT).engines["executorch"]
    listed = advice(engine, "source", "backends/vulkan/third-party/volk")
    assert "engines/executorch/engine.toml lists it in [[submodules]] #4 (switch EXECUTORCH_BUILD_VULKAN)" in listed
    unlisted = advice(engine, "source", "backends/cadence/utils/FACTO")
    assert unlisted.startswith('add "backends/cadence/utils/FACTO" to the paths of the [[submodules]] entry of '
                               "source 'source' in engines/executorch/engine.toml")


def test_a_path_is_found_only_as_a_path() -> None:
    paths = ["third-party/pybind11", "shim"]
    cmake = "CMake Error at third-party/CMakeLists.txt:14 (add_subdirectory):\n  The source directory\n" \
            "    /b/src/executorch/third-party/pybind11\n  does not contain a CMakeLists.txt file."
    assert named_in(cmake, paths) == ("third-party/pybind11", "/b/src/executorch/third-party/pybind11")
    windows = r"D:\b\executorch\third-party\pybind11\include\pybind11.h(1): fatal error C1083"
    assert named_in(windows, paths) == ("third-party/pybind11", windows)
    assert named_in("a shim for -Wshim; third-party/pybind11x/y.h", paths) is None


def test_a_failure_naming_no_unselected_submodule_stays_as_it_was(tmp_path: Path) -> None:
    log = tmp_path / "build.log"
    log.write_text("error: something else entirely\n")
    error = RunError("leg configure", 1, log, ["error: something else entirely"])
    (tmp_path / "tree").mkdir()
    (tmp_path / "tree/.gitmodules").write_text('[submodule "x"]\n\tpath = third-party/x\n\turl = ../x.git\n')
    checkout = Checkout(tmp_path / "tree", "https://example.org/org/app", ())
    assert check(error, {"source": checkout}, lambda source, path: "edit") is None
    log.write_text("fatal error: third-party/x/x.h: No such file or directory\n")
    named = check(error, {"source": checkout}, lambda source, path: f"add {path} to {source}")
    assert named is not None and named.log == log
    assert ("the build reads the submodule third-party/x of source (https://example.org/org/x.git), which this leg "
            "does not check out") in str(named) and "add third-party/x to source" in str(named)
    selected = Checkout(tmp_path / "tree", "https://example.org/org/app", ("third-party/x",))
    assert check(error, {"source": selected}, lambda s, p: "") is None


def test_relative_submodule_urls_resolve_against_the_superproject() -> None:
    assert absolute_url("../x.git", "https://github.com/pytorch/executorch") == "https://github.com/pytorch/x.git"
    assert absolute_url("./sub", "file:///r/app.git/") == "file:///r/app.git/sub"
    assert absolute_url("https://gitlab.com/libeigen/eigen.git", "https://github.com/a/b") == \
        "https://gitlab.com/libeigen/eigen.git"


def test_pins_count_the_submodules_the_legs_use() -> None:
    matrix = load_matrix(ROOT)
    legs = [leg for leg in matrix.legs if leg.engine == "executorch"]
    found = {item.source: item for item in collect(plan_all(matrix, legs), matrix) if item.kind == "git"}
    assert found["source"].shown == "source @ v1.3.1 + 15 submodules"  # 10 common, Vulkan 3, MLX, ios-cmake
    assert "backends/arm/third-party/ethos-u-core-driver" not in found["source"].submodules
    assert found["pytorch"].shown.endswith(" + every submodule")
    assert rows([found["source"]])[0]["input"] == "source @ v1.3.1 + 15 submodules"
