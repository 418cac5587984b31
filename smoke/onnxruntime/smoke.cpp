// ONNX Runtime smoke test: runs add.onnx (y = x + x, float[3]) through the packaged
// library, first on the CPU, then once more per execution-provider header the package
// ships (CoreML, DirectML). Prints PASS, or "FAIL: <what>" and exits non-zero.
//
//   smoke [add.onnx]   (no argument: init-only check — version, providers, guards)
//
// SMOKE_FLAVOR / SMOKE_ACCELERATOR come from the CMake project and turn the variant
// contract into assertions: a -gpu package must ship the EP header it is named for, a
// CPU package must ship none (headers advertise EPs to anira). A -cuda package must
// list CUDAExecutionProvider; its CPU pass needs no GPU (ORT loads the CUDA provider
// lazily), and the pass with the CUDA EP appended runs where an NVIDIA GPU is present:
// one line says which (backends/steps/smoke.py), "accelerator cuda: passed" or
// "accelerator cuda: absent: <why>".
// MinGW (the wine smoke): ORT's headers spell MSVC's `_stdcall`, which MinGW defines only
// outside strict ISO mode, and use SAL's `_Return_type_success_` without their own
// non-MSVC fallback.
#if defined(__MINGW32__)
#ifndef _stdcall
#define _stdcall __stdcall
#endif
#ifndef _Return_type_success_
#define _Return_type_success_(expr)
#endif
#endif
#include <onnxruntime_cxx_api.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <fstream>
#include <functional>
#include <initializer_list>
#include <iterator>
#include <string>
#include <vector>

// Which EP headers the package ships (the variant contract is about these).
#if __has_include(<coreml_provider_factory.h>)
#define SMOKE_HAS_COREML 1
#else
#define SMOKE_HAS_COREML 0
#endif
#if __has_include(<dml_provider_factory.h>)
#define SMOKE_HAS_DML 1
#else
#define SMOKE_HAS_DML 0
#endif

// The EP forward passes are compiled only for -gpu packages (SMOKE_EP_PASSES, set by
// CMakeLists.txt) on the platform the EP exists on. A CPU package that leaks a header
// then fails with the contract message below instead of an unresolved EP symbol.
#ifndef SMOKE_EP_PASSES
#define SMOKE_EP_PASSES 0
#endif
#if SMOKE_HAS_COREML && SMOKE_EP_PASSES && defined(__APPLE__)
#include <coreml_provider_factory.h>
#define SMOKE_RUN_COREML 1
#else
#define SMOKE_RUN_COREML 0
#endif
#if SMOKE_HAS_DML && SMOKE_EP_PASSES && defined(_WIN32)
#ifndef NOMINMAX
#define NOMINMAX
#endif
#include <windows.h>
#include <d3d12.h>
#include <dxgi1_4.h>
#include <dml_provider_factory.h>
#define SMOKE_RUN_DML 1
#else
#define SMOKE_RUN_DML 0
#endif

#if defined(_WIN32) && !SMOKE_RUN_DML
#ifndef NOMINMAX
#define NOMINMAX
#endif
#include <windows.h>
#endif
#if !defined(_WIN32)
#include <sys/stat.h>
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

bool has_provider(const std::vector<std::string>& providers, const char* name) {
  return std::find(providers.begin(), providers.end(), name) != providers.end();
}

// One forward pass: x = {1, 2, 3} -> y must be {2, 4, 6} within 1e-5.
// Returns an empty string on success, otherwise what went wrong.
std::string run_add(Ort::Env& env, const std::vector<char>& model, Ort::SessionOptions& options,
                    const char* label) {
  Ort::Session session(env, model.data(), model.size(), options);
  std::vector<float> x{1.0f, 2.0f, 3.0f};
  const int64_t shape[1] = {3};
  Ort::MemoryInfo cpu = Ort::MemoryInfo::CreateCpu(OrtArenaAllocator, OrtMemTypeDefault);
  Ort::Value input = Ort::Value::CreateTensor<float>(cpu, x.data(), x.size(), shape, 1);
  const char* input_names[] = {"x"};
  const char* output_names[] = {"y"};
  std::vector<Ort::Value> outputs =
      session.Run(Ort::RunOptions{nullptr}, input_names, &input, 1, output_names, 1);
  if (outputs.size() != 1 || !outputs[0].IsTensor()) return "no tensor output";
  auto info = outputs[0].GetTensorTypeAndShapeInfo();
  if (info.GetElementCount() != 3) return "output has " + std::to_string(info.GetElementCount()) + " elements";
  const float* y = outputs[0].GetTensorData<float>();
  const float want[3] = {2.0f, 4.0f, 6.0f};
  for (int i = 0; i < 3; ++i) {
    if (std::fabs(y[i] - want[i]) > 1e-5f) {
      return "y[" + std::to_string(i) + "]=" + std::to_string(y[i]) + ", expected " + std::to_string(want[i]);
    }
  }
  std::printf("%s: y = {%g, %g, %g}\n", label, y[0], y[1], y[2]);
  std::fflush(stdout);
  return {};
}

