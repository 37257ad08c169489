#include "bootstrap/socket.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <thread>

#include "core/log.h"

namespace ferry::boot {

namespace {

constexpr int64_t kFarFutureMs = INT64_MAX / 4;

// Connect errors that mean "the listener is not there yet / busy": retried.
bool retriable(int err) {
  return err == ECONNREFUSED || err == EAGAIN || err == ETIMEDOUT || err == ECONNRESET ||
         err == EHOSTUNREACH || err == ENETUNREACH || err == EINTR;
}

// Whether a connected TCP socket is connected to itself: a connect to a
// local port nobody listens on can pick that very port as its own ephemeral
// source port, and TCP's simultaneous open then "succeeds" (a retry loop
// waiting for a late listener meets it; CI's SocketTest did, session 28).
bool selfConnected(int fd) {
  sockaddr_storage mine{}, peer{};
  socklen_t mineLen = sizeof(mine), peerLen = sizeof(peer);
  if (getsockname(fd, reinterpret_cast<sockaddr*>(&mine), &mineLen) != 0 ||
      getpeername(fd, reinterpret_cast<sockaddr*>(&peer), &peerLen) != 0 ||
      mine.ss_family != peer.ss_family) {
    return false;
  }
  if (mine.ss_family == AF_INET) {
    const auto* a = reinterpret_cast<const sockaddr_in*>(&mine);
    const auto* b = reinterpret_cast<const sockaddr_in*>(&peer);
    return a->sin_port == b->sin_port && a->sin_addr.s_addr == b->sin_addr.s_addr;
  }
  if (mine.ss_family == AF_INET6) {
    const auto* a = reinterpret_cast<const sockaddr_in6*>(&mine);
    const auto* b = reinterpret_cast<const sockaddr_in6*>(&peer);
    return a->sin6_port == b->sin6_port &&
           memcmp(&a->sin6_addr, &b->sin6_addr, sizeof(a->sin6_addr)) == 0;
  }
  return false;
}

void setNoDelay(int fd) {
  int one = 1;
  // Best effort: bootstrap messages are small and latency-bound.
  (void)setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
}

Status newSocket(int family, int* fd) {
  *fd = ::socket(family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (*fd < 0) FERRY_FAIL(ncclSystemError, "bootstrap: socket() failed: %s", strerror(errno));
  return ncclSuccess;
}

}  // namespace

// ---------------------------------------------------------------- Deadline --

Deadline Deadline::afterMs(int64_t ms) {
  Deadline d;
  if (ms < 0 || ms >= kFarFutureMs) return d;
  d.at_ = Clock::now() + std::chrono::milliseconds(ms);
  return d;
}

int64_t Deadline::remainingMs() const {
  if (at_ == Clock::time_point::max()) return kFarFutureMs;
  auto left = std::chrono::duration_cast<std::chrono::milliseconds>(at_ - Clock::now()).count();
  return std::max<int64_t>(0, left);
}

WaitContext WaitContext::make(int64_t timeoutMs, const std::atomic<bool>* abortFlag) {
  WaitContext w;
  w.deadline = Deadline::afterMs(timeoutMs);
  w.abortFlag = abortFlag;
  w.timeoutMs = timeoutMs;
  return w;
}

Status WaitContext::check(const char* what) const {
  if (aborted()) FERRY_FAIL(ncclInternalError, "bootstrap: aborted while waiting for %s", what);
  if (deadline.expired()) {
    FERRY_FAIL(ncclSystemError, "bootstrap: timed out after %lld ms waiting for %s",
               static_cast<long long>(timeoutMs), what);
  }
  return ncclSuccess;
}

int WaitContext::sliceMs() const {
  return static_cast<int>(std::min<int64_t>(kPollSliceMs, deadline.remainingMs()));
}

Status sleepFor(int64_t ms, const WaitContext& wait, const char* what) {
  Deadline until = Deadline::afterMs(ms);
  while (!until.expired()) {
    FERRY_CHECK(wait.check(what));
    int64_t slice =
        std::min<int64_t>({kPollSliceMs, until.remainingMs(), wait.deadline.remainingMs()});
    std::this_thread::sleep_for(std::chrono::milliseconds(std::max<int64_t>(slice, 1)));
  }
  return wait.check(what);
}

Status waitFd(int fd, short events, const WaitContext& wait, const char* what) {
  for (;;) {
    FERRY_CHECK(wait.check(what));
    pollfd p{fd, events, 0};
    int n = ::poll(&p, 1, wait.sliceMs());
    if (n < 0) {
      if (errno == EINTR) continue;
      FERRY_FAIL(ncclSystemError, "bootstrap: poll failed waiting for %s: %s", what,
                 strerror(errno));
    }
    // Errors and hang-ups count as "ready": the following call reports them.
    if (n > 0 && (p.revents & (events | POLLERR | POLLHUP | POLLNVAL))) return ncclSuccess;
  }
}

// ----------------------------------------------------------- SocketAddress --

bool SocketAddress::fromSockaddr(const sockaddr* sa, socklen_t len, SocketAddress* out) {
  if (sa == nullptr) return false;
  if (sa->sa_family == AF_INET && len >= static_cast<socklen_t>(sizeof(sockaddr_in))) {
    *out = SocketAddress();
    memcpy(&out->storage_, sa, sizeof(sockaddr_in));
    return true;
  }
  if (sa->sa_family == AF_INET6 && len >= static_cast<socklen_t>(sizeof(sockaddr_in6))) {
    *out = SocketAddress();
    memcpy(&out->storage_, sa, sizeof(sockaddr_in6));
    return true;
  }
  return false;
}

SocketAddress SocketAddress::fromIp(int family, const uint8_t* ip, uint16_t port,
                                    uint32_t scopeId) {
  SocketAddress a;
  if (family == AF_INET) {
    auto* in = reinterpret_cast<sockaddr_in*>(&a.storage_);
    in->sin_family = AF_INET;
    in->sin_port = htons(port);
    memcpy(&in->sin_addr, ip, 4);
  } else if (family == AF_INET6) {
    auto* in6 = reinterpret_cast<sockaddr_in6*>(&a.storage_);
    in6->sin6_family = AF_INET6;
    in6->sin6_port = htons(port);
    in6->sin6_scope_id = scopeId;
    memcpy(&in6->sin6_addr, ip, 16);
  }
  return a;
}

Status SocketAddress::parse(const std::string& text, SocketAddress* out) {
  std::string host;
  std::string port;
  if (!text.empty() && text[0] == '[') {
    size_t close = text.find(']');
    if (close == std::string::npos || close + 1 >= text.size() || text[close + 1] != ':') {
      FERRY_FAIL(ncclInvalidArgument, "bootstrap: bad address '%s' (want [v6]:port)", text.c_str());
    }
    host = text.substr(1, close - 1);
    port = text.substr(close + 2);
  } else {
    size_t colon = text.rfind(':');
    if (colon == std::string::npos || text.find(':') != colon) {
      FERRY_FAIL(ncclInvalidArgument, "bootstrap: bad address '%s' (want host:port)", text.c_str());
    }
    host = text.substr(0, colon);
    port = text.substr(colon + 1);
  }
  char* end = nullptr;
  long p = port.empty() ? -1 : strtol(port.c_str(), &end, 10);
  if (host.empty() || p < 0 || p > 65535 || (end && *end != '\0')) {
    FERRY_FAIL(ncclInvalidArgument, "bootstrap: bad host or port in address '%s'", text.c_str());
  }
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_family = AF_UNSPEC;
  addrinfo* res = nullptr;
  int rc = getaddrinfo(host.c_str(), nullptr, &hints, &res);
  if (rc != 0) {
    FERRY_FAIL(ncclInvalidArgument, "bootstrap: cannot resolve '%s': %s", host.c_str(),
               gai_strerror(rc));
  }
  bool found = false;
  for (addrinfo* ai = res; ai != nullptr && !found; ai = ai->ai_next) {
    found = fromSockaddr(ai->ai_addr, ai->ai_addrlen, out);
  }
  freeaddrinfo(res);
  if (!found)
    FERRY_FAIL(ncclInvalidArgument, "bootstrap: no IPv4/IPv6 address for '%s'", host.c_str());
  out->setPort(static_cast<uint16_t>(p));
  return ncclSuccess;
}

uint16_t SocketAddress::port() const {
  if (family() == AF_INET) return ntohs(reinterpret_cast<const sockaddr_in*>(&storage_)->sin_port);
  if (family() == AF_INET6) {
    return ntohs(reinterpret_cast<const sockaddr_in6*>(&storage_)->sin6_port);
  }
  return 0;
}

void SocketAddress::setPort(uint16_t port) {
  if (family() == AF_INET) reinterpret_cast<sockaddr_in*>(&storage_)->sin_port = htons(port);
  if (family() == AF_INET6) reinterpret_cast<sockaddr_in6*>(&storage_)->sin6_port = htons(port);
}

uint32_t SocketAddress::scopeId() const {
  if (family() != AF_INET6) return 0;
  return reinterpret_cast<const sockaddr_in6*>(&storage_)->sin6_scope_id;
}

size_t SocketAddress::ipBytes(uint8_t* out) const {
  if (family() == AF_INET) {
    memcpy(out, &reinterpret_cast<const sockaddr_in*>(&storage_)->sin_addr, 4);
    return 4;
  }
  if (family() == AF_INET6) {
    memcpy(out, &reinterpret_cast<const sockaddr_in6*>(&storage_)->sin6_addr, 16);
    return 16;
  }
  return 0;
}

bool SocketAddress::isLoopback() const {
  uint8_t ip[16];
  size_t n = ipBytes(ip);
  if (n == 4) return ip[0] == 127;
  if (n == 16) {
    static const uint8_t kLoop6[16] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1};
    return memcmp(ip, kLoop6, 16) == 0;
  }
  return false;
}

bool SocketAddress::isLinkLocal() const {
  uint8_t ip[16];
  size_t n = ipBytes(ip);
  if (n == 4) return ip[0] == 169 && ip[1] == 254;
  if (n == 16) return ip[0] == 0xfe && (ip[1] & 0xc0) == 0x80;
  return false;
}

socklen_t SocketAddress::length() const {
  if (family() == AF_INET) return sizeof(sockaddr_in);
  if (family() == AF_INET6) return sizeof(sockaddr_in6);
  return 0;
}

std::string SocketAddress::hostString() const {
  char buf[INET6_ADDRSTRLEN + 16] = {0};
  uint8_t ip[16];
  size_t n = ipBytes(ip);
  if (n == 0 || inet_ntop(family(), ip, buf, sizeof(buf)) == nullptr) return "<invalid>";
  std::string s = buf;
  if (family() == AF_INET6 && scopeId() != 0) s += "%" + std::to_string(scopeId());
  return s;
}

std::string SocketAddress::toString() const {
  if (!valid()) return "<invalid>";
  if (family() == AF_INET6) return "[" + hostString() + "]:" + std::to_string(port());
  return hostString() + ":" + std::to_string(port());
}

bool SocketAddress::operator==(const SocketAddress& o) const {
  if (family() != o.family() || port() != o.port() || scopeId() != o.scopeId()) return false;
  uint8_t a[16], b[16];
  size_t n = ipBytes(a);
  return n == o.ipBytes(b) && memcmp(a, b, n) == 0;
}

// ------------------------------------------------------------------ Socket --

Socket& Socket::operator=(Socket&& o) noexcept {
  if (this != &o) {
    close();
    fd_ = o.release();
  }
  return *this;
}

int Socket::release() {
  int fd = fd_;
  fd_ = -1;
  return fd;
}

void Socket::close() {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
}

Status Socket::listen(const SocketAddress& addr, bool reuseAddr, Socket* out) {
  if (!addr.valid()) FERRY_FAIL(ncclInternalError, "bootstrap: listen on an invalid address");
  int fd = -1;
  FERRY_CHECK(newSocket(addr.family(), &fd));
  Socket s(fd);
  if (reuseAddr) {
    int one = 1;
    if (setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) != 0) {
      FERRY_FAIL(ncclSystemError, "bootstrap: SO_REUSEADDR failed: %s", strerror(errno));
    }
  }
  if (::bind(fd, addr.sockaddrPtr(), addr.length()) != 0) {
    FERRY_FAIL(ncclSystemError, "bootstrap: bind to %s failed: %s", addr.toString().c_str(),
               strerror(errno));
  }
  if (::listen(fd, SOMAXCONN) != 0) {
    FERRY_FAIL(ncclSystemError, "bootstrap: listen on %s failed: %s", addr.toString().c_str(),
               strerror(errno));
  }
  *out = std::move(s);
  return ncclSuccess;
}

