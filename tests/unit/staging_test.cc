// Staging block sizes (enqueue/staging.h): whole 2 MiB chunks, powers of two
// while small (reuse), then 64 MiB steps, so a large staged message holds
// little more than itself.
#include <gtest/gtest.h>

#include <cstdint>

#include "common/random.h"
#include "enqueue/staging.h"

namespace ferry {
namespace {

constexpr uint64_t kMiB = uint64_t{1} << 20;

TEST(StagingBlockSize, SmallSizesArePowersOfTwoFromTwoMiB) {
  EXPECT_EQ(StagingPool::blockSize(0), 2 * kMiB);
  EXPECT_EQ(StagingPool::blockSize(1), 2 * kMiB);
  EXPECT_EQ(StagingPool::blockSize(2 * kMiB), 2 * kMiB);
  EXPECT_EQ(StagingPool::blockSize(2 * kMiB + 1), 4 * kMiB);
  EXPECT_EQ(StagingPool::blockSize(33 * kMiB), 64 * kMiB);
  EXPECT_EQ(StagingPool::blockSize(64 * kMiB), 64 * kMiB);
}

TEST(StagingBlockSize, LargeSizesGrowIn64MiBSteps) {
  EXPECT_EQ(StagingPool::blockSize(64 * kMiB + 1), 128 * kMiB);
  EXPECT_EQ(StagingPool::blockSize(129 * kMiB), 192 * kMiB);
  // The host runtime's large-message test: 2 GiB + 4099 bytes.
  EXPECT_EQ(StagingPool::blockSize((uint64_t{1} << 31) + 4099), 2048 * kMiB + 64 * kMiB);
  EXPECT_EQ(StagingPool::blockSize((uint64_t{5} << 30) + 4099), 5120 * kMiB + 64 * kMiB);
}

// Any size: a whole number of 2 MiB chunks, at least the size, and at most
// 64 MiB (large) or 2x (small) more.
TEST(StagingBlockSize, RandomSizesFitWithBoundedWaste) {
  test::Rng rng(test::testSeed());
  for (int i = 0; i < 10000; ++i) {
    const uint64_t bytes = rng.below(uint64_t{8} << 30);
    const uint64_t size = StagingPool::blockSize(bytes);
    ASSERT_GE(size, bytes);
    ASSERT_EQ(size % (2 * kMiB), 0u) << bytes;
    if (bytes > 64 * kMiB) {
      ASSERT_LT(size - bytes, 64 * kMiB) << bytes;
    } else {
      ASSERT_LE(size, 2 * bytes > 2 * kMiB ? 2 * bytes : 2 * kMiB) << bytes;
    }
  }
}

}  // namespace
}  // namespace ferry
