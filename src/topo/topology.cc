#include "topo/topology.h"

#include <map>
#include <set>
#include <utility>

namespace ferry {

const char* peerLinkName(PeerLink link) {
  switch (link) {
    case PeerLink::Self:
      return "self";
    case PeerLink::SameProcess:
      return "same-process";
    case PeerLink::SameHost:
      return "same-host";
    case PeerLink::OtherHost:
      return "other-host";
  }
  return "unknown";
}

namespace {

Status validatePeers(const std::vector<PeerInfo>& peers, int myRank) {
  const int n = static_cast<int>(peers.size());
  if (myRank < 0 || myRank >= n)
    FERRY_FAIL(ncclInternalError, "topology: rank %d of %d", myRank, n);
  for (int r = 0; r < n; ++r) {
    const PeerInfo& p = peers[r];
    if (p.version != kPeerInfoVersion) {
      FERRY_FAIL(ncclInternalError,
                 "rank %d runs a different Ferry build (peer info version %u, expected %u)", r,
                 p.version, kPeerInfoVersion);
    }
    if (p.rank != r) FERRY_FAIL(ncclInternalError, "peer info slot %d claims rank %d", r, p.rank);
    if (p.runtimeKind != peers[0].runtimeKind) {
      FERRY_FAIL(ncclInvalidUsage,
                 "ranks 0 and %d use different runtimes (%d vs %d); set FERRY_RUNTIME the same "
                 "on every rank",
                 r, peers[0].runtimeKind, p.runtimeKind);
    }
  }
  // Knobs whose value each rank turns into a decision its peers must mirror.
  for (int r = 1; r < n; ++r) FERRY_CHECK(compareAgreedKnobs(peers[0].knobs, 0, peers[r].knobs, r));
  // Two ranks on one device of one machine: NCCL refuses this, and so do we.
  std::map<std::pair<uint64_t, std::string>, int> owner;
  for (int r = 0; r < n; ++r) {
    auto key = std::make_pair(peers[r].hostHash, std::string(peers[r].busId));
    auto [it, inserted] = owner.emplace(key, r);
    if (!inserted) {
      FERRY_FAIL(ncclInvalidUsage, "duplicate device: ranks %d and %d both use device %s on %s",
                 it->second, r, peers[r].busId, peers[r].hostname);
    }
  }
  return ncclSuccess;
}

PeerLink classify(const PeerInfo& me, const PeerInfo& other, bool self) {
  if (self) return PeerLink::Self;
  if (me.hostHash != other.hostHash) return PeerLink::OtherHost;
  if (me.pidHash == other.pidHash) return PeerLink::SameProcess;
  return PeerLink::SameHost;
}

}  // namespace

Status buildTopology(const std::vector<PeerInfo>& peers, int myRank, Topology* out) {
  FERRY_CHECK(validatePeers(peers, myRank));
  Topology t;
  t.myRank = myRank;
  t.peers = peers;
  const int n = static_cast<int>(peers.size());
  std::set<uint64_t> hosts;
  std::set<uint64_t> localPids;
  for (int r = 0; r < n; ++r) {
    t.links.push_back(classify(peers[myRank], peers[r], r == myRank));
    hosts.insert(peers[r].hostHash);
    if (peers[r].hostHash == peers[myRank].hostHash) {
      if (r == myRank) t.localRank = t.localRanks;
      ++t.localRanks;
      localPids.insert(peers[r].pidHash);
    }
  }
  t.nHosts = static_cast<int>(hosts.size());
  t.localProcesses = static_cast<int>(localPids.size());
  // v1 ring: ranks grouped by host (first appearance order), rank order inside,
  // so a ring crosses each host boundary once.
  std::vector<uint64_t> hostOrder;
  for (int r = 0; r < n; ++r) {
    bool seen = false;
    for (uint64_t h : hostOrder) seen = seen || (h == peers[r].hostHash);
    if (!seen) hostOrder.push_back(peers[r].hostHash);
  }
  for (uint64_t h : hostOrder) {
    for (int r = 0; r < n; ++r) {
      if (peers[r].hostHash == h) t.ringOrder.push_back(r);
    }
  }
  *out = std::move(t);
  return ncclSuccess;
}

std::string describeTopology(const Topology& t) {
  std::string s = "rank " + std::to_string(t.myRank) + ": " + std::to_string(t.peers.size()) +
                  " ranks on " + std::to_string(t.nHosts) + " host(s); local rank " +
                  std::to_string(t.localRank) + " of " + std::to_string(t.localRanks) + "\n";
  for (size_t r = 0; r < t.peers.size(); ++r) {
    const PeerInfo& p = t.peers[r];
    s += "  rank " + std::to_string(r) + " host " + p.hostname + " pid " + std::to_string(p.pid) +
         " device " + std::to_string(p.device) + " (" + p.busId + ") link " +
         peerLinkName(t.links[r]) + "\n";
  }
  s += "  ring:";
  for (int r : t.ringOrder) s += " " + std::to_string(r);
  return s;
}

}  // namespace ferry
