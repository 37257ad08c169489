// The parents' channel in --compare mode under a launcher: process rank 0
// listens on the launcher's NCCL_COMM_ID port (no library uses it: every
// child gets a fresh port), the others connect. It carries only 8-byte words:
// the port of the next child's bootstrap root, and the children's exit codes
// (a barrier that keeps the ranks in lockstep between libraries).
//
// Every wait has a deadline; a closed peer is an error. One thread.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace ferry::bench {

class Fd {
 public:
  Fd() = default;
  explicit Fd(int fd) : fd_(fd) {}
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  Fd(Fd&& o) noexcept : fd_(o.release()) {}
  Fd& operator=(Fd&& o) noexcept;
  ~Fd();
  int get() const { return fd_; }
  int release() {
    const int fd = fd_;
    fd_ = -1;
    return fd;
  }

 private:
  int fd_ = -1;
};

class Rendezvous {
 public:
  // Connects `world` processes through host:port; rank 0 listens.
  bool open(const std::string& host, int port, int rank, int world, int timeoutSec,
            std::string* error);
  // Rank 0's `value` to every rank.
  bool broadcast(uint64_t* value, int timeoutSec, std::string* error);
  // The largest `value` of all ranks, on every rank.
  bool allMax(uint64_t* value, int timeoutSec, std::string* error);

 private:
  int rank_ = 0;
  int world_ = 1;
  std::vector<Fd> peers_;  // rank 0: one per other rank; others: rank 0 only
};

// A TCP port that was free a moment ago (bound to port 0, then released).
bool pickFreePort(int* port, std::string* error);

}  // namespace ferry::bench
