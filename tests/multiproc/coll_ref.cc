#include "coll_ref.h"

#include <algorithm>
#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <cstring>

#include "common/random.h"

namespace ferry::test {
namespace {

constexpr uint64_t kGolden = 0x9E3779B97F4A7C15ull;

// splitmix64's output function: a cheap, well-mixed hash of a 64-bit word.
uint64_t mix64(uint64_t z) {
  z += kGolden;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// Value -> bits of the type (rounded to nearest-even) and back, through the
// test library's own encoders; the low bytes of the word hold the element.
uint64_t encodeBits(ncclDataType_t type, double v) {
  uint64_t bits = 0;
  storeElement(&bits, 0, type, v);
  return bits;
}

double decodeBits(ncclDataType_t type, uint64_t bits) {
  return loadElement(&bits, 0, type);
}

int64_t signExtend(uint64_t v, int bits) {
  if (bits == 64) return static_cast<int64_t>(v);
  uint64_t sign = uint64_t{1} << (bits - 1);
  v &= (sign << 1) - 1;
  return static_cast<int64_t>((v ^ sign) - sign);
}

struct FloatTraits {
  int precision;        // significand bits, the implicit one included
  double minSubnormal;  // spacing of the smallest values
};

FloatTraits floatTraits(ncclDataType_t type) {
  switch (type) {
    case ncclFloat16:
      return {11, std::ldexp(1.0, -24)};
    case ncclBfloat16:
      return {8, std::ldexp(1.0, -133)};
    case ncclFloat32:
      return {24, std::ldexp(1.0, -149)};
    case ncclFloat64:
      return {53, std::ldexp(1.0, -1074)};
    case ncclFloat8e4m3:
      return {4, std::ldexp(1.0, -9)};
    case ncclFloat8e5m2:
      return {3, std::ldexp(1.0, -16)};
    default:
      return {64, 0};
  }
}

std::string formatInt(uint64_t bits, ncclDataType_t type) {
  char text[32];
  if (isSignedType(type)) {
    snprintf(text, sizeof(text), "%" PRId64,
             signExtend(bits, static_cast<int>(dataTypeSize(type) * 8)));
  } else {
    snprintf(text, sizeof(text), "%" PRIu64, bits);
  }
  return text;
}

}  // namespace

const char* collName(Coll c) {
  static const char* const kNames[] = {"allreduce", "allgather", "reducescatter", "broadcast",
                                       "reduce"};
  return kNames[static_cast<int>(c)];
}

const char* redName(Red r) {
  static const char* const kNames[] = {"sum", "prod",        "max",          "min",
                                       "avg", "premul-host", "premul-device"};
  return kNames[static_cast<int>(r)];
}

bool isReducing(Coll c) {
  return c == Coll::AllReduce || c == Coll::ReduceScatter || c == Coll::Reduce;
}

bool hasRoot(Coll c) {
  return c == Coll::Broadcast || c == Coll::Reduce;
}

std::string describe(const CollSpec& s) {
  const bool exact = s.exact && isReducing(s.coll) && isFloatType(s.type) &&
                     (s.red == Red::Sum || s.red == Red::Prod);
  char text[256];
  snprintf(text, sizeof(text), "%s %s%s%s count=%zu %s%s%s root=%d tag=%" PRIu64, collName(s.coll),
           dataTypeName(s.type), isReducing(s.coll) ? " " : "",
           isReducing(s.coll) ? redName(s.red) : "", s.count,
           s.inPlace ? "in-place" : "out-of-place", exact ? " exact" : "",
           s.kind == BufferKind::Mapped ? " mapped" : "", hasRoot(s.coll) ? s.root : -1, s.tag);
  return text;
}

CollData::CollData(uint64_t seed, const CollSpec& spec, int nranks)
    : spec_(spec), nranks_(nranks), elemSize_(dataTypeSize(spec.type)) {
  mask_ = elemSize_ == 8 ? ~uint64_t{0} : (uint64_t{1} << (elemSize_ * 8)) - 1;
  uint64_t base = mix64(seed ^ mix64(spec.tag * 0x2545F4914F6CDD1Dull));
  for (int r = 0; r < nranks; ++r) rankKey_.push_back(mix64(base + static_cast<uint64_t>(r) + 1));
  elemKey_ = mix64(base ^ 0xE1E3E7ull);
  // Exact sums: nranks terms of |k| <= 2^p / nranks never leave the p-bit
  // significand, whatever the order of the additions.
  int p = std::min(floatTraits(spec.type).precision, 40);
  gridMax_ = std::max<int64_t>(1, (int64_t{1} << p) / nranks);
}

size_t CollData::inputCount() const {
  return spec_.coll == Coll::ReduceScatter ? spec_.count * nranks_ : spec_.count;
}

size_t CollData::outputCount() const {
  return spec_.coll == Coll::AllGather ? spec_.count * nranks_ : spec_.count;
}

void CollData::input(int rank, size_t begin, size_t n, void* out) const {
  auto* bytes = static_cast<char*>(out);
  for (size_t k = 0; k < n; ++k) {
    uint64_t bits = elemBits(rank, begin + k);
    memcpy(bytes + k * elemSize_, &bits, elemSize_);  // little-endian: the low bytes
  }
}

uint64_t CollData::scalarBits(int rank) const {
  uint64_t h = mix64(rankKey_[rank] ^ 0x5CA1A25CA1A2ull);
  bool neg = (h & 1) != 0;
  if (!isFloatType(spec_.type)) {
    int64_t m = 1 + static_cast<int64_t>((h >> 1) % 9);
    return static_cast<uint64_t>(neg && isSignedType(spec_.type) ? -m : m) & mask_;
  }
  double m = 0.5 + 1.5 * static_cast<double>(h >> 11) * 0x1.0p-53;
  return encodeBits(spec_.type, neg ? -m : m);
}

uint64_t CollData::elemBits(int rank, size_t i) const {
  uint64_t h = mix64(rankKey_[rank] + i * kGolden);
  const ncclDataType_t type = spec_.type;
  if (!isReducing(spec_.coll)) {
    if (!isFloatType(type)) return h & mask_;
    // Any finite bit pattern (subnormals and -0 included): moved, not computed.
    for (uint64_t b = h;; b = mix64(b)) {
      if (std::isfinite(decodeBits(type, b & mask_))) return b & mask_;
    }
  }
  if (isFloatType(type)) return floatElem(h, i);
  if (spec_.red != Red::Prod) return h & mask_;  // full range: sums wrap
  int64_t m = 1 + static_cast<int64_t>((h >> 1) % 7);
  return static_cast<uint64_t>((h & 1) != 0 && isSignedType(type) ? -m : m) & mask_;
}

uint64_t CollData::floatElem(uint64_t h, size_t i) const {
  const ncclDataType_t type = spec_.type;
  const bool neg = (h & 1) != 0;
  if (spec_.red == Red::Prod) {
    double m = spec_.exact ? std::ldexp(1.0, static_cast<int>((h >> 1) % 3) - 1)
                           : 0.75 + 0.5 * static_cast<double>(h >> 11) * 0x1.0p-53;
    return encodeBits(type, neg ? -m : m);
  }
  // One exponent per element, shared by all ranks: magnitudes vary along the
  // buffer, and exact sums stay on one grid.
  int e = static_cast<int>(mix64(elemKey_ + i * kGolden) % 9) - 4;
  if (spec_.red == Red::Sum && spec_.exact) {
    int64_t k = static_cast<int64_t>((h >> 1) % static_cast<uint64_t>(2 * gridMax_ + 1)) - gridMax_;
    return encodeBits(type, std::ldexp(static_cast<double>(k), e));
  }
  double u = static_cast<double>(h >> 11) * 0x1.0p-53;
  return encodeBits(type, std::ldexp(2 * u - 1, e));
}

bool CollData::checkInt(size_t idx, uint64_t got, std::string* why) const {
  const ncclDataType_t type = spec_.type;
  const bool sgn = isSignedType(type);
  const int bits = static_cast<int>(elemSize_ * 8);
  // Sign-extended to 64 bits: wrapping arithmetic modulo 2^64 then masking
  // equals arithmetic modulo 2^bits; comparisons need the sign.
  auto widen = [&](uint64_t v) { return sgn ? static_cast<uint64_t>(signExtend(v, bits)) : v; };
  auto less = [&](uint64_t a, uint64_t b) {
    return sgn ? static_cast<int64_t>(a) < static_cast<int64_t>(b) : a < b;
  };
  const bool premul = spec_.red == Red::PreMulHost || spec_.red == Red::PreMulDevice;
  uint64_t acc = 0;
  for (int r = 0; r < nranks_; ++r) {
    uint64_t v = widen(elemBits(r, idx));
    if (premul) v *= widen(scalarBits(r));
    if (r == 0) {
      acc = v;
      continue;
    }
    switch (spec_.red) {
      case Red::Prod:
        acc *= v;
        break;
      case Red::Max:
        if (less(acc, v)) acc = v;
        break;
      case Red::Min:
        if (less(v, acc)) acc = v;
        break;
      default:  // sum, avg, PreMulSum
        acc += v;
        break;
    }
  }
  if (spec_.red == Red::Avg) {
    // The wrapped sum, divided with C semantics (toward zero).
    acc = sgn ? static_cast<uint64_t>(signExtend(acc, bits) / nranks_) : (acc & mask_) / nranks_;
  }
  const uint64_t want = acc & mask_;
  if ((got & mask_) == want) return true;
  *why = "got " + formatInt(got & mask_, type) + ", expected " + formatInt(want, type);
  return false;
}

bool CollData::checkFloat(size_t idx, double got, std::string* why) const {
  const ncclDataType_t type = spec_.type;
  const Red red = spec_.red;
  double want = 0, magnitude = 0;
  for (int r = 0; r < nranks_; ++r) {
    double t = decodeBits(type, elemBits(r, idx));
    if (red == Red::Avg) t /= nranks_;
    if (red == Red::PreMulHost || red == Red::PreMulDevice) t *= decodeBits(type, scalarBits(r));
    magnitude += std::fabs(t);
    if (r == 0) {
      want = t;
    } else if (red == Red::Prod) {
      want *= t;
    } else if (red == Red::Max) {
      want = std::max(want, t);
    } else if (red == Red::Min) {
      want = std::min(want, t);
    } else {
      want += t;
    }
  }
  double tol = 0;
  const bool exact =
      red == Red::Max || red == Red::Min || (spec_.exact && (red == Red::Sum || red == Red::Prod));
  if (!exact) {
    // Each of at most nranks + 2 roundings in the type (pre-multiplication,
    // additions, final conversion) errs by at most half an ulp of a value no
    // larger than the magnitude bound; a factor 2 of slack.
    FloatTraits f = floatTraits(type);
    double bound = red == Red::Prod ? std::fabs(want) * 1.5 : magnitude;
    tol = 2.0 * (nranks_ + 2) * (std::ldexp(bound, -f.precision) + f.minSubnormal);
  }
  if (!std::isnan(got) && std::fabs(got - want) <= tol) return true;
  char text[160];
  snprintf(text, sizeof(text), "got %.9g, expected %.9g (tolerance %.3g)", got, want, tol);
  *why = text;
  return false;
}

size_t CollData::check(int me, const void* got, const char* what) const {
  const size_t n = outputCount();
  const auto* bytes = static_cast<const char*>(got);
  size_t bad = 0;
  std::string why;
  for (size_t j = 0; j < n; ++j) {
    uint64_t bits = 0;
    memcpy(&bits, bytes + j * elemSize_, elemSize_);
    bool ok;
    if (spec_.coll == Coll::AllGather || spec_.coll == Coll::Broadcast) {
      int src = spec_.coll == Coll::AllGather ? static_cast<int>(j / spec_.count) : spec_.root;
      uint64_t want = elemBits(src, spec_.coll == Coll::AllGather ? j % spec_.count : j);
      ok = bits == want;
      if (!ok) {
        char text[96];
        snprintf(text, sizeof(text), "got bits 0x%" PRIx64 ", expected 0x%" PRIx64 " (rank %d's)",
                 bits, want, src);
        why = text;
      }
    } else {
      size_t idx =
          spec_.coll == Coll::ReduceScatter ? static_cast<size_t>(me) * spec_.count + j : j;
      ok = isFloatType(spec_.type) ? checkFloat(idx, decodeBits(spec_.type, bits), &why)
                                   : checkInt(idx, bits, &why);
    }
    if (!ok && bad++ < 3) fprintf(stderr, "FAIL %s: element %zu: %s\n", what, j, why.c_str());
  }
  return bad;
}

}  // namespace ferry::test
