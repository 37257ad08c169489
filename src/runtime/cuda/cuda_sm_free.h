// The CUDA runtime's support for the SM-free point-to-point path (the
// methods runtime.h lists under "SM-free point-to-point support"), apart
// from cuda_runtime.cc to keep each file to one job. Internal to
// runtime/cuda; contracts are those of runtime.h.
#pragma once

#include <cuda_runtime.h>

#include <memory>

#include "runtime/runtime.h"

namespace ferry::rt::cuda {

// Runtime::registerHost.
[[nodiscard]] Status registerHostRange(void* ptr, size_t bytes,
                                       std::unique_ptr<HostRegistration>* out);
// Runtime::describeAllocation (IPC handles cached by buffer id, process-wide).
[[nodiscard]] Status describeAllocation(const void* ptr, size_t bytes, AllocationInfo* out);
// Runtime::lazyModuleLoading.
bool lazyModuleLoading();
// Runtime::preloadKernels (current device).
[[nodiscard]] Status preloadKernels();
// Stream::waitValue64Spin: launches the one-thread wait kernel on `stream`.
[[nodiscard]] Status launchWaitGeq(cudaStream_t stream, uint64_t* devAddr, uint64_t value);

}  // namespace ferry::rt::cuda
