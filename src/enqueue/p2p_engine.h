// The SM-free point-to-point engine of one communicator: owns its
// connections (transport/), and turns a group's send/recv tasks into copy
// engine copies and stream flags, all submitted inside the call by the
// calling thread (protocol and the reason: transport/ctrl_block.h).
//
// Per message, the side that arrives second copies (a push by a second
// sender, a pull by a second receiver) on its connection's stream; the first
// side's user stream marks when its bytes or buffer are ready and waits for
// the copy. Per group and user stream, the work is laid out as
//   1. staging copies (a send whose bytes the peer must read from a staging
//      block), then the first side's `ready` flags -- or the flags first
//      when no receive buffer of the group overlaps a staged send's source;
//   2. an event marking that point, which the group's copies wait for;
//   3. the copies this rank makes as the second side, each on its
//      connection's stream (and, where the peer's `ready` is not yet seen
//      by the CPU, after a GPU wait for it);
//   4. the user stream's waits: for its own copies (events), and, as the
//      first side, until the peer's copy has landed (`done`).
// User-stream waits on flags are cuStreamWaitValue64 (FERRY_USER_WAIT=auto
// or memop: zero SMs), or a one-thread spin kernel (kernel; also on the
// legacy NULL stream and with CUDA_DEVICE_MAX_CONNECTIONS=1, where a parked
// wait-value would stop other streams' work: NOTES.md trap 16).
// Sends to self and receives from self that pair up one to one in a group
// skip all of this: each pair is one copy on the receive's stream, ordered
// against the send's stream by events (FERRY_P2P_SELF_COPY).
//
// Threading: launch() is called by the thread that owns the communicator;
// the proxy thread only watches messages (proxy/p2p_watch.h). Lifetime:
// shutdown() must run before destruction; after it no message of this
// engine remains anywhere.
#pragma once

#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "core/cpu_profile.h"
#include "core/params.h"
#include "enqueue/peer_memory.h"
#include "enqueue/staging.h"
#include "proxy/net_progress.h"
#include "proxy/proxy.h"
#include "transport/connection.h"
#include "transport/setup.h"

namespace ferry {

struct P2pTask {
  bool isSend = false;
  int peer = -1;
  void* buffer = nullptr;
  uint64_t bytes = 0;
  void* stream = nullptr;  // the user's stream handle (cudaStream_t)
};

// Whether two tasks' byte ranges overlap.
bool overlaps(const P2pTask& a, const P2pTask& b);
// Whether a task of the other direction in `tasks` shares bytes with `t`
// (an in-place exchange).
bool overlapsOpposite(const P2pTask& t, const std::vector<P2pTask>& tasks);
// Indices of `tasks` by peer distance ((peer - rank) mod nranks), then in
// call order: the order in which a rank issues its copies (p2p_submit.cc).
std::vector<size_t> rotatedOrder(const std::vector<P2pTask>& tasks, int rank, int nranks);
// The pieces (offset, length) in which a cross-host send of `bytes` is
// copied into its staging block, each followed by a `filled` write
// (p2p_net.cc, stageNetSend): whole chunks of `chunkBytes`, the last one
// short; one chunk each for the first four, then doubling up to 4 MiB or a
// sixteenth of the message, so that a message of any size is a bounded
// number of stream operations (NOTES.md trap 29). Empty for 0 bytes.
std::vector<std::pair<uint64_t, uint64_t>> netStagePieces(uint64_t bytes, uint64_t chunkBytes);

class P2pEngine {
 public:
  ~P2pEngine();
  // Collective: establishes every connection (see transport/setup.h).
  [[nodiscard]] static Status create(const P2pSetupContext& ctx, std::atomic<Status>* asyncError,
                                     std::shared_ptr<Proxy> proxy, std::unique_ptr<P2pEngine>* out);

  // Enqueues one group's tasks of this communicator, in call order.
  [[nodiscard]] Status launch(const std::vector<P2pTask>& tasks);

  // The same launch cut into steps (p2p_steps.cc), for one thread issuing a
  // group over several communicators of this process (ncclCommInitAll,
  // nccl-tests -g, JAX): comm/group.cc runs each step for every
  // communicator before the next, so every receive of the group is claimed
  // before any send (each rank is then second for its sends and pushes them
  // from its own buffer, no staging, each GPU copying one way) and every
  // stream wait of the group is submitted after the work that releases it
  // (the lazy-loading rule of DESIGN.md). launch() runs the same steps in a
  // row. Only launches with no peer on another host (steppable()); one
  // stepped launch at a time per engine; a failed step ends it (its claimed
  // messages fail on both sides) and later steps return ncclInvalidUsage.
  enum class Step : int { ClaimReceives, ClaimSends, Copy, Finish };
  static constexpr int kSteps = 4;
  bool steppable(const std::vector<P2pTask>& tasks) const;
  // Step ClaimReceives takes `tasks`; the later steps ignore the argument.
  [[nodiscard]] Status launchStep(Step step, const std::vector<P2pTask>& tasks);
  // Waits for (or, with abort, drops) every message, then lets the copy
  // streams and user-stream waits drain. Idempotent.
  [[nodiscard]] Status shutdown(bool abort, int64_t timeoutMs);
  // A peer died (comm/liveness.h): every message in flight, and any posted
  // later, fails with ncclRemoteError and releases the waits of this rank's
  // streams. Any thread; does not wait.
  void failAll();

