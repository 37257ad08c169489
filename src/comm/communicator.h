// Communicator: owns everything one rank of one communicator uses (DESIGN.md
// layer 2): its config and param snapshot, the runtime it runs on, the
// bootstrap, the peer table and topology. Layers added later (proxy
// connections, transports, kernel plans) hang off it too.
//
// Lifetime: created by the API (ncclCommInitRank*, ncclCommSplit), freed only
// by ncclCommDestroy / ncclCommAbort. The handle is published to the user
// before init finishes (as NCCL does), so abort() may be called from another
// thread while init runs; it makes init return promptly and waits for it.
//
// Threading: init runs on the caller's thread (blocking) or on an owned init
// thread (non-blocking). abort(), asyncError() are safe from any thread; the
// rest follow NCCL's rule of one thread at a time per communicator.
#pragma once

#include <atomic>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "bootstrap/bootstrap.h"
#include "coll/coll_engine.h"
#include "comm/hier_allreduce.h"
#include "comm/liveness.h"
#include "comm/window_coll.h"
#include "comm/windows.h"
#include "comm/config.h"
#include "core/cpu_profile.h"
#include "enqueue/p2p_engine.h"
#include "core/params.h"
#include "core/status.h"
#include "runtime/runtime.h"
#include "topo/topology.h"

namespace ferry {

class Communicator {
 public:
  Communicator(Params params, CommConfig config, rt::Runtime* runtime, int nranks, int rank,
               int device);
  ~Communicator();
  Communicator(const Communicator&) = delete;
  Communicator& operator=(const Communicator&) = delete;

  // A communicator is born "initializing"; exactly one of runInit,
  // startInitThread or failInit must follow, or abort()/destroy would wait.
  //
  // Runs the collective init (bootstrap, peer exchange, topology). Stores the
  // outcome as the async error and signals waiters. Called once.
  // `ids`: one unique id, or several (ncclCommInitRankScalable: each root
  // serves a slice of the ranks).
  [[nodiscard]] Status runInit(const std::vector<ncclUniqueId>& ids);
  // Runs `job` (which must end in runInit or failInit) on an owned thread,
  // for non-blocking communicators.
  void startInitThread(std::function<void()> job);

  // Ends an init that will never run (e.g. its group failed first).
  void failInit(Status s) { publishInitResult(s); }

  // Sets the abort flag (every bootstrap wait returns within ~100 ms) and
  // waits until init, if running, has returned.
  void abort();
  // Waits until init (on any thread) has returned, without aborting it.
  void waitInit();
  // Joins an init thread; no-op otherwise.
  void joinInit();

  // ncclInProgress while init runs, then its result (or a later async error).
  Status asyncError() const { return asyncError_.load(std::memory_order_acquire); }
  // Why the communicator failed after init, when a peer died ("" otherwise).
  std::string failure() const;
  // A peer is dead (the liveness monitor's thread): fails the communicator
  // with ncclRemoteError (first cause wins), stops its kernels and fails its
  // SM-free messages, so that no wait of this rank hangs on the dead peer.
  // The communicator stays abortable (and shrinkable).
  void peerFailed(int peer, const std::string& why);
  bool ready() const { return asyncError() == ncclSuccess; }

  // ncclCommRevoke: stops every operation in flight (kernels abort, SM-free
  // messages fail) and waits until they have; afterwards only destroy,
  // abort, split and shrink are accepted. Any later call is a no-op.
  [[nodiscard]] Status revoke();
  bool revoked() const { return revoked_.load(std::memory_order_acquire); }

  // Marks the communicator finalized (no more operations accepted).
  [[nodiscard]] Status finalize();
  bool finalized() const { return finalized_; }

