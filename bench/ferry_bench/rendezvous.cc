#include "ferry_bench/rendezvous.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <thread>

#include "core/listen_port.h"

namespace ferry::bench {
namespace {

using Clock = std::chrono::steady_clock;

int msLeft(Clock::time_point deadline) {
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
  return left.count() > 0 ? static_cast<int>(left.count()) : 0;
}

// Waits until fd is readable (POLLIN) or writable (POLLOUT), or the deadline.
bool waitFd(int fd, short events, Clock::time_point deadline, std::string* error) {
  for (;;) {
    pollfd p{fd, events, 0};
    const int n = poll(&p, 1, msLeft(deadline));
    if (n > 0) return true;
    if (n == 0) {
      *error = "rendezvous timed out";
      return false;
    }
    if (errno != EINTR) {
      *error = std::string("poll: ") + strerror(errno);
      return false;
    }
  }
}

bool ioAll(int fd, void* buf, size_t len, bool writing, Clock::time_point deadline,
           std::string* error) {
  char* p = static_cast<char*>(buf);
  while (len > 0) {
    if (!waitFd(fd, writing ? POLLOUT : POLLIN, deadline, error)) return false;
    const ssize_t n = writing ? send(fd, p, len, MSG_NOSIGNAL) : recv(fd, p, len, 0);
    if (n == 0) {
      *error = "rendezvous peer closed the connection";
      return false;
    }
    if (n < 0) {
      if (errno == EINTR || errno == EAGAIN) continue;
      *error = std::string(writing ? "send: " : "recv: ") + strerror(errno);
      return false;
    }
    p += n;
    len -= static_cast<size_t>(n);
  }
  return true;
}

bool sendWord(int fd, uint64_t v, Clock::time_point deadline, std::string* error) {
  return ioAll(fd, &v, sizeof(v), true, deadline, error);
}

bool recvWord(int fd, uint64_t* v, Clock::time_point deadline, std::string* error) {
  return ioAll(fd, v, sizeof(*v), false, deadline, error);
}

Clock::time_point after(int seconds) {
  return Clock::now() + std::chrono::seconds(seconds);
}

bool listenOn(int port, Fd* out, std::string* error) {
  Fd fd(socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  const int one = 1;
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_ANY);
  addr.sin_port = htons(static_cast<uint16_t>(port));
  if (fd.get() < 0 || setsockopt(fd.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) != 0 ||
      bind(fd.get(), reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 ||
      listen(fd.get(), 128) != 0) {
    *error = "rendezvous listen on port " + std::to_string(port) + ": " + strerror(errno);
    return false;
  }
  *out = std::move(fd);
  return true;
}

// Connects, retrying while the listener is not up yet, until the deadline.
bool connectTo(const std::string& host, int port, Clock::time_point deadline, Fd* out,
               std::string* error) {
  addrinfo hints{};
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  const int rc = getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &res);
  if (rc != 0) {
    *error = "rendezvous: cannot resolve " + host + ": " + gai_strerror(rc);
    return false;
  }
  sockaddr_in addr;
  memcpy(&addr, res->ai_addr, sizeof(addr));
  freeaddrinfo(res);
  while (msLeft(deadline) > 0) {
    Fd fd(socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
    if (fd.get() >= 0 && connect(fd.get(), reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0) {
      *out = std::move(fd);
      return true;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  *error = "rendezvous: cannot connect to " + host + ":" + std::to_string(port);
  return false;
}

}  // namespace

Fd& Fd::operator=(Fd&& o) noexcept {
  if (this != &o) {
    if (fd_ >= 0) close(fd_);
    fd_ = o.release();
  }
  return *this;
}

Fd::~Fd() {
  if (fd_ >= 0) close(fd_);
}

bool Rendezvous::open(const std::string& host, int port, int rank, int world, int timeoutSec,
                      std::string* error) {
  rank_ = rank;
  world_ = world;
  const Clock::time_point deadline = after(timeoutSec);
  if (world <= 1) return true;
  if (rank != 0) {
    Fd fd;
    if (!connectTo(host, port, deadline, &fd, error) ||
        !sendWord(fd.get(), static_cast<uint64_t>(rank), deadline, error)) {
      return false;
    }
    peers_.push_back(std::move(fd));
    return true;
  }
  Fd listener;
  if (!listenOn(port, &listener, error)) return false;
  peers_.resize(world);
  for (int accepted = 1; accepted < world;) {
    if (!waitFd(listener.get(), POLLIN, deadline, error)) return false;
    Fd fd(accept4(listener.get(), nullptr, nullptr, SOCK_CLOEXEC));
    uint64_t peer = 0;
    if (fd.get() < 0 || !recvWord(fd.get(), &peer, deadline, error)) continue;  // stray connection
    if (peer == 0 || peer >= static_cast<uint64_t>(world) || peers_[peer].get() >= 0) {
      *error = "rendezvous: unexpected rank " + std::to_string(peer);
      return false;
    }
    peers_[peer] = std::move(fd);
    ++accepted;
  }
  return true;
}

bool Rendezvous::broadcast(uint64_t* value, int timeoutSec, std::string* error) {
  const Clock::time_point deadline = after(timeoutSec);
  if (world_ <= 1) return true;
  if (rank_ != 0) return recvWord(peers_[0].get(), value, deadline, error);
  for (int r = 1; r < world_; ++r) {
    if (!sendWord(peers_[r].get(), *value, deadline, error)) return false;
  }
  return true;
}

bool Rendezvous::allMax(uint64_t* value, int timeoutSec, std::string* error) {
  const Clock::time_point deadline = after(timeoutSec);
  if (world_ <= 1) return true;
  if (rank_ != 0) {
    if (!sendWord(peers_[0].get(), *value, deadline, error)) return false;
  } else {
    for (int r = 1; r < world_; ++r) {
      uint64_t v = 0;
      if (!recvWord(peers_[r].get(), &v, deadline, error)) return false;
      if (v > *value) *value = v;
    }
  }
  return broadcast(value, timeoutSec, error);
}

bool pickFreePort(int* port, std::string* error) {
  // Below the ephemeral range, not bind(0): see core/listen_port.h.
  return pickListenPort(INADDR_ANY, -1, port, nullptr, error);
}

}  // namespace ferry::bench
