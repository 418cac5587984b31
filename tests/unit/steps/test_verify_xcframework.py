"""iOS xcframeworks, slice by slice: what Info.plist declares against the Mach-O load
commands of each slice's library, and the accelerator evidence inside every slice."""
from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from backends.model.matrix import load_matrix
from backends.model.plan import Contract
from backends.model.recipes import plan_leg
from backends.steps.verify import check
from binaries import IOS_SLICES, license_texts, macho_static, xcframework_members, zip_members

ROOT = Path(__file__).resolve().parents[3]
MATRIX = load_matrix(ROOT)
ORT_API = ("OrtGetApiBase",)
COREML = "OrtSessionOptionsAppendExecutionProvider_CoreML"


def contract(leg_id: str) -> Contract:
    leg = MATRIX.leg(leg_id)
    return plan_leg(leg, MATRIX.engines[leg.engine], MATRIX).contract


def slices(work: Path, defined: tuple[str, ...], undefined: tuple[str, ...] = (), min_os: str = "13.0",
           swap: bool = False) -> dict[str, Path]:
    """A static library per slice; `swap` puts each slice's binary into the other slice."""
    built = {ident: macho_static(work / f"{ident}.a", defined, undefined, target=target.format(min_os))
             for ident, (target, _, _) in IOS_SLICES.items()}
    if swap:
        device, simulator = built.values()
        built = dict(zip(built, (simulator, device)))
    return built


def ort_xcframework(path: Path, libraries: dict[str, Path], headers: tuple[str, ...] = ("onnxruntime_c_api.h",)) -> Path:
    members = xcframework_members("onnxruntime", "libonnxruntime.a", libraries,
                                  {h: b"#define ORT_API_VERSION 26\n" for h in headers})
    return zip_members(path, {**members, **license_texts("onnxruntime")})


def test_the_cpu_and_gpu_xcframeworks_pass(tmp_path):
    cpu = ort_xcframework(tmp_path / "cpu.zip", slices(tmp_path / "cpu", ORT_API))
    assert check(cpu, contract("onnxruntime-ios-xcframework"), "1.26.0") == []
    gpu = ort_xcframework(tmp_path / "gpu.zip", slices(tmp_path / "gpu", (*ORT_API, COREML), ("OBJC_CLASS_$_MLModel",)),
                          ("onnxruntime_c_api.h", "coreml_provider_factory.h"))
    assert check(gpu, contract("onnxruntime-ios-gpu-xcframework"), "1.26.0") == []


def test_a_cpu_build_under_the_gpu_name_fails_in_every_slice(tmp_path):
    """The CoreML header copied from the source tree whatever the build did: the slices
    still lack the EP entry point."""
    archive = ort_xcframework(tmp_path / "gpu.zip", slices(tmp_path, ORT_API),
                              ("onnxruntime_c_api.h", "coreml_provider_factory.h"))
    assert check(archive, contract("onnxruntime-ios-gpu-xcframework"), "1.26.0") == [
        f"coreml evidence missing: no library in slice {ident} defines {COREML}" for ident in sorted(IOS_SLICES)]


def test_a_coreml_slice_under_the_cpu_name_fails(tmp_path):
    archive = ort_xcframework(tmp_path / "cpu.zip", slices(tmp_path, (*ORT_API, COREML)))
    problems = check(archive, contract("onnxruntime-ios-xcframework"), "1.26.0")
    assert sorted(p for p in problems if "coreml is compiled in" in p) == sorted(
        f"onnxruntime.xcframework/{ident}/libonnxruntime.a defines {COREML}: coreml is compiled in, "
        "which this package must not ship" for ident in IOS_SLICES)


def test_slices_must_be_what_info_plist_declares(tmp_path):
    archive = ort_xcframework(tmp_path / "swapped.zip", slices(tmp_path, ORT_API, swap=True))
    problems = check(archive, contract("onnxruntime-ios-xcframework"), "1.26.0")
    assert problems == [
        "onnxruntime.xcframework/ios-arm64/libonnxruntime.a is built for iossimulator; its slice is ios",
        # arm64 simulators exist since iOS 14: the simulator binary says so
        "onnxruntime.xcframework/ios-arm64/libonnxruntime.a requires arm64 OS 14.0, newer than the 13.0 the "
        "package promises",
        "onnxruntime.xcframework/ios-arm64-simulator/libonnxruntime.a is built for ios; its slice is iossimulator",
    ]


def test_a_device_slice_may_not_need_a_newer_ios_than_promised(tmp_path):
    """ExecuTorch 1.3.1's ios presets set DEPLOYMENT_TARGET 17.0."""
    archive = ort_xcframework(tmp_path / "new.zip", slices(tmp_path, ORT_API, min_os="17.0"))
    problems = check(archive, contract("onnxruntime-ios-xcframework"), "1.26.0")
    assert problems == ["onnxruntime.xcframework/ios-arm64/libonnxruntime.a requires arm64 OS 17.0, "
                        "newer than the 13.0 the package promises"]


def test_slice_architectures_and_binaries(tmp_path):
    members = xcframework_members("onnxruntime", "libonnxruntime.a", slices(tmp_path, ORT_API))
    members["onnxruntime.xcframework/ios-arm64/Headers/onnxruntime_c_api.h"] = b""
    del members["onnxruntime.xcframework/ios-arm64-simulator/libonnxruntime.a"]
    problems = check(zip_members(tmp_path / "pkg.zip", members),
                     replace(contract("onnxruntime-ios-xcframework"), required=()), "1.26.0")
    assert problems == ["onnxruntime.xcframework: the slice ios-arm64-simulator has no binary "
                        "onnxruntime.xcframework/ios-arm64-simulator/libonnxruntime.a"]


def test_a_static_slice_with_a_dangling_internal_class(tmp_path):
    """Framework classes (MLModel) come from the link line; the engine's own do not."""
    archive = ort_xcframework(tmp_path / "gpu.zip", slices(
        tmp_path, (*ORT_API, COREML), ("OBJC_CLASS_$_MLModel", "OBJC_CLASS_$_ETCoreMLModelManager", "memcpy")),
        ("onnxruntime_c_api.h", "coreml_provider_factory.h"))
    problems = check(archive, contract("onnxruntime-ios-gpu-xcframework"), "1.26.0")
    assert len(problems) == 2 and all("OBJC_CLASS_$_ETCoreMLModelManager" in p for p in problems)
    assert all("MLModel (" not in p for p in problems)


def test_tflite_delegate_xcframeworks_need_their_entry_points(tmp_path):
    """Google's delegate frameworks beside TensorFlowLiteC: Info.plist alone proves nothing."""
    def framework(name: str, defined: tuple[str, ...]) -> dict[str, bytes]:
        return xcframework_members(name, f"{name}.framework", slices(tmp_path / name, defined, min_os="12.0"))

    members = {**framework("TensorFlowLiteC", ("TfLiteInterpreterCreate", "TfLiteModelCreate")),
               **framework("TensorFlowLiteCMetal", ("TFLGpuDelegateCreate",)),
               **framework("TensorFlowLiteCCoreML", ("TfLiteUnrelated",)), **license_texts("tflite")}
    problems = check(zip_members(tmp_path / "pkg.zip", members), contract("tflite-ios-gpu-xcframework"), "2.17.0")
    assert problems == [f"coreml evidence missing: no library in slice {ident} defines TfLiteCoreMlDelegateCreate"
                        for ident in sorted(IOS_SLICES)]
