// Driver API entry points the CUDA runtime needs, resolved once (lazily,
// thread-safe) with cudaGetDriverEntryPointByVersion so that libcuda is
// never linked directly. Internal to runtime/cuda.
#pragma once

#include <cuda.h>
#include <cuda_runtime.h>

#include "core/status.h"

namespace ferry::rt::cuda {

struct DriverApi {
  CUresult (*streamWriteValue64)(CUstream, CUdeviceptr, cuuint64_t, unsigned int) = nullptr;
  CUresult (*streamWaitValue64)(CUstream, CUdeviceptr, cuuint64_t, unsigned int) = nullptr;
  CUresult (*memGetAddressRange)(CUdeviceptr*, size_t*, CUdeviceptr) = nullptr;
  CUresult (*getErrorString)(CUresult, const char**) = nullptr;
  CUresult (*pointerGetAttributes)(unsigned int, CUpointer_attribute*, void**,
                                   CUdeviceptr) = nullptr;
  CUresult (*moduleGetLoadingMode)(CUmoduleLoadingMode*) = nullptr;
  // CUDA 12.4+: explicit per-context function loading (null on older drivers).
  CUresult (*funcIsLoaded)(CUfunctionLoadingState*, CUfunction) = nullptr;
  CUresult (*funcLoad)(CUfunction) = nullptr;
};

// The resolved entry points; the first call resolves them (and so initialises
// CUDA). Fails with ncclUnhandledCudaError (WARN) when any is missing.
[[nodiscard]] Status driverApi(const DriverApi** out);

// Text of a driver error for log lines (never null).
const char* driverErrorString(CUresult r);

}  // namespace ferry::rt::cuda

// Runtime API call -> ncclUnhandledCudaError with a WARN naming the call.
// The runtime's last-error state is cleared so a later user query of
// cudaGetLastError does not report our failure as theirs.
#define FERRY_CUDA_TRY(call)                                                              \
  do {                                                                                    \
    cudaError_t ferry_cuda_err_ = (call);                                                 \
    if (ferry_cuda_err_ != cudaSuccess) {                                                 \
      (void)cudaGetLastError();                                                           \
      FERRY_FAIL(ncclUnhandledCudaError, "CUDA call %s failed: %s (%d)", #call,           \
                 cudaGetErrorString(ferry_cuda_err_), static_cast<int>(ferry_cuda_err_)); \
    }                                                                                     \
  } while (0)

// Driver API call -> ncclUnhandledCudaError with a WARN naming the call.
#define FERRY_CU_TRY(call)                                                             \
  do {                                                                                 \
    CUresult ferry_cu_err_ = (call);                                                   \
    if (ferry_cu_err_ != CUDA_SUCCESS) {                                               \
      FERRY_FAIL(ncclUnhandledCudaError, "CUDA driver call %s failed: %s (%d)", #call, \
                 ::ferry::rt::cuda::driverErrorString(ferry_cu_err_),                  \
                 static_cast<int>(ferry_cu_err_));                                     \
    }                                                                                  \
  } while (0)
