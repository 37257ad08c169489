// Collective test cases' data and their expected results, computed on the
// host independently of the library (no src/ code; conversions for the narrow
// float types come from tests/common/random.h, which is test code).
//
// Every element a rank contributes is a hash of (seed, tag, rank, index), so
// each rank regenerates any block of any rank's input on its own and checks
// its output against a reference built from all ranks' inputs. Nothing is
// exchanged between ranks but the agreed seed.
//
// Inputs are chosen so the expected result is well defined:
//   - integers: full-range random bits for sum/avg/max/min/PreMulSum (sums
//     wrap modulo 2^bits; avg is that wrapped sum, read as signed for signed
//     types, divided by nranks truncating toward zero, as NCCL does), small
//     non-zero values for prod (the wrapped product is still exact);
//   - floats, "exact" specs: sum of integers on a per-element power-of-two
//     grid small enough that every partial sum, in any order, is exactly
//     representable; prod of powers of two. Compared exactly;
//   - floats otherwise: random reals in [-16, 16] (prod: |x| in [0.75, 1.25]),
//     rounded to the type; the reference is computed in double and compared
//     with an error bound for (nranks + 2) roundings in the type;
//   - max/min: compared exactly; all-gather/broadcast: bitwise.
//
// Threading: a CollData is immutable after construction; any thread may use it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "common/buffers.h"
#include "nccl.h"

namespace ferry::test {

enum class Coll { AllReduce, AllGather, ReduceScatter, Broadcast, Reduce };
enum class Red { Sum, Prod, Max, Min, Avg, PreMulHost, PreMulDevice };

inline constexpr Coll kAllColls[] = {Coll::AllReduce, Coll::AllGather, Coll::ReduceScatter,
                                     Coll::Broadcast, Coll::Reduce};
inline constexpr Red kAllReds[] = {Red::Sum, Red::Prod,       Red::Max,         Red::Min,
                                   Red::Avg, Red::PreMulHost, Red::PreMulDevice};

const char* collName(Coll c);
const char* redName(Red r);
bool isReducing(Coll c);
bool hasRoot(Coll c);

// One collective, the same on every rank.
struct CollSpec {
  Coll coll = Coll::AllReduce;
  ncclDataType_t type = ncclFloat32;
  Red red = Red::Sum;  // ignored by all-gather and broadcast
  size_t count = 0;    // the API's count: all-gather sendcount, reduce-scatter recvcount
  int root = 0;        // broadcast and reduce
  bool inPlace = false;
  bool exact = false;  // float sum/prod: grid inputs, compared exactly
  BufferKind kind = BufferKind::Plain;
  uint64_t tag = 0;  // unique per operation in a run: keys the data
};

// "allreduce float32 sum n=131 out-of-place exact tag=17" (and root).
std::string describe(const CollSpec& spec);

class CollData {
 public:
  CollData(uint64_t seed, const CollSpec& spec, int nranks);

  // Elements of one rank's send buffer (nranks * count for reduce-scatter).
  size_t inputCount() const;
  // Elements of rank `me`'s output (nranks * count for all-gather).
  size_t outputCount() const;
  // Elements [begin, begin + n) of `rank`'s input, as bytes of the type.
  void input(int rank, size_t begin, size_t n, void* out) const;
  // `rank`'s PreMulSum scalar, in the low bytes (little-endian) of the word.
  uint64_t scalarBits(int rank) const;

  // Compares rank `me`'s output (outputCount() elements of the type) with
  // the reference; prints up to 3 wrong elements prefixed by `what` and
  // returns how many were wrong.
  size_t check(int me, const void* got, const char* what) const;

 private:
  uint64_t elemBits(int rank, size_t i) const;
  uint64_t floatElem(uint64_t h, size_t i) const;
  bool checkInt(size_t idx, uint64_t got, std::string* why) const;
  bool checkFloat(size_t idx, double got, std::string* why) const;

  CollSpec spec_;
  int nranks_;
  size_t elemSize_;
  uint64_t mask_;                  // the type's bits
  std::vector<uint64_t> rankKey_;  // per-rank hash keys
  uint64_t elemKey_;               // per-element keys shared by all ranks
  int64_t gridMax_;                // |k| bound of exact sums
};

}  // namespace ferry::test
