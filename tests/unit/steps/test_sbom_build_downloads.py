"""The SBOM of a leg whose upstream build downloads files itself: each is a package of its own
(upstream's name, version, URL, the sha256 fetched and upstream's SHA1), a build dependency of
the archive; the inputs it lists are exactly those the leg's plan fetched."""
from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from types import MappingProxyType

from backends.model.engine import BuildDownload
from backends.model.matrix import load_matrix
from backends.model.recipes import plan_leg
from backends.steps import sbom

ROOT = Path(__file__).resolve().parents[3]
MATRIX = load_matrix(ROOT)
SHA1, PIN, COMMIT = "1" * 40, "ab" * 32, "a" * 40
ABSEIL = BuildDownload("abseil_cpp", "https://github.com/abseil/abseil-cpp/archive/refs/tags/20240722.0.zip",
                       f"sha1:{SHA1}", reader="ort-deps", where="cmake/deps.txt:4", license="Apache-2.0")
RE2 = BuildDownload("re2", "https://github.com/google/re2/archive/refs/tags/2024-07-02.zip", "sha1:" + "2" * 40,
                    reader="ort-deps", where="cmake/deps.txt:9")


def _leg_document():
    engine = MATRIX.engines["onnxruntime"]
    engine = replace(engine, build_downloads=(ABSEIL, RE2),
                     sha256=MappingProxyType({**engine.sha256, ABSEIL.filename: PIN, RE2.filename: PIN}))
    leg = next(leg for leg in MATRIX.legs if leg.engine == "onnxruntime" and leg.source == "build"
               and leg.os == "linux" and not leg.accelerator)
    plan = plan_leg(leg, engine, MATRIX)
    records = [{"name": "source", "url": "https://github.com/microsoft/onnxruntime", "ref": "v1.26.0",
                "commit": COMMIT}]
    records += [{"name": d.name, "url": d.url, "filename": d.filename, "sha256": d.sha256}
                for d in plan.downloads if d.upstream]
    return plan, sbom.leg_document(plan, engine, records)


def test_each_build_download_is_a_build_dependency_of_the_archive_with_both_hashes() -> None:
    _, document = _leg_document()
    packages = {p["SPDXID"]: p for p in document["packages"]}
    abseil = packages["SPDXRef-BuildDownload-abseil-cpp"]
    assert (abseil["name"], abseil["versionInfo"], abseil["downloadLocation"]) == (
        "abseil_cpp", "20240722.0", ABSEIL.url)
    assert {(c["algorithm"], c["checksumValue"]) for c in abseil["checksums"]} == {("SHA256", PIN), ("SHA1", SHA1)}
    assert abseil["licenseDeclared"] == "Apache-2.0" and "cmake/deps.txt:4" in abseil["sourceInfo"]
    assert packages["SPDXRef-BuildDownload-re2"]["licenseDeclared"] == "NOASSERTION"  # deps.txt states none
    dependencies = {(r["spdxElementId"], r["relatedSpdxElement"]) for r in document["relationships"]
                    if r["relationshipType"] == "BUILD_DEPENDENCY_OF"}
    assert dependencies == {("SPDXRef-BuildDownload-abseil-cpp", "SPDXRef-Package-archive"),
                            ("SPDXRef-BuildDownload-re2", "SPDXRef-Package-archive")}
    assert sbom.problems(document) == []


def test_the_sbom_lists_exactly_the_inputs_the_plan_fetched() -> None:
    plan, document = _leg_document()
    listed = {p["SPDXID"] for p in document["packages"]
              if p["SPDXID"].startswith(("SPDXRef-Input-", "SPDXRef-BuildDownload-"))}
    fetched = {f"SPDXRef-BuildDownload-{d.upstream.name.replace('_', '-')}" if d.upstream else f"SPDXRef-Input-{d.name}"
               for d in plan.downloads}
    assert listed == fetched == {"SPDXRef-Input-source", "SPDXRef-BuildDownload-abseil-cpp",
                                 "SPDXRef-BuildDownload-re2"}


def _libtorch_plan(platform: str):
    leg = next(leg for leg in MATRIX.legs if leg.engine == "libtorch" and leg.source == "prebuilt"
               and leg.platform == platform and leg.flavor == "cpu")
    return plan_leg(leg, MATRIX.engines["libtorch"], MATRIX), MATRIX.engines["libtorch"]


def test_a_shipped_runtime_that_is_not_the_engines_own_is_listed_with_its_license(tmp_path: Path) -> None:
    plan, engine = _libtorch_plan("linux-x86_64")
    stage = tmp_path / "stage"
    (stage / "lib").mkdir(parents=True)
    (stage / "lib/libgomp-a34b3233.so.1").write_bytes(b"\x7fELF gomp")
    (stage / "lib/libtorch_cpu.so").write_bytes(b"\x7fELF torch")  # the engine's own: not a runtime
    (stage / "share/licenses/libgomp").mkdir(parents=True)
    (stage / "share/licenses/libgomp/GCC-exception-3.1.txt").write_text("exception")
    shipped = sbom.runtime_members(plan, stage)
    assert list(shipped) == ["lib/libgomp-a34b3233.so.1"]
    document = sbom.leg_document(plan, engine, [], license_texts=sbom.license_members(stage), shipped=shipped)
    [gomp] = [p for p in document["packages"] if p["SPDXID"].startswith("SPDXRef-Runtime-")]
    assert (gomp["name"], gomp["packageFileName"], gomp["licenseDeclared"]) == (
        "libgomp", "lib/libgomp-a34b3233.so.1", "GPL-3.0-or-later WITH GCC-exception-3.1")
    assert "share/licenses/libgomp/GCC-exception-3.1.txt" in gomp["licenseComments"]
    assert ("SPDXRef-Package-archive", gomp["SPDXID"]) in {
        (r["spdxElementId"], r["relatedSpdxElement"]) for r in document["relationships"]
        if r["relationshipType"] == "CONTAINS"}
    assert sbom.problems(document) == []


def test_linux_libtorch_carries_libgomps_license_texts_once_pinned() -> None:
    linux, _ = _libtorch_plan("linux-x86_64")
    texts = {d.name: d for d in linux.downloads if d.name in ("gcc_exception", "gpl3")}
    assert set(texts) == {"gcc_exception", "gpl3"} and all(d.optional for d in texts.values())
    assert {(r.pattern, r.dest, r.rename) for r in linux.collect if r.dest == "share/licenses/libgomp"} == {
        ("{download:gcc_exception}", "share/licenses/libgomp", "GCC-exception-3.1.txt"),
        ("{download:gpl3}", "share/licenses/libgomp", "GPL-3.0.txt")}
    windows, _ = _libtorch_plan("windows-x86_64")
    assert not windows.runtimes and not any(d.name == "gpl3" for d in windows.downloads)
