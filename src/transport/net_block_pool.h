// The pinned host blocks of one communicator's network connections
// (NetBuffers), shared among them: a connection that needs a staging block
// takes any free one that fits, whichever connection used it last, and
// pins a new one only when none does. Pinning is CPU time inside the
// user's call (NOTES.md trap 84: in an uneven all-to-all across 8 hosts
// each of a rank's 14 connections climbed its own size classes, 33 pins in
// 24 calls, 82-238 ms each); shared, the blocks a call needs at once are
// pinned once for the communicator, and its pinned total is what its
// messages in flight need rather than the sum of every connection's peak.
//
// A block is memory only: each connection registers it with its own links
// on first use and deregisters it when the connection closes
// (NetBuffers::~NetBuffers, before its links close). The pool outlives
// every connection that uses it (P2pState declares it first).
//
// Threading: the communicator's thread only (the connections' take() and
// destructors). Whether a block is free is read from its last user's
// words, which the proxy thread and the copy streams write.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "core/status.h"
#include "runtime/runtime.h"

namespace ferry {

class NetBuffers;

class NetBlockPool {
 public:
  struct Block {
    std::unique_ptr<rt::HostMemory> mem;
    // The connection that took it last (null: none yet, or it closed); the
    // block is free once that connection's done word reached busyUntil
    // (NetBuffers::done()).
    const NetBuffers* user = nullptr;
    uint64_t busyUntil = 0;
  };

  explicit NetBlockPool(rt::Runtime* runtime) : runtime_(runtime) {}
  NetBlockPool(const NetBlockPool&) = delete;
  NetBlockPool& operator=(const NetBlockPool&) = delete;

  // Pins a new block of `bytes` (free, no user) and adds it.
  [[nodiscard]] Status pin(uint64_t bytes, Block** out);
  // Blocks, in the order pinned; pointers stay valid for the pool's life.
  const std::vector<std::unique_ptr<Block>>& blocks() const { return blocks_; }
  // A connection closes: none of its blocks waits for its words any more.
  void release(const NetBuffers* user);
  uint64_t bytes() const { return bytes_; }

 private:
  rt::Runtime* runtime_;
  std::vector<std::unique_ptr<Block>> blocks_;
  uint64_t bytes_ = 0;
};

}  // namespace ferry
