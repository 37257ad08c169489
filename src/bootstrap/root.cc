#include "bootstrap/root.h"

#include <poll.h>
#include <pthread.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "bootstrap/frame_reader.h"
#include "bootstrap/wire.h"
#include "core/log.h"

namespace ferry::boot {

namespace {

// A stranger gets this long to deliver a whole hello (capped by the root's
// own deadline), so it cannot hold a slot for long.
constexpr int64_t kHelloDeadlineMs = 5000;
// Unidentified connections held at once; more are closed at accept.
constexpr size_t kMaxPending = 1024;

class RootServer {
 public:
  RootServer(Socket listen, uint64_t magic, int64_t timeoutMs)
      : listen_(std::move(listen)),
        magic_(magic),
        timeoutMs_(timeoutMs),
        deadline_(Deadline::afterMs(timeoutMs)) {}

  // The thread body; returns when done, timed out or asked to stop.
  void run(const std::atomic<bool>* stop);

 private:
  struct Conn {
    Socket sock;
    FrameReader reader;
    Deadline deadline;  // for the hello; unused once registered
    SocketAddress from;
    int rank = -1;  // >= 0 once registered
  };

  void acceptAll();
  void serviceConn(Conn& c);
  void handleHello(Conn& c);
  void unregister(Conn& c);
  void dropExpired();
  void replyAll(const std::atomic<bool>* stop);
  void warnMissing() const;

