// The host memory of one network connection's data path (TransportId::Net;
// the protocol: enqueue/p2p_net.cc's header comment):
//   - NetWords: four counters the connection's copy stream, the user's
//     thread and the proxy thread share (pinned, so streams read and write
//     them);
//   - staging blocks, one per message in flight: a send's bytes, copied
//     out of the user's buffer, which the proxy hands to the network; a
//     receive's bytes, which the proxy lands there and the copy stream
//     copies into the user's buffer. A whole message per block keeps the
//     stream work of a message short whatever its size (a handful of waits
//     and copies: CUDA blocks the submitting thread when a stream's queue
//     is full, NOTES.md trap 29), at the price of pinned memory as large
//     as the messages in flight (blocks are reused, and shared with the
//     communicator's other network connections: transport/net_block_pool.h).
// A block is registered with the engine on every comm of the connection
// (NetLink::regMr, one registration per link) before the connection's first
// use of it, and stays registered until the connection closes.
//
// Threading: take() runs on the thread that owns the communicator; the
// proxy reads the words and writes `sent` / `arrived`.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <vector>

#include "runtime/runtime.h"
#include "transport/ctrl_block.h"
#include "transport/net_block_pool.h"
#include "transport/net_link.h"

namespace ferry {

// Counters in units of chunks (filled, arrived) or messages (sent,
// drained), each monotonic over the life of the connection.
struct NetWords {
  CtrlWord filled;   // sender: chunks copied into staging (its copy stream writes)
  CtrlWord sent;     // sender: messages the network took in full (proxy writes)
  CtrlWord arrived;  // receiver: chunks landed in staging (proxy writes)
  CtrlWord drained;  // receiver: messages copied out of staging (its copy stream writes)
  CtrlWord ready;    // receiver: messages whose user buffer may be written (its copy stream
                     // writes; direct receives only, FERRY_NET_GDR)
  CtrlWord taken;    // sender: chunks the network took (proxy writes); only a send's
                     // staging wait reads it, as the sign that the network still moves
};

class NetBuffers {
 public:
  // `links`: the connection's (at least one), which outlive this object.
  // `pool`: the communicator's staging blocks, which outlive this object.
  NetBuffers(rt::Runtime* runtime, std::vector<NetLink*> links, bool isSend, NetBlockPool* pool)
      : runtime_(runtime), links_(std::move(links)), isSend_(isSend), pool_(pool) {}
  ~NetBuffers();
  NetBuffers(const NetBuffers&) = delete;
  NetBuffers& operator=(const NetBuffers&) = delete;

  [[nodiscard]] Status init();  // allocates the words (zeroed)
  NetWords& words() const { return *words_; }

  // Messages the connection is done with: sent (send connection) or drained
  // (receive connection). Acquire: a block whose message is done is free.
  uint64_t done() const { return isSend_ ? words_->sent.load() : words_->drained.load(); }
  // Whether a failure released the connection's words (kReleased: its
  // streams and staging waits run on). Its blocks then read as done while
  // the engine may still hold them until the proxy closes the comms (a
  // receive still landing bytes), so no other connection takes them.
  bool released() const {
    return words_->sent.load() >= kReleased || words_->arrived.load() >= kReleased;
  }

