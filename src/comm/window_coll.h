// Collectives on window memory (issue 19): what NCCL_WIN_COLL_SYMMETRIC
// windows buy collectives. An all-gather or broadcast (FERRY_WIN_COLL_OPS:
// broadcasts only by default, the all-gathers measured no faster than the
// ring on 2x H200) whose output lies in such a window, on a communicator whose ranks are separate
// processes of one host reached through mapped memory, runs as SM-free copies straight between the
// ranks' buffers: each rank's shard crosses to every peer once, by a copy engine, into the peer's
// window (mapped at registration), with no SM taken. The ring instead copies each shard into the
// next rank's FIFO, whose kernel copies it out and on: two copies per hop, on SMs.
//
// The copies are the messages of an SM-free point-to-point group
// (enqueue/p2p_engine.h: whichever side arrives second copies, from or into
// mapped memory) on an internal communicator of the same ranks, made by
// the first such collective (comm/internal_comm.h). Its own connections
// keep these messages out of the user's per-peer send/receive order: a
// user's send and a window collective may be issued in any order.
//
// Every rank must choose the same way, or one would run the ring while its
// peers wait on copies: the choice depends on the collective, the knobs
// FERRY_WIN_COLL_MIN_BYTES and FERRY_WIN_COLL_OPS (agreed at init), the
// communicator's shape, the window (collReady is decided from what every rank published) and
// whether the stream is being captured (SM-free messages cannot be captured; the ring runs then).
// As with NCCL's symmetric windows, the user passes window buffers on every rank or on none, and
// captures on every rank or none.
//
// Threading: launch() and the queries on the communicator's owner thread;
// abort() from any thread.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "coll/coll_engine.h"
#include "enqueue/p2p_engine.h"

namespace ferry {

class Communicator;

class WindowColl {
 public:
  // `parent` has finished its topology and p2p setup, and outlives this;
  // `ops`: parseOps of FERRY_WIN_COLL_OPS.
  WindowColl(Communicator* parent, unsigned ops);
  ~WindowColl();
  WindowColl(const WindowColl&) = delete;
  WindowColl& operator=(const WindowColl&) = delete;

  // Bits of kOpBroadcast / kOpAllGather from FERRY_WIN_COLL_OPS ("a,b",
  // "none"); ncclInvalidArgument naming the knob for anything else.
  static constexpr unsigned kOpBroadcast = 1, kOpAllGather = 2;
  [[nodiscard]] static Status parseOps(const std::string& text, unsigned* mask);

  // Whether `t` runs here (the same answer on every rank; see above).
  bool chosen(const CollTask& t) const;
  // Enqueues `t` (chosen) on its stream; makes the internal communicator
  // the first time.
  [[nodiscard]] Status launch(const CollTask& t);
  // Estimated microseconds of `t` (ncclGroupSimulateEnd).
  double estimateUs(const CollTask& t) const;
  // Stops the internal communicator's work (its messages fail).
  void abort();
  // Waits for (or, with abort, drops) its messages.
  [[nodiscard]] Status shutdown(bool abort);
  // Memory the internal communicator holds for kernel p2p (owner thread).
  uint64_t regionBytes() const;

 private:
  // The messages of `t` for this rank, in the group's order.
  std::vector<P2pTask> messages(const CollTask& t) const;
  [[nodiscard]] Status ensureComm();

  Communicator* parent_;
  bool usable_ = false;  // the communicator's shape and knobs allow it
  uint64_t minBytes_ = 0;
  unsigned ops_;        // kOp* bits (FERRY_WIN_COLL_OPS)
  bool tried_ = false;  // owner thread
  Status made_ = ncclSuccess;
  mutable std::mutex mu_;  // guards comm_ being set (owner) against abort()
  std::unique_ptr<Communicator> comm_;
};

}  // namespace ferry