  int rank() const { return rank_; }
  int nranks() const { return nranks_; }
  int device() const { return device_; }
  const CommConfig& config() const { return config_; }
  const Params& params() const { return params_; }
  const Topology& topology() const { return topology_; }
  rt::Runtime* runtime() const { return runtime_; }
  boot::Bootstrap* bootstrap() const { return bootstrap_.get(); }
  // The SM-free point-to-point engine (null until init succeeded).
  P2pEngine* p2p() const { return p2p_.get(); }
  // FERRY_PROFILE: CPU time of this communicator's launches (cpu_profile.h).
  CpuProfile* profile() { return &profile_; }
  // The collective engine (null until init succeeded).
  CollEngine* coll() const { return coll_.get(); }
  // Launches one group's collectives of this communicator in call order:
  // each on the ring, hierarchically (comm/hier_allreduce.h) or between
  // symmetric windows (comm/window_coll.h).
  [[nodiscard]] Status launchColl(const std::vector<CollTask>& tasks);
  // The tasks of `tasks` that run on this communicator's own ring, and the
  // estimated time of the others.
  std::vector<CollTask> ringTasks(const std::vector<CollTask>& tasks) const;
  double offRingEstimateUs(const std::vector<CollTask>& tasks) const;
  // Memory held for collectives and kernel p2p, the internal communicators'
  // included, and of it the collective FIFOs (ncclFerryCommMemory).
  uint64_t heldBytes() const;
  uint64_t collectiveFifoBytes() const;
  // Collectives launched on the ring / hierarchically (owner thread).
  uint64_t ringCollCount() const { return ringColls_; }
  uint64_t hierCollCount() const { return hierColls_; }
  // Called at the end of peerFailed (before init only): an internal
  // communicator tells its parent.
  void setPeerFailedHook(std::function<void(int peer, const std::string& why)> hook) {
    peerFailedHook_ = std::move(hook);
  }
  // Before init: this communicator will carry collectives only (no
  // point-to-point connections or FIFOs are made).
  void setCollectivesOnly() { collectivesOnly_ = true; }
  // Flushes (or, with abort, drops) outstanding point-to-point work.
  [[nodiscard]] Status shutdownP2p(bool abort);
  // Waits for (or, with abort, stops) running collective kernels.
  [[nodiscard]] Status shutdownColl(bool abort);
  const std::atomic<bool>* abortFlag() const { return &abortFlag_; }
  // ncclCommWindowRegister's windows (valid once init succeeded).
  WindowTable& windows() { return windows_; }
  // The bootstrap tag of the next communicator made from this one (split,
  // shrink, internal ones): every rank draws them in the same order.
  uint32_t nextSplitTag() {
    return boot::kUserTagBase + static_cast<uint32_t>(splitCount_++ % 0x10000000);
  }

 private:
  [[nodiscard]] Status initSteps(const std::vector<ncclUniqueId>& ids);
  [[nodiscard]] Status initP2p(const ncclUniqueId& id);
  [[nodiscard]] Status enableSameProcessPeers();
  [[nodiscard]] Status startLiveness(uint64_t commKey);
  void publishInitResult(Status s);

  const Params params_;
  const CommConfig config_;
  rt::Runtime* const runtime_;  // process-wide singleton, not owned
  const int nranks_;
  const int rank_;
  const int device_;
  std::unique_ptr<boot::Bootstrap> bootstrap_;
  Topology topology_;
  std::unique_ptr<P2pEngine> p2p_;
  std::unique_ptr<CollEngine> coll_;
  // Spanning hosts only; destroyed before coll_ (its communicators call
  // back into this one).
  std::unique_ptr<HierAllReduce> hier_;
  // Separate processes on one host; destroyed before the engines too.
  std::unique_ptr<WindowColl> winColl_;
  unsigned winCollOps_ = 0;  // FERRY_WIN_COLL_OPS, parsed (and checked) at init
  std::function<void(int, const std::string&)> peerFailedHook_;
  bool collectivesOnly_ = false;
  CpuProfile profile_;
  uint64_t ringColls_ = 0;  // owner thread only
  uint64_t hierColls_ = 0;
  WindowTable windows_{this};
  // Declared last of the engines: destroyed first, so no callback of its
  // monitor thread can reach an engine being torn down.
  std::unique_ptr<LivenessRing> liveness_;
  bool finalized_ = false;
  uint64_t splitCount_ = 0;

  // Written by whoever finishes init (release); read by any thread (acquire).
  std::atomic<Status> asyncError_{ncclInProgress};
  // Set (release) by abort() from any thread; read (acquire) by every wait.
  std::atomic<bool> abortFlag_{false};
  // Set (release) by revoke(); read (acquire) by the API before new work.
  std::atomic<bool> revoked_{false};

  mutable std::mutex failureMu_;
  std::string failure_;  // guarded by failureMu_

  std::mutex initMu_;
  std::condition_variable initCv_;
  bool initRunning_ = true;  // guarded by initMu_; cleared when init ends
  std::thread initThread_;
};

}  // namespace ferry

// The opaque handle users hold. The magic catches use of a destroyed or
// foreign pointer in the common cases (it is cleared on destroy).
struct ncclComm {
  static constexpr uint64_t kMagic = 0x46455252594d4d43ULL;  // "FERRYMMC"
  uint64_t magic = kMagic;
  std::unique_ptr<ferry::Communicator> impl;
};