  // A registered block of >= bytes for message `seq`, free again once the
  // message is done with it: sent (words().sent > seq) on a send
  // connection, drained (words().drained > seq) on a receive connection.
  // The smallest free block of the pool that fits, the connection's own
  // first among equals (registered already); a new one pinned only where
  // none fits and the rules below find none to reuse or wait for.
  // *size: the block's size. *reuseAfter: 0, or (receive connections) the
  // `drained` value the block needs first: a receive connection that holds
  // kRecvBlocksPerSize blocks that fit, all busy, reuses the one that
  // frees first instead of pinning another, and the proxy lands nothing
  // in it before then (trap 41: a CPU that runs ahead would otherwise pin
  // a block per message in flight).
  //
  // A send connection that holds kSendBlocksPerSize blocks that fit, all
  // busy, waits (on this thread, honouring wait.abort) for the one that
  // frees first, if its message is already the proxy's (seq < wait.posted:
  // the network alone frees it), for as long as the network keeps taking
  // the connection's chunks, and pins another only once `wait.ns` passed
  // with none taken: the CPU's run-ahead then costs the network's own pace
  // instead of a cudaHostAlloc and pinned memory per message in flight
  // (trap 41; a fixed 2 ms bound ran out behind every message longer than
  // that, ~10 MiB at 5 GB/s), and a sender whose earlier messages cannot
  // move (their receiver is not there yet) still waits only wait.ns.
  //
  // Past the communicator's cap (capRoom: what its send staging may still
  // grow by; FERRY_NET_STAGING_MAX_BYTES), a send that would pin a new block
  // first waits up to capWaitNs for the busy block that frees first,
  // whether the network moves meanwhile or not (its own busy stream may be
  // what holds the chunks back: trap 73), and pins one only after that:
  // a bound, never a hang (a block may free only after this thread's
  // later calls). Such a wait needs a busy block that fits whose message
  // is the proxy's already.
  struct SendWait {
    uint64_t posted = 0;  // messages of the connection handed to the proxy
    int64_t ns = 0;
    const std::atomic<bool>* abort = nullptr;
    uint64_t capRoom = UINT64_MAX;
    int64_t capWaitNs = 0;
  };
  // The block take() pins for a message of `bytes` (staged bytes plus the
  // trailer) when none is free.
  static uint64_t blockSizeFor(uint64_t bytes);
  // *mhandles: the block's registration on each link (by link index).
  [[nodiscard]] Status take(uint64_t bytes, uint64_t seq, const SendWait& wait, char** data,
                            NetMhandles* mhandles, uint64_t* size, uint64_t* reuseAfter);
  // FERRY_NET_GDR: whether every link's engine takes device memory
  // (net::kPtrCuda).
  bool directCapable() const { return directCapable_; }
  // The registration on every link of the device allocation `a` (a user
  // buffer sent from or received into directly), made on first use and kept
  // until the connection closes: false (nothing registered) when this
  // connection already holds kMaxDirectRegions, or a link refused it (WARN
  // once): the message then goes through staging.
  [[nodiscard]] bool directRegistration(const rt::AllocationInfo& a, NetMhandles* mhandles);
  static constexpr int kMaxDirectRegions = 64;
  static constexpr int kRecvBlocksPerSize = 2;
  static constexpr int kSendBlocksPerSize = 4;
  // Bytes of staging this connection pinned (the pool's blocks are each
  // counted once, by the connection that pinned it).
  uint64_t stagingBytes() const { return stagingBytes_; }

 private:
  using Block = NetBlockPool::Block;
  // This connection's registration of a pool block.
  struct Registration {
    const Block* block = nullptr;
    NetMhandles mhandles{};
  };
  // Pins a new block of `bytes` into the pool.
  [[nodiscard]] Status pinBlock(uint64_t bytes, Block** out);
  // The block's registration on every link, made on first use.
  [[nodiscard]] Status registration(const Block& b, NetMhandles* out);
  // This connection's registration of `b`, or null.
  const Registration* findRegistration(const Block& b) const;
  // Deregisters each link's handle of one range (null ones skipped).
  void deregister(NetMhandles& mhandles);
  // Waits for `sent` to reach `target`; false on abort, or when `ns` passed
  // (with no chunk taken meanwhile, if whileMoving: each one taken restarts
  // the bound).
  bool waitSent(uint64_t target, int64_t ns, bool whileMoving,
                const std::atomic<bool>* abort) const;

  rt::Runtime* runtime_;
  std::vector<NetLink*> links_;
  bool isSend_;
  std::unique_ptr<rt::HostMemory> wordMem_;
  NetWords* words_ = nullptr;
  NetBlockPool* pool_;
  std::vector<Registration> registrations_;
  uint64_t stagingBytes_ = 0;
  struct DirectRegion {
    uint64_t allocId = 0;
    NetMhandles mhandles{};
  };
  std::vector<DirectRegion> direct_;
  bool directCapable_ = false;
  bool directRefused_ = false;
};

}  // namespace ferry
