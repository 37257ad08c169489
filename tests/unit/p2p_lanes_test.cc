// Kernel p2p lanes (algo/p2p_kernel.h): a message's parts tile it exactly,
// in lane order, each non-empty and starting on a 16-byte boundary, and the
// part count follows the lane unit and the lane cap.
#include <gtest/gtest.h>

#include "algo/p2p_kernel.h"
#include "coll/ring_setup.h"
#include "common/random.h"

namespace ferry {
namespace {

TEST(P2pLanes, PartsTileTheMessage) {
  test::Rng rng(test::testSeed(), 417);
  for (int i = 0; i < 5000; ++i) {
    const uint64_t bytes = 1 + rng.below(uint64_t{1} << (1 + rng.below(33)));
    const uint32_t lanes = 1u << rng.below(4);
    const uint64_t laneBytes = 1024 + rng.below(uint64_t{1} << 20);
    const uint32_t parts = algo::p2pLaneCount(bytes, lanes, laneBytes);
    ASSERT_GE(parts, 1u);
    ASSERT_LE(parts, lanes);
    ASSERT_EQ(parts, std::max<uint64_t>(1, std::min<uint64_t>(lanes, bytes / laneBytes)))
        << bytes << " " << lanes << " " << laneBytes;
    uint64_t next = 0;
    for (uint32_t lane = 0; lane < parts; ++lane) {
      uint64_t begin = 0, len = 0;
      algo::p2pLanePart(bytes, parts, lane, &begin, &len);
      ASSERT_EQ(begin, next) << bytes << " lane " << lane << " of " << parts;
      ASSERT_EQ(begin % 16, 0u);
      ASSERT_GT(len, 0u) << bytes << " lane " << lane << " of " << parts;
      next = begin + len;
    }
    ASSERT_EQ(next, bytes);
  }
}

TEST(P2pLanes, LlMessagesAreCutByTheLlUnit) {
  // (bytes, lanes, laneBytes, llMaxBytes, llLaneBytes)
  EXPECT_EQ(algo::p2pParts(8192, 8, 1024, 16384, 8192), 1u);
  EXPECT_EQ(algo::p2pParts(16384, 8, 1024, 16384, 8192), 2u);
  EXPECT_EQ(algo::p2pParts(16384, 8, 1024, 16384, 65536), 1u);
  EXPECT_EQ(algo::p2pParts(65536, 4, 1024, 65536, 4096), 4u);   // capped by the lanes
  EXPECT_EQ(algo::p2pParts(16385, 8, 16384, 16384, 1024), 1u);  // FIFO unit past the LL limit
  EXPECT_EQ(algo::p2pParts(16385, 8, 1024, 16384, 16384), 8u);
  EXPECT_EQ(algo::p2pParts(4096, 8, 1024, 0, 4096), 4u);  // no LL
}

TEST(P2pLanes, KnownCuts) {
  constexpr uint64_t K = 1024;
  EXPECT_EQ(algo::p2pLaneCount(15 * K, 8, 16 * K), 1u);
  EXPECT_EQ(algo::p2pLaneCount(64 * K, 8, 16 * K), 4u);
  EXPECT_EQ(algo::p2pLaneCount(256 * K, 8, 16 * K), 8u);
  EXPECT_EQ(algo::p2pLaneCount(uint64_t{5} << 32, 2, 16 * K), 2u);
  uint64_t begin = 0, len = 0;
  algo::p2pLanePart(100000, 3, 2, &begin, &len);  // parts of 33344 bytes
  EXPECT_EQ(begin, 66688u);
  EXPECT_EQ(len, 33312u);
}

}  // namespace
}  // namespace ferry

// Every lane's LL FIFO must start 16-byte aligned and stay inside the peer's
// LL FIFO, whatever the slot knobs: 2 slots of 1056 bytes split 8 ways would
// start lane 1 at byte 264 without rounding.
TEST(P2pLanes, LlLaneSharesAreAlignedAndFit) {
  for (uint64_t slotBytes : {1024u, 1056u, 4096u + 32u, 32768u}) {
    for (uint64_t nslots : {2u, 6u, 8u}) {
      const uint64_t fifo = nslots * slotBytes;
      for (uint32_t lanes : {1u, 2u, 4u, 8u}) {
        const uint64_t share = ferry::p2pLlLaneShare(fifo, lanes);
        EXPECT_EQ(share % 32, 0u) << fifo << " / " << lanes;
        EXPECT_LE(share * lanes, fifo);
        EXPECT_GT(share + 32, fifo / lanes);
        EXPECT_LE(share / 2 / 32 * 32 * 2, share);  // two LL slots fit the share
      }
    }
  }
}
