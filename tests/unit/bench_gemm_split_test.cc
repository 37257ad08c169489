// ferry-bench --overlap's reading of a GEMM train (ferry_bench/gemm_split.h):
// which GEMMs count as beside the traffic, which as alone, which as neither.
#include <gtest/gtest.h>

#include <random>
#include <utility>
#include <vector>

#include "ferry_bench/gemm_split.h"

namespace ferry::bench {
namespace {

// A train of GEMMs with the given durations from t = 0.
std::vector<double> train(const std::vector<double>& durations) {
  std::vector<double> at = {0};
  for (double d : durations) at.push_back(at.back() + d);
  return at;
}

TEST(BenchGemmSplit, WhollyInsideAndOutsideOnly) {
  // GEMMs: [0,1) warm, [1,2) [2,3) alone, [3,5) straddles 4, [5,7) [7,9)
  // beside, [9,11) straddles 10, [11,12) [12,13) alone.
  const std::vector<double> at = train({1, 1, 1, 2, 2, 2, 2, 1, 1});
  const GemmSplit s = splitGemms(at, 1, 4.0, 10.0);
  EXPECT_EQ(s.beside, 2);
  EXPECT_DOUBLE_EQ(s.besideMs, 2.0);
  EXPECT_EQ(s.alone, 4);
  EXPECT_DOUBLE_EQ(s.aloneMs, 1.0);
}

TEST(BenchGemmSplit, WarmUpNeverCounts) {
  // The warm-up GEMMs are slow (a cold GPU in this made-up train); counting
  // them as alone would make everything beside look fast.
  const std::vector<double> at = train({5, 5, 1, 1, 1, 1});
  const GemmSplit s = splitGemms(at, 2, 12.0, 14.0);
  EXPECT_EQ(s.beside, 2);  // [12,13) [13,14)
  EXPECT_EQ(s.alone, 2);   // [10,11) [11,12); [0,5) [5,10) are the warm-up
  EXPECT_DOUBLE_EQ(s.aloneMs, 1.0);
}

TEST(BenchGemmSplit, TrafficShorterThanOneGemmCountsWhatItTouches) {
  const std::vector<double> at = train({1, 3, 3, 3});  // [0,1) [1,4) [4,7) [7,10)
  const GemmSplit s = splitGemms(at, 1, 4.5, 5.0);
  EXPECT_EQ(s.beside, 1);  // [4,7) holds the whole span
  EXPECT_DOUBLE_EQ(s.besideMs, 3.0);
  EXPECT_EQ(s.alone, 2);
}

TEST(BenchGemmSplit, MeansMatchAnIndependentCount) {
  // Random durations and span: the split's means against a direct sum.
  std::mt19937 rng(std::random_device{}());
  std::uniform_real_distribution<double> dur(0.5, 1.5);
  for (int trial = 0; trial < 50; ++trial) {
    std::vector<double> d(200);
    for (double& x : d) x = dur(rng);
    const std::vector<double> at = train(d);
    std::uniform_real_distribution<double> pick(at[20], at[150]);
    double from = pick(rng), to = pick(rng);
    if (from > to) std::swap(from, to);
    to += 5;  // several GEMMs wide
    double in = 0, out = 0;
    int nIn = 0, nOut = 0;
    for (size_t k = 10; k < d.size(); ++k) {
      const double start = at[k], end = start + d[k];
      if (start >= from && end <= to) in += d[k], ++nIn;
      if (end <= from || start >= to) out += d[k], ++nOut;
    }
    const GemmSplit s = splitGemms(at, 10, from, to);
    ASSERT_EQ(s.beside, nIn);
    ASSERT_EQ(s.alone, nOut);
    ASSERT_NEAR(s.besideMs, in / nIn, 1e-9);
    ASSERT_NEAR(s.aloneMs, out / nOut, 1e-9);
  }
}

}  // namespace
}  // namespace ferry::bench
