// A hint to the CPU that the caller is spinning on memory another thread
// writes: it yields the pipeline to a hyper-thread sibling and saves power,
// without giving up the core (a syscall would cost more than the wait).
#pragma once

#include <thread>

namespace ferry {

inline void cpuRelax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield" ::: "memory");
#else
  std::this_thread::yield();
#endif
}

}  // namespace ferry
