// ferry-spin-cost: why does a one-thread wait kernel cost a bf16 8192^3 GEMM
// beside it ~7.6% (bench/RESULTS.md, "floor": x1.076 with no traffic at all)
// when it needs one warp, no shared memory and almost no registers? One GPU.
// Hypothesis: an SM runs kernels of one shared-memory carveout at a time; a
// wait kernel launched with the default carveout claims its SM with a small
// shared-memory split, so none of the GEMM's large-shared-memory blocks fit
// there until it exits: the GEMM loses a whole SM (1 of 132) and its waves
// get longer. Asking for the maximum shared-memory carveout
// (cudaFuncAttributePreferredSharedMemoryCarveout = 100) would let the wait
// kernel share an SM with a GEMM block.
//
// Each line: a kernel launched beside the GEMM loop (spinning for the whole
// window), its registers and local memory, and the GEMM's slowdown (median of
// rounds, GEMM alone measured in the same rounds).
// Usage: ferry-spin-cost [iters-window-ms]
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>
#include <vector>

#include "cuda_check.h"
#include "ferry_bench/overlap.h"

namespace {

__device__ __forceinline__ unsigned long long nowNs() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

// The plain shape: one thread reading the timer.
__global__ void spinPlain(unsigned long long ns) {
  const unsigned long long start = nowNs();
  while (nowNs() - start < ns) {
  }
}

// Ferry's wait kernel's shape: acquire loads of a word, growing naps, and a
// printf on timeout (printf costs registers and a stack).
__global__ void spinLikeFerry(const volatile unsigned long long* word, unsigned long long ns) {
  unsigned nap = 32;
  const unsigned long long start = nowNs();
  for (;;) {
    unsigned long long v;
    asm volatile("ld.acquire.sys.u64 %0, [%1];" : "=l"(v) : "l"(word) : "memory");
    if (v != 0) return;
    __nanosleep(nap);
    nap = nap < 1024 ? nap * 2 : 1024;
    if (nowNs() - start > ns) {
      if (v == 12345) printf("never printed %llu\n", v);
      return;
    }
  }
}

struct Kind {
  std::string name;
  std::function<void(cudaStream_t, unsigned long long)> launch;
  const void* func;
};

}  // namespace

int main(int argc, char** argv) {
  double windowMs = argc > 1 ? atof(argv[1]) : 200.0;
  CHECK(cudaSetDevice(0));
  unsigned long long* word = nullptr;
  CHECK(cudaMalloc(&word, 64));
  CHECK(cudaMemset(word, 0, 64));
  using ferry::bench::Backend;
  const ferry::bench::Device gpu0{Backend::Cuda, 0, nullptr};
  ferry::bench::GemmLoop g;
  ferry::bench::Stream beside;
  std::string error;
  double aloneTflops = 0;
  if (!g.init(gpu0, 8192, &error) || !beside.create(gpu0, &error) ||
      !g.measureAlone(&aloneTflops, &error)) {
    fprintf(stderr, "ferry-spin-cost: %s\n", error.c_str());
    return 1;
  }
  printf("# GEMM 8192^3 bf16 alone: %.1f TFLOP/s; window %.0f ms\n", aloneTflops, windowMs);
  // Variants: the two kernel shapes, default carveout and max shared.
  auto plain = [](cudaStream_t s, unsigned long long ns) { spinPlain<<<1, 1, 0, s>>>(ns); };
  auto ferryLike = [word](cudaStream_t s, unsigned long long ns) {
    spinLikeFerry<<<1, 1, 0, s>>>(word, ns);
  };
  std::vector<Kind> kinds = {
      {"nothing", [](cudaStream_t, unsigned long long) {}, nullptr},
      {"plain spin, default carveout", plain, reinterpret_cast<const void*>(spinPlain)},
      {"ferry-like wait, default carveout", ferryLike,
       reinterpret_cast<const void*>(spinLikeFerry)},
      {"plain spin, max-shared carveout", plain, reinterpret_cast<const void*>(spinPlain)},
      {"ferry-like wait, max-shared carveout", ferryLike,
       reinterpret_cast<const void*>(spinLikeFerry)},
  };
  for (const Kind& k : kinds) {
    if (k.func == nullptr) continue;
    cudaFuncAttributes a{};
    CHECK(cudaFuncGetAttributes(&a, k.func));
    printf("# %-38s regs %d, local %zu B, shared %zu B\n", k.name.c_str(), a.numRegs,
           a.localSizeBytes, a.sharedSizeBytes);
  }
  const unsigned long long ns = static_cast<unsigned long long>(windowMs * 1e6);
  constexpr int kRounds = 5;
  std::vector<std::vector<double>> tflops(kinds.size());
  for (int r = 0; r < kRounds; ++r) {
    for (size_t k = 0; k < kinds.size(); ++k) {
      // The carveout is a per-function attribute: set it for this variant.
      if (kinds[k].func != nullptr) {
        const int carve = kinds[k].name.find("max-shared") != std::string::npos
                              ? cudaSharedmemCarveoutMaxShared
                              : cudaSharedmemCarveoutDefault;
        CHECK(cudaFuncSetAttribute(kinds[k].func, cudaFuncAttributePreferredSharedMemoryCarveout,
                                   carve));
      }
      ferry::bench::OverlapSample sample;
      auto launch = [&](std::string*) {
        kinds[k].launch(beside.get(), ns);  // GemmLoop's traffic stream
        return true;
      };
      if (!g.measureUnderTraffic(beside, 1, windowMs / 1e3, launch, &sample, &error)) {
        fprintf(stderr, "ferry-spin-cost: %s\n", error.c_str());
        return 1;
      }
      CHECK(cudaStreamSynchronize(beside.get()));
      tflops[k].push_back(sample.gemmTflopsUnder);
    }
  }
  auto median = [](std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
  };
  const double base = median(tflops[0]);
  printf("# %d rounds, medians; slowdown = GEMM alone / GEMM beside\n", kRounds);
  for (size_t k = 0; k < kinds.size(); ++k) {
    printf("%-40s %7.1f TFLOP/s  slowdown x%.3f\n", kinds[k].name.c_str(), median(tflops[k]),
           base / median(tflops[k]));
  }
  return 0;
}
