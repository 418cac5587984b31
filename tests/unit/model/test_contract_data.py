"""engines/contracts.toml is validated when it is loaded: a mistake names the file and the
field, and what is valid."""
from __future__ import annotations

from pathlib import Path

import pytest

from backends.model.contract_data import load_contract_data
from backends.model.engine import DataError

ROOT = Path(__file__).resolve().parents[3]
VALID_ROW = '[[evidence.onnxruntime.coreml]]\nsymbols = ["OrtSessionOptionsAppendExecutionProvider_CoreML"]\n'


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "contracts.toml"
    path.write_text(text)
    load_contract_data.cache_clear()
    return path


def test_the_projects_data_loads():
    data = load_contract_data(ROOT / "engines" / "contracts.toml")
    assert set(data.evidence) == {"onnxruntime", "libtorch", "executorch", "tflite", "litert"}
    assert data.system_symbols["linux"] and data.system_symbols["windows"]
    assert data.origin_builds == ("cuda",)


@pytest.mark.parametrize("text, message", [
    ("[[evidence.onnxruntime.opencl]]\nfiles = ['x']\n",
     "evidence.onnxruntime.opencl: unknown accelerator; accelerators: coreml, mps, mlx, metal, dml, vulkan, cuda"),
    ("[[evidence.onnxrutime.coreml]]\nfiles = ['x']\n",
     "evidence.onnxrutime: no engine onnxrutime; engines: onnxruntime, libtorch, tflite, litert, executorch"),
    (VALID_ROW + "[[evidence.onnxruntime.coreml]]\nsymbol = ['x']\n",
     "evidence.onnxruntime.coreml[1]: unknown field symbol; fields: when, files, symbols, links, targets"),
    ("[[evidence.onnxruntime.coreml]]\nfiles = ['x']\nwhen = { flavour = 'gpu' }\n",
     "evidence.onnxruntime.coreml[0].when: unknown field flavour; fields: platform, os, arch, kind, linkage, "
     "config, source"),
    ("[[evidence.onnxruntime.coreml]]\nfiles = ['x']\nwhen = [{ os = 'macos' }, { flavour = 'gpu' }]\n",
     "evidence.onnxruntime.coreml[0].when[1]: unknown field flavour"),
    ("[[evidence.onnxruntime.coreml]]\nfiles = ['x']\nwhen = []\n",
     "evidence.onnxruntime.coreml[0].when: expected a table or a non-empty list of tables, got []"),
    ("[[evidence.onnxruntime.coreml]]\nwhen = { os = 'macos' }\n",
     "evidence.onnxruntime.coreml[0]: names no evidence; give one of files, symbols, links, targets"),
    ("[[evidence.onnxruntime.coreml]]\nlinks = [1]\n",
     "evidence.onnxruntime.coreml[0].links: expected a string or a list of non-empty strings, got [1]"),
    ("[evidence.onnxruntime.coreml]\nfiles = ['x']\n",
     "evidence.onnxruntime.coreml: expected an array of tables ([[...]]), got dict"),
    ("[undefined.sets]\ncxx = ['^_Z(']\n[undefined.system]\nlinux = ['cxx']\n",
     "undefined.sets.cxx: '^_Z(' is not a regular expression"),
    ("[undefined.sets]\ncxx = ['^_Z']\n[undefined.system]\nlinux = ['c++']\n",
     "undefined.system.linux: no set c++; sets: cxx"),
    ("[undefined.system]\nlinuks = []\n", "undefined.system.linuks: unknown OS"),
    ("[evidences]\n", "unknown field evidences; fields: evidence, undefined"),
    ("[origins]\nbuilds = ['cuda', 'rocm']\n", "origins.builds: unknown accelerator rocm; accelerators: coreml"),
    ("[origins]\nbuild = ['cuda']\n", "origins: unknown field build; fields: builds"),
])
def test_a_mistake_names_the_file_and_field(tmp_path, text, message):
    path = write(tmp_path, text)
    with pytest.raises(DataError) as caught:
        load_contract_data(path)
    assert str(caught.value).startswith(f"{path}: ") and message in str(caught.value)


def test_a_row_whose_when_lists_tables_applies_where_any_of_them_matches(tmp_path):
    from backends.model.matrix import load_matrix
    path = write(tmp_path, "[[floor.executorch]]\nlibraries = ['lib/x.a']\nmin_bytes = 1\n"
                           "when = [{ os = 'ios' }, { platform = 'linux-aarch64', kind = 'static' }]\n")
    [row] = load_contract_data(path).floors["executorch"]
    taken = {leg.id for leg in load_matrix(ROOT).legs if leg.engine == "executorch" and row.applies_to(leg)}
    assert {"executorch-ios-xcframework", "executorch-linux-aarch64-static"} <= taken
    assert all(leg_id.startswith(("executorch-ios-", "executorch-linux-aarch64-")) for leg_id in taken)
