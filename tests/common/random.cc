#include "common/random.h"

#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <mutex>

#include "core/env.h"

namespace ferry::test {

uint64_t testSeed() {
  static std::once_flag once;
  static uint64_t seed = 0;
  std::call_once(once, [] {
    std::string text = ferry::envString("FERRY_TEST_SEED");
    if (!text.empty()) {
      seed = std::strtoull(text.c_str(), nullptr, 0);
    } else {
      timespec ts{};
      clock_gettime(CLOCK_REALTIME, &ts);
      seed =
          (static_cast<uint64_t>(ts.tv_sec) * 1000000007ull + static_cast<uint64_t>(ts.tv_nsec)) ^
          (static_cast<uint64_t>(getpid()) << 20);
    }
    fprintf(stderr, "seed=%llu\n", static_cast<unsigned long long>(seed));
  });
  return seed;
}

int testRounds(int full) {
  const long v = std::strtol(ferry::envString("FERRY_TEST_ROUNDS").c_str(), nullptr, 0);
  return v > 0 ? static_cast<int>(v) : full;
}

Rng::Rng(uint64_t seed, uint64_t stream) : state_(seed ^ (stream * 0xD1B54A32D192ED03ull)) {
  next();  // decorrelate nearby seeds
}

uint64_t Rng::next() {
  uint64_t z = (state_ += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

uint64_t Rng::below(uint64_t n) {
  return next() % n;
}

int64_t Rng::range(int64_t lo, int64_t hi) {
  return lo + static_cast<int64_t>(below(static_cast<uint64_t>(hi - lo) + 1));
}

double Rng::uniform() {
  return static_cast<double>(next() >> 11) * 0x1.0p-53;
}

size_t dataTypeSize(ncclDataType_t type) {
  switch (type) {
    case ncclInt8:
    case ncclUint8:
    case ncclFloat8e4m3:
    case ncclFloat8e5m2:
      return 1;
    case ncclFloat16:
    case ncclBfloat16:
      return 2;
    case ncclInt32:
    case ncclUint32:
    case ncclFloat32:
      return 4;
    case ncclInt64:
    case ncclUint64:
    case ncclFloat64:
      return 8;
    default:
      return 0;
  }
}

const char* dataTypeName(ncclDataType_t type) {
  static const char* const kNames[] = {"int8",    "uint8",    "int32",   "uint32",
                                       "int64",   "uint64",   "float16", "float32",
                                       "float64", "bfloat16", "fp8e4m3", "fp8e5m2"};
  int i = static_cast<int>(type);
  return i >= 0 && i < ncclNumTypes ? kNames[i] : "invalid";
}

bool isFloatType(ncclDataType_t type) {
  return type == ncclFloat16 || type == ncclFloat32 || type == ncclFloat64 ||
         type == ncclBfloat16 || type == ncclFloat8e4m3 || type == ncclFloat8e5m2;
}

bool isSignedType(ncclDataType_t type) {
  return type == ncclInt8 || type == ncclInt32 || type == ncclInt64 || isFloatType(type);
}

namespace {

// A binary float format with `exp` exponent and `mant` mantissa bits.
// `ieee`: the top exponent holds Inf/NaN; otherwise (fp8 e4m3 "fn") only the
// all-ones pattern is NaN and there is no Inf.
struct MiniFloat {
  int exp;
  int mant;
  bool ieee;
  int bias() const { return (1 << (exp - 1)) - 1; }
  int maxExpField() const { return (1 << exp) - 1; }
  double maxFinite() const {
    int topExp = ieee ? maxExpField() - 1 : maxExpField();
    int topMant = ieee ? (1 << mant) - 1 : (1 << mant) - 2;
    return std::ldexp(1.0 + topMant / std::ldexp(1.0, mant), topExp - bias());
  }
};

constexpr MiniFloat kHalf{5, 10, true};
constexpr MiniFloat kBf16{8, 7, true};
constexpr MiniFloat kE4m3{4, 3, false};
constexpr MiniFloat kE5m2{5, 2, true};

double decode(const MiniFloat& f, uint32_t bits) {
  uint32_t mantMask = (1u << f.mant) - 1;
  bool neg = (bits >> (f.exp + f.mant)) & 1u;
  int e = static_cast<int>((bits >> f.mant) & static_cast<uint32_t>(f.maxExpField()));
  uint32_t m = bits & mantMask;
  double v;
  if (f.ieee && e == f.maxExpField()) {
    v = m != 0 ? NAN : INFINITY;
  } else if (!f.ieee && e == f.maxExpField() && m == mantMask) {
    v = NAN;
  } else if (e == 0) {
    v = std::ldexp(static_cast<double>(m), 1 - f.bias() - f.mant);
  } else {
    v = std::ldexp(1.0 + m / std::ldexp(1.0, f.mant), e - f.bias());
  }
  return neg ? -v : v;
}

uint32_t encode(const MiniFloat& f, double v) {
  uint32_t sign = std::signbit(v) ? 1u << (f.exp + f.mant) : 0u;
  if (std::isnan(v))
    return (static_cast<uint32_t>(f.maxExpField()) << f.mant) | ((1u << f.mant) - 1);
  double a = std::fabs(v);
  if (a == 0) return sign;
  int minNormExp = 1 - f.bias();
  int e = std::max(std::ilogb(a), minNormExp);
  double quantum = std::ldexp(1.0, e - f.mant);
  double r = std::nearbyint(a / quantum) * quantum;  // default mode: nearest-even
  if (r > f.maxFinite() || std::isinf(a)) {
    if (f.ieee) return sign | (static_cast<uint32_t>(f.maxExpField()) << f.mant);  // Inf
    r = f.maxFinite();
  }
  if (r < std::ldexp(1.0, minNormExp)) {
    return sign | static_cast<uint32_t>(r / std::ldexp(1.0, minNormExp - f.mant));
  }
  int re = std::ilogb(r);
  uint32_t m = static_cast<uint32_t>(r / std::ldexp(1.0, re - f.mant)) - (1u << f.mant);
  return sign | (static_cast<uint32_t>(re + f.bias()) << f.mant) | m;
}

template <typename T>
T loadAs(const void* buf, size_t i) {
  T v;
  memcpy(&v, static_cast<const char*>(buf) + i * sizeof(T), sizeof(T));
  return v;
}

template <typename T>
void storeAs(void* buf, size_t i, T v) {
  memcpy(static_cast<char*>(buf) + i * sizeof(T), &v, sizeof(T));
}

}  // namespace

double halfToDouble(uint16_t bits) {
  return decode(kHalf, bits);
}
uint16_t doubleToHalf(double value) {
  return static_cast<uint16_t>(encode(kHalf, value));
}
double bf16ToDouble(uint16_t bits) {
  return decode(kBf16, bits);
}
uint16_t doubleToBf16(double value) {
  return static_cast<uint16_t>(encode(kBf16, value));
}
double fp8e4m3ToDouble(uint8_t bits) {
  return decode(kE4m3, bits);
}
uint8_t doubleToFp8e4m3(double value) {
  return static_cast<uint8_t>(encode(kE4m3, value));
}
double fp8e5m2ToDouble(uint8_t bits) {
  return decode(kE5m2, bits);
}
uint8_t doubleToFp8e5m2(double value) {
  return static_cast<uint8_t>(encode(kE5m2, value));
}

double loadElement(const void* buf, size_t i, ncclDataType_t type) {
  switch (type) {
    case ncclInt8:
      return loadAs<int8_t>(buf, i);
    case ncclUint8:
      return loadAs<uint8_t>(buf, i);
    case ncclInt32:
      return loadAs<int32_t>(buf, i);
    case ncclUint32:
      return loadAs<uint32_t>(buf, i);
    case ncclInt64:
      return static_cast<double>(loadAs<int64_t>(buf, i));
    case ncclUint64:
      return static_cast<double>(loadAs<uint64_t>(buf, i));
    case ncclFloat16:
      return halfToDouble(loadAs<uint16_t>(buf, i));
    case ncclFloat32:
      return loadAs<float>(buf, i);
    case ncclFloat64:
      return loadAs<double>(buf, i);
    case ncclBfloat16:
      return bf16ToDouble(loadAs<uint16_t>(buf, i));
    case ncclFloat8e4m3:
      return fp8e4m3ToDouble(loadAs<uint8_t>(buf, i));
    case ncclFloat8e5m2:
      return fp8e5m2ToDouble(loadAs<uint8_t>(buf, i));
    default:
      return NAN;
  }
}

void storeElement(void* buf, size_t i, ncclDataType_t type, double v) {
  // Integers: truncate, then wrap through the 64-bit value like C casts do on
  // every compiler we use (the value is in range in sane tests).
  int64_t iv = std::isfinite(v) && std::fabs(v) < 9.2e18 ? static_cast<int64_t>(v) : 0;
  switch (type) {
    case ncclInt8:
      storeAs<int8_t>(buf, i, static_cast<int8_t>(iv));
      break;
    case ncclUint8:
      storeAs<uint8_t>(buf, i, static_cast<uint8_t>(iv));
      break;
    case ncclInt32:
      storeAs<int32_t>(buf, i, static_cast<int32_t>(iv));
      break;
    case ncclUint32:
      storeAs<uint32_t>(buf, i, static_cast<uint32_t>(iv));
      break;
    case ncclInt64:
      storeAs<int64_t>(buf, i, iv);
      break;
    case ncclUint64:
      storeAs<uint64_t>(buf, i, static_cast<uint64_t>(iv));
      break;
    case ncclFloat16:
      storeAs<uint16_t>(buf, i, doubleToHalf(v));
      break;
    case ncclFloat32:
      storeAs<float>(buf, i, static_cast<float>(v));
      break;
    case ncclFloat64:
      storeAs<double>(buf, i, v);
      break;
    case ncclBfloat16:
      storeAs<uint16_t>(buf, i, doubleToBf16(v));
      break;
    case ncclFloat8e4m3:
      storeAs<uint8_t>(buf, i, doubleToFp8e4m3(v));
      break;
    case ncclFloat8e5m2:
      storeAs<uint8_t>(buf, i, doubleToFp8e5m2(v));
      break;
    default:
      break;
  }
}

void fillRandomBits(void* buf, size_t count, ncclDataType_t type, Rng& rng) {
  size_t size = dataTypeSize(type);
  char* bytes = static_cast<char*>(buf);
  for (size_t i = 0; i < count; ++i) {
    do {
      uint64_t bits = rng.next();
      memcpy(bytes + i * size, &bits, size);  // little-endian: low bytes
    } while (isFloatType(type) && !std::isfinite(loadElement(buf, i, type)));
  }
}

void fillRandomInts(void* buf, size_t count, ncclDataType_t type, Rng& rng, int maxAbs) {
  int64_t lo = isSignedType(type) ? -maxAbs : 0;
  for (size_t i = 0; i < count; ++i) {
    storeElement(buf, i, type, static_cast<double>(rng.range(lo, maxAbs)));
  }
  // Never a constant buffer: a test fed a constant can pass by accident.
  if (count >= 2 && maxAbs > 0 && loadElement(buf, 0, type) == loadElement(buf, 1, type)) {
    double first = loadElement(buf, 0, type);
    storeElement(buf, 1, type, first == maxAbs ? first - 1 : first + 1);
  }
}

namespace {

// Poison bit patterns per type (little-endian, low bytes used).
uint64_t poisonBits(ncclDataType_t type) {
  switch (type) {
    case ncclFloat16:
      return 0x7EA5;  // quiet NaN, payload A5
    case ncclBfloat16:
      return 0x7FE5;
    case ncclFloat32:
      return 0x7FC5A5A5;
    case ncclFloat64:
      return 0x7FF8A5A5A5A5A5A5ull;
    case ncclFloat8e4m3:
      return 0x7F;  // its only NaN
    case ncclFloat8e5m2:
      return 0x7E;
    default:
      return 0xA5A5A5A5A5A5A5A5ull;
  }
}

}  // namespace

void fillPoison(void* buf, size_t count, ncclDataType_t type) {
  size_t size = dataTypeSize(type);
  uint64_t bits = poisonBits(type);
  for (size_t i = 0; i < count; ++i) memcpy(static_cast<char*>(buf) + i * size, &bits, size);
}

bool isPoison(const void* buf, size_t i, ncclDataType_t type) {
  size_t size = dataTypeSize(type);
  uint64_t bits = poisonBits(type);
  return memcmp(static_cast<const char*>(buf) + i * size, &bits, size) == 0;
}

Mismatch findMismatch(const void* got, const void* want, size_t count, ncclDataType_t type,
                      double relTol, double absTol) {
  size_t size = dataTypeSize(type);
  for (size_t i = 0; i < count; ++i) {
    double g = loadElement(got, i, type);
    double w = loadElement(want, i, type);
    bool bad;
    if (isFloatType(type)) {
      bad = std::isnan(g) || std::isnan(w) || std::fabs(g - w) > absTol + relTol * std::fabs(w);
      if (std::isinf(g) && std::isinf(w) && g == w) bad = false;
    } else {
      bad = memcmp(static_cast<const char*>(got) + i * size,
                   static_cast<const char*>(want) + i * size, size) != 0;
    }
    if (bad) return Mismatch{true, i, g, w};
  }
  return Mismatch{};
}

}  // namespace ferry::test
