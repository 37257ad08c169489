// The order in which a rank issues its point-to-point copies
// (rotatedOrder, enqueue/p2p_engine.h): peers by distance from the rank, so
// that each round of every rank's copies is a permutation of the ranks.
#include <gtest/gtest.h>

#include <set>
#include <vector>

#include "common/random.h"
#include "enqueue/p2p_engine.h"

namespace ferry {
namespace {

P2pTask task(int peer, bool send) {
  P2pTask t;
  t.peer = peer;
  t.isSend = send;
  return t;
}

// An all-to-all as torch and nccl-tests call it: send and receive per peer,
// peers ascending. Each rank's k-th copy goes to rank + k: a permutation.
TEST(P2pOrder, AlltoallRoundsArePermutations) {
  constexpr int n = 8;
  std::vector<std::vector<int>> sendsOf(n);  // per rank: send peers, issue order
  for (int rank = 0; rank < n; ++rank) {
    std::vector<P2pTask> tasks;
    for (int p = 0; p < n; ++p) {
      tasks.push_back(task(p, true));
      tasks.push_back(task(p, false));
    }
    std::vector<size_t> order = rotatedOrder(tasks, rank, n);
    ASSERT_EQ(order.size(), tasks.size());
    EXPECT_EQ(std::set<size_t>(order.begin(), order.end()).size(), tasks.size());
    for (size_t i : order) {
      if (tasks[i].isSend && tasks[i].peer != rank) sendsOf[rank].push_back(tasks[i].peer);
    }
    // The self pair first (distance 0), the send before the receive (call order).
    EXPECT_EQ(order[0], static_cast<size_t>(2 * rank));
    EXPECT_EQ(order[1], static_cast<size_t>(2 * rank + 1));
  }
  for (int round = 0; round < n - 1; ++round) {
    std::set<int> targets;
    for (int rank = 0; rank < n; ++rank) {
      EXPECT_EQ(sendsOf[rank][round], (rank + round + 1) % n);
      targets.insert(sendsOf[rank][round]);
    }
    EXPECT_EQ(targets.size(), static_cast<size_t>(n)) << "round " << round;
  }
}

// Several messages to one peer keep their call order (one connection's
// messages are matched in order), whatever else the group holds.
TEST(P2pOrder, StableForOnePeer) {
  test::Rng rng(test::testSeed());
  for (int trial = 0; trial < 200; ++trial) {
    const int n = static_cast<int>(rng.range(2, 8));
    const int rank = static_cast<int>(rng.below(n));
    std::vector<P2pTask> tasks;
    const int count = static_cast<int>(rng.range(1, 24));
    for (int i = 0; i < count; ++i) {
      tasks.push_back(task(static_cast<int>(rng.below(n)), rng.below(2) == 1));
    }
    std::vector<size_t> order = rotatedOrder(tasks, rank, n);
    ASSERT_EQ(order.size(), tasks.size());
    int lastDistance = -1;
    std::vector<int> lastIndex(n, -1);
    for (size_t i : order) {
      const int d = ((tasks[i].peer - rank) % n + n) % n;
      EXPECT_GE(d, lastDistance) << "trial " << trial;
      lastDistance = d;
      EXPECT_GT(static_cast<int>(i), lastIndex[tasks[i].peer]) << "trial " << trial;
      lastIndex[tasks[i].peer] = static_cast<int>(i);
    }
  }
}

}  // namespace
}  // namespace ferry
