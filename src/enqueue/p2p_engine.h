// The SM-free point-to-point engine of one communicator: owns its
// connections (transport/), turns a group's send/recv tasks into proxy
// operations, and orders them against the user's streams with zero SMs:
//   start:  a ready event is recorded on the user stream; the proxy's copy
//           stream waits on it (a GPU-side dependency, no host polling)
//           before touching the user's buffer. Zero-copy receives also
//           write recvReady from the user stream (a stream memory op).
//   self:   a group's sends to self and receives from self that pair up one
//           to one (equal sizes, in call order, nothing earlier unmatched)
//           skip all of this: each pair is one copy on the receive's stream,
//           ordered against the send's stream by events (FERRY_P2P_SELF_COPY).
//   finish: the user stream waits until the connection's completion word
//           (sendDone / zcDone / fifoDone) reaches the operation's count.
//           With cuStreamWaitValue64 (zero SMs) when modules load eagerly;
//           under lazy module loading (CUDA's and PyTorch's default) with a
//           one-thread spin kernel, because a stream blocked in a host-word
//           wait stalls the lazy load of any kernel in the process, which
//           can deadlock a program that launches a new kernel before posting
//           the receive that would release the wait (DESIGN.md, measured).
//
// Threading: launch() is called by the thread that owns the communicator;
// the proxy thread runs the operations. Lifetime: shutdown() must run before
// destruction; after it no operation of this engine remains anywhere.
#pragma once

#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "core/params.h"
#include "proxy/proxy.h"
#include "enqueue/staging.h"
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

class P2pEngine {
 public:
  ~P2pEngine();
  // Collective: establishes every connection (see transport/setup.h).
  [[nodiscard]] static Status create(const P2pSetupContext& ctx, std::atomic<Status>* asyncError,
                                     std::shared_ptr<Proxy> proxy, std::unique_ptr<P2pEngine>* out);

  // Enqueues one group's tasks of this communicator, in call order.
  [[nodiscard]] Status launch(const std::vector<P2pTask>& tasks);
  // Waits for (or, with abort, drops) every operation, then lets the copy
  // streams drain. Idempotent.
  [[nodiscard]] Status shutdown(bool abort, int64_t timeoutMs);

  bool reaches(int peer, bool send) const;
  // Adds tasks that ran on the kernel p2p path to the per-peer counters (the
  // same ops/bytes counters; kernel p2p never counts as zero-copy).
  void countKernelTasks(const std::vector<P2pTask>& tasks);
  // Counters of the connections with `peer` (zeros where none exists).
  void peerStats(int peer, uint64_t out[5]) const;
  // "peer N: X ops, Y bytes ..." lines for INFO logs and tests.
  std::string describeCounters() const;

 private:
  P2pEngine() = default;
  [[nodiscard]] Status streamFor(void* handle, std::vector<void*>& handles,
                                 std::vector<std::unique_ptr<rt::Stream>>& streams, size_t* index);
  [[nodiscard]] Status userWait(rt::Stream& stream, CtrlMapping& ctrl, CtrlWord& word,
                                uint64_t value);
  [[nodiscard]] Status newEvent(std::shared_ptr<rt::Event>* out);
  // Enqueues `tasks` through the proxy; afterPost (if any) runs once they are
  // posted, before the user streams' waits for them.
  [[nodiscard]] Status launchOnDevice(const std::vector<P2pTask>& tasks,
                                      const std::function<Status()>& afterPost);
  using SelfPair = std::pair<size_t, size_t>;  // (send, receive) indices of a group
  [[nodiscard]] Status selfPairs(const std::vector<P2pTask>& tasks, std::vector<SelfPair>* pairs);
  [[nodiscard]] Status copySelfPairs(const std::vector<P2pTask>& tasks,
                                     const std::vector<SelfPair>& pairs);
  // Work queued on `later` from now on runs after what `earlier` holds now.
  [[nodiscard]] Status orderAfter(rt::Stream& later, rt::Stream& earlier);
  void countTask(const P2pTask& t);
  [[nodiscard]] Status makeRecvOp(const P2pTask& task, rt::Stream& stream, P2pOp* op);
  [[nodiscard]] Status takeStaging(const std::vector<P2pTask>& tasks, std::vector<void*>* staged);
  static bool receivesOverlapStaged(const std::vector<P2pTask>& tasks,
                                    const std::vector<void*>& staged);
  [[nodiscard]] Status issueStaging(const std::vector<P2pTask>& tasks,
                                    std::vector<std::unique_ptr<rt::Stream>>& streams,
                                    const std::vector<size_t>& streamOf,
                                    const std::vector<void*>& staged,
                                    std::vector<std::vector<std::shared_ptr<rt::Event>>>* pieces);
  [[nodiscard]] Status stageSend(const P2pTask& task, rt::Stream& stream, void* block,
                                 std::vector<std::shared_ptr<rt::Event>>* events);

  rt::Runtime* runtime_ = nullptr;
  std::shared_ptr<Proxy> proxy_;
  std::atomic<Status>* asyncError_ = nullptr;
  P2pState state_;
  int myRank_ = -1;
  int device_ = -1;
  bool spinWait_ = false;
  bool streamWaitsPeer_ = false;
  bool zeroCopy_ = true;
  bool selfCopy_ = true;     // FERRY_P2P_SELF_COPY
  bool stageSends_ = false;  // see staging.h
  uint64_t stagePiece_ = 0;  // FERRY_P2P_STAGE_PIECE_BYTES
  int64_t opTimeoutNs_ = 0;  // FERRY_P2P_TIMEOUT
  std::unique_ptr<StagingPool> staging_;
  bool shutDown_ = false;
  // Ready events, reused once the proxy has issued the wait on them.
  std::mutex eventMu_;
  std::vector<std::unique_ptr<rt::Event>> freeEvents_;
  // One event per user stream and launch, recorded after that stream's waits
  // on our control words: the words (and their host registration) must stay
  // mapped until every such wait has executed, even after an abort.
  std::vector<std::shared_ptr<rt::Event>> fences_;
  // Per peer: the last recvReady write (an event after it, and its stream),
  // so writes from different user streams land in order (makeRecvOp).
  struct ReadyWriter {
    std::shared_ptr<rt::Event> event;
    void* stream = nullptr;
  };
  std::vector<ReadyWriter> readyWriters_;
  [[nodiscard]] bool waitFences(int64_t timeoutMs);
};

}  // namespace ferry
