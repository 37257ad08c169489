// The collective engine of one communicator (DESIGN.md layer 7): turns a
// group's collective tasks into ring-kernel launches on the user's streams.
//
// Plans depend only on the collective tasks themselves (kind, count, type,
// op, root) and the communicator's fixed ring: never on which point-to-point
// tasks share the group, so every rank builds the same launches whatever p2p
// traffic rides along (the VCCL failure mode cannot happen). SM-free p2p never
// enters a kernel.
//
// Ordering: the ring's FIFOs and step counters are shared by every
// collective of the communicator, so its kernels must run one at a time and
// in call order (the same on every rank, as NCCL requires). Launches on one
// stream are ordered by the stream; when a launch goes to a different stream
// than the previous one, that stream first waits for the previous launch
// (an event). Inside CUDA graph capture the user's capture order applies.
//
// Threading: launch() and the op-table calls come from the thread that owns
// the communicator (NCCL's rule); abortKernels() from any thread.
#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "coll/peer_connect.h"
#include "coll/ring_setup.h"
#include "enqueue/p2p_engine.h"
#include "algo/p2p_kernel.h"
#include "coll/p2p_inplace.h"
#include "runtime/runtime.h"

namespace ferry {

// Kernel p2p: a group's tasks by (peer, direction) pair, in call order, and
// the blocks (lanes) each pair takes.
struct P2pPlan {
  struct Pair {
    int key = 0;         // peer * 2 + isSend
    uint32_t lanes = 0;  // blocks: the most parts of any of its messages
    std::vector<const P2pTask*> tasks;
  };
  std::vector<Pair> pairs;
  int ntasks = 0;
  int nblocks = 0;
};

struct CollTask {
  int coll = 0;  // algo::CollKind
  const void* sendbuff = nullptr;
  void* recvbuff = nullptr;
  uint64_t count = 0;  // elements; per rank for all-gather / reduce-scatter
  int dataType = 0;
  int op = 0;  // ncclRedOp_t (built-in or from createPreMulSum)
  int root = 0;
  void* stream = nullptr;
  // ncclAvg: divide by this many ranks instead of this communicator's (the
  // hierarchical all-reduce's step across hosts divides by its parent's).
  uint32_t avgDivisor = 0;
};

// NCCL_PROTO: which collective protocols may be used. A comma list of LL,
// LL128, Simple (case-insensitive), or ^ and a list to exclude; empty allows
// all. Ferry has no LL128: it is accepted and ignored. Fails (the caller
// WARNs and keeps the defaults) on an unknown name or when neither LL nor
// Simple is left.
[[nodiscard]] Status parseProtocols(const std::string& text, bool* ll, bool* simple);

// Channels of one Simple-protocol collective of `bytes` (the whole size, as
// the protocol choice counts it) on a ring of `nranks`, at most `available`:
// one per 64 KiB on one host, or with netHopBytes 0. On a ring that crosses
// hosts each channel's hop is a network message per step (bytes / (nranks x
// channels)): as many channels as keep it >= netHopBytes
// (FERRY_COLL_NET_HOP_BYTES), at most 4 below 64 MiB (coll_engine.cc says
// why). A pure function of uniform inputs, so every rank picks the same.
int simpleCollChannels(uint64_t bytes, int nranks, uint64_t netHopBytes, int available);

class CollEngine {
 public:
  ~CollEngine();
  // Collective over the communicator: sets up the ring (see ring_setup.h).
  // `peerProxies`: every rank's proxy RPC name (P2pEngine::peerProxyNames),
  // where kernel p2p asks for its connections on first use.
  [[nodiscard]] static Status create(const RingSetupContext& ctx,
                                     const std::vector<std::string>& peerProxies,
                                     std::unique_ptr<CollEngine>* out);

