// What one ferry-bench run measured with one library, and its line-based
// serialization (the --json-out file a child hands to its parent in
// --compare mode). Plain values; pure functions.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "ferry_bench/ops.h"

namespace ferry::bench {

// One placement (out-of-place or in-place) at one size.
struct Measure {
  bool ran = false;
  double timeUs = 0;
  double algBw = 0;  // GB/s (1e9 bytes)
  double busBw = 0;
  int64_t wrong = -1;  // -1: not checked
};

// --overlap: the traffic (out-of-place) against a concurrent GEMM.
struct OverlapMeasure {
  bool ran = false;
  double gemmTflopsAlone = 0;
  double gemmTflopsUnder = 0;  // while the traffic runs
  double busBwUnderGemm = 0;   // traffic's busbw while the GEMM runs
  // Each rank's GEMM slowdown (alone / beside; 0 where a rank timed no
  // GEMM). gemmTflopsUnder is the worst rank's; over --rounds, each rank's
  // median round, then the worst of those (as the torch client reports).
  std::vector<double> rankSlowdowns;
};

struct SizeRow {
  size_t bytes = 0;
  size_t count = 0;
  Measure oop, ip;
  OverlapMeasure overlap;
};

struct OpResult {
  OpKind kind = OpKind::AllReduce;
  bool supported = true;
  std::string error;    // why the op stopped (unsupported, or failed mid-sweep)
  bool failed = false;  // failed after the first size: a real error
  int root = -1;        // -1 for ops without a root (nccl-tests' convention)
  std::vector<SizeRow> rows;
};

struct RunResult {
  std::string lib;
  int version = 0;
  int nranks = 0;
  std::string runtime;  // "cuda" or "host"
  std::string type;     // element type name
  std::string redop;
  int64_t wrongTotal = 0;  // this process's ranks
  std::vector<OpResult> ops;
};

std::string serializeResult(const RunResult& result);
bool parseResult(const std::string& text, RunResult* result, std::string* error);

// Several runs of one library with the same options (--rounds) as one:
// per row (matched by op and size) and placement, the round with the
// median time (the lower middle of an even count), its time and bandwidths
// together; overlap fields are medians of their own. Wrong counts are the
// worst of any round, and an op any round failed stays failed. The first
// run gives the shape; a round without some row is left out of its median.
RunResult medianOfRounds(const std::vector<RunResult>& runs);

}  // namespace ferry::bench
