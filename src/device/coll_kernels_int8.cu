// The int8 collective kernels (see coll_kernels.cuh); left out of builds
// whose FERRY_KERNEL_TYPES does not name int8.
#include "device/coll_kernels.cuh"

namespace ferry::device {

template <>
const CollTypeKernels* collTypeKernels<algo::kInt8>() {
  static const CollTypeKernels kernels = makeReduceKernels<int8_t>("int8");
  return &kernels;
}

}  // namespace ferry::device