// Runs fn, turning an Ort::Exception (or any std::exception) into a message.
std::string guarded(const std::function<std::string()>& fn) {
  try {
    return fn();
  } catch (const Ort::Exception& e) {
    return std::string("ORT error ") + std::to_string(static_cast<int>(e.GetOrtErrorCode())) + ": " + e.what();
  } catch (const std::exception& e) {
    return e.what();
  }
}

// Whether this machine has an NVIDIA GPU and driver: only then can the CUDA EP be appended.
bool has_nvidia_gpu() {
#if defined(_WIN32)
  HMODULE driver = LoadLibraryA("nvcuda.dll");
  if (driver) FreeLibrary(driver);
  return driver != nullptr;
#else
  struct stat info;
  return stat("/dev/nvidia0", &info) == 0 || stat("/proc/driver/nvidia/gpus", &info) == 0;
#endif
}

#if SMOKE_RUN_DML
template <typename T>
struct Com {
  T* p = nullptr;
  Com() = default;
  Com(const Com&) = delete;
  Com& operator=(const Com&) = delete;
  ~Com() {
    if (p) p->Release();
  }
  T** put() { return &p; }
  T* operator->() const { return p; }
  T* get() const { return p; }
};

std::string hresult(const char* what, HRESULT hr) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "0x%08lX", static_cast<unsigned long>(hr));
  return std::string(what) + " failed, HRESULT " + buf;
}

// The packaged DirectML.dll, which the build copied next to this executable. Loaded by
// full path so System32's (older) DirectML.dll can never stand in for the package's.
HMODULE load_packaged_directml(std::string& error) {
  wchar_t exe[MAX_PATH * 4];
  DWORD n = GetModuleFileNameW(nullptr, exe, static_cast<DWORD>(std::size(exe)));
  if (n == 0 || n >= std::size(exe)) {
    error = "GetModuleFileNameW failed";
    return nullptr;
  }
  std::wstring path(exe, n);
  path = path.substr(0, path.find_last_of(L"\\/") + 1) + L"DirectML.dll";
  HMODULE dml = LoadLibraryW(path.c_str());
  if (!dml) error = "packaged DirectML.dll not loadable next to the executable (error " +
                    std::to_string(GetLastError()) + ")";
  return dml;
}

// Hardware path first: ORT's device-id append (adapter 0). GPU-less machines fail here
// (DXGI_ERROR_UNSUPPORTED / C0262002: the device-id path skips software adapters).
std::string run_dml_hardware(Ort::Env& env, const std::vector<char>& model) {
  return guarded([&] {
    Ort::SessionOptions so;
    so.DisableMemPattern();
    so.SetExecutionMode(ORT_SEQUENTIAL);
    Ort::ThrowOnError(OrtSessionOptionsAppendExecutionProvider_DML(so, 0));
    return run_add(env, model, so, "directml (adapter 0)");
  });
}

