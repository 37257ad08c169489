// ferry-overlap-floor: what a bf16 GEMM on GPU 0 loses to traffic that takes
// no SMs at all, measured with the same method as ferry-bench --overlap
// (GEMMs enqueued back to back, the traffic launched beside them, GEMM time
// from events around the whole batch). It separates the cost of the copy
// engines themselves (HBM, NVLink, power) from what a communication library
// adds on top (SMs for kernels, one-thread wait kernels, staging copies).
//
// Usage: ferry-overlap-floor [bytes] [iters]   (one process, two GPUs)
// Each line: the traffic kind, the GEMM's TFLOP/s alone and beside it, and
// the slowdown (alone / beside).
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <vector>

namespace {

#define CHECK(call)                                                                         \
  do {                                                                                      \
    cudaError_t e_ = (call);                                                                \
    if (e_ != cudaSuccess) {                                                                \
      fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #call, cudaGetErrorString(e_)); \
      exit(1);                                                                              \
    }                                                                                       \
  } while (0)

// Spins one thread for `ns` nanoseconds of the global timer: the shape of a
// one-thread wait kernel, without any flag.
__global__ void spinFor(unsigned long long ns) {
  unsigned long long start, now;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(start));
  do {
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
  } while (now - start < ns);
}

struct Gemm {
  int n = 8192;
  void *a = nullptr, *b = nullptr, *c = nullptr;
  cublasHandle_t handle = nullptr;
  cudaStream_t stream = nullptr;
  void init() {
    size_t bytes = size_t(n) * n * 2;
    CHECK(cudaMalloc(&a, bytes));
    CHECK(cudaMalloc(&b, bytes));
    CHECK(cudaMalloc(&c, bytes));
    std::vector<uint16_t> host(size_t(n) * n);
    uint64_t x = 0x9e3779b97f4a7c15ull;
    for (uint16_t& h : host) {  // random bf16 in (-1, 1)
      x ^= x << 13, x ^= x >> 7, x ^= x << 17;
      h = static_cast<uint16_t>(((x >> 20) & 0x8000) | ((119 + (x >> 8) % 8) << 7) | (x & 0x7f));
    }
    CHECK(cudaMemcpy(a, host.data(), bytes, cudaMemcpyHostToDevice));
    CHECK(cudaMemcpy(b, host.data(), bytes, cudaMemcpyHostToDevice));
    CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    if (cublasCreate(&handle) != CUBLAS_STATUS_SUCCESS) exit(1);
    cublasSetStream(handle, stream);
  }
  void enqueue(int count) {
    const float alpha = 1, beta = 0;
    for (int i = 0; i < count; ++i) {
      cublasGemmEx(handle, CUBLAS_OP_N, CUBLAS_OP_N, n, n, n, &alpha, a, CUDA_R_16BF, n, b,
                   CUDA_R_16BF, n, &beta, c, CUDA_R_16BF, n, CUBLAS_COMPUTE_32F,
                   CUBLAS_GEMM_DEFAULT);
    }
  }
  // Seconds per GEMM over `count` back-to-back GEMMs, with `beside` enqueued
  // after them (on other streams) before the host waits.
  template <typename F>
  double timeBatch(int count, F beside) {
    cudaEvent_t s, e;
    CHECK(cudaEventCreate(&s));
    CHECK(cudaEventCreate(&e));
    CHECK(cudaEventRecord(s, stream));
    enqueue(count);
    CHECK(cudaEventRecord(e, stream));
    beside();
    CHECK(cudaDeviceSynchronize());
    float ms = 0;
    CHECK(cudaEventElapsedTime(&ms, s, e));
    CHECK(cudaEventDestroy(s));
    CHECK(cudaEventDestroy(e));
    return ms / 1e3 / count;
  }
  double tflops(double sec) const { return 2.0 * n * double(n) * n / sec / 1e12; }
};

}  // namespace

