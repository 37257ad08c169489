#include "enqueue/p2p_engine.h"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <thread>

#include "core/clock.h"
#include "core/env.h"
#include "enqueue/p2p_engine_op.h"
#include "enqueue/rendezvous.h"
#include "runtime/device_scope.h"

namespace ferry {

bool overlaps(const P2pTask& a, const P2pTask& b) {
  auto x = reinterpret_cast<uintptr_t>(a.buffer);
  auto y = reinterpret_cast<uintptr_t>(b.buffer);
  return a.bytes > 0 && b.bytes > 0 && x < y + b.bytes && y < x + a.bytes;
}

bool overlapsOpposite(const P2pTask& t, const std::vector<P2pTask>& tasks) {
  for (const P2pTask& o : tasks) {
    if (o.isSend != t.isSend && overlaps(t, o)) return true;
  }
  return false;
}

// 4x H200 on NVSwitch, 64 MiB per peer, copy engines alone (bench/
// ce_alltoall.cu, session 27): every GPU pushing in call order (lowest peer
// first) moved 193 GB/s per GPU, as three GPUs at a time wrote into one
// peer's link; rotated, each round of copies is a permutation of the ranks:
// 362 GB/s (NCCL's alltoall 302). Stable: a connection's messages keep their
// order.
std::vector<size_t> rotatedOrder(const std::vector<P2pTask>& tasks, int rank, int nranks) {
  auto distance = [&](size_t i) {
    return nranks > 0 ? ((tasks[i].peer - rank) % nranks + nranks) % nranks : 0;
  };
  std::vector<size_t> order(tasks.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return distance(a) < distance(b); });
  return order;
}

P2pEngine::~P2pEngine() {
  if (!shutDown_) (void)shutdown(true, 10000);
}

