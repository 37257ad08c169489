// Topology v1: how this rank reaches every other rank, derived purely from
// the all-gathered PeerInfo (no system calls), so it is unit tested on
// synthetic inputs. Later versions add NVLink/PCIe detail and channel counts.
#pragma once

#include <string>
#include <vector>

#include "core/status.h"
#include "topo/peer_info.h"

namespace ferry {

enum class PeerLink : int { Self = 0, SameProcess = 1, SameHost = 2, OtherHost = 3 };
const char* peerLinkName(PeerLink link);

struct Topology {
  int myRank = -1;
  std::vector<PeerInfo> peers;  // indexed by rank
  std::vector<PeerLink> links;  // links[r]: how myRank reaches rank r
  std::vector<int> ringOrder;   // ranks in ring order, starting at rank 0
  int nHosts = 0;
  int localRank = -1;  // index among ranks on my host (by rank order)
  int localRanks = 0;  // ranks on my host
  // Processes those ranks belong to (one process may drive several GPUs).
  int localProcesses = 0;
};

// Validates the gathered table and classifies every peer. Errors (with WARN):
// wrong rank slots or version (ncclInternalError), ranks on different
// runtimes (ncclInvalidUsage), two ranks on one device of one host
// (ncclInvalidUsage, as NCCL rejects duplicate GPUs).
[[nodiscard]] Status buildTopology(const std::vector<PeerInfo>& peers, int myRank, Topology* out);

// Multi-line human-readable summary for INFO logs and the demo.
std::string describeTopology(const Topology& topo);

}  // namespace ferry
