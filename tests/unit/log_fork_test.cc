// fork() while another thread is logging: the child must still be able to
// log. Before the logger had fork handlers, a child forked while the logger's
// mutex was held inherited it locked and hung in its first log call (the
// bootstrap.root_attack.n4 CI flake: ranks forked while the root WARNed).
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <string>
#include <thread>

#include "common/env_guard.h"
#include "core/log.h"

namespace {

using ferry::test::EnvGuard;

// Re-reads the logger settings when the test ends, after its EnvGuards
// (declared later, destroyed first) restored the environment.
struct ReloadLogAtEnd {
  ~ReloadLogAtEnd() { ferry::reloadLogConfig(); }
};

// Waits up to `seconds` for the child; kills it and returns -1 if it hangs.
int waitChild(pid_t pid, int seconds) {
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(seconds);
  while (std::chrono::steady_clock::now() < deadline) {
    int status = 0;
    pid_t got = waitpid(pid, &status, WNOHANG);
    if (got == pid) return WIFEXITED(status) ? WEXITSTATUS(status) : 128;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  kill(pid, SIGKILL);
  waitpid(pid, nullptr, 0);
  return -1;
}

}  // namespace

TEST(LogFork, ChildLogsWhileParentThreadLogs) {
  // Printing WARN lines (to /dev/null) keeps the mutex held for a write and a
  // flush, so a fork lands inside the critical section most of the time.
  ReloadLogAtEnd reload;
  EnvGuard level("NCCL_DEBUG", "WARN");
  EnvGuard file("NCCL_DEBUG_FILE", "/dev/null");
  ferry::reloadLogConfig();

  std::atomic<bool> stop{false};
  std::atomic<long> lines{0};
  std::thread chatter([&] {
    // relaxed: stop is a request polled in a loop; join orders the rest.
    while (!stop.load(std::memory_order_relaxed)) {
      FERRY_WARN("chatter %ld", lines.fetch_add(1, std::memory_order_relaxed));
    }
  });
  while (lines.load(std::memory_order_relaxed) < 100) std::this_thread::yield();

  int hung = 0;
  int failed = 0;
  constexpr int kForks = 200;
  for (int i = 0; i < kForks; ++i) {
    pid_t pid = fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      FERRY_WARN("child %d", i);
      _exit(ferry::lastWarning() == "child " + std::to_string(i) ? 0 : 3);
    }
    int rc = waitChild(pid, 5);
    if (rc == -1) ++hung;
    if (rc > 0) ++failed;
    if (hung + failed > 0) break;  // one is proof enough; do not wait 200 times
  }
  stop.store(true, std::memory_order_relaxed);
  chatter.join();
  EXPECT_EQ(hung, 0) << "a child hung in its first log call";
  EXPECT_EQ(failed, 0);
}
