// The ring region's layout (coll/ring_setup.h) for each part: the peers part
// holds only kernel-p2p connections, the LL and Simple parts only their
// protocol's FIFOs (the other's are 0 bytes), and whatever the part, flag
// lines come first, then LL FIFOs, then FIFOs, 4 KiB aligned and without
// overlap, so a zeroed prefix [0, fifos) covers every flag and LL line.
#include <gtest/gtest.h>

#include <vector>

#include "coll/ring_setup.h"
#include "common/random.h"

namespace ferry {
namespace {

struct Part {
  int nchannels, nranks;
  uint64_t slotBytes, llSlotBytes;
};

void expectSound(const Part& p, uint32_t lanes, uint32_t nslots) {
  const RingRegionLayout l =
      ringRegionLayout(p.nchannels, p.nranks, lanes, nslots, p.slotBytes, p.llSlotBytes);
  const uint64_t conns = static_cast<uint64_t>(p.nchannels) + p.nranks;
  const uint64_t flagLines = static_cast<uint64_t>(p.nchannels) + uint64_t{lanes} * p.nranks;
  EXPECT_EQ(l.llFifos % 4096, 0u);
  EXPECT_EQ(l.fifos % 4096, 0u);
  EXPECT_GE(l.llFifos, flagLines * 3 * kRingFlagLine);
  EXPECT_EQ(l.llFifoBytes, uint64_t{nslots} * p.llSlotBytes);
  EXPECT_EQ(l.fifoBytes, uint64_t{nslots} * p.slotBytes);
  EXPECT_GE(l.fifos, l.llFifos + conns * l.llFifoBytes);
  EXPECT_EQ(l.bytes, l.fifos + conns * l.fifoBytes);
  // The last flag line ends before the LL FIFOs.
  std::vector<char> region(l.llFifos + kRingFlagLine);
  const char* last = reinterpret_cast<const char*>(ringFlagLine(region.data(), flagLines - 1, 2));
  EXPECT_LE(static_cast<uint64_t>(last - region.data()) + kRingFlagLine, l.llFifos);
}

TEST(RingLayout, EachPartHoldsOnlyItsFifos) {
  const uint64_t slot = 256 << 10, ll = 32 << 10;
  // CUDA defaults at 2 ranks: 64 channels, 8 slots, 8 lanes.
  const RingRegionLayout peers = ringRegionLayout(0, 2, 8, 8, slot, ll);
  const RingRegionLayout llPart = ringRegionLayout(64, 0, 8, 8, 0, ll);
  const RingRegionLayout simple = ringRegionLayout(64, 0, 8, 8, slot, 0);
  EXPECT_EQ(peers.bytes - peers.fifos, 2 * 8 * slot);
  EXPECT_EQ(llPart.bytes, llPart.fifos);  // no Simple FIFOs
  EXPECT_EQ(llPart.fifos - llPart.llFifos, 64 * 8 * ll);
  EXPECT_EQ(simple.fifos, simple.llFifos);  // no LL FIFOs
  EXPECT_EQ(simple.bytes - simple.fifos, 64 * 8 * slot);
  // The three parts together are the old single region, give or take the
  // alignment of each part's flag lines.
  const RingRegionLayout whole = ringRegionLayout(64, 2, 8, 8, slot, ll);
  EXPECT_LE(whole.bytes, peers.bytes + llPart.bytes + simple.bytes);
  EXPECT_GE(whole.bytes + 3 * 4096, peers.bytes + llPart.bytes + simple.bytes - 3 * 4096);
}

TEST(RingLayout, RandomPartsAreSound) {
  test::Rng rng(test::testSeed(), 0x1a7);
  for (int i = 0; i < 2000; ++i) {
    const uint32_t lanes = 1u << rng.below(4);
    const uint32_t nslots = 2 * (1 + static_cast<uint32_t>(rng.below(32)));
    const uint64_t slot = 16 * (64 + rng.below(1 << 16));
    const uint64_t ll = 32 * (32 + rng.below(1 << 12));
    const int channels = 1 + static_cast<int>(rng.below(64));
    const int nranks = 1 + static_cast<int>(rng.below(72));
    switch (rng.below(3)) {
      case 0:
        expectSound({0, nranks, slot, ll}, lanes, nslots);
        break;
      case 1:
        expectSound({channels, 0, 0, ll}, lanes, nslots);
        break;
      default:
        expectSound({channels, 0, slot, 0}, lanes, nslots);
    }
  }
}

}  // namespace
}  // namespace ferry
