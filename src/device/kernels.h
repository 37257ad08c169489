// Every Ferry kernel, as host-side handles (DESIGN.md layer 8). Plain C++:
// included by runtime/cuda (C++20, no nvcc) as well as by .cu files.
//
// Why a list: under lazy module loading a kernel is loaded on its first
// launch, and that load can block behind a stream waiting on a host word
// (DESIGN.md, "Measured hazard"). Runtime::preloadKernels() walks this list
// at communicator init so that no Ferry kernel is ever loaded lazily later.
// Every __global__ function added under src/device must be listed in
// kernels.cu.
//
// Only in builds with CUDA (the .cu files are compiled only there).
#pragma once

#include <cstddef>
#include <cstdint>

namespace ferry::device {

struct KernelEntry {
  const char* name;  // for log lines
  const void* func;  // the __global__ function, as cudaLaunchKernel takes it
};

// The table of every Ferry kernel; `*count` entries. Static storage.
const KernelEntry* allKernels(size_t* count);

// ferryWaitGeqKernel (wait_kernel.h): launch with grid 1, block 1 and the
// arguments (const volatile uint64_t* word, uint64_t target,
// uint64_t timeoutNs).
const void* waitGeqKernel();

// Threads per block of every collective kernel (one block per channel).
// 512: 16 warps keep enough 16-byte loads in flight per SM to saturate a
// channel's NVLink share, and __launch_bounds__(512, 1) still leaves up to
// 128 registers per thread (no spills).
constexpr unsigned kCollKernelThreads = 512;

// The ring collective kernel collKernel<T, fn, proto> (coll_kernels.cuh) for
// an algo::DataType, algo::CollFn and algo::CollProto, as cudaLaunchKernel
// takes it: launch with
// grid = args.nchannels, block = kCollKernelThreads and one argument, an
// algo::CollArgs by value. kFnCopy exists only with kInt8 (byte copies for
// all-gather and broadcast). nullptr for an unknown pair, or a datatype this
// build left out (CMake FERRY_KERNEL_TYPES); the copy kernel is always built.
const void* collKernel(int dataType, int fn, int proto);

// The kernel point-to-point kernel (p2p_kernel.cu, algo/p2p_kernel.h):
// grid = args.nblocks, block = kCollKernelThreads, one algo::P2pArgsSmall
// (smallArgs) or algo::P2pArgs by value.
const void* p2pKernel(bool smallArgs);

}  // namespace ferry::device
