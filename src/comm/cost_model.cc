#include "comm/cost_model.h"

#include <algorithm>
#include <map>

#include "algo/coll_ring.h"
#include "algo/reduce_ops.h"

namespace ferry {

LinkCost linkCost(PeerLink link, bool hostRuntime) {
  if (hostRuntime) return LinkCost{100.0, 20.0, 1.0};
  switch (link) {
    case PeerLink::Self:
      return LinkCost{5.0, 0.0, 1000.0};  // a local copy
    case PeerLink::SameProcess:
    case PeerLink::SameHost:
      // NVLink (NV18): ~20 us for a small all-reduce, ~330 GB/s busbw large.
      return LinkCost{18.0, 1.0, 330.0};
    case PeerLink::OtherHost:
      // The SM-free socket path: a few GB/s per peer (bench/RESULTS.md).
      return LinkCost{40.0, 15.0, 5.0};
  }
  return LinkCost{100.0, 20.0, 1.0};
}

namespace {

// One ring collective over `n` ranks at `c`'s pace: `steps` ring steps and
// `volume` bytes through each hop.
double ringUs(const LinkCost& c, int steps, double volume) {
  return c.launchUs + steps * c.stepUs + volume / (c.gbps * 1e3);
}

}  // namespace

double allReduceRingUs(int nranks, int hosts, uint64_t bytes, bool hostRuntime) {
  const LinkCost c = linkCost(hosts > 1 ? PeerLink::OtherHost : PeerLink::SameHost, hostRuntime);
  const double n = nranks;
  return ringUs(c, 2 * (nranks - 1), 2.0 * (n - 1) / n * static_cast<double>(bytes));
}

double allReduceHierUs(int hosts, int perHost, uint64_t bytes, bool hostRuntime) {
  const LinkCost local = linkCost(PeerLink::SameHost, hostRuntime);
  const double l = perHost;
  const double b = static_cast<double>(bytes);
  // Reduce-scatter and all-gather inside the host: (l-1)/l of the buffer each.
  const double inside = 2 * ringUs(local, perHost - 1, (l - 1) / l * b);
  const double across =
      allReduceRingUs(hosts, hosts, bytes / static_cast<uint64_t>(perHost), hostRuntime);
  return inside + across;
}

namespace {

double collUs(const Topology& topo, bool hostRuntime, const CollTask& t) {
  const int n = static_cast<int>(topo.peers.size());
  const double elem = static_cast<double>(algo::typeBytes(t.dataType));
  const double bytes = static_cast<double>(t.count) * elem;
  // The ring's slowest hop sets its pace.
  LinkCost slow = linkCost(PeerLink::Self, hostRuntime);
  for (int r = 0; r < n; ++r) {
    if (r == topo.myRank) continue;
    LinkCost c = linkCost(topo.links[r], hostRuntime);
    if (c.gbps < slow.gbps) slow = c;
  }
  if (n == 1) return slow.launchUs + bytes / (slow.gbps * 1e3);
  double volume = bytes;  // bytes through the slowest link
  int steps = n - 1;
  switch (t.coll) {
    case algo::kCollAllReduce:
      volume = 2.0 * (n - 1) / n * bytes;
      steps = 2 * (n - 1);
      break;
    case algo::kCollAllGather:
    case algo::kCollReduceScatter:
      volume = static_cast<double>(n - 1) * bytes;  // count is per rank
      break;
    default:
      break;
  }
  return slow.launchUs + steps * slow.stepUs + volume / (slow.gbps * 1e3);
}

}  // namespace

double estimateGroupUs(const Topology& topo, bool hostRuntime, const std::vector<CollTask>& coll,
                       const std::vector<P2pTask>& p2p) {
  double us = 0;
  for (const CollTask& t : coll) us += collUs(topo, hostRuntime, t);
  // Per peer and direction: links are full duplex (NVLink moves ~390 GB/s
  // each way at once), so a send and a receive with one peer overlap, while
  // two messages one way share the link.
  std::map<int, std::pair<double, double>> perPeer;  // peer -> (send us, receive us)
  for (const P2pTask& t : p2p) {
    if (t.peer < 0 || t.peer >= static_cast<int>(topo.links.size())) continue;
    LinkCost c = linkCost(topo.links[t.peer], hostRuntime);
    auto& dirs = perPeer[t.peer];
    (t.isSend ? dirs.first : dirs.second) += static_cast<double>(t.bytes) / (c.gbps * 1e3);
  }
  double slowest = 0;
  for (const auto& [peer, dirs] : perPeer) {
    const double launch = linkCost(topo.links[peer], hostRuntime).launchUs;
    slowest = std::max(slowest, launch + std::max(dirs.first, dirs.second));
  }
  return us + slowest;
}

}  // namespace ferry
