// The uint32 collective kernels (see coll_kernels.cuh); left out of builds
// whose FERRY_KERNEL_TYPES does not name uint32.
#include "device/coll_kernels.cuh"

namespace ferry::device {

template <>
const CollTypeKernels* collTypeKernels<algo::kUint32>() {
  static const CollTypeKernels kernels = makeReduceKernels<uint32_t>("uint32");
  return &kernels;
}

}  // namespace ferry::device
