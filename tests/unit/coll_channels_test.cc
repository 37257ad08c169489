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

TEST(CollNetStep, OneMessageAStepUnlessSliced) {
  // slices 1 or no hop rule: the whole slot (0).
  EXPECT_EQ(0u, simpleNetStepBytes(512 * kKiB, 1, kHop, kMiB));
  EXPECT_EQ(0u, simpleNetStepBytes(512 * kKiB, 4, 0, kMiB));
}

TEST(CollNetStep, SlicesOfAtLeastTheHop) {
  // A 4 MiB all-reduce on 4 channels, 2 ranks: 512 KiB steps.
  EXPECT_EQ(128 * kKiB, simpleNetStepBytes(512 * kKiB, 4, kHop, kMiB));
  EXPECT_EQ(256 * kKiB, simpleNetStepBytes(512 * kKiB, 2, kHop, kMiB));
  // Never below the hop size: 8 slices of 512 KiB would be 64 KiB.
  EXPECT_EQ(128 * kKiB, simpleNetStepBytes(512 * kKiB, 8, kHop, kMiB));
  // A step no larger than the hop: one slice of its own size is below the
  // slot, so the hop floor applies.
  EXPECT_EQ(128 * kKiB, simpleNetStepBytes(4 * kKiB, 4, kHop, kMiB));
}

TEST(CollNetStep, WholeSlotWhenSlicesWouldFillIt) {
  // 16 MiB all-reduce on 4 channels: 2 MiB steps, 4 slices of 512 KiB.
  EXPECT_EQ(512 * kKiB, simpleNetStepBytes(2 * kMiB, 4, kHop, kMiB));
  // 256 MiB on 8 channels: 16 MiB steps; slices of 4 MiB exceed the slot.
  EXPECT_EQ(0u, simpleNetStepBytes(16 * kMiB, 4, kHop, kMiB));
  EXPECT_EQ(0u, simpleNetStepBytes(4 * kMiB, 4, kHop, kMiB));
  // A hop as large as the slot leaves nothing to slice.
  EXPECT_EQ(0u, simpleNetStepBytes(512 * kKiB, 4, kMiB, kMiB));
}

TEST(CollNetStep, SixteenByteUnits) {
  // Odd step sizes round up to whole 16-byte units; so does an odd hop.
  EXPECT_EQ(16u * 1000, simpleNetStepBytes(4 * 16 * 1000 - 5, 4, 1000, kMiB));
  EXPECT_EQ(1008u, simpleNetStepBytes(100, 4, 1000, kMiB));
  EXPECT_EQ(0u, simpleNetStepBytes(100, 4, 1000, 1008));
}

}  // namespace
}  // namespace ferry
