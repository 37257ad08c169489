// Reduction arithmetic for every NCCL datatype and op, shared by the CUDA
// kernels (DESIGN.md layer 8) and the host runtime's CPU reductions (layer 9).
//
// Self-contained: no CUDA headers, no <cmath>. Everything that may run on a
// GPU is FERRY_HD (= __host__ __device__ under nvcc) and header-only; the CPU
// loop reduceInto() is header-only too (inline) because src/algo has no .cc in
// the ferry_core source globs.
//
// Numeric contract (identical on host and device):
// - Integers wrap modulo 2^bits (signed types compute in their unsigned twin,
//   so overflow is defined). Avg truncates toward zero, like NCCL.
// - Narrow floats (half, bf16, fp8 e4m3, fp8 e5m2) widen to float, compute
//   once and round once per combine (round-to-nearest-even).
//   half/bf16/e5m2 overflow gives Inf; e4m3 ("fn" variant) has no Inf and
//   saturates to +-448, Inf inputs included; its NaN is 0x7F/0xFF.
// - NaN propagates through every op: Sum/Prod/PreMulSum by IEEE arithmetic,
//   and Max/Min return a NaN operand when either is NaN (unlike fmaxf, which
//   drops it), so a NaN anywhere in a reduction shows in the result whatever
//   the op. Max/Min of +0 and -0 may return either (they compare equal).
//   Max/Min never round: they return one operand's bits.
//
// Threading: pure functions on values; no state.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <type_traits>

#ifdef __CUDACC__
#define FERRY_HD __host__ __device__
// For a few large device paths: one out-of-line copy instead of one per call
// site (kernel registers and build time).
#define FERRY_NOINLINE __noinline__
#else
#define FERRY_HD
#define FERRY_NOINLINE
#endif

