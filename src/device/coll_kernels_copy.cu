// The byte-copy collective kernels, collKernel<int8_t, kFnCopy, proto> (all-gather
// and broadcast move bytes whatever the datatype). Always built, whatever
// FERRY_KERNEL_TYPES says.
#include "device/coll_kernels.cuh"

namespace ferry::device {

const void* collCopyKernel(int proto) {
  return proto == algo::kProtoLL
             ? reinterpret_cast<const void*>(&collKernel<int8_t, algo::kFnCopy, algo::kProtoLL>)
             : reinterpret_cast<const void*>(
                   &collKernel<int8_t, algo::kFnCopy, algo::kProtoSimple>);
}

}  // namespace ferry::device
