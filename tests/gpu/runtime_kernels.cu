// A small kernel for launching through Runtime::launch in runtime_cuda_test.
#include <cstddef>
#include <cstdint>

namespace {

// dst[i] = src[i] * mul + add over n elements (grid-stride loop).
__global__ void axpbKernel(int64_t* dst, const int64_t* src, int64_t mul, int64_t add, size_t n) {
  size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  for (size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    dst[i] = src[i] * mul + add;
  }
}

}  // namespace

// The kernel as the opaque function pointer KernelLaunch::func expects.
const void* ferryTestAxpbKernel() {
  return reinterpret_cast<const void*>(&axpbKernel);
}
