#include "core/unix_socket.h"

#include <errno.h>
#include <poll.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>

#include <algorithm>
#include <chrono>
#include <memory>
#include <cstddef>
#include <thread>

namespace ferry {
namespace {

using Clock = std::chrono::steady_clock;

Clock::time_point deadlineAfter(int64_t timeoutMs) {
  return Clock::now() + std::chrono::milliseconds(std::max<int64_t>(timeoutMs, 0));
}

bool aborted(const std::atomic<bool>* abortFlag) {
  // Acquire: pairs with the release store of whoever requests the abort, so
  // state they wrote before asking is visible to our caller's cleanup.
  return abortFlag != nullptr && abortFlag->load(std::memory_order_acquire);
}

// Waits until `fd` is ready for `events`, the deadline passes or the abort flag
// is set. Readiness on error/hangup is reported as ready: the following
// send/recv call then reports what happened precisely.
Status waitReady(int fd, short events, Clock::time_point deadline,
                 const std::atomic<bool>* abortFlag, const char* what) {
  for (;;) {
    if (aborted(abortFlag)) {
      FERRY_INFO(kLogNet, "unix socket %s on fd %d aborted", what, fd);
      return ncclSystemError;
    }
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
    // An expired deadline still gets one non-blocking look (timeout 0 = try once).
    int sliceMs = static_cast<int>(std::clamp<int64_t>(left.count(), 0, kUnixPollSliceMs));
    pollfd p{fd, events, 0};
    int n = ::poll(&p, 1, sliceMs);
    if (n < 0) {
      if (errno == EINTR) continue;
      FERRY_FAIL(ncclSystemError, "unix socket %s: poll failed: %s", what, strerror(errno));
    }
    if (n > 0) {
      if (p.revents & POLLNVAL) {
        FERRY_FAIL(ncclSystemError, "unix socket %s: fd %d is not open", what, fd);
      }
      return ncclSuccess;
    }
    if (left.count() <= 0) {
      FERRY_FAIL(ncclSystemError, "unix socket %s on fd %d timed out", what, fd);
    }
  }
}

// Spurious readiness (EAGAIN after poll said ready) must not outlive the
// deadline either.
Status checkDeadline(Clock::time_point deadline, const char* what) {
  if (Clock::now() >= deadline) FERRY_FAIL(ncclSystemError, "unix socket %s timed out", what);
  return ncclSuccess;
}

// Fills an abstract-namespace address; returns its length or 0 when invalid.
socklen_t abstractAddress(const std::string& name, sockaddr_un* addr) {
  if (name.empty() || name.size() > kUnixMaxNameLength) return 0;
  memset(addr, 0, sizeof(*addr));
  addr->sun_family = AF_UNIX;
  // sun_path[0] stays NUL: that selects the abstract namespace.
  memcpy(addr->sun_path + 1, name.data(), name.size());
  return static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 + name.size());
}

Status newSocket(UniqueFd* out) {
  int fd = ::socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd < 0) FERRY_FAIL(ncclSystemError, "unix socket: socket() failed: %s", strerror(errno));
  out->reset(fd);
  return ncclSuccess;
}

}  // namespace

Status unixSocketPair(UniqueFd* a, UniqueFd* b) {
  if (a == nullptr || b == nullptr) FERRY_FAIL(ncclInvalidArgument, "unixSocketPair: null output");
  int sv[2];
  if (::socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC | SOCK_NONBLOCK, 0, sv) != 0) {
    FERRY_FAIL(ncclSystemError, "unix socketpair failed: %s", strerror(errno));
  }
  a->reset(sv[0]);
  b->reset(sv[1]);
  return ncclSuccess;
}

Status unixListen(const std::string& name, UniqueFd* out) {
  sockaddr_un addr;
  socklen_t len = abstractAddress(name, &addr);
  if (len == 0 || out == nullptr) {
    FERRY_FAIL(ncclInvalidArgument, "unixListen: bad name '%s' (1..%zu bytes)", name.c_str(),
               kUnixMaxNameLength);
  }
  UniqueFd fd;
  FERRY_CHECK(newSocket(&fd));
  if (::bind(fd.get(), reinterpret_cast<sockaddr*>(&addr), len) != 0) {
    FERRY_FAIL(ncclSystemError, "unix bind to @%s failed: %s", name.c_str(), strerror(errno));
  }
  if (::listen(fd.get(), SOMAXCONN) != 0) {
    FERRY_FAIL(ncclSystemError, "unix listen on @%s failed: %s", name.c_str(), strerror(errno));
  }
  *out = std::move(fd);
  return ncclSuccess;
}

