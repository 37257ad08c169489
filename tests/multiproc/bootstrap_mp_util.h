// Helpers for the bootstrap multi-process tests: fork-based rank launching
// with a hard deadline, shared memory between ranks, and stranger attacks.
#pragma once

#include <sys/mman.h>
#include <sys/wait.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "bootstrap/bootstrap.h"
#include "bootstrap/socket.h"
#include "bootstrap/wire.h"

namespace ferry::boot::mp {

#define MP_CHECK(cond, ...)                                                                      \
  do {                                                                                           \
    if (!(cond)) {                                                                               \
      fprintf(stderr, "[pid %d] CHECK failed %s:%d: %s: ", getpid(), __FILE__, __LINE__, #cond); \
      fprintf(stderr, __VA_ARGS__);                                                              \
      fprintf(stderr, "\n");                                                                     \
      return 1;                                                                                  \
    }                                                                                            \
  } while (0)

inline int64_t nowMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// State shared by all forked processes (MAP_SHARED before fork).
struct Shared {
  std::atomic<int> barrierCount;
  std::atomic<int> addrsReady;
  std::atomic<int> strangersDone;
  char addrs[16][64];
};

inline Shared* makeShared() {
  void* p =
      mmap(nullptr, sizeof(Shared), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) return nullptr;
  return new (p) Shared{};
}

// Starts fn(i) in a child per entry; returns the pids.
inline std::vector<pid_t> spawn(int count, const std::function<int(int)>& fn) {
  std::vector<pid_t> pids;
  for (int i = 0; i < count; ++i) {
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    if (pid == 0) {
      int rc = fn(i);
      fflush(stdout);
      fflush(stderr);
      _exit(rc);
    }
    pids.push_back(pid);
  }
  return pids;
}

// Waits for every pid up to timeoutMs, then SIGKILLs the rest. Returns the
// exit codes (-1 for killed/signalled).
inline std::vector<int> waitAll(const std::vector<pid_t>& pids, int64_t timeoutMs) {
  std::vector<int> codes(pids.size(), -2);
  int64_t end = nowMs() + timeoutMs;
  size_t left = pids.size();
  while (left > 0 && nowMs() < end) {
    for (size_t i = 0; i < pids.size(); ++i) {
      if (codes[i] != -2) continue;
      int st = 0;
      if (waitpid(pids[i], &st, WNOHANG) == pids[i]) {
        codes[i] = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
        --left;
      }
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  for (size_t i = 0; i < pids.size(); ++i) {
    if (codes[i] == -2) {
      fprintf(stderr, "pid %d did not finish in %lld ms: killing it\n", pids[i],
              static_cast<long long>(timeoutMs));
      kill(pids[i], SIGKILL);
      waitpid(pids[i], nullptr, 0);
      codes[i] = -1;
    }
  }
  return codes;
}

// The three stranger attacks on a listening address. Each returns the open
// socket (the caller keeps it open to hold the "silent" connection).
enum class Attack { kGarbage, kWrongMagic, kHalfMessage, kRightMagicBadHello };

inline Socket attack(const SocketAddress& target, Attack kind, uint64_t magic) {
  Socket s;
  if (Socket::connect(target, WaitContext::make(10000, nullptr), "attack", &s) != ncclSuccess) {
    return s;
  }
  std::vector<uint8_t> bytes;
  switch (kind) {
    case Attack::kGarbage:
      for (int i = 0; i < 300; ++i) bytes.push_back(static_cast<uint8_t>(i * 37 + 11));
      break;
    case Attack::kWrongMagic:
      bytes = encodeFrame(magic ^ 0x5555, FrameType::kRootHello, 0, 0,
                          encodeRootHello(RootHello{0, 2, target}));
      break;
    case Attack::kHalfMessage:
      bytes =
          encodeFrame(magic, FrameType::kRootHello, 0, 0, encodeRootHello(RootHello{0, 2, target}));
      bytes.resize(bytes.size() / 2);
      break;
    case Attack::kRightMagicBadHello:
      bytes = encodeFrame(magic, FrameType::kPeerHello, 1, 0, encodePeerHello(PeerHello{1, 9999}));
      break;
  }
  (void)s.sendAll(bytes.data(), bytes.size(), WaitContext::make(5000, nullptr), "attack");
  return s;
}

// Defined in bootstrap_mp.cc.
Shared* shared();
int expectAll(const std::vector<int>& codes);
int rankMain(const ncclUniqueId& id, int rank, int nranks, const BootstrapOptions& o,
             int64_t maxCreateMs, const std::function<int(Bootstrap&)>& afterCreate);

}  // namespace ferry::boot::mp