  Socket listen_;
  uint64_t magic_;
  int64_t timeoutMs_;
  Deadline deadline_;
  std::vector<std::unique_ptr<Conn>> conns_;
  uint32_t nranks_ = 0;  // 0 until the first valid hello
  std::vector<SocketAddress> addrs_;
  std::vector<Conn*> byRank_;
  uint32_t arrived_ = 0;
};

void RootServer::acceptAll() {
  for (int k = 0; k < 64; ++k) {
    auto c = std::make_unique<Conn>(
        Conn{Socket(), FrameReader(magic_, kMaxControlPayload), Deadline(), SocketAddress(), -1});
    bool got = false;
    if (listen_.tryAccept(&c->sock, &got, &c->from) != ncclSuccess || !got) return;
    size_t pending = conns_.size() - arrived_;
    if (pending >= kMaxPending) {
      FERRY_WARN("bootstrap root: too many unidentified connections; dropping one from %s",
                 c->from.toString().c_str());
      continue;
    }
    c->deadline = Deadline::afterMs(kHelloDeadlineMs).min(deadline_);
    conns_.push_back(std::move(c));
  }
}

void RootServer::unregister(Conn& c) {
  if (c.rank >= 0) {
    byRank_[c.rank] = nullptr;
    --arrived_;
    c.rank = -1;
  }
  c.sock.close();
}

void RootServer::handleHello(Conn& c) {
  const FrameHeader& h = c.reader.header();
  RootHello hello;
  std::string why;
  if (h.type != FrameType::kRootHello)
    why = "not a root hello";
  else if (decodeRootHello(c.reader.payload().data(), c.reader.payload().size(), &hello, &why) !=
           ncclSuccess) {
    // why is set by the decoder
  } else if (h.srcRank != hello.rank) {
    why = "frame rank differs from hello rank";
  }
  if (why.empty() && arrived_ > 0 && hello.nranks != nranks_) {
    why = "nranks " + std::to_string(hello.nranks) + " differs from " + std::to_string(nranks_);
  }
  if (why.empty() && arrived_ > 0 && byRank_[hello.rank] != nullptr) why = "duplicate rank";
  if (!why.empty()) {
    FERRY_WARN("bootstrap root: rejecting hello from %s (rank %u): %s", c.from.toString().c_str(),
               h.srcRank, why.c_str());
    c.sock.close();
    return;
  }
  if (arrived_ == 0 && nranks_ != hello.nranks) {
    nranks_ = hello.nranks;
    addrs_.assign(nranks_, SocketAddress());
    byRank_.assign(nranks_, nullptr);
  }
  c.rank = static_cast<int>(hello.rank);
  byRank_[c.rank] = &c;
  addrs_[c.rank] = hello.listen;
  ++arrived_;
  FERRY_TRACE(kLogBootstrap, "bootstrap root: rank %d/%u at %s", c.rank, nranks_,
              hello.listen.toString().c_str());
}

void RootServer::serviceConn(Conn& c) {
  if (c.rank >= 0) {
    // A registered rank only waits; input means it left or misbehaves.
    uint8_t b;
    size_t got = 0;
    bool closed = false;
    Status st = c.sock.recvSome(&b, 1, &got, &closed);
    if (st != ncclSuccess || closed || got > 0) {
      FERRY_WARN("bootstrap root: rank %d %s before the ring was formed; unregistering it", c.rank,
                 got > 0 ? "sent unexpected bytes" : "disconnected");
      unregister(c);
    }
    return;
  }
  std::string why;
  switch (c.reader.pump(c.sock, &why)) {
    case FrameReader::Result::kNeedMore:
      return;
    case FrameReader::Result::kFrame:
      handleHello(c);
      return;
    case FrameReader::Result::kClosed:
      FERRY_WARN("bootstrap root: connection from %s closed before a whole hello",
                 c.from.toString().c_str());
      break;
    case FrameReader::Result::kBad:
      FERRY_WARN("bootstrap root: dropping connection from %s: %s", c.from.toString().c_str(),
                 why.c_str());
      break;
  }
  c.sock.close();
}

void RootServer::dropExpired() {
  for (auto& c : conns_) {
    if (c->sock.valid() && c->rank < 0 && c->deadline.expired()) {
      FERRY_WARN("bootstrap root: no whole hello from %s in time; dropping it",
                 c->from.toString().c_str());
      c->sock.close();
    }
  }
  conns_.erase(std::remove_if(conns_.begin(), conns_.end(),
                              [](const std::unique_ptr<Conn>& c) { return !c->sock.valid(); }),
               conns_.end());
}

void RootServer::warnMissing() const {
  std::string missing;
  int listed = 0;
  for (uint32_t r = 0; r < nranks_ && listed < 32; ++r) {
    if (byRank_[r] == nullptr) {
      missing += (listed ? "," : "") + std::to_string(r);
      ++listed;
    }
  }
  FERRY_WARN("bootstrap root: timed out after %lld ms: %u of %u ranks arrived%s%s%s",
             static_cast<long long>(timeoutMs_), arrived_, nranks_,
             nranks_ ? "; missing ranks: " : " (no valid hello at all)", missing.c_str(),
             nranks_ - arrived_ > static_cast<uint32_t>(listed) ? ",..." : "");
}

void RootServer::replyAll(const std::atomic<bool>* stop) {
  // The replies are tiny and go to fresh connections, so these sends complete
  // at once; the wait only bounds a pathological peer.
  WaitContext wait;
  wait.deadline = deadline_;
  wait.abortFlag = stop;
  wait.timeoutMs = timeoutMs_;
  for (uint32_t r = 0; r < nranks_; ++r) {
    RootReply reply;
    reply.successorRank = (r + 1) % nranks_;
    reply.successor = addrs_[reply.successorRank];
    auto frame = encodeFrame(magic_, FrameType::kRootReply, 0, 0, encodeRootReply(reply));
    if (byRank_[r]->sock.sendAll(frame.data(), frame.size(), wait, "sending a root reply") !=
        ncclSuccess) {
      FERRY_WARN("bootstrap root: could not send rank %u its successor", r);
    }
  }
}

void RootServer::run(const std::atomic<bool>* stop) {
  auto t0 = Clock::now();
  std::vector<pollfd> fds;
  for (;;) {
    // stop is published by the registry (relaxed: a request, carries no data).
    if (stop->load(std::memory_order_relaxed)) {
      FERRY_INFO(kLogBootstrap, "bootstrap root: stopping on request (%u of %u ranks arrived)",
                 arrived_, nranks_);
      return;
    }
    if (deadline_.expired()) {
      warnMissing();
      return;
    }
    fds.assign(1, pollfd{listen_.fd(), POLLIN, 0});
    for (auto& c : conns_) fds.push_back(pollfd{c->sock.fd(), POLLIN, 0});
    int slice = static_cast<int>(std::min<int64_t>(kPollSliceMs, deadline_.remainingMs()));
    int n = ::poll(fds.data(), fds.size(), slice);
    if (n < 0 && errno != EINTR) {
      FERRY_WARN("bootstrap root: poll failed: %s", strerror(errno));
      return;
    }
    // Service the connections first: acceptAll may grow conns_ past fds.
    for (size_t i = 1; n > 0 && i < fds.size(); ++i) {
      if (fds[i].revents != 0) serviceConn(*conns_[i - 1]);
    }
    // A rank registered in this round may sit at the end; unregistered and
    // closed ones are erased here, registered ones keep their sockets.
    if (n > 0 && fds[0].revents != 0) acceptAll();
    dropExpired();
    if (nranks_ > 0 && arrived_ == nranks_) {
      replyAll(stop);
      auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - t0).count();
      FERRY_INFO(kLogBootstrap, "bootstrap root: served %u ranks in %lld ms", nranks_,
                 static_cast<long long>(ms));
      return;
    }
  }
}

// ------------------------------------------------------------------ registry --

struct RootEntry {
  std::unique_ptr<RootServer> server;
  std::thread thread;
  std::atomic<bool> stop{false};
  std::atomic<bool> done{false};
};

class RootRegistry {
 public:
  static RootRegistry& get() {
    // Leaked on purpose: the atexit handler below must find it alive.
    static RootRegistry* registry = new RootRegistry();
    return *registry;
  }

