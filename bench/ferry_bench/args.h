// Command line of ferry-bench. Pure: parsing touches no global state (unit
// tested in tests/unit/bench_args_test.cc).
//
//   ferry-bench <op>[,<op>...|all] [-b MIN] [-e MAX] [-f FACTOR] [-d TYPE] [-o REDOP]
//               [-r ROOT] [-w WARMUP] [-n ITERS] [-g GPUS] [-c 0|1] [--inplace only|no|both]
//               [--lib PATH] [--compare PATH] [--json FILE] [--overlap] [--gemm-size N]
//               [--seed N] [--window] [--rounds R] [--overlap-nothing]
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "ferry_bench/ops.h"
#include "nccl.h"

namespace ferry::bench {

enum class InPlaceMode { Both, Only, No };

struct Options {
  std::vector<OpKind> ops;
  size_t minBytes = 8;
  size_t maxBytes = 128ull << 20;
  size_t factor = 2;
  ncclDataType_t type = ncclFloat32;
  ncclRedOp_t redop = ncclSum;
  int root = 0;
  int warmup = 5;
  int iters = 20;
  int gpus = 1;  // -g: devices driven by this process
  bool check = true;
  InPlaceMode inPlace = InPlaceMode::Both;
  std::string lib;      // empty: "libnccl.so.2" from the loader's search path
  std::string compare;  // second library, run side by side
  // --compare: run the two libraries this many times in turn (A B A B ...)
  // and report each row's median round; a slow phase of the machine (a
  // fresh device machine's network path ran 2-4x slower for minutes) then
  // weighs on both libraries alike.
  int rounds = 1;
  std::string json;     // --json: results for people and scripts
  std::string jsonOut;  // --json-out: a child's results for its parent (internal)
  bool overlap = false;
  // --overlap-nothing (implies --overlap): the GEMM windows as --overlap
  // times them, with no traffic launched in the shared one. Its "slowdown"
  // is the bracket's own bias (session 37's floor probe: x0.986-0.988), the
  // control to read --overlap's figures against.
  bool overlapNothing = false;
  // --window: buffers from the library's ncclMemAlloc, registered as
  // NCCL_WIN_COLL_SYMMETRIC windows on every communicator.
  bool window = false;
  size_t gemmSize = 8192;
  bool seedSet = false;
  uint64_t seed = 0;
  bool help = false;
};

// "64", "4K", "16M", "1G" (powers of 1024; case-insensitive). False on junk
// or overflow.
bool parseSize(std::string_view text, size_t* bytes);

// Parses argv[1..argc). On failure returns false with a one-line reason.
bool parseArgs(int argc, const char* const* argv, Options* options, std::string* error);

// The swept sizes: min, min*f, ... while <= max.
std::vector<size_t> sweepSizes(const Options& options);

// The arguments that parse back to `options` (without argv[0]): how a parent
// in --compare mode starts its children. --compare and --json are dropped.
std::vector<std::string> toArgs(const Options& options);

const char* usageText();

}  // namespace ferry::bench
