// NCCL_ALGO parsing, the hierarchical all-reduce's choice and the layout it
// reads from a topology (comm/coll_algo.h, comm/hier_allreduce.h).
#include <gtest/gtest.h>

#include "comm/coll_algo.h"
#include "comm/cost_model.h"
#include "comm/hier_allreduce.h"

namespace ferry {
namespace {

constexpr int kAR = algo::kCollAllReduce;
constexpr int kAG = algo::kCollAllGather;

struct Masks {
  AlgoMask m[algo::kNumCollKinds];
};

Masks parsed(const std::string& text, Status* s = nullptr) {
  Masks out;
  Status r = parseAlgos(text, out.m);
  if (s != nullptr) *s = r;
  return out;
}

TEST(CollAlgo, EmptyAllowsEverything) {
  Masks m = parsed("");
  for (const AlgoMask& a : m.m) {
    EXPECT_TRUE(a.ring);
    EXPECT_TRUE(a.tree);
  }
}

TEST(CollAlgo, ListsAndExclusions) {
  Masks m = parsed("Ring");
  EXPECT_TRUE(m.m[kAR].ring);
  EXPECT_FALSE(m.m[kAR].tree);
  m = parsed("tree,NVLS");
  EXPECT_FALSE(m.m[kAR].ring);
  EXPECT_TRUE(m.m[kAR].tree);
  m = parsed("^Tree");
  EXPECT_TRUE(m.m[kAG].ring);
  EXPECT_FALSE(m.m[kAG].tree);
  m = parsed("^ring");
  EXPECT_FALSE(m.m[kAR].ring);
  EXPECT_TRUE(m.m[kAR].tree);
  m = parsed("hier");  // Ferry's own name for Tree
  EXPECT_TRUE(m.m[kAR].tree);
  EXPECT_FALSE(m.m[kAR].ring);
  m = parsed("CollnetDirect,PAT");  // names Ferry has no algorithm for
  EXPECT_FALSE(m.m[kAR].ring);
  EXPECT_FALSE(m.m[kAR].tree);
}

TEST(CollAlgo, PerCollectiveEntries) {
  Masks m = parsed("allreduce:tree;allgather:ring");
  EXPECT_FALSE(m.m[kAR].ring);
  EXPECT_TRUE(m.m[kAR].tree);
  EXPECT_TRUE(m.m[kAG].ring);
  EXPECT_FALSE(m.m[kAG].tree);
  // Collectives not named keep everything.
  EXPECT_TRUE(m.m[algo::kCollBroadcast].ring);
  EXPECT_TRUE(m.m[algo::kCollBroadcast].tree);
  m = parsed("AllReduce:^tree;");
  EXPECT_TRUE(m.m[kAR].ring);
  EXPECT_FALSE(m.m[kAR].tree);
}

TEST(CollAlgo, BadTextFailsAndChangesNothing) {
  for (const char* bad : {"Rings", "allreduce:bogus", "allreduce2:ring", "ring;nope"}) {
    Masks m;
    m.m[kAR].ring = false;  // must be left as it was
    EXPECT_EQ(parseAlgos(bad, m.m), ncclInvalidArgument) << bad;
    EXPECT_FALSE(m.m[kAR].ring) << bad;
    EXPECT_TRUE(m.m[kAR].tree) << bad;
  }
}

TEST(CollAlgo, HierNeedsAShapeItCanServe) {
  AlgoMask any;
  AlgoMask treeOnly;
  treeOnly.ring = false;
  AlgoMask ringOnly;
  ringOnly.tree = false;
  const uint64_t big = 64u << 20;
  EXPECT_FALSE(chooseHierAllReduce(treeOnly, HierShape{1, 8}, big, false));  // one host
  EXPECT_FALSE(chooseHierAllReduce(treeOnly, HierShape{4, 1}, big, false));  // one rank per host
  EXPECT_FALSE(chooseHierAllReduce(treeOnly, HierShape{2, 0}, big, false));  // uneven
  EXPECT_TRUE(chooseHierAllReduce(treeOnly, HierShape{2, 2}, 4, true));      // forced: any size
  EXPECT_FALSE(chooseHierAllReduce(ringOnly, HierShape{2, 8}, big, false));
  // The cost model: on GPUs the network carries fewer ring steps and the
  // hosts' links run at their own pace; on the host runtime every link costs
  // the same, so the ring's fewer launches win.
  EXPECT_TRUE(chooseHierAllReduce(any, HierShape{2, 8}, big, false));
  EXPECT_TRUE(chooseHierAllReduce(any, HierShape{4, 2}, 1u << 20, false));
  EXPECT_FALSE(chooseHierAllReduce(any, HierShape{2, 2}, big, true));
  EXPECT_LT(allReduceHierUs(2, 8, big, false), allReduceRingUs(16, 2, big, false));
}

PeerInfo peerOn(uint64_t host, int pid) {
  PeerInfo p{};
  p.hostHash = host;
  p.pidHash = static_cast<uint64_t>(pid);
  return p;
}

Topology topoOf(const std::vector<uint64_t>& hostOfRank, int me, bool sharedProcess = false) {
  Topology t;
  t.myRank = me;
  for (size_t r = 0; r < hostOfRank.size(); ++r) {
    t.peers.push_back(peerOn(hostOfRank[r], static_cast<int>(r)));
    PeerLink l = hostOfRank[r] == hostOfRank[me] ? PeerLink::SameHost : PeerLink::OtherHost;
    if (static_cast<int>(r) == me) l = PeerLink::Self;
    if (sharedProcess && l == PeerLink::SameHost) l = PeerLink::SameProcess;
    t.links.push_back(l);
  }
  return t;
}

TEST(CollAlgo, LayoutNumbersHostsAndLocalRanks) {
  // Ranks interleaved over hosts 7 and 3: host 7 is host 0 (rank 0 is on it).
  std::vector<int> hostOf, localOf;
  HierShape s = HierAllReduce::layout(topoOf({7, 3, 3, 7}, 2), &hostOf, &localOf);
  EXPECT_EQ(s.hosts, 2);
  EXPECT_EQ(s.perHost, 2);
  EXPECT_EQ(hostOf, (std::vector<int>{0, 1, 1, 0}));
  EXPECT_EQ(localOf, (std::vector<int>{0, 0, 1, 1}));
  s = HierAllReduce::layout(topoOf({1, 1, 2}, 0), &hostOf, &localOf);
  EXPECT_EQ(s.hosts, 2);
  EXPECT_EQ(s.perHost, 0);  // 2 + 1: uneven
  s = HierAllReduce::layout(topoOf({1, 1, 2, 2}, 0, true), &hostOf, &localOf);
  EXPECT_EQ(s.perHost, 0);  // two ranks of one process
}

}  // namespace
}  // namespace ferry