  // Whether collectives can run (false when the communicator spans hosts
  // without a network engine); the API checks it before a task joins a group.
  bool available() const { return ringPossible_; }
  // Whether kernel point-to-point reaches every rank (on one host always;
  // across hosts with NCCL_PASS_SM=0 or FERRY_P2P_KERNEL_ACROSS_HOSTS=1).
  bool kernelP2pPossible() const { return peers_.allPeersReachable; }
  // Memory this rank holds for collectives and kernel p2p (its regions:
  // device memory, or host shared memory with SHM), and the collective
  // channels' share of it (0 until the first collective, by default).
  uint64_t regionBytes() const {
    return peers_.regionBytes + (connector_ ? connector_->bytesHeld() : 0) + inPlace_.bytesHeld() +
           ringBytes(&RingResources::regionBytes);
  }
  uint64_t collectiveFifoBytes() const { return ringBytes(&RingResources::collectiveFifoBytes); }
  bool regionInHostMemory() const { return peers_.shm || rings_[0].shm || rings_[1].shm; }

  // Whether launching these tasks first sets up a protocol's ring (a
  // collective step on the bootstrap: groupEnd runs several communicators'
  // setups concurrently).
  bool needsConnect(const std::vector<CollTask>& tasks) const;
  // Sets up the rings these tasks' protocols use, each once (every rank at
  // the same collective: the protocol is a function of the size); a failure
  // sticks to its protocol.
  [[nodiscard]] Status connectFor(const std::vector<CollTask>& tasks);

  // Validates what only the engine knows (the op table) before a task is
  // accepted into a group.
  [[nodiscard]] Status checkOp(int op, int dataType, const char* fn) const;
  // Launches one group's collectives of this communicator, in call order.
  [[nodiscard]] Status launch(const std::vector<CollTask>& tasks);
  // Kernel point-to-point: one group's sends and receives of this
  // communicator as one kernel (algo/p2p_kernel.h) on the first task's
  // stream; the group's other streams join it before and after. `smFree`:
  // the group's SM-free part, launched after this; a send there whose bytes
  // a receive here overwrites is redirected to a copy made before the
  // kernel (InPlaceStager::stageAcross), and afterSmFree() must follow its
  // launch.
  [[nodiscard]] Status launchP2p(const std::vector<P2pTask>& tasks,
                                 std::vector<P2pTask>* smFree = nullptr);
  [[nodiscard]] Status afterSmFree() { return inPlace_.readersDone(runtime_); }
  bool needsAfterSmFree() const { return inPlace_.readersPending(); }

  // ncclRedOpCreatePreMulSum / ncclRedOpDestroy. `residence`: 0 = the scalar
  // lives in device memory and is read when each collective runs, 1 = host
  // value read now.
  [[nodiscard]] Status createPreMulSum(const void* scalar, int dataType, int residence, int* op);
  [[nodiscard]] Status destroyOp(int op);
  // A live user-created op's scalar and residence as createPreMulSum took
  // them (to make the same op on another engine); false for a built-in op.
  bool userOpScalar(int op, const void** scalar, int* residence) const;

  // Makes running kernels of this communicator stop at their next wait.
  void abortKernels();
  // Who hears when the ring's network hops fail (the communicator: it fails
  // with the peer named). Set once after create; called on the proxy thread.
  void setFailureHandler(std::function<void(int peer, const std::string& why)> handler);
  // Waits (bounded) until every launch has finished; after abortKernels()
  // that is prompt. Idempotent.
  [[nodiscard]] Status shutdown(int64_t timeoutMs);

