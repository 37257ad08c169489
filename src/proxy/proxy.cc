#include "proxy/proxy.h"

#include <poll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>

namespace ferry {
namespace {

std::mutex gProxyMu;
std::weak_ptr<Proxy> gProxy;  // guarded by gProxyMu

int64_t nowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

}  // namespace

Status Proxy::acquire(rt::Runtime* runtime, int64_t spinUs, std::shared_ptr<Proxy>* out) {
  std::lock_guard<std::mutex> lock(gProxyMu);
  *out = gProxy.lock();
  if (*out) return ncclSuccess;
  std::shared_ptr<Proxy> p(new Proxy());
  p->spinUs_ = spinUs < 0 ? 0 : spinUs;
  // On GPUs a sleeping proxy is latency on the critical path of every message
  // that was posted early (a receive waiting for its send): sleep briefly.
  // The host runtime runs many ranks on few cores (CI): sleep longer.
  p->maxSleepUs_ = runtime->kind() == rt::RuntimeKind::Cuda ? 20 : 1000;
  rt::Runtime* host = runtime->kind() == rt::RuntimeKind::Host ? runtime : nullptr;
  FERRY_CHECK(RpcServer::create(host, &p->rpc_));
  p->wakeFd_ = UniqueFd(eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
  if (!p->wakeFd_) FERRY_FAIL(ncclSystemError, "eventfd failed: %s", strerror(errno));
  Proxy* raw = p.get();
  p->thread_ = std::thread([raw]() { raw->loop(); });
  FERRY_INFO(kLogProxy, "proxy thread started (rpc %s)", p->rpc_->name().c_str());
  gProxy = p;
  *out = std::move(p);
  return ncclSuccess;
}

Proxy::~Proxy() {
  // Release: the loop's acquire load sees the request and returns.
  stop_.store(true, std::memory_order_release);
  wake();
  if (thread_.joinable()) thread_.join();
  for (P2pOp* op : inbox_) delete op;
  for (ConnectionBase* c : active_) {
    for (P2pOp* op : c->queue) delete op;
    c->queue.clear();
  }
}

void Proxy::wake() {
  uint64_t one = 1;
  ssize_t n = write(wakeFd_.get(), &one, sizeof(one));
  (void)n;  // a full counter already means "wake up"
}

void Proxy::post(std::vector<P2pOp*> ops) {
  if (ops.empty()) return;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (P2pOp* op : ops) {
      auto it = std::find_if(counts_.begin(), counts_.end(),
                             [op](const auto& c) { return c.first == op->owner; });
      if (it == counts_.end()) {
        counts_.emplace_back(op->owner, 1);
      } else {
        ++it->second;
      }
      inbox_.push_back(op);
    }
  }
  wake();
}

size_t Proxy::pendingOps(const void* owner) {
  std::lock_guard<std::mutex> lock(mu_);
  for (const auto& c : counts_) {
    if (c.first == owner) return c.second;
  }
  return 0;
}

Status Proxy::detach(const void* owner, bool abort, int64_t timeoutMs) {
  if (abort) {
    std::lock_guard<std::mutex> lock(mu_);
    dropRequests_.push_back(owner);
  }
  wake();
  int64_t deadline = nowNs() + timeoutMs * 1000000;
  while (pendingOps(owner) > 0) {
    if (nowNs() > deadline) {
      FERRY_FAIL(ncclSystemError,
                 "timed out after %lld ms waiting for %zu point-to-point "
                 "operation(s) to finish",
                 static_cast<long long>(timeoutMs), pendingOps(owner));
    }
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
  return ncclSuccess;
}

void Proxy::takePosted() {
  std::vector<P2pOp*> posted;
  std::vector<const void*> drops;
  {
    std::lock_guard<std::mutex> lock(mu_);
    posted.swap(inbox_);
    drops.swap(dropRequests_);
  }
  for (P2pOp* op : posted) {
    ConnectionBase* conn = op->kind == P2pOp::Kind::Send ? static_cast<ConnectionBase*>(op->send)
                                                         : static_cast<ConnectionBase*>(op->recv);
    conn->queue.push_back(op);
    if (std::find(active_.begin(), active_.end(), conn) == active_.end()) active_.push_back(conn);
  }
  for (const void* owner : drops) dropOwner(owner);
}

// Completion bookkeeping for one finished (or dropped) operation.
static void forget(std::vector<std::pair<const void*, size_t>>& counts, const void* owner) {
  for (auto& c : counts) {
    if (c.first == owner && c.second > 0) --c.second;
  }
}

// Finished (or dropped) operations are counted out last: detach() returns as
// soon as an owner's count reaches zero and its caller then frees the engine
// and its connections, so by then the proxy must hold no pointer to them (the
// connections have left active_, the operations are deleted).
void Proxy::retire(std::vector<P2pOp*>& done) {
  active_.erase(std::remove_if(active_.begin(), active_.end(),
                               [](ConnectionBase* c) { return c->queue.empty(); }),
                active_.end());
  // Deleted before they are counted out: deleting one may return its ready
  // event to its engine's pool, and the engine may be freed once the count is 0.
  std::vector<const void*> owners;
  for (P2pOp* op : done) {
    owners.push_back(op->owner);
    delete op;
  }
  done.clear();
  std::lock_guard<std::mutex> lock(mu_);
  for (const void* owner : owners) forget(counts_, owner);
}

void Proxy::dropOwner(const void* owner) {
  std::vector<P2pOp*> done;
  for (ConnectionBase* conn : active_) {
    bool touched = false;
    for (auto it = conn->queue.begin(); it != conn->queue.end();) {
      if ((*it)->owner != owner) {
        ++it;
        continue;
      }
      touched = true;
      done.push_back(*it);
      it = conn->queue.erase(it);
    }
    if (touched) releaseConnectionWaits(*conn);
  }
  retire(done);
}

void Proxy::failConnection(ConnectionBase& conn, Status s, std::vector<P2pOp*>& done) {
  conn.failed = s;
  FERRY_WARN(
      "point-to-point connection with peer %d failed: %s; failing its %zu pending "
      "operation(s)",
      conn.peer, statusString(s), conn.queue.size());
  releaseConnectionWaits(conn);
  for (P2pOp* op : conn.queue) {
    Status expected = ncclSuccess;
    if (op->asyncError != nullptr) {
      // Release: a user thread reading the async error (acquire) sees it.
      op->asyncError->compare_exchange_strong(expected, s, std::memory_order_release);
    }
    done.push_back(op);
  }
  conn.queue.clear();
}

// An operation waiting on its peer longer than FERRY_P2P_TIMEOUT fails
// (measured from when it reached the head of its connection's queue).
bool Proxy::timedOut(P2pOp& op) {
  if (op.timeoutNs <= 0) return false;
  int64_t now = nowNs();
  if (op.startNs == 0) op.startNs = now;
  if (now - op.startNs <= op.timeoutNs) return false;
  FERRY_WARN(
      "%s peer %d timed out after %lld s (message %llu, %llu bytes): the peer never "
      "posted the matching %s (FERRY_P2P_TIMEOUT)",
      op.kind == P2pOp::Kind::Send ? "send to" : "receive from",
      op.kind == P2pOp::Kind::Send ? op.send->peer : op.recv->peer,
      static_cast<long long>(op.timeoutNs / 1000000000), static_cast<unsigned long long>(op.seq),
      static_cast<unsigned long long>(op.bytes), op.kind == P2pOp::Kind::Send ? "receive" : "send");
  return true;
}

bool Proxy::progressAll() {
  bool any = false;
  std::vector<P2pOp*> done;
  for (ConnectionBase* conn : active_) {
    while (!conn->queue.empty()) {
      P2pOp* op = conn->queue.front();
      bool progressed = false;
      Status s = conn->failed != ncclSuccess ? conn->failed : progressOp(*op, &progressed);
      any = any || progressed;
      if (s == ncclInProgress && !timedOut(*op)) break;
      if (s == ncclInProgress) s = ncclSystemError;
      if (s != ncclSuccess) {
        failConnection(*conn, s, done);
        any = true;
        break;
      }
      conn->queue.pop_front();
      done.push_back(op);
      any = true;
    }
  }
  retire(done);
  return any;
}

void Proxy::sleepUntilWork(int timeoutMs) {
  std::vector<int> fds{wakeFd_.get()};
  rpc_->pollFds(&fds);
  std::vector<pollfd> pfds;
  for (int fd : fds) pfds.push_back(pollfd{fd, POLLIN, 0});
  (void)poll(pfds.data(), pfds.size(), timeoutMs);
  uint64_t drained = 0;
  ssize_t n = read(wakeFd_.get(), &drained, sizeof(drained));
  (void)n;
}

// A dead peer process closes its end of our RPC link: fail its connections
// now rather than waiting for a timeout.
void Proxy::checkPeers() {
  std::vector<P2pOp*> done;
  for (ConnectionBase* conn : active_) {
    if (conn->failed == ncclSuccess && conn->peerLink != nullptr && conn->peerLink->peerClosed()) {
      failConnection(*conn, ncclRemoteError, done);
    }
  }
  retire(done);
}

void Proxy::loop() {
  int64_t lastCheckNs = 0;
  int64_t idleSinceNs = 0;
  int64_t sleepUs = 0;
  // Acquire: pairs with the release store in ~Proxy.
  while (!stop_.load(std::memory_order_acquire)) {
    takePosted();
    rpc_->serve();
    bool progressed = progressAll();
    int64_t t = nowNs();
    if (t - lastCheckNs > 10000000) {  // every 10 ms
      checkPeers();
      lastCheckNs = t;
    }
    if (active_.empty()) {
      sleepUntilWork(50);
      idleSinceNs = 0;
      sleepUs = 0;
      continue;
    }
    if (progressed) {
      idleSinceNs = 0;
      sleepUs = 0;
      continue;
    }
    int64_t now = nowNs();
    if (idleSinceNs == 0) idleSinceNs = now;
    if (now - idleSinceNs < spinUs_ * 1000) continue;  // spin: lowest latency
    // Waiting on peers for a while: back off, doubling from 5 us to the cap.
    sleepUs = sleepUs == 0 ? 5 : std::min<int64_t>(sleepUs * 2, maxSleepUs_);
    std::this_thread::sleep_for(std::chrono::microseconds(sleepUs));
  }
}

}  // namespace ferry
