// The int64 collective kernels (see coll_kernels.cuh); left out of builds
// whose FERRY_KERNEL_TYPES does not name int64.
#include "device/coll_kernels.cuh"

namespace ferry::device {

template <>
const CollTypeKernels* collTypeKernels<algo::kInt64>() {
  static const CollTypeKernels kernels = makeReduceKernels<int64_t>("int64");
  return &kernels;
}

}  // namespace ferry::device
