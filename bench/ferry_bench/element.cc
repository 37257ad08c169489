#include "ferry_bench/element.h"

#include <cmath>
#include <cstring>
#include <vector>

namespace ferry::bench {
namespace {

struct TypeInfo {
  const char* name;
  size_t size;
};

// Indexed by ncclDataType_t; names follow nccl-tests' output.
constexpr TypeInfo kTypes[ncclNumTypes] = {
    {"int8", 1}, {"uint8", 1}, {"int32", 4},  {"uint32", 4},   {"int64", 8},   {"uint64", 8},
    {"half", 2}, {"float", 4}, {"double", 8}, {"bfloat16", 2}, {"fp8e4m3", 1}, {"fp8e5m2", 1}};

constexpr const char* kOps[ncclNumOps] = {"sum", "prod", "max", "min", "avg"};

bool validType(ncclDataType_t t) {
  return t >= 0 && t < ncclNumTypes;
}

int64_t signExtend(uint64_t bits, size_t size) {
  if (size == 8) return static_cast<int64_t>(bits);
  const int shift = 64 - 8 * static_cast<int>(size);
  return static_cast<int64_t>(bits << shift) >> shift;
}

uint64_t sizeMask(size_t size) {
  return size == 8 ? ~0ull : (1ull << (8 * size)) - 1;
}

}  // namespace

size_t typeSize(ncclDataType_t type) {
  return validType(type) ? kTypes[type].size : 0;
}

const char* typeName(ncclDataType_t type) {
  return validType(type) ? kTypes[type].name : "?";
}

bool parseType(std::string_view name, ncclDataType_t* type) {
  for (int i = 0; i < ncclNumTypes; ++i) {
    if (name == kTypes[i].name) {
      *type = static_cast<ncclDataType_t>(i);
      return true;
    }
  }
  // Common aliases.
  struct Alias {
    const char* name;
    ncclDataType_t type;
  };
  static constexpr Alias kAliases[] = {{"char", ncclInt8},       {"int", ncclInt32},
                                       {"float16", ncclFloat16}, {"fp16", ncclFloat16},
                                       {"float32", ncclFloat32}, {"fp32", ncclFloat32},
                                       {"float64", ncclFloat64}, {"bf16", ncclBfloat16}};
  for (const Alias& a : kAliases) {
    if (name == a.name) {
      *type = a.type;
      return true;
    }
  }
  return false;
}

bool isFloatType(ncclDataType_t type) {
  return type == ncclFloat16 || type == ncclFloat32 || type == ncclFloat64 ||
         type == ncclBfloat16 || type == ncclFloat8e4m3 || type == ncclFloat8e5m2;
}

bool isSignedInt(ncclDataType_t type) {
  return type == ncclInt8 || type == ncclInt32 || type == ncclInt64;
}

const char* redOpName(ncclRedOp_t op) {
  return op >= 0 && op < ncclNumOps ? kOps[op] : "?";
}

bool parseRedOp(std::string_view name, ncclRedOp_t* op) {
  for (int i = 0; i < ncclNumOps; ++i) {
    if (name == kOps[i]) {
      *op = static_cast<ncclRedOp_t>(i);
      return true;
    }
  }
  return false;
}

int64_t exactIntLimit(ncclDataType_t type) {
  switch (type) {
    case ncclInt8:
      return 127;
    case ncclUint8:
      return 255;
    case ncclFloat8e4m3:
      return 16;  // 3 mantissa bits: integers exact up to 2^4
    case ncclFloat8e5m2:
      return 8;  // 2 mantissa bits: up to 2^3
    case ncclFloat16:
      return 2048;
    case ncclBfloat16:
      return 256;
    case ncclFloat32:
      return 1 << 24;
    case ncclInt32:
      return 0x7fffffff;
    case ncclUint32:
      return 0xffffffffll;
    default:
      return 1ll << 40;  // 64-bit types: far beyond any test sum
  }
}

double minifloatToDouble(uint64_t bits, int expBits, int manBits, bool ieeeSpecials) {
  const uint64_t expMax = (1ull << expBits) - 1, manMax = (1ull << manBits) - 1;
  const bool negative = (bits >> (expBits + manBits)) & 1;
  const uint64_t exp = (bits >> manBits) & expMax, man = bits & manMax;
  const int bias = (1 << (expBits - 1)) - 1;
  double value;
  if (ieeeSpecials && exp == expMax) {
    value = man == 0 ? INFINITY : NAN;
  } else if (!ieeeSpecials && exp == expMax && man == manMax) {
    value = NAN;  // e4m3: the only NaN, no infinities
  } else if (exp == 0) {
    value = std::ldexp(static_cast<double>(man), 1 - bias - manBits);
  } else {
    value =
        std::ldexp(static_cast<double>(man | (manMax + 1)), static_cast<int>(exp) - bias - manBits);
  }
  return negative ? -value : value;
}

uint64_t doubleToMinifloat(double value, int expBits, int manBits, bool ieeeSpecials) {
  const uint64_t expMax = (1ull << expBits) - 1, manMax = (1ull << manBits) - 1;
  const uint64_t signBit = 1ull << (expBits + manBits);
  const int bias = (1 << (expBits - 1)) - 1;
  if (std::isnan(value))
    return ieeeSpecials ? (expMax << manBits) | (1ull << (manBits - 1))
                        : (expMax << manBits) | manMax;
  const uint64_t sign = std::signbit(value) ? signBit : 0;
  const double a = std::fabs(value);
  // Largest finite: IEEE reserves the top exponent; e4m3 only its top mantissa.
  const uint64_t maxBits =
      ieeeSpecials ? ((expMax - 1) << manBits) | manMax : (expMax << manBits) | (manMax - 1);
  const uint64_t infBits = ieeeSpecials ? expMax << manBits : maxBits;  // e4m3 saturates
  if (std::isinf(a)) return sign | infBits;
  const int minNormalExp = 1 - bias;
  int e = a == 0 ? minNormalExp : std::ilogb(a);
  if (e < minNormalExp) e = minNormalExp;
  // Round to a multiple of this binade's step, half to even (default FP mode).
  const double rounded = std::ldexp(std::nearbyint(std::ldexp(a, manBits - e)), e - manBits);
  if (rounded == 0) return sign;
  if (rounded > minifloatToDouble(maxBits, expBits, manBits, ieeeSpecials)) {
    return sign | infBits;
  }
  const int re = std::ilogb(rounded);
  if (re < minNormalExp) {  // subnormal
    return sign | static_cast<uint64_t>(std::ldexp(rounded, bias - 1 + manBits));
  }
  const uint64_t man = static_cast<uint64_t>(std::ldexp(rounded, manBits - re)) & manMax;
  return sign | (static_cast<uint64_t>(re + bias) << manBits) | man;
}

double bitsToDouble(uint64_t bits, ncclDataType_t type) {
  const size_t size = typeSize(type);
  bits &= sizeMask(size);
  switch (type) {
    case ncclFloat16:
      return minifloatToDouble(bits, 5, 10, true);
    case ncclBfloat16:
      return minifloatToDouble(bits, 8, 7, true);
    case ncclFloat8e4m3:
      return minifloatToDouble(bits, 4, 3, false);
    case ncclFloat8e5m2:
      return minifloatToDouble(bits, 5, 2, true);
    case ncclFloat32: {
      float f;
      uint32_t w = static_cast<uint32_t>(bits);
      memcpy(&f, &w, 4);
      return f;
    }
    case ncclFloat64: {
      double d;
      memcpy(&d, &bits, 8);
      return d;
    }
    default:
      return isSignedInt(type) ? static_cast<double>(signExtend(bits, size))
                               : static_cast<double>(bits);
  }
}

uint64_t doubleToBits(double value, ncclDataType_t type) {
  switch (type) {
    case ncclFloat16:
      return doubleToMinifloat(value, 5, 10, true);
    case ncclBfloat16:
      return doubleToMinifloat(value, 8, 7, true);
    case ncclFloat8e4m3:
      return doubleToMinifloat(value, 4, 3, false);
    case ncclFloat8e5m2:
      return doubleToMinifloat(value, 5, 2, true);
    case ncclFloat32: {
      const float f = static_cast<float>(value);
      uint32_t w;
      memcpy(&w, &f, 4);
      return w;
    }
    case ncclFloat64: {
      uint64_t w;
      memcpy(&w, &value, 8);
      return w;
    }
    default: {
      // Integers: truncate toward zero, then wrap to the type's width.
      const double t = std::trunc(value);
      const uint64_t w =
          t < 0 ? static_cast<uint64_t>(static_cast<int64_t>(t)) : static_cast<uint64_t>(t);
      return w & sizeMask(typeSize(type));
    }
  }
}

uint64_t sanitizeBits(uint64_t bits, ncclDataType_t type) {
  bits &= sizeMask(typeSize(type));
  int expBits = 0, manBits = 0;
  switch (type) {
    case ncclFloat16:
      expBits = 5, manBits = 10;
      break;
    case ncclBfloat16:
      expBits = 8, manBits = 7;
      break;
    case ncclFloat8e5m2:
      expBits = 5, manBits = 2;
      break;
    case ncclFloat32:
      expBits = 8, manBits = 23;
      break;
    case ncclFloat64:
      expBits = 11, manBits = 52;
      break;
    case ncclFloat8e4m3:
      return (bits & 0x7f) == 0x7f ? bits - 1 : bits;  // NaN -> 448
    default:
      return bits;
  }
  const uint64_t expMask = ((1ull << expBits) - 1) << manBits;
  // All-ones exponent (Inf/NaN): clear its lowest bit, a large finite value.
  return (bits & expMask) == expMask ? bits & ~(1ull << manBits) : bits;
}

uint64_t poisonBits(ncclDataType_t type) {
  switch (type) {
    case ncclFloat16:
      return 0x7da5;
    case ncclBfloat16:
      return 0x7fa5;
    case ncclFloat32:
      return 0x7fa5a5a5;
    case ncclFloat64:
      return 0x7ff5a5a5a5a5a5a5ull;
    case ncclFloat8e4m3:
      return 0x7f;  // its only NaN
    case ncclFloat8e5m2:
      return 0x7d;
    default:
      return 0xa5a5a5a5a5a5a5a5ull & sizeMask(typeSize(type));
  }
}

uint64_t loadBits(const void* buf, size_t index, size_t elemSize) {
  uint64_t v = 0;
  memcpy(&v, static_cast<const char*>(buf) + index * elemSize, elemSize);  // little-endian
  return v;
}

void storeBits(void* buf, size_t index, size_t elemSize, uint64_t bits) {
  memcpy(static_cast<char*>(buf) + index * elemSize, &bits, elemSize);
}

}  // namespace ferry::bench