Status P2pEngine::create(const P2pSetupContext& ctx, std::atomic<Status>* asyncError,
                         std::shared_ptr<Proxy> proxy, std::unique_ptr<P2pEngine>* out) {
  std::unique_ptr<P2pEngine> e(new P2pEngine());
  e->runtime_ = ctx.runtime;
  e->proxy_ = std::move(proxy);
  e->asyncError_ = asyncError;
  e->abortFlag_ = ctx.abortFlag;
  e->myRank_ = ctx.topology->myRank;
  e->device_ = ctx.device;
  e->commKey_ = ctx.commKey;
  e->rpcTimeoutMs_ = ctx.timeoutMs;
  e->zeroCopy_ = ctx.params->getInt(ParamId::P2pZeroCopy) != 0;
  int64_t selfCopy = ctx.params->getInt(ParamId::P2pSelfCopy);
  if (selfCopy < 0 || selfCopy > 3) {
    FERRY_WARN("FERRY_P2P_SELF_COPY=%ld is not 0, 1, 2 or 3; using 1", static_cast<long>(selfCopy));
    selfCopy = 1;
  }
  e->selfCopy_ = static_cast<SelfCopy>(selfCopy);
  int64_t rows = ctx.params->getInt(ParamId::P2pSelfCopyRows);
  if (rows != 0 && (rows < 64 || rows > (1 << 20) || rows % 16 != 0)) {
    FERRY_WARN("FERRY_P2P_SELF_COPY_ROWS=%ld is not 0 or a multiple of 16 in 64..1M; using 0",
               static_cast<long>(rows));
    rows = 0;
  }
  e->selfCopyRows_ = static_cast<size_t>(rows);
  e->userStreamCopy_ = ctx.params->getInt(ParamId::P2pUserStreamCopy) != 0;
  const std::string& wait = ctx.params->getString(ParamId::UserWait);
  if (wait != "memop" && wait != "kernel" && wait != "auto") {
    FERRY_WARN("FERRY_USER_WAIT=%s is not auto|memop|kernel; using auto", wait.c_str());
  }
  // A parked wait-value blocks its hardware queue: with a single device
  // connection every stream shares that queue and stops behind it (NOTES.md
  // trap 16, ferry-zerosm-cond). The spin kernel keeps the queue moving.
  const bool cuda = ctx.runtime->kind() == rt::RuntimeKind::Cuda;
  const bool oneQueue = cuda && atoi(envString("CUDA_DEVICE_MAX_CONNECTIONS").c_str()) == 1;
  // auto = stream memory operations (zero SMs), validated on 2x H200 under
  // lazy and eager loading, one and several devices per process (NOTES.md
  // trap 16); the host runtime's spin wait is its stream wait anyway.
  bool memop = wait != "kernel";
  if (memop && oneQueue) {
    if (wait == "memop") {
      FERRY_WARN(
          "FERRY_USER_WAIT=memop with CUDA_DEVICE_MAX_CONNECTIONS=1: a parked stream wait "
          "would stop every stream of the process; using the one-thread spin kernel instead");
    } else {
      FERRY_INFO(kLogP2p | kLogInit,
                 "CUDA_DEVICE_MAX_CONNECTIONS=1: user streams wait with the one-thread spin "
                 "kernel (a parked stream wait would stop every stream of the process)");
    }
    memop = false;
  }
  e->spinWait_ = cuda && !memop;
  const bool lazyCuda = cuda && ctx.runtime->lazyModuleLoading();
  const std::string& stage = ctx.params->getString(ParamId::P2pStageSends);
  e->stageSends_ = stage == "1" || (stage != "0" && lazyCuda);
  // On a communicator spanning hosts, same-host messages that a one-host
  // communicator sends through kernel p2p's FIFO (FERRY_P2P_KERNEL_MAX_BYTES)
  // take the SM-free path (group.cc): staged when first, they complete
  // without their receiver, as the FIFO (and NCCL's) lets them. Without
  // that, a program whose small send must finish before its peer posts the
  // receive (send, synchronize, barrier, then recv) waited until timeout.
  if (stage != "0" && ctx.topology != nullptr && ctx.topology->nHosts > 1) {
    e->stageSmallMax_ =
        static_cast<uint64_t>(std::max<int64_t>(0, ctx.params->getInt(ParamId::P2pKernelMaxBytes)));
  }
  e->opTimeoutNs_ = ctx.params->getInt(ParamId::P2pTimeout) * 1000000000;
  e->pushWaitNs_ = std::max<int64_t>(0, ctx.params->getInt(ParamId::P2pPushWait)) * 1000;
  e->pushWaitMinNs_ = std::max<int64_t>(0, ctx.params->getInt(ParamId::P2pPushWaitMin)) * 1000;
  const int64_t busyMode = ctx.params->getInt(ParamId::P2pPushWaitBusy);
  if (busyMode < 0 || busyMode > 2) {
    FERRY_WARN("FERRY_P2P_PUSH_WAIT_BUSY=%lld is not 0|1|2; using 1",
               static_cast<long long>(busyMode));
  }
  e->pushWaitBusy_ = busyMode == 0 || busyMode == 2 ? static_cast<int>(busyMode) : 1;
  e->pushWaitStaged_ = ctx.params->getInt(ParamId::P2pPushWaitStaged) != 0;
  e->pushRetryMax_ = static_cast<uint32_t>(
      std::clamp<int64_t>(ctx.params->getInt(ParamId::P2pPushRetryMax), kPushRetryEvery, 1 << 20));
  e->stagingGrowWaitNs_ =
      std::max<int64_t>(0, ctx.params->getInt(ParamId::P2pStagingGrowWait)) * 1000;
  e->stagingMaxBytes_ =
      static_cast<uint64_t>(std::max<int64_t>(0, ctx.params->getInt(ParamId::P2pStagingMax)));
  e->stagingCapWaitNs_ =
      std::max<int64_t>(0, ctx.params->getInt(ParamId::P2pStagingWait)) * 1000000;
  e->stagingWaitNs_ = std::max<int64_t>(0, ctx.params->getInt(ParamId::NetStagingWaitUs)) * 1000;
  e->netStagingMax_ =
      static_cast<uint64_t>(std::max<int64_t>(0, ctx.params->getInt(ParamId::NetStagingMax)));
  e->netStagingCapWaitNs_ =
      std::max<int64_t>(0, ctx.params->getInt(ParamId::NetStagingCapWaitMs)) * 1000000;
  FERRY_CHECK(netChunkBytes(*ctx.params, &e->netChunk_));
  e->netGdr_ = ctx.params->getInt(ParamId::NetGdr) != 0;
  // Every Ferry kernel is loaded now, so none is ever loaded lazily while a
  // stream waits (NOTES.md trap 22).
  FERRY_CHECK(ctx.runtime->preloadKernels());
  if (ctx.collectivesOnly) {
    *out = std::move(e);  // no connections: nothing reaches a peer
    return ncclSuccess;
  }
  FERRY_CHECK(setupP2p(ctx, &e->state_));
  FERRY_INFO(kLogP2p | kLogInit,
             "SM-free p2p ready: copy engines, submitted in the call; user streams wait with %s",
             e->spinWait_ ? "a one-thread spin kernel" : "stream memory operations (zero SMs)");
  if (e->stageSends_) {
    FERRY_INFO(kLogP2p | kLogInit,
               "a send that arrives before its receiver is staged (lazy module loading): it "
               "never makes its stream wait for the receiver; set CUDA_MODULE_LOADING=EAGER to "
               "avoid the copy");
  } else if (e->stageSmallMax_ > 0) {
    FERRY_INFO(kLogP2p | kLogInit,
               "communicator spanning hosts: a same-host send of up to %llu bytes "
               "(FERRY_P2P_KERNEL_MAX_BYTES) that arrives before its receiver is staged, so it "
               "completes without the receiver as kernel p2p's FIFO would let it",
               static_cast<unsigned long long>(e->stageSmallMax_));
  }
  *out = std::move(e);
  return ncclSuccess;
}

// FERRY_NET_CHUNK_BYTES (an agreed knob: both sides cut messages alike).
Status P2pEngine::netChunkBytes(const Params& params, uint64_t* chunk) {
  const int64_t c = params.getInt(ParamId::NetChunkBytes);
  if (c < 4096 || c > (int64_t{1} << 30)) {
    FERRY_FAIL(ncclInvalidArgument, "FERRY_NET_CHUNK_BYTES=%lld is outside [4K, 1G]",
               static_cast<long long>(c));
  }
  *chunk = static_cast<uint64_t>(c);
  return ncclSuccess;
}