Status unixAccept(int listenFd, UniqueFd* out, int64_t timeoutMs,
                  const std::atomic<bool>* abortFlag) {
  if (out == nullptr) FERRY_FAIL(ncclInvalidArgument, "unixAccept: null output");
  auto deadline = deadlineAfter(timeoutMs);
  for (;;) {
    FERRY_CHECK(waitReady(listenFd, POLLIN, deadline, abortFlag, "accept"));
    int fd = ::accept4(listenFd, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (fd >= 0) {
      out->reset(fd);
      return ncclSuccess;
    }
    if (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK || errno == ECONNABORTED) {
      FERRY_CHECK(checkDeadline(deadline, "accept"));
      continue;
    }
    FERRY_FAIL(ncclSystemError, "unix accept failed: %s", strerror(errno));
  }
}

Status unixConnect(const std::string& name, UniqueFd* out, int64_t timeoutMs,
                   const std::atomic<bool>* abortFlag) {
  sockaddr_un addr;
  socklen_t len = abstractAddress(name, &addr);
  if (len == 0 || out == nullptr) {
    FERRY_FAIL(ncclInvalidArgument, "unixConnect: bad name '%s'", name.c_str());
  }
  auto deadline = deadlineAfter(timeoutMs);
  for (;;) {
    if (aborted(abortFlag)) {
      FERRY_INFO(kLogNet, "unix connect to @%s aborted", name.c_str());
      return ncclSystemError;
    }
    UniqueFd fd;
    FERRY_CHECK(newSocket(&fd));
    int rc;
    do {
      rc = ::connect(fd.get(), reinterpret_cast<sockaddr*>(&addr), len);
    } while (rc != 0 && errno == EINTR);
    if (rc == 0) {
      *out = std::move(fd);
      return ncclSuccess;
    }
    // Unix sockets connect synchronously; EAGAIN means the backlog is full.
    bool retry = errno == ECONNREFUSED || errno == ENOENT || errno == EAGAIN;
    if (!retry) {
      FERRY_FAIL(ncclSystemError, "unix connect to @%s failed: %s", name.c_str(), strerror(errno));
    }
    if (Clock::now() >= deadline) {
      FERRY_FAIL(ncclSystemError, "unix connect to @%s timed out (%s)", name.c_str(),
                 strerror(errno));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
}

Status unixSendMsg(int fd, const void* data, size_t bytes, const int* fds, int numFds,
                   int64_t timeoutMs, const std::atomic<bool>* abortFlag) {
  if (data == nullptr || bytes == 0 || numFds < 0 || numFds > kUnixMaxFds ||
      (numFds > 0 && fds == nullptr)) {
    FERRY_FAIL(ncclInvalidArgument, "unixSendMsg: bad arguments (bytes %zu, fds %d)", bytes,
               numFds);
  }
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * kUnixMaxFds)];
  iovec iov{const_cast<void*>(data), bytes};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  if (numFds > 0) {
    memset(control, 0, sizeof(control));
    msg.msg_control = control;
    msg.msg_controllen = CMSG_SPACE(sizeof(int) * numFds);
    cmsghdr* c = CMSG_FIRSTHDR(&msg);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof(int) * numFds);
    memcpy(CMSG_DATA(c), fds, sizeof(int) * numFds);
  }
  auto deadline = deadlineAfter(timeoutMs);
  for (;;) {
    FERRY_CHECK(waitReady(fd, POLLOUT, deadline, abortFlag, "send"));
    ssize_t n = ::sendmsg(fd, &msg, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n >= 0) {
      // SOCK_SEQPACKET sends atomically: all or nothing.
      if (static_cast<size_t>(n) != bytes) {
        FERRY_FAIL(ncclSystemError, "unix send: short send %zd of %zu", n, bytes);
      }
      return ncclSuccess;
    }
    if (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK) {
      FERRY_CHECK(checkDeadline(deadline, "send"));
      continue;
    }
    if (errno == EPIPE || errno == ECONNRESET) {
      FERRY_FAIL(ncclRemoteError, "unix send: peer closed the connection");
    }
    FERRY_FAIL(ncclSystemError, "unix send failed: %s", strerror(errno));
  }
}

