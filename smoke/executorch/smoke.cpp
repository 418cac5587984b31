// ExecuTorch smoke test: loads add.pte (SMOKE_PTE) through extension::Module and checks
// forward({1,2,3}, {2,3,4}) == {3,5,7} within 1e-4. Progress goes to stderr as
// "[smoke] ..." lines, flushed one by one, so a crash (e.g. a double operator
// registration aborting before or inside main) shows how far it got.
//
// Link-only mode (SMOKE_PTE empty): proves the runtime links and initialises, and that
// loading a nonexistent .pte fails cleanly with an error code instead of crashing.
// Prints PASS, or "FAIL: <what>" and exits non-zero.
#include <executorch/extension/module/module.h>
#include <executorch/extension/tensor/tensor.h>
#include <executorch/runtime/platform/runtime.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#ifndef SMOKE_PTE
#define SMOKE_PTE ""
#endif
#ifndef SMOKE_FLAVOR
#define SMOKE_FLAVOR "cpu"
#endif
#ifndef SMOKE_ACCELERATOR
#define SMOKE_ACCELERATOR "none"
#endif

using executorch::extension::Module;
using executorch::extension::make_tensor_ptr;
using executorch::runtime::Error;
using executorch::runtime::EValue;

namespace {

void checkpoint(const std::string& what) {
  std::fprintf(stderr, "[smoke] %s\n", what.c_str());
  std::fflush(stderr);
}

int fail(const std::string& what) {
  std::fflush(stderr);
  std::printf("FAIL: %s\n", what.c_str());
  std::fflush(stdout);
  return 1;
}

std::string error_name(Error e) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "0x%x", static_cast<unsigned>(e));
  return buf;
}

}  // namespace

int main() {
  checkpoint(std::string("start (flavor ") + SMOKE_FLAVOR + ", accelerator " + SMOKE_ACCELERATOR + ")");
  executorch::runtime::runtime_init();
  checkpoint("runtime_init done");

  if (std::strlen(SMOKE_PTE) == 0) {
    checkpoint("link-only mode: loading a nonexistent program must fail cleanly");
    Module missing("anira-smoke-does-not-exist.pte");
    const Error err = missing.load();
    if (err == Error::Ok) return fail("loading a nonexistent .pte reported Ok");
    checkpoint("load of nonexistent .pte failed cleanly with error " + error_name(err));
    std::printf("PASS (link-only: no model)\n");
    return 0;
  }

  checkpoint(std::string("loading ") + SMOKE_PTE);
  Module module(SMOKE_PTE);
  const Error load_err = module.load();
  if (load_err != Error::Ok) return fail(std::string("Module(") + SMOKE_PTE + ").load() = " + error_name(load_err));
  checkpoint("program loaded");

  auto x = make_tensor_ptr({3}, std::vector<float>{1.0f, 2.0f, 3.0f});
  auto y = make_tensor_ptr({3}, std::vector<float>{2.0f, 3.0f, 4.0f});
  checkpoint("running forward");
  auto result = module.forward(std::vector<EValue>{EValue(*x), EValue(*y)});
  if (!result.ok()) return fail("forward() = " + error_name(result.error()));
  checkpoint("forward done");

  const std::vector<EValue>& outputs = *result;
  if (outputs.empty() || !outputs[0].isTensor()) return fail("forward() returned no tensor");
  const auto out = outputs[0].toTensor();
  if (out.numel() != 3) return fail("output has " + std::to_string(out.numel()) + " elements, expected 3");
  const float* data = out.const_data_ptr<float>();
  const float want[3] = {3.0f, 5.0f, 7.0f};
  for (int i = 0; i < 3; ++i) {
    if (std::fabs(data[i] - want[i]) > 1e-4f) {
      return fail("out[" + std::to_string(i) + "] = " + std::to_string(data[i]) + ", expected " +
                  std::to_string(want[i]));
    }
  }
  std::printf("forward: {%g, %g, %g}\n", data[0], data[1], data[2]);
  std::printf("PASS\n");
  return 0;
}
