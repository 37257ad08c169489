// Ferry's cost model: how long a group's work should take, for
// ncclGroupSimulateEnd. A first-order model per link class (latency per
// launch and per ring step, bus bandwidth), calibrated on 2x H200 (NVIDIA's
// NCCL and Ferry measured side by side: shared/perf/BASELINE.md,
// bench/RESULTS.md): ring collectives move the classic ring volume
// (all-reduce 2(n-1)/n of the buffer, all-gather and reduce-scatter (n-1)/n
// of the whole output or input, broadcast and reduce the buffer once) at the
// slowest link of the ring; point-to-point to different peers, and the two
// directions with one peer, overlap; messages one way to one peer add up. An estimate, never a
// promise: nothing depends on it.
#pragma once

#include <vector>

#include "coll/coll_engine.h"
#include "enqueue/p2p_engine.h"
#include "topo/topology.h"

namespace ferry {

struct LinkCost {
  double launchUs;  // fixed cost of one operation
  double stepUs;    // per ring step (collectives)
  double gbps;      // bus bandwidth, GB/s
};

// The cost of reaching a peer over `link` on a runtime (host: the CPU
// emulation, much slower than any GPU path).
LinkCost linkCost(PeerLink link, bool hostRuntime);

// Microseconds for an all-reduce of `bytes` over a ring of `nranks` ranks on
// `hosts` hosts (its slowest hop crosses hosts when hosts > 1), and for the
// hierarchical all-reduce on `hosts` hosts of `perHost` ranks each: a
// reduce-scatter and an all-gather inside each host, and between them
// perHost all-reduces of a 1/perHost shard across hosts, side by side. The
// same on every rank (it decides which one runs: comm/coll_algo.h).
double allReduceRingUs(int nranks, int hosts, uint64_t bytes, bool hostRuntime);
double allReduceHierUs(int hosts, int perHost, uint64_t bytes, bool hostRuntime);

// Microseconds for one communicator's tasks of one group: its collectives
// run one after another; its point-to-point tasks after them, peers in
// parallel.
double estimateGroupUs(const Topology& topo, bool hostRuntime, const std::vector<CollTask>& coll,
                       const std::vector<P2pTask>& p2p);

}  // namespace ferry
