// ferry-bench: nccl-tests-style performance and correctness sweeps of any
// libnccl.so.2 (loaded with dlopen), alone or side by side (--compare), on
// CUDA or on Ferry's host runtime. See args.cc's usage text.
#include <cinttypes>
#include <cstdio>
#include <fstream>

#include "ferry_bench/args.h"
#include "ferry_bench/compare.h"
#include "ferry_bench/launch_env.h"
#include "ferry_bench/report.h"
#include "ferry_bench/runner.h"

using namespace ferry::bench;

namespace {

int runSingle(const Options& options, const LaunchEnv& env, uint64_t seed) {
  RunResult result;
  const std::string lib = options.lib.empty() ? "libnccl.so.2" : options.lib;
  const int code = runSweep(options, env, lib, seed, &result);
  if (code == kExitSetup) return code;
  if (!options.jsonOut.empty()) {  // a child of --compare: its parent prints
    std::ofstream out(options.jsonOut);
    out << serializeResult(result);
    if (!out) {
      fprintf(stderr, "ferry-bench: cannot write %s\n", options.jsonOut.c_str());
      return kExitSetup;
    }
    return code;
  }
  if (env.rank == 0) {
    printRun(stdout, result, options.overlap);
    fflush(stdout);
    if (!options.json.empty()) {
      std::ofstream json(options.json);
      json << resultsJson(result, nullptr);
      if (!json) fprintf(stderr, "ferry-bench: cannot write %s\n", options.json.c_str());
    }
  }
  return code;
}

}  // namespace

int main(int argc, char** argv) {
  Options options;
  std::string error;
  if (!parseArgs(argc, argv, &options, &error)) {
    fprintf(stderr, "ferry-bench: %s\n%s", error.c_str(), usageText());
    return kExitSetup;
  }
  if (options.help) {
    printf("%s", usageText());
    return kExitOk;
  }
  const LaunchEnv env = readLaunchEnv();
  const uint64_t seed = options.seedSet ? options.seed : defaultSeed(env);
  if (env.rank == 0 && options.jsonOut.empty()) {
    fprintf(stderr, "# ferry-bench seed=%" PRIu64 " (reproduce with --seed)\n", seed);
    if (options.overlapNothing) {
      fprintf(stderr,
              "# --overlap-nothing: no traffic beside the GEMMs; the slowdown column is the "
              "measurement's own bias\n");
    }
  }
  if (!options.compare.empty()) return runCompare(options, env, seed);
  return runSingle(options, env, seed);
}
