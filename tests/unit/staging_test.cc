// Staging pieces (enqueue/staging.h): every byte of a staged send belongs to
// exactly one piece, pieces respect the minimum and the piece count bound.
#include <gtest/gtest.h>

#include "enqueue/staging.h"
#include "common/random.h"

namespace ferry {
namespace {

TEST(StagePieces, CoverTheMessageWithinBounds) {
  test::Rng rng(test::testSeed(), 301);
  for (int i = 0; i < 2000; ++i) {
    uint64_t bytes = 1 + rng.below(uint64_t{1} << (1 + rng.below(34)));
    uint64_t minPiece = 1 + rng.below(uint64_t{8} << 20);
    uint64_t piece = stagePieceBytes(bytes, minPiece);
    ASSERT_GE(piece, 1u);
    ASSERT_LE(piece, bytes) << bytes;
    uint64_t pieces = (bytes + piece - 1) / piece;
    ASSERT_LE(pieces, kMaxStagePieces) << bytes << " " << minPiece;
    // Smaller than the minimum only when the whole message is.
    if (bytes >= minPiece) ASSERT_GE(piece, minPiece) << bytes << " " << minPiece;
    // Several pieces: whole multiples of 64 KiB (aligned copies), unless the
    // minimum itself set the size.
    if (pieces > 1 && piece != minPiece) ASSERT_EQ(piece % (64u << 10), 0u) << bytes;
  }
}

TEST(StagePieces, KnownSizes) {
  constexpr uint64_t M = 1 << 20;
  EXPECT_EQ(stagePieceBytes(256 * M, 4 * M), 32 * M);  // 8 pieces
  EXPECT_EQ(stagePieceBytes(16 * M, 4 * M), 4 * M);    // 4 pieces of the minimum
  EXPECT_EQ(stagePieceBytes(3 * M, 4 * M), 3 * M);     // one piece
  EXPECT_EQ(stagePieceBytes(1, 4 * M), 1u);
}

}  // namespace
}  // namespace ferry
