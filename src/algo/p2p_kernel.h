// Kernel point-to-point (NCCL_PASS_SM=0, and SM-free p2p inside CUDA graph
// capture): one launch per group and communicator moves every send and
// receive of the group through the per-peer connections of coll/ring_setup
// (same FIFO protocol as the ring channels, see coll_ring.h).
//
// One executor block per (peer, direction, lane): a peer's connection is
// split into `lanes` lane connections (own flags, an equal share of the
// peer's FIFO and of its LL FIFO), and a message of B bytes is cut into
// p2pParts(B) parts, part l on lane l. The cut depends on B and the communicator's lane
// settings only, so both sides agree without talking, and each lane keeps
// NCCL's in-order matching per peer. A block runs its lane's parts of its
// (peer, direction)'s messages in call order; all blocks of the launch run
// at once, so the orders of a group never deadlock however the two sides
// list their sends and receives. Shared by the CUDA kernel and the host
// runtime's executor (one thread per block).
#pragma once

#include <cstdint>
#include <type_traits>

#include "algo/coll_ll.h"
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
// ~1.3 KiB argument instead of the 25 KiB one (measured on 2x H200: the
// large one cost ~3 us per launch).
constexpr int kSmallKernelP2pTasks = 32;
constexpr int kSmallKernelP2pBlocks = 64;
// Lanes per peer connection: at most this many (the default on CUDA, 16:
// at 1-4 MiB on 2x H200 it beat 8 lanes by 10-20%, session 25), and at most
// what keeps a group's blocks (<= 2 x nranks x lanes) within half of the
// SMs, so a kernel p2p launch still fits beside a 64-channel collective
// kernel (2 ranks: 16 lanes, 4: 8, 8: 4).
constexpr int kMaxKernelP2pLanes = 16;
constexpr int kDefaultKernelP2pLanes = 16;
constexpr int kKernelP2pLaneBlockBudget = 64;
// The peer LL FIFO is sized for this many lanes; more lanes grow it, so a
// lane's LL share stays FERRY_COLL_SLOTS x the LL slot / 2 (128 KiB on CUDA):
// two slots of 32 KiB payload, and a 512 KiB message (FERRY_P2P_LL_MAX_BYTES)
// on 16 lanes crosses in one slot per lane, never waiting for one to drain.
// Sized for 8 lanes (a 32 KiB share), a 512 KiB LL sendrecv took 13.4 us,
// sized for 2 10.8 (2x H200, session 34; NCCL 12.8, the FIFO protocol 13.0).
constexpr int kLlFifoLanes = 2;

// Parts a message of `bytes` is cut into: one per `laneBytes`, at most `lanes`.
FERRY_HD inline uint32_t p2pLaneCount(uint64_t bytes, uint32_t lanes, uint64_t laneBytes) {
  uint64_t n = bytes / laneBytes;
  return n <= 1 ? 1u : (n >= lanes ? lanes : static_cast<uint32_t>(n));
}

// Messages of at most llMaxBytes go over the lanes' LL connections (one
// store per line publishes data and flag: no fence, no tail round trip), one
// part per llLaneBytes; larger ones over the FIFO protocol, one part per
// laneBytes.
FERRY_HD inline uint32_t p2pParts(uint64_t bytes, uint32_t lanes, uint64_t laneBytes,
                                  uint64_t llMaxBytes, uint64_t llLaneBytes) {
  return bytes <= llMaxBytes ? p2pLaneCount(bytes, lanes, llLaneBytes)
                             : p2pLaneCount(bytes, lanes, laneBytes);
}

// Part `lane` of a message cut into `parts`: [*begin, *begin + *len), 16-byte
// aligned starts; a part may be empty only if the message is shorter than
// 16 x parts bytes, which p2pLaneCount never produces (laneBytes >= 1K).
FERRY_HD inline void p2pLanePart(uint64_t bytes, uint32_t parts, uint32_t lane, uint64_t* begin,
                                 uint64_t* len) {
  uint64_t part = ((bytes + parts - 1) / parts + 15) / 16 * 16;
  uint64_t b = part * lane;
  *begin = b < bytes ? b : bytes;
  uint64_t e = b + part < bytes ? b + part : bytes;
  *len = e - *begin;
}

