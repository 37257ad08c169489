// The CUDA runtime (DESIGN.md layer 9): the Runtime interface on real GPUs.
// Built only with -DFERRY_CUDA=ON (FERRY_WITH_CUDA defined).
//
// Nothing here touches CUDA until a method is called: constructing the
// runtime (and loading the library) initialises no CUDA context, so a process
// without a GPU or driver can load Ferry and fall back to the host runtime.
// The driver API (stream memory operations, address ranges) is reached
// through cudaGetDriverEntryPointByVersion; libcuda is never linked.
//
// Errors: every failing CUDA call returns ncclUnhandledCudaError with a WARN
// naming the call and cudaGetErrorString's text.
#pragma once

#include <memory>

#include "runtime/runtime.h"

namespace ferry::rt {

std::unique_ptr<Runtime> makeCudaRuntime();

}  // namespace ferry::rt
