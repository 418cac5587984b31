// TFLite C API smoke test: add.tflite computes y = x + x + x (TFLite's add.bin
// semantics). CPU pass: input resized to [2], {1, 3} -> {3, 9} within 1e-4, as upstream.
// -gpu packages: one more pass per accelerator in SMOKE_ACCELERATOR (comma list) through
// its delegate at the model's own NHWC shape: metal -> TFLGpuDelegateCreate (macOS, iOS),
// coreml -> TfLiteCoreMlDelegateCreate (iOS). The delegate headers are the contract: a
// -gpu package must ship the one it is named for, a CPU package none.
// Each delegate pass ends in one line (backends/steps/smoke.py): "accelerator <name>:
// passed", or for Metal "accelerator metal: absent: <why>" when the probe finds no GPU to
// run on (GitHub's hosted Macs, and the simulators on them, are virtual machines).
// Prints PASS, or "FAIL: <what>" and exits non-zero.
//
//   smoke <add.tflite>
#if __has_include(<TensorFlowLiteC/c_api.h>)
#include <TensorFlowLiteC/c_api.h>  // iOS framework layout
#else
#include <tensorflow/lite/c_api.h>
#endif

#if __has_include(<tensorflow/lite/delegates/gpu/metal_delegate.h>)
#define SMOKE_HAS_METAL 1
#define SMOKE_METAL_HEADER <tensorflow/lite/delegates/gpu/metal_delegate.h>
#elif __has_include(<TensorFlowLiteCMetal/metal_delegate.h>)
#define SMOKE_HAS_METAL 1
#define SMOKE_METAL_HEADER <TensorFlowLiteCMetal/metal_delegate.h>
#else
#define SMOKE_HAS_METAL 0
#endif

#if __has_include(<TensorFlowLiteCCoreML/coreml_delegate.h>)
#define SMOKE_HAS_COREML 1
#define SMOKE_COREML_HEADER <TensorFlowLiteCCoreML/coreml_delegate.h>
#elif __has_include(<tensorflow/lite/delegates/coreml/coreml_delegate.h>)
#define SMOKE_HAS_COREML 1
#define SMOKE_COREML_HEADER <tensorflow/lite/delegates/coreml/coreml_delegate.h>
#else
#define SMOKE_HAS_COREML 0
#endif

// Delegate passes are compiled only for -gpu packages (SMOKE_DELEGATE_PASSES from
// CMakeLists.txt), so a CPU package that leaks a header fails with the contract message
// below rather than with an unresolved delegate symbol.
#ifndef SMOKE_DELEGATE_PASSES
#define SMOKE_DELEGATE_PASSES 0
#endif
#if SMOKE_HAS_METAL && SMOKE_DELEGATE_PASSES
#include SMOKE_METAL_HEADER
#include <CoreFoundation/CoreFoundation.h>
#include <sys/sysctl.h>
#define SMOKE_RUN_METAL 1
// Metal's C entry point (an id<MTLDevice>, retained; nil without a Metal device).
extern "C" CFTypeRef MTLCreateSystemDefaultDevice(void);
#else
#define SMOKE_RUN_METAL 0
#endif
#if SMOKE_HAS_COREML && SMOKE_DELEGATE_PASSES
#include SMOKE_COREML_HEADER
#define SMOKE_RUN_COREML 1
#else
#define SMOKE_RUN_COREML 0
#endif

#include <cmath>
#include <cstdio>
#include <sstream>
#include <string>
#include <vector>

#ifndef SMOKE_FLAVOR
#define SMOKE_FLAVOR "cpu"
#endif
#ifndef SMOKE_ACCELERATOR
#define SMOKE_ACCELERATOR "none"
#endif