  bool reaches(int peer, bool send) const;
  // Adds tasks that ran on the kernel p2p path to the per-peer counters (the
  // same ops/bytes counters; kernel p2p never counts as zero-copy).
  void countKernelTasks(const std::vector<P2pTask>& tasks);
  // Where launch() adds its CPU time per phase (FERRY_PROFILE); outlives
  // the engine (the communicator's).
  void setProfile(CpuProfile* profile) { profile_ = profile; }
  // Counters of the connections with `peer` (zeros where none exists).
  void peerStats(int peer, uint64_t out[5]) const;
  // "peer N: X ops, Y bytes ..." lines for INFO logs and tests.
  std::string describeCounters() const;
  // Every rank's proxy RPC name as exchanged at setup, by rank (empty
  // where no same-host connection exists: other hosts, collectives-only).
  std::vector<std::string> peerProxyNames() const;
  // Staging blocks held, same-host pools and network connections' (grown
  // on demand, kept for reuse; owner thread).
  uint64_t stagingBytes() const;

  // Windows (comm/windows.h). How a peer process would map `bytes` at
  // `buffer` (*mappable false: it cannot, e.g. pool or cuMem memory on CUDA).
  [[nodiscard]] Status describeForPeers(void* buffer, uint64_t bytes, PostInfo* info,
                                        bool* mappable);
  // Whether messages with `peer` may copy straight from or into its mapped
  // memory (another process on this host, the P2P transport, zero-copy on).
  bool mapsPeerMemory(int peer) const;
  // Maps what `peer` described with describeForPeers (once per process).
  [[nodiscard]] Status mapPeerBuffer(int peer, const PostInfo& info,
                                     std::shared_ptr<PeerMapping>* out);