 private:
  struct UserOp {
    bool live = false;
    int dataType = 0;
    bool onDevice = false;
    uint64_t bits = 0;
    const void* ptr = nullptr;
  };
  CollEngine() = default;
  // The protocol (algo::kProtoLL / kProtoSimple) and total bytes of a task.
  int protoOf(const CollTask& t, uint64_t* bytes) const;
  // `field` summed over the rings set up so far (owner thread, as NCCL's
  // rule for every call on a communicator).
  uint64_t ringBytes(uint64_t RingResources::*field) const {
    uint64_t sum = 0;
    for (int p = 0; p < 2; ++p) {
      if (connectDone_[p] && connectStatus_[p] == ncclSuccess) sum += rings_[p].*field;
    }
    return sum;
  }
  // Sets up protocol `proto`'s ring once.
  [[nodiscard]] Status connect(int proto);
  // *threads: the block size for this launch (0: the kernel's default).
  [[nodiscard]] Status fillArgs(const CollTask& t, algo::CollArgs* a, int* kernelType,
                                unsigned* threads) const;
  [[nodiscard]] Status launchOne(const CollTask& t);
  [[nodiscard]] Status orderAfterPrevious(rt::Stream& stream, void* handle, bool* capturing);
  [[nodiscard]] Status recordLaunch(rt::Stream& stream, void* handle);
  template <class Args>
  void fillP2pArgs(const P2pPlan& plan, Args* a) const;
  // layout: rt::kP2pSmallArgs for algo::P2pArgsSmall, 0 for algo::P2pArgs.
  // `staged`: copies into in-place scratch, made on the launch stream
  // after the joins and before the kernel.
  [[nodiscard]] Status launchP2pArgs(const std::vector<P2pTask>& tasks, void* args, size_t argBytes,
                                     int nblocks, int layout,
                                     const std::vector<StagedSend>& staged);
  // One staged copy, ordered before the kernel on `main` (handle `mainHandle`).
  [[nodiscard]] Status copyStaged(const StagedSend& c, void* mainHandle, rt::Stream& main);

  void hopFailed(int peer, const std::string& why);
  // Hands kernel p2p's lanes across hosts to the proxy (create() says when).
  void startPeerHops();
  bool readTuning(const RingSetupContext& ctx);
  [[nodiscard]] Status readNetTuning(const RingSetupContext& ctx);
  [[nodiscard]] Status waitKernels(int64_t timeoutMs);

  rt::Runtime* runtime_ = nullptr;
  RingSetupContext ctx_;       // the communicator's: lives as long as this engine
  Proxy* proxy_ = nullptr;     // set when the ring has hops across hosts
  bool peerHopsIdle_ = false;  // kernel p2p's lanes across hosts not stepped yet
  std::mutex failMu_;          // guards onFailure_
  std::function<void(int, const std::string&)> onFailure_;
  int rank_ = -1;
  // The collective channels, by protocol (algo::kProtoLL, kProtoSimple),
  // each made by connect().
  RingResources rings_[2];
  RingResources peers_;  // kernel p2p's connections (at init, or the shape only)
  // Kernel p2p's connections on first use per peer (null: made at init in
  // peers_'s region). Declared after peers_: destroyed first.
  std::unique_ptr<PeerConnector> connector_;
  InPlaceStager inPlace_;  // kernel p2p sends that a receive of the launch overwrites
  bool ringPossible_ = true;
  bool connectDone_[2] = {false, false};
  Status connectStatus_[2] = {ncclSuccess, ncclSuccess};
  std::unique_ptr<rt::HostMemory> abortWord_;  // uint32, device-mapped
  int64_t timeoutNs_ = 0;                      // FERRY_COLL_TIMEOUT
  int64_t p2pTimeoutNs_ = 0;                   // FERRY_P2P_TIMEOUT (kernel p2p)
  uint64_t p2pLlMaxBytes_ = 0;                 // kernel p2p LL limit (0: none)
  uint64_t llMaxBytes_ = 0;                    // FERRY_COLL_LL_MAX_BYTES
  uint64_t llChannelBytes_ = 1;                // FERRY_COLL_LL_CHANNEL_BYTES (>= 1)
  uint64_t netHopBytes_ = 0;                   // FERRY_COLL_NET_HOP_BYTES; 0: the one-host rule
  std::vector<UserOp> ops_;
  // The previous launch: its stream handle and an event recorded after it
  // (null until the first launch outside graph capture).
  void* lastStream_ = nullptr;
  std::unique_ptr<rt::Event> lastEvent_;
  bool shutDown_ = false;
  std::atomic<bool> aborted_{false};  // abortKernels ran (no flush of the hops then)
};

}  // namespace ferry
