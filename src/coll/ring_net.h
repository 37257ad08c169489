// The collective ring across hosts (issue 18): where a ring neighbour is on
// another host, this rank's kernel talks to local mirror memory and the
// proxy carries each channel's slots over the network (proxy/ring_hop.h).
//
// For each channel c of a communicator that spans hosts:
//   next rank remote: a mirror of the next rank's region (its channel FIFOs
//     and flag lines) in this rank's pinned host memory takes the kernel's
//     slot writes and tail posts; a send hop isends the slots and writes
//     this rank's sendHead.
//   previous rank remote: this rank's own region lives in host memory (SHM
//     mode) so that a receive hop can land slots in its FIFO and write its
//     recvTail; the kernel's acknowledgements (recvHead) go to a mirror of
//     the previous rank's flag lines, which the hop reads.
// Every hop is one engine connection, its receiver listening and
// publishing its handle through the bootstrap (collective: every rank of a
// communicator that spans hosts calls setupRingNet, hops or not).
#pragma once

#include <memory>
#include <vector>

#include "proxy/ring_hop.h"
#include "runtime/runtime.h"
#include "transport/setup.h"

namespace ferry {

struct RingRegionLayout;

struct RingNet {
  std::unique_ptr<rt::HostMemory> nextMirror;  // when the next rank is remote
  std::unique_ptr<rt::HostMemory> prevMirror;  // when the previous rank is remote
  // In nextMirror, after the FIFOs: channels x nslots words, the bytes the
  // kernel put in each slot (RingChannel::sendSizes); null when the next
  // rank is on this host.
  uint64_t* sendSizes = nullptr;
  std::vector<std::unique_ptr<RingHop>> hops;
};

// Kernel point-to-point across hosts (NCCL_PASS_SM=0, or CUDA-graph capture
// with FERRY_P2P_KERNEL_ACROSS_HOSTS=1): each lane of this rank's connection
// with a peer on another host is a pair of hops like the ring's, one per
// direction. Sending, the kernel fills a mirror of its FIFO slice in the
// peer's region and posts its tail in the mirror's flag line; receiving, the
// proxy lands slots in this rank's own region (host memory) and the
// kernel's acknowledgements go to the mirror's flag lines. Only the FIFO
// protocol (no LL) crosses hosts.
struct PeerMirror {
  std::unique_ptr<rt::HostMemory> memory;
  char* flags = nullptr;  // lanes x 3 flag lines (sendTail, recvHead, LL head)
  char* fifo = nullptr;   // this rank's FIFO slice of the peer's region
  // lanes x slots words after the flag lines: the bytes the kernel put in
  // each slot (RingChannel::sendSizes), so the hops ship only those.
  uint64_t* sizes = nullptr;
};
struct PeerNet {
  std::vector<PeerMirror> mirrors;  // by rank; empty for same-host ranks
  std::vector<std::unique_ptr<RingHop>> hops;
};
struct PeerNetShape {
  uint32_t lanes = 1;
  uint32_t laneSlots = 2;
  uint64_t laneSlotBytes = 0;
};
// Collective (every rank of a communicator spanning hosts calls it). No
// engine: `out` keeps no hops and ncclSuccess (no kernel p2p then).
[[nodiscard]] Status setupPeerNet(const P2pSetupContext& ctx, const PeerNetShape& shape,
                                  const RingRegionLayout& layout, char* ownCpu, PeerNet* out);

// `ll`: the LL part's ring (its FIFOs at layout.llFifos; the receive hops
// land lines aside and publish no tail, proxy/ring_hop.h), else the
// Simple part's. `ownCpu`: the CPU address of this rank's region (host
// memory whenever a neighbour is remote). *prevBase / *nextBase: the mirrors, for the
// channel table (left alone for a neighbour on this host). No engine for
// the other hosts: *out stays empty and ncclSuccess (collectives then
// refuse to run).
[[nodiscard]] Status setupRingNet(const P2pSetupContext& ctx, bool ll, int nchannels,
                                  uint32_t nslots, uint64_t slotBytes,
                                  const RingRegionLayout& layout, int prevRank, int nextRank,
                                  char* ownCpu, RingNet* out, char** prevBase, char** nextBase);

}  // namespace ferry
