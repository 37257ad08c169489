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
#include <type_traits>

#include "algo/coll_ring.h"
#include "device/coll_platform.cuh"
#include "device/kernels.h"

namespace ferry::device {

// One kernel per protocol: each path gets its own register allocation
// (together in one kernel they spilled).
template <class T, int kFn, int kProto>
__global__ void __launch_bounds__(kCollKernelThreads, 1) collKernel(algo::CollArgs args) {
  using Op = algo::CollOp<T, kFn>;
  const int h = static_cast<int>(blockIdx.x);
  // Written by the previous launch (or setup): stream-ordered before us.
  // The primitives copy the fields their protocol uses.
  const algo::RingChannel& channel = args.channels[h];
  // Only PreMulSum has a scalar (device pointer or host value's bits).
  T scalar = algo::scalarFromBits<T>(args.scalarBits);
  if constexpr (kFn == algo::kFnPreMulSum) {
    if (args.scalarPtr != nullptr) scalar = *static_cast<const T*>(args.scalarPtr);
  }
  const Op op{scalar, args.avg != 0 ? static_cast<int32_t>(args.avg) : args.nranks, args.avg != 0};
  DevicePlatform::Ctx ctx = DevicePlatform::makeCtx(args, h);
  using Prims = std::conditional_t<kProto == algo::kProtoLL, algo::LlPrims<DevicePlatform, T, Op>,
                                   algo::RingPrims<DevicePlatform, T, Op>>;
  Prims prims(
      ctx, channel, op, args.nslots,
      kProto == algo::kProtoLL ? args.slotBytes : algo::sliceEltsFor(args.slotBytes, sizeof(T)));
  if (!algo::runRingChannel(prims, args, h)) {
    // Every thread got false from the same wait; thread 0 knows why.
    if (threadIdx.x == 0 && ctx.failure == coll::kWaitTimedOut) __trap();
    return;
  }
  // Plain stores: read by the next launch on this communicator's stream.
  if (threadIdx.x == 0) prims.saveTo(&args.channels[h]);
}

// One datatype's kernels by algo::CollProto and algo::CollFn; nullptr where
// not instantiated (kFnCopy exists only for int8, in coll_kernels_copy.cu).
// `name` is for logs ("collKernel<float,sum,LL>").
struct CollTypeKernels {
  const void* func[2][algo::kNumCollFns];
  char name[2][algo::kNumCollFns][48];
};

// Defined (explicitly specialized) in coll_kernels_<type>.cu, one per
// algo::DataType; kernels.cu calls only the ones the build has.
template <int kType>
const CollTypeKernels* collTypeKernels();
// The byte-copy kernels collKernel<int8_t, kFnCopy, proto> (always built).
const void* collCopyKernel(int proto);

const char* collFnName(int fn);

template <class T, int kProto>
void addReduceKernels(CollTypeKernels* k, const char* typeName) {
  auto* f = k->func[kProto];
  f[algo::kFnSum] = reinterpret_cast<const void*>(&collKernel<T, algo::kFnSum, kProto>);
  f[algo::kFnProd] = reinterpret_cast<const void*>(&collKernel<T, algo::kFnProd, kProto>);
  f[algo::kFnMax] = reinterpret_cast<const void*>(&collKernel<T, algo::kFnMax, kProto>);
  f[algo::kFnMin] = reinterpret_cast<const void*>(&collKernel<T, algo::kFnMin, kProto>);
  f[algo::kFnPreMulSum] = reinterpret_cast<const void*>(&collKernel<T, algo::kFnPreMulSum, kProto>);
  for (int fn = 0; fn < algo::kNumCollFns; ++fn) {
    if (f[fn] != nullptr) {
      snprintf(k->name[kProto][fn], sizeof(k->name[kProto][fn]), "collKernel<%s,%s,%s>", typeName,
               collFnName(fn), kProto == algo::kProtoLL ? "LL" : "Simple");
    }
  }
}

// Instantiates the reduction kernels of T (every fn but kFnCopy, both
// protocols).
template <class T>
CollTypeKernels makeReduceKernels(const char* typeName) {
  CollTypeKernels k{};
  addReduceKernels<T, algo::kProtoSimple>(&k, typeName);
  addReduceKernels<T, algo::kProtoLL>(&k, typeName);
  return k;
}

}  // namespace ferry::device
