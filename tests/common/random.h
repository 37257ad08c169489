// Test data for every Ferry test: a printed, reproducible seed, random
// non-trivial buffers of any ncclDataType_t, poison values, and element
// conversions (half, bf16, fp8) written independently of the library, for
// computing references.
//
// Reproduce a failure with FERRY_TEST_SEED=<the printed seed>. Multi-rank
// tests give every rank the same seed and derive per-rank streams with
// Rng(seed, stream), so any rank can recompute what another sent.
//
// Threading: testSeed() is thread-safe; an Rng belongs to one thread.
#pragma once

#include <cstddef>
#include <cstdint>

#include "nccl.h"

namespace ferry::test {

// FERRY_TEST_SEED when set, else time ^ pid. Prints "seed=<n>" to stderr on
// the first call; the same value on every later call in the process.
uint64_t testSeed();

// How many rounds a randomized case runs: `full` unless FERRY_TEST_ROUNDS
// names another positive count (CI's heaviest configurations run fewer;
// a long local soak more).
int testRounds(int full);

// splitmix64: tiny, fast, good enough for test data; deterministic per seed.
class Rng {
 public:
  explicit Rng(uint64_t seed, uint64_t stream = 0);
  uint64_t next();
  uint64_t below(uint64_t n);             // uniform in [0, n); n > 0
  int64_t range(int64_t lo, int64_t hi);  // uniform in [lo, hi]
  double uniform();                       // [0, 1)

 private:
  uint64_t state_;
};

size_t dataTypeSize(ncclDataType_t type);
const char* dataTypeName(ncclDataType_t type);
bool isFloatType(ncclDataType_t type);
bool isSignedType(ncclDataType_t type);

// Random bit patterns, every one a finite value for float types (no NaN or
// Inf): for data that is only moved (broadcast, all-gather, send/recv) and
// compared bitwise.
void fillRandomBits(void* buf, size_t count, ncclDataType_t type, Rng& rng);

// Random integers in [-maxAbs, maxAbs] ([0, maxAbs] for unsigned types),
// exactly representable in `type` (maxAbs <= 16 for fp8 e4m3, <= 8 for
// e5m2, <= 256 for bf16, <= 2048 for half): sums of a few such values are
// exact in every type that can hold the result, so reductions compare exactly.
void fillRandomInts(void* buf, size_t count, ncclDataType_t type, Rng& rng, int maxAbs);

// Poison: a recognizable value (NaN with a payload for float types, 0xA5
// bytes for integers) written to outputs before an operation, so an element
// the operation forgot to write fails the comparison.
void fillPoison(void* buf, size_t count, ncclDataType_t type);
bool isPoison(const void* buf, size_t index, ncclDataType_t type);

// Element `index` as a double (64-bit integers above 2^53 lose precision).
double loadElement(const void* buf, size_t index, ncclDataType_t type);
// Stores `value` rounded to nearest-even in `type`. Integers are truncated
// toward zero and wrap; half/bf16 overflow gives Inf, fp8 saturates to its
// largest finite value.
void storeElement(void* buf, size_t index, ncclDataType_t type, double value);

// Bit-level encoders/decoders for the narrow float types.
double halfToDouble(uint16_t bits);
uint16_t doubleToHalf(double value);
double bf16ToDouble(uint16_t bits);
uint16_t doubleToBf16(double value);
double fp8e4m3ToDouble(uint8_t bits);
uint8_t doubleToFp8e4m3(double value);
double fp8e5m2ToDouble(uint8_t bits);
uint8_t doubleToFp8e5m2(double value);

struct Mismatch {
  bool found = false;
  size_t index = 0;
  double got = 0;
  double want = 0;
};

// First element where `got` differs from `want`. Integer types compare
// exactly (all 64 bits); float types within absTol + relTol * |want|, and a
// NaN in `got` always mismatches.
Mismatch findMismatch(const void* got, const void* want, size_t count, ncclDataType_t type,
                      double relTol = 0, double absTol = 0);

}  // namespace ferry::test
