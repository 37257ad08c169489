// Kernel point-to-point (NCCL_PASS_SM=0, and SM-free p2p inside CUDA graph
// capture): one launch per group and communicator moves every send and
// receive of the group through the per-peer connections of coll/ring_setup
// (same FIFO protocol as the ring channels, see coll_ring.h).
//
// One executor block per (peer, direction): the tasks of a block run in call
// order (NCCL's in-order matching per peer), and all blocks of the launch run
// at once, so the orders of a group never deadlock however the two sides
// list their sends and receives. Shared by the CUDA kernel and the host
// runtime's executor (one thread per block).
#pragma once

#include <cstdint>
#include <type_traits>

#include "algo/coll_ring.h"

namespace ferry::algo {

// Tasks travel inside the kernel argument (CUDA >= 12.1 allows 32 KiB of
// parameters); blocks are capped at 128 so that every block of a launch is
// resident at once on an H100/H200 (132 SMs, one 512-thread block per SM):
// a block waiting for an unscheduled block of its own launch would hang.
constexpr int kMaxKernelP2pTasks = 1024;
constexpr int kMaxKernelP2pBlocks = 128;
// The argument is copied into every launch, so its size is latency: a group
// that fits the small table (every 2-8 rank sendrecv or all-to-all) takes a
// < 1 KiB argument instead of the 32 KiB one.
constexpr int kSmallKernelP2pTasks = 32;
constexpr int kSmallKernelP2pBlocks = 32;

struct P2pTaskArg {
  void* buf;
  uint64_t bytes;
  int32_t peer;
  int32_t isSend;
};

template <int kTasks, int kBlocks>
struct P2pArgsT {
  static constexpr int kMaxTasks = kTasks;
  static constexpr int kMaxBlocks = kBlocks;
  int32_t nblocks;
  int32_t pos;  // for log lines
  uint32_t nslots;
  uint32_t reserved;
  uint64_t slotBytes;
  RingChannel* peerChannels;  // by peer rank, in the executor's memory
  const volatile uint32_t* abortFlag;
  uint64_t timeoutNs;
  uint16_t blockBegin[kBlocks + 1];  // block b: tasks [begin[b], begin[b+1])
  P2pTaskArg tasks[kTasks];
};
using P2pArgs = P2pArgsT<kMaxKernelP2pTasks, kMaxKernelP2pBlocks>;
using P2pArgsSmall = P2pArgsT<kSmallKernelP2pTasks, kSmallKernelP2pBlocks>;
static_assert(std::is_trivially_copyable_v<P2pArgs> && sizeof(P2pArgs) <= 32000,
              "kernel argument (CUDA >= 12.1 allows 32764 bytes)");
static_assert(std::is_trivially_copyable_v<P2pArgsSmall> && sizeof(P2pArgsSmall) <= 1024,
              "the small variant exists to keep the argument under 1 KiB");

// Runs block b's tasks; stores back only its own direction's counter (the
// peer's other direction belongs to another block of the same launch).
template <class P, class Args>
FERRY_HD bool runP2pBlock(typename P::Ctx& ctx, const Args& a, int b) {
  using Op = CollOp<int8_t, kFnCopy>;
  const P2pTaskArg& first = a.tasks[a.blockBegin[b]];
  RingChannel& ch = a.peerChannels[first.peer];
  Op op{};
  RingPrims<P, int8_t, Op> prims(ctx, ch, op, a.nslots, sliceEltsFor(a.slotBytes, 1));
  bool ok = true;
  for (int i = a.blockBegin[b]; ok && i < a.blockBegin[b + 1]; ++i) {
    const P2pTaskArg& t = a.tasks[i];
    auto* buf = static_cast<int8_t*>(t.buf);
    ok = t.isSend ? prims.send(buf, t.bytes) : prims.recv(buf, t.bytes);
  }
  if (first.isSend) {
    ch.sendStep = prims.sendStep();
  } else {
    ch.recvStep = prims.recvStep();
  }
  return ok;
}

}  // namespace ferry::algo
