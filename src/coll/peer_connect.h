// Kernel point-to-point connections made on first use, one peer at a time
// (NCCL_RUNTIME_CONNECT=1, the default; 0 makes every peer's at init, in
// one region: coll/ring_setup.h's peers part).
//
// A connection between ranks X and Y is two chunks: X's for Y (the FIFO Y's
// sends land in, X's lane flags) and Y's for X. Before its first kernel
// launch that involves Y, X makes its own chunk for Y and fetches Y's chunk
// for X from Y's proxy RPC. Y's proxy makes that chunk if Y has not yet
// (RpcServer provider), so the pairing never waits for Y's user thread:
// whatever order the two ranks issue their sends and receives in, and
// whatever else Y's thread is blocked in, X's setup finishes (bounded by
// the bootstrap timeout and the abort flag). Then X writes Y's rows of the
// kernel's peer table (zeros until then: no kernel reads a peer it has no
// task for).
//
// Threads: ensure() is called by the communicator's user thread (NCCL's
// rule: one thread at a time per communicator); provide() runs on the
// proxy thread. Both make own chunks through ownChunk() under mu_, never
// while waiting for a peer. bytesHeld() may be read from any thread.
//
// Lifetime: owned by the CollEngine, destroyed after its last kernel
// finished; the destructor withdraws the provider first (it returns once no
// provider call is running), then frees the chunks.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "coll/ring_setup.h"

namespace ferry {

class PeerConnector {
 public:
  // `res`: the peers part's shape (describePeers); gets its peer table
  // (zeroed) and allPeersReachable. `proxyNames`: every rank's proxy RPC
  // name (exchanged by the SM-free setup). No bootstrap traffic.
  [[nodiscard]] static Status create(const RingSetupContext& ctx,
                                     const std::vector<std::string>& proxyNames, RingResources* res,
                                     std::unique_ptr<PeerConnector>* out);
  ~PeerConnector();
  PeerConnector(const PeerConnector&) = delete;
  PeerConnector& operator=(const PeerConnector&) = delete;

  // Connects to `peer` unless connected already (user thread, before a
  // kernel p2p launch; the communicator's device current).
  [[nodiscard]] Status ensure(int peer) {
    return connected_[peer] ? ncclSuccess : connectFirst(peer);
  }
  // Device (or SHM) memory held by this rank's chunks.
  uint64_t bytesHeld() const { return held_.load(std::memory_order_relaxed); }

 private:
  struct Chunk {
    RingRegion region;
    RegionInfo info{};
  };
  PeerConnector() = default;
  uint64_t chunkKey(int owner, int peer) const;
  // This rank's chunk for `peer`, made on the first call (either thread).
  [[nodiscard]] Status ownChunk(int peer, Chunk** out);
  // Proxy thread: a peer asks for this rank's chunk for it (RPC key `b`).
  void provide(uint64_t b);
  [[nodiscard]] Status connect(int peer);
  // ensure's first call for `peer`.
  [[nodiscard]] Status connectFirst(int peer);
  PeerSide sideOf(char* base) const;

  RingSetupContext ctx_;
  RingResources* res_ = nullptr;  // the engine's peers part (outlives this)
  int me_ = -1;
  // A chunk: one peer's connection laid out like a region of one
  // connection (flag lines and LL FIFO zeroed, [0, fifos)).
  RingRegionLayout layout_;
  std::vector<std::string> proxyNames_;  // by rank
  // Made at init: nothing on the first-use path may allocate or free pinned
  // memory or create streams (RegionZeroer says why). zeroStream_ and
  // zeros_ serve ownChunk (under mu_), rowStream_ and rows_ the user
  // thread's table rows.
  std::unique_ptr<rt::Stream> zeroStream_, rowStream_;
  std::unique_ptr<rt::HostMemory> zeros_, rows_;
  uint64_t providerId_ = 0;
  std::mutex mu_;                            // guards own_
  std::vector<std::unique_ptr<Chunk>> own_;  // by peer: this rank's chunk for it
  std::vector<RingRegion> theirs_;           // by peer: its chunk for us (user thread)
  std::vector<char> connected_;              // by peer (user thread)
  std::atomic<uint64_t> held_{0};
};

}  // namespace ferry