Status Socket::startConnect(const SocketAddress& addr, Socket* out, bool* inProgress, int* err) {
  int fd = -1;
  FERRY_CHECK(newSocket(addr.family(), &fd));
  Socket s(fd);
  setNoDelay(fd);
  *inProgress = false;
  *err = 0;
  int rc;
  do {
    rc = ::connect(fd, addr.sockaddrPtr(), addr.length());
  } while (rc != 0 && errno == EINTR);
  if (rc != 0) {
    if (errno != EINPROGRESS) {
      *err = errno;
      return ncclSuccess;
    }
    *inProgress = true;
  } else if (selfConnected(fd)) {
    *err = ECONNREFUSED;  // nobody listens there: retried like a refusal
    return ncclSuccess;
  }
  *out = std::move(s);
  return ncclSuccess;
}

bool Socket::retriableConnectError(int err) {
  return retriable(err);
}

int Socket::finishConnect() const {
  int err = 0;
  socklen_t len = sizeof(err);
  if (getsockopt(fd_, SOL_SOCKET, SO_ERROR, &err, &len) != 0) return errno;
  // Connected to itself: nobody listens on that port (see selfConnected).
  if (err == 0 && selfConnected(fd_)) return ECONNREFUSED;
  return err;
}

Status Socket::connect(const SocketAddress& addr, const WaitContext& wait, const char* what,
                       Socket* out) {
  int64_t backoffMs = 5;
  for (int attempt = 0;; ++attempt) {
    FERRY_CHECK(wait.check(what));
    Socket s;
    bool inProgress = false;
    int err = 0;
    FERRY_CHECK(startConnect(addr, &s, &inProgress, &err));
    if (err == 0 && inProgress) {
      FERRY_CHECK(waitFd(s.fd(), POLLOUT, wait, what));
      err = s.finishConnect();
    }
    if (err == 0) {
      *out = std::move(s);
      return ncclSuccess;
    }
    if (!retriable(err)) {
      FERRY_FAIL(ncclSystemError, "bootstrap: connect to %s (%s) failed: %s",
                 addr.toString().c_str(), what, strerror(err));
    }
    if (attempt % 50 == 49) {
      FERRY_INFO(kLogBootstrap, "bootstrap: still retrying connect to %s (%s): %s",
                 addr.toString().c_str(), what, strerror(err));
    }
    FERRY_CHECK(sleepFor(backoffMs, wait, what));
    backoffMs = std::min<int64_t>(backoffMs * 2, 200);
  }
}

