// The one steady clock reading the library uses for deadlines, spin
// windows, CPU profiles and TRACE timelines ("t=... us" lines of different
// threads and processes on one machine compare directly).
#pragma once

#include <chrono>
#include <cstdint>

namespace ferry {

inline int64_t steadyNowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// For TRACE lines: whole microseconds.
inline long long traceNowUs() {
  return static_cast<long long>(steadyNowNs() / 1000);
}

}  // namespace ferry