 private:
  struct Op;
  using Streams = std::vector<std::unique_ptr<rt::Stream>>;
  P2pEngine() = default;
  [[nodiscard]] Status streamFor(void* handle, std::vector<void*>& handles, Streams& streams,
                                 size_t* index);
  [[nodiscard]] Status userWait(rt::Stream& stream, CtrlMapping& ctrl, CtrlWord& word,
                                uint64_t value);
  [[nodiscard]] Status newEvent(std::shared_ptr<rt::Event>* out);
  // Messages to and from peers on other hosts (p2p_net.cc).
  struct NetTask;
  bool isNet(const P2pTask& t) const;
  // `local`: the launch's other tasks (same-host peers), which a direct
  // transfer must not share bytes with.
  [[nodiscard]] Status launchNet(const std::vector<P2pTask>& tasks,
                                 const std::vector<P2pTask>& local);
  // A same-host send copied aside ahead of the network part (copyAheadOfNet).
  struct AheadCopy {
    StagingPool::Block* block = nullptr;
    void* stream = nullptr;  // the send's user stream
  };
  // Same-host sends of `local` whose bytes a receive of `net` overwrites
  // read from a copy made first, on their streams (each entry of *ahead);
  // releaseAhead frees the copies once those streams are past the launch.
  [[nodiscard]] Status copyAheadOfNet(const std::vector<P2pTask>& net, std::vector<P2pTask>* local,
                                      std::vector<AheadCopy>* ahead);
  [[nodiscard]] Status releaseAhead(std::vector<AheadCopy>& ahead);
  StagingPool& devicePool();
  [[nodiscard]] Status prepareNet(const P2pTask& t, ConnectionBase* conn, uint64_t seq,
                                  uint64_t firstChunk, bool overlapped, NetOp* op);
  [[nodiscard]] Status submitNet(const std::vector<P2pTask>& tasks, std::vector<NetTask>& net,
                                 Streams& streams);
  [[nodiscard]] Status stageNetSend(const P2pTask& t, NetOp& op);
  [[nodiscard]] Status drainNetRecv(const P2pTask& t, NetOp& op);
  // FERRY_NET_GDR: points op at the user's buffer when it can go direct.
  void chooseNetDirect(const P2pTask& t, ConnectionBase& conn, NetOp& op);
  // Adds a send connection's staging growth to netSendStaging_; WARN once
  // past FERRY_NET_STAGING_MAX_BYTES.
  void noteNetSendStaging(uint64_t grew, int peer);
  void failNetConnection(ConnectionBase& conn, Status s);
  [[nodiscard]] Status userWaitAt(rt::Stream& stream, uint64_t* addr, uint64_t value);
  [[nodiscard]] static Status netChunkBytes(const Params& params, uint64_t* chunk);
  struct Stepped;  // a launch in progress (p2p_engine_op.h)
  [[nodiscard]] Status runStep(Stepped& l, Step step);
  [[nodiscard]] Status beginLocal(const std::vector<P2pTask>& tasks, Stepped& l);
  [[nodiscard]] Status finishStepped(Stepped& l);
  // Phase A: claims the launch's receives (sends false) or sends, each
  // connection's in call order.
  [[nodiscard]] Status claimPass(const std::vector<P2pTask>& tasks, std::vector<Op>& ops,
                                 bool sends);
  // The bounded CPU wait of FERRY_P2P_PUSH_WAIT_US before claiming send `i`.
  void awaitReceiver(const std::vector<P2pTask>& tasks, const std::vector<Op>& ops, size_t i,
                     int64_t* budgetNs);
  // How many messages a receiver late by habit lets pass between two push
  // waits at first (FERRY_P2P_PUSH_RETRY_MAX may let it grow).
  static constexpr uint32_t kPushRetryEvery = 8;
  // A push wait found its receiver: the connection is not late by habit.
  static void receiverCame(ConnectionBase& conn);
  [[nodiscard]] bool awaitWhileBusy(const Op& op, void* stream, int64_t idleNs,
                                    int64_t busyNs) const;
  // Before a staged send grows the staging pool: FERRY_P2P_STAGING_MAX_BYTES.
  void awaitStagingRoom(const P2pTask& t, Op& op);
  // Whether user stream `stream`'s fence has not passed yet.
  [[nodiscard]] bool streamBusy(void* stream) const;
  [[nodiscard]] Status claimOne(const P2pTask& task, bool overlapsReceive, Op& op);
  // `overlapsReceive`: a receive of the same group writes into the send's
  // bytes (an in-place exchange): the send stages whatever the mode.
  [[nodiscard]] Status describeFirst(const P2pTask& task, bool overlapsReceive, Op& op,
                                     PostInfo* info);
  [[nodiscard]] Status reachPeerBytes(const P2pTask& task, Op& op);
  void failClaimed(std::vector<Op>& ops, Status s);
  // Phases 1-4 of the header comment.
  [[nodiscard]] Status markReady(const std::vector<P2pTask>& tasks, std::vector<Op>& ops,
                                 Streams& streams, std::vector<std::shared_ptr<rt::Event>>* starts);
  [[nodiscard]] Status stageSends(const std::vector<P2pTask>& tasks, std::vector<Op>& ops,
                                  Streams& streams, size_t stream);
  // Phase 3: one copy's wait for its user stream (*c: its stream), and its end.
  [[nodiscard]] Status beginSecond(Op& op, Streams& streams,
                                   const std::vector<std::shared_ptr<rt::Event>>& starts,
                                   const std::vector<bool>& onUser, rt::Stream** c);
  [[nodiscard]] Status endSecond(const P2pTask& t, Op& op, rt::Stream& c, bool onUser);
  [[nodiscard]] Status copyAsSecond(Stepped& l);
  // FERRY_P2P_USER_STREAM_COPY: whether user stream `stream`'s copy as the
  // second side runs on that stream (it holds exactly one, and waits for it).
  [[nodiscard]] bool copiesOnUserStream(const std::vector<Op>& ops, size_t stream) const;
  [[nodiscard]] Status waitForPeers(const std::vector<P2pTask>& tasks, std::vector<Op>& ops,
                                    Streams& streams);
  void postWatches(const std::vector<Op>& ops);
  StagingPool& poolFor(const ConnectionBase& conn);
  PeerRef peerRef(int peer) const;
  using SelfPair = std::pair<size_t, size_t>;  // (send, receive) indices of a group
  [[nodiscard]] Status selfPairs(const std::vector<P2pTask>& tasks, std::vector<SelfPair>* pairs);
  [[nodiscard]] Status copySelfPairs(const std::vector<P2pTask>& tasks,
                                     const std::vector<SelfPair>& pairs);
  // One pair's copy, plain or as rows (FERRY_P2P_SELF_COPY_ROWS).
  [[nodiscard]] Status copySelf(rt::Stream& s, char* dst, const char* src, uint64_t bytes);
  // FERRY_P2P_SELF_COPY=3: takes (out of l.pairs) a self pair whose send and
  // receive are both on user stream `handle` and copy bytes, for a second-side
  // copy on that stream to carry in pieces (copyInPieces); false if none.
  [[nodiscard]] bool takePiecesPair(Stepped& l, void* handle, SelfPair* out);
  [[nodiscard]] Status copyInPieces(rt::Stream& c, char* dst, const char* src, uint64_t bytes,
                                    const P2pTask& selfSend, const P2pTask& selfRecv);
  // Work queued on `later` from now on runs after what `earlier` holds now.
  [[nodiscard]] Status orderAfter(rt::Stream& later, rt::Stream& earlier);
  void countTask(const P2pTask& t, bool zeroCopy);
  [[nodiscard]] bool waitFences(int64_t timeoutMs);
  // Re-records user stream `handle`'s fence on `stream` (finishStepped).
  [[nodiscard]] Status recordFence(void* handle, rt::Stream& stream);

