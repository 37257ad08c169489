// tests/common (shared by every multi-process and GPU suite, delivered with
// ferry-run): narrow-float conversions, random fills, poison, comparison.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <set>
#include <vector>

#include "common/proc.h"
#include "common/random.h"

namespace ferry::test {
namespace {

TEST(TestCommon, KnownEncodings) {
  EXPECT_EQ(doubleToHalf(1.0), 0x3C00);
  EXPECT_EQ(doubleToHalf(-2.0), 0xC000);
  EXPECT_EQ(doubleToHalf(65504.0), 0x7BFF);
  EXPECT_EQ(doubleToHalf(65520.0), 0x7C00);  // halfway to overflow rounds to Inf
  EXPECT_EQ(doubleToHalf(std::ldexp(1.0, -24)), 0x0001);
  EXPECT_EQ(doubleToBf16(1.0), 0x3F80);
  EXPECT_EQ(doubleToBf16(3.0), 0x4040);
  EXPECT_EQ(doubleToBf16(1.0 + std::ldexp(1.0, -8)), 0x3F80);  // tie to even
  EXPECT_EQ(doubleToFp8e4m3(1.0), 0x38);
  EXPECT_EQ(doubleToFp8e4m3(448.0), 0x7E);
  EXPECT_EQ(doubleToFp8e4m3(1000.0), 0x7E);  // saturates
  EXPECT_EQ(doubleToFp8e4m3(std::ldexp(1.0, -9)), 0x01);
  EXPECT_TRUE(std::isnan(fp8e4m3ToDouble(0x7F)));
  EXPECT_EQ(doubleToFp8e5m2(1.0), 0x3C);
  EXPECT_EQ(doubleToFp8e5m2(57344.0), 0x7B);
  EXPECT_TRUE(std::isinf(fp8e5m2ToDouble(0x7C)));
}

TEST(TestCommon, EveryPatternRoundTrips) {
  for (uint32_t b = 0; b < 65536; ++b) {
    uint16_t bits = static_cast<uint16_t>(b);
    double h = halfToDouble(bits);
    if (!std::isnan(h)) EXPECT_EQ(doubleToHalf(h), bits) << std::hex << b;
    double f = bf16ToDouble(bits);
    if (!std::isnan(f)) EXPECT_EQ(doubleToBf16(f), bits) << std::hex << b;
    float viaFloat;
    uint32_t wide = b << 16;
    memcpy(&viaFloat, &wide, 4);
    if (!std::isnan(f)) EXPECT_EQ(f, static_cast<double>(viaFloat)) << std::hex << b;
  }
  for (uint32_t b = 0; b < 256; ++b) {
    uint8_t bits = static_cast<uint8_t>(b);
    double e4 = fp8e4m3ToDouble(bits), e5 = fp8e5m2ToDouble(bits);
    if (!std::isnan(e4)) EXPECT_EQ(doubleToFp8e4m3(e4), bits) << b;
    if (!std::isnan(e5)) EXPECT_EQ(doubleToFp8e5m2(e5), bits) << b;
  }
}

#if defined(__FLT16_MAX__)
TEST(TestCommon, HalfMatchesTheCompiler) {
  Rng rng(testSeed());
  for (int i = 0; i < 100000; ++i) {
    double v = (rng.uniform() - 0.5) * std::ldexp(1.0, static_cast<int>(rng.below(40)) - 20);
    _Float16 h = static_cast<_Float16>(static_cast<float>(v));
    uint16_t bits;
    memcpy(&bits, &h, 2);
    // Compare through float as the compiler does (double->float->half can
    // double-round; float inputs cannot).
    EXPECT_EQ(doubleToHalf(static_cast<float>(v)), bits) << v;
  }
}
#endif

TEST(TestCommon, FillsArePoisonFreeNonConstantAndInRange) {
  Rng rng(testSeed(), 7);
  for (int t = 0; t < ncclNumTypes; ++t) {
    auto type = static_cast<ncclDataType_t>(t);
    const size_t n = 512;
    std::vector<char> buf(n * dataTypeSize(type));
    fillRandomInts(buf.data(), n, type, rng, 8);
    std::set<double> distinct;
    for (size_t i = 0; i < n; ++i) {
      double v = loadElement(buf.data(), i, type);
      EXPECT_EQ(v, std::trunc(v)) << dataTypeName(type);
      EXPECT_LE(std::fabs(v), 8) << dataTypeName(type);
      distinct.insert(v);
    }
    EXPECT_GT(distinct.size(), 4u) << dataTypeName(type);
    fillRandomBits(buf.data(), n, type, rng);
    for (size_t i = 0; i < n; ++i) {
      EXPECT_TRUE(std::isfinite(loadElement(buf.data(), i, type))) << dataTypeName(type);
    }
    // A random 8-bit element equals the 0xA5 poison one time in 256: make the
    // two elements the mismatch checks rely on differ from it.
    for (size_t i : {size_t{0}, n - 1}) {
      if (isPoison(buf.data(), i, type)) storeElement(buf.data(), i, type, 1.0);
    }
    std::vector<char> out(buf.size());
    fillPoison(out.data(), n, type);
    EXPECT_TRUE(isPoison(out.data(), n - 1, type));
    Mismatch m = findMismatch(out.data(), buf.data(), n, type);
    EXPECT_TRUE(m.found && m.index == 0) << dataTypeName(type);
    memcpy(out.data(), buf.data(), buf.size() - dataTypeSize(type));
    m = findMismatch(out.data(), buf.data(), n, type);
    EXPECT_TRUE(m.found && m.index == n - 1) << dataTypeName(type);
    memcpy(out.data(), buf.data(), buf.size());
    EXPECT_FALSE(findMismatch(out.data(), buf.data(), n, type).found) << dataTypeName(type);
  }
}

TEST(TestCommon, SeedsAndStreamsDiffer) {
  EXPECT_EQ(testSeed(), testSeed());
  Rng a(1, 0), b(1, 1), c(2, 0), a2(1, 0);
  uint64_t va = a.next();
  EXPECT_NE(va, b.next());
  EXPECT_NE(va, c.next());
  EXPECT_EQ(va, a2.next());
}

TEST(TestCommon, ProcCounters) {
  int fds = countOpenFds();
  int fd = dup(0);
  EXPECT_EQ(countOpenFds(), fds + 1);
  close(fd);
  EXPECT_EQ(countOpenFds(), fds);
  EXPECT_GE(countThreads(), 1);
  EXPECT_GT(rssKiB(), 0);
}

}  // namespace
}  // namespace ferry::test
