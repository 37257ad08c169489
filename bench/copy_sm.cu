// ferry-copy-sm: which copies the driver runs on SMs rather than on a copy
// engine. A kernel first takes every thread slot of every SM of GPU 0 and
// spins until the host releases it; each kind of copy is then issued on
// another stream. A copy that completes while every SM is held ran on a
// copy engine; one that completes only after the release needed SMs (a
// copy kernel the driver launched for it). A tiny kernel is the control
// that must wait. Each kind's bandwidth alone and the CPU time of its
// call are printed beside it.
//
// Why: a GEMM beside an all-to-all lost x1.03-1.06 to the all-to-all's
// local block as one plain copy and ~x1.00 to the same bytes as strided
// rows (ferry-overlap-floor, NOTES.md trap 71).
//
// With two GPUs both are held, and three more kinds ask whether a copy
// within GPU 0 can run on GPU 1's copy engine over NVLink (zero SMs on
// either GPU: the all-to-all's own block then would cost the compute beside
// it nothing; session 38 measured that block starving beside a GEMM loop).
//
// Usage: ferry-copy-sm [bytes]   (one process; GPU 1 too when present)
#include <cuda.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <thread>
#include <vector>

#include "cuda_check.h"

namespace {

// Holds its SM slot until *release is set by the host, or for at most
// `limitNs` (a lost release must not hang the probe). *arrived counts the
// blocks resident, so the host knows every slot is taken. Only thread 0 of
// each block reads the host word, once a microsecond: a quarter million
// threads polling pinned memory over PCIe would slow the copy engines
// themselves (the first version of this probe did: a 16 MiB device-to-host
// copy took 169 ms).
__global__ void holdSms(volatile int* release, int* arrived, unsigned long long limitNs) {
  __shared__ volatile int stop;
  if (threadIdx.x == 0) {
    stop = 0;
    atomicAdd(arrived, 1);
  }
  __syncthreads();
  unsigned long long start, now;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(start));
  while (stop == 0) {
    if (threadIdx.x != 0) continue;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
    if (*release != 0 || now - start >= limitNs) stop = 1;
    __nanosleep(1000);
  }
}

__global__ void tinyKernel(int* out) {
  *out = 1;
}