bool P2pEngine::reaches(int peer, bool send) const {
  if (peer < 0 || peer >= static_cast<int>(state_.send.size())) return false;
  return send ? state_.send[peer] != nullptr : state_.recv[peer] != nullptr;
}

uint64_t P2pEngine::stagingBytes() const {
  uint64_t bytes = (devicePool_ ? devicePool_->bytes() : 0) + (hostPool_ ? hostPool_->bytes() : 0);
  auto add = [&bytes](const ConnectionBase* c) {
    if (c != nullptr && c->netBuffers) bytes += c->netBuffers->stagingBytes();
  };
  for (const auto& c : state_.send) add(c.get());
  for (const auto& c : state_.recv) add(c.get());
  return bytes;
}

Status P2pEngine::newEvent(std::shared_ptr<rt::Event>* out) {
  std::unique_ptr<rt::Event> ev;
  {
    std::lock_guard<std::mutex> lock(eventMu_);
    if (!freeEvents_.empty()) {
      ev = std::move(freeEvents_.back());
      freeEvents_.pop_back();
    }
  }
  if (!ev) FERRY_CHECK(runtime_->createEvent(&ev));
  // Returned to the pool when the last holder lets it go (every stream
  // operation that uses it has captured it by then).
  *out = std::shared_ptr<rt::Event>(ev.release(), [this](rt::Event* e) {
    std::lock_guard<std::mutex> lock(eventMu_);
    freeEvents_.emplace_back(e);
  });
  return ncclSuccess;
}

Status P2pEngine::streamFor(void* handle, std::vector<void*>& handles, Streams& streams,
                            size_t* index) {
  auto it = std::find(handles.begin(), handles.end(), handle);
  if (it != handles.end()) {
    *index = static_cast<size_t>(it - handles.begin());
    return ncclSuccess;
  }
  bool capturing = false;
  FERRY_CHECK(runtime_->isCapturing(handle, &capturing));
  if (capturing) {
    FERRY_FAIL(ncclInvalidUsage,
               "SM-free send/recv cannot be captured in a CUDA graph (kernel p2p takes "
               "captured operations); issue it outside the capture");
  }
  std::unique_ptr<rt::Stream> s;
  FERRY_CHECK(runtime_->wrapUserStream(handle, &s));
  handles.push_back(handle);
  streams.push_back(std::move(s));
  *index = streams.size() - 1;
  return ncclSuccess;
}

Status P2pEngine::userWait(rt::Stream& stream, CtrlMapping& ctrl, CtrlWord& word, uint64_t value) {
  uint64_t* addr = ctrl.dev(word);
  FERRY_TRACE(
      kLogP2p, "stream %p waits for word +%zu of block %p >= %llu (now %llu)",
      stream.nativeHandle(),
      static_cast<size_t>(reinterpret_cast<char*>(&word) - reinterpret_cast<char*>(ctrl.ctrl)),
      static_cast<void*>(ctrl.ctrl), static_cast<unsigned long long>(value),
      static_cast<unsigned long long>(word.load()));
  return userWaitAt(stream, addr, value);
}

Status P2pEngine::userWaitAt(rt::Stream& stream, uint64_t* addr, uint64_t value) {
  // The legacy NULL stream synchronizes with every blocking stream: parked
  // in a wait-value it would stop their kernels too (trap 16), so it spins.
  const bool legacy = runtime_->kind() == rt::RuntimeKind::Cuda &&
                      (stream.nativeHandle() == nullptr ||
                       stream.nativeHandle() == reinterpret_cast<void*>(uintptr_t{1}));
  if (spinWait_ || legacy) return stream.waitValue64Spin(addr, value);
  return stream.waitValue64(addr, value, rt::WaitCondition::Geq);
}

StagingPool& P2pEngine::poolFor(const ConnectionBase& conn) {
  if (conn.transport != TransportId::Shm) return devicePool();
  if (!hostPool_)
    hostPool_ = std::make_unique<StagingPool>(runtime_, true, &proxy_->rpc(), commKey_);
  return *hostPool_;
}

StagingPool& P2pEngine::devicePool() {
  if (!devicePool_) {
    devicePool_ = std::make_unique<StagingPool>(runtime_, false, &proxy_->rpc(), commKey_);
  }
  return *devicePool_;
}

std::vector<std::string> P2pEngine::peerProxyNames() const {
  std::vector<std::string> names(state_.send.size());
  for (size_t p = 0; p < names.size(); ++p) {
    if (state_.send[p] || state_.recv[p]) names[p] = peerRef(static_cast<int>(p)).proxyName;
  }
  return names;
}

PeerRef P2pEngine::peerRef(int peer) const {
  PeerRef r;
  const SendConnection* s = state_.send[peer].get();
  r.proxyName = s != nullptr ? s->peerProxy : state_.recv[peer]->peerProxy;
  r.rpc = s != nullptr ? s->userRpc.get() : nullptr;
  r.commKey = commKey_;
  r.rank = peer;
  r.timeoutMs = rpcTimeoutMs_;
  r.abortFlag = abortFlag_;
  return r;
}

Status P2pEngine::describeForPeers(void* buffer, uint64_t bytes, PostInfo* info, bool* mappable) {
  memset(info, 0, sizeof(*info));
  rt::AllocationInfo a;
  FERRY_CHECK(runtime_->describeAllocation(buffer, bytes, &a));
  *mappable = a.mappable;
  if (a.mappable) postIpc(a, buffer, info);
  info->bytes = bytes;
  return ncclSuccess;
}

