// The int32 collective kernels (see coll_kernels.cuh); left out of builds
// whose FERRY_KERNEL_TYPES does not name int32.
#include "device/coll_kernels.cuh"

namespace ferry::device {

template <>
const CollTypeKernels* collTypeKernels<algo::kInt32>() {
  static const CollTypeKernels kernels = makeReduceKernels<int32_t>("int32");
  return &kernels;
}

}  // namespace ferry::device
