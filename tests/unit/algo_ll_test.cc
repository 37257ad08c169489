// src/algo/coll_ll.h: the LL line format and one executor thread's share of
// a step (llLines), driven with an in-memory line Io: payloads of every
// element size (odd counts, misaligned buffers) arrive intact, elements past
// the count are never written, a line is accepted only when BOTH of its words
// carry the step's flag, reductions combine element-wise, and a thread waits
// for the send head only when it has lines to write. Random data each run
// (seed printed; reproduce with FERRY_TEST_SEED).
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <vector>

#include "algo/coll_ll.h"
#include "common/random.h"

namespace ferry::algo {
namespace {

// The executors' line accesses without their spinning: a line that is not
// ready (llReady, the check both executors use) reports kLlAborted, so a
// test can see that it was refused.
struct TestIo {
  static inline int headWaits = 0;
  static int read(const LlWait&, const LlLine* line, uint32_t flag, uint64_t* data) {
    if (!llReady(line->word[0], line->word[1], flag)) return kLlAborted;
    *data = llData(line->word[0], line->word[1]);
    return kLlOk;
  }
  static void write(LlLine* line, uint64_t data, uint32_t flag) {
    line->word[0] = llWord0(data, flag);
    line->word[1] = llWord1(data, flag);
  }
  static int waitHead(const LlWait&, const uint64_t* head, uint64_t min) {
    ++headWaits;
    return *head >= min ? kLlOk : kLlAborted;
  }
};

constexpr LlWait kWait{nullptr, 0, 0, 0};
constexpr uint8_t kPoison = 0xA5;

test::Rng rng(uint64_t stream) {
  return test::Rng(test::testSeed(), stream);
}

// Sends n elements of T from a buffer offset by `skew` bytes, receives them
// into another offset buffer; returns the bytes received (poison around).
template <class T>
void roundTrip(uint64_t n, size_t skew, uint64_t stream) {
  auto r = rng(stream);
  std::vector<uint8_t> in(n * sizeof(T) + skew);
  for (auto& b : in) b = static_cast<uint8_t>(r.below(256));
  std::vector<LlLine> lines(n + 1);  // one line per word at most
  std::vector<uint8_t> out(n * sizeof(T) + skew + 16, kPoison);
  const auto* src = reinterpret_cast<const T*>(in.data() + skew);
  auto* dst = reinterpret_cast<T*>(out.data() + skew);
  CollOp<T, kFnCopy> op{};
  const uint32_t flag = llFlag(41);
  const LlSendTo to{lines.data(), nullptr, 0, flag};
  ASSERT_EQ(kLlOk, (llLines<TestIo, T>(kWait, op, src, nullptr, 0, to, nullptr, n, false, 0, 1)));
  const LlSendTo none{nullptr, nullptr, 0, 0};
  ASSERT_EQ(kLlOk, (llLines<TestIo, T>(kWait, op, nullptr, lines.data(), flag, none, dst, n, false,
                                       0, 1)));
  for (size_t i = 0; i < out.size(); ++i) {
    const bool inside = i >= skew && i < skew + n * sizeof(T);
    const uint8_t want = inside ? in[i] : kPoison;
    ASSERT_EQ(want, out[i]) << "byte " << i << " of " << n << " x " << sizeof(T) << " skew "
                            << skew;
  }
}

TEST(AlgoLl, PayloadsOfEverySizeArriveIntactAndNothingPastTheCount) {
  for (uint64_t n : {1u, 2u, 3u, 7u, 8u, 9u, 63u, 257u}) {
    for (size_t skew : {0u, 1u, 3u, 8u}) {
      roundTrip<uint8_t>(n, skew, n * 16 + skew);
      roundTrip<uint16_t>(n, skew & ~size_t{1}, 1000 + n * 16 + skew);
      roundTrip<uint32_t>(n, skew & ~size_t{3}, 2000 + n * 16 + skew);
      roundTrip<uint64_t>(n, skew & ~size_t{7}, 3000 + n * 16 + skew);
    }
  }
}

TEST(AlgoLl, LineNeedsTheFlagInBothWords) {
  std::vector<LlLine> lines(1);
  TestIo::write(&lines[0], 0x1122334455667788ULL, llFlag(6));
  lines[0].word[1] = (lines[0].word[1] & 0xffffffffULL) | (uint64_t{llFlag(6 - 8)} << 32);
  uint64_t out = 0;
  CollOp<uint64_t, kFnCopy> op{};
  const LlSendTo none{nullptr, nullptr, 0, 0};
  EXPECT_EQ(kLlAborted, (llLines<TestIo, uint64_t>(kWait, op, nullptr, lines.data(), llFlag(6),
                                                   none, &out, 1, false, 0, 1)));
  EXPECT_EQ(0u, out) << "a half-written line was consumed";
}

TEST(AlgoLl, ReceivedValuesCombineWithLocalOnes) {
  auto r = rng(7);
  const uint64_t n = 37;
  std::vector<int32_t> peer(n), mine(n), out(n, -1);
  for (uint64_t i = 0; i < n; ++i) {
    peer[i] = static_cast<int32_t>(r.below(1u << 30)) - (1 << 29);
    mine[i] = static_cast<int32_t>(r.below(1u << 30)) - (1 << 29);
  }
  std::vector<LlLine> lines(n);
  CollOp<int32_t, kFnCopy> copy{};
  const LlSendTo to{lines.data(), nullptr, 0, llFlag(3)};
  ASSERT_EQ(kLlOk, (llLines<TestIo, int32_t>(kWait, copy, peer.data(), nullptr, 0, to, nullptr, n,
                                             false, 0, 1)));
  CollOp<int32_t, kFnSum> sum{0, 2, false};
  const LlSendTo none{nullptr, nullptr, 0, 0};
  ASSERT_EQ(kLlOk, (llLines<TestIo, int32_t>(kWait, sum, mine.data(), lines.data(), llFlag(3), none,
                                             out.data(), n, true, 0, 1)));
  for (uint64_t i = 0; i < n; ++i) {
    const int32_t want =
        static_cast<int32_t>(static_cast<uint32_t>(mine[i]) + static_cast<uint32_t>(peer[i]));
    ASSERT_EQ(want, out[i]) << "element " << i;
  }
}

TEST(AlgoLl, OnlyThreadsWithLinesToWriteWaitForTheHead) {
  std::vector<uint8_t> in(16, 1);
  std::vector<LlLine> lines(2);
  const uint64_t head = 5;
  CollOp<uint8_t, kFnCopy> op{};
  const LlSendTo to{lines.data(), &head, 5, llFlag(12)};
  TestIo::headWaits = 0;
  // 16 bytes = 2 lines; "threads" 0 and 1 of 4 write, 2 and 3 have none.
  for (uint64_t t = 0; t < 4; ++t) {
    ASSERT_EQ(kLlOk, (llLines<TestIo, uint8_t>(kWait, op, in.data(), nullptr, 0, to, nullptr, 16,
                                               false, t, 4)));
  }
  EXPECT_EQ(2, TestIo::headWaits);
  const LlSendTo blocked{lines.data(), &head, 6, llFlag(12)};
  EXPECT_EQ(kLlAborted, (llLines<TestIo, uint8_t>(kWait, op, in.data(), nullptr, 0, blocked,
                                                  nullptr, 16, false, 0, 4)));
}

TEST(AlgoLl, SliceIsHalfTheSlotInAlignedUnits) {
  EXPECT_EQ(16384u, llSliceElts(32768, 1));
  EXPECT_EQ(4096u, llSliceElts(32768, 4));
  EXPECT_EQ(512u, llSliceElts(1024, 1));
  EXPECT_EQ(0u, llFlag(0xffffffffULL));  // wraps after 2^32 steps (documented)
  EXPECT_EQ(1u, llFlag(0));
}

}  // namespace
}  // namespace ferry::algo
