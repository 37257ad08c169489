// The host runtime's collective "kernel": algo/coll_ring.h executed by the
// stream's worker thread with CPU loads and stores on the ring regions
// (memfd shared memory), so CI runs every collective, datatype and op with
// the same schedule and flow control as the GPU kernels.
//
// Launched through Runtime::launch with hostReturnsStatus and two arguments:
// args[0] -> algo::CollArgs, args[1] -> int32 algo::DataType (for the copy
// collectives, kInt8 with the count in bytes). Returns 0 on success or after
// an abort (the launch just stops, as a kernel exits), non-zero when a wait
// passed FERRY_COLL_TIMEOUT or the type is unknown: the stream then fails.
#pragma once

namespace ferry {

int hostCollKernel(void** args);

// Kernel point-to-point (algo/p2p_kernel.h) on the host runtime: one thread
// per block, all at once. args[0] -> algo::P2pArgs (hostP2pKernel) or
// algo::P2pArgsSmall (hostP2pKernelSmall). Same return contract.
int hostP2pKernel(void** args);
int hostP2pKernelSmall(void** args);

}  // namespace ferry
