// P2pEngine's view of one message while its launch is being built (shared
// by p2p_engine.cc and p2p_submit.cc; not for use elsewhere).
#pragma once

#include <memory>
#include <vector>

#include "enqueue/p2p_engine.h"

namespace ferry {

struct P2pEngine::Op {
  ConnectionBase* conn = nullptr;
  bool send = false;
  size_t stream = 0;  // index into the launch's user streams
  uint64_t seq = 0;
  bool claimed = false;
  bool first = false;
  PostInfo peer{};  // second: where the first side's bytes are
  // Staging: a first sender's or first receiver's stand-in buffer, or a
  // second sender's copy of bytes its own group receives into.
  StagingPool* pool = nullptr;
  StagingPool::Block* block = nullptr;
  // A send staged so that its stream never waits for the receiver (lazy
  // module loading); other staging (unmappable buffers, SHM) still waits.
  bool detached = false;
  // Second: the first side's bytes, as this process addresses them.
  char* remote = nullptr;
  std::shared_ptr<PeerMapping> mapping;
  bool gpuWaitReady = false;  // second: the peer's `ready` is not yet visible
  // Its user stream also runs a self copy of the launch (all-to-all's own
  // block): a copy as the second side stays off that stream, beside it.
  bool streamCopiesSelf = false;
  std::shared_ptr<rt::Event> copied;  // second: recorded after the copy

  uint64_t gen() const { return seq + 1; }
  MsgSlot& slot() const { return ctrl().slot[seq % kMsgSlots]; }
  CtrlBlock& ctrl() const { return *conn->ctrl.ctrl; }
  // Whether this rank's user stream waits for the message.
  bool userStreamWaits() const { return !detached; }
};

// One launch of local (same-host) messages while it is built, step by step
// (P2pEngine::Step; p2p_steps.cc).
struct P2pEngine::Stepped {
  std::vector<P2pTask> all;     // the launch's tasks, self pairs included
  std::vector<SelfPair> pairs;  // self pairs (indices into `all`), copied at Finish
  std::vector<P2pTask> tasks;   // the rest: messages to peers
  std::vector<void*> handles;   // their user streams
  Streams streams;
  std::vector<Op> ops;  // one per element of `tasks`
  std::vector<std::shared_ptr<rt::Event>> starts;
};

}  // namespace ferry
