// Establishing a communicator's SM-free connections at init (eagerly, for
// every peer on this host and for self), so no operation ever waits for a
// connection handshake: handshakes between ranks in unbatched send/recv
// orders are exactly what deadlocks lazily connected libraries. Peers on
// other hosts are connected through the network engine in the same step
// (transport/net_setup.h).
//
// Steps (collective over the communicator): every rank creates the receive
// side of each connection (control block, copy stream) and offers the
// control block through its proxy's RPC; the table of descriptors is
// all-gathered; every rank maps the send side of each connection; a
// barrier; the offers are withdrawn. The receiver picks the transport (P2P:
// the second side copies straight between the two GPUs' memory; SHM: the
// first side's bytes go through a staging block in host shared memory,
// enqueue/staging.h) so both sides always agree.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>

#include "bootstrap/bootstrap.h"
#include "core/params.h"
#include "proxy/proxy.h"
#include "topo/topology.h"
#include "transport/connection.h"

namespace ferry {

struct P2pSetupContext {
  rt::Runtime* runtime = nullptr;
  boot::Bootstrap* bootstrap = nullptr;
  const Topology* topology = nullptr;
  const Params* params = nullptr;
  Proxy* proxy = nullptr;
  int device = -1;
  uint64_t commKey = 0;  // unique per communicator (hash of its unique id)
  const std::atomic<bool>* abortFlag = nullptr;
  int64_t timeoutMs = 120000;
  int maxCtas = 64;  // ncclConfig_t.maxCTAs: caps the collective channels
  // A communicator that never carries point-to-point (the hierarchical
  // all-reduce's internal ones): no p2p connections, no kernel-p2p FIFOs.
  bool collectivesOnly = false;
  // The communicator's network staging blocks (setupP2p makes it; null
  // before that).
  NetBlockPool* netPool = nullptr;
};

[[nodiscard]] Status setupP2p(const P2pSetupContext& ctx, P2pState* out);

}  // namespace ferry
