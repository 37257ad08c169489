// The double collective kernels (see coll_kernels.cuh); left out of builds
// whose FERRY_KERNEL_TYPES does not name double.
#include "device/coll_kernels.cuh"

namespace ferry::device {

template <>
const CollTypeKernels* collTypeKernels<algo::kFloat64>() {
  static const CollTypeKernels kernels = makeReduceKernels<double>("double");
  return &kernels;
}

}  // namespace ferry::device