// WARP fallback (spec 4.4): a software D3D12 device, a DirectML device made by the
// packaged DirectML.dll, appended through OrtDmlApi's DML1 entry point.
std::string run_dml_warp(Ort::Env& env, const std::vector<char>& model) {
  Com<IDXGIFactory4> factory;
  HRESULT hr = CreateDXGIFactory1(__uuidof(IDXGIFactory4), reinterpret_cast<void**>(factory.put()));
  if (FAILED(hr)) return hresult("CreateDXGIFactory1", hr);
  Com<IDXGIAdapter> warp;
  hr = factory->EnumWarpAdapter(__uuidof(IDXGIAdapter), reinterpret_cast<void**>(warp.put()));
  if (FAILED(hr)) return hresult("IDXGIFactory4::EnumWarpAdapter", hr);
  Com<ID3D12Device> device;
  hr = D3D12CreateDevice(warp.get(), D3D_FEATURE_LEVEL_11_0, __uuidof(ID3D12Device),
                         reinterpret_cast<void**>(device.put()));
  if (FAILED(hr)) return hresult("D3D12CreateDevice(WARP)", hr);
  D3D12_COMMAND_QUEUE_DESC desc = {};
  desc.Type = D3D12_COMMAND_LIST_TYPE_DIRECT;
  desc.Flags = D3D12_COMMAND_QUEUE_FLAG_DISABLE_GPU_TIMEOUT;
  Com<ID3D12CommandQueue> queue;
  hr = device->CreateCommandQueue(&desc, __uuidof(ID3D12CommandQueue), reinterpret_cast<void**>(queue.put()));
  if (FAILED(hr)) return hresult("ID3D12Device::CreateCommandQueue", hr);

  std::string error;
  HMODULE directml = load_packaged_directml(error);
  if (!directml) return error;
  using DMLCreateDeviceFn = HRESULT(WINAPI*)(ID3D12Device*, DML_CREATE_DEVICE_FLAGS, REFIID, void**);
  auto create = reinterpret_cast<DMLCreateDeviceFn>(GetProcAddress(directml, "DMLCreateDevice"));
  if (!create) return "DirectML.dll exports no DMLCreateDevice";
  Com<IDMLDevice> dml_device;
  hr = create(device.get(), DML_CREATE_DEVICE_FLAG_NONE, __uuidof(IDMLDevice),
              reinterpret_cast<void**>(dml_device.put()));
  if (FAILED(hr)) return hresult("DMLCreateDevice(WARP device)", hr);

  return guarded([&] {
    const OrtDmlApi* dml_api = nullptr;
    Ort::ThrowOnError(Ort::GetApi().GetExecutionProviderApi("DML", ORT_API_VERSION,
                                                            reinterpret_cast<const void**>(&dml_api)));
    if (!dml_api) return std::string("GetExecutionProviderApi(\"DML\") returned no OrtDmlApi");
    Ort::SessionOptions so;
    so.DisableMemPattern();
    so.SetExecutionMode(ORT_SEQUENTIAL);
    Ort::ThrowOnError(dml_api->SessionOptionsAppendExecutionProvider_DML1(so, dml_device.get(), queue.get()));
    return run_add(env, model, so, "directml (WARP)");
  });
}
#endif

}  // namespace

