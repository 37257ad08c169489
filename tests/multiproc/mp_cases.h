// The skeleton shared by the multi-process test programs that run one named
// case per launch under ferry-run (api_cases, recovery_cases,
// memory_cases): the launch environment, the seed, the device, the world
// communicator, and the PASS/FAIL line the suite reads.
#pragma once

#include <cstdio>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "common/proc.h"
#include "common/random.h"
#include "ferry.h"
#include "mp_check.h"
#include "nccl.h"

namespace ferry::test {

struct CaseCtx {
  LaunchEnv env;
  uint64_t seed = 0;              // this process's (testSeed); agreedSeed shares rank 0's
  std::vector<std::string> args;  // after the case name
};
using CaseFn = std::function<void(const CaseCtx&)>;

// A communicator over every rank of the launch (the launcher's NCCL_COMM_ID).
inline ncclComm_t worldComm(const CaseCtx& ctx) {
  ncclUniqueId id;
  EXPECT_OK(ncclGetUniqueId(&id));
  ncclComm_t comm = nullptr;
  EXPECT_OK(ncclCommInitRank(&comm, ctx.env.nranks, id, ctx.env.rank));
  return comm;
}

// Seeds differ per process: every rank adopts rank 0's.
inline uint64_t agreedSeed(ncclComm_t world, const CaseCtx& ctx) {
  std::vector<uint64_t> seeds(ctx.env.nranks, 0);
  seeds[ctx.env.rank] = ctx.seed;
  EXPECT_OK(ncclFerryBootstrapAllGather(world, seeds.data(), sizeof(uint64_t)));
  return seeds[0];
}

// Reads the launch, selects device localRank % count, runs the case argv[1]
// names with the rest as its arguments; prints "PASS|FAIL <case>: N
// failure(s)" and returns the exit code (2: usage).
inline int runCases(int argc, char** argv, const std::map<std::string, CaseFn>& cases) {
  std::string names;
  for (const auto& [name, fn] : cases) names += (names.empty() ? "" : "|") + name;
  auto it = argc >= 2 ? cases.find(argv[1]) : cases.end();
  if (it == cases.end()) {
    fprintf(stderr, "usage: ferry-run -n N %s %s [args]\n", argv[0], names.c_str());
    return 2;
  }
  CaseCtx ctx;
  std::string error;
  if (!readLaunchEnv(&ctx.env, &error)) {
    fprintf(stderr, "%s\n", error.c_str());
    return 2;
  }
  ctx.seed = testSeed();
  for (int i = 2; i < argc; ++i) ctx.args.emplace_back(argv[i]);
  int ndev = 0;
  if (ncclFerryGetDeviceCount(&ndev) == ncclSuccess && ndev > 0) {
    (void)ncclFerrySetDevice((ctx.env.localRank < 0 ? 0 : ctx.env.localRank) % ndev);
  }
  it->second(ctx);
  printf("%s %s: %d failure(s)\n", gFailures == 0 ? "PASS" : "FAIL", argv[1], gFailures.load());
  return gFailures == 0 ? 0 : 1;
}

}  // namespace ferry::test
