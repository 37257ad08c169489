// What the proxy thread keeps of one SM-free message after its API call has
// returned. The user's thread submitted every copy and flag of the message
// in the call (transport/ctrl_block.h); the proxy issues nothing. It only
// watches: until the message's copy has landed (done >= gen), whether the
// peer reported an error, died, or never came within FERRY_P2P_TIMEOUT. On
// any of those it fails the connection and releases the waits of THIS
// rank's streams on it (never the peer's: NOTES.md trap 1).
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>

#include "core/status.h"
#include "enqueue/peer_memory.h"
#include "transport/connection.h"

namespace ferry {

struct P2pWatch {
  const void* owner = nullptr;  // the engine (detach)
  ConnectionBase* conn = nullptr;
  uint64_t seq = 0;
  bool first = false;       // this side was first: it waits for the peer to come
  bool waitsDone = false;   // a stream of this rank waits until done >= gen
  bool waitsReady = false;  // this rank's connection stream waits until ready >= gen
  // Held until the copy has landed, so a mapping is never closed under it.
  std::shared_ptr<PeerMapping> mapping;
  std::atomic<Status>* asyncError = nullptr;  // the communicator's
  int64_t timeoutNs = 0;                      // FERRY_P2P_TIMEOUT; 0: none
  int64_t postedNs = 0;
};

// Writes kReleased into the words this rank's streams wait on for `w`.
void releaseWaits(const P2pWatch& w);

}  // namespace ferry