Status Socket::tryAccept(Socket* out, bool* got, SocketAddress* peer) const {
  *got = false;
  sockaddr_storage ss{};
  socklen_t len = sizeof(ss);
  int fd = ::accept4(fd_, reinterpret_cast<sockaddr*>(&ss), &len, SOCK_NONBLOCK | SOCK_CLOEXEC);
  if (fd < 0) {
    // Transient conditions (no pending connection, a connection that already
    // died in the queue) are not failures of the listener.
    if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR || errno == ECONNABORTED ||
        errno == EPROTO) {
      return ncclSuccess;
    }
    if (errno == EMFILE || errno == ENFILE) {
      FERRY_WARN("bootstrap: accept: out of file descriptors");
      return ncclSuccess;
    }
    FERRY_FAIL(ncclSystemError, "bootstrap: accept failed: %s", strerror(errno));
  }
  setNoDelay(fd);
  *out = Socket(fd);
  if (peer) (void)SocketAddress::fromSockaddr(reinterpret_cast<sockaddr*>(&ss), len, peer);
  *got = true;
  return ncclSuccess;
}

Status Socket::accept(const WaitContext& wait, const char* what, Socket* out,
                      SocketAddress* peer) const {
  for (;;) {
    bool got = false;
    FERRY_CHECK(tryAccept(out, &got, peer));
    if (got) return ncclSuccess;
    FERRY_CHECK(waitFd(fd_, POLLIN, wait, what));
  }
}

