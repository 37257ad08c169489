// Kernel point-to-point (algo/p2p_kernel.h): one block per (peer,
// direction) of a group, each moving its tasks through the per-peer FIFO
// connections with the same GPU platform as the ring collectives.
//
// Launch contract (CollEngine::launchP2p): grid = args.nblocks, block =
// kCollKernelThreads, one argument (algo::P2pArgs or algo::P2pArgsSmall by
// value, read in place through __grid_constant__: no per-thread copy of its
// task table). Launches
// of one communicator are serialized (stream order or an event), so each
// block's step counter read at start is the previous launch's final value.
#include "algo/p2p_kernel.h"
#include "device/coll_platform.cuh"
#include "device/kernels.h"

namespace ferry::device {
namespace {

template <class Args>
__global__ void __launch_bounds__(kCollKernelThreads, 1)
    kernelP2p(const __grid_constant__ Args args) {
  const int b = static_cast<int>(blockIdx.x);
  DevicePlatform::Ctx ctx{args.abortFlag, args.timeoutNs, args.pos, b, coll::kWaitOk, true};
  // runP2pBlock stores this block's own step counter back (every thread the
  // same value; the next launch reads it after stream/event ordering).
  if (!algo::runP2pBlock<DevicePlatform>(ctx, args, b)) {
    if (threadIdx.x == 0 && ctx.failure == coll::kWaitTimedOut) __trap();
  }
}

}  // namespace

const void* p2pKernel(bool smallArgs) {
  return smallArgs ? reinterpret_cast<const void*>(&kernelP2p<algo::P2pArgsSmall>)
                   : reinterpret_cast<const void*>(&kernelP2p<algo::P2pArgs>);
}

}  // namespace ferry::device
