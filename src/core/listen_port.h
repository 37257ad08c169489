// A TCP port for a listener whose address other processes are told before it
// listens (ferry-run's NCCL_COMM_ID, ferry-bench's compare rendezvous).
//
// Why not bind(port 0): the kernel takes those ports from its ephemeral range
// (net.ipv4.ip_local_port_range), the same range it hands to outgoing
// connections, so in the window between picking and listening a busy machine
// (CI runs many multi-process tests at once) can give the port to someone's
// connect() and the listener fails with "Address already in use" (seen once
// in CI, 2026-11-22). Ports below that range are never handed out implicitly:
// pick one at random there and check that it binds now.
//
// Header-only (ferry-bench must not link Ferry). Threading: any thread.
#pragma once

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>

namespace ferry {

// A socket bound to `port` on `addr` (host order), or -1. The caller closes it.
inline int bindPortForCheck(uint32_t addr, int port) {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(addr);
  a.sin_port = htons(static_cast<uint16_t>(port));
  if (bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

// The lowest port of the kernel's ephemeral range (32768 when unreadable).
inline int ephemeralLow() {
  int low = 32768;
  int high = 60999;
  if (FILE* f = fopen("/proc/sys/net/ipv4/ip_local_port_range", "r")) {
    if (fscanf(f, "%d %d", &low, &high) != 2) low = 32768;
    fclose(f);
  }
  return low;
}

// Picks a port on `addr` (host order, e.g. INADDR_LOOPBACK) that binds now
// and lies below the ephemeral range; `avoid` is never returned. When that
// range leaves no room, falls back to a kernel-chosen port. *heldFd (when
// not null) receives the still-bound checking socket, so that a second pick
// cannot return the same port; otherwise it is closed.
inline bool pickListenPort(uint32_t addr, int avoid, int* port, int* heldFd, std::string* error) {
  const int hi = ephemeralLow();
  const int lo = 10000;
  if (hi - lo >= 1000) {
    std::random_device rd;
    std::mt19937 gen(rd() ^ static_cast<unsigned>(getpid()));
    std::uniform_int_distribution<int> dist(lo, hi - 1);
    for (int attempt = 0; attempt < 200; ++attempt) {
      const int p = dist(gen);
      if (p == avoid) continue;
      const int fd = bindPortForCheck(addr, p);
      if (fd < 0) continue;
      *port = p;
      if (heldFd != nullptr) {
        *heldFd = fd;
      } else {
        close(fd);
      }
      return true;
    }
  }
  const int fd = bindPortForCheck(addr, 0);
  sockaddr_in a{};
  socklen_t len = sizeof(a);
  if (fd < 0 || getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) != 0) {
    *error = std::string("cannot find a free port: ") + strerror(errno);
    if (fd >= 0) close(fd);
    return false;
  }
  *port = ntohs(a.sin_port);
  if (heldFd != nullptr) {
    *heldFd = fd;
  } else {
    close(fd);
  }
  return true;
}

}  // namespace ferry
