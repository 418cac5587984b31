"""The archive shape anira relies on, for every leg's contract, and the arguments the release's
anira job configures anira with (backends/ci/downstream.py). anira's cmake/AniraBackends.cmake
unpacks an archive without flattening a top-level folder and reads include/ and lib/ at its
root (LibTorch: share/cmake/Torch; iOS: the xcframework): a layout change fails here first."""
from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from backends.ci import downstream
from backends.model.matrix import load_matrix
from backends.model.recipes import plan_all

ROOT = Path(__file__).resolve().parents[3]
MATRIX = load_matrix(ROOT)
PLANS = {plan.leg.id: plan for plan in plan_all(MATRIX)}
ANIRA_LEGS = sorted(i for i, p in PLANS.items() if p.leg.engine in downstream.ANIRA_ENGINES and p.leg.publish)


@pytest.mark.parametrize("leg_id", ANIRA_LEGS)
def test_the_contract_holds_what_anira_reads(leg_id: str) -> None:
    plan = PLANS[leg_id]
    libname = MATRIX.engines[plan.leg.engine].libname
    for prefix in downstream.layout(plan, libname):
        assert any(member.startswith(prefix) for member in plan.contract.required), (leg_id, prefix)


@pytest.mark.parametrize("leg_id", sorted(PLANS))
def test_no_archive_wraps_its_files_in_a_top_level_folder(leg_id: str) -> None:
    plan = PLANS[leg_id]
    members = [*plan.contract.required, *(f"{rule.dest}/" for rule in plan.collect)]
    assert [m for m in members if not downstream.top_level_ok(m)] == []


def test_the_layout_check_catches_a_wrapped_archive() -> None:
    assert not downstream.top_level_ok("onnxruntime-1.26.0-Linux-x86_64-shared/include/onnxruntime_c_api.h")
    assert downstream.top_level_ok("onnxruntime.xcframework/Info.plist")
    plan = PLANS["libtorch-linux-x86_64-shared"]
    assert "share/cmake/Torch/" in downstream.layout(plan, "libtorch")


# -- the anira job's arguments ----------------------------------------------------------------------



def _entry(engine: str, libname: str, version: str, platform: str = "linux-x86_64", **extra: object) -> dict:  # type: ignore[type-arg]
    label = {"linux-x86_64": "Linux-x86_64", "macos-arm64": "macOS-arm64", "windows-x86_64": "Windows-x86_64"}[platform]
    return {"id": f"{engine}-{platform}-shared", "engine": engine, "platform": platform, "kind": "shared",
            "config": "release", "flavor": "cpu", "publish": True, "experimental": False, "runner": "ubuntu-24.04",
            "archive": f"{libname}-{version}-{label}-shared.zip", **extra}


def _dist(tmp_path: Path, entries: list[dict]) -> Path:  # type: ignore[type-arg]
    dist = tmp_path / "dist"
    dist.mkdir()
    sums = []
    for entry in entries:
        archive = dist / entry["archive"]
        archive.write_bytes(entry["id"].encode())
        version = entry["archive"].split("-")[1]
        (dist / (archive.name + ".json")).write_text(json.dumps({"engine": {"version": version}}))
        sums.append(f"{hashlib.sha256(archive.read_bytes()).hexdigest()}  {archive.name}\n")
    (dist / "SHA256SUMS").write_text("".join(sums))
    return dist


def test_each_engine_by_url_sha256_and_version(tmp_path: Path) -> None:
    entries = [_entry("onnxruntime", "onnxruntime", "1.26.0"), _entry("libtorch", "libtorch", "2.12.0"),
               _entry("litert", "LiteRt", "2.1.5"), _entry("tflite", "tensorflowlite_c", "2.17.0"),
               _entry("onnxruntime", "onnxruntime", "1.26.0", kind="static", id="onnxruntime-linux-x86_64-static",
                      archive="onnxruntime-1.26.0-Linux-x86_64-static.zip")]
    dist = _dist(tmp_path, entries)
    args = downstream.cmake_args(entries, dist, "linux-x86_64")
    archive = (dist / "onnxruntime-1.26.0-Linux-x86_64-shared.zip").resolve()
    assert f"-DANIRA_ONNXRUNTIME_URL={archive.as_uri()}" in args
    assert f"-DANIRA_ONNXRUNTIME_SHA256={hashlib.sha256(archive.read_bytes()).hexdigest()}" in args
    assert "-DANIRA_LIBTORCH_VERSION=2.12.0" in args and "-DANIRA_WITH_LIBTORCH=ON" in args
    # LiteRT and TFLite are exclusive in anira: LiteRT, its default, is taken.
    assert "-DANIRA_WITH_LITERT=ON" in args and "-DANIRA_WITH_TFLITE=OFF" in args
    assert not [a for a in args if a.startswith("-DANIRA_TFLITE_")]
    assert {"-DBUILD_SHARED_LIBS=ON", "-DANIRA_WITH_TESTS=ON"} <= set(args)


