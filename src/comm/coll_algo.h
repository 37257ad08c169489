// Which algorithm a collective runs: NCCL_ALGO, then Ferry's cost model.
//
// Ferry has two. Ring serves every collective (coll/coll_engine.h). The
// hierarchical all-reduce (comm/hier_allreduce.h) serves all-reduce on a
// communicator spanning hosts with the same number (>= 2) of ranks on each:
// NCCL_ALGO calls it Tree, because NCCL's Tree is NCCL's hierarchical
// algorithm (a chain inside each node, a tree across nodes) and the nearest
// equivalent a user would name; "Hier" is accepted as Ferry's own name. The
// other names NCCL knows (CollnetDirect, CollnetChain, NVLS, NVLSTree, PAT)
// are accepted and have no effect.
//
// Every rank must make the same choice, or their kernels would wait for each
// other forever: it depends only on the collective, the communicator's shape
// and knobs every rank agrees on (core/agreed_knobs.h).
#pragma once

#include <cstdint>
#include <string>

#include "algo/coll_ring.h"
#include "core/status.h"

namespace ferry {

// The algorithms one collective may use.
struct AlgoMask {
  bool ring = true;
  bool tree = true;  // the hierarchical all-reduce
};

// NCCL_ALGO: a comma list of names (case-insensitive), or ^ and a list to
// exclude; or ';'-separated entries "collective:list" (allreduce, allgather,
// reducescatter, broadcast, reduce) that set only that collective. Empty
// allows everything. Fails (the caller WARNs and keeps the defaults) on an
// unknown name or collective.
[[nodiscard]] Status parseAlgos(const std::string& text, AlgoMask masks[algo::kNumCollKinds]);

// A communicator's hosts and ranks per host; perHost 0 when the ranks are
// not spread evenly (or two share a process), which rules the hierarchical
// all-reduce out.
struct HierShape {
  int hosts = 1;
  int perHost = 0;
};

// Whether an all-reduce of `bytes` runs hierarchically: the shape allows it
// (> 1 host, >= 2 ranks on each), NCCL_ALGO does, and either NCCL_ALGO
// rules Ring out or the cost model (comm/cost_model.h) finds it faster.
bool chooseHierAllReduce(const AlgoMask& mask, const HierShape& shape, uint64_t bytes,
                         bool hostRuntime);

}  // namespace ferry
