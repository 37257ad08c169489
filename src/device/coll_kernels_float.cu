// The float collective kernels (see coll_kernels.cuh); left out of builds
// whose FERRY_KERNEL_TYPES does not name float.
#include "device/coll_kernels.cuh"

namespace ferry::device {

template <>
const CollTypeKernels* collTypeKernels<algo::kFloat32>() {
  static const CollTypeKernels kernels = makeReduceKernels<float>("float");
  return &kernels;
}

}  // namespace ferry::device
