// The hierarchical all-reduce (issue 18), for a communicator spanning hosts
// with the same number L >= 2 of ranks on each of its H hosts:
//   1. reduce-scatter inside each host: local rank i ends with shard i (a
//      1/L of the buffer) summed over its host;
//   2. all-reduce of shard i across hosts, among the H ranks of local index
//      i: L such rings run side by side, each carrying 1/L of the data;
//   3. all-gather of the shards inside each host.
// Against one ring through all H x L ranks, the network carries each byte
// in 2(H-1) ring steps instead of 2(HL-1), spread over L rings, and the
// steps inside a host run at NVLink speed instead of the network's pace.
//
// The steps are the ring kernels of two internal communicators, made from
// this one by the first all-reduce that takes this path (every rank reaches
// it at the same point: the choice is a function of the collective and of
// what every rank agrees on, comm/coll_algo.h): `intra` (this host's ranks,
// by local index) and `cross` (the ranks of this local index, by host).
// The three launches go to the all-reduce's stream, which orders them.
// When count is not a multiple of L, the last count % L elements take a
// reduce to local rank 0, an all-reduce across hosts among local ranks 0
// and a broadcast inside the host.
//
// Ops: Sum, Prod, Max, Min as they are; Avg sums and divides once, by all
// H x L ranks, at the end of step 2 (the same wrapped integer sum as the
// ring's, so the same result); PreMulSum scales each rank's input once in
// step 1 (the op is made on `intra` for the launch) and sums after.
//
// Failure: the internal communicators have no liveness ring of their own
// (this communicator's watches every rank); a failure they see (a ring hop
// across hosts reset) fails this communicator with the peer named, and this
// communicator's abort, revoke and peer failures stop their work.
//
// Threading: launch() and the memory queries on the communicator's owner
// thread; abort() from any thread.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

#include "coll/coll_engine.h"
#include "comm/coll_algo.h"
#include "topo/topology.h"

namespace ferry {

class Communicator;

class HierAllReduce {
 public:
  // `parent` has finished its topology and outlives this object.
  explicit HierAllReduce(Communicator* parent);
  ~HierAllReduce();
  HierAllReduce(const HierAllReduce&) = delete;
  HierAllReduce& operator=(const HierAllReduce&) = delete;

  // The shape of a topology as this algorithm sees it (coll_algo.h), and
  // each rank's host index and local index (the same on every rank).
  static HierShape layout(const Topology& topo, std::vector<int>* hostOf,
                          std::vector<int>* localOf);

  // Whether this all-reduce task runs here (the same answer on every rank),
  // and its estimated time (comm/cost_model.h).
  bool chosen(const CollTask& t) const;
  double estimateUs(const CollTask& t) const;
  // Launches the task's steps on its stream, making the internal
  // communicators first if this is the first such all-reduce.
  [[nodiscard]] Status launch(const CollTask& t);

  // Stops the internal communicators' work (kernels abort, inits return).
  void abort();
  // Waits for (or, with abort, stops) their kernels.
  [[nodiscard]] Status shutdown(bool abort);
  // Memory their rings hold (0 until the first hierarchical all-reduce).
  uint64_t regionBytes() const;
  uint64_t collectiveFifoBytes() const;

 private:
  [[nodiscard]] Status ensureComms();
  // Makes one internal communicator of `members` (parent ranks, in the new
  // communicator's rank order); its first member makes the unique id.
  [[nodiscard]] Status makeComm(const std::vector<int>& members, uint32_t tag,
                                std::unique_ptr<Communicator>* slot);
  // The op of step 1 (`*temp`: a PreMulSum made on intra for this launch).
  [[nodiscard]] Status firstOp(const CollTask& t, int* op, bool* temp);
  [[nodiscard]] Status launchSteps(const CollTask& t, int first);

  Communicator* const parent_;
  HierShape shape_;
  AlgoMask mask_;  // NCCL_ALGO's all-reduce entry
  int hostIndex_ = 0;
  int localIndex_ = 0;
  std::vector<int> intraMembers_;  // parent rank of each intra rank
  std::vector<int> crossMembers_;  // parent rank of each cross rank
  bool tried_ = false;             // ensureComms ran (its outcome: made_)
  Status made_ = ncclSuccess;
  mutable std::mutex mu_;  // guards intra_ / cross_ being set (owner) against abort()
  std::unique_ptr<Communicator> intra_;
  std::unique_ptr<Communicator> cross_;
};

}  // namespace ferry