Status Socket::sendSome(const void* data, size_t bytes, size_t* done) const {
  *done = 0;
  if (bytes == 0) return ncclSuccess;
  ssize_t n = ::send(fd_, data, bytes, MSG_NOSIGNAL | MSG_DONTWAIT);
  if (n >= 0) {
    *done = static_cast<size_t>(n);
    return ncclSuccess;
  }
  if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) return ncclSuccess;
  if (errno == EPIPE || errno == ECONNRESET) {
    FERRY_FAIL(ncclRemoteError, "bootstrap: peer closed the connection during send: %s",
               strerror(errno));
  }
  FERRY_FAIL(ncclSystemError, "bootstrap: send failed: %s", strerror(errno));
}

Status Socket::recvSome(void* data, size_t bytes, size_t* done, bool* closed) const {
  *done = 0;
  *closed = false;
  if (bytes == 0) return ncclSuccess;
  ssize_t n = ::recv(fd_, data, bytes, MSG_DONTWAIT);
  if (n > 0) {
    *done = static_cast<size_t>(n);
    return ncclSuccess;
  }
  if (n == 0) {
    *closed = true;
    return ncclSuccess;
  }
  if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) return ncclSuccess;
  if (errno == ECONNRESET) {
    *closed = true;
    return ncclSuccess;
  }
  FERRY_FAIL(ncclSystemError, "bootstrap: recv failed: %s", strerror(errno));
}

