// TCP building blocks for the bootstrap: addresses, deadlines and an RAII
// socket whose every wait is bounded by a deadline and an abort flag.
//
// Every Socket is non-blocking and close-on-exec; blocking-style helpers
// (sendAll, recvAll, accept, connect) poll in slices of at most 100 ms and
// re-check the abort flag and the deadline between slices. Error mapping:
//   deadline passed          -> ncclSystemError, WARN "timed out ... waiting for <what>"
//   *abortFlag became true   -> ncclInternalError
//   peer closed / reset      -> ncclRemoteError
//   other OS failures        -> ncclSystemError with strerror text
// SIGPIPE is never raised (MSG_NOSIGNAL on every send).
//
// Threading: a Socket is owned and used by one thread at a time; the helpers
// keep no global state.
#pragma once

#include <sys/socket.h>

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>

#include "core/status.h"

namespace ferry::boot {

using Clock = std::chrono::steady_clock;

// Longest single poll() inside any bootstrap wait: bounds the latency of
// noticing an abort flag.
constexpr int kPollSliceMs = 100;

// A point in time after which waits fail. Default-constructed: never expires.
class Deadline {
 public:
  Deadline() = default;
  static Deadline afterMs(int64_t ms);
  bool expired() const { return Clock::now() >= at_; }
  // Milliseconds left, clamped to [0, INT64_MAX/2].
  int64_t remainingMs() const;
  // The earlier of the two deadlines.
  Deadline min(const Deadline& other) const { return at_ <= other.at_ ? *this : other; }

 private:
  Clock::time_point at_ = Clock::time_point::max();
};

// What a wait honours: a deadline and an optional abort flag (read relaxed;
// the flag carries no data, only the request to stop).
struct WaitContext {
  Deadline deadline;
  const std::atomic<bool>* abortFlag = nullptr;
  int64_t timeoutMs = 0;  // the budget the deadline came from, for messages only

  static WaitContext make(int64_t timeoutMs, const std::atomic<bool>* abortFlag);
  bool aborted() const {
    return abortFlag != nullptr && abortFlag->load(std::memory_order_relaxed);
  }
  // Success while neither aborted nor expired; otherwise the mapped error with
  // a WARN naming `what`.
  [[nodiscard]] Status check(const char* what) const;
  // Timeout for the next poll(): min(kPollSliceMs, remaining).
  int sliceMs() const;
};

// Sleeps `ms` in slices, honouring the wait's deadline and abort flag.
[[nodiscard]] Status sleepFor(int64_t ms, const WaitContext& wait, const char* what);

// An IPv4 or IPv6 socket address (sockaddr_storage inside). Value type.
class SocketAddress {
 public:
  SocketAddress() = default;
  // From a kernel sockaddr; false when the family is not AF_INET/AF_INET6.
  static bool fromSockaddr(const sockaddr* sa, socklen_t len, SocketAddress* out);
  // Builds from raw IP bytes (4 for AF_INET, 16 for AF_INET6) and a port.
  static SocketAddress fromIp(int family, const uint8_t* ip, uint16_t port, uint32_t scopeId = 0);
  // "a.b.c.d:port", "[v6]:port", "[v6%scope]:port" or "hostname:port"
  // (resolved with getaddrinfo; the first IPv4/IPv6 result wins).
  [[nodiscard]] static Status parse(const std::string& text, SocketAddress* out);

  bool valid() const { return family() == AF_INET || family() == AF_INET6; }
  int family() const { return storage_.ss_family; }
  uint16_t port() const;
  void setPort(uint16_t port);
  uint32_t scopeId() const;
  // Copies the 4 or 16 IP bytes to `out` (16 bytes room); returns the count.
  size_t ipBytes(uint8_t* out) const;
  bool isLoopback() const;
  bool isLinkLocal() const;
  const sockaddr* sockaddrPtr() const { return reinterpret_cast<const sockaddr*>(&storage_); }
  socklen_t length() const;
  // "a.b.c.d:port" / "[v6]:port"; "<invalid>" when not valid().
  std::string toString() const;
  // Only the host part, without port or brackets.
  std::string hostString() const;

  bool operator==(const SocketAddress& o) const;

 private:
  sockaddr_storage storage_{};
};

// RAII TCP socket. Move-only; the destructor closes the fd.
class Socket {
 public:
  Socket() = default;
  explicit Socket(int fd) : fd_(fd) {}
  ~Socket() { close(); }
  Socket(Socket&& o) noexcept : fd_(o.release()) {}
  Socket& operator=(Socket&& o) noexcept;
  Socket(const Socket&) = delete;
  Socket& operator=(const Socket&) = delete;

  bool valid() const { return fd_ >= 0; }
  int fd() const { return fd_; }
  int release();
  void close();

  // Binds to `addr` (port 0 = ephemeral) and listens with a large backlog.
  // reuseAddr sets SO_REUSEADDR (used for a fixed NCCL_COMM_ID port).
  [[nodiscard]] static Status listen(const SocketAddress& addr, bool reuseAddr, Socket* out);
  // Non-blocking connect, retried with backoff on ECONNREFUSED / EAGAIN /
  // ETIMEDOUT / ECONNRESET until the wait's deadline.
  [[nodiscard]] static Status connect(const SocketAddress& addr, const WaitContext& wait,
                                      const char* what, Socket* out);
  // Starts one non-blocking connect attempt. *err is the connect errno when
  // it failed at once (then *out stays empty); otherwise *inProgress tells
  // whether the caller must poll for POLLOUT and then call finishConnect.
  [[nodiscard]] static Status startConnect(const SocketAddress& addr, Socket* out, bool* inProgress,
                                           int* err);
  // Whether a connect errno means "listener not there yet / busy": retry.
  static bool retriableConnectError(int err);
  // After POLLOUT on a started connect: 0 when connected, else the errno
  // (ECONNREFUSED for a socket that TCP connected to itself: nobody listens).
  int finishConnect() const;

  // Accepts one connection, waiting up to the deadline.
  [[nodiscard]] Status accept(const WaitContext& wait, const char* what, Socket* out,
                              SocketAddress* peer = nullptr) const;
  // Accepts one pending connection if any; *got tells whether it did.
  [[nodiscard]] Status tryAccept(Socket* out, bool* got, SocketAddress* peer = nullptr) const;

  [[nodiscard]] Status sendAll(const void* data, size_t bytes, const WaitContext& wait,
                               const char* what) const;
  [[nodiscard]] Status recvAll(void* data, size_t bytes, const WaitContext& wait,
                               const char* what) const;
  // One non-blocking send / recv. *done gets the byte count (0 when it would
  // block). recvSome sets *closed when the peer has closed its end.
  [[nodiscard]] Status sendSome(const void* data, size_t bytes, size_t* done) const;
  [[nodiscard]] Status recvSome(void* data, size_t bytes, size_t* done, bool* closed) const;

  SocketAddress localAddress() const;

 private:
  int fd_ = -1;
};

// Waits until `fd` reports one of `events` (POLLIN/POLLOUT), honouring the wait.
[[nodiscard]] Status waitFd(int fd, short events, const WaitContext& wait, const char* what);

}  // namespace ferry::boot
