"""The archives' SBOM (backends/steps/sbom.py): an SPDX 2.3 document made with spdx-tools and
validated by it here, naming the engine and version, each input with its URL and sha256 or
commit, the patches, the bundled libraries, the license as an SPDX expression and the
accelerator variant; no clock and no local path in it."""
from __future__ import annotations

import hashlib
import json
from dataclasses import replace
from pathlib import Path

import pytest
from spdx_tools.spdx.validation.document_validator import validate_full_spdx_document

from backends.model.matrix import load_matrix
from backends.model.recipes import plan_leg
from backends.steps import sbom
from backends.steps import manifest as manifest_step
from backends.steps.archive import write_archive

ROOT = Path(__file__).resolve().parents[3]
MATRIX = load_matrix(ROOT)
COMMIT, SUBMODULE, DIGEST = "a" * 40, "b" * 40, "c" * 64
STATIC_COREML = "onnxruntime-macos-arm64-gpu-static"


def _plan(leg_id: str):  # type: ignore[no-untyped-def]
    leg = MATRIX.leg(leg_id)
    return plan_leg(leg, MATRIX.engines[leg.engine], MATRIX), MATRIX.engines[leg.engine]


def _git_record() -> dict[str, object]:
    return {"name": "source", "url": "https://github.com/microsoft/onnxruntime", "ref": "v1.26.0", "commit": COMMIT,
            "path": "/build/git/onnxruntime-source/onnxruntime", "override": "",
            "submodules": {"cmake/external/emsdk": SUBMODULE}}


def _packages(document: dict) -> dict[str, dict]:  # type: ignore[type-arg]
    return {p["SPDXID"]: p for p in document["packages"]}


def _related(document: dict, kind: str) -> set[tuple[str, str]]:  # type: ignore[type-arg]
    return {(r["spdxElementId"], r["relatedSpdxElement"]) for r in document["relationships"]
            if r["relationshipType"] == kind}


@pytest.fixture(scope="module")
def source_leg() -> dict:  # type: ignore[type-arg]
    plan, engine = _plan(STATIC_COREML)
    bundled = ["/home/ci/build/legs/x/work/Release/_deps/abseil-build/absl/base/libabsl_base.a",
               "/home/ci/build/legs/x/work/Release/libonnxruntime_common.a"]
    return sbom.leg_document(plan, engine, [_git_record()], bundled,
                             ["share/licenses/onnxruntime/LICENSE", "share/licenses/onnxruntime/ThirdPartyNotices.txt"])


def test_the_document_is_valid_spdx_23_read_back_by_spdx_tools(source_leg: dict) -> None:  # type: ignore[type-arg]
    assert source_leg["spdxVersion"] == "SPDX-2.3" and source_leg["dataLicense"] == "CC0-1.0"
    parsed = sbom.parse(json.loads(sbom.serialize(source_leg)))
    assert validate_full_spdx_document(parsed, "SPDX-2.3") == []
    assert sbom.problems(source_leg) == []


def test_the_archive_package_names_engine_version_license_and_variant(source_leg: dict) -> None:  # type: ignore[type-arg]
    archive = _packages(source_leg)["SPDXRef-Package-archive"]
    assert archive["name"] == "onnxruntime-1.26.0-macOS-arm64-gpu-static" and archive["versionInfo"] == "1.26.0"
    assert archive["licenseDeclared"] == archive["licenseConcluded"] == "MIT"
    refs = {r["referenceType"]: r["referenceLocator"] for r in archive["externalRefs"]}
    assert refs == {"anira-leg": STATIC_COREML, "anira-platform": "macos-arm64", "anira-kind": "static",
                    "anira-config": "release", "anira-flavor": "gpu", "anira-accelerator": "coreml"}
    assert "share/licenses/onnxruntime/ThirdPartyNotices.txt" in archive["licenseComments"]
    assert ("SPDXRef-DOCUMENT", "SPDXRef-Package-archive") in _related(source_leg, "DESCRIBES")
    assert ("SPDXRef-Package-archive", "SPDXRef-Engine-onnxruntime") in _related(source_leg, "CONTAINS")


def test_a_git_input_by_commit_with_its_submodules(source_leg: dict) -> None:  # type: ignore[type-arg]
    packages = _packages(source_leg)
    source = packages["SPDXRef-Input-source"]
    assert source["downloadLocation"] == f"git+https://github.com/microsoft/onnxruntime@{COMMIT}"
    assert source["versionInfo"] == COMMIT
    assert packages["SPDXRef-Input-source-cmake-external-emsdk"]["versionInfo"] == SUBMODULE
    assert ("SPDXRef-Package-archive", "SPDXRef-Input-source") in _related(source_leg, "GENERATED_FROM")


def test_patches_by_their_scripts_sha256(source_leg: dict) -> None:  # type: ignore[type-arg]
    plan, engine = _plan(STATIC_COREML)
    assert plan.patches
    packages = _packages(source_leg)
    for patch in plan.patches:
        package = packages[f"SPDXRef-Patch-{patch.name.replace('_', '-')}"]
        digest = hashlib.sha256((engine.root / patch.file).read_bytes()).hexdigest()
        assert package["checksums"] == [{"algorithm": "SHA256", "checksumValue": digest}]
        assert (package["SPDXID"], "SPDXRef-Engine-onnxruntime") in _related(source_leg, "PATCH_APPLIED")


