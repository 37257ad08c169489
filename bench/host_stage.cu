// ferry-host-stage: how fast do the staging copies of point-to-point across
// hosts run? A send is copied device -> pinned host memory in pieces, each
// followed by a stream write of a host word (enqueue/p2p_net.cc); a receive
// is copied host -> device. Sends measured 7-15 GB/s in proxy timelines
// (NOTES Open 7), far below what PCIe should give, so this times the same
// pattern alone, both directions at once, on one or both GPUs at once, and
// beside CPU threads copying host memory as loopback TCP does.
//
// Usage: ferry-host-stage [bytes] [piece] [iters] [cpu threads]
// Each line: the pattern, the GPUs driving it, and the rate per direction
// per GPU (host clock over iters, every stream joined at the end):
//   d2h / h2d / both   one direction, or both at once on two streams
//   +cpu               the same while the CPU threads memcpy 64 MiB buffers
#include <cuda.h>
#include <cuda_runtime.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "cuda_check.h"

namespace {

struct Gpu {
  int dev = 0;
  char* devBuf = nullptr;
  char* hostOut = nullptr;  // d2h target
  char* hostIn = nullptr;   // h2d source
  char* devIn = nullptr;
  uint64_t* word = nullptr;  // the "filled" word, pinned
  cudaStream_t d2h = nullptr, h2d = nullptr;
};

void setup(Gpu& g, int dev, size_t bytes) {
  g.dev = dev;
  CHECK(cudaSetDevice(dev));
  CHECK(cudaMalloc(&g.devBuf, bytes));
  CHECK(cudaMalloc(&g.devIn, bytes));
  CHECK(cudaMemset(g.devBuf, 1, bytes));
  const unsigned flags = cudaHostAllocMapped | cudaHostAllocPortable;
  CHECK(cudaHostAlloc(reinterpret_cast<void**>(&g.hostOut), bytes, flags));
  CHECK(cudaHostAlloc(reinterpret_cast<void**>(&g.hostIn), bytes, flags));
  CHECK(cudaHostAlloc(reinterpret_cast<void**>(&g.word), 64, flags));
  memset(g.hostIn, 2, bytes);
  CHECK(cudaStreamCreateWithFlags(&g.d2h, cudaStreamNonBlocking));
  CHECK(cudaStreamCreateWithFlags(&g.h2d, cudaStreamNonBlocking));
}

// Enqueues one message each way asked for, in pieces with a word write after each.
void enqueue(Gpu& g, size_t bytes, size_t piece, bool d2h, bool h2d, uint64_t* count) {
  for (size_t off = 0; off < bytes; off += piece) {
    const size_t len = std::min(piece, bytes - off);
    ++*count;
    if (d2h) {
      CHECK(cudaMemcpyAsync(g.hostOut + off, g.devBuf + off, len, cudaMemcpyDeviceToHost, g.d2h));
      CU_CHECK(cuStreamWriteValue64(g.d2h, reinterpret_cast<CUdeviceptr>(g.word), *count, 0));
    }
    if (h2d) {
      CHECK(cudaMemcpyAsync(g.devIn + off, g.hostIn + off, len, cudaMemcpyHostToDevice, g.h2d));
    }
  }
}

double run(std::vector<Gpu>& gpus, size_t bytes, size_t piece, int iters, bool d2h, bool h2d) {
  std::vector<std::thread> threads;
  std::atomic<int> ready{0};
  std::vector<double> secs(gpus.size());
  for (size_t i = 0; i < gpus.size(); ++i) {
    threads.emplace_back([&, i] {
      Gpu& g = gpus[i];
      CHECK(cudaSetDevice(g.dev));
      uint64_t count = 0;
      enqueue(g, bytes, piece, d2h, h2d, &count);  // warm-up
      CHECK(cudaDeviceSynchronize());
      ready.fetch_add(1);
      while (ready.load() < static_cast<int>(gpus.size())) std::this_thread::yield();
      auto t0 = std::chrono::steady_clock::now();
      for (int k = 0; k < iters; ++k) enqueue(g, bytes, piece, d2h, h2d, &count);
      CHECK(cudaDeviceSynchronize());
      secs[i] = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    });
  }
  for (auto& t : threads) t.join();
  double worst = 0;
  for (double s : secs) worst = std::max(worst, s);
  return static_cast<double>(bytes) * iters / worst / 1e9;
}

// CPU threads copying host memory (as loopback TCP's send and receive
// copies do) until told to stop.
struct CpuLoad {
  CpuLoad(int n, std::atomic<bool>* stop) {
    for (int i = 0; i < n; ++i) {
      threads.emplace_back([stop] {
        const size_t b = size_t{64} << 20;
        std::vector<char> a(b, 1), c(b, 2);
        while (!stop->load(std::memory_order_relaxed)) memcpy(c.data(), a.data(), b);
      });
    }
  }
  ~CpuLoad() {
    for (auto& t : threads) t.join();
  }
  std::vector<std::thread> threads;
};

}  // namespace

int main(int argc, char** argv) {
  const size_t bytes = argc > 1 ? strtoull(argv[1], nullptr, 0) : size_t{64} << 20;
  const size_t piece = argc > 2 ? strtoull(argv[2], nullptr, 0) : size_t{4} << 20;
  const int iters = argc > 3 ? atoi(argv[3]) : 10;
  const int cpu = argc > 4 ? atoi(argv[4]) : 8;
  CU_CHECK(cuInit(0));
  int n = 0;
  CHECK(cudaGetDeviceCount(&n));
  std::vector<Gpu> all(std::min(n, 2));
  for (size_t i = 0; i < all.size(); ++i) setup(all[i], static_cast<int>(i), bytes);
  printf("# %zu bytes in pieces of %zu, %d iterations, %d GPU(s); GB/s per direction per GPU\n",
         bytes, piece, iters, static_cast<int>(all.size()));
  for (int load = 0; load < 2; ++load) {
    std::atomic<bool> stop{false};
    std::unique_ptr<CpuLoad> l;
    if (load) l = std::make_unique<CpuLoad>(cpu, &stop);
    for (size_t gs = 1; gs <= all.size(); ++gs) {
      std::vector<Gpu> use(all.begin(), all.begin() + static_cast<long>(gs));
      const char* tag = load ? "+cpu" : "";
      printf("d2h%s  gpus %zu: %7.2f\n", tag, gs, run(use, bytes, piece, iters, true, false));
      printf("h2d%s  gpus %zu: %7.2f\n", tag, gs, run(use, bytes, piece, iters, false, true));
      printf("both%s gpus %zu: %7.2f\n", tag, gs, run(use, bytes, piece, iters, true, true));
    }
    stop.store(true);
  }
  return 0;
}
