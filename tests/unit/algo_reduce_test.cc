// src/algo/reduce_ops.h against references computed independently: doubles
// and tests/common's own narrow-float encoders (random.h). Fresh random data
// every run; the seed is printed (reproduce with FERRY_TEST_SEED).
//
// Why the comparisons are exact even for floats: each combine rounds once
// from float (or double), and float has >= 2p+2 bits for every narrow type p,
// so rounding through float equals rounding the exact double result directly.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "algo/reduce_ops.h"
#include "common/random.h"
#include "nccl.h"

namespace ferry::algo {
namespace {

using test::dataTypeName;
using test::dataTypeSize;
using test::isFloatType;
using test::isSignedType;
using test::loadElement;
using test::Rng;
using test::storeElement;

const ncclDataType_t kAllTypes[] = {ncclInt8,    ncclUint8,    ncclInt32,      ncclUint32,
                                    ncclInt64,   ncclUint64,   ncclFloat16,    ncclFloat32,
                                    ncclFloat64, ncclBfloat16, ncclFloat8e4m3, ncclFloat8e5m2};
const ncclDataType_t kFloatTypes[] = {ncclFloat16,  ncclFloat32,    ncclFloat64,
                                      ncclBfloat16, ncclFloat8e4m3, ncclFloat8e5m2};

Rng makeRng(uint64_t stream) {
  return Rng(test::testSeed(), stream);
}

TEST(AlgoReduce, EnumsMatchPublicHeader) {
  EXPECT_EQ(kInt8, ncclInt8);
  EXPECT_EQ(kUint8, ncclUint8);
  EXPECT_EQ(kInt32, ncclInt32);
  EXPECT_EQ(kUint32, ncclUint32);
  EXPECT_EQ(kInt64, ncclInt64);
  EXPECT_EQ(kUint64, ncclUint64);
  EXPECT_EQ(kFloat16, ncclFloat16);
  EXPECT_EQ(kFloat32, ncclFloat32);
  EXPECT_EQ(kFloat64, ncclFloat64);
  EXPECT_EQ(kBfloat16, ncclBfloat16);
  EXPECT_EQ(kFloat8e4m3, ncclFloat8e4m3);
  EXPECT_EQ(kFloat8e5m2, ncclFloat8e5m2);
  EXPECT_EQ(kNumDataTypes, ncclNumTypes);
  EXPECT_EQ(kOpSum, ncclSum);
  EXPECT_EQ(kOpProd, ncclProd);
  EXPECT_EQ(kOpMax, ncclMax);
  EXPECT_EQ(kOpMin, ncclMin);
  EXPECT_EQ(kOpAvg, ncclAvg);
}

TEST(AlgoReduce, TypeBytesAndDispatch) {
  for (ncclDataType_t t : kAllTypes) {
    EXPECT_EQ(typeBytes(t), dataTypeSize(t)) << dataTypeName(t);
    size_t seen = 0;
    EXPECT_TRUE(dispatchType(t, [&]<class T>() { seen = sizeof(T); }));
    EXPECT_EQ(seen, dataTypeSize(t)) << dataTypeName(t);
  }
  EXPECT_EQ(typeBytes(-1), 0u);
  EXPECT_EQ(typeBytes(ncclNumTypes), 0u);
  EXPECT_FALSE(dispatchType(ncclNumTypes, [&]<class T>() { FAIL(); }));
  EXPECT_FALSE(dispatchType(-1, [&]<class T>() { FAIL(); }));
}

// ---- conversions ---------------------------------------------------------------

// Bit-exact comparison of decode(bits) against the reference for every pattern
// of a narrow type, and the round trip back (NaN: any NaN).
template <class Dec, class Enc, class RefDec>
void checkAllPatterns(int width, Dec dec, Enc enc, RefDec refDec, const char* name) {
  for (uint32_t b = 0; b < (1u << width); ++b) {
    double want = refDec(b);
    float got = dec(b);
    if (std::isnan(want)) {
      EXPECT_TRUE(std::isnan(got)) << name << " bits " << b;
      EXPECT_TRUE(std::isnan(refDec(enc(got)))) << name << " bits " << b;
      continue;
    }
    ASSERT_EQ(static_cast<double>(got), want) << name << " bits " << b;
    ASSERT_EQ(std::signbit(got), std::signbit(want)) << name << " bits " << b;
    ASSERT_EQ(static_cast<uint32_t>(enc(got)), b) << name << " round trip " << b;
  }
}

TEST(AlgoReduce, NarrowDecodeEveryBitPattern) {
  checkAllPatterns(8, fp8e4m3ToFloat, floatToFp8e4m3, test::fp8e4m3ToDouble, "e4m3");
  checkAllPatterns(8, fp8e5m2ToFloat, floatToFp8e5m2, test::fp8e5m2ToDouble, "e5m2");
  checkAllPatterns(16, halfToFloat, floatToHalf, test::halfToDouble, "half");
  checkAllPatterns(16, bf16ToFloat, floatToBf16, test::bf16ToDouble, "bf16");
}

// Encoding a float must equal the reference's encoding of the same value as a
// double (NaN: both NaN). Inputs: every midpoint and neighbour of consecutive
// patterns (the tie cases), random float bit patterns (all exponents, Inf,
// NaN, subnormals) and random values near the type's range.
template <class Enc, class RefEnc, class RefDec>
void checkEncode(int width, Enc enc, RefEnc refEnc, RefDec refDec, const char* name, Rng& rng) {
  auto check = [&](float x) {
    uint32_t got = enc(x);
    uint32_t want = refEnc(static_cast<double>(x));
    if (std::isnan(x)) {
      ASSERT_TRUE(std::isnan(refDec(got))) << name << " NaN input gave " << got;
      return;
    }
    ASSERT_EQ(got, want) << name << " x=" << x;
  };
  for (uint32_t b = 0; b + 1 < (1u << width); ++b) {
    double lo = refDec(b), hi = refDec(b + 1);
    if (!std::isfinite(lo) || !std::isfinite(hi)) continue;
    float mid = static_cast<float>((lo + hi) / 2);  // exact: few mantissa bits
    check(mid);
    check(std::nextafter(mid, 0.0f));
    check(std::nextafter(mid, INFINITY));
    check(std::nextafter(mid, -INFINITY));
  }
  for (int i = 0; i < 200000; ++i) {
    uint32_t bits = static_cast<uint32_t>(rng.next());
    float x;
    memcpy(&x, &bits, sizeof x);
    check(x);
    double mag = std::ldexp(1.0 + rng.uniform(), static_cast<int>(rng.range(-30, 20)));
    check(static_cast<float>(rng.below(2) ? mag : -mag));
  }
}

TEST(AlgoReduce, NarrowEncodeMatchesReference) {
  Rng rng = makeRng(1);
  checkEncode(8, floatToFp8e4m3, test::doubleToFp8e4m3, test::fp8e4m3ToDouble, "e4m3", rng);
  checkEncode(8, floatToFp8e5m2, test::doubleToFp8e5m2, test::fp8e5m2ToDouble, "e5m2", rng);
  checkEncode(16, floatToHalf, test::doubleToHalf, test::halfToDouble, "half", rng);
  checkEncode(16, floatToBf16, test::doubleToBf16, test::bf16ToDouble, "bf16", rng);
}

TEST(AlgoReduce, NarrowEncodeEdgeCases) {
  // half: largest finite, the overflow tie, Inf, subnormal ties.
  EXPECT_EQ(floatToHalf(65504.0f), 0x7bff);
  EXPECT_EQ(floatToHalf(65519.0f), 0x7bff);
  EXPECT_EQ(floatToHalf(65520.0f), 0x7c00);
  EXPECT_EQ(floatToHalf(-INFINITY), 0xfc00);
  EXPECT_EQ(floatToHalf(std::ldexp(1.0f, -24)), 0x0001);
  EXPECT_EQ(floatToHalf(std::ldexp(1.0f, -25)), 0x0000);   // tie to even (0)
  EXPECT_EQ(floatToHalf(std::ldexp(3.0f, -25)), 0x0002);   // 1.5 quanta: tie to even (2)
  EXPECT_EQ(floatToHalf(-std::ldexp(1.0f, -26)), 0x8000);  // signed zero
  EXPECT_TRUE(std::isnan(halfToFloat(floatToHalf(NAN))));
  // bf16: float max rounds to Inf; NaN stays NaN even with a low payload.
  EXPECT_EQ(floatToBf16(3.4028235e38f), 0x7f80);
  EXPECT_TRUE(std::isnan(bf16ToFloat(floatToBf16(bitsFloat(0x7f800001u)))));
  // e4m3 saturates (no Inf); NaN is 0x7f/0xff.
  EXPECT_EQ(floatToFp8e4m3(448.0f), 0x7e);
  EXPECT_EQ(floatToFp8e4m3(464.0f), 0x7e);
  EXPECT_EQ(floatToFp8e4m3(1e9f), 0x7e);
  EXPECT_EQ(floatToFp8e4m3(INFINITY), 0x7e);
  EXPECT_EQ(floatToFp8e4m3(-INFINITY), 0xfe);
  EXPECT_EQ(floatToFp8e4m3(NAN) & 0x7f, 0x7f);
  EXPECT_TRUE(std::isnan(fp8e4m3ToFloat(0xff)));
  EXPECT_EQ(fp8e4m3ToFloat(0x7e), 448.0f);
  EXPECT_EQ(fp8e4m3ToFloat(0x01), std::ldexp(1.0f, -9));
  // e5m2 behaves like IEEE: overflow is Inf.
  EXPECT_EQ(floatToFp8e5m2(57344.0f), 0x7b);
  EXPECT_EQ(floatToFp8e5m2(61439.0f), 0x7b);
  EXPECT_EQ(floatToFp8e5m2(61440.0f), 0x7c);
  EXPECT_EQ(floatToFp8e5m2(-1e9f), 0xfc);
  EXPECT_TRUE(std::isnan(fp8e5m2ToFloat(floatToFp8e5m2(NAN))));
}

// ---- functors: NaN / Inf / saturation -------------------------------------------

template <class T>
T make(double v, ncclDataType_t t) {
  T x;
  storeElement(&x, 0, t, v);
  return x;
}
template <class T>
double val(T x, ncclDataType_t t) {
  return loadElement(&x, 0, t);
}

TEST(AlgoReduce, NanInfAndSaturation) {
  for (ncclDataType_t t : kFloatTypes) {
    SCOPED_TRACE(dataTypeName(t));
    dispatchType(t, [&]<class T>() {
      T nan = make<T>(NAN, t), one = make<T>(1, t), two = make<T>(2, t), zero = make<T>(0, t);
      // NaN propagates through every op, from either side.
      EXPECT_TRUE(std::isnan(val(Sum<T>{}(nan, one), t)));
      EXPECT_TRUE(std::isnan(val(Sum<T>{}(one, nan), t)));
      EXPECT_TRUE(std::isnan(val(Prod<T>{}(one, nan), t)));
      EXPECT_TRUE(std::isnan(val(Max<T>{}(nan, one), t)));
      EXPECT_TRUE(std::isnan(val(Max<T>{}(one, nan), t)));
      EXPECT_TRUE(std::isnan(val(Min<T>{}(nan, one), t)));
      EXPECT_TRUE(std::isnan(val(Min<T>{}(one, nan), t)));
      EXPECT_TRUE(std::isnan(val(finalizeAvg(nan, 3), t)));
      EXPECT_TRUE(std::isnan(val(PreMulSum<T>{two}.premul(nan), t)));
      EXPECT_EQ(val(Max<T>{}(one, two), t), 2);
      EXPECT_EQ(val(Min<T>{}(one, two), t), 1);
      EXPECT_EQ(val(Max<T>{}(zero, make<T>(-1, t)), t), 0);
      // Overflow: Inf for IEEE-like types, saturation for e4m3.
      double big = t == ncclFloat8e4m3   ? 448
                   : t == ncclFloat8e5m2 ? 57344
                   : t == ncclFloat16    ? 65504
                   : t == ncclBfloat16   ? 3.3895313892515355e38
                   : t == ncclFloat32    ? 3.4028234663852886e38
                                         : 1.7976931348623157e308;
      T b = make<T>(big, t);
      ASSERT_EQ(val(b, t), big);
      double sum = val(Sum<T>{}(b, b), t);
      double prod = val(Prod<T>{}(make<T>(-big, t), b), t);
      if (t == ncclFloat8e4m3) {
        EXPECT_EQ(sum, 448);
        EXPECT_EQ(prod, -448);
      } else {
        EXPECT_EQ(sum, INFINITY);
        EXPECT_EQ(prod, -INFINITY);
        T inf = make<T>(INFINITY, t), ninf = make<T>(-INFINITY, t);
        EXPECT_TRUE(std::isnan(val(Sum<T>{}(inf, ninf), t)));
        EXPECT_TRUE(std::isnan(val(Prod<T>{}(inf, zero), t)));
        EXPECT_EQ(val(Max<T>{}(ninf, b), t), big);
        EXPECT_EQ(val(Min<T>{}(inf, b), t), big);
      }
    });
  }
}

TEST(AlgoReduce, AvgTruncatesIntegersTowardZero) {
  EXPECT_EQ(finalizeAvg<int32_t>(-7, 2), -3);
  EXPECT_EQ(finalizeAvg<int32_t>(7, 2), 3);
  EXPECT_EQ(finalizeAvg<int8_t>(-128, 3), -42);
  EXPECT_EQ(finalizeAvg<uint8_t>(255, 4), 63);
  EXPECT_EQ(finalizeAvg<int64_t>(-9000000000000000001ll, 10), -900000000000000000ll);
  EXPECT_EQ(finalizeAvg<uint64_t>(~0ull, 2), 0x7fffffffffffffffull);
  EXPECT_EQ(finalizeAvg<float>(1.0f, 3), 1.0f / 3.0f);
  EXPECT_EQ(halfToFloat(finalizeAvg(Half{floatToHalf(1.0f)}, 3).bits),
            halfToFloat(test::doubleToHalf(1.0 / 3)));
}

// ---- every type x op through the CPU loops, against a double reference ----------

enum class Op { kSum, kProd, kMax, kMin, kAvg, kPreMulSum };
const char* opName(Op op) {
  static const char* const kNames[] = {"sum", "prod", "max", "min", "avg", "premulsum"};
  return kNames[static_cast<int>(op)];
}

// Inputs whose exact results stay below 2^53 (so doubles are exact) and, for
// floats, within the type's finite range except where saturation is meant.
double randomInput(ncclDataType_t t, Op op, Rng& rng) {
  if (isFloatType(t)) {
    if (rng.below(16) == 0) return 0;
    int e =
        op == Op::kProd ? static_cast<int>(rng.range(-2, 2)) : static_cast<int>(rng.range(-4, 4));
    double v = std::ldexp(1.0 + rng.uniform(), e);
    return rng.below(2) ? v : -v;
  }
  size_t bytes = dataTypeSize(t);
  bool isSigned = isSignedType(t);
  int64_t hi;
  if (bytes == 1) {
    hi = isSigned ? 127 : 255;
  } else if (op == Op::kProd) {
    hi = 1 << 10;
  } else if (bytes == 4) {
    hi = isSigned ? INT32_MAX : UINT32_MAX;
  } else {
    hi = int64_t{1} << 44;
  }
  int64_t lo = !isSigned ? 0 : bytes == 1 ? -128 : bytes == 4 && op != Op::kProd ? INT32_MIN : -hi;
  return static_cast<double>(rng.range(lo, hi));
}

double refCombine(Op op, double a, double b) {
  switch (op) {
    case Op::kProd:
      return a * b;
    case Op::kMax:
      return std::fmax(a, b);
    case Op::kMin:
      return std::fmin(a, b);
    default:
      return a + b;
  }
}

int libOp(Op op) {
  static const int kOps[] = {kOpSum, kOpProd, kOpMax, kOpMin, kOpAvg, kOpPreMulSum};
  return kOps[static_cast<int>(op)];
}

void checkTypeOp(ncclDataType_t t, Op op, Rng& rng) {
  SCOPED_TRACE(std::string(dataTypeName(t)) + " " + opName(op));
  int nranks = static_cast<int>(rng.range(2, 5));
  size_t count = static_cast<size_t>(rng.range(1000, 3000));
  size_t bytes = dataTypeSize(t);
  std::vector<std::vector<char>> in(nranks, std::vector<char>(count * bytes));
  for (auto& buf : in)
    for (size_t i = 0; i < count; ++i) storeElement(buf.data(), i, t, randomInput(t, op, rng));
  char scalar[8] = {};
  double scalarValue = 0;
  if (op == Op::kPreMulSum) {
    scalarValue = isFloatType(t) ? randomInput(t, Op::kSum, rng)
                                 : static_cast<double>(rng.range(isSignedType(t) ? -15 : 0, 15));
    storeElement(scalar, 0, t, scalarValue);
    scalarValue = loadElement(scalar, 0, t);
  }
  // Reference: the same combine order, rounding to the type after each step
  // through tests/common's encoders.
  std::vector<char> want(count * bytes), tmp(bytes);
  auto refInput = [&](int r, size_t i) {
    double x = loadElement(in[r].data(), i, t);
    if (op != Op::kPreMulSum) return x;
    storeElement(tmp.data(), 0, t, x * scalarValue);
    return loadElement(tmp.data(), 0, t);
  };
  for (size_t i = 0; i < count; ++i) storeElement(want.data(), i, t, refInput(0, i));
  for (int r = 1; r < nranks; ++r)
    for (size_t i = 0; i < count; ++i)
      storeElement(want.data(), i, t,
                   refCombine(op, loadElement(want.data(), i, t), refInput(r, i)));
  if (op == Op::kAvg)
    for (size_t i = 0; i < count; ++i)
      storeElement(want.data(), i, t, loadElement(want.data(), i, t) / nranks);

  std::vector<char> got(count * bytes);
  test::fillPoison(got.data(), count, t);
  if (op == Op::kPreMulSum) {
    ASSERT_TRUE(premulCopy(got.data(), in[0].data(), count, t, scalar));
  } else {
    memcpy(got.data(), in[0].data(), count * bytes);
  }
  for (int r = 1; r < nranks; ++r)
    ASSERT_TRUE(reduceInto(got.data(), in[r].data(), count, t, libOp(op), scalar));
  if (op == Op::kAvg) ASSERT_TRUE(finalizeAvgInto(got.data(), count, t, nranks));
  test::Mismatch m = test::findMismatch(got.data(), want.data(), count, t);
  EXPECT_FALSE(m.found) << "nranks " << nranks << " index " << m.index << " got " << m.got
                        << " want " << m.want;
}

TEST(AlgoReduce, EveryTypeEveryOpMatchesReference) {
  Rng rng = makeRng(2);
  for (ncclDataType_t t : kAllTypes)
    for (Op op : {Op::kSum, Op::kProd, Op::kMax, Op::kMin, Op::kAvg, Op::kPreMulSum})
      checkTypeOp(t, op, rng);
}

TEST(AlgoReduce, PreMulSumRandomScalarsInPlace) {
  // premulCopy with dst == src, many scalars, float types with non-integer data.
  Rng rng = makeRng(3);
  for (ncclDataType_t t : kFloatTypes) {
    for (int rep = 0; rep < 20; ++rep) {
      SCOPED_TRACE(dataTypeName(t));
      size_t count = 257, bytes = dataTypeSize(t);
      std::vector<char> buf(count * bytes), want(count * bytes);
      char scalar[8];
      storeElement(scalar, 0, t, randomInput(t, Op::kSum, rng));
      for (size_t i = 0; i < count; ++i) {
        storeElement(buf.data(), i, t, randomInput(t, Op::kSum, rng));
        storeElement(want.data(), i, t, loadElement(buf.data(), i, t) * loadElement(scalar, 0, t));
      }
      ASSERT_TRUE(premulCopy(buf.data(), buf.data(), count, t, scalar));
      test::Mismatch m = test::findMismatch(buf.data(), want.data(), count, t);
      EXPECT_FALSE(m.found) << m.index << " got " << m.got << " want " << m.want;
    }
  }
}

TEST(AlgoReduce, RejectsUnknownTypeOrOp) {
  int32_t a[2] = {1, 2}, b[2] = {3, 4};
  EXPECT_FALSE(reduceInto(a, b, 2, ncclNumTypes, kOpSum));
  EXPECT_FALSE(reduceInto(a, b, 2, ncclInt32, 99));
  EXPECT_FALSE(reduceInto(a, b, 2, ncclInt32, kOpPreMulSum, nullptr));
  EXPECT_EQ(a[0], 1);
  EXPECT_EQ(a[1], 2);
  EXPECT_FALSE(finalizeAvgInto(a, 2, ncclInt32, 0));
}

}  // namespace
}  // namespace ferry::algo
