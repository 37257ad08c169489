// Staging buffers for sends that must complete without their receiver.
//
// Under lazy module loading, any GPU-side wait that is pending on a user
// stream (a spin kernel or a stream wait on a host word) blocks the first
// launch of every not-yet-loaded kernel in the process until the wait ends
// (measured on 2x H200, driver 580: both kinds block). A send whose user
// stream waits for its receiver therefore deadlocks a program that launches
// a new kernel between posting a send and posting the receive the peer needs
// first. A staged send never waits: the user stream copies the payload into
// a staging block of this process's device memory (a copy-engine copy on
// the user's stream), and the proxy moves it to the peer from there. It costs
// one local copy per byte (HBM, ~5x faster than NVLink) and staging memory
// that grows to the largest sends in flight.
//
// Threading: used by the thread that owns the communicator only. Blocks are
// recycled once the connection's sendDone shows their message left.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "runtime/runtime.h"
#include "transport/connection.h"

namespace ferry {

// Bytes per staging piece of a `bytes` message: at least `minPiece`, and at
// most kMaxStagePieces pieces (each piece costs an event record on the user's
// thread and a copy issue on the proxy's). Multiple of 64 KiB unless the
// message is one piece.
constexpr uint64_t kMaxStagePieces = 8;
uint64_t stagePieceBytes(uint64_t bytes, uint64_t minPiece);

class StagingPool {
 public:
  explicit StagingPool(rt::Runtime* runtime) : runtime_(runtime) {}

  // A block of at least `bytes` for message `seq` on `conn`.
  [[nodiscard]] Status take(uint64_t bytes, SendConnection* conn, uint64_t seq, void** out);
  // Returns blocks whose messages have left (sendDone passed their seq).
  void reclaim();
  // Drops every block (after the proxy and the copy streams are idle).
  void clear();

 private:
  struct Block {
    std::unique_ptr<rt::DeviceMemory> memory;
    SendConnection* conn = nullptr;  // in flight on this connection, or null when free
    uint64_t seq = 0;
  };
  rt::Runtime* runtime_;
  std::vector<Block> blocks_;
  uint64_t totalBytes_ = 0;
};

}  // namespace ferry