bool P2pEngine::mapsPeerMemory(int peer) const {
  if (peer < 0 || peer >= static_cast<int>(state_.send.size()) || peer == myRank_) return false;
  const SendConnection* s = state_.send[peer].get();
  return zeroCopy_ && s != nullptr && !s->samePeerProcess && s->transport == TransportId::P2p &&
         s->userRpc != nullptr;
}

Status P2pEngine::mapPeerBuffer(int peer, const PostInfo& info, std::shared_ptr<PeerMapping>* out) {
  if (!mapsPeerMemory(peer)) {
    FERRY_FAIL(ncclInternalError, "peer %d: no connection that maps its memory", peer);
  }
  return PeerMemory::instance().map(runtime_, peerRef(peer), info, out);
}

// What this rank publishes as the first side of a message: its own buffer
// when the peer can reach it, else a staging block (staging.h says when).
// A peer in this process on another device reaches plain cudaMalloc memory
// (peer access is on) but not pool or cuMem memory: those are staged too.
// So is a send that a receive of its group overwrites: in an in-place swap
// each side's copy would read the buffer the other's writes (a cycle no
// ordering breaks; found by p2p.inplace.*, session 25).
Status P2pEngine::describeFirst(const P2pTask& task, bool overlapsReceive, Op& op, PostInfo* info) {
  memset(info, 0, sizeof(*info));
  info->bytes = task.bytes;
  info->localPtr = reinterpret_cast<uint64_t>(task.buffer);
  info->kind = static_cast<uint32_t>(PostKind::Local);
  if (task.bytes == 0) return ncclSuccess;
  const bool local = op.conn->samePeerProcess;
  const bool stageSend = op.send && (stagesWhenFirst(task) || overlapsReceive);
  bool direct = false;
  if (!stageSend &&
      (!local || (task.peer != myRank_ && runtime_->kind() == rt::RuntimeKind::Cuda))) {
    rt::AllocationInfo a;
    if (local || (op.conn->transport == TransportId::P2p && zeroCopy_)) {
      ProfScope prof(profile_, ProfSlot::Map);
      FERRY_CHECK(runtime_->describeAllocation(task.buffer, task.bytes, &a));
    }
    direct = a.mappable;
    if (direct && !local) postIpc(a, task.buffer, info);
  } else {
    direct = !stageSend;  // self, or a same-process peer on the host runtime
  }
  if (direct) return ncclSuccess;
  op.detached = stageSend;
  op.pool = &poolFor(*op.conn);
  FERRY_CHECK(op.pool->take(task.bytes, &op.block, info));
  if (local) info->kind = static_cast<uint32_t>(PostKind::Local);  // the block's own address
  return ncclSuccess;
}

// The first side's bytes, as this process (the second side) addresses them.
Status P2pEngine::reachPeerBytes(const P2pTask& task, Op& op) {
  if (op.peer.bytes != task.bytes) {
    FERRY_FAIL(ncclInvalidUsage,
               "%s peer %d of %llu bytes is matched by a %s of %llu bytes (message %llu): sizes "
               "must be equal",
               op.send ? "send to" : "receive from", task.peer,
               static_cast<unsigned long long>(task.bytes), op.send ? "receive" : "send",
               static_cast<unsigned long long>(op.peer.bytes),
               static_cast<unsigned long long>(op.seq));
  }
  if (task.bytes == 0) return ncclSuccess;
  if (op.peer.kind == static_cast<uint32_t>(PostKind::Local)) {
    op.remote = reinterpret_cast<char*>(op.peer.localPtr);
    return ncclSuccess;
  }
  {
    ProfScope prof(profile_, ProfSlot::Map);
    FERRY_CHECK(PeerMemory::instance().map(runtime_, peerRef(task.peer), op.peer, &op.mapping));
  }
  op.remote = op.mapping->base() + op.peer.offset;
  return ncclSuccess;
}

Status P2pEngine::claimOne(const P2pTask& task, bool overlapsReceive, Op& op) {
  CtrlBlock& ctrl = op.ctrl();
  Status failed = op.conn->failed.load();
  if (failed != ncclSuccess) {
    FERRY_FAIL(failed, "%s peer %d: the connection failed earlier: %s",
               op.send ? "send to" : "receive from", task.peer, statusString(failed));
  }
  RendezvousLimits limits{opTimeoutNs_, abortFlag_, task.peer};
  FERRY_CHECK(awaitSlot(ctrl, op.seq, limits));
  PostInfo mine{};
  if (!peerPosted(ctrl, op.send, op.seq, &op.peer)) {
    FERRY_CHECK(describeFirst(task, overlapsReceive, op, &mine));
  }
  FERRY_CHECK(claimMessage(ctrl, op.send, op.seq, mine, &op.first, &op.peer));
  op.claimed = true;
  if (op.first) return ncclSuccess;
  if (op.block != nullptr) {  // described, but the peer claimed first after all
    op.pool->release(op.block);
    op.block = nullptr;
    op.detached = false;
  }
  FERRY_CHECK(reachPeerBytes(task, op));
  op.gpuWaitReady = op.slot().ready.load() < op.gen();  // acquire
  // A second sender pushes from its own buffer: its receiver has posted,
  // so the push waits only for work the receiver already submitted (as a
  // send kernel would). It still stages when the group receives into its
  // bytes (staged sends read them first), whatever the mode.
  if (op.send && overlapsReceive && task.bytes > 0) {
    PostInfo unused;
    op.pool = &poolFor(*op.conn);
    op.detached = true;
    FERRY_CHECK(op.pool->take(task.bytes, &op.block, &unused));
  }
  return ncclSuccess;
}

