// One ferry-bench run with one library in this process: forms the
// communicator(s) (one per device this process drives), then for every op and
// size checks the result on fresh data with poisoned outputs, warms up and
// times out-of-place and in-place launches, and optionally the traffic
// against a concurrent GEMM.
//
// Single-threaded. Every rank of the job must run the same sweep (same
// options and seed): the ops are collective.
#pragma once

#include <string>

#include "ferry_bench/args.h"
#include "ferry_bench/launch_env.h"
#include "ferry_bench/results.h"

namespace ferry::bench {

enum ExitCode { kExitOk = 0, kExitWrong = 1, kExitSetup = 2 };

// Runs the sweep with the library at `libPath`; fills `result` (this
// process's view: its own times and #wrong). Prints a progress line on stderr
// for long sweeps and every wrong element count on non-reporting ranks.
// Returns kExitOk, kExitWrong (a check failed or an op broke mid-sweep) or
// kExitSetup (library, device or communicator could not be set up).
int runSweep(const Options& options, const LaunchEnv& env, const std::string& libPath,
             uint64_t seed, RunResult* result);

}  // namespace ferry::bench
