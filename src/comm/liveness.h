// Liveness: a dead peer stops nobody for long (issue 18).
//
// Every communicator of two or more ranks joins its ranks in a ring of TCP
// connections on the bootstrap's interface: rank r connects to r+1 and
// accepts r-1 (two ranks: two connections between them). One process-wide
// monitor thread watches every ring of the process:
//   - it sends a heartbeat on each connection every second;
//   - a connection that closes without a goodbye (the process exited without
//     destroying the communicator, was killed, crashed), breaks (reset), or
//     stays silent past FERRY_PEER_TIMEOUT seconds means that neighbour is
//     dead: the monitor calls the ring's onDead and tells its other
//     neighbour, which tells its own, so the news goes round the ring both
//     ways and every rank learns it within a few hops (milliseconds);
//   - ncclCommDestroy / ncclCommAbort, and a process's normal exit (an
//     atexit hook), say goodbye first: a rank that leaves on purpose is
//     never taken for a dead one, so a program whose ranks exit at different
//     times (without destroying their communicators, as many do) never sees
//     a spurious error.
// The ring costs two sockets per communicator and rank, whatever the size.
//
// A forked child (a data loader worker) closes its copies of the sockets at
// once (pthread_atfork), so its parent's death still closes the connection.
//
// The monitor and its thread live until the process ends (leaked on purpose:
// a thread must never be joined during static destruction).
//
// Threading: create() runs on the communicator's init thread (collective:
// every rank calls it); onDead runs on the monitor thread, with the
// monitor's lock held: it must not block and must not destroy the ring. The
// ring's destructor waits for a callback in progress and stops later ones.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "bootstrap/bootstrap.h"
#include "bootstrap/socket.h"
#include "core/status.h"

namespace ferry {

class LivenessMonitor;

struct LivenessOptions {
  int rank = 0;
  int nranks = 1;
  uint64_t commKey = 0;        // tells this communicator's connections apart
  int64_t setupTimeoutMs = 0;  // connect + accept at create()
  const std::atomic<bool>* abortFlag = nullptr;
  int64_t silenceMs = 0;  // FERRY_PEER_TIMEOUT; 0: only closed connections count
  int64_t heartbeatMs = 1000;
  // Called once per peer found dead, with the reason (for the user).
  std::function<void(int peer, const std::string& why)> onDead;
};

class LivenessRing {
 public:
  // Collective over the communicator: listens on `localIp` (port chosen by
  // the kernel), all-gathers the addresses through `bootstrap`, connects to
  // the next rank and accepts the previous one. A one-rank communicator
  // gets a ring with no connections.
  [[nodiscard]] static Status create(boot::Bootstrap* bootstrap, const boot::SocketAddress& localIp,
                                     LivenessOptions options, std::unique_ptr<LivenessRing>* out);
  // Says goodbye to both neighbours and leaves the monitor.
  ~LivenessRing();
  LivenessRing(const LivenessRing&) = delete;
  LivenessRing& operator=(const LivenessRing&) = delete;

 private:
  LivenessRing() = default;
  LivenessMonitor* monitor_ = nullptr;  // process-wide, never freed
  uint64_t id_ = 0;                     // the ring's key inside the monitor (0: none)
};

}  // namespace ferry