struct P2pTaskArg {
  void* buf;
  uint64_t bytes;
  int32_t peer;
  int32_t isSend;
};

// Block b moves lane `lane` of tasks [begin, end) (one (peer, direction)).
struct P2pBlockArg {
  uint16_t begin;
  uint16_t end;
  uint16_t lane;
  uint16_t reserved;
};

template <int kTasks, int kBlocks>
struct P2pArgsT {
  static constexpr int kMaxTasks = kTasks;
  static constexpr int kMaxBlocks = kBlocks;
  int32_t nblocks;
  int32_t pos;  // for log lines
  uint32_t nslots;
  uint32_t lanes;             // lane connections per peer (peerChannels[peer * lanes + lane])
  uint64_t slotBytes;         // a lane connection's slot
  uint64_t laneBytes;         // p2pLaneCount's unit
  uint64_t llMaxBytes;        // p2pParts: messages up to this size use LL (0: none)
  uint64_t llSlotBytes;       // a lane's LL slot
  uint32_t llSlots;           // a lane's LL slot count
  uint32_t llLaneBytes;       // p2pParts' unit for LL messages
  RingChannel* peerChannels;  // by peer * lanes + lane, in the executor's memory
  const volatile uint32_t* abortFlag;
  uint64_t timeoutNs;
  P2pBlockArg blocks[kBlocks];
  P2pTaskArg tasks[kTasks];
};
using P2pArgs = P2pArgsT<kMaxKernelP2pTasks, kMaxKernelP2pBlocks>;
using P2pArgsSmall = P2pArgsT<kSmallKernelP2pTasks, kSmallKernelP2pBlocks>;
static_assert(std::is_trivially_copyable_v<P2pArgs> && sizeof(P2pArgs) <= 32000,
              "kernel argument (CUDA >= 12.1 allows 32764 bytes)");
static_assert(std::is_trivially_copyable_v<P2pArgsSmall> && sizeof(P2pArgsSmall) <= 1400,
              "the small variant exists to keep the argument small");

// Runs block b: its lane's part of each task, in call order (LL messages
// over the lane's LL connection, the others over its FIFO); stores back only
// its own lane and direction's counters (the other direction and lanes belong
// to other blocks of the same launch).
template <class P, class Args>
FERRY_HD bool runP2pBlock(typename P::Ctx& ctx, const Args& a, int b) {
  using Op = CollOp<int8_t, kFnCopy>;
  const P2pBlockArg& blk = a.blocks[b];
  const P2pTaskArg& first = a.tasks[blk.begin];
  RingChannel& ch = a.peerChannels[static_cast<uint32_t>(first.peer) * a.lanes + blk.lane];
  Op op{};
  RingPrims<P, int8_t, Op> prims(ctx, ch, op, a.nslots, sliceEltsFor(a.slotBytes, 1));
  LlPrims<P, int8_t, Op> ll(ctx, ch, op, a.llSlots, a.llSlotBytes);
  bool ok = true;
  for (int i = blk.begin; ok && i < blk.end; ++i) {
    const P2pTaskArg& t = a.tasks[i];
    auto* buf = static_cast<int8_t*>(t.buf);
    const bool isLl = t.bytes <= a.llMaxBytes;
    const uint32_t parts = p2pParts(t.bytes, a.lanes, a.laneBytes, a.llMaxBytes, a.llLaneBytes);
    if (blk.lane >= parts) continue;  // this message does not use the lane
    uint64_t begin = 0, len = 0;
    p2pLanePart(t.bytes, parts, blk.lane, &begin, &len);
    if (isLl) {
      ok = t.isSend ? ll.send(buf + begin, len) : ll.recv(buf + begin, len);
    } else {
      ok = t.isSend ? prims.send(buf + begin, len) : prims.recv(buf + begin, len);
    }
  }
  if (first.isSend) {
    ch.sendStep = prims.sendStep();
    ch.llSendStep = ll.sendStep();
  } else {
    ch.recvStep = prims.recvStep();
    ch.llRecvStep = ll.recvStep();
  }
  return ok;
}

}  // namespace ferry::algo
