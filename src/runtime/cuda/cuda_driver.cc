// The top-level CMake glob (GLOB_RECURSE src/runtime/*.cc) also picks up this
// folder in builds without CUDA; the guard keeps such builds free of CUDA.
#ifdef FERRY_WITH_CUDA

#include "runtime/cuda/cuda_driver.h"

#include <mutex>

namespace ferry::rt::cuda {
namespace {

// The ABI version we ask for: CUDA 12.0 semantics (the _v2 stream memory
// operations). Any 12.x or 13.x driver provides them.
constexpr unsigned kDriverAbiVersion = 12000;

// Looks `symbol` up for ABI `version`; false (and nothing logged) if absent.
bool lookup(const char* symbol, unsigned version, void** fn, cudaError_t* err,
            cudaDriverEntryPointQueryResult* found) {
  *fn = nullptr;
  *found = cudaDriverEntryPointSymbolNotFound;
  *err = cudaGetDriverEntryPointByVersion(symbol, fn, version, cudaEnableDefault, found);
  if (*err == cudaSuccess && *found == cudaDriverEntryPointSuccess && *fn != nullptr) return true;
  (void)cudaGetLastError();
  return false;
}

template <typename Fn>
Status resolve(const char* symbol, Fn* out) {
  void* fn = nullptr;
  cudaError_t e = cudaSuccess;
  cudaDriverEntryPointQueryResult found = cudaDriverEntryPointSymbolNotFound;
  if (!lookup(symbol, kDriverAbiVersion, &fn, &e, &found)) {
    FERRY_FAIL(ncclUnhandledCudaError,
               "CUDA call cudaGetDriverEntryPointByVersion(%s) failed: %s (query result %d)",
               symbol, cudaGetErrorString(e), static_cast<int>(found));
  }
  *out = reinterpret_cast<Fn>(fn);
  return ncclSuccess;
}

// An entry point newer drivers have: null when this one lacks it.
template <typename Fn>
void resolveOptional(const char* symbol, unsigned version, Fn* out) {
  void* fn = nullptr;
  cudaError_t e = cudaSuccess;
  cudaDriverEntryPointQueryResult found = cudaDriverEntryPointSymbolNotFound;
  *out = lookup(symbol, version, &fn, &e, &found) ? reinterpret_cast<Fn>(fn) : nullptr;
}

Status load(DriverApi* api) {
  FERRY_CHECK(resolve("cuStreamWriteValue64", &api->streamWriteValue64));
  FERRY_CHECK(resolve("cuStreamWaitValue64", &api->streamWaitValue64));
  FERRY_CHECK(resolve("cuMemGetAddressRange", &api->memGetAddressRange));
  FERRY_CHECK(resolve("cuGetErrorString", &api->getErrorString));
  FERRY_CHECK(resolve("cuPointerGetAttributes", &api->pointerGetAttributes));
  FERRY_CHECK(resolve("cuModuleGetLoadingMode", &api->moduleGetLoadingMode));
  // Optional (12.4+): without them preloadKernels falls back to attribute
  // queries, which do not load a kernel into the context on every driver.
  resolveOptional("cuFuncIsLoaded", 12040, &api->funcIsLoaded);
  resolveOptional("cuFuncLoad", 12040, &api->funcLoad);
  return ncclSuccess;
}

DriverApi gApi;
Status gStatus = ncclSuccess;
std::once_flag gOnce;

}  // namespace

Status driverApi(const DriverApi** out) {
  // call_once: the first caller resolves, concurrent callers wait for it.
  std::call_once(gOnce, [] { gStatus = load(&gApi); });
  if (gStatus != ncclSuccess) return gStatus;
  *out = &gApi;
  return ncclSuccess;
}

const char* driverErrorString(CUresult r) {
  const char* text = nullptr;
  if (gApi.getErrorString != nullptr && gApi.getErrorString(r, &text) == CUDA_SUCCESS && text) {
    return text;
  }
  return "unknown CUDA driver error";
}

}  // namespace ferry::rt::cuda

#endif  // FERRY_WITH_CUDA
