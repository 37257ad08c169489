// One direction of a socket-engine connection: the request ring, the control
// stream (driven by the proxy thread inside post/test) and the hand-off of
// chunks to the helper threads.
#include <poll.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <cstdarg>
#include <cstdio>
#include <cstring>
#include <utility>

#include "core/clock.h"
#include "core/log.h"
#include "net/socket_net_internal.h"

namespace ferry::net::sock {

Comm::Comm(bool send, SocketNetLayout layout, int64_t helperSpinUs, boot::Socket ctrl,
           std::vector<boot::Socket> data, std::string peer)
    : send_(send),
      layout_(layout),
      helperSpinNs_(helperSpinUs * 1000),
      peer_(std::move(peer)),
      ctrl_(std::move(ctrl)),
      data_(std::move(data)),
      ring_(new Request[kMaxRequests]),
      batches_(static_cast<size_t>(layout.nThreads)) {}

Comm::~Comm() {
  stopWorkers();
}

// Before any socket or request goes: the comm's own helpers stop and join;
// shared ones let go of its lanes (detach returns once the thread no longer
// touches them).
void Comm::stopWorkers() {
  if (pool_ != nullptr) {
    int detached = 0;
    for (auto& lane : lanes_) {
      if (lane->worker == nullptr) continue;
      lane->worker->detach(lane.get());
      ++detached;
    }
    pool_->released(detached);
  }
  for (auto& w : ownWorkers_) w->stop();
  if (workersStarted_) logWorkerStats();
}

// One INFO line per comm that moved data (NET subsystem): per lane, MB
// moved and the longest socket wait; with the comm's own helpers also their
// CPU / busy wall / spin time (the shared helpers log theirs once every
// comm has let go of them: WorkerPool::released).
void Comm::logWorkerStats() const {
  if (!logEnabled(LogLevel::Info, kLogNet)) return;
  std::string line;
  for (size_t i = 0; i < lanes_.size(); ++i) {
    const LaneStats& ls = lanes_[i]->stats;
    char head[96];
    snprintf(head, sizeof(head), " [%zu: %.1f MB, wait %.2f ms on socket %d", i, ls.bytes / 1e6,
             ls.maxSocketWaitNs / 1e6, ls.maxWaitSocket);
    line += head;
    if (i < ownWorkers_.size()) {
      line += ", " + describeWorkerStats(ownWorkers_[i]->stats());
    } else if (lanes_[i]->worker != nullptr) {
      line += ", shared helper " + std::to_string(lanes_[i]->worker->index());
    }
    line += "]";
  }
  FERRY_INFO(kLogNet, "net/socket: %s comm with %s closed; lanes%s", send_ ? "send" : "receive",
             peer_.c_str(), line.c_str());
}

Status Comm::start() {
  const int per = layout_.nSocksPerThread;
  for (int t = 0; t < layout_.nThreads; ++t) {
    std::vector<int> fds;
    for (int s = 0; s < per; ++s) fds.push_back(data_[static_cast<size_t>(t * per + s)].fd());
    lanes_.push_back(std::make_unique<Lane>(this, t, std::move(fds), send_));
  }
  // The helper threads start with the first message (dispatch): a
  // communicator connects to every peer on another host at init, and most
  // pairs of a large job never exchange a byte (trap 34: threads are not
  // cheap in a CUDA process).
  FERRY_INFO(kLogNet,
             "net/socket: %s comm with %s ready: %d lanes x %d sockets (helpers start with the "
             "first message)",
             send_ ? "send" : "recv", peer_.c_str(), layout_.nThreads, layout_.nSocksPerThread);
  return ncclSuccess;
}

// Gives every lane its worker, then attaches them: a worker thread that sees
// one lane may call fail(), which reads every lane's worker pointer.
bool Comm::startWorkers() {
  if (workersStarted_) return true;
  workersStarted_ = true;
  Status s = ncclSuccess;
  for (auto& lane : lanes_) {
    Worker* w = nullptr;
    if (pool_ != nullptr) {
      s = pool_->assign(&w);
    } else {
      ownWorkers_.push_back(std::make_unique<Worker>(lane->index, helperSpinNs_));
      w = ownWorkers_.back().get();
      s = w->open();
    }
    if (s != ncclSuccess) break;
    lane->worker = w;
  }
  for (auto& lane : lanes_) {
    if (lane->worker != nullptr) lane->worker->attach(lane.get());
  }
  for (auto& w : ownWorkers_) {
    if (s == ncclSuccess) s = w->launch();
  }
  if (s != ncclSuccess) {
    fail(ncclSystemError, "net/socket: %s comm with %s: cannot start its helper threads",
         send_ ? "send" : "recv", peer_.c_str());
    return false;
  }
  return true;
}

void Comm::fail(Status s, const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  failWith(s, true, fmt, ap);
  va_end(ap);
}

// A peer closing its end cleanly (at a message boundary) is how a
// communicator's teardown looks from here: the requests fail, the caller
// decides whether that matters, and the log says so at INFO only.
void Comm::closedByPeer(const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  failWith(ncclSystemError, false, fmt, ap);
  va_end(ap);
}

void Comm::failWith(Status s, bool loud, const char* fmt, va_list ap) {
  int expected = 0;
  // acq_rel: the first failure wins and is the one logged; a reader's
  // acquire load sees the code (no other data rides on it).
  if (!failure_.compare_exchange_strong(expected, static_cast<int>(s), std::memory_order_acq_rel)) {
    return;
  }
  char text[512];
  vsnprintf(text, sizeof(text), fmt, ap);
  if (loud) {
    FERRY_WARN("%s", text);
  } else {
    FERRY_INFO(kLogNet, "%s", text);
  }
  // Workers sleeping in poll() must see the failure and abandon their chunks
  // so that every pending request completes.
  for (auto& lane : lanes_) {
    if (lane->worker != nullptr) lane->worker->wake();
  }
}

Status Comm::post(void* data, uint64_t bytes, Request** out) {
  *out = nullptr;
  if (data == nullptr && bytes > 0) {
    FERRY_FAIL(ncclInvalidArgument, "net/socket: %s of %llu bytes from a null buffer",
               send_ ? "isend" : "irecv", static_cast<unsigned long long>(bytes));
  }
  Request& r = slot(posted_);
  if (r.inUse) return ncclSuccess;  // kMaxRequests outstanding: "not now"
  r.comm = this;
  r.inUse = true;
  r.seq = posted_++;
  r.data = static_cast<uint8_t*>(data);
  r.capacity = bytes;
  r.size = send_ ? bytes : 0;
  r.ctrlDone = false;
  r.error = ncclSuccess;
  r.nChunks = 0;
  // Relaxed: no worker holds a chunk of this slot (the previous occupant was
  // reported only after all its chunks settled), so nothing races here; the
  // worker mutex in dispatch() publishes these values.
  r.settled.store(0, std::memory_order_relaxed);
  r.failedChunks.store(0, std::memory_order_relaxed);
  // A send's chunks go out at once; the receiver reads the announcement
  // first and only then the data, so the two streams need no ordering. A
  // small one goes after its announcement on the control stream instead.
  if (send_ && !isInline(bytes)) dispatch(&r);
  progress();
  *out = &r;
  return ncclSuccess;
}

// Hands a request's chunks to the helper threads that own their sockets.
void Comm::dispatch(Request* r) {
  if (failure() != ncclSuccess) return;  // nChunks stays 0: test() reports the failure
  if (!startWorkers()) return;
  const int nData = static_cast<int>(data_.size());
  uint64_t chunk = 0;
  uint32_t n = 0;
  planChunks(r->size, nData, &chunk, &n);
  r->nChunks = n;
  for (uint32_t i = 0; i < n; ++i) {
    int sock = (nextSock_ + static_cast<int>(i)) % nData;
    uint64_t off = chunk * i;
    Task t;
    t.lane = lanes_[static_cast<size_t>(sock / layout_.nSocksPerThread)].get();
    t.req = r;
    t.ptr = r->data + off;
    t.len = std::min(chunk, r->size - off);
    t.sock = sock % layout_.nSocksPerThread;
    batches_[static_cast<size_t>(sock / layout_.nSocksPerThread)].push_back(t);
  }
  nextSock_ = static_cast<int>((static_cast<uint64_t>(nextSock_) + n) % nData);
  FERRY_TRACE(kLogNet, "t=%lld us: net/socket: %s %llu (%llu bytes) to %u helper task(s)",
              traceNowUs(), send_ ? "send" : "receive", static_cast<unsigned long long>(r->seq),
              static_cast<unsigned long long>(r->size), n);
  for (size_t l = 0; l < batches_.size(); ++l) {
    if (!batches_[l].empty()) lanes_[l]->worker->post(&batches_[l]);
  }
}

void Comm::progress() {
  if (failure() != ncclSuccess) return;
  if (send_) {
    progressSendCtrl();
  } else if (!peerClosed_) {
    progressRecvCtrl();
  }
}

// Writes the announcements of posted sends (and the bytes of small ones),
// in order, as far as the socket takes them.
void Comm::progressSendCtrl() {
  while (ctrlSeq_ < posted_) {
    Request& r = slot(ctrlSeq_);
    if (ctrlOff_ == 0) encodeCtrl(static_cast<uint32_t>(r.seq), r.size, ctrlBuf_);
    const uint64_t total = kCtrlBytes + (isInline(r.size) ? r.size : 0);
    const uint8_t* from =
        ctrlOff_ < kCtrlBytes ? ctrlBuf_ + ctrlOff_ : r.data + (ctrlOff_ - kCtrlBytes);
    const uint64_t upTo = ctrlOff_ < kCtrlBytes ? kCtrlBytes : total;
    size_t n = 0;
    int err = 0;
    IoResult res = sendSome(ctrl_.fd(), from, upTo - ctrlOff_, &n, &err);
    if (res == IoResult::kWouldBlock) return;
    if (res != IoResult::kProgress) {
      return fail(ncclSystemError, "net/socket: send to %s failed on the control socket: %s",
                  peer_.c_str(), err == 0 ? "peer closed the connection" : strerror(err));
    }
    ctrlOff_ += n;
    if (ctrlOff_ < total) continue;
    ctrlOff_ = 0;
    r.ctrlDone = true;
    ++ctrlSeq_;
  }
}

// The receiver never writes to the control socket, so anything readable
// there is the peer closing (or resetting) the connection.
void Comm::checkPeerAlive() {
  pollfd p{ctrl_.fd(), POLLIN, 0};
  if (::poll(&p, 1, 0) <= 0 || p.revents == 0) return;
  uint8_t byte = 0;
  ssize_t n = ::recv(ctrl_.fd(), &byte, 1, MSG_PEEK | MSG_DONTWAIT);
  if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) return;
  if (n > 0) {
    return fail(ncclSystemError, "net/socket: protocol error: %s wrote on the control socket",
                peer_.c_str());
  }
  if (n == 0)
    return closedByPeer("net/socket: the receiver %s closed the connection", peer_.c_str());
  fail(ncclSystemError, "net/socket: the receiver %s reset the connection: %s", peer_.c_str(),
       strerror(errno));
}