// A failure after some messages were claimed leaves the peer waiting for
// our part of them: the connections fail on both sides.
void P2pEngine::failClaimed(std::vector<Op>& ops, Status s) {
  for (Op& op : ops) {
    if (op.block != nullptr) op.pool->release(op.block);
    op.block = nullptr;
    op.detached = false;
    if (!op.claimed) continue;
    Status expected = ncclSuccess;
    op.conn->failed.compare_exchange_strong(expected, s);
    uint64_t none = 0;
    // Release: the peer's acquire load of `error` sees the report.
    op.ctrl().error.value.compare_exchange_strong(none, static_cast<uint64_t>(s),
                                                  std::memory_order_release);
  }
  Status expected = ncclSuccess;
  asyncError_->compare_exchange_strong(expected, s, std::memory_order_release);
}

// A large send whose receiver has not posted yet. Claimed now, it would be
// FIRST, which costs in two cases:
//   - an exchange (this rank was also first to a receive from the same
//     peer in this group): the peer would arrive second for both messages
//     and its GPU would copy both ways (a pull and a push), about half the
//     rate of two pushes (bench/ce_split.cu, pattern one:both);
//   - lazy module loading (stageSends_): a first sender stages its bytes (a
//     local copy of the whole message) and the receiver pulls them.
// Waiting briefly on the CPU for the receiver makes this rank second: it
// pushes straight from its buffer (the wait a second sender's copy makes
// is only for work the receiver already submitted: NCCL-equivalent). The
// wait is bounded by about what it saves (the message at 400 GB/s), so a
// late receiver costs the CPU no more than the GPU would have lost; or by
// FERRY_P2P_PUSH_WAIT_MIN_US where that is longer (an experiment: see the
// knob).
//
// The bounds hold per launch, not per send: a launch that sends to several
// late peers waited up to the bound for each (an all-to-all over 4 GPUs: up
// to 3 x 500 us on busy streams; torch's all_to_all_single took 1.44 ms of
// CPU per call there against NCCL's 0.19, 4x H200, session 27, not yet
// profiled). *budgetNs is what the launch has left; a wait cut short by it
// does not count its peer as late.
void P2pEngine::awaitReceiver(const std::vector<P2pTask>& tasks, const std::vector<Op>& ops,
                              size_t i, int64_t* budgetNs) {
  constexpr uint64_t kMinBytes = uint64_t{1} << 20;
  const P2pTask& t = tasks[i];
  // A peer in this process is usually driven by this same thread (one
  // group over several devices' communicators): it cannot post meanwhile.
  if (pushWaitNs_ == 0 || t.bytes < kMinBytes || ops[i].conn->samePeerProcess) return;
  // Under lazy loading every such send may wait (it would be staged), or,
  // with FERRY_P2P_PUSH_WAIT_STAGED=0, only exchanges, as without staging.
  const bool anySend = stageSends_ && pushWaitStaged_;
  bool exchange = false;
  for (size_t j = 0; !anySend && !exchange && j < tasks.size(); ++j) {
    exchange = !tasks[j].isSend && tasks[j].peer == t.peer && ops[j].claimed && ops[j].first &&
               tasks[j].bytes >= kMinBytes;
  }
  if ((!anySend && !exchange) || *budgetNs <= 0) return;
  const Op& op = ops[i];
  // A receiver late for several waits in a row is late by habit (a
  // pipeline stage still computing while the one before it sends): another
  // wait would cost the CPU its whole bound for nothing, and torch's
  // pipelining schedules are CPU-bound (host time ~ step time, bench/
  // RESULTS.md session 16). Such a connection waits again only every
  // kPushRetryEvery-th message, to notice when the pattern changes; with
  // FERRY_P2P_PUSH_RETRY_MAX above that, the interval doubles after each
  // retry that misses again (in 1F1B such retries cost the sending stage
  // ~0.5 ms of CPU a step, session 53).
  constexpr uint32_t kLateInARow = 3;
  ConnectionBase& conn = *op.conn;
  const uint32_t every = std::max(kPushRetryEvery, conn.retryEvery);
  if (conn.lateReceives >= kLateInARow && ++conn.sinceWait < every) return;
  conn.sinceWait = 0;
  // A receiver that has posted already needs no wait, and the stream's
  // fence need not be asked (~1.4 us per query once it has passed).
  PostInfo posted;
  if (peerPosted(op.ctrl(), true, op.seq, &posted)) {
    receiverCame(conn);
    // relaxed: statistics (describeCounters).
    conn.counters.pushWaits.fetch_add(1, std::memory_order_relaxed);
    return;
  }
  // A stream still running an earlier launch's work is a GPU that the wait
  // does not idle (the CPU is ahead of it): such a wait takes the whole
  // bound (FERRY_P2P_PUSH_WAIT_BUSY). Measured on 2x H100 (session 23):
  // with the size-based bound alone, a GPU-bound sendrecv loop missed
  // every wait at 4 MiB and ran at 0.61-0.75x NCCL; with this, 0.82-0.93x.
  const bool busy = pushWaitBusy_ != 0 && streamBusy(t.stream);
  const int64_t sized =
      std::min<int64_t>(pushWaitNs_, std::max(pushWaitMinNs_, static_cast<int64_t>(t.bytes / 400)));
  const int64_t full = busy ? pushWaitNs_ : sized;
  const int64_t ns = std::min(full, *budgetNs);
  ProfScope prof(profile_, ProfSlot::PushWait);
  const int64_t began = steadyNowNs();
  bool arrived = busy && pushWaitBusy_ == 2
                     ? awaitWhileBusy(op, t.stream, std::min(sized, ns), ns)
                     : awaitPeerClaim(op.ctrl(), true, op.seq, ns, abortFlag_);
  *budgetNs -= steadyNowNs() - began;
  if (arrived) {
    receiverCame(conn);
  } else if (ns == full) {  // a miss (a wait cut short by the launch's budget is none)
    if (conn.lateReceives >= kLateInARow) conn.retryEvery = std::min(2 * every, pushRetryMax_);
    ++conn.lateReceives;
  }
  // relaxed: statistics (describeCounters).
  conn.counters.pushWaits.fetch_add(1, std::memory_order_relaxed);
  if (!arrived) conn.counters.pushWaitsMissed.fetch_add(1, std::memory_order_relaxed);
  FERRY_TRACE(
      kLogP2p, "send to peer %d: message %llu (%s%s): receiver %s after %lld us (bound %lld)",
      t.peer, static_cast<unsigned long long>(op.seq), anySend ? "would stage" : "exchange",
      busy ? ", stream busy" : "", arrived ? "posted" : "did not post",
      static_cast<long long>((steadyNowNs() - began) / 1000), static_cast<long long>(ns / 1000));
}

