// Staging blocks: memory the peer can map, standing in for a buffer it
// cannot (transport/ctrl_block.h). Used by the side that is FIRST for a
// message when
//   - a send must not wait for its receiver (lazy module loading: the bytes
//     of a send that arrives before its receiver are copied into a block on
//     the user's stream, and the receiver pulls them from there whenever it
//     comes),
//   - its own buffer cannot be mapped by the peer (pageable-registered,
//     pinned host, cuMem or pool memory), or
//   - the connection is SHM (peers cannot reach each other's GPU memory:
//     blocks live in host shared memory and both sides copy through them).
// A block is returned to the pool once its message no longer needs it:
// when the message's copy has landed (done >= gen, read from the control
// block) or when an event after the last local use has completed.
//
// Threading: used by the thread that owns the communicator only.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "proxy/rpc.h"
#include "runtime/runtime.h"
#include "transport/ctrl_block.h"
#include "transport/shared_memory.h"

namespace ferry {

class StagingPool {
 public:
  struct Block;

  // Device blocks (P2P connections): cudaMalloc'd (or host-runtime device)
  // memory offered by IPC handle. Host blocks (SHM connections): memfd
  // shared memory, registered with the runtime, offered through `rpc` under
  // (commKey, key).
  StagingPool(rt::Runtime* runtime, bool hostShared, RpcServer* rpc, uint64_t commKey);
  ~StagingPool();
  StagingPool(const StagingPool&) = delete;
  StagingPool& operator=(const StagingPool&) = delete;

  // A free block of at least `bytes`; *info describes it for the peer
  // (kind, size, how to map it; offset 0).
  [[nodiscard]] Status take(uint64_t bytes, Block** out, PostInfo* info);
  // Whether a free block of at least `bytes` exists (take() would not grow).
  [[nodiscard]] bool hasFree(uint64_t bytes);
  // The address this process copies to and from.
  static char* data(const Block* b);
  // Free once message `seq` of `ctrl` is done.
  void releaseWhenDone(Block* b, CtrlBlock* ctrl, uint64_t seq);
  // Free once `event` has completed.
  void releaseAfter(Block* b, std::shared_ptr<rt::Event> event);
  // Free now (taken but never used).
  void release(Block* b);
  // Drops every block (after every stream that may use one has drained).
  void clear();
  // The size of a block made for a message of `bytes`.
  static uint64_t blockSize(uint64_t bytes);
  // Bytes of every block (busy or free: blocks are kept for reuse).
  uint64_t bytes() const { return totalBytes_; }

 private:
  void reclaim();
  [[nodiscard]] Status grow(uint64_t bytes, Block** out);
  [[nodiscard]] Status describe(const Block& b, PostInfo* info);

  rt::Runtime* runtime_;
  bool hostShared_;
  RpcServer* rpc_;
  uint64_t commKey_;
  std::vector<std::unique_ptr<Block>> blocks_;
  uint64_t totalBytes_ = 0;
  uint64_t nextKey_ = 0;
};

// RPC resource key of a host staging block (bit 62 set: never a connection
// or collective-region key).
inline uint64_t stagingResourceKey(uint64_t block) {
  return (uint64_t{1} << 62) | block;
}

}  // namespace ferry
