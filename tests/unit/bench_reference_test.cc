// ferry-bench's op table and host references (bench/ferry_bench/ops.h,
// element.h, results.h): hand-computed cases for 2-4 ranks, the element
// codecs, the exactness of the generated reduction data, and the checker.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <map>
#include <vector>

#include "common/random.h"
#include "ferry_bench/element.h"
#include "ferry_bench/ops.h"
#include "ferry_bench/results.h"

namespace ferry::bench {
namespace {

// Inputs given as a table: rank -> values (stored in `type`).
InputFn tableInput(const std::vector<std::vector<double>>& table, ncclDataType_t type) {
  return [table, type](int rank, size_t i) { return doubleToBits(table.at(rank).at(i), type); };
}

std::vector<double> expectedOf(const OpCase& op, size_t bytes, int rank, const InputFn& in,
                               bool* checked) {
  const size_t es = typeSize(op.type);
  const Shape s = shapeFor(op.kind, bytes, es, op.nranks, rank);
  std::vector<char> buf(s.recvCount * es);
  *checked = buildExpected(op, s, rank, in, buf.data());
  std::vector<double> out;
  for (size_t i = 0; *checked && i < s.recvCount; ++i) {
    out.push_back(bitsToDouble(loadBits(buf.data(), i, es), op.type));
  }
  return out;
}

std::vector<double> expectedOf(const OpCase& op, size_t bytes, int rank, const InputFn& in) {
  bool checked = false;
  std::vector<double> out = expectedOf(op, bytes, rank, in, &checked);
  EXPECT_TRUE(checked);
  return out;
}

using V = std::vector<double>;

TEST(BenchReference, BusFactors) {
  EXPECT_DOUBLE_EQ(busFactor(OpKind::AllReduce, 4), 1.5);
  EXPECT_DOUBLE_EQ(busFactor(OpKind::AllGather, 4), 0.75);
  EXPECT_DOUBLE_EQ(busFactor(OpKind::ReduceScatter, 2), 0.5);
  EXPECT_DOUBLE_EQ(busFactor(OpKind::AlltoAll, 8), 0.875);
  EXPECT_DOUBLE_EQ(busFactor(OpKind::Gather, 4), 0.75);
  EXPECT_DOUBLE_EQ(busFactor(OpKind::Scatter, 4), 0.75);
  EXPECT_DOUBLE_EQ(busFactor(OpKind::Broadcast, 4), 1);
  EXPECT_DOUBLE_EQ(busFactor(OpKind::Reduce, 4), 1);
  EXPECT_DOUBLE_EQ(busFactor(OpKind::SendRecv, 4), 1);
  EXPECT_DOUBLE_EQ(busFactor(OpKind::AllReduce, 1), 0);
}

TEST(BenchReference, Shapes) {
  // 4 ranks, 100 bytes of float: 25 elements, 6 per rank for the split ops.
  Shape s = shapeFor(OpKind::AllGather, 100, 4, 4, 2);
  EXPECT_EQ(s.count, 24u);
  EXPECT_EQ(s.paramCount, 6u);
  EXPECT_EQ(s.sendCount, 6u);
  EXPECT_EQ(s.recvCount, 24u);
  EXPECT_EQ(s.sendInplaceOffset, 12u);
  EXPECT_EQ(s.bytes, 96u);
  s = shapeFor(OpKind::ReduceScatter, 100, 4, 4, 3);
  EXPECT_EQ(s.sendCount, 24u);
  EXPECT_EQ(s.recvCount, 6u);
  EXPECT_EQ(s.recvInplaceOffset, 18u);
  s = shapeFor(OpKind::AlltoAll, 100, 4, 4, 1);
  EXPECT_EQ(s.paramCount, 6u);
  EXPECT_EQ(s.sendCount, 24u);
  EXPECT_EQ(s.recvCount, 24u);
  s = shapeFor(OpKind::AllReduce, 100, 4, 4, 1);
  EXPECT_EQ(s.count, 25u);
  EXPECT_EQ(s.paramCount, 25u);
  EXPECT_EQ(s.bytes, 100u);
  s = shapeFor(OpKind::Scatter, 64, 8, 2, 1);
  EXPECT_EQ(s.paramCount, 4u);
  EXPECT_EQ(s.sendCount, 8u);
  EXPECT_EQ(s.recvInplaceOffset, 4u);
  s = shapeFor(OpKind::Gather, 8, 4, 4, 0);  // fewer elements than ranks
  EXPECT_EQ(s.paramCount, 0u);
}

TEST(BenchReference, AllReduceThreeRanks) {
  const InputFn in = tableInput({{1, 2, 3}, {10, 20, 30}, {-5, 0, 7}}, ncclInt32);
  OpCase op{OpKind::AllReduce, ncclInt32, ncclSum, 0, 3};
  EXPECT_EQ(expectedOf(op, 12, 1, in), (V{6, 22, 40}));
  op.redop = ncclProd;
  EXPECT_EQ(expectedOf(op, 12, 2, in), (V{-50, 0, 630}));
  op.redop = ncclMax;
  EXPECT_EQ(expectedOf(op, 12, 0, in), (V{10, 20, 30}));
  op.redop = ncclMin;
  EXPECT_EQ(expectedOf(op, 12, 0, in), (V{-5, 0, 3}));
  op.redop = ncclAvg;  // sum / 3, truncated
  EXPECT_EQ(expectedOf(op, 12, 0, in), (V{2, 7, 13}));
}

TEST(BenchReference, IntegerWidthsWrapAndSign) {
  const InputFn in = tableInput({{100, -3}, {100, -4}}, ncclInt8);
  OpCase op{OpKind::AllReduce, ncclInt8, ncclSum, 0, 2};
  EXPECT_EQ(expectedOf(op, 2, 0, in), (V{-56, -7}));  // 200 wraps to -56
  op.redop = ncclMax;
  EXPECT_EQ(expectedOf(op, 2, 0, in), (V{100, -3}));
  const InputFn u = tableInput({{250, 7}, {10, 200}}, ncclUint8);
  OpCase uop{OpKind::AllReduce, ncclUint8, ncclSum, 0, 2};
  EXPECT_EQ(expectedOf(uop, 2, 1, u), (V{4, 207}));
  uop.redop = ncclMin;
  EXPECT_EQ(expectedOf(uop, 2, 1, u), (V{10, 7}));
  uop.redop = ncclAvg;
  const InputFn u2 = tableInput({{3, 8}, {4, 200}}, ncclUint8);
  EXPECT_EQ(expectedOf(uop, 2, 1, u2), (V{3, 104}));
}

TEST(BenchReference, FloatReductions) {
  const InputFn in = tableInput({{1.5, -2}, {0.25, 8}}, ncclFloat16);
  OpCase op{OpKind::AllReduce, ncclFloat16, ncclSum, 0, 2};
  EXPECT_EQ(expectedOf(op, 4, 0, in), (V{1.75, 6}));
  op.redop = ncclAvg;
  EXPECT_EQ(expectedOf(op, 4, 0, in), (V{0.875, 3}));
  op.type = ncclFloat8e4m3;
  const InputFn f8 = tableInput({{2, 3}, {3, 4}}, ncclFloat8e4m3);
  op.redop = ncclProd;
  EXPECT_EQ(expectedOf(op, 2, 1, f8), (V{6, 12}));
}

TEST(BenchReference, AllGatherTwoRanks) {
  const InputFn in = tableInput({{1, 2}, {3, 4}}, ncclFloat32);
  const OpCase op{OpKind::AllGather, ncclFloat32, ncclSum, 0, 2};
  EXPECT_EQ(expectedOf(op, 16, 0, in), (V{1, 2, 3, 4}));
  EXPECT_EQ(expectedOf(op, 16, 1, in), (V{1, 2, 3, 4}));
}

TEST(BenchReference, ReduceScatterTwoRanks) {
  const InputFn in = tableInput({{1, 2, 3, 4}, {10, 20, 30, 40}}, ncclFloat64);
  const OpCase op{OpKind::ReduceScatter, ncclFloat64, ncclSum, 0, 2};
  EXPECT_EQ(expectedOf(op, 32, 0, in), (V{11, 22}));
  EXPECT_EQ(expectedOf(op, 32, 1, in), (V{33, 44}));
}

TEST(BenchReference, AlltoAllThreeRanks) {
  // Rank r sends element j (block j) = 10 r + j to rank j.
  const InputFn in = tableInput({{0, 1, 2}, {10, 11, 12}, {20, 21, 22}}, ncclInt64);
  const OpCase op{OpKind::AlltoAll, ncclInt64, ncclSum, 0, 3};
  EXPECT_EQ(expectedOf(op, 24, 0, in), (V{0, 10, 20}));
  EXPECT_EQ(expectedOf(op, 24, 1, in), (V{1, 11, 21}));
  EXPECT_EQ(expectedOf(op, 24, 2, in), (V{2, 12, 22}));
}

TEST(BenchReference, SendRecvFourRanks) {
  const InputFn in = tableInput({{1}, {2}, {3}, {4}}, ncclUint32);
  const OpCase op{OpKind::SendRecv, ncclUint32, ncclSum, 0, 4};
  EXPECT_EQ(expectedOf(op, 4, 0, in), (V{4}));  // from rank 3
  EXPECT_EQ(expectedOf(op, 4, 2, in), (V{2}));  // from rank 1
}

TEST(BenchReference, RootedOps) {
  const InputFn in =
      tableInput({{1, 2, 3, 4, 5, 6}, {7, 8, 9, 10, 11, 12}, {13, 14, 15, 16, 17, 18}}, ncclInt32);
  OpCase op{OpKind::Broadcast, ncclInt32, ncclSum, 1, 3};
  EXPECT_EQ(expectedOf(op, 24, 2, in), (V{7, 8, 9, 10, 11, 12}));
  op.kind = OpKind::Reduce;
  op.root = 2;
  EXPECT_EQ(expectedOf(op, 24, 2, in), (V{21, 24, 27, 30, 33, 36}));
  bool checked = true;
  expectedOf(op, 24, 0, in, &checked);
  EXPECT_FALSE(checked);  // a non-root's receive buffer is undefined
  op.kind = OpKind::Gather;
  op.root = 0;
  EXPECT_EQ(expectedOf(op, 24, 0, in), (V{1, 2, 7, 8, 13, 14}));
  expectedOf(op, 24, 1, in, &checked);
  EXPECT_FALSE(checked);
  op.kind = OpKind::Scatter;
  op.root = 2;
  EXPECT_EQ(expectedOf(op, 24, 0, in), (V{13, 14}));
  EXPECT_EQ(expectedOf(op, 24, 1, in), (V{15, 16}));
  EXPECT_EQ(expectedOf(op, 24, 2, in), (V{17, 18}));
}

TEST(BenchReference, Codecs) {
  EXPECT_EQ(doubleToBits(1.0, ncclFloat16), 0x3c00u);
  EXPECT_EQ(doubleToBits(-2.0, ncclFloat16), 0xc000u);
  EXPECT_EQ(doubleToBits(65504.0, ncclFloat16), 0x7bffu);
  EXPECT_EQ(doubleToBits(1e6, ncclFloat16), 0x7c00u);  // overflow: inf
  EXPECT_EQ(doubleToBits(std::ldexp(1.0, -24), ncclFloat16), 0x0001u);
  EXPECT_EQ(doubleToBits(1 + std::ldexp(1.0, -11), ncclFloat16), 0x3c00u);  // tie to even
  EXPECT_EQ(doubleToBits(1 + 3 * std::ldexp(1.0, -11), ncclFloat16), 0x3c02u);
  EXPECT_EQ(doubleToBits(1.0, ncclBfloat16), 0x3f80u);
  EXPECT_EQ(doubleToBits(-0.5, ncclBfloat16), 0xbf00u);
  EXPECT_EQ(doubleToBits(1.0, ncclFloat8e4m3), 0x38u);
  EXPECT_EQ(doubleToBits(448.0, ncclFloat8e4m3), 0x7eu);
  EXPECT_EQ(doubleToBits(1000.0, ncclFloat8e4m3), 0x7eu);  // saturates
  EXPECT_EQ(doubleToBits(std::ldexp(1.0, -9), ncclFloat8e4m3), 0x01u);
  EXPECT_EQ(doubleToBits(1.0, ncclFloat8e5m2), 0x3cu);
  EXPECT_EQ(doubleToBits(57344.0, ncclFloat8e5m2), 0x7bu);
  EXPECT_TRUE(std::isnan(bitsToDouble(0x7f, ncclFloat8e4m3)));
  EXPECT_TRUE(std::isinf(bitsToDouble(0x7c, ncclFloat8e5m2)));
  EXPECT_EQ(bitsToDouble(0xc000, ncclFloat16), -2.0);
  EXPECT_EQ(bitsToDouble(0xff, ncclUint8), 255.0);
  EXPECT_EQ(bitsToDouble(0xff, ncclInt8), -1.0);
  EXPECT_EQ(doubleToBits(-1, ncclInt32), 0xffffffffu);
  // Every finite value of each narrow type round-trips.
  for (uint64_t b = 0; b < 65536; ++b) {
    for (ncclDataType_t t : {ncclFloat16, ncclBfloat16}) {
      const double v = bitsToDouble(b, t);
      if (std::isfinite(v) && v != 0) {
        ASSERT_EQ(doubleToBits(v, t), b) << typeName(t) << " " << b;
        // Cross-check against the test library's independent codecs.
        ASSERT_EQ(v, t == ncclFloat16 ? test::halfToDouble(b) : test::bf16ToDouble(b));
      }
    }
    if (b < 256) {
      for (ncclDataType_t t : {ncclFloat8e4m3, ncclFloat8e5m2}) {
        const double v = bitsToDouble(b, t);
        if (std::isfinite(v) && v != 0) {
          ASSERT_EQ(doubleToBits(v, t), b) << typeName(t) << " " << b;
          ASSERT_EQ(v, t == ncclFloat8e4m3 ? test::fp8e4m3ToDouble(b) : test::fp8e5m2ToDouble(b));
        }
      }
    }
  }
}

TEST(BenchReference, SanitizeAndPoison) {
  for (ncclDataType_t t :
       {ncclFloat16, ncclBfloat16, ncclFloat32, ncclFloat64, ncclFloat8e4m3, ncclFloat8e5m2}) {
    EXPECT_TRUE(std::isnan(bitsToDouble(poisonBits(t), t))) << typeName(t);
    for (uint64_t bits : {0x7c00ull, 0xffffull, 0x7f800000ull, 0x7ff0000000000000ull, 0x7full,
                          0xffull, 0x7cull, ~0ull}) {
      EXPECT_TRUE(std::isfinite(bitsToDouble(sanitizeBits(bits, t), t))) << typeName(t) << bits;
    }
  }
  EXPECT_EQ(poisonBits(ncclInt32), 0xa5a5a5a5u);
}

// The generated reduction inputs make every reduction exact, in every type,
// for up to 8 ranks: the reference equals the exact result computed in double.
TEST(BenchReference, GeneratedReductionDataIsExact) {
  const uint64_t seed = test::testSeed();
  for (int t = 0; t < ncclNumTypes; ++t) {
    for (int r = 0; r < ncclNumOps; ++r) {
      if (r == ncclAvg) continue;
      for (int n : {2, 3, 8}) {
        const auto type = static_cast<ncclDataType_t>(t);
        const OpCase op{OpKind::AllReduce, type, static_cast<ncclRedOp_t>(r), 0, n};
        const DataGen gen = makeDataGen(op, seed);
        const InputFn in = [&](int rank, size_t i) { return inputBits(gen, rank, i); };
        std::map<double, int> distinct;
        for (size_t i = 0; i < 200; ++i) {
          double exact = bitsToDouble(in(0, i), type);
          distinct[exact]++;
          for (int k = 1; k < n; ++k) {
            const double v = bitsToDouble(in(k, i), type);
            if (r == ncclSum) exact += v;
            if (r == ncclProd) exact *= v;
            if (r == ncclMax) exact = std::max(exact, v);
            if (r == ncclMin) exact = std::min(exact, v);
          }
          ASSERT_EQ(bitsToDouble(reduceElement(op, in, i), type), exact)
              << typeName(type) << " " << redOpName(op.redop) << " n=" << n << " i=" << i;
        }
        EXPECT_GE(distinct.size(), 2u) << "trivial data for " << typeName(type);
      }
    }
  }
}

TEST(BenchReference, FreshDataPerSeedAndRank) {
  const OpCase op{OpKind::AllGather, ncclInt32, ncclSum, 0, 2};
  const DataGen a = makeDataGen(op, 1), b = makeDataGen(op, 2);
  int sameSeed = 0, sameRank = 0;
  for (size_t i = 0; i < 64; ++i) {
    sameSeed += inputBits(a, 0, i) == inputBits(b, 0, i);
    sameRank += inputBits(a, 0, i) == inputBits(a, 1, i);
  }
  EXPECT_LT(sameSeed, 4);
  EXPECT_LT(sameRank, 4);
}

TEST(BenchReference, CheckerCatchesPoisonAndTolerates) {
  const OpCase op{OpKind::AllReduce, ncclFloat32, ncclAvg, 0, 4};
  const DataGen gen = makeDataGen(op, 5);
  const Tolerance tol = toleranceFor(op, gen);
  EXPECT_FALSE(tol.bitwise);
  EXPECT_GT(tol.absTol, 0);
  std::vector<float> want = {1.25f, -3.5f, 2.0f}, got = want;
  EXPECT_EQ(countWrong(got.data(), want.data(), 3, ncclFloat32, tol), 0u);
  got[1] = -3.5f + 1e-6f;  // within tolerance
  EXPECT_EQ(countWrong(got.data(), want.data(), 3, ncclFloat32, tol), 0u);
  uint32_t poison = static_cast<uint32_t>(poisonBits(ncclFloat32));
  memcpy(&got[2], &poison, 4);
  size_t first = 99;
  EXPECT_EQ(countWrong(got.data(), want.data(), 3, ncclFloat32, tol, &first), 1u);
  EXPECT_EQ(first, 2u);
  // Data movement compares bits.
  const Tolerance bits = toleranceFor(OpCase{OpKind::Broadcast, ncclFloat32}, gen);
  EXPECT_TRUE(bits.bitwise);
  got = want;
  got[0] = -0.0f, want[0] = 0.0f;
  EXPECT_EQ(countWrong(got.data(), want.data(), 3, ncclFloat32, bits), 1u);
  // Integer avg: either rounding of the quotient passes, nothing more.
  const Tolerance iavg = toleranceFor(OpCase{OpKind::AllReduce, ncclInt32, ncclAvg, 0, 3}, gen);
  std::vector<int32_t> iw = {7, -7}, ig = {8, -6};
  EXPECT_EQ(countWrong(ig.data(), iw.data(), 2, ncclInt32, iavg), 0u);
  ig = {9, -7};
  EXPECT_EQ(countWrong(ig.data(), iw.data(), 2, ncclInt32, iavg), 1u);
}

TEST(BenchReference, ResultFileRoundTrip) {
  RunResult r;
  r.lib = "/path/with space/libnccl.so.2";
  r.version = 22809;
  r.nranks = 4;
  r.runtime = "host";
  r.type = "float";
  r.redop = "sum";
  r.wrongTotal = 3;
  OpResult op;
  op.kind = OpKind::Scatter;
  op.root = 1;
  SizeRow row;
  row.bytes = 1024;
  row.count = 256;
  row.oop = {true, 12.5, 0.08192, 0.06144, 0};
  row.ip = {true, 13.25, 0.07, 0.05, 3};
  row.overlap = {true, 700.5, 650.25, 1.5};
  op.rows = {row, row};
  OpResult unsupported;
  unsupported.kind = OpKind::AllReduce;
  unsupported.supported = false;
  unsupported.error = "invalid usage: not\nimplemented";
  r.ops = {op, unsupported};
  RunResult back;
  std::string error;
  ASSERT_TRUE(parseResult(serializeResult(r), &back, &error)) << error;
  EXPECT_EQ(back.lib, r.lib);
  EXPECT_EQ(back.version, 22809);
  EXPECT_EQ(back.wrongTotal, 3);
  ASSERT_EQ(back.ops.size(), 2u);
  EXPECT_EQ(back.ops[0].kind, OpKind::Scatter);
  EXPECT_EQ(back.ops[0].root, 1);
  ASSERT_EQ(back.ops[0].rows.size(), 2u);
  EXPECT_DOUBLE_EQ(back.ops[0].rows[1].ip.timeUs, 13.25);
  EXPECT_EQ(back.ops[0].rows[1].ip.wrong, 3);
  EXPECT_DOUBLE_EQ(back.ops[0].rows[0].overlap.gemmTflopsUnder, 650.25);
  EXPECT_FALSE(back.ops[1].supported);
  EXPECT_EQ(back.ops[1].error, "invalid usage: not implemented");
  std::string text = serializeResult(r);
  text.resize(text.size() - 4);  // drop the end line
  EXPECT_FALSE(parseResult(text, &back, &error));
  EXPECT_FALSE(parseResult("row 1 2\n", &back, &error));
}

}  // namespace
}  // namespace ferry::bench
