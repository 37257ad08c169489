// Element types for ferry-bench: names, sizes, and bit-exact conversions of
// every ncclDataType_t to and from double, written independently of any NCCL
// library so that references computed here check the library, not itself.
//
// Pure functions, thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

#include "nccl.h"

namespace ferry::bench {

size_t typeSize(ncclDataType_t type);
const char* typeName(ncclDataType_t type);  // nccl-tests' names: int8 ... bfloat16 ...
bool parseType(std::string_view name, ncclDataType_t* type);
bool isFloatType(ncclDataType_t type);
bool isSignedInt(ncclDataType_t type);

const char* redOpName(ncclRedOp_t op);  // sum prod max min avg
bool parseRedOp(std::string_view name, ncclRedOp_t* op);

// Largest integer n such that every integer in [-n, n] (or [0, n] unsigned)
// is exact in `type`, capped at 2^40: sums of small integers stay exact.
int64_t exactIntLimit(ncclDataType_t type);

// Element bits (low typeSize(type) bytes of the word) <-> double. Integers
// convert exactly up to 2^53; encoding rounds to nearest even, integers wrap.
double bitsToDouble(uint64_t bits, ncclDataType_t type);
uint64_t doubleToBits(double value, ncclDataType_t type);

// Forces a random bit pattern to a finite value of `type` (no NaN/Inf), so data
// that is only moved compares bitwise without special cases.
uint64_t sanitizeBits(uint64_t bits, ncclDataType_t type);

// A NaN with a payload for float types, 0xA5 bytes for integers: written to
// outputs before an operation so an element it forgot fails the check.
uint64_t poisonBits(ncclDataType_t type);

// Raw element access in a buffer of `type`.
uint64_t loadBits(const void* buf, size_t index, size_t elemSize);
void storeBits(void* buf, size_t index, size_t elemSize, uint64_t bits);

// Narrow float codecs, exposed for the unit tests.
double minifloatToDouble(uint64_t bits, int expBits, int manBits, bool ieeeSpecials);
uint64_t doubleToMinifloat(double value, int expBits, int manBits, bool ieeeSpecials);

}  // namespace ferry::bench