def test_an_engine_without_an_archive_is_turned_off(tmp_path: Path) -> None:
    entries = [_entry("onnxruntime", "onnxruntime", "1.26.0")]
    args = downstream.cmake_args(entries, _dist(tmp_path, entries), "linux-x86_64")
    assert "-DANIRA_WITH_LIBTORCH=OFF" in args and "-DANIRA_WITH_LITERT=OFF" in args


def test_bytes_other_than_the_drafts_are_refused(tmp_path: Path) -> None:
    entries = [_entry("onnxruntime", "onnxruntime", "1.26.0")]
    dist = _dist(tmp_path, entries)
    (dist / entries[0]["archive"]).write_bytes(b"other bytes")
    with pytest.raises(downstream.GateError, match="not the draft's bytes"):
        downstream.cmake_args(entries, dist, "linux-x86_64")


def test_the_matrix_gates_linux_always_and_other_platforms_with_archives(tmp_path: Path) -> None:
    entries = [_entry("onnxruntime", "onnxruntime", "1.26.0"),
               _entry("onnxruntime", "onnxruntime", "1.26.0", "windows-x86_64", runner="windows-2025"),
               _entry("executorch", "executorch", "1.5.1", "macos-arm64", runner="macos-15")]  # anira has no ExecuTorch
    dist = _dist(tmp_path, entries)
    assert downstream.gate_matrix(entries, dist) == [
        {"platform": "linux-x86_64", "runner": "ubuntu-24.04", "artifact": "anira-gate-1"},
        {"platform": "windows-x86_64", "runner": "windows-2025", "artifact": "anira-gate-2"}]
    with pytest.raises(downstream.GateError, match="linux-x86_64"):
        downstream.gate_matrix(entries[1:], dist)


def test_the_cli_prints_the_matrix_and_the_arguments(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    entries = [_entry("onnxruntime", "onnxruntime", "1.26.0")]
    dist = _dist(tmp_path, entries)
    matrix = tmp_path / "ci-matrix.json"
    matrix.write_text(json.dumps({"include": entries}))
    assert downstream.main(["matrix", "--matrix", str(matrix), "--dist", str(dist)]) == 0
    assert json.loads(capsys.readouterr().out) == {"include": [{"platform": "linux-x86_64", "runner": "ubuntu-24.04",
                                                                "artifact": "anira-gate-1"}]}
    assert downstream.main(["cmake-args", "--platform", "linux-x86_64", "--matrix", str(matrix), "--dist",
                            str(dist)]) == 0
    assert "-DANIRA_WITH_ONNXRUNTIME=ON" in capsys.readouterr().out.splitlines()
    assert downstream.main(["cmake-args", "--platform", "macos-arm64", "--matrix", str(matrix), "--dist",
                            str(dist)]) == 2


def test_each_gate_job_gets_only_its_platforms_files(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The release job stages one folder per anira job: that platform's archives and manifests,
    SHA256SUMS and the matrix, and nothing else (an anira job downloads 3-4 archives, not ~100)."""
    entries = [_entry("onnxruntime", "onnxruntime", "1.26.0"), _entry("libtorch", "libtorch", "2.12.0"),
               _entry("onnxruntime", "onnxruntime", "1.26.0", "windows-x86_64", runner="windows-2025"),
               _entry("onnxruntime", "onnxruntime", "1.26.0", kind="static", id="onnxruntime-linux-x86_64-static",
                      archive="onnxruntime-1.26.0-Linux-x86_64-static.zip")]
    dist = _dist(tmp_path, entries)
    matrix = tmp_path / "ci-matrix.json"
    matrix.write_text(json.dumps({"include": entries}))
    out = tmp_path / "gate"
    assert downstream.main(["stage", "--matrix", str(matrix), "--dist", str(dist), "--out", str(out)]) == 0
    jobs = json.loads(capsys.readouterr().out)["include"]
    assert [job["artifact"] for job in jobs] == ["anira-gate-1", "anira-gate-2"]
    staged = {folder.name: sorted(p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.is_file())
              for folder in out.iterdir()}
    linux = [entries[0]["archive"], entries[1]["archive"]]
    assert staged["1"] == sorted(["ci-matrix.json", "dist/SHA256SUMS", *(f"dist/{a}" for a in linux),
                                  *(f"dist/{a}.json" for a in linux)])
    assert staged["2"] == sorted(["ci-matrix.json", "dist/SHA256SUMS", f"dist/{entries[2]['archive']}",
                                  f"dist/{entries[2]['archive']}.json"])
    # What the anira job then configures from its own folder alone.
    args = downstream.cmake_args(entries, out / "1" / "dist", "linux-x86_64")
    assert "-DANIRA_WITH_LIBTORCH=ON" in args and "-DANIRA_WITH_ONNXRUNTIME=ON" in args
    assert downstream.main(["stage", "--matrix", str(matrix), "--dist", str(dist), "--out", str(out)]) == 2