int main(int argc, char** argv) {
  const std::string flavor = SMOKE_FLAVOR;
  const std::string accel = SMOKE_ACCELERATOR;
  try {
    std::printf("onnxruntime %s (flavor %s, accelerator %s)\n", Ort::GetVersionString().c_str(),
                flavor.c_str(), accel.c_str());
    Ort::Env env(ORT_LOGGING_LEVEL_WARNING, "anira-smoke");

    const std::vector<std::string> providers = Ort::GetAvailableProviders();
    std::string listed;
    for (const auto& p : providers) listed += (listed.empty() ? "" : ", ") + p;
    std::printf("available providers: %s\n", listed.c_str());
    std::printf("provider headers: coreml=%d dml=%d\n", SMOKE_HAS_COREML, SMOKE_HAS_DML);

    // Variant contract (false-green guards).
    if (flavor == "cpu") {
      if (SMOKE_HAS_COREML) return fail("CPU package ships coreml_provider_factory.h");
      if (SMOKE_HAS_DML) return fail("CPU package ships dml_provider_factory.h");
      // The library itself, whatever headers came with it.
      for (const char* ep : {"CoreMLExecutionProvider", "DmlExecutionProvider", "CUDAExecutionProvider"}) {
        if (has_provider(providers, ep)) return fail(std::string("CPU package's library provides ") + ep);
      }
    } else if (flavor == "gpu") {
      // SMOKE_ACCELERATOR may be a comma list; every member must be honoured.
      std::vector<std::string> accels;
      for (size_t start = 0; start <= accel.size();) {
        const size_t comma = std::min(accel.find(',', start), accel.size());
        const std::string item = accel.substr(start, comma - start);
        if (!item.empty() && item != "none") accels.push_back(item);
        start = comma + 1;
      }
      if (accels.empty()) return fail("flavor gpu needs accelerator coreml or dml");
      for (const std::string& a : accels) {
        if (a == "coreml") {
          if (!SMOKE_HAS_COREML) return fail("flavor gpu/coreml but the package ships no coreml_provider_factory.h");
          if (!SMOKE_RUN_COREML) return fail("flavor gpu/coreml: the CoreML EP pass only runs on Apple");
          if (!has_provider(providers, "CoreMLExecutionProvider"))
            return fail("flavor gpu/coreml but the library does not provide CoreMLExecutionProvider");
        } else if (a == "dml") {
          if (!SMOKE_HAS_DML) return fail("flavor gpu/dml but the package ships no dml_provider_factory.h");
          if (!SMOKE_RUN_DML) return fail("flavor gpu/dml: the DirectML EP pass only runs on Windows");
          if (!has_provider(providers, "DmlExecutionProvider"))
            return fail("flavor gpu/dml but the library does not provide DmlExecutionProvider");
        } else {
          return fail("flavor gpu: unsupported accelerator '" + a + "' (coreml or dml)");
        }
      }
    } else if (flavor == "cuda") {
      // The provider library itself is checked at configure time (CMakeLists.txt).
      if (SMOKE_HAS_COREML || SMOKE_HAS_DML) return fail("-cuda package ships a CoreML/DirectML provider header");
      if (has_provider(providers, "CoreMLExecutionProvider") || has_provider(providers, "DmlExecutionProvider"))
        return fail("-cuda package's library provides CoreML/DirectML");
      if (!has_provider(providers, "CUDAExecutionProvider"))
        return fail("flavor cuda but the library does not provide CUDAExecutionProvider");
    } else {
      return fail("unknown SMOKE_FLAVOR '" + flavor + "'");
    }

    if (argc < 2) {
      std::printf("init-only check (no model given)\n");
      std::printf("PASS\n");
      return 0;
    }

    std::ifstream in(argv[1], std::ios::binary);
    if (!in) return fail(std::string("cannot open model ") + argv[1]);
    const std::vector<char> model((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    if (model.empty()) return fail(std::string("empty model ") + argv[1]);

    // 1. CPU, default session options.
    {
      std::string err = guarded([&] {
        Ort::SessionOptions so;
        return run_add(env, model, so, "cpu");
      });
      if (!err.empty()) return fail("cpu forward pass: " + err);
    }

#if SMOKE_RUN_COREML
    // 2. CoreML EP appended (flags 0: all compute units). Ops CoreML cannot take fall
    // back to the CPU EP, so this proves the EP registers and the session still runs.
    {
      std::string err = guarded([&] {
        Ort::SessionOptions so;
        Ort::ThrowOnError(OrtSessionOptionsAppendExecutionProvider_CoreML(so, 0));
        return run_add(env, model, so, "coreml");
      });
      if (!err.empty()) return fail("coreml forward pass: " + err);
    }
#endif

    // 2b. CUDA: appending the EP loads the provider and the CUDA runtime; that needs a GPU.
    if (flavor == "cuda") {
      if (has_nvidia_gpu()) {
        std::string err = guarded([&] {
          Ort::SessionOptions so;
          so.AppendExecutionProvider_CUDA(OrtCUDAProviderOptions{});
          return run_add(env, model, so, "cuda");
        });
        if (!err.empty()) return fail("cuda forward pass: " + err);
        std::printf("accelerator cuda: passed\n");
      } else {
        std::printf("accelerator cuda: absent: no NVIDIA GPU or driver here (the CPU pass and the provider list "
                    "stand for the package)\n");
      }
    }

#if SMOKE_RUN_DML
    // 3. DirectML: the hardware adapter first, then WARP.
    {
      std::string hw = run_dml_hardware(env, model);
      if (!hw.empty()) {
        std::printf("directml hardware path unavailable (%s); trying WARP\n", hw.c_str());
        std::string warp = run_dml_warp(env, model);
        if (!warp.empty()) return fail("directml forward pass: hardware: " + hw + "; WARP: " + warp);
      }
    }
#endif

    std::printf("PASS\n");
    return 0;
  } catch (const Ort::Exception& e) {
    return fail(std::string("ORT error: ") + e.what());
  } catch (const std::exception& e) {
    return fail(e.what());
  }
}