double elapsedMs(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

int main(int argc, char** argv) {
  const size_t bytes = argc > 1 ? strtoull(argv[1], nullptr, 0) : (64u << 20);
  int devices = 0;
  CHECK(cudaGetDeviceCount(&devices));
  if (devices < 1) {
    printf("ferry-copy-sm needs a GPU: skipped\n");
    return 77;
  }
  CHECK(cudaSetDevice(0));
  const bool peer = devices > 1;
  if (peer) CHECK(cudaDeviceEnablePeerAccess(1, 0));
  char *src, *dst, *peerDst = nullptr, *host;
  int *release, *arrived, *scratch;  // arrived[d]: blocks resident on GPU d
  CHECK(cudaMalloc(&src, bytes));
  CHECK(cudaMalloc(&dst, bytes));
  CHECK(cudaMalloc(&scratch, sizeof(int)));
  CHECK(cudaMemset(src, 7, bytes));
  CHECK(cudaHostAlloc(&host, bytes, cudaHostAllocDefault));
  // Portable: both GPUs' holder kernels read and count in these words.
  CHECK(cudaHostAlloc(&release, sizeof(int), cudaHostAllocMapped | cudaHostAllocPortable));
  CHECK(cudaHostAlloc(&arrived, 2 * sizeof(int), cudaHostAllocMapped | cudaHostAllocPortable));
  cudaStream_t holder[2] = {}, s, s1 = nullptr;
  cudaEvent_t onS = nullptr, onS1 = nullptr;  // joins between s and s1
  if (peer) {
    CHECK(cudaSetDevice(1));
    CHECK(cudaDeviceEnablePeerAccess(0, 0));
    CHECK(cudaMalloc(&peerDst, bytes));
    CHECK(cudaStreamCreateWithFlags(&holder[1], cudaStreamNonBlocking));
    CHECK(cudaStreamCreateWithFlags(&s1, cudaStreamNonBlocking));
    CHECK(cudaEventCreateWithFlags(&onS1, cudaEventDisableTiming));
    CHECK(cudaSetDevice(0));
    CHECK(cudaEventCreateWithFlags(&onS, cudaEventDisableTiming));
  }
  CHECK(cudaStreamCreateWithFlags(&holder[0], cudaStreamNonBlocking));
  CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  int sms = 0, perSm = 0;
  constexpr int kThreads = 1024;
  CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&perSm, holdSms, kThreads, 0));

  // Batch copies (CUDA 12.8+): one copy with the given cudaMemcpyFlags.
  auto batch = [&](void* d, const void* from, unsigned flags) {
    cudaMemcpyAttributes attr{};
    attr.srcAccessOrder = cudaMemcpySrcAccessOrderStream;
    attr.flags = flags;
    void* dsts[1] = {d};
    const void* srcs[1] = {from};
    size_t sizes[1] = {bytes}, idx[1] = {0};
    return cudaMemcpyBatchAsync(dsts, srcs, sizes, 1, &attr, idx, 1, s);
  };
  struct Kind {
    const char* name;
    size_t moved;  // bytes for the bandwidth column
    std::function<cudaError_t()> issue;
  };
  const size_t row = 4096, rows = bytes / (2 * row);
  std::vector<Kind> kinds = {
      {"control: a tiny kernel", 0,
       [&] {
         tinyKernel<<<1, 1, 0, s>>>(scratch);
         return cudaGetLastError();
       }},
      {"cudaMemcpyAsync device to device", bytes,
       [&] { return cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, s); }},
      {"cuMemcpyDtoDAsync", bytes,
       [&] {
         return static_cast<cudaError_t>(cuMemcpyDtoDAsync(
             reinterpret_cast<CUdeviceptr>(dst), reinterpret_cast<CUdeviceptr>(src), bytes, s));
       }},
      {"cudaMemcpy2DAsync, 4 KiB rows, even ones", rows * row,
       [&] {
         return cudaMemcpy2DAsync(dst, 2 * row, src, 2 * row, row, rows, cudaMemcpyDeviceToDevice,
                                  s);
       }},
      {"cudaMemcpy2DAsync, 256 B rows, even ones", std::min<size_t>(65535, bytes / 512) * 256,
       [&] {
         return cudaMemcpy2DAsync(dst, 512, src, 512, 256, std::min<size_t>(65535, bytes / 512),
                                  cudaMemcpyDeviceToDevice, s);
       }},
      {"cudaMemcpyBatchAsync, default flags", bytes, [&] { return batch(dst, src, 0); }},
      {"cudaMemcpyBatchAsync, PreferOverlapWithCompute", bytes,
       [&] { return batch(dst, src, cudaMemcpyFlagPreferOverlapWithCompute); }},
      {"cudaMemsetAsync device", bytes, [&] { return cudaMemsetAsync(dst, 3, bytes, s); }},
      {"cudaMemcpyAsync device to pinned host", bytes,
       [&] { return cudaMemcpyAsync(host, src, bytes, cudaMemcpyDeviceToHost, s); }},
  };
  // Work on GPU 1's stream s1, ordered after s's work and before what s
  // queues next (so the timing events on s bracket it).
  auto onPeer = [&](const std::function<cudaError_t()>& issue) {
    cudaError_t e = cudaEventRecord(onS, s);
    if (e == cudaSuccess) e = cudaSetDevice(1);
    if (e == cudaSuccess) e = cudaStreamWaitEvent(s1, onS, 0);
    if (e == cudaSuccess) e = issue();
    if (e == cudaSuccess) e = cudaEventRecord(onS1, s1);
    const cudaError_t back = cudaSetDevice(0);
    if (e == cudaSuccess) e = back;
    if (e == cudaSuccess) e = cudaStreamWaitEvent(s, onS1, 0);
    return e;
  };
  if (peer) {
    kinds.push_back(
        {"GPU 0 to GPU 0 on a GPU 1 stream, cudaMemcpyPeerAsync", bytes,
         [&] { return onPeer([&] { return cudaMemcpyPeerAsync(dst, 0, src, 0, bytes, s1); }); }});
    kinds.push_back({"GPU 0 to GPU 0 on a GPU 1 stream, cudaMemcpyAsync", bytes, [&] {
                       return onPeer(
                           [&] { return cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, s1); });
                     }});
    kinds.push_back({"GPU 0 to GPU 0 through GPU 1: two peer copies", bytes, [&] {
                       const cudaError_t e = cudaMemcpyPeerAsync(peerDst, 1, src, 0, bytes, s);
                       if (e != cudaSuccess) return e;
                       return onPeer(
                           [&] { return cudaMemcpyPeerAsync(dst, 0, peerDst, 1, bytes, s1); });
                     }});
    kinds.push_back({"cudaMemcpyPeerAsync to GPU 1", bytes,
                     [&] { return cudaMemcpyPeerAsync(peerDst, 1, src, 0, bytes, s); }});
    kinds.push_back({"cudaMemcpyBatchAsync to GPU 1, PreferOverlapWithCompute", bytes,
                     [&] { return batch(peerDst, src, cudaMemcpyFlagPreferOverlapWithCompute); }});
  }
  printf("# %zu B; GPU 0%s held by %d blocks x %d threads each (%d SMs x %d)\n", bytes,
         peer ? " and GPU 1" : "", sms * perSm, kThreads, sms, perSm);
  printf("# %-56s %-10s %10s %9s %9s\n", "copy", "runs on", "done at ms", "GB/s alone", "CPU us");
  cudaEvent_t e0, e1;
  CHECK(cudaEventCreate(&e0));
  CHECK(cudaEventCreate(&e1));
  constexpr double kHoldMs = 300;
  for (const Kind& k : kinds) {
    // Bandwidth alone (after one warm-up issue).
    cudaError_t err = k.issue();
    if (err != cudaSuccess) {
      printf("  %-56s refused: %s\n", k.name, cudaGetErrorString(err));
      (void)cudaGetLastError();
      continue;
    }
    CHECK(cudaStreamSynchronize(s));
    CHECK(cudaEventRecord(e0, s));
    CHECK(k.issue());
    CHECK(cudaEventRecord(e1, s));
    CHECK(cudaEventSynchronize(e1));
    float ms = 0;
    CHECK(cudaEventElapsedTime(&ms, e0, e1));
    // The call's own CPU time: the median of kCalls issued back to back
    // (an SM-free launch is CPU-bound in torch: what each kind of copy adds
    // to it).
    constexpr int kCalls = 9;
    std::vector<double> cpuUs;
    for (int c = 0; c < kCalls; ++c) {
      const auto c0 = std::chrono::steady_clock::now();
      CHECK(k.issue());
      cpuUs.push_back(elapsedMs(c0) * 1e3);
    }
    CHECK(cudaStreamSynchronize(s));
    std::sort(cpuUs.begin(), cpuUs.end());
    // Beside a kernel that holds every SM.
    // (Both GPUs are alike here: GPU 1 gets as many blocks as GPU 0.)
    *release = 0;
    const int heldGpus = peer ? 2 : 1;
    for (int d = 0; d < heldGpus; ++d) {
      arrived[d] = 0;
      CHECK(cudaSetDevice(d));
      holdSms<<<sms * perSm, kThreads, 0, holder[d]>>>(release, arrived + d, 5000000000ull);
      CHECK(cudaGetLastError());
    }
    CHECK(cudaSetDevice(0));
    const auto t0 = std::chrono::steady_clock::now();
    const auto allHeld = [&] {
      for (int d = 0; d < heldGpus; ++d) {
        if (__atomic_load_n(arrived + d, __ATOMIC_ACQUIRE) < sms * perSm) return false;
      }
      return true;
    };
    while (!allHeld() && elapsedMs(t0) < 2000) {
      std::this_thread::yield();
    }
    const bool held = allHeld();
    const auto t1 = std::chrono::steady_clock::now();
    CHECK(k.issue());
    CHECK(cudaEventRecord(e1, s));
    double doneMs = -1;
    while (elapsedMs(t1) < kHoldMs) {
      if (cudaEventQuery(e1) == cudaSuccess) {
        doneMs = elapsedMs(t1);
        break;
      }
    }
    // release: a plain store; the kernel's volatile loads see it eventually
    // (mapped pinned memory, no ordering with anything else needed).
    *release = 1;
    for (int d = heldGpus - 1; d >= 0; --d) {
      CHECK(cudaSetDevice(d));
      CHECK(cudaDeviceSynchronize());
    }
    if (doneMs < 0) doneMs = elapsedMs(t1);
    const char* where = !held ? "(not held)" : doneMs < kHoldMs ? "copy engine" : "SMs";
    printf("  %-56s %-10s %10.2f %9.1f %9.1f\n", k.name, where, doneMs, k.moved / (ms / 1e3) / 1e9,
           cpuUs[kCalls / 2]);
  }
  return 0;
}