// Reads the announcements of the messages that match posted receives and
// posts their chunks (or reads a small message's bytes right behind it).
void Comm::progressRecvCtrl() {
  while (ctrlSeq_ < posted_) {
    Request& r = slot(ctrlSeq_);
    if (ctrlOff_ < kCtrlBytes) {
      if (!readAnnouncement(r)) return;
      if (!isInline(r.size)) {
        dispatch(&r);
        finishRecvCtrl(r);
        continue;
      }
    }
    const uint64_t got = ctrlOff_ - kCtrlBytes;
    if (got < r.size) {
      size_t n = 0;
      int err = 0;
      IoResult res = recvSome(ctrl_.fd(), r.data + got, r.size - got, &n, &err);
      if (res == IoResult::kWouldBlock) return;
      if (res != IoResult::kProgress) {
        return fail(ncclSystemError,
                    "net/socket: receive from %s failed on the control socket after %llu of %llu "
                    "bytes of message %llu: %s",
                    peer_.c_str(), static_cast<unsigned long long>(got),
                    static_cast<unsigned long long>(r.size), static_cast<unsigned long long>(r.seq),
                    err == 0 ? "peer closed the connection" : strerror(err));
      }
      ctrlOff_ += n;
      if (ctrlOff_ - kCtrlBytes < r.size) continue;
    }
    finishRecvCtrl(r);
  }
}

