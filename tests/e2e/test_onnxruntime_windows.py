"""The ONNX Runtime Windows x86_64 shared leg end to end on this Linux host (issue 17, item 1).

Stands in for: upstream's `onnxruntime-win-x64-1.26.0.zip`, assembled by inputs.py from
PyPI's 1.26.0 `win_amd64` wheel (the release build's onnxruntime.dll), import libraries
made from the DLLs' export tables with llvm-dlltool (upstream's come from the MSVC
linker: the same exports) and Debian's 1.21 headers (older than the library, never
newer); it lacks upstream's .pdb files and license texts, which the recipe drops anyway.
The zip goes through the real leg with `origin=`: repackage, verify (PE exports), archive,
and the smoke: smoke/onnxruntime cross-compiled with MinGW-w64 and run under wine with
the archive's DLL, which is how this host runs Windows CPU packages.
"""
from __future__ import annotations


import json
import re
import shutil
import zipfile

import pytest

import inputs
from scratch import Scons, scratch_project

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.skipif(not (shutil.which("x86_64-w64-mingw32-g++") and shutil.which("wine")),
                       reason="needs mingw-w64 and wine (tools/setup.sh installs them)"),
]
LEG = "onnxruntime-windows-x86_64-shared"
ARCHIVE = "onnxruntime-1.26.0-Windows-x86_64-shared.zip"


@pytest.fixture(scope="module")
def built(tmp_path_factory, e2e_cache):
    release = inputs.ort_win_x64_release(e2e_cache)
    project = scratch_project(tmp_path_factory.mktemp("ort-win"))
    scons = Scons(project, tmp_path_factory.mktemp("cache"))
    args = (LEG, f"origin={release}")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("WINEPREFIX", str(e2e_cache / "wineprefix"))  # made once (~10 s), then reused
        return scons, args, scons(*args)


def _step(scons: Scons, name: str) -> dict:
    return json.loads((scons.project / "build/legs" / LEG / "steps" / f"{name}.json").read_text())


def test_list_says_it_runs_here_under_wine(built):
    scons, *_ = built
    listing = scons("list", "engine=onnxruntime", "platform=windows-x86_64").stdout
    header = re.split(r"\s{2,}", listing.splitlines()[0].strip())  # column names may hold one space
    row = dict(zip(header, next(line.split() for line in listing.splitlines() if line.startswith(LEG + " "))))
    assert (row["build"], row["run"]) == ("yes", "wine"), listing


def test_verified_on_the_dll_exports(built):
    scons, _, result = built
    assert f"[verify] {LEG} done" in result.stdout
    checked = _step(scons, "verify")["checked"]
    assert "lib/onnxruntime.dll exports OrtGetApiBase" in checked
    assert any(line.startswith("shows no dml evidence (") and "OrtSessionOptionsAppendExecutionProvider_DML" in line
               for line in checked), checked


def test_smoke_ran_the_forward_pass_under_wine(built):
    scons, *_ = built
    smoke = _step(scons, "smoke")
    assert smoke["status"] == "passed" and smoke["mode"] == "wine", smoke
    output = "\n".join(smoke["output"])
    assert "wine" in output and "smoke.exe" in output  # ctest's emulator ran the Windows program
    assert "onnxruntime 1.26.0" in output and "cpu: y = {2, 4, 6}" in output and "PASS" in output


def test_archive_layout_and_provenance(built):
    scons, *_ = built
    with zipfile.ZipFile(scons.project / "dist" / ARCHIVE) as archive:
        names = set(archive.namelist())
    assert {"lib/onnxruntime.dll", "lib/onnxruntime.lib", "include/onnxruntime_cxx_api.h"} <= names
    assert not [n for n in names if "providers_shared" in n or n.endswith((".pdb", ".def"))]
    manifest = json.loads((scons.project / "dist" / (ARCHIVE + ".json")).read_text())
    assert manifest["sources"][0]["origin"].endswith("onnxruntime-win-x64-1.26.0.zip")


def test_rerun_is_a_no_op(built):
    scons, args, _ = built
    assert scons("-q", *args, check=False).returncode == 0
