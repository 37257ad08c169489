// Windows of one communicator (ncclCommWindowRegister/Deregister): a buffer
// every rank registers together, whose peers' counterparts are mapped into
// this process once, at registration, instead of on the first message that
// touches them.
//
// What a window buys today: SM-free point-to-point from or into window
// memory is zero-copy with no mapping on its first message (the peer's
// allocation is already in the process-wide table of peer mappings,
// enqueue/peer_memory.h, and stays mapped while the window lives); large
// all-gathers and broadcasts into symmetric windows copy straight between
// the ranks' windows (comm/window_coll.h). Kernels (ring collectives,
// kernel p2p) do not use windows.
//
// Registration is collective (one bootstrap all-gather): every rank
// publishes its buffer, size, flags and whether its arguments were valid,
// so a rank with bad arguments fails every rank's call instead of leaving
// them waiting. NCCL_WIN_COLL_SYMMETRIC promises equal offsets in
// collectives; Ferry requires every rank's size to be equal then (as NCCL
// does). Deregistration is local (nothing waits for peers): it drops this
// rank's hold on the peers' mappings.
//
// Threading: NCCL's rule, one thread at a time per communicator; the table
// is also read by destroy.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

#include "core/status.h"
#include "enqueue/peer_memory.h"

namespace ferry {

class Communicator;

// A window is known by its address in its communicator's table (every
// lookup goes through the table, so a stale or foreign handle is refused).
struct Window {
  void* buffer = nullptr;
  uint64_t size = 0;
  int flags = 0;
  int peersMapped = 0;    // peers whose window this process mapped at registration
  bool mappable = false;  // peer processes can map this buffer
  // NCCL_WIN_COLL_SYMMETRIC, every rank's buffer mappable by its peers and
  // every peer reached through mapped memory: collectives may copy straight
  // between the ranks' windows (comm/window_coll.h). Decided from what
  // every rank published, so the same on every rank.
  bool collReady = false;
  std::vector<std::shared_ptr<PeerMapping>> mappings;
};

class WindowTable {
 public:
  explicit WindowTable(Communicator* comm) : comm_(comm) {}
  // Collective. On success *out is the new window; on any rank's bad
  // arguments every rank fails with ncclInvalidArgument and *out stays null.
  [[nodiscard]] Status add(void* buffer, uint64_t size, int flags, Window** out);
  // ncclInvalidArgument when `w` is not a live window of this communicator.
  [[nodiscard]] Status remove(Window* w);
  // *out: `w` when it is a live window of this communicator.
  [[nodiscard]] Status find(Window* w, const Window** out) const;
  // The collReady window holding all of [p, p + bytes), or null.
  const Window* collWindowHolding(const void* p, uint64_t bytes) const;
  // Drops every window (the communicator is going away).
  void clear();
  size_t size() const;

 private:
  Communicator* comm_;
  mutable std::mutex mu_;
  std::vector<std::unique_ptr<Window>> windows_;  // guarded by mu_
};

}  // namespace ferry