Status Socket::sendAll(const void* data, size_t bytes, const WaitContext& wait,
                       const char* what) const {
  const auto* p = static_cast<const uint8_t*>(data);
  size_t off = 0;
  while (off < bytes) {
    size_t n = 0;
    FERRY_CHECK(sendSome(p + off, bytes - off, &n));
    off += n;
    if (off < bytes && n == 0) FERRY_CHECK(waitFd(fd_, POLLOUT, wait, what));
  }
  return ncclSuccess;
}

Status Socket::recvAll(void* data, size_t bytes, const WaitContext& wait, const char* what) const {
  auto* p = static_cast<uint8_t*>(data);
  size_t off = 0;
  while (off < bytes) {
    size_t n = 0;
    bool closed = false;
    FERRY_CHECK(recvSome(p + off, bytes - off, &n, &closed));
    if (closed) {
      FERRY_FAIL(ncclRemoteError,
                 "bootstrap: peer closed the connection after %zu of %zu bytes (%s)", off, bytes,
                 what);
    }
    off += n;
    if (off < bytes && n == 0) FERRY_CHECK(waitFd(fd_, POLLIN, wait, what));
  }
  return ncclSuccess;
}

SocketAddress Socket::localAddress() const {
  sockaddr_storage ss{};
  socklen_t len = sizeof(ss);
  SocketAddress a;
  if (getsockname(fd_, reinterpret_cast<sockaddr*>(&ss), &len) == 0) {
    (void)SocketAddress::fromSockaddr(reinterpret_cast<sockaddr*>(&ss), len, &a);
  }
  return a;
}

}  // namespace ferry::boot
