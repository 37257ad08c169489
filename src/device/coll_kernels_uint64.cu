// The uint64 collective kernels (see coll_kernels.cuh); left out of builds
// whose FERRY_KERNEL_TYPES does not name uint64.
#include "device/coll_kernels.cuh"

namespace ferry::device {

template <>
const CollTypeKernels* collTypeKernels<algo::kUint64>() {
  static const CollTypeKernels kernels = makeReduceKernels<uint64_t>("uint64");
  return &kernels;
}

}  // namespace ferry::device
