#include "coll/coll_engine.h"

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cstring>
#include <thread>

#include "coll/host_kernel.h"
#include "net/net_registry.h"
#include "transport/net_setup.h"
#include "core/log.h"
#include "runtime/device_scope.h"

namespace ferry {
namespace {

constexpr int kNumBuiltinOps = 5;  // ncclSum .. ncclAvg
constexpr int kMaxUserOps = 1 << 16;
constexpr uint64_t kLlMaxThreads = 256;  // <= device/kernels.h kCollKernelThreads

const char* collName(int coll) {
  static const char* const names[] = {"AllReduce", "AllGather", "ReduceScatter", "Broadcast",
                                      "Reduce"};
  return coll >= 0 && coll < algo::kNumCollKinds ? names[coll] : "?";
}

// Channels for one launch: enough that each gets >= perChannel bytes, at
// most all. A pure function of the task and the (uniform) knobs, so every
// rank picks the same number.
int channelsFor(uint64_t bytes, uint64_t perChannel, int available) {
  uint64_t want = algo::ceilDiv(bytes, perChannel);
  if (want < 1) want = 1;
  return want < static_cast<uint64_t>(available) ? static_cast<int>(want) : available;
}

// Across hosts (2x H200 as two emulated hosts, sockets on loopback, session
// 40, bench/RESULTS.md): with 8 channels a 1 MiB all-reduce took 550-620 us
// and 4 channels 280-330 (each hop 64 KiB: messages that small ride the
// control socket, moved by the one proxy thread); at 4-16 MiB 4 channels
// beat 8 by 5-15% and 2 lost by 20-40%; from 64 MiB 8 were as good or up
// to 5% better. So: each channel's hop message at least
// FERRY_COLL_NET_HOP_BYTES (128K), at most kNetMidChannels channels below
// kNetWideBytes.
constexpr int kNetMidChannels = 4;
constexpr uint64_t kNetWideBytes = uint64_t{64} << 20;

// The protocol name at [b, e), lower-cased.
std::string lowered(const std::string& text, size_t b, size_t e) {
  std::string s = text.substr(b, e - b);
  for (char& c : s) c = static_cast<char>(tolower(static_cast<unsigned char>(c)));
  return s;
}

// Kernel p2p: the group's tasks by (peer, direction) in order of first
// appearance, in call order inside each, and how many lanes (blocks) each
// pair needs (its largest message's part count). Refuses groups the large
// argument table cannot hold.
Status planP2p(const std::vector<P2pTask>& tasks, const RingResources& ring, uint64_t llMaxBytes,
               P2pPlan* plan) {
  for (const P2pTask& t : tasks) {
    if (t.bytes == 0) continue;  // moves nothing on either side
    int key = t.peer * 2 + (t.isSend ? 1 : 0);
    auto it = std::find_if(plan->pairs.begin(), plan->pairs.end(),
                           [key](const P2pPlan::Pair& p) { return p.key == key; });
    if (it == plan->pairs.end()) {
      plan->pairs.push_back(P2pPlan::Pair{key, 0, {}});
      it = plan->pairs.end() - 1;
    }
    it->tasks.push_back(&t);
    it->lanes = std::max(it->lanes, algo::p2pParts(t.bytes, ring.p2pLanes, ring.p2pLaneBytes,
                                                   llMaxBytes, ring.p2pLlLaneBytes));
    ++plan->ntasks;
  }
  for (const P2pPlan::Pair& p : plan->pairs) plan->nblocks += static_cast<int>(p.lanes);
  if (plan->nblocks > algo::kMaxKernelP2pBlocks) {
    FERRY_FAIL(ncclInvalidUsage,
               "kernel point-to-point takes at most %d blocks per group (this group has %zu "
               "(peer, direction) pairs in %d blocks; FERRY_P2P_KERNEL_LANES lowers it); use "
               "NCCL_PASS_SM=1",
               algo::kMaxKernelP2pBlocks, plan->pairs.size(), plan->nblocks);
  }
  if (plan->ntasks > algo::kMaxKernelP2pTasks) {
    FERRY_FAIL(ncclInvalidUsage,
               "kernel point-to-point takes at most %d non-empty sends/receives per group and "
               "communicator (this group has %d); split the group or use NCCL_PASS_SM=1",
               algo::kMaxKernelP2pTasks, plan->ntasks);
  }
  return ncclSuccess;
}

}  // namespace

int simpleCollChannels(uint64_t bytes, int nranks, uint64_t netHopBytes, int available) {
  if (netHopBytes == 0) return channelsFor(bytes, 64 << 10, available);
  const uint64_t ranks = static_cast<uint64_t>(nranks > 1 ? nranks : 1);
  const int cap = bytes < kNetWideBytes ? std::min(available, kNetMidChannels) : available;
  const uint64_t want = bytes / (ranks * netHopBytes);
  if (want < 1) return 1;
  return want < static_cast<uint64_t>(cap) ? static_cast<int>(want) : std::max(cap, 1);
}

Status parseProtocols(const std::string& text, bool* ll, bool* simple) {
  *ll = true;
  *simple = true;
  if (text.empty()) return ncclSuccess;
  const bool exclude = text[0] == '^';
  bool named[2] = {false, false};  // LL, Simple
  for (size_t b = exclude ? 1 : 0; b <= text.size();) {
    size_t e = text.find(',', b);
    if (e == std::string::npos) e = text.size();
    const std::string name = lowered(text, b, e);
    if (name.empty()) {
      // "LL," or ",,": nothing named here
    } else if (name == "ll") {
      named[0] = true;
    } else if (name == "simple") {
      named[1] = true;
    } else if (name != "ll128") {
      FERRY_FAIL(ncclInvalidArgument, "NCCL_PROTO=%s: unknown protocol '%s' (LL, LL128, Simple)",
                 text.c_str(), name.c_str());
    }
    b = e + 1;
  }
  *ll = exclude ? !named[0] : named[0];
  *simple = exclude ? !named[1] : named[1];
  if (!*ll && !*simple) {
    FERRY_FAIL(ncclInvalidArgument, "NCCL_PROTO=%s leaves no protocol Ferry has (LL, Simple)",
               text.c_str());
  }
  return ncclSuccess;
}

CollEngine::~CollEngine() {
  (void)shutdown(10000);
  // The hops point into rings_: the proxy lets go of them before it goes.
  if (proxy_ != nullptr) proxy_->removeRingHops(this);
}

void CollEngine::setFailureHandler(std::function<void(int, const std::string&)> handler) {
  std::lock_guard<std::mutex> lock(failMu_);
  onFailure_ = std::move(handler);
}

void CollEngine::startPeerHops() {
  peerHopsIdle_ = false;
  std::vector<RingHop*> hops;
  for (auto& h : peers_.peerNet->hops) hops.push_back(h.get());
  proxy_->addRingHops(this, std::move(hops),
                      [this](int peer, const std::string& why) { hopFailed(peer, why); });
}

// A ring hop across hosts failed (proxy thread): the ring is broken for
// good. Kernels stop at their next wait; the communicator learns why.
void CollEngine::hopFailed(int peer, const std::string& why) {
  abortKernels();
  std::lock_guard<std::mutex> lock(failMu_);
  if (onFailure_) onFailure_(peer, why);
}

// Timeouts and protocol limits from the knobs; true when NCCL_PROTO
// excludes LL.
bool CollEngine::readTuning(const RingSetupContext& ctx) {
  int64_t t = ctx.params->getInt(ParamId::CollTimeout);
  timeoutNs_ = t > 0 ? t * 1000000000LL : 0;
  // Kernel p2p waits for a peer like the SM-free path does: FERRY_P2P_TIMEOUT.
  int64_t p = ctx.params->getInt(ParamId::P2pTimeout);
  p2pTimeoutNs_ = p > 0 ? p * 1000000000LL : 0;
  const int64_t llMax = ctx.params->getInt(ParamId::CollLlMaxBytes);
  const int64_t llChannel = ctx.params->getInt(ParamId::CollLlChannelBytes);
  llMaxBytes_ = llMax > 0 ? static_cast<uint64_t>(llMax) : 0;
  bool ll = true;
  bool simple = true;
  const std::string& proto = ctx.params->getString(ParamId::Proto);
  const bool parsed = parseProtocols(proto, &ll, &simple) == ncclSuccess;
  if (!parsed) {
    FERRY_WARN("NCCL_PROTO=%s ignored: collectives choose LL or Simple by size", proto.c_str());
  } else if (!ll) {
    llMaxBytes_ = 0;
  } else if (!simple) {
    llMaxBytes_ = UINT64_MAX;
  }
  llChannelBytes_ = llChannel > 0 ? static_cast<uint64_t>(llChannel) : 1;
  return parsed && !ll;
}

// A communicator spanning hosts: its network engine, LL's limit and the
// channel rule there.
Status CollEngine::readNetTuning(const RingSetupContext& ctx) {
  // A ring across hosts needs a network engine (every rank of such a
  // communicator has peers on other hosts, so every rank asks).
  net::NetEngine* engine = nullptr;
  FERRY_CHECK(netEngineFor(ctx, &engine));
  ringPossible_ = engine != nullptr;
  // The hop rule was measured on the built-in sockets, whose small
  // messages go through the proxy thread; a plugin (IB, EFA: often one
  // NIC per channel) keeps one channel per 64 KiB. Every rank of a
  // working communicator runs the same engine (they could not connect
  // otherwise), so the choice agrees.
  const int64_t hop = ctx.params->getInt(ParamId::CollNetHopBytes);
  const bool inRange = hop >= 0 && hop <= (int64_t{1} << 30);
  if (!inRange) {
    FERRY_WARN("FERRY_COLL_NET_HOP_BYTES=%ld out of range [0, 1G]; using 128K",
               static_cast<long>(hop));
  }
  if (engine != nullptr && processNetEngineIsBuiltIn()) {
    netHopBytes_ = inRange ? static_cast<uint64_t>(hop) : uint64_t{128} << 10;
  }
  // LL crosses hosts (coll/ring_net.h) but loses there to Simple at every
  // size measured (2x H200 as two emulated hosts, session 30: all-reduce
  // 64 KiB 264-272 vs 68-76 us, 1 MiB 1478-1504 vs 490-627): the proxy
  // round trip per step is paid either way, and LL doubles the bytes and
  // the messages. Unless NCCL_PROTO leaves only LL, it is used across
  // hosts up to FERRY_COLL_NET_LL_MAX_BYTES (default 0: never).
  if (llMaxBytes_ != UINT64_MAX) {
    const int64_t netLl = ctx.params->getInt(ParamId::CollNetLlMaxBytes);
    const uint64_t cap = netLl > 0 ? static_cast<uint64_t>(netLl) : 0;
    if (llMaxBytes_ > cap) {
      llMaxBytes_ = cap;
      FERRY_INFO(kLogInit | kLogColl,
                 "collectives: ring across hosts: LL up to %llu bytes, Simple above "
                 "(FERRY_COLL_NET_LL_MAX_BYTES)",
                 static_cast<unsigned long long>(cap));
    }
  }
  return ncclSuccess;
}

Status CollEngine::create(const RingSetupContext& ctx, const std::vector<std::string>& peerProxies,
                          std::unique_ptr<CollEngine>* out) {
  std::unique_ptr<CollEngine> e(new CollEngine());
  e->runtime_ = ctx.runtime;
  e->rank_ = ctx.topology->myRank;
  const bool llExcluded = e->readTuning(ctx);
  FERRY_CHECK(ctx.runtime->allocHost(sizeof(uint64_t), &e->abortWord_));
  memset(e->abortWord_->ptr(), 0, sizeof(uint64_t));
  e->ctx_ = ctx;
  // One process driving several ranks (ncclCommInitAll, JAX, nccl-tests
  // -g) may issue a collective on each of them one after another outside a
  // group: a setup at first use would wait on the same thread's next call.
  // Their inits run together, so the ring is made there.
  const auto& links = ctx.topology->links;
  const bool sameProcessPeers = std::count(links.begin(), links.end(), PeerLink::SameProcess) > 0;
  const bool runtimeConnect = ctx.params->getInt(ParamId::RuntimeConnect) != 0;
  // Kernel p2p connects per peer on first use where both sides' proxies can
  // answer for them: one host, no rank of this process (those map each
  // other's memory at init), a communicator that carries p2p at all.
  // On CUDA, not in host shared memory (registering it page-locks memory,
  // which CUDA may synchronize with running kernels).
  bool perPeer =
      runtimeConnect && !sameProcessPeers && ctx.topology->nHosts <= 1 && !ctx.collectivesOnly;
  if (perPeer) {
    FERRY_CHECK(describePeers(ctx, &e->peers_));
    perPeer = !e->peers_.shm || ctx.runtime->kind() != rt::RuntimeKind::Cuda;
    if (!perPeer) e->peers_ = RingResources();
  }
  if (perPeer) {
    FERRY_CHECK(PeerConnector::create(ctx, peerProxies, &e->peers_, &e->connector_));
  } else {
    FERRY_CHECK(setupRing(ctx, RingPart::Peers, &e->peers_));
  }
  if (e->peers_.peerNet && !e->peers_.peerNet->hops.empty()) {
    // Kernel p2p's lanes across hosts: persistent hops, like the ring's.
    // Stepped from now on where every message takes them (NCCL_PASS_SM=0);
    // else they carry only captured send/recv and are stepped from the
    // first kernel p2p launch on: until then their posted receives and
    // proxy passes would cost the SM-free traffic of a communicator that
    // never captures (session 47: batch 256 MiB 61-71 vs 47-64 ms across
    // two emulated hosts with them stepped from init).
    e->proxy_ = ctx.proxy;
    e->peerHopsIdle_ = true;
    if (ctx.params->getInt(ParamId::PassSm) == 0) e->startPeerHops();
  }
  if (ctx.topology->nHosts > 1) FERRY_CHECK(e->readNetTuning(ctx));
  if (!runtimeConnect || sameProcessPeers) {
    if (sameProcessPeers) {
      FERRY_INFO(kLogInit | kLogColl, "collectives: rings made at init (ranks in one process)");
    }
    // Each protocol some collective may use (NCCL_PROTO can rule one out).
    if (e->llMaxBytes_ > 0) FERRY_CHECK(e->connect(algo::kProtoLL));
    if (e->llMaxBytes_ != UINT64_MAX) FERRY_CHECK(e->connect(algo::kProtoSimple));
  } else {
    FERRY_INFO(kLogInit | kLogColl,
               "collectives: each protocol's ring is made by the first collective using it "
               "(NCCL_RUNTIME_CONNECT=0 makes them at init)");
  }
  // Kernel p2p's LL limit: FERRY_P2P_LL_MAX_BYTES, else NCCL's
  // NCCL_P2P_LL_THRESHOLD; none when NCCL_PROTO excludes LL (a malformed
  // value was ignored above). Every rank reads the same settings.
  const bool ferryLl =
      ctx.params->isSet(ParamId::P2pLlMaxBytes) || !ctx.params->isSet(ParamId::P2pLlThreshold);
  const int64_t p2pLl =
      ctx.params->getInt(ferryLl ? ParamId::P2pLlMaxBytes : ParamId::P2pLlThreshold);
  // Kernel p2p's lanes across hosts carry the FIFO protocol only (the hops
  // of the ring's LL follow a tail its kernel posts; the p2p kernel's LL
  // posts none).
  const bool hosts = ctx.topology->nHosts > 1;
  e->p2pLlMaxBytes_ = p2pLl > 0 && !llExcluded && !hosts ? static_cast<uint64_t>(p2pLl) : 0;
  FERRY_INFO(kLogInit | kLogP2p, "kernel p2p: LL up to %llu bytes%s",
             static_cast<unsigned long long>(e->p2pLlMaxBytes_),
             llExcluded ? " (NCCL_PROTO excludes LL)" : "");
  *out = std::move(e);
  return ncclSuccess;
}

Status CollEngine::checkOp(int op, int dataType, const char* fn) const {
  if (op >= 0 && op < kNumBuiltinOps) return ncclSuccess;
  size_t i = static_cast<size_t>(op) - kNumBuiltinOps;
  if (op < 0 || i >= ops_.size() || !ops_[i].live) {
    FERRY_FAIL(ncclInvalidArgument, "%s: invalid reduction op %d", fn, op);
  }
  if (ops_[i].dataType != dataType) {
    FERRY_FAIL(ncclInvalidArgument, "%s: op %d was created for datatype %d, not %d", fn, op,
               ops_[i].dataType, dataType);
  }
  return ncclSuccess;
}

Status CollEngine::createPreMulSum(const void* scalar, int dataType, int residence, int* op) {
  size_t bytes = algo::typeBytes(dataType);
  if (scalar == nullptr || op == nullptr || bytes == 0 || (residence != 0 && residence != 1)) {
    FERRY_FAIL(ncclInvalidArgument,
               "ncclRedOpCreatePreMulSum: bad arguments (scalar %p, datatype %d, residence %d)",
               scalar, dataType, residence);
  }
  UserOp u;
  u.live = true;
  u.dataType = dataType;
  u.onDevice = residence == 0;
  if (u.onDevice) {
    u.ptr = scalar;
  } else {
    memcpy(&u.bits, scalar, bytes);
  }
  size_t slot = 0;
  while (slot < ops_.size() && ops_[slot].live) ++slot;
  if (slot == ops_.size()) {
    if (ops_.size() >= kMaxUserOps) {
      FERRY_FAIL(ncclInvalidUsage, "ncclRedOpCreatePreMulSum: %d ops are live; destroy some",
                 kMaxUserOps);
    }
    ops_.push_back(u);
  } else {
    ops_[slot] = u;
  }
  *op = kNumBuiltinOps + static_cast<int>(slot);
  return ncclSuccess;
}

Status CollEngine::destroyOp(int op) {
  size_t i = static_cast<size_t>(op) - kNumBuiltinOps;
  if (op < kNumBuiltinOps || i >= ops_.size() || !ops_[i].live) {
    FERRY_FAIL(ncclInvalidArgument, "ncclRedOpDestroy: op %d is not a live user-created op", op);
  }
  // A launch already enqueued copied what it needs (bits, or the pointer).
  ops_[i] = UserOp{};
  return ncclSuccess;
}

bool CollEngine::userOpScalar(int op, const void** scalar, int* residence) const {
  const size_t i = static_cast<size_t>(op) - kNumBuiltinOps;
  if (op < kNumBuiltinOps || i >= ops_.size() || !ops_[i].live) return false;
  const UserOp& u = ops_[i];
  *residence = u.onDevice ? 0 : 1;
  *scalar = u.onDevice ? u.ptr : static_cast<const void*>(&u.bits);
  return true;
}

Status CollEngine::fillArgs(const CollTask& t, algo::CollArgs* a, int* kernelType,
                            unsigned* threads) const {
  memset(a, 0, sizeof(*a));
  *threads = 0;
  const bool copy = t.coll == algo::kCollAllGather || t.coll == algo::kCollBroadcast;
  const uint64_t elt = algo::typeBytes(t.dataType);
  // Protocol and channels by the collective's whole size (every rank's data
  // for the per-rank layouts), the same on every rank.
  uint64_t bytes = 0;
  a->proto = protoOf(t, &bytes);
  const RingResources& ring = rings_[a->proto];
  a->coll = t.coll;
  a->nranks = ring.nranks;
  a->pos = ring.pos;
  a->rootPos = 0;
  for (int p = 0; p < ring.nranks; ++p) {
    if (t.root == ring.ringOrder[p]) a->rootPos = p;
  }
  a->nslots = ring.nslots;
  a->count = copy ? t.count * elt : t.count;
  a->slotBytes = a->proto == algo::kProtoLL ? ring.llSlotBytes : ring.slotBytes;
  a->nchannels = a->proto == algo::kProtoLL
                     ? channelsFor(bytes, llChannelBytes_, ring.nchannels)
                     : simpleCollChannels(bytes, ring.nranks, netHopBytes_, ring.nchannels);
  if (a->proto == algo::kProtoLL) {
    // One thread per LL line of a step, in whole warps, at most 256: bigger
    // blocks cost ~1.3 us per launch on H200 (measured: a 4 KiB all-reduce
    // took 8.7 us with 512 threads, 7.4 us at 2 KiB with 256), so a tiny
    // collective's block is one warp and larger steps give threads several lines.
    const uint64_t nch = static_cast<uint64_t>(a->nchannels);
    const bool pipeline = t.coll == algo::kCollBroadcast || t.coll == algo::kCollReduce;
    const uint64_t step = std::min<uint64_t>(
        algo::ceilDiv(bytes, nch * (pipeline ? 1 : static_cast<uint64_t>(ring.nranks))),
        ring.llSlotBytes / 2);
    *threads = static_cast<unsigned>(
        std::min<uint64_t>(kLlMaxThreads, algo::roundUp(algo::ceilDiv(step, 8), 32)));
  }
  a->sendbuff = t.sendbuff;
  a->recvbuff = t.recvbuff;
  a->channels = ring.channelArray();
  a->ringRanks = ring.ringRankArray();
  a->abortFlag = static_cast<const volatile uint32_t*>(abortWord_->ptr());
  a->timeoutNs = static_cast<uint64_t>(timeoutNs_);
  *kernelType = copy ? algo::kInt8 : t.dataType;
  if (copy) {
    a->fn = algo::kFnCopy;
    return ncclSuccess;
  }
  switch (t.op) {
    case 0:
      a->fn = algo::kFnSum;
      break;
    case 1:
      a->fn = algo::kFnProd;
      break;
    case 2:
      a->fn = algo::kFnMax;
      break;
    case 3:
      a->fn = algo::kFnMin;
      break;
    case 4: {
      // The hierarchical all-reduce's step across hosts divides by every
      // rank of the parent, not by its own ranks.
      const uint32_t divisor =
          t.avgDivisor != 0 ? t.avgDivisor : static_cast<uint32_t>(ring.nranks);
      if (divisor > UINT16_MAX) {
        FERRY_FAIL(ncclInvalidUsage, "ncclAvg over %u ranks: Ferry divides by at most %u", divisor,
                   static_cast<unsigned>(UINT16_MAX));
      }
      a->fn = algo::kFnSum;
      a->avg = static_cast<uint16_t>(divisor);
      break;
    }
    default: {
      const UserOp& u = ops_[static_cast<size_t>(t.op) - kNumBuiltinOps];
      a->fn = algo::kFnPreMulSum;
      a->scalarBits = u.bits;
      a->scalarPtr = u.ptr;
    }
  }
  return ncclSuccess;
}

Status CollEngine::orderAfterPrevious(rt::Stream& stream, void* handle, bool* capturing) {
  FERRY_CHECK(runtime_->isCapturing(handle, capturing));
  if (*capturing) return ncclSuccess;  // the capture's own order applies
  if (lastEvent_ && lastStream_ != handle) FERRY_CHECK(stream.waitEvent(*lastEvent_));
  return ncclSuccess;
}

Status CollEngine::launchOne(const CollTask& t) {
  algo::CollArgs args;
  int kernelType = 0;
  unsigned threads = 0;
  FERRY_CHECK(fillArgs(t, &args, &kernelType, &threads));
  std::unique_ptr<rt::Stream> stream;
  FERRY_CHECK(runtime_->wrapUserStream(t.stream, &stream));
  bool capturing = false;
  FERRY_CHECK(orderAfterPrevious(*stream, t.stream, &capturing));
  rt::KernelLaunch k;
  int32_t type32 = kernelType;
  void* argv[2] = {&args, &type32};
  const size_t sizes[2] = {sizeof(args), sizeof(type32)};
  k.args = argv;
  k.grid[0] = static_cast<unsigned>(args.nchannels);
  if (runtime_->kind() == rt::RuntimeKind::Host) {
    k.func = reinterpret_cast<const void*>(&hostCollKernel);
    k.numArgs = 2;
    k.argSizes = sizes;
    k.hostReturnsStatus = true;
  } else {
    FERRY_CHECK(runtime_->collKernel(kernelType, args.fn, args.proto, &k.func, &k.block[0]));
    if (threads != 0 && threads < k.block[0]) k.block[0] = threads;
    k.numArgs = 1;
  }
  FERRY_INFO(kLogColl, "%s: count %llu type %d op %d root %d, %s, %d channels, stream %p",
             collName(t.coll), static_cast<unsigned long long>(t.count), t.dataType, t.op, t.root,
             args.proto == algo::kProtoLL ? "LL" : "Simple", args.nchannels, t.stream);
  FERRY_CHECK(runtime_->launch(k, *stream));
  return capturing ? ncclSuccess : recordLaunch(*stream, t.stream);
}

Status CollEngine::recordLaunch(rt::Stream& stream, void* handle) {
  if (!lastEvent_) FERRY_CHECK(runtime_->createEvent(&lastEvent_));
  FERRY_CHECK(lastEvent_->record(stream));
  lastStream_ = handle;
  return ncclSuccess;
}

template <class Args>
void CollEngine::fillP2pArgs(const P2pPlan& plan, Args* a) const {
  memset(a, 0, sizeof(*a));
  int i = 0, b = 0;
  for (const P2pPlan::Pair& p : plan.pairs) {
    const int begin = i;
    for (const P2pTask* t : p.tasks) {
      a->tasks[i++] = algo::P2pTaskArg{t->buffer, t->bytes, t->peer, t->isSend ? 1 : 0};
    }
    for (uint32_t lane = 0; lane < p.lanes; ++lane) {
      a->blocks[b++] = algo::P2pBlockArg{static_cast<uint16_t>(begin), static_cast<uint16_t>(i),
                                         static_cast<uint16_t>(lane), 0};
    }
  }
  a->nblocks = b;
  a->pos = peers_.pos;
  a->nslots = peers_.p2pLaneSlots;
  a->lanes = peers_.p2pLanes;
  a->slotBytes = peers_.p2pLaneSlotBytes;
  a->laneBytes = peers_.p2pLaneBytes;
  a->llMaxBytes = p2pLlMaxBytes_;
  a->llSlotBytes = peers_.p2pLlSlotBytes;
  a->llSlots = peers_.p2pLlSlots;
  a->llLaneBytes = static_cast<uint32_t>(peers_.p2pLlLaneBytes);
  a->peerChannels = peers_.peerChannelArray();
  a->abortFlag = static_cast<const volatile uint32_t*>(abortWord_->ptr());
  a->timeoutNs = static_cast<uint64_t>(p2pTimeoutNs_);
}

Status CollEngine::launchP2p(const std::vector<P2pTask>& tasks, std::vector<P2pTask>* smFree) {
  if (shutDown_) FERRY_FAIL(ncclInvalidUsage, "send/recv on a communicator being destroyed");
  if (!peers_.allPeersReachable) {
    FERRY_FAIL(ncclInvalidUsage,
               "kernel point-to-point to ranks on other hosts needs NCCL_PASS_SM=0 or "
               "FERRY_P2P_KERNEL_ACROSS_HOSTS=1 at init (and a network engine)");
  }
  std::vector<P2pTask> redirected;
  std::vector<StagedSend> staged;
  FERRY_CHECK(inPlace_.stage(runtime_, tasks, &redirected, &staged));
  const std::vector<P2pTask>& use = redirected.empty() ? tasks : redirected;
  P2pPlan plan;
  FERRY_CHECK(planP2p(use, peers_, p2pLlMaxBytes_, &plan));
  if (plan.nblocks == 0) return ncclSuccess;
  if (peerHopsIdle_) startPeerHops();
  if (proxy_ != nullptr) proxy_->kick();  // lanes across hosts: as launch()'s ring hops
  if (connector_) {
    for (const P2pPlan::Pair& p : plan.pairs) FERRY_CHECK(connector_->ensure(p.key / 2));
  }
  // Last before the launch: the SM-free sends it redirects must get their copies.
  if (smFree != nullptr) FERRY_CHECK(inPlace_.stageAcross(runtime_, tasks, smFree, &staged));
  if (plan.nblocks <= algo::kSmallKernelP2pBlocks && plan.ntasks <= algo::kSmallKernelP2pTasks) {
    algo::P2pArgsSmall args;
    fillP2pArgs(plan, &args);
    return launchP2pArgs(use, &args, sizeof(args), args.nblocks, rt::kP2pSmallArgs, staged);
  }
  auto args = std::make_unique<algo::P2pArgs>();
  fillP2pArgs(plan, args.get());
  return launchP2pArgs(use, args.get(), sizeof(*args), args->nblocks, 0, staged);
}

Status CollEngine::launchP2pArgs(const std::vector<P2pTask>& tasks, void* args, size_t argBytes,
                                 int nblocks, int layout, const std::vector<StagedSend>& staged) {
  // The launch stream and the group's other streams (joined around it).
  std::vector<void*> handles;
  std::vector<std::unique_ptr<rt::Stream>> streams;
  for (const P2pTask& t : tasks) {
    if (std::find(handles.begin(), handles.end(), t.stream) != handles.end()) continue;
    handles.push_back(t.stream);
    streams.emplace_back();
    FERRY_CHECK(runtime_->wrapUserStream(t.stream, &streams.back()));
  }
  rt::Stream& main = *streams[0];
  std::vector<std::unique_ptr<rt::Event>> joins(streams.size());
  for (size_t i = 1; i < streams.size(); ++i) {
    FERRY_CHECK(runtime_->createEvent(&joins[i]));
    FERRY_CHECK(joins[i]->record(*streams[i]));
    FERRY_CHECK(main.waitEvent(*joins[i]));
  }
  bool capturing = false;
  FERRY_CHECK(orderAfterPrevious(main, handles[0], &capturing));
  // After every group stream's earlier work (the joins) and this engine's
  // previous launch (which may still read the reused scratch).
  for (const StagedSend& c : staged) FERRY_CHECK(copyStaged(c, handles[0], main));
  rt::KernelLaunch k;
  void* argv[1] = {args};
  const size_t sizes[1] = {argBytes};
  k.args = argv;
  k.numArgs = 1;
  k.grid[0] = static_cast<unsigned>(nblocks);
  if (runtime_->kind() == rt::RuntimeKind::Host) {
    k.func = layout == rt::kP2pSmallArgs ? reinterpret_cast<const void*>(&hostP2pKernelSmall)
                                         : reinterpret_cast<const void*>(&hostP2pKernel);
    k.argSizes = sizes;
    k.hostReturnsStatus = true;
  } else {
    FERRY_CHECK(runtime_->collKernel(0, rt::kP2pKernelFn, layout, &k.func, &k.block[0]));
  }
  FERRY_INFO(kLogP2p, "kernel p2p: %d blocks on stream %p (%zu-byte argument)", nblocks, handles[0],
             argBytes);
  FERRY_CHECK(runtime_->launch(k, main));
  if (streams.size() > 1) {
    std::unique_ptr<rt::Event> done;
    FERRY_CHECK(runtime_->createEvent(&done));
    FERRY_CHECK(done->record(main));
    for (size_t i = 1; i < streams.size(); ++i) FERRY_CHECK(streams[i]->waitEvent(*done));
  }
  return capturing ? ncclSuccess : recordLaunch(main, handles[0]);
}

Status CollEngine::copyStaged(const StagedSend& c, void* mainHandle, rt::Stream& main) {
  std::unique_ptr<rt::Stream> own;
  const bool onMain = c.stream == nullptr || c.stream == mainHandle;
  if (!onMain) FERRY_CHECK(runtime_->wrapUserStream(c.stream, &own));
  rt::Stream& s = onMain ? main : *own;
  // The scratch's earlier readers first (an earlier group's SM-free sends).
  if (c.waitFirst != nullptr) {
    for (const auto& e : *c.waitFirst) FERRY_CHECK(s.waitEvent(*e));
  }
  FERRY_CHECK(s.copyAsync(c.scratch, c.user, c.bytes));
  if (onMain) return ncclSuccess;
  // The kernel may overwrite the source once the copy has read it.
  std::unique_ptr<rt::Event> copied;
  FERRY_CHECK(runtime_->createEvent(&copied));
  FERRY_CHECK(copied->record(s));
  return main.waitEvent(*copied);
}

int CollEngine::protoOf(const CollTask& t, uint64_t* bytes) const {
  const bool perRank = t.coll == algo::kCollAllGather || t.coll == algo::kCollReduceScatter;
  *bytes = t.count * algo::typeBytes(t.dataType) *
           (perRank ? static_cast<uint64_t>(ctx_.topology->peers.size()) : 1);
  return *bytes <= llMaxBytes_ ? algo::kProtoLL : algo::kProtoSimple;
}

Status CollEngine::connect(int proto) {
  if (connectDone_[proto]) return connectStatus_[proto];
  connectDone_[proto] = true;
  const bool ll = proto == algo::kProtoLL;
  RingResources& ring = rings_[proto];
  auto start = std::chrono::steady_clock::now();
  {
    // The first collective may be inside the user's graph capture.
    rt::RelaxedCaptureScope relaxed(runtime_);
    connectStatus_[proto] = setupRing(ctx_, ll ? RingPart::Ll : RingPart::Simple, &ring);
  }
  if (connectStatus_[proto] != ncclSuccess) {
    FERRY_WARN(
        "rank %d: setting up the collective %s ring failed (%s); this communicator's "
        "%s collectives fail from now on",
        rank_, ll ? "LL" : "Simple", statusString(connectStatus_[proto]), ll ? "LL" : "Simple");
    return connectStatus_[proto];
  }
  if (ring.net && !ring.net->hops.empty()) {
    std::vector<RingHop*> hops;
    for (auto& h : ring.net->hops) hops.push_back(h.get());
    proxy_ = ctx_.proxy;
    proxy_->addRingHops(this, std::move(hops),
                        [this](int peer, const std::string& why) { hopFailed(peer, why); });
  }
  FERRY_INFO(
      kLogInit | kLogColl, "collectives: %s ring set up in %.1f ms (%.1f MiB)",
      ll ? "LL" : "Simple",
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count(),
      ring.regionBytes / 1048576.0);
  return ncclSuccess;
}

bool CollEngine::needsConnect(const std::vector<CollTask>& tasks) const {
  uint64_t bytes = 0;
  for (const CollTask& t : tasks) {
    if (ringPossible_ && !connectDone_[protoOf(t, &bytes)]) return true;
  }
  return false;
}

Status CollEngine::connectFor(const std::vector<CollTask>& tasks) {
  bool want[2] = {false, false};
  uint64_t bytes = 0;
  for (const CollTask& t : tasks) want[protoOf(t, &bytes)] = true;
  // LL first, then Simple: the same order on every rank (same tasks).
  if (want[algo::kProtoLL]) FERRY_CHECK(connect(algo::kProtoLL));
  if (want[algo::kProtoSimple]) FERRY_CHECK(connect(algo::kProtoSimple));
  return ncclSuccess;
}

Status CollEngine::launch(const std::vector<CollTask>& tasks) {
  if (shutDown_) FERRY_FAIL(ncclInvalidUsage, "collective on a communicator being destroyed");
  if (!ringPossible_) {
    FERRY_FAIL(ncclInvalidUsage, "rank %d: this communicator has no collective ring", rank_);
  }
  FERRY_CHECK(connectFor(tasks));
  // Ring hops across hosts: the proxy polls them without napping while
  // these kernels run (a nap would add its length to every hop).
  if (proxy_ != nullptr) proxy_->kick();
  for (const CollTask& t : tasks) FERRY_CHECK(launchOne(t));
  return ncclSuccess;
}

void CollEngine::abortKernels() {
  if (!abortWord_) return;
  aborted_.store(true, std::memory_order_relaxed);
  // Release-ordered enough: kernels poll this word (volatile, system scope)
  // and only stop early; no data is published with it.
  std::atomic_ref<uint32_t>(*static_cast<uint32_t*>(abortWord_->ptr()))
      .store(1, std::memory_order_release);
}

Status CollEngine::shutdown(int64_t timeoutMs) {
  if (shutDown_) return ncclSuccess;
  shutDown_ = true;
  Status s = waitKernels(timeoutMs);
  // A kernel is done once its last slots are in the mirror FIFO: the peer
  // on the other host has them only once the proxy sent them.
  if (s == ncclSuccess && proxy_ != nullptr && !aborted_ &&
      !proxy_->drainRingHops(this, std::min<int64_t>(timeoutMs, 60000))) {
    FERRY_WARN(
        "rank %d: the collective ring's last slots to another host were not delivered "
        "within %lld ms",
        rank_, static_cast<long long>(std::min<int64_t>(timeoutMs, 60000)));
  }
  return s;
}

Status CollEngine::waitKernels(int64_t timeoutMs) {
  if (!lastEvent_) return ncclSuccess;
  using Clock = std::chrono::steady_clock;
  // Two phases: let the kernels finish on their own, then abort them; a
  // kernel that outlives both is reported (its memory is freed regardless).
  for (int phase = 0; phase < 2; ++phase) {
    auto deadline = Clock::now() + std::chrono::milliseconds(phase == 0 ? timeoutMs : 10000);
    for (;;) {
      Status s = lastEvent_->query();
      if (s != ncclInProgress) return s;
      if (Clock::now() > deadline) break;
      std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
    if (phase == 0) {
      FERRY_WARN("collective kernels still running %lld ms into destroy; aborting them",
                 static_cast<long long>(timeoutMs));
      abortKernels();
    }
  }
  FERRY_FAIL(ncclInternalError, "collective kernels did not stop after abort");
}

}  // namespace ferry
