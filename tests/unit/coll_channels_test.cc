// Channels per Simple collective (coll/coll_engine.h simpleCollChannels):
// one host keeps one channel per 64 KiB; a ring across hosts keeps each
// hop's network message >= 128 KiB and uses at most 4 channels below 64 MiB.
#include <gtest/gtest.h>

#include "coll/coll_engine.h"

namespace ferry {
namespace {

constexpr uint64_t kKiB = 1024;
constexpr uint64_t kMiB = 1024 * kKiB;

TEST(CollChannels, OneHostOnePer64KiB) {
  EXPECT_EQ(1, simpleCollChannels(8, 2, false, 64));
  EXPECT_EQ(1, simpleCollChannels(64 * kKiB, 2, false, 64));
  EXPECT_EQ(2, simpleCollChannels(64 * kKiB + 1, 2, false, 64));
  EXPECT_EQ(16, simpleCollChannels(kMiB, 8, false, 64));
  EXPECT_EQ(64, simpleCollChannels(256 * kMiB, 2, false, 64));
  EXPECT_EQ(7, simpleCollChannels(256 * kMiB, 2, false, 7));
}

TEST(CollChannels, AcrossHostsHopsOf128KiB) {
  // 2 ranks: a hop carries bytes / (2 x channels).
  EXPECT_EQ(1, simpleCollChannels(8, 2, true, 8));
  EXPECT_EQ(1, simpleCollChannels(256 * kKiB, 2, true, 8));
  EXPECT_EQ(1, simpleCollChannels(511 * kKiB, 2, true, 8));
  EXPECT_EQ(2, simpleCollChannels(512 * kKiB, 2, true, 8));
  EXPECT_EQ(4, simpleCollChannels(kMiB, 2, true, 8));
  // More ranks on the ring: smaller hops, fewer channels.
  EXPECT_EQ(1, simpleCollChannels(kMiB, 8, true, 8));
  EXPECT_EQ(4, simpleCollChannels(4 * kMiB, 8, true, 8));
}

TEST(CollChannels, AcrossHostsAtMostFourBelow64MiB) {
  EXPECT_EQ(4, simpleCollChannels(4 * kMiB, 2, true, 8));
  EXPECT_EQ(4, simpleCollChannels(64 * kMiB - 1, 2, true, 8));
  EXPECT_EQ(8, simpleCollChannels(64 * kMiB, 2, true, 8));
  EXPECT_EQ(8, simpleCollChannels(kMiB * 1024, 2, true, 8));
  // The available channels (FERRY_COLL_CHANNELS, maxCTAs) stay the bound.
  EXPECT_EQ(2, simpleCollChannels(4 * kMiB, 2, true, 2));
  EXPECT_EQ(2, simpleCollChannels(256 * kMiB, 2, true, 2));
  EXPECT_EQ(16, simpleCollChannels(256 * kMiB, 2, true, 16));
  EXPECT_EQ(1, simpleCollChannels(256 * kMiB, 2, true, 1));
}

}  // namespace
}  // namespace ferry
