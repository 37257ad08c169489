// How a cross-host send is cut into staging copies (netStagePieces,
// enqueue/p2p_engine.h): whole chunks that tile the message, a chunk each
// for the first four so that every link gets work early, and a bounded
// number of pieces for any size (NOTES.md trap 29).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <utility>
#include <vector>

#include "common/random.h"
#include "enqueue/p2p_engine.h"

namespace ferry {
namespace {

using Pieces = std::vector<std::pair<uint64_t, uint64_t>>;
constexpr uint64_t kMiB = uint64_t{1} << 20;

std::vector<uint64_t> lengths(const Pieces& p) {
  std::vector<uint64_t> out;
  for (const auto& piece : p) out.push_back(piece.second);
  return out;
}

TEST(NetStagePieces, FourMiBGoesChunkByChunk) {
  EXPECT_EQ(lengths(netStagePieces(4 * kMiB, kMiB)),
            (std::vector<uint64_t>{kMiB, kMiB, kMiB, kMiB}));
}

TEST(NetStagePieces, LargerMessagesDoubleAfterTheFirstFourChunks) {
  // 16 MiB in 1 MiB chunks: four single chunks, then 2, 4, 4 (the 4 MiB
  // cap), and what is left.
  EXPECT_EQ(
      lengths(netStagePieces(16 * kMiB, kMiB)),
      (std::vector<uint64_t>{kMiB, kMiB, kMiB, kMiB, 2 * kMiB, 4 * kMiB, 4 * kMiB, 2 * kMiB}));
}

TEST(NetStagePieces, EdgeSizes) {
  EXPECT_TRUE(netStagePieces(0, kMiB).empty());
  EXPECT_EQ(lengths(netStagePieces(1, kMiB)), (std::vector<uint64_t>{1}));
  EXPECT_EQ(lengths(netStagePieces(kMiB + 3, kMiB)), (std::vector<uint64_t>{kMiB, 3}));
}

// Random sizes and chunk sizes, fresh every run: the pieces tile the
// message in order, every boundary but the end is a chunk boundary, the
// first pieces are single chunks, and their count stays bounded.
TEST(NetStagePieces, RandomSizesTileTheMessage) {
  test::Rng rng(test::testSeed());  // printed once per process (FERRY_TEST_SEED reruns it)
  const uint64_t chunkSizes[] = {64 << 10, 256 << 10, kMiB, 4 * kMiB};
  for (int round = 0; round < 2000; ++round) {
    const uint64_t chunk = chunkSizes[rng.below(4)];
    // Log-uniform from 1 byte to ~8 GiB: both the short and the huge.
    const uint64_t bytes = 1 + (rng.next() & ((uint64_t{1} << rng.below(34)) - 1));
    SCOPED_TRACE(testing::Message() << "bytes " << bytes << ", chunk " << chunk);
    const Pieces p = netStagePieces(bytes, chunk);
    ASSERT_FALSE(p.empty());
    uint64_t next = 0;
    for (size_t i = 0; i < p.size(); ++i) {
      ASSERT_EQ(p[i].first, next) << "piece " << i;
      ASSERT_GT(p[i].second, 0u) << "piece " << i;
      next += p[i].second;
      if (next < bytes) ASSERT_EQ(next % chunk, 0u) << "piece " << i << " ends inside a chunk";
      if (i < 4) ASSERT_LE(p[i].second, chunk) << "piece " << i << " is not a single chunk";
    }
    ASSERT_EQ(next, bytes);
    const uint64_t chunks = (bytes + chunk - 1) / chunk;
    // Four single chunks, the doubling up to the cap (4 MiB, or a sixteenth
    // of the message when that is more), then at most 16 capped pieces and
    // a tail.
    const uint64_t capChunks = std::max({4 * kMiB / chunk, (chunks + 15) / 16, uint64_t{1}});
    uint64_t ramp = 0;
    for (uint64_t c = 1; c < capChunks; c *= 2) ++ramp;
    EXPECT_LE(p.size(), 4 + ramp + 17) << chunks << " chunks";
  }
}

}  // namespace
}  // namespace ferry