// Reads (more of) the announcement of request r's message; true once it is
// whole, valid and fits (r.size set), false to come back later or after a
// failure.
bool Comm::readAnnouncement(Request& r) {
  size_t n = 0;
  int err = 0;
  IoResult res = recvSome(ctrl_.fd(), ctrlBuf_ + ctrlOff_, kCtrlBytes - ctrlOff_, &n, &err);
  if (res == IoResult::kWouldBlock) return false;
  if (res != IoResult::kProgress && err == 0 && ctrlOff_ == 0) {
    // A clean end between messages: the sender left after its last one,
    // whose chunks may still be on their way through the data sockets.
    // Failing the comm here would make the helpers drop them (a ring hop's
    // last slot lost, its kernel waiting forever), so only the receives
    // that no announcement will ever match fail (test()).
    peerClosed_ = true;
    FERRY_INFO(kLogNet,
               "net/socket: %s closed the connection after message %llu; receives posted "
               "beyond it fail",
               peer_.c_str(), static_cast<unsigned long long>(r.seq));
    return false;
  }
  if (res != IoResult::kProgress) {
    fail(ncclSystemError, "net/socket: receive from %s failed on the control socket: %s",
         peer_.c_str(), err == 0 ? "peer closed the connection" : strerror(err));
    return false;
  }
  ctrlOff_ += n;
  if (ctrlOff_ < kCtrlBytes) return false;
  uint32_t seq = 0;
  uint64_t size = 0;
  if (!decodeCtrl(ctrlBuf_, &seq, &size) || seq != static_cast<uint32_t>(r.seq)) {
    fail(ncclSystemError, "net/socket: protocol error from %s: bad announcement for message %llu",
         peer_.c_str(), static_cast<unsigned long long>(r.seq));
    return false;
  }
  if (size > r.capacity) {
    // The message's bytes are already on their way; the stream cannot be
    // resynchronised, so the comm is finished too.
    r.error = ncclInvalidUsage;
    fail(ncclInvalidUsage,
         "net/socket: message %llu from %s has %llu bytes but the receive buffer only %llu",
         static_cast<unsigned long long>(r.seq), peer_.c_str(),
         static_cast<unsigned long long>(size), static_cast<unsigned long long>(r.capacity));
    return false;
  }
  r.size = size;
  return true;
}

