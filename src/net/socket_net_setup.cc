// Connection set-up of the socket engine: the listener sorting incoming
// sockets into connections (and dropping strangers), and the sender's
// non-blocking connect. Neither ever waits: each call does what the sockets
// allow right now and returns.
#include <poll.h>

#include <algorithm>
#include <cstring>
#include <utility>

#include "core/log.h"
#include "net/socket_net_internal.h"

namespace ferry::net::sock {

namespace {

// Bounds on what strangers can make the listener hold: sockets that have
// not finished their hello, and connections that have not fully arrived.
// Beyond them the oldest entry is dropped.
constexpr size_t kMaxPending = 256;
constexpr size_t kMaxGroups = 64;
// New sockets taken per accept() call, so a flood cannot stall the caller.
constexpr int kMaxAcceptsPerCall = 64;
constexpr int64_t kMaxBackoffMs = 200;

}  // namespace

// -------------------------------------------------------------- ListenComm --

ListenComm::ListenComm(boot::Socket listener, const SocketNetTuning& tuning)
    : listener_(std::move(listener)), tuning_(tuning) {}

Status ListenComm::accept(std::unique_ptr<Comm>* out) {
  out->reset();
  FERRY_CHECK(acceptNew());
  for (size_t i = 0; i < pending_.size();) {
    bool finished = false;
    FERRY_CHECK(pumpOne(pending_[i], &finished));
    if (finished) {
      pending_.erase(pending_.begin() + static_cast<ptrdiff_t>(i));
    } else {
      ++i;
    }
  }
  expire();
  if (!ready_.empty()) {
    *out = std::move(ready_.front());
    ready_.pop_front();
  }
  return ncclSuccess;
}

Status ListenComm::acceptNew() {
  for (int i = 0; i < kMaxAcceptsPerCall; ++i) {
    Pending p;
    bool got = false;
    FERRY_CHECK(listener_.tryAccept(&p.sock, &got, &p.peer));
    if (!got) break;
    if (pending_.size() >= kMaxPending) {
      FERRY_INFO(kLogNet, "net/socket: %zu sockets without a hello; dropping the oldest (%s)",
                 pending_.size(), pending_.front().peer.toString().c_str());
      pending_.erase(pending_.begin());
    }
    p.deadline = boot::Deadline::afterMs(tuning_.helloTimeoutMs);
    pending_.push_back(std::move(p));
  }
  return ncclSuccess;
}

// Reads what the socket has of its hello (never more than the hello: the
// bytes after it belong to the connection). *finished when the socket was
// placed in its connection or dropped.
Status ListenComm::pumpOne(Pending& p, bool* finished) {
  *finished = false;
  size_t n = 0;
  int err = 0;
  IoResult r = recvSome(p.sock.fd(), p.hello + p.got, kHelloBytes - p.got, &n, &err);
  if (r == IoResult::kWouldBlock) return ncclSuccess;
  *finished = true;
  if (r != IoResult::kProgress) {
    FERRY_INFO(kLogNet, "net/socket: %s closed after %zu bytes of its hello; dropped",
               p.peer.toString().c_str(), p.got);
    return ncclSuccess;
  }
  p.got += n;
  if (!magicPrefixOk(p.hello, p.got)) {
    FERRY_INFO(kLogNet, "net/socket: %s is not a socket-engine peer (bad magic); dropped",
               p.peer.toString().c_str());
    return ncclSuccess;
  }
  if (p.got < kHelloBytes) {
    *finished = false;
    return ncclSuccess;
  }
  Hello h;
  std::string why;
  if (!decodeHello(p.hello, &h, &why)) {
    FERRY_INFO(kLogNet, "net/socket: bad hello from %s (%s); dropped", p.peer.toString().c_str(),
               why.c_str());
    return ncclSuccess;
  }
  return place(p, h);
}

// Files a greeted socket under its connection; completes the connection
// when it was the last one.
Status ListenComm::place(Pending& p, const Hello& h) {
  auto it = groups_.find(h.connId);
  if (it == groups_.end()) {
    if (groups_.size() >= kMaxGroups) {
      auto oldest = std::min_element(groups_.begin(), groups_.end(), [](auto& a, auto& b) {
        return a.second.order < b.second.order;
      });
      FERRY_WARN("net/socket: too many incomplete connections; dropping the one from %s",
                 oldest->second.peer.toString().c_str());
      groups_.erase(oldest);
    }
    Group g;
    g.first = h;
    g.socks.resize(h.count);
    g.deadline = boot::Deadline::afterMs(tuning_.groupTimeoutMs);
    g.peer = p.peer;
    g.order = groupOrder_++;
    it = groups_.emplace(h.connId, std::move(g)).first;
  }
  Group& g = it->second;
  if (h.count != g.first.count || h.nThreads != g.first.nThreads || g.socks[h.index].valid() ||
      p.peer.hostString() != g.peer.hostString()) {
    FERRY_INFO(kLogNet, "net/socket: hello from %s does not fit connection %llx; dropped",
               p.peer.toString().c_str(), static_cast<unsigned long long>(h.connId));
    return ncclSuccess;
  }
  g.socks[h.index] = std::move(p.sock);
  if (++g.arrived < g.first.count) return ncclSuccess;
  Group done = std::move(g);
  groups_.erase(it);
  return completeGroup(done);
}

Status ListenComm::completeGroup(Group& g) {
  SocketNetLayout layout;
  layout.nThreads = static_cast<int>(g.first.nThreads);
  layout.nSocksPerThread = static_cast<int>((g.first.count - 1) / g.first.nThreads);
  std::vector<boot::Socket> data;
  for (size_t i = 1; i < g.socks.size(); ++i) data.push_back(std::move(g.socks[i]));
  auto comm = std::make_unique<Comm>(false, layout, tuning_.helperSpinUs, std::move(g.socks[0]),
                                     std::move(data), g.peer.toString());
  FERRY_CHECK(comm->start());
  ready_.push_back(std::move(comm));
  return ncclSuccess;
}

void ListenComm::expire() {
  for (size_t i = 0; i < pending_.size();) {
    if (pending_[i].deadline.expired()) {
      FERRY_INFO(kLogNet, "net/socket: %s sent %zu of %zu hello bytes in %lld ms; dropped",
                 pending_[i].peer.toString().c_str(), pending_[i].got, kHelloBytes,
                 static_cast<long long>(tuning_.helloTimeoutMs));
      pending_.erase(pending_.begin() + static_cast<ptrdiff_t>(i));
    } else {
      ++i;
    }
  }
  for (auto it = groups_.begin(); it != groups_.end();) {
    if (it->second.deadline.expired()) {
      FERRY_WARN(
          "net/socket: connection %llx from %s: %u of %u sockets arrived in %lld ms; dropped",
          static_cast<unsigned long long>(it->first), it->second.peer.toString().c_str(),
          it->second.arrived, it->second.first.count,
          static_cast<long long>(tuning_.groupTimeoutMs));
      it = groups_.erase(it);
    } else {
      ++it;
    }
  }
}

// --------------------------------------------------------------- Connector --

Connector::Connector(const boot::SocketAddress& addr, SocketNetLayout layout,
                     const SocketNetTuning& tuning)
    : addr_(addr),
      layout_(layout),
      deadline_(boot::Deadline::afterMs(tuning.connectTimeoutMs)),
      tuning_(tuning) {
  Hello h;
  h.connId = newConnectionId();
  h.count = 1 + static_cast<uint32_t>(layout.nThreads * layout.nSocksPerThread);
  h.nThreads = static_cast<uint32_t>(layout.nThreads);
  slots_.resize(h.count);
  for (uint32_t i = 0; i < h.count; ++i) {
    h.index = i;
    encodeHello(h, slots_[i].hello);
    slots_[i].retryAt = boot::Deadline::afterMs(0);
  }
}

Status Connector::progress(std::unique_ptr<Comm>* out) {
  out->reset();
  for (Slot& s : slots_) {
    if (s.state == State::kIdle && s.retryAt.expired()) FERRY_CHECK(startSlot(s));
  }
  FERRY_CHECK(pollConnecting());
  bool all = true;
  for (Slot& s : slots_) {
    if (s.state == State::kGreeting) FERRY_CHECK(greet(s));
    all = all && s.state == State::kDone;
  }
  if (all) {
    std::vector<boot::Socket> data;
    for (size_t i = 1; i < slots_.size(); ++i) data.push_back(std::move(slots_[i].sock));
    auto comm =
        std::make_unique<Comm>(true, layout_, tuning_.helperSpinUs, std::move(slots_[0].sock),
                               std::move(data), addr_.toString());
    FERRY_CHECK(comm->start());
    *out = std::move(comm);
    return ncclSuccess;
  }
  if (deadline_.expired()) {
    FERRY_FAIL(ncclSystemError, "net/socket: connect to %s did not complete in %lld ms",
               addr_.toString().c_str(), static_cast<long long>(tuning_.connectTimeoutMs));
  }
  return ncclSuccess;
}

Status Connector::startSlot(Slot& s) {
  bool inProgress = false;
  int err = 0;
  FERRY_CHECK(boot::Socket::startConnect(addr_, &s.sock, &inProgress, &err));
  if (err != 0) return retryLater(s, err);
  s.state = inProgress ? State::kConnecting : State::kGreeting;
  return ncclSuccess;
}

// One poll over every socket still connecting; none of them is waited for.
Status Connector::pollConnecting() {
  std::vector<pollfd> pfds;
  std::vector<Slot*> which;
  for (Slot& s : slots_) {
    if (s.state != State::kConnecting) continue;
    pfds.push_back(pollfd{s.sock.fd(), POLLOUT, 0});
    which.push_back(&s);
  }
  if (pfds.empty()) return ncclSuccess;
  int rc = ::poll(pfds.data(), pfds.size(), 0);
  if (rc < 0) {
    if (errno == EINTR) return ncclSuccess;
    FERRY_FAIL(ncclSystemError, "net/socket: poll while connecting failed: %s", strerror(errno));
  }
  for (size_t i = 0; i < pfds.size() && rc > 0; ++i) {
    if (pfds[i].revents == 0) continue;
    int err = which[i]->sock.finishConnect();
    if (err == 0) {
      which[i]->state = State::kGreeting;
    } else {
      FERRY_CHECK(retryLater(*which[i], err));
    }
  }
  return ncclSuccess;
}

Status Connector::greet(Slot& s) {
  size_t n = 0;
  int err = 0;
  IoResult r = sendSome(s.sock.fd(), s.hello + s.sent, kHelloBytes - s.sent, &n, &err);
  if (r == IoResult::kWouldBlock) return ncclSuccess;
  if (r != IoResult::kProgress) {
    FERRY_FAIL(ncclSystemError, "net/socket: sending the hello to %s failed: %s",
               addr_.toString().c_str(), err == 0 ? "connection closed" : strerror(err));
  }
  s.sent += n;
  if (s.sent == kHelloBytes) s.state = State::kDone;
  return ncclSuccess;
}

// A refused or reset attempt is tried again after a short, growing pause
// (the listener may be briefly overloaded); other errors are final.
Status Connector::retryLater(Slot& s, int err) {
  if (!boot::Socket::retriableConnectError(err)) {
    FERRY_FAIL(ncclSystemError, "net/socket: connect to %s failed: %s", addr_.toString().c_str(),
               strerror(err));
  }
  s.sock.close();
  s.state = State::kIdle;
  s.retryAt = boot::Deadline::afterMs(s.backoffMs);
  s.backoffMs = std::min(s.backoffMs * 2, kMaxBackoffMs);
  return ncclSuccess;
}

}  // namespace ferry::net::sock
