// The fp8e4m3 collective kernels (see coll_kernels.cuh); left out of builds
// whose FERRY_KERNEL_TYPES does not name fp8e4m3.
#include "device/coll_kernels.cuh"

namespace ferry::device {

template <>
const CollTypeKernels* collTypeKernels<algo::kFloat8e4m3>() {
  static const CollTypeKernels kernels = makeReduceKernels<algo::Fp8E4M3>("fp8e4m3");
  return &kernels;
}

}  // namespace ferry::device