namespace ferry::algo {

// ---- storage types for the narrow floats (bit containers, no arithmetic) ----
struct Half {
  uint16_t bits;
};
struct Bf16 {
  uint16_t bits;
};
struct Fp8E4M3 {
  uint8_t bits;
};
struct Fp8E5M2 {
  uint8_t bits;
};

// ncclDataType_t and ncclRedOp_t values, repeated so that device code needs
// no nccl.h; reduce_ops_test checks they match the public header.
enum DataType : int {
  kInt8 = 0,
  kUint8 = 1,
  kInt32 = 2,
  kUint32 = 3,
  kInt64 = 4,
  kUint64 = 5,
  kFloat16 = 6,
  kFloat32 = 7,
  kFloat64 = 8,
  kBfloat16 = 9,
  kFloat8e4m3 = 10,
  kFloat8e5m2 = 11,
  kNumDataTypes = 12
};
enum RedOp : int {
  kOpSum = 0,
  kOpProd = 1,
  kOpMax = 2,
  kOpMin = 3,
  kOpAvg = 4,
  // Internal code for a user-created PreMulSum op (ncclRedOpCreatePreMulSum):
  // the enqueue layer resolves the user's handle to this plus its scalar.
  kOpPreMulSum = 5
};

// ---- float <-> bits --------------------------------------------------------
FERRY_HD inline uint32_t floatBits(float x) {
  uint32_t u;
  memcpy(&u, &x, sizeof u);
  return u;
}
FERRY_HD inline float bitsFloat(uint32_t u) {
  float x;
  memcpy(&x, &u, sizeof x);
  return x;
}
template <class T>
FERRY_HD inline bool isNan(T x) {
  return x != x;  // true only for NaN (the build never uses -ffast-math)
}

// Rounds a float to a narrow IEEE-like format with kExp exponent and kMant
// mantissa bits (bias 2^(kExp-1)-1), nearest-even. Values with magnitude >=
// `overflowBits` (as a float bit pattern, sign cleared) give `overflowCode`
// (Inf, or the saturated maximum); NaN gives `nanCode`. Sign is or-ed in.
template <int kExp, int kMant>
FERRY_HD inline uint32_t floatToNarrow(float x, uint32_t overflowBits, uint32_t overflowCode,
                                       uint32_t nanCode) {
  constexpr int kBias = (1 << (kExp - 1)) - 1;
  constexpr int kDrop = 23 - kMant;  // float mantissa bits dropped
  uint32_t f = floatBits(x);
  uint32_t sign = (f >> 31) << (kExp + kMant);
  uint32_t a = f & 0x7fffffffu;
  if (a > 0x7f800000u) return sign | nanCode;
  if (a >= overflowBits) return sign | overflowCode;
  uint32_t e = a >> 23;
  if (e >= static_cast<uint32_t>(128 - kBias)) {
    // Normal in the narrow format: rebias the exponent and round the dropped
    // bits; a carry out of the mantissa bumps the exponent, which is right.
    uint32_t r = (a >> kDrop) - (static_cast<uint32_t>(127 - kBias) << kMant);
    uint32_t rem = a & ((1u << kDrop) - 1);
    uint32_t half = 1u << (kDrop - 1);
    if (rem > half || (rem == half && (r & 1u))) ++r;
    return sign | r;
  }
  // Subnormal (or zero): the result is round(|x| / 2^(1-bias-kMant)).
  // |x| = m * 2^(e-150) with the implicit bit in m, so shift right by
  // 151 - bias - kMant - e. Shifts above 24 leave less than half a quantum.
  if (e == 0) return sign;  // float zero/subnormal: far below every narrow quantum
  int shift = 151 - kBias - kMant - static_cast<int>(e);
  if (shift > 24) return sign;
  uint32_t m = (a & 0x7fffffu) | 0x800000u;
  uint32_t r = m >> shift;
  uint32_t rem = m & ((1u << shift) - 1);
  uint32_t half = 1u << (shift - 1);
  if (rem > half || (rem == half && (r & 1u))) ++r;  // may carry into the smallest normal
  return sign | r;
}

// Exact widening of a narrow format to float. `ieee`: the top exponent is
// Inf/NaN; otherwise (e4m3) only all-ones is NaN.
template <int kExp, int kMant, bool kIeee>
FERRY_HD inline float narrowToFloat(uint32_t bits) {
  constexpr int kBias = (1 << (kExp - 1)) - 1;
  constexpr uint32_t kMaxExp = (1u << kExp) - 1;
  constexpr uint32_t kMantMask = (1u << kMant) - 1;
  uint32_t sign = ((bits >> (kExp + kMant)) & 1u) << 31;
  uint32_t e = (bits >> kMant) & kMaxExp;
  uint32_t m = bits & kMantMask;
  if (kIeee && e == kMaxExp) return bitsFloat(sign | 0x7f800000u | (m << (23 - kMant)));
  if (!kIeee && e == kMaxExp && m == kMantMask) return bitsFloat(sign | 0x7fc00000u);
  if (e == 0) {
    // m * 2^(1-bias-kMant): exact, m is small and the scale a power of two.
    float v = static_cast<float>(m) * bitsFloat(static_cast<uint32_t>(128 - kBias - kMant) << 23);
    return sign ? -v : v;
  }
  return bitsFloat(sign | ((e - kBias + 127) << 23) | (m << (23 - kMant)));
}

FERRY_HD inline float halfToFloat(uint16_t h) {
  return narrowToFloat<5, 10, true>(h);
}
// 65520 (0x477ff000) is halfway between 65504 (odd mantissa) and 2^16: rounds to Inf.
FERRY_HD inline uint16_t floatToHalf(float x) {
  return static_cast<uint16_t>(floatToNarrow<5, 10>(x, 0x477ff000u, 0x7c00u, 0x7e00u));
}
FERRY_HD inline float bf16ToFloat(uint16_t b) {
  return bitsFloat(static_cast<uint32_t>(b) << 16);
}
FERRY_HD inline uint16_t floatToBf16(float x) {
  uint32_t f = floatBits(x);
  if ((f & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((f >> 16) | 0x0040u);
  // Nearest-even on the low 16 bits; a carry can reach the exponent and, past
  // the largest finite value, gives exactly Inf (0x7f80).
  f += 0x7fffu + ((f >> 16) & 1u);
  return static_cast<uint16_t>(f >> 16);
}
FERRY_HD inline float fp8e4m3ToFloat(uint8_t b) {
  return narrowToFloat<4, 3, false>(b);
}
// Saturating: everything >= 448 (0x43e00000), Inf included, becomes 448 (0x7e);
// values in (448, 464] would round to 448 anyway.
FERRY_HD inline uint8_t floatToFp8e4m3(float x) {
  return static_cast<uint8_t>(floatToNarrow<4, 3>(x, 0x43e00000u, 0x7eu, 0x7fu));
}
FERRY_HD inline float fp8e5m2ToFloat(uint8_t b) {
  return narrowToFloat<5, 2, true>(b);
}
// 61440 (0x47700000) is halfway between 57344 (odd mantissa) and 2^16: Inf.
FERRY_HD inline uint8_t floatToFp8e5m2(float x) {
  return static_cast<uint8_t>(floatToNarrow<5, 2>(x, 0x47700000u, 0x7cu, 0x7eu));
}

// ---- per-type arithmetic traits ----------------------------------------------
// Compute: the type arithmetic happens in. load/store: widen and round.
// Integers: Wrap is the unsigned twin used for + and * (defined overflow).
template <class T>
struct Arith;

template <class T, class W>
struct IntArith {
  using Compute = T;
  static constexpr bool kIsFloat = false;
  FERRY_HD static T load(T x) { return x; }
  FERRY_HD static T store(T x) { return x; }
  FERRY_HD static T add(T a, T b) { return static_cast<T>(static_cast<W>(a) + static_cast<W>(b)); }
  FERRY_HD static T mul(T a, T b) { return static_cast<T>(static_cast<W>(a) * static_cast<W>(b)); }
};
// 8-bit operands promote to int; multiplying through uint32_t keeps it defined.
template <>
struct Arith<int8_t> : IntArith<int8_t, uint32_t> {};
template <>
struct Arith<uint8_t> : IntArith<uint8_t, uint32_t> {};
template <>
struct Arith<int32_t> : IntArith<int32_t, uint32_t> {};
template <>
struct Arith<uint32_t> : IntArith<uint32_t, uint32_t> {};
template <>
struct Arith<int64_t> : IntArith<int64_t, uint64_t> {};
template <>
struct Arith<uint64_t> : IntArith<uint64_t, uint64_t> {};

template <class T>
struct WideFloatArith {
  using Compute = T;
  static constexpr bool kIsFloat = true;
  FERRY_HD static T load(T x) { return x; }
  FERRY_HD static T store(T x) { return x; }
};
template <>
struct Arith<float> : WideFloatArith<float> {};
template <>
struct Arith<double> : WideFloatArith<double> {};

template <>
struct Arith<Half> {
  using Compute = float;
  static constexpr bool kIsFloat = true;
  FERRY_HD static float load(Half x) { return halfToFloat(x.bits); }
  FERRY_HD static Half store(float x) { return Half{floatToHalf(x)}; }
};
template <>
struct Arith<Bf16> {
  using Compute = float;
  static constexpr bool kIsFloat = true;
  FERRY_HD static float load(Bf16 x) { return bf16ToFloat(x.bits); }
  FERRY_HD static Bf16 store(float x) { return Bf16{floatToBf16(x)}; }
};
template <>
struct Arith<Fp8E4M3> {
  using Compute = float;
  static constexpr bool kIsFloat = true;
  FERRY_HD static float load(Fp8E4M3 x) { return fp8e4m3ToFloat(x.bits); }
  FERRY_HD static Fp8E4M3 store(float x) { return Fp8E4M3{floatToFp8e4m3(x)}; }
};
template <>
struct Arith<Fp8E5M2> {
  using Compute = float;
  static constexpr bool kIsFloat = true;
  FERRY_HD static float load(Fp8E5M2 x) { return fp8e5m2ToFloat(x.bits); }
  FERRY_HD static Fp8E5M2 store(float x) { return Fp8E5M2{floatToFp8e5m2(x)}; }
};

// a + b and a * b in T's arithmetic (wrapping for integers).
template <class T>
FERRY_HD inline T arithAdd(T a, T b) {
  using A = Arith<T>;
  if constexpr (A::kIsFloat) {
    return A::store(A::load(a) + A::load(b));
  } else {
    return A::add(a, b);
  }
}
template <class T>
FERRY_HD inline T arithMul(T a, T b) {
  using A = Arith<T>;
  if constexpr (A::kIsFloat) {
    return A::store(A::load(a) * A::load(b));
  } else {
    return A::mul(a, b);
  }
}

// ---- functors ----------------------------------------------------------------
// Each is a trivially copyable value usable on host and device:
// combine(a, b) is the associative step of the reduction.
template <class T>
struct Sum {
  FERRY_HD T operator()(T a, T b) const { return arithAdd(a, b); }
};
template <class T>
struct Prod {
  FERRY_HD T operator()(T a, T b) const { return arithMul(a, b); }
};
template <class T>
struct Max {
  FERRY_HD T operator()(T a, T b) const {
    auto x = Arith<T>::load(a);
    auto y = Arith<T>::load(b);
    if (isNan(x)) return a;
    if (isNan(y)) return b;
    return x < y ? b : a;
  }
};
template <class T>
struct Min {
  FERRY_HD T operator()(T a, T b) const {
    auto x = Arith<T>::load(a);
    auto y = Arith<T>::load(b);
    if (isNan(x)) return a;
    if (isNan(y)) return b;
    return y < x ? b : a;
  }
};
// NCCL's PreMulSum: every rank's input is multiplied by `scalar` (one
// rounding), then the products are summed (one rounding per combine).
template <class T>
struct PreMulSum {
  T scalar;
  FERRY_HD T premul(T x) const { return arithMul(x, scalar); }
  FERRY_HD T combine(T a, T b) const { return arithAdd(a, b); }
  FERRY_HD T operator()(T a, T b) const { return arithAdd(a, b); }
};

// Functors travel to kernels by value (PreMulSum carries its scalar).
static_assert(std::is_trivially_copyable_v<PreMulSum<Half>> && sizeof(Half) == 2 &&
                  sizeof(Bf16) == 2 && sizeof(Fp8E4M3) == 1 && sizeof(Fp8E5M2) == 1,
              "storage types must match the wire formats");

// Avg = Sum across ranks, then this once on the result. Integers truncate
// toward zero (C division); floats divide in their compute type, one rounding.
template <class T>
FERRY_HD inline T finalizeAvg(T x, int nranks) {
  using A = Arith<T>;
  if constexpr (A::kIsFloat) {
    using C = typename A::Compute;
    return A::store(A::load(x) / static_cast<C>(nranks));
  } else {
    return static_cast<T>(x / static_cast<T>(nranks));
  }
}

// ---- datatype dispatch ---------------------------------------------------------
// Storage type of each ncclDataType_t.
template <int kType>
struct StorageOf;
template <>
struct StorageOf<kInt8> {
  using Type = int8_t;
};
template <>
struct StorageOf<kUint8> {
  using Type = uint8_t;
};
template <>
struct StorageOf<kInt32> {
  using Type = int32_t;
};
template <>
struct StorageOf<kUint32> {
  using Type = uint32_t;
};
template <>
struct StorageOf<kInt64> {
  using Type = int64_t;
};
template <>
struct StorageOf<kUint64> {
  using Type = uint64_t;
};
template <>
struct StorageOf<kFloat16> {
  using Type = Half;
};
template <>
struct StorageOf<kFloat32> {
  using Type = float;
};
template <>
struct StorageOf<kFloat64> {
  using Type = double;
};
template <>
struct StorageOf<kBfloat16> {
  using Type = Bf16;
};
template <>
struct StorageOf<kFloat8e4m3> {
  using Type = Fp8E4M3;
};
template <>
struct StorageOf<kFloat8e5m2> {
  using Type = Fp8E5M2;
};

// Calls f.template operator()<T>() with the storage type of `dataType`
// (e.g. a C++20 lambda `[&]<class T>() {...}`). False for an unknown type.
// Host only (the callable is usually a host lambda).
template <class F>
inline bool dispatchType(int dataType, F&& f) {
  switch (dataType) {
    case kInt8:
      f.template operator()<int8_t>();
      return true;
    case kUint8:
      f.template operator()<uint8_t>();
      return true;
    case kInt32:
      f.template operator()<int32_t>();
      return true;
    case kUint32:
      f.template operator()<uint32_t>();
      return true;
    case kInt64:
      f.template operator()<int64_t>();
      return true;
    case kUint64:
      f.template operator()<uint64_t>();
      return true;
    case kFloat16:
      f.template operator()<Half>();
      return true;
    case kFloat32:
      f.template operator()<float>();
      return true;
    case kFloat64:
      f.template operator()<double>();
      return true;
    case kBfloat16:
      f.template operator()<Bf16>();
      return true;
    case kFloat8e4m3:
      f.template operator()<Fp8E4M3>();
      return true;
    case kFloat8e5m2:
      f.template operator()<Fp8E5M2>();
      return true;
    default:
      return false;
  }
}

// Bytes per element; 0 for an unknown type.
FERRY_HD inline size_t typeBytes(int dataType) {
  switch (dataType) {
    case kInt8:
    case kUint8:
    case kFloat8e4m3:
    case kFloat8e5m2:
      return 1;
    case kFloat16:
    case kBfloat16:
      return 2;
    case kInt32:
    case kUint32:
    case kFloat32:
      return 4;
    case kInt64:
    case kUint64:
    case kFloat64:
      return 8;
    default:
      return 0;
  }
}

// ---- CPU loops for the host runtime ------------------------------------------------
// Written as functor structs, not C++20 template lambdas, so this header stays
// valid C++17 for nvcc.
namespace detail {
template <class T, class F>
inline void mapLoop(void* dst, const void* src, size_t count, F f) {
  // memcpy per element: host runtime buffers need no alignment.
  char* d = static_cast<char*>(dst);
  const char* s = static_cast<const char*>(src);
  for (size_t i = 0; i < count; ++i) {
    T a, b;
    memcpy(&a, d + i * sizeof(T), sizeof(T));
    memcpy(&b, s + i * sizeof(T), sizeof(T));
    T r = f(a, b);
    memcpy(d + i * sizeof(T), &r, sizeof(T));
  }
}
template <class T>
struct PremulAccumulate {
  PreMulSum<T> p;
  T operator()(T a, T b) const { return p.combine(a, p.premul(b)); }
};
template <class T>
struct PremulOnly {
  PreMulSum<T> p;
  T operator()(T, T b) const { return p.premul(b); }
};
template <class T>
struct AvgOnly {
  int nranks;
  T operator()(T a, T) const { return finalizeAvg(a, nranks); }
};
struct ReduceIntoFn {
  void* dst;
  const void* src;
  size_t count;
  int op;
  const void* scalar;
  bool ok;
  template <class T>
  void operator()() {
    switch (op) {
      case kOpSum:
      case kOpAvg:
        mapLoop<T>(dst, src, count, Sum<T>{});
        break;
      case kOpProd:
        mapLoop<T>(dst, src, count, Prod<T>{});
        break;
      case kOpMax:
        mapLoop<T>(dst, src, count, Max<T>{});
        break;
      case kOpMin:
        mapLoop<T>(dst, src, count, Min<T>{});
        break;
      case kOpPreMulSum: {
        if (scalar == nullptr) {
          ok = false;
          break;
        }
        PremulAccumulate<T> f;
        memcpy(&f.p.scalar, scalar, sizeof(T));
        mapLoop<T>(dst, src, count, f);
        break;
      }
      default:
        ok = false;
    }
  }
};
struct PremulCopyFn {
  void* dst;
  const void* src;
  size_t count;
  const void* scalar;
  template <class T>
  void operator()() {
    PremulOnly<T> f;
    memcpy(&f.p.scalar, scalar, sizeof(T));
    if (dst != src) memcpy(dst, src, count * sizeof(T));  // so mapLoop reads defined bytes
    mapLoop<T>(dst, src, count, f);
  }
};
struct AvgFn {
  void* buf;
  size_t count;
  int nranks;
  template <class T>
  void operator()() {
    mapLoop<T>(buf, buf, count, AvgOnly<T>{nranks});
  }
};
}  // namespace detail

// dst[i] = op(dst[i], src[i]) for i < count. `op`: kOpSum..kOpAvg (Avg
// reduces as Sum; apply finalizeAvgInto once at the end) or kOpPreMulSum,
// where dst accumulates already-scaled values: dst = dst + src * *scalar
// (`scalar`: one host element of `dataType`; start dst with premulCopy).
// dst == src is allowed; other overlap is not. Returns false for an unknown
// type or op, or a PreMulSum without scalar (then nothing is written).
// Threading: none of its own; the caller owns both buffers for the call.
inline bool reduceInto(void* dst, const void* src, size_t count, int dataType, int op,
                       const void* scalar = nullptr) {
  detail::ReduceIntoFn fn{dst, src, count, op, scalar, true};
  return dispatchType(dataType, fn) && fn.ok;
}

// dst[i] = src[i] * *scalar, rounded once (a rank's own PreMulSum input).
inline bool premulCopy(void* dst, const void* src, size_t count, int dataType, const void* scalar) {
  if (scalar == nullptr) return false;
  return dispatchType(dataType, detail::PremulCopyFn{dst, src, count, scalar});
}

// buf[i] = finalizeAvg(buf[i], nranks): the last step of an Avg reduction.
inline bool finalizeAvgInto(void* buf, size_t count, int dataType, int nranks) {
  if (nranks <= 0) return false;
  return dispatchType(dataType, detail::AvgFn{buf, count, nranks});
}

}  // namespace ferry::algo
