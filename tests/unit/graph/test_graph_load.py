"""What declaring the step graph loads: a null build imports no module only a step's work needs."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

SITE_SCONS = Path(__file__).resolve().parents[3] / "site_scons"
# Imported by the steps that use them, not at load: each costs a null build a noticeable share.
BUILD_ONLY = ("spdx_tools", "backends.steps.sbom")


@pytest.mark.parametrize("module", BUILD_ONLY)
def test_declaring_the_graph_does_not_import_what_only_a_step_needs(module: str) -> None:
    probe = ("import sys; import backends.graph.declare, backends.graph.actions; "
             f"print(any(name == {module!r} or name.startswith({module!r} + '.') for name in sys.modules))")
    loaded = subprocess.run([sys.executable, "-c", probe], cwd=SITE_SCONS, capture_output=True, text=True,
                            check=True).stdout.strip()
    assert loaded == "False", f"{module} is imported when the graph is declared"


def test_an_sbom_error_is_a_named_error() -> None:
    from backends.graph import actions
    from backends.steps.sbom import SbomError

    assert actions._named(SbomError("no valid SPDX"))
    assert not actions._named(KeyError("a bug"))