// A send staged under lazy loading (it arrived before its receiver) copies
// its bytes into a pool block that the receiver pulls from. A block the
// pool must allocate first costs more than a short wait (cudaMalloc, and
// the peer maps the new block by IPC), and it is kept: a rank running ahead
// of its peer grew the pool on every message, one rank held 10-28 GiB of
// staging after a ferry-bench sweep, and the allocations inside the timed
// loop made the 64 MiB alltoall 4x slower than NCCL (session 26, NOTES.md
// trap 59). So before the pool grows, the send waits for its receiver to
// post (it then pushes from its own buffer: no block) or for a block to
// free: up to FERRY_P2P_STAGING_GROW_WAIT_US (2 ms) under
// FERRY_P2P_STAGING_MAX_BYTES, up to
// FERRY_P2P_STAGING_WAIT_MS past it. Then it grows anyway: a receiver may
// post only after this rank's later calls (unbatched sends ahead of their
// receives), so the wait is a bound, never a hang.
void P2pEngine::awaitStagingRoom(const P2pTask& t, Op& op) {
  constexpr int64_t kSliceNs = 50000;
  ConnectionBase& conn = *op.conn;
  if (!stagesWhenFirst(t) || t.bytes == 0 || conn.samePeerProcess ||
      conn.transport != TransportId::P2p) {
    return;
  }
  CtrlBlock& ctrl = op.ctrl();
  PostInfo unused;
  if (peerPosted(ctrl, true, op.seq, &unused)) return;
  StagingPool& pool = poolFor(conn);
  if (pool.hasFree(t.bytes)) return;
  const bool pastCap =
      pool.bytes() > 0 && pool.bytes() + StagingPool::blockSize(t.bytes) > stagingMaxBytes_;
  const int64_t bound =
      pastCap ? stagingCapWaitNs_ : std::min(stagingGrowWaitNs_, stagingCapWaitNs_);
  ProfScope prof(profile_, ProfSlot::StageWait);
  const int64_t start = steadyNowNs();
  for (int64_t left = bound; left > 0; left = bound - (steadyNowNs() - start)) {
    if (awaitPeerClaim(ctrl, true, op.seq, std::min(kSliceNs, left), abortFlag_)) {
      receiverCame(conn);  // it came: not a receiver late by habit
      return;
    }
    // acquire: an abort or the peer's error report ends the wait at once.
    if (abortFlag_ != nullptr && abortFlag_->load(std::memory_order_acquire)) return;
    if (ctrl.error.load() != 0 || pool.hasFree(t.bytes)) return;
  }
  FERRY_TRACE(kLogP2p, "send to peer %d: message %llu stages into a new block after %lld us",
              t.peer, static_cast<unsigned long long>(op.seq),
              static_cast<long long>((steadyNowNs() - start) / 1000));
  if (pastCap && !warnedStagingCap_) {
    warnedStagingCap_ = true;
    FERRY_WARN(
        "staging of sends that arrive before their receivers passes "
        "FERRY_P2P_STAGING_MAX_BYTES=%llu "
        "(%llu bytes held, lazy module loading): receivers post long after their senders; raise "
        "the cap, or set CUDA_MODULE_LOADING=EAGER (no staging)",
        static_cast<unsigned long long>(stagingMaxBytes_),
        static_cast<unsigned long long>(pool.bytes()));
  }
}

