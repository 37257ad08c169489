// The bf16 collective kernels (see coll_kernels.cuh); left out of builds
// whose FERRY_KERNEL_TYPES does not name bf16.
#include "device/coll_kernels.cuh"

namespace ferry::device {

template <>
const CollTypeKernels* collTypeKernels<algo::kBfloat16>() {
  static const CollTypeKernels kernels = makeReduceKernels<algo::Bf16>("bf16");
  return &kernels;
}

}  // namespace ferry::device
