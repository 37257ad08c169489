#include "device/kernels.h"

#include "device/wait_kernel.h"

namespace ferry::device {
namespace {

const KernelEntry kKernels[] = {
    {"ferryWaitGeqKernel", reinterpret_cast<const void*>(&ferryWaitGeqKernel)},
};

}  // namespace

const KernelEntry* allKernels(size_t* count) {
  *count = sizeof(kKernels) / sizeof(kKernels[0]);
  return kKernels;
}

const void* waitGeqKernel() {
  return reinterpret_cast<const void*>(&ferryWaitGeqKernel);
}

}  // namespace ferry::device
