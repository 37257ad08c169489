// The uint8 collective kernels (see coll_kernels.cuh); left out of builds
// whose FERRY_KERNEL_TYPES does not name uint8.
#include "device/coll_kernels.cuh"

namespace ferry::device {

template <>
const CollTypeKernels* collTypeKernels<algo::kUint8>() {
  static const CollTypeKernels kernels = makeReduceKernels<uint8_t>("uint8");
  return &kernels;
}

}  // namespace ferry::device
