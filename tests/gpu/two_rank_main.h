// Scaffolding shared by the stand-alone two-GPU test programs that
// ferry-run starts (coll_graph.cu, p2p_lazy.cu): a CHECK that fails the
// process on a non-zero status, this rank from RANK/WORLD_SIZE, and a
// watchdog that turns a hang into a failure the harness reports.
#pragma once

#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <thread>

#define CHECK(x)                                                                 \
  do {                                                                           \
    auto r_ = (x);                                                               \
    if (r_ != 0) {                                                               \
      fprintf(stderr, "FAIL %s:%d %s -> %d\n", __FILE__, __LINE__, #x, (int)r_); \
      exit(1);                                                                   \
    }                                                                            \
  } while (0)

namespace ferry::test {

// This process's rank when ferry-run started exactly two; -1 (with a message)
// otherwise.
inline int twoRankFromEnv() {
  const int rank = atoi(getenv("RANK") ? getenv("RANK") : "-1");
  const int nranks = atoi(getenv("WORLD_SIZE") ? getenv("WORLD_SIZE") : "0");
  if (nranks != 2 || rank < 0 || rank > 1) {
    fprintf(stderr, "run with ferry-run -n 2\n");
    return -1;
  }
  return rank;
}

// Exits the process with `message` unless stop() comes within `seconds`.
class HangWatchdog {
 public:
  HangWatchdog(int seconds, const char* message)
      : thread_([this, seconds, message] {
          for (int i = 0; i < seconds * 10 && !done_.load(); ++i) {
            std::this_thread::sleep_for(std::chrono::milliseconds(100));
          }
          if (!done_.load()) {
            fprintf(stderr, "FAIL: %s\n", message);
            _exit(1);
          }
        }) {}
  HangWatchdog(const HangWatchdog&) = delete;
  HangWatchdog& operator=(const HangWatchdog&) = delete;
  ~HangWatchdog() { stop(); }
  void stop() {
    done_ = true;
    if (thread_.joinable()) thread_.join();
  }

 private:
  std::atomic<bool> done_{false};
  std::thread thread_;
};

}  // namespace ferry::test
