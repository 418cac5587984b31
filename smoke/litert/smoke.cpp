// LiteRT C API smoke test (headers and binaries from the pinned LiteRT SHA, where
// LiteRtCreateModelFrom{File,Buffer} take a leading LiteRtEnvironment).
//
// Creates an environment, loads add.tflite from file and from a buffer, compiles the
// buffer model for the CPU accelerator, and runs it: {1, 3} -> {3, 9} within 1e-4
// (add.tflite computes y = x + x + x). Upstream's smoke stopped at compilation; this one
// also checks the numbers. Prints PASS, or "FAIL: <what>" and exits non-zero.
//
//   smoke <add.tflite>
#include <litert/c/litert_common.h>
#include <litert/c/litert_compiled_model.h>
#include <litert/c/litert_environment.h>
#include <litert/c/litert_model.h>
#include <litert/c/litert_options.h>
#include <litert/c/litert_tensor_buffer.h>
#include <litert/c/litert_tensor_buffer_requirements.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

namespace {

int fail(const std::string& what) {
  std::printf("FAIL: %s\n", what.c_str());
  std::fflush(stdout);
  return 1;
}

// Status codes as numbers: LiteRtGetStatusString is declared in litert_common.h but is not
// exported by libLiteRt (it is missing from litert_runtime_c_api_so_symbols.txt).
std::string status(const char* call, LiteRtStatus s) {
  return std::string(call) + " failed with LiteRtStatus " + std::to_string(static_cast<int>(s));
}

// Owns every LiteRT handle the test creates, destroyed in reverse order of creation.
struct Handles {
  LiteRtEnvironment env = nullptr;
  LiteRtModel file_model = nullptr;
  LiteRtModel model = nullptr;
  LiteRtOptions options = nullptr;
  LiteRtCompiledModel compiled = nullptr;
  LiteRtTensorBuffer input = nullptr;
  LiteRtTensorBuffer output = nullptr;
  ~Handles() {
    if (output) LiteRtDestroyTensorBuffer(output);
    if (input) LiteRtDestroyTensorBuffer(input);
    if (compiled) LiteRtDestroyCompiledModel(compiled);
    if (options) LiteRtDestroyOptions(options);
    if (model) LiteRtDestroyModel(model);
    if (file_model) LiteRtDestroyModel(file_model);
    if (env) LiteRtDestroyEnvironment(env);
  }
};

// A managed host buffer for signature 0's tensor, sized by the compiled model.
std::string make_buffer(Handles& h, LiteRtSignature signature, bool is_input, LiteRtTensorBuffer* buffer) {
  LiteRtTensor tensor = nullptr;
  LiteRtStatus s = is_input ? LiteRtGetSignatureInputTensorByIndex(signature, 0, &tensor)
                            : LiteRtGetSignatureOutputTensorByIndex(signature, 0, &tensor);
  if (s != kLiteRtStatusOk) return status(is_input ? "LiteRtGetSignatureInputTensorByIndex" : "LiteRtGetSignatureOutputTensorByIndex", s);
  LiteRtRankedTensorType type;
  if ((s = LiteRtGetRankedTensorType(tensor, &type)) != kLiteRtStatusOk) return status("LiteRtGetRankedTensorType", s);
  LiteRtTensorBufferRequirements requirements = nullptr;  // owned by the compiled model
  s = is_input ? LiteRtGetCompiledModelInputBufferRequirements(h.compiled, 0, 0, &requirements)
               : LiteRtGetCompiledModelOutputBufferRequirements(h.compiled, 0, 0, &requirements);
  if (s != kLiteRtStatusOk) return status("LiteRtGetCompiledModel*BufferRequirements", s);
  if ((s = LiteRtCreateManagedTensorBufferFromRequirements(h.env, &type, requirements, buffer)) != kLiteRtStatusOk)
    return status("LiteRtCreateManagedTensorBufferFromRequirements", s);
  return {};
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) return fail("usage: smoke <add.tflite>");
  const char* path = argv[1];
  // Read first: the buffer model must not outlive these bytes (h is destroyed before them).
  std::ifstream in(path, std::ios::binary);
  const std::vector<char> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (bytes.empty()) return fail(std::string("cannot read ") + path);
  Handles h;
  LiteRtStatus s;

  if ((s = LiteRtCreateEnvironment(0, nullptr, &h.env)) != kLiteRtStatusOk) return fail(status("LiteRtCreateEnvironment", s));
  std::printf("environment created\n");

  if ((s = LiteRtCreateModelFromFile(h.env, path, &h.file_model)) != kLiteRtStatusOk)
    return fail(status("LiteRtCreateModelFromFile", s) + " for " + path);
  std::printf("model loaded from file\n");

  if ((s = LiteRtCreateModelFromBuffer(h.env, bytes.data(), bytes.size(), &h.model)) != kLiteRtStatusOk)
    return fail(status("LiteRtCreateModelFromBuffer", s));
  std::printf("model loaded from buffer (%zu bytes)\n", bytes.size());

  if ((s = LiteRtCreateOptions(&h.options)) != kLiteRtStatusOk) return fail(status("LiteRtCreateOptions", s));
  if ((s = LiteRtSetOptionsHardwareAccelerators(h.options, kLiteRtHwAcceleratorCpu)) != kLiteRtStatusOk)
    return fail(status("LiteRtSetOptionsHardwareAccelerators(Cpu)", s));
  if ((s = LiteRtCreateCompiledModel(h.env, h.model, h.options, &h.compiled)) != kLiteRtStatusOk)
    return fail(status("LiteRtCreateCompiledModel", s));
  std::printf("compiled model created (CPU)\n");

  LiteRtSignature signature = nullptr;
  if ((s = LiteRtGetModelSignature(h.model, 0, &signature)) != kLiteRtStatusOk) return fail(status("LiteRtGetModelSignature", s));
  std::string error = make_buffer(h, signature, true, &h.input);
  if (error.empty()) error = make_buffer(h, signature, false, &h.output);
  if (!error.empty()) return fail(error);

  const float x[2] = {1.0f, 3.0f};
  void* addr = nullptr;
  if ((s = LiteRtLockTensorBuffer(h.input, &addr, kLiteRtTensorBufferLockModeWrite)) != kLiteRtStatusOk)
    return fail(status("LiteRtLockTensorBuffer(input)", s));
  std::memcpy(addr, x, sizeof x);
  if ((s = LiteRtUnlockTensorBuffer(h.input)) != kLiteRtStatusOk) return fail(status("LiteRtUnlockTensorBuffer(input)", s));

  if ((s = LiteRtRunCompiledModel(h.compiled, 0, 1, &h.input, 1, &h.output)) != kLiteRtStatusOk)
    return fail(status("LiteRtRunCompiledModel", s));

  float y[2] = {0.0f, 0.0f};
  if ((s = LiteRtLockTensorBuffer(h.output, &addr, kLiteRtTensorBufferLockModeRead)) != kLiteRtStatusOk)
    return fail(status("LiteRtLockTensorBuffer(output)", s));
  std::memcpy(y, addr, sizeof y);
  if ((s = LiteRtUnlockTensorBuffer(h.output)) != kLiteRtStatusOk) return fail(status("LiteRtUnlockTensorBuffer(output)", s));

  if (std::fabs(y[0] - 3.0f) > 1e-4f || std::fabs(y[1] - 9.0f) > 1e-4f)
    return fail("output {" + std::to_string(y[0]) + ", " + std::to_string(y[1]) + "}, expected {3, 9}");
  std::printf("cpu: {1, 3} -> {%g, %g}\n", y[0], y[1]);
  std::printf("PASS\n");
  return 0;
}
