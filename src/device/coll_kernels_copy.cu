// The byte-copy collective kernel, collKernel<int8_t, kFnCopy> (all-gather
// and broadcast move bytes whatever the datatype). Always built, whatever
// FERRY_KERNEL_TYPES says.
#include "device/coll_kernels.cuh"

namespace ferry::device {

const void* collCopyKernel() {
  return reinterpret_cast<const void*>(&collKernel<int8_t, algo::kFnCopy>);
}

}  // namespace ferry::device