namespace {

// Moves the descriptors of a received control block into `owned` (so that all
// of them get closed on any error path); returns how many there were.
int collectFds(msghdr* msg, UniqueFd* owned, int capacity) {
  int count = 0;
  for (cmsghdr* c = CMSG_FIRSTHDR(msg); c != nullptr; c = CMSG_NXTHDR(msg, c)) {
    if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) continue;
    int n = static_cast<int>((c->cmsg_len - CMSG_LEN(0)) / sizeof(int));
    for (int i = 0; i < n; ++i) {
      int received;
      memcpy(&received, CMSG_DATA(c) + i * sizeof(int), sizeof(int));
      if (count < capacity)
        owned[count] = UniqueFd(received);
      else
        ::close(received);
      ++count;
    }
  }
  return count;
}

}  // namespace

Status unixRecvMsg(int fd, void* data, size_t capacity, size_t* received, UniqueFd* fds, int maxFds,
                   int* numFds, int64_t timeoutMs, const std::atomic<bool>* abortFlag) {
  if (data == nullptr || capacity == 0 || received == nullptr || maxFds < 0 ||
      maxFds > kUnixMaxFds || (maxFds > 0 && (fds == nullptr || numFds == nullptr))) {
    FERRY_FAIL(ncclInvalidArgument, "unixRecvMsg: bad arguments");
  }
  if (numFds != nullptr) *numFds = 0;
  *received = 0;
  // Always room for kUnixMaxFds so that a message with too many descriptors
  // is seen whole and every one of them closed, rather than half-dropped.
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * kUnixMaxFds)];
  auto deadline = deadlineAfter(timeoutMs);
  for (;;) {
    FERRY_CHECK(waitReady(fd, POLLIN, deadline, abortFlag, "recv"));
    iovec iov{data, capacity};
    msghdr msg{};
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control;
    msg.msg_controllen = sizeof(control);
    ssize_t n = ::recvmsg(fd, &msg, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
    if (n < 0) {
      if (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK) {
        FERRY_CHECK(checkDeadline(deadline, "recv"));
        continue;
      }
      if (errno == ECONNRESET) FERRY_FAIL(ncclRemoteError, "unix recv: connection reset by peer");
      FERRY_FAIL(ncclSystemError, "unix recv failed: %s", strerror(errno));
    }
    UniqueFd owned[kUnixMaxFds];
    int count = collectFds(&msg, owned, kUnixMaxFds);
    if (n == 0) FERRY_FAIL(ncclRemoteError, "unix recv: peer closed the connection");
    if (msg.msg_flags & MSG_TRUNC) {
      FERRY_FAIL(ncclRemoteError, "unix recv: message larger than %zu bytes rejected", capacity);
    }
    if ((msg.msg_flags & MSG_CTRUNC) || count > maxFds) {
      FERRY_FAIL(ncclRemoteError, "unix recv: message carried %d+ descriptors, %d accepted", count,
                 maxFds);
    }
    for (int i = 0; i < count; ++i) fds[i] = std::move(owned[i]);
    if (numFds != nullptr) *numFds = count;
    *received = static_cast<size_t>(n);
    return ncclSuccess;
  }
}

Status unixRecvExact(int fd, void* data, size_t bytes, UniqueFd* fds, int maxFds, int* numFds,
                     int64_t timeoutMs, const std::atomic<bool>* abortFlag) {
  // One spare byte tells "longer than expected" apart from "exactly right".
  std::unique_ptr<char[]> buffer(new char[bytes + 1]);
  size_t got = 0;
  FERRY_CHECK(
      unixRecvMsg(fd, buffer.get(), bytes + 1, &got, fds, maxFds, numFds, timeoutMs, abortFlag));
  if (got != bytes) {
    for (int i = 0; numFds != nullptr && i < *numFds; ++i) fds[i].reset();
    if (numFds != nullptr) *numFds = 0;
    FERRY_FAIL(ncclRemoteError, "unix recv: expected a %zu-byte message, got %zu", bytes, got);
  }
  memcpy(data, buffer.get(), bytes);
  return ncclSuccess;
}

}  // namespace ferry
