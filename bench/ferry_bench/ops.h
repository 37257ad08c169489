// The op table of ferry-bench: for every benchmarked operation, its element
// counts per rank (nccl-tests' conventions), bus-bandwidth factor, input data
// and the expected output of any rank, computed independently on the host.
//
// Pure functions of their arguments (no library, no device): unit tested in
// tests/unit/bench_reference_test.cc. Thread-safe; an InputFn must be too
// (the builders call it from several threads).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string_view>
#include <vector>

#include "nccl.h"

namespace ferry::bench {

enum class OpKind {
  AllReduce,
  AllGather,
  ReduceScatter,
  Broadcast,
  Reduce,
  AlltoAll,
  SendRecv,
  Gather,
  Scatter,
};
inline constexpr int kOpCount = 9;

struct OpInfo {
  OpKind kind;
  const char* name;  // the command-line name: all_reduce ...
  bool reduces;      // takes a reduction operator (redop column)
  bool rooted;       // takes a root (root column)
  bool inPlace;      // has an in-place form the tool measures
};
const OpInfo& opInfo(OpKind kind);
bool parseOp(std::string_view name, OpKind* kind);

// nccl-tests' bus-bandwidth factor: busbw = algbw * factor.
double busFactor(OpKind kind, int nranks);

// Element counts of one measurement. In-place, the send buffer lies inside
// the receive buffer at sendInplaceOffset (all-gather, gather), or the receive
// buffer inside the send buffer at recvInplaceOffset (reduce-scatter, scatter).
struct Shape {
  size_t count = 0;       // the "count" column: elements the size stands for
  size_t sendCount = 0;   // elements of each rank's send buffer
  size_t recvCount = 0;   // elements of each rank's receive buffer
  size_t paramCount = 0;  // the count argument of the call
  size_t sendInplaceOffset = 0;
  size_t recvInplaceOffset = 0;
  size_t bytes = 0;  // the "size" column: max(send, recv) bytes
};
Shape shapeFor(OpKind kind, size_t bytes, size_t typeSize, int nranks, int rank);

// One measured case, identical on every rank.
struct OpCase {
  OpKind kind = OpKind::AllReduce;
  ncclDataType_t type = ncclFloat32;
  ncclRedOp_t redop = ncclSum;
  int root = 0;
  int nranks = 1;
};

// Bits of element `index` of rank `rank`'s send buffer (low typeSize bytes).
using InputFn = std::function<uint64_t(int rank, size_t index)>;

// Fresh data for one size: random finite bit patterns for ops that only move
// data; for reductions, small integers whose sums/products/averages over
// nranks are exact in the type (products are +-1 or +-2), so references are
// exact in every element type.
struct DataGen {
  uint64_t seed = 0;
  OpCase op;
  int64_t maxAbs = 0;  // reductions: inputs in [-maxAbs, maxAbs]
  // Reductions: the element bits of every input value v, at [v + tableBias].
  int64_t tableBias = 0;
  std::vector<uint64_t> encoded;
};
DataGen makeDataGen(const OpCase& op, uint64_t seed);
uint64_t inputBits(const DataGen& gen, int rank, size_t index);

// Fills rank's send buffer (shape.sendCount elements).
void buildInput(const OpCase& op, const Shape& shape, int rank, const InputFn& input, void* send);

// Writes what rank's receive buffer (shape.recvCount elements) must hold after
// the op. Returns false when the op leaves it undefined on this rank (reduce,
// gather on a non-root rank): nothing to check.
bool buildExpected(const OpCase& op, const Shape& shape, int rank, const InputFn& input,
                   void* expected);

// The reduction of the inputs of all ranks at one element, in the type.
uint64_t reduceElement(const OpCase& op, const InputFn& input, size_t index);

// How results compare: bitwise for data movement; by value for reductions
// (integers exact, +-1 for integer avg; floats within absTol, NaN always wrong).
struct Tolerance {
  bool bitwise = true;
  double absTol = 0;
  int64_t intTol = 0;
};
Tolerance toleranceFor(const OpCase& op, const DataGen& gen);

// Elements of `got` that differ from `expected`; the first at *firstWrong.
size_t countWrong(const void* got, const void* expected, size_t count, ncclDataType_t type,
                  const Tolerance& tol, size_t* firstWrong = nullptr);

// Runs body(begin, end) over [0, count) in chunks on up to 32 threads (one
// when count is small); returns when every chunk is done. Used by the
// builders and the checker, whose per-element work is independent.
void parallelFor(size_t count, const std::function<void(size_t, size_t)>& body);

}  // namespace ferry::bench