  rt::Runtime* runtime_ = nullptr;
  std::shared_ptr<Proxy> proxy_;
  std::atomic<Status>* asyncError_ = nullptr;
  const std::atomic<bool>* abortFlag_ = nullptr;
  P2pState state_;
  int myRank_ = -1;
  int device_ = -1;
  uint64_t commKey_ = 0;
  int64_t rpcTimeoutMs_ = 120000;
  bool spinWait_ = false;
  bool zeroCopy_ = true;  // FERRY_P2P_ZERO_COPY
  // FERRY_P2P_SELF_COPY's values, in order: each later one also does what
  // the one before it does where it cannot do more.
  enum class SelfCopy { Proxy = 0, Beside = 1, After = 2, Pieces = 3 };
  SelfCopy selfCopy_ = SelfCopy::Beside;
  size_t selfCopyRows_ = 0;      // FERRY_P2P_SELF_COPY_ROWS (copySelf)
  bool userStreamCopy_ = false;  // FERRY_P2P_USER_STREAM_COPY
  bool saidAhead_ = false;       // copyAheadOfNet's INFO line, once
  bool stageSends_ = false;      // see staging.h
  uint64_t stageSmallMax_ = 0;   // sends up to this stage too (comms spanning hosts)
  bool stagesWhenFirst(const P2pTask& t) const { return stageSends_ || t.bytes <= stageSmallMax_; }
  int64_t opTimeoutNs_ = 0;        // FERRY_P2P_TIMEOUT
  int64_t pushWaitNs_ = 0;         // FERRY_P2P_PUSH_WAIT_US
  int64_t pushWaitMinNs_ = 0;      // FERRY_P2P_PUSH_WAIT_MIN_US
  int pushWaitBusy_ = 0;           // FERRY_P2P_PUSH_WAIT_BUSY: 0, 1 or 2
  bool pushWaitStaged_ = true;     // FERRY_P2P_PUSH_WAIT_STAGED
  uint32_t pushRetryMax_ = 8;      // FERRY_P2P_PUSH_RETRY_MAX (>= kPushRetryEvery)
  int64_t stagingGrowWaitNs_ = 0;  // FERRY_P2P_STAGING_GROW_WAIT_US
  uint64_t stagingMaxBytes_ = 0;   // FERRY_P2P_STAGING_MAX_BYTES
  int64_t stagingCapWaitNs_ = 0;   // FERRY_P2P_STAGING_WAIT_MS
  bool warnedStagingCap_ = false;
  CpuProfile* profile_ = nullptr;     // the communicator's (FERRY_PROFILE)
  std::unique_ptr<Stepped> stepped_;  // launchStep's launch in progress
  uint64_t netChunk_ = 0;             // FERRY_NET_CHUNK_BYTES
  bool netGdr_ = false;               // FERRY_NET_GDR
  int64_t stagingWaitNs_ = 0;         // FERRY_NET_STAGING_WAIT_US
  uint64_t netStagingMax_ = 0;        // FERRY_NET_STAGING_MAX_BYTES (0: none)
  int64_t netStagingCapWaitNs_ = 0;   // FERRY_NET_STAGING_CAP_WAIT_MS
  uint64_t netSendStaging_ = 0;       // pinned by the Net send connections
  bool warnedNetStagingCap_ = false;
  std::unique_ptr<StagingPool> devicePool_;  // P2P connections
  std::unique_ptr<StagingPool> hostPool_;    // SHM connections
  bool shutDown_ = false;
  // Events, reused once every stream operation that captured one was issued.
  std::mutex eventMu_;
  std::vector<std::unique_ptr<rt::Event>> freeEvents_;
  // One event per user stream, re-recorded by every launch after that
  // stream's waits on our control words: the words (and their host
  // registration) must stay mapped until every such wait has executed, even
  // after an abort. A stream runs its work in order, so its newest record
  // passing means every earlier one has: one event per stream says it all,
  // and a launch pays one record (no query, no new event: session 32's
  // ferry-call-cost, a passed event's query costs ~1.4 us, a record ~0.2).
  struct Fence {
    void* stream = nullptr;  // the user's stream handle
    std::unique_ptr<rt::Event> event;
  };
  std::vector<Fence> fences_;
};

}  // namespace ferry
