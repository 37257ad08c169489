// The cost model behind ncclGroupSimulateEnd: estimates grow with bytes and
// ranks, slower links cost more, a group's peers overlap, and the numbers sit
// near the measured anchors (shared/perf/BASELINE.md, 2x H200: NCCL's
// all-reduce of 128 MiB in ~471 us, 8 B in ~20 us).
#include <gtest/gtest.h>

#include "algo/coll_ring.h"
#include "algo/reduce_ops.h"
#include "comm/cost_model.h"

namespace ferry {
namespace {

Topology topo(int n, PeerLink other) {
  Topology t;
  t.myRank = 0;
  t.peers.resize(n);
  t.links.assign(n, other);
  t.links[0] = PeerLink::Self;
  return t;
}

CollTask allReduce(uint64_t count) {
  CollTask c;
  c.coll = algo::kCollAllReduce;
  c.count = count;
  c.dataType = algo::kFloat32;
  return c;
}

TEST(CostModel, CollectivesScaleWithBytesRanksAndLinks) {
  const Topology two = topo(2, PeerLink::SameHost);
  const double small = estimateGroupUs(two, false, {allReduce(2)}, {});
  const double large = estimateGroupUs(two, false, {allReduce(32u << 20)}, {});
  EXPECT_GT(small, 5.0);
  EXPECT_LT(small, 60.0);
  EXPECT_GT(large, 200.0);  // 128 MiB: NCCL ~471 us
  EXPECT_LT(large, 1500.0);
  EXPECT_GT(estimateGroupUs(topo(8, PeerLink::SameHost), false, {allReduce(32u << 20)}, {}), large);
  EXPECT_GT(estimateGroupUs(topo(2, PeerLink::OtherHost), false, {allReduce(32u << 20)}, {}),
            10 * large);
  EXPECT_GT(estimateGroupUs(two, true, {allReduce(32u << 20)}, {}), large);  // host runtime
  // Two collectives take longer than one.
  EXPECT_GT(estimateGroupUs(two, false, {allReduce(1u << 20), allReduce(1u << 20)}, {}),
            estimateGroupUs(two, false, {allReduce(1u << 20)}, {}));
}

TEST(CostModel, PointToPointPeersAndDirectionsOverlap) {
  const Topology four = topo(4, PeerLink::SameHost);
  P2pTask a{true, 1, nullptr, 64u << 20, nullptr};
  P2pTask b{true, 2, nullptr, 64u << 20, nullptr};
  P2pTask back{false, 1, nullptr, 64u << 20, nullptr};
  const double one = estimateGroupUs(four, false, {}, {a});
  EXPECT_NEAR(estimateGroupUs(four, false, {}, {a, b}), one, 1e-9);     // different peers
  EXPECT_NEAR(estimateGroupUs(four, false, {}, {a, back}), one, 1e-9);  // both ways at once
  EXPECT_GT(estimateGroupUs(four, false, {}, {a, a}), 1.5 * one);       // one way, twice
  EXPECT_EQ(estimateGroupUs(four, false, {}, {}), 0.0);
  P2pTask bad{true, 9, nullptr, 1, nullptr};  // out of range: ignored, never a crash
  EXPECT_EQ(estimateGroupUs(four, false, {}, {bad}), 0.0);
}

}  // namespace
}  // namespace ferry
