#include "proxy/proxy.h"

#include <poll.h>
#include <sched.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>

#include "core/clock.h"
#include "enqueue/rendezvous.h"

namespace ferry {
namespace {

constexpr int kNetNapMinUs = 20;
constexpr int kNetNapMaxUs = 200;

std::mutex gProxyMu;
std::weak_ptr<Proxy> gProxy;  // guarded by gProxyMu

// Marks the connection failed for the peer too (first error wins).
void reportToPeer(ConnectionBase& conn, Status s) {
  uint64_t expected = 0;
  // Release: the peer's acquire load of `error` sees a complete report.
  conn.ctrl.ctrl->error.value.compare_exchange_strong(expected, static_cast<uint64_t>(s),
                                                      std::memory_order_release);
}

}  // namespace

void releaseWaits(const P2pWatch& w) {
  MsgSlot& s = slotOf(*w.conn->ctrl.ctrl, w.seq);
  // Release stores; the words are ones only this rank's streams wait on for
  // this message (the peer writes them, or nobody will).
  if (w.waitsDone) s.done.store(kReleased);
  if (w.waitsReady) s.ready.store(kReleased);
}

Status Proxy::acquire(rt::Runtime* runtime, int64_t spinUs, std::shared_ptr<Proxy>* out) {
  std::lock_guard<std::mutex> lock(gProxyMu);
  *out = gProxy.lock();
  // A fork() child inherits its parent's proxy without its thread: its own
  // communicators get a proxy of their own.
  if (*out && (*out)->pid_ == getpid()) return ncclSuccess;
  out->reset();
  std::shared_ptr<Proxy> p(new Proxy());
  p->pid_ = getpid();
  // Process-wide: the first communicator's value; the proxy serves every
  // communicator alike.
  p->spinNs_ = std::clamp<int64_t>(spinUs, 0, 1000000) * 1000;
  rt::Runtime* host = runtime->kind() == rt::RuntimeKind::Host ? runtime : nullptr;
  FERRY_CHECK(RpcServer::create(host, &p->rpc_));
  p->wakeFd_ = UniqueFd(eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
  if (!p->wakeFd_) FERRY_FAIL(ncclSystemError, "eventfd failed: %s", strerror(errno));
  Proxy* raw = p.get();
  p->net_ = std::make_unique<NetProgress>([raw](const NetOp& op) { raw->forget(op.owner); });
  p->thread_ = std::thread([raw]() { raw->loop(); });
  FERRY_INFO(kLogProxy, "proxy thread started (rpc %s)", p->rpc_->name().c_str());
  gProxy = p;
  *out = std::move(p);
  return ncclSuccess;
}

Proxy::~Proxy() {
  if (getpid() != pid_) {
    // A fork() child's copy of its parent's proxy: the thread is not ours
    // (it does not exist here) and cannot be joined; leak its handle.
    (void)new std::thread(std::move(thread_));
    return;
  }
  // Release: the loop's acquire load sees the request and returns.
  stop_.store(true, std::memory_order_release);
  wake();
  if (thread_.joinable()) thread_.join();
}

void Proxy::wake() {
  uint64_t one = 1;
  ssize_t n = write(wakeFd_.get(), &one, sizeof(one));
  (void)n;  // a full counter already means "wake up"
}

void Proxy::count(const void* owner) {
  auto it = std::find_if(counts_.begin(), counts_.end(),
                         [owner](const auto& c) { return c.first == owner; });
  if (it == counts_.end()) {
    counts_.emplace_back(owner, 1);
  } else {
    ++it->second;
  }
}

void Proxy::post(std::vector<P2pWatch> watches) {
  if (watches.empty()) return;
  {
    std::lock_guard<std::mutex> lock(mu_);
    const int64_t now = steadyNowNs();
    for (P2pWatch& w : watches) {
      if (w.postedNs == 0) w.postedNs = now;
      count(w.owner);
      dropIfFailed(w.owner);
      inbox_.push_back(std::move(w));
    }
  }
  // A watch is bookkeeping (completion, peer failure, timeouts of seconds):
  // a thread that looks at its watches every millisecond or steps the
  // network will find it soon enough, and an eventfd write plus the
  // thread's wake-up cost every SM-free launch ~1-2 us. Only the long idle
  // sleep must be cut short. seq_cst: this load follows the push (unlocked
  // above); the loop stores the flag before it checks the inbox under mu_,
  // so one of the two sees the other (loop()).
  if (idleSleep_.load()) wake();
}

// The owner's communicator failed: whatever it posts from now on is dropped
// as soon as the proxy takes it.
void Proxy::dropIfFailed(const void* owner) {
  if (std::find(failedOwners_.begin(), failedOwners_.end(), owner) != failedOwners_.end()) {
    dropRequests_.push_back(owner);
  }
}

void Proxy::failOwner(const void* owner) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (std::find(failedOwners_.begin(), failedOwners_.end(), owner) == failedOwners_.end()) {
      failedOwners_.push_back(owner);
    }
    dropRequests_.push_back(owner);
  }
  wake();
}

