// The half collective kernels (see coll_kernels.cuh); left out of builds
// whose FERRY_KERNEL_TYPES does not name half.
#include "device/coll_kernels.cuh"

namespace ferry::device {

template <>
const CollTypeKernels* collTypeKernels<algo::kFloat16>() {
  static const CollTypeKernels kernels = makeReduceKernels<algo::Half>("half");
  return &kernels;
}

}  // namespace ferry::device