void P2pEngine::receiverCame(ConnectionBase& conn) {
  conn.lateReceives = 0;
  conn.retryEvery = 0;
}

// FERRY_P2P_PUSH_WAIT_BUSY=2: the receiver's claim is awaited up to the
// whole bound while `stream` stays busy; once its newest fence passes (from
// then on the wait would idle the GPU), only up to `idleNs` from the start.
bool P2pEngine::awaitWhileBusy(const Op& op, void* stream, int64_t idleNs, int64_t busyNs) const {
  constexpr int64_t kSliceNs = 16000;  // how often the fence is asked (a query costs ~1 us)
  const int64_t start = steadyNowNs();
  int64_t bound = busyNs;
  bool idle = false;
  for (;;) {
    const int64_t spent = steadyNowNs() - start;
    if (spent >= bound) return false;
    if (awaitPeerClaim(op.ctrl(), true, op.seq, std::min(kSliceNs, bound - spent), abortFlag_)) {
      return true;
    }
    // acquire: an abort or a peer's error report ends the wait at once.
    if (abortFlag_ != nullptr && abortFlag_->load(std::memory_order_acquire)) return false;
    if (op.ctrl().error.load() != 0) return false;
    if (!idle && !streamBusy(stream)) {
      idle = true;
      bound = std::min(bound, idleNs);
    }
  }
}

// The stream's fence was recorded after the last launch's work on it.
bool P2pEngine::streamBusy(void* stream) const {
  for (const Fence& f : fences_) {
    if (f.stream == stream) return f.event->query() == ncclInProgress;
  }
  return false;
}

// Receives are claimed before sends: when two ranks exchange in one group,
// each then finds the other's receive posted and is second for its send,
// so both directions are pushes (a copy engine writing to its peer), the
// fastest way over NVLink; a pull reads across the link (and a rank that
// is second for both directions copies both ways: awaitReceiver). Each
// connection's messages are still claimed in call order (sends and
// receives use different connections).
Status P2pEngine::claimPass(const std::vector<P2pTask>& tasks, std::vector<Op>& ops, bool sends) {
  int64_t pushWaitLeft = pushWaitNs_;  // the launch's push waits together (awaitReceiver)
  for (size_t i = 0; i < tasks.size(); ++i) {
    const P2pTask& t = tasks[i];
    if (t.isSend != sends) continue;
    Op& op = ops[i];
    op.send = t.isSend;
    op.conn = t.isSend ? static_cast<ConnectionBase*>(state_.send[t.peer].get())
                       : static_cast<ConnectionBase*>(state_.recv[t.peer].get());
    op.seq = op.conn->nextSeq;
    if (t.isSend) {
      awaitReceiver(tasks, ops, i, &pushWaitLeft);
      awaitStagingRoom(t, op);
    }
    Status s = claimOne(t, t.isSend && overlapsOpposite(t, tasks), op);
    if (s != ncclSuccess) {
      failClaimed(ops, s);
      return s;
    }
    ++op.conn->nextSeq;
  }
  return ncclSuccess;
}

Status P2pEngine::launch(const std::vector<P2pTask>& tasks) {
  if (tasks.empty()) return ncclSuccess;
  ProfScope prof(profile_, ProfSlot::P2pSmFree);
  Status err = asyncError_->load(std::memory_order_acquire);
  if (err != ncclSuccess) FERRY_FAIL(err, "communicator is in error state: %s", statusString(err));
  // Enqueue on the communicator's device, then give the caller its own back
  // (a single thread may drive several devices' communicators in one group).
  rt::DeviceScope device(runtime_, device_);
  FERRY_CHECK(device.status());
  // Peers on other hosts have a data path of their own; their connections
  // are disjoint from the others', so the two parts are independent.
  std::vector<P2pTask> net, local;
  for (const P2pTask& t : tasks) (isNet(t) ? net : local).push_back(t);
  // Both parts go, whatever the outcome of the copies ahead or of the other
  // part: a part left out would leave its peers waiting for their timeout
  // (a send whose copy failed reads its own buffer, and the call fails).
  std::vector<AheadCopy> ahead;
  Status a = net.empty() || local.empty() ? ncclSuccess : copyAheadOfNet(net, &local, &ahead);
  Status n = net.empty() ? ncclSuccess : launchNet(net, local);
  Status l = ncclSuccess;
  if (!local.empty()) {
    Stepped steps;
    l = beginLocal(local, steps);
    for (int i = 1; l == ncclSuccess && i < kSteps; ++i) l = runStep(steps, static_cast<Step>(i));
  }
  Status r = releaseAhead(ahead);
  for (Status s : {a, n, l, r}) FERRY_CHECK(s);
  return ncclSuccess;
}

bool P2pEngine::waitFences(int64_t timeoutMs) {
  auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeoutMs);
  for (Fence& fence : fences_) {
    while (fence.event->query() == ncclInProgress) {
      if (std::chrono::steady_clock::now() > deadline) return false;
      std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
  }
  fences_.clear();
  return true;
}

void P2pEngine::failAll() {
  proxy_->failOwner(this);
}