void Proxy::addRingHops(const void* owner, std::vector<RingHop*> hops,
                        std::function<void(int, const std::string&)> onFail) {
  if (hops.empty()) return;
  {
    std::lock_guard<std::mutex> lock(hopMu_);
    hopSets_.push_back(HopSet{owner, std::move(hops), std::move(onFail)});
  }
  wake();
}

void Proxy::removeRingHops(const void* owner) {
  // The proxy thread steps hops under hopMu_: once we hold it, it is not
  // inside one of them, and it will not find them again.
  std::lock_guard<std::mutex> lock(hopMu_);
  hopSets_.erase(std::remove_if(hopSets_.begin(), hopSets_.end(),
                                [owner](const HopSet& h) { return h.owner == owner; }),
                 hopSets_.end());
}

bool Proxy::drainRingHops(const void* owner, int64_t timeoutMs) {
  const int64_t deadline = steadyNowNs() + timeoutMs * 1000000;
  for (;;) {
    bool flushed = true;
    {
      std::lock_guard<std::mutex> lock(hopMu_);
      for (const HopSet& set : hopSets_) {
        if (set.owner != owner) continue;
        for (const RingHop* h : set.hops) flushed = flushed && h->flushed();
      }
    }
    if (flushed) return true;
    if (steadyNowNs() > deadline) return false;
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
}

bool Proxy::stepRingHops() {
  std::lock_guard<std::mutex> lock(hopMu_);
  bool moved = false;
  for (HopSet& set : hopSets_) {
    for (RingHop* h : set.hops) {
      Status s = h->step(&moved);
      if (s != ncclSuccess && set.onFail) {
        set.onFail(h->peer,
                   "the collective ring's " + h->describe() + " failed: " + statusString(s));
      }
    }
  }
  return moved;
}

void Proxy::postNet(std::vector<NetOp> ops) {
  if (ops.empty()) return;
  {
    std::lock_guard<std::mutex> lock(mu_);
    const int64_t now = steadyNowNs();
    for (NetOp& op : ops) {
      if (op.postedNs == 0) op.postedNs = now;
      count(op.owner);
      dropIfFailed(op.owner);
      netInbox_.push_back(op);
    }
  }
  wake();
}

bool Proxy::inboxEmpty() {
  std::lock_guard<std::mutex> lock(mu_);
  return inbox_.empty() && netInbox_.empty() && dropRequests_.empty();
}

size_t Proxy::inFlight(const void* owner) {
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
  int64_t deadline = steadyNowNs() + timeoutMs * 1000000;
  while (inFlight(owner) > 0) {
    if (steadyNowNs() > deadline) {
      FERRY_FAIL(ncclSystemError,
                 "timed out after %lld ms waiting for %zu point-to-point message(s) to complete",
                 static_cast<long long>(timeoutMs), inFlight(owner));
    }
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
  {
    // Detached for good: the address may belong to a new owner later.
    std::lock_guard<std::mutex> lock(mu_);
    failedOwners_.erase(std::remove(failedOwners_.begin(), failedOwners_.end(), owner),
                        failedOwners_.end());
  }
  return ncclSuccess;
}

bool Proxy::takePosted() {
  std::vector<P2pWatch> posted;
  std::vector<NetOp> netPosted;
  std::vector<const void*> drops;
  {
    std::lock_guard<std::mutex> lock(mu_);
    posted.swap(inbox_);
    netPosted.swap(netInbox_);
    drops.swap(dropRequests_);
  }
  for (P2pWatch& w : posted) watches_.push_back(std::move(w));
  for (NetOp& op : netPosted) net_->add(op);
  for (const void* owner : drops) dropOwner(owner);
  return !posted.empty() || !netPosted.empty() || !drops.empty();
}

// Counts a finished (or dropped) message out. Last: detach() returns once
// an owner's count is zero, and its caller then frees the engine and its
// connections, so the watch (and its mapping) must be gone by then.
void Proxy::forget(const void* owner) {
  std::lock_guard<std::mutex> lock(mu_);
  for (auto& c : counts_) {
    if (c.first == owner && c.second > 0) --c.second;
  }
}

void Proxy::failConnection(ConnectionBase* conn, Status s) {
  if (conn->failed.load() == ncclSuccess) {
    conn->failed.store(s);
    FERRY_WARN("point-to-point connection with rank %d failed: %s", conn->peer, statusString(s));
  }
  reportToPeer(*conn, s);
  std::vector<P2pWatch> failed;
  auto mine = [conn](const P2pWatch& w) { return w.conn == conn; };
  std::copy_if(watches_.begin(), watches_.end(), std::back_inserter(failed), mine);
  watches_.erase(std::remove_if(watches_.begin(), watches_.end(), mine), watches_.end());
  for (P2pWatch& w : failed) {
    releaseWaits(w);
    Status expected = ncclSuccess;
    // Release: a user thread reading the async error (acquire) sees it.
    if (w.asyncError != nullptr) {
      w.asyncError->compare_exchange_strong(expected, s, std::memory_order_release);
    }
    w.mapping.reset();
    forget(w.owner);
  }
}

void Proxy::dropOwner(const void* owner) {
  std::vector<ConnectionBase*> conns;
  for (const P2pWatch& w : watches_) {
    if (w.owner == owner && std::find(conns.begin(), conns.end(), w.conn) == conns.end()) {
      conns.push_back(w.conn);
    }
  }
  // Aborted with messages in flight: the peer learns it from `error` (or,
  // across hosts, from its closed comm).
  for (ConnectionBase* c : conns) failConnection(c, ncclRemoteError);
  net_->dropOwner(owner);
}

void Proxy::checkWatches(bool checkPeers) {
  const int64_t now = steadyNowNs();
  for (size_t i = 0; i < watches_.size();) {
    P2pWatch& w = watches_[i];
    ConnectionBase* conn = w.conn;
    CtrlBlock& ctrl = *conn->ctrl.ctrl;
    Status fail = conn->failed.load();
    if (fail == ncclSuccess && messageDone(ctrl, w.seq)) {
      w.mapping.reset();
      forget(w.owner);
      watches_.erase(watches_.begin() + static_cast<long>(i));
      continue;
    }
    uint64_t e = ctrl.error.load();
    if (fail == ncclSuccess && e != 0) {
      FERRY_WARN("peer %d reported a failure on this connection: %s", conn->peer,
                 statusString(static_cast<Status>(e)));
      fail = ncclRemoteError;
    }
    if (fail == ncclSuccess && checkPeers && conn->peerLink != nullptr &&
        conn->peerLink->peerClosed()) {
      FERRY_WARN("peer %d's process is gone", conn->peer);
      fail = ncclRemoteError;
    }
    if (fail == ncclSuccess && w.timeoutNs > 0 && now - w.postedNs > w.timeoutNs) {
      FERRY_WARN(
          "%s peer %d timed out after %lld s (message %llu): the peer %s (FERRY_P2P_TIMEOUT)",
          conn->isSend ? "send to" : "receive from", conn->peer,
          static_cast<long long>(w.timeoutNs / 1000000000), static_cast<unsigned long long>(w.seq),
          messageMatched(ctrl, w.seq) ? "never completed it"
                                      : (conn->isSend ? "never posted the matching receive"
                                                      : "never posted the matching send"));
      fail = ncclSystemError;
    }
    if (fail == ncclSuccess) {
      ++i;
      continue;
    }
    failConnection(conn, fail);  // removes every watch of conn
    i = 0;
  }
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

// Sleeps up to napUs in poll() on the eventfd; true when a post or kick()
// wrote it (new work: poll without napping again).
bool Proxy::napOrWake(int napUs) {
  pollfd pfd{wakeFd_.get(), POLLIN, 0};
  const timespec nap{0, static_cast<long>(napUs) * 1000};
  if (ppoll(&pfd, 1, &nap, nullptr) <= 0) return false;
  uint64_t drained = 0;
  ssize_t n = read(wakeFd_.get(), &drained, sizeof(drained));
  (void)n;
  return true;
}

// One pass over network transfers and ring hops across hosts, then the wait
// before the next: none while anything moved within the spin window (as
// NCCL's proxy polls), else a nap that grows from 20 us to 200 us so that a
// long wait does not take a core from the threads doing the work.
void Proxy::pollNetwork(int64_t t, int64_t* lastActiveNs, int* napUs) {
  const bool netMoved = !net_->empty() && net_->step(t);
  if (stepRingHops() || netMoved) {
    *lastActiveNs = t;
    *napUs = kNetNapMinUs;
    return;
  }
  if (t - *lastActiveNs < spinNs_) {
    sched_yield();
    return;
  }
  if (napOrWake(*napUs)) {
    *lastActiveNs = steadyNowNs();
    *napUs = kNetNapMinUs;
  } else {
    *napUs = std::min(*napUs * 2, kNetNapMaxUs);
  }
}

void Proxy::loop() {
  int64_t lastPeerCheckNs = 0;
  int64_t lastActiveNs = steadyNowNs();
  int napUs = kNetNapMinUs;
  // Acquire: pairs with the release store in ~Proxy.
  while (!stop_.load(std::memory_order_acquire)) {
    const bool posted = takePosted();
    rpc_->serve();
    int64_t t = steadyNowNs();
    if (posted) lastActiveNs = t;
    bool peers = t - lastPeerCheckNs > 10000000;  // every 10 ms
    if (peers) lastPeerCheckNs = t;
    checkWatches(peers);
    bool hops = false;
    {
      std::lock_guard<std::mutex> lock(hopMu_);
      hops = !hopSets_.empty();
    }
    if (!net_->empty() || hops) {
      pollNetwork(t, &lastActiveNs, &napUs);
      continue;
    }
    const bool idle = watches_.empty();
    if (idle) {
      idleSleep_.store(true);  // seq_cst; pairs with post()'s load
      if (!inboxEmpty()) {
        idleSleep_.store(false);
        continue;
      }
    }
    sleepUntilWork(idle ? 50 : 1);
    idleSleep_.store(false);
    // Whatever woke the thread (a post, a kick) starts a spin window.
    lastActiveNs = steadyNowNs();
  }
  net_->dropAll();
  for (P2pWatch& w : watches_) w.mapping.reset();
}

}  // namespace ferry
