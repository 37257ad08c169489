// The ring collective kernels (DESIGN.md layer 8): collKernel<T, kFn> runs
// algo::runRingChannel with the GPU platform, one thread block per channel.
// For .cu files only. Each src/device/coll_kernels_<type>.cu instantiates one
// datatype's kernels (so that the build compiles them in parallel, and
// FERRY_KERNEL_TYPES can leave some out); kernels.cu lists them.
//
// Launch contract (the enqueue layer): grid = args.nchannels blocks, block =
// kCollKernelThreads, no dynamic shared memory; args.channels and
// args.ringRanks in device memory. Launches of one communicator are ordered
// on one stream: each kernel reads its channels' step counters at start and
// stores them back at the end, and the next launch relies on stream order
// (not on any fence) to see them.
//
// Failure: on abort the kernel returns early (the counters are not written
// back: the communicator is unusable afterwards); on a timeout it prints a
// line and traps, so that the stream and the context fail loudly.
#pragma once

#include <cstdint>

#include "algo/coll_ring.h"
#include "device/coll_platform.cuh"
#include "device/kernels.h"

namespace ferry::device {

template <class T, int kFn>
__global__ void __launch_bounds__(kCollKernelThreads, 1) collKernel(algo::CollArgs args) {
  using Op = algo::CollOp<T, kFn>;
  using Prims = algo::RingPrims<DevicePlatform, T, Op>;
  const int h = static_cast<int>(blockIdx.x);
  // Written by the previous launch (or setup): stream-ordered before us.
  const algo::RingChannel channel = args.channels[h];
  // Only PreMulSum has a scalar (device pointer or host value's bits).
  T scalar = algo::scalarFromBits<T>(args.scalarBits);
  if constexpr (kFn == algo::kFnPreMulSum) {
    if (args.scalarPtr != nullptr) scalar = *static_cast<const T*>(args.scalarPtr);
  }
  const Op op{scalar, args.nranks, args.avg != 0};
  DevicePlatform::Ctx ctx = DevicePlatform::makeCtx(args, h);
  const uint64_t sliceElts = algo::sliceEltsFor(args.slotBytes, sizeof(T));
  Prims prims(ctx, channel, op, args.nslots, sliceElts);
  if (!algo::runRingChannel(prims, args, h, sliceElts)) {
    // Every thread got false from the same wait; thread 0 knows why.
    if (threadIdx.x == 0 && ctx.failure == coll::kWaitTimedOut) __trap();
    return;
  }
  if (threadIdx.x == 0) {
    // Plain stores: read by the next launch on this communicator's stream.
    args.channels[h].sendStep = prims.sendStep();
    args.channels[h].recvStep = prims.recvStep();
  }
}

// One datatype's kernels by algo::CollFn; nullptr where not instantiated
// (kFnCopy exists only for int8, in coll_kernels_copy.cu). `name` is for
// logs ("collKernel<float,sum>").
struct CollTypeKernels {
  const void* func[algo::kNumCollFns];
  char name[algo::kNumCollFns][40];
};

// Defined (explicitly specialized) in coll_kernels_<type>.cu, one per
// algo::DataType; kernels.cu calls only the ones the build has.
template <int kType>
const CollTypeKernels* collTypeKernels();
// The byte-copy kernel collKernel<int8_t, kFnCopy> (always built).
const void* collCopyKernel();

const char* collFnName(int fn);

// Instantiates the reduction kernels of T (every fn but kFnCopy).
template <class T>
CollTypeKernels makeReduceKernels(const char* typeName) {
  CollTypeKernels k{};
  k.func[algo::kFnSum] = reinterpret_cast<const void*>(&collKernel<T, algo::kFnSum>);
  k.func[algo::kFnProd] = reinterpret_cast<const void*>(&collKernel<T, algo::kFnProd>);
  k.func[algo::kFnMax] = reinterpret_cast<const void*>(&collKernel<T, algo::kFnMax>);
  k.func[algo::kFnMin] = reinterpret_cast<const void*>(&collKernel<T, algo::kFnMin>);
  k.func[algo::kFnPreMulSum] = reinterpret_cast<const void*>(&collKernel<T, algo::kFnPreMulSum>);
  for (int f = 0; f < algo::kNumCollFns; ++f) {
    if (k.func[f] != nullptr) {
      snprintf(k.name[f], sizeof(k.name[f]), "collKernel<%s,%s>", typeName, collFnName(f));
    }
  }
  return k;
}

}  // namespace ferry::device
