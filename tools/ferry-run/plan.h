// What each rank's environment looks like: pure functions over the parsed
// options and what the launcher found on the host (GPUs, free ports), so the
// unit tests can check every variable without starting a process.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "args.h"

namespace ferry::run {

using EnvPair = std::pair<std::string, std::string>;

// What the launcher discovered before starting ranks.
struct HostFacts {
  // One entry per usable GPU, in CUDA's order: the CUDA_VISIBLE_DEVICES
  // entries when that variable is set, else "0".."G-1" for the G entries of
  // /proc/driver/nvidia/gpus.
  std::vector<std::string> gpus;
  int hostDevices = 8;  // FERRY_HOST_DEVICES: devices the host runtime emulates
  int commPort = 0;     // NCCL_COMM_ID port on 127.0.0.1
  int masterPort = 0;   // MASTER_PORT, for torch.distributed's env:// store
};

// GPU list from CUDA_VISIBLE_DEVICES (`cvdSet` says whether it is set at all;
// set but empty means no GPU) or else from the /proc entry count.
std::vector<std::string> visibleGpus(bool cvdSet, const std::string& cvd, int procGpuCount);

// Whether ranks are placed on GPUs: --runtime cuda, or auto with a GPU found.
bool usesGpus(const Options& opts, const HostFacts& facts);

// "" when the options can run on this host, else the reason they cannot.
std::string checkPlan(const Options& opts, const HostFacts& facts);

// Variables ferry-run sets for `rank` (they replace inherited ones).
std::vector<EnvPair> rankEnvironment(const Options& opts, const HostFacts& facts, int rank);

// `base` (a NAME=VALUE list such as environ) with every name in `overrides`
// replaced, the overrides appended in order.
std::vector<std::string> mergeEnvironment(const std::vector<std::string>& base,
                                          const std::vector<EnvPair>& overrides);

}  // namespace ferry::run
