// LibTorch smoke test: a = {1,2,3}, b = {2,3,4}; a + b == {3,5,7}, dot(a, b) == 20.
// On Apple the MPS contract of the variant: CPU packages must NOT have MPS; -gpu (mps)
// packages probe the MPS runtime after the CPU pass and, where there is one, really run
// a + b on the Metal device. The probe's verdict is one line (backends/steps/smoke.py):
// "accelerator mps: passed", or "accelerator mps: absent: <why>" where the runner has no
// MPS (GitHub's hosted Macs are virtual machines; the package's binary evidence is
// checked by verify).
// Prints PASS, or "FAIL: <what>" and exits non-zero.
#include <torch/torch.h>

#include <cmath>
#include <cstdio>
#include <exception>
#include <string>

#if defined(__APPLE__)
#include <sys/sysctl.h>
#endif

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

#if defined(__APPLE__)
// Why this machine has no MPS runtime to run on, "" when it has one. In a virtual machine
// torch::mps::is_available() has been seen to say yes while every MPS op fails: there the
// pass is not tried at all.
std::string mps_absent_reason(bool torch_says_available) {
  int vm = 0;
  size_t size = sizeof vm;
  if (sysctlbyname("kern.hv_vmm_present", &vm, &size, nullptr, 0) == 0 && vm == 1)
    return "this Mac is a virtual machine (kern.hv_vmm_present=1): Apple's Virtualization framework offers no MPS";
  if (!torch_says_available) return "torch::mps::is_available() == false (no MPS device, or macOS older than 12.3)";
  return "";
}
#endif

}  // namespace

int main() {
  const std::string flavor = SMOKE_FLAVOR;
  const std::string accel = SMOKE_ACCELERATOR;
  try {
    std::printf("libtorch %s (flavor %s, accelerator %s)\n", TORCH_VERSION, flavor.c_str(), accel.c_str());
    torch::Tensor a = torch::tensor({1.0f, 2.0f, 3.0f});
    torch::Tensor b = torch::tensor({2.0f, 3.0f, 4.0f});
    torch::Tensor expected = torch::tensor({3.0f, 5.0f, 7.0f});

    torch::Tensor sum = a + b;
    if (!torch::allclose(sum, expected)) return fail("a + b != {3, 5, 7}");
    const float dot = torch::dot(a, b).item<float>();
    if (std::fabs(dot - 20.0f) > 1e-4f) return fail("dot(a, b) = " + std::to_string(dot) + ", expected 20");
    std::printf("cpu: a + b = {%g, %g, %g}, dot = %g\n", sum[0].item<float>(), sum[1].item<float>(),
                sum[2].item<float>(), dot);

    const bool mps = torch::mps::is_available();
    std::printf("mps available: %d\n", mps ? 1 : 0);
    if (flavor == "cpu") {
#if defined(__APPLE__)
      if (mps) return fail("CPU package reports torch::mps::is_available() == true");
#endif
    } else if (flavor == "gpu") {
      // SMOKE_ACCELERATOR may be a comma list; libtorch's only GPU variant is MPS.
      if (("," + accel + ",").find(",mps,") == std::string::npos)
        return fail("flavor gpu needs accelerator mps, got '" + accel + "'");
#if defined(__APPLE__)
      const std::string absent = mps_absent_reason(mps);
      if (!absent.empty()) {
        std::printf("accelerator mps: absent: %s\n", absent.c_str());
      } else {
        torch::Tensor on_mps = a.to(torch::kMPS) + b.to(torch::kMPS);
        if (on_mps.device().type() != torch::kMPS) return fail("a + b did not stay on the MPS device");
        torch::Tensor back = on_mps.to(torch::kCPU);
        if (!torch::allclose(back, expected)) return fail("MPS a + b != {3, 5, 7}");
        std::printf("mps: a + b = {%g, %g, %g}\n", back[0].item<float>(), back[1].item<float>(),
                    back[2].item<float>());
        std::printf("accelerator mps: passed\n");
      }
#else
      return fail("flavor gpu/mps can only be verified on Apple");
#endif
    }
    // flavor cuda: built but never run (libtorch_cuda needs the stripped NVIDIA libs).

    std::printf("PASS\n");
    return 0;
  } catch (const std::exception& e) {
    return fail(e.what());
  }
}
