// Communicator configuration: the user's ncclConfig_t validated and resolved
// against defaults (env knobs via Params), stored by value in the
// communicator. Reading a user's config honours its `size` field so configs
// from older NCCL headers (smaller structs) are read only as far as they go.
#pragma once

#include <string>

#include "core/params.h"
#include "core/status.h"

namespace ferry {

constexpr unsigned int kConfigMagic = 0xcafebeef;

struct CommConfig {
  bool blocking = true;
  int cgaClusterSize = 4;
  int minCTAs = 1;
  int maxCTAs = 64;  // caps the channels (thread blocks) of collective kernels
  std::string netName;
  bool splitShare = false;
  int trafficClass = -1;
  std::string commName;
  int collnetEnable = 0;
  int ctaPolicy = 0;
  bool shrinkShare = false;
  int nvlsCTAs = 0;
  int nChannelsPerNetPeer = 0;
  int nvlinkCentricSched = 0;
};

// Validates `user` (NULL means "all defaults") and resolves undefined fields
// from `base` (the defaults, or a parent's config for ncclCommSplit).
// Errors: bad size/magic/version or out-of-range values -> ncclInvalidArgument
// with a WARN naming the field.
[[nodiscard]] Status resolveConfig(const ncclConfig_t* user, const CommConfig& base,
                                   CommConfig* out);

// Defaults from the environment (NCCL_COMM_BLOCKING ...).
CommConfig defaultConfig(const Params& params);

}  // namespace ferry
