// What the launcher (ferry-run, torchrun, MPI wrappers setting the same
// names) told this process: its rank among the processes, their number, its
// local rank and device, and the bootstrap root NCCL_COMM_ID. The only place
// ferry-bench reads its environment besides FERRY_RUNTIME (device.cc).
#pragma once

#include <cstdint>
#include <string>

namespace ferry::bench {

struct LaunchEnv {
  int rank = 0;        // RANK (or FERRY_RANK)
  int world = 1;       // WORLD_SIZE (or FERRY_NRANKS)
  int localRank = 0;   // LOCAL_RANK
  int device = -1;     // FERRY_DEVICE; -1: unset
  std::string commId;  // NCCL_COMM_ID "host:port"; empty: unset
  bool launched() const { return world > 1 || !commId.empty(); }
};

LaunchEnv readLaunchEnv();

// A seed every rank derives alike without talking: a hash of NCCL_COMM_ID
// (ferry-run picks a fresh port per launch) and MASTER_PORT; time ^ pid for
// a lone process. `--seed` overrides it.
uint64_t defaultSeed(const LaunchEnv& env);

// Splits "host:port" (IPv6 as "[addr]:port"). False when malformed.
bool splitHostPort(const std::string& text, std::string* host, int* port);

}  // namespace ferry::bench
