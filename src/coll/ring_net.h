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
  std::vector<std::unique_ptr<RingHop>> hops;
};

// `ownCpu`: the CPU address of this rank's region (host memory whenever a
// neighbour is remote). *prevBase / *nextBase: the mirrors, for the
// channel table (left alone for a neighbour on this host). No engine for
// the other hosts: *out stays empty and ncclSuccess (collectives then
// refuse to run).
[[nodiscard]] Status setupRingNet(const P2pSetupContext& ctx, int nchannels, uint32_t nslots,
                                  uint64_t slotBytes, const RingRegionLayout& layout, int prevRank,
                                  int nextRank, char* ownCpu, RingNet* out, char** prevBase,
                                  char** nextBase);

}  // namespace ferry
