#include "enqueue/p2p_engine.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <thread>

namespace ferry {

P2pEngine::~P2pEngine() {
  if (!shutDown_) (void)shutdown(true, 10000);
}

Status P2pEngine::create(const P2pSetupContext& ctx, std::atomic<Status>* asyncError,
                         std::shared_ptr<Proxy> proxy, std::unique_ptr<P2pEngine>* out) {
  std::unique_ptr<P2pEngine> e(new P2pEngine());
  e->runtime_ = ctx.runtime;
  e->proxy_ = std::move(proxy);
  e->asyncError_ = asyncError;
  e->myRank_ = ctx.topology->myRank;
  e->device_ = ctx.device;
  e->zeroCopy_ = ctx.params->getInt(ParamId::P2pZeroCopy) != 0;
  e->selfCopy_ = ctx.params->getInt(ParamId::P2pSelfCopy) != 0;
  const std::string& wait = ctx.params->getString(ParamId::UserWait);
  if (wait == "kernel") {
    e->spinWait_ = true;
  } else if (wait == "memop") {
    e->spinWait_ = false;
    if (ctx.runtime->kind() == rt::RuntimeKind::Cuda) {
      FERRY_WARN(
          "FERRY_USER_WAIT=memop: on H200 / driver 580 a stream parked in cuStreamWaitValue64 "
          "keeps kernels on other streams from running until it is released, so a collective "
          "or kernel p2p launched while a receive waits can deadlock (NOTES.md)");
    }
  } else {
    if (wait != "auto")
      FERRY_WARN("FERRY_USER_WAIT=%s is not auto|memop|kernel; using auto", wait.c_str());
    // auto = the spin kernel on CUDA: measured on H200 / driver 580, while a
    // stream waits in cuStreamWaitValue64 on a host word, kernels launched on
    // other streams do not run until the wait is released (with 1 or 32
    // device connections, eager or lazy loading), which deadlocks a collective
    // or kernel p2p that the awaited peer needs first (NOTES.md trap 16).
    e->spinWait_ = ctx.runtime->kind() == rt::RuntimeKind::Cuda;
  }
  const bool lazyCuda =
      ctx.runtime->kind() == rt::RuntimeKind::Cuda && ctx.runtime->lazyModuleLoading();
  // A copy stream parked in a stream wait for the receiver would stall every
  // lazy kernel load in the process until the peer arrives (the measured
  // hazard), so under lazy loading the proxy polls for the receiver instead.
  e->streamWaitsPeer_ =
      !e->spinWait_ && !lazyCuda && ctx.params->getInt(ParamId::P2pStreamWait) != 0;
  const std::string& stage = ctx.params->getString(ParamId::P2pStageSends);
  e->stageSends_ = stage == "1" || (stage != "0" && lazyCuda);
  e->staging_ = std::make_unique<StagingPool>(ctx.runtime);
  e->stagePiece_ =
      static_cast<uint64_t>(std::max<int64_t>(1, ctx.params->getInt(ParamId::P2pStagePieceBytes)));
  e->opTimeoutNs_ = ctx.params->getInt(ParamId::P2pTimeout) * 1000000000;
  // Every Ferry kernel is loaded now, so none is ever loaded lazily while a
  // stream waits (the hazard above).
  FERRY_CHECK(ctx.runtime->preloadKernels());
  FERRY_CHECK(setupP2p(ctx, &e->state_));
  e->readyWriters_.resize(e->state_.recv.size());
  FERRY_INFO(kLogP2p | kLogInit, "SM-free p2p ready: user streams wait with %s%s",
             e->spinWait_ ? "a one-thread spin kernel" : "stream memory operations (zero SMs)",
             e->zeroCopy_ ? ", zero-copy when the receive buffer can be mapped" : "");
  if (e->stageSends_) {
    FERRY_INFO(kLogP2p | kLogInit,
               "sends are staged (lazy module loading): a send never makes "
               "its stream wait for the receiver; set CUDA_MODULE_LOADING=EAGER to avoid the copy");
  }
  *out = std::move(e);
  return ncclSuccess;
}

bool P2pEngine::reaches(int peer, bool send) const {
  if (peer < 0 || peer >= static_cast<int>(state_.send.size())) return false;
  return send ? state_.send[peer] != nullptr : state_.recv[peer] != nullptr;
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
  // Returned to the pool when the last operation holding it lets it go (the
  // proxy drops it right after issuing its stream wait on it).
  *out = std::shared_ptr<rt::Event>(ev.release(), [this](rt::Event* e) {
    std::lock_guard<std::mutex> lock(eventMu_);
    freeEvents_.emplace_back(e);
  });
  return ncclSuccess;
}

Status P2pEngine::streamFor(void* handle, std::vector<void*>& handles,
                            std::vector<std::unique_ptr<rt::Stream>>& streams, size_t* index) {
  auto it = std::find(handles.begin(), handles.end(), handle);
  if (it != handles.end()) {
    *index = static_cast<size_t>(it - handles.begin());
    return ncclSuccess;
  }
  bool capturing = false;
  FERRY_CHECK(runtime_->isCapturing(handle, &capturing));
  if (capturing) {
    FERRY_FAIL(ncclInvalidUsage,
               "SM-free send/recv cannot be captured in a CUDA graph in this "
               "version (no kernel p2p fallback yet); issue it outside the capture");
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
      kLogP2p, "user stream %p waits for word +%zu of block %p >= %llu (now %llu)",
      stream.nativeHandle(),
      static_cast<size_t>(reinterpret_cast<char*>(&word) - reinterpret_cast<char*>(ctrl.ctrl)),
      static_cast<void*>(ctrl.ctrl), static_cast<unsigned long long>(value),
      static_cast<unsigned long long>(word.load()));
  if (spinWait_) return stream.waitValue64Spin(addr, value);
  return stream.waitValue64(addr, value, rt::WaitCondition::Geq);
}

// Decides how the receive lands: straight into the user's buffer when the
// sender can write it (same process, or a mappable allocation), else through
// the FIFO. The decision is local and per message, so a buffer that cannot be
// mapped never blocks anything: it just costs a second copy.
Status P2pEngine::makeRecvOp(const P2pTask& task, rt::Stream& stream, P2pOp* op) {
  RecvConnection& c = *state_.recv[task.peer];
  op->kind = P2pOp::Kind::Recv;
  op->recv = &c;
  op->mode = RdvMode::Fifo;
  if (c.samePeerProcess) {
    op->mode = RdvMode::ZeroCopyLocal;
  } else if (zeroCopy_ && task.bytes > 0) {
    FERRY_CHECK(runtime_->describeAllocation(task.buffer, task.bytes, &op->alloc));
    if (op->alloc.mappable) op->mode = RdvMode::ZeroCopyIpc;
  }
  if (op->mode != RdvMode::Fifo) {
    // Stream write: the sender may overwrite the buffer once the user's
    // stream has reached this point (all earlier work on it is complete).
    // recvReady must only grow: if the previous write came from another
    // stream, this one waits for it first (two streams' writes would
    // otherwise land in either order, and a smaller value landing last
    // would hold the sender back forever). NCCL's in-order matching makes
    // this receive wait for the earlier one anyway, so no new cycle.
    ReadyWriter& last = readyWriters_[task.peer];
    if (last.event && last.stream != stream.nativeHandle()) {
      FERRY_CHECK(stream.waitEvent(*last.event));
    }
    FERRY_CHECK(stream.writeValue64(c.ctrl.dev(c.ctrl.ctrl->recvReady), op->seq + 1));
    std::shared_ptr<rt::Event> written;
    FERRY_CHECK(newEvent(&written));
    FERRY_CHECK(written->record(stream));
    last.event = std::move(written);
    last.stream = stream.nativeHandle();
  }
  return ncclSuccess;
}

// Takes a staging block for every send of the launch with a payload.
Status P2pEngine::takeStaging(const std::vector<P2pTask>& tasks, std::vector<void*>* staged) {
  for (size_t i = 0; i < tasks.size(); ++i) {
    const P2pTask& t = tasks[i];
    if (!t.isSend || t.bytes == 0) continue;
    SendConnection* c = state_.send[t.peer].get();
    uint64_t seq =
        c->nextSeq + static_cast<uint64_t>(std::count_if(
                         tasks.begin(), tasks.begin() + static_cast<long>(i),
                         [&t](const P2pTask& o) { return o.isSend && o.peer == t.peer; }));
    FERRY_CHECK(staging_->take(t.bytes, c, seq, &(*staged)[i]));
  }
  return ncclSuccess;
}

// True if any receive buffer of the launch overlaps the source of a staged send.
bool P2pEngine::receivesOverlapStaged(const std::vector<P2pTask>& tasks,
                                      const std::vector<void*>& staged) {
  for (size_t r = 0; r < tasks.size(); ++r) {
    if (tasks[r].isSend || tasks[r].bytes == 0) continue;
    auto rb = reinterpret_cast<uintptr_t>(tasks[r].buffer);
    for (size_t s = 0; s < tasks.size(); ++s) {
      if (staged[s] == nullptr) continue;
      auto sb = reinterpret_cast<uintptr_t>(tasks[s].buffer);
      if (rb < sb + tasks[s].bytes && sb < rb + tasks[r].bytes) return true;
    }
  }
  return false;
}

// Issues every staged send's staging copies (and piece events) on its stream.
Status P2pEngine::issueStaging(const std::vector<P2pTask>& tasks,
                               std::vector<std::unique_ptr<rt::Stream>>& streams,
                               const std::vector<size_t>& streamOf,
                               const std::vector<void*>& staged,
                               std::vector<std::vector<std::shared_ptr<rt::Event>>>* pieces) {
  for (size_t i = 0; i < tasks.size(); ++i) {
    if (staged[i] != nullptr) {
      FERRY_CHECK(stageSend(tasks[i], *streams[streamOf[i]], staged[i], &(*pieces)[i]));
    }
  }
  return ncclSuccess;
}

// Copies a send's payload into its staging block on the user's stream, one
// piece at a time, recording an event after each piece for the copy stream.
Status P2pEngine::stageSend(const P2pTask& task, rt::Stream& stream, void* block,
                            std::vector<std::shared_ptr<rt::Event>>* events) {
  uint64_t piece = stagePieceBytes(task.bytes, stagePiece_);
  for (uint64_t off = 0; off < task.bytes; off += piece) {
    uint64_t len = std::min(piece, task.bytes - off);
    FERRY_CHECK(stream.copyAsync(static_cast<char*>(block) + off,
                                 static_cast<const char*>(task.buffer) + off, len));
    std::shared_ptr<rt::Event> ev;
    FERRY_CHECK(newEvent(&ev));
    FERRY_CHECK(ev->record(stream));
    events->push_back(std::move(ev));
  }
  return ncclSuccess;
}

Status P2pEngine::launch(const std::vector<P2pTask>& tasks) {
  if (tasks.empty()) return ncclSuccess;
  Status err = asyncError_->load(std::memory_order_acquire);
  if (err != ncclSuccess) FERRY_FAIL(err, "communicator is in error state: %s", statusString(err));
  // Enqueue on the communicator's device, then give the caller its own back
  // (a single thread may drive several devices' communicators in one group).
  int callerDevice = -1;
  FERRY_CHECK(runtime_->currentDevice(&callerDevice));
  FERRY_CHECK(runtime_->setDevice(device_));
  std::vector<SelfPair> pairs;
  Status s = selfPairs(tasks, &pairs);
  if (s == ncclSuccess && pairs.empty()) {
    s = launchOnDevice(tasks, nullptr);
  } else if (s == ncclSuccess) {
    std::vector<bool> copied(tasks.size(), false);
    for (const SelfPair& p : pairs) copied[p.first] = copied[p.second] = true;
    std::vector<P2pTask> rest;
    for (size_t i = 0; i < tasks.size(); ++i) {
      if (!copied[i]) rest.push_back(tasks[i]);
    }
    // The copies go after the other operations' start events, so the peers'
    // transfers overlap them, and before the streams' waits for those
    // transfers.
    auto copies = [&]() { return copySelfPairs(tasks, pairs); };
    s = rest.empty() ? copies() : launchOnDevice(rest, copies);
  }
  Status restored = runtime_->setDevice(callerDevice);
  return s != ncclSuccess ? s : restored;
}

namespace {

bool overlap(const P2pTask& a, const P2pTask& b) {
  auto x = reinterpret_cast<uintptr_t>(a.buffer);
  auto y = reinterpret_cast<uintptr_t>(b.buffer);
  return a.bytes > 0 && b.bytes > 0 && x < y + b.bytes && y < x + a.bytes;
}

// Whether pair (send s, receive r) may run as a copy beside the group's other
// tasks: its destination touches no other buffer of the group, and its
// source no buffer that another task writes (as the proxy path would, a
// pair whose two buffers are the same range copies nothing).
bool pairStandsAlone(const std::vector<P2pTask>& tasks, size_t s, size_t r) {
  if (overlap(tasks[s], tasks[r]) && tasks[s].buffer != tasks[r].buffer) return false;
  for (size_t j = 0; j < tasks.size(); ++j) {
    if (j == s || j == r) continue;
    if (overlap(tasks[r], tasks[j])) return false;
    if (!tasks[j].isSend && overlap(tasks[s], tasks[j])) return false;
  }
  return true;
}

}  // namespace

// All of the group's self operations become copies, or none: the self
// connection's in-order matching then stays what it would have been. Taken
// only when nothing earlier is unmatched there (equal sequence counters), the
// k-th self send and k-th self receive have equal sizes, no pair touches
// another task's buffers, and the copies never block this thread.
Status P2pEngine::selfPairs(const std::vector<P2pTask>& tasks, std::vector<SelfPair>* pairs) {
  pairs->clear();
  if (!selfCopy_) return ncclSuccess;
  std::vector<size_t> sends, recvs;
  for (size_t i = 0; i < tasks.size(); ++i) {
    if (tasks[i].peer == myRank_) (tasks[i].isSend ? sends : recvs).push_back(i);
  }
  if (sends.empty() || sends.size() != recvs.size()) return ncclSuccess;
  const SendConnection* sc = state_.send[myRank_].get();
  const RecvConnection* rc = state_.recv[myRank_].get();
  if (sc != nullptr && rc != nullptr && sc->nextSeq != rc->nextSeq) return ncclSuccess;
  std::vector<SelfPair> found;
  for (size_t k = 0; k < sends.size(); ++k) {
    const P2pTask& snd = tasks[sends[k]];
    const P2pTask& rcv = tasks[recvs[k]];
    if (snd.bytes != rcv.bytes || !pairStandsAlone(tasks, sends[k], recvs[k])) {
      return ncclSuccess;
    }
    bool async = true;
    if (snd.bytes > 0) FERRY_CHECK(runtime_->copyIsAsync(rcv.buffer, snd.buffer, &async));
    if (!async) return ncclSuccess;
    found.emplace_back(sends[k], recvs[k]);
  }
  *pairs = std::move(found);
  return ncclSuccess;
}

Status P2pEngine::orderAfter(rt::Stream& later, rt::Stream& earlier) {
  std::shared_ptr<rt::Event> mark;
  FERRY_CHECK(newEvent(&mark));
  FERRY_CHECK(mark->record(earlier));
  return later.waitEvent(*mark);
}

// Each pair: the receive's stream waits for the send's stream to reach this
// point (its data is written), copies, and the send's stream waits for the
// copy (its buffer may be reused afterwards). Events only: no proxy, no
// control word, nothing that waits for a peer.
Status P2pEngine::copySelfPairs(const std::vector<P2pTask>& tasks,
                                const std::vector<SelfPair>& pairs) {
  std::vector<void*> handles;
  std::vector<std::unique_ptr<rt::Stream>> streams;
  for (const SelfPair& p : pairs) {
    const P2pTask& snd = tasks[p.first];
    const P2pTask& rcv = tasks[p.second];
    size_t si = 0, ri = 0;
    FERRY_CHECK(streamFor(snd.stream, handles, streams, &si));
    FERRY_CHECK(streamFor(rcv.stream, handles, streams, &ri));
    if (si != ri) FERRY_CHECK(orderAfter(*streams[ri], *streams[si]));
    if (rcv.bytes > 0 && rcv.buffer != snd.buffer) {
      FERRY_CHECK(streams[ri]->copyAsync(rcv.buffer, snd.buffer, rcv.bytes));
    }
    if (si != ri) FERRY_CHECK(orderAfter(*streams[si], *streams[ri]));
    countTask(snd);
    countTask(rcv);
  }
  FERRY_TRACE(kLogP2p, "self: %zu send/receive pairs copied on the receives' streams",
              pairs.size());
  return ncclSuccess;
}

Status P2pEngine::launchOnDevice(const std::vector<P2pTask>& tasks,
                                 const std::function<Status()>& afterPost) {
  std::vector<void*> handles;
  std::vector<std::unique_ptr<rt::Stream>> streams;
  std::vector<std::shared_ptr<rt::Event>> ready;
  std::vector<size_t> streamOf(tasks.size());
  for (size_t i = 0; i < tasks.size(); ++i) {
    FERRY_CHECK(streamFor(tasks[i].stream, handles, streams, &streamOf[i]));
  }
  // Staged sends copy their payload on the user's stream, piece by piece (an
  // event after each). Normally after the receives' readiness (ready events,
  // recvReady writes), so peers may start writing into this rank's receive
  // buffers while it stages; if a receive buffer overlaps a staged send's
  // source, the staging goes first (the peer must not overwrite unread data).
  std::vector<void*> staged(tasks.size(), nullptr);
  std::vector<std::vector<std::shared_ptr<rt::Event>>> pieces(tasks.size());
  if (stageSends_) FERRY_CHECK(takeStaging(tasks, &staged));
  const bool stageFirst = stageSends_ && receivesOverlapStaged(tasks, staged);
  if (stageFirst) FERRY_CHECK(issueStaging(tasks, streams, streamOf, staged, &pieces));
  for (auto& stream : streams) {
    std::shared_ptr<rt::Event> ev;
    FERRY_CHECK(newEvent(&ev));
    FERRY_CHECK(ev->record(*stream));
    ready.push_back(std::move(ev));
  }
  std::vector<std::unique_ptr<P2pOp>> ops;
  for (size_t i = 0; i < tasks.size(); ++i) {
    const P2pTask& t = tasks[i];
    auto op = std::make_unique<P2pOp>();
    op->owner = this;
    op->runtime = runtime_;
    op->buffer = static_cast<char*>(staged[i] != nullptr ? staged[i] : t.buffer);
    op->bytes = t.bytes;
    op->ready = ready[streamOf[i]];
    op->asyncError = asyncError_;
    op->streamWaitsPeer = streamWaitsPeer_;
    op->timeoutNs = opTimeoutNs_;
    if (t.isSend) {
      op->kind = P2pOp::Kind::Send;
      op->send = state_.send[t.peer].get();
      op->seq = op->send->nextSeq++;
    } else {
      op->seq = state_.recv[t.peer]->nextSeq++;
      FERRY_CHECK(makeRecvOp(t, *streams[streamOf[i]], op.get()));
    }
    ops.push_back(std::move(op));
  }
  if (stageSends_ && !stageFirst)
    FERRY_CHECK(issueStaging(tasks, streams, streamOf, staged, &pieces));
  for (size_t i = 0; i < tasks.size(); ++i) {
    if (staged[i] == nullptr) continue;
    P2pOp& op = *ops[i];
    op.staged = std::move(pieces[i]);  // piece 0's event also covers earlier work
    op.stagePiece = stagePieceBytes(op.bytes, stagePiece_);
    op.ready.reset();
  }
  // What the user streams wait for, taken before posting: once posted, an
  // operation belongs to the proxy thread, which frees it when done.
  std::vector<std::pair<uint64_t, bool>> waits;  // (seq + 1, FIFO receive)
  std::vector<P2pOp*> posted;
  for (auto& op : ops) {
    waits.emplace_back(op->seq + 1, op->kind == P2pOp::Kind::Recv && op->mode == RdvMode::Fifo);
    posted.push_back(op.release());
  }
  proxy_->post(std::move(posted));
  if (afterPost) FERRY_CHECK(afterPost());
  // Each user stream waits for its own operations' completion words.
  for (size_t i = 0; i < tasks.size(); ++i) {
    const P2pTask& t = tasks[i];
    rt::Stream& s = *streams[streamOf[i]];
    if (t.isSend) {
      if (staged[i] != nullptr) continue;  // a staged send never waits for its receiver
      SendConnection& c = *state_.send[t.peer];
      FERRY_CHECK(userWait(s, c.ctrl, c.ctrl.ctrl->sendDone, waits[i].first));
    } else {
      RecvConnection& c = *state_.recv[t.peer];
      FERRY_CHECK(userWait(s, c.ctrl, waits[i].second ? c.ctrl.ctrl->fifoDone : c.ctrl.ctrl->zcDone,
                           waits[i].first));
    }
  }
  // Fences: drop the passed ones, then add one per stream after its waits.
  fences_.erase(
      std::remove_if(fences_.begin(), fences_.end(),
                     [](const std::shared_ptr<rt::Event>& e) { return e->query() == ncclSuccess; }),
      fences_.end());
  for (auto& stream : streams) {
    std::shared_ptr<rt::Event> fence;
    FERRY_CHECK(newEvent(&fence));
    FERRY_CHECK(fence->record(*stream));
    fences_.push_back(std::move(fence));
  }
  return ncclSuccess;
}

bool P2pEngine::waitFences(int64_t timeoutMs) {
  auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeoutMs);
  for (auto& fence : fences_) {
    while (fence->query() == ncclInProgress) {
      if (std::chrono::steady_clock::now() > deadline) return false;
      std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
  }
  fences_.clear();
  return true;
}

Status P2pEngine::shutdown(bool abort, int64_t timeoutMs) {
  if (shutDown_) return ncclSuccess;
  shutDown_ = true;
  Status s = proxy_->detach(this, abort, timeoutMs);
  if (s != ncclSuccess || abort) {
    // Nothing of this rank may stay blocked on this communicator's words.
    for (auto& c : state_.send)
      if (c) releaseConnectionWaits(*c);
    for (auto& c : state_.recv)
      if (c) releaseConnectionWaits(*c);
  }
  FERRY_INFO(kLogP2p, "rank %d p2p totals:%s", myRank_, describeCounters().c_str());
  int callerDevice = -1;
  (void)runtime_->currentDevice(&callerDevice);
  (void)runtime_->setDevice(device_);
  for (auto& c : state_.send)
    if (c) (void)c->stream->synchronize();
  for (auto& c : state_.recv)
    if (c) (void)c->stream->synchronize();
  // User streams may still have to run their staging copies and their waits
  // on our words: free neither before they have passed.
  if (waitFences(abort ? 10000 : std::min<int64_t>(timeoutMs, 60000))) {
    staging_->clear();
  } else {
    FERRY_WARN(
        "rank %d: a user stream has not yet passed its wait on this communicator (it is "
        "blocked on other work); keeping its control blocks and staging memory for the life "
        "of the process",
        myRank_);
    struct Remains {
      P2pState state;
      std::unique_ptr<StagingPool> staging;
    };
    static std::mutex graveMu;
    static auto* grave = new std::vector<Remains>();  // deliberately never freed
    std::lock_guard<std::mutex> lock(graveMu);
    grave->push_back(Remains{std::move(state_), std::move(staging_)});
  }
  (void)runtime_->setDevice(callerDevice);
  return s;
}

void P2pEngine::countKernelTasks(const std::vector<P2pTask>& tasks) {
  for (const P2pTask& t : tasks) countTask(t);
}

void P2pEngine::countTask(const P2pTask& t) {
  if (t.peer < 0 || t.peer >= static_cast<int>(state_.send.size())) return;
  ConnectionBase* c = t.isSend ? static_cast<ConnectionBase*>(state_.send[t.peer].get())
                               : static_cast<ConnectionBase*>(state_.recv[t.peer].get());
  if (c == nullptr) return;
  // relaxed: statistics, read without ordering by peerStats/describeCounters.
  c->counters.ops.fetch_add(1, std::memory_order_relaxed);
  c->counters.bytes.fetch_add(t.bytes, std::memory_order_relaxed);
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
    char line[200];
    snprintf(line, sizeof(line),
             " [peer %zu: sent %llu ops %llu B (%llu zero-copy), received %llu ops %llu B]", p,
             s ? static_cast<unsigned long long>(s->counters.ops.load()) : 0ULL,
             s ? static_cast<unsigned long long>(s->counters.bytes.load()) : 0ULL,
             s ? static_cast<unsigned long long>(s->counters.zeroCopyOps.load()) : 0ULL,
             r ? static_cast<unsigned long long>(r->counters.ops.load()) : 0ULL,
             r ? static_cast<unsigned long long>(r->counters.bytes.load()) : 0ULL);
    out += line;
  }
  return out;
}

}  // namespace ferry
