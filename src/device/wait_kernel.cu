#include "device/wait_kernel.h"

#include <cstdio>

namespace ferry::device {
namespace {

// ld.acquire.sys (sm_70+): the writer may be a CPU or another GPU's copy
// engine, so the scope must be the whole system. Generic addressing: the word
// may be device memory or mapped host memory.
__device__ __forceinline__ uint64_t loadAcquireSystem(const volatile uint64_t* p) {
  uint64_t v;
  asm volatile("ld.acquire.sys.u64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
  return v;
}

// Nanoseconds of the GPU's global timer (same clock on every SM).
__device__ __forceinline__ uint64_t globalTimerNs() {
  uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

// Spins until the cyclic >= holds; traps after timeoutNs (0: never).
__device__ void spinUntilGeq(const volatile uint64_t* word, uint64_t target, uint64_t timeoutNs) {
  constexpr unsigned kMaxNapNs = 1024;
  unsigned nap = 32;
  const uint64_t start = globalTimerNs();
  for (;;) {
    uint64_t v = loadAcquireSystem(word);
    if (static_cast<int64_t>(v - target) >= 0) return;
    __nanosleep(nap);
    nap = nap < kMaxNapNs ? nap * 2 : kMaxNapNs;
    if (timeoutNs != 0 && globalTimerNs() - start > timeoutNs) {
      printf("ferry: waitValue64Spin gave up: word %p = %llu after %llu s, waiting for >= %llu\n",
             const_cast<const uint64_t*>(word), static_cast<unsigned long long>(v),
             static_cast<unsigned long long>(timeoutNs / 1000000000ull),
             static_cast<unsigned long long>(target));
      __trap();
    }
  }
}

}  // namespace

__global__ void ferryWaitGeqKernel(const volatile uint64_t* word, uint64_t target,
                                   uint64_t timeoutNs) {
  spinUntilGeq(word, target, timeoutNs);
}

__global__ void ferryWaitGroupKernel(WaitGroupArgs a) {
  if (a.hard != nullptr) spinUntilGeq(a.hard, a.hardTarget, a.timeoutNs);
  // The soft words: bounded, and short naps (every copy of the launch is
  // released by the last of them, so the GPUs' copies start together).
  const uint64_t softStart = globalTimerNs();
  for (;;) {
    int ready = 0;
    for (int i = 0; i < a.numSoft; ++i) {
      uint64_t v = loadAcquireSystem(a.soft[i]);
      ready += static_cast<int64_t>(v - a.softTarget[i]) >= 0 ? 1 : 0;
    }
    if (ready == a.numSoft || globalTimerNs() - softStart >= a.softNs) break;
    __nanosleep(128);
  }
  const uint64_t released = globalTimerNs();
  while (globalTimerNs() - released < a.staggerNs) __nanosleep(128);
}

}  // namespace ferry::device
