"""`scons fetch` takes exactly the inputs `scons pins` counts, the file a podspec names included."""
from __future__ import annotations

from pathlib import Path

from backends.commands.fetch_only import fetch_inputs
from backends.graph.settings import Settings
from backends.model.matrix import load_matrix
from backends.model.recipes import plan_leg
from backends.pins.inputs import collect

ROOT = Path(__file__).resolve().parents[3]
MATRIX = load_matrix(ROOT)


def _settings(tmp_path: Path, **more: object) -> Settings:
    return Settings(cache=tmp_path / "cache", mirrors=(), offline=True, lock=False, verbose=False, wait=False,
                    format="table", inputs="", heavy_jobs=1, version="", origins={}, **more)  # type: ignore[arg-type]


def _plans_naming_a_file():
    for leg in MATRIX.legs:
        plan = plan_leg(leg, MATRIX.engines[leg.engine], MATRIX)
        if any(d.names for d in plan.downloads):
            return (plan,)
    raise AssertionError("no leg downloads a file that names another (a podspec): the test needs one")


def test_fetch_asks_for_every_input_pins_counts_the_named_file_too(tmp_path: Path) -> None:
    plans = _plans_naming_a_file()
    inputs = collect(plans, MATRIX)
    assert any(item.parent for item in inputs)
    done = fetch_inputs(plans, MATRIX, _settings(tmp_path), tmp_path / "logs")  # offline, empty cache: all fail
    assert [(row["engine"], row["input"]) for row in done.rows] == [(i.engine, i.name) for i in inputs]
    assert len(done.failures) == len(inputs)