Status P2pEngine::shutdown(bool abort, int64_t timeoutMs) {
  if (shutDown_) return ncclSuccess;
  shutDown_ = true;
  Status s = proxy_->detach(this, abort, timeoutMs);
  // Messages that never completed: drop them, releasing this rank's waits.
  if (s != ncclSuccess && !abort) (void)proxy_->detach(this, true, 10000);
  FERRY_INFO(kLogP2p, "rank %d p2p totals:%s", myRank_, describeCounters().c_str());
  rt::DeviceScope device(runtime_, device_);
  for (auto& c : state_.send)
    if (c) (void)c->stream->synchronize();
  for (auto& c : state_.recv)
    if (c) (void)c->stream->synchronize();
  // User streams may still have to run their waits on our words and their
  // staging copies: free neither before they have passed.
  if (waitFences(abort ? 10000 : std::min<int64_t>(timeoutMs, 60000))) {
    if (devicePool_) devicePool_->clear();
    if (hostPool_) hostPool_->clear();
    PeerMemory::instance().forgetCommunicator(commKey_);
    return s;
  }
  FERRY_WARN(
      "rank %d: a user stream has not yet passed its wait on this communicator (it is "
      "blocked on other work); keeping its control blocks and staging memory for the life "
      "of the process",
      myRank_);
  struct Remains {
    P2pState state;
    std::unique_ptr<StagingPool> device, host;
  };
  static std::mutex graveMu;
  static auto* grave = new std::vector<Remains>();  // deliberately never freed
  std::lock_guard<std::mutex> lock(graveMu);
  grave->push_back(Remains{std::move(state_), std::move(devicePool_), std::move(hostPool_)});
  return s;
}

void P2pEngine::countKernelTasks(const std::vector<P2pTask>& tasks) {
  for (const P2pTask& t : tasks) countTask(t, false);
}

void P2pEngine::countTask(const P2pTask& t, bool zeroCopy) {
  if (t.peer < 0 || t.peer >= static_cast<int>(state_.send.size())) return;
  ConnectionBase* c = t.isSend ? static_cast<ConnectionBase*>(state_.send[t.peer].get())
                               : static_cast<ConnectionBase*>(state_.recv[t.peer].get());
  if (c == nullptr) return;
  // relaxed: statistics, read without ordering by peerStats/describeCounters.
  c->counters.ops.fetch_add(1, std::memory_order_relaxed);
  c->counters.bytes.fetch_add(t.bytes, std::memory_order_relaxed);
  if (zeroCopy && t.isSend) c->counters.zeroCopyOps.fetch_add(1, std::memory_order_relaxed);
}

void P2pEngine::peerStats(int peer, uint64_t out[5]) const {
  for (int i = 0; i < 5; ++i) out[i] = 0;
  if (peer < 0 || peer >= static_cast<int>(state_.send.size())) return;
  if (const SendConnection* s = state_.send[peer].get()) {
    out[0] = s->counters.ops.load(std::memory_order_relaxed);
    out[1] = s->counters.bytes.load(std::memory_order_relaxed);
    out[2] = s->counters.zeroCopyOps.load(std::memory_order_relaxed);
  }
  if (const RecvConnection* r = state_.recv[peer].get()) {
    out[3] = r->counters.ops.load(std::memory_order_relaxed);
    out[4] = r->counters.bytes.load(std::memory_order_relaxed);
  }
}

std::string P2pEngine::describeCounters() const {
  std::string out;
  for (size_t p = 0; p < state_.send.size(); ++p) {
    const SendConnection* s = state_.send[p].get();
    const RecvConnection* r = state_.recv[p].get();
    if (s == nullptr && r == nullptr) continue;
    const bool net = (s ? s->transport : r->transport) == TransportId::Net;
    char line[320];
    snprintf(line, sizeof(line),
             " [peer %zu%s: sent %llu ops %llu B (%llu direct, %llu pushed by us, %llu push "
             "waits, %llu missed), received %llu ops %llu B (%llu pulled by us)]",
             p, net ? " via NET" : "",
             s ? static_cast<unsigned long long>(s->counters.ops.load()) : 0ULL,
             s ? static_cast<unsigned long long>(s->counters.bytes.load()) : 0ULL,
             s ? static_cast<unsigned long long>(s->counters.zeroCopyOps.load()) : 0ULL,
             s ? static_cast<unsigned long long>(s->counters.copiedOps.load()) : 0ULL,
             s ? static_cast<unsigned long long>(s->counters.pushWaits.load()) : 0ULL,
             s ? static_cast<unsigned long long>(s->counters.pushWaitsMissed.load()) : 0ULL,
             r ? static_cast<unsigned long long>(r->counters.ops.load()) : 0ULL,
             r ? static_cast<unsigned long long>(r->counters.bytes.load()) : 0ULL,
             r ? static_cast<unsigned long long>(r->counters.copiedOps.load()) : 0ULL);
    out += line;
    // Where the network path's time went, per direction (NetStats).
    const std::string sn = s && net ? describeNetStats(s->netStats, true) : "";
    const std::string rn = r && net ? describeNetStats(r->netStats, false) : "";
    if (!sn.empty()) out += " [peer " + std::to_string(p) + " send," + sn + "]";
    if (!rn.empty()) out += " [peer " + std::to_string(p) + " receive," + rn + "]";
  }
  return out;
}

}  // namespace ferry
