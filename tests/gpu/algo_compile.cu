// Compile-only proof that src/algo is device-clean: every functor for every
// datatype, the narrow-float conversions and the ring schedule arithmetic are
// instantiated inside __global__ kernels, so nvcc must generate device code
// for all of them (no host-only calls, no CUDA headers needed). Nothing
// launches these kernels; tests/gpu/algo_compile.cmake builds this file only
// when FERRY_CUDA is on, with ptxas spill warnings as errors.
#include <cstddef>
#include <cstdint>

#include "algo/reduce_ops.h"
#include "algo/ring_schedule.h"

namespace ferry::algo {
namespace {

// dst[i] = every op in turn applied to (dst[i], src[i]); one thread per element.
template <class T>
__global__ void allOpsKernel(T* dst, const T* src, size_t n, T scalar, int nranks) {
  size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n) return;
  T a = dst[i];
  T b = src[i];
  a = Sum<T>{}(a, b);
  a = Prod<T>{}(a, b);
  a = Max<T>{}(a, b);
  a = Min<T>{}(a, b);
  PreMulSum<T> p{scalar};
  a = p.combine(a, p.premul(b));
  dst[i] = finalizeAvg(a, nranks);
}

// Round trips through every narrow format.
__global__ void conversionKernel(float* x, size_t n) {
  size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n) return;
  float v = x[i];
  v = halfToFloat(floatToHalf(v)) + bf16ToFloat(floatToBf16(v));
  v = fp8e4m3ToFloat(floatToFp8e4m3(v)) + fp8e5m2ToFloat(floatToFp8e5m2(v));
  x[i] = v;
}

// Every schedule function; results written so nothing is optimized away.
__global__ void ringKernel(RingLayout allReduce, RingLayout gather, RingLayout pipe, int n,
                           int root, uint64_t* out) {
  int pos = static_cast<int>(threadIdx.x) % n;
  int step = static_cast<int>(blockIdx.x);
  RingStep a = allReduceStep(pos, n, step % (allReduceSteps(n) + 1));
  RingStep g = allGatherStep(pos, n, step);
  RingStep r = reduceScatterStep(pos, n, step);
  int h = step % allReduce.nchannels;
  Range x = allReduce.slice(a.sendChunk, h, allReduce.sliceCount(a.recvChunk, h) / 2);
  Range y = gather.piece(g.recvChunk, h);
  Range z = gather.slice(r.sendChunk, h, 0);
  uint64_t ns = pipe.sliceCount(0, h);
  int64_t s1 = pipelineSendSlice(broadcastDist(pos, root, n), n, ns, step);
  int64_t s2 = pipelineRecvSlice(reduceDist(pos, root, n), n, ns, step);
  out[threadIdx.x] = x.offset + y.count + z.offset + static_cast<uint64_t>(s1 + s2) +
                     static_cast<uint64_t>(pipelineSteps(n, ns)) + (r.recvFinal ? 1 : 0) +
                     (a.recvReduces ? 2 : 0);
}

#define FERRY_ALGO_INSTANTIATE(T) \
  template __global__ void allOpsKernel<T>(T*, const T*, size_t, T, int);
FERRY_ALGO_INSTANTIATE(int8_t)
FERRY_ALGO_INSTANTIATE(uint8_t)
FERRY_ALGO_INSTANTIATE(int32_t)
FERRY_ALGO_INSTANTIATE(uint32_t)
FERRY_ALGO_INSTANTIATE(int64_t)
FERRY_ALGO_INSTANTIATE(uint64_t)
FERRY_ALGO_INSTANTIATE(Half)
FERRY_ALGO_INSTANTIATE(float)
FERRY_ALGO_INSTANTIATE(double)
FERRY_ALGO_INSTANTIATE(Bf16)
FERRY_ALGO_INSTANTIATE(Fp8E4M3)
FERRY_ALGO_INSTANTIATE(Fp8E5M2)
#undef FERRY_ALGO_INSTANTIATE

}  // namespace

// Takes the kernels' addresses so they are kept (and a later GPU test could
// launch them). Not referenced by any library.
const void* algoCompileKernels(int which) {
  switch (which) {
    case 0:
      return reinterpret_cast<const void*>(&conversionKernel);
    case 1:
      return reinterpret_cast<const void*>(&ringKernel);
    default:
      return reinterpret_cast<const void*>(&allOpsKernel<Half>);
  }
}

}  // namespace ferry::algo
