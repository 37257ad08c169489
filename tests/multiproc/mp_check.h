// Checks shared by the multi-process test programs (plain programs run under
// ferry-run; each rank counts its failures and exits non-zero if any).
#pragma once

#include <atomic>
#include <chrono>
#include <cstdio>

#include "nccl.h"

namespace ferry::test {

inline std::atomic<int> gFailures{0};

using Clock = std::chrono::steady_clock;
inline double secondsSince(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

}  // namespace ferry::test

#define EXPECT_TRUE(cond, ...)                                        \
  do {                                                                \
    if (!(cond)) {                                                    \
      ++::ferry::test::gFailures;                                     \
      fprintf(stderr, "FAIL %s:%d: %s: ", __FILE__, __LINE__, #cond); \
      fprintf(stderr, __VA_ARGS__);                                   \
      fprintf(stderr, "\n");                                          \
    }                                                                 \
  } while (0)

#define EXPECT_OK(call) EXPECT_RESULT(call, ncclSuccess)
#define EXPECT_RESULT(call, want)                                                        \
  do {                                                                                   \
    ncclResult_t r_ = (call);                                                            \
    EXPECT_TRUE(r_ == (want), "%s returned %d (%s), expected %d; last error: %s", #call, \
                static_cast<int>(r_), ncclGetErrorString(r_), static_cast<int>(want),    \
                ncclGetLastError(nullptr));                                              \
  } while (0)