  Status start(Socket listen, uint64_t magic, int64_t timeoutMs) {
    auto entry = std::make_unique<RootEntry>();
    entry->server = std::make_unique<RootServer>(std::move(listen), magic, timeoutMs);
    RootEntry* e = entry.get();
    std::lock_guard<std::mutex> lock(mu_);
    try {
      e->thread = std::thread([e] {
        e->server->run(&e->stop);
        e->server.reset();  // close every socket before we count as done
        // Publishes "finished, join will not block" to joinFinished (acquire).
        e->done.store(true, std::memory_order_release);
      });
    } catch (const std::exception& ex) {
      FERRY_FAIL(ncclSystemError, "bootstrap: cannot start the root thread: %s", ex.what());
    }
    entries_.push_back(std::move(entry));
    return ncclSuccess;
  }

  void joinFinished() {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto& e : entries_) {
      // acquire pairs with the thread's release store of done.
      if (e->done.load(std::memory_order_acquire) && e->thread.joinable()) e->thread.join();
    }
    eraseJoined();
  }

  void stopAll() {
    std::lock_guard<std::mutex> lock(mu_);
    // relaxed: stop is a request; join below provides the synchronisation.
    for (auto& e : entries_) e->stop.store(true, std::memory_order_relaxed);
    for (auto& e : entries_) {
      if (e->thread.joinable()) e->thread.join();
    }
    eraseJoined();
  }

  size_t live() {
    std::lock_guard<std::mutex> lock(mu_);
    return entries_.size();
  }

 private:
  RootRegistry() {
    std::atexit([] { RootRegistry::get().stopAll(); });
    registerLoggerForkHandlers();  // before ours: see log.h
    pthread_atfork([] { RootRegistry::get().mu_.lock(); }, [] { RootRegistry::get().mu_.unlock(); },
                   [] { RootRegistry::get().forgetInChild(); });
  }

  void eraseJoined() {
    entries_.erase(
        std::remove_if(entries_.begin(), entries_.end(),
                       [](const std::unique_ptr<RootEntry>& e) { return !e->thread.joinable(); }),
        entries_.end());
  }

  // In a fork() child the root threads do not exist and their objects may be
  // mid-update: leak them untouched (no join, no destructor), then unlock.
  void forgetInChild() {
    for (auto& e : entries_) (void)e.release();
    entries_.clear();
    mu_.unlock();
  }

  std::mutex mu_;
  std::vector<std::unique_ptr<RootEntry>> entries_;
};

}  // namespace

Status startRoot(Socket listen, uint64_t magic, int64_t timeoutMs) {
  return RootRegistry::get().start(std::move(listen), magic, timeoutMs);
}

void joinFinishedRoots() {
  RootRegistry::get().joinFinished();
}

size_t liveRootCount() {
  return RootRegistry::get().live();
}

}  // namespace ferry::boot