int main(int argc, char** argv) {
  size_t bytes = argc > 1 ? strtoull(argv[1], nullptr, 0) : (256u << 20);
  int iters = argc > 2 ? atoi(argv[2]) : 20;
  int devices = 0;
  CHECK(cudaGetDeviceCount(&devices));
  if (devices < 2) {
    printf("ferry-overlap-floor needs 2 GPUs (found %d): skipped\n", devices);
    return 77;
  }
  void* buf[2][2];  // [device][src, dst]
  cudaStream_t copy[2], local;
  for (int d = 0; d < 2; ++d) {
    CHECK(cudaSetDevice(d));
    CHECK(cudaDeviceEnablePeerAccess(1 - d, 0));
    CHECK(cudaMalloc(&buf[d][0], bytes));
    CHECK(cudaMalloc(&buf[d][1], bytes));
    CHECK(cudaMemset(buf[d][0], d + 1, bytes));
    CHECK(cudaStreamCreateWithFlags(&copy[d], cudaStreamNonBlocking));
  }
  CHECK(cudaSetDevice(0));
  CHECK(cudaStreamCreateWithFlags(&local, cudaStreamNonBlocking));
  Gemm g;
  g.init();
  g.timeBatch(3, [] {});
  double alone = g.timeBatch(10, [] {});
  // Bidirectional copy-engine traffic, timed alone to size the GEMM batch.
  auto traffic = [&] {
    for (int i = 0; i < iters; ++i) {
      for (int d = 0; d < 2; ++d) {
        CHECK(cudaSetDevice(d));
        CHECK(cudaMemcpyPeerAsync(buf[1 - d][1], 1 - d, buf[d][0], d, bytes, copy[d]));
      }
    }
    CHECK(cudaSetDevice(0));
  };
  cudaEvent_t t0, t1;
  CHECK(cudaEventCreate(&t0));
  CHECK(cudaEventCreate(&t1));
  CHECK(cudaEventRecord(t0, copy[0]));
  traffic();
  CHECK(cudaEventRecord(t1, copy[0]));
  CHECK(cudaDeviceSynchronize());
  float trafficMs = 0;
  CHECK(cudaEventElapsedTime(&trafficMs, t0, t1));
  int cover = std::max(1, static_cast<int>(std::ceil(trafficMs / 1e3 / alone)));
  printf(
      "# %zu B x %d each way: %.1f GB/s per direction alone; GEMM %d^3 bf16 %.1f TFLOP/s alone\n",
      bytes, iters, bytes * double(iters) / (trafficMs / 1e3) / 1e9, g.n, g.tflops(alone));
  unsigned long long window = static_cast<unsigned long long>(trafficMs * 1e6);
  struct Kind {
    const char* name;
    std::function<void()> launch;
  };
  std::vector<Kind> kinds = {
      {"nothing", [] {}},
      {"copy engines, both directions", traffic},
      {"one-thread spin kernel", [&] { spinFor<<<1, 1, 0, local>>>(window); }},
      {"copy engines + spin kernel",
       [&] {
         spinFor<<<1, 1, 0, local>>>(window);
         traffic();
       }},
      {"copy engines + local staging copy",
       [&] {
         for (int i = 0; i < iters; ++i) {
           CHECK(cudaMemcpyAsync(buf[0][1], buf[0][0], bytes, cudaMemcpyDeviceToDevice, local));
         }
         traffic();
       }},
  };
  // Rounds over every kind in turn, so clock and temperature drift hits all
  // kinds alike; each kind's median is compared with the median of "nothing"
  // (the GEMM alone, measured the same way in the same rounds).
  constexpr int kRounds = 5;
  std::vector<std::vector<double>> sec(kinds.size());
  for (int r = 0; r < kRounds; ++r) {
    for (size_t k = 0; k < kinds.size(); ++k) sec[k].push_back(g.timeBatch(cover, kinds[k].launch));
  }
  auto median = [](std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
  };
  const double base = median(sec[0]);
  printf(
      "# %d rounds, medians; slowdown = time beside / time of the GEMM alone in the same rounds\n",
      kRounds);
  printf("# %-34s %10s %10s %9s\n", "beside the GEMM", "alone", "beside", "slowdown");
  for (size_t k = 0; k < kinds.size(); ++k) {
    const double m = median(sec[k]);
    printf("  %-34s %10.1f %10.1f %9.3f\n", kinds[k].name, g.tflops(base), g.tflops(m), m / base);
  }
  return 0;
}
