// ferry-bench --rounds: the option's parsing, and medianOfRounds, which
// folds several runs of one library into one result per row (the round of
// median time, worst wrong count, failures kept).
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "ferry_bench/args.h"
#include "ferry_bench/results.h"

namespace ferry::bench {
namespace {

bool parse(std::vector<const char*> args, Options* o, std::string* error) {
  args.insert(args.begin(), "ferry-bench");
  return parseArgs(static_cast<int>(args.size()), args.data(), o, error);
}

// A run with one op and rows at 1K and 2K: out-of-place times t1, t2.
RunResult run(double t1, double t2, int64_t wrong = 0) {
  RunResult r;
  r.lib = "lib";
  r.wrongTotal = wrong;
  OpResult op;
  op.kind = OpKind::SendRecv;
  for (auto [bytes, t] : {std::pair<size_t, double>{1024, t1}, {2048, t2}}) {
    SizeRow row;
    row.bytes = bytes;
    row.oop = Measure{true, t, bytes / t / 1e3, bytes / t / 1e3, wrong};
    op.rows.push_back(row);
  }
  r.ops.push_back(op);
  return r;
}

TEST(BenchRounds, Option) {
  Options o;
  std::string error;
  ASSERT_TRUE(parse({"sendrecv", "--compare", "/b", "--rounds", "5"}, &o, &error)) << error;
  EXPECT_EQ(o.rounds, 5);
  Options d;
  ASSERT_TRUE(parse({"sendrecv"}, &d, &error));
  EXPECT_EQ(d.rounds, 1);
  for (auto bad : std::vector<std::vector<const char*>>{
           {"sendrecv", "--compare", "/b", "--rounds", "0"},
           {"sendrecv", "--compare", "/b", "--rounds", "100"},
           {"sendrecv", "--rounds", "3"},  // nothing to alternate with
       }) {
    Options x;
    EXPECT_FALSE(parse(bad, &x, &error)) << bad.back();
  }
}

TEST(BenchRounds, EachRowTakesItsMedianRound) {
  // Row 1K: times 30, 10, 20 -> 20 (round 2); row 2K: 5, 50, 40 -> 40.
  const RunResult m = medianOfRounds({run(30, 5), run(10, 50), run(20, 40)});
  ASSERT_EQ(m.ops.size(), 1u);
  ASSERT_EQ(m.ops[0].rows.size(), 2u);
  EXPECT_DOUBLE_EQ(m.ops[0].rows[0].oop.timeUs, 20);
  EXPECT_DOUBLE_EQ(m.ops[0].rows[0].oop.busBw, 1024 / 20.0 / 1e3) << "bandwidth of that round";
  EXPECT_DOUBLE_EQ(m.ops[0].rows[1].oop.timeUs, 40);
  // Even counts take the lower middle.
  EXPECT_DOUBLE_EQ(medianOfRounds({run(30, 5), run(10, 50)}).ops[0].rows[0].oop.timeUs, 10);
}

TEST(BenchRounds, WrongResultsAndFailuresAreNeverOutvoted) {
  RunResult bad = run(10, 10, 3);
  RunResult failed = run(20, 20);
  failed.ops[0].failed = true;
  failed.ops[0].error = "boom";
  failed.ops[0].rows.pop_back();  // it stopped before 2K
  const RunResult m = medianOfRounds({run(30, 30), bad, failed});
  EXPECT_EQ(m.wrongTotal, 3);
  EXPECT_EQ(m.ops[0].rows[0].oop.wrong, 3);
  EXPECT_TRUE(m.ops[0].failed);
  EXPECT_EQ(m.ops[0].error, "boom");
  // The 2K row: rounds 1 and 2 only (10, 30 -> 10).
  EXPECT_DOUBLE_EQ(m.ops[0].rows[1].oop.timeUs, 10);
}

// A run whose 1K row carries an overlap measure: each rank's slowdown, the
// row's own (the worst rank's) as gemmTflopsUnder.
RunResult overlapRun(std::vector<double> ranks, double aloneTflops = 700) {
  RunResult r = run(10, 10);
  OverlapMeasure& o = r.ops[0].rows[0].overlap;
  o.ran = true;
  o.gemmTflopsAlone = aloneTflops;
  double worst = 0;
  for (double x : ranks) worst = std::max(worst, x);
  o.gemmTflopsUnder = aloneTflops / worst;
  o.busBwUnderGemm = 100 * worst;
  o.rankSlowdowns = std::move(ranks);
  return r;
}

double slowdownOf(const OverlapMeasure& o) {
  return o.gemmTflopsAlone / o.gemmTflopsUnder;
}

TEST(BenchRounds, OverlapTakesEachRanksMedianThenTheWorst) {
  // Round worsts 1.05, 1.04, 1.01 (their median: 1.04); per rank the
  // medians are 1.01 and 1.01: the luckier rank's noise no longer counts.
  const RunResult m = medianOfRounds(
      {overlapRun({1.00, 1.05}), overlapRun({1.04, 1.00}), overlapRun({1.01, 1.01})});
  const OverlapMeasure& o = m.ops[0].rows[0].overlap;
  ASSERT_TRUE(o.ran);
  EXPECT_NEAR(slowdownOf(o), 1.01, 1e-12);
  ASSERT_EQ(o.rankSlowdowns.size(), 2u);
  EXPECT_DOUBLE_EQ(o.rankSlowdowns[0], 1.01);
  EXPECT_DOUBLE_EQ(o.rankSlowdowns[1], 1.01);
  // One rank worse in every round stays the worst.
  const RunResult w = medianOfRounds(
      {overlapRun({1.00, 1.06}), overlapRun({1.02, 1.08}), overlapRun({1.01, 1.07})});
  EXPECT_NEAR(slowdownOf(w.ops[0].rows[0].overlap), 1.07, 1e-12);
  // A rank without a GEMM (0) is skipped, not counted as a slowdown.
  const RunResult z = medianOfRounds({overlapRun({1.03, 0}), overlapRun({1.05, 0})});
  EXPECT_NEAR(slowdownOf(z.ops[0].rows[0].overlap), 1.03, 1e-12);
  EXPECT_DOUBLE_EQ(z.ops[0].rows[0].overlap.rankSlowdowns[1], 0);
}

TEST(BenchRounds, OverlapWithoutEveryRankKeepsTheMedianRound) {
  // Rounds that disagree on the rank count: the round of median worst.
  const RunResult m =
      medianOfRounds({overlapRun({1.00, 1.05}), overlapRun({1.04}), overlapRun({1.01, 1.02})});
  EXPECT_NEAR(slowdownOf(m.ops[0].rows[0].overlap), 1.04, 1e-12);
}

TEST(BenchRounds, OverlapRanksSurviveTheChildsSerialization) {
  const RunResult r = overlapRun({1.012, 1.051, 0});
  RunResult back;
  std::string error;
  ASSERT_TRUE(parseResult(serializeResult(r), &back, &error)) << error;
  const OverlapMeasure& o = back.ops[0].rows[0].overlap;
  ASSERT_EQ(o.rankSlowdowns.size(), 3u);
  EXPECT_DOUBLE_EQ(o.rankSlowdowns[0], 1.012);
  EXPECT_DOUBLE_EQ(o.rankSlowdowns[1], 1.051);
  EXPECT_DOUBLE_EQ(o.rankSlowdowns[2], 0);
  EXPECT_DOUBLE_EQ(o.gemmTflopsUnder, r.ops[0].rows[0].overlap.gemmTflopsUnder);
  // A row that names more values than it carries is an error.
  std::string text = serializeResult(r);
  const size_t at = text.find(" 3 1.012");
  ASSERT_NE(at, std::string::npos) << text;
  text.replace(at, 2, " 4");
  EXPECT_FALSE(parseResult(text, &back, &error));
}

}  // namespace
}  // namespace ferry::bench