void Comm::finishRecvCtrl(Request& r) {
  ctrlOff_ = 0;
  r.ctrlDone = true;
  ++ctrlSeq_;
}

Status Comm::test(Request* r, int* done, size_t* size) {
  *done = 0;
  if (!r->inUse || r->comm != this) {
    FERRY_FAIL(ncclInvalidArgument, "net/socket: test of a request that is not pending");
  }
  progress();
  Status failed = failure();
  if (!send_ && peerClosed_ && !r->ctrlDone && failed == ncclSuccess) {
    // Never announced, and the sender is gone: this receive cannot match.
    r->inUse = false;
    FERRY_INFO(kLogNet, "net/socket: receive %llu from %s failed: the sender closed before it",
               static_cast<unsigned long long>(r->seq), peer_.c_str());
    return ncclSystemError;
  }
  // Acquire: pairs with the workers' release increments; every chunk's bytes
  // are in place (or abandoned for good) once the count is complete.
  if ((!r->ctrlDone && failed == ncclSuccess) ||
      r->settled.load(std::memory_order_acquire) < r->nChunks) {
    // Only a request still waiting needs the peer: a receiver that closed
    // after taking every byte is normal teardown, not a failure to report.
    if (send_ && failed == ncclSuccess) checkPeerAlive();
    return ncclSuccess;
  }
  Status s = r->error;
  // Relaxed: the acquire load of `settled` above already ordered every
  // worker's increment of failedChunks before this read. failure() is read
  // again: a chunk abandoned after the first read implies a failure that
  // the acquire load of `settled` has made visible by now.
  if (s == ncclSuccess && (!r->ctrlDone || r->failedChunks.load(std::memory_order_relaxed) > 0)) {
    s = failure();
  }
  r->inUse = false;
  if (s != ncclSuccess) {
    FERRY_INFO(kLogNet, "net/socket: %s %llu with %s failed: %s", send_ ? "send" : "receive",
               static_cast<unsigned long long>(r->seq), peer_.c_str(), statusString(s));
    return s;
  }
  *done = 1;
  if (size != nullptr) *size = static_cast<size_t>(r->size);
  return ncclSuccess;
}

Status Comm::registerMemory(void* data, size_t size, void** handle) {
  auto region = std::make_unique<MemRegion>();
  region->data = data;
  region->size = size;
  *handle = region.get();
  regions_.push_back(std::move(region));
  return ncclSuccess;
}

Status Comm::deregisterMemory(void* handle) {
  auto it =
      std::find_if(regions_.begin(), regions_.end(),
                   [handle](const std::unique_ptr<MemRegion>& m) { return m.get() == handle; });
  if (it == regions_.end()) {
    FERRY_FAIL(ncclInvalidArgument, "net/socket: deregMr of a handle this comm did not register");
  }
  regions_.erase(it);
  return ncclSuccess;
}

}  // namespace ferry::net::sock