namespace {

int fail(const std::string& what) {
  std::printf("FAIL: %s\n", what.c_str());
  std::fflush(stdout);
  return 1;
}

// Runs the model once; resize_to_2 reproduces upstream's add.bin check (input -> [2]).
// Returns an empty string on success, otherwise what went wrong.
std::string run(TfLiteModel* model, TfLiteDelegate* delegate, bool resize_to_2, const char* label) {
  TfLiteInterpreterOptions* options = TfLiteInterpreterOptionsCreate();
  if (!options) return "TfLiteInterpreterOptionsCreate failed";
  TfLiteInterpreterOptionsSetNumThreads(options, 1);
  if (delegate) TfLiteInterpreterOptionsAddDelegate(options, delegate);
  TfLiteInterpreter* interpreter = TfLiteInterpreterCreate(model, options);
  TfLiteInterpreterOptionsDelete(options);
  if (!interpreter) return "TfLiteInterpreterCreate failed";

  std::string error;
  const float input[2] = {1.0f, 3.0f};
  float output[2] = {0.0f, 0.0f};
  const int dims[1] = {2};
  if (resize_to_2 && TfLiteInterpreterResizeInputTensor(interpreter, 0, dims, 1) != kTfLiteOk) {
    error = "TfLiteInterpreterResizeInputTensor([2]) failed";
  } else if (TfLiteInterpreterAllocateTensors(interpreter) != kTfLiteOk) {
    error = "TfLiteInterpreterAllocateTensors failed";
  } else if (TfLiteTensorCopyFromBuffer(TfLiteInterpreterGetInputTensor(interpreter, 0), input, sizeof input) !=
             kTfLiteOk) {
    error = "TfLiteTensorCopyFromBuffer failed (input is not 2 floats)";
  } else if (TfLiteInterpreterInvoke(interpreter) != kTfLiteOk) {
    error = "TfLiteInterpreterInvoke failed";
  } else if (TfLiteTensorCopyToBuffer(TfLiteInterpreterGetOutputTensor(interpreter, 0), output, sizeof output) !=
             kTfLiteOk) {
    error = "TfLiteTensorCopyToBuffer failed (output is not 2 floats)";
  } else if (std::fabs(output[0] - 3.0f) > 1e-4f || std::fabs(output[1] - 9.0f) > 1e-4f) {
    error = "output {" + std::to_string(output[0]) + ", " + std::to_string(output[1]) + "}, expected {3, 9}";
  } else {
    std::printf("%s: {1, 3} -> {%g, %g}\n", label, output[0], output[1]);
  }
  TfLiteInterpreterDelete(interpreter);
  return error;
}

#if SMOKE_RUN_METAL
// Why there is no GPU for the Metal delegate, "" when there is one. A virtual machine has
// at most Apple's paravirtual Metal device: no GPU, and the pass is not tried there.
std::string metal_absent_reason() {
  int vm = 0;
  size_t size = sizeof vm;
  if (sysctlbyname("kern.hv_vmm_present", &vm, &size, nullptr, 0) == 0 && vm == 1)
    return "this Mac is a virtual machine (kern.hv_vmm_present=1): no GPU for the Metal delegate";
  CFTypeRef device = MTLCreateSystemDefaultDevice();
  if (!device) return "MTLCreateSystemDefaultDevice() returned no Metal device";
  CFRelease(device);
  return "";
}
#endif

}  // namespace

std::vector<std::string> split_accelerators(const std::string& list) {
  std::vector<std::string> out;
  std::stringstream ss(list);
  std::string item;
  while (std::getline(ss, item, ',')) {
    if (!item.empty() && item != "none") out.push_back(item);
  }
  return out;
}

int main(int argc, char** argv) {
  const std::string flavor = SMOKE_FLAVOR;
  const std::vector<std::string> accels = split_accelerators(SMOKE_ACCELERATOR);
  std::printf("tensorflowlite_c %s (flavor %s, accelerator %s; headers: metal %d, coreml %d)\n", TfLiteVersion(),
              flavor.c_str(), SMOKE_ACCELERATOR, SMOKE_HAS_METAL, SMOKE_HAS_COREML);
  if (flavor == "cpu") {
    if (SMOKE_HAS_METAL) return fail("CPU package ships the Metal delegate header");
    if (SMOKE_HAS_COREML) return fail("CPU package ships the Core ML delegate header");
  } else if (flavor == "gpu") {
    if (accels.empty()) return fail("flavor gpu without an accelerator");
    for (const std::string& a : accels) {
      if (a == "metal" && !SMOKE_HAS_METAL) return fail("flavor gpu/metal but the package ships no metal_delegate.h");
      if (a == "coreml" && !SMOKE_HAS_COREML) return fail("flavor gpu/coreml but the package ships no coreml_delegate.h");
      if (a != "metal" && a != "coreml") return fail("flavor gpu: unsupported accelerator '" + a + "'");
    }
  } else {
    return fail("unknown SMOKE_FLAVOR '" + flavor + "'");
  }
  if (argc < 2) return fail("usage: smoke <add.tflite>");

  TfLiteModel* model = TfLiteModelCreateFromFile(argv[1]);
  if (!model) return fail(std::string("TfLiteModelCreateFromFile(") + argv[1] + ") failed");

  std::string error = run(model, nullptr, /*resize_to_2=*/true, "cpu");
  if (!error.empty()) {
    TfLiteModelDelete(model);
    return fail("cpu forward pass: " + error);
  }

  for (const std::string& a : accels) {
    if (a == "metal") {
#if SMOKE_RUN_METAL
      const std::string absent = metal_absent_reason();
      if (!absent.empty()) {
        std::printf("accelerator metal: absent: %s\n", absent.c_str());
        continue;
      }
      TfLiteDelegate* metal = TFLGpuDelegateCreate(nullptr);
      if (!metal) error = "TFLGpuDelegateCreate returned null on a Metal device";
      else {
        error = run(model, metal, /*resize_to_2=*/false, "metal");
        TFLGpuDelegateDelete(metal);
      }
#else
      error = "Metal delegate pass not compiled";
#endif
    } else if (a == "coreml") {
#if SMOKE_RUN_COREML
      TfLiteCoreMlDelegateOptions options = {};
      options.enabled_devices = TfLiteCoreMlDelegateAllDevices;  // not only Neural Engine devices
      TfLiteDelegate* coreml = TfLiteCoreMlDelegateCreate(&options);
      if (!coreml) error = "TfLiteCoreMlDelegateCreate returned null";
      else {
        error = run(model, coreml, /*resize_to_2=*/false, "coreml");
        TfLiteCoreMlDelegateDelete(coreml);
      }
#else
      error = "Core ML delegate pass not compiled";
#endif
    }
    if (!error.empty()) {
      TfLiteModelDelete(model);
      return fail(a + " forward pass: " + error);
    }
    std::printf("accelerator %s: passed\n", a.c_str());
  }

  TfLiteModelDelete(model);
  std::printf("PASS\n");
  return 0;
}
