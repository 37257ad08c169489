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

}  // namespace

__global__ void ferryWaitGeqKernel(const volatile uint64_t* word, uint64_t target,
                                   uint64_t timeoutNs) {
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

}  // namespace ferry::device