def test_bundled_libraries_without_build_paths(source_leg: dict) -> None:  # type: ignore[type-arg]
    bundled = [p for p in source_leg["packages"] if p["SPDXID"].startswith("SPDXRef-Bundled-")]
    assert sorted(p["packageFileName"] for p in bundled) == ["_deps/abseil-build/absl/base/libabsl_base.a",
                                                             "libonnxruntime_common.a"]
    assert "/home/ci" not in sbom.serialize(source_leg).decode()


def test_a_file_input_by_url_and_sha256_and_an_origin_by_its_name_only() -> None:
    plan, engine = _plan("libtorch-linux-x86_64-shared")
    records = [{"name": "release", "url": plan.downloads[0].url, "filename": plan.downloads[0].filename,
                "sha256": DIGEST, "override": "/home/me/wheels/torch-2.13.0+cpu-cp311-linux_x86_64.whl",
                "path": "/home/me/.cache/downloads/sha256/c/torch.whl"},
               {"name": "notice", "url": "https://raw.githubusercontent.com/pytorch/pytorch/v2.12.0/NOTICE",
                "filename": "libtorch-2.12.0-NOTICE", "sha256": "d" * 64, "override": ""}]
    document = sbom.leg_document(plan, engine, records)
    packages = _packages(document)
    release = packages["SPDXRef-Input-release"]
    assert release["downloadLocation"] == plan.downloads[0].url
    assert release["checksums"] == [{"algorithm": "SHA256", "checksumValue": DIGEST}]
    assert release["comment"] == (f"built from origin=torch-2.13.0+cpu-cp311-linux_x86_64.whl in place of "
                                  f"{plan.downloads[0].url}")
    assert packages["SPDXRef-Input-notice"]["packageFileName"] == "libtorch-2.12.0-NOTICE"
    assert "/home/me" not in sbom.serialize(document).decode()
    assert _packages(document)["SPDXRef-Package-archive"]["licenseDeclared"] == "BSD-3-Clause"
    assert sbom.problems(document) == []


def test_same_inputs_same_bytes_other_inputs_another_namespace() -> None:
    plan, engine = _plan(STATIC_COREML)
    one = sbom.serialize(sbom.leg_document(plan, engine, [_git_record()]))
    assert one == sbom.serialize(sbom.leg_document(plan, engine, [_git_record()]))
    other = sbom.leg_document(plan, engine, [{**_git_record(), "commit": "e" * 40}])
    assert json.loads(one)["documentNamespace"] != other["documentNamespace"]


def test_the_time_is_the_archives_epoch(monkeypatch: pytest.MonkeyPatch) -> None:
    plan, engine = _plan(STATIC_COREML)
    monkeypatch.setenv("SOURCE_DATE_EPOCH", "1700000000")
    assert sbom.leg_document(plan, engine, [])["creationInfo"]["created"] == "2023-11-14T22:13:20Z"


def test_a_license_that_is_no_spdx_expression_is_refused() -> None:
    plan, engine = _plan(STATIC_COREML)
    with pytest.raises(sbom.SbomError, match="not an SPDX license expression|not valid SPDX"):
        sbom.leg_document(plan, replace(engine, license="MIT OR (BSD"), [])


def test_problems_names_what_makes_a_document_invalid(source_leg: dict) -> None:  # type: ignore[type-arg]
    broken = json.loads(sbom.serialize(source_leg))
    broken["relationships"].append({"spdxElementId": "SPDXRef-Package-archive", "relationshipType": "CONTAINS",
                                    "relatedSpdxElement": "SPDXRef-Nowhere"})
    assert any("SPDXRef-Nowhere" in problem for problem in sbom.problems(broken))
    del broken["spdxVersion"]
    assert sbom.problems(broken)


def test_an_aggregate_names_its_input_archives(tmp_path: Path) -> None:
    plan, engine = _plan("onnxruntime-macos-universal-shared")
    inputs = []
    for leg_id in plan.leg.inputs:
        path = tmp_path / f"{leg_id}.zip"
        path.write_bytes(leg_id.encode())
        inputs.append(sbom.InputArchive(leg_id, path))
    document = sbom.aggregate_document(plan, engine, inputs)
    assert sbom.problems(document) == []
    packages = {p["name"]: p for p in document["packages"]}
    for one in inputs:
        package = packages[one.leg]
        assert package["packageFileName"] == one.path.name
        assert package["checksums"][0]["checksumValue"] == hashlib.sha256(one.leg.encode()).hexdigest()


def test_written_into_the_stage_replacing_an_inputs_sbom_and_into_the_manifest(tmp_path: Path) -> None:
    plan, engine = _plan("onnxruntime-macos-universal-shared")
    stage = tmp_path / "stage"
    (stage / "share/sbom").mkdir(parents=True)
    (stage / "share/sbom/onnxruntime-1.26.0-macOS-arm64-shared.spdx.json").write_text("{}")  # a slice's
    (stage / "share/licenses/onnxruntime").mkdir(parents=True)
    (stage / "share/licenses/onnxruntime/LICENSE").write_text("MIT\n")
    document = sbom.aggregate_document(plan, engine, [], sbom.license_members(stage))
    member = sbom.write(stage, plan, document)
    assert member == "share/sbom/onnxruntime-1.26.0-macOS-universal-shared.spdx.json"
    assert sorted(p.name for p in (stage / "share/sbom").iterdir()) == [Path(member).name]
    archive = tmp_path / plan.archive
    write_archive(stage, archive)
    manifest = manifest_step.archive_manifest(plan, engine, archive, stage, [], {}, {})
    assert manifest["sbom"] == {"path": member, "document": document}
    listed = {f["path"]: f["sha256"] for f in manifest["files"]}
    assert listed[member] == hashlib.sha256(sbom.serialize(document)).hexdigest()
