// The fp8e5m2 collective kernels (see coll_kernels.cuh); left out of builds
// whose FERRY_KERNEL_TYPES does not name fp8e5m2.
#include "device/coll_kernels.cuh"

namespace ferry::device {

template <>
const CollTypeKernels* collTypeKernels<algo::kFloat8e5m2>() {
  static const CollTypeKernels kernels = makeReduceKernels<algo::Fp8E5M2>("fp8e5m2");
  return &kernels;
}

}  // namespace ferry::device
