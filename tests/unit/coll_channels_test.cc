// Channels per Simple collective (coll/coll_engine.h simpleCollChannels):
// one host (or FERRY_COLL_NET_HOP_BYTES=0) keeps one channel per 64 KiB; a
// ring across hosts keeps each hop's network message >= the hop bytes
// (128 KiB by default) and uses at most 4 channels below 64 MiB.
#include <gtest/gtest.h>

#include "coll/coll_engine.h"

namespace ferry {
namespace {

constexpr uint64_t kKiB = 1024;
constexpr uint64_t kMiB = 1024 * kKiB;
constexpr uint64_t kHop = 128 * kKiB;  // the default FERRY_COLL_NET_HOP_BYTES

TEST(CollChannels, OneHostOnePer64KiB) {
  EXPECT_EQ(1, simpleCollChannels(8, 2, 0, 64));
  EXPECT_EQ(1, simpleCollChannels(64 * kKiB, 2, 0, 64));
  EXPECT_EQ(2, simpleCollChannels(64 * kKiB + 1, 2, 0, 64));
  EXPECT_EQ(16, simpleCollChannels(kMiB, 8, 0, 64));
  EXPECT_EQ(64, simpleCollChannels(256 * kMiB, 2, 0, 64));
  EXPECT_EQ(7, simpleCollChannels(256 * kMiB, 2, 0, 7));
}

TEST(CollChannels, AcrossHostsHopsOf128KiB) {
  // 2 ranks: a hop carries bytes / (2 x channels).
  EXPECT_EQ(1, simpleCollChannels(8, 2, kHop, 8));
  EXPECT_EQ(1, simpleCollChannels(256 * kKiB, 2, kHop, 8));
  EXPECT_EQ(1, simpleCollChannels(511 * kKiB, 2, kHop, 8));
  EXPECT_EQ(2, simpleCollChannels(512 * kKiB, 2, kHop, 8));
  EXPECT_EQ(4, simpleCollChannels(kMiB, 2, kHop, 8));
  // More ranks on the ring: smaller hops, fewer channels.
  EXPECT_EQ(1, simpleCollChannels(kMiB, 8, kHop, 8));
  EXPECT_EQ(4, simpleCollChannels(4 * kMiB, 8, kHop, 8));
}

TEST(CollChannels, AcrossHostsAtMostFourBelow64MiB) {
  EXPECT_EQ(4, simpleCollChannels(4 * kMiB, 2, kHop, 8));
  EXPECT_EQ(4, simpleCollChannels(64 * kMiB - 1, 2, kHop, 8));
  EXPECT_EQ(8, simpleCollChannels(64 * kMiB, 2, kHop, 8));
  EXPECT_EQ(8, simpleCollChannels(kMiB * 1024, 2, kHop, 8));
  // The available channels (FERRY_COLL_CHANNELS, maxCTAs) stay the bound.
  EXPECT_EQ(2, simpleCollChannels(4 * kMiB, 2, kHop, 2));
  EXPECT_EQ(2, simpleCollChannels(256 * kMiB, 2, kHop, 2));
  EXPECT_EQ(16, simpleCollChannels(256 * kMiB, 2, kHop, 16));
  EXPECT_EQ(1, simpleCollChannels(256 * kMiB, 2, kHop, 1));
}

TEST(CollChannels, HopBytesKnob) {
  // Larger hops: fewer channels; the cap below 64 MiB stays.
  EXPECT_EQ(2, simpleCollChannels(kMiB, 2, 256 * kKiB, 8));
  EXPECT_EQ(4, simpleCollChannels(16 * kMiB, 2, kMiB, 8));
  EXPECT_EQ(1, simpleCollChannels(kMiB, 2, kMiB, 8));
  // Smaller hops: more channels, still at most 4 below 64 MiB.
  EXPECT_EQ(4, simpleCollChannels(kMiB, 2, 64 * kKiB, 8));
  EXPECT_EQ(2, simpleCollChannels(64 * kKiB, 2, 16 * kKiB, 8));
}

}  // namespace
}  // namespace ferry
